//! A relay that takes the connection and never answers (stopped, or stuck) is named by
//! every verb within a bounded time, with what to do (docs/cli.md#when-relay-does-not-answer).

use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

use relay_e2e::daemon::{base_settings, Relay};
use relay_e2e::wait;

#[test]
fn a_stopped_relay_is_named_with_its_pid_and_the_command_gives_up() {
    let r = Relay::start(base_settings(None));
    let pid = r.daemon_pid().unwrap();
    // Safety: kill(2) on the test's own child.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
    let mut child = r
        .cli_command(&["terminal", "list"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait::child_within(&mut child, Duration::from_secs(60));
    // Safety: as above.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) };
    let Some(status) = status else {
        let _ = child.kill();
        panic!("relay terminal list still waited on a stopped relay after 60 s");
    };
    let mut said = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut said.0)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut said.1)
        .unwrap();
    let (stdout, stderr) = said;
    assert!(!status.success() && stdout.is_empty(), "{stdout}");
    for words in [
        format!("relay (pid {pid})"),
        "did not answer in 20 s".into(),
        format!("kill -CONT {pid}"),
        "relay.log".into(),
    ] {
        assert!(stderr.contains(&words), "no {words:?} in: {stderr}");
    }
    // Resumed, it answers again.
    assert_eq!(r.cli(&["terminal", "list"]).status, 0);
}
