//! The API: one router on two listeners — `<config>/relay.sock` for the CLI (same uid
//! only, checked with the peer's credentials) and, when `api.listen` is set, loopback
//! TCP with the bearer from `<config>/api-token`. Exact route table, body size cap,
//! refusals as `{"error": message, "code": code}`.

use std::convert::Infallible;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::net::{TcpListener, UnixListener};

use super::launch::{self, ApiError, LaunchInput};
use super::{Daemon, EntryState};
use crate::protocol::{PtySize, SessionKind};
use crate::stream_body;

pub const BODY_MAX: usize = 64 * 1024;
/// A request head (the first, or the next on a kept-alive connection) and a body must
/// each arrive within this; an idle connection is closed after it.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
const BODY_TIMEOUT: Duration = READ_TIMEOUT;

pub(super) type Resp = Response<Full<Bytes>>;

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

pub(super) fn json_resp<T: Serialize>(status: u16, body: &T) -> Resp {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("cache-control", "no-store")
        .body(Full::new(Bytes::from(bytes)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

fn err(e: &ApiError) -> Resp {
    json_resp(e.status, e)
}

pub(super) fn refuse(status: u16, code: &'static str, message: impl Into<String>) -> Resp {
    err(&ApiError::error(status, code, message))
}

fn empty(status: u16) -> Resp {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::FORBIDDEN);
    r
}

async fn parse_body<T: DeserializeOwned>(req: Request<Incoming>) -> Result<T, ApiError> {
    let collect = Limited::new(req.into_body(), BODY_MAX).collect();
    let bytes = match tokio::time::timeout(BODY_TIMEOUT, collect).await {
        Ok(Ok(c)) => c.to_bytes(),
        Ok(Err(_)) => {
            return Err(ApiError::error(
                413,
                "payload_too_large",
                format!("request body larger than {BODY_MAX} bytes"),
            ))
        }
        Err(_) => {
            return Err(ApiError::error(
                408,
                "request_timeout",
                format!("request body not received within {BODY_TIMEOUT:?}"),
            ))
        }
    };
    let bytes = if bytes.is_empty() {
        Bytes::from_static(b"{}")
    } else {
        bytes
    };
    serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::denied(
            400,
            "invalid_request",
            format!(
                "request body: {:?} error at line {} column {}",
                e.classify(),
                e.line(),
                e.column()
            ),
        )
    })
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

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SessionStart {
    project: Option<String>,
    directory: Option<String>,
    name: Option<String>,
    template: Option<String>,
    /// Claude Code's `--model` for this session, over the template's.
    model: Option<String>,
    /// Claude Code's `--permission-mode` for this session, over the template's.
    permission_mode: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TerminalStart {
    project: Option<String>,
    template: Option<String>,
    directory: Option<String>,
    name: Option<String>,
    cols: Option<u16>,
    rows: Option<u16>,
    #[serde(default)]
    extra_args: Vec<String>,
    /// Take the project holding `directory` when `project` is absent.
    #[serde(default)]
    project_from_directory: bool,
}

fn inside(d: &Daemon, peer: Peer) -> Option<Resp> {
    let pid = peer.pid?;
    d.descends_from_session(pid)
        .then(|| refuse(403, "inside_session", super::INSIDE_SESSION))
}

fn query(req: &Request<Incoming>, key: &str) -> Option<String> {
    req.uri()
        .query()?
        .split('&')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .map(str::to_string)
}

pub fn status_body(d: &Daemon) -> Value {
    let settings = d.load_settings();
    let token_file = settings
        .as_ref()
        .map(|s| s.claude_token_file.clone())
        .unwrap_or_default();
    let note = d
        .settings_note
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let running = d
        .entries(SessionKind::Claude)
        .iter()
        .chain(d.entries(SessionKind::Pty).iter())
        .filter(|e| e.state == EntryState::Running)
        .count();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "pid": std::process::id(),
        "paths": {
            "config": d.paths.config,
            "settings": d.paths.settings(),
            "socket": d.paths.socket(),
            "audit": d.paths.audit(),
            "events": d.paths.events(),
            // The stored value: a path, never the content.
            "claude_token_file": if token_file.is_empty() { Value::Null } else { Value::String(token_file) },
        },
        "api": d.api_addr().map(|a| a.to_string()),
        "host": d.host.live().map(|l| json!({"pid": l.pid})),
        "settings": {"ok": settings.is_ok(), "note": note},
        "sessions_running": running,
    })
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
        .map_err(|e| refuse(503, "host_unavailable", e.to_string()))
}

