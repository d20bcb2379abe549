//! Headless mode: Claude Code's stream-json protocol, one JSON object per line each way.
//!
//! In: `{"type":"user","message":{"role":"user","content":…}}` where content is a string
//! or an array of `{"type":"text","text":…}` blocks (their texts are joined). Lines of any
//! other type and blank lines are ignored. Out, per turn: one `assistant` line per line
//! of the reply, then a `result` line with the whole reply. A `system`/`init` line comes once, before the first line
//! of output. A line that is not a JSON object or has no usable content is answered with
//! an `error_during_execution` result and the session carries on. A `control_request`
//! with a `request_id` is answered at once with a bare `control_response` `success`
//! naming it (relay asks `initialize` at a session's start, as Claude Code answers it),
//! before any `init` line.

use std::io::{self, BufRead, Write};

use serde_json::Value;

use super::reply::{self, Answer};
use crate::call_log::JsonLine;

/// The identity the output lines carry.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: String,
    pub cwd: String,
    /// Where each turn appends a line, as Claude Code keeps its transcript:
    /// `$CLAUDE_CONFIG_DIR` (else `~/.claude`) `/projects/<cwd, / as ->/<id>.jsonl`.
    /// relay's resume looks for it there.
    pub transcript: Option<std::path::PathBuf>,
}

impl Session {
    /// `fake-<pid>` in this process's working directory.
    pub fn for_this_process() -> Self {
        let id = format!("fake-{}", std::process::id());
        let cwd = std::env::current_dir()
            .map(|dir| dir.to_string_lossy().into_owned())
            .unwrap_or_default();
        let config = std::env::var_os("CLAUDE_CONFIG_DIR")
            .map(std::path::PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".claude")));
        let transcript = config.map(|c| {
            c.join("projects")
                .join(cwd.replace('/', "-"))
                .join(format!("{id}.jsonl"))
        });
        Session {
            id,
            cwd,
            transcript,
        }
    }

    /// Appends one turn's user text to the transcript (best effort, as a stand-in).
    fn record(&self, text: &str) {
        let Some(path) = &self.transcript else { return };
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{}", serde_json::json!({"type": "user", "text": text}));
        }
    }
}

/// One input line, understood.
#[derive(Debug, PartialEq, Eq)]
pub enum Input {
    User(String),
    /// A control request: its `request_id`.
    Control(String),
    Ignored,
    Malformed(String),
}

/// Parses one input line (without its newline).
pub fn parse_input(line: &[u8]) -> Input {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Input::Ignored;
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(err) => return Input::Malformed(format!("input line is not valid JSON: {err}")),
    };
    let Some(object) = value.as_object() else {
        return Input::Malformed("input line is not a JSON object".to_string());
    };
    if object.get("type").and_then(Value::as_str) == Some("control_request") {
        return match object.get("request_id").and_then(Value::as_str) {
            Some(id) => Input::Control(id.to_string()),
            None => Input::Ignored,
        };
    }
    if object.get("type").and_then(Value::as_str) != Some("user") {
        return Input::Ignored;
    }
    match object
        .get("message")
        .and_then(|message| message.get("content"))
    {
        Some(Value::String(text)) => Input::User(text.clone()),
        Some(Value::Array(blocks)) => Input::User(
            blocks
                .iter()
                .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|block| block.get("text").and_then(Value::as_str))
                .collect(),
        ),
        _ => Input::Malformed(
            "user message has no message.content (a string or an array of text blocks)".to_string(),
        ),
    }
}

/// `{"type":"system","subtype":"init",…}`
pub fn init_line(session: &Session) -> String {
    JsonLine::new()
        .field("type", "system")
        .field("subtype", "init")
        .field("session_id", session.id.as_str())
        .field("cwd", session.cwd.as_str())
        .finish()
}

/// `{"type":"assistant","message":{…,"content":[{"type":"text","text":reply}]},…}`
pub fn assistant_line(session: &Session, reply: &str) -> String {
    let text = JsonLine::new().field("type", "text").field("text", reply);
    JsonLine::new()
        .field("type", "assistant")
        .object(
            "message",
            JsonLine::new()
                .field("role", "assistant")
                .objects("content", vec![text]),
        )
        .field("session_id", session.id.as_str())
        .finish()
}

/// `{"type":"control_response","response":{"subtype":"success","request_id":id,"response":{}}}`
pub fn control_response_line(id: &str) -> String {
    JsonLine::new()
        .field("type", "control_response")
        .object(
            "response",
            JsonLine::new()
                .field("subtype", "success")
                .field("request_id", id)
                .object("response", JsonLine::new()),
        )
        .finish()
}

/// `{"type":"result",…}`: `success` with the reply, or `error_during_execution` with the
/// problem.
pub fn result_line(session: &Session, result: Result<&str, &str>, num_turns: u64) -> String {
    let (subtype, is_error, text) = match result {
        Ok(reply) => ("success", false, reply),
        Err(problem) => ("error_during_execution", true, problem),
    };
    JsonLine::new()
        .field("type", "result")
        .field("subtype", subtype)
        .field("is_error", is_error)
        .field("result", text)
        .field("session_id", session.id.as_str())
        .field("num_turns", num_turns)
        .finish()
}

