//! The Claude settings a token launch will see, checked for another way to sign Claude
//! Code in (docs/THREAT-MODEL.md, "Other sign-ins"). A settings file that names an
//! `apiKeyHelper`, or whose `env` sets a sign-in variable (`ANTHROPIC_API_KEY`,
//! `ANTHROPIC_AUTH_TOKEN`, `CLAUDE_CODE_OAUTH_TOKEN`, …: the names a token launch removes
//! from its environment, src/host/env.rs) or a provider switch
//! (`CLAUDE_CODE_USE_BEDROCK`, any `CLAUDE_CODE_USE_*`), would have the session run on
//! something other than its owner's setup token — or hand a program of the project's
//! choosing a credential. Such a launch is refused, naming the file and the key, never
//! a value.
//!
//! The files: the session's own config folder (`CLAUDE_CONFIG_DIR`, its `settings.json`:
//! the user settings of a token launch, which the session itself can write, so a resume
//! reads what it left), the platform's managed settings (`managed-settings.json` and
//! `managed-settings.d/*.json`), and the project settings of the session directory and
//! of the project folder (`.claude/settings.json`, `.claude/settings.local.json`). A token
//! launch runs Claude Code with `--setting-sources user`, so the project files are not
//! loaded today; they are checked anyway, so that dropping the flag cannot open the hole
//! again.
//!
//! Every file is read as the token file is (src/token.rs): its last component never
//! followed, opened without blocking on a FIFO, a regular file of at most
//! [`SETTINGS_MAX_BYTES`]. A file relay cannot check (a link, a FIFO, too large, not
//! JSON, unreadable) refuses the launch too: Claude Code might read what relay could not.

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::daemon::plan::shield::PREFIX_VAR;
use crate::token::plain_io;

/// Larger settings files are refused: nobody writes a megabyte of settings by hand.
pub const SETTINGS_MAX_BYTES: u64 = 1024 * 1024;

/// Where Claude Code 2.x reads its managed (policy) settings: `managed-settings.json`
/// and the `managed-settings.d/` drop-in folder beside it. Read by every launch,
/// whatever `--setting-sources` says.
pub const MANAGED_DIR: &str = if cfg!(target_os = "macos") {
    "/Library/Application Support/ClaudeCode"
} else {
    "/etc/claude-code"
};

/// The top-level keys that sign Claude Code in another way.
const SIGN_IN_KEYS: &[&str] = &["apiKeyHelper"];

/// Whether an `env` entry of this name signs Claude Code in, hands it a credential, or
/// switches it to another provider: every name a token launch removes from its
/// environment (`is_sign_in`, src/host/env.rs: the credential, descriptor and provider
/// names Claude Code reads, and every `ANTHROPIC_*` or `CLAUDE_CODE_*` name ending like
/// a credential), and any `CLAUDE_CODE_USE_*`. What routes the traffic
/// (`ANTHROPIC_BASE_URL`, proxies, CAs) is the person's, as in the environment. Names
/// are compared in upper case; a name with other characters than letters, digits and
/// `_` is not a variable Claude Code reads.
pub fn is_sign_in_name(name: &str) -> bool {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return false;
    }
    let n = name.to_ascii_uppercase();
    n.starts_with("CLAUDE_CODE_USE_") || crate::host::env::is_sign_in(&n)
}

/// The sign-in keys a parsed settings document sets, as `apiKeyHelper` and
/// `env.NAME`, in the file's order. Values are never looked at.
pub fn sign_in_keys(doc: &Value) -> Vec<String> {
    let Some(obj) = doc.as_object() else {
        return vec![];
    };
    let mut out: Vec<String> = obj
        .keys()
        .filter(|k| SIGN_IN_KEYS.contains(&k.as_str()))
        .cloned()
        .collect();
    if let Some(env) = obj.get("env").and_then(Value::as_object) {
        out.extend(
            env.keys()
                .filter(|k| is_sign_in_name(k))
                .map(|k| format!("env.{k}")),
        );
    }
    out
}

