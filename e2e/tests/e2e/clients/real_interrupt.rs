//! Turns a person stops, leaves or waits on: the real Claude Code against `fakeapi`.
//! The turn under way runs a tool that never ends (`tail -f /dev/null`): a request the
//! stand-in holds (`delay_ms`) goes through the session's egress proxy, and Claude Code
//! 2.1.332 sent no next request while that connection stayed open.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Stdio};
use std::sync::mpsc;

use relay_e2e::daemon::Relay;
use relay_e2e::{wait, WAIT};
use serde_json::json;

use crate::clients::real_claude::claude_code;
use crate::clients::real_turns::{message, relay_with_api, session_entry, start_session};

/// A script whose first turn says something, then runs a tool that never ends; the
/// turn after answers `after`.
pub(crate) fn hanging_script() -> serde_json::Value {
    json!({"turns": [
        {"stream": true, "text": "looking first",
         "tool_use": [{"name": "Bash", "input": {"command": "tail -f /dev/null"}}]},
        {"stream": true, "text": "after"},
    ]})
}

/// A running `relay session message --stream`, its stdout lines on a channel.
pub(crate) struct Turn {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
    pub seen: String,
    stderr: std::thread::JoinHandle<String>,
}

impl Turn {
    pub(crate) fn start(r: &Relay, id: &str, text: &str, flags: &[&str]) -> Turn {
        let mut args = vec!["session", "message", "--id", id];
        args.extend_from_slice(flags);
        args.push(text);
        let mut child = r
            .cli_command(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run relay");
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let mut err = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        Turn {
            child,
            lines,
            seen: String::new(),
            stderr,
        }
    }

    /// Waits for a stdout line holding `want`.
    pub(crate) fn wait_line(&mut self, want: &str) {
        let deadline = std::time::Instant::now() + WAIT;
        while !self.seen.lines().any(|l| l.contains(want)) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push_str(&l);
                    self.seen.push('\n');
                }
                Err(_) => panic!("no line with {want:?} within {WAIT:?}: {}", self.seen),
            }
        }
    }

    /// Its exit status, all of its stdout and its stderr.
    pub(crate) fn end(mut self) -> (i32, String, String) {
        let Some(status) = wait::child_within(&mut self.child, WAIT) else {
            let _ = self.child.kill();
            panic!(
                "relay session message did not end within {WAIT:?}: {}",
                self.seen
            );
        };
        while let Ok(l) = self.lines.recv_timeout(WAIT) {
            self.seen.push_str(&l);
            self.seen.push('\n');
        }
        let err = self.stderr.join().unwrap_or_default();
        (status.code().unwrap_or(-1), self.seen, err)
    }
}

#[test]
fn relay_session_interrupt_ends_the_running_turn_keeps_its_reply_so_far_and_the_session_takes_the_next_message(
) {
    let Some(claude) = claude_code() else { return };
    let (r, _api, _token) = relay_with_api(&claude, hanging_script(), true);
    let id = start_session(&r, &[]);
    let root_pid = session_entry(&r, &id)["root_pid"].clone();
    let mut turn = Turn::start(&r, &id, "go", &["--stream"]);
    turn.wait_line("[tool] Bash");

    // A second message while the turn runs is refused, naming the way out.
    let queued = message(&r, &id, "meanwhile", &[]);
    assert_eq!(queued.status, 4, "refused: {queued:?}");
    assert!(
        queued
            .stderr
            .contains("is still answering the message before")
            && queued
                .stderr
                .contains(&format!("relay session interrupt --id {id}"))
            && queued.stderr.contains("(turn_running)"),
        "{}",
        queued.stderr
    );

    let out = r.cli(&["session", "interrupt", "--id", &id]);
    assert_eq!(out.status, 0, "{out:?}");
    assert!(out.stdout.starts_with("interrupted the turn of"), "{out:?}");

    let (status, stdout, stderr) = turn.end();
    assert_eq!(status, 1, "{stdout}\n{stderr}");
    assert!(stdout.contains("looking first"), "{stdout}");
    assert!(
        stderr.contains("relay: the turn was interrupted; the reply so far is above"),
        "{stderr}"
    );

    // Nothing runs now: a second interrupt says so.
    let again = r.cli(&["session", "interrupt", "--id", &id]);
    assert_eq!(again.status, 1, "{again:?}");
    assert!(again.stderr.contains("(no_turn)"), "{again:?}");

    // The same Claude Code takes the next message.
    let next = message(&r, &id, "again", &[]);
    assert_eq!(next.status, 0, "{next:?}");
    assert_eq!(next.stdout, "after\n");
    let e = session_entry(&r, &id);
    assert_eq!(
        (e["state"].clone(), e["root_pid"].clone()),
        (json!("running"), root_pid)
    );

    // The log keeps both turns: the message, the reply so far, how each ended.
    let log = r.cli(&["session", "log", "--id", &id]);
    assert_eq!(log.status, 0, "{log:?}");
    assert!(
        log.stdout
            .contains("s: interrupted (aborted_tools)\n> go\nlooking first"),
        "{}",
        log.stdout
    );
    assert!(
        log.stdout.contains("s: completed\n> again\nafter"),
        "{}",
        log.stdout
    );
}

