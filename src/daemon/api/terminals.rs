//! The terminal routes: start, list, log, attach (stop and purge are shared)
//! (docs/routes.md#attaching-to-a-terminal).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::TokioIo;

use super::{err, host_error, host_passthrough, launch_body, launch_detached, refuse, Peer, Resp};
use crate::daemon::error::ApiError;
use crate::daemon::launch::{self, LaunchInput};
use crate::daemon::records::purge;
use crate::daemon::{Daemon, EntryState};
use crate::http;
use crate::protocol::{attach, PtySize, SessionKind};
use crate::wire::Code;
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
    let pty = match pty_size(b.cols, b.rows) {
        Ok(p) => p,
        Err(e) => return refused(d, e),
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

/// The pty's size a start or resume asks for: none, or 1 to 1000 each way (80×24 for
/// what is left out).
fn pty_size(cols: Option<u16>, rows: Option<u16>) -> Result<Option<PtySize>, ApiError> {
    if cols.is_none() && rows.is_none() {
        return Ok(None);
    }
    let size = PtySize {
        cols: cols.unwrap_or(80),
        rows: rows.unwrap_or(24),
    };
    if size.cols == 0 || size.rows == 0 || size.cols > 1000 || size.rows > 1000 {
        return Err(ApiError::new(
            Code::InvalidRequest,
            "cols and rows must be 1 to 1000",
        ));
    }
    Ok(Some(size))
}

/// `POST /api/terminals/{id}/resume`: an ended Claude Code terminal (a `relay sandbox
/// claude-code` run kept with its conversation) launched again under its id, in its
/// own sandbox folder, continuing its newest conversation (`--resume`) on the token as
/// it is now (docs/routes.md#resuming-a-terminal).
pub(super) async fn resume(
    d: &Arc<Daemon>,
    peer: Peer,
    id: String,
    req: Request<Incoming>,
) -> Resp {
    let refused = |e: ApiError| {
        err(&launch::refused_request(
            d,
            SessionKind::Pty,
            "session_resume",
            Some(id.clone()),
            e,
        ))
    };
    let b: wire::TerminalResume = match super::parse_body(req).await {
        Ok(b) => b,
        Err(e) => return refused(e),
    };
    let e = match resumable(d, &id) {
        Ok(e) => e,
        Err(e) => return refused(e),
    };
    let Some(conversation) = super::sessions::conversation(d, &e).0 else {
        let why = format!(
            "terminal {id} has no conversation left to resume (no transcript in its sandbox \
             folder); start a new one with relay sandbox {}",
            e.record.template_id
        );
        return refused(ApiError::new(Code::NotFound, why));
    };
    let pty = match pty_size(b.cols, b.rows) {
        Ok(p) => p,
        Err(e) => return refused(e),
    };
    let input = LaunchInput {
        kind: Some(SessionKind::Pty),
        project: Some(e.record.project_id.clone()),
        template: Some(e.record.template_id.clone()),
        directory: Some(e.record.directory.to_string_lossy().into_owned()),
        name: e.record.name.clone(),
        pty,
        extra_args: vec!["--resume".into(), conversation],
        resume_id: Some(id),
        caller_pid: peer.pid,
        hold_output: b.hold_output,
        ..Default::default()
    };
    launch_detached(d, input).await
}

/// The entry of `id` when it is a terminal that can resume: ended, and a sandboxed
/// Claude Code run (its conversation lies in its own sandbox folder).
fn resumable(d: &Daemon, id: &str) -> Result<crate::daemon::Entry, ApiError> {
    let e = match d.entry(id) {
        Some(e) if e.record.kind == SessionKind::Pty => e,
        _ => return Err(ApiError::new(Code::NotFound, format!("no terminal {id}"))),
    };
    if e.record.state != EntryState::Exited {
        let why = format!("terminal {id} is still running: relay terminal attach {id} joins it");
        return Err(ApiError::new(Code::SessionRunning, why));
    }
    if !e.record.sandboxed || e.record.template_id != crate::protocol::CLAUDE_CODE_TEMPLATE {
        let why = format!(
            "terminal {id} ran the {} template, not a sandboxed {}: only those keep a \
             conversation to resume",
            e.record.template_id,
            crate::protocol::CLAUDE_CODE_TEMPLATE
        );
        return Err(ApiError::new(Code::InvalidRequest, why));
    }
    Ok(e)
}

/// `GET /api/terminals`.
pub(super) fn list(d: &Daemon) -> Resp {
    http::json(
        200,
        &wire::Terminals {
            terminals: d
                .entries(SessionKind::Pty)
                .iter()
                .map(wire::Session::from)
                .collect(),
        },
    )
}

/// `GET /api/terminals/{id}/log` and `GET /api/sessions/{id}/log`: the host's disk log,
/// also after exit. An entry the host no longer holds (it was restarted since, or is
/// down) still has its log files, as the host left them, until it is purged: those are
/// read, so a listed entry's log is never "no session".
pub(super) async fn log(d: &Daemon, id: &str, kind: SessionKind) -> Resp {
    let what = match kind {
        SessionKind::Pty => "terminal",
        SessionKind::Claude => "session",
    };
    if d.entry(id).is_none_or(|e| e.record.kind != kind) {
        return refuse(Code::NotFound, format!("no {what} {id}"));
    }
    let logs = d.paths.host_state().join("logs");
    // A session's turns come first: what it was asked, what it answered, how each
    // turn ended (`crate::daemon::turns`).
    let turns = (kind == SessionKind::Claude)
        .then(|| std::fs::read(crate::daemon::turns::log_path(&logs, id)).ok())
        .flatten();
    let with_turns = |stderr: hyper::body::Bytes| match &turns {
        Some(t) => {
            let mut out = t.clone();
            out.extend_from_slice("── Claude Code's stderr\n".as_bytes());
            out.extend_from_slice(&stderr);
            http::octets(out)
        }
        None => http::octets(stderr),
    };
    let held = host_passthrough(d, "GET", &format!("/sessions/{id}/log"), None).await;
    match held {
        Ok((200, bytes)) => return with_turns(bytes),
        Ok((404, _)) | Err(_) => {}
        Ok((status, bytes)) => return host_error(status, &bytes),
    }
    match log_files(&logs, id) {
        Some(bytes) => with_turns(bytes.into()),
        None if turns.is_some() => with_turns(Default::default()),
        None => refuse(
            Code::NotFound,
            format!("{what} {id} has no log left (relay keeps none for it)"),
        ),
    }
}

/// The last line of an entry's log, as its files hold it ([`crate::text::last_line`]).
pub(super) fn last_words(d: &Daemon, id: &str) -> Option<String> {
    crate::text::last_line(&log_files(&d.paths.host_state().join("logs"), id)?)
}

/// `<logs>/<id>.head` then `<id>.tail` as the host wrote them (`src/host/termlog.rs`);
/// `None` without a head. `id` is a listed entry's, so it names no other file.
fn log_files(logs: &std::path::Path, id: &str) -> Option<Vec<u8>> {
    let mut out = std::fs::read(logs.join(format!("{id}.head"))).ok()?;
    out.extend(std::fs::read(logs.join(format!("{id}.tail"))).unwrap_or_default());
    Some(out)
}

/// After the host's side of an attach has ended, how long the client may take to close
/// its side (and send FORGET before it does).
const CLIENT_LAST_WORD: Duration = Duration::from_secs(2);

/// `GET /api/terminals/{id}/attach` with `Upgrade: relay-attach`: the daemon joins the
/// caller's upgraded connection to the host's and copies frames between them.
/// Copies an attach both ways until the host's side has ended and everything it sent
/// has reached the client. The host's side comes first: an ended terminal's host
/// writes its output and exit frame and closes at once, so the client's first frame
/// (its window size) can meet a closed host socket; that must not cut off the frames
/// still on their way to the client, as one bidirectional copy did (it stops at the
/// first error in either direction: `relay sandbox` then saw the stream end without
/// output or exit frame). True when the client sent [`attach::FORGET`]: it has the
/// exit frame, and the terminal may be purged. The exit frame waits for `ended`
/// ([`copy_holding_exit`]).
async fn relay_attach<C, H>(
    client: C,
    host: H,
    ended: impl std::future::Future<Output = ()>,
) -> bool
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    H: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut client_rd, mut client_wr) = tokio::io::split(client);
    let (mut host_rd, mut host_wr) = tokio::io::split(host);
    let forget = AtomicBool::new(false);
    // Client to host, frame by frame: a client whose connection fails (reset) or whose
    // framing is broken ends the attach at once, as a clean end does not. FORGET is the
    // daemon's, never the host's. Once the host's side is closed (an ended terminal's
    // host closes right after the exit frame), the client's frames are still read, for
    // the FORGET that follows its last keystrokes or window size.
    let up = async {
        let mut buf = vec![0u8; 8192];
        let mut pending = Vec::new();
        let mut host_open = true;
        let client_failed = loop {
            let n = match client_rd.read(&mut buf).await {
                Ok(0) => break false,
                Ok(n) => n,
                Err(_) => break true,
            };
            pending.extend_from_slice(&buf[..n]);
            let Ok(frames) = attach::take_frames(&mut pending) else {
                break true;
            };
            let mut out = Vec::new();
            for (kind, payload) in frames {
                if kind == attach::FORGET {
                    forget.store(true, Ordering::Relaxed);
                } else {
                    out.extend_from_slice(&attach::frame(kind, &payload));
                }
            }
            if host_open && !out.is_empty() && host_wr.write_all(&out).await.is_err() {
                host_open = false;
            }
        };
        let _ = host_wr.shutdown().await;
        client_failed
    };
    let down = async {
        let _ = copy_holding_exit(&mut host_rd, &mut client_wr, ended).await;
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
        // The host has ended and all it sent is delivered: the attach is over once
        // the client has said its last (FORGET follows the exit frame), within a bound.
        () = &mut down => {
            let _ = tokio::time::timeout(CLIENT_LAST_WORD, &mut up).await;
        }
    }
    forget.load(Ordering::Relaxed)
}

