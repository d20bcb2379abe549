//! Purging ended sessions: the ledger record, the host's record and disk logs, and the
//! session's temp folder (`$TMPDIR/relay-<id>`, with Claude's config and transcripts)
//! go together. On request (`POST /api/{sessions,terminals}/{id}/purge`, or a `forget`
//! frame on a terminal's attach: `relay sandbox`, docs/routes.md#attaching-to-a-terminal) or once
//! `retain_ended` has passed since the session ended (the token watcher's tick calls
//! [`sweep`]). docs/THREAT-MODEL.md, "Leftovers".
//!
//! The temp folder was the session's to write, so its removal follows no link and its
//! work is bounded: nothing is removed unless the folder above it still resolves to
//! itself, a link (or a file) planted in the folder's place is removed itself, and the
//! walk inside (`crate::tree`) follows no link, keeps its stack on the heap and stops
//! at a tree too deep or too large, which keeps the record (`500 purge_failed`)
//! instead of taking the daemon down.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::journal::{now_ms, AuditRow, Event};
use super::ledger::Launching;
use crate::daemon::error::ApiError;
use crate::daemon::settings::{self, Retention};
use crate::daemon::{Daemon, Entry, EntryState};
use crate::protocol::SessionKind;
use crate::tree::Limits;
use crate::wire::{Code, Outcome};

fn noun(kind: SessionKind) -> &'static str {
    match kind {
        SessionKind::Claude => "session",
        SessionKind::Pty => "terminal",
    }
}

/// Removes an ended session: its record, the host's record and logs, its temp folder.
/// A running one is `409 session_running`; a folder that cannot be removed safely keeps
/// the record and answers `500 purge_failed`.
pub async fn purge(
    d: &Daemon,
    id: &str,
    kind: SessionKind,
    reason: &'static str,
) -> Result<Entry, ApiError> {
    settle_reported_exit(d, id).await;
    let entry = {
        let mut l = d.ledger();
        match l.get(id) {
            Some(e) if e.record.kind == kind => {
                if matches!(e.record.state, EntryState::Running | EntryState::Launching) {
                    return Err(ApiError::new(
                        Code::SessionRunning,
                        format!("{} {id} is running; stop it first", noun(kind)),
                    ));
                }
            }
            _ => {
                return Err(ApiError::new(
                    Code::NotFound,
                    format!("no {} {id}", noun(kind)),
                ))
            }
        }
        // Out of the ledger first: a resume of this id from now on finds nothing.
        match l.remove(id) {
            Some(e) => e,
            None => return Err(ApiError::new(Code::NotFound, format!("no {id}"))),
        }
    };
    // The host forgets it and removes its logs; when the host no longer knows it (it
    // was restarted), the files go by name.
    if let Err(e) = d
        .host
        .call("DELETE", &format!("/sessions/{id}"), None)
        .await
    {
        tracing::debug!(session = id, error = %e, "purge: the host is not there to forget it");
    }
    remove_logs(d, id);
    if let Err(msg) = remove_session_dir_blocking(d, id).await {
        // The record comes back: a restart still lists it, and the next purge tries again.
        d.ledger().insert(id.to_string(), entry);
        d.persist(id);
        return Err(ApiError::new(Code::PurgeFailed, msg));
    }
    // Its ledger file goes last: a restart finds it until the purge is done (and a
    // launch marker its launch could not take away, with it).
    d.persist(id);
    d.store.unmark(id);
    d.remember_purged(&entry);
    record(d, id, Some(&entry), kind, reason);
    Ok(entry)
}

