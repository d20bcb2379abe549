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
use std::path::{Path, PathBuf};
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

/// A log file grows to this size, then it is rotated (docs/routes.md#logs-and-their-bounds).
pub const LOG_MAX_BYTES: u64 = 8 * 1024 * 1024;
/// Rotated generations kept beside a log: `<name>.1` (the newest) to `<name>.3`.
pub const LOG_GENERATIONS: usize = 3;

/// The path of a log's rotated generation `n` (1 is the newest).
pub fn generation(path: &Path, n: usize) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// An append-only JSON-lines file (0600, never through a link), kept open between
/// lines: a line needs no new descriptor, so descriptor pressure cannot lose it. The
/// file is opened again when its path no longer names the open file (removed or
/// replaced) and after a failed write. Once it holds more than `max_bytes` it is
/// rotated: `<name>.2` becomes `<name>.3`, …, the file itself `<name>.1`, the oldest
/// dropped, and the next line starts a new file.
struct LineFile {
    path: PathBuf,
    file: Mutex<Option<File>>,
    max_bytes: u64,
}

impl LineFile {
    fn new(path: PathBuf) -> Self {
        LineFile {
            path,
            file: Mutex::new(None),
            max_bytes: LOG_MAX_BYTES,
        }
    }

    /// Shifts the generations and moves the file to `<name>.1`; the caller drops its
    /// descriptor. A failed rename leaves the file to grow until the next line tries
    /// again: no line is lost to a rotation.
    fn rotate(&self) {
        for n in (1..LOG_GENERATIONS).rev() {
            let _ = std::fs::rename(generation(&self.path, n), generation(&self.path, n + 1));
        }
        if let Err(e) = std::fs::rename(&self.path, generation(&self.path, 1)) {
            crate::listen::log(format_args!("relay: rotate {}: {e}", self.path.display()));
        }
    }

    /// Opens the file for appending. One that ends mid-line (a row an earlier relay was
    /// cut off in) gets its line ended first, so the next row is a line of its own.
    fn open(&self) -> io::Result<File> {
        use std::os::unix::fs::FileExt;
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.path)?;
        let len = f.metadata()?.len();
        let mut last = [0u8; 1];
        if len > 0 && f.read_at(&mut last, len - 1).is_ok() && last[0] != b'\n' {
            f.write_all(b"\n")?;
        }
        Ok(f)
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
        // One write(2) per line under O_APPEND: lines never interleave. A line a full
        // disk cut short is taken back, so the next one is whole on a line of its own.
        let before = file.metadata().map(|m| m.len());
        let written = file.write_all(&line);
        if written.is_err() {
            if let Ok(len) = before {
                let _ = file.set_len(len);
            }
            *slot = None;
        } else if file.metadata().is_ok_and(|m| m.len() > self.max_bytes) {
            self.rotate();
            *slot = None;
        }
        written
    }
}

