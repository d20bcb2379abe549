//! `relay serve` in the person's terminal: what a first run says (the settings it wrote
//! and where, what listens, how to stop), Ctrl-C, which reads as relay stopping, and
//! `relay audit`'s text, each row with its time.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::sync::mpsc;

use relay_e2e::daemon::Relay;
use relay_e2e::{wait, WAIT};

/// Runs `relay serve` in a process group of its own, as a shell runs a foreground job,
/// until it is ready; then Ctrl-C (SIGINT to the group, as the terminal sends it).
/// Its exit status and stderr, whole.
fn serve_then_ctrl_c(r: &Relay) -> (Option<i32>, String, String) {
    let mut cmd = r.serve_command();
    cmd.process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("relay serve");
    let (tx, rx) = mpsc::channel();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in stderr.lines().map_while(Result::ok) {
            all.push_str(&line);
            all.push('\n');
            if line.starts_with("relay: running until") {
                let _ = tx.send(());
            }
        }
        all
    });
    let mut ready = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    if rx.recv_timeout(WAIT).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("no `running until` line: {}", reader.join().unwrap());
    }
    // Safety: kill(2) on the process group of our own child, which leads it.
    unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGINT) };
    let status = wait::child_within(&mut child, WAIT).expect("relay serve stops on Ctrl-C");
    (status.code(), ready, reader.join().unwrap())
}

#[test]
fn a_first_run_says_what_it_wrote_what_listens_and_how_to_stop_and_ctrl_c_reads_as_stopped() {
    let r = Relay::prepare(None, false);
    let settings = r.config.join("settings.json");
    assert!(!settings.exists());
    let (code, ready, err) = serve_then_ctrl_c(&r);
    assert_eq!(
        ready.trim_end(),
        r.config.join("ready.json").to_str().unwrap()
    );
    assert!(settings.is_file());
    let first = format!(
        "relay: first run: wrote the default settings to {} (a `home` project at ~ with the shell and claude-code templates; edit it any time: each launch reads it; api.listen takes a restart)\n",
        settings.display()
    );
    let listen = format!(
        "relay: listening on {} for the relay command (the Settings page is off: set api.listen, then restart relay)\n",
        r.config.join("relay.sock").display()
    );
    for want in [
        first.as_str(),
        listen.as_str(),
        "relay: running until Ctrl-C (or `kill ",
    ] {
        assert!(err.contains(want), "{want:?} not in:\n{err}");
    }
    assert!(
        err.ends_with("relay: stopped (Ctrl-C (SIGINT)); every session ended\n"),
        "{err}"
    );
    assert!(!err.contains("host exited"), "{err}");
    assert_eq!(code, Some(0), "{err}");

    // Not the first run: no word of writing settings.
    let (code, _, err) = serve_then_ctrl_c(&r);
    assert!(!err.contains("first run"), "{err}");
    assert!(err.contains(&listen), "{err}");
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn relay_audit_text_starts_each_row_with_its_time_in_utc() {
    let r = Relay::start(relay_e2e::daemon::base_settings(None));
    let id = r.shell_terminal("true")["id"].as_str().unwrap().to_string();
    // Its end is on file: no row comes between the two reads.
    r.wait_exited(&id);
    assert!(relay_e2e::wait::until(relay_e2e::WAIT, || {
        r.audit_rows()
            .iter()
            .any(|a| a["action"] == "session_end" && a["session_id"] == id.as_str())
    }));
    let rows = r.cli_json(&["audit"])["rows"].as_array().unwrap().clone();
    let out = r.cli(&["audit"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), rows.len(), "{}", out.stdout);
    let launch = rows
        .iter()
        .position(|a| a["action"] == "session_launch" && a["session_id"] == id.as_str())
        .expect("the launch row");
    let when = relay::text::utc_ms(rows[launch]["ts"].as_u64().unwrap());
    assert_eq!(when.len(), "2026-12-04 19:22:48.123Z".len(), "{when}");
    assert!(
        lines[launch].starts_with(&format!("{when}  session_launch  allowed  {id}")),
        "{}",
        lines[launch]
    );
}
