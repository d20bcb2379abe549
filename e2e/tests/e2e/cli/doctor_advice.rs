//! `relay doctor` tells the truth in the person's words: a native install relay pins is
//! `ok` with a note, an empty token file's fix says to paste the token from `claude
//! setup-token`, a missing `claude` is a warning with how to install it, and its probe
//! terminals are purged when done, never listed (docs/cli.md#relay-doctor, issue 26 item 7).

use relay_e2e::daemon::{base_settings, doctor_check, Relay, TOKEN_SETTING};
use serde_json::{json, Value};

fn doctor(r: &Relay) -> (i32, Value) {
    let out = r.cli(&["doctor", "--json"]);
    let v: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", out.stdout, out.stderr));
    (out.status, v)
}

fn text(check: &Value, key: &str) -> String {
    check[key].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_pinned_native_install_is_ok_with_a_note_and_the_probes_leave_no_terminal() {
    // `~/.local/bin/claude` (the instance's stand-in, where the native installer puts
    // Claude Code) under a project at the home folder, which sessions can write.
    let mut s = base_settings(Some(TOKEN_SETTING));
    s["projects"].as_array_mut().unwrap().push(json!(
        {"id": "home", "path": "~", "allowed_templates": ["*"], "allow_home_directory": true}
    ));
    let r = Relay::start(s);
    r.write_token(&format!("sk-ant-oat01-{}", relay_e2e::random_hex(40)));
    let (_, v) = doctor(&r);
    let space = doctor_check(&v, "free_space");
    assert_eq!(space["status"], "ok", "{space}");
    assert!(
        text(&space, "detail").starts_with(&format!("config dir {}: ", r.config.display())),
        "{space}"
    );
    let program = doctor_check(&v, "claude_program");
    assert_eq!(program["status"], "ok", "{program}");
    let detail = text(&program, "detail");
    assert!(
        detail.contains(&format!(
            "note: its folder {} lies in {}",
            r.home.join(".local/bin").display(),
            r.home.display()
        )) && detail.contains("relay pins it read-only in every sandbox"),
        "{program}"
    );
    // The canary ran, and neither it nor anything else doctor launched is listed.
    let canary = doctor_check(&v, "canary");
    assert_eq!(canary["status"], "ok", "{canary}");
    let network = doctor_check(&v, "network");
    assert_eq!(network["status"], "ok", "{network}");
    let list = r.cli_json(&["terminal", "list"]);
    assert_eq!(list["terminals"], json!([]), "{list}");
    let purged: Vec<Value> = r
        .all_events()
        .into_iter()
        .filter(|e| e["name"] == "session.purged" && e["reason"] == "doctor_probe")
        .collect();
    assert_eq!(purged.len(), 1, "{purged:?}");
    let id = purged[0]["session_id"].as_str().unwrap();
    assert!(
        !r.tmp.join(format!("relay-{id}")).exists(),
        "the probe's temp folder is left"
    );
}

#[test]
fn an_empty_token_file_and_a_missing_claude_say_the_next_step() {
    let mut s = base_settings(Some(TOKEN_SETTING));
    s["claude_path"] = json!("/nowhere/claude");
    let r = Relay::start(s);
    r.write_token("");
    let (_, v) = doctor(&r);
    let token = doctor_check(&v, "token_file");
    assert_eq!(token["status"], "fail", "{token}");
    assert!(
        text(&token, "fix").starts_with("paste the token from `claude setup-token` into the file"),
        "{token}"
    );
    let program = doctor_check(&v, "claude_program");
    assert_eq!(program["status"], "warn", "{program}");
    assert!(
        text(&program, "detail").starts_with("/nowhere/claude: not found"),
        "{program}"
    );
    assert!(
        text(&program, "fix").starts_with("install Claude Code"),
        "{program}"
    );

    // No token set at all: the missing program is still a warning, not skipped.
    let mut s = base_settings(None);
    s["claude_path"] = json!("/nowhere/claude");
    r.write_settings(&s);
    let (_, v) = doctor(&r);
    let program = doctor_check(&v, "claude_program");
    assert_eq!(program["status"], "warn", "{program}");
    assert!(
        text(&program, "fix").starts_with("install Claude Code"),
        "{program}"
    );
    let token = doctor_check(&v, "token_file");
    assert!(
        text(&token, "fix").contains("paste the token it prints"),
        "{token}"
    );
    // The text form puts the fix under the warning.
    let out = r.cli(&["doctor"]);
    assert!(
        out.stdout
            .lines()
            .any(|l| l.trim_start().starts_with("fix: install Claude Code")),
        "{}",
        out.stdout
    );
}

/// A template on the host's network is named as not isolated (issue 23), in the text a
/// person reads too, with what to change.
#[test]
fn a_template_on_the_hosts_network_is_named_as_not_isolated() {
    let mut s = base_settings(None);
    s["terminal_templates"][1]["network"] = json!("host");
    let r = Relay::start(s);
    let (_, v) = doctor(&r);
    let network = doctor_check(&v, "network");
    assert_eq!(network["status"], "warn", "{network}");
    assert!(
        text(&network, "detail").starts_with("not isolated: shell runs on the host's network"),
        "{network}"
    );
    let out = r.cli(&["doctor"]);
    assert!(
        out.stdout
            .contains("not isolated: shell runs on the host's network")
            && out.stdout.contains("remove \"network\": \"host\""),
        "{}",
        out.stdout
    );
}
