//! Issue 11, item 1: a session prints the current token — whole, split across two
//! writes with a pause between, base64-encoded at each of the three offsets,
//! URL-encoded and inside JSON — and none of it reaches any surface: the attach stream
//! (live and the scrollback snapshot), `relay terminal log`, a turn's reply and its
//! streamed events, the disk log of a headless session's stderr, the daemon's output,
//! any file of the instance. Each form is replaced by the marker, and the session's
//! `session_end` audit row counts them (docs/session-host.md, "Redaction").
//!
//! The session builds the token from its ROT13 (which nothing masks), so the token's
//! bytes are never in what the test sends.

use std::path::Path;

use relay_e2e::daemon::{base_settings, Relay, TOKEN_SETTING};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use relay_e2e::{assert_absent, fake_token, WAIT};
use serde_json::{json, Value};

const MARKER: &str = "[redacted:claude-token]";

/// A client of `GET /api/terminals/{id}/attach` on the daemon's socket, speaking the
/// frames of docs/routes.md ("Attaching to a terminal").
struct Attach {
    stream: UnixStream,
    output: Vec<u8>,
    ended: bool,
}

impl Attach {
    fn open(r: &Relay, id: &str) -> Attach {
        let mut stream = UnixStream::connect(r.socket()).expect("daemon socket");
        stream.set_read_timeout(Some(WAIT)).unwrap();
        write!(
            stream,
            "GET /api/terminals/{id}/attach HTTP/1.1\r\nHost: relay\r\nConnection: Upgrade\r\nUpgrade: relay-attach\r\n\r\n"
        )
        .unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            stream.read_exact(&mut byte).expect("attach answer");
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head);
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        Attach {
            stream,
            output: Vec::new(),
            ended: false,
        }
    }

    /// Keystrokes (an input frame).
    fn type_text(&mut self, text: &str) {
        let mut f = vec![1u8];
        f.extend_from_slice(&(text.len() as u32).to_be_bytes());
        f.extend_from_slice(text.as_bytes());
        self.stream.write_all(&f).unwrap();
    }

    /// Reads frames until the output holds `text` (or the exit frame came); the output.
    fn until(&mut self, text: &str) -> String {
        while !String::from_utf8_lossy(&self.output).contains(text) && !self.ended {
            let mut head = [0u8; 5];
            self.stream.read_exact(&mut head).unwrap_or_else(|e| {
                panic!(
                    "{text:?} never came ({e}); output:\n{}",
                    String::from_utf8_lossy(&self.output)
                )
            });
            let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
            let mut payload = vec![0u8; len];
            self.stream.read_exact(&mut payload).unwrap();
            match head[0] {
                1 => self.output.extend(payload),
                _ => self.ended = true,
            }
        }
        String::from_utf8_lossy(&self.output).into_owned()
    }
}

/// A token with bytes that URL-encoding and JSON's `\/` change.
fn odd_token() -> String {
    format!("{}+/=z", fake_token())
}

/// Shell that sets `T` to the token and prints it in every form, one line each, to
/// `sink` (a redirection, or empty for stdout). Seven forms: seven redactions.
fn print_forms(token: &str, sink: &str) -> String {
    format!(
        r#"T=$(printf %s '{rot}' | tr 'A-Za-z' 'N-ZA-Mn-za-m'); {{ printf 'whole:%s:\n' "$T"; printf 'split:%s' "$(printf %s "$T" | cut -c1-20)"; sleep 0.5; printf '%s:\n' "$(printf %s "$T" | cut -c21-)"; for lead in '' x xy; do printf 'b64:%s:\n' "$(printf '%s%s' "$lead" "$T" | base64 -w0)"; done; printf 'url:%s:\n' "$(printf %s "$T" | sed 's/+/%2B/g; s|/|%2F|g; s/=/%3D/g')"; printf 'json:{{"token":"%s"}}\n' "$(printf %s "$T" | sed 's|/|\\/|g')"; }} {sink}"#,
        rot = relay_e2e::rot13(token)
    )
}

fn assert_no_form(hay: &[u8], token: &str, place: &str) {
    for (what, form) in relay_e2e::token_forms(token) {
        assert_absent(hay, &form, &format!("{place} ({what})"));
    }
}

/// The daemon's output and every file of the instance but the token file.
fn assert_nowhere(r: &Relay, token: &str, token_path: &Path) {
    assert_no_form(&r.output(), token, "the daemon's output");
    for (path, bytes) in r.all_files(&[token_path]) {
        assert_no_form(&bytes, token, &path.display().to_string());
    }
}

fn count(hay: &str, what: &str) -> usize {
    hay.matches(what).count()
}

/// The `redactions` of the session's `session_end` audit row.
fn audit_redactions(r: &Relay, id: &str) -> Value {
    let rows = r.audit_rows();
    let row = rows
        .iter()
        .find(|row| row["action"] == "session_end" && row["session_id"] == id)
        .unwrap_or_else(|| panic!("no session_end row for {id}: {rows:?}"));
    row["redactions"].clone()
}

/// The seven lines, each with its marker where the token's form was.
fn assert_marked(text: &str, place: &str) {
    for line in [
        format!("whole:{MARKER}:"),
        format!("split:{MARKER}:"),
        format!("url:{MARKER}:"),
        format!("json:{{\"token\":\"{MARKER}\"}}"),
    ] {
        assert!(text.contains(&line), "{place} lacks {line:?}:\n{text}");
    }
    let b64 = text
        .lines()
        .filter(|l| l.starts_with("b64:") && l.contains(MARKER))
        .count();
    assert_eq!(b64, 3, "{place}: the three base64 lines, masked:\n{text}");
}

