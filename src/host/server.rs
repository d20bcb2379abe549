//! The host's internal HTTP API on `<state>/host.sock`.
//!
//! A request is served only when the connecting peer is the host's parent (the daemon)
//! and the bearer matches the secret handed over at start; otherwise 403 with an empty
//! body, before the body is read. Exact route table, body size cap.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use super::launch::{self, LaunchError};
use super::provider::TurnError;
use super::{Host, Session, SessionIo, Slot};
use crate::http::{self, BodyError, Resp, READ_TIMEOUT};
use crate::protocol::{
    HostCode, HostErrorBody, HostEvent, LaunchRequest, MessageRequest, MessageResponse,
    SessionList, SessionState, TerminateRequest, TurnEvent, HOST_PROTOCOL_VERSION,
};

/// Largest accepted request body (a launch request with its argv, env and token).
pub const BODY_MAX: usize = 256 * 1024;

/// A refusal: the code's status, `{"error": code, "message": text}`.
fn error(code: HostCode, message: impl Into<String>) -> Resp {
    http::json(
        code.status(),
        &HostErrorBody {
            error: code,
            message: message.into(),
        },
    )
}

fn launch_error(e: &LaunchError) -> Resp {
    error(e.code(), e.message())
}

async fn read_json<T: serde::de::DeserializeOwned>(req: Request<Incoming>) -> Result<T, Resp> {
    let body = match http::read_body(req, BODY_MAX).await {
        Ok(b) => http::decode(&b),
        Err(e) => Err(e),
    };
    body.map_err(|e| match e {
        BodyError::TooLarge(max) => error(
            HostCode::PayloadTooLarge,
            format!("request body larger than {max} bytes or unreadable"),
        ),
        BodyError::Timeout => error(
            HostCode::RequestTimeout,
            format!("request body not received within {READ_TIMEOUT:?}"),
        ),
        BodyError::Invalid(m) => error(HostCode::InvalidSpec, m),
    })
}

/// `GET /sessions/{id}/attach` with `Upgrade: relay-attach`: 101, then frames. A
/// terminal that has already ended is attached too: its scrollback, then its exit frame,
/// so a tool that ends before its first attach lands is not lost
/// (docs/session-host.md#attach).
fn attach(host: &Arc<Host>, id: &str, mut req: Request<Incoming>) -> Resp {
    let Some(session) = host.live(id) else {
        return no_session(id);
    };
    let SessionIo::Terminal(term) = &session.io else {
        return error(HostCode::InvalidSpec, "not a terminal");
    };
    if !crate::protocol::attach::wants(http::header(&req, hyper::header::UPGRADE)) {
        return error(HostCode::InvalidSpec, "attach needs Upgrade: relay-attach");
    }
    let lossless = crate::http::query(&req, "lossless").is_some_and(|v| v == "true");
    let term = term.clone();
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        if let Ok(upgraded) = on_upgrade.await {
            super::attach::run(session, term, upgraded, lossless).await;
        }
    });
    http::upgrade(crate::protocol::attach::ATTACH_PROTOCOL)
}

/// Every route of the host API, matched exactly, segment by segment
/// (docs/session-host.md#routes).
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Launch,
    Terminate,
    List,
    Info(String),
    Log(String),
    Scrollback(String),
    Message(String),
    Interrupt(String),
    Attach(String),
    Delete(String),
    /// Another method on a known route.
    MethodNotAllowed,
    NotFound,
}

impl Route {
    fn of(method: &Method, path: &str) -> Route {
        use Route::*;
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let id = |s: &str| s.to_string();
        match (method.clone(), parts.as_slice()) {
            (Method::GET, ["sessions", i, "attach"]) => Attach(id(i)),
            (Method::POST, ["launch"]) => Launch,
            (Method::POST, ["terminate"]) => Terminate,
            (Method::GET, ["sessions"]) => List,
            (Method::GET, ["sessions", i]) => Info(id(i)),
            (Method::GET, ["sessions", i, "log"]) => Log(id(i)),
            (Method::GET, ["sessions", i, "scrollback"]) => Scrollback(id(i)),
            (Method::POST, ["sessions", i, "message"]) => Message(id(i)),
            (Method::POST, ["sessions", i, "interrupt"]) => Interrupt(id(i)),
            (Method::DELETE, ["sessions", i]) => Delete(id(i)),
            (
                _,
                ["launch"]
                | ["terminate"]
                | ["sessions"]
                | ["sessions", _]
                | ["sessions", _, "log" | "scrollback" | "message" | "interrupt" | "attach"],
            ) => MethodNotAllowed,
            _ => NotFound,
        }
    }
}

