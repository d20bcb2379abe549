//! One JSON line per request `fakeapi` receives: what a test needs to know about the
//! credential and the conversation, never the credential itself.
//!
//! `bearer_sha256` is the SHA-256 of what follows `Bearer ` in `Authorization` (null
//! when there is no such header), `x_api_key_sha256` the same for `x-api-key`. From a
//! Messages request: `model`, `stream`, `messages` (their number), `tool_results` (each
//! `{tool_use_id, is_error, text}`) and `user_texts` (the user's own text blocks, Claude
//! Code's `<system-reminder>` blocks left out, each cut to 2000 bytes).

use serde_json::{json, Value};

use crate::call_log::sha256_hex;

/// A text longer than this is cut (on a character boundary) in the record.
const TEXT_MAX: usize = 2000;

fn cut(s: &str) -> String {
    if s.len() <= TEXT_MAX {
        return s.to_string();
    }
    let mut end = TEXT_MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The text of a `tool_result` block's content: a string, or its text blocks joined.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The conversation fields of a Messages request body.
pub fn conversation(body: &Value) -> Value {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let mut tool_results = Vec::new();
    let mut user_texts = Vec::new();
    for m in &messages {
        let blocks = match &m["content"] {
            Value::String(s) => vec![json!({"type": "text", "text": s})],
            Value::Array(b) => b.clone(),
            _ => vec![],
        };
        for b in blocks {
            match b["type"].as_str() {
                Some("tool_result") => tool_results.push(json!({
                    "tool_use_id": b["tool_use_id"],
                    "is_error": b["is_error"].as_bool().unwrap_or(false),
                    "text": cut(&content_text(&b["content"])),
                })),
                Some("text") if m["role"] == "user" => {
                    let t = b["text"].as_str().unwrap_or_default();
                    if !t.trim_start().starts_with("<system-reminder>") {
                        user_texts.push(Value::String(cut(t)));
                    }
                }
                _ => {}
            }
        }
    }
    json!({
        "model": body["model"],
        "stream": body["stream"].as_bool().unwrap_or(false),
        "messages": messages.len(),
        "tool_results": tool_results,
        "user_texts": user_texts,
    })
}

/// The digest of a credential header's value; `prefix` is stripped first when given.
pub fn credential_sha256(value: Option<&[u8]>, prefix: Option<&[u8]>) -> Value {
    let Some(v) = value else {
        return Value::Null;
    };
    let v = match prefix {
        Some(p) => match v.strip_prefix(p) {
            Some(rest) => rest,
            // Another scheme: still never recorded as is.
            None => v,
        },
        None => v,
    };
    Value::String(sha256_hex(v))
}

/// The record of one request. `headers` are (lowercase name, value) pairs.
pub fn line(
    method: &str,
    path: &str,
    headers: &[(String, Vec<u8>)],
    body: Option<&Value>,
    status: u16,
    turn: Option<usize>,
) -> Value {
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    };
    let mut v = json!({
        "method": method,
        "path": path,
        "bearer_sha256": credential_sha256(header("authorization"), Some(b"Bearer ")),
        "x_api_key_sha256": credential_sha256(header("x-api-key"), None),
        "anthropic_beta": header("anthropic-beta").map(|b| String::from_utf8_lossy(b).into_owned()),
        "status": status,
        "turn": turn,
    });
    if let (Some(b), Some(obj)) = (body, v.as_object_mut()) {
        if let Some(conv) = conversation(b).as_object() {
            for (k, x) in conv {
                obj.insert(k.clone(), x.clone());
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_is_recorded_as_its_digest_only() {
        let token = "sk-ant-oat01-secret";
        let headers = vec![
            (
                "authorization".to_string(),
                format!("Bearer {token}").into_bytes(),
            ),
            ("anthropic-beta".to_string(), b"oauth-2025-04-20,x".to_vec()),
        ];
        let v = line("POST", "/v1/messages", &headers, None, 200, Some(0));
        assert_eq!(v["bearer_sha256"], sha256_hex(token.as_bytes()));
        assert_eq!(v["x_api_key_sha256"], Value::Null);
        assert_eq!(v["anthropic_beta"], "oauth-2025-04-20,x");
        assert!(!v.to_string().contains(token));
        let none = line("POST", "/v1/messages", &[], None, 200, None);
        assert_eq!(none["bearer_sha256"], Value::Null);
        assert_eq!(none["anthropic_beta"], Value::Null);
    }

    #[test]
    fn tool_results_and_user_texts_are_pulled_from_the_messages() {
        let body = json!({
            "model": "claude-x",
            "stream": true,
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "<system-reminder>\nnoise</system-reminder>"},
                    {"type": "text", "text": "make a file"}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "done", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "t2", "is_error": true,
                     "content": [{"type": "text", "text": "Permission denied"}]}]},
                {"role": "user", "content": "plain string"},
            ],
        });
        let v = line("POST", "/v1/messages", &[], Some(&body), 200, Some(1));
        assert_eq!(v["model"], "claude-x");
        assert_eq!(v["stream"], true);
        assert_eq!(v["messages"], 4);
        assert_eq!(
            v["tool_results"],
            json!([
                {"tool_use_id": "t1", "is_error": false, "text": "done"},
                {"tool_use_id": "t2", "is_error": true, "text": "Permission denied"},
            ])
        );
        assert_eq!(v["user_texts"], json!(["make a file", "plain string"]));
    }
}