/// The settings files a token launch in `directory` (of the project folder `project`)
/// would see, with `config_dir` as its `CLAUDE_CONFIG_DIR` and `managed_dir` as the
/// platform's managed-settings folder. A missing file is listed too (it is skipped when
/// read); the drop-in folder is listed as Claude Code does (`*.json`, no hidden files,
/// sorted).
pub fn settings_files(
    config_dir: &Path,
    directory: &Path,
    project: &Path,
    managed_dir: &Path,
) -> Result<Vec<PathBuf>, String> {
    let mut files = vec![config_dir.join("settings.json")];
    files.push(managed_dir.join("managed-settings.json"));
    let drop_in = managed_dir.join("managed-settings.d");
    match std::fs::read_dir(&drop_in) {
        Ok(rd) => {
            let mut names: Vec<PathBuf> = Vec::new();
            for e in rd {
                let e = e.map_err(|e| refusal_unreadable(&drop_in, &plain_io(&e)))?;
                let name = e.file_name();
                let name = name.to_string_lossy();
                if !name.starts_with('.') && name.ends_with(".json") {
                    names.push(e.path());
                }
            }
            names.sort();
            files.extend(names);
        }
        Err(e) if gone(&e) => {}
        Err(e) => return Err(refusal_unreadable(&drop_in, &plain_io(&e))),
    }
    for dir in [directory, project] {
        for name in ["settings.json", "settings.local.json"] {
            let f = dir.join(".claude").join(name);
            if !files.contains(&f) {
                files.push(f);
            }
        }
    }
    Ok(files)
}

/// Refuses (with the message for a `400 sandbox_unavailable`) when one of `files` sets
/// a sign-in key or cannot be checked. A missing file is fine.
pub fn check_files(files: &[PathBuf]) -> Result<(), String> {
    for f in files {
        let Some(bytes) = read_settings_file(f).map_err(|reason| refusal_unreadable(f, &reason))?
        else {
            continue;
        };
        let text = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
        let doc: Value =
            serde_json::from_slice(text).map_err(|_| refusal_unreadable(f, "is not valid JSON"))?;
        if replaces_the_shield(&doc) {
            return Err(format!(
                "the Claude settings file {} sets env.{PREFIX_VAR} (Claude's Bash commands \
                 would run outside relay's shield, where they can read Claude's memory); \
                 remove it and launch again",
                f.display()
            ));
        }
        let keys = sign_in_keys(&doc);
        if !keys.is_empty() {
            return Err(format!(
                "the Claude settings file {} sets {} (another way to sign Claude Code in); \
                 a token launch signs in only with claude_token_file: remove {} and launch again",
                f.display(),
                keys.join(", "),
                if keys.len() == 1 { "it" } else { "them" }
            ));
        }
    }
    Ok(())
}

/// Whether a settings document's `env` names [`PREFIX_VAR`]: Claude Code would run its
/// Bash commands through that instead of relay's shield (`super::shield`).
fn replaces_the_shield(doc: &Value) -> bool {
    doc.get("env")
        .and_then(Value::as_object)
        .is_some_and(|env| env.keys().any(|k| k.eq_ignore_ascii_case(PREFIX_VAR)))
}

/// The check a token launch runs: its config folder, the managed settings of this
/// platform, the session directory's and the project folder's settings; in every file
/// a session could have written (all but the managed ones, which are the
/// administrator's), no `env` name that routes Claude Code's traffic or changes how its
/// Bash tool runs; and in the config folder's own `settings.json` — the user settings a
/// token launch loads — no key that makes Claude Code run a command by itself.
pub fn check_launch(config_dir: &Path, directory: &Path, project: &Path) -> Result<(), String> {
    let managed = Path::new(MANAGED_DIR);
    let files = settings_files(config_dir, directory, project, managed)?;
    check_files(&files)?;
    let writable: Vec<PathBuf> = files
        .into_iter()
        .filter(|f| !f.starts_with(managed))
        .collect();
    let own = config_dir.join("settings.json");
    check_routing_keys(&writable, &own)?;
    check_code_keys(&own)
}

/// `env` names of a settings file a session could have written that would send the
/// token elsewhere or run its tools another way: every routing name of relay's own
/// environment (`ROUTING`, src/host/env.rs: the API's address, proxies, certificate
/// authorities), and what chooses the Bash tool's shell or what it sources (the prefix
/// that wraps it is refused in every file, managed ones too, by [`check_files`]).
/// Claude Code reloads its settings while it runs, so a routing key there is the
/// person's traffic sent wherever a session chose
/// (docs/THREAT-MODEL.md#what-a-token-launch-reads).
pub fn is_routing_name(name: &str) -> bool {
    crate::host::env::is_routing(name) || matches!(name, "CLAUDE_CODE_SHELL" | "BASH_ENV" | "ENV")
}

