//! Sessions that do real work: the pinned real Claude Code takes turns under relay's
//! real sandbox against `fakeapi`, the Anthropic API stand-in, and every test asserts on
//! what the stand-in recorded — the SHA-256 of each bearer it was sent, the OAuth beta,
//! the tool results, the conversation. `claude auth status` can only say that *some*
//! token is present; these show that the token on fd 5 is the one that reaches the API.

use std::path::Path;
use std::time::Duration;

use std::process::Stdio;

use relay_e2e::daemon::{base_settings, Cli, Relay, TOKEN_SETTING};
use relay_e2e::fakeapi::FakeApi;
use relay_e2e::pty::Pty;
use relay_e2e::tmpfs::Tmpfs;
use relay_e2e::{assert_absent, random_hex, sha256_hex, wait, WAIT};
use serde_json::{json, Value};

use crate::clients::real_claude::claude_code;

pub(crate) fn fake_oauth_token() -> String {
    format!("sk-ant-oat01-{}", random_hex(40))
}

/// Base settings with the real Claude Code as both `claude_path` (sessions) and the
/// `claude-code` template's command, sent to `api`; a failing API call ends a turn at
/// once (`CLAUDE_CODE_MAX_RETRIES=0`).
pub(crate) fn settings(claude: &Path, api: &FakeApi, token: Option<&str>) -> Value {
    let mut s = base_settings(token);
    s["claude_path"] = json!(claude);
    s["terminal_templates"][0]["command"] = json!(claude);
    s["terminal_templates"][0]["env"] =
        json!({"ANTHROPIC_BASE_URL": api.url(), "CLAUDE_CODE_MAX_RETRIES": "0"});
    s
}

/// A relay whose settings point Claude Code at a `fakeapi` started with `script`, and
/// the token file written (the setting set when `with_token`).
pub(crate) fn relay_with_api(
    claude: &Path,
    script: Value,
    with_token: bool,
) -> (Relay, FakeApi, String) {
    let mut r = Relay::prepare(None, false);
    let api = FakeApi::start(&r.root, &script);
    let token = fake_oauth_token();
    r.write_token(&token);
    r.write_settings(&settings(claude, &api, with_token.then_some(TOKEN_SETTING)));
    r.launch_daemon();
    (r, api, token)
}

pub(crate) fn start_session(r: &Relay, extra: &[&str]) -> String {
    let mut args = vec!["session", "start", "--project", "p1"];
    args.extend_from_slice(extra);
    let v = r.cli_json(&args);
    v["id"].as_str().expect("session id").to_string()
}

/// `relay session message --id ID TEXT` (plus `flags`), bounded by [`WAIT`]: relay
/// has no turn timeout of its own, and a turn that never answers must fail the test.
pub(crate) fn message(r: &Relay, id: &str, text: &str, flags: &[&str]) -> Cli {
    use std::io::Read;
    let mut args = vec!["session", "message", "--id", id];
    args.extend_from_slice(flags);
    args.push(text);
    let mut cmd = r.cli_command(&args);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run relay");
    let pipes = [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    ];
    let readers: Vec<_> = pipes
        .into_iter()
        .map(|p| {
            std::thread::spawn(move || {
                let mut s = String::new();
                if let Some(mut p) = p {
                    let _ = p.read_to_string(&mut s);
                }
                s
            })
        })
        .collect();
    let Some(status) = wait::child_within(&mut child, WAIT) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("relay session message {text:?} gave no answer within {WAIT:?}");
    };
    let mut out = readers.into_iter().map(|t| t.join().unwrap_or_default());
    Cli {
        status: status.code().unwrap_or(-1),
        stdout: out.next().unwrap_or_default(),
        stderr: out.next().unwrap_or_default(),
    }
}

pub(crate) fn session_entry(r: &Relay, id: &str) -> Value {
    let list = r.cli_json(&["session", "list"]);
    list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no session {id} in {list}"))
}

/// Every Messages request carried the token's bearer and the OAuth beta.
pub(crate) fn assert_every_bearer_is(api: &FakeApi, requests: &[Value], token: &str) {
    assert!(
        !requests.is_empty(),
        "the stand-in got no Messages request: {:?}",
        api.records()
    );
    let want = sha256_hex(token.as_bytes());
    for q in requests {
        assert_eq!(
            q["bearer_sha256"], want,
            "a request without the token's bearer: {q}"
        );
        assert!(
            q["anthropic_beta"]
                .as_str()
                .is_some_and(|b| b.split(',').any(|x| x == "oauth-2025-04-20")),
            "no OAuth beta: {q}"
        );
    }
}

