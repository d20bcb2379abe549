//! The `relay` command line. Every verb takes `--json` (one line on stdout). On
//! failure: nothing on stdout, `error: …` on stderr, exit 1; a command line clap refuses
//! is clap's whole message, exit 2 ([`not_run`]). Everything printed goes
//! through [`termout`] (no control sequence a session chose reaches the terminal) and
//! [`emit`] (a reader that went away, as `| head` does, is not an error).

mod args;
mod attach;
mod client;
mod resume_hint;
mod sandbox;
mod service;
pub mod termout;
mod turn;
mod unit;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use crate::wire;
use args::{AuditVerb, Json, SandboxVerb, ServiceVerb, SessionVerb, TerminalVerb, TokenVerb, Verb};
use client::{Answer, Client};

pub(crate) fn config_dir(flag: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(d) = flag {
        return absolute(d);
    }
    if let Some(d) = std::env::var_os("RELAY_CONFIG_DIR").filter(|v| !v.is_empty()) {
        return absolute(PathBuf::from(d));
    }
    crate::daemon::paths::default_config_dir().ok_or_else(|| {
        "no home directory (HOME is not set and the account has none); pass --config-dir"
            .to_string()
    })
}

fn absolute(p: PathBuf) -> Result<PathBuf, String> {
    if p.is_absolute() {
        Ok(p)
    } else {
        std::env::current_dir()
            .map(|c| c.join(p))
            .map_err(|e| format!("current directory: {e}"))
    }
}

/// What a verb prints: the `--json` line and the text form, or (`terminal log --raw`)
/// bytes written exactly as they are.
struct Out {
    json: Value,
    text: String,
    raw: Option<Vec<u8>>,
}

impl Out {
    fn new(json: Value, text: String) -> Out {
        Out {
            json,
            text,
            raw: None,
        }
    }
}

/// `error: <msg>` on stderr (control bytes visible), exit 1. A closed stderr is ignored.
pub(crate) fn fail(msg: impl std::fmt::Display) -> ExitCode {
    let line = format!("error: {}\n", termout::visible(msg.to_string().as_bytes()));
    let _ = std::io::stderr().write_all(line.as_bytes());
    ExitCode::from(1)
}

/// Writes `bytes` to stdout and answers `code`. A closed pipe (`EPIPE`: the reader
/// went away, as `relay terminal log | head` does) is not an error: the verb ends
/// quietly with the status it would have had. Any other write error is `error: …`, 1.
pub(crate) fn emit(bytes: &[u8], code: ExitCode) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => code,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => code,
        Err(e) => fail(format!("write stdout: {e}")),
    }
}

/// A text form as it is printed: control bytes visible, one final newline.
fn text_line(text: &str) -> Vec<u8> {
    let mut t = termout::visible(text.as_bytes())
        .trim_end_matches('\n')
        .to_string();
    t.push('\n');
    t.into_bytes()
}

/// A `--json` answer as it is printed: one line, C1 escaped too.
fn json_bytes(v: &Value) -> Vec<u8> {
    let mut line = termout::json_line(v);
    line.push('\n');
    line.into_bytes()
}

