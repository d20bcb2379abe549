//! The session ledger on disk: one JSON file per session, `<config>/ledger/<id>.json`
//! (0600, in a 0700 folder, inside the config dir every sandbox profile denies), so a
//! `relay serve` restart — clean, or after a SIGKILL — finds its sessions again
//! (docs/architecture.md, "The ledger file").
//!
//! One file per session, not one file for all: a write replaces only its own session's
//! record, so a torn or corrupt file costs that one record and never the others, and no
//! write has to hold every session in memory at once. Each write is atomic: a new temp
//! file (`create_new`, mode 0600, `O_NOFOLLOW`), `fsync`, `rename` over the record, then
//! `fsync` of the folder. A SIGKILL between any two of those leaves the old record or
//! the new one, plus at worst a temp file that the next start removes.
//!
//! Read back at start: a file that is not a record relay wrote — not JSON, truncated,
//! too large, a link, a FIFO, a name that is not `<id>.json`, an id that does not match
//! its name — is moved to `<config>/ledger/set-aside/` and reported (a stderr line, a
//! `ledger_set_aside` audit row, `relay doctor`'s `ledger` check); it never stops relay
//! and never costs another record.
//!
//! The token never enters a record: only its fingerprint (`crate::token::fingerprint`),
//! as in the lists and the audit rows. What a session could influence (Claude Code's
//! `init` strings) is capped before it reaches the ledger (`Daemon::set_claude`), and a
//! `--resume` id read back is checked again at launch (`valid_claude_session_id`).

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::strays::Sandbox;
use crate::daemon::session::VERSION;
use crate::daemon::{Entry, EntryState, Record};
use crate::protocol::SessionKind;

/// The folder under the config dir.
pub const DIR: &str = "ledger";
/// Where unreadable files go, under [`DIR`].
pub const SET_ASIDE: &str = "set-aside";
/// A record is a few KiB; anything far larger is not one relay wrote.
const FILE_MAX: u64 = 256 * 1024;
/// The reason a session that was running when relay stopped or died ends with.
pub const RELAY_RESTARTED: &str = "relay_restarted";
/// The name of a launch's marker, `<id>.launching` ([`Store::mark_launching`]).
const LAUNCHING: &str = ".launching";
/// A marker holds one path and a sandbox.
const MARKER_MAX: u64 = 8192;
/// How a marker's sandbox line starts ([`Store::note_sandbox`]).
const SANDBOX_LINE: &str = "sandbox ";

impl Record {
    /// The entry a restarted relay lists. Nothing of it runs: a record that was
    /// `running` (or `launching`) when relay stopped or died is ended now, a Claude
    /// session `dormant` (resumable) and a terminal `exited`, with reason
    /// [`RELAY_RESTARTED`]; the second value says so.
    pub fn into_entry(mut self, now_ms: u64) -> (Entry, bool) {
        let was_running = matches!(self.state, EntryState::Running | EntryState::Launching);
        if was_running {
            self.state = match self.kind {
                SessionKind::Claude => EntryState::Dormant,
                SessionKind::Pty => EntryState::Exited,
            };
            self.exit_reason = Some(RELAY_RESTARTED.into());
            self.ended_ms = Some(now_ms);
        }
        // An earlier relay's one token path is one of the token paths.
        if let Some(earlier) = self.reach.token_path.take() {
            if !self.reach.token_paths.contains(&earlier) {
                self.reach.token_paths.push(earlier);
            }
        }
        (Entry::from(self), was_running)
    }
}

/// A file that was not loaded, where it went and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetAside {
    pub file: PathBuf,
    /// Where it was moved, when the move worked.
    pub moved_to: Option<PathBuf>,
    pub why: String,
}

/// A launch's marker read back: the launch of `id` had made, or was about to make, its
/// temp folder `<tmp>/relay-<id>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launching {
    pub id: String,
    /// The canonical temp folder of the `relay serve` that launched it.
    pub tmp: PathBuf,
    /// Its sandbox, once the launch had found it ([`Store::note_sandbox`]).
    pub sandbox: Option<Sandbox>,
}

#[derive(Debug, Default)]
pub struct Loaded {
    pub records: Vec<Record>,
    pub set_aside: Vec<SetAside>,
    /// Temp files of writes a crash cut short, removed.
    pub leftovers: usize,
    /// Markers of launches whose record was not yet written when relay stopped.
    pub launching: Vec<Launching>,
}

/// The ledger folder and its one writer.
pub struct Store {
    dir: PathBuf,
    /// Held across a snapshot and its write, so the last write of a record is of its
    /// latest state (`Daemon::persist`).
    pub(in crate::daemon) lock: Mutex<()>,
    seq: AtomicU64,
}

