//! The `claude` session routes: start, list, resume (stop, purge and message are shared
//! or live in `src/daemon/api/turns.rs`) (docs/routes.md#sessions-messages-resume-stop).

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::Request;

use super::{err, launch_body, launched, Peer, Resp};
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
    let e = match launched(d, input).await {
        Ok(e) => e,
        Err(e) => return err(&e),
    };
    match exited_at_start(d, &e.record.id).await {
        Some(r) => r,
        None => http::json(201, &e),
    }
}

/// How long a start waits for the exit of a Claude Code that ended at once to reach
/// the ledger.
const EXIT_RECORD_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// A Claude Code that exited at its start (the host's launch waited for its first
/// answer or its exit): `409 session_exited` saying how, its last stderr line and where
/// its log is. The session stays listed, `dormant`.
async fn exited_at_start(d: &Arc<Daemon>, id: &str) -> Option<Resp> {
    let (status, bytes) = d
        .host
        .call("GET", &format!("/sessions/{id}"), None)
        .await
        .ok()?;
    let info: crate::protocol::SessionInfo = serde_json::from_slice(&bytes).ok()?;
    if status != 200 || info.state != crate::protocol::SessionState::Exited {
        return None;
    }
    d.until_ended(id, EXIT_RECORD_WAIT).await;
    let e = d.entry(id)?;
    let (how, why) = super::how_it_ended(d, &e);
    Some(super::refuse(
        Code::SessionExited,
        format!(
            "session {id} started, but Claude Code ended at once{how}{why}; relay session log \
             --id {id} shows its log"
        ),
    ))
}

/// `GET /api/sessions`.
pub(super) fn list(d: &Daemon) -> Resp {
    http::json(
        200,
        &wire::Sessions {
            sessions: d
                .entries(SessionKind::Claude)
                .iter()
                .map(wire::Session::from)
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
        Some(e) if e.record.kind == SessionKind::Claude => e,
        _ => return refused(ApiError::new(Code::NotFound, format!("no session {id}"))),
    };
    if e.record.state != EntryState::Dormant {
        return refused(ApiError::new(
            Code::SessionRunning,
            format!("session {id} is not dormant"),
        ));
    }
    let (continues, notice) = conversation(d, &e);
    if let Some(entry) = d.ledger().get_mut(&id) {
        match entry.record.claude.as_mut() {
            Some(c) => c.session_id = continues,
            None if continues.is_some() => {
                entry.record.claude = Some(crate::protocol::ClaudeInit {
                    session_id: continues,
                    ..Default::default()
                })
            }
            None => {}
        }
    }
    let input = LaunchInput {
        kind: Some(SessionKind::Claude),
        project: Some(e.record.project_id.clone()),
        directory: Some(e.record.directory.to_string_lossy().into_owned()),
        name: e.record.name.clone(),
        resume_id: Some(id),
        caller_pid: peer.pid,
        ..Default::default()
    };
    match launched(d, input).await {
        Ok(e) => http::json(
            201,
            &wire::Resumed {
                entry: wire::Session::from(&e),
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
    if e.record.sandboxed {
        return d
            .tmp
            .join(format!("relay-{}", e.record.id))
            .join("claude-config");
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
pub(super) fn conversation(
    d: &Daemon,
    e: &crate::daemon::Entry,
) -> (Option<String>, Option<String>) {
    let dir = claude_dir(d, e).join("projects");
    let recorded = e
        .record
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::records::ledger::test_record;

    /// A dormant sandboxed session `s-1` whose ledger recorded Claude Code's `recorded`.
    fn dormant(recorded: Option<&str>) -> crate::daemon::Entry {
        let mut record = test_record("s-1", SessionKind::Claude, EntryState::Dormant);
        record.claude = recorded.map(|sid| crate::protocol::ClaudeInit {
            session_id: Some(sid.into()),
            ..Default::default()
        });
        record.into_entry(3).0
    }

    #[test]
    fn a_resume_continues_the_recorded_conversation_else_the_newest_and_says_so_else_says_there_is_none(
    ) {
        let dir = tempfile::tempdir().unwrap();
        let d = crate::daemon::serve::test_daemon(dir.path());
        let projects = d.tmp.join("relay-s-1/claude-config/projects");

        // Nothing on disk, nothing recorded.
        let (sid, notice) = conversation(&d, &dormant(None));
        assert_eq!(sid, None);
        let notice = notice.unwrap();
        assert!(
            notice.starts_with("no conversation to resume: relay recorded no Claude session id")
                && notice.ends_with("Claude Code starts a new conversation"),
            "{notice}"
        );

        // The recorded one is there: continued, nothing said.
        std::fs::create_dir_all(projects.join("-p")).unwrap();
        std::fs::write(projects.join("-p/aaa-1.jsonl"), "{}\n").unwrap();
        assert_eq!(
            conversation(&d, &dormant(Some("aaa-1"))),
            (Some("aaa-1".to_string()), None)
        );

        // The recorded one is missing (a turn whose ledger write failed, then a crash):
        // the newest transcript, said.
        let (sid, notice) = conversation(&d, &dormant(Some("zzz-9")));
        assert_eq!(sid.as_deref(), Some("aaa-1"));
        let notice = notice.unwrap();
        assert!(
            notice.contains("the conversation relay recorded (zzz-9) has no transcript")
                && notice.ends_with("resuming the newest transcript there, aaa-1"),
            "{notice}"
        );

        // A link or a bad name is no transcript.
        std::fs::remove_file(projects.join("-p/aaa-1.jsonl")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", projects.join("-p/bbb-2.jsonl")).unwrap();
        std::fs::write(projects.join("-p/.hidden.jsonl"), "{}\n").unwrap();
        let (sid, notice) = conversation(&d, &dormant(Some("zzz-9")));
        assert_eq!(sid, None);
        assert!(notice
            .unwrap()
            .starts_with("no conversation to resume: the conversation relay recorded (zzz-9)"));
    }
}
