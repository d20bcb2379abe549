//! `POST /api/sessions/{id}/message`: one turn, through the host's streamed message
//! route. The daemon reads the host's events on a task of its own, so the turn is
//! followed to its end (and Claude Code's `init` reaches the ledger) even when the
//! client hangs up; the client gets either the events as they happen (`"stream":
//! true`, `application/x-ndjson`) or one answer at the end (docs/routes.md,
//! "Sessions, messages, resume, stop"). One turn runs at a time: a message while one
//! runs is refused (`turn_running`), naming `relay session interrupt`
//! (`POST /api/sessions/{id}/interrupt`, [`interrupt`]). Every ended turn goes to the
//! session's turn log (`crate::daemon::turns`).

use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::body::{Bytes, Incoming};
use hyper::Request;
use tokio::sync::{mpsc, oneshot};

use super::{body, host_error, host_passthrough, refuse, Resp};
use crate::daemon::{Daemon, EntryState};
use crate::protocol::{HostCode, SessionKind, TurnEvent};
use crate::wire::Code;
use crate::wire::Message;

/// A host event line longer than this ends the turn (the host's own lines stay below:
/// it cuts tool results and reads Claude Code's lines up to 8 MiB).
const LINE_MAX: usize = 9 * 1024 * 1024;

fn broken(message: &str) -> TurnEvent {
    TurnEvent::Error {
        code: HostCode::SessionExited,
        message: message.into(),
    }
}