pub(super) fn host_error(status: u16, bytes: &Bytes) -> Resp {
    let v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    let message = v["message"]
        .as_str()
        .unwrap_or("the session host refused the request")
        .to_string();
    let code: &'static str = match v["error"].as_str() {
        Some("not_found") => "not_found",
        Some("session_exited") => "session_exited",
        Some("invalid_spec") => "invalid_request",
        _ => "host_error",
    };
    refuse(
        if status == 404 { 404 } else { status.max(400) },
        code,
        message,
    )
}

/// `GET /api/terminals/{id}/attach` with `Upgrade: relay-attach`: the daemon joins the
/// caller's upgraded connection to the host's and only copies bytes.
async fn attach(d: Arc<Daemon>, id: &str, mut req: Request<Incoming>) -> Resp {
    // An ended terminal is attached too: the host replays its scrollback and exit
    // status, so `relay sandbox` never loses a tool that ended before its attach
    // (docs/routes.md#attaching-to-a-terminal).
    let running = match d.entry(id) {
        Some(e) if e.kind == SessionKind::Pty => e.state == EntryState::Running,
        _ => return refuse(404, "not_found", format!("no terminal {id}")),
    };
    let wants = crate::protocol::attach::wants(
        req.headers()
            .get(hyper::header::UPGRADE)
            .and_then(|v| v.to_str().ok()),
    );
    if !wants {
        return refuse(400, "invalid_request", "attach needs Upgrade: relay-attach");
    }
    let host_side = match d.host.attach(id).await {
        Ok(Ok(u)) => u,
        // The host no longer holds an ended terminal (it was restarted since).
        Ok(Err((404, _))) if !running => {
            return refuse(
                409,
                "session_not_running",
                format!("terminal {id} has exited and its output is no longer kept"),
            )
        }
        Ok(Err((status, bytes))) => return host_error(status, &bytes),
        Err(e) => return refuse(503, "host_unavailable", e.to_string()),
    };
    let client_side = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        if let Ok(client) = client_side.await {
            let mut a = TokioIo::new(client);
            let mut b = TokioIo::new(host_side);
            let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
        }
    });
    Response::builder()
        .status(101)
        .header(hyper::header::CONNECTION, "upgrade")
        .header(
            hyper::header::UPGRADE,
            crate::protocol::attach::ATTACH_PROTOCOL,
        )
        .body(Full::new(Bytes::new()))
        .unwrap_or_else(|_| empty(500))
}

fn login(d: &Daemon, req: &Request<Incoming>) -> Resp {
    let sid = query(req, "code").and_then(|c| d.web.redeem(&c));
    match sid {
        Some(sid) => Response::builder()
            .status(303)
            .header("location", "/")
            .header(
                "set-cookie",
                format!(
                    "{}={sid}; HttpOnly; SameSite=Strict; Path=/",
                    super::web::COOKIE
                ),
            )
            .header("cache-control", "no-store")
            .body(Full::new(Bytes::new()))
            .unwrap_or_else(|_| empty(500)),
        None => Response::builder()
            .status(403)
            .header("content-type", "text/plain; charset=utf-8")
            .body(Full::new(Bytes::from_static(
                b"This login link is used up or expired. Run `relay settings` for a new one.\n",
            )))
            .unwrap_or_else(|_| empty(403)),
    }
}

fn page(path: &str) -> Option<Resp> {
    let (kind, body) = super::web::asset(path)?;
    Response::builder()
        .status(200)
        .header("content-type", kind)
        .header("cache-control", "no-store")
        .header("x-content-type-options", "nosniff")
        .header(
            "content-security-policy",
            "default-src 'self'; frame-ancestors 'none'",
        )
        .body(Full::new(Bytes::from_static(body.as_bytes())))
        .ok()
}

