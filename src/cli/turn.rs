//! `relay session message`: one turn. Without `--stream` it prints the final text; with
//! it, the turn as it happens — assistant text as it arrives and one line per tool call
//! and per tool result (`--json`: each event as one JSON line). A turn that fails (an
//! API error, Claude Code ending) is one `error:` line and exit 1; a turn whose ledger
//! update failed prints its reply, then a `warning:` line, and exits 1 (docs/cli.md).

use std::process::ExitCode;

use serde_json::Value;

use super::client::{Client, Streamed};
use super::waiting::Waiting;
use super::{emit, fail, json_bytes, termout, text_line};
use crate::protocol::TurnEvent;
use crate::wire::Code;
use crate::wire::{Message, TurnAnswer};
use serde::Deserialize;

/// A tool call's input and a tool result's text are cut to this many characters on
/// their line.
const SHOWN_MAX: usize = 200;

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn shorten(text: &str) -> String {
    let line = one_line(text);
    match line.char_indices().nth(SHOWN_MAX) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line,
    }
}

/// The `error:` text of a turn whose result is an error.
pub fn turn_failed(text: &str, api_status: Option<u64>) -> String {
    let what = match api_status {
        Some(s) => format!("the turn failed (API status {s})"),
        None => "the turn failed".to_string(),
    };
    if text.trim().is_empty() {
        what
    } else {
        format!("{what}: {}", one_line(text))
    }
}

/// Prints each of a turn's warnings as a `warning:` line on standard error; whether
/// there was one (the turn then exits 1, docs/cli.md#exit-codes).
fn warn(warnings: &[String]) -> bool {
    for w in warnings {
        eprintln!("warning: {}", one_line(w));
    }
    !warnings.is_empty()
}

/// The text form of a streamed turn, event by event.
#[derive(Default)]
pub struct Renderer {
    /// Something was written that did not end a line.
    mid_line: bool,
}

impl Renderer {
    /// What one event line prints (control bytes made visible); a line that is not a
    /// [`TurnEvent`] prints nothing.
    #[cfg(test)]
    pub fn event(&mut self, v: &Value) -> String {
        match TurnEvent::deserialize(v) {
            Ok(ev) => self.render(&ev),
            Err(_) => String::new(),
        }
    }

    /// What one event prints (control bytes made visible).
    pub fn render(&mut self, ev: &TurnEvent) -> String {
        let line = |r: &mut Renderer, text: String| {
            let lead = if r.mid_line { "\n" } else { "" };
            r.mid_line = false;
            format!("{lead}{}\n", termout::visible(text.as_bytes()))
        };
        match ev {
            TurnEvent::Text { text } => {
                let t = termout::visible(text.as_bytes());
                if !t.is_empty() {
                    self.mid_line = !t.ends_with('\n');
                }
                t
            }
            TurnEvent::ToolUse { name, input, .. } => line(
                self,
                format!("[tool] {name} {}", shorten(&input.to_string())),
            ),
            TurnEvent::ToolResult { is_error, text, .. } => {
                let label = if *is_error {
                    "[tool error]"
                } else {
                    "[tool result]"
                };
                line(self, format!("{label} {}", shorten(text)))
            }
            TurnEvent::Init(_)
            | TurnEvent::Result { .. }
            | TurnEvent::Error { .. }
            | TurnEvent::Warning { .. } => String::new(),
        }
    }

    /// What ends the output: a newline when the last text did not end its line.
    pub fn finish(&mut self) -> String {
        if std::mem::take(&mut self.mid_line) {
            "\n".into()
        } else {
            String::new()
        }
    }
}

/// The message of `relay session message`: the words joined with spaces, or `--file
/// PATH` read whole, or standard input for `-` (either way); UTF-8 and not empty
/// (docs/cli.md#prompt-input).
pub fn prompt(words: &[String], file: Option<&std::path::Path>) -> Result<String, String> {
    let from = match (words, file) {
        (_, Some(p)) if p.as_os_str() == "-" => None,
        (_, Some(p)) => Some(p),
        ([one], None) if one == "-" => None,
        (words, None) => return non_empty(words.join(" ")),
    };
    let (bytes, what) = match from {
        Some(p) => (
            std::fs::read(p).map_err(|e| format!("--file {}: {e}", p.display()))?,
            format!("--file {}", p.display()),
        ),
        None => {
            let mut b = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut b)
                .map_err(|e| format!("standard input: {e}"))?;
            (b, "standard input".to_string())
        }
    };
    let text = String::from_utf8(bytes).map_err(|e| {
        format!(
            "{what}: not UTF-8 text (byte {} is not part of a character)",
            e.utf8_error().valid_up_to()
        )
    })?;
    non_empty(text).map_err(|e| format!("{what}: {e}"))
}

