//! The bodies `fakeapi` sends: a Messages API answer as one JSON object or as a
//! server-sent event stream, and Anthropic's error shape.

use serde_json::{json, Value};

use super::script::{Reply, ToolUse};

/// A text reply is streamed in pieces of at most this many bytes, so a client sees
/// several `text_delta` events.
const DELTA_BYTES: usize = 16;

fn tool_id(t: &ToolUse, message: u64, k: usize) -> String {
    t.id.clone()
        .unwrap_or_else(|| format!("toolu_fake_{message}_{k}"))
}

fn stop_reason(tool_uses: &[ToolUse]) -> &'static str {
    if tool_uses.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    }
}

/// The content blocks of a message reply.
fn blocks(text: &Option<String>, tool_uses: &[ToolUse], message: u64) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(t) = text {
        out.push(json!({"type": "text", "text": t}));
    }
    for (k, t) in tool_uses.iter().enumerate() {
        out.push(json!({"type": "tool_use", "id": tool_id(t, message, k), "name": t.name, "input": t.input}));
    }
    out
}

/// `{"type":"error","error":{"type":…,"message":…}}`
pub fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// The non-streaming answer: `(status, JSON body)`.
pub fn json_answer(reply: &Reply, model: &str, message: u64) -> (u16, Value) {
    match reply {
        Reply::Error {
            status,
            kind,
            message,
        } => (*status, error_body(kind, message)),
        Reply::Message { text, tool_uses } => (
            200,
            json!({
                "id": format!("msg_fake_{message}"),
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": blocks(text, tool_uses, message),
                "stop_reason": stop_reason(tool_uses),
                "stop_sequence": null,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            }),
        ),
    }
}

fn event(out: &mut String, name: &str, data: &Value) {
    out.push_str("event: ");
    out.push_str(name);
    out.push_str("\ndata: ");
    out.push_str(&data.to_string());
    out.push_str("\n\n");
}

/// Pieces of `text` of at most [`DELTA_BYTES`], cut on character boundaries.
fn pieces(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = DELTA_BYTES.min(rest.len());
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        out.push(&rest[..end]);
        rest = &rest[end..];
    }
    out
}

/// The streaming answer: `message_start`, per block `content_block_start`, deltas and
/// `content_block_stop`, then `message_delta` and `message_stop`. An error is not
/// streamed: it is the JSON error with its status, as the real API answers before a
/// stream starts.
pub fn sse_answer(reply: &Reply, model: &str, message: u64) -> Result<String, (u16, Value)> {
    let (text, tool_uses) = match reply {
        Reply::Error { .. } => return Err(json_answer(reply, model, message)),
        Reply::Message { text, tool_uses } => (text, tool_uses),
    };
    let mut out = String::new();
    event(
        &mut out,
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": format!("msg_fake_{message}"), "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 1, "output_tokens": 1}}}),
    );
    let mut index = 0;
    if let Some(t) = text {
        event(
            &mut out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        );
        for p in pieces(t) {
            event(
                &mut out,
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": p}}),
            );
        }
        event(
            &mut out,
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        );
        index += 1;
    }
    for (k, t) in tool_uses.iter().enumerate() {
        event(
            &mut out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": {
                "type": "tool_use", "id": tool_id(t, message, k), "name": t.name, "input": {}}}),
        );
        event(
            &mut out,
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": {
                "type": "input_json_delta", "partial_json": t.input.to_string()}}),
        );
        event(
            &mut out,
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        );
        index += 1;
    }
    event(
        &mut out,
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": stop_reason(tool_uses), "stop_sequence": null},
                "usage": {"output_tokens": 1}}),
    );
    event(&mut out, "message_stop", &json!({"type": "message_stop"}));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(sse: &str) -> Vec<(String, Value)> {
        sse.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let mut lines = e.lines();
                let name = lines.next().unwrap().strip_prefix("event: ").unwrap();
                let data = lines.next().unwrap().strip_prefix("data: ").unwrap();
                (name.to_string(), serde_json::from_str(data).unwrap())
            })
            .collect()
    }

    #[test]
    fn a_streamed_text_and_tool_call_rebuild_to_the_scripted_reply() {
        let reply = Reply::Message {
            text: Some("héllo, this is more than sixteen bytes".into()),
            tool_uses: vec![ToolUse {
                id: None,
                name: "Bash".into(),
                input: json!({"command": "echo hi"}),
            }],
        };
        let ev = events(&sse_answer(&reply, "m1", 3).unwrap());
        let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.first(), Some(&"message_start"));
        assert_eq!(&names[names.len() - 2..], ["message_delta", "message_stop"]);
        for (name, data) in &ev {
            assert_eq!(data["type"], name.as_str());
        }
        let text: String = ev
            .iter()
            .filter(|(_, d)| d["delta"]["type"] == "text_delta")
            .map(|(_, d)| d["delta"]["text"].as_str().unwrap())
            .collect();
        assert_eq!(text, "héllo, this is more than sixteen bytes");
        assert!(
            ev.iter()
                .filter(|(_, d)| d["delta"]["type"] == "text_delta")
                .count()
                > 1
        );
        let tool = ev
            .iter()
            .find(|(_, d)| d["content_block"]["type"] == "tool_use")
            .unwrap();
        assert_eq!(tool.1["content_block"]["id"], "toolu_fake_3_0");
        assert_eq!(tool.1["index"], 1);
        let partial = ev
            .iter()
            .find(|(_, d)| d["delta"]["type"] == "input_json_delta")
            .unwrap();
        let input: Value =
            serde_json::from_str(partial.1["delta"]["partial_json"].as_str().unwrap()).unwrap();
        assert_eq!(input, json!({"command": "echo hi"}));
        assert_eq!(ev[ev.len() - 2].1["delta"]["stop_reason"], "tool_use");
        assert_eq!(ev[0].1["message"]["model"], "m1");
    }

    #[test]
    fn errors_are_json_with_their_status_streamed_or_not() {
        let reply = Reply::Error {
            status: 429,
            kind: "rate_limit_error".into(),
            message: "slow down".into(),
        };
        let (status, body) = sse_answer(&reply, "m", 1).unwrap_err();
        assert_eq!(status, 429);
        assert_eq!(
            body,
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
        );
        assert_eq!(json_answer(&reply, "m", 1), (429, body));
        let (status, ok) = json_answer(&Reply::default_text(), "m", 2);
        assert_eq!(status, 200);
        assert_eq!(ok["content"], json!([{"type": "text", "text": "ok"}]));
        assert_eq!(ok["stop_reason"], "end_turn");
    }
}
