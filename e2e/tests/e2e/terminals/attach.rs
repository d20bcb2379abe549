//! Issue 13, item 2: attach and detach from anywhere. `relay terminal attach` and
//! `relay sandbox` run on real ptys, as a person would: two clients on one terminal see
//! the same output, one detaches with Ctrl-\ Ctrl-\ while the other keeps typing, a
//! client attaching later gets the recent output first, `relay sandbox` detaches and
//! says how to come back, the keys work split across reads while a single Ctrl-\ still
//! reaches the session, the session's size follows the windows still attached, and a
//! caller inside a session cannot attach (docs/cli.md#relay-terminal-attach).

use std::time::Duration;

use relay::wire::Terminals;
use relay_e2e::daemon::{base_settings, Relay};
use relay_e2e::pty::Pty;
use relay_e2e::{wait, WAIT};
use serde_json::{json, Value};

const DETACH: &[u8] = b"\x1c\x1c";

/// An interactive sandboxed shell terminal: its id.
fn shell(r: &Relay) -> String {
    r.cli_json(&[
        "terminal",
        "start",
        "--project",
        "p1",
        "--template",
        "shell",
    ])["id"]
        .as_str()
        .expect("terminal id")
        .to_string()
}

fn attach(r: &Relay, id: &str, cols: u16, rows: u16) -> Pty {
    Pty::spawn(
        r.cli_command(&["terminal", "attach", "--id", id]),
        cols,
        rows,
    )
}

fn exit_code(pty: &mut Pty) -> i32 {
    let st = wait::child_within(&mut pty.child, WAIT).unwrap_or_else(|| {
        panic!("the client did not exit; screen:\n{}", pty.screen());
    });
    st.code().unwrap_or(-1)
}