/// The token in nothing relay or the stand-in wrote but the token file.
/// Every request's bearer is the token and it went nowhere else: not in the reply, the
/// tool results the stand-in recorded, relay's output, events or files.
pub(crate) fn assert_the_token_went_to_the_stand_in_alone(
    r: &Relay,
    api: &FakeApi,
    requests: &[Value],
    token: &str,
    reply: &str,
) {
    assert_every_bearer_is(api, requests, token);
    let record = std::fs::read(&api.record).unwrap();
    assert_token_nowhere(
        r,
        token,
        &[
            ("the reply", reply.as_bytes()),
            ("the tool results", &record),
        ],
    );
}

pub(crate) fn assert_token_nowhere(r: &Relay, token: &str, extra: &[(&str, &[u8])]) {
    assert_absent(&r.output(), token, "the daemon's output");
    let events = serde_json::to_vec(&r.all_events()).unwrap();
    assert_absent(&events, token, "the events");
    for (p, bytes) in r.all_files(&[&r.token_path()]) {
        assert_absent(&bytes, token, &p.display().to_string());
    }
    for (place, bytes) in extra {
        assert_absent(bytes, token, place);
    }
}

#[test]
fn real_turn_sends_the_token_files_bearer_and_its_reply_reaches_relay_session_message() {
    let Some(claude) = claude_code() else { return };
    let reply = format!("pong-{}", random_hex(4));
    let (r, api, token) = relay_with_api(&claude, json!({"turns": [{"text": reply}]}), true);
    let id = start_session(&r, &[]);
    let out = message(&r, &id, "ping", &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, format!("{reply}\n"));
    let requests = api.messages();
    assert_every_bearer_is(&api, &requests, &token);
    assert!(
        requests.iter().any(|q| q["user_texts"] == json!(["ping"])),
        "{requests:?}"
    );
    // What Claude Code said about itself, and what relay asked of it.
    let e = session_entry(&r, &id);
    assert_eq!(e["permission_mode"], "bypassPermissions", "{e}");
    assert_eq!(e["claude"]["permission_mode"], "bypassPermissions", "{e}");
    assert_eq!(e["claude"]["version"], "2.1.332", "{e}");
    assert_eq!(e["claude"]["api_key_source"], "none", "{e}");
    assert!(
        e["claude"]["model"].as_str().is_some_and(|m| !m.is_empty()),
        "{e}"
    );
    assert_eq!(e["claude"]["model"], requests[0]["model"], "{e}");
    // The launch names where the token goes.
    let launch =
        r.wait_event(|ev| ev["name"] == "session.launch" && ev["session_id"] == id.as_str());
    assert_eq!(
        launch["routing"],
        json!({
            // Where the token goes, and the egress proxy's variables relay sets.
            "names": ["ALL_PROXY", "ANTHROPIC_BASE_URL", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY",
                      "all_proxy", "http_proxy", "https_proxy", "no_proxy"],
            "anthropic_base_url_host": format!("127.0.0.1:{}", api.port)
        }),
        "{launch}"
    );
    let row = r
        .audit_rows()
        .into_iter()
        .find(|a| a["action"] == "session_launch" && a["session_id"] == id.as_str())
        .unwrap();
    assert_eq!(row["routing"], launch["routing"], "{row}");
    let record = std::fs::read(&api.record).unwrap();
    assert_token_nowhere(
        &r,
        &token,
        &[
            ("the reply", out.stdout.as_bytes()),
            ("the stand-in's record", &record),
        ],
    );
}