/// One request: the peer and the bearer, then the route's own function.
async fn handle(host: Arc<Host>, peer_ok: bool, req: Request<Incoming>) -> Resp {
    if !peer_ok || !http::bearer_ok(&req, host.cfg.secret.as_bytes()) {
        return http::empty(403);
    }
    match Route::of(req.method(), req.uri().path()) {
        Route::Launch => start(&host, req).await,
        Route::Terminate => terminate(&host, req).await,
        Route::List => list(&host),
        Route::Info(id) => info(&host, &id),
        Route::Log(id) => log(&host, &id),
        Route::Scrollback(id) => scrollback(&host, &id),
        Route::Message(id) => message(&host, &id, req).await,
        Route::Interrupt(id) => interrupt(&host, &id).await,
        Route::Attach(id) => attach(&host, &id, req),
        Route::Delete(id) => delete(&host, &id).await,
        Route::MethodNotAllowed => error(HostCode::MethodNotAllowed, "method not allowed"),
        Route::NotFound => error(HostCode::NotFound, "no such route"),
    }
}

fn no_session(id: &str) -> Resp {
    error(HostCode::NotFound, format!("no session {id}"))
}

fn info_of(s: &Session) -> Resp {
    http::json(
        200,
        &s.info.lock().unwrap_or_else(|p| p.into_inner()).clone(),
    )
}

/// How long a launch waits for Claude Code to answer its first question.
const READY_WAIT: Duration = Duration::from_secs(10);

/// `POST /launch`: `201` once the shim reported `started` (`launch.rs`), and for a
/// claude session once Claude Code has answered (`Provider::ready`, at most
/// [`READY_WAIT`]) or exited: a Claude Code that exits at once has then exited, its
/// exit recorded (at most [`EXIT_REPORT_WAIT`]), and the session's info says so.
async fn start(host: &Arc<Host>, req: Request<Incoming>) -> Resp {
    match read_json::<LaunchRequest>(req).await {
        Ok(lr) => match launch::launch(host, lr).await {
            Ok(r) => {
                if let Some(s) = host.live(&r.session_id) {
                    if let SessionIo::Provider(p) = &s.io {
                        if let Err(TurnError::Ended) = p.ready(READY_WAIT).await {
                            let mut exited = s.exited.clone();
                            let _ = tokio::time::timeout(EXIT_REPORT_WAIT, exited.wait_for(|x| *x))
                                .await;
                        }
                    }
                }
                http::json(201, &r)
            }
            Err(e) => launch_error(&e),
        },
        Err(r) => r,
    }
}

/// `POST /terminate`: the session's info once it has ended.
async fn terminate(host: &Arc<Host>, req: Request<Incoming>) -> Resp {
    match read_json::<TerminateRequest>(req).await {
        Ok(t) => match host.live(&t.session_id) {
            Some(s) => {
                launch::terminate(&s).await;
                info_of(&s)
            }
            None => no_session(&t.session_id),
        },
        Err(r) => r,
    }
}

/// `GET /sessions`: running and exited sessions by id, not those still launching.
fn list(host: &Host) -> Resp {
    let table = host.sessions.lock().unwrap_or_else(|p| p.into_inner());
    let mut sessions: Vec<_> = table
        .values()
        .filter_map(|s| match s {
            Slot::Live(s) => Some(s.info.lock().unwrap_or_else(|p| p.into_inner()).clone()),
            Slot::Launching => None,
        })
        .collect();
    sessions.sort_by(|a, b| a.session_id.cmp(&b.session_id));
    http::json(200, &SessionList { sessions })
}

/// `GET /sessions/{id}`.
fn info(host: &Host, id: &str) -> Resp {
    match host.live(id) {
        Some(s) => info_of(&s),
        None => no_session(id),
    }
}

/// `GET /sessions/{id}/log`: the disk log, also after the session exited.
fn log(host: &Host, id: &str) -> Resp {
    match host.live(id) {
        Some(s) => match s.log.lock().unwrap_or_else(|p| p.into_inner()).read_all() {
            Ok(bytes) => http::octets(bytes),
            Err(e) => error(HostCode::Internal, format!("read log: {e}")),
        },
        None => no_session(id),
    }
}

/// `GET /sessions/{id}/scrollback`: a terminal's ring.
fn scrollback(host: &Host, id: &str) -> Resp {
    match host.live(id) {
        Some(s) => match &s.io {
            SessionIo::Terminal(t) => http::octets(t.scrollback()),
            SessionIo::Provider(_) => error(HostCode::InvalidSpec, "not a terminal"),
        },
        None => no_session(id),
    }
}

