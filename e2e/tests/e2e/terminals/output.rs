//! Attack 8 of issue 7: output a session controls reaches the person's terminal. A
//! sandboxed shell prints a clipboard write (OSC 52, in its 7-bit and its UTF-8 C1 form),
//! title changes, tmux passthrough and a colour; `relay terminal log` and `relay sandbox`
//! run on a real pty, as a person would, and what reaches that terminal is checked
//! byte for byte (docs/cli.md, "What a session prints on your terminal"). And Claude
//! Code's resume hint, which cannot work after `relay sandbox`, does not reach it.

use std::io::Read;
use std::process::{Command, Stdio};

use relay_e2e::daemon::{base_settings, Relay};
use relay_e2e::pty::Pty;
use relay_e2e::{wait, WAIT};

/// `c2VjcmV0` is base64 for "secret": the clipboard content the session would set.
/// Between `start` and `end-marker`: OSC 52 (BEL), a title (ST), OSC 52 as UTF-8 C1
/// (U+009D … U+009C), tmux passthrough of an OSC 52, then a red `red-text`.
const PRINT_ATTACK: &str = r"printf 'start\033]52;c;c2VjcmV0\007\033]2;pwned-title\033\\\302\23552;c;c2VjcmV0\302\234\033Ptmux;\033\033]52;c;c2VjcmV0\007\033\\\033[31mred-text\033[0m end-marker\n'";

fn ran_to_exit(pty: &mut Pty) -> i32 {
    let st = wait::child_within(&mut pty.child, WAIT).expect("the command exited");
    st.code().unwrap_or(-1)
}

/// A shell terminal that printed the attack and exited: its id.
fn attack_terminal(r: &Relay, script: &str) -> String {
    let id = r.shell_terminal(script)["id"]
        .as_str()
        .expect("terminal id")
        .to_string();
    r.wait_exited(&id);
    id
}

#[test]
fn terminal_log_shows_a_sessions_clipboard_and_title_escapes_as_text() {
    let r = Relay::start(base_settings(None));
    let id = attack_terminal(&r, PRINT_ATTACK);

    // On a terminal: every escape as visible text, no ESC or BEL byte at all.
    let mut pty = Pty::spawn(r.cli_command(&["terminal", "log", "--id", &id]), 200, 24);
    pty.wait_for("end-marker");
    assert_eq!(ran_to_exit(&mut pty), 0, "screen:\n{:?}", pty.screen());
    let screen = pty.screen();
    for shown in [
        "start^[]52;c;c2VjcmV0^G",
        "^[]2;pwned-title^[\\",
        "\\u{9d}52;c;c2VjcmV0\\u{9c}",
        "^[Ptmux;^[^[]52;c;c2VjcmV0^G^[\\",
        "^[[31mred-text^[[0m end-marker",
    ] {
        assert!(
            screen.contains(shown),
            "{shown:?} not shown; screen:\n{screen:?}"
        );
    }
    assert!(
        !screen.contains('\x1b') && !screen.contains('\x07') && !screen.contains('\u{9d}'),
        "a control reached the terminal: {screen:?}"
    );

    // Piped (a pipe often ends at a terminal: `| less -R`, `| tail`): the same text.
    let piped = r.cli(&["terminal", "log", "--id", &id]);
    assert_eq!(piped.status, 0, "{}", piped.stderr);
    assert!(
        piped.stdout.contains("start^[]52;c;c2VjcmV0^G"),
        "{:?}",
        piped.stdout
    );
    assert!(!piped.stdout.contains('\x1b'), "{:?}", piped.stdout);

    // `--raw`: the bytes as the session wrote them, on the terminal too.
    let mut pty = Pty::spawn(
        r.cli_command(&["terminal", "log", "--id", &id, "--raw"]),
        200,
        24,
    );
    pty.wait_for("end-marker");
    assert_eq!(ran_to_exit(&mut pty), 0);
    let raw = pty.screen();
    assert!(
        raw.contains(
            "start\x1b]52;c;c2VjcmV0\x07\x1b]2;pwned-title\x1b\\\u{9d}52;c;c2VjcmV0\u{9c}"
        ),
        "{raw:?}"
    );
    assert!(
        raw.contains("\x1b[31mred-text\x1b[0m end-marker"),
        "{raw:?}"
    );

    // `--json`: one line, every control escaped, C1 included.
    let line = r.cli(&["terminal", "log", "--id", &id, "--json"]).stdout;
    assert!(
        line.contains(r"start\u001b]52;c;c2VjcmV0\u0007"),
        "{line:?}"
    );
    assert!(line.contains(r"\u009d52;c;c2VjcmV0\u009c"), "{line:?}");
    assert!(
        !line.chars().any(|c| c.is_control() && c != '\n'),
        "{line:?}"
    );
}