/// Copies the host's frames to the client as they come, but the exit frame only once
/// `ended` is done — the session's end recorded, what it planted in repositories set
/// aside (docs/THREAT-MODEL.md#repositories-a-session-made-or-changed) — so a `relay
/// sandbox` that has returned never leaves the person's next git to meet a planted
/// command.
async fn copy_holding_exit<R, W>(
    rd: &mut R,
    wr: &mut W,
    ended: impl std::future::Future<Output = ()>,
) -> std::io::Result<()>
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut ended = Some(ended);
    let mut buf = vec![0u8; 16 * 1024];
    // The header of the frame being read, and what is left of its payload.
    let mut header: Vec<u8> = Vec::with_capacity(5);
    let mut left = 0usize;
    loop {
        let n = rd.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        let (mut i, mut from) = (0, 0);
        while i < n {
            if left > 0 {
                let take = left.min(n - i);
                (i, left) = (i + take, left - take);
                continue;
            }
            if header.is_empty() && buf[i] == attach::EXIT {
                if let Some(ended) = ended.take() {
                    wr.write_all(&buf[from..i]).await?;
                    from = i;
                    ended.await;
                }
            }
            header.push(buf[i]);
            i += 1;
            if header.len() == 5 {
                left = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
                header.clear();
            }
        }
        wr.write_all(&buf[from..n]).await?;
    }
}

