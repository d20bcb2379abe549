//! The API: one router on two listeners — `<config>/relay.sock` for the CLI (same uid
//! only, checked with the peer's credentials) and, when `api.listen` is set, loopback
//! TCP with the bearer from `<config>/api-token`. Exact route table ([`Route`]), one
//! function per route (`sessions.rs`, `terminals.rs`, `system.rs`, `page.rs`,
//! `sandbox.rs`), body
//! size cap, refusals as `{"error": message, "code": code}` (docs/routes.md).

mod explain;
mod page;
mod sandbox;
mod sessions;
mod system;
mod terminals;
pub mod turns;
pub mod web;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request};
use serde::de::DeserializeOwned;
use tokio::net::{TcpListener, UnixListener};

use super::error::ApiError;

use super::launch;
use super::{Daemon, EntryState};
use crate::http::{self, BodyError, READ_TIMEOUT};
use crate::protocol::SessionKind;
use crate::wire::Code;

pub use crate::http::Resp;
pub use system::status_body;

pub const BODY_MAX: usize = 64 * 1024;

#[derive(Clone, Copy)]
pub struct Peer {
    /// Known for unix-socket peers.
    pub pid: Option<u32>,
    /// Same uid on the unix socket, or the bearer on TCP.
    pub authorized: bool,
    /// TCP only: a Settings-page session cookie (reads only).
    pub cookie: bool,
    pub tcp: bool,
}

/// Every route of the API, matched exactly, segment by segment (docs/routes.md#routes).
#[derive(Debug, PartialEq, Eq)]
enum Route {
    /// `GET /login?code=C`, TCP only, answered without a bearer.
    Login,
    /// `GET` of a Settings-page file.
    Page,
    /// `POST /api/login-code`, unix socket only.
    LoginCode,
    Status,
    SessionStart,
    SessionList,
    SessionMessage(String),
    SessionInterrupt(String),
    SessionResume(String),
    SessionLog(String),
    SessionStop(String),
    SessionPurge(String),
    TerminalStart,
    TerminalList,
    TerminalLog(String),
    TerminalAttach(String),
    TerminalStop(String),
    TerminalPurge(String),
    TerminalResume(String),
    Audit,
    AuditScan,
    Doctor,
    /// `GET /api/doctor`: the checks that launch nothing, and the last probes.
    DoctorRead,
    Events,
    /// `GET /api/{sessions,terminals}/{id}/sandbox`.
    SessionSandbox(String),
    TerminalSandbox(String),
    /// `GET /api/sandbox/explain?template=T&directory=D&backend=B`.
    SandboxExplain,
    /// `GET /api/{sessions,terminals}/{id}/egress`.
    SessionEgress(String),
    /// `GET /api/tokens`.
    Tokens,
    TerminalEgress(String),
    /// Another method (or an unknown deeper path) under a known route.
    MethodNotAllowed,
    NotFound,
}

