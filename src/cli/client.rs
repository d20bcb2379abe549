//! The CLI's calls to the daemon over `<config>/relay.sock`: hyper's client
//! (`src/http/client.rs`) on a current-thread runtime, one request per connection.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::http::client::{Addr, Blocking, CallError};

pub struct Client {
    pub socket: PathBuf,
    http: Result<Blocking, String>,
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

impl From<crate::http::client::Answer> for Answer {
    fn from(a: crate::http::client::Answer) -> Self {
        Answer {
            status: a.status,
            body: a.body.to_vec(),
        }
    }
}

/// What a streamed call gives: the lines of a 200 answer went to the callback; any
/// other answer comes back whole.
pub enum Streamed {
    Lines,
    Refused(Answer),
}

const JSON: [(&str, &str); 1] = [("content-type", "application/json")];

impl Client {
    pub fn new(config: &Path) -> Self {
        let socket = config.join("relay.sock");
        let http = Blocking::new(Addr::Unix(socket.clone())).map_err(|e| format!("runtime: {e}"));
        Client { socket, http }
    }

    fn http(&self) -> Result<&Blocking, String> {
        self.http.as_ref().map_err(Clone::clone)
    }

    /// What the person reads when a call got no answer.
    fn failed(&self, e: CallError) -> String {
        match e {
            CallError::Connect(e) => super::service::not_running(&self.socket, &e),
            CallError::Http(m) => format!("read from relay: {m}"),
        }
    }

    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Answer, String> {
        let payload = body
            .map(|b| serde_json::to_vec(b).unwrap_or_default())
            .unwrap_or_default();
        self.http()?
            .call(method, path, &JSON, payload)
            .map(Answer::from)
            .map_err(|e| self.failed(e))
    }

    /// One request whose 200 answer is a stream of lines (`application/x-ndjson`),
    /// each handed to `on_line` as soon as it arrives (without its newline). A refusal
    /// is read whole and returned.
    pub fn call_lines(
        &self,
        method: &str,
        path: &str,
        body: &Value,
        on_line: impl FnMut(&[u8]),
    ) -> Result<Streamed, String> {
        let payload = serde_json::to_vec(body).unwrap_or_default();
        match self
            .http()?
            .call_lines(method, path, &JSON, payload, on_line)
        {
            Ok(Ok(())) => Ok(Streamed::Lines),
            Ok(Err(a)) => Ok(Streamed::Refused(a.into())),
            Err(e) => Err(self.failed(e)),
        }
    }

    /// `GET path` upgraded to `protocol`: the connection, and the bytes that came with
    /// the answer's head; a refusal is read whole.
    pub fn upgrade(
        &self,
        path: &str,
        protocol: &str,
    ) -> Result<Result<(std::os::unix::net::UnixStream, Vec<u8>), Answer>, String> {
        match self.http()?.upgrade(path, protocol) {
            Ok(Ok((s, rest))) => Ok(Ok((s, rest.to_vec()))),
            Ok(Err(a)) => Ok(Err(a.into())),
            Err(e) => Err(self.failed(e)),
        }
    }
}
