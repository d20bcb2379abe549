//! The CLI's calls to the daemon over `<config>/relay.sock`: hyper's client
//! (`src/http/client.rs`) on a current-thread runtime, one request per connection.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::unit;
use crate::daemon::paths::Paths;
use crate::http::client::{Addr, Blocking, CallError};
use crate::wire::ErrorBody;

pub struct Client {
    pub socket: PathBuf,
    http: Result<Blocking, String>,
    /// Whether relay answered this command's first look ([`Client::answering`]).
    checked: std::cell::Cell<bool>,
}

/// How long relay has to answer a command's first look (`GET /api/status`) before the
/// command gives up saying relay is hung (docs/cli.md#when-relay-does-not-answer).
pub const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(20);

pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The body as its wire type (`crate::wire`): an answer that is not one is an
    /// error naming `route` (`GET /api/sessions`) and what was wrong, never a `?`.
    pub fn typed<T: DeserializeOwned>(&self, route: &str) -> Result<T, String> {
        serde_json::from_slice(&self.body).map_err(|e| format!("relay's answer to {route}: {e}"))
    }

    /// The refusal message of a non-2xx answer (`wire::ErrorBody`).
    pub fn error_text(&self) -> String {
        match serde_json::from_slice::<ErrorBody>(&self.body) {
            Ok(e) => format!("{} ({})", e.message, e.code),
            Err(_) => format!("relay answered {}", self.status),
        }
    }

    /// A 2xx answer as its wire type `T` and as it came (what `--json` prints); a
    /// refusal is its message.
    pub fn read<T: DeserializeOwned>(&self, route: &str) -> Result<(T, Value), String> {
        if !(200..300).contains(&self.status) {
            return Err(self.error_text());
        }
        Ok((self.typed(route)?, self.json()))
    }

    /// Whether the body is a refusal (`wire::ErrorBody`).
    pub fn is_refusal(&self) -> bool {
        serde_json::from_slice::<ErrorBody>(&self.body).is_ok()
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
        Client {
            socket,
            http,
            checked: std::cell::Cell::new(false),
        }
    }

    /// Before a command's first call: relay answers at all. A stopped (SIGSTOP) or
    /// stuck relay accepts the connection and never answers; without this look every
    /// verb would wait for ever, silently. A relay that is not running is left to the
    /// call itself to report.
    fn answering(&self) -> Result<(), String> {
        if self.checked.replace(true) {
            return Ok(());
        }
        match self
            .http()?
            .call_within(ANSWER_WITHIN, "GET", "/api/status")
        {
            Some(_) => Ok(()),
            None => Err(hung(&self.socket, ANSWER_WITHIN)),
        }
    }

    fn http(&self) -> Result<&Blocking, String> {
        self.http.as_ref().map_err(Clone::clone)
    }

    /// What the person reads when a call got no answer: relay not running, or a
    /// sentence for a connection that broke off during `method path`, never the
    /// transport's own words alone.
    fn failed(&self, e: CallError, method: &str, path: &str) -> String {
        match e {
            CallError::Connect(e) => not_running(&self.socket, &e),
            CallError::Http(m) => cut_off(&self.socket, &format!("{method} {path}"), &m),
        }
    }

    /// One request without a body.
    pub fn call(&self, method: &str, path: &str) -> Result<Answer, String> {
        self.call_bytes(method, path, Vec::new())
    }

    /// One request with `body` (a `crate::wire` request type) as JSON.
    pub fn send(&self, method: &str, path: &str, body: &impl Serialize) -> Result<Answer, String> {
        let payload = serde_json::to_vec(body).map_err(|e| format!("request body: {e}"))?;
        self.call_bytes(method, path, payload)
    }

    /// `method path` without a body, its answer read as `T` ([`Answer::read`]).
    pub fn call_as<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
    ) -> Result<(T, Value), String> {
        self.call(method, path)?.read(&format!("{method} {path}"))
    }

    /// `method path` with `body`, its answer read as `T` ([`Answer::read`]).
    pub fn send_as<T: DeserializeOwned>(
        &self,
        method: &str,
        path: &str,
        body: &impl Serialize,
    ) -> Result<(T, Value), String> {
        self.send(method, path, body)?
            .read(&format!("{method} {path}"))
    }

    fn call_bytes(&self, method: &str, path: &str, payload: Vec<u8>) -> Result<Answer, String> {
        self.answering()?;
        self.http()?
            .call(method, path, &JSON, payload)
            .map(Answer::from)
            .map_err(|e| self.failed(e, method, path))
    }

    /// One request whose 200 answer is a stream of lines (`application/x-ndjson`),
    /// each handed to `on_line` as soon as it arrives (without its newline). A refusal
    /// is read whole and returned.
    pub fn call_lines(
        &self,
        method: &str,
        path: &str,
        body: &impl Serialize,
        on_line: impl FnMut(&[u8]),
    ) -> Result<Streamed, String> {
        let payload = serde_json::to_vec(body).map_err(|e| format!("request body: {e}"))?;
        self.answering()?;
        match self
            .http()?
            .call_lines(method, path, &JSON, payload, on_line)
        {
            Ok(Ok(())) => Ok(Streamed::Lines),
            Ok(Err(a)) => Ok(Streamed::Refused(a.into())),
            Err(e) => Err(self.failed(e, method, path)),
        }
    }

    /// `GET path` upgraded to `protocol`: the connection, and the bytes that came with
    /// the answer's head; a refusal is read whole.
    pub fn upgrade(
        &self,
        path: &str,
        protocol: &str,
    ) -> Result<Result<(std::os::unix::net::UnixStream, Vec<u8>), Answer>, String> {
        self.answering()?;
        match self.http()?.upgrade(path, protocol) {
            Ok(Ok((s, rest))) => Ok(Ok((s, rest.to_vec()))),
            Ok(Err(a)) => Ok(Err(a.into())),
            Err(e) => Err(self.failed(e, "GET", path)),
        }
    }
}