/// How long an attach holds a terminal's exit frame for its end to be recorded: past
/// the search of its repositories' bound (`records::repos::Bounds::SESSION`).
const EXIT_HOLD: Duration = Duration::from_secs(60);

pub(super) async fn attach(d: Arc<Daemon>, id: &str, mut req: Request<Incoming>) -> Resp {
    // An ended terminal is attached too: the host replays its scrollback and exit
    // status, so `relay sandbox` never loses a tool that ended before its attach
    // (docs/routes.md#attaching-to-a-terminal).
    let running = match d.entry(id) {
        Some(e) if e.record.kind == SessionKind::Pty => e.record.state == EntryState::Running,
        _ => return refuse(Code::NotFound, format!("no terminal {id}")),
    };
    if !attach::wants(http::header(&req, hyper::header::UPGRADE)) {
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
    let id = id.to_string();
    tokio::spawn(async move {
        let Ok(client) = client_side.await else {
            return;
        };
        let ended = {
            let (d, id) = (d.clone(), id.clone());
            async move {
                if !d.until_ended(&id, EXIT_HOLD).await {
                    tracing::warn!(session = %id, "its end was not recorded within {EXIT_HOLD:?}; its exit is passed on");
                }
            }
        };
        if relay_attach(TokioIo::new(client), TokioIo::new(host_side), ended).await {
            // `relay sandbox` has printed the run and gone: its terminal goes too, as a
            // purge request would take it; a failure keeps the record, listed.
            if let Err(e) = purge::purge(&d, &id, SessionKind::Pty, "purged").await {
                tracing::warn!(
                    "terminal {id} kept after its attach: {} ({})",
                    e.message,
                    e.code
                );
            }
        }
    });
    http::upgrade(attach::ATTACH_PROTOCOL)
}

#[cfg(test)]
mod tests {
    use super::*;
    use attach::frame;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The host's side: sends `out`, closes its writing half, and returns what the
    /// daemon forwarded to it.
    async fn host(mut h: tokio::io::DuplexStream, out: Vec<u8>) -> Vec<u8> {
        h.write_all(&out).await.unwrap();
        h.shutdown().await.unwrap();
        let mut got = Vec::new();
        let _ = h.read_to_end(&mut got).await;
        got
    }

    #[tokio::test]
    async fn forget_after_the_exit_frame_is_taken_out_and_reported_other_frames_pass_whole() {
        let (client, daemon_client) = tokio::io::duplex(64);
        let (daemon_host, host_side) = tokio::io::duplex(64);
        let exit = frame(attach::EXIT, br#"{"exit_status":4,"signal":null}"#);
        let host_task = tokio::spawn(host(host_side, exit.clone()));
        let relay = tokio::spawn(relay_attach(
            daemon_client,
            daemon_host,
            std::future::ready(()),
        ));
        let (mut rd, mut wr) = tokio::io::split(client);
        let mut up = frame(attach::RESIZE, &[0, 80, 0, 24]);
        up.extend(frame(attach::INPUT, b"typed"));
        up.extend(frame(attach::FORGET, &[]));
        up.extend(frame(attach::INPUT, b"after"));
        // One byte at a time: frames split across reads are still seen whole.
        for b in &up[..up.len() - 8] {
            wr.write_all(&[*b]).await.unwrap();
        }
        let mut got = vec![0u8; exit.len()];
        rd.read_exact(&mut got).await.unwrap();
        assert_eq!(got, exit);
        wr.write_all(&up[up.len() - 8..]).await.unwrap();
        wr.shutdown().await.unwrap();
        assert!(relay.await.unwrap(), "FORGET was not reported");
        let mut want = frame(attach::RESIZE, &[0, 80, 0, 24]);
        want.extend(frame(attach::INPUT, b"typed"));
        want.extend(frame(attach::INPUT, b"after"));
        assert_eq!(
            host_task.await.unwrap(),
            want,
            "the host saw other than the frames"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn forget_after_the_host_closed_and_a_frame_met_its_closed_side_is_still_read() {
        // The host sends the exit frame and drops its whole connection at once; the
        // client's keystrokes then meet a closed side, and its FORGET comes after them.
        let (client, daemon_client) = tokio::io::duplex(64);
        let (daemon_host, mut host_side) = tokio::io::duplex(64);
        let exit = frame(attach::EXIT, br#"{"exit_status":0,"signal":null}"#);
        host_side.write_all(&exit).await.unwrap();
        drop(host_side);
        let relay = tokio::spawn(relay_attach(
            daemon_client,
            daemon_host,
            std::future::ready(()),
        ));
        let (mut rd, mut wr) = tokio::io::split(client);
        let mut got = Vec::new();
        rd.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, exit);
        wr.write_all(&frame(attach::INPUT, b"late keys"))
            .await
            .unwrap();
        // Paused time moves on only once every task waits: the daemon has read the
        // keystrokes and met the host's closed side before FORGET is sent.
        tokio::time::sleep(Duration::from_millis(10)).await;
        wr.write_all(&frame(attach::FORGET, &[])).await.unwrap();
        wr.shutdown().await.unwrap();
        assert!(
            relay.await.unwrap(),
            "the FORGET after a closed host side was lost"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_exit_frame_waits_for_the_end_to_be_recorded_and_output_does_not() {
        // An output frame whose payload holds the exit frame's kind byte, then the exit
        // frame split across writes: only the exit frame is held.
        let output = frame(attach::OUTPUT, &[attach::EXIT, b'x', attach::EXIT]);
        let exit = frame(attach::EXIT, br#"{"exit_status":0,"signal":null}"#);
        let (mut host_side, mut daemon_host) = tokio::io::duplex(64);
        let (mut daemon_client, mut client) = tokio::io::duplex(64);
        let (recorded, ended) = tokio::sync::oneshot::channel::<()>();
        let copy = tokio::spawn(async move {
            copy_holding_exit(&mut daemon_host, &mut daemon_client, async {
                let _ = ended.await;
            })
            .await
        });
        host_side.write_all(&output).await.unwrap();
        host_side.write_all(&exit[..2]).await.unwrap();
        let mut got = vec![0u8; output.len()];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(got, output);
        host_side.write_all(&exit[2..]).await.unwrap();
        let mut one = [0u8; 1];
        let early = tokio::time::timeout(Duration::from_millis(50), client.read(&mut one)).await;
        assert!(
            early.is_err(),
            "the exit frame passed before the end was recorded"
        );
        recorded.send(()).unwrap();
        drop(host_side);
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, exit);
        copy.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn an_attach_without_forget_reports_none() {
        let (client, daemon_client) = tokio::io::duplex(64);
        let (daemon_host, host_side) = tokio::io::duplex(64);
        let exit = frame(attach::EXIT, br#"{"exit_status":0,"signal":null}"#);
        let host_task = tokio::spawn(host(host_side, exit.clone()));
        let relay = tokio::spawn(relay_attach(
            daemon_client,
            daemon_host,
            std::future::ready(()),
        ));
        let (mut rd, mut wr) = tokio::io::split(client);
        let mut got = Vec::new();
        rd.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, exit);
        wr.shutdown().await.unwrap();
        assert!(!relay.await.unwrap());
        assert!(host_task.await.unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_keeps_its_side_open_after_the_end_is_let_go_and_broken_framing_ends_it()
    {
        // The host ends; the client neither sends nor closes: the attach is over after
        // CLIENT_LAST_WORD (paused time moves on by itself).
        let (client, daemon_client) = tokio::io::duplex(64);
        let (daemon_host, host_side) = tokio::io::duplex(64);
        let host_task = tokio::spawn(host(host_side, Vec::new()));
        assert!(!relay_attach(daemon_client, daemon_host, std::future::ready(())).await);
        host_task.await.unwrap();
        drop(client);
        // A frame longer than FRAME_MAX ends the attach at once, nothing forwarded.
        let (client, daemon_client) = tokio::io::duplex(64);
        let (daemon_host, mut host_side) = tokio::io::duplex(64);
        let relay = tokio::spawn(relay_attach(
            daemon_client,
            daemon_host,
            std::future::ready(()),
        ));
        let (_rd, mut wr) = tokio::io::split(client);
        wr.write_all(&[attach::INPUT, 0xff, 0xff, 0xff, 0xff])
            .await
            .unwrap();
        assert!(!relay.await.unwrap());
        let mut got = Vec::new();
        host_side.read_to_end(&mut got).await.unwrap();
        assert!(got.is_empty());
    }
}
