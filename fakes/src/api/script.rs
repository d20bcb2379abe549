//! The script `fakeapi` answers from: a list of turns, read from a file at start and
//! again whenever the file's bytes change (a test rewrites it between two turns; the
//! new script starts from its first turn).
//!
//! ```json
//! {"turns": [
//!   {"text": "a reply"},
//!   {"tool_use": [{"name": "Bash", "input": {"command": "ls"}}], "text": "optional, before the calls"},
//!   {"error": {"status": 401, "message": "invalid bearer"}},
//!   {"stream": true, "text": "only a streaming request takes this turn"},
//!   {"times": 2, "text": "answers two requests"},
//!   {"delay_ms": 60000, "text": "held for a minute before any byte of it is sent"}
//! ]}
//! ```
//!
//! Each `POST /v1/messages` takes the turn at the cursor; once it has answered `times`
//! requests (default 1) the cursor moves on. Past the end, the last turn answers every
//! further request. A turn with `stream` answers only requests whose `stream` equals it;
//! any other request gets [`Reply::default_text`] and leaves the cursor where it is (so
//! Claude Code's interactive start-up probe, a non-streaming request, does not use up a
//! scripted turn). A turn with `delay_ms` (at most 600000) holds each of its answers that
//! long before sending any of it: a turn still under way, for a test that interrupts
//! one.

use serde_json::Value;

/// One scripted answer.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// Content blocks: an optional text, then the tool calls.
    Message {
        text: Option<String>,
        tool_uses: Vec<ToolUse>,
    },
    /// An HTTP error with an Anthropic-shaped body.
    Error {
        status: u16,
        kind: String,
        message: String,
    },
}