/// How the sentences below begin, so a failure's code is read back from them
/// ([`unavailable`]).
const NOT_RUNNING: &str = "relay is not running (cannot connect to ";
const NOT_ANSWERING: &str = " took the connection on ";
const STOPPED: &str = "relay stopped while answering ";
const CLOSED: &str = "relay closed the connection while answering ";

/// The CLI's code for a sentence of this file (`crate::cli::failure`): relay not
/// running, not answering, or the connection cut off; `None` for any other.
pub(super) fn unavailable(msg: &str) -> Option<&'static str> {
    if msg.starts_with(NOT_RUNNING) {
        Some("daemon_unreachable")
    } else if msg.starts_with("relay") && msg.contains(NOT_ANSWERING) {
        Some("daemon_not_answering")
    } else if msg.starts_with(STOPPED) || msg.starts_with(CLOSED) {
        Some("connection_lost")
    } else {
        None
    }
}

/// What a verb says when the connection to relay broke off during `what`: relay stopped
/// (nothing listens on `socket` any more), or it closed this one connection; either
/// way where its log is. `why` is the transport's word, kept last for a bug report.
fn cut_off(socket: &Path, what: &str, why: &str) -> String {
    let log = socket
        .parent()
        .map(|config| Paths {
            config: config.to_path_buf(),
        })
        .map(|p| p.log().display().to_string())
        .unwrap_or_default();
    // A relay that died closes this connection a moment before its listener (the
    // kernel closes a dead process's descriptors one by one): look for a while.
    let gone = (0..20).any(|i| {
        if i > 0 {
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        std::os::unix::net::UnixStream::connect(socket).is_err()
    });
    if gone {
        format!(
            "{STOPPED}{what}; see {log} for why, and start it again with `{}` ({why})",
            serve_command(socket.parent())
        )
    } else {
        format!("{CLOSED}{what}; see {log} ({why})")
    }
}

/// What a verb says when relay took the connection and gave no answer within `limit`:
/// its pid (from `ready.json`), what may hold it, and what to do.
fn hung(socket: &Path, limit: std::time::Duration) -> String {
    let config = socket.parent().unwrap_or(Path::new("."));
    let paths = Paths {
        config: config.to_path_buf(),
    };
    let pid = std::fs::read(paths.ready())
        .ok()
        .and_then(|b| serde_json::from_slice::<crate::wire::Ready>(&b).ok())
        .map(|r| r.pid);
    let who = pid.map_or("relay".to_string(), |p| format!("relay (pid {p})"));
    let (resume, stop) = match pid {
        Some(p) => (format!("`kill -CONT {p}`"), format!("`kill {p}`")),
        None => ("`kill -CONT <pid>`".into(), "stop it".into()),
    };
    format!(
        "{who}{NOT_ANSWERING}{} but did not answer in {} s: it may be stopped \
         (a Ctrl-Z or SIGSTOP; {resume} resumes it) or stuck. See {}; if it stays so, \
         {stop} and start it again with `{}`",
        socket.display(),
        limit.as_secs(),
        paths.log().display(),
        serve_command(Some(config))
    )
}

/// What a verb says when no relay answers on `socket`: that relay is not running and
/// how to start it, and, when a login service for this config dir is installed, where
/// to look.
fn not_running(socket: &Path, why: &std::io::Error) -> String {
    let mut msg = format!("{NOT_RUNNING}{}: {why}); ", socket.display());
    let serve = serve_command(socket.parent());
    let installed = socket
        .parent()
        .zip(unit::place().ok())
        .and_then(|(config, p)| {
            Some((config.to_path_buf(), std::fs::read_to_string(&p.file).ok()?))
        })
        .filter(|(config, content)| unit::names_config_dir(content, config));
    match installed {
        Some((config, _)) => msg.push_str(&format!(
            "its login service is installed but relay is not answering: see `relay service status` and {}, or start it with `{serve}`",
            Paths { config }.log().display()
        )),
        None => msg.push_str(&format!(
            "start it with `{serve}` (or at every login with `relay service install`)"
        )),
    }
    msg
}

/// `relay serve` for `config`, with `--config-dir` when a plain `relay serve` (the
/// environment's `RELAY_CONFIG_DIR`, else the platform's folder) would use another.
fn serve_command(config: Option<&Path>) -> String {
    match config {
        Some(c) if super::config_dir(None).ok().as_deref() != Some(c) => {
            format!("relay --config-dir {} serve", c.display())
        }
        _ => "relay serve".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire;

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            status,
            body: body.as_bytes().to_vec(),
        }
    }

    /// A field the CLI needs and the answer lacks is an error naming the route and the
    /// field, not a `?` in the output.
    #[test]
    fn an_answer_missing_a_field_is_an_error_naming_the_route() {
        let a = answer(200, r#"{"sessions": [{"id": "s-1", "kind": "claude"}]}"#);
        let e = a.typed::<wire::Sessions>("GET /api/sessions").unwrap_err();
        assert!(
            e.starts_with("relay's answer to GET /api/sessions: "),
            "{e}"
        );
        assert!(e.contains("missing field `template_id`"), "{e}");
        let ok = answer(200, r#"{"sessions": []}"#);
        assert_eq!(
            ok.typed::<wire::Sessions>("GET /api/sessions").unwrap(),
            wire::Sessions::default()
        );
    }

    /// The sentence for a relay that took the connection and never answered reads as
    /// one: no run of spaces where its source lines meet.
    #[test]
    fn a_hung_relay_reads_as_one_sentence() {
        let m = hung(
            Path::new("/nonexistent/relay.sock"),
            std::time::Duration::from_secs(20),
        );
        assert!(
            m.starts_with(
                "relay took the connection on /nonexistent/relay.sock but did not answer in \
                 20 s: it may be stopped (a Ctrl-Z or SIGSTOP; `kill -CONT <pid>` resumes it)"
            ),
            "{m}"
        );
        assert!(!m.contains("  "), "{m}");
        assert_eq!(unavailable(&m), Some("daemon_not_answering"));
    }

    /// Each sentence for a relay that is not there has its code.
    #[test]
    fn relay_not_running_or_cut_off_reads_back_as_its_code() {
        let sock = Path::new("/nonexistent/relay.sock");
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let m = not_running(sock, &refused);
        assert!(m.starts_with("relay is not running (cannot connect to /nonexistent/relay.sock: "));
        assert_eq!(unavailable(&m), Some("daemon_unreachable"));
        let cut = cut_off(sock, "GET /api/status", "connection closed");
        assert_eq!(unavailable(&cut), Some("connection_lost"));
        assert_eq!(unavailable("no session s-1 (not_found)"), None);
    }

    #[test]
    fn a_refusal_reads_as_its_message_and_code() {
        let code = crate::wire::Code::UnknownProject;
        let a = answer(
            404,
            &format!(r#"{{"code": "{code}", "error": "no project \"x\""}}"#),
        );
        assert!(a.is_refusal());
        assert_eq!(a.error_text(), format!("no project \"x\" ({code})"));
        let b = answer(502, "<html>");
        assert!(!b.is_refusal());
        assert_eq!(b.error_text(), "relay answered 502");
    }

    /// A 2xx answer reads as its type and as it came; any other is its refusal text,
    /// whatever its body.
    #[test]
    fn an_answer_reads_as_its_type_and_json_or_as_its_refusal() {
        let ok = answer(
            201,
            r#"{"url": "http://127.0.0.1:1/x", "expires_in_s": 60}"#,
        );
        let (link, v) = ok.read::<wire::LoginLink>("POST /api/login-code").unwrap();
        assert_eq!(link.url, "http://127.0.0.1:1/x");
        assert_eq!(v["expires_in_s"], 60);
        let code = crate::wire::Code::UnknownProject;
        let refused = answer(404, &format!(r#"{{"code": "{code}", "error": "no"}}"#));
        let e = refused.read::<wire::LoginLink>("POST /api/login-code");
        assert_eq!(e.unwrap_err(), format!("no ({code})"));
        let e = answer(200, "{}").read::<wire::LoginLink>("POST /api/login-code");
        assert!(e
            .unwrap_err()
            .starts_with("relay's answer to POST /api/login-code: missing field `url`"),);
    }
}
