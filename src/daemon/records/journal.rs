//! The audit log and the event log: JSON lines in the config dir (0600), one write per
//! line. Events are also kept in memory with a sequence number so API clients (and the
//! tests) can wait for the next one instead of polling a file.
//!
//! Neither ever holds the token or an identity secret: rows are built from the fields
//! below only, and request-supplied strings are capped.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::Value;
use tokio::sync::Notify;

/// Request-supplied strings longer than this are cut (on a char boundary) with `…`.
pub const STRING_CAP: usize = 256;
const EVENTS_KEPT: usize = 4096;

pub fn cap(s: &str) -> String {
    crate::text::cut(s, STRING_CAP)
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// An append-only JSON-lines file (0600, never through a link), kept open between
/// lines: a line needs no new descriptor, so descriptor pressure cannot lose it. The
/// file is opened again when its path no longer names the open file (removed or
/// replaced) and after a failed write.
struct LineFile {
    path: PathBuf,
    file: Mutex<Option<File>>,
}

impl LineFile {
    fn new(path: PathBuf) -> Self {
        LineFile {
            path,
            file: Mutex::new(None),
        }
    }

    fn open(&self) -> io::Result<File> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.path)
    }

    /// Whether the open file is still the one at the path.
    fn still_there(&self, f: &File) -> bool {
        match (f.metadata(), std::fs::symlink_metadata(&self.path)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }

    fn ensure_open(&self) -> io::Result<()> {
        let mut slot = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().is_some_and(|f| !self.still_there(f)) {
            *slot = None;
        }
        if slot.is_none() {
            *slot = Some(self.open()?);
        }
        Ok(())
    }

    fn append(&self, value: &Value) -> io::Result<()> {
        let mut line = serde_json::to_vec(value)?;
        line.push(b'\n');
        let mut slot = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if slot.as_ref().is_some_and(|f| !self.still_there(f)) {
            *slot = None;
        }
        let file = match slot.as_mut() {
            Some(f) => f,
            None => slot.insert(self.open()?),
        };
        // One write(2) per line under O_APPEND: lines never interleave.
        let written = file.write_all(&line);
        if written.is_err() {
            *slot = None;
        }
        written
    }
}

/// Attempts and pauses for an audit row: a row that cannot be written after these is
/// an error the caller acts on (a launch is refused).
const AUDIT_RETRIES: [Duration; 2] = [Duration::from_millis(20), Duration::from_millis(100)];

/// An audit row as the daemon writes it: the one row type (`wire::AuditRow`), its fixed
/// words `&'static str`; `ts` is set by [`Audit::record`].
pub type AuditRow = crate::wire::AuditRow<&'static str>;

pub struct Audit {
    file: LineFile,
}

impl Audit {
    pub fn new(path: PathBuf) -> Self {
        Audit {
            file: LineFile::new(path),
        }
    }

    /// Opens the log at start-up, so later rows need no new descriptor.
    pub fn open(&self) -> io::Result<()> {
        self.file.ensure_open()
    }

    /// Appends one row, trying again twice (after 20 and 100 ms) when the write fails.
    /// An `Err` means the row is not on disk; the launch path refuses the launch then,
    /// other callers log it.
    pub fn record(&self, row: &AuditRow) -> io::Result<()> {
        let mut v = serde_json::to_value(row).unwrap_or(Value::Null);
        if let Some(obj) = v.as_object_mut() {
            for s in obj.values_mut() {
                if let Value::String(text) = s {
                    *text = cap(text);
                }
            }
            obj.insert("ts".into(), now_ms().into());
        }
        let mut result = self.file.append(&v);
        for pause in AUDIT_RETRIES {
            if result.is_ok() {
                break;
            }
            std::thread::sleep(pause);
            result = self.file.append(&v);
        }
        result.map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.file.path.display())))
    }

    pub fn path(&self) -> &PathBuf {
        &self.file.path
    }
}

/// An event as the daemon emits it: the one event type (`wire::Event`), its fixed words
/// `&'static str`; `seq` and `ts` are set by [`Events::emit`].
pub type Event = crate::wire::Event<&'static str>;

/// One kept event: its `seq` and the line as written.
type Kept = (u64, Box<str>);

pub struct Events {
    file: LineFile,
    /// The last sequence number and the kept events as their JSON text: a text is a
    /// third of a parsed event's heap, and the ring's 4,096 of them are most of what a
    /// long run of launches adds to the daemon (docs/performance.md, "1,000 sequential
    /// launches"); only an answer parses them back.
    inner: Mutex<(u64, VecDeque<Kept>)>,
    notify: Notify,
}