fn non_empty(text: String) -> Result<String, String> {
    if text.trim().is_empty() {
        return Err("the message is empty".into());
    }
    Ok(text)
}

/// A message too large for one request, refused before it is sent: the size and
/// relay's limit, which the daemon would refuse (`payload_too_large`) while the body
/// is still being written.
pub fn too_large(body: &Message) -> Option<String> {
    let len = serde_json::to_vec(body).map_or(usize::MAX, |b| b.len());
    let max = crate::daemon::api::BODY_MAX;
    (len > max).then(|| {
        format!(
            "the message is too long: {len} bytes as sent, and relay takes at most {max} bytes \
             ({} KiB) in one request; send it in parts (docs/cli.md#prompt-input) ({})",
            max / 1024,
            Code::PayloadTooLarge
        )
    })
}

pub fn run(c: &Client, id: &str, text: &str, stream: bool, json_out: bool) -> ExitCode {
    let path = format!("/api/sessions/{id}/message");
    let body = Message {
        text: text.to_string(),
        stream,
    };
    if let Some(e) = too_large(&body) {
        return fail(e);
    }
    let progress = !stream && !json_out && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let waiting = Waiting::start(c, id, progress);
    if stream {
        streamed(c, &path, &body, json_out, &waiting)
    } else if progress {
        with_progress(c, &path, body, &waiting)
    } else {
        whole(c, &path, &body, json_out, &waiting)
    }
}

/// A turn without `--stream` on a terminal: asked for as a stream, to keep its status
/// line, and printed as [`whole`] prints it.
fn with_progress(c: &Client, path: &str, mut body: Message, waiting: &Waiting) -> ExitCode {
    body.stream = true;
    let mut last: Option<TurnEvent> = None;
    let mut warnings: Vec<String> = Vec::new();
    let answer = c.call_lines("POST", path, &body, |line| {
        match serde_json::from_slice::<TurnEvent>(line) {
            Ok(TurnEvent::ToolUse { .. }) => waiting.tool(),
            Ok(e @ (TurnEvent::Result { .. } | TurnEvent::Error { .. })) => last = Some(e),
            Ok(TurnEvent::Warning { message }) => warnings.push(message),
            _ => {}
        }
    });
    let ctrl_c = waiting.finish();
    match answer {
        Err(e) => fail(e),
        Ok(Streamed::Refused(a)) => fail(a.error_text()),
        Ok(Streamed::Lines) => match last {
            Some(TurnEvent::Result {
                text,
                is_error,
                api_error_status,
                ended,
                interrupted,
            }) => {
                let t = TurnAnswer {
                    id: body_id(path).to_string(),
                    text,
                    is_error,
                    api_error_status,
                    ended,
                    interrupted,
                    warnings,
                };
                printed(path, &t, None, ctrl_c)
            }
            last => stream_end(body_id(path), last, false, ctrl_c),
        },
    }
}

