//! `relay serve`, the daemon: owns the settings, authorizes every launch, reads the
//! token file, writes sandbox profiles, keeps the session ledger, the audit and event
//! logs, serves the API, and supervises the session host.

pub mod api;
pub mod bridge;
pub mod diagnostics;
pub mod egress;
pub mod error;
pub mod hostlink;
pub mod ids;
pub mod launch;
pub mod paths;
pub mod plan;
pub mod records;
pub mod serve;
pub mod session;
pub mod settings;
pub mod turns;

pub use ids::random_hex;
pub use serve::{ensure_mask, serve};
use session::{descends, reason_name, PurgedReach};
pub use session::{Entry, EntryState, Reach, Record};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use crate::protocol::{ClaudeInit, HostEvent, SessionKind};
use crate::wire::Outcome;
use records::journal::{Audit, AuditRow, Event, Events};

pub const INSIDE_SESSION: &str = "this command cannot be run from inside a relay session";

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
    /// page's `GET /api/doctor`, which launches nothing; read at start from
    /// `<config>/doctor-probes.json` (`diagnostics::last_probes`).
    pub doctor_probes: Mutex<Option<(u64, Vec<diagnostics::doctor::Check>)>>,
    /// Each proxied session's egress proxy, while it runs.
    pub egress: egress::Registry,
    /// Each running sandboxed session's live watch of its repositories
    /// (`records::repos::watch`).
    pub(in crate::daemon) repo_watches: Mutex<HashMap<String, records::repos::watch::Handle>>,
    /// What each proxied session may have written of its connections, one by one.
    pub egress_budget: records::budget::Budget,
    /// Why this start runs neither helper (not even for `--version`): a session relay
    /// remembers could have written relay's folder without the pin (`plan::sandbox::own_pins_hold`).
    pub helpers_withheld: OnceLock<String>,
    /// The folders relay made for bwrap to hold, removed once no launch uses them.
    pub made_folders: records::made_folders::MadeFolders,
    /// The login service that started this relay (`relay.service`, `relay.serve`);
    /// `None` when it was started by hand (`GET /api/status`).
    pub service: Option<String>,
    /// Woken at every session end once it is written and told (`teardown`): an attach
    /// holds a terminal's exit frame until then ([`Self::until_ended`]).
    pub ended: tokio::sync::Notify,
    /// The cgroup folder for this relay's sessions, made by `relay serve` at its start
    /// (`crate::limits::prepare`); unset elsewhere (tests).
    pub cgroups: OnceLock<crate::limits::Prepared>,
    /// The turn each `claude` session runs now, if any (`turns.rs`).
    pub turns: turns::Turns,
}

/// How a session ended, as its `session_end` row and `session.exited` event say.
#[derive(Default)]
pub(crate) struct Ended {
    exit_status: Option<i32>,
    signal: Option<i32>,
    redactions: Option<u64>,
    reached: Option<crate::protocol::Reached>,
}

impl Daemon {
    /// What bounds this relay's sessions (`crate::limits`).
    pub fn limits(&self) -> crate::limits::Prepared {
        self.cgroups.get().cloned().unwrap_or_else(|| {
            crate::limits::Prepared::None("relay made no cgroup at its start".into())
        })
    }

    pub fn load_settings(&self) -> Result<settings::Settings, settings::SettingsError> {
        self.load_settings_noting().map(|(s, _)| s)
    }

    /// The settings and their unknown keys (a launch refused names them: a typo'd key
    /// is often why), noting the problem for `relay status`.
    pub fn load_settings_noting(
        &self,
    ) -> Result<(settings::Settings, Vec<settings::UnknownKey>), settings::SettingsError> {
        let loaded = settings::load(&self.paths.settings());
        let note = match &loaded {
            Ok(l) if l.unknown_keys.is_empty() => None,
            Ok(l) => Some(settings::describe_unknown(&l.unknown_keys)),
            Err(e) => Some(e.to_string()),
        };
        *self.settings_note.lock().unwrap_or_else(|p| p.into_inner()) = note;
        loaded.map(|l| (l.settings, l.unknown_keys))
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
            .filter(|e| {
                e.record.kind == kind && e.record.state != EntryState::Launching && !e.probe
            })
            .cloned()
            .collect();
        v.sort_by(|a, b| {
            a.record
                .created_ms
                .cmp(&b.record.created_ms)
                .then(a.record.id.cmp(&b.record.id))
        });
        v
    }

    pub fn entry(&self, id: &str) -> Option<Entry> {
        self.ledger().get(id).cloned()
    }

