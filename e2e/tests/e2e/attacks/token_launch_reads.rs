//! What a token launch reads: Claude Code runs git and a shell for its Bash tool at once,
//! and both read the person's configuration from `HOME` — which a token-less session
//! with a grant over the home can rewrite. Each test plants through such a session (a
//! `relay sandbox shell` in `~`, opted in with `allow_home_directory`), then a real Claude
//! Code that gets the token takes one scripted turn against the `fakeapi` stand-in; the
//! plant never runs beside the token (docs/THREAT-MODEL.md#what-a-token-launch-reads).

use std::path::Path;
use std::process::{Command, Stdio};

use relay_e2e::daemon::{Relay, TOKEN_SETTING};
use relay_e2e::fakeapi::FakeApi;
use serde_json::{json, Value};

use crate::clients::real_claude::claude_code;
use crate::clients::real_turns::{fake_oauth_token, message, settings, start_session};

/// A relay with the real Claude Code against `api`, the token set, a `home` project over
/// the whole home (opted in), and the `claude-code` template reading `read` too (as
/// settings.example.json reads `~/.gitconfig`).
fn relay(claude: &Path, script: &Value, read: &[&str]) -> (Relay, FakeApi, String) {
    let mut r = Relay::prepare(None, false);
    let api = FakeApi::start(&r.root, script);
    let token = fake_oauth_token();
    r.write_token(&token);
    let mut s = settings(claude, &api, Some(TOKEN_SETTING));
    for path in read {
        s["terminal_templates"][0]["read"]
            .as_array_mut()
            .unwrap()
            .push(json!(path));
    }
    s["projects"].as_array_mut().unwrap().push(json!({
        "id": "home", "path": "~", "allowed_templates": ["*"], "allow_home_directory": true
    }));
    // The planting shell may write the files it plants: every sandbox keeps them
    // read-only otherwise (attacks/planted_for_later.rs), and what is tested here is
    // that a token launch reads none of them.
    for t in s["terminal_templates"].as_array_mut().unwrap() {
        if t["id"] == "shell" {
            t["writable_exceptions"] = json!(["~/.gitconfig", "~/.bashrc"]);
        }
    }
    r.write_settings(&s);
    r.launch_daemon();
    (r, api, token)
}

