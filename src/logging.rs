//! Diagnostics of the daemon and the host through `tracing` ([architecture.md](../docs/architecture.md#logs)).
//!
//! Each process writes its own log file, capped: `<config>/relay.log` for the daemon,
//! `<config>/sessions/host.log` for the host. When a file would pass [`CAP`] bytes it
//! is renamed to `<name>.1` (replacing the one before) and a new one is started, so a
//! process keeps at most twice the cap on disk. The same lines, up to `info`, go to
//! stderr as `relay: <message>` (`relay-sessions: …` for the host), as before.
//!
//! The level is `relay serve --log-level`, else `RUST_LOG`, else `info`; both take a
//! level (`debug`) or `target=level` pairs (`relay::daemon=debug,info`). The host gets
//! the daemon's choice on its command line.
//!
//! Lines carry ids, paths, sizes, codes and errors, never a payload or a secret: the
//! token and bearers are [`crate::protocol::Secret`]s, whose `Debug` is their length.
//! The audit log and the event log are not logs in this sense and stay as they are.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use tracing::{Event, Subscriber};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// A log file's size before it is renamed to `<name>.1`.
pub const CAP: u64 = 8 * 1024 * 1024;

/// The target of lines meant for the log file alone (a process's start line): stderr
/// keeps the form it always had.
pub const FILE_ONLY: &str = "relay_log_file";

/// The level when neither the flag nor `RUST_LOG` names one.
pub const DEFAULT_LEVEL: &str = "info";

/// The filter text in force: `flag`, else a non-empty `RUST_LOG`, else [`DEFAULT_LEVEL`].
pub fn choose_level(flag: Option<&str>) -> String {
    flag.map(str::to_string)
        .or_else(|| {
            std::env::var("RUST_LOG")
                .ok()
                .filter(|v| !v.trim().is_empty())
        })
        .unwrap_or_else(|| DEFAULT_LEVEL.to_string())
}

/// Reads a filter: a level, or `target=level` pairs with an optional bare default.
pub fn parse_level(text: &str) -> Result<Targets, String> {
    // `Targets` takes a bare word as a target to enable; here a bare word must be a
    // level, so `loud` is refused rather than read as a target named "loud".
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let level = part.rsplit_once('=').map_or(part, |(_, l)| l);
        if level.parse::<LevelFilter>().is_err() {
            return Err(format!(
                "log level {text:?}: {level:?} is not a level (a level: error, warn, info, debug, trace)"
            ));
        }
    }
    text.parse::<Targets>()
        .map_err(|e| format!("log level {text:?}: {e} (a level: error, warn, info, debug, trace)"))
}

/// The filter text [`init`] put in force, for the host's command line.
static LEVEL: OnceLock<String> = OnceLock::new();

pub fn level() -> Option<String> {
    LEVEL.get().cloned()
}