impl Reply {
    /// What a request gets when no scripted turn applies to it.
    pub fn default_text() -> Reply {
        Reply::Message {
            text: Some("ok".into()),
            tool_uses: vec![],
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ToolUse {
    pub id: Option<String>,
    pub name: String,
    pub input: Value,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Turn {
    pub reply: Reply,
    pub times: u32,
    pub stream: Option<bool>,
    /// How long each answer is held before it is sent.
    pub delay_ms: u64,
}

/// The Anthropic error type for an HTTP status.
pub fn error_kind(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

fn parse_turn(i: usize, v: &Value) -> Result<Turn, String> {
    let obj = v
        .as_object()
        .ok_or_else(|| format!("turn {i}: not an object"))?;
    let times = match obj.get("times") {
        None => 1,
        Some(t) => t
            .as_u64()
            .filter(|n| (1..=1000).contains(n))
            .ok_or_else(|| format!("turn {i}: times must be 1 to 1000"))? as u32,
    };
    let stream = match obj.get("stream") {
        None => None,
        Some(s) => Some(
            s.as_bool()
                .ok_or_else(|| format!("turn {i}: stream must be true or false"))?,
        ),
    };
    let delay_ms = match obj.get("delay_ms") {
        None => 0,
        Some(d) => d
            .as_u64()
            .filter(|n| *n <= 600_000)
            .ok_or_else(|| format!("turn {i}: delay_ms must be 0 to 600000"))?,
    };
    let reply = if let Some(e) = obj.get("error") {
        let status = e
            .get("status")
            .and_then(Value::as_u64)
            .filter(|s| (400..=599).contains(s))
            .ok_or_else(|| format!("turn {i}: error.status must be 400 to 599"))?
            as u16;
        Reply::Error {
            status,
            kind: e
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or(error_kind(status))
                .to_string(),
            message: e
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("fakeapi: scripted error")
                .to_string(),
        }
    } else {
        let text = match obj.get("text") {
            None => None,
            Some(t) => Some(
                t.as_str()
                    .ok_or_else(|| format!("turn {i}: text must be a string"))?
                    .to_string(),
            ),
        };
        let mut tool_uses = Vec::new();
        if let Some(list) = obj.get("tool_use") {
            let list = list
                .as_array()
                .ok_or_else(|| format!("turn {i}: tool_use must be an array"))?;
            for (k, t) in list.iter().enumerate() {
                let name = t
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("turn {i}: tool_use {k} needs a name"))?;
                tool_uses.push(ToolUse {
                    id: t.get("id").and_then(Value::as_str).map(str::to_string),
                    name: name.to_string(),
                    input: t
                        .get("input")
                        .cloned()
                        .unwrap_or_else(|| Value::Object(Default::default())),
                });
            }
        }
        if text.is_none() && tool_uses.is_empty() {
            return Err(format!("turn {i}: needs text, tool_use or error"));
        }
        Reply::Message { text, tool_uses }
    };
    Ok(Turn {
        reply,
        times,
        stream,
        delay_ms,
    })
}

/// Parses a script file's bytes: `{"turns": [...]}` or the bare list.
pub fn parse(bytes: &[u8]) -> Result<Vec<Turn>, String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let list = match &v {
        Value::Array(a) => a,
        Value::Object(o) => o
            .get("turns")
            .and_then(Value::as_array)
            .ok_or("no \"turns\" list")?,
        _ => return Err("neither a list nor {\"turns\": [...]}".into()),
    };
    if list.is_empty() {
        return Err("no turns".into());
    }
    list.iter()
        .enumerate()
        .map(|(i, t)| parse_turn(i, t))
        .collect()
}

/// The script and where it stands.
#[derive(Debug, Default)]
pub struct Cursor {
    source: Vec<u8>,
    turns: Vec<Turn>,
    at: usize,
    used: u32,
}

impl Cursor {
    /// Takes `bytes` as the script when they differ from the current one (and starts it
    /// from its first turn).
    pub fn load(&mut self, bytes: &[u8]) -> Result<(), String> {
        if bytes == self.source.as_slice() && !self.turns.is_empty() {
            return Ok(());
        }
        let turns = parse(bytes)?;
        *self = Cursor {
            source: bytes.to_vec(),
            turns,
            at: 0,
            used: 0,
        };
        Ok(())
    }

    /// The reply for one request, and the index of the turn that gave it (`None` for
    /// the default reply).
    pub fn next(&mut self, stream: bool) -> (Reply, Option<usize>) {
        let Some(last) = self.turns.len().checked_sub(1) else {
            return (Reply::default_text(), None);
        };
        let i = self.at.min(last);
        let turn = &self.turns[i];
        if turn.stream.is_some_and(|s| s != stream) {
            return (Reply::default_text(), None);
        }
        let reply = turn.reply.clone();
        if self.at <= last {
            self.used += 1;
            if self.used >= turn.times {
                self.at += 1;
                self.used = 0;
            }
        }
        (reply, Some(i))
    }

    /// How long turn `i`'s answers are held (0 for the default reply's `None`).
    pub fn delay(&self, i: Option<usize>) -> std::time::Duration {
        let ms = i.and_then(|i| self.turns.get(i)).map_or(0, |t| t.delay_ms);
        std::time::Duration::from_millis(ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(r: &Reply) -> &str {
        match r {
            Reply::Message { text, .. } => text.as_deref().unwrap_or(""),
            Reply::Error { .. } => "error",
        }
    }

    #[test]
    fn turns_go_in_order_then_the_last_one_repeats() {
        let mut c = Cursor::default();
        c.load(br#"{"turns":[{"text":"a"},{"text":"b","times":2},{"text":"c"}]}"#)
            .unwrap();
        let got: Vec<(String, Option<usize>)> = (0..6)
            .map(|_| {
                let (r, i) = c.next(true);
                (text(&r).to_string(), i)
            })
            .collect();
        assert_eq!(
            got,
            [
                ("a".into(), Some(0)),
                ("b".into(), Some(1)),
                ("b".into(), Some(1)),
                ("c".into(), Some(2)),
                ("c".into(), Some(2)),
                ("c".into(), Some(2)),
            ]
        );
    }

    #[test]
    fn a_stream_only_turn_leaves_other_requests_the_default() {
        let mut c = Cursor::default();
        c.load(br#"[{"stream":true,"text":"real"},{"text":"next"}]"#)
            .unwrap();
        assert_eq!(c.next(false), (Reply::default_text(), None));
        assert_eq!(text(&c.next(true).0), "real");
        assert_eq!(text(&c.next(false).0), "next");
    }

    #[test]
    fn a_delayed_turn_says_its_delay_and_others_none() {
        let mut c = Cursor::default();
        c.load(br#"[{"text":"a","delay_ms":1500},{"text":"b"}]"#)
            .unwrap();
        let (_, i) = c.next(true);
        assert_eq!(c.delay(i), std::time::Duration::from_millis(1500));
        let (_, i) = c.next(true);
        assert_eq!(c.delay(i), std::time::Duration::ZERO);
        assert_eq!(c.delay(None), std::time::Duration::ZERO);
    }

    #[test]
    fn a_changed_file_starts_over_and_the_same_bytes_do_not() {
        let mut c = Cursor::default();
        let one = br#"[{"text":"a"},{"text":"b"}]"#;
        c.load(one).unwrap();
        assert_eq!(text(&c.next(true).0), "a");
        c.load(one).unwrap();
        assert_eq!(text(&c.next(true).0), "b");
        c.load(br#"[{"error":{"status":401}}]"#).unwrap();
        let (r, _) = c.next(true);
        assert_eq!(
            r,
            Reply::Error {
                status: 401,
                kind: "authentication_error".into(),
                message: "fakeapi: scripted error".into()
            }
        );
    }

    #[test]
    fn tool_uses_and_bad_scripts() {
        let t = parse(br#"[{"tool_use":[{"name":"Bash","input":{"command":"ls"}}]}]"#).unwrap();
        assert_eq!(
            t[0].reply,
            Reply::Message {
                text: None,
                tool_uses: vec![ToolUse {
                    id: None,
                    name: "Bash".into(),
                    input: serde_json::json!({"command": "ls"})
                }]
            }
        );
        for bad in [
            &b"[]"[..],
            b"{}",
            b"7",
            b"[{}]",
            br#"[{"error":{"status":200}}]"#,
            br#"[{"text":"a","times":0}]"#,
            br#"[{"tool_use":[{"input":{}}]}]"#,
            br#"[{"text":"a","delay_ms":600001}]"#,
            br#"[{"text":"a","delay_ms":"1"}]"#,
            b"not json",
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
