//! `relay sandbox <template>`: start a sandboxed terminal of that template for the
//! project holding the current directory, and attach this terminal to it — raw mode,
//! window size, the tool's exit status ([`crate::cli::attach`]). Closing this terminal
//! (SIGHUP) ends the session; the detach keys leave it running and print how to attach
//! again. With `--json` the session's output goes to stderr and stdout gets one line
//! at the end. The session's output reaches this terminal through
//! [`crate::cli::termout::Filter`]: its screen works, sequences that act outside it are
//! dropped ([cli.md](../../../docs/cli.md#what-a-session-prints-on-your-terminal)).
//!
//! `relay sandbox explain <template>` prints the sandbox such a terminal gets, from the
//! daemon's launch path, launching nothing (docs/cli.md#relay-sandbox-explain).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::{json, Value};

use crate::cli::args::{Json, SandboxVerb};
use crate::cli::attach::{self, exit_code, exit_line, Attach, End};
use crate::cli::client::Client;
use crate::cli::{emit, fail, print, Out};
use crate::daemon::settings::DetachKeys;
use crate::sandbox::explain::{self as explained, Explanation};

pub struct Options<'a> {
    pub template: &'a str,
    pub args: &'a [String],
    pub detach_keys: Option<&'a str>,
    pub json_out: bool,
    /// `--config-dir` as given, for the attach-again line.
    pub config_flag: Option<&'a PathBuf>,
}

/// The tool's exit status as this command's, and with `--json` the one line. A run
/// that reached a limit of its sandbox says which on stderr (docs/settings.md#limits).
fn finished(id: &str, result: &Value, json_out: bool) -> ExitCode {
    if let Some(limit) = result.get("limit_reached").and_then(Value::as_str) {
        eprintln!(
            "relay: {id} ended: {}",
            crate::cli::termout::visible(limit.as_bytes())
        );
    }
    if let Some(note) = token_note(id, result) {
        eprint!("{note}");
    }
    let code = ExitCode::from(exit_code(result));
    if json_out {
        let line = exit_line(id, result);
        return emit(format!("{line}\n").as_bytes(), code);
    }
    code
}

/// What `relay sandbox` says of a run relay ended for a token change: why, and that its
/// conversation is kept for one command that continues it on the new token.
fn token_note(id: &str, result: &Value) -> Option<String> {
    let reason = result.get("exit_reason").and_then(Value::as_str)?;
    if !attach::keeps_conversation(reason) || result.get("kept") != Some(&Value::Bool(true)) {
        return None;
    }
    let what = match reason {
        "claude_token_removed" => "its Claude token was removed",
        _ => "its Claude token was replaced",
    };
    Some(format!(
        "\r\nrelay: {id} ended: {what} ({reason}). Its conversation is kept: \
         relay terminal resume --id {id} continues it on the token as it is now.\n"
    ))
}

/// What `relay sandbox` says in place of Claude Code's resume hint (`claude --resume`
/// would start Claude outside the sandbox): a `claude-code` run is kept with its
/// conversation, and the command that continues it there is named; a run of another
/// template (a tool that printed such lines) goes as every run does, and says so.
pub fn resume_note(id: &str, claude_run: bool) -> String {
    if claude_run {
        return format!(
            "relay: this run's conversation is kept ({id}): relay terminal resume --id {id} \
             continues it in its sandbox; relay terminal purge --id {id} removes it.\n"
        );
    }
    format!(
        "relay: Claude Code's resume hint is left out: this run ({id}) goes with its sandbox, \
         and `claude --resume` would start Claude outside it; relay sandbox claude-code keeps \
         a conversation for relay terminal resume.\n"
    )
}

pub fn run(config: &Path, o: Options) -> ExitCode {
    let client = Client::new(config);
    let keys = match attach::detach_keys(config, o.detach_keys) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    // From here a SIGTERM or SIGHUP ends the session it starts, however early it comes.
    attach::block_signals();
    let id = match start(&client, &o) {
        Ok(id) => id,
        Err(e) => return fail(e),
    };
    attached(&client, &id, &keys, &o)
}