/// Answers turns from `input` until EOF (exit code 0) or `!exit n` (exit code n).
pub fn run<R: BufRead, W: Write>(mut input: R, out: &mut W, session: &Session) -> io::Result<i32> {
    let mut init_sent = false;
    let mut turns = 0u64;
    let mut line = Vec::new();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            return Ok(0);
        }
        let lines = match parse_input(trim_newline(&line)) {
            Input::Ignored => continue,
            Input::Control(id) => {
                writeln!(out, "{}", control_response_line(&id))?;
                out.flush()?;
                continue;
            }
            Input::Malformed(problem) => vec![result_line(session, Err(&problem), turns)],
            Input::User(text) => match reply::answer(&text) {
                Answer::Exit(code) => {
                    out.flush()?;
                    // Last words on stderr, as a Claude Code that ends says why there.
                    eprintln!("fakeagent: exit {code} as asked");
                    return Ok(code);
                }
                Answer::Reply(reply) => {
                    turns += 1;
                    session.record(&text);
                    // One assistant line per line of the reply, as Claude Code sends a
                    // message per content block: a long answer is many events.
                    let mut lines: Vec<String> = reply
                        .split_inclusive('\n')
                        .map(|part| assistant_line(session, part))
                        .collect();
                    lines.push(result_line(session, Ok(&reply), turns));
                    lines
                }
            },
        };
        if !init_sent {
            init_sent = true;
            writeln!(out, "{}", init_line(session))?;
            out.flush()?;
        }
        for output in lines {
            writeln!(out, "{output}")?;
            out.flush()?;
        }
    }
}

/// `line` without its `\n` or `\r\n`.
pub fn trim_newline(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Session {
        Session {
            id: "fake-1".into(),
            cwd: "/w".into(),
            transcript: None,
        }
    }

    fn drive(input: &str) -> (i32, Vec<Value>) {
        let mut out = Vec::new();
        let code = run(input.as_bytes(), &mut out, &session()).unwrap();
        let lines = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (code, lines)
    }

    #[test]
    fn parses_string_and_block_content() {
        assert_eq!(
            parse_input(br#"{"type":"user","message":{"role":"user","content":"hello"}}"#),
            Input::User("hello".into())
        );
        assert_eq!(
            parse_input(
                br#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"a"},{"type":"image"},{"type":"text","text":"b"}]}}"#
            ),
            Input::User("ab".into())
        );
    }

    #[test]
    fn other_types_and_blank_lines_are_ignored() {
        assert_eq!(
            parse_input(br#"{"type":"control_request"}"#),
            Input::Ignored
        );
        assert_eq!(parse_input(br#"{"message":{}}"#), Input::Ignored);
        assert_eq!(parse_input(b"   "), Input::Ignored);
    }

    #[test]
    fn a_control_request_is_answered_at_once_before_any_init() {
        assert_eq!(
            parse_input(br#"{"type":"control_request","request_id":"r1","request":{"subtype":"initialize"}}"#),
            Input::Control("r1".into())
        );
        let (code, lines) = drive(
            "{\"type\":\"control_request\",\"request_id\":\"r1\",\"request\":{\"subtype\":\"initialize\"}}\n",
        );
        assert_eq!(code, 0);
        assert_eq!(
            lines,
            vec![serde_json::json!({"type": "control_response",
                "response": {"subtype": "success", "request_id": "r1", "response": {}}})]
        );
    }

    #[test]
    fn malformed_lines_are_reported() {
        assert!(matches!(parse_input(b"{not json"), Input::Malformed(_)));
        assert!(matches!(parse_input(b"[1]"), Input::Malformed(_)));
        assert!(matches!(
            parse_input(br#"{"type":"user","message":{"content":7}}"#),
            Input::Malformed(_)
        ));
        assert!(matches!(parse_input(b"\xff"), Input::Malformed(_)));
    }

    #[test]
    fn a_turn_answers_init_assistant_result() {
        let (code, lines) = drive(
            "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"hello\"}}\n\
             {\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"again\"}}",
        );
        assert_eq!(code, 0);
        assert_eq!(lines.len(), 5);
        assert_eq!(
            lines[0],
            serde_json::json!({"type":"system","subtype":"init","session_id":"fake-1","cwd":"/w"})
        );
        assert_eq!(
            lines[1],
            serde_json::json!({"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"echo: hello"}]},"session_id":"fake-1"})
        );
        assert_eq!(
            lines[2],
            serde_json::json!({"type":"result","subtype":"success","is_error":false,"result":"echo: hello","session_id":"fake-1","num_turns":1})
        );
        assert_eq!(lines[3]["type"], "assistant");
        assert_eq!(lines[4]["num_turns"], 2);
    }

    #[test]
    fn malformed_line_gets_an_error_result_and_the_session_goes_on() {
        let (code, lines) =
            drive("oops\n{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"x\"}}\n");
        assert_eq!(code, 0);
        assert_eq!(lines[0]["subtype"], "init");
        assert_eq!(lines[1]["type"], "result");
        assert_eq!(lines[1]["subtype"], "error_during_execution");
        assert_eq!(lines[1]["is_error"], true);
        assert!(lines[1]["result"]
            .as_str()
            .unwrap()
            .contains("not valid JSON"));
        assert_eq!(lines[2]["type"], "assistant");
        assert_eq!(lines.len(), 4);
    }

    #[test]
    fn exit_turn_stops_without_an_answer() {
        let (code, lines) = drive(
            "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"!exit 9\"}}\n\
             {\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"never\"}}\n",
        );
        assert_eq!(code, 9);
        assert!(lines.is_empty());
    }

    #[test]
    fn a_reply_of_several_lines_is_one_assistant_line_each() {
        let (_, lines) = drive(
            "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"!sh printf 'a\\\\nb\\\\n'\"}}\n",
        );
        let texts: Vec<&str> = lines
            .iter()
            .filter(|l| l["type"] == "assistant")
            .map(|l| l["message"]["content"][0]["text"].as_str().unwrap())
            .collect();
        assert_eq!(texts, ["exit: 0\n", "a\n", "b\n"]);
        assert_eq!(lines.last().unwrap()["result"], "exit: 0\na\nb\n");
    }
}