/// A session the host has already seen end, whose exit line the daemon has not read
/// yet (it reads the host's stdout on its own task): waits, bounded, until the ledger
/// has it ended. `relay sandbox`'s terminal is purged right after its attach got the
/// exit frame, which the host sends after that line (docs/routes.md#attaching-to-a-terminal).
async fn settle_reported_exit(d: &Daemon, id: &str) {
    let running = |d: &Daemon| {
        d.ledger()
            .get(id)
            .is_some_and(|e| e.record.state == EntryState::Running)
    };
    if !running(d) {
        return;
    }
    let seq = d.events.last_seq();
    let ended_on_host = matches!(
        d.host.call("GET", &format!("/sessions/{id}"), None).await,
        Ok((200, body)) if serde_json::from_slice::<serde_json::Value>(&body)
            .is_ok_and(|v| v["state"] == "exited")
    );
    if !ended_on_host {
        return;
    }
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut after = seq;
    while running(d) {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return;
        }
        if let Some(last) = d.events.wait_after(after, left).await.last() {
            after = last["seq"].as_u64().unwrap_or(after);
        }
    }
}

fn record(d: &Daemon, id: &str, e: Option<&Entry>, kind: SessionKind, reason: &str) {
    let row = d.audit.record(&AuditRow {
        action: "session_purge",
        session_id: Some(id.to_string()),
        kind: Some(kind.as_str().into()),
        project: e.map(|e| e.record.project_id.clone()),
        template: e.map(|e| e.record.template_id.clone()),
        outcome: Outcome::Allowed,
        error: Some(reason.into()),
        token_fingerprint: e.and_then(|e| e.record.token_fingerprint.clone()),
        ..Default::default()
    });
    if let Err(err) = row {
        crate::listen::log(format_args!("relay: audit: session_purge of {id}: {err}"));
    }
    d.events.emit(&Event {
        name: "session.purged",
        status: Some("ok"),
        reason: Some(reason.into()),
        session_id: Some(id.to_string()),
        kind: Some(kind.as_str().into()),
        ..Default::default()
    });
}

fn remove_logs(d: &Daemon, id: &str) {
    let logs = d.paths.host_state().join("logs");
    for ext in ["head", "tail", "turns"] {
        let _ = std::fs::remove_file(logs.join(format!("{id}.{ext}")));
    }
}

/// Removes `<tmp_real>/relay-<id>` without following a link: only while `tmp_real` (the
/// canonical temp folder found at start) still resolves to itself, so no component of
/// the path has become a link; then with the bounded walk of `crate::tree` (no
/// recursion, a few descriptors, nothing followed: a link or a file in the folder's
/// place is removed itself, a folder the session made unwritable is made writable
/// through its own name or descriptor). A tree past the walk's limits is an error and
/// stays. `Ok(false)`: nothing was there. Blocking: async callers use
/// [`remove_session_dir_blocking`].
pub fn remove_session_dir(tmp_real: &Path, id: &str) -> Result<bool, String> {
    if id.is_empty() || id.contains('/') || id.starts_with('.') {
        return Err(format!("session id {id:?} is not a folder name"));
    }
    let name = format!("relay-{id}");
    let dir = tmp_real.join(&name);
    match std::fs::canonicalize(tmp_real) {
        Ok(real) if real == tmp_real => {}
        _ => {
            return Err(format!(
                "session temp folder {}: {} no longer resolves to itself (a link in its \
                 path?); left in place",
                dir.display(),
                tmp_real.display()
            ))
        }
    }
    crate::tree::remove_in(tmp_real, name.as_ref(), Limits::SESSION).map_err(|e| {
        // What the session left is too big to walk: only a person can take it away.
        let hint = if e.is_limit() {
            " (remove it by hand, e.g. with rm -rf, then purge again)"
        } else {
            ""
        };
        format!(
            "session temp folder {}: {e}; left in place{hint}",
            dir.display()
        )
    })
}

/// [`remove_session_dir`] on a blocking thread: a large tree takes a while, and the
/// runtime's workers go on serving meanwhile.
pub async fn remove_session_dir_blocking(d: &Daemon, id: &str) -> Result<bool, String> {
    let (tmp_real, owned) = (d.tmp_real.clone(), id.to_string());
    tokio::task::spawn_blocking(move || remove_session_dir(&tmp_real, &owned))
        .await
        .unwrap_or_else(|e| {
            Err(format!(
                "session temp folder {}: the removal did not finish: {e}",
                d.tmp_real.join(format!("relay-{id}")).display()
            ))
        })
}

