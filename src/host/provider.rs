//! `claude` sessions: Claude Code headless in stream-json mode over stdin/stdout pipes.
//! A turn writes one user line and reads stdout lines until the `result` line, turning
//! each into [`TurnEvent`]s as it goes ([`Parser`]).
//!
//! A turn always reads to its own end, whoever listens: the caller runs it on a task of
//! its own, and a listener that went away (a client that hung up) only stops receiving
//! the events. So the next turn never reads the output of one that was abandoned
//! (docs/session-host.md, "claude (provider) sessions").
//!
//! [`Provider::interrupt`] writes Claude Code's stream-json interrupt control request
//! beside a running turn: Claude Code stops the turn and ends it with a `result`
//! (`terminal_reason` `aborted_streaming`), and the session takes the next message.
//! That, not SIGINT to its process group: in `-p` mode a SIGINT ends Claude Code itself,
//! the session with it.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::{mpsc, Mutex};

use super::redact::Redactor;
use crate::protocol::{ClaudeInit, TurnEvent, TOOL_RESULT_MAX};

/// A stdout line longer than this ends the turn with an error.
const LINE_MAX: usize = 8 * 1024 * 1024;

pub struct Provider {
    io: Arc<Mutex<TurnIo>>,
    /// Apart from the turn's lock, so an interrupt is written while a turn reads.
    stdin: Arc<Mutex<ChildStdin>>,
    /// A turn holds the lock and reads; an interrupt may be written.
    running: Arc<AtomicBool>,
    /// An interrupt was written for the running turn.
    interrupted: Arc<AtomicBool>,
    requests: AtomicU64,
}

struct TurnIo {
    stdout: BufReader<ChildStdout>,
    /// A turn broke off mid-way (oversized line, pipe error): the stream is out of step,
    /// so every later turn fails too instead of reading a stranger's answer.
    broken: bool,
    /// Every string parsed from a stdout line passes through a redactor before it
    /// becomes an event (src/host/redact.rs). Parsed, so JSON's escaping is undone and
    /// the token's JSON-escaped form is caught as the token itself, and a form escaped
    /// once more (a `\/` in the text is `\\/` on the line) as its JSON form. The text
    /// of a turn's events is one stream through `text`, so a token split across text
    /// deltas is caught too; every other string is whole through `strings`.
    text: Redactor,
    strings: Redactor,
}

#[derive(Debug)]
pub enum TurnError {
    /// The agent's stdout closed before a `result` line.
    Ended,
    Io(io::Error),
    Oversized,
    /// An earlier turn broke off mid-way.
    Broken,
}

impl std::fmt::Display for TurnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TurnError::Ended => write!(f, "Claude Code ended before answering"),
            TurnError::Io(e) => write!(f, "session pipe: {e}"),
            TurnError::Oversized => {
                write!(f, "the session wrote a line larger than {LINE_MAX} bytes")
            }
            TurnError::Broken => {
                write!(f, "an earlier turn broke off; stop and resume the session")
            }
        }
    }
}

impl Provider {
    /// `redactor` makes the session's redactors (one per stream).
    pub fn new(stdin: ChildStdin, stdout: ChildStdout, redactor: impl Fn() -> Redactor) -> Self {
        Provider {
            io: Arc::new(Mutex::new(TurnIo {
                stdout: BufReader::new(stdout),
                broken: false,
                text: redactor(),
                strings: redactor(),
            })),
            stdin: Arc::new(Mutex::new(stdin)),
            running: Arc::default(),
            interrupted: Arc::default(),
            requests: AtomicU64::new(0),
        }
    }