impl Route {
    fn of(tcp: bool, method: &Method, path: &str) -> Route {
        use Route::*;
        let get = method == Method::GET;
        if tcp && get && path == "/login" {
            return Login;
        }
        if get && web::asset(path).is_some() {
            return Page;
        }
        if !tcp && method == Method::POST && path == "/api/login-code" {
            return LoginCode;
        }
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let id = |s: &str| s.to_string();
        match (method.clone(), parts.as_slice()) {
            (Method::GET, ["api", "status"]) => Status,
            (Method::POST, ["api", "sessions"]) => SessionStart,
            (Method::GET, ["api", "sessions"]) => SessionList,
            (Method::POST, ["api", "sessions", i, "message"]) => SessionMessage(id(i)),
            (Method::POST, ["api", "sessions", i, "interrupt"]) => SessionInterrupt(id(i)),
            (Method::POST, ["api", "sessions", i, "resume"]) => SessionResume(id(i)),
            (Method::GET, ["api", "sessions", i, "log"]) => SessionLog(id(i)),
            (Method::DELETE, ["api", "sessions", i]) => SessionStop(id(i)),
            (Method::POST, ["api", "sessions", i, "purge"]) => SessionPurge(id(i)),
            (Method::POST, ["api", "terminals"]) => TerminalStart,
            (Method::GET, ["api", "terminals"]) => TerminalList,
            (Method::GET, ["api", "terminals", i, "log"]) => TerminalLog(id(i)),
            (Method::GET, ["api", "terminals", i, "attach"]) => TerminalAttach(id(i)),
            (Method::DELETE, ["api", "terminals", i]) => TerminalStop(id(i)),
            (Method::POST, ["api", "terminals", i, "purge"]) => TerminalPurge(id(i)),
            (Method::POST, ["api", "terminals", i, "resume"]) => TerminalResume(id(i)),
            (Method::POST, ["api", "audit", "scan"]) => AuditScan,
            (Method::GET, ["api", "audit"]) => Audit,
            (Method::POST, ["api", "doctor"]) => Doctor,
            (Method::GET, ["api", "doctor"]) => DoctorRead,
            (Method::GET, ["api", "events"]) => Events,
            (Method::GET, ["api", "sessions", i, "sandbox"]) => SessionSandbox(id(i)),
            (Method::GET, ["api", "terminals", i, "sandbox"]) => TerminalSandbox(id(i)),
            (Method::GET, ["api", "sandbox", "explain"]) => SandboxExplain,
            (Method::GET, ["api", "sessions", i, "egress"]) => SessionEgress(id(i)),
            (Method::GET, ["api", "terminals", i, "egress"]) => TerminalEgress(id(i)),
            (Method::GET, ["api", "tokens"]) => Tokens,
            (
                _,
                ["api", "status" | "sessions" | "terminals" | "audit" | "events" | "doctor" | "sandbox"
                | "tokens", ..],
            ) => MethodNotAllowed,
            _ => NotFound,
        }
    }

    /// A launch checks its caller's place itself, and audits the refusal
    /// (`src/daemon/launch/mod.rs`).
    fn is_launch(&self) -> bool {
        matches!(
            self,
            Route::SessionStart
                | Route::TerminalStart
                | Route::SessionResume(_)
                | Route::TerminalResume(_)
        )
    }

    /// Whether a caller inside a session is refused before the route runs: every
    /// driving verb but a launch, and attaching (docs/routes.md#driving-verbs-and-callers-inside-a-session).
    fn refuses_inside(&self, method: &Method) -> bool {
        matches!(self, Route::TerminalAttach(_) | Route::LoginCode)
            || (method != Method::GET && !self.is_launch())
    }
}