/// In `own` — the config folder's `settings.json`, the one layer a token launch loads,
/// which relay makes empty and nobody edits by hand — every `env` name is refused: any
/// of them reaches Claude Code's own children, outside the shield (`PATH`, `GIT_*`,
/// `LD_PRELOAD`, `NODE_OPTIONS`, …). In the other files only the routing and shell names.
fn check_routing_keys(files: &[PathBuf], own: &Path) -> Result<(), String> {
    for f in files {
        let Some(bytes) = read_settings_file(f).map_err(|reason| refusal_unreadable(f, &reason))?
        else {
            continue;
        };
        let text = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
        let doc: Value =
            serde_json::from_slice(text).map_err(|_| refusal_unreadable(f, "is not valid JSON"))?;
        let keys: Vec<String> = doc
            .get("env")
            .and_then(Value::as_object)
            .map(|env| {
                env.keys()
                    .filter(|k| f == own || is_routing_name(k))
                    .map(|k| format!("env.{k}"))
                    .collect()
            })
            .unwrap_or_default();
        if !keys.is_empty() {
            return Err(format!(
                "the Claude settings file {} sets {}, which would route a token launch's \
                 traffic or change what its programs run, and a session may have written \
                 it: set variables in the template's env or relay's environment instead; \
                 remove {} and launch again",
                f.display(),
                keys.join(", "),
                if keys.len() == 1 { "it" } else { "them" }
            ));
        }
    }
    Ok(())
}

/// Top-level keys of a settings file that make Claude Code run a command on its own,
/// beside the token: the config folder lies in the session's temp dir, which a template
/// granting relay's `TMPDIR` lets another session write (docs/THREAT-MODEL.md, "Code a
/// project names").
const CODE_KEYS: &[&str] = &[
    "hooks",
    "statusLine",
    "subagentStatusLine",
    "fileSuggestion",
    "otelHeadersHelper",
    "awsAuthRefresh",
    "awsCredentialExport",
    "gcpAuthRefresh",
    "proxyAuthHelper",
    "processWrapper",
    "enabledPlugins",
];

fn check_code_keys(f: &Path) -> Result<(), String> {
    let Some(bytes) = read_settings_file(f).map_err(|reason| refusal_unreadable(f, &reason))?
    else {
        return Ok(());
    };
    let text = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
    let doc: Value =
        serde_json::from_slice(text).map_err(|_| refusal_unreadable(f, "is not valid JSON"))?;
    let keys: Vec<&str> = doc
        .as_object()
        .map(|o| {
            CODE_KEYS
                .iter()
                .copied()
                .filter(|k| o.contains_key(*k))
                .collect()
        })
        .unwrap_or_default();
    if keys.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the Claude settings file {} sets {}: commands Claude Code would run beside the token, \
         in a folder relay seeded and another session may have written; remove {} and launch \
         again",
        f.display(),
        keys.join(", "),
        if keys.len() == 1 { "it" } else { "them" }
    ))
}

fn refusal_unreadable(f: &Path, reason: &str) -> String {
    format!(
        "the Claude settings file {} {reason}, so relay cannot check it for another way to \
         sign Claude Code in; make it a plain JSON file (or remove it) and launch again",
        f.display()
    )
}

fn gone(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR))
}