    /// Claude Code's start: its `initialize` control request answered (it read its
    /// arguments and takes messages: `true`), or its stdout closed (it exited at once:
    /// [`TurnError::Ended`]), or neither within `limit` (`false`: it may be slow; the
    /// answer, when it comes, is skipped like any control response). Claude Code says
    /// nothing on stdout before its first message (its `system`/`init` comes with the
    /// first turn), so the question is asked.
    pub async fn ready(&self, limit: std::time::Duration) -> Result<bool, TurnError> {
        let mut io = self.io.lock().await;
        let line = serde_json::json!({
            "type": "control_request",
            "request_id": "relay-ready",
            "request": {"subtype": "initialize"},
        });
        write_line(&self.stdin, &line).await?;
        let read = async {
            loop {
                let buf = next_line(&mut io.stdout).await?;
                let v: Value = serde_json::from_slice(&buf).unwrap_or_default();
                if v["type"] == "control_response" {
                    return Ok(());
                }
            }
        };
        match tokio::time::timeout(limit, read).await {
            Ok(Ok(())) => Ok(true),
            Ok(Err(e)) => {
                if matches!(e, TurnError::Io(_) | TurnError::Oversized) {
                    io.broken = true;
                }
                Err(e)
            }
            Err(_) => Ok(false),
        }
    }

    /// Asks Claude Code to stop the running turn; false when none runs (nothing is
    /// written). The turn then ends as usual, at its `result` line, marked
    /// `interrupted`.
    pub async fn interrupt(&self) -> Result<bool, TurnError> {
        if !self.running.load(Ordering::SeqCst) {
            return Ok(false);
        }
        let n = self.requests.fetch_add(1, Ordering::Relaxed) + 1;
        let line = serde_json::json!({
            "type": "control_request",
            "request_id": format!("relay-interrupt-{n}"),
            "request": {"subtype": "interrupt"},
        });
        self.interrupted.store(true, Ordering::SeqCst);
        write_line(&self.stdin, &line).await?;
        Ok(true)
    }

    /// One turn: its events go to `events` (a closed receiver is fine); returns at the
    /// `result` line. Turns of one session run one at a time, in the order they take
    /// the lock.
    pub async fn turn(
        &self,
        text: &str,
        events: &mpsc::Sender<TurnEvent>,
    ) -> Result<(), TurnError> {
        let mut io = self.io.lock().await;
        if io.broken {
            return Err(TurnError::Broken);
        }
        self.interrupted.store(false, Ordering::SeqCst);
        self.running.store(true, Ordering::SeqCst);
        let r = run_turn(&mut io, &self.stdin, &self.interrupted, text, events).await;
        self.running.store(false, Ordering::SeqCst);
        if matches!(r, Err(TurnError::Io(_)) | Err(TurnError::Oversized)) {
            io.broken = true;
        }
        r
    }
}

/// One JSON line to Claude Code's stdin.
async fn write_line(stdin: &Mutex<ChildStdin>, line: &Value) -> Result<(), TurnError> {
    let mut bytes = serde_json::to_vec(line).map_err(|e| TurnError::Io(e.into()))?;
    bytes.push(b'\n');
    let mut stdin = stdin.lock().await;
    match stdin.write_all(&bytes).await {
        Ok(()) => {}
        // The agent is gone: the same as its stdout closing.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Err(TurnError::Ended),
        Err(e) => return Err(TurnError::Io(e)),
    }
    stdin.flush().await.map_err(TurnError::Io)
}

/// Claude Code's next stdout line, at most [`LINE_MAX`] bytes: its end closed is
/// [`TurnError::Ended`], a longer line [`TurnError::Oversized`].
async fn next_line(stdout: &mut BufReader<ChildStdout>) -> Result<Vec<u8>, TurnError> {
    let mut buf = Vec::new();
    let n = stdout
        .take(LINE_MAX as u64 + 1)
        .read_until(b'\n', &mut buf)
        .await
        .map_err(TurnError::Io)?;
    if n == 0 {
        return Err(TurnError::Ended);
    }
    if n > LINE_MAX {
        return Err(TurnError::Oversized);
    }
    Ok(buf)
}