async fn route(d: Arc<Daemon>, peer: Peer, req: Request<Incoming>) -> Resp {
    if peer.tcp && req.method() == Method::GET && req.uri().path() == "/login" {
        return login(&d, &req);
    }
    // The page's cookie reads; attaching types into a terminal, so it needs the bearer.
    let reads_with_cookie =
        peer.cookie && req.method() == Method::GET && !req.uri().path().ends_with("/attach");
    if !peer.authorized && !reads_with_cookie {
        return empty(401);
    }
    if req.method() == Method::GET {
        if let Some(r) = page(req.uri().path()) {
            return r;
        }
    }
    if !peer.tcp && req.method() == Method::POST && req.uri().path() == "/api/login-code" {
        if let Some(r) = inside(&d, peer) {
            return r;
        }
        let Some(addr) = d.api_addr() else {
            return refuse(
                409,
                "no_listener",
                "set api.listen in settings.json to serve the Settings page",
            );
        };
        let code = match d.web.new_code() {
            Ok(c) => c,
            Err(e) => return refuse(500, "internal", format!("login code: {e}")),
        };
        return json_resp(
            201,
            &json!({"url": format!("http://{addr}/login?code={code}"), "expires_in_s": 60}),
        );
    }
    let path = req.uri().path().to_string();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    if let (&Method::GET, ["api", "terminals", id, "attach"]) = (req.method(), parts.as_slice()) {
        if let Some(r) = inside(&d, peer) {
            return r;
        }
        let id = id.to_string();
        return attach(d, &id, req).await;
    }
    let method = req.method().clone();
    let driving = method != Method::GET;
    let launch_verb = matches!(
        (&method, parts.as_slice()),
        (&Method::POST, ["api", "sessions"])
            | (&Method::POST, ["api", "terminals"])
            | (&Method::POST, ["api", "sessions", _, "resume"])
    );
    if driving && !launch_verb {
        if let Some(r) = inside(&d, peer) {
            return r;
        }
    }
    match (method, parts.as_slice()) {
        (Method::GET, ["api", "status"]) => json_resp(200, &status_body(&d)),
        (Method::POST, ["api", "sessions"]) => {
            let b: SessionStart = match launch_body(&d, SessionKind::Claude, req).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            let input = LaunchInput {
                kind: Some(SessionKind::Claude),
                project: b.project,
                template: b.template,
                directory: b.directory,
                name: b.name,
                model: b.model,
                permission_mode: b.permission_mode,
                caller_pid: peer.pid,
                ..Default::default()
            };
            match launch_detached(&d, input).await {
                Ok(e) => json_resp(201, &e),
                Err(e) => err(&e),
            }
        }
        (Method::GET, ["api", "sessions"]) => {
            json_resp(200, &json!({"sessions": d.entries(SessionKind::Claude)}))
        }
        (Method::POST, ["api", "sessions", id, "message"]) => {
            super::turns::message(&d, id, req).await
        }
        (Method::POST, ["api", "sessions", id, "resume"]) => {
            let id = id.to_string();
            let resume_refused = |e: ApiError| {
                err(&launch::refused_request(
                    &d,
                    SessionKind::Claude,
                    "session_resume",
                    Some(id.clone()),
                    e,
                ))
            };
            let e = match d.entry(&id) {
                Some(e) if e.kind == SessionKind::Claude => e,
                _ => {
                    return resume_refused(ApiError::denied(
                        404,
                        "not_found",
                        format!("no session {id}"),
                    ))
                }
            };
            if e.state != EntryState::Dormant {
                return resume_refused(ApiError::denied(
                    409,
                    "session_running",
                    format!("session {id} is not dormant"),
                ));
            }
            let input = LaunchInput {
                kind: Some(SessionKind::Claude),
                project: Some(e.project_id.clone()),
                directory: Some(e.directory.to_string_lossy().into_owned()),
                name: e.name.clone(),
                resume_id: Some(id),
                caller_pid: peer.pid,
                ..Default::default()
            };
            match launch_detached(&d, input).await {
                Ok(e) => json_resp(201, &e),
                Err(e) => err(&e),
            }
        }
        (Method::DELETE, ["api", "sessions", id]) => stop(&d, id, SessionKind::Claude).await,
        (Method::POST, ["api", "sessions", id, "purge"]) => {
            purge(&d, id, SessionKind::Claude).await
        }
        (Method::POST, ["api", "terminals"]) => {
            let b: TerminalStart = match launch_body(&d, SessionKind::Pty, req).await {
                Ok(b) => b,
                Err(r) => return r,
            };
            let pty = match (b.cols, b.rows) {
                (None, None) => None,
                (c, r) => {
                    let size = PtySize {
                        cols: c.unwrap_or(80),
                        rows: r.unwrap_or(24),
                    };
                    if size.cols == 0 || size.rows == 0 || size.cols > 1000 || size.rows > 1000 {
                        let e = ApiError::denied(
                            400,
                            "invalid_request",
                            "cols and rows must be 1 to 1000",
                        );
                        return err(&launch::refused_request(
                            &d,
                            SessionKind::Pty,
                            "session_launch",
                            None,
                            e,
                        ));
                    }
                    Some(size)
                }
            };
            if b.extra_args.len() > 64 || b.extra_args.iter().any(|a| a.contains('\0')) {
                let e =
                    ApiError::denied(400, "invalid_request", "at most 64 extra args, without NUL");
                return err(&launch::refused_request(
                    &d,
                    SessionKind::Pty,
                    "session_launch",
                    None,
                    e,
                ));
            }
            let input = LaunchInput {
                kind: Some(SessionKind::Pty),
                project: b.project,
                template: b.template,
                directory: b.directory,
                name: b.name,
                pty,
                extra_args: b.extra_args,
                caller_pid: peer.pid,
                project_from_directory: b.project_from_directory,
                ..Default::default()
            };
            match launch_detached(&d, input).await {
                Ok(e) => json_resp(201, &e),
                Err(e) => err(&e),
            }
        }
        (Method::GET, ["api", "terminals"]) => {
            json_resp(200, &json!({"terminals": d.entries(SessionKind::Pty)}))
        }
        (Method::GET, ["api", "terminals", id, "log"]) => {
            if d.entry(id).is_none_or(|e| e.kind != SessionKind::Pty) {
                return refuse(404, "not_found", format!("no terminal {id}"));
            }
            match host_passthrough(&d, "GET", &format!("/sessions/{id}/log"), None).await {
                Ok((200, bytes)) => Response::builder()
                    .status(200)
                    .header("content-type", "application/octet-stream")
                    .header("cache-control", "no-store")
                    .body(Full::new(bytes))
                    .unwrap_or_else(|_| empty(500)),
                Ok((status, bytes)) => host_error(status, &bytes),
                Err(r) => r,
            }
        }
        (Method::DELETE, ["api", "terminals", id]) => stop(&d, id, SessionKind::Pty).await,
        (Method::POST, ["api", "terminals", id, "purge"]) => purge(&d, id, SessionKind::Pty).await,
        (Method::POST, ["api", "audit", "scan"]) => {
            let d2 = d.clone();
            match tokio::task::spawn_blocking(move || super::scan::run(&d2)).await {
                Ok(Ok((report, fingerprint))) => json_resp(
                    200,
                    &json!({
                        "ok": report.findings.is_empty(),
                        "token_fingerprint": fingerprint,
                        "files": report.files,
                        "bytes": report.bytes,
                        "findings": report.findings,
                        "skipped": report.skipped,
                    }),
                ),
                Ok(Err(e)) => err(&e),
                Err(e) => refuse(500, "internal", format!("scan: {e}")),
            }
        }
        (Method::GET, ["api", "audit"]) => {
            let text = std::fs::read_to_string(d.audit.path()).unwrap_or_default();
            let rows: Vec<Value> = text
                .lines()
                .rev()
                .take(1000)
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            json_resp(200, &json!({"rows": rows}))
        }
        (Method::POST, ["api", "doctor"]) => {
            let d2 = d.clone();
            match tokio::spawn(async move { super::doctor::run(&d2).await }).await {
                Ok(v) => json_resp(200, &v),
                Err(e) => refuse(500, "internal", format!("doctor: {e}")),
            }
        }
        (Method::GET, ["api", "events"]) => {
            let after = query(&req, "after")
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let wait = query(&req, "wait_ms")
                .and_then(|s| s.parse().ok())
                .unwrap_or(0u64)
                .min(60_000);
            let events = d
                .events
                .wait_after(after, Duration::from_millis(wait))
                .await;
            json_resp(200, &json!({"events": events}))
        }
        (_, ["api", "status" | "sessions" | "terminals" | "audit" | "events" | "doctor", ..]) => {
            refuse(
                405,
                "method_not_allowed",
                "method not allowed on this route",
            )
        }
        _ => refuse(404, "not_found", "no such route"),
    }
}