/// The file's bytes, or None when it does not exist; never through a link at its last
/// component, never blocking on a FIFO.
fn read_settings_file(path: &Path) -> Result<Option<Vec<u8>>, String> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if gone(&e) => return Ok(None),
        Err(e) => {
            return Err(match e.raw_os_error() {
                Some(libc::ELOOP) => "is a symlink".into(),
                Some(libc::EACCES) => "cannot be read (permission denied)".into(),
                _ => format!("cannot be opened ({})", plain_io(&e)),
            })
        }
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot be checked ({})", plain_io(&e)))?;
    if !meta.file_type().is_file() {
        return Err("is not a regular file".into());
    }
    if meta.len() > SETTINGS_MAX_BYTES {
        return Err(format!("is larger than {SETTINGS_MAX_BYTES} bytes"));
    }
    let mut buf = Vec::with_capacity(meta.len() as usize);
    file.take(SETTINGS_MAX_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot be read ({})", plain_io(&e)))?;
    if buf.len() as u64 > SETTINGS_MAX_BYTES {
        return Err(format!("is larger than {SETTINGS_MAX_BYTES} bytes"));
    }
    Ok(Some(buf))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const VALUE: &str = "sk-ant-api03-planted-value-0123456789";

    fn write(path: &Path, body: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }

    struct Tree {
        _dir: tempfile::TempDir,
        config: PathBuf,
        project: PathBuf,
        directory: PathBuf,
        managed: PathBuf,
    }

    fn tree() -> Tree {
        let d = tempfile::tempdir().unwrap();
        let config = d.path().join("relay-s-1/claude-config");
        let project = d.path().join("project");
        let directory = project.join("sub");
        let managed = d.path().join("etc/claude-code");
        for p in [&config, &directory] {
            std::fs::create_dir_all(p).unwrap();
        }
        Tree {
            _dir: d,
            config,
            project,
            directory,
            managed,
        }
    }

    fn check(t: &Tree) -> Result<(), String> {
        let files = settings_files(&t.config, &t.directory, &t.project, &t.managed)?;
        check_files(&files)
    }

    fn refused(t: &Tree) -> String {
        let e = check(t).expect_err("refused");
        assert!(!e.contains(VALUE) && !e.contains("planted-value"), "{e}");
        e
    }

    /// The config folder's own `settings.json` may set no `env` at all (any name reaches
    /// Claude Code's own children); another writable layer only no routing or shell name.
    #[test]
    fn any_env_in_the_loaded_settings_and_routing_names_elsewhere_refuse() {
        let d = tempfile::tempdir().unwrap();
        let own = d.path().join("claude-config/settings.json");
        let project = d.path().join("p/.claude/settings.json");
        for f in [&own, &project] {
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        }
        let files = [own.clone(), project.clone()];
        std::fs::write(&own, r#"{"env": {"PATH": "/tmp/evil:/usr/bin"}}"#).unwrap();
        let e = check_routing_keys(&files, &own).unwrap_err();
        assert!(
            e.contains("env.PATH") && e.contains(&own.display().to_string()),
            "{e}"
        );
        std::fs::write(&own, "{}").unwrap();
        std::fs::write(&project, r#"{"env": {"PATH": "/x", "DEBUG": "1"}}"#).unwrap();
        assert!(check_routing_keys(&files, &own).is_ok());
        std::fs::write(
            &project,
            r#"{"env": {"HTTPS_PROXY": "http://x", "GIT_DIR": "/x"}}"#,
        )
        .unwrap();
        let e = check_routing_keys(&files, &own).unwrap_err();
        assert!(
            e.contains("env.HTTPS_PROXY") && !e.contains("GIT_DIR"),
            "{e}"
        );
    }

    #[test]
    fn commands_in_the_config_folders_own_settings_refuse_and_elsewhere_are_ignored() {
        let d = tempfile::tempdir().unwrap();
        let cfg = d.path().join("claude-config");
        std::fs::create_dir_all(&cfg).unwrap();
        std::fs::write(
            cfg.join("settings.json"),
            r#"{"hooks": {"SessionStart": []}, "statusLine": {"command": "x"}, "theme": "dark",
                "fileSuggestion": {"type": "command", "command": "x"}, "proxyAuthHelper": "x"}"#,
        )
        .unwrap();
        let err = check_code_keys(&cfg.join("settings.json")).unwrap_err();
        assert!(
            err.contains("hooks, statusLine, fileSuggestion, proxyAuthHelper"),
            "{err}"
        );
        assert!(!err.contains("SessionStart"), "{err}");
        std::fs::write(cfg.join("settings.json"), r#"{"theme": "dark"}"#).unwrap();
        assert!(check_code_keys(&cfg.join("settings.json")).is_ok());
        assert!(check_code_keys(&cfg.join("missing.json")).is_ok());
    }

    #[test]
    fn sign_in_names_and_others() {
        for n in [
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "CLAUDE_CODE_OAUTH_TOKEN",
            "CLAUDE_CODE_OAUTH_REFRESH_TOKEN",
            "CLAUDE_CODE_OAUTH_TOKEN_FILE_DESCRIPTOR",
            "CLAUDE_CODE_API_KEY_FILE_DESCRIPTOR",
            "CLAUDE_CODE_SESSION_ACCESS_TOKEN",
            "CLAUDE_CODE_USE_BEDROCK",
            "CLAUDE_CODE_USE_VERTEX",
            "CLAUDE_CODE_USE_FOUNDRY",
            "CLAUDE_CODE_USE_SOMETHING_NEW",
            "ANTHROPIC_FOUNDRY_API_KEY",
            "ANTHROPIC_IDENTITY_TOKEN_FILE",
            "AWS_BEARER_TOKEN_BEDROCK",
            "anthropic_api_key",
        ] {
            assert!(is_sign_in_name(n), "{n}");
        }
        for n in [
            "",
            "ANTHROPIC_MODEL",
            "ANTHROPIC_BASE_URL",
            "HTTPS_PROXY",
            "NODE_EXTRA_CA_CERTS",
            "CLAUDE_CODE_CLIENT_KEY",
            "CLAUDE_CODE_MAX_OUTPUT_TOKENS",
            "DISABLE_TELEMETRY",
            "GITHUB_TOKEN",
            "CLAUDE_CODE_USE_BEDROCK\u{0}",
            "ANTHROPIC_API_KEY ",
        ] {
            assert!(!is_sign_in_name(n), "{n:?}");
        }
    }

    #[test]
    fn keys_are_named_in_order_and_values_never_read() {
        let doc = json!({
            "model": "opus",
            "apiKeyHelper": VALUE,
            "env": {"DEBUG": "1", "ANTHROPIC_API_KEY": VALUE, "CLAUDE_CODE_USE_VERTEX": "1"},
        });
        assert_eq!(
            sign_in_keys(&doc),
            vec![
                "apiKeyHelper",
                "env.ANTHROPIC_API_KEY",
                "env.CLAUDE_CODE_USE_VERTEX"
            ]
        );
        assert!(sign_in_keys(&json!({"env": ["ANTHROPIC_API_KEY"]})).is_empty());
        assert!(sign_in_keys(&json!(["apiKeyHelper"])).is_empty());
        assert!(sign_in_keys(&json!({"permissions": {"apiKeyHelper": 1}})).is_empty());
    }

    #[test]
    fn nothing_there_or_nothing_to_say_passes() {
        let t = tree();
        check(&t).unwrap();
        write(
            &t.project.join(".claude/settings.json"),
            r#"{"env": {"DEBUG": "1"}, "hooks": {}}"#,
        );
        write(
            &t.config.join("settings.json"),
            "\u{feff}{\"theme\": \"dark\"}",
        );
        write(&t.managed.join("managed-settings.json"), "{}");
        // `.claude` as a file: nothing Claude Code can read under it.
        write(&t.directory.join(".claude"), "not a folder");
        check(&t).unwrap();
    }

    #[test]
    fn each_file_a_launch_sees_is_checked() {
        let places = |t: &Tree| {
            vec![
                t.config.join("settings.json"),
                t.managed.join("managed-settings.json"),
                t.managed.join("managed-settings.d/50-team.json"),
                t.directory.join(".claude/settings.json"),
                t.directory.join(".claude/settings.local.json"),
                t.project.join(".claude/settings.json"),
                t.project.join(".claude/settings.local.json"),
            ]
        };
        let n = places(&tree()).len();
        for i in 0..n {
            for (body, key) in [
                (format!(r#"{{"apiKeyHelper": "{VALUE}"}}"#), "apiKeyHelper"),
                (
                    format!(r#"{{"env": {{"ANTHROPIC_AUTH_TOKEN": "{VALUE}"}}}}"#),
                    "env.ANTHROPIC_AUTH_TOKEN",
                ),
                (
                    r#"{"env": {"CLAUDE_CODE_USE_BEDROCK": "1"}}"#.to_string(),
                    "env.CLAUDE_CODE_USE_BEDROCK",
                ),
                // Claude's Bash commands outside the shield.
                (
                    r#"{"env": {"CLAUDE_CODE_SHELL_PREFIX": "/usr/bin/env"}}"#.to_string(),
                    "env.CLAUDE_CODE_SHELL_PREFIX",
                ),
            ] {
                let t = tree();
                let file = places(&t)[i].clone();
                write(&file, &body);
                let e = refused(&t);
                assert!(
                    e.contains(&format!("{} sets {key} ", file.display())),
                    "{e}"
                );
            }
        }
    }

    #[test]
    fn hidden_and_other_drop_ins_are_not_read() {
        let t = tree();
        let d = t.managed.join("managed-settings.d");
        write(&d.join(".hidden.json"), r#"{"apiKeyHelper": "x"}"#);
        write(&d.join("notes.txt"), r#"{"apiKeyHelper": "x"}"#);
        check(&t).unwrap();
        write(&d.join("10-a.json"), "{}");
        write(
            &d.join("20-b.json"),
            r#"{"env": {"ANTHROPIC_API_KEY": "x"}}"#,
        );
        assert!(refused(&t).contains("20-b.json sets env.ANTHROPIC_API_KEY"));
    }

    #[test]
    fn a_file_relay_cannot_check_refuses_without_following_or_blocking() {
        let t = tree();
        let elsewhere = t.project.join("elsewhere.json");
        write(&elsewhere, "{}");
        let f = t.directory.join(".claude/settings.local.json");
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &f).unwrap();
        assert!(refused(&t).contains("settings.local.json is a symlink"));
        std::fs::remove_file(&f).unwrap();

        nix::unistd::mkfifo(&f, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(refused(&t).contains("is not a regular file"));
        std::fs::remove_file(&f).unwrap();

        std::fs::create_dir(&f).unwrap();
        assert!(refused(&t).contains("is not a regular file"));
        std::fs::remove_dir(&f).unwrap();

        write(&f, &" ".repeat(SETTINGS_MAX_BYTES as usize + 1));
        assert!(refused(&t).contains("is larger than"));
        write(
            &f,
            &format!("{{\"apiKeyHelper\": \"{VALUE}\", // a comment\n}}"),
        );
        assert!(refused(&t).contains("is not valid JSON"));
        std::fs::remove_file(&f).unwrap();
        check(&t).unwrap();
    }

    /// The launch's check reads every file it would see: a sign-in key anywhere, a
    /// routing name in a file a session could write, any `env` or a code key in the
    /// config folder's own settings. (The platform's managed folder is the real one:
    /// the test expects nothing there.)
    #[test]
    fn a_launch_refuses_each_kind_of_key_in_the_files_it_checks() {
        if Path::new(MANAGED_DIR).exists() {
            eprintln!("skip: {MANAGED_DIR} exists on this machine");
            return;
        }
        let t = tree();
        let launch = |t: &Tree| check_launch(&t.config, &t.directory, &t.project);
        launch(&t).unwrap();
        let cases = [
            (
                t.directory.join(".claude/settings.local.json"),
                format!(r#"{{"apiKeyHelper": "{VALUE}"}}"#),
                "sets apiKeyHelper ",
            ),
            (
                t.project.join(".claude/settings.json"),
                r#"{"env": {"ANTHROPIC_BASE_URL": "http://elsewhere"}}"#.to_string(),
                "sets env.ANTHROPIC_BASE_URL, which would route",
            ),
            (
                t.config.join("settings.json"),
                r#"{"env": {"PATH": "/tmp/x:/usr/bin"}}"#.to_string(),
                "sets env.PATH, which would route",
            ),
            (
                t.config.join("settings.json"),
                r#"{"hooks": {}}"#.to_string(),
                "sets hooks: commands Claude Code would run",
            ),
        ];
        for (file, body, says) in cases {
            write(&file, &body);
            let e = launch(&t).unwrap_err();
            assert!(
                e.contains(&file.display().to_string()) && e.contains(says),
                "{e}"
            );
            assert!(!e.contains(VALUE), "{e}");
            std::fs::remove_file(&file).unwrap();
        }
        launch(&t).unwrap();
    }

    /// A file of exactly the cap is read whole (its last byte too); one byte more is not.
    #[test]
    fn a_settings_file_of_exactly_the_cap_is_read_whole() {
        assert_eq!(SETTINGS_MAX_BYTES, 1 << 20);
        let t = tree();
        let f = t.project.join(".claude/settings.json");
        let cap = SETTINGS_MAX_BYTES as usize;
        let body = format!("{{{}}}", " ".repeat(cap - 2));
        write(&f, &body);
        assert_eq!(read_settings_file(&f).unwrap().map(|b| b.len()), Some(cap));
        check(&t).unwrap();
        write(&f, &format!("{body} "));
        assert!(refused(&t).contains(&format!("is larger than {cap} bytes")));
    }

    /// A drop-in folder that cannot be listed refuses the launch; only a missing one
    /// (or a file where the folder would be) is nothing to read.
    #[test]
    fn a_drop_in_folder_that_cannot_be_listed_refuses() {
        let t = tree();
        std::fs::create_dir_all(&t.managed).unwrap();
        let d = t.managed.join("managed-settings.d");
        std::os::unix::fs::symlink("managed-settings.d", &d).unwrap();
        let e = refused(&t);
        assert!(
            e.contains(&format!("file {} ", d.display())) && e.contains("relay cannot check it"),
            "{e}"
        );
        std::fs::remove_file(&d).unwrap();
        write(&d, "a file");
        check(&t).unwrap();
    }
}
