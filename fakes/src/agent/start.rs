//! The start line: what one launch of `fakeagent` was given.
//!
//! Tests read it to prove the fd table (`fds`), the environment a launch built (`env`,
//! `env_names`) and the token hand-off (`token_sha256`/`token_bytes`, or `token_error`).
//! The token itself is hashed as it is read and never stored, printed or logged; its
//! descriptor stays open afterwards so a grandchild can prove the pipe was drained.

use std::ffi::{CStr, OsStr, OsString};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::call_log::{self, JsonLine};

/// Call log file name under `$TMPDIR`.
pub const CALL_LOG: &str = "fakeagent-calls.jsonl";

/// The variable that names the token descriptor.
pub const TOKEN_FD_VAR: &str = "CLAUDE_CODE_OAUTH_TOKEN_FILE_DESCRIPTOR";

/// Names whose values the start line records (when set).
pub const WATCHED: &[&str] = &[
    "RELAY_SESSION_ID",
    TOKEN_FD_VAR,
    "CLAUDE_CODE_OAUTH_TOKEN",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDECODE",
    "CLAUDE_PID",
    "HOME",
    "TMPDIR",
    "PATH",
    "TERM",
    "RELAY_BRIDGE_SOCKET",
    "FAKEAGENT_TAG",
];

/// Most token bytes read (and hashed) from the token descriptor.
pub const MAX_TOKEN_BYTES: usize = 1024 * 1024;

/// What reading the token descriptor gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenRead {
    Read { sha256: String, bytes: usize },
    Error(&'static str),
}

/// Everything the start line records, captured at start.
#[derive(Debug, Clone)]
pub struct StartLine {
    pub pid: u32,
    pub argv: Vec<String>,
    pub cwd: Option<String>,
    pub env: Vec<(OsString, OsString)>,
    pub fds: Vec<i32>,
    pub isatty0: bool,
    /// `None` when the token variable is unset.
    pub token: Option<TokenRead>,
}

impl StartLine {
    /// Captures this process. `fds` must have been listed before anything was opened.
    pub fn capture(fds: Vec<i32>, argv: Vec<String>) -> Self {
        use std::io::IsTerminal;
        let token = std::env::var_os(TOKEN_FD_VAR).map(|value| read_token(&value));
        StartLine {
            pid: std::process::id(),
            argv,
            cwd: std::env::current_dir()
                .ok()
                .map(|dir| dir.to_string_lossy().into_owned()),
            env: std::env::vars_os().collect(),
            fds,
            isatty0: std::io::stdin().is_terminal(),
            token,
        }
    }

    /// The start line as one line of JSON.
    pub fn to_json(&self) -> String {
        let lossy = |s: &OsStr| s.to_string_lossy().into_owned();
        let mut watched = Map::new();
        for (name, value) in &self.env {
            if WATCHED.iter().any(|w| OsStr::new(w) == name) {
                watched.insert(lossy(name), Value::from(lossy(value)));
            }
        }
        let mut names: Vec<String> = self.env.iter().map(|(name, _)| lossy(name)).collect();
        names.sort();
        names.dedup();

        let line = JsonLine::new()
            .field("pid", self.pid)
            .field("argv", self.argv.clone())
            .field("cwd", self.cwd.clone())
            .field("env", watched)
            .field("env_names", names)
            .field("fds", self.fds.clone())
            .field("isatty0", self.isatty0);
        match &self.token {
            None => line,
            Some(TokenRead::Read { sha256, bytes }) => line
                .field("token_sha256", sha256.as_str())
                .field("token_bytes", *bytes),
            Some(TokenRead::Error(reason)) => line.field("token_error", *reason),
        }
        .finish()
    }
}

/// The descriptors open in this process, sorted. Call it before opening anything.
///
/// Lists `/proc/self/fd`, leaving out the descriptor of the listing itself; where there is
/// no `/proc` (macOS), probes each descriptor below the open-files limit instead.
pub fn open_fds() -> Vec<i32> {
    let mut fds = list_proc_fds().unwrap_or_else(probe_fds);
    fds.sort_unstable();
    fds
}

fn list_proc_fds() -> Option<Vec<i32>> {
    // std's read_dir hides its descriptor, and that one must be left out, so the listing
    // goes through libc's DIR stream, whose descriptor dirfd() names.
    // Safety: the path is a NUL-terminated literal.
    let dir = unsafe { libc::opendir(c"/proc/self/fd".as_ptr()) };
    if dir.is_null() {
        return None;
    }
    // Safety: `dir` is a live stream from opendir, closed only below.
    let own = unsafe { libc::dirfd(dir) };
    let mut fds = Vec::new();
    loop {
        // Safety: `dir` is a live stream; the entry stays valid until the next readdir or
        // closedir on it, and its name is copied out before either.
        let entry = unsafe { libc::readdir(dir) };
        if entry.is_null() {
            break;
        }
        // Safety: `entry` is non-null and its d_name is NUL-terminated.
        let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) };
        if let Some(fd) = name.to_str().ok().and_then(|n| n.parse::<i32>().ok()) {
            if fd != own {
                fds.push(fd);
            }
        }
    }
    // Safety: `dir` is a live stream, closed exactly once.
    unsafe { libc::closedir(dir) };
    Some(fds)
}

