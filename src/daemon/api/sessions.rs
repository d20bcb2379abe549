//! The `claude` session routes: start, list, resume (stop, purge and message are shared
//! or live in `src/daemon/api/turns.rs`) (docs/routes.md#sessions-messages-resume-stop).

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::Request;

use super::{err, launch_body, launch_detached, Peer, Resp};
use crate::daemon::error::ApiError;
use crate::daemon::launch::{self, LaunchInput};
use crate::daemon::{Daemon, EntryState};
use crate::http;
use crate::protocol::SessionKind;
use crate::wire::Code;
use crate::wire::{self, SessionStart};

/// `POST /api/sessions`.
pub(super) async fn start(d: &Arc<Daemon>, peer: Peer, req: Request<Incoming>) -> Resp {
    let b: SessionStart = match launch_body(d, SessionKind::Claude, req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let input = LaunchInput {
        kind: Some(SessionKind::Claude),
        project: b.project,
        template: b.template,
        directory: b.directory,
        cwd: b.cwd,
        name: b.name,
        model: b.model,
        permission_mode: b.permission_mode,
        caller_pid: peer.pid,
        ..Default::default()
    };
    launch_detached(d, input).await
}

/// `GET /api/sessions`.
pub(super) fn list(d: &Daemon) -> Resp {
    http::json(
        200,
        &wire::Sessions {
            sessions: d
                .entries(SessionKind::Claude)
                .iter()
                .map(|e| e.view())
                .collect(),
        },
    )
}

/// `POST /api/sessions/{id}/resume`: a dormant session launched again under its id.
pub(super) async fn resume(d: &Arc<Daemon>, peer: Peer, id: String) -> Resp {
    let refused = |e: ApiError| {
        err(&launch::refused_request(
            d,
            SessionKind::Claude,
            "session_resume",
            Some(id.clone()),
            e,
        ))
    };
    let e = match d.entry(&id) {
        Some(e) if e.kind == SessionKind::Claude => e,
        _ => return refused(ApiError::new(Code::NotFound, format!("no session {id}"))),
    };
    if e.state != EntryState::Dormant {
        return refused(ApiError::new(
            Code::SessionRunning,
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
    launch_detached(d, input).await
}