/// One request: who may call, then the route's own function.
async fn route(d: Arc<Daemon>, peer: Peer, req: Request<Incoming>) -> Resp {
    let route = Route::of(peer.tcp, req.method(), req.uri().path());
    if route == Route::Login {
        return page::login(&d, &req);
    }
    // The page's cookie reads; attaching types into a terminal, so it needs the bearer.
    let reads_with_cookie =
        peer.cookie && req.method() == Method::GET && !req.uri().path().ends_with("/attach");
    if !peer.authorized && !reads_with_cookie {
        return http::empty(401);
    }
    if route.refuses_inside(req.method()) {
        if let Some(r) = inside(&d, peer) {
            return r;
        }
    }
    match route {
        Route::Login => page::login(&d, &req),
        Route::Page => page::file(req.uri().path()),
        Route::LoginCode => page::login_code(&d),
        Route::Status => http::json(200, &status_body(&d)),
        Route::SessionStart => sessions::start(&d, peer, req).await,
        Route::SessionList => sessions::list(&d),
        Route::SessionMessage(id) => turns::message(&d, &id, req).await,
        Route::SessionInterrupt(id) => turns::interrupt(&d, &id).await,
        Route::SessionResume(id) => sessions::resume(&d, peer, id).await,
        Route::SessionStop(id) => stop(&d, &id, SessionKind::Claude).await,
        Route::SessionPurge(id) => purge(&d, &id, SessionKind::Claude).await,
        Route::TerminalStart => terminals::start(&d, peer, req).await,
        Route::TerminalList => terminals::list(&d),
        Route::TerminalLog(id) => terminals::log(&d, &id, SessionKind::Pty).await,
        Route::SessionLog(id) => terminals::log(&d, &id, SessionKind::Claude).await,
        Route::TerminalAttach(id) => terminals::attach(d, &id, req).await,
        Route::TerminalStop(id) => stop(&d, &id, SessionKind::Pty).await,
        Route::TerminalPurge(id) => purge(&d, &id, SessionKind::Pty).await,
        Route::TerminalResume(id) => terminals::resume(&d, peer, id, req).await,
        Route::Audit => system::audit(&d, &req).await,
        Route::AuditScan => system::audit_scan(&d).await,
        Route::Doctor => system::doctor(&d).await,
        Route::DoctorRead => http::json(200, &super::diagnostics::doctor::read_only(&d).await),
        Route::Events => system::events(&d, &req).await,
        Route::SessionSandbox(id) => sandbox::of(&d, &id, SessionKind::Claude),
        Route::TerminalSandbox(id) => sandbox::of(&d, &id, SessionKind::Pty),
        Route::SandboxExplain => sandbox::explain(&d, &req),
        Route::SessionEgress(id) => system::egress(&d, &id, SessionKind::Claude).await,
        Route::TerminalEgress(id) => system::egress(&d, &id, SessionKind::Pty).await,
        Route::Tokens => system::tokens(&d),
        Route::MethodNotAllowed => {
            refuse(Code::MethodNotAllowed, "method not allowed on this route")
        }
        Route::NotFound => refuse(Code::NotFound, "no such route"),
    }
}

fn err(e: &ApiError) -> Resp {
    http::json(e.status(), e)
}

pub(super) fn refuse(code: Code, message: impl Into<String>) -> Resp {
    err(&ApiError::new(code, message))
}

async fn parse_body<T: DeserializeOwned>(req: Request<Incoming>) -> Result<T, ApiError> {
    let bytes = match http::read_body(req, BODY_MAX).await {
        // An empty body counts as `{}`.
        Ok(b) if b.is_empty() => Bytes::from_static(b"{}"),
        Ok(b) => b,
        Err(e) => return Err(body_refusal(e)),
    };
    http::decode(&bytes).map_err(body_refusal)
}

fn body_refusal(e: BodyError) -> ApiError {
    match e {
        BodyError::TooLarge(max) => ApiError::new(
            Code::PayloadTooLarge,
            format!("request body larger than {max} bytes"),
        ),
        BodyError::Timeout => ApiError::new(
            Code::RequestTimeout,
            format!("request body not received within {READ_TIMEOUT:?}"),
        ),
        BodyError::Invalid(m) => ApiError::new(Code::InvalidRequest, m),
    }
}

pub(super) async fn body<T: DeserializeOwned>(req: Request<Incoming>) -> Result<T, Resp> {
    parse_body(req).await.map_err(|e| err(&e))
}

/// The body of a launch request; a refusal is audited like any other launch refusal.
async fn launch_body<T: DeserializeOwned>(
    d: &Arc<Daemon>,
    kind: SessionKind,
    req: Request<Incoming>,
) -> Result<T, Resp> {
    parse_body(req)
        .await
        .map_err(|e| err(&launch::refused_request(d, kind, "session_launch", None, e)))
}

fn inside(d: &Daemon, peer: Peer) -> Option<Resp> {
    let pid = peer.pid?;
    d.descends_from_session(pid)
        .then(|| refuse(Code::InsideSession, super::INSIDE_SESSION))
}

async fn host_passthrough(
    d: &Daemon,
    method: &str,
    path: &str,
    body: Option<Vec<u8>>,
) -> Result<(u16, Bytes), Resp> {
    d.host
        .call(method, path, body)
        .await
        .map_err(|e| refuse(Code::HostUnavailable, e.to_string()))
}