fn probe_fds() -> Vec<i32> {
    let limit = {
        let mut rlim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // Safety: `rlim` is a valid, writable rlimit for getrlimit to fill.
        let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rlim) } == 0;
        if ok {
            rlim.rlim_cur.min(65_536) as i32
        } else {
            1024
        }
    };
    (0..limit)
        // Safety: F_GETFD only reads the descriptor's flags; no memory is passed.
        .filter(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1)
        .collect()
}

/// Reads the token descriptor named by `value` until EOF (at most [`MAX_TOKEN_BYTES`]),
/// hashing as it goes. The descriptor is left open, its flags untouched.
pub fn read_token(value: &OsStr) -> TokenRead {
    let Some(fd) = value
        .to_str()
        .and_then(|v| v.parse::<i32>().ok())
        .filter(|fd| *fd >= 0)
    else {
        return TokenRead::Error("not a number");
    };
    // Safety: F_GETFD only reads the descriptor's flags; no memory is passed.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        return TokenRead::Error("bad descriptor");
    }
    let mut hasher = Sha256::new();
    let mut total = 0usize;
    let mut buf = [0u8; 8192];
    while total < MAX_TOKEN_BYTES {
        let want = buf.len().min(MAX_TOKEN_BYTES - total);
        // Safety: `buf` is a live, writable buffer of at least `want` bytes. The fd is read
        // with libc so that no owning File closes it on drop.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), want) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return TokenRead::Error("read error");
        }
        if n == 0 {
            break;
        }
        let n = n as usize;
        hasher.update(&buf[..n]);
        total += n;
    }
    buf.fill(0);
    TokenRead::Read {
        sha256: call_log::hex(&hasher.finalize()),
        bytes: total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    fn sample(token: Option<TokenRead>) -> StartLine {
        StartLine {
            pid: 42,
            argv: vec!["fakeagent".into(), "-p".into()],
            cwd: Some("/w".into()),
            env: vec![
                ("PATH".into(), "/bin".into()),
                ("SECRET_THING".into(), "hidden".into()),
                ("CLAUDECODE".into(), "1".into()),
                ("ANTHROPIC_API_KEY".into(), "k".into()),
            ],
            fds: vec![0, 1, 2, 5],
            isatty0: false,
            token,
        }
    }

    #[test]
    fn start_line_records_watched_values_and_every_name() {
        let line = sample(None).to_json();
        assert!(line.starts_with(r#"{"pid":42,"argv":["fakeagent","-p"],"cwd":"/w","#));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            v["env"],
            serde_json::json!({"PATH": "/bin", "CLAUDECODE": "1", "ANTHROPIC_API_KEY": "k"})
        );
        assert_eq!(
            v["env_names"],
            serde_json::json!(["ANTHROPIC_API_KEY", "CLAUDECODE", "PATH", "SECRET_THING"])
        );
        assert!(!line.contains("hidden"));
        assert_eq!(v["fds"], serde_json::json!([0, 1, 2, 5]));
        assert_eq!(v["isatty0"], false);
        assert!(v.get("token_sha256").is_none() && v.get("token_error").is_none());
    }

    #[test]
    fn start_line_carries_token_digest_or_error() {
        let read = TokenRead::Read {
            sha256: "ab".into(),
            bytes: 10,
        };
        let v: Value = serde_json::from_str(&sample(Some(read)).to_json()).unwrap();
        assert_eq!(
            (v["token_sha256"].as_str(), v["token_bytes"].as_u64()),
            (Some("ab"), Some(10))
        );
        let v: Value =
            serde_json::from_str(&sample(Some(TokenRead::Error("bad descriptor"))).to_json())
                .unwrap();
        assert_eq!(v["token_error"], "bad descriptor");
        assert!(v.get("token_sha256").is_none());
    }

    #[test]
    fn token_is_hashed_to_eof_and_the_fd_stays_open() {
        let (reader, mut writer) = std::io::pipe().unwrap();
        writer.write_all(b"secret-abc").unwrap();
        drop(writer);
        let fd = reader.as_raw_fd().to_string();
        assert_eq!(
            read_token(OsStr::new(&fd)),
            TokenRead::Read {
                sha256: call_log::sha256_hex(b"secret-abc"),
                bytes: 10
            }
        );
        // Still open, and drained: a second reader sees EOF at once.
        assert_eq!(
            read_token(OsStr::new(&fd)),
            TokenRead::Read {
                sha256: call_log::sha256_hex(b""),
                bytes: 0
            }
        );
    }

    #[test]
    fn token_variable_errors() {
        assert_eq!(
            read_token(OsStr::new("five")),
            TokenRead::Error("not a number")
        );
        assert_eq!(
            read_token(OsStr::new("-1")),
            TokenRead::Error("not a number")
        );
        assert_eq!(read_token(OsStr::new("")), TokenRead::Error("not a number"));
        assert_eq!(
            read_token(OsStr::new("987654")),
            TokenRead::Error("bad descriptor")
        );
        let (_reader, writer) = std::io::pipe().unwrap();
        let fd = writer.as_raw_fd().to_string();
        assert_eq!(read_token(OsStr::new(&fd)), TokenRead::Error("read error"));
    }

    #[test]
    fn open_fds_sees_an_open_descriptor_sorted() {
        let (reader, _writer) = std::io::pipe().unwrap();
        let fds = open_fds();
        assert!(fds.contains(&reader.as_raw_fd()));
        assert!(fds.windows(2).all(|w| w[0] < w[1]));
    }
}
