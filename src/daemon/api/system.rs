//! The routes about relay itself: status, the audit log and its scan, doctor, events
//! (docs/routes.md#routes).

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::Request;

use super::{err, refuse, Resp};
use crate::daemon::{Daemon, EntryState};
use crate::http;
use crate::protocol::SessionKind;
use crate::wire;
use crate::wire::Code;

/// `GET /api/status`.
pub fn status_body(d: &Daemon) -> wire::Status {
    let settings = d.load_settings();
    let token_file = settings
        .as_ref()
        .map(|s| s.claude_token_file.clone())
        .unwrap_or_default();
    let note = d
        .settings_note
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let running = d
        .entries(SessionKind::Claude)
        .iter()
        .chain(d.entries(SessionKind::Pty).iter())
        .filter(|e| e.record.state == EntryState::Running)
        .count();
    wire::Status {
        version: env!("CARGO_PKG_VERSION").into(),
        pid: std::process::id(),
        paths: wire::StatusPaths {
            config: d.paths.config.clone(),
            settings: d.paths.settings(),
            socket: d.paths.socket(),
            audit: d.paths.audit(),
            events: d.paths.events(),
            // The stored value: a path, never the content.
            claude_token_file: (!token_file.is_empty()).then_some(token_file),
        },
        api: d.api_addr().map(|a| a.to_string()),
        host: d.host.live().map(|l| wire::HostInfo { pid: l.pid }),
        settings: wire::SettingsState {
            ok: settings.is_ok(),
            note,
        },
        sessions_running: running as u64,
        service: d.service.clone(),
    }
}

/// `GET /api/tokens`: every token file the settings name, with the projects and the
/// running sessions on each, and what is there now; read as a launch reads it, never
/// returned (docs/routes.md#get-apitokens).
pub(super) fn tokens(d: &Daemon) -> Resp {
    let s = match d.load_settings() {
        Ok(s) => s,
        Err(e) => return refuse(Code::SettingsInvalid, e.to_string()),
    };
    let configured = match crate::daemon::settings::configured_tokens(&s, &d.home) {
        Ok(c) => c,
        Err(e) => return refuse(Code::SettingsInvalid, e),
    };
    let running: Vec<_> = d
        .entries(SessionKind::Claude)
        .into_iter()
        .chain(d.entries(SessionKind::Pty))
        .filter(|e| e.record.state == EntryState::Running && e.record.token_passed)
        .collect();
    let tokens = configured
        .into_iter()
        .map(|t| token_file(&s, t, &running))
        .collect();
    http::json(200, &wire::Tokens { tokens })
}

fn token_file(
    s: &crate::daemon::settings::Settings,
    t: crate::daemon::settings::ConfiguredToken,
    running: &[crate::daemon::Entry],
) -> wire::TokenFile {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(&t.path).ok();
    let (fingerprint, problem) = match crate::token::read_token_file(&t.path) {
        Ok(f) => (Some(crate::token::fingerprint(f.token.expose())), None),
        Err(e) => (None, Some(e.to_string())),
    };
    wire::TokenFile {
        keys: t.keys,
        projects: t
            .projects
            .iter()
            .map(|id| wire::TokenProject {
                id: id.clone(),
                account: s
                    .projects
                    .iter()
                    .find(|p| &p.id == id)
                    .and_then(|p| p.account.clone()),
            })
            .collect(),
        fingerprint,
        mode: meta.as_ref().map(|m| format!("{:04o}", m.mode() & 0o7777)),
        size: meta.as_ref().map(|m| m.size()),
        changed_ms: meta
            .as_ref()
            .map(|m| (m.mtime().max(0) as u64) * 1000 + (m.mtime_nsec().max(0) as u64) / 1_000_000),
        problem,
        sessions: running
            .iter()
            .filter(|e| e.token_file.as_ref() == Some(&t.path))
            .map(|e| e.record.id.clone())
            .collect(),
        path: t.path,
    }
}

/// What a reader of the audit log reads at most from the ends of its files: a log of
/// any size costs the daemon this much, never the whole file.
pub const AUDIT_READ_MAX: u64 = 8 * 1024 * 1024;
/// The rows `GET /api/audit` answers by default, and at most (`?tail=N`).
const AUDIT_ROWS: usize = 1000;
const AUDIT_ROWS_MAX: usize = 10_000;

