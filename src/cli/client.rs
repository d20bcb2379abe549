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

/// What a streamed call gives: the lines of a 200 answer went to the callback; any
/// other answer comes back whole.
pub enum Streamed {
    Lines,
    Refused(Answer),
}

impl Client {
    /// One request whose 200 answer is a stream of lines (`application/x-ndjson`),
    /// each handed to `on_line` as soon as it arrives (without its newline). A refusal
    /// is read whole and returned.
    pub fn call_lines(
        &self,
        method: &str,
        path: &str,
        body: &Value,
        mut on_line: impl FnMut(&[u8]),
    ) -> Result<Streamed, String> {
        use std::io::BufRead;
        let mut s = UnixStream::connect(&self.socket).map_err(|e| {
            format!(
                "relay is not running (cannot connect to {}: {e}); start it with `relay serve`",
                self.socket.display()
            )
        })?;
        // A turn has no timeout of its own; this only bounds a silent daemon.
        s.set_read_timeout(Some(Duration::from_secs(3600))).ok();
        let payload = serde_json::to_vec(body).unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: relay\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            payload.len()
        );
        s.write_all(head.as_bytes())
            .and_then(|_| s.write_all(&payload))
            .map_err(|e| format!("send to relay: {e}"))?;
        let mut r = std::io::BufReader::new(s);
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let n = r
                .read_until(b'\n', &mut head)
                .map_err(|e| format!("read from relay: {e}"))?;
            if n == 0 || head.len() > 64 * 1024 {
                return Err("relay sent a malformed answer".into());
            }
        }
        let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
        let status: u16 = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or("relay sent a malformed status")?;
        let chunked = text.contains("transfer-encoding: chunked");
        if status != 200 {
            let mut rest = Vec::new();
            r.read_to_end(&mut rest)
                .map_err(|e| format!("read from relay: {e}"))?;
            let body = if chunked { dechunk(&rest) } else { rest };
            return Ok(Streamed::Refused(Answer { status, body }));
        }
        let mut pending: Vec<u8> = Vec::new();
        let mut feed = |data: &[u8], pending: &mut Vec<u8>| {
            pending.extend_from_slice(data);
            while let Some(pos) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=pos).collect();
                on_line(&line[..line.len() - 1]);
            }
        };
        let io = |e: std::io::Error| format!("read from relay: {e}");
        if chunked {
            loop {
                let mut size_line = String::new();
                if r.read_line(&mut size_line).map_err(io)? == 0 {
                    break;
                }
                let size =
                    usize::from_str_radix(size_line.trim().split(';').next().unwrap_or(""), 16)
                        .map_err(|_| "relay sent a malformed chunk".to_string())?;
                if size == 0 {
                    break;
                }
                let mut chunk = vec![0u8; size];
                r.read_exact(&mut chunk).map_err(io)?;
                let mut crlf = [0u8; 2];
                r.read_exact(&mut crlf).map_err(io)?;
                feed(&chunk, &mut pending);
            }
        } else {
            let mut buf = [0u8; 16 * 1024];
            loop {
                let n = r.read(&mut buf).map_err(io)?;
                if n == 0 {
                    break;
                }
                feed(&buf[..n], &mut pending);
            }
        }
        if !pending.is_empty() {
            on_line(&pending);
        }
        Ok(Streamed::Lines)
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
