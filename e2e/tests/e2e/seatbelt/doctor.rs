//! `relay doctor` on the Seatbelt path (the macOS backend), driven on Linux through the
//! fake `sandbox-exec`: the launcher check looks at the Seatbelt launcher, the kernel
//! check steps aside, the canary and `claude auth status` go through `sandbox-exec -f`
//! with the generated profile, and a launcher that enforces nothing makes the canary
//! fail instead of passing.

use std::path::{Path, PathBuf};

use relay_e2e::daemon::{base_settings, Relay, TOKEN_SETTING};
use relay_e2e::{assert_absent, random_hex};
use serde_json::{json, Value};

/// The real Claude Code (`RELAY_E2E_CLAUDE_CODE`, set by .ci/run): missing in CI is a
/// failure, elsewhere a printed skip of the `claude auth status` part.
fn claude_code() -> Option<PathBuf> {
    match std::env::var_os("RELAY_E2E_CLAUDE_CODE").map(PathBuf::from) {
        Some(p) if p.is_file() => Some(p),
        other => {
            assert!(
                std::env::var_os("CI").is_none(),
                "real Claude Code not found (RELAY_E2E_CLAUDE_CODE={other:?}): .ci/run installs it"
            );
            eprintln!("SKIP claude auth status: no RELAY_E2E_CLAUDE_CODE");
            None
        }
    }
}

/// Every call the fake `sandbox-exec` logged, with the profile it recorded: one log per
/// session temp dir under `tmp` (`$TMPDIR/fake-sandbox-exec.jsonl` and
/// `$TMPDIR/fake-sandbox-exec/<sha256>.sb` as the session saw `TMPDIR`).
fn fake_calls(tmp: &Path) -> Vec<(Value, String)> {
    let mut out = Vec::new();
    for dir in std::fs::read_dir(tmp).unwrap().flatten().map(|e| e.path()) {
        for call in relay_e2e::read_jsonl(&dir.join("fake-sandbox-exec.jsonl")) {
            let copy = dir
                .join("fake-sandbox-exec")
                .join(format!("{}.sb", call["sha256"].as_str().unwrap()));
            let profile = std::fs::read_to_string(&copy)
                .unwrap_or_else(|e| panic!("{}: {e}", copy.display()));
            out.push((call, profile));
        }
    }
    out
}

fn check(report: &Value, name: &str) -> Value {
    relay_e2e::daemon::doctor_check(report, name)
}

#[test]
fn doctor_on_seatbelt_runs_canary_and_auth_status_through_sandbox_exec_and_fails_a_launcher_that_enforces_nothing(
) {
    let claude = claude_code();
    let token = format!("sk-ant-oat01-{}", random_hex(40));
    let launcher = relay_e2e::bin("sandbox-exec");
    let mut s = base_settings(Some(TOKEN_SETTING));
    relay_e2e::seatbelt::use_seatbelt(&mut s, &launcher);
    if let Some(c) = &claude {
        s["terminal_templates"][0]["command"] = json!(c);
    }
    // Its probes' temp folders hold the fake launcher's call log: kept for reading.
    let mut r = Relay::prepare(None, false);
    r.write_settings(&s);
    r.serve_env
        .push(("RELAY_E2E_KEEP_PROBES".into(), "1".into()));
    r.launch_daemon();
    let path = r.write_token(&token);

    let out = r.cli(&["doctor", "--json"]);
    let v: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", out.stdout, out.stderr));

    let l = check(&v, "sandbox_launcher");
    assert_eq!(l["status"], "ok", "{v}");
    assert_eq!(
        l["detail"],
        format!("sandbox-exec present at {}", launcher.display()),
        "{v}"
    );
    assert_eq!(check(&v, "kernel")["status"], "skip", "{v}");

    // The fake runs the probe unconfined, so the probe reads the token: doctor must say
    // so, not trust that sandbox-exec exists.
    let canary = check(&v, "canary");
    assert_eq!(canary["status"], "fail", "{v}");
    assert!(
        canary["detail"].as_str().unwrap().contains("READ"),
        "{canary}"
    );
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(out.status, 1, "{v}");

    // Both probes went through `sandbox-exec -f <profile>`, and the profile denies the
    // token after every allow.
    let calls = fake_calls(&r.tmp);
    let (canary_call, _) = calls
        .iter()
        .find(|(c, _)| c["argv"][0] == "/bin/sh")
        .unwrap_or_else(|| panic!("no canary through sandbox-exec: {calls:?}"));
    assert_eq!(
        canary_call["argv"].as_array().unwrap().last().unwrap(),
        &json!(path.to_string_lossy()),
        "{canary_call}"
    );
    let literal = format!("(literal \"{}\")", path.display());
    for (_, profile) in &calls {
        let lines: Vec<&str> = profile.lines().collect();
        let at = lines
            .iter()
            .position(|l| {
                l.starts_with("(deny file-read* process-exec* file-map-executable file-write*")
                    && l.contains(&literal)
            })
            .unwrap_or_else(|| panic!("no read and write deny of {literal}:\n{profile}"));
        let last_allow = lines
            .iter()
            // The last allow that can open a file (the socket and opt-in allows name none).
            .rposition(|l| l.starts_with("(allow ") && l.contains("file-"))
            .unwrap();
        assert!(last_allow < at, "an allow after the token deny:\n{profile}");
    }

    let auth = check(&v, "claude_auth");
    if claude.is_some() {
        assert_eq!(auth["status"], "ok", "{v}");
        assert!(
            auth["detail"]
                .as_str()
                .unwrap()
                .ends_with("auth status: oauth_token through fd 5"),
            "{auth}"
        );
        assert!(
            calls.iter().any(|(c, _)| c["argv"]
                .as_array()
                .unwrap()
                .ends_with(&[json!("auth"), json!("status")])),
            "no auth status through sandbox-exec: {calls:?}"
        );
        assert_eq!(calls.len(), 2, "{calls:?}");
    }

    assert_absent(out.stdout.as_bytes(), &token, "relay doctor");
    assert_absent(&r.output(), &token, "the daemon output");
    assert!(path.exists());
}
