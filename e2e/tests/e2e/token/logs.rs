//! The daemon's and the host's logs (`tracing`, src/logging.rs): at debug level a token
//! launch, a turn, a logged-in `claude-code` terminal and a stop leave lines in
//! `<config>/relay.log` and `<config>/sessions/host.log`, and neither holds the token
//! in any form (docs/architecture.md#logs, docs/THREAT-MODEL.md).

use relay_e2e::daemon::{base_settings, Relay, TOKEN_SETTING};
use relay_e2e::{assert_absent, fake_token, token_forms};

#[test]
fn a_token_launch_at_debug_level_leaves_no_token_in_the_log_files() {
    let mut r = Relay::prepare(None, false);
    r.log_level = Some("debug".into());
    r.write_settings(&base_settings(Some(TOKEN_SETTING)));
    let token = fake_token();
    r.write_token(&token);
    r.launch_daemon();

    let s = r.cli_json(&["session", "start", "--project", "p1"]);
    let id = s["id"].as_str().unwrap().to_string();
    assert_eq!(
        s["token_fingerprint"].as_str().map(str::len),
        Some(12),
        "{s}"
    );
    assert_eq!(r.turn(&id, "hello"), "echo: hello");
    let t = r.auth_status_terminal("claude-code");
    assert_eq!(t["token_passed"], true, "{t}");
    r.cli_json(&["session", "stop", "--id", &id]);
    r.stop();

    let daemon_log = std::fs::read(r.config.join("relay.log")).expect("relay.log");
    let host_log = std::fs::read(r.config.join("sessions/host.log")).expect("host.log");
    let daemon_text = String::from_utf8_lossy(&daemon_log);
    let host_text = String::from_utf8_lossy(&host_log);
    // The debug lines are there: the launch was logged, the token as a length only.
    let secret = format!("Secret({} bytes)", token.len());
    assert!(
        daemon_text.contains("DEBUG") && daemon_text.contains(&secret),
        "relay.log:\n{daemon_text}"
    );
    assert!(
        host_text.contains("DEBUG") && host_text.contains(&secret),
        "host.log:\n{host_text}"
    );
    for (place, bytes) in [("relay.log", &daemon_log), ("host.log", &host_log)] {
        for (what, form) in token_forms(&token) {
            assert_absent(bytes, &form, &format!("{place} ({what})"));
        }
    }
    // stderr carries the same lines up to info, and no token either.
    assert_absent(&r.output(), &token, "the daemon's output");
}