/// `relay terminal resume --id ID`: a `relay sandbox claude-code` run kept with its
/// conversation, launched again in its sandbox on the token as it is now, and attached
/// as `relay sandbox` is (docs/cli.md#relay-sandbox).
pub fn resume(config: &Path, id: &str, o: Options) -> ExitCode {
    let client = Client::new(config);
    let keys = match attach::detach_keys(config, o.detach_keys) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    attach::block_signals();
    let size = attach::terminal_size();
    let body = crate::wire::TerminalResume {
        cols: size.map(|s| s.0),
        rows: size.map(|s| s.1),
        hold_output: true,
    };
    let resumed = match client.send("POST", &format!("/api/terminals/{id}/resume"), &body) {
        Ok(a) if a.status == 201 => {
            a.typed::<crate::wire::Session>("POST /api/terminals/{id}/resume")
        }
        Ok(a) => Err(a.error_text()),
        Err(e) => Err(e),
    };
    match resumed {
        Ok(s) => attached(&client, &s.id, &keys, &o),
        Err(e) => fail(e),
    }
}

/// Whether the run is a Claude Code terminal, whose conversation is kept.
fn claude_run(o: &Options) -> bool {
    o.template == crate::protocol::CLAUDE_CODE_TEMPLATE
}

/// This terminal attached to the run `id` until it ends, is detached or signalled; then
/// purged unless it keeps a conversation.
fn attached(client: &Client, id: &str, keys: &DetachKeys, o: &Options) -> ExitCode {
    let hint_dropped = std::cell::Cell::new(false);
    let end = Attach {
        client,
        id,
        keys,
        to_stderr: o.json_out,
        lossless: true,
        // The run is printed: the terminal has nothing more to give, so it goes (its
        // record, logs and temp folder; docs/cli.md#relay-sandbox). The daemon purges
        // it once this attach is over, so this command does not wait for that.
        forget: true,
        // Claude Code's `claude --resume` hint cannot work here: it goes, and what
        // can is said instead.
        resume_hint: Some(&hint_dropped),
        claude_run: claude_run(o),
        // `relay sandbox shell < script` ends as `bash < script` does.
        end_input: true,
    }
    .run();
    let token_ended = matches!(&end, Ok(End::Exited(r)) if token_note(id, r).is_some());
    if hint_dropped.get() && !token_ended {
        eprint!("{}", resume_note(id, claude_run(o)));
    }
    ended(client, id, end, o)
}

/// Starts the terminal in the current folder at this terminal's size: its id.
fn start(client: &Client, o: &Options) -> Result<String, String> {
    let cwd = crate::cli::current_folder()?;
    // The folder travels in JSON: a name that is not UTF-8 is refused, never sent
    // mangled.
    let Some(cwd_text) = cwd.to_str() else {
        return Err(crate::cli::folder_not_utf8(
            &cwd,
            "run relay sandbox from a folder whose name is UTF-8",
        ));
    };
    let size = attach::terminal_size();
    let body = crate::wire::TerminalStart {
        template: Some(o.template.to_string()),
        directory: Some(cwd_text.to_string()),
        project_from_directory: true,
        extra_args: o.args.to_vec(),
        cols: size.map(|s| s.0),
        rows: size.map(|s| s.1),
        // Nothing is read before this attach, and the attach is lossless: the whole run
        // reaches this terminal (docs/routes.md#attaching-to-a-terminal).
        hold_output: true,
        ..Default::default()
    };
    match client.send("POST", "/api/terminals", &body)? {
        a if a.status == 201 => a
            .typed::<crate::wire::Session>("POST /api/terminals")
            .map(|s| s.id),
        a => Err(a.error_text()),
    }
}

/// How the command ends, as the attach did.
fn ended(client: &Client, id: &str, end: Result<End, String>, o: &Options) -> ExitCode {
    match end {
        Err(e) => fail(e),
        Ok(End::Exited(result)) => finished(id, &result, o.json_out),
        Ok(End::Gone(entry)) => finished(id, &entry, o.json_out),
        Ok(End::Detached) => {
            eprint!("{}", attach::detached_note(id, o.config_flag));
            if o.json_out {
                let line = json!({"id": id, "detached": true});
                return emit(format!("{line}\n").as_bytes(), ExitCode::SUCCESS);
            }
            ExitCode::SUCCESS
        }
        Ok(End::Signal(sig)) => {
            // The terminal is gone (or we were told to stop): end the session, and
            // purge it as a run that ended by itself is (DELETE answers once the exit
            // is recorded; one that outlasts it is kept, said on stderr).
            let _ = client.call("DELETE", &format!("/api/terminals/{id}"));
            attach::purge(client, id);
            ExitCode::from((128 + sig).clamp(0, 255) as u8)
        }
    }
}

