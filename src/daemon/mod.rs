//! `relay serve`, the daemon: owns the settings, authorizes every launch, reads the
//! token file, writes sandbox profiles, keeps the session ledger, the audit and event
//! logs, serves the API, and supervises the session host.

pub mod api;
pub mod bridge;
pub mod diagnostics;
pub mod error;
pub mod hostlink;
pub mod launch;
pub mod paths;
pub mod records;
pub mod settings;

use std::collections::HashMap;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use serde::Serialize;

use crate::protocol::{ClaudeInit, ExitReason, HostEvent, PtySize, SessionKind};
use crate::wire;
use error::Outcome;
use records::journal::{Audit, AuditRow, Event, Events};

pub const INSIDE_SESSION: &str = "this command cannot be run from inside a relay session";

/// `bytes` random bytes as lowercase hex, from the kernel's generator (`getrandom` on
/// Linux, `getentropy` elsewhere): no descriptor is opened, so descriptor pressure
/// cannot stop relay from minting secrets. An error is the caller's to answer; the
/// daemon never exits over it once started.
pub fn random_hex(bytes: usize) -> std::io::Result<String> {
    let mut buf = vec![0u8; bytes];
    fill_random(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn fill_random(buf: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // Safety: the kernel writes at most `rest.len()` bytes into `rest`, which is a
        // live, exclusively borrowed slice.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        done += n as usize;
    }
    Ok(())
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn fill_random(buf: &mut [u8]) -> std::io::Result<()> {
    // getentropy takes at most 256 bytes per call.
    for chunk in buf.chunks_mut(256) {
        // Safety: the kernel writes exactly `chunk.len()` (≤ 256) bytes into `chunk`, a
        // live, exclusively borrowed slice.
        if unsafe { libc::getentropy(chunk.as_mut_ptr().cast(), chunk.len()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

pub use crate::wire::EntryState;

/// One session in the ledger: what the API shows of it ([`wire::Session`], which is
/// how it serializes: the field names are defined there once) and what only the daemon
/// keeps.
#[derive(Clone, Debug)]
pub struct Entry {
    pub id: String,
    pub kind: SessionKind,
    pub name: Option<String>,
    pub template_id: String,
    pub project_id: String,
    pub directory: PathBuf,
    pub state: EntryState,
    pub root_pid: Option<u32>,
    /// The target's pid (the sandbox launcher when wrapped); it leads its own group.
    pub target_pid: Option<u32>,
    pub created_ms: u64,
    pub exit_status: Option<i32>,
    pub exit_signal: Option<i32>,
    /// Why it ended (`exited`, `terminated`, `host_died`, `relay_restarted`, …): the
    /// reason its `session.exited` event and `session_end` row carry.
    pub exit_reason: Option<String>,
    pub sandboxed: bool,
    pub profile: Option<PathBuf>,
    pub pty: Option<PtySize>,
    /// Whether this launch carried the token on fd 5 (never the token itself).
    pub token_passed: bool,
    /// Claude launches: the `--model` relay passed (absent: Claude Code's default).
    pub model: Option<String>,
    /// Claude launches: the `--permission-mode` relay passed (absent: Claude Code's own).
    pub permission_mode: Option<String>,
    /// Sessions: what Claude Code said in its last `system`/`init` event (its version,
    /// model, `apiKeySource`, permission mode and session id). Kept across stop and
    /// resume: the session id is what a resume passes to `--resume`.
    pub claude: Option<ClaudeInit>,
    /// The fingerprint of the token it carried (`crate::token::fingerprint`).
    pub token_fingerprint: Option<String>,
    /// It runs on another token than the file holds now (`claude_token_on_change:
    /// keep`).
    pub stale: bool,
    /// When it ended, for `retain_ended`.
    pub ended_ms: Option<u64>,
    /// What this launch's sandbox let it reach, for the guards of later launches and the
    /// token watcher (docs/THREAT-MODEL.md). Empty for unsandboxed launches.
    pub reach: Reach,
    /// Why relay stopped it, when relay did (`claude_token_changed`,
    /// `claude_token_replaced`, `claude_token_removed`): the exit event and the audit
    /// row carry this instead of the host's reason.
    pub stop_reason: Option<&'static str>,
    /// An exit the host reported while the launch path had not yet recorded the launch
    /// (a tool that ends at once): applied right after the launch's audit row, so the
    /// `session_end` row never precedes the `session_launch` row and the entry never
    /// goes back to `running`.
    pub early_exit: Option<(Option<i32>, Option<i32>, ExitReason, u64)>,
    /// Its sandbox in words, from the spec its profile was rendered from
    /// (`GET /api/{sessions,terminals}/{id}/sandbox`); none for an unsandboxed launch.
    pub explained: Option<std::sync::Arc<crate::sandbox::explain::Explanation>>,
}

impl Entry {
    /// What the API shows of this entry (docs/routes.md#entry).
    pub fn view(&self) -> wire::Session {
        wire::Session {
            id: self.id.clone(),
            kind: self.kind,
            name: self.name.clone(),
            template_id: self.template_id.clone(),
            project_id: self.project_id.clone(),
            directory: self.directory.clone(),
            state: self.state,
            root_pid: self.root_pid,
            created_ms: self.created_ms,
            exit_status: self.exit_status,
            exit_signal: self.exit_signal,
            exit_reason: self.exit_reason.clone(),
            sandboxed: self.sandboxed,
            pty: self.pty,
            token_passed: self.token_passed,
            model: self.model.clone(),
            permission_mode: self.permission_mode.clone(),
            claude: self.claude.clone(),
            token_fingerprint: self.token_fingerprint.clone(),
            stale: self.stale,
            ended_ms: self.ended_ms,
        }
    }
}

impl Serialize for Entry {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.view().serialize(s)
    }
}

/// The canonical folders one sandboxed launch could read and write, what it had pinned
/// read-only, and how the token was hidden from it.
#[derive(Clone, Debug, Default)]
pub struct Reach {
    pub grants: Vec<PathBuf>,
    pub read_write: Vec<PathBuf>,
    pub pins: Vec<PathBuf>,
    /// The token path its profile denied (the setting at launch time).
    pub token_path: Option<PathBuf>,
    /// The token's folder when a grant reached it and only a mount hid it (bwrap), with
    /// that folder's `(dev, ino)` at launch: a folder replaced since is no longer under
    /// the mask.
    pub token_folder: Option<(PathBuf, Option<(u64, u64)>)>,
}

/// What the pins' check reads of a purged session (`pins_hold`, `src/daemon/launch/mod.rs`):
/// the folders it could write and the pins it had, sorted.
#[derive(PartialEq, Eq, Hash)]
struct PurgedReach {
    read_write: Vec<PathBuf>,
    pins: Vec<PathBuf>,
}

pub struct Daemon {
    pub paths: paths::Paths,
    pub home: PathBuf,
    pub tmp: PathBuf,
    pub host: Arc<hostlink::HostLink>,
    pub bridge: bridge::Pending,
    pub audit: Audit,
    pub events: Events,
    pub api_token: String,
    ledger: Mutex<HashMap<String, Entry>>,
    /// The ledger on disk (`ledger.rs`): every entry from its start on, read back when
    /// `relay serve` starts again.
    store: records::ledger::Store,
    /// A dormant entry a resume is replacing, put back if the resume fails.
    resuming: Mutex<HashMap<String, Entry>>,
    /// Purged sandboxed sessions, kept for what they could write: what an ended
    /// session wrote stays, so the pins' check (`sandboxed_since_start`) must still see
    /// them until `relay serve` restarts (purging removes the ledger file, so a restart
    /// forgets them). One entry, the first purged, per distinct reach: 1,000 runs of
    /// one template add one (docs/performance.md, "1,000 sequential launches").
    purged: Mutex<HashMap<PurgedReach, Entry>>,
    /// The token watcher's memory (`records::rotation::Watch`).
    token_watch: Mutex<records::rotation::Watch>,
    /// `tmp`, canonical at start: session temp folders are removed only below it, and
    /// only while it still resolves to itself (`records::purge::remove_session_dir`).
    pub tmp_real: PathBuf,
    /// Ids whose automatic purge failed once (not tried again every tick).
    purge_failed: Mutex<std::collections::HashSet<String>>,
    api_addr: OnceLock<Option<std::net::SocketAddr>>,
    /// The last settings problem, for `relay status`.
    pub settings_note: Mutex<Option<String>>,
    pub web: api::web::WebAuth,
    /// The probes of the last `relay doctor` (when, and their checks), for the Settings
    /// page's `GET /api/doctor`, which launches nothing.
    pub doctor_probes: Mutex<Option<(u64, Vec<diagnostics::doctor::Check>)>>,
    /// Why this start runs neither helper (not even for `--version`): a session relay
    /// remembers could have written relay's folder without the pin (`launch::plan::own_pins_hold`).
    pub helpers_withheld: OnceLock<String>,
}

impl Daemon {
    pub fn load_settings(&self) -> Result<settings::Settings, settings::SettingsError> {
        match settings::load(&self.paths.settings()) {
            Ok(l) => {
                let note = (!l.unknown_keys.is_empty())
                    .then(|| format!("unknown keys: {}", l.unknown_keys.join(", ")));
                *self.settings_note.lock().unwrap_or_else(|p| p.into_inner()) = note;
                Ok(l.settings)
            }
            Err(e) => {
                *self.settings_note.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                Err(e)
            }
        }
    }

    pub fn api_port(&self) -> Option<u16> {
        self.api_addr.get().copied().flatten().map(|a| a.port())
    }

    pub fn api_addr(&self) -> Option<std::net::SocketAddr> {
        self.api_addr.get().copied().flatten()
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.ledger.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn entries(&self, kind: SessionKind) -> Vec<Entry> {
        let mut v: Vec<Entry> = self
            .ledger()
            .values()
            .filter(|e| e.kind == kind && e.state != EntryState::Launching)
            .cloned()
            .collect();
        v.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then(a.id.cmp(&b.id)));
        v
    }

    pub fn entry(&self, id: &str) -> Option<Entry> {
        self.ledger().get(id).cloned()
    }

    /// Reserves `entry.id`; a resume may take over its own dormant entry.
    fn begin(&self, entry: Entry, resume: bool) -> bool {
        let mut l = self.ledger();
        match l.get(&entry.id) {
            Some(old) if !(resume && old.state == EntryState::Dormant) => false,
            _ => {
                if let Some(old) = l.insert(entry.id.clone(), entry) {
                    self.resuming
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(old.id.clone(), old);
                }
                true
            }
        }
    }

    /// A launch that failed leaves no entry; a resume that failed leaves the dormant
    /// entry it replaced, in memory and on disk.
    fn abort(&self, id: &str) {
        let prior = self
            .resuming
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        {
            let mut l = self.ledger();
            l.remove(id);
            if let Some(prior) = prior {
                l.insert(id.to_string(), prior);
            }
        }
        self.persist(id);
    }

    /// Writes `id`'s entry to its ledger file, or removes the file when the entry is
    /// gone (docs/architecture.md, "The ledger file"). A launch still being prepared is
    /// not written: the file keeps what it held before (a resume's dormant record).
    /// A write that fails is logged; the session goes on.
    pub(crate) fn persist(&self, id: &str) {
        let _w = self.store.lock.lock().unwrap_or_else(|p| p.into_inner());
        let rec = self.ledger().get(id).map(records::ledger::Record::of);
        let done = match rec {
            Some(r) if r.state == EntryState::Launching => Ok(()),
            Some(r) => self.store.write(&r),
            None => self.store.remove(id),
        };
        if let Err(e) = done {
            crate::listen::log(format_args!(
                "relay: ledger: {}: {e}",
                self.store.dir().join(format!("{id}.json")).display()
            ));
        }
    }

    /// The host answered: the session's pids. It stays `Launching` until its audit row
    /// is written ([`Self::finish_launch`]), so an exit that comes first is held.
    fn started(&self, id: &str, root_pid: u32, target_pid: u32) {
        let mut l = self.ledger();
        let e = l.get_mut(id).expect("entry reserved by begin");
        e.root_pid = Some(root_pid);
        e.target_pid = Some(target_pid);
    }

    /// Records what Claude Code said in a turn's `init` line. The lines come from a
    /// sandboxed process, so every string is capped.
    pub fn set_claude(&self, id: &str, init: ClaudeInit) {
        let cap = |v: Option<String>| v.map(|s| records::journal::cap(&s));
        let init = Some(ClaudeInit {
            session_id: cap(init.session_id),
            version: cap(init.version),
            model: cap(init.model),
            api_key_source: cap(init.api_key_source),
            permission_mode: cap(init.permission_mode),
        });
        let changed = match self.ledger().get_mut(id) {
            Some(e) if e.claude != init => {
                e.claude = init;
                true
            }
            _ => false,
        };
        if changed {
            self.persist(id);
        }
    }

    /// Called by the bridge when a shim's Hello names this session.
    fn bind_root(&self, id: &str, shim_pid: u32) {
        if let Some(e) = self.ledger().get_mut(id) {
            e.root_pid = Some(shim_pid);
        }
    }

    /// The sandboxed sessions running (or starting) now, but `except`.
    pub fn live_sandboxed(&self, except: &str) -> Vec<Entry> {
        self.ledger()
            .values()
            .filter(|e| e.sandboxed && e.id != except)
            .filter(|e| matches!(e.state, EntryState::Running | EntryState::Launching))
            .cloned()
            .collect()
    }

    /// Every sandboxed session relay remembers — running, ended (read back from the
    /// ledger after a restart too) or purged since this daemon started — but `except`.
    pub fn sandboxed_since_start(&self, except: &str) -> Vec<Entry> {
        let mut v: Vec<Entry> = self
            .ledger()
            .values()
            .filter(|e| e.sandboxed && e.id != except)
            .cloned()
            .collect();
        v.extend(
            self.purged
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .filter(|e| e.id != except)
                .cloned(),
        );
        v
    }

    /// Remembers a purged sandboxed session for the pins' check until the next start,
    /// once per distinct reach (the first such session names it in a refusal). Its own
    /// temp folder (`<tmp>/relay-<id>`, its Claude config folder inside) is left out:
    /// the purge has just removed it, so nothing the session wrote there stays — and
    /// it is the one folder that differs between runs of one template. One that could
    /// write nothing else can never fail the check and is not kept.
    pub(crate) fn remember_purged(&self, e: &Entry) {
        if !e.sandboxed {
            return;
        }
        let own_tmp = self.tmp_real.join(format!("relay-{}", e.id));
        let mut read_write: Vec<PathBuf> = e
            .reach
            .read_write
            .iter()
            .filter(|p| !p.starts_with(&own_tmp))
            .cloned()
            .collect();
        if read_write.is_empty() {
            return;
        }
        read_write.sort();
        read_write.dedup();
        let mut pins = e.reach.pins.clone();
        pins.sort();
        pins.dedup();
        let key = PurgedReach {
            read_write: read_write.clone(),
            pins,
        };
        self.purged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key)
            .or_insert_with(|| {
                let mut kept = Entry {
                    explained: None,
                    ..e.clone()
                };
                kept.reach.read_write = read_write;
                kept
            });
    }

    /// Marks a running session as stopped by relay for `reason` and asks the host to
    /// end it; its exit event and audit row carry `reason`. The first reason given
    /// stays (the token watcher gives exposure's first).
    pub async fn stop_for(&self, id: &str, reason: &'static str) {
        {
            let mut l = self.ledger();
            match l.get_mut(id) {
                Some(e) if e.state == EntryState::Running && e.stop_reason.is_none() => {
                    e.stop_reason = Some(reason)
                }
                _ => return,
            }
        }
        self.terminate(id).await;
    }

    /// Asks the host to end a session (SIGTERM, then SIGKILL after the grace); a host
    /// that cannot be asked is logged: its death ends the sessions anyway.
    pub async fn terminate(&self, id: &str) {
        let req = crate::protocol::TerminateRequest {
            session_id: id.to_string(),
        };
        let body = serde_json::to_vec(&req).unwrap_or_default();
        match self.host.call("POST", "/terminate", Some(body)).await {
            Ok((200 | 404, _)) => {}
            Ok((status, _)) => tracing::warn!(session = id, status, "terminate: the host refused"),
            Err(e) => tracing::warn!(session = id, error = %e, "terminate: host unreachable"),
        }
    }

    /// One look at the token (the token watcher calls this every second). First
    /// exposure: stops, with reason `claude_token_changed`, every running sandboxed
    /// session that could now see a token it was not protected from — a session started
    /// before the setting named this path (and whose grants reach the token's folder),
    /// or one whose grants reach the token's folder when that folder was replaced since
    /// it started (a replaced folder is no longer under the session's mask). Then
    /// rotation: every running session that got the token and runs on another one than
    /// the file holds now is handled as `claude_token_on_change` says (`stop`: reason
    /// `claude_token_replaced`, or `claude_token_removed`; `keep`: marked `stale`).
    /// Exposure wins: a session it stops keeps `claude_token_changed`. Returns the ids
    /// it stopped.
    pub async fn check_token(&self) -> Vec<String> {
        let Ok(settings) = settings::load(&self.paths.settings()) else {
            return vec![];
        };
        let settings = settings.settings;
        let Ok(token) = settings::token_file_path(&settings.claude_token_file, &self.home) else {
            return vec![];
        };
        let mut stop: Vec<(String, &'static str)> = Vec::new();
        if let Some(token) = &token {
            // The deepest part of the token's path that exists now: what a grant must
            // reach for the session to see the token or make its folder.
            let mut near = token.clone();
            while !near.exists() && near.pop() {}
            let near = std::fs::canonicalize(&near).unwrap_or(near);
            for e in self.live_sandboxed("") {
                let unprotected = e.reach.token_path.as_ref() != Some(token)
                    && e.reach.grants.iter().any(|g| near.starts_with(g));
                let unmasked = e
                    .reach
                    .token_folder
                    .as_ref()
                    .is_some_and(|(folder, id)| launch::guard::identity(folder) != *id);
                if (unprotected || unmasked) && e.state == EntryState::Running {
                    stop.push((e.id.clone(), "claude_token_changed"));
                }
            }
        }
        // Rotation: the file is read only when its key changed.
        let now = self
            .token_watch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .observe(token.as_deref());
        {
            let mut l = self.ledger();
            for e in l.values_mut() {
                if e.state != EntryState::Running
                    || !e.token_passed
                    || e.stop_reason.is_some()
                    || stop.iter().any(|(id, _)| *id == e.id)
                {
                    continue;
                }
                match records::rotation::decide(
                    e.token_fingerprint.as_deref(),
                    &now,
                    settings.claude_token_on_change,
                ) {
                    records::rotation::Action::Stop(reason) => stop.push((e.id.clone(), reason)),
                    records::rotation::Action::Stale(stale) => e.stale = stale,
                    records::rotation::Action::Nothing => {}
                }
            }
        }
        for (id, reason) in &stop {
            self.stop_for(id, reason).await;
        }
        stop.into_iter().map(|(id, _)| id).collect()
    }

    fn live_roots(&self) -> Vec<u32> {
        self.ledger()
            .values()
            .filter(|e| matches!(e.state, EntryState::Running | EntryState::Launching))
            .filter_map(|e| e.root_pid)
            .collect()
    }

    /// Whether `pid` is a live session root or one of its descendants.
    pub fn descends_from_session(&self, pid: u32) -> bool {
        descends(pid, &self.live_roots(), crate::peer::parent_of)
    }

    fn on_host_event(&self, ev: HostEvent) {
        let (session_id, exit_status, signal, reason, redactions) = match ev {
            HostEvent::Ready { pid, .. } => {
                self.events.emit(&Event {
                    name: "host.started",
                    status: Some("ok"),
                    pid: Some(pid),
                    ..Default::default()
                });
                return;
            }
            HostEvent::SessionExited {
                session_id,
                exit_status,
                signal,
                reason,
                redactions,
                ..
            } => (session_id, exit_status, signal, reason, redactions),
        };
        let entry = {
            let mut l = self.ledger();
            let Some(e) = l.get_mut(&session_id) else {
                return;
            };
            if e.state == EntryState::Launching {
                e.early_exit = Some((exit_status, signal, reason, redactions));
                return;
            }
            e.state = if e.kind == SessionKind::Claude {
                EntryState::Dormant
            } else {
                EntryState::Exited
            };
            e.exit_status = exit_status;
            e.exit_signal = signal;
            e.ended_ms = Some(records::journal::now_ms());
            e.exit_reason = Some(e.stop_reason.unwrap_or(reason_name(reason)).into());
            e.clone()
        };
        self.persist(&session_id);
        let reason = entry.stop_reason.unwrap_or(reason_name(reason));
        self.teardown(&entry, reason, exit_status, signal, Some(redactions));
    }

    /// The launch is recorded: the session is `Running` (written to the ledger), then
    /// an exit that arrived meanwhile is applied ([`Entry::early_exit`]). Returns the
    /// entry as launched, for the launch's answer.
    fn finish_launch(&self, id: &str) -> Entry {
        let (entry, pending) = {
            let mut l = self.ledger();
            let e = l.get_mut(id).expect("entry reserved by begin");
            if e.state == EntryState::Launching {
                e.state = EntryState::Running;
            }
            (e.clone(), e.early_exit.take())
        };
        self.resuming
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        self.persist(id);
        if let Some((exit_status, signal, reason, redactions)) = pending {
            self.on_host_event(HostEvent::SessionExited {
                session_id: id.to_string(),
                root_pid: 0,
                exit_status,
                signal,
                reason,
                redactions,
            });
        }
        entry
    }

    fn teardown(
        &self,
        e: &Entry,
        reason: &str,
        exit_status: Option<i32>,
        signal: Option<i32>,
        redactions: Option<u64>,
    ) {
        if let Some(p) = &e.profile {
            let _ = std::fs::remove_file(p);
        }
        let row = self.audit.record(&AuditRow {
            action: "session_end",
            session_id: Some(e.id.clone()),
            kind: Some(launch::kind_name(e.kind).into()),
            project: Some(e.project_id.clone()),
            template: Some(e.template_id.clone()),
            outcome: Outcome::Allowed,
            error: Some(reason.into()),
            exit_status,
            signal,
            token_fingerprint: e.token_fingerprint.clone(),
            redactions,
            ..Default::default()
        });
        if let Err(err) = row {
            // The session has ended either way; the event below still records it.
            crate::listen::log(format_args!("relay: audit: session_end of {}: {err}", e.id));
        }
        self.events.emit(&Event {
            name: "session.exited",
            status: Some("ok"),
            reason: Some(reason.into()),
            session_id: Some(e.id.clone()),
            kind: Some(launch::kind_name(e.kind).into()),
            exit_status,
            signal,
            ..Default::default()
        });
    }

    /// The host died: its sessions went with it (their ptys and pipes were the host's).
    fn on_host_death(&self) {
        let gone: Vec<Entry> = {
            let mut l = self.ledger();
            l.values_mut()
                .filter(|e| e.state == EntryState::Running)
                .map(|e| {
                    e.state = if e.kind == SessionKind::Claude {
                        EntryState::Dormant
                    } else {
                        EntryState::Exited
                    };
                    e.ended_ms = Some(records::journal::now_ms());
                    e.exit_reason = Some(e.stop_reason.unwrap_or("host_died").into());
                    e.clone()
                })
                .collect()
        };
        for e in gone {
            self.persist(&e.id);
            // The shim leads its session's group, the target its own: both go.
            for pid in [e.root_pid, e.target_pid]
                .into_iter()
                .flatten()
                .filter(|p| *p > 1)
            {
                // Safety: kill(2) on a process group of this session; no memory.
                unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
            }
            let reason = e.stop_reason.unwrap_or("host_died");
            self.teardown(&e, reason, None, None, None);
        }
    }
}

fn reason_name(r: ExitReason) -> &'static str {
    match r {
        ExitReason::Exited => "exited",
        ExitReason::Signaled => "signaled",
        ExitReason::Terminated => "terminated",
        ExitReason::ShimFailed => "shim_failed",
    }
}

/// Whether `pid` is one of `roots` or descends from one, walking up through
/// `parent_of` (the seam: `crate::peer::parent_of` asks the kernel, tests pass a table).
/// The walk stops at init (1), at a process that is gone, at a loop, and after 4096
/// steps; none of those is a descendant.
fn descends(pid: u32, roots: &[u32], parent_of: impl Fn(u32) -> Option<u32>) -> bool {
    if roots.is_empty() {
        return false;
    }
    let mut cur = pid;
    for _ in 0..4096 {
        if roots.contains(&cur) {
            return true;
        }
        match parent_of(cur) {
            Some(p) if p > 1 && p != cur => cur = p,
            _ => return false,
        }
    }
    false
}

fn ensure_dir(path: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
}

/// The API bearer: created 0600 at open time on first run, read afterwards.
fn api_token(path: &Path) -> std::io::Result<String> {
    use std::io::Write;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(mut f) => {
            let t = random_hex(32)?;
            f.write_all(t.as_bytes())?;
            Ok(t)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Ok(std::fs::read_to_string(path)?.trim().to_string())
        }
        Err(e) => Err(e),
    }
}

/// Makes sure `path` is an empty regular file of mode 0000 owned by us (the bwrap
/// file mask); anything else there is replaced.
pub fn ensure_mask(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    if let Ok(m) = std::fs::symlink_metadata(path) {
        let ok = m.file_type().is_file()
            && m.len() == 0
            && m.mode() & 0o7777 == 0
            && m.uid() == nix::unistd::geteuid().as_raw();
        if ok {
            return Ok(());
        }
        std::fs::remove_file(path)?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o000)
        .open(path)?;
    Ok(())
}

fn write_atomic_0600(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    drop(f);
    std::fs::rename(&tmp, path)
}

/// The daemon's log: `<config>/relay.log`, capped, and stderr (src/logging.rs). A bad
/// `RUST_LOG` falls back to `info`, saying so; `--log-level` was checked by the CLI.
fn start_logging(config: &Path, flag: Option<&str>) {
    let path = paths::Paths {
        config: config.to_path_buf(),
    }
    .log();
    let mut text = crate::logging::choose_level(flag);
    let bad = crate::logging::parse_level(&text).err();
    if bad.is_some() {
        text = crate::logging::DEFAULT_LEVEL.into();
    }
    if let Err(e) = crate::logging::init("relay", &path, &text) {
        tracing::warn!("{e}; logging to stderr only");
    }
    if let Some(e) = bad {
        tracing::warn!(
            "RUST_LOG: {e}; logging at {}",
            crate::logging::DEFAULT_LEVEL
        );
    }
    tracing::info!(
        target: crate::logging::FILE_ONLY,
        "relay {} starting, config {}, log level {text}",
        env!("CARGO_PKG_VERSION"),
        config.display()
    );
}

/// What to do about a missing helper or one of another version.
const HELPERS_FIX: &str = "relay runs relay-sessions and relay-shim from its own folder; install the three together (`cargo install --locked --path .`, README)";

fn sibling(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(name)))
        .unwrap_or_else(|| PathBuf::from(name))
}

/// The config dir's fixed parts: the profiles folder (emptied: profiles of an earlier
/// run are stale), the mask file, and on first run the seeded settings.
fn prepare_config(paths: &paths::Paths) -> Result<(), String> {
    ensure_dir(&paths.profiles()).map_err(|e| format!("{}: {e}", paths.profiles().display()))?;
    ensure_mask(&paths.mask()).map_err(|e| format!("{}: {e}", paths.mask().display()))?;
    // Profiles of an earlier run are stale.
    if let Ok(rd) = std::fs::read_dir(paths.profiles()) {
        for e in rd.flatten() {
            if let Err(err) = std::fs::remove_file(e.path()) {
                tracing::warn!("stale profile {}: {err}", e.path().display());
            }
        }
    }
    // First run: seed settings so everything works out of the box.
    if !paths.settings().exists() {
        write_atomic_0600(
            &paths.settings(),
            settings::to_pretty(&settings::seed()).as_bytes(),
        )
        .map_err(|e| format!("seed {}: {e}", paths.settings().display()))?;
    }
    Ok(())
}

/// The daemon's state, the host link (not started yet), the audit and event logs open.
fn build_daemon(
    paths: paths::Paths,
    home: PathBuf,
    tmp: PathBuf,
    tmp_real: PathBuf,
) -> Result<(Arc<Daemon>, Arc<hostlink::HostLink>), String> {
    let token = api_token(&paths.api_token())
        .map_err(|e| format!("{}: {e}", paths.api_token().display()))?;
    let host_secret = random_hex(32).map_err(|e| format!("random bytes: {e}"))?;
    // The helpers come from relay's own folder (docs/architecture.md#binaries): without
    // the host nothing can run, so say which file and how to get it, once.
    // Each is opened once (run nothing yet: `serve` checks the remembered sessions
    // first) and run through that descriptor from then on (src/helpers.rs).
    let helper = |name: &'static str| -> Result<crate::helpers::Helper, String> {
        let path = sibling(name);
        if !path.is_file() {
            return Err(format!("{} is missing: {HELPERS_FIX}", path.display()));
        }
        crate::helpers::Helper::open(name, &path)
    };
    let host = Arc::new(hostlink::HostLink::new(
        paths.host_state(),
        helper("relay-sessions")?,
        helper("relay-shim")?,
        paths.bridge(),
        host_secret,
    ));
    let audit = Audit::new(paths.audit());
    audit
        .open()
        .map_err(|e| format!("{}: {e}", paths.audit().display()))?;
    let events = Events::new(paths.events());
    events
        .open()
        .map_err(|e| format!("{}: {e}", paths.events().display()))?;
    let store = records::ledger::Store::new(&paths.config);
    let daemon = Arc::new(Daemon {
        audit,
        events,
        paths,
        home,
        tmp,
        host: host.clone(),
        bridge: bridge::Pending::default(),
        api_token: token,
        ledger: Mutex::new(HashMap::new()),
        store,
        resuming: Mutex::new(HashMap::new()),
        purged: Mutex::new(HashMap::new()),
        token_watch: Mutex::new(records::rotation::Watch::default()),
        tmp_real,
        purge_failed: Mutex::new(Default::default()),
        api_addr: OnceLock::new(),
        settings_note: Mutex::new(None),
        web: api::web::WebAuth::default(),
        doctor_probes: Mutex::new(None),
        helpers_withheld: OnceLock::new(),
    });
    Ok((daemon, host))
}