/// The last lines of a log and its rotated generations, newest first, that `keep`
/// accepts: at most `max_lines` of them, reading at most `max_bytes` from the ends of
/// the files (newest file first), never a whole file. A line cut by the byte bound is
/// left out.
pub fn tail(
    path: &Path,
    max_lines: usize,
    max_bytes: u64,
    keep: impl Fn(&str) -> bool,
) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut out = Vec::new();
    let mut budget = max_bytes;
    for n in 0..=LOG_GENERATIONS {
        if out.len() >= max_lines || budget == 0 {
            break;
        }
        let p = if n == 0 {
            path.to_path_buf()
        } else {
            generation(path, n)
        };
        let Ok(mut f) = File::open(&p) else { continue };
        let Ok(len) = f.metadata().map(|m| m.len()) else {
            continue;
        };
        let from = len.saturating_sub(budget);
        if f.seek(SeekFrom::Start(from)).is_err() {
            continue;
        }
        let mut bytes = Vec::new();
        if f.take(budget).read_to_end(&mut bytes).is_err() {
            continue;
        }
        budget = budget.saturating_sub(bytes.len() as u64);
        let text = String::from_utf8_lossy(&bytes);
        let mut lines: Vec<&str> = text.lines().collect();
        if from > 0 && !lines.is_empty() {
            // Begun mid-line.
            lines.remove(0);
        }
        for line in lines.into_iter().rev() {
            if out.len() >= max_lines {
                break;
            }
            if keep(line) {
                out.push(line.to_string());
            }
        }
    }
    out
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
    fn a_row_a_full_disk_cuts_short_is_taken_back_and_a_cut_line_left_before_is_ended() {
        // A file size limit stands in for a full disk: the write that would pass it
        // writes what fits, then fails. It is the whole process's: alone.
        crate::alone::alone(
            &format!(
                "{}::a_row_a_full_disk_cuts_short_is_taken_back_and_a_cut_line_left_before_is_ended",
                module_path!()
            ),
            || {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("audit.jsonl");
                let log = LineFile::new(path.clone());
                let row = |n: u32| serde_json::json!({ "n": n, "pad": "x".repeat(100) });
                let limit = |bytes: u64| {
                    let l = libc::rlimit {
                        rlim_cur: bytes,
                        rlim_max: libc::RLIM_INFINITY,
                    };
                    // Safety: sets this process's own limit from a valid struct.
                    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &l) }, 0);
                };
                // Safety: SIGXFSZ ignored in this child alone, so a write past the
                // limit fails with EFBIG instead of ending the process.
                unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
                limit(1000);
                let mut n = 0;
                while log.append(&row(n)).is_ok() {
                    n += 1;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                assert!(text.ends_with('\n'), "a row cut short stayed: {text:?}");
                assert_eq!(text.lines().count(), n as usize);
                limit(libc::RLIM_INFINITY);
                log.append(&row(n)).unwrap();
                // A line cut off by an earlier relay: ended before the next row.
                let mut f = OpenOptions::new().append(true).open(&path).unwrap();
                f.write_all(b"{\"n\": 99, \"cut").unwrap();
                drop(f);
                LineFile::new(path.clone()).append(&row(100)).unwrap();
                let text = std::fs::read_to_string(&path).unwrap();
                let last = text.lines().last().unwrap();
                let v: serde_json::Value = serde_json::from_str(last).unwrap();
                assert_eq!(v["n"], 100, "{text}");
                let parsed = text
                    .lines()
                    .filter(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
                    .count();
                assert_eq!(parsed, n as usize + 2, "{text}");
            },
        );
    }

    #[test]
    fn a_log_rotates_at_its_size_keeping_three_generations_and_loses_no_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut log = LineFile::new(path.clone());
        log.max_bytes = 100;
        // Each line is 19 bytes: the sixth goes over 100 and rotates.
        let line = |n: u32| serde_json::json!({ "n": format!("{n:0>10}") });
        for n in 0..30 {
            log.append(&line(n)).unwrap();
        }
        let lines = |p: &Path| {
            std::fs::read_to_string(p)
                .unwrap_or_default()
                .lines()
                .count()
        };
        assert_eq!(lines(&path), 0, "the 30th line rotated the file away");
        for g in 1..=LOG_GENERATIONS {
            assert_eq!(lines(&generation(&path, g)), 6, "generation {g}");
        }
        assert!(!generation(&path, LOG_GENERATIONS + 1).exists());
        log.append(&line(30)).unwrap();
        assert_eq!(lines(&path), 1);
        // Newest first, across the generations, bounded by lines.
        let last = tail(&path, 8, u64::MAX, |_| true);
        let ns: Vec<String> = last
            .iter()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["n"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        let want: Vec<String> = (23..=30).rev().map(|n| format!("{n:0>10}")).collect();
        assert_eq!(ns, want);
        // Bounded by bytes: a line cut at the bound is left out, never half read.
        assert_eq!(tail(&path, 100, 19, |_| true).len(), 1);
        assert_eq!(tail(&path, 100, 18, |_| true).len(), 0);
        assert_eq!(tail(&path, 100, 45, |_| true).len(), 2);
        // Filtered, and the generations read until the lines are found.
        let odd_digit = |l: &str| {
            l.trim_end_matches("\"}")
                .ends_with(['1', '3', '5', '7', '9'])
        };
        let odd = tail(&path, 5, u64::MAX, odd_digit);
        assert_eq!(odd.len(), 5, "{odd:?}");
        assert!(
            odd[0].contains("0000000029") && odd[4].contains("0000000021"),
            "{odd:?}"
        );
        // The oldest lines went with the fourth generation.
        assert_eq!(tail(&path, 100, u64::MAX, |_| true).len(), 19);
        assert!(tail(&dir.path().join("none"), 10, 100, |_| true).is_empty());
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
