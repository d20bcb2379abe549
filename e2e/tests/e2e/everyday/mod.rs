//! Everyday work in relay's sandbox, as a developer's day has it: the person's own
//! toolchains under `~` and package installs with their caches, in a shell and in Claude's
//! own tools (docs/settings.md#toolchains, docs/settings.md#caches).

mod caches;
mod credentials;
mod git_by_claude;
mod litter;
mod tasks;
mod toolchains;

use std::path::Path;
use std::process::Stdio;

use serde_json::{json, Value};

use relay_e2e::daemon::{base_settings, Relay, TOKEN_SETTING};
use relay_e2e::fakeapi::FakeApi;
use relay_e2e::registry::Registry;

use crate::clients::real_claude::claude_code;
use crate::clients::real_turns::{fake_oauth_token, message, settings, start_session};

/// The relay `r`, prepared, its daemon started with the token set and the pinned
/// Claude Code (when this machine has it) scripted to run `command` in its Bash tool as
/// the tool call `tool_id`, then to end the turn; with it the API stand-in, when Claude
/// Code is there. Every sandbox reaches `registry` through its egress list.
fn with_claude_running(
    mut r: Relay,
    registry: &Registry,
    tool_id: &str,
    command: &str,
) -> (Relay, Option<FakeApi>) {
    let claude = claude_code();
    let script = json!({"turns": [
        {"text": "Working.", "tool_use": [
            {"id": tool_id, "name": "Bash", "input": {"command": command, "description": "work"}},
        ]},
        {"text": "done"},
    ]});
    let api = FakeApi::start(&r.root, &script);
    r.write_token(&fake_oauth_token());
    let mut s = match &claude {
        Some(c) => settings(c, &api, Some(TOKEN_SETTING)),
        None => base_settings(Some(TOKEN_SETTING)),
    };
    s["session_sandbox"] = json!({"egress": [registry.egress()]});
    r.write_settings(&s);
    r.launch_daemon();
    (r, claude.map(|_| api))
}

/// One turn of a headless session in the project that got the token: the result of
/// its Bash tool call `tool_id`, as Claude Code sent it to the stand-in.
fn claudes_tool_result(r: &Relay, api: &FakeApi, tool_id: &str) -> Value {
    let id = start_session(r, &[]);
    let reply = message(r, &id, "do the work", &[]);
    assert_eq!(reply.status, 0, "{}", reply.stderr);
    api.messages()
        .iter()
        .flat_map(|q| q["tool_results"].as_array().cloned().unwrap_or_default())
        .find(|t| t["tool_use_id"] == tool_id)
        .expect("the tool call's result")
}

/// `relay sandbox shell -- -c SCRIPT` in `dir`: what it printed on both streams, and on
/// stdout alone.
pub(super) fn shell(r: &Relay, dir: &Path, script: &str) -> (String, String) {
    let out = r
        .cli_command(&["sandbox", "shell", "--", "-c", script])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (
        stdout.clone() + &String::from_utf8_lossy(&out.stderr),
        stdout,
    )
}

/// The names in `dir`, sorted; none when it cannot be read.
pub(super) fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}