/// What a person's Ctrl-C sends: SIGINT to the command (the tests' pty is raw, so the
/// key itself would not).
fn ctrl_c(pid: u32) {
    // Safety: a signal to a child of this test, still running.
    let rc = unsafe { libc::kill(pid as i32, libc::SIGINT) };
    assert_eq!(rc, 0, "kill -INT {pid}");
}

#[test]
fn ctrl_c_in_a_script_interrupts_the_turn_and_prints_its_reply_so_far() {
    let Some(claude) = claude_code() else { return };
    let (r, _api, _token) = relay_with_api(&claude, hanging_script(), true);
    let id = start_session(&r, &[]);
    let mut turn = Turn::start(&r, &id, "go", &["--stream"]);
    turn.wait_line("[tool] Bash");
    ctrl_c(turn.child.id());
    let (status, stdout, stderr) = turn.end();
    assert_eq!(status, 130, "{stdout}\n{stderr}");
    assert!(stdout.contains("looking first"), "{stdout}");
    assert!(
        stderr.contains(&format!("relay: interrupting the turn of {id}"))
            && stderr.contains("relay: the turn was interrupted; the reply so far is above"),
        "{stderr}"
    );
    let next = message(&r, &id, "again", &[]);
    assert_eq!(
        (next.status, next.stdout.as_str()),
        (0, "after\n"),
        "{next:?}"
    );
}