/// A turn without `--stream`: its final text (or its answer as JSON) once it is over.
fn whole(c: &Client, path: &str, body: &Message, json_out: bool, waiting: &Waiting) -> ExitCode {
    let a = c.send("POST", path, body);
    let ctrl_c = waiting.finish();
    let a = match a {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    if a.status != 200 {
        return fail(a.error_text());
    }
    let t: TurnAnswer = match a.typed(&format!("POST {path}")) {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    printed(path, &t, json_out.then(|| a.json()), ctrl_c)
}

/// A whole turn's answer printed: its text (`json`: the answer as it came), an `error:`
/// line for a failed turn, `warning:` lines.
fn printed(path: &str, t: &TurnAnswer, json: Option<Value>, ctrl_c: bool) -> ExitCode {
    let json_out = json.is_some();
    if t.is_error && !t.interrupted {
        warn(&t.warnings);
        return fail(turn_failed(&t.text, t.api_error_status.map(u64::from)));
    }
    let bytes = match &json {
        Some(v) => json_bytes(v),
        None => text_line(&t.text),
    };
    if t.interrupted {
        if json_out || !t.text.trim().is_empty() {
            let _ = emit(&bytes, ExitCode::SUCCESS);
        }
        warn(&t.warnings);
        return interrupted_end(body_id(path), ctrl_c);
    }
    let code = emit(&bytes, ExitCode::SUCCESS);
    match warn(&t.warnings) {
        true => ExitCode::FAILURE,
        false => code,
    }
}

/// A turn with `--stream`: each event printed as it arrives, then the exit status its
/// last event gives.
fn streamed(c: &Client, path: &str, body: &Message, json_out: bool, waiting: &Waiting) -> ExitCode {
    let mut r = Renderer::default();
    let mut last: Option<TurnEvent> = None;
    let mut warnings: Vec<String> = Vec::new();
    let mut out_closed = false;
    let answer = c.call_lines("POST", path, body, |line| {
        let Ok(v) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        let ev = TurnEvent::deserialize(&v).ok();
        let bytes = if json_out {
            json_bytes(&v)
        } else {
            ev.as_ref()
                .map(|e| r.render(e))
                .unwrap_or_default()
                .into_bytes()
        };
        match ev {
            Some(e @ (TurnEvent::Result { .. } | TurnEvent::Error { .. })) => last = Some(e),
            Some(TurnEvent::Warning { message }) => warnings.push(message),
            _ => {}
        }
        if !bytes.is_empty() && !out_closed {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            // A reader that went away stops the printing, not the turn.
            out_closed = out.write_all(&bytes).and_then(|()| out.flush()).is_err();
        }
    });
    let ctrl_c = waiting.finish();
    let tail = r.finish();
    if !json_out && !tail.is_empty() {
        let _ = emit(tail.as_bytes(), ExitCode::SUCCESS);
    }
    let warned = warn(&warnings);
    match answer {
        Err(e) => fail(e),
        Ok(Streamed::Refused(a)) => fail(a.error_text()),
        Ok(Streamed::Lines) => stream_end(body_id(path), last, warned, ctrl_c),
    }
}

/// The session id in a message route's path.
fn body_id(path: &str) -> &str {
    path.split('/').nth(3).unwrap_or_default()
}

/// The end of an interrupted turn: the reply so far is printed; one line says so, and
/// the exit is 1, or 130 when this command's Ctrl-C interrupted it.
fn interrupted_end(id: &str, ctrl_c: bool) -> ExitCode {
    eprintln!(
        "relay: the turn was interrupted; the reply so far is above (relay session log --id \
         {id} keeps it), and the session takes the next message"
    );
    match ctrl_c {
        true => ExitCode::from(130),
        false => ExitCode::FAILURE,
    }
}

/// The exit status of a streamed turn from its last `result` or `error` event: 0 for a
/// good result, 1 with a warning; an `error:` line for a failed turn, an error, or none.
fn stream_end(id: &str, last: Option<TurnEvent>, warned: bool, ctrl_c: bool) -> ExitCode {
    match last {
        Some(TurnEvent::Result {
            interrupted: true, ..
        }) => interrupted_end(id, ctrl_c),
        Some(TurnEvent::Result {
            is_error: false, ..
        }) if warned => ExitCode::FAILURE,
        Some(TurnEvent::Result {
            is_error: false, ..
        }) => ExitCode::SUCCESS,
        Some(TurnEvent::Result {
            text,
            api_error_status,
            ..
        }) => fail(turn_failed(&text, api_error_status.map(u64::from))),
        Some(TurnEvent::Error { code, message }) => fail(format!("{message} ({code})")),
        _ => fail(format!(
            "the turn ended without an answer ({})",
            Code::SessionExited
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_streamed_turn_reads_as_text_with_one_line_per_tool_call_and_result() {
        let mut r = Renderer::default();
        let mut out = String::new();
        for ev in [
            json!({"type": "init", "model": "m"}),
            json!({"type": "text", "text": "let me "}),
            json!({"type": "text", "text": "look"}),
            json!({"type": "tool_use", "id": "t", "name": "Bash", "input": {"command": "cat x"}}),
            json!({"type": "tool_result", "tool_use_id": "t", "is_error": true, "text": "cat: x:\nPermission denied"}),
            json!({"type": "tool_result", "tool_use_id": "u", "is_error": false, "text": "ok"}),
            json!({"type": "text", "text": "done \u{1b}]52;c;eA==\u{7}"}),
            json!({"type": "result", "text": "done", "is_error": false}),
        ] {
            out.push_str(&r.event(&ev));
        }
        out.push_str(&r.finish());
        assert_eq!(
            out,
            "let me look\n[tool] Bash {\"command\":\"cat x\"}\n[tool error] cat: x: Permission denied\n[tool result] ok\ndone ^[]52;c;eA==^G\n"
        );
        assert_eq!(r.finish(), "");
    }

    #[test]
    fn long_inputs_are_cut_and_failures_name_the_status() {
        let mut r = Renderer::default();
        let long = "x".repeat(500);
        let line = r.event(
            &json!({"type": "tool_result", "tool_use_id": "t", "is_error": false, "text": long}),
        );
        assert_eq!(line.chars().count(), "[tool result] ".len() + SHOWN_MAX + 2);
        assert_eq!(
            turn_failed("API Error: 401\n{\"message\":\"bad\"}", Some(401)),
            "the turn failed (API status 401): API Error: 401 {\"message\":\"bad\"}"
        );
        assert_eq!(turn_failed("", None), "the turn failed");
    }
}