/// At start, before the host runs: the launches a stop of relay cut short before their
/// ledger record was written, found by the markers they left (`Store::mark_launching`).
/// A marker whose id has a record belongs to a resume: the record owns the folder, the
/// marker goes. Otherwise the session was never on file and nothing of it runs any
/// more: its temp folder (removed as a purge removes it, in the temp folder the marker
/// names), its logs, then the marker go, with a `session_purge` row and a
/// `session.purged` event (reason `launch_cut_short`). A folder that cannot be removed
/// safely keeps its marker, so the next start tries again.
pub(in crate::daemon) fn launches_cut_short(d: &Daemon, marks: &[Launching]) {
    for m in marks {
        if d.ledger().contains_key(&m.id) {
            d.store.unmark(&m.id);
            continue;
        }
        remove_logs(d, &m.id);
        match remove_session_dir(&m.tmp, &m.id) {
            Ok(_) => {
                d.store.unmark(&m.id);
                record(d, &m.id, None, kind_of(&m.id), LAUNCH_CUT_SHORT);
            }
            Err(msg) => tracing::warn!(
                "launch {} cut short by a stop of relay: {msg}; tried again at the next start",
                m.id
            ),
        }
    }
}

/// The purge reason of a launch cut short ([`launches_cut_short`]).
pub const LAUNCH_CUT_SHORT: &str = "launch_cut_short";

/// A session's kind from its id (`s-…` a Claude session, `t-…` a terminal).
fn kind_of(id: &str) -> SessionKind {
    if id.starts_with('s') {
        SessionKind::Claude
    } else {
        SessionKind::Pty
    }
}

/// The timer's part: purges every ended session whose `retain_ended` has passed; with
/// `orphans`, also the logs (and temp folders) of sessions the ledger no longer knows —
/// an earlier `relay serve` ran them — once their logs are that old.
pub async fn sweep(d: &Daemon, orphans: bool) {
    let Ok(loaded) = settings::load(&d.paths.settings()) else {
        return;
    };
    let Retention::Secs(keep) = loaded.settings.retain_ended else {
        return;
    };
    let keep_ms = keep.saturating_mul(1000);
    let now = now_ms();
    let due: Vec<(String, SessionKind)> = {
        let failed = d.purge_failed.lock().unwrap_or_else(|p| p.into_inner());
        d.ledger()
            .values()
            .filter(|e| matches!(e.record.state, EntryState::Dormant | EntryState::Exited))
            .filter(|e| {
                e.record
                    .ended_ms
                    .is_some_and(|t| now.saturating_sub(t) >= keep_ms)
            })
            .filter(|e| !failed.contains(&e.record.id))
            .map(|e| (e.record.id.clone(), e.record.kind))
            .collect()
    };
    for (id, kind) in due {
        if let Err(e) = purge(d, &id, kind, "retain_ended").await {
            if e.code != Code::SessionRunning {
                crate::listen::log(format_args!("relay: purge {id}: {}", e.message));
                d.purge_failed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id);
            }
        }
    }
    if orphans {
        sweep_orphans(d, keep).await;
    }
}