/// How an ended session ended, ` (Claude Code exited with status 1)`, and its last
/// words, `: <its last stderr line>` (each empty when unknown).
pub(super) fn how_it_ended(d: &Daemon, e: &crate::daemon::Entry) -> (String, String) {
    let id = &e.record.id;
    // How it ended, so a Claude that exited at once (a program that cannot
    // start: 127) reads as that, not as a session someone stopped.
    let how = match (
        e.record.exit_signal,
        e.record.exit_status,
        e.record.exit_reason.as_deref(),
    ) {
        (Some(sig), _, _) => format!(" (Claude Code ended by signal {sig})"),
        (None, Some(st), Some("exited") | None) => {
            format!(" (Claude Code exited with status {st})")
        }
        (None, _, Some(reason)) => format!(" (ended: {reason})"),
        (None, _, None) => String::new(),
    };
    // Its last words and where its log is: why it ended, not only that it did.
    let why = terminals::last_words(d, id)
        .map(|w| format!(": {w}"))
        .unwrap_or_default();
    (how, why)
}

pub(super) fn host_error(status: u16, bytes: &Bytes) -> Resp {
    err(&ApiError::from_host(status, bytes))
}

/// Runs a launch on its own task: a client that hangs up mid-launch must not cancel
/// the cleanup, the audit row or the ledger update half-way.
async fn launch_detached(d: &Arc<Daemon>, input: launch::LaunchInput) -> Resp {
    match launched(d, input).await {
        Ok(e) => http::json(201, &e),
        Err(e) => err(&e),
    }
}

/// [`launch_detached`]'s launch, its entry or its refusal.
async fn launched(
    d: &Arc<Daemon>,
    input: launch::LaunchInput,
) -> Result<crate::daemon::Entry, ApiError> {
    let d = d.clone();
    match tokio::spawn(async move { launch::launch(&d, input).await }).await {
        Ok(r) => r,
        Err(e) => Err(ApiError::new(
            Code::SpawnFailed,
            format!("launch task: {e}"),
        )),
    }
}

/// `POST /api/{sessions,terminals}/{id}/purge`: an ended session's record, logs and
/// temp folder (`src/daemon/records/purge.rs`).
async fn purge(d: &Daemon, id: &str, kind: SessionKind) -> Resp {
    match super::records::purge::purge(d, id, kind, "purged").await {
        Ok(e) => http::json(
            200,
            &crate::wire::Purged {
                id: e.record.id.clone(),
                purged: true,
                entry: crate::wire::Session::from(&e),
            },
        ),
        Err(e) => {
            if e.code == Code::PurgeFailed {
                // The caller hears it; the log keeps it (as the sweep's and the attach's).
                tracing::warn!("purge {id}: {}", e.message);
            }
            err(&e)
        }
    }
}

/// `DELETE /api/{sessions,terminals}/{id}`: the host ends the session; the answer waits
/// (bounded) for the exit event, so it shows the entry after the stop.
async fn stop(d: &Daemon, id: &str, kind: SessionKind) -> Resp {
    let Some(e) = d.entry(id).filter(|e| e.record.kind == kind) else {
        return refuse(
            Code::NotFound,
            format!(
                "no {} {id}",
                if kind == SessionKind::Pty {
                    "terminal"
                } else {
                    "session"
                }
            ),
        );
    };
    if e.record.state == EntryState::Running {
        let seq = d.events.last_seq();
        let req = crate::protocol::TerminateRequest {
            session_id: id.to_string(),
        };
        let body = serde_json::to_vec(&req).unwrap_or_default();
        match host_passthrough(d, "POST", "/terminate", Some(body)).await {
            Ok((200, _)) | Ok((404, _)) => {}
            Ok((status, bytes)) => return host_error(status, &bytes),
            Err(r) => return r,
        }
        // The host printed the exit before it answered; the daemon reads that line on
        // its own task, so wait for the event it emits (bounded).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let mut after = seq;
        while d
            .entry(id)
            .is_some_and(|e| e.record.state == EntryState::Running)
        {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                break;
            }
            if let Some(last) = d.events.wait_for(after, left).await.last() {
                after = last.seq;
            }
        }
    }
    http::json(200, &d.entry(id))
}