/// Runs a launch on its own task: a client that hangs up mid-launch must not cancel
/// the cleanup, the audit row or the ledger update half-way.
async fn launch_detached(d: &Arc<Daemon>, input: LaunchInput) -> Result<super::Entry, ApiError> {
    let d = d.clone();
    match tokio::spawn(async move { launch::launch(&d, input).await }).await {
        Ok(r) => r,
        Err(e) => Err(ApiError::error(
            500,
            "spawn_failed",
            format!("launch task: {e}"),
        )),
    }
}

/// `POST /api/{sessions,terminals}/{id}/purge`: an ended session's record, logs and
/// temp folder (`src/daemon/purge.rs`).
async fn purge(d: &Daemon, id: &str, kind: SessionKind) -> Resp {
    match super::purge::purge(d, id, kind, "purged").await {
        Ok(e) => json_resp(200, &json!({"id": e.id, "purged": true, "entry": e})),
        Err(e) => err(&e),
    }
}

async fn stop(d: &Daemon, id: &str, kind: SessionKind) -> Resp {
    let Some(e) = d.entry(id).filter(|e| e.kind == kind) else {
        return refuse(
            404,
            "not_found",
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
    if e.state == EntryState::Running {
        let seq = d.events.last_seq();
        let body = serde_json::to_vec(&json!({"session_id": id})).unwrap_or_default();
        match host_passthrough(d, "POST", "/terminate", Some(body)).await {
            Ok((200, _)) | Ok((404, _)) => {}
            Ok((status, bytes)) => return host_error(status, &bytes),
            Err(r) => return r,
        }
        // The host printed the exit before it answered; the daemon reads that line on
        // its own task, so wait for the event it emits (bounded).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        let mut after = seq;
        while d.entry(id).is_some_and(|e| e.state == EntryState::Running) {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                break;
            }
            if let Some(last) = d.events.wait_after(after, left).await.last() {
                after = last["seq"].as_u64().unwrap_or(after);
            }
        }
    }
    json_resp(200, &d.entry(id))
}

pub fn bind_unix(path: &Path) -> std::io::Result<UnixListener> {
    let _ = std::fs::remove_file(path);
    let l = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(l)
}

/// Serves one connection: HTTP/1.1 with upgrades, the request head within
/// [`READ_TIMEOUT`] (which also closes a kept-alive connection that stays idle).
async fn serve_conn<S>(d: Arc<Daemon>, peer: Peer, io: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = service_fn(move |req| {
        let d = d.clone();
        async move { Ok::<_, Infallible>(stream_body::finish(route(d, peer, req).await)) }
    });
    let _ = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(READ_TIMEOUT)
        .serve_connection(TokioIo::new(io), svc)
        .with_upgrades()
        .await;
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
        serve_conn(d.clone(), peer, stream)
    })
    .await
}

/// The loopback TCP listener: the bearer (or a Settings-page cookie) per request. At
/// most `cap` connections at once: a flood waits in the kernel's backlog, not here.
pub async fn serve_tcp(d: Arc<Daemon>, listener: TcpListener, cap: usize) {
    crate::listen::serve("relay: api (tcp)", listener, cap, move |stream| {
        let d2 = d.clone();
        // The bearer is checked per request inside a small wrapper service.
        let svc = service_fn(move |req: Request<Incoming>| {
            let d = d2.clone();
            async move {
                let ok = req
                    .headers()
                    .get(hyper::header::AUTHORIZATION)
                    .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
                    .is_some_and(|t| crate::host::same_secret(t, d.api_token.as_bytes()));
                let cookie = d.web.cookie_ok(
                    req.headers()
                        .get(hyper::header::COOKIE)
                        .and_then(|v| v.to_str().ok()),
                );
                let peer = Peer {
                    pid: None,
                    authorized: ok,
                    cookie,
                    tcp: true,
                };
                Ok::<_, Infallible>(stream_body::finish(route(d, peer, req).await))
            }
        });
        async move {
            let _ = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc)
                .with_upgrades()
                .await;
        }
    })
    .await
}
