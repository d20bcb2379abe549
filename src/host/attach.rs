//! Attaching to a terminal: after `GET /sessions/{id}/attach` is upgraded, the host
//! streams the scrollback and the live output as frames, takes input and resize frames
//! (the terminal's size follows the windows attached: [`Window`]), and sends an exit
//! frame when the session has ended.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Bytes;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::mpsc;

use super::terminal::{Follow, Terminal, Window};
use super::Session;
use crate::protocol::attach::{self, frame};
use crate::protocol::PtySize;

/// After the session's exit, how long a lossless attach waits for more output when the
/// pump has not finished: a stray process may still hold the pty
/// (docs/session-host.md#attach).
const AFTER_EXIT_QUIET: Duration = Duration::from_secs(2);

pub async fn run(session: Arc<Session>, term: Arc<Terminal>, upgraded: Upgraded, lossless: bool) {
    let io = TokioIo::new(upgraded);
    let (mut rd, mut wr) = tokio::io::split(io);
    let (snapshot, follow) = term.subscribe(lossless);
    let mut exited = session.exited.clone();
    let exit_wait = async move {
        let _ = exited.wait_for(|e| *e).await;
    };
    tokio::pin!(exit_wait);

    // This attach's window, for the terminal's size: dropped when the client's side
    // ends (or with the task), so the size goes back to the windows that remain.
    let window = Window::open(term.clone());
    let input_term = term.clone();
    let input_session = session.clone();
    let input = tokio::spawn(async move {
        let window = window;
        let mut ended = false;
        let mut buf = Vec::new();
        let mut chunk = vec![0u8; 16 * 1024];
        loop {
            let n = match rd.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            buf.extend_from_slice(&chunk[..n]);
            let Ok(frames) = attach::take_frames(&mut buf) else {
                return;
            };
            for (kind, payload) in frames {
                match kind {
                    attach::INPUT => {
                        // Input for a session that has ended goes nowhere: the attach
                        // stops taking it rather than wait on a pty nobody reads.
                        let mut exited = input_session.exited.clone();
                        tokio::select! {
                            r = input_term.write_input(&payload) => if r.is_err() { return },
                            _ = exited.wait_for(|e| *e) => return,
                        }
                    }
                    attach::EOF if !ended => {
                        ended = true;
                        let term = input_term.clone();
                        let mut exited = input_session.exited.clone();
                        // Outlives this attach (the client may go at once): until the
                        // session ends.
                        tokio::spawn(async move {
                            tokio::select! {
                                () = term.end_input() => {}
                                _ = exited.wait_for(|e| *e) => {}
                            }
                        });
                    }
                    attach::RESIZE if payload.len() == 4 => {
                        let cols = u16::from_be_bytes([payload[0], payload[1]]);
                        let rows = u16::from_be_bytes([payload[2], payload[3]]);
                        if cols > 0 && rows > 0 {
                            window.resize(PtySize { cols, rows });
                        }
                    }
                    _ => {}
                }
            }
        }
    });

    if wr
        .write_all(&frame(attach::OUTPUT, &snapshot))
        .await
        .is_err()
    {
        input.abort();
        return;
    }
    let ended = match follow {
        Follow::Lossy(live) => follow_lossy(&mut wr, live, exit_wait).await,
        Follow::Lossless(queue) => follow_lossless(&mut wr, queue, exit_wait).await,
    };
    if ended {
        let info = session
            .info
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut body =
            serde_json::json!({"exit_status": info.exit_status, "signal": info.exit_signal});
        if let Some(limit) = info.limit_reached {
            body["limit_reached"] = limit.into();
        }
        let _ = wr
            .write_all(&frame(attach::EXIT, body.to_string().as_bytes()))
            .await;
    }
    let _ = wr.shutdown().await;
    input.abort();
}

type Writer = tokio::io::WriteHalf<TokioIo<Upgraded>>;

/// The live feed until the session ends; a reader that falls behind gets a note in
/// place of what it missed. True when the session ended (the exit frame is due).
async fn follow_lossy(
    wr: &mut Writer,
    mut live: broadcast::Receiver<Bytes>,
    mut exit_wait: Pin<&mut impl Future<Output = ()>>,
) -> bool {
    loop {
        tokio::select! {
            got = live.recv() => match got {
                Ok(bytes) => {
                    if wr.write_all(&frame(attach::OUTPUT, &bytes)).await.is_err() {
                        return false;
                    }
                }
                Err(RecvError::Lagged(n)) => {
                    let note = format!("\r\n[relay: {n} chunks of output skipped]\r\n");
                    if wr.write_all(&frame(attach::OUTPUT, note.as_bytes())).await.is_err() {
                        return false;
                    }
                }
                Err(RecvError::Closed) => return false,
            },
            () = &mut exit_wait => {
                // The pump finished before the exit was reported: drain what is queued.
                while let Ok(bytes) = live.try_recv() {
                    let _ = wr.write_all(&frame(attach::OUTPUT, &bytes)).await;
                }
                return true;
            }
        }
    }
}

/// Every chunk, in order, until the pump has read everything and the session has
/// ended; the pump waits while this attach's queue is full. True when the session
/// ended (the exit frame is due).
async fn follow_lossless(
    wr: &mut Writer,
    mut queue: mpsc::Receiver<Bytes>,
    mut exit_wait: Pin<&mut impl Future<Output = ()>>,
) -> bool {
    let mut exited = false;
    loop {
        let next = if exited {
            // Ended: the pump's last reads, unless something else holds the pty and
            // says nothing more.
            tokio::time::timeout(AFTER_EXIT_QUIET, queue.recv())
                .await
                .unwrap_or(None)
        } else {
            tokio::select! {
                got = queue.recv() => got,
                () = &mut exit_wait => {
                    exited = true;
                    continue;
                }
            }
        };
        match next {
            Some(bytes) => {
                if wr.write_all(&frame(attach::OUTPUT, &bytes)).await.is_err() {
                    return false;
                }
            }
            None => break,
        }
    }
    if !exited {
        // Everything is read: the exit report follows (within the 2 s the exit
        // watcher gives the pump).
        exit_wait.await;
    }
    true
}
