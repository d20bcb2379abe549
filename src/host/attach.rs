//! Attaching to a terminal: after `GET /sessions/{id}/attach` is upgraded, the host
//! streams the scrollback and the live output as frames, takes input and resize frames,
//! and sends an exit frame when the session has ended.

use std::sync::Arc;

use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::broadcast::error::RecvError;

use super::terminal::Terminal;
use super::Session;
use crate::protocol::attach::{self, frame};
use crate::protocol::PtySize;

pub async fn run(session: Arc<Session>, term: Arc<Terminal>, upgraded: Upgraded) {
    let io = TokioIo::new(upgraded);
    let (mut rd, mut wr) = tokio::io::split(io);
    let (snapshot, mut live) = term.subscribe();
    let mut exited = session.exited.clone();
    let exit_wait = async move {
        let _ = exited.wait_for(|e| *e).await;
    };
    tokio::pin!(exit_wait);

    let input_term = term.clone();
    let input = tokio::spawn(async move {
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
                    attach::INPUT if input_term.write_input(&payload).await.is_err() => return,
                    attach::INPUT => {}
                    attach::RESIZE if payload.len() == 4 => {
                        let cols = u16::from_be_bytes([payload[0], payload[1]]);
                        let rows = u16::from_be_bytes([payload[2], payload[3]]);
                        if cols > 0 && rows > 0 {
                            let _ = input_term.resize(PtySize { cols, rows });
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
    loop {
        tokio::select! {
            got = live.recv() => match got {
                Ok(bytes) => {
                    if wr.write_all(&frame(attach::OUTPUT, &bytes)).await.is_err() {
                        break;
                    }
                }
                Err(RecvError::Lagged(n)) => {
                    let note = format!("\r\n[relay: {n} chunks of output skipped]\r\n");
                    if wr.write_all(&frame(attach::OUTPUT, note.as_bytes())).await.is_err() {
                        break;
                    }
                }
                Err(RecvError::Closed) => break,
            },
            () = &mut exit_wait => {
                // The pump finished before the exit was reported: drain what is queued.
                while let Ok(bytes) = live.try_recv() {
                    let _ = wr.write_all(&frame(attach::OUTPUT, &bytes)).await;
                }
                let info = session.info.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let body = serde_json::json!({"exit_status": info.exit_status, "signal": info.exit_signal});
                let _ = wr.write_all(&frame(attach::EXIT, body.to_string().as_bytes())).await;
                break;
            }
        }
    }
    let _ = wr.shutdown().await;
    input.abort();
}