fn line_of(ev: &TurnEvent) -> Bytes {
    let mut line = serde_json::to_vec(ev).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

pub async fn message(d: &Arc<Daemon>, id: &str, req: Request<Incoming>) -> Resp {
    let m: Message = match body(req).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    if let Some(r) = running_session(d, id) {
        return r;
    }
    if let Err((ran, tools)) = d.turns.begin(id, &m.text) {
        return refuse(
            Code::TurnRunning,
            format!(
                "session {id} is still answering the message before ({} s in, {}), so this \
                 one was not sent; wait for that turn to end (relay session log --id {id} \
                 shows its reply) or stop it with relay session interrupt --id {id}",
                ran.as_secs(),
                crate::daemon::turns::tool_calls(tools)
            ),
        );
    }
    start_turn(d, id, m).await
}

/// How long an interrupt waits for the turn to end before it answers.
const INTERRUPT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// `POST /api/sessions/{id}/interrupt`: Claude Code asked to stop the running turn
/// (the host writes its interrupt request). The turn then ends as usual: its answer,
/// to whoever waits for it and in the turn log, is the reply so far, `interrupted`.
/// The answer comes once it has ended (at most [`INTERRUPT_WAIT`]; `"ended": false`
/// past that), so a message sent right after is not refused as `turn_running`.
pub async fn interrupt(d: &Arc<Daemon>, id: &str) -> Resp {
    if let Some(r) = running_session(d, id) {
        return r;
    }
    let no_turn = || {
        refuse(
            Code::NoTurn,
            format!("session {id} runs no turn: there is nothing to interrupt"),
        )
    };
    if !d.turns.running(id) {
        return no_turn();
    }
    match host_passthrough(d, "POST", &format!("/sessions/{id}/interrupt"), None).await {
        Ok((200, bytes)) => {
            let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
            if v["interrupted"] != true {
                return no_turn();
            }
            let ended = d.turns.ended_within(id, INTERRUPT_WAIT).await;
            crate::http::json(
                200,
                &serde_json::json!({"id": id, "interrupted": true, "ended": ended}),
            )
        }
        Ok((status, bytes)) => host_error(status, &bytes),
        Err(r) => r,
    }
}

/// `None` for a running `claude` session; else the refusal a turn or an interrupt gets.
fn running_session(d: &Daemon, id: &str) -> Option<Resp> {
    match d.entry(id) {
        Some(e)
            if e.record.kind == SessionKind::Claude && e.record.state == EntryState::Running =>
        {
            None
        }
        Some(e) if e.record.kind == SessionKind::Claude => {
            let state = format!("{:?}", e.record.state).to_lowercase();
            let (how, why) = super::how_it_ended(d, &e);
            Some(refuse(
                Code::SessionNotRunning,
                format!(
                    "session {id} is {state}{how}{why}; resume it first (relay session log \
                     --id {id} shows its log)"
                ),
            ))
        }
        _ => Some(refuse(Code::NotFound, format!("no session {id}"))),
    }
}

/// The turn of a message: the host's streamed turn, followed on a task of its own,
/// which ends it in `d.turns` ([`ended`]); a turn the host refused is ended here.
async fn start_turn(d: &Arc<Daemon>, id: &str, m: Message) -> Resp {
    let host_body = serde_json::to_vec(&crate::protocol::MessageRequest {
        text: m.text,
        stream: true,
    })
    .unwrap_or_default();
    let answer = match d
        .host
        .call_streaming("POST", &format!("/sessions/{id}/message"), host_body)
        .await
    {
        Ok(a) => a,
        Err(e) => {
            // No turn began: the next message may go.
            d.turns.end(id);
            return refuse(Code::HostUnavailable, e.to_string());
        }
    };
    let status = answer.status().as_u16();
    if status != 200 {
        let bytes = answer
            .into_body()
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        d.turns.end(id);
        return host_error(status, &bytes);
    }
    let (client_tx, client_rx) = mpsc::channel::<Bytes>(64);
    let (end_tx, end_rx) = oneshot::channel::<(TurnEvent, Vec<String>)>();
    let client = m.stream.then_some(client_tx);
    tokio::spawn(follow(
        d.clone(),
        id.to_string(),
        answer.into_body(),
        client,
        end_tx,
    ));
    if m.stream {
        return crate::http::stream::streamed(200, "application/x-ndjson", client_rx);
    }
    match end_rx.await {
        Ok((
            TurnEvent::Result {
                text,
                is_error,
                api_error_status,
                ended,
                interrupted,
            },
            warnings,
        )) => {
            let answer = crate::wire::TurnAnswer {
                id: id.to_string(),
                text,
                is_error,
                api_error_status,
                ended,
                interrupted,
                warnings,
            };
            crate::http::json(200, &answer)
        }
        Ok((TurnEvent::Error { message, .. }, _)) => refuse(Code::SessionExited, message),
        _ => refuse(Code::SessionExited, "the turn ended without an answer"),
    }
}

/// The end of `id`'s turn: no longer running, and in its turn log. An interrupted
/// turn's result, which Claude Code leaves without text, gets the reply so far.
fn ended(d: &Daemon, id: &str, ev: &mut TurnEvent) {
    let Some(now) = d.turns.end(id) else { return };
    let (how, reply) = match ev {
        TurnEvent::Result {
            text,
            is_error,
            api_error_status,
            ended,
            interrupted,
        } => {
            if *interrupted && text.trim().is_empty() {
                *text = now.text.clone();
            }
            let why = ended.as_deref().unwrap_or("ended");
            let how = match (*interrupted, *is_error, api_error_status) {
                (true, _, _) => format!("interrupted ({why})"),
                (false, true, Some(st)) => format!("failed ({why}, API status {st})"),
                (false, true, None) => format!("failed ({why})"),
                (false, false, _) => why.to_string(),
            };
            (how, text.clone())
        }
        TurnEvent::Error { message, .. } => (format!("broke: {message}"), now.text.clone()),
        _ => return,
    };
    let entry = crate::daemon::turns::entry(
        &now,
        crate::daemon::records::journal::now_ms(),
        &how,
        &reply,
    );
    crate::daemon::turns::append(&d.paths.host_state().join("logs"), id, &entry);
}

/// Reads the host's event lines to the end of the turn: records `init` in the ledger,
/// passes every event to `client` while it listens, and hands the last one (`result`
/// or `error`) to `end`, with the warnings of a ledger update that failed (each also
/// a `warning` event, right after its `init`).
async fn follow(
    d: Arc<Daemon>,
    id: String,
    mut host: Incoming,
    mut client: Option<mpsc::Sender<Bytes>>,
    end: oneshot::Sender<(TurnEvent, Vec<String>)>,
) {
    let mut buf: Vec<u8> = Vec::new();
    let mut last = None;
    let mut warnings = Vec::new();
    'read: while let Some(frame) = host.frame().await {
        let Ok(frame) = frame else { break };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buf.extend_from_slice(&data);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let Ok(ev) = serde_json::from_slice::<TurnEvent>(&line) else {
                continue;
            };
            let mut events = vec![ev];
            match &mut events[0] {
                TurnEvent::Init(init) => {
                    if let Some(message) = d.set_claude(&id, init.clone()) {
                        warnings.push(message.clone());
                        events.push(TurnEvent::Warning { message });
                    }
                }
                TurnEvent::Text { text } => d.turns.said(&id, text),
                TurnEvent::ToolUse { .. } => d.turns.tool(&id),
                ev @ (TurnEvent::Result { .. } | TurnEvent::Error { .. }) => {
                    ended(&d, &id, ev);
                    last = Some(ev.clone())
                }
                // relay's own; a host's is dropped.
                TurnEvent::Warning { .. } => continue,
                _ => {}
            }
            for ev in &events {
                if let Some(c) = &client {
                    if c.send(line_of(ev)).await.is_err() {
                        // The client hung up; the turn is still read to its end.
                        client = None;
                    }
                }
            }
            if last.is_some() {
                break 'read;
            }
        }
        if buf.len() > LINE_MAX {
            break;
        }
    }
    let last = match last {
        Some(ev) => ev,
        None => {
            let mut ev = broken("the session host ended the turn without an answer");
            ended(&d, &id, &mut ev);
            if let Some(c) = &client {
                let _ = c.send(line_of(&ev)).await;
            }
            ev
        }
    };
    let _ = end.send((last, warnings));
}