#[test]
fn real_tool_turn_writes_in_the_session_directory_and_cannot_read_the_token_file() {
    let Some(claude) = claude_code() else { return };
    let mut r = Relay::prepare(None, false);
    let token_path = r.token_path();
    let marker = format!("made-by-claude-{}", random_hex(4));
    let script = json!({"turns": [
        {"text": "I will make the file and look at the token.", "tool_use": [
            {"id": "toolu_write", "name": "Bash", "input": {"command": format!("echo {marker} > hello.txt && echo wrote", ), "description": "write a file"}},
            {"id": "toolu_read", "name": "Bash", "input": {"command": format!("cat {}", token_path.display()), "description": "read the token"}},
        ]},
        {"text": "finished the work"},
    ]});
    let api = FakeApi::start(&r.root, &script);
    let token = fake_oauth_token();
    r.write_token(&token);
    r.write_settings(&settings(&claude, &api, Some(TOKEN_SETTING)));
    r.launch_daemon();
    let id = start_session(&r, &[]);
    let out = message(&r, &id, "make hello.txt, then show me the token file", &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "finished the work\n");

    // The file was made by the sandboxed tool, in the session directory, on the host.
    let made = std::fs::read_to_string(r.project.join("hello.txt")).unwrap_or_else(|e| {
        panic!(
            "hello.txt was not made ({e}); stand-in saw {:?}",
            api.messages()
        )
    });
    assert_eq!(made.trim(), marker);
    let requests = api.messages();
    let results: Vec<Value> = requests
        .last()
        .map(|q| q["tool_results"].as_array().cloned().unwrap_or_default())
        .unwrap_or_default();
    let by_id = |tid: &str| {
        results
            .iter()
            .find(|t| t["tool_use_id"] == tid)
            .cloned()
            .unwrap_or_else(|| panic!("no tool_result {tid} in {results:?}"))
    };
    let wrote = by_id("toolu_write");
    assert_eq!(wrote["is_error"], false, "{wrote}");
    assert!(wrote["text"].as_str().unwrap().contains("wrote"), "{wrote}");
    let read = by_id("toolu_read");
    assert_eq!(
        read["is_error"], true,
        "the token read was not refused: {read}"
    );
    assert!(
        read["text"].as_str().unwrap().contains("Permission denied"),
        "{read}"
    );
    assert_the_token_went_to_the_stand_in_alone(&r, &api, &requests, &token, &out.stdout);
}