/// Logs under `<config>/sessions/logs` of sessions the ledger does not know, whose files
/// are all older than `keep` seconds: removed with the session's temp folder.
async fn sweep_orphans(d: &Daemon, keep: u64) {
    let logs = d.paths.host_state().join("logs");
    let Ok(rd) = std::fs::read_dir(&logs) else {
        return;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| t.as_secs() as i64)
        .unwrap_or(0);
    let mut ids: std::collections::BTreeMap<String, bool> = Default::default();
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((id, ext)) = name.rsplit_once('.') else {
            continue;
        };
        if !matches!(ext, "head" | "tail") || !crate::daemon::ids::is_relay_id(id) {
            continue;
        }
        let old = e
            .metadata()
            .is_ok_and(|m| now.saturating_sub(m.mtime()) as u64 >= keep);
        let all_old = ids.entry(id.to_string()).or_insert(true);
        *all_old &= old;
    }
    for (id, old) in ids {
        if !old || d.ledger().contains_key(&id) {
            continue;
        }
        if d.purge_failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&id)
        {
            continue;
        }
        remove_logs(d, &id);
        match remove_session_dir_blocking(d, &id).await {
            Ok(_) => record(d, &id, None, kind_of(&id), "retain_ended"),
            Err(msg) => {
                crate::listen::log(format_args!("relay: purge {id}: {msg}"));
                d.purge_failed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn removal_never_follows_a_link_and_survives_an_unwritable_folder() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let tmp = root.join("tmp");
        let precious = root.join("precious");
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::create_dir_all(precious.join("inner")).unwrap();
        std::fs::write(precious.join("inner/file"), "keep").unwrap();

        // Links inside point outside; a folder inside is made read-only.
        let dir = tmp.join("relay-t-000000000001");
        std::fs::create_dir_all(dir.join("locked/deeper")).unwrap();
        std::os::unix::fs::symlink(&precious, dir.join("to-folder")).unwrap();
        std::os::unix::fs::symlink(precious.join("inner/file"), dir.join("to-file")).unwrap();
        std::fs::set_permissions(dir.join("locked"), std::fs::Permissions::from_mode(0o500))
            .unwrap();
        assert_eq!(remove_session_dir(&tmp, "t-000000000001"), Ok(true));
        assert!(!dir.exists());
        assert_eq!(
            std::fs::read_to_string(precious.join("inner/file")).unwrap(),
            "keep"
        );
        assert_eq!(remove_session_dir(&tmp, "t-000000000001"), Ok(false));

        // A link in the folder's place: the link goes, not what it points at.
        std::os::unix::fs::symlink(&precious, &dir).unwrap();
        assert_eq!(remove_session_dir(&tmp, "t-000000000001"), Ok(true));
        assert!(std::fs::symlink_metadata(&dir).is_err());
        assert!(precious.join("inner/file").exists());

        // The temp folder itself turned into a link: nothing is removed.
        let elsewhere = root.join("elsewhere");
        std::fs::create_dir_all(elsewhere.join("relay-t-000000000002")).unwrap();
        std::fs::write(elsewhere.join("relay-t-000000000002/x"), "keep").unwrap();
        std::fs::rename(&tmp, root.join("tmp.real")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &tmp).unwrap();
        let e = remove_session_dir(&tmp, "t-000000000002").unwrap_err();
        assert!(e.contains("no longer resolves to itself"), "{e}");
        assert!(elsewhere.join("relay-t-000000000002/x").exists());
        assert!(remove_session_dir(&tmp, "../x").is_err());
    }

    #[test]
    fn a_tree_too_deep_to_walk_fails_its_removal_naming_the_folder_and_stays() {
        // A tmpfs where there is one: ext4 is slow over thousands of nested folders.
        let d = tempfile::tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        let tmp = std::fs::canonicalize(d.path()).unwrap();
        let dir = tmp.join("relay-t-000000000003");
        // One level at a time by name, as a session would, past the walk's depth.
        crate::tree::nest(&dir, crate::tree::MAX_DEPTH + 10);
        let e = remove_session_dir(&tmp, "t-000000000003").unwrap_err();
        assert_eq!(
            e,
            format!(
                "session temp folder {}: a folder more than 2048 levels down; left in place \
                 (remove it by hand, e.g. with rm -rf, then purge again)",
                dir.display()
            )
        );
        assert!(dir.join("d/d").is_dir());
        crate::tree::remove(&dir, crate::tree::Limits::NONE).unwrap();
        assert_eq!(remove_session_dir(&tmp, "t-000000000003"), Ok(false));
    }
}