async fn run_turn(
    io: &mut TurnIo,
    stdin: &Mutex<ChildStdin>,
    interrupted: &AtomicBool,
    text: &str,
    events: &mpsc::Sender<TurnEvent>,
) -> Result<(), TurnError> {
    let line = serde_json::json!({
        "type": "user",
        "message": {"role": "user", "content": text},
    });
    write_line(stdin, &line).await?;
    // What an earlier turn that broke off held back is not this turn's text.
    let _ = io.text.finish();
    let mut parser = Parser::default();
    loop {
        let buf = next_line(&mut io.stdout).await?;
        let Ok(v) = serde_json::from_slice::<Value>(&buf) else {
            continue;
        };
        let (out, end) = parser.line(&v);
        for ev in out {
            let ev = match ev {
                TurnEvent::Text { text } => {
                    let t = io.text.feed(text.as_bytes());
                    if t.is_empty() {
                        continue;
                    }
                    TurnEvent::Text {
                        text: String::from_utf8_lossy(&t).into_owned(),
                    }
                }
                TurnEvent::Result {
                    text,
                    is_error,
                    api_error_status,
                    ended,
                    ..
                } => {
                    flush_text(&mut io.text, events).await;
                    let ev = TurnEvent::Result {
                        text,
                        is_error,
                        api_error_status,
                        ended,
                        interrupted: interrupted.load(Ordering::SeqCst),
                    };
                    clean_event(&mut io.strings, ev)
                }
                other => {
                    // The text so far ends before any other event.
                    flush_text(&mut io.text, events).await;
                    clean_event(&mut io.strings, other)
                }
            };
            // A listener that went away does not stop the turn.
            let _ = events.send(ev).await;
        }
        if end {
            flush_text(&mut io.text, events).await;
            return Ok(());
        }
    }
}

fn clean_str(r: &mut Redactor, s: &str) -> String {
    let mut out = r.feed(s.as_bytes());
    out.extend(r.finish());
    String::from_utf8_lossy(&out).into_owned()
}

fn clean_value(r: &mut Redactor, v: &mut Value) {
    match v {
        Value::String(s) => *s = clean_str(r, s),
        Value::Array(a) => a.iter_mut().for_each(|v| clean_value(r, v)),
        Value::Object(o) => o.values_mut().for_each(|v| clean_value(r, v)),
        _ => {}
    }
}

/// An event with each of its strings through the redactor.
fn clean_event(r: &mut Redactor, ev: TurnEvent) -> TurnEvent {
    match ev {
        TurnEvent::Result {
            text,
            is_error,
            api_error_status,
            ended,
            interrupted,
        } => TurnEvent::Result {
            text: clean_str(r, &text),
            is_error,
            api_error_status,
            ended,
            interrupted,
        },
        TurnEvent::ToolResult {
            tool_use_id,
            is_error,
            text,
        } => TurnEvent::ToolResult {
            tool_use_id,
            is_error,
            text: clean_str(r, &text),
        },
        TurnEvent::ToolUse {
            id,
            name,
            mut input,
        } => {
            clean_value(r, &mut input);
            TurnEvent::ToolUse { id, name, input }
        }
        other => other,
    }
}

/// What the text redactor held back, as one more `text` event.
async fn flush_text(text: &mut Redactor, events: &mpsc::Sender<TurnEvent>) {
    let rest = text.finish();
    if !rest.is_empty() {
        let _ = events
            .send(TurnEvent::Text {
                text: String::from_utf8_lossy(&rest).into_owned(),
            })
            .await;
    }
}

/// Turns Claude Code's stream-json lines into [`TurnEvent`]s.
///
/// - `system`/`init` → `init`;
/// - `stream_event` text deltas (relay runs Claude Code with
///   `--include-partial-messages`) → `text` as it arrives; once a turn has had one,
///   the whole `assistant` messages' text blocks are not sent again. A program that
///   sends no deltas (the fake agent) has its text taken from the `assistant` lines;
/// - `assistant` `tool_use` blocks → `tool_use`;
/// - `user` `tool_result` blocks → `tool_result` (text cut to [`TOOL_RESULT_MAX`]);
/// - `result` → `result`, the end of the turn, with why it ended (`terminal_reason`,
///   else `subtype`). Anything else is skipped (an interrupt's `control_response`
///   too).
#[derive(Default)]
pub struct Parser {
    partial: bool,
}