#[test]
fn real_stream_shows_the_tool_call_before_the_final_text() {
    let Some(claude) = claude_code() else { return };
    let script = |word: &str| {
        json!({"turns": [
            {"text": "Checking.", "tool_use": [{"id": "toolu_echo", "name": "Bash", "input": {"command": format!("echo {word}"), "description": "echo"}}]},
            {"text": format!("the final text {word}")},
        ]})
    };
    let (r, api, token) = relay_with_api(&claude, script("one"), true);
    let id = start_session(&r, &[]);
    let out = message(&r, &id, "stream this", &["--stream"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    let tool = lines
        .iter()
        .position(|l| l.starts_with("[tool] Bash ") && l.contains("echo one"))
        .unwrap_or_else(|| panic!("no tool line:\n{}", out.stdout));
    let result = lines
        .iter()
        .position(|l| *l == "[tool result] one")
        .unwrap_or_else(|| panic!("no tool result line:\n{}", out.stdout));
    let last = lines
        .iter()
        .position(|l| l.contains("the final text one"))
        .unwrap_or_else(|| panic!("no final text:\n{}", out.stdout));
    assert!(tool < result && result < last, "{}", out.stdout);
    assert!(
        lines[..tool].iter().any(|l| l.contains("Checking.")),
        "{}",
        out.stdout
    );

    // --json: one event per line, in the order they happened.
    api.set_script(&script("two"));
    let out = message(&r, &id, "stream again", &["--stream", "--json"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let events: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let at = |k: &str| {
        kinds
            .iter()
            .position(|x| *x == k)
            .unwrap_or_else(|| panic!("no {k} in {kinds:?}"))
    };
    assert_eq!(kinds[0], "init", "{kinds:?}");
    assert!(at("tool_use") < at("tool_result"), "{kinds:?}");
    assert_eq!(*kinds.last().unwrap(), "result", "{kinds:?}");
    let text: String = events
        .iter()
        .skip(at("tool_result"))
        .filter(|e| e["type"] == "text")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "the final text two");
    assert_eq!(events[at("tool_use")]["input"]["command"], "echo two");
    assert_every_bearer_is(&api, &api.messages(), &token);
}

#[test]
fn real_api_401_fails_the_turn_with_its_status_and_the_next_turn_works() {
    let Some(claude) = claude_code() else { return };
    let script =
        json!({"turns": [{"error": {"status": 401, "message": "fakeapi: token rejected"}}]});
    let (r, api, token) = relay_with_api(&claude, script, true);
    let id = start_session(&r, &[]);
    let out = message(&r, &id, "hello", &[]);
    assert_eq!(out.status, 1, "{}", out.stdout);
    assert_eq!(out.stdout, "");
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr
            .starts_with("error: the turn failed (API status 401): "),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("fakeapi: token rejected"),
        "{}",
        out.stderr
    );
    assert!(
        api.messages().iter().all(|q| q["status"] == 401),
        "{:?}",
        api.messages()
    );
    let pid = session_entry(&r, &id)["root_pid"].clone();

    // The stand-in answers again: the same Claude Code takes the next turn.
    api.set_script(&json!({"turns": [{"text": "back to work"}]}));
    let out = message(&r, &id, "again", &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "back to work\n");
    let e = session_entry(&r, &id);
    assert_eq!(e["state"], "running");
    assert_eq!(e["root_pid"], pid, "{e}");
    assert_every_bearer_is(&api, &api.messages(), &token);
}

#[test]
fn real_api_429_and_500_fail_the_turn_naming_the_status_and_the_session_goes_on() {
    let Some(claude) = claude_code() else { return };
    let error = |status: u16, message: &str| json!({"turns": [{"error": {"status": status, "message": message}}]});
    let (r, api, token) = relay_with_api(&claude, error(429, "fakeapi: slow down"), true);
    let id = start_session(&r, &[]);
    let pid = session_entry(&r, &id)["root_pid"].clone();
    for (status, said) in [(429, "fakeapi: slow down"), (500, "fakeapi: broken")] {
        api.set_script(&error(status, said));
        let out = message(&r, &id, &format!("turn meeting {status}"), &[]);
        assert_eq!(out.status, 1, "{status}: {}", out.stdout);
        assert_eq!(out.stdout, "", "{status}");
        assert_eq!(out.stderr.lines().count(), 1, "{status}: {}", out.stderr);
        assert!(
            out.stderr
                .starts_with(&format!("error: the turn failed (API status {status}): ")),
            "{}",
            out.stderr
        );
        assert!(out.stderr.contains(said), "{}", out.stderr);
    }
    api.set_script(&json!({"turns": [{"text": "after the errors"}]}));
    let out = message(&r, &id, "again", &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "after the errors\n");
    let e = session_entry(&r, &id);
    assert_eq!(e["state"], "running");
    assert_eq!(e["root_pid"], pid, "{e}");
    assert_every_bearer_is(&api, &api.messages(), &token);
}

#[test]
fn real_rewritten_token_file_reaches_the_next_launch_without_a_restart() {
    let Some(claude) = claude_code() else { return };
    let (r, api, first) = relay_with_api(&claude, json!({"turns": [{"text": "ok"}]}), true);
    let a = start_session(&r, &[]);
    let out = message(&r, &a, "first launch", &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let second = fake_oauth_token();
    r.write_token(&second);
    let b = start_session(&r, &[]);
    let out = message(&r, &b, "second launch", &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let of = |text: &str| -> Vec<Value> {
        api.messages()
            .into_iter()
            .filter(|q| {
                q["user_texts"]
                    .as_array()
                    .is_some_and(|u| u.contains(&json!(text)))
            })
            .collect()
    };
    assert_every_bearer_is(&api, &of("first launch"), &first);
    assert_every_bearer_is(&api, &of("second launch"), &second);
    assert_ne!(sha256_hex(first.as_bytes()), sha256_hex(second.as_bytes()));
}

#[test]
fn real_claude_without_the_token_setting_sends_no_bearer() {
    let Some(claude) = claude_code() else { return };
    let (r, api, token) = relay_with_api(&claude, json!({"turns": [{"text": "reachable"}]}), false);
    let id = start_session(&r, &[]);
    let out = message(&r, &id, "hello", &[]);
    assert_eq!(
        out.status, 1,
        "a turn without a token answered: {}",
        out.stdout
    );
    assert!(out.stderr.contains("Not logged in"), "{}", out.stderr);
    let records = api.records();
    assert!(
        records
            .iter()
            .all(|q| q["bearer_sha256"].is_null() && q["x_api_key_sha256"].is_null()),
        "a credential reached the stand-in: {records:?}"
    );
    // The stand-in was reachable all along: the same launch with the setting gets there.
    r.write_settings(&settings(&claude, &api, Some(TOKEN_SETTING)));
    let id = start_session(&r, &[]);
    let out = message(&r, &id, "hello again", &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "reachable\n");
    assert_every_bearer_is(&api, &api.messages(), &token);
}

#[test]
fn real_resume_after_stop_sends_the_earlier_turns() {
    let Some(claude) = claude_code() else { return };
    let word = format!("pelican-{}", random_hex(4));
    let (r, api, token) = relay_with_api(&claude, json!({"turns": [{"text": "noted"}]}), true);
    let id = start_session(&r, &[]);
    let first = format!("remember the word {word}");
    let out = message(&r, &id, &first, &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let claude_id = session_entry(&r, &id)["claude"]["session_id"].clone();
    assert!(claude_id.is_string(), "no Claude session id");
    let before = api.messages().len();

    r.cli_json(&["session", "stop", "--id", &id]);
    r.cli_json(&["session", "resume", "--id", &id]);
    let out = message(&r, &id, "which word was it?", &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let after = api.messages();
    let resumed = after
        .get(before)
        .unwrap_or_else(|| panic!("no request after resume: {after:?}"));
    let texts = resumed["user_texts"].as_array().unwrap();
    assert!(
        texts.contains(&json!(first)),
        "the earlier turn is not in {resumed}"
    );
    assert!(texts.contains(&json!("which word was it?")), "{resumed}");
    assert!(resumed["messages"].as_u64().unwrap() >= 3, "{resumed}");
    let e = session_entry(&r, &id);
    assert_eq!(e["claude"]["session_id"], claude_id, "{e}");
    // The resume passed Claude Code's own id, not a guess.
    let audit = r.audit_rows();
    assert!(audit.iter().any(|a| a["action"] == "session_resume"
        && a["session_id"] == id.as_str()
        && a["outcome"] == "allowed"));
    assert_every_bearer_is(&api, &after, &token);
}

#[test]
fn real_interactive_claude_code_on_a_pty_sends_the_bearer_and_shows_the_reply() {
    let Some(claude) = claude_code() else { return };
    let reply = format!("pty-pong-{}", random_hex(4));
    // Only the streamed turn takes the scripted reply: Claude Code's start-up probe is
    // a non-streaming request and gets the stand-in's plain `ok`.
    let (r, api, token) = relay_with_api(
        &claude,
        json!({"turns": [{"stream": true, "text": reply}]}),
        true,
    );
    let mut pty = Pty::spawn(r.cli_command(&["sandbox", "claude-code"]), 120, 35);
    // The main prompt's footer (with an API that answers, Claude Code shows its
    // permission mode there).
    pty.wait_for_within("shift+tab to cycle", Duration::from_secs(60));
    // One word: Claude Code draws the words of a line with cursor moves between them.
    pty.write(b"say-the-word");
    pty.wait_for("say-the-word");
    pty.write(b"\r");
    pty.wait_for(&reply);
    let turns: Vec<Value> = api
        .messages()
        .into_iter()
        .filter(|q| q["stream"] == true)
        .collect();
    assert!(
        turns.iter().any(|q| q["user_texts"]
            .as_array()
            .is_some_and(|u| u.contains(&json!("say-the-word")))),
        "{turns:?}"
    );
    assert_every_bearer_is(&api, &api.messages(), &token);
    let screen = pty.screen();
    assert_absent(screen.as_bytes(), &token, "the screen");
    // Safety: SIGHUP to our own child, as a closing terminal sends.
    unsafe { libc::kill(pty.child.id() as libc::pid_t, libc::SIGHUP) };
    let _ = wait::child_within(&mut pty.child, WAIT);
}

// The two below run the fake agent: what they prove is relay's part of a turn.

#[test]
fn a_client_that_hangs_up_mid_turn_leaves_the_next_turn_its_own_answer() {
    use std::io::Write;
    let r = Relay::start(base_settings(None));
    let id = start_session(&r, &[]);
    let fifo = r.project.join("release");
    nix_mkfifo(&fifo);
    let started = r.project.join("started");
    // The first turn (streamed, as `relay session message --stream` asks) blocks inside
    // the session until the test releases it.
    let body = json!({"text": "!sh touch started; cat release; seq 1 5000; echo late-answer", "stream": true})
        .to_string();
    let mut s = std::os::unix::net::UnixStream::connect(r.socket()).unwrap();
    write!(
        s,
        "POST /api/sessions/{id}/message HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    assert!(
        wait::until(WAIT, || started.exists()),
        "the first turn never started"
    );
    drop(s); // the client hangs up mid-turn
    std::fs::write(&fifo, b"go\n").unwrap(); // the abandoned turn now answers
                                             // A message is refused while a turn runs (`turn_running`): the next one goes once
                                             // the abandoned turn's answer, read to its end, is in the session's turn log.
    let turns = r.config.join(format!("sessions/logs/{id}.turns"));
    assert!(
        wait::until(WAIT, || std::fs::read_to_string(&turns)
            .is_ok_and(|t| t.contains("late-answer"))),
        "the abandoned turn never ended"
    );
    let out = message(&r, &id, "hello", &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert!(
        out.stdout == "echo: hello\n",
        "the next turn read another turn's answer: {:.300}",
        out.stdout
    );
    let out = message(&r, &id, "again", &["--stream", "--json"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert!(out.stdout.contains("\"echo: again\""), "{}", out.stdout);
    assert!(!out.stdout.contains("late-answer"), "{}", out.stdout);
}

#[test]
fn a_turn_whose_claude_code_exits_is_one_error_line_and_exit_1() {
    let r = Relay::start(base_settings(None));
    let id = start_session(&r, &[]);
    let out = message(&r, &id, "!exit 3", &[]);
    assert_eq!(out.status, 1, "{}", out.stdout);
    assert_eq!(out.stdout, "");
    // Its last words (its stderr) and where its whole log is (issue 40).
    assert_eq!(
        out.stderr,
        format!(
            "error: Claude Code exited with status 3 before answering: fakeagent: exit 3 as \
             asked (relay session log --id {id} shows its log) (session_exited)\n"
        )
    );
    r.wait_exited(&id);
    let out = message(&r, &id, "hello", &["--stream"]);
    assert_eq!(out.status, 1);
    assert!(
        out.stderr.contains(&format!(
            "session {id} is dormant (Claude Code exited with status 3): fakeagent: exit 3 as \
             asked; resume it first (relay session log --id {id} shows its log) \
             (session_not_running)"
        )),
        "{}",
        out.stderr
    );
    let log = r.cli(&["session", "log", "--id", &id]);
    assert_eq!(log.status, 0, "{}", log.stderr);
    assert!(
        log.stdout.contains("fakeagent: exit 3 as asked"),
        "{}",
        log.stdout
    );
}

/// A Claude Code that refuses its start (a permission mode from the template it does not
/// know) says why at the first message, in its own words, and `relay session log`
/// shows its log, also once relay has been restarted (issue 40: every message said only
/// "exited with status 1", the reason only in `<config>/sessions/logs/<id>.tail`).
#[test]
fn a_claude_that_dies_at_start_says_why_and_relay_session_log_shows_it() {
    let mut s = base_settings(None);
    s["terminal_templates"][0]["permission_mode"] = json!("yolo");
    let mut r = Relay::start(s);
    let said = "error: option '--permission-mode <mode>' argument 'yolo' is invalid. Allowed \
                choices are acceptEdits, auto, bypassPermissions, manual, dontAsk, plan.";
    let id = start_refused_saying_why(&r, said);
    let ended = r.wait_exited(&id);
    assert_eq!(ended["exit_status"], 1, "{ended}");
    let out = message(&r, &id, "hello", &[]);
    assert_eq!(out.status, 1, "{}", out.stdout);
    assert!(
        out.stderr.contains(&format!(
            "(Claude Code exited with status 1): {said}; resume it first (relay session log \
             --id {id} shows its log) (session_not_running)"
        )),
        "{}",
        out.stderr
    );
    let log = r.cli(&["session", "log", "--id", &id]);
    assert_eq!(log.status, 0, "{}", log.stderr);
    assert!(log.stdout.contains(said), "{}", log.stdout);
    let json = r.cli_json(&["session", "log", "--id", &id]);
    assert!(json["log"].as_str().unwrap().contains(said), "{json}");
    // Restarted, the host holds no session: the log is read from its files.
    r.stop();
    r.launch_daemon();
    let log = r.cli(&["session", "log", "--id", &id]);
    assert_eq!(log.status, 0, "{}", log.stderr);
    assert!(log.stdout.contains(said), "{}", log.stdout);
    let none = r.cli(&["session", "log", "--id", "s-000000000000"]);
    assert_eq!(none.status, 3, "not found: {}", none.stderr);
    assert!(
        none.stderr.contains("no session s-000000000000"),
        "{}",
        none.stderr
    );
}

/// `relay session start` of a Claude Code that exits at once: exit 1, its own answer
/// saying how it ended, its last words `said` and where its log is; the session is
/// listed `dormant`. Its id.
pub(crate) fn start_refused_saying_why(r: &Relay, said: &str) -> String {
    let out = r.cli(&["session", "start", "--project", "p1"]);
    assert_eq!((out.status, out.stdout.as_str()), (1, ""), "{out:?}");
    let list = r.cli_json(&["session", "list"]);
    let e = &list["sessions"][0];
    let id = e["id"].as_str().expect("the session is listed").to_string();
    assert_eq!(e["state"], "dormant", "{list}");
    assert_eq!(
        out.stderr,
        format!(
            "error: session {id} started, but Claude Code ended at once (Claude Code exited \
             with status 1): {said}; relay session log --id {id} shows its log \
             (session_exited)\n"
        )
    );
    id
}

fn nix_mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // Safety: a NUL-terminated path; mkfifo touches no memory of ours.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

#[test]
fn real_turn_on_a_full_config_dir_says_so_and_a_resume_after_a_crash_continues_it() {
    let Some(claude) = claude_code() else { return };
    let mut r = Relay::prepare(None, false);
    let Some(disk) = Tmpfs::mount(&r.config, "2m") else {
        return;
    };
    let api = FakeApi::start(&r.root, &json!({"turns": [{"text": "noted"}]}));
    let token = fake_oauth_token();
    r.write_token(&token);
    r.write_settings(&settings(&claude, &api, Some(TOKEN_SETTING)));
    r.launch_daemon();
    let id = start_session(&r, &[]);

    // The config dir full: the turn answers, and says the ledger did not take its id.
    let filler = disk.fill();
    let word = format!("heron-{}", random_hex(4));
    let first = format!("remember the word {word}");
    let out = message(&r, &id, &first, &[]);
    assert_eq!(out.status, 1, "{out:?}");
    assert_eq!(out.stdout, "noted\n", "{out:?}");
    assert!(
        out.stderr
            .starts_with("warning: relay could not save this turn's Claude session id (")
            && out.stderr.contains("No space left on device")
            && out.stderr.contains(&format!("{id}.json")),
        "{out:?}"
    );
    assert!(session_entry(&r, &id)["claude"]["session_id"].is_string());
    let ledger =
        std::fs::read_to_string(r.config.join("ledger").join(format!("{id}.json"))).unwrap();
    assert!(!ledger.contains("\"session_id\""), "{ledger}");
    let before = api.messages().len();

    // A crash, then room again: the resume finds the conversation by its transcript.
    r.kill();
    std::fs::remove_file(&filler).unwrap();
    r.launch_daemon();
    let resumed = r.cli(&["session", "resume", "--id", &id]);
    assert_eq!(resumed.status, 0, "{resumed:?}");
    assert!(
        resumed.stdout.contains(
            "note: relay recorded no Claude session id for this session; resuming the newest transcript there, "
        ),
        "{resumed:?}"
    );
    let out = message(&r, &id, "which word was it?", &[]);
    assert_eq!((out.status, out.stderr.as_str()), (0, ""), "{out:?}");
    let after = api.messages();
    let texts = after
        .get(before)
        .unwrap_or_else(|| panic!("no request after resume: {after:?}"))["user_texts"]
        .clone();
    assert!(
        texts.as_array().unwrap().contains(&json!(first)),
        "the earlier turn is not in {texts}"
    );
    // Saved now that there is room.
    let ledger =
        std::fs::read_to_string(r.config.join("ledger").join(format!("{id}.json"))).unwrap();
    assert!(ledger.contains("\"session_id\""), "{ledger}");
    r.stop();
    drop(disk);
}
