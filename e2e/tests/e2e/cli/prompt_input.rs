//! `relay session message` takes its message from the words, from `--file PATH`, or from
//! standard input (`-`); a message over relay's request limit is refused before it is
//! sent, naming the limit; a relay that dies during the call reads as a sentence naming
//! its log, not the transport's words (docs/cli.md#prompt-input, issue 26 item 6).

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use relay::wire::Code;
use relay_e2e::daemon::{base_settings, Relay};
use relay_e2e::wait;

fn session(r: &Relay) -> String {
    let v = r.cli_json(&["session", "start", "--project", "p1"]);
    v["id"].as_str().unwrap().to_string()
}

/// `relay session message --id ID ARGS` with `stdin` on its standard input.
fn message(r: &Relay, id: &str, args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let mut all = vec!["session", "message", "--id", id];
    all.extend_from_slice(args);
    let mut cmd = r.cli_command(&all);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run relay");
    let mut input = child.stdin.take().unwrap();
    // A refusal may come before the input is read: a closed pipe is not the test's failure.
    let _ = input.write_all(stdin);
    drop(input);
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_message_comes_from_a_file_or_standard_input_and_an_oversized_one_names_the_limit() {
    let r = Relay::start(base_settings(None));
    let id = session(&r);
    let file = r.home.join("prompt.txt");
    std::fs::write(&file, "from a file\nsecond line \"quoted\"").unwrap();
    let path = file.to_str().unwrap();

    let (code, out, err) = message(&r, &id, &["--file", path], b"");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "echo: from a file\nsecond line \"quoted\"\n");

    let (code, out, err) = message(&r, &id, &["-"], b"from stdin\n");
    assert_eq!((code, out.as_str()), (0, "echo: from stdin\n"), "{err}");
    let (code, out, err) = message(&r, &id, &["--file", "-", "--stream"], b"streamed in");
    assert_eq!((code, out.as_str()), (0, "echo: streamed in\n"), "{err}");

    // What cannot be a message is refused before anything is sent, naming the input.
    let missing = r.home.join("nope.txt");
    let (code, _, err) = message(&r, &id, &["--file", missing.to_str().unwrap()], b"");
    assert_eq!(code, 1);
    assert!(
        err.starts_with(&format!(
            "error: --file {}: No such file",
            missing.display()
        )),
        "{err}"
    );
    let (code, _, err) = message(&r, &id, &["-"], b"ok \xff\xfe");
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "error: standard input: not UTF-8 text (byte 3 is not part of a character)\n"
    );
    let (code, _, err) = message(&r, &id, &["-"], b" \n");
    assert_eq!(
        (code, err.as_str()),
        (1, "error: standard input: the message is empty\n")
    );
    // Words and a file at once is a usage error.
    let (code, _, err) = message(&r, &id, &["hello", "--file", path], b"");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cannot be used with"), "{err}");

    // 1 MB: the size and the limit, in a sentence, not a broken pipe.
    let big = vec![b'x'; 1 << 20];
    std::fs::write(&file, &big).unwrap();
    let (code, out, err) = message(&r, &id, &["--file", path], b"");
    assert_eq!((code, out.as_str()), (1, ""));
    assert_eq!(
        err,
        format!(
            "error: the message is too long: 1048587 bytes as sent, and relay takes at most \
             65536 bytes (64 KiB) in one request; send it in parts \
             (docs/cli.md#prompt-input) ({})\n",
            Code::PayloadTooLarge
        )
    );
    // The session is untouched and answers the next message.
    let (code, out, _) = message(&r, &id, &["still", "here"], b"");
    assert_eq!((code, out.as_str()), (0, "echo: still here\n"));
}

#[test]
fn a_relay_that_dies_during_a_turn_reads_as_relay_stopped_with_its_log() {
    let mut r = Relay::start(base_settings(None));
    let id = session(&r);
    let started = r.home.join("project").join("turn-started");
    let mut cmd = r.cli_command(&[
        "session",
        "message",
        "--id",
        &id,
        "!sh touch turn-started; sleep 60",
    ]);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().expect("run relay");
    assert!(
        wait::until(Duration::from_secs(20), || started.exists()),
        "the turn did not start"
    );
    r.kill();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with(&format!(
            "error: relay stopped while answering POST /api/sessions/{id}/message; see {} for \
             why, and start it again with `relay --config-dir {} serve` (",
            r.config.join("relay.log").display(),
            r.config.display()
        )),
        "{err}"
    );
}
