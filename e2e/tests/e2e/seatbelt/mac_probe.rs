//! The Mac probe (`tools/macos-probe.sh`, docs/macos.md) run as a relay session's program
//! under the real `/usr/bin/sandbox-exec`: it fails on any `OPEN` escape or `BROKEN`
//! capability. macOS only (`cfg(target_os = "macos")` in `mod.rs`); on Linux it is
//! type-checked for both Apple targets by clippy and never runs.
//!
//! The probe is the `claude-code` template's program (`claude_path`), so it is a Claude
//! launch and gets the token on fd 5. With `RELAY_E2E_CLAUDE_CODE` (a Claude Code) and
//! `RELAY_E2E_MAC_TOKEN` (a file holding a real `claude setup-token` token) it also runs
//! `claude -p`; without them a fake token stands in and that one check is skipped.

use std::path::{Path, PathBuf};

use relay_e2e::daemon::{base_settings, Relay};
use relay_e2e::{assert_absent, fake_token, seatbelt};
use serde_json::json;

#[test]
fn the_mac_probe_finds_no_escape_open_and_nothing_it_needs_broken() {
    let mut r = Relay::prepare(None, true);
    let real_token = std::env::var_os("RELAY_E2E_MAC_TOKEN")
        .map(|p| std::fs::read_to_string(p).expect("RELAY_E2E_MAC_TOKEN names a file"));
    let claude = std::env::var_os("RELAY_E2E_CLAUDE_CODE").map(PathBuf::from);
    let token = real_token
        .as_deref()
        .map(str::trim)
        .map(String::from)
        .unwrap_or_else(fake_token);
    let token_file = r.write_token(&token);

    // The probe, as the Claude program, in a folder of its own outside the project.
    let bin = r.root.join("probe-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let probe = bin.join("claude");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/macos-probe.sh");
    relay_e2e::exec_file::write_executable(
        &probe,
        std::fs::read(&source).expect("tools/macos-probe.sh"),
    );

    let mut s = base_settings(Some(token_file.to_str().unwrap()));
    seatbelt::use_seatbelt(&mut s, &seatbelt::launcher());
    s["claude_path"] = json!(probe);
    let mut env = json!({});
    match (&claude, real_token.is_some()) {
        (Some(c), true) => {
            env["RELAY_PROBE_CLAUDE"] = json!(c);
            s["terminal_templates"][0]["read"] = json!(["~/.config", c.parent().unwrap()]);
        }
        _ => env["RELAY_PROBE_CLAUDE"] = json!("skip"),
    }
    s["terminal_templates"][0]["env"] = env.clone();
    r.write_settings(&s);
    r.launch_daemon();
    // The daemon's pid, to signal and inspect from inside: settings are read per launch.
    let pid = r.daemon_pid().expect("the daemon's pid");
    env["RELAY_PROBE_PID"] = json!(pid.to_string());
    s["terminal_templates"][0]["env"] = env;
    r.write_settings(&s);

    let v = r.cli_json(&[
        "terminal",
        "start",
        "--project",
        "p1",
        "--template",
        "claude-code",
    ]);
    let id = v["id"].as_str().expect("terminal id");
    r.wait_exited(id);
    let log = r.cli(&["terminal", "log", "--id", id]).stdout;
    assert_absent(log.as_bytes(), &token, "the probe's output");
    assert!(log.contains("probe: "), "the probe did not finish:\n{log}");
    let bad: Vec<&str> = log
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("OPEN ") || l.starts_with("BROKEN "))
        .collect();
    assert!(
        bad.is_empty(),
        "{}\n\nthe whole run:\n{log}",
        bad.join("\n")
    );
}