#[test]
fn redaction_a_terminal_printing_the_token_in_every_form_shows_markers_on_every_surface() {
    let token = odd_token();
    let r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    let path = r.write_token(&token);
    // A shell terminal gets no token; the host still has a copy to mask it.
    let script = format!(
        "printf 'ready>'; read a; {}; printf 'end-marker\\n'; read b",
        print_forms(&token, "")
    );
    let id = r.shell_terminal(&script)["id"]
        .as_str()
        .expect("terminal id")
        .to_string();

    // Live: attached before the session prints.
    let mut live = Attach::open(&r, &id);
    live.until("ready>");
    live.type_text("go\r");
    let live_out = live.until("end-marker");
    // The scrollback: what a second client gets when it attaches.
    let snap_out = Attach::open(&r, &id).until("end-marker");
    live.type_text("\r");
    r.wait_exited(&id);
    for (place, out) in [
        ("the live attach", &live_out),
        ("the scrollback", &snap_out),
    ] {
        assert_marked(out, place);
        assert_no_form(out.as_bytes(), &token, place);
    }

    let log = r.cli_json(&["terminal", "log", "--id", &id]);
    let text = log["log"].as_str().expect("log text");
    assert_marked(text, "relay terminal log");
    assert_eq!(count(text, MARKER), 7, "{text}");
    assert_no_form(log.to_string().as_bytes(), &token, "relay terminal log");
    assert_eq!(audit_redactions(&r, &id), json!(7));
    assert_nowhere(&r, &token, &path);
}

#[test]
fn redaction_a_headless_session_printing_the_token_answers_and_streams_only_markers() {
    let token = odd_token();
    let r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    let path = r.write_token(&token);
    let (status, v, _) = r.api("POST", "/api/sessions", Some(&json!({"project": "p1"})));
    assert_eq!(status, 201, "session start: {v}");
    let id = v["id"].as_str().unwrap().to_string();

    // The reply (stdout lines, parsed into the answer).
    let reply = r.turn(&id, &format!("!sh {}", print_forms(&token, "")));
    assert!(reply.starts_with("exit: 0"), "{reply}");
    assert_marked(&reply, "the reply");
    // The same turn streamed: every event.
    let (status, _, raw) = r.api(
        "POST",
        &format!("/api/sessions/{id}/message"),
        Some(&json!({"text": format!("!sh {}", print_forms(&token, "")), "stream": true})),
    );
    assert_eq!(status, 200);
    let events = String::from_utf8_lossy(&raw).into_owned();
    assert!(events.contains(MARKER), "{events}");
    assert_no_form(&raw, &token, "the streamed events");
    // Decoded, as a client reads them: the JSON `\/` form is back to itself there.
    let texts: String = events
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("an event line"))
        .filter(|e| e["type"] == "text")
        .map(|e| format!("{}\n", e["text"].as_str().unwrap_or_default()))
        .collect();
    assert_marked(&texts, "the streamed events' text");
    assert_no_form(texts.as_bytes(), &token, "the streamed events' text");
    // Written to Claude Code's own stderr (the shell's parent): the session's disk log.
    let reply = r.turn(
        &id,
        &format!("!sh {}", print_forms(&token, ">/proc/$PPID/fd/2")),
    );
    assert!(reply.starts_with("exit: 0"), "{reply}");
    let stderr_log = r
        .all_files(&[&path])
        .into_iter()
        .filter(|(p, _)| {
            p.file_name()
                .is_some_and(|n| n == format!("{id}.head").as_str())
        })
        .map(|(_, b)| String::from_utf8_lossy(&b).into_owned())
        .next()
        .expect("the session's disk log");
    assert_marked(&stderr_log, "the stderr log");

    assert_eq!(r.cli(&["session", "stop", "--id", &id]).status, 0);
    r.wait_exited(&id);
    let n = audit_redactions(&r, &id).as_u64().expect("a count");
    // Each stdout form twice (its assistant line and the result line), twice over;
    // the stderr forms once.
    assert_eq!(n, 2 * 2 * 7 + 7, "redactions {n}");
    assert_no_form(
        serde_json::to_vec(&r.all_events()).unwrap().as_slice(),
        &token,
        "events",
    );
    assert_nowhere(&r, &token, &path);
}

#[test]
fn redaction_a_credential_shaped_string_is_masked_without_any_token_setting() {
    let r = Relay::start(base_settings(None));
    // Printed from pieces, so the whole shape is in nothing the test sends.
    let id = r.shell_terminal(
        "printf 'key=%s-%s-%s\\n' sk-ant oat01 AbCdEfGh0123_-9; printf 'api=%s%s end\\n' sk-ant-api03- ZZZZyyyy9999",
    )["id"]
        .as_str()
        .unwrap()
        .to_string();
    r.wait_exited(&id);
    let log = r.cli_json(&["terminal", "log", "--id", &id]);
    let text = log["log"].as_str().unwrap();
    assert!(text.contains(&format!("key={MARKER}\r\n")), "{text}");
    assert!(text.contains(&format!("api={MARKER} end")), "{text}");
    assert_eq!(audit_redactions(&r, &id), json!(2));
    for (path, bytes) in r.all_files(&[]) {
        for shape in ["sk-ant-oat01-AbCd", "sk-ant-api03-ZZZZ"] {
            assert_absent(&bytes, shape, &path.display().to_string());
        }
    }
}