#[test]
fn ctrl_c_on_a_terminal_asks_d_detaches_and_a_second_ctrl_c_interrupts() {
    use relay_e2e::pty::Pty;
    let Some(claude) = claude_code() else { return };
    let script = json!({"turns": [
        {"stream": true, "text": "looking first",
         "tool_use": [{"name": "Bash", "input": {"command": "tail -f /dev/null"}}]},
        {"stream": true, "text": "second look",
         "tool_use": [{"name": "Bash", "input": {"command": "tail -f /dev/null"}}]},
    ]});
    let (r, _api, _token) = relay_with_api(&claude, script, true);
    let id = start_session(&r, &[]);

    // Without --stream, a terminal shows the turn's status line, then the question.
    let mut pty = Pty::spawn(
        r.cli_command(&["session", "message", "--id", &id, "go"]),
        100,
        30,
    );
    pty.wait_for(&format!("relay: {id} working… "));
    pty.wait_for(", 1 tool call");
    ctrl_c(pty.child.id());
    pty.wait_for("relay: interrupt this turn? [y] interrupt, [d] detach and let it finish");
    pty.write(b"d");
    pty.wait_for(&format!("relay: detached; {id} goes on with this turn"));
    let status = wait::child_within(&mut pty.child, WAIT).expect("the detach ends the command");
    assert_eq!(status.code(), Some(0), "{}", pty.screen());

    // The turn goes on without it; the person stops it from elsewhere.
    let queued = message(&r, &id, "meanwhile", &[]);
    assert!(queued.stderr.contains("(turn_running)"), "{queued:?}");
    let out = r.cli(&["session", "interrupt", "--id", &id]);
    assert_eq!(out.status, 0, "{out:?}");

    // Twice Ctrl-C interrupts; the reply so far is printed.
    let mut pty = Pty::spawn(
        r.cli_command(&["session", "message", "--id", &id, "again"]),
        100,
        30,
    );
    pty.wait_for(", 1 tool call");
    ctrl_c(pty.child.id());
    pty.wait_for("relay: interrupt this turn?");
    ctrl_c(pty.child.id());
    pty.wait_for(&format!("relay: interrupting the turn of {id}"));
    let status = wait::child_within(&mut pty.child, WAIT).expect("the interrupt ends the turn");
    assert_eq!(status.code(), Some(130), "{}", pty.screen());
    pty.wait_for("second look");

    // Neither reply is lost.
    let log = r.cli(&["session", "log", "--id", &id]);
    assert!(
        log.stdout.contains("> go\nlooking first") && log.stdout.contains("> again\nsecond look"),
        "{}",
        log.stdout
    );
}

#[test]
fn a_turn_on_a_terminal_shows_a_status_line_cleared_before_the_reply_and_a_script_sees_none() {
    use relay_e2e::pty::Pty;
    let Some(claude) = claude_code() else { return };
    let script = json!({"turns": [{"stream": true, "text": "pong"}]});
    let (r, _api, _token) = relay_with_api(&claude, script, true);
    let id = start_session(&r, &[]);
    let mut pty = Pty::spawn(
        r.cli_command(&["session", "message", "--id", &id, "ping"]),
        100,
        30,
    );
    let status = wait::child_within(&mut pty.child, WAIT).expect("the turn ends");
    assert_eq!(status.code(), Some(0), "{}", pty.screen());
    pty.wait_for("pong");
    let screen = pty.screen();
    let line = format!("relay: {id} working… 0s, 0 tool calls");
    let (drawn, cleared, reply) = (
        screen.find(&line),
        screen.rfind("\r\x1b[K"),
        screen.find("pong"),
    );
    assert!(
        matches!((drawn, cleared, reply), (Some(a), Some(b), Some(c)) if a < b && b < c),
        "{screen:?}"
    );
    // Piped, or with --json: no status line.
    for flags in [&[][..], &["--json"][..]] {
        let out = message(&r, &id, "ping", flags);
        assert_eq!(out.status, 0, "{out:?}");
        assert!(!out.stderr.contains("working"), "{out:?}");
    }
}

#[test]
fn relay_session_start_of_a_claude_code_that_exits_at_once_says_why_in_its_own_answer() {
    let Some(claude) = claude_code() else { return };
    let api = json!({"turns": [{"text": "unused"}]});
    let mut r = Relay::prepare(None, false);
    let api = relay_e2e::fakeapi::FakeApi::start(&r.root, &api);
    r.write_token(&crate::clients::real_turns::fake_oauth_token());
    let mut s =
        crate::clients::real_turns::settings(&claude, &api, Some(relay_e2e::daemon::TOKEN_SETTING));
    s["terminal_templates"][0]["permission_mode"] = json!("yolo");
    r.write_settings(&s);
    r.launch_daemon();
    let id = crate::clients::real_turns::start_refused_saying_why(
        &r,
        "error: option '--permission-mode <mode>' argument 'yolo' is invalid. Allowed \
         choices are acceptEdits, auto, bypassPermissions, manual, dontAsk, plan.",
    );
    let log = r.cli(&["session", "log", "--id", &id]);
    assert!(log.stdout.contains("argument 'yolo' is invalid"), "{log:?}");
    assert!(api.messages().is_empty(), "no turn reached the API");
}