fn state(r: &Relay, id: &str) -> Value {
    r.cli_json(&["terminal", "list"])["terminals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .unwrap_or_else(|| panic!("{id} not listed"))["state"]
        .clone()
}

/// Types `line` into the client, then waits until `shows` is on its screen.
fn run_in(pty: &mut Pty, line: &str, shows: &str) {
    pty.write(format!("{line}\r").as_bytes());
    pty.wait_for(shows);
}

#[test]
fn two_attached_clients_see_the_same_output_one_detaches_the_other_keeps_typing_and_a_late_one_gets_the_recent_output(
) {
    let r = Relay::start(base_settings(None));
    let id = shell(&r);

    let mut a = attach(&r, &id, 100, 30);
    // The attach sends its window size before any key: the first command sees it.
    run_in(&mut a, "stty size; echo a-ready$((1+1))", "a-ready2");
    assert!(a.screen().contains("30 100"), "{}", a.screen());
    let mut b = attach(&r, &id, 100, 30);
    // Once B's own keys come back, B is live.
    run_in(&mut b, "echo b-ready$((2+2))", "b-ready4");
    a.wait_for("b-ready4");

    // Typed in A, seen by both.
    run_in(&mut a, "echo from-a$((3+3))", "from-a6");
    b.wait_for("from-a6");

    // A window change in B reaches the session.
    b.resize(120, 40);
    let mut resized = false;
    for _ in 0..20 {
        b.write(b"stty size\r");
        if b.shows_within("40 120", Duration::from_millis(500)) {
            resized = true;
            break;
        }
    }
    assert!(resized, "the resize never arrived; screen:\n{}", b.screen());

    // A detaches: it exits 0 and says how to come back; the terminal runs on.
    a.write(DETACH);
    assert_eq!(exit_code(&mut a), 0, "screen:\n{}", a.screen());
    a.wait_for(&format!("relay terminal attach --id {id}"));
    assert_eq!(state(&r, &id), "running");

    // B keeps working: its keys still reach the shell and its output comes back.
    run_in(&mut b, "echo still$((4+4))", "still8");
    assert!(
        !a.screen().contains("still8"),
        "a detached client got output"
    );

    // A client attaching now gets the recent output first, without typing anything.
    let mut c = attach(&r, &id, 120, 40);
    c.wait_for("still8");
    assert!(c.screen().contains("from-a6"), "{}", c.screen());
    // And typing in it works too; its end ends both clients with the tool's status.
    run_in(&mut c, "echo late$((5+5))", "late10");
    b.wait_for("late10");
    c.write(b"exit 3\r");
    assert_eq!(exit_code(&mut c), 3, "screen:\n{}", c.screen());
    assert_eq!(exit_code(&mut b), 3, "screen:\n{}", b.screen());
    assert_eq!(state(&r, &id), "exited");
}

/// Issue 26, item 8: the session's size follows the windows still attached. The later
/// window's size is the session's while both are attached; when it detaches, the
/// session takes the size of the window that remains (the most recent size among the
/// windows still attached), and the program in the foreground gets SIGWINCH.
#[test]
fn when_one_of_two_windows_detaches_the_session_takes_the_size_of_the_one_that_remains() {
    let r = Relay::start(base_settings(None));
    let id = shell(&r);
    let mut a = attach(&r, &id, 100, 30);
    run_in(&mut a, "echo \"a-size $(stty size)\"", "a-size 30 100");
    // B's size frame comes before its keys: the command it types sees B's size.
    let mut b = attach(&r, &id, 120, 40);
    run_in(&mut b, "echo \"b-size $(stty size)\"", "b-size 40 120");
    // In the foreground, a program that waits for the next window change and prints
    // the size it finds then (the typed line, echoed, holds neither printed text).
    run_in(
        &mut b,
        "python3 -c 'import os, signal; signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGWINCH]); \
         print(\"winch-\" + \"ready\", flush=True); signal.sigwait([signal.SIGWINCH]); \
         s = os.get_terminal_size(0); print(\"winched %d %d\" % (s.lines, s.columns), flush=True)'",
        "winch-ready",
    );
    a.wait_for("winch-ready");
    // B detaches: the session is A's size again, without A doing anything.
    b.write(DETACH);
    assert_eq!(exit_code(&mut b), 0, "screen:\n{}", b.screen());
    a.wait_for("winched 30 100");
    run_in(
        &mut a,
        "echo \"after-$((2*3)) $(stty size)\"",
        "after-6 30 100",
    );
    a.write(b"exit 4\r");
    assert_eq!(exit_code(&mut a), 4, "screen:\n{}", a.screen());
}

#[test]
fn closing_the_window_of_relay_terminal_attach_only_detaches_and_another_window_attaches() {
    let r = Relay::start(base_settings(None));
    let id = shell(&r);
    let mut a = attach(&r, &id, 100, 30);
    run_in(&mut a, "echo before-$((6*7))-close", "before-42-close");
    // The window closes: its terminal sends the client SIGHUP.
    // Safety: SIGHUP to our own child.
    unsafe { libc::kill(a.child.id() as libc::pid_t, libc::SIGHUP) };
    assert_eq!(exit_code(&mut a), 128 + libc::SIGHUP);
    assert_eq!(state(&r, &id), "running");
    // Another window: the recent output first, then the session as it was.
    let mut b = attach(&r, &id, 100, 30);
    b.wait_for("before-42-close");
    run_in(&mut b, "echo after-$((6*7))-close", "after-42-close");
    b.write(DETACH);
    // What the client printed last may reach the screen after its exit: waited for.
    b.wait_for("relay: detached from");
    assert_eq!(exit_code(&mut b), 0);
    assert_eq!(state(&r, &id), "running");
}

#[test]
fn detaching_from_relay_sandbox_leaves_the_session_running_and_prints_how_to_attach_again() {
    let r = Relay::start(base_settings(None));
    let mut s = Pty::spawn(r.cli_command(&["sandbox", "shell"]), 100, 30);
    run_in(&mut s, "echo in-sandbox$((3+3))", "in-sandbox6");
    let id = r.cli_typed::<Terminals>(&["terminal", "list"]).terminals[0]
        .id
        .clone();

    s.write(DETACH);
    assert_eq!(exit_code(&mut s), 0, "screen:\n{}", s.screen());
    let again = format!(
        "relay terminal attach --id {id} --config-dir {}",
        r.config.display()
    );
    s.wait_for(&again);
    assert_eq!(state(&r, &id), "running");

    // The printed command works: the screen comes back and the session answers.
    let mut back = attach(&r, &id, 100, 30);
    back.wait_for("in-sandbox6");
    run_in(&mut back, "echo back$((1+1))", "back2");
    back.write(b"exit 5\r");
    assert_eq!(exit_code(&mut back), 5, "screen:\n{}", back.screen());
}

#[test]
fn the_detach_keys_work_split_across_reads_and_a_single_ctrl_backslash_reaches_the_session() {
    let r = Relay::start(base_settings(None));
    let id = shell(&r);
    let mut a = attach(&r, &id, 100, 30);
    // The session shows what it receives: Ctrl-\ is a plain byte there (no SIGQUIT),
    // `cat -v` prints it as ^\ and nothing is echoed.
    run_in(
        &mut a,
        "stty -isig -echo; echo cat-ready$((1+1)); cat -v",
        "cat-ready2",
    );

    // A single Ctrl-\, then other keys in a later write: all of them arrive.
    a.write(b"\x1c");
    a.write(b"one\r");
    a.wait_for("^\\one");

    // The keys split across two writes: the first goes out with a line (which the
    // session prints, so the client has read that write), the second alone.
    a.write(b"split-mark\r\x1c");
    a.wait_for("split-mark");
    a.write(b"\x1c");
    assert_eq!(exit_code(&mut a), 0, "screen:\n{}", a.screen());
    assert_eq!(state(&r, &id), "running");

    // Neither half of the detach reached the session.
    let mut b = attach(&r, &id, 100, 30);
    b.wait_for("split-mark");
    b.write(b"after\r");
    b.wait_for("after");
    let screen = b.screen();
    assert!(
        !screen.contains("^\\after") && !screen.contains("^\\^\\"),
        "a detach key reached the session: {screen:?}"
    );
    // Ctrl-D ends `cat`, then the shell.
    b.write(b"\x04");
    run_in(&mut b, "echo cat-done$((2+2))", "cat-done4");
    b.write(b"exit 0\r");
    assert_eq!(exit_code(&mut b), 0, "screen:\n{}", b.screen());
}

#[test]
fn detach_keys_come_from_settings_and_the_flag_and_a_bad_value_is_refused() {
    let mut s = base_settings(None);
    s["detach_keys"] = json!("ctrl-a,d");
    let r = Relay::start(s);
    let id = shell(&r);

    // Ctrl-\ Ctrl-\ is no longer special: the client stays attached.
    let mut a = attach(&r, &id, 100, 30);
    run_in(&mut a, "echo a-ready$((1+1))", "a-ready2");
    a.write(DETACH);
    run_in(&mut a, "echo kept$((2+2))", "kept4");
    a.write(b"\x01d");
    assert_eq!(exit_code(&mut a), 0, "screen:\n{}", a.screen());

    // The flag wins over the setting.
    let mut b = Pty::spawn(
        r.cli_command(&[
            "terminal",
            "attach",
            "--id",
            &id,
            "--detach-keys",
            "ctrl-b,q",
        ]),
        100,
        30,
    );
    run_in(&mut b, "echo b-ready$((3+3))", "b-ready6");
    b.write(b"\x02q");
    assert_eq!(exit_code(&mut b), 0, "screen:\n{}", b.screen());
    assert_eq!(state(&r, &id), "running");

    let bad = r.cli(&["terminal", "attach", "--id", &id, "--detach-keys", "ctrl-1"]);
    assert_eq!(bad.status, 1);
    assert!(
        bad.stderr
            .starts_with("error: --detach-keys: detach_keys \"ctrl-1\""),
        "{}",
        bad.stderr
    );
    r.cli_json(&["terminal", "stop", "--id", &id]);
}

#[test]
fn a_caller_inside_a_session_cannot_attach_to_a_terminal() {
    let mut s = base_settings(None);
    s["terminal_templates"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "open", "command": "/bin/sh", "sandbox": false}));
    let r = Relay::start(s);
    let target = shell(&r);
    let script = format!(
        "'{relay}' --config-dir '{cfg}' terminal attach --id {target} </dev/null; echo attach_rc=$?",
        relay = r.relay_bin().display(),
        cfg = r.config.display()
    );
    let inner = r.template_terminal("open", &script);
    let inner = inner["id"].as_str().unwrap();
    r.wait_exited(inner);
    let log = r.cli(&["terminal", "log", "--id", inner]).stdout;
    assert!(
        log.contains("cannot be run from inside a relay session") && log.contains("attach_rc=4"),
        "{log}"
    );
    assert_eq!(state(&r, &target), "running");
    r.cli_json(&["terminal", "stop", "--id", &target]);
}