/// `DELETE /sessions/{id}`: terminates, removes the log files and forgets the session.
async fn delete(host: &Host, id: &str) -> Resp {
    match host.live(id) {
        Some(s) => {
            launch::terminate(&s).await;
            if let SessionIo::Terminal(t) = &s.io {
                t.release();
            }
            s.log.lock().unwrap_or_else(|p| p.into_inner()).remove();
            host.sessions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(id);
            info_of(&s)
        }
        None => no_session(id),
    }
}

/// How long a broken turn waits for the session's exit, to say how it ended.
const EXIT_REPORT_WAIT: Duration = Duration::from_secs(2);

/// How a sentence saying Claude Code ended goes on: its last words, and where its log is.
fn why_it_ended(session: &Session, id: &str) -> String {
    let log = format!("relay session log --id {id} shows its log");
    let bytes = session
        .log
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .read_all()
        .unwrap_or_default();
    match crate::text::last_line(&bytes) {
        Some(w) => format!(": {w} ({log})"),
        None => format!(" ({log})"),
    }
}

/// What a turn that broke says: the exit of Claude Code when it ended, and why.
async fn ended_message(session: &Arc<Session>, id: &str, e: &TurnError) -> String {
    if !matches!(e, TurnError::Ended) {
        return e.to_string();
    }
    let mut exited = session.exited.clone();
    let _ = tokio::time::timeout(EXIT_REPORT_WAIT, exited.wait_for(|x| *x)).await;
    let info = session
        .info
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    match (info.state, info.exit_status, info.exit_signal) {
        (SessionState::Exited, _, Some(sig)) => format!(
            "Claude Code was killed by signal {sig} before answering{}",
            why_it_ended(session, id)
        ),
        (SessionState::Exited, Some(code), None) => format!(
            "Claude Code exited with status {code} before answering{}",
            why_it_ended(session, id)
        ),
        _ => e.to_string(),
    }
}

/// `POST /sessions/{id}/message`: the body parsed before the session is looked up, then
/// one turn, on a task of its own so that it reads to its end whatever happens to this
/// request. `stream: true` answers the events as they happen (`application/x-ndjson`);
/// otherwise one `MessageResponse` at the end, or `409 session_exited` when the turn
/// broke.
async fn message(host: &Arc<Host>, id: &str, req: Request<Incoming>) -> Resp {
    let m = match read_json::<MessageRequest>(req).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let Some(session) = host.live(id) else {
        return no_session(id);
    };
    let provider = match &session.io {
        SessionIo::Provider(p) => p.clone(),
        SessionIo::Terminal(_) => {
            return error(HostCode::InvalidSpec, "messages are for claude sessions")
        }
    };
    if session.info.lock().unwrap_or_else(|p| p.into_inner()).state != SessionState::Running {
        return error(
            HostCode::SessionExited,
            format!("session {id} has exited{}", why_it_ended(&session, id)),
        );
    }
    let (tx, rx) = mpsc::channel::<TurnEvent>(64);
    let text = m.text;
    let owned_id = id.to_string();
    tokio::spawn(async move {
        if let Err(e) = provider.turn(&text, &tx).await {
            let message = ended_message(&session, &owned_id, &e).await;
            let _ = tx
                .send(TurnEvent::Error {
                    code: HostCode::SessionExited,
                    message,
                })
                .await;
        }
    });
    if m.stream {
        return streamed(rx);
    }
    answer(id, rx).await
}

/// `POST /sessions/{id}/interrupt`: Claude Code asked to stop the running turn
/// (`{"interrupted": true}`), or `{"interrupted": false}` when none runs.
async fn interrupt(host: &Arc<Host>, id: &str) -> Resp {
    let Some(session) = host.live(id) else {
        return no_session(id);
    };
    let SessionIo::Provider(provider) = &session.io else {
        return error(HostCode::InvalidSpec, "interrupts are for claude sessions");
    };
    match provider.interrupt().await {
        Ok(interrupted) => http::json(200, &serde_json::json!({ "interrupted": interrupted })),
        Err(e) => error(HostCode::SessionExited, e.to_string()),
    }
}

/// A turn's events as they happen, one JSON line each.
fn streamed(mut rx: mpsc::Receiver<TurnEvent>) -> Resp {
    let (lines, body) = mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        while let Some(ev) = rx.recv().await {
            let mut line = serde_json::to_vec(&ev).unwrap_or_default();
            line.push(b'\n');
            if lines.send(Bytes::from(line)).await.is_err() {
                // The listener went away; the turn goes on without it.
                return;
            }
        }
    });
    http::stream::streamed(200, "application/x-ndjson", body)
}

