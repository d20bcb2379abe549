//! Issue 12: `relay sandbox` prints everything the tool printed, however much and
//! however fast: the host reads nothing before its attach and paces the pty to it,
//! while another attach that does not keep up is skipped, not waited for
//! (docs/routes.md#attaching-to-a-terminal).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::Stdio;

use relay_e2e::daemon::{base_settings, Relay};
use relay_e2e::{wait, WAIT};
use serde_json::{json, Value};

/// Numbered lines, 1 to this: about 20 MB through the pty.
const LINES: usize = 2_400_000;

/// The first place where `out` is not the lines `1..=n` (each ended by the pty's
/// CR LF), or `None` when every line arrived, once, in order.
fn first_gap(out: &[u8], n: usize) -> Option<String> {
    let text = String::from_utf8_lossy(out);
    let mut lines = text.split("\r\n");
    for want in 1..=n {
        match lines.next() {
            Some(got) if got == want.to_string() => {}
            got => return Some(format!("line {want}: got {got:?}")),
        }
    }
    match lines.next() {
        Some("") if lines.next().is_none() => None,
        rest => Some(format!("after line {n}: {rest:?}")),
    }
}

/// Attaches to terminal `id` (`?lossless=true` when asked) and reads its frames to the
/// exit frame: the output bytes and the exit.
fn attach_to_end(r: &Relay, id: &str, lossless: bool) -> (Vec<u8>, Value) {
    let query = if lossless { "?lossless=true" } else { "" };
    let mut s = r.raw_attach(id, query);
    let mut out = Vec::new();
    loop {
        let mut h = [0u8; 5];
        s.read_exact(&mut h).expect("a frame before the exit frame");
        let mut payload = vec![0u8; u32::from_be_bytes([h[1], h[2], h[3], h[4]]) as usize];
        s.read_exact(&mut payload).unwrap();
        match h[0] {
            1 => out.extend_from_slice(&payload),
            2 => return (out, serde_json::from_slice(&payload).unwrap()),
            k => panic!("frame kind {k}"),
        }
    }
}

#[test]
fn relay_sandbox_prints_every_line_of_a_20_mb_flood_in_order_past_a_watcher_that_never_reads() {
    let r = Relay::start(base_settings(None));
    let mut child = r
        .cli_command(&[
            "sandbox",
            "shell",
            "--",
            "-c",
            &format!("seq 1 {LINES}; exit 5"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn relay sandbox");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut e = String::new();
        let _ = stderr.read_to_string(&mut e);
        e
    });

    // The first bytes prove the run's own attach is in; then a second attach joins and
    // never reads a byte: the run must not wait for it.
    let mut out = vec![0u8; 64];
    stdout.read_exact(&mut out).unwrap();
    let launch = r.wait_event(|e| e["name"] == "session.launch" && e["status"] == "ok");
    let id = launch["session_id"].as_str().unwrap().to_string();
    let mut watcher = UnixStream::connect(r.socket()).unwrap();
    write!(
        watcher,
        "GET /api/terminals/{id}/attach HTTP/1.1\r\nHost: relay\r\nConnection: Upgrade\r\nUpgrade: relay-attach\r\n\r\n"
    )
    .unwrap();

    stdout.read_to_end(&mut out).unwrap();
    let status = wait::child_within(&mut child, WAIT).expect("relay sandbox ended");
    let err = err.join().unwrap();
    assert_eq!(status.code(), Some(5), "stderr: {err}");
    assert!(err.is_empty(), "{err}");
    assert!(
        !String::from_utf8_lossy(&out).contains("[relay:"),
        "a note in place of output"
    );
    if let Some(gap) = first_gap(&out, LINES) {
        panic!("{} bytes arrived; first gap at {gap}", out.len());
    }
    drop(watcher);
}

#[test]
fn a_held_terminal_reads_nothing_until_its_attach_so_a_late_attach_gets_the_first_line() {
    let r = Relay::start(base_settings(None));
    // About 1.4 MB: far more than the 256 KiB ring, far more than a pty buffers.
    let n = 200_000;
    let start = |hold: bool| {
        let body = json!({
            "project": "p1", "template": "shell", "hold_output": hold,
            "extra_args": ["-c", format!("seq 1 {n}")],
        });
        let (st, v, _) = r.api("POST", "/api/terminals", Some(&body));
        assert_eq!(st, 201, "{v}");
        v["id"].as_str().unwrap().to_string()
    };
    let held = start(true);
    // The same tool, not held, runs to its end meanwhile; the held one cannot (its
    // pty is full and nobody reads it).
    let free = start(false);
    r.wait_exited(&free);
    let (_, list, _) = r.api("GET", "/api/terminals", None);
    let state = |id: &str| {
        list["terminals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .map(|t| t["state"].clone())
    };
    assert_eq!(state(&held), Some(json!("running")), "{list}");

    let (out, exit) = attach_to_end(&r, &held, true);
    assert_eq!(exit["exit_status"], 0, "{exit}");
    if let Some(gap) = first_gap(&out, n) {
        panic!("{} bytes arrived; first gap at {gap}", out.len());
    }
    // The unheld one, attached after its end, has only its ring: the last 256 KiB.
    let (late, _) = attach_to_end(&r, &free, false);
    assert!(late.len() <= 256 * 1024 && !late.starts_with(b"1\r\n"));
}
