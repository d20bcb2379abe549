//! A real Claude Code (the pinned npm release CI installs) under relay's real sandbox:
//! logged in through fd 5 with no `/login`, not logged in without the setting, and
//! straight into work with no onboarding screens; `relay doctor`'s canary.

use std::path::PathBuf;
use std::time::Duration;

use relay::daemon::diagnostics::doctor::plain;
use relay_e2e::daemon::{base_settings, doctor_check, Relay, TOKEN_SETTING};
use relay_e2e::pty::Pty;
use relay_e2e::{assert_absent, random_hex};
use serde_json::{json, Value};

/// The real Claude Code binary: `RELAY_E2E_CLAUDE_CODE`, set by .ci/run. Missing in CI
/// is a failure; elsewhere a printed skip.
pub(crate) fn claude_code() -> Option<PathBuf> {
    match std::env::var_os("RELAY_E2E_CLAUDE_CODE").map(PathBuf::from) {
        Some(p) if p.is_file() => Some(p),
        other => {
            let why =
                format!("real Claude Code binary not found (RELAY_E2E_CLAUDE_CODE={other:?})");
            assert!(
                std::env::var_os("CI").is_none(),
                "{why}: .ci/run installs it"
            );
            eprintln!("SKIP real Claude Code: {why}");
            None
        }
    }
}

fn fake_oauth_token() -> String {
    format!("sk-ant-oat01-{}", random_hex(40))
}

fn settings_with(claude: &PathBuf, token: Option<&str>) -> Value {
    let mut s = base_settings(token);
    s["terminal_templates"][0]["command"] = json!(claude);
    s
}

fn auth_status(r: &Relay) -> String {
    let v = r.auth_status_terminal("claude-code");
    // `--raw`: the bytes Claude printed, for `plain` to strip its escapes.
    r.cli(&[
        "terminal",
        "log",
        "--raw",
        "--id",
        v["id"].as_str().unwrap(),
    ])
    .stdout
}

#[test]
fn real_claude_code_starts_logged_in_through_fd5_and_not_without_the_setting() {
    let Some(claude) = claude_code() else { return };
    let token = fake_oauth_token();
    let r = Relay::start(settings_with(&claude, Some(TOKEN_SETTING)));
    let path = r.write_token(&token);
    let mut logs = String::new();
    for _ in 0..2 {
        let log = auth_status(&r);
        let p = plain(&log);
        assert!(p.contains("\"loggedIn\":true"), "not logged in:\n{log}");
        assert!(p.contains("\"authMethod\":\"oauth_token\""), "{log}");
        assert!(!log.contains("/login"), "{log}");
        logs.push_str(&log);
    }
    let audit = r.cli(&["audit", "--json"]).stdout;
    let events = serde_json::to_vec(&r.all_events()).unwrap();
    for (place, bytes) in [
        ("the terminal logs", logs.as_bytes()),
        ("the audit log", audit.as_bytes()),
        ("the events", &events),
        ("the daemon output", &r.output()),
    ] {
        assert_absent(bytes, &token, place);
    }
    for (p, bytes) in r.all_files(&[&path]) {
        if p.starts_with(r.home.join(".local")) {
            continue; // binaries
        }
        assert_absent(&bytes, &token, &p.display().to_string());
    }

    // The same launch with the setting empty: the descriptor, not another login, did it.
    let r2 = Relay::start(settings_with(&claude, None));
    r2.write_token(&token);
    let log = auth_status(&r2);
    assert!(plain(&log).contains("\"loggedIn\":false"), "{log}");
}

#[test]
fn real_claude_code_starts_straight_into_work_with_no_onboarding_screen() {
    let Some(claude) = claude_code() else { return };
    let token = fake_oauth_token();
    let r = Relay::start(settings_with(&claude, Some(TOKEN_SETTING)));
    r.write_token(&token);
    let mut pty = Pty::spawn(r.cli_command(&["sandbox", "claude-code"]), 120, 35);
    // The main prompt's footer: Claude is waiting for work.
    pty.wait_for_within("for shortcuts", Duration::from_secs(90));
    let screen = pty.screen();
    for onboarding in [
        "Choose the text style",
        "Select login method",
        "Do you trust",
        "trust the files",
        "Welcome to Claude Code",
        "/login",
    ] {
        assert!(
            !screen.contains(onboarding),
            "onboarding screen {onboarding:?}:\n{screen}"
        );
    }
    assert_absent(screen.as_bytes(), &token, "the screen");
    let artifacts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    std::fs::write(artifacts.join("claude-code-first-screen.txt"), &screen).unwrap();
    // Closing the terminal ends the session.
    // Safety: SIGHUP to our own child, as a closing terminal sends.
    unsafe { libc::kill(pty.child.id() as libc::pid_t, libc::SIGHUP) };
    let _ = relay_e2e::wait::child_within(&mut pty.child, relay_e2e::WAIT);
}

#[test]
fn doctor_canary_is_denied_although_the_template_grants_the_tokens_folder() {
    let token = relay_e2e::fake_token();
    let mut s = base_settings(Some(TOKEN_SETTING));
    // The claude-code template grants all of home read-write: the token lies inside.
    s["terminal_templates"][0]["read_write"] = json!(["~"]);
    let r = Relay::start(s);
    let path = r.write_token(&token);
    let out = r.cli(&["doctor", "--json"]);
    let v: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", out.stdout, out.stderr));
    let canary = doctor_check(&v, "canary");
    assert_eq!(canary["status"], "ok", "{v}");
    assert!(
        canary["detail"].as_str().unwrap().contains("denied"),
        "{canary}"
    );
    let token_check = doctor_check(&v, "token_file");
    assert!(
        token_check["detail"]
            .as_str()
            .unwrap()
            .contains("mode 0600"),
        "{token_check}"
    );
    // `claude` (the instance's `~/.local/bin/claude`) lies in a folder that template
    // can write: launches stay safe (it is pinned), so `ok`, with a note saying so and
    // what to do to keep the folder writable.
    let program = doctor_check(&v, "claude_program");
    assert_eq!(program["status"], "ok", "{program}");
    let detail = program["detail"].as_str().unwrap();
    assert!(
        detail.contains(".local/bin") && detail.contains("note:") && detail.contains("claude_path"),
        "{program}"
    );
    assert_eq!(out.status, if v["ok"] == true { 0 } else { 1 }, "{v}");
    assert_absent(out.stdout.as_bytes(), &token, "relay doctor");
    assert_absent(&r.output(), &token, "the daemon output");
    let text = r.cli(&["doctor"]);
    assert!(
        text.stdout
            .lines()
            .any(|l| l.starts_with("ok") && l.contains("canary")),
        "{}",
        text.stdout
    );
    assert!(path.exists());
}