/// `relay sandbox explain` and `relay sandbox why`.
pub fn verb(c: &Client, v: SandboxVerb) -> ExitCode {
    match v {
        SandboxVerb::Explain {
            template,
            directory,
            backend,
            json: Json { json },
        } => {
            let asked = here()
                .map(|here| explain_path(&template, &folder(here, directory), backend.as_deref()));
            let answer = asked.and_then(|path| c.call_as::<Explanation>("GET", &path));
            print(
                json,
                answer.map(|(e, v)| Out::new(v, explained::to_text(&e))),
            )
        }
        SandboxVerb::Why {
            what,
            template,
            directory,
            id,
            json: Json { json },
        } => print(json, why(c, &what, &template, directory, id.as_deref())),
    }
}

fn here() -> Result<PathBuf, String> {
    crate::cli::current_folder()
}

/// `relay sandbox why`: `what` asked of the sandbox of a terminal of `template` in
/// `directory`, or of the running session `id` (`GET /api/{terminals,sessions}/{id}/sandbox`).
fn why(
    c: &Client,
    what: &str,
    template: &str,
    directory: Option<String>,
    id: Option<&str>,
) -> Result<Out, String> {
    let here = here()?;
    let path = match id {
        Some(id) if id.starts_with("t-") => format!("/api/terminals/{}/sandbox", enc(id)),
        Some(id) => format!("/api/sessions/{}/sandbox", enc(id)),
        None => explain_path(template, &folder(here.clone(), directory), None),
    };
    let (e, _) = c.call_as::<Explanation>("GET", &path)?;
    let answer = match asked_path(&here, what) {
        Some(p) => crate::sandbox::why::path(&e, &p),
        None => {
            let (host, port) = crate::sandbox::why::parse_host(what)
                .ok_or_else(|| format!("{what:?} is neither a path nor a host[:port]"))?;
            crate::sandbox::why::host(&e, &host, port)
        }
    };
    let v = serde_json::to_value(&answer).map_err(|e| e.to_string())?;
    Ok(Out::new(v, crate::sandbox::why::to_text(&answer)))
}

/// `what` as the kernel would see the path, when it names one: absolute, `~/…`, or
/// relative to `here` (with a `/`, a leading `.`, or an existing name). The deepest
/// part that exists is resolved (links followed, as the kernel does), the rest kept.
fn asked_path(here: &Path, what: &str) -> Option<PathBuf> {
    let p = if what == "~" || what.starts_with("~/") {
        let home = std::env::var_os("HOME").map(PathBuf::from)?;
        home.join(what.trim_start_matches('~').trim_start_matches('/'))
    } else if what.starts_with('/') {
        PathBuf::from(what)
    } else if what.contains('/') || what.starts_with('.') || here.join(what).exists() {
        here.join(what)
    } else {
        return None;
    };
    let mut rest = Vec::new();
    let mut at = p.as_path();
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            return Some(rest.iter().rev().fold(real, |acc, n| acc.join(n)));
        }
        rest.push(at.file_name()?.to_os_string());
        at = at.parent()?;
    }
}

/// The folder to explain: `~` is the daemon's to expand; a relative folder is taken
/// from `here`.
fn folder(here: PathBuf, directory: Option<String>) -> PathBuf {
    match directory {
        None => here,
        Some(d) if d == "~" || d.starts_with("~/") || d.starts_with('/') => PathBuf::from(d),
        Some(d) => here.join(d),
    }
}

fn enc(s: &str) -> String {
    crate::http::encode_component(s)
}