#[test]
fn terminal_log_into_a_closed_pipe_exits_0_without_a_panic() {
    let r = Relay::start(base_settings(None));
    // About 400 KB of log: more than a pipe holds, so the CLI is still writing when
    // `head -c1` has gone.
    let id = attack_terminal(
        &r,
        "yes relay-log-line-0123456789 | head -n 14000; echo log-done",
    );

    let mut relay = r.cli_command(&["terminal", "log", "--id", &id]);
    relay
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut relay = relay.spawn().expect("spawn relay terminal log");
    let head = Command::new("head")
        .arg("-c1")
        .stdin(Stdio::from(relay.stdout.take().unwrap()))
        .output()
        .expect("run head");
    assert_eq!(
        String::from_utf8_lossy(&head.stdout),
        "r",
        "head read the log's first byte"
    );
    let mut stderr = String::new();
    relay
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let st = wait::child_within(&mut relay, WAIT).expect("relay terminal log exited");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(st.code(), Some(0), "status {st:?}; stderr: {stderr}");
    assert_eq!(stderr, "", "nothing on stderr");

    // `--json` and `--help` into a closed pipe, likewise.
    for args in [
        vec!["terminal", "log", "--id", id.as_str(), "--json"],
        vec!["--help"],
    ] {
        let mut cmd = r.cli_command(&args);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
}

#[test]
fn relay_sandbox_never_passes_a_clipboard_write_or_title_to_the_persons_terminal() {
    let r = Relay::start(base_settings(None));
    let mut pty = Pty::spawn(
        r.cli_command(&["sandbox", "shell", "--", "-c", PRINT_ATTACK]),
        100,
        30,
    );
    pty.wait_for("end-marker");
    assert_eq!(ran_to_exit(&mut pty), 0, "screen:\n{:?}", pty.screen());
    let screen = pty.screen();
    // What acts outside the screen does not: no clipboard write, no title, no
    // passthrough, in any form, not even the payload.
    for never in [
        "]52",
        "c2VjcmV0",
        "pwned-title",
        "\u{9d}",
        "tmux;",
        "\x1bP",
        "\x1b]",
    ] {
        assert!(
            !screen.contains(never),
            "{never:?} reached the terminal: {screen:?}"
        );
    }
    // The session's screen works: its text and its colour arrive as they were
    // printed, with nothing left of what was dropped between them.
    assert!(
        screen.contains("start\x1b[31mred-text\x1b[0m end-marker"),
        "{screen:?}"
    );
    // The host's log keeps what the session printed, for `--raw` (a terminal started
    // by `relay terminal start`: `relay sandbox` removes its own once it printed it).
    let id = r.shell_terminal(PRINT_ATTACK)["id"]
        .as_str()
        .unwrap()
        .to_string();
    r.wait_exited(&id);
    let raw = r.cli(&["terminal", "log", "--id", &id, "--raw"]).stdout;
    assert!(raw.contains("\x1b]52;c;c2VjcmV0\x07"), "{raw:?}");
}

/// The same hint printed by a tool of its own (a shell printing Claude Code's last
/// words), without a terminal: the lines go, relay's line says why, the exit status
/// and the lines around them are the tool's; a line that only looks like it passes.
#[test]
fn relay_sandbox_leaves_out_the_resume_hint_whoever_prints_it_and_keeps_the_rest() {
    let r = Relay::start(base_settings(None));
    let out = r
        .cli_command(&[
            "sandbox",
            "shell",
            "--",
            "-c",
            r"printf 'before
[2mResume this session with:[22m
[2mclaude --resume 410d6e05[22m
Resume this session with: soon
after
'; exit 3",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("relay sandbox");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(3), "{stdout}{stderr}");
    assert_eq!(
        stdout,
        "before\r\n\x1b[2m\x1b[22m\x1b[2m\x1b[22mResume this session with: soon\r\nafter\r\n"
    );
    assert!(
        stderr.starts_with("relay: Claude Code's resume hint is left out: this run (t-")
            && stderr.lines().count() == 1,
        "{stderr}"
    );
}

/// Issue 26, item 8, and issue 40: when Claude Code ends inside `relay sandbox
/// claude-code` it prints how to resume its conversation with `claude --resume <id>`,
/// which would start Claude outside the sandbox, in a config folder that is not the
/// run's. `relay sandbox` drops the hint, keeps the run with its conversation and names
/// relay's own resume instead.
#[test]
fn relay_sandbox_replaces_claude_codes_resume_hint_with_what_works() {
    use crate::clients::real_claude::claude_code;
    use crate::clients::real_turns::relay_with_api;
    use std::time::Duration;
    let Some(claude) = claude_code() else { return };
    let reply = format!("hint-pong-{}", relay_e2e::random_hex(4));
    let (r, _api, _token) = relay_with_api(
        &claude,
        serde_json::json!({"turns": [{"stream": true, "text": reply}]}),
        true,
    );
    let mut pty = Pty::spawn(r.cli_command(&["sandbox", "claude-code"]), 120, 35);
    pty.wait_for_within("shift+tab to cycle", Duration::from_secs(60));
    // One turn, so the conversation has a transcript Claude Code would offer to resume.
    pty.write(b"say-the-word");
    pty.wait_for("say-the-word");
    pty.write(b"\r");
    pty.wait_for(&reply);
    // Ctrl-C twice: Claude Code asks, then ends.
    pty.write(b"\x03");
    pty.wait_for("again to exit");
    pty.write(b"\x03");
    assert_eq!(ran_to_exit(&mut pty), 0, "screen:\n{}", pty.screen());
    // What was shown, with the escape sequences taken out (the hint's lines are dim).
    let screen = pty.screen();
    let text = relay::cli::termout::visible(screen.as_bytes());
    let Some((shown, note)) = text.split_once("relay: this run's conversation is kept") else {
        panic!("no word from relay:\n{text}");
    };
    assert!(
        !shown.contains("Resume this session with") && !shown.contains("--resume"),
        "the hint reached the terminal:\n{shown}"
    );
    let id = r.cli_json(&["terminal", "list"])["terminals"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        note.contains(&format!("relay terminal resume --id {id}")),
        "{note}"
    );
    // The run is kept, its transcript with it (the resume itself:
    // clients::token_rewrite).
    let projects = r.tmp.join(format!("relay-{id}/claude-config/projects"));
    let kept = std::fs::read_dir(&projects)
        .into_iter()
        .flatten()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
        .any(|f| f.path().extension().is_some_and(|e| e == "jsonl"));
    assert!(kept, "no transcript left in {}", projects.display());
    assert!(!r.all_events().iter().any(|e| e["name"] == "session.purged"));
}

/// `relay sandbox` fed from a pipe or `/dev/null` ends as the tool fed the same way
/// would: the tool reads end-of-file where the input ends. An interactive bash (its
/// line editor turns the pty raw only once it is up, after the end has long arrived)
/// runs the piped line and exits; with `/dev/null` it exits at once; `cat` gets a last
/// line that has no newline, then its end.
#[test]
fn relay_sandbox_with_piped_or_no_input_ends_when_its_input_does() {
    let r = Relay::start(base_settings(None));
    let run = |input: &'static [u8], script: &str| {
        let mut child = r
            .cli_command(&["sandbox", "shell", "--", "-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("relay sandbox");
        let mut stdin = child.stdin.take().unwrap();
        std::io::Write::write_all(&mut stdin, input).unwrap();
        drop(stdin);
        let st = wait::child_within(&mut child, WAIT).expect("relay sandbox ended");
        let mut out = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        (st.code(), out)
    };
    let bash = "exec bash --norc --noprofile -i";
    let (code, out) = run(b"", bash);
    assert_eq!(code, Some(0), "{out}");
    let (code, out) = run(b"echo piped-$((6*7))\n", bash);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("piped-42"), "{out}");
    let (code, out) = run(b"first\nlast", "cat; echo; echo cat-ended");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("last\r\ncat-ended"), "{out}");
}

/// `relay sandbox` whose input is a pipe that never ends ends when its tool does
/// (issue 40): a pipe nobody writes (a CI job's stdin, `sleep 8 | relay sandbox …`)
/// and one that never stops (`yes | relay sandbox …`, whose tool exits once its pty's
/// input queue is full, having read none of it: the input then has nowhere to go). Each run
/// prints the tool's output and passes its exit status while the pipe is still open;
/// the endless one twice over, and relay then stops cleanly: the session host did not
/// keep spinning on input that had nowhere to go (two such runs once wedged it).
#[test]
fn relay_sandbox_fed_by_a_pipe_that_never_ends_ends_when_its_tool_does() {
    let mut r = Relay::start(base_settings(None));
    let run = |script: &str, endless: bool| {
        let mut child = r
            .cli_command(&["sandbox", "shell", "--", "-c", script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("relay sandbox");
        let mut stdin = child.stdin.take().unwrap();
        // Written as `yes` writes, in large blocks, until relay has gone (then the write
        // fails); else held open, unwritten.
        let writer = std::thread::spawn(move || {
            let block = b"y\n".repeat(4096);
            while endless && std::io::Write::write_all(&mut stdin, &block).is_ok() {}
            stdin
        });
        let mut stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut out = String::new();
            let _ = stdout.read_to_string(&mut out);
            out
        });
        let st = wait::child_within(&mut child, WAIT);
        if st.is_none() {
            let _ = child.kill();
        }
        let st = st.expect("relay sandbox ended while its input was still open");
        drop(writer.join().unwrap());
        (st.code(), reader.join().unwrap())
    };
    let (code, out) = run("echo tool-ran; exit 3", false);
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("tool-ran"), "{out}");
    // The tool waits until its pty's input queue is full (4 KiB in line mode), reads
    // none of it, and exits.
    let full = "exec python3 -c 'import fcntl, sys, termios, time\n\
                while int.from_bytes(fcntl.ioctl(0, termios.FIONREAD, bytes(4)), sys.byteorder) < 4000: time.sleep(0.01)\n\
                print(\"queue-full\"); sys.exit(4)'";
    for _ in 0..2 {
        let (code, out) = run(full, true);
        assert_eq!(code, Some(4), "{out}");
        assert!(out.contains("queue-full"), "{out}");
    }
    let st = r.stop().expect("relay serve ran");
    assert_eq!(
        st.code(),
        Some(0),
        "relay serve did not stop cleanly: {st:?}"
    );
}

/// A terminal `relay terminal list` shows has its log, also after relay was restarted
/// and its new host holds no session (issue 40: `terminal log` said "no session").
#[test]
fn terminal_log_after_a_restart_shows_a_listed_terminals_output() {
    let mut r = Relay::start(base_settings(None));
    let id = attack_terminal(&r, "echo kept-$((6*7)); exit 5");
    r.stop();
    r.launch_daemon();
    let list = r.cli(&["terminal", "list"]);
    assert!(list.stdout.contains(&id), "{}", list.stdout);
    let log = r.cli(&["terminal", "log", "--id", &id]);
    assert_eq!(log.status, 0, "{}", log.stderr);
    assert!(log.stdout.contains("kept-42"), "{}", log.stdout);
}