/// A turn's end: its result, or `409 session_exited`.
async fn answer(id: &str, mut rx: mpsc::Receiver<TurnEvent>) -> Resp {
    let mut end = None;
    while let Some(ev) = rx.recv().await {
        if matches!(ev, TurnEvent::Result { .. } | TurnEvent::Error { .. }) {
            end = Some(ev);
        }
    }
    match end {
        Some(TurnEvent::Result {
            text,
            is_error,
            api_error_status,
            ..
        }) => http::json(
            200,
            &MessageResponse {
                session_id: id.to_string(),
                text,
                is_error,
                api_error_status,
            },
        ),
        Some(TurnEvent::Error { message, .. }) => error(HostCode::SessionExited, message),
        _ => error(
            HostCode::SessionExited,
            format!("session {id} ended the turn without an answer"),
        ),
    }
}

fn prepare_dirs(host: &Host) -> std::io::Result<()> {
    for dir in [host.cfg.state_dir.clone(), host.cfg.log_dir()] {
        std::fs::create_dir_all(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

async fn end_all(host: &Arc<Host>) {
    let live: Vec<_> = host
        .sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .filter_map(|s| match s {
            Slot::Live(s) => Some(s.clone()),
            Slot::Launching => None,
        })
        .collect();
    let mut tasks = Vec::new();
    for s in live {
        tasks.push(tokio::spawn(async move { launch::terminate(&s).await }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// Listens, announces `ready`, serves until SIGTERM or until stdin closes (the daemon
/// is gone), then ends every session.
pub async fn serve(host: Arc<Host>, cap: usize) -> std::io::Result<()> {
    prepare_dirs(&host)?;
    let sock = host.cfg.socket_path();
    let listener = http::bind_private(&sock)?;
    // Which socket file is ours: a host whose daemon was killed ends its sessions while
    // the next daemon's host already listens at the same path, and must not remove that
    // one on its way out.
    let ours = socket_identity(&sock);
    let parent = u32::try_from(nix::unistd::getppid().as_raw()).ok();
    host.report(&HostEvent::Ready {
        v: HOST_PROTOCOL_VERSION,
        pid: std::process::id(),
        socket: sock.clone(),
    });

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let stdin_closed = async {
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 256];
        loop {
            match stdin.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    };
    tokio::pin!(stdin_closed);
    // At most `cap` connections at once; an accept that fails for lack of descriptors
    // pauses instead of spinning (src/listen.rs).
    let served = host.clone();
    let accepting =
        crate::listen::serve("relay-sessions: host.sock", listener, cap, move |stream| {
            let peer_ok = parent.is_some() && crate::peer::peer_pid(&stream) == parent;
            let host = served.clone();
            http::serve_connection(stream, move |req| handle(host.clone(), peer_ok, req))
        });
    tokio::select! {
        _ = accepting => {}
        _ = term.recv() => {}
        _ = &mut stdin_closed => {}
    }
    end_all(&host).await;
    if ours.is_some() && socket_identity(&sock) == ours {
        let _ = std::fs::remove_file(&sock);
    }
    Ok(())
}

/// A socket file's identity: its inode and when that inode was made (the file system
/// hands a freed inode number to the next socket at once, as seen on ext4).
fn socket_identity(p: &std::path::Path) -> Option<(u64, u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(p)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_and_the_refusals_around_them() {
        use Route::*;
        let cases = [
            (Method::POST, "/launch", Launch),
            (Method::POST, "/terminate", Terminate),
            (Method::GET, "/sessions", List),
            (Method::GET, "/sessions/s1", Info("s1".into())),
            (Method::GET, "/sessions/s1/log", Log("s1".into())),
            (
                Method::GET,
                "/sessions/s1/scrollback",
                Scrollback("s1".into()),
            ),
            (Method::POST, "/sessions/s1/message", Message("s1".into())),
            (
                Method::POST,
                "/sessions/s1/interrupt",
                Interrupt("s1".into()),
            ),
            (Method::GET, "/sessions/s1/attach", Attach("s1".into())),
            (Method::DELETE, "/sessions/s1", Delete("s1".into())),
            (Method::GET, "/launch", MethodNotAllowed),
            (Method::PUT, "/terminate", MethodNotAllowed),
            (Method::POST, "/sessions", MethodNotAllowed),
            (Method::POST, "/sessions/s1", MethodNotAllowed),
            (Method::POST, "/sessions/s1/attach", MethodNotAllowed),
            (Method::GET, "/sessions/s1/message", MethodNotAllowed),
            (Method::GET, "/sessions/s1/interrupt", MethodNotAllowed),
            (Method::GET, "/", NotFound),
            (Method::GET, "/bogus", NotFound),
            (Method::GET, "/sessions/s1/log/more", NotFound),
        ];
        for (method, path, want) in cases {
            assert_eq!(Route::of(&method, path), want, "{method} {path}");
        }
    }
}
