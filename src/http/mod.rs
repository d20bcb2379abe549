//! HTTP/1.1 for every relay process: the answers, request bodies, the upgrade answer,
//! bearers, connection serving and private-socket binding of the daemon's API
//! (`src/daemon/api/`) and the host's (`src/host/server.rs`), and one client
//! ([`client`]) for the daemon's calls to the host, the CLI and the e2e harness
//! (docs/routes.md, docs/session-host.md).

pub mod client;
pub mod stream;

use std::convert::Infallible;
use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::net::UnixListener;

/// What a router answers; a streamed answer rides in its extensions ([`stream`]).
pub type Resp = Response<Full<Bytes>>;

/// A request head (the first, or the next on a kept-alive connection) and a body must
/// each arrive within this; an idle connection is closed after it.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// `status` with `body` as `content_type`.
pub fn bytes(status: u16, content_type: Option<&str>, body: Bytes) -> Resp {
    let mut b = Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("cache-control", "no-store");
    if let Some(t) = content_type {
        b = b.header("content-type", t);
    }
    b.body(Full::new(body))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

/// `status` with `body` as JSON.
pub fn json<T: Serialize>(status: u16, body: &T) -> Resp {
    let body = serde_json::to_vec(body).unwrap_or_default();
    bytes(status, Some("application/json"), Bytes::from(body))
}

/// `status` with no body (the refusals that must not say why: 401, 403).
pub fn empty(status: u16) -> Resp {
    bytes(status, None, Bytes::new())
}

/// `200 application/octet-stream` (a session's log, a scrollback).
pub fn octets(body: impl Into<Bytes>) -> Resp {
    bytes(200, Some("application/octet-stream"), body.into())
}

/// `101 Switching Protocols` to `protocol` (the caller has taken `hyper::upgrade::on`).
pub fn upgrade(protocol: &'static str) -> Resp {
    let mut r = empty(101);
    r.headers_mut().insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("upgrade"),
    );
    r.headers_mut().insert(
        hyper::header::UPGRADE,
        hyper::header::HeaderValue::from_static(protocol),
    );
    r
}

/// Constant-time comparison of two byte strings (length leaks, content does not).
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether the request carries `Authorization: Bearer <secret>`.
pub fn bearer_ok<B>(req: &Request<B>, secret: &[u8]) -> bool {
    req.headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .is_some_and(|t| same_secret(t, secret))
}

/// A request header's value, when it is text.
pub fn header<B>(req: &Request<B>, name: hyper::header::HeaderName) -> Option<&str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// The value of `key` in the request's query string, undecoded.
pub fn query<B>(req: &Request<B>, key: &str) -> Option<String> {
    req.uri()
        .query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .and_then(decode_component)
}

/// A query-string value, `%XX` and `+` decoded; `None` when it is not UTF-8 or a `%`
/// is followed by something else than two hex digits.
pub fn decode_component(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// A value for a query string: everything but unreserved characters and `/` as `%XX`.
pub fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Why a request body was not taken; each API answers it with its own code.
#[derive(Debug)]
pub enum BodyError {
    /// More than the cap (or the body broke off).
    TooLarge(usize),
    /// Not all there within [`READ_TIMEOUT`].
    Timeout,
    /// Not the JSON the route takes: serde's category, line and column only (its full
    /// message can quote input).
    Invalid(String),
}

/// A request body, at most `max` bytes, within [`READ_TIMEOUT`].
pub async fn read_body(req: Request<Incoming>, max: usize) -> Result<Bytes, BodyError> {
    let collect = Limited::new(req.into_body(), max).collect();
    match tokio::time::timeout(READ_TIMEOUT, collect).await {
        Ok(Ok(c)) => Ok(c.to_bytes()),
        Ok(Err(_)) => Err(BodyError::TooLarge(max)),
        Err(_) => Err(BodyError::Timeout),
    }
}

/// `bytes` as a `T`; a refusal names only serde's category, line and column.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, BodyError> {
    serde_json::from_slice(bytes).map_err(|e| {
        BodyError::Invalid(format!(
            "request body: {:?} error at line {} column {}",
            e.classify(),
            e.line(),
            e.column()
        ))
    })
}

/// Binds a unix socket only its owner may connect to: a stale socket file is removed
/// first, the socket made 0600 before anyone is served.
pub fn bind_private(path: &Path) -> std::io::Result<UnixListener> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let l = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

/// Serves one connection with `route`: HTTP/1.1 with upgrades, each request head within
/// [`READ_TIMEOUT`] (which also closes a kept-alive connection that stays idle), a
/// streamed answer given its channel as the body ([`stream::finish`]). A connection
/// that breaks (the peer hung up, a malformed head) ends here: it is the peer's.
pub async fn serve_connection<S, F, Fut>(io: S, route: F)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    F: Fn(Request<Incoming>) -> Fut + Send + 'static,
    Fut: Future<Output = Resp> + Send + 'static,
{
    let svc = service_fn(move |req| {
        let answer = route(req);
        async move { Ok::<_, Infallible>(stream::finish(answer.await)) }
    });
    // A peer that hangs up or sends garbage is ordinary: a debug line, not a warning.
    if let Err(e) = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(READ_TIMEOUT)
        .serve_connection(TokioIo::new(io), svc)
        .with_upgrades()
        .await
    {
        tracing::debug!("connection: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_by_content_and_length() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"abcd"));
    }

    #[test]
    fn a_parse_error_names_no_input() {
        let Err(BodyError::Invalid(m)) = decode::<serde_json::Value>(b"{\"tok\": sk-secret") else {
            panic!("not refused");
        };
        assert!(!m.contains("sk-secret"), "{m}");
        assert!(m.starts_with("request body: Syntax error at line 1"), "{m}");
    }

    #[test]
    fn the_upgrade_answer_names_the_protocol() {
        let r = upgrade("relay-attach");
        assert_eq!(r.status(), 101);
        assert_eq!(r.headers()[hyper::header::UPGRADE], "relay-attach");
        assert_eq!(r.headers()[hyper::header::CONNECTION], "upgrade");
    }
}

#[cfg(test)]
mod query_tests {
    use super::{decode_component, encode_component};

    #[test]
    fn query_values_round_trip() {
        for s in ["/home/ada/my dir", "a+b&c=d%", "ünï/ç", "", "~/src"] {
            assert_eq!(decode_component(&encode_component(s)).as_deref(), Some(s));
        }
        assert_eq!(decode_component("a+b%2Fc").as_deref(), Some("a b/c"));
        assert_eq!(decode_component("%zz"), None);
        assert_eq!(decode_component("%4"), Some("%4".into()));
    }
}
