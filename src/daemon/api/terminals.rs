//! The terminal routes: start, list, log, attach (stop and purge are shared)
//! (docs/routes.md#attaching-to-a-terminal).

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::TokioIo;

use super::{err, host_error, host_passthrough, launch_body, launch_detached, refuse, Peer, Resp};
use crate::daemon::error::{ApiError, Code};
use crate::daemon::launch::{self, LaunchInput};
use crate::daemon::{Daemon, EntryState};
use crate::http;
use crate::protocol::{PtySize, SessionKind};
use crate::wire::{self, TerminalStart};

/// A request refused before the launch path, audited as a launch refusal.
fn refused(d: &Arc<Daemon>, e: ApiError) -> Resp {
    err(&launch::refused_request(
        d,
        SessionKind::Pty,
        "session_launch",
        None,
        e,
    ))
}

/// `POST /api/terminals`.
pub(super) async fn start(d: &Arc<Daemon>, peer: Peer, req: Request<Incoming>) -> Resp {
    let b: TerminalStart = match launch_body(d, SessionKind::Pty, req).await {
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
                let e = ApiError::new(Code::InvalidRequest, "cols and rows must be 1 to 1000");
                return refused(d, e);
            }
            Some(size)
        }
    };
    if b.extra_args.len() > 64 || b.extra_args.iter().any(|a| a.contains('\0')) {
        let e = ApiError::new(Code::InvalidRequest, "at most 64 extra args, without NUL");
        return refused(d, e);
    }
    let input = LaunchInput {
        kind: Some(SessionKind::Pty),
        project: b.project,
        template: b.template,
        directory: b.directory,
        cwd: b.cwd,
        name: b.name,
        pty,
        extra_args: b.extra_args,
        caller_pid: peer.pid,
        project_from_directory: b.project_from_directory,
        hold_output: b.hold_output,
        ..Default::default()
    };
    launch_detached(d, input).await
}

/// `GET /api/terminals`.
pub(super) fn list(d: &Daemon) -> Resp {
    http::json(
        200,
        &wire::Terminals {
            terminals: d
                .entries(SessionKind::Pty)
                .iter()
                .map(|e| e.view())
                .collect(),
        },
    )
}

/// `GET /api/terminals/{id}/log`: the host's disk log, also after exit.
pub(super) async fn log(d: &Daemon, id: &str) -> Resp {
    if d.entry(id).is_none_or(|e| e.kind != SessionKind::Pty) {
        return refuse(Code::NotFound, format!("no terminal {id}"));
    }
    match host_passthrough(d, "GET", &format!("/sessions/{id}/log"), None).await {
        Ok((200, bytes)) => http::octets(bytes),
        Ok((status, bytes)) => host_error(status, &bytes),
        Err(r) => r,
    }
}

/// `GET /api/terminals/{id}/attach` with `Upgrade: relay-attach`: the daemon joins the
/// caller's upgraded connection to the host's and only copies bytes.
/// Copies an attach both ways until the host's side has ended and everything it sent
/// has reached the client. The host's side comes first: an ended terminal's host
/// writes its output and exit frame and closes at once, so the client's first frame
/// (its window size) can meet a closed host socket; that must not cut off the frames
/// still on their way to the client, as one bidirectional copy did (it stops at the
/// first error in either direction: `relay sandbox` then saw the stream end without
/// output or exit frame).
async fn relay_attach<C, H>(client: C, host: H)
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    H: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut client_rd, mut client_wr) = tokio::io::split(client);
    let (mut host_rd, mut host_wr) = tokio::io::split(host);
    // Client to host, by hand: a client whose connection fails (reset) ends the attach
    // at once, as a clean end or a host that stopped reading does not.
    let up = async {
        let mut buf = vec![0u8; 8192];
        let client_failed = loop {
            let n = match client_rd.read(&mut buf).await {
                Ok(0) => break false,
                Ok(n) => n,
                Err(_) => break true,
            };
            if host_wr.write_all(&buf[..n]).await.is_err() {
                break false;
            }
        };
        let _ = host_wr.shutdown().await;
        client_failed
    };
    let down = async {
        let _ = tokio::io::copy(&mut host_rd, &mut client_wr).await;
        let _ = client_wr.shutdown().await;
    };
    tokio::pin!(up, down);
    tokio::select! {
        client_failed = &mut up => {
            // A failed client connection: nobody is there to read the rest. Else the
            // client stopped sending (it detached, or the host stopped reading): what
            // the host still sends goes on to the client until the host ends.
            if !client_failed {
                down.await;
            }
        }
        // The host has ended and all it sent is delivered: the attach is over.
        () = &mut down => {}
    }
}

pub(super) async fn attach(d: Arc<Daemon>, id: &str, mut req: Request<Incoming>) -> Resp {
    // An ended terminal is attached too: the host replays its scrollback and exit
    // status, so `relay sandbox` never loses a tool that ended before its attach
    // (docs/routes.md#attaching-to-a-terminal).
    let running = match d.entry(id) {
        Some(e) if e.kind == SessionKind::Pty => e.state == EntryState::Running,
        _ => return refuse(Code::NotFound, format!("no terminal {id}")),
    };
    if !crate::protocol::attach::wants(http::header(&req, hyper::header::UPGRADE)) {
        return refuse(Code::InvalidRequest, "attach needs Upgrade: relay-attach");
    }
    // `?lossless=true`: the host paces the terminal to this attach instead of skipping
    // what it cannot keep up with (`relay sandbox`).
    let lossless = http::query(&req, "lossless").is_some_and(|v| v == "true");
    let host_side = match d.host.attach(id, lossless).await {
        Ok(Ok(u)) => u,
        // The host no longer holds an ended terminal (it was restarted since).
        Ok(Err((404, _))) if !running => {
            return refuse(
                Code::SessionNotRunning,
                format!("terminal {id} has exited and its output is no longer kept"),
            )
        }
        Ok(Err((status, bytes))) => return host_error(status, &bytes),
        Err(e) => return refuse(Code::HostUnavailable, e.to_string()),
    };
    let client_side = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        if let Ok(client) = client_side.await {
            relay_attach(TokioIo::new(client), TokioIo::new(host_side)).await;
        }
    });
    http::upgrade(crate::protocol::attach::ATTACH_PROTOCOL)
}