/// `relay.sock`: same uid only, by the peer's credentials. At most `cap` connections at
/// once; an accept that fails for lack of descriptors pauses (`src/listen.rs`).
pub async fn serve_unix(d: Arc<Daemon>, listener: UnixListener, cap: usize) {
    let me = nix::unistd::geteuid().as_raw();
    crate::listen::serve("relay: relay.sock", listener, cap, move |stream| {
        let cred = stream.peer_cred().ok();
        let peer = Peer {
            pid: crate::peer::peer_pid(&stream),
            authorized: cred.map(|c| c.uid()) == Some(me),
            cookie: false,
            tcp: false,
        };
        let d = d.clone();
        http::serve_connection(stream, move |req| route(d.clone(), peer, req))
    })
    .await
}

/// The loopback TCP listener: the bearer (or a Settings-page cookie) per request. At
/// most `cap` connections at once: a flood waits in the kernel's backlog, not here.
pub async fn serve_tcp(d: Arc<Daemon>, listener: TcpListener, cap: usize) {
    crate::listen::serve("relay: api (tcp)", listener, cap, move |stream| {
        let d = d.clone();
        http::serve_connection(stream, move |req: Request<Incoming>| {
            let peer = Peer {
                pid: None,
                authorized: http::bearer_ok(&req, d.api_token.as_bytes()),
                cookie: d.web.cookie_ok(http::header(&req, hyper::header::COOKIE)),
                tcp: true,
            };
            route(d.clone(), peer, req)
        })
    })
    .await
}

/// `relay.sock`, 0600.
pub fn bind_unix(path: &Path) -> std::io::Result<UnixListener> {
    http::bind_private(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_match_exactly_segment_by_segment() {
        let r = |tcp, m: Method, p: &str| Route::of(tcp, &m, p);
        assert_eq!(r(false, Method::GET, "/api/status"), Route::Status);
        assert_eq!(
            r(false, Method::POST, "/api/sessions/s1/message"),
            Route::SessionMessage("s1".into())
        );
        assert_eq!(
            r(false, Method::POST, "/api/sessions/s1/interrupt"),
            Route::SessionInterrupt("s1".into())
        );
        assert_eq!(
            r(false, Method::GET, "/api/terminals/t1/attach"),
            Route::TerminalAttach("t1".into())
        );
        assert_eq!(
            r(false, Method::GET, "/api/sessions/s1"),
            Route::MethodNotAllowed
        );
        assert_eq!(
            r(false, Method::PUT, "/api/status"),
            Route::MethodNotAllowed
        );
        assert_eq!(r(false, Method::GET, "/api/nope"), Route::NotFound);
        assert_eq!(r(false, Method::POST, "/api/login-code"), Route::LoginCode);
        assert_eq!(r(true, Method::POST, "/api/login-code"), Route::NotFound);
        assert_eq!(r(true, Method::GET, "/login"), Route::Login);
        assert_eq!(r(false, Method::GET, "/login"), Route::NotFound);
        assert_eq!(r(true, Method::GET, "/app.js"), Route::Page);
    }

    #[test]
    fn only_launches_and_reads_skip_the_inside_session_check() {
        let inside = |m: Method, p: &str| Route::of(false, &m, p).refuses_inside(&m);
        assert!(!inside(Method::POST, "/api/sessions"));
        assert!(!inside(Method::POST, "/api/terminals"));
        assert!(!inside(Method::POST, "/api/sessions/s1/resume"));
        assert!(!inside(Method::GET, "/api/sessions"));
        assert!(inside(Method::GET, "/api/terminals/t1/attach"));
        assert!(inside(Method::DELETE, "/api/terminals/t1"));
        assert!(inside(Method::POST, "/api/sessions/s1/message"));
        assert!(inside(Method::POST, "/api/sessions/s1/interrupt"));
        assert!(inside(Method::POST, "/api/login-code"));
        assert!(inside(Method::PUT, "/api/nope"));
    }
}