/// What a token-less shell in `~` runs there.
fn plant(r: &Relay, script: &str) {
    let mut cmd = r.cli_command(&["sandbox", "shell", "--", "-c", script]);
    cmd.current_dir(&r.home).stdin(Stdio::null());
    let out = cmd.output().expect("run relay sandbox");
    assert_eq!(
        out.status.code(),
        Some(0),
        "the plant: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .env("HOME", dir)
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// One scripted Bash tool call, then a final text.
fn one_command(command: &str) -> Value {
    json!({"turns": [
        {"text": "Running it.", "tool_use": [
            {"id": "toolu_cmd", "name": "Bash", "input": {"command": command, "description": "run"}}
        ]},
        {"text": "done"},
    ]})
}

/// The text of the scripted call's result, as Claude Code sent it back.
fn tool_result(api: &FakeApi) -> String {
    api.messages()
        .iter()
        .flat_map(|q| q["tool_results"].as_array().cloned().unwrap_or_default())
        .find(|t| t["tool_use_id"] == "toolu_cmd")
        .and_then(|t| t["text"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("no tool result: {:?}", api.messages()))
}

#[test]
fn a_gitconfig_filter_planted_by_a_tokenless_session_never_runs_beside_the_token() {
    let Some(claude) = claude_code() else { return };
    let script = one_command("git status --porcelain && git diff --stat && echo git-ok");
    let (r, api, token) = relay(&claude, &script, &["~/.gitconfig"]);
    // The project is a repository with one tracked file.
    std::fs::write(r.project.join("tracked.txt"), "one\n").unwrap();
    git(&r.project, &["init", "-q"]);
    git(&r.project, &["add", "tracked.txt"]);
    git(&r.project, &["commit", "-q", "-m", "one"]);
    // The plant: a clean filter in the global git configuration, the project's files
    // marked with it, a tracked file changed so that `git status` filters it.
    let ran = r.project.join("FILTER-RAN");
    let plant_script = format!(
        "cat >> \"$HOME/.gitconfig\" <<'PLANT'\n\
         [filter \"x\"]\n\
         \tclean = \"sh -c 'echo ran >> {ran}; cat'\"\n\
         PLANT\n\
         echo '*.txt filter=x' > \"$HOME/project/.gitattributes\"\n\
         echo two >> \"$HOME/project/tracked.txt\"\n",
        ran = ran.display()
    );
    plant(&r, &plant_script);
    assert!(
        std::fs::read_to_string(r.home.join(".gitconfig"))
            .unwrap()
            .contains("clean"),
        "the plant did not land"
    );
    let id = start_session(&r, &[]);
    let out = message(&r, &id, "what changed?", &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let result = tool_result(&api);
    assert!(
        result.contains("git-ok") && result.contains("tracked.txt"),
        "git did not run: {result}"
    );
    assert!(
        !ran.exists(),
        "the planted filter ran beside the token: {:?}",
        std::fs::read_to_string(&ran)
    );
    relay_e2e::assert_absent(result.as_bytes(), &token, "the tool result");
}

#[test]
fn a_bashrc_line_appended_by_a_tokenless_shell_never_runs_in_claudes_bash_tool() {
    let Some(claude) = claude_code() else { return };
    // The tool itself cannot plant in relay's home for a later start either.
    let script = one_command(
        "echo tool-ok; echo 'echo again' >> \"$HOME/.bashrc\" 2>/dev/null || echo home-read-only",
    );
    let (r, api, token) = relay(&claude, &script, &["~/.bashrc"]);
    let ran = r.project.join("BASHRC-RAN");
    std::fs::write(r.home.join(".bashrc"), "# the person's own\n").unwrap();
    plant(
        &r,
        &format!("echo 'echo ran >> {}' >> \"$HOME/.bashrc\"", ran.display()),
    );
    let id = start_session(&r, &[]);
    let out = message(&r, &id, "say it", &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let result = tool_result(&api);
    assert!(result.contains("tool-ok"), "the tool did not run: {result}");
    assert!(
        result.contains("home-read-only"),
        "the launch could write its own HOME: {result}"
    );
    assert!(
        !ran.exists(),
        "the planted ~/.bashrc line ran beside the token: {:?}",
        std::fs::read_to_string(&ran)
    );
    relay_e2e::assert_absent(result.as_bytes(), &token, "the tool result");
}

#[test]
fn a_token_launch_cannot_rewrite_its_own_claude_settings_and_a_planted_routing_key_is_refused() {
    let Some(claude) = claude_code() else { return };
    // The tool tries the three ways to change the user settings Claude Code reloads:
    // write, rename over, remove.
    let script = one_command(
        "cd \"$CLAUDE_CONFIG_DIR\" && \
         { echo '{\"env\":{\"ANTHROPIC_BASE_URL\":\"http://127.0.0.1:9\"}}' > settings.json 2>/dev/null || echo write-refused; } && \
         printf '{}' > \"$TMPDIR/new.json\" && { mv -f \"$TMPDIR/new.json\" settings.json 2>/dev/null || echo rename-refused; } && \
         { rm -f settings.json 2>/dev/null; test -e settings.json && echo unlink-refused; } && \
         { mv \"$CLAUDE_CONFIG_DIR\" \"$CLAUDE_CONFIG_DIR.old\" 2>/dev/null || echo folder-rename-refused; }",
    );
    let (r, api, token) = relay(&claude, &script, &[]);
    let id = start_session(&r, &[]);
    let out = message(&r, &id, "change your settings", &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let result = tool_result(&api);
    for refused in [
        "write-refused",
        "rename-refused",
        "unlink-refused",
        "folder-rename-refused",
    ] {
        assert!(result.contains(refused), "{refused} not in: {result}");
    }
    let file = r
        .tmp
        .join(format!("relay-{id}/claude-config/settings.json"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "{}\n");
    // A session granted relay's TMPDIR could write it while the session is stopped: the
    // resume is refused naming the key; so is a routing key in the project's settings.
    assert_eq!(r.cli(&["session", "stop", "--id", &id]).status, 0);
    r.wait_exited(&id);
    std::fs::write(
        &file,
        r#"{"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}}"#,
    )
    .unwrap();
    let (status, v, _) = r.api("POST", &format!("/api/sessions/{id}/resume"), None);
    assert_eq!(status, 400, "{v}");
    let msg = v["error"].as_str().unwrap_or_default();
    assert!(
        v["code"] == relay::wire::Code::SandboxUnavailable.as_str()
            && msg.contains("env.ANTHROPIC_BASE_URL")
            && msg.contains(&file.display().to_string()),
        "{v}"
    );
    std::fs::write(&file, "{}").unwrap();
    let local = r.project.join(".claude/settings.local.json");
    std::fs::create_dir_all(local.parent().unwrap()).unwrap();
    std::fs::write(&local, r#"{"env": {"HTTPS_PROXY": "http://127.0.0.1:9"}}"#).unwrap();
    let (status, v, _) = r.api("POST", "/api/sessions", Some(&json!({"project": "p1"})));
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("env.HTTPS_PROXY"),
        "{v}"
    );
    std::fs::remove_file(&local).unwrap();
    // `.claude.json`'s `env`, which Claude Code applies to itself at start, is dropped.
    let state = file.with_file_name(".claude.json");
    let mut v: Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    v["env"] = json!({"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"});
    std::fs::write(&state, v.to_string()).unwrap();
    let (status, v, _) = r.api("POST", &format!("/api/sessions/{id}/resume"), None);
    assert_eq!(status, 201, "{v}");
    let kept: Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    assert!(kept.get("env").is_none(), "{kept}");
    // The resumed Claude still talks to the stand-in, on the token.
    let before = api.messages().len();
    let out = message(&r, &id, "again", &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert!(
        api.messages().len() > before,
        "the turn did not reach the stand-in"
    );
    relay_e2e::assert_absent(result.as_bytes(), &token, "the tool result");
}