/// The token watcher: a token that appears, is replaced or removed while sessions run;
/// and on the same tick, ended sessions past `retain_ended`.
fn spawn_watcher(watcher: Arc<Daemon>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        let mut n: u64 = 0;
        loop {
            tick.tick().await;
            watcher.check_token().await;
            records::purge::sweep(&watcher, n.is_multiple_of(60)).await;
            n += 1;
        }
    });
}

/// Waits for SIGTERM or SIGINT.
async fn until_stopped() -> Result<(), String> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| e.to_string())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}

/// Runs the daemon until SIGTERM/SIGINT.
/// `log_level` is `relay serve --log-level` (src/logging.rs).
pub async fn serve(config_dir: PathBuf, log_level: Option<String>) -> Result<(), String> {
    // It reads the token at every launch: no core dump, no same-uid reader of its memory.
    crate::harden::harden_process().map_err(|e| format!("harden the daemon: {e}"))?;
    let home =
        paths::home_dir().ok_or("no home directory: HOME is not set and the account has none")?;
    let tmp = std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| "/tmp".into());
    let tmp_real = std::fs::canonicalize(&tmp).unwrap_or_else(|_| tmp.clone());
    let paths = paths::Paths { config: config_dir };
    ensure_dir(&paths.config).map_err(|e| format!("config dir {}: {e}", paths.config.display()))?;
    start_logging(&paths.config, log_level.as_deref());
    // Room for what a flood of connections cannot take (src/listen.rs).
    let nofile = crate::listen::raise_nofile().unwrap_or_else(|e| {
        tracing::warn!("raise the descriptor limit: {e}");
        crate::listen::nofile()
    });
    let cap = crate::listen::connection_cap(nofile);
    prepare_config(&paths)?;
    let (daemon, host) = build_daemon(paths, home, tmp, tmp_real)?;
    let initial = daemon.load_settings();
    if let Err(e) = &initial {
        tracing::warn!("{e} (launches are refused until it is fixed)");
    }
    if let Some(note) = daemon
        .settings_note
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
    {
        tracing::warn!("settings: {note}");
    }
    // The sessions of earlier runs, before the host or any API can start one.
    records::ledger::restore(&daemon)?;
    // Neither helper runs, not even for `--version`, while a remembered session could
    // have put its own program in relay's folder; launches say why, a purge still works.
    let run_helpers = match launch::plan::own_pins_hold(&daemon) {
        Ok(()) => {
            for h in [&host.host_helper, &host.shim_helper] {
                h.check_version()
                    .map_err(|e| format!("{e}: {HELPERS_FIX}"))?;
            }
            true
        }
        Err(why) => {
            tracing::error!("{why}; relay runs neither helper until then");
            let _ = daemon.helpers_withheld.set(why);
            host.withhold();
            false
        }
    };
    let listen = initial
        .as_ref()
        .map(|s| s.api.listen.clone())
        .unwrap_or_default();

    bridge::serve(daemon.clone(), &daemon.paths.bridge(), cap)
        .await
        .map_err(|e| format!("bridge socket: {e}"))?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let d1 = daemon.clone();
    let d2 = daemon.clone();
    let supervisor = run_helpers.then(|| {
        tokio::spawn(host.clone().supervise(
            move |ev| d1.on_host_event(ev),
            move || d2.on_host_death(),
            stop_rx,
        ))
    });
    if run_helpers {
        host.wait_live(std::time::Duration::from_secs(10))
            .await
            .ok_or("the session host did not start")?;
    }

    let unix = api::bind_unix(&daemon.paths.socket())
        .map_err(|e| format!("{}: {e}", daemon.paths.socket().display()))?;
    let tcp = if listen.is_empty() {
        None
    } else {
        Some(
            tokio::net::TcpListener::bind(&listen)
                .await
                .map_err(|e| format!("api.listen {listen}: {e}"))?,
        )
    };
    let addr = tcp.as_ref().and_then(|l| l.local_addr().ok());
    let _ = daemon.api_addr.set(addr);
    spawn_watcher(daemon.clone());
    tokio::spawn(api::serve_unix(daemon.clone(), unix, cap));
    if let Some(l) = tcp {
        tokio::spawn(api::serve_tcp(daemon.clone(), l, cap));
    }
    let ready = wire::Ready {
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").into(),
        config_dir: daemon.paths.config.clone(),
        socket: daemon.paths.socket(),
        api: addr.map(|a| a.to_string()),
    };
    let ready = serde_json::to_string(&ready).map_err(|e| format!("ready.json: {e}"))?;
    write_atomic_0600(&daemon.paths.ready(), format!("{ready}\n").as_bytes())
        .map_err(|e| format!("ready.json: {e}"))?;
    println!("{}", daemon.paths.ready().display());

    until_stopped().await?;
    // End every session: the host terminates them all when its stdin closes.
    records::ledger::stopping_all(&daemon);
    let _ = stop_tx.send(true);
    host.shutdown();
    if let Some(supervisor) = supervisor {
        if tokio::time::timeout(std::time::Duration::from_secs(10), supervisor)
            .await
            .is_err()
        {
            tracing::warn!("the session host did not end within 10 s of the stop");
        }
    }
    let _ = std::fs::remove_file(daemon.paths.ready());
    let _ = std::fs::remove_file(daemon.paths.socket());
    let _ = std::fs::remove_file(daemon.paths.bridge());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::descends;
    use std::collections::HashMap;

    /// A process tree as a child → parent table.
    fn tree(pairs: &[(u32, u32)]) -> impl Fn(u32) -> Option<u32> {
        let parents: HashMap<u32, u32> = pairs.iter().copied().collect();
        move |pid| parents.get(&pid).copied()
    }

    #[test]
    fn a_descendant_of_a_live_root_is_inside_and_others_are_not() {
        // init(1) ─ login(10) ─ shim(100) ─ sandbox-exec(101) ─ claude(102) ─ sh(103)
        //                    └─ terminal(20) ─ relay CLI(21)
        let parent_of = tree(&[
            (10, 1),
            (100, 10),
            (101, 100),
            (102, 101),
            (103, 102),
            (20, 10),
            (21, 20),
        ]);
        assert!(
            descends(103, &[100], &parent_of),
            "a grandchild of the root"
        );
        assert!(descends(100, &[100], &parent_of), "the root itself");
        assert!(!descends(21, &[100], &parent_of), "a sibling branch");
        assert!(!descends(10, &[100], &parent_of), "an ancestor of the root");
        assert!(descends(21, &[7, 20], &parent_of), "any of several roots");
        assert!(!descends(103, &[], &parent_of), "no live session");
    }

    #[test]
    fn the_walk_ends_at_init_a_gone_process_or_a_loop() {
        // A root of 1 is never reached: the walk stops below init.
        assert!(!descends(5, &[1], tree(&[(5, 1)])));
        // A parent that is gone (no answer) ends the walk.
        assert!(!descends(5, &[9], tree(&[(5, 6)])));
        // A process that is its own parent, or a longer loop, ends it too.
        assert!(!descends(5, &[9], tree(&[(5, 5)])));
        assert!(!descends(5, &[9], tree(&[(5, 6), (6, 7), (7, 5)])));
        // A chain longer than the bound is not followed to its end.
        let long: Vec<(u32, u32)> = (2..6000).map(|p| (p + 1, p)).collect();
        assert!(descends(4000, &[2], tree(&long)));
        assert!(!descends(5999, &[2], tree(&long)));
    }

    #[test]
    fn the_kernel_seam_sees_this_test_inside_its_own_parent() {
        // The real lookup: this process descends from its parent, not from a stranger.
        let me = std::process::id();
        let parent = nix::unistd::getppid().as_raw() as u32;
        if parent > 1 {
            assert!(descends(me, &[parent], crate::peer::parent_of));
        }
        assert!(!descends(me, &[u32::MAX], crate::peer::parent_of));
    }
}
