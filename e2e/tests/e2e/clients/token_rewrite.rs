//! A token rewritten while `relay sandbox claude-code` is attached puts the run to
//! sleep, never deletes it: the real Claude Code ends saying why, the person's terminal
//! gets its modes back, the run's conversation is kept, and one command continues it on
//! the new token (docs/cli.md#relay-sandbox).

use std::time::Duration;

use relay_e2e::daemon::{Relay, TOKEN_SETTING};
use relay_e2e::fakeapi::FakeApi;
use relay_e2e::pty::Pty;
use serde_json::{json, Value};

use super::real_claude::claude_code;
use super::real_turns::{assert_every_bearer_is, fake_oauth_token, settings};

/// What Claude Code shows once it waits for work.
const READY: &str = "shift+tab to cycle";
/// Terminal modes a killed tool left on, turned off by relay (the attach's LEAVE_SCREEN).
const MODES_OFF: &str = "\x1b[?2004l";

/// The terminals as listed, the one of `id`.
fn listed(r: &Relay, id: &str) -> Value {
    let list = r.cli_json(&["terminal", "list"]);
    list["terminals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no terminal {id} in {list}"))
}

/// The user texts of every Messages request the stand-in got after the first `skip`.
fn user_texts(api: &FakeApi, skip: usize) -> Vec<String> {
    api.messages()
        .iter()
        .skip(skip)
        .flat_map(|q| q["user_texts"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t.as_str().map(str::to_string))
        .collect()
}

#[test]
fn rewriting_the_token_during_relay_sandbox_claude_code_keeps_the_conversation_for_relay_terminal_resume(
) {
    let Some(claude) = claude_code() else { return };
    let mut r = Relay::prepare(None, false);
    let api = FakeApi::start(
        &r.root,
        &json!({"turns": [
            {"stream": true, "text": "first-answer-noted"},
            {"stream": true, "text": "second-answer-pelican"},
        ]}),
    );
    let first = fake_oauth_token();
    r.write_token(&first);
    r.write_settings(&settings(&claude, &api, Some(TOKEN_SETTING)));
    r.launch_daemon();

    let mut pty = Pty::spawn(r.cli_command(&["sandbox", "claude-code"]), 120, 35);
    pty.wait_for_within(READY, Duration::from_secs(90));
    pty.write(b"remember-pelican");
    pty.wait_for("remember-pelican");
    pty.write(b"\r");
    pty.wait_for_within("first-answer-noted", Duration::from_secs(60));
    let id = r.cli_json(&["terminal", "list"])["terminals"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let before = api.messages().len();

    // The person saves a new token: the run ends, saying why and what to do.
    let second = fake_oauth_token();
    r.write_token(&second);
    let status = relay_e2e::wait::child_within(&mut pty.child, relay_e2e::WAIT)
        .expect("relay sandbox never returned");
    let screen = pty.screen();
    let said = format!("relay terminal resume --id {id}");
    assert!(
        screen.contains("its Claude token was replaced") && screen.contains(&said),
        "no word of why or what next (exit {status:?}):\n{screen}"
    );
    let tail = &screen[screen.rfind("first-answer-noted").unwrap()..];
    assert!(
        tail.contains(MODES_OFF),
        "Claude's modes left on:\n{tail:?}"
    );
    // Kept, with its conversation.
    let t = listed(&r, &id);
    assert_eq!(t["exit_reason"], "claude_token_replaced", "{t}");
    let projects = r.tmp.join(format!("relay-{id}/claude-config/projects"));
    let transcripts: Vec<_> = walk_jsonl(&projects);
    assert!(!transcripts.is_empty(), "no transcript in {projects:?}");

    // One command continues it, on the new token.
    let mut again = Pty::spawn(r.cli_command(&["terminal", "resume", "--id", &id]), 120, 35);
    again.wait_for_within(READY, Duration::from_secs(90));
    again.write(b"which-word");
    again.wait_for("which-word");
    again.write(b"\r");
    again.wait_for_within("second-answer-pelican", Duration::from_secs(60));
    let after: Vec<Value> = api.messages().into_iter().skip(before).collect();
    assert_every_bearer_is(&api, &after, &second);
    let texts = user_texts(&api, before);
    assert!(
        texts.iter().any(|t| t.contains("remember-pelican"))
            && texts.iter().any(|t| t.contains("which-word")),
        "the resumed turn did not carry the conversation: {texts:?}"
    );
    // Claude's own exit: its resume hint becomes relay's, and the run stays.
    again.write(b"\x03");
    again.wait_for("again to exit");
    again.write(b"\x03");
    relay_e2e::wait::child_within(&mut again.child, relay_e2e::WAIT).expect("no exit");
    let screen = again.screen();
    assert!(
        screen.contains(&said) && !screen.contains("claude --resume"),
        "{screen}"
    );
    assert_eq!(listed(&r, &id)["state"], "exited");
    assert!(!walk_jsonl(&projects).is_empty());
}

/// The `.jsonl` files one folder down in `dir`.
fn walk_jsonl(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
        .map(|f| f.path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect()
}