/// Sets the process's subscriber: the capped file at `path` and stderr, each line on
/// stderr starting `prefix: `. Called once, before the runtime starts.
/// When the file cannot be opened, lines go to stderr only and the error is returned
/// (after the subscriber is set, so the caller can log it).
pub fn init(prefix: &'static str, path: &Path, text: &str) -> Result<(), String> {
    let filter = parse_level(text)?;
    let _ = LEVEL.set(text.to_string());
    let (file, file_error) = match CappedFile::open(path.to_path_buf(), CAP) {
        Ok(f) => (Some(f), None),
        Err(e) => (None, Some(e)),
    };
    let file_layer = file.map(|f| {
        tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(Mutex::new(f))
            .with_filter(filter.clone())
    });
    // Debug and trace lines go to the file only.
    let stderr_layer = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(io::stderr)
        .event_format(Prefixed(prefix))
        .with_filter(filter)
        .with_filter(LevelFilter::INFO)
        .with_filter(tracing_subscriber::filter::filter_fn(|m| {
            m.target() != FILE_ONLY
        }));
    tracing_subscriber::registry()
        .with(file_layer)
        .with(stderr_layer)
        .try_init()
        .map_err(|e| format!("log: {e}"))?;
    match file_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// `prefix: message fields…`, the stderr form the daemon and host always printed.
struct Prefixed(&'static str);

impl<S, N> FormatEvent<S, N> for Prefixed
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(writer, "{}: ", self.0)?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// A log file that is renamed to `<name>.1` when it would pass its cap. Created 0600
/// at open time, never through a link. A failed write is dropped (the process goes on).
pub struct CappedFile {
    path: PathBuf,
    cap: u64,
    file: Option<File>,
    len: u64,
}

fn open_log(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    above_table(file)
}

/// The lowest number a log file may hold: the host puts placeholders on the numbers
/// of a launch's descriptor table (3–5, `src/host/fds.rs`) after its log is open, so
/// a log left there would be replaced by `/dev/null`.
const LOG_FD_MIN: i32 = 16;

/// `file` moved to a number at or above [`LOG_FD_MIN`], close-on-exec.
fn above_table(file: File) -> io::Result<File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    if file.as_raw_fd() >= LOG_FD_MIN {
        return Ok(file);
    }
    // Safety: fcntl(F_DUPFD_CLOEXEC) on a descriptor this function owns; no memory.
    let moved = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_DUPFD_CLOEXEC, LOG_FD_MIN) };
    if moved < 0 {
        return Err(io::Error::last_os_error());
    }
    // Safety: `moved` is a new descriptor from fcntl that nothing else owns.
    Ok(unsafe { File::from_raw_fd(moved) })
}

impl CappedFile {
    pub fn open(path: PathBuf, cap: u64) -> Result<CappedFile, String> {
        let file = open_log(&path).map_err(|e| format!("log file {}: {e}", path.display()))?;
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(CappedFile {
            path,
            cap,
            file: Some(file),
            len,
        })
    }

    /// The file before this one: `<name>.1`.
    pub fn previous(path: &Path) -> PathBuf {
        let mut name = path.as_os_str().to_os_string();
        name.push(".1");
        PathBuf::from(name)
    }

    fn rotate(&mut self) -> io::Result<()> {
        self.file = None;
        std::fs::rename(&self.path, Self::previous(&self.path))?;
        self.file = Some(open_log(&self.path)?);
        self.len = 0;
        Ok(())
    }
}

impl Write for CappedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.len > 0 && self.len + buf.len() as u64 > self.cap {
            // A failed rotation keeps writing where it can (or nowhere).
            if self.rotate().is_err() && self.file.is_none() {
                self.file = open_log(&self.path).ok();
            }
        }
        if let Some(f) = self.file.as_mut() {
            f.write_all(buf)?;
            self.len += buf.len() as u64;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.as_mut().map_or(Ok(()), |f| f.flush())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_past_its_cap_becomes_dot_1_and_a_new_one_starts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relay.log");
        let mut f = CappedFile::open(path.clone(), 100).unwrap();
        f.write_all(&[b'a'; 60]).unwrap();
        f.write_all(&[b'b'; 60]).unwrap();
        f.write_all(&[b'c'; 30]).unwrap();
        f.write_all(&[b'd'; 60]).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), vec![b'd'; 60]);
        let prev = std::fs::read(CappedFile::previous(&path)).unwrap();
        assert_eq!(prev, [vec![b'b'; 60], vec![b'c'; 30]].concat());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_link_in_place_of_the_log_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, "").unwrap();
        let path = dir.path().join("relay.log");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(CappedFile::open(path, 100).is_err());
    }

    #[test]
    fn levels_and_targets_parse_and_nonsense_is_refused() {
        for ok in ["debug", "info", "relay::daemon=debug,warn", "trace"] {
            assert!(parse_level(ok).is_ok(), "{ok}");
        }
        let e = parse_level("loud").unwrap_err();
        assert!(e.contains("\"loud\""), "{e}");
        assert_eq!(choose_level(Some("warn")), "warn");
    }
}