impl Events {
    pub fn new(path: PathBuf) -> Self {
        Events {
            file: LineFile::new(path),
            inner: Mutex::new((0, VecDeque::new())),
            notify: Notify::new(),
        }
    }

    pub fn emit(&self, ev: &Event) {
        let mut v = serde_json::to_value(ev).unwrap_or(Value::Null);
        {
            let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            inner.0 += 1;
            if let Some(obj) = v.as_object_mut() {
                for s in obj.values_mut() {
                    if let Value::String(text) = s {
                        *text = cap(text);
                    }
                }
                obj.insert("seq".into(), inner.0.into());
                obj.insert("ts".into(), now_ms().into());
            }
            if let Err(e) = self.file.append(&v) {
                crate::listen::log(format_args!(
                    "relay: write {}: {e}",
                    self.file.path.display()
                ));
            }
            // The line as written, kept when it reads back as the readers' type (it
            // always does).
            let seq = inner.0;
            match crate::wire::Event::<String>::deserialize(&v) {
                Ok(_) => inner.1.push_back((seq, v.to_string().into_boxed_str())),
                Err(e) => crate::listen::log(format_args!("relay: event {}: {e}", ev.name)),
            }
            if inner.1.len() > EVENTS_KEPT {
                inner.1.pop_front();
            }
        }
        self.notify.notify_waiters();
    }

    /// Opens the log at start-up, so later lines need no new descriptor.
    pub fn open(&self) -> io::Result<()> {
        self.file.ensure_open()
    }

    pub fn last_seq(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    fn after(&self, seq: u64) -> Vec<crate::wire::Event> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .1
            .iter()
            .filter(|(n, _)| *n > seq)
            .filter_map(|(_, text)| serde_json::from_str(text).ok())
            .collect()
    }

    /// [`Events::wait_for`] as JSON values (for callers that look at one field).
    pub async fn wait_after(&self, seq: u64, wait: Duration) -> Vec<Value> {
        self.wait_for(seq, wait)
            .await
            .iter()
            .filter_map(|e| serde_json::to_value(e).ok())
            .collect()
    }

    /// Events with a sequence number above `seq`, waiting up to `wait` for one.
    pub async fn wait_for(&self, seq: u64, wait: Duration) -> Vec<crate::wire::Event> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let found = self.after(seq);
            if !found.is_empty() {
                return found;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Vec::new();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Code, Outcome};

    #[test]
    fn cap_cuts_long_strings_on_a_char_boundary() {
        assert_eq!(cap("short"), "short");
        let long = "é".repeat(300);
        let c = cap(&long);
        assert!(c.len() <= STRING_CAP + "…".len());
        assert!(c.ends_with('…'));
    }

    #[test]
    fn a_row_follows_a_replaced_log_and_an_unwritable_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let audit = Audit::new(path.clone());
        audit.open().unwrap();
        let row = |action| AuditRow {
            action,
            outcome: Outcome::Allowed,
            ..Default::default()
        };
        audit.record(&row("one")).unwrap();
        // Moved away (rotated): the next row goes to a new file at the path.
        std::fs::rename(&path, dir.path().join("old.jsonl")).unwrap();
        audit.record(&row("two")).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("\"two\"") && !text.contains("\"one\""),
            "{text}"
        );
        // A folder in its place: the row cannot be written, and says where.
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        let e = audit.record(&row("three")).unwrap_err();
        assert!(e.to_string().contains("audit.jsonl"), "{e}");
        std::fs::remove_dir(&path).unwrap();
        audit.record(&row("four")).unwrap();
        assert!(std::fs::read_to_string(&path).unwrap().contains("\"four\""));
    }

    #[test]
    fn audit_rows_match_the_frozen_fixture_shape() {
        let fixture = include_str!("testdata/audit-line.json");
        let v: Value = serde_json::from_str(fixture).unwrap();
        for key in ["ts", "action", "outcome"] {
            assert!(v.get(key).is_some(), "{key}");
        }
        let row = AuditRow {
            action: "session_launch",
            outcome: Outcome::Error,
            code: Some(Code::SandboxUnavailable),
            ..Default::default()
        };
        let mine = serde_json::to_value(&row).unwrap();
        assert_eq!(mine["action"], v["action"]);
        assert_eq!(mine["outcome"], v["outcome"]);
        assert_eq!(mine["code"], v["code"]);
    }
}
