//! The `claude` session routes: start, list, resume (stop, purge and message are shared
//! or live in `src/daemon/api/turns.rs`) (docs/routes.md#sessions-messages-resume-stop).

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::Request;

use super::{err, launch_body, launch_detached, launched, Peer, Resp};
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
    let (continues, notice) = conversation(d, &e);
    if let Some(entry) = d.ledger().get_mut(&id) {
        match entry.claude.as_mut() {
            Some(c) => c.session_id = continues,
            None if continues.is_some() => {
                entry.claude = Some(crate::protocol::ClaudeInit {
                    session_id: continues,
                    ..Default::default()
                })
            }
            None => {}
        }
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
    match launched(d, input).await {
        Ok(e) => http::json(
            201,
            &wire::Resumed {
                entry: e.view(),
                notice,
            },
        ),
        Err(e) => err(&e),
    }
}

/// The Claude config folder whose `projects/` holds `e`'s transcripts: its own
/// (`$TMPDIR/relay-<id>/claude-config`, kept across resume) when sandboxed, else the
/// person's (`$CLAUDE_CONFIG_DIR`, or `~/.claude`).
fn claude_dir(d: &Daemon, e: &crate::daemon::Entry) -> std::path::PathBuf {
    if e.sandboxed {
        return d.tmp.join(format!("relay-{}", e.id)).join("claude-config");
    }
    std::env::var_os("CLAUDE_CONFIG_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| d.home.join(".claude"))
}

/// What a resume continues (docs/cli.md#resume): the Claude session id the ledger
/// recorded while its transcript (`projects/*/<id>.jsonl`) is there; else the newest
/// transcript in the folder (a turn whose ledger update failed, then a crash); else
/// none, and Claude Code starts a new conversation. Anything but the first is said in
/// the notice.
fn conversation(d: &Daemon, e: &crate::daemon::Entry) -> (Option<String>, Option<String>) {
    let dir = claude_dir(d, e).join("projects");
    let recorded = e
        .claude
        .as_ref()
        .and_then(|c| c.session_id.clone())
        .filter(|s| launch::valid_claude_session_id(s));
    let mut found: Vec<(std::time::SystemTime, String)> = Vec::new();
    for folder in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        for f in std::fs::read_dir(folder.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = f.file_name().to_string_lossy().into_owned();
            // The folder is the session's to write: plain files only, no link followed.
            let Ok(m) = f.path().symlink_metadata() else {
                continue;
            };
            match name.strip_suffix(".jsonl") {
                Some(sid) if m.is_file() && launch::valid_claude_session_id(sid) => {
                    found.push((m.modified().unwrap_or(std::time::UNIX_EPOCH), sid.into()))
                }
                _ => {}
            }
        }
    }
    if let Some(sid) = &recorded {
        if found.iter().any(|(_, s)| s == sid) {
            return (recorded, None);
        }
    }
    let newest = found.into_iter().max().map(|(_, s)| s);
    let why = match &recorded {
        Some(sid) => format!(
            "the conversation relay recorded ({sid}) has no transcript in {}",
            dir.display()
        ),
        None => "relay recorded no Claude session id for this session".to_string(),
    };
    let notice = match &newest {
        Some(sid) => format!("{why}; resuming the newest transcript there, {sid}"),
        None => format!("no conversation to resume: {why}, and {} holds no transcript; Claude Code starts a new conversation", dir.display()),
    };
    (newest, Some(notice))
}