impl Store {
    pub fn new(config: &Path) -> Store {
        Store {
            dir: config.join(DIR),
            lock: Mutex::new(()),
            seq: AtomicU64::new(0),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn set_aside_dir(&self) -> PathBuf {
        self.dir.join(SET_ASIDE)
    }

    /// The folder and its set-aside folder, 0700.
    pub fn ensure(&self) -> std::io::Result<()> {
        for d in [self.dir.clone(), self.set_aside_dir()] {
            match std::fs::DirBuilder::new().mode(0o700).create(&d) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let m = std::fs::symlink_metadata(&d)?;
                    if !m.file_type().is_dir() {
                        return Err(std::io::Error::other(format!(
                            "{} is not a folder",
                            d.display()
                        )));
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn path_of(&self, id: &str) -> Option<PathBuf> {
        crate::daemon::ids::is_relay_id(id).then(|| self.dir.join(format!("{id}.json")))
    }

    pub fn marker_of(&self, id: &str) -> Option<PathBuf> {
        crate::daemon::ids::is_relay_id(id).then(|| self.dir.join(format!("{id}{LAUNCHING}")))
    }

    /// Notes, before a launch makes its temp folder `<tmp>/relay-<id>`, that it is about
    /// to: `<config>/ledger/<id>.launching`, holding `tmp` (the canonical temp folder).
    /// Removed ([`Self::unmark`]) once the session's record is on file, which then owns
    /// the folder, or once a refused launch removed it; a marker a stop of relay left
    /// behind is how the next start finds the folder of a launch it never recorded
    /// (`purge::launches_cut_short`; docs/architecture.md#the-ledger-file). Not synced
    /// to disk: it is for a stop of relay, which the page cache outlives.
    pub fn mark_launching(&self, id: &str, tmp: &Path) -> std::io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let path = self
            .marker_of(id)
            .ok_or_else(|| std::io::Error::other(format!("session id {id:?} is not relay's")))?;
        let mut line = tmp.as_os_str().as_bytes().to_vec();
        if line.contains(&b'\n') {
            // The marker's first line is the folder.
            return Err(std::io::Error::other(
                "the temp folder's path holds a newline",
            ));
        }
        line.push(b'\n');
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)?;
        f.write_all(&line).inspect_err(|_| {
            // A marker made but not filled (a full disk) would be set aside at the next
            // start: it goes now, and the launch is refused.
            let _ = std::fs::remove_file(&path);
        })
    }

    /// Adds the sandbox the launch of `id` runs in ([`super::strays::find`]) to its
    /// marker, a line `sandbox <json>` after the folder's; a resume, which made no
    /// marker (its folder was there), gets one now, naming `tmp`. One `write`, no sync,
    /// as the marker itself: a kill of relay leaves the line whole or not there, and a
    /// line that does not read is no sandbox. The record written once the launch is
    /// audited carries the sandbox from then on.
    pub fn note_sandbox(&self, id: &str, tmp: &Path, sandbox: &Sandbox) -> std::io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let path = self
            .marker_of(id)
            .ok_or_else(|| std::io::Error::other(format!("session id {id:?} is not relay's")))?;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)?;
        let mut bytes = Vec::new();
        if f.metadata()?.len() == 0 {
            if tmp.as_os_str().as_bytes().contains(&b'\n') {
                let _ = std::fs::remove_file(&path);
                return Err(std::io::Error::other(
                    "the temp folder's path holds a newline",
                ));
            }
            bytes.extend_from_slice(tmp.as_os_str().as_bytes());
            bytes.push(b'\n');
        }
        bytes.extend_from_slice(SANDBOX_LINE.as_bytes());
        bytes.extend_from_slice(&serde_json::to_vec(sandbox).map_err(std::io::Error::other)?);
        bytes.push(b'\n');
        f.write_all(&bytes)
    }

    /// Removes `id`'s launch marker; one that is not there is fine.
    pub fn unmark(&self, id: &str) {
        if let Some(p) = self.marker_of(id) {
            let _ = std::fs::remove_file(p);
        }
    }

    /// Writes `rec` atomically: temp file, `fsync`, rename, `fsync` of the folder.
    pub fn write(&self, rec: &Record) -> std::io::Result<()> {
        let Some(path) = self.path_of(&rec.id) else {
            return Err(std::io::Error::other(format!(
                "session id {:?} is not relay's",
                rec.id
            )));
        };
        let mut bytes = serde_json::to_vec_pretty(rec).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .dir
            .join(format!(".{}.json.tmp-{}-{n}", rec.id, std::process::id()));
        crate::atomic::write_0600(&path, &tmp, &bytes)?;
        self.sync_dir()
    }

    /// Removes `id`'s record (a purge); a record that is not there is fine.
    pub fn remove(&self, id: &str) -> std::io::Result<()> {
        let Some(path) = self.path_of(id) else {
            return Ok(());
        };
        match std::fs::remove_file(&path) {
            Ok(()) => self.sync_dir(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn sync_dir(&self) -> std::io::Result<()> {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(&self.dir)?
            .sync_all()
    }

    /// Every record in the folder; what cannot be read as one is set aside. Temp files
    /// of cut-short writes are removed (the record they were to replace is still there).
    pub fn load(&self) -> Loaded {
        let mut out = Loaded::default();
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return out;
        };
        let mut names: Vec<std::ffi::OsString> = rd.flatten().map(|e| e.file_name()).collect();
        names.sort();
        for name in names {
            let text = name.to_string_lossy().into_owned();
            if text == SET_ASIDE {
                continue;
            }
            let path = self.dir.join(&name);
            if text.starts_with('.') && text.contains(".json.tmp-") {
                if std::fs::remove_file(&path).is_ok() {
                    out.leftovers += 1;
                }
                continue;
            }
            let marker = text
                .strip_suffix(LAUNCHING)
                .filter(|id| crate::daemon::ids::is_relay_id(id));
            let read = match marker {
                Some(id) => read_marker(&path).map(|(tmp, sandbox)| {
                    out.launching.push(Launching {
                        id: id.to_string(),
                        tmp,
                        sandbox,
                    })
                }),
                None => read_record(&path, &text).map(|r| out.records.push(r)),
            };
            match read {
                Ok(()) => {}
                Err(why) => {
                    let moved_to = self.move_aside(&path, &text);
                    out.set_aside.push(SetAside {
                        file: path,
                        moved_to,
                        why,
                    });
                }
            }
        }
        out.records
            .sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then(a.id.cmp(&b.id)));
        out
    }

    /// Moves a file out of the way under a name no other file has (never over one).
    fn move_aside(&self, path: &Path, name: &str) -> Option<PathBuf> {
        let stamp = super::journal::now_ms();
        for n in 0..100u32 {
            let dest = self.set_aside_dir().join(format!("{name}.{stamp}-{n}"));
            if std::fs::symlink_metadata(&dest).is_ok() {
                continue;
            }
            return std::fs::rename(path, &dest).ok().map(|()| dest);
        }
        None
    }

    /// The files in the set-aside folder, for `relay doctor`.
    pub fn set_aside_files(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(self.set_aside_dir())
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        v.sort();
        v
    }
}

/// A sandboxed session [`restore`] ended [`RELAY_RESTARTED`]: its id, and its sandbox
/// as recorded.
pub type Restarted = (String, Option<Sandbox>);

/// What [`restore`] found: the launches cut short, the sandboxed sessions ended
/// [`RELAY_RESTARTED`] with their sandboxes, and every session ended so.
pub type Restored = (Vec<Launching>, Vec<Restarted>, Vec<String>);

/// At start, before the host runs: every record read back into the daemon's ledger. A
/// session that was running when relay stopped or died is ended with reason
/// [`RELAY_RESTARTED`] in memory, and its end written and told by [`end_restarted`];
/// each file set aside is reported on stderr and in a `ledger_set_aside` audit row.
/// Returns the markers of launches cut short (for `purge::launches_cut_short`, once the
/// records are in), the sandboxed sessions ended [`RELAY_RESTARTED`], each with its
/// sandbox as recorded (for `strays::end`), and every session ended so (for
/// [`end_restarted`]).
pub(in crate::daemon) fn restore(d: &crate::daemon::Daemon) -> Result<Restored, String> {
    d.store
        .ensure()
        .map_err(|e| format!("{}: {e}", d.store.dir().display()))?;
    let loaded = d.store.load();
    for a in &loaded.set_aside {
        let whereto = match &a.moved_to {
            Some(p) => format!("set aside as {}", p.display()),
            None => "could not be moved; not read".into(),
        };
        let message = format!("ledger file {}: {}; {whereto}", a.file.display(), a.why);
        tracing::warn!("{message}");
        let row = d.audit.record(&super::journal::AuditRow {
            action: "ledger_set_aside",
            outcome: crate::wire::Outcome::Error,
            error: Some(message),
            ..Default::default()
        });
        if let Err(e) = row {
            tracing::error!("audit: ledger_set_aside: {e}");
        }
    }
    let now = super::journal::now_ms();
    let mut restarted = Vec::new();
    let total = loaded.records.len();
    let mut earlier = 0;
    for rec in loaded.records {
        let (e, was_running) = rec.into_entry(now);
        earlier +=
            usize::from(!was_running && e.record.exit_reason.as_deref() == Some(RELAY_RESTARTED));
        let id = e.record.id.clone();
        d.ledger().insert(id.clone(), e.clone());
        if was_running {
            restarted.push((id, e.record.sandboxed, e.record.sandbox));
        }
    }
    if total > 0 || !loaded.set_aside.is_empty() || !loaded.launching.is_empty() {
        let counts = ReadBack {
            total,
            ended_now: restarted.len(),
            ended_at_stop: earlier,
            set_aside: loaded.set_aside.len(),
            cut_short: loaded.launching.len(),
        };
        tracing::info!("{}", counts.line());
    }
    let ended = restarted.iter().map(|(id, _, _)| id.clone()).collect();
    let sandboxed = restarted
        .into_iter()
        .filter(|(_, sandboxed, _)| *sandboxed)
        .map(|(id, _, sb)| (id, sb))
        .collect();
    Ok((loaded.launching, sandboxed, ended))
}

/// Once what of them still ran has ended (`strays::end`): each session [`restore`] found
/// running has what it planted in repositories set aside, then its end written (its
/// record) and told (a `session_end` audit row and a `session.exited` event), as any
/// end is. A relay that dies before this finds it running again at its next start.
pub(in crate::daemon) fn end_restarted(d: &crate::daemon::Daemon, ids: &[String]) {
    for id in ids {
        let Some(e) = d.entry(id) else { continue };
        super::repos::at_end(d, &e);
        d.persist(id);
        d.teardown(&e, RELAY_RESTARTED, Default::default());
    }
}

/// What [`restore`] read back, for its one log line.
struct ReadBack {
    total: usize,
    /// Running when relay died: ended [`RELAY_RESTARTED`] now.
    ended_now: usize,
    /// Ended [`RELAY_RESTARTED`] when relay last stopped (it ends every session then).
    ended_at_stop: usize,
    set_aside: usize,
    cut_short: usize,
}

impl ReadBack {
    /// The line, counting both ways a session comes to be listed ended
    /// `relay_restarted`: a stop that ended it, or a restart after a crash (issue 40:
    /// the line said `0 ended relay_restarted` while the list showed them so).
    fn line(&self) -> String {
        format!(
            "ledger: {} session{} read back ({} ended {RELAY_RESTARTED}: {} when relay last \
             stopped, {} now, as they were running when it went), {} files set aside, {} \
             launches cut short",
            self.total,
            if self.total == 1 { "" } else { "s" },
            self.ended_now + self.ended_at_stop,
            self.ended_at_stop,
            self.ended_now,
            self.set_aside,
            self.cut_short
        )
    }
}

/// At shutdown, before the host is told to end every session: each running one ends
/// with reason [`RELAY_RESTARTED`], as it would after a crash.
pub(in crate::daemon) fn stopping_all(d: &crate::daemon::Daemon) {
    for e in d.ledger().values_mut() {
        if e.record.state == EntryState::Running && e.stop_reason.is_none() {
            e.stop_reason = Some(RELAY_RESTARTED);
        }
    }
}

/// A launch's marker: the absolute temp folder it names, read as a record is (no link
/// followed, no FIFO waited on, bounded), and the sandbox its second line names, if it
/// reads as one.
fn read_marker(path: &Path) -> Result<(PathBuf, Option<Sandbox>), String> {
    use std::os::unix::ffi::OsStrExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => "a link, not a file".to_string(),
            _ => format!("cannot open: {e}"),
        })?;
    let meta = f.metadata().map_err(|e| format!("cannot stat: {e}"))?;
    if !meta.file_type().is_file() {
        return Err("not a regular file".into());
    }
    let mut bytes = Vec::new();
    f.take(MARKER_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    let text = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    // The folder, then maybe a sandbox line: one the kill cut short names no sandbox.
    let (line, sandbox) = match text.iter().position(|b| *b == b'\n') {
        Some(i) if text[i + 1..].starts_with(SANDBOX_LINE.as_bytes()) => {
            let json = &text[i + 1 + SANDBOX_LINE.len()..];
            (&text[..i], serde_json::from_slice::<Sandbox>(json).ok())
        }
        _ => (text, None),
    };
    let tmp = PathBuf::from(std::ffi::OsStr::from_bytes(line));
    if bytes.len() as u64 > MARKER_MAX || !tmp.is_absolute() || line.contains(&b'\n') {
        return Err("not a launch marker (one absolute folder)".into());
    }
    Ok((tmp, sandbox))
}

/// One record file, read without following a link or blocking on a FIFO, checked
/// against its name. The error says why, never the content.
fn read_record(path: &Path, name: &str) -> Result<Record, String> {
    let Some(id) = name.strip_suffix(".json") else {
        return Err("not a ledger file name (<id>.json)".into());
    };
    if !crate::daemon::ids::is_relay_id(id) {
        return Err("not a ledger file name (<id>.json)".into());
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => "a link, not a file".to_string(),
            _ => format!("cannot open: {e}"),
        })?;
    let meta = f.metadata().map_err(|e| format!("cannot stat: {e}"))?;
    if !meta.file_type().is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > FILE_MAX {
        return Err(format!("larger than {FILE_MAX} bytes"));
    }
    let mut bytes = Vec::new();
    f.take(FILE_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    let rec: Record = serde_json::from_slice(&bytes).map_err(|e| {
        // serde's category, line and column only: its message can quote the input.
        format!(
            "not a ledger record ({:?} at line {}, column {})",
            e.classify(),
            e.line(),
            e.column()
        )
        .to_lowercase()
    })?;
    if rec.v != VERSION {
        return Err(format!(
            "record version {}, this relay reads {VERSION}",
            rec.v
        ));
    }
    if rec.id != id {
        return Err("the record's id is not its file's name".into());
    }
    let kind_ok = match rec.kind {
        SessionKind::Claude => id.starts_with("s-"),
        SessionKind::Pty => id.starts_with("t-"),
    };
    if !kind_ok {
        return Err("the record's kind does not match its id".into());
    }
    if !rec.directory.is_absolute() {
        return Err("the record's directory is not absolute".into());
    }
    Ok(rec)
}

/// A record of an ended sandboxed launch `id` in project `p`, for unit tests to change.
#[cfg(test)]
pub(crate) fn test_record(id: &str, kind: SessionKind, state: EntryState) -> Record {
    Record {
        v: VERSION,
        id: id.into(),
        kind,
        name: None,
        project_id: "p1".into(),
        template_id: "shell".into(),
        directory: "/home/ada/project".into(),
        model: None,
        permission_mode: None,
        token_fingerprint: None,
        token_passed: false,
        account: None,
        claude: None,
        state,
        exit_status: Some(0),
        exit_signal: None,
        exit_reason: None,
        created_ms: 1,
        ended_ms: Some(2),
        sandboxed: true,
        pty: None,
        reach: Default::default(),
        sandbox: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::Reach;
    use crate::protocol::ClaudeInit;

    fn record(id: &str, state: EntryState) -> Record {
        Record {
            v: VERSION,
            id: id.into(),
            kind: if id.starts_with('s') {
                SessionKind::Claude
            } else {
                SessionKind::Pty
            },
            name: None,
            project_id: "p1".into(),
            template_id: "claude-code".into(),
            directory: "/home/ada/project".into(),
            model: Some("sonnet".into()),
            permission_mode: Some("bypassPermissions".into()),
            token_fingerprint: Some("3f2a9c0d11be".into()),
            token_passed: true,
            account: Some("work".into()),
            claude: Some(ClaudeInit {
                session_id: Some("0b7c3e2a-1111-4222-8333-944455556666".into()),
                ..Default::default()
            }),
            state,
            exit_status: None,
            exit_signal: None,
            exit_reason: None,
            created_ms: 1,
            ended_ms: None,
            sandboxed: true,
            pty: None,
            reach: Reach {
                read_write: vec!["/home/ada/project".into()],
                ..Default::default()
            },
            sandbox: None,
        }
    }

    /// The record of the session with every field set (`session::every_field`).
    fn every_field() -> Record {
        crate::daemon::session::every_field().record
    }

    fn store() -> (tempfile::TempDir, Store) {
        let d = tempfile::tempdir().unwrap();
        let s = Store::new(d.path());
        s.ensure().unwrap();
        (d, s)
    }

    /// A store holding `text` as the record file `name`, and what it loads, nothing
    /// set aside.
    fn store_with(name: &str, text: &str) -> (tempfile::TempDir, Store, Vec<Record>) {
        let (d, s) = store();
        std::fs::write(s.dir().join(name), text).unwrap();
        let loaded = s.load();
        assert!(loaded.set_aside.is_empty(), "{:?}", loaded.set_aside);
        (d, s, loaded.records)
    }

    #[test]
    fn the_read_back_line_counts_sessions_a_stop_ended_and_those_a_crash_left_running() {
        let line = ReadBack {
            total: 3,
            ended_now: 1,
            ended_at_stop: 2,
            set_aside: 0,
            cut_short: 0,
        }
        .line();
        assert_eq!(
            line,
            "ledger: 3 sessions read back (3 ended relay_restarted: 2 when relay last \
             stopped, 1 now, as they were running when it went), 0 files set aside, 0 \
             launches cut short"
        );
    }

    #[test]
    fn a_record_round_trips_and_a_running_one_comes_back_ended_relay_restarted() {
        let (_d, s) = store();
        let running = record("s-000000000001", EntryState::Running);
        let dormant = record("s-000000000002", EntryState::Dormant);
        let mut exited = record("t-000000000003", EntryState::Running);
        exited.template_id = "shell".into();
        for r in [&running, &dormant, &exited] {
            s.write(r).unwrap();
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(s.dir().join("s-000000000001.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let loaded = s.load();
        assert!(loaded.set_aside.is_empty(), "{:?}", loaded.set_aside);
        assert_eq!(
            loaded.records,
            vec![running.clone(), dormant.clone(), exited]
        );

        let (e, was) = running.into_entry(99);
        assert!(was);
        assert_eq!(e.record.state, EntryState::Dormant);
        assert_eq!(e.record.exit_reason.as_deref(), Some(RELAY_RESTARTED));
        assert_eq!(e.record.ended_ms, Some(99));
        assert_eq!(
            e.record.reach.read_write,
            vec![PathBuf::from("/home/ada/project")]
        );
        let (e, was) = dormant.into_entry(99);
        assert!(!was);
        assert_eq!(
            (e.record.state, e.record.exit_reason),
            (EntryState::Dormant, None)
        );
        let (e, _) = loaded.records[2].clone().into_entry(99);
        assert_eq!(e.record.state, EntryState::Exited);
    }

    #[test]
    fn a_corrupt_truncated_or_planted_file_is_set_aside_and_the_others_load() {
        let (_d, s) = store();
        let good = record("s-00000000000a", EntryState::Dormant);
        s.write(&good).unwrap();
        let full = serde_json::to_vec(&record("s-00000000000b", EntryState::Dormant)).unwrap();
        let dir = s.dir().to_path_buf();
        // Cut half-way, as a torn write would leave it.
        std::fs::write(dir.join("s-00000000000b.json"), &full[..full.len() / 2]).unwrap();
        std::fs::write(dir.join("s-00000000000c.json"), b"\x00\xffnot json").unwrap();
        std::fs::write(dir.join("s-00000000000d.json"), b"").unwrap();
        // An id that is not its name's, a link, a FIFO, a stray name, a huge file.
        let mut other = record("s-00000000000e", EntryState::Dormant);
        other.id = "s-00000000000a".into();
        std::fs::write(
            dir.join("s-00000000000e.json"),
            serde_json::to_vec(&other).unwrap(),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            dir.join("s-00000000000a.json"),
            dir.join("s-00000000000f.json"),
        )
        .unwrap();
        nix::unistd::mkfifo(
            &dir.join("t-000000000010.json"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        std::fs::write(dir.join("notes.txt"), b"hi").unwrap();
        std::fs::write(dir.join("t-000000000011.json"), vec![b' '; 300 * 1024]).unwrap();
        // A write a SIGKILL cut short between the temp file and the rename.
        std::fs::write(dir.join(".s-00000000000a.json.tmp-7-0"), &full[..10]).unwrap();

        let loaded = s.load();
        assert_eq!(loaded.records, vec![good]);
        assert_eq!(loaded.leftovers, 1);
        let why: Vec<(String, &str)> = loaded
            .set_aside
            .iter()
            .map(|a| {
                (
                    a.file.file_name().unwrap().to_string_lossy().into_owned(),
                    a.why.as_str(),
                )
            })
            .collect();
        let names: Vec<&str> = why.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "notes.txt",
                "s-00000000000b.json",
                "s-00000000000c.json",
                "s-00000000000d.json",
                "s-00000000000e.json",
                "s-00000000000f.json",
                "t-000000000010.json",
                "t-000000000011.json"
            ]
        );
        assert!(why[1].1.contains("eof"), "{why:?}");
        assert!(why[5].1.contains("link"), "{why:?}");
        assert!(why[6].1.contains("not a regular file"), "{why:?}");
        // Every one moved, none read again; the good record and the link's target stay.
        assert!(loaded.set_aside.iter().all(|a| a.moved_to.is_some()));
        assert_eq!(s.set_aside_files().len(), 8);
        let again = s.load();
        assert_eq!(again.records.len(), 1);
        assert!(again.set_aside.is_empty());
        // No reason quotes the content.
        assert!(why.iter().all(|(_, w)| !w.contains("not json")));
    }

    #[test]
    fn a_write_cut_short_by_a_full_disk_leaves_the_old_record_whole() {
        // Safety: geteuid has no arguments and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            assert!(std::env::var_os("CI").is_none(), "CI runs as root");
            eprintln!("skip: mounting a small tmpfs needs root");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=16k,mode=0700", "tmpfs"])
            .arg(d.path())
            .status()
            .expect("mount");
        assert!(st.success(), "mount -t tmpfs");
        struct Unmount<'a>(&'a Path);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount")
                    .arg("-l")
                    .arg(self.0)
                    .status();
            }
        }
        let _u = Unmount(d.path());
        let s = Store::new(d.path());
        s.ensure().unwrap();
        let old = record("s-000000000031", EntryState::Running);
        s.write(&old).unwrap();
        // Fill the disk, then try a record larger than the page the old one holds: the
        // write fails, and what a restart reads is the old record, whole.
        let mut filler = std::fs::File::create(d.path().join("filler")).unwrap();
        while filler.write_all(&[0u8; 1024]).is_ok() {}
        drop(filler);
        let mut new = old.clone();
        new.state = EntryState::Dormant;
        new.name = Some("n".repeat(6000));
        assert!(s.write(&new).is_err(), "the disk was not full");
        let loaded = s.load();
        assert!(loaded.set_aside.is_empty(), "{:?}", loaded.set_aside);
        assert_eq!(loaded.records, vec![old]);
    }

    #[test]
    fn a_launch_marker_reads_back_with_its_temp_folder_and_a_bad_one_is_set_aside() {
        let (_d, s) = store();
        let tmp = Path::new("/var/tmp/odd \u{e9} folder");
        s.mark_launching("s-0123456789ab", tmp).unwrap();
        s.mark_launching("t-0123456789ab", Path::new("/tmp"))
            .unwrap();
        s.write(&record("t-0123456789ab", EntryState::Running))
            .unwrap();
        let loaded = s.load();
        assert_eq!(
            loaded.launching,
            vec![
                Launching {
                    id: "s-0123456789ab".into(),
                    tmp: tmp.into(),
                    sandbox: None,
                },
                Launching {
                    id: "t-0123456789ab".into(),
                    tmp: "/tmp".into(),
                    sandbox: None,
                },
            ]
        );
        // A marker is not a record: the record beside it still loads.
        assert_eq!(loaded.records.len(), 1);
        assert!(loaded.set_aside.is_empty(), "{:?}", loaded.set_aside);
        s.unmark("s-0123456789ab");
        s.unmark("t-0123456789ab");
        s.unmark("t-0123456789ab");
        assert!(s.load().launching.is_empty());
        // Not ids of relay's: refused, never written.
        assert!(s.mark_launching("../x", tmp).is_err());

        // A relative folder, a link and a name that is no id are set aside, not followed.
        std::fs::write(s.dir().join("s-aaaaaaaaaaaa.launching"), "tmp\n").unwrap();
        let elsewhere = s.dir().parent().unwrap().join("elsewhere");
        std::fs::write(&elsewhere, "/tmp\n").unwrap();
        std::os::unix::fs::symlink(&elsewhere, s.dir().join("s-bbbbbbbbbbbb.launching")).unwrap();
        std::fs::write(s.dir().join("x.launching"), "/tmp\n").unwrap();
        let loaded = s.load();
        assert!(loaded.launching.is_empty(), "{:?}", loaded.launching);
        let why: Vec<&str> = loaded.set_aside.iter().map(|a| a.why.as_str()).collect();
        assert_eq!(
            why,
            [
                "not a launch marker (one absolute folder)",
                "a link, not a file",
                "not a ledger file name (<id>.json)"
            ]
        );
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "/tmp\n");
    }

    #[test]
    fn the_sandbox_goes_in_the_marker_then_the_record_and_older_files_read_without_one() {
        let (_d, s) = store();
        let sb = Sandbox {
            boot: "6a1f".into(),
            pid: 4242,
            start: 98_765,
            mnt: 4_026_532_801,
            pid_ns: 4_026_532_803,
        };
        // A launch's marker, then its sandbox; a resume (no marker: its folder was
        // there) gets one naming its temp folder.
        s.mark_launching("t-0000000000a1", Path::new("/tmp"))
            .unwrap();
        s.note_sandbox("t-0000000000a1", Path::new("/tmp"), &sb)
            .unwrap();
        s.note_sandbox("s-0000000000a2", Path::new("/var/tmp"), &sb)
            .unwrap();
        // A sandbox line a kill cut short names no sandbox; the folder still reads.
        std::fs::write(
            s.dir().join("t-0000000000a3.launching"),
            "/tmp\nsandbox {\"boot\":\"6a",
        )
        .unwrap();
        let loaded = s.load();
        assert!(loaded.set_aside.is_empty(), "{:?}", loaded.set_aside);
        let got: Vec<(&str, &Path, Option<&Sandbox>)> = loaded
            .launching
            .iter()
            .map(|m| (m.id.as_str(), m.tmp.as_path(), m.sandbox.as_ref()))
            .collect();
        assert_eq!(
            got,
            [
                ("s-0000000000a2", Path::new("/var/tmp"), Some(&sb)),
                ("t-0000000000a1", Path::new("/tmp"), Some(&sb)),
                ("t-0000000000a3", Path::new("/tmp"), None),
            ]
        );
        // No folder the marker's lines could split: refused.
        assert!(s
            .mark_launching("t-0000000000a4", Path::new("/tmp/a\nb"))
            .is_err());
        assert!(s
            .note_sandbox("t-0000000000a5", Path::new("/tmp/a\nb"), &sb)
            .is_err());
        assert!(!s.dir().join("t-0000000000a5.launching").exists());

        // The record keeps it; one written without (an earlier relay's) reads as none.
        let mut r = record("t-0000000000a1", EntryState::Running);
        r.sandbox = Some(sb.clone());
        s.write(&r).unwrap();
        let older = record("t-0000000000a6", EntryState::Running);
        s.write(&older).unwrap();
        let text = std::fs::read_to_string(s.dir().join("t-0000000000a6.json")).unwrap();
        assert!(!text.contains("\"sandbox\""), "{text}");
        let loaded = s.load();
        assert_eq!(loaded.records, vec![r.clone(), older.clone()]);
        let (e, _) = r.into_entry(9);
        assert_eq!(e.record.sandbox, Some(sb));
        assert_eq!(older.into_entry(9).0.record.sandbox, None);
    }

    #[test]
    fn a_write_replaces_the_whole_record_and_leaves_no_temp_file() {
        let (_d, s) = store();
        let mut r = record("s-000000000021", EntryState::Running);
        s.write(&r).unwrap();
        r.state = EntryState::Dormant;
        r.exit_reason = Some("terminated".into());
        s.write(&r).unwrap();
        let names: Vec<String> = std::fs::read_dir(s.dir())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let mut names = names;
        names.sort();
        assert_eq!(names, ["s-000000000021.json", "set-aside"]);
        assert_eq!(s.load().records, vec![r.clone()]);
        s.remove(&r.id).unwrap();
        s.remove(&r.id).unwrap();
        assert!(s.load().records.is_empty());
        // Only relay's ids name files.
        r.id = "../x".into();
        assert!(s.write(&r).is_err());
    }

    /// The ledger file's bytes, field names and order: what earlier relays read back and
    /// the e2e tests look at. A change here is a change of the format.
    #[test]
    fn a_record_keeps_its_bytes() {
        let (_d, s) = store();
        let full = every_field();
        s.write(&full).unwrap();
        let written = std::fs::read_to_string(s.dir().join("t-0123456789ab.json")).unwrap();
        assert_eq!(written, include_str!("testdata/ledger-record.json"));
        // Empty optional fields are left out, not `null`.
        let bare = Record {
            name: None,
            model: None,
            permission_mode: None,
            token_fingerprint: None,
            token_passed: false,
            account: None,
            claude: None,
            exit_status: None,
            exit_signal: None,
            exit_reason: None,
            ended_ms: None,
            pty: None,
            reach: Reach::default(),
            sandbox: None,
            ..full
        };
        assert_eq!(
            serde_json::to_string(&bare).unwrap(),
            r#"{"v":1,"id":"t-0123456789ab","kind":"pty","project_id":"p","template_id":"shell","directory":"/home/ada/p","token_passed":false,"state":"exited","created_ms":1,"sandboxed":true,"reach":{"grants":[],"read_write":[],"pins":[]}}"#
        );
    }

    /// What a restart reads back and writes again is the record it read: an ended
    /// session's file keeps its bytes through a restart.
    #[test]
    fn a_record_read_back_is_written_again_byte_for_byte() {
        let (_d, s, records) = store_with(
            "t-0123456789ab.json",
            include_str!("testdata/ledger-record.json"),
        );
        // What the token watcher checks while it runs is not written.
        let mut kept = every_field();
        kept.reach.token_folders.clear();
        kept.reach.held.clear();
        assert_eq!(records, vec![kept]);
        let (e, was_running) = every_field().into_entry(99);
        assert!(!was_running);
        s.write(&e.record).unwrap();
        let again = std::fs::read_to_string(s.dir().join("t-0123456789ab.json")).unwrap();
        assert_eq!(again, include_str!("testdata/ledger-record.json"));
    }

    /// A record an earlier relay wrote (one token path, no account, no sandbox) reads
    /// back, its one path among the token paths, and is written again in today's form.
    #[test]
    fn an_earlier_record_reads_back_with_its_one_token_path() {
        let (_d, s, records) = store_with(
            "s-0123456789ab.json",
            include_str!("testdata/ledger-record-earlier.json"),
        );
        let [rec] = <[Record; 1]>::try_from(records).unwrap();
        let (e, was_running) = rec.into_entry(99);
        assert!(!was_running);
        assert_eq!(
            (
                e.record.state,
                e.record.account.as_deref(),
                e.record.sandbox.as_ref()
            ),
            (EntryState::Dormant, None, None)
        );
        let token = PathBuf::from("/home/ada/.config/relay/token");
        assert_eq!(e.record.reach.token_paths, vec![token]);
        s.write(&e.record).unwrap();
        let again = std::fs::read_to_string(s.dir().join("s-0123456789ab.json")).unwrap();
        assert!(!again.contains("\"token_path\""), "{again}");
        assert!(again.contains("\"token_paths\""), "{again}");
    }
}
