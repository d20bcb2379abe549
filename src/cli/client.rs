//! The CLI's HTTP client over `<config>/relay.sock`: one request per connection.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

pub struct Client {
    pub socket: PathBuf,
}

pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The refusal message of a non-2xx answer.
    pub fn error_text(&self) -> String {
        let v = self.json();
        match (v["error"].as_str(), v["code"].as_str()) {
            (Some(m), Some(c)) => format!("{m} ({c})"),
            (Some(m), None) => m.to_string(),
            _ => format!("relay answered {}", self.status),
        }
    }
}

impl Client {
    pub fn new(config: &Path) -> Self {
        Client {
            socket: config.join("relay.sock"),
        }
    }

    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Answer, String> {
        let mut s = UnixStream::connect(&self.socket).map_err(|e| {
            format!(
                "relay is not running (cannot connect to {}: {e}); start it with `relay serve`",
                self.socket.display()
            )
        })?;
        s.set_read_timeout(Some(Duration::from_secs(600))).ok();
        let payload = body
            .map(|b| serde_json::to_vec(b).unwrap_or_default())
            .unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: relay\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            payload.len()
        );
        s.write_all(head.as_bytes())
            .and_then(|_| s.write_all(&payload))
            .map_err(|e| format!("send to relay: {e}"))?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw)
            .map_err(|e| format!("read from relay: {e}"))?;
        parse(&raw)
    }
}

fn parse(raw: &[u8]) -> Result<Answer, String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("relay sent a malformed answer")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("relay sent a malformed status")?;
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    Ok(Answer { status, body })
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = data.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&data[..end]).trim(), 16).unwrap_or(0);
        if size == 0 || data.len() < end + 2 + size {
            break;
        }
        out.extend_from_slice(&data[end + 2..end + 2 + size]);
        data = &data[(end + 4 + size).min(data.len())..];
    }
    out
}