pub fn run() -> ExitCode {
    let cli = match args::parse() {
        Ok(c) => c,
        Err(e) => return not_run(&e),
    };
    if let Verb::Completions { shell } = cli.verb {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut args::command(), "relay", &mut out);
        return emit(&out, ExitCode::SUCCESS);
    }
    let config_flag = cli.config_dir.clone();
    let config = match config_dir(cli.config_dir) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let (json_flag, result) = match cli.verb {
        Verb::Serve { log_level } => return serve(config, log_level),
        // Answered above, without a config dir.
        Verb::Completions { .. } => return ExitCode::SUCCESS,
        Verb::Sandbox {
            verb:
                Some(SandboxVerb::Explain {
                    template,
                    directory,
                    backend,
                    json: Json { json },
                }),
            ..
        } => (
            json,
            explain(
                &Client::new(&config),
                &template,
                directory,
                backend.as_deref(),
            ),
        ),
        Verb::Sandbox {
            template,
            args,
            detach_keys,
            json: Json { json },
            ..
        } => {
            return sandbox::run(
                &config,
                sandbox::Options {
                    template: &template.unwrap_or_default(),
                    args: &args,
                    detach_keys: detach_keys.as_deref(),
                    json_out: json,
                    config_flag: config_flag.as_ref(),
                },
            )
        }
        Verb::Terminal(TerminalVerb::Attach {
            id,
            detach_keys,
            json: Json { json },
        }) => {
            return attach::terminal(
                &config,
                &id,
                detach_keys.as_deref(),
                json,
                config_flag.as_ref(),
            )
        }
        Verb::Doctor {
            json: Json { json },
        } => return doctor(&Client::new(&config), json),
        Verb::Version {
            json: Json { json },
        } => (
            json,
            Ok(Out::new(
                json!({"version": env!("CARGO_PKG_VERSION")}),
                format!("relay {}", env!("CARGO_PKG_VERSION")),
            )),
        ),
        Verb::Status {
            json: Json { json },
        } => (json, status(&Client::new(&config), &config)),
        Verb::Service(ServiceVerb::Install {
            dry_run,
            json: Json { json },
        }) => (json, service::install(&config, dry_run)),
        Verb::Service(ServiceVerb::Uninstall {
            json: Json { json },
        }) => (json, service::uninstall()),
        Verb::Service(ServiceVerb::Status {
            json: Json { json },
        }) => (json, service::status(&config)),
        Verb::Settings {
            open,
            json: Json { json },
        } => (json, settings_link(&Client::new(&config), open)),
        Verb::Token(TokenVerb::List {
            json: Json { json },
        }) => (json, token_list(&Client::new(&config))),
        Verb::Audit {
            verb: Some(AuditVerb::Scan {
                json: Json { json },
            }),
            json: Json { json: json_before },
            ..
        } => return audit_scan(&Client::new(&config), json || json_before),
        Verb::Audit {
            verb: None,
            tail,
            json: Json { json },
        } => (json, audit(&Client::new(&config), tail)),
        Verb::Terminal(v) => terminal(&Client::new(&config), v),
        Verb::Session(SessionVerb::Message {
            id,
            text,
            file,
            stream,
            json: Json { json },
        }) => {
            return match turn::prompt(&text, file.as_deref()) {
                Ok(text) => turn::run(&Client::new(&config), &id, &text, stream, json),
                Err(e) => fail(e),
            }
        }
        Verb::Session(v) => session(&Client::new(&config), v),
    };
    match result {
        Ok(out) => {
            let bytes = if json_flag {
                json_bytes(&out.json)
            } else if let Some(raw) = out.raw {
                raw
            } else if out.text.is_empty() {
                Vec::new()
            } else {
                text_line(&out.text)
            };
            emit(&bytes, ExitCode::SUCCESS)
        }
        Err(e) => fail(e),
    }
}

/// A command line clap answered itself: `--help`, `help` and `--version` on stdout,
/// exit 0; anything else — a usage error, or bare `relay`, which gets the help — clap's
/// whole message on stderr (what is wrong, the usage line, a suggestion, the `--` tip),
/// exit 2, clap's convention for usage (docs/cli.md#exit-codes). The message quotes
/// what was typed, so its control bytes are shown as text, as every `error:` line's are.
fn not_run(e: &clap::Error) -> ExitCode {
    let text = e.render().to_string();
    if e.exit_code() == 0 {
        return emit(text.as_bytes(), ExitCode::SUCCESS);
    }
    let _ = std::io::stderr().write_all(termout::visible(text.as_bytes()).as_bytes());
    ExitCode::from(USAGE)
}

/// The exit status of a command line relay did not run (clap's `USAGE_CODE`).
const USAGE: u8 = 2;