    /// Reserves `entry.id`; a resume may take over its own dormant entry.
    fn begin(&self, entry: Entry, resume: bool) -> bool {
        let mut l = self.ledger();
        match l.get(&entry.record.id) {
            Some(old) if !(resume && old.record.state.resumable(old.record.kind)) => false,
            _ => {
                if let Some(old) = l.insert(entry.record.id.clone(), entry) {
                    self.resuming
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(old.record.id.clone(), old);
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
    /// A write that fails is logged; the session goes on. Whether the file now says
    /// what the entry does (false while launching, or when the write failed).
    pub(crate) fn persist(&self, id: &str) -> bool {
        matches!(self.persist_or_say(id), Ok(true))
    }

    /// [`Self::persist`], the failed write in words (`<file>: <error>`): `Ok(false)`
    /// while launching.
    fn persist_or_say(&self, id: &str) -> Result<bool, String> {
        let _w = self.store.lock.lock().unwrap_or_else(|p| p.into_inner());
        let rec = self.ledger().get(id).map(|e| e.record.clone());
        let done = match rec {
            Some(r) if r.state == EntryState::Launching => return Ok(false),
            Some(r) => self.store.write(&r),
            None => self.store.remove(id),
        };
        done.map(|()| true).map_err(|e| {
            let said = format!(
                "{}: {e}",
                self.store.dir().join(format!("{id}.json")).display()
            );
            crate::listen::log(format_args!("relay: ledger: {said}"));
            said
        })
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
    /// sandboxed process, so every string is capped. Every turn's `init` writes the
    /// ledger file again, so a write that failed lands with the next turn once there is
    /// room. A write that fails is the turn's warning, in words (docs/cli.md#exit-codes).
    pub fn set_claude(&self, id: &str, init: ClaudeInit) -> Option<String> {
        let cap = |v: Option<String>| v.map(|s| records::journal::cap(&s));
        let init = Some(ClaudeInit {
            session_id: cap(init.session_id),
            version: cap(init.version),
            model: cap(init.model),
            api_key_source: cap(init.api_key_source),
            permission_mode: cap(init.permission_mode),
        });
        let sid = match self.ledger().get_mut(id) {
            Some(e) => {
                e.record.claude = init;
                e.record.claude.as_ref().and_then(|c| c.session_id.clone())
            }
            None => return None,
        };
        let failed = self.persist_or_say(id).err()?;
        Some(format!(
            "relay could not save this turn's Claude session id ({}) in its ledger: {failed}; \
             the reply above is whole, and the next turn saves it again once there is room \
             (a resume before that looks for the conversation's transcript)",
            sid.as_deref().unwrap_or("none")
        ))
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
            .filter(|e| e.record.sandboxed && e.record.id != except)
            .filter(|e| matches!(e.record.state, EntryState::Running | EntryState::Launching))
            .cloned()
            .collect()
    }

    /// Every sandboxed session relay remembers — running, ended (read back from the
    /// ledger after a restart too) or purged since this daemon started — but `except`.
    pub fn sandboxed_since_start(&self, except: &str) -> Vec<Entry> {
        let mut v: Vec<Entry> = self
            .ledger()
            .values()
            .filter(|e| e.record.sandboxed && e.record.id != except)
            .cloned()
            .collect();
        v.extend(
            self.purged
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .filter(|e| e.record.id != except)
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
        if !e.record.sandboxed {
            return;
        }
        let own_tmp = self.tmp_real.join(format!("relay-{}", e.record.id));
        let mut read_write: Vec<PathBuf> = e
            .record
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
        let mut pins = e.record.reach.pins.clone();
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
                kept.record.reach.read_write = read_write;
                kept
            });
    }

    /// Marks a running session as stopped by relay for `reason` and asks the host to
    /// end it; its exit event and audit row carry `reason`. The first reason given
    /// stays (the token watcher gives exposure's first).
    pub async fn stop_for(&self, id: &str, reason: &'static str) {
        self.stop_with(id, reason, None).await;
    }

    /// [`Self::stop_for`] for a token change, naming the projects whose token file it
    /// was in the exit event and the audit row.
    pub async fn stop_for_token(&self, id: &str, reason: &'static str, projects: Vec<String>) {
        self.stop_with(id, reason, Some(projects)).await;
    }

    async fn stop_with(&self, id: &str, reason: &'static str, projects: Option<Vec<String>>) {
        {
            let mut l = self.ledger();
            match l.get_mut(id) {
                Some(e) if e.record.state == EntryState::Running && e.stop_reason.is_none() => {
                    e.stop_reason = Some(reason);
                    e.stop_token_projects = projects;
                }
                _ => return,
            }
        }
        self.terminate(id).await;
    }

    /// A session's forwarder died while its sandbox ran (`egress::Lost`): the session
    /// stops at once, its end saying why ([`egress::FORWARDER_DIED`]), unless relay is
    /// stopping it for another reason already. The port the forwarder held is free
    /// until then: no shielded tool may listen on it, and the stop makes the wait short
    /// (docs/session-host.md#the-egress-proxy). Only `session`'s own proxy counts: once
    /// stopped (the session ended), or replaced by a resume's, its report is stale. A
    /// launch still being recorded gets the reason now and stops as its record is done
    /// ([`Self::stop_marked`]).
    pub async fn forwarder_died(&self, session: &Arc<egress::Session>) {
        let id = session.id.as_str();
        let running = {
            let mut l = self.ledger();
            let Some(e) = l.get_mut(id) else { return };
            if !self.egress.serves(id, session)
                || !matches!(e.record.state, EntryState::Running | EntryState::Launching)
                || e.stop_reason.is_some()
            {
                return;
            }
            e.stop_reason = Some(egress::FORWARDER_DIED);
            e.record.state == EntryState::Running
        };
        crate::listen::log(format_args!(
            "relay: session {id}: its egress forwarder died; stopping it"
        ));
        if running {
            self.terminate(id).await;
        }
    }

    /// A launch just recorded whose forwarder died while it was being recorded
    /// ([`Self::forwarder_died`]) stops now.
    pub(crate) async fn stop_marked(&self, id: &str) {
        let marked = self.entry(id).is_some_and(|e| {
            e.record.state == EntryState::Running && e.stop_reason == Some(egress::FORWARDER_DIED)
        });
        if marked {
            self.terminate(id).await;
        }
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

    fn live_roots(&self) -> Vec<u32> {
        self.ledger()
            .values()
            .filter(|e| matches!(e.record.state, EntryState::Running | EntryState::Launching))
            .filter_map(|e| e.root_pid)
            .collect()
    }

    /// Whether `pid` is a live session root or one of its descendants.
    pub fn descends_from_session(&self, pid: u32) -> bool {
        descends(pid, &self.live_roots(), crate::peer::parent_of)
    }

    fn on_host_event(&self, ev: HostEvent) {
        let (session_id, exit_status, signal, reason, redactions, reached) = match ev {
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
                reached,
                ..
            } => (session_id, exit_status, signal, reason, redactions, reached),
        };
        // Its proxy goes before it reads as ended: a resume that finds it dormant never
        // finds its proxy still there (a second proxy for a running id is refused).
        self.egress.stop(&session_id);
        egress::flush_end(self, &session_id);
        // What it planted in repositories is set aside before its end is written or
        // said: a relay that dies meanwhile still finds it running at its next start.
        if let Some(e) = self.entry(&session_id) {
            if e.record.state == EntryState::Running {
                records::repos::at_end(self, &e);
            }
        }
        let entry = {
            let mut l = self.ledger();
            let Some(e) = l.get_mut(&session_id) else {
                return;
            };
            if e.record.state == EntryState::Launching {
                e.early_exit = Some((exit_status, signal, reason, redactions, reached));
                return;
            }
            e.record.state = if e.record.kind == SessionKind::Claude {
                EntryState::Dormant
            } else {
                EntryState::Exited
            };
            e.record.exit_status = exit_status;
            e.record.exit_signal = signal;
            e.record.ended_ms = Some(records::journal::now_ms());
            // A limit reached says why the session ended, unless relay stopped it.
            let host_reason = reached
                .as_ref()
                .and_then(crate::limits::reached_reason)
                .unwrap_or(reason_name(reason));
            e.record.exit_reason = Some(e.stop_reason.unwrap_or(host_reason).into());
            e.clone()
        };
        self.persist(&session_id);
        let reason = entry.record.exit_reason.clone().unwrap_or_default();
        let ended = Ended {
            exit_status,
            signal,
            redactions: Some(redactions),
            reached,
        };
        self.teardown(&entry, &reason, ended);
    }

    /// The launch is recorded: the session is `Running` (written to the ledger), then
    /// an exit that arrived meanwhile is applied ([`Entry::early_exit`]). Returns the
    /// entry as launched, for the launch's answer.
    fn finish_launch(&self, id: &str) -> Entry {
        let (entry, pending) = {
            let mut l = self.ledger();
            let e = l.get_mut(id).expect("entry reserved by begin");
            if e.record.state == EntryState::Launching {
                e.record.state = EntryState::Running;
            }
            (e.clone(), e.early_exit.take())
        };
        self.resuming
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        // On file now: the record owns the temp folder, and the launch's marker goes. A
        // record that could not be written keeps the marker, so a restart still finds
        // the folder of a session it does not know (records::purge::launches_cut_short).
        if self.persist(id) {
            self.store.unmark(id);
        }
        if let Some((exit_status, signal, reason, redactions, reached)) = pending {
            self.on_host_event(HostEvent::SessionExited {
                session_id: id.to_string(),
                root_pid: 0,
                exit_status,
                signal,
                reason,
                redactions,
                reached,
            });
        }
        entry
    }

    fn teardown(&self, e: &Entry, reason: &str, ended: Ended) {
        let Ended {
            exit_status,
            signal,
            redactions,
            reached,
        } = ended;
        let limits = reached.map(|r| crate::wire::Limits {
            pids_max: r.pids_max,
            memory_max_mib: r.memory_max_mib,
            reached: crate::limits::reached_text(&r),
            ..Default::default()
        });
        if let Some(p) = &e.profile {
            let _ = std::fs::remove_file(p);
        }
        if let Some(key) = &e.made_claim {
            self.made_folders.release(key);
        }
        // Its egress proxy is not stopped here: every caller stopped it before the entry
        // read as ended. Once it reads dormant a resume may already run a new proxy
        // under the same id, which a stop by id here would take down (its socket gone,
        // the resume's launch fails to bind it).
        let row = self.audit.record(&AuditRow {
            action: "session_end",
            session_id: Some(e.record.id.clone()),
            kind: Some(e.record.kind.as_str().into()),
            project: Some(e.record.project_id.clone()),
            template: Some(e.record.template_id.clone()),
            outcome: Outcome::Allowed,
            error: Some(reason.into()),
            exit_status,
            signal,
            token_fingerprint: e.record.token_fingerprint.clone(),
            account: e.record.account.clone(),
            token_projects: e.stop_token_projects.clone(),
            redactions,
            limits: limits.clone(),
            ..Default::default()
        });
        if let Err(err) = row {
            // The session has ended either way; the event below still records it.
            crate::listen::log(format_args!(
                "relay: audit: session_end of {}: {err}",
                e.record.id
            ));
        }
        self.events.emit(&Event {
            name: "session.exited",
            status: Some("ok"),
            reason: Some(reason.into()),
            session_id: Some(e.record.id.clone()),
            kind: Some(e.record.kind.as_str().into()),
            exit_status,
            signal,
            token_projects: e.stop_token_projects.clone(),
            limits,
            ..Default::default()
        });
        self.ended.notify_waiters();
    }

    /// Waits, at most `bound`, until session `id` no longer runs: its end written and
    /// told, what it planted in repositories set aside. True when it has ended (or is
    /// gone).
    pub async fn until_ended(&self, id: &str, bound: std::time::Duration) -> bool {
        let ended = |d: &Daemon| {
            d.entry(id).is_none_or(|e| {
                !matches!(e.record.state, EntryState::Running | EntryState::Launching)
            })
        };
        let wait = async {
            loop {
                let woken = self.ended.notified();
                tokio::pin!(woken);
                woken.as_mut().enable();
                if ended(self) {
                    return;
                }
                woken.await;
            }
        };
        tokio::time::timeout(bound, wait).await.is_ok()
    }

    /// The host died: its sessions went with it (their ptys and pipes were the host's).
    fn on_host_death(&self) {
        let gone: Vec<Entry> = {
            let mut l = self.ledger();
            l.values_mut()
                .filter(|e| e.record.state == EntryState::Running)
                .map(|e| {
                    self.egress.stop(&e.record.id);
                    e.record.state = if e.record.kind == SessionKind::Claude {
                        EntryState::Dormant
                    } else {
                        EntryState::Exited
                    };
                    e.record.ended_ms = Some(records::journal::now_ms());
                    e.record.exit_reason = Some(e.stop_reason.unwrap_or("host_died").into());
                    e.clone()
                })
                .collect()
        };
        for e in gone {
            // The shim leads its session's group, the target its own: both go.
            for pid in [e.root_pid, e.target_pid]
                .into_iter()
                .flatten()
                .filter(|p| *p > 1)
            {
                // Safety: kill(2) on a process group of this session; no memory.
                unsafe { libc::kill(-(pid as libc::pid_t), libc::SIGKILL) };
            }
            records::repos::at_end(self, &e);
            self.persist(&e.record.id);
            let reason = e.stop_reason.unwrap_or("host_died");
            self.teardown(&e, reason, Ended::default());
        }
    }
}