fn explain_path(template: &str, dir: &Path, backend: Option<&str>) -> String {
    let mut path = format!(
        "/api/sandbox/explain?template={}&directory={}",
        enc(template),
        enc(&dir.to_string_lossy())
    );
    if let Some(b) = backend {
        path.push_str(&format!("&backend={}", enc(b)));
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn why_takes_a_path_as_the_kernel_would_and_anything_else_as_a_host() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(real.join("d")).unwrap();
        std::fs::write(real.join("file"), "").unwrap();
        std::os::unix::fs::symlink(real.join("d"), real.join("link")).unwrap();
        let here = dir.path();
        // The part that exists resolved, links followed; the rest kept.
        assert_eq!(asked_path(here, "link/x/y"), Some(real.join("d/x/y")));
        assert_eq!(asked_path(here, "./new"), Some(real.join("new")));
        assert_eq!(asked_path(here, "file"), Some(real.join("file")));
        assert_eq!(asked_path(here, "/"), Some(PathBuf::from("/")));
        // No slash, no dot in front, nothing there: a host.
        assert_eq!(asked_path(here, "example.com"), None);
        assert_eq!(asked_path(here, "example.com:80"), None);
    }

    #[test]
    fn the_resume_note_names_the_run_and_the_commands_that_resume_and_purge_it() {
        let note = resume_note("t-1", true);
        assert!(note.starts_with("relay: this run's conversation is kept (t-1)"));
        assert!(note.contains("relay terminal resume --id t-1 continues it"));
        assert!(note.contains("relay terminal purge --id t-1 removes it"));
        assert!(note.ends_with(".\n") && note.lines().count() == 1, "{note}");
        // Another template's run goes: nothing to resume is named for it.
        let other = resume_note("t-1", false);
        assert!(
            other.starts_with("relay: Claude Code's resume hint is left out: this run (t-1) goes")
        );
        assert!(!other.contains("--id t-1"), "{other}");
        assert!(
            other.ends_with(".\n") && other.lines().count() == 1,
            "{other}"
        );
    }

    #[test]
    fn a_run_relay_ended_for_a_token_change_says_why_and_how_to_resume_it() {
        let kept = |reason: &str| json!({"exit_status": null, "signal": 15, "exit_reason": reason, "kept": true});
        let replaced = token_note("t-1", &kept("claude_token_replaced")).unwrap();
        assert!(replaced
            .contains("relay: t-1 ended: its Claude token was replaced (claude_token_replaced)"));
        assert!(
            replaced.contains("relay terminal resume --id t-1"),
            "{replaced}"
        );
        let removed = token_note("t-1", &kept("claude_token_removed")).unwrap();
        assert!(
            removed.contains("its Claude token was removed"),
            "{removed}"
        );
        // Not kept, or ended otherwise: nothing of the kind said.
        let mut purged = kept("claude_token_replaced");
        purged["kept"] = json!(false);
        assert_eq!(token_note("t-1", &purged), None);
        assert_eq!(token_note("t-1", &kept("exited")), None);
        assert_eq!(token_note("t-1", &json!({"exit_status": 0})), None);
    }

    /// `~` goes to the daemon as typed, a relative folder is taken from here, and
    /// every value is encoded in the query.
    #[test]
    fn explain_asks_for_the_folder_meant_with_every_value_encoded() {
        let here = PathBuf::from("/home/ada/p");
        assert_eq!(folder(here.clone(), None), here);
        assert_eq!(
            folder(here.clone(), Some("~/q".into())),
            PathBuf::from("~/q")
        );
        assert_eq!(folder(here.clone(), Some("~".into())), PathBuf::from("~"));
        assert_eq!(
            folder(here.clone(), Some("/srv".into())),
            PathBuf::from("/srv")
        );
        assert_eq!(
            folder(here.clone(), Some("sub dir".into())),
            PathBuf::from("/home/ada/p/sub dir")
        );
        assert_eq!(
            explain_path("claude-code", Path::new("/home/ada/p q"), None),
            "/api/sandbox/explain?template=claude-code&directory=/home/ada/p%20q"
        );
        assert_eq!(
            explain_path("a&b", Path::new("~"), Some("seatbelt")),
            "/api/sandbox/explain?template=a%26b&directory=~&backend=seatbelt"
        );
    }
}