fn serve(config: PathBuf, log_level: Option<String>) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(format!("runtime: {e}")),
    };
    // Who started it, for its lock file and its status (docs/cli.md#one-relay-per-config-dir).
    let service = unit::started_by().map(|name| crate::daemon::serve::Service {
        name: name.into(),
        stop: unit::stop_command(),
    });
    match rt.block_on(crate::daemon::serve(config, log_level, service)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// A 2xx answer read as its wire type `T` (`crate::wire`), and as it came (what
/// `--json` prints); a refusal is its message.
fn answer<T: DeserializeOwned>(a: Answer, route: &str) -> Result<(T, Value), String> {
    if !(200..300).contains(&a.status) {
        return Err(a.error_text());
    }
    Ok((a.typed(route)?, a.json()))
}

/// `method path` without a body, its answer as `T`.
fn get<T: DeserializeOwned>(c: &Client, method: &str, path: &str) -> Result<(T, Value), String> {
    answer(c.call(method, path)?, &format!("{method} {path}"))
}

/// `method path` with `body`, its answer as `T`.
fn send<T: DeserializeOwned>(
    c: &Client,
    method: &str,
    path: &str,
    body: &impl Serialize,
) -> Result<(T, Value), String> {
    answer(c.send(method, path, body)?, &format!("{method} {path}"))
}

/// `relay sandbox explain`: the sandbox a terminal of `template` gets in `directory`
/// (default: here), from the daemon's launch path (`GET /api/sandbox/explain`).
fn explain(
    c: &Client,
    template: &str,
    directory: Option<String>,
    backend: Option<&str>,
) -> Result<Out, String> {
    use crate::http::encode_component as enc;
    let here = std::env::current_dir().map_err(|e| format!("current directory: {e}"))?;
    let dir = match directory {
        None => here,
        // `~` is the daemon's to expand; a relative folder is taken from here.
        Some(d) if d == "~" || d.starts_with("~/") || d.starts_with('/') => PathBuf::from(d),
        Some(d) => here.join(d),
    };
    let mut path = format!(
        "/api/sandbox/explain?template={}&directory={}",
        enc(template),
        enc(&dir.to_string_lossy())
    );
    if let Some(b) = backend {
        path.push_str(&format!("&backend={}", enc(b)));
    }
    let (e, v) = get::<crate::sandbox::explain::Explanation>(c, "GET", &path)?;
    Ok(Out::new(v, crate::sandbox::explain::to_text(&e)))
}

fn describe(e: &wire::Session) -> String {
    let mut s = format!(
        "{}  {}  project={}  template={}  {}",
        e.id,
        e.state.as_str(),
        e.project_id,
        e.template_id,
        e.directory.display()
    );
    if let Some(n) = &e.name {
        s.push_str(&format!("  name={n}"));
    }
    if let Some(code) = e.exit_status {
        s.push_str(&format!("  exit={code}"));
    }
    if let Some(r) = &e.exit_reason {
        s.push_str(&format!("  ended={r}"));
    }
    if let Some(fp) = &e.token_fingerprint {
        s.push_str(&format!("  token={fp}"));
    }
    if let Some(a) = &e.account {
        s.push_str(&format!("  account={a}"));
    }
    if e.stale {
        s.push_str("  stale");
    }
    s
}

fn list_text(items: &[wire::Session]) -> String {
    if items.is_empty() {
        return "(none)".into();
    }
    items.iter().map(describe).collect::<Vec<_>>().join("\n")
}

/// An answer that is one session, printed as `<verb> <session>`.
fn one(verb: &str, r: Result<(wire::Session, Value), String>) -> Result<Out, String> {
    r.map(|(e, json)| Out::new(json, format!("{verb} {}", describe(&e))))
}

/// The caller's folder for a start without `--directory`, as the API's `cwd`. A name
/// that is not UTF-8 cannot travel in JSON: refused, never sent mangled (the daemon
/// would not find it and start in the project's folder instead).
fn here(directory: Option<&str>) -> Result<Option<String>, String> {
    let Ok(cwd) = std::env::current_dir() else {
        return Ok(None);
    };
    match cwd.to_str() {
        Some(s) => Ok(Some(s.to_string())),
        None if directory.is_some_and(|d| !d.is_empty()) => Ok(None),
        None => Err(format!(
            "the current folder's name is not UTF-8 ({}), and relay names folders in UTF-8: pass --directory with a folder whose name is",
            cwd.to_string_lossy()
        )),
    }
}

fn terminal(c: &Client, v: TerminalVerb) -> (bool, Result<Out, String>) {
    match v {
        TerminalVerb::Start {
            project,
            template,
            name,
            directory,
            cols,
            rows,
            extra_arg,
            json: Json { json },
        } => {
            // Without --directory: here when here is inside the project, else the
            // project's folder (the daemon decides).
            let cwd = match here(directory.as_deref()) {
                Ok(cwd) => cwd,
                Err(e) => return (json, Err(e)),
            };
            let body = wire::TerminalStart {
                project: Some(project),
                template: Some(template),
                name,
                directory,
                cwd,
                cols,
                rows,
                extra_args: extra_arg,
                ..Default::default()
            };
            (
                json,
                one("started", send(c, "POST", "/api/terminals", &body)),
            )
        }
        TerminalVerb::List {
            json: Json { json },
        } => (
            json,
            get(c, "GET", "/api/terminals")
                .map(|(t, v): (wire::Terminals, _)| Out::new(v, list_text(&t.terminals))),
        ),
        TerminalVerb::Log {
            id,
            raw,
            json: Json { json },
        } => {
            // The log is what the session wrote: as text its controls are made visible
            // here; `--raw` hands the bytes over untouched; JSON escapes them.
            let r = c
                .call("GET", &format!("/api/terminals/{id}/log"))
                .and_then(|a| {
                    if a.status == 200 {
                        let text = String::from_utf8_lossy(&a.body).into_owned();
                        Ok(Out {
                            json: json!({"id": id, "log": text}),
                            text: termout::visible(&a.body),
                            raw: raw.then_some(a.body),
                        })
                    } else {
                        Err(a.error_text())
                    }
                });
            (json, r)
        }
        TerminalVerb::Stop {
            id,
            json: Json { json },
        } => (
            json,
            one("stopped", get(c, "DELETE", &format!("/api/terminals/{id}"))),
        ),
        TerminalVerb::Purge {
            id,
            json: Json { json },
        } => (json, purge(c, "terminals", &id)),
        TerminalVerb::Egress {
            id,
            json: Json { json },
        } => (json, egress(c, "terminals", &id)),
        // `run` hands attaches to `attach::terminal` before this point.
        TerminalVerb::Attach {
            json: Json { json },
            ..
        } => (json, Err("attach: internal dispatch".into())),
    }
}

fn session(c: &Client, v: SessionVerb) -> (bool, Result<Out, String>) {
    match v {
        SessionVerb::Start {
            project,
            directory,
            name,
            model,
            permission_mode,
            json: Json { json },
        } => {
            // Without --directory: here when here is inside the project, else the
            // project's folder (the daemon decides).
            let cwd = match here(directory.as_deref()) {
                Ok(cwd) => cwd,
                Err(e) => return (json, Err(e)),
            };
            let body = wire::SessionStart {
                project: Some(project),
                directory,
                cwd,
                name,
                model,
                permission_mode,
                ..Default::default()
            };
            (
                json,
                one("started", send(c, "POST", "/api/sessions", &body)),
            )
        }
        // `run` hands messages to `turn::run` before this point.
        SessionVerb::Message {
            json: Json { json },
            ..
        } => (json, Err("message: internal dispatch".into())),
        SessionVerb::List {
            json: Json { json },
        } => (
            json,
            get(c, "GET", "/api/sessions")
                .map(|(l, v): (wire::Sessions, _)| Out::new(v, list_text(&l.sessions))),
        ),
        SessionVerb::Stop {
            id,
            json: Json { json },
        } => (
            json,
            one("stopped", get(c, "DELETE", &format!("/api/sessions/{id}"))),
        ),
        SessionVerb::Purge {
            id,
            json: Json { json },
        } => (json, purge(c, "sessions", &id)),
        SessionVerb::Egress {
            id,
            json: Json { json },
        } => (json, egress(c, "sessions", &id)),
        SessionVerb::Resume {
            id,
            json: Json { json },
        } => (
            json,
            get(c, "POST", &format!("/api/sessions/{id}/resume")).map(
                |(r, v): (wire::Resumed, _)| {
                    let mut text = format!("resumed {}", describe(&r.entry));
                    if let Some(n) = &r.notice {
                        text.push_str(&format!("\nnote: {n}"));
                    }
                    Out::new(v, text)
                },
            ),
        ),
    }
}

/// `relay session|terminal egress`: one line per connection, `allowed`/`refused`, where,
/// bytes and time, and the rule.
fn egress(c: &Client, what: &str, id: &str) -> Result<Out, String> {
    get(c, "GET", &format!("/api/{what}/{id}/egress")).map(|(a, v): (wire::AuditRows, _)| {
        let lines: Vec<String> = a
            .rows
            .iter()
            .filter_map(|r| {
                let g = r.egress.as_ref()?;
                let verdict = if g.allowed { "allowed" } else { "refused" };
                // A folded row stands for many connections (over the session's budget).
                let times = match g.folded {
                    0 => String::new(),
                    n => format!(" ×{n}"),
                };
                Some(format!(
                    "{verdict}{times}  {}  {} B out, {} B in, {} ms  {}",
                    g.target(),
                    g.sent,
                    g.received,
                    g.ms,
                    g.rule
                ))
            })
            .collect();
        let text = if lines.is_empty() {
            "no connections".to_string()
        } else {
            lines.join("\n")
        };
        Out::new(v, text)
    })
}

fn purge(c: &Client, what: &str, id: &str) -> Result<Out, String> {
    get(c, "POST", &format!("/api/{what}/{id}/purge"))
        .map(|(p, v): (wire::Purged, _)| Out::new(v, format!("purged {}", describe(&p.entry))))
}

/// `relay audit scan`: the report on stdout either way; exit 1 when the token was found
/// (as `relay doctor` does with a failed check), or when the scan could not read
/// everything and so cannot say the token is nowhere.
fn audit_scan(c: &Client, json_out: bool) -> ExitCode {
    let (r, v): (wire::ScanReport, _) = match get(c, "POST", "/api/audit/scan") {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let code = if r.findings.is_empty() && r.complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    if json_out {
        return emit(&json_bytes(&v), code);
    }
    let mut text = String::new();
    for f in &r.findings {
        let place = match f.offset {
            Some(o) => format!("{}:{o}", f.file),
            None => format!("{} (its name)", f.file),
        };
        text.push_str(&format!("found  {place}  {}\n", f.encoding));
    }
    for f in &r.skipped {
        text.push_str(&format!("skipped  {}  {}\n", f.file, f.why));
    }
    if r.skipped_more > 0 {
        text.push_str(&format!(
            "skipped  {} more places, not listed\n",
            r.skipped_more
        ));
    }
    let unread = r.skipped.len() as u64 + r.skipped_more;
    let verdict = match (r.findings.len(), r.complete) {
        (0, true) => "not found".to_string(),
        (0, false) => "not found in what it could read".to_string(),
        (n, _) => format!("found in {n} places"),
    };
    let missed = match (r.complete, unread) {
        (true, _) => String::new(),
        (false, 0) => "; it could not read everything".to_string(),
        (false, 1) => "; 1 place could not be read".to_string(),
        (false, n) => format!("; {n} places could not be read"),
    };
    text.push_str(&format!(
        "scanned {} files ({} bytes) for the token {}: {verdict}{missed}",
        r.files, r.bytes, r.token_fingerprint,
    ));
    emit(&text_line(&text), code)
}

fn audit(c: &Client, tail: Option<usize>) -> Result<Out, String> {
    let path = match tail {
        Some(n) => format!("/api/audit?tail={n}"),
        None => "/api/audit".to_string(),
    };
    let (a, v): (wire::AuditRows, _) = get(c, "GET", &path)?;
    let text = a
        .rows
        .iter()
        .map(|r| {
            let mut line = format!(
                "{}  {}  {}  {}",
                crate::text::utc_ms(r.ts),
                r.action,
                r.outcome.as_str(),
                r.session_id.as_deref().unwrap_or("-")
            );
            if let Some(code) = r.code {
                line.push_str(&format!("  {code}"));
            }
            if let Some(e) = &r.error {
                line.push_str(&format!("  {e}"));
            }
            if let Some(p) = r.token_projects.as_ref().filter(|p| !p.is_empty()) {
                line.push_str(&format!("  token of project {}", p.join(", ")));
            }
            if let Some(a) = &r.account {
                line.push_str(&format!("  account={a}"));
            }
            if let Some(g) = &r.egress {
                let at = g.target();
                let times = match g.folded {
                    0 => String::new(),
                    n => format!(" ×{n}"),
                };
                line.push_str(&format!(
                    "  {at}{times}  {} B out, {} B in, {} ms  {}",
                    g.sent, g.received, g.ms, g.rule
                ));
            }
            line
        })
        .collect::<Vec<_>>()
        .join("\n");
    Ok(Out::new(v, text))
}

fn doctor(c: &Client, json_out: bool) -> ExitCode {
    let (d, v): (wire::Doctor, _) = match get(c, "POST", "/api/doctor") {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let code = if d.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    if json_out {
        return emit(&json_bytes(&v), code);
    }
    let mut text = String::new();
    for ch in &d.checks {
        text.push_str(&format!(
            "{:<5} {:<16} {}\n",
            ch.status.as_str(),
            ch.name,
            ch.detail
        ));
        if matches!(ch.status, wire::CheckStatus::Fail | wire::CheckStatus::Warn) {
            if let Some(fix) = &ch.fix {
                text.push_str(&format!("{:<22} fix: {fix}\n", ""));
            }
        }
    }
    if text.is_empty() {
        return emit(b"", code);
    }
    emit(&text_line(&text), code)
}

/// `relay token list`: one block per configured token file.
fn token_list(c: &Client) -> Result<Out, String> {
    let (t, v): (wire::Tokens, _) = get(c, "GET", "/api/tokens")?;
    if t.tokens.is_empty() {
        return Ok(Out::new(
            v,
            "no token file is configured (set claude_token_file in settings.json)".into(),
        ));
    }
    let blocks: Vec<String> = t
        .tokens
        .iter()
        .map(|f| {
            let mut head = vec![f.path.display().to_string()];
            head.extend(f.fingerprint.as_ref().map(|fp| format!("token={fp}")));
            head.extend(f.mode.as_ref().map(|m| format!("mode={m}")));
            head.extend(f.size.map(|n| format!("{n} bytes")));
            head.extend(
                f.changed_ms
                    .map(|ms| format!("changed {}", crate::text::utc_ms(ms))),
            );
            let mut lines = vec![head.join("  ")];
            lines.push(format!("  set by: {}", f.keys.join(", ")));
            let projects: Vec<String> = f
                .projects
                .iter()
                .map(|p| match &p.account {
                    Some(a) => format!("{} (account {a})", p.id),
                    None => p.id.clone(),
                })
                .collect();
            lines.push(format!(
                "  projects: {}",
                if projects.is_empty() {
                    "none (every project names its own)".to_string()
                } else {
                    projects.join(", ")
                }
            ));
            if let Some(p) = &f.problem {
                lines.push(format!("  problem: {p}"));
            }
            if !f.sessions.is_empty() {
                lines.push(format!("  running on it: {}", f.sessions.join(", ")));
            }
            lines.join("\n")
        })
        .collect();
    Ok(Out::new(v, blocks.join("\n")))
}

fn settings_link(c: &Client, open: bool) -> Result<Out, String> {
    let (link, v): (wire::LoginLink, _) = get(c, "POST", "/api/login-code")?;
    let url = link.url;
    if open {
        let opener = if cfg!(target_os = "macos") {
            "open"
        } else {
            "xdg-open"
        };
        std::process::Command::new(opener)
            .arg(&url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| format!("{opener} {url}: {e}"))?;
    }
    Ok(Out {
        text: format!("{url}\n(one-time link, valid for 60 s)"),
        json: v,
        raw: None,
    })
}

fn status(c: &Client, config: &std::path::Path) -> Result<Out, String> {
    let (st, v): (wire::Status, _) = get(c, "GET", "/api/status")?;
    let token = match (&st.paths.claude_token_file, st.settings.ok) {
        (Some(p), _) => format!("Claude token file: {p}"),
        (None, true) => "Claude token file: not set".to_string(),
        // An invalid file says nothing of the token: "not set" would send the person
        // to set what is already there.
        (None, false) => "Claude token file: unknown until settings.json is fixed".to_string(),
    };
    let settings = match (st.settings.ok, st.settings.note) {
        (true, None) => format!("settings: {}", st.paths.settings.display()),
        (true, Some(n)) => format!(
            "settings: {}\nsettings note: {n}",
            st.paths.settings.display()
        ),
        (false, n) => format!(
            "settings: INVALID, launches are refused until it is fixed\n  {}",
            n.unwrap_or_else(|| st.paths.settings.display().to_string())
        ),
    };
    let mut text = format!(
        "relay {} running (pid {}, {})\nconfig: {}\n{settings}\n{token}\nsessions running: {}",
        st.version,
        st.pid,
        service::started_by(st.service.as_deref()),
        st.paths.config.display(),
        st.sessions_running,
    );
    if let Some(c) = service::collision(config, st.pid, st.service.as_deref()) {
        text.push_str(&format!("\nnote: {c}"));
    }
    Ok(Out::new(v, text))
}