/// `GET /api/audit[?tail=N][&since=MS][&until=MS]`: the last `N` rows (1000; at most
/// 10,000), written at `since` or later and at `until` or earlier (ms since the epoch)
/// when given, oldest first, read from the end of the log and its rotated generations
/// (a line that is not a row is left out). `relay audit --follow` and the Settings page
/// ask again with the newest time they show; the page's "Older rows" with its oldest.
pub(super) async fn audit(d: &Daemon, req: &Request<Incoming>) -> Resp {
    let n = http::query(req, "tail")
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(AUDIT_ROWS)
        .min(AUDIT_ROWS_MAX);
    // A bound that is there but not a number: its key.
    let ms = |key: &'static str, absent: u64| match http::query(req, key).map(|s| s.parse()) {
        None => Ok(absent),
        Some(Ok(ms)) => Ok(ms),
        Some(Err(_)) => Err(key),
    };
    let (since, until) = match (ms("since", 0), ms("until", u64::MAX)) {
        (Ok(s), Ok(u)) => (s, u),
        (Err(key), _) | (_, Err(key)) => {
            return super::refuse(
                wire::Code::InvalidRequest,
                format!("{key}: expected ms since the epoch"),
            )
        }
    };
    let path = d.audit.path().clone();
    let keep = move |r: &wire::AuditRow| r.ts >= since && r.ts <= until;
    let rows = tokio::task::spawn_blocking(move || rows_from_end(&path, n, keep))
        .await
        .unwrap_or_default();
    http::json(200, &wire::AuditRows { rows })
}

/// The last `n` rows of the audit log that `keep` accepts, oldest first.
fn rows_from_end(
    path: &std::path::Path,
    n: usize,
    keep: impl Fn(&wire::AuditRow) -> bool,
) -> Vec<wire::AuditRow> {
    let row = |l: &str| serde_json::from_str::<wire::AuditRow>(l).ok().filter(&keep);
    let mut rows: Vec<wire::AuditRow> =
        crate::daemon::records::journal::tail(path, n, AUDIT_READ_MAX, |l| row(l).is_some())
            .iter()
            .filter_map(|l| row(l))
            .collect();
    rows.reverse();
    rows
}

/// At most this many connections answered for one session, its latest.
const EGRESS_ROWS: usize = 1000;

/// `GET /api/{sessions,terminals}/{id}/egress`: the connections one session asked its
/// egress proxy for, oldest first, from the end of the audit log (docs/routes.md).
pub(super) async fn egress(d: &Daemon, id: &str, kind: crate::protocol::SessionKind) -> Resp {
    if d.entry(id).filter(|e| e.record.kind == kind).is_none() {
        let what = if kind == crate::protocol::SessionKind::Pty {
            "terminal"
        } else {
            "session"
        };
        return super::refuse(wire::Code::NotFound, format!("no {what} {id}"));
    }
    let path = d.audit.path().clone();
    let id = id.to_string();
    let rows = tokio::task::spawn_blocking(move || {
        rows_from_end(&path, EGRESS_ROWS, |r| {
            r.action == "egress" && r.session_id.as_deref() == Some(id.as_str())
        })
    })
    .await
    .unwrap_or_default();
    http::json(200, &wire::AuditRows { rows })
}

/// `POST /api/audit/scan` (`src/daemon/diagnostics/scan.rs`).
pub(super) async fn audit_scan(d: &Arc<Daemon>) -> Resp {
    let d2 = d.clone();
    match tokio::task::spawn_blocking(move || crate::daemon::diagnostics::scan::run(&d2)).await {
        Ok(Ok((report, fingerprint))) => http::json(
            200,
            &wire::ScanReport {
                ok: report.findings.is_empty(),
                complete: report.complete(),
                token_fingerprint: fingerprint,
                files: report.files,
                bytes: report.bytes,
                findings: report.findings,
                skipped: report.skipped,
                skipped_more: report.skipped_more,
            },
        ),
        Ok(Err(e)) => err(&e),
        Err(e) => refuse(Code::Internal, format!("scan: {e}")),
    }
}

/// `POST /api/doctor` (`src/daemon/diagnostics/doctor.rs`).
pub(super) async fn doctor(d: &Arc<Daemon>) -> Resp {
    let d2 = d.clone();
    match tokio::spawn(async move { crate::daemon::diagnostics::doctor::run(&d2).await }).await {
        Ok(v) => http::json(200, &v),
        Err(e) => refuse(Code::Internal, format!("doctor: {e}")),
    }
}

/// `GET /api/events?after=N&wait_ms=M`: the events after `N`, waiting up to `M` ms
/// (at most a minute) for one.
pub(super) async fn events(d: &Daemon, req: &Request<Incoming>) -> Resp {
    let after = http::query(req, "after")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let wait = http::query(req, "wait_ms")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0u64)
        .min(60_000);
    let events = d.events.wait_for(after, Duration::from_millis(wait)).await;
    http::json(200, &wire::Events { events })
}