fn s(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

fn content_text(content: &Value) -> String {
    match content {
        Value::String(t) => t.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

impl Parser {
    /// The events of one line, and whether it ends the turn.
    pub fn line(&mut self, v: &Value) -> (Vec<TurnEvent>, bool) {
        let mut out = Vec::new();
        match v["type"].as_str() {
            Some("system") if v["subtype"] == "init" => out.push(TurnEvent::Init(ClaudeInit {
                session_id: s(&v["session_id"]),
                version: s(&v["claude_code_version"]),
                model: s(&v["model"]),
                api_key_source: s(&v["apiKeySource"]),
                permission_mode: s(&v["permissionMode"]),
            })),
            Some("stream_event") => {
                let ev = &v["event"];
                if ev["type"] == "content_block_delta" && ev["delta"]["type"] == "text_delta" {
                    self.partial = true;
                    if let Some(t) = ev["delta"]["text"].as_str().filter(|t| !t.is_empty()) {
                        out.push(TurnEvent::Text { text: t.into() });
                    }
                }
            }
            Some("assistant") => {
                for b in v["message"]["content"].as_array().into_iter().flatten() {
                    match b["type"].as_str() {
                        Some("text") if !self.partial => {
                            if let Some(t) = b["text"].as_str().filter(|t| !t.is_empty()) {
                                out.push(TurnEvent::Text { text: t.into() });
                            }
                        }
                        Some("tool_use") => out.push(TurnEvent::ToolUse {
                            id: s(&b["id"]).unwrap_or_default(),
                            name: s(&b["name"]).unwrap_or_default(),
                            input: b["input"].clone(),
                        }),
                        _ => {}
                    }
                }
            }
            Some("user") => {
                for b in v["message"]["content"].as_array().into_iter().flatten() {
                    if b["type"] == "tool_result" {
                        out.push(TurnEvent::ToolResult {
                            tool_use_id: s(&b["tool_use_id"]).unwrap_or_default(),
                            is_error: b["is_error"].as_bool().unwrap_or(false),
                            text: crate::text::cut(&content_text(&b["content"]), TOOL_RESULT_MAX),
                        });
                    }
                }
            }
            Some("result") => {
                out.push(TurnEvent::Result {
                    text: s(&v["result"]).unwrap_or_default(),
                    is_error: v["is_error"].as_bool().unwrap_or(false),
                    api_error_status: v["api_error_status"]
                        .as_u64()
                        .and_then(|n| u16::try_from(n).ok()),
                    ended: s(&v["terminal_reason"])
                        .or_else(|| s(&v["subtype"]))
                        .map(|r| crate::text::cut(&r, 64)),
                    interrupted: false,
                });
                return (out, true);
            }
            _ => {}
        }
        (out, false)
    }
}

/// Drains the agent's stderr, through the redactor, into the session's disk log so a
/// full pipe never stalls it.
pub async fn drain_stderr(mut stderr: ChildStderr, mut redactor: Redactor, sink: impl Fn(&[u8])) {
    let mut buf = vec![0u8; 8192];
    loop {
        match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let clean = redactor.feed(&buf[..n]);
                if !clean.is_empty() {
                    sink(&clean);
                }
            }
        }
    }
    let rest = redactor.finish();
    if !rest.is_empty() {
        sink(&rest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(lines: &[Value]) -> Vec<TurnEvent> {
        let mut p = Parser::default();
        let mut out = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            let (ev, end) = p.line(l);
            out.extend(ev);
            assert_eq!(end, i + 1 == lines.len(), "end at line {i}");
        }
        out
    }

    #[test]
    fn a_streamed_tool_turn_reads_as_text_pieces_a_call_its_result_and_the_end() {
        let got = run(&[
            json!({"type":"system","subtype":"init","session_id":"abc","claude_code_version":"2.1.332",
                   "model":"claude-sonnet-5-5","apiKeySource":"none","permissionMode":"bypassPermissions"}),
            json!({"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"let me "}}}),
            json!({"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"run it"}}}),
            json!({"type":"assistant","message":{"content":[{"type":"text","text":"let me run it"}]}}),
            json!({"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]}}),
            json!({"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","is_error":true,
                   "content":[{"type":"text","text":"cat: token: Permission denied"}]}]}}),
            json!({"type":"rate_limit_event"}),
            json!({"type":"result","subtype":"success","terminal_reason":"completed","result":"done","is_error":false}),
        ]);
        assert_eq!(
            got,
            vec![
                TurnEvent::Init(ClaudeInit {
                    session_id: Some("abc".into()),
                    version: Some("2.1.332".into()),
                    model: Some("claude-sonnet-5-5".into()),
                    api_key_source: Some("none".into()),
                    permission_mode: Some("bypassPermissions".into()),
                }),
                TurnEvent::Text {
                    text: "let me ".into()
                },
                TurnEvent::Text {
                    text: "run it".into()
                },
                TurnEvent::ToolUse {
                    id: "t1".into(),
                    name: "Bash".into(),
                    input: json!({"command":"ls"})
                },
                TurnEvent::ToolResult {
                    tool_use_id: "t1".into(),
                    is_error: true,
                    text: "cat: token: Permission denied".into()
                },
                TurnEvent::Result {
                    text: "done".into(),
                    is_error: false,
                    api_error_status: None,
                    ended: Some("completed".into()),
                    interrupted: false,
                },
            ]
        );
    }

    /// A real child on real pipes streams a token across two text deltas, and its
    /// tool call and result carry it too: no event holds it, one marker stands for it.
    #[tokio::test]
    async fn a_token_split_across_text_deltas_reaches_no_event() {
        use crate::protocol::Secret;
        use std::sync::atomic::{AtomicU64, Ordering};
        let token = "acme-test-token-0123456789abcdef";
        let delta = |t: &str| {
            json!({"type":"stream_event","event":{"type":"content_block_delta","delta":{"type":"text_delta","text":t}}})
                .to_string()
        };
        let lines = [
            delta("here: acme-test-tok"),
            delta("en-0123456789abcdef and on"),
            json!({"type":"assistant","message":{"content":[{"type":"tool_use","id":"t","name":"Bash","input":{"command":format!("echo {token}")}}]}}).to_string(),
            json!({"type":"result","result":format!("said {token}"),"is_error":false}).to_string(),
        ];
        let script = format!("read l; printf '%s\n' '{}'", lines.join("' '"));
        let mut child = tokio::process::Command::new("/bin/sh")
            .args(["-c", &script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let patterns = Arc::new(super::super::redact::Patterns::new(Some(&Secret::new(
            token,
        ))));
        let count = Arc::new(AtomicU64::new(0));
        let p = Provider::new(
            child.stdin.take().unwrap(),
            child.stdout.take().unwrap(),
            || Redactor::new(patterns.clone(), count.clone()),
        );
        let (tx, mut rx) = mpsc::channel(64);
        p.turn("go", &tx).await.unwrap();
        drop(tx);
        let (mut text, mut all) = (String::new(), String::new());
        while let Some(ev) = rx.recv().await {
            if let TurnEvent::Text { text: t } = &ev {
                text.push_str(t);
            }
            all.push_str(&serde_json::to_string(&ev).unwrap());
        }
        assert!(
            !all.contains(token) && !all.contains("en-0123456789abcdef"),
            "{all}"
        );
        assert_eq!(text, "here: [redacted:claude-token] and on");
        assert!(all.contains("echo [redacted:claude-token]"), "{all}");
        assert!(all.contains("said [redacted:claude-token]"), "{all}");
        assert_eq!(count.load(Ordering::Relaxed), 3);
        let _ = child.wait().await;
    }

    #[test]
    fn without_deltas_text_comes_from_the_assistant_lines_and_errors_keep_their_status() {
        let got = run(&[
            json!({"type":"assistant","message":{"content":[{"type":"text","text":"echo: hi"}]}}),
            json!({"type":"result","result":"API Error: 401 bad","is_error":true,"api_error_status":401}),
        ]);
        assert_eq!(
            got,
            vec![
                TurnEvent::Text {
                    text: "echo: hi".into()
                },
                TurnEvent::Result {
                    text: "API Error: 401 bad".into(),
                    is_error: true,
                    api_error_status: Some(401),
                    ended: None,
                    interrupted: false,
                },
            ]
        );
        let long = "é".repeat(TOOL_RESULT_MAX);
        let got = Parser::default()
            .line(&json!({"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"x","content":long}]}}))
            .0;
        let TurnEvent::ToolResult { text, .. } = &got[0] else {
            panic!()
        };
        assert!(text.len() <= TOOL_RESULT_MAX + "…".len() && text.ends_with('…'));
    }
}
