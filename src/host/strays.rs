//! What a killed host leaves behind, ended by the next host
//! (docs/session-host.md#when-a-parent-dies).
//!
//! Every shim leads a session of its own (`setsid`), and what a launch starts stays in
//! that session until bwrap's inner process has set the sandbox up. Parent-death
//! signals take the shim, its target and a set-up sandbox down with a killed host; one
//! process slips through: bwrap's inner process, forked an instant before its parent
//! died and before it armed its own parent-death signal, waits for that parent forever
//! (it never runs the tool, but it is a sandbox nobody ends). So the host keeps one
//! file per live shim in `<state>/shims/`, named by the shim's pid and holding the boot
//! it ran in and its start time, removed once the shim is reaped. A host starting up
//! reads what a killed one left there and kills every process of the same user still
//! in the session of a shim that is gone and started within [`LAUNCH_WINDOW_SECS`] of
//! that shim, then forgets the files.
//!
//! Why nothing else is hit: a session id stays taken while any process is in that
//! session, so its number cannot go to a new process meanwhile; records of an earlier
//! boot are dropped; and a process of a later session that reused the number after
//! ours emptied would have to start within seconds of our shim, which needs the whole
//! pid range to wrap in that time.
//!
//! macOS has no parent-death signal: there the shim and its target outlive a killed
//! host and daemon (docs/macos.md), the shim is alive, and the files are only removed.

use std::io;
use std::path::PathBuf;

/// How long after its shim a stray may have started: bwrap forks its inner process at
/// once, so seconds are plenty.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub const LAUNCH_WINDOW_SECS: u64 = 30;

/// The folder of shim records.
pub struct Shims {
    dir: PathBuf,
}

/// One live shim's record; removed when dropped (after the shim is reaped).
pub struct ShimRecord {
    path: PathBuf,
}

impl Drop for ShimRecord {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!("shim record {}: {e}", self.path.display());
            }
        }
    }
}

/// A record as written: the boot it was written in and the shim's start time (clock
/// ticks since boot), both as Linux reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    boot: String,
    start: u64,
}

impl Record {
    fn to_text(&self) -> String {
        format!("boot={}\nstart={}\n", self.boot, self.start)
    }

    fn parse(text: &str) -> Option<Record> {
        let mut boot = None;
        let mut start = None;
        for line in text.lines() {
            match line.split_once('=') {
                Some(("boot", v)) => boot = Some(v.to_string()),
                Some(("start", v)) => start = v.parse().ok(),
                _ => {}
            }
        }
        Some(Record {
            boot: boot.filter(|b| !b.is_empty())?,
            start: start?,
        })
    }
}

/// One process as the sweep sees it.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Proc {
    pid: u32,
    session: u32,
    start: u64,
    uid: u32,
}

/// The processes to kill: those of `uid` in the session of a shim that is gone
/// (`gone`: its pid and start time), started no earlier than it and within `window`
/// ticks after it.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn strays(procs: &[Proc], gone: &[(u32, u64)], uid: u32, window: u64) -> Vec<u32> {
    procs
        .iter()
        .filter(|p| p.uid == uid)
        .filter(|p| {
            gone.iter().any(|&(leader, start)| {
                p.session == leader
                    && p.pid != leader
                    && p.start >= start
                    && p.start - start <= window
            })
        })
        .map(|p| p.pid)
        .collect()
}

/// The session id and start time from `/proc/<pid>/stat`: the fields after the
/// command's closing parenthesis (the command may hold spaces and parentheses).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn session_and_start(stat: &str) -> Option<(u32, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // state(3) ppid(4) pgrp(5) session(6) … starttime(22): indices from field 3.
    let session = fields.get(6 - 3)?.parse().ok()?;
    let start = fields.get(22 - 3)?.parse().ok()?;
    Some((session, start))
}

/// The real uid from `/proc/<pid>/status` (`Uid:` real, effective, saved, fs).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn real_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|u| u.parse().ok())
}

impl Shims {
    pub fn open(dir: PathBuf) -> io::Result<Shims> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)?;
        Ok(Shims { dir })
    }

    /// Records a shim just started. A record that cannot be written is a warning: the
    /// launch goes on (what it guards against needs a host killed at that very moment).
    pub fn record(&self, pid: u32) -> Option<ShimRecord> {
        let path = self.dir.join(pid.to_string());
        let text = platform::this_shim(pid)
            .map(|r| r.to_text())
            .unwrap_or_default();
        match std::fs::write(&path, text) {
            Ok(()) => Some(ShimRecord { path }),
            Err(e) => {
                tracing::warn!("shim record {}: {e}", path.display());
                None
            }
        }
    }

    /// Ends what the shims recorded by a host that is gone left running, and forgets
    /// their records. Called once, before this host starts any shim. Returns how many
    /// processes it killed.
    pub fn sweep(&self) -> usize {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("shim records {}: {e}", self.dir.display());
                return 0;
            }
        };
        let mut gone = Vec::new();
        let mut files = Vec::new();
        let boot = platform::boot_id();
        for entry in entries.flatten() {
            let path = entry.path();
            let pid = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok());
            let record = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| Record::parse(&t));
            if let (Some(pid), Some(record), Some(boot)) = (pid, record, boot.as_deref()) {
                if record.boot == boot && pid > 1 && !platform::alive(pid) {
                    gone.push((pid, record.start));
                }
            }
            files.push(path);
        }
        let killed = if gone.is_empty() {
            0
        } else {
            platform::kill_strays(&gone)
        };
        for f in files {
            let _ = std::fs::remove_file(&f);
        }
        killed
    }
}

#[cfg(target_os = "linux")]
mod platform {
    use super::{real_uid, session_and_start, strays, Proc, Record, LAUNCH_WINDOW_SECS};

    pub fn boot_id() -> Option<String> {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }

    fn start_of(pid: u32) -> Option<u64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        session_and_start(&stat).map(|(_, start)| start)
    }

    pub fn this_shim(pid: u32) -> Option<Record> {
        Some(Record {
            boot: boot_id()?,
            start: start_of(pid)?,
        })
    }

    /// Whether `pid` is a process that still runs: a zombie is gone (a killed host's
    /// shim stays one until whoever inherited it reaps it), and so is a process whose
    /// stat cannot be read.
    pub fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                let rest = &stat[stat.rfind(')')? + 1..];
                rest.split_whitespace().next().map(|state| state != "Z")
            })
            .unwrap_or(false)
    }

    fn processes() -> Vec<Proc> {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.flatten()
            .filter_map(|e| {
                let pid: u32 = e.file_name().to_str()?.parse().ok()?;
                // The real uid from `status`: the owner of `/proc/<pid>` reads as root
                // for a process that is not dumpable.
                let status = std::fs::read_to_string(e.path().join("status")).ok()?;
                let uid = real_uid(&status)?;
                let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
                let (session, start) = session_and_start(&stat)?;
                Some(Proc {
                    pid,
                    session,
                    start,
                    uid,
                })
            })
            .collect()
    }

    pub fn kill_strays(gone: &[(u32, u64)]) -> usize {
        // Safety: sysconf and getuid take no pointers.
        let (ticks, uid) = unsafe { (libc::sysconf(libc::_SC_CLK_TCK), libc::getuid()) };
        let window = LAUNCH_WINDOW_SECS * u64::try_from(ticks).unwrap_or(100).max(1);
        let found = strays(&processes(), gone, uid, window);
        for &pid in &found {
            // Safety: kill(2) on a process found above; no memory.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        found.len()
    }
}

#[cfg(not(target_os = "linux"))]
mod platform {
    use super::Record;

    pub fn boot_id() -> Option<String> {
        None
    }

    pub fn this_shim(_pid: u32) -> Option<Record> {
        None
    }

    pub fn alive(_pid: u32) -> bool {
        true
    }

    pub fn kill_strays(_gone: &[(u32, u64)]) -> usize {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: u32, session: u32, start: u64, uid: u32) -> Proc {
        Proc {
            pid,
            session,
            start,
            uid,
        }
    }

    #[test]
    fn only_a_gone_shims_session_of_this_user_started_just_after_it_is_stray() {
        let procs = [
            p(200, 100, 5_000, 1000), // the stray: in shim 100's session, just after it
            p(201, 100, 5_010, 1000), // another
            p(300, 300, 5_000, 1000), // a leader of its own session
            p(202, 100, 4_999, 1000), // started before the shim: not its
            p(203, 100, 8_001, 1000), // long after: a later session of the same number
            p(204, 100, 5_000, 0),    // another user's
            p(100, 100, 5_000, 1000), // the leader itself (not gone after all)
        ];
        let gone = [(100, 5_000)];
        assert_eq!(strays(&procs, &gone, 1000, 3_000), vec![200, 201]);
        assert!(strays(&procs, &[], 1000, 3_000).is_empty());
    }

    #[test]
    fn the_stat_line_is_read_after_the_last_parenthesis() {
        // A command name with spaces and parentheses, as a process may choose.
        let stat = "4242 (we ird) (x) S 1 4240 4240 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 \
                    98765 1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(session_and_start(stat), Some((4240, 98_765)));
        assert_eq!(session_and_start("garbage"), None);
        assert_eq!(session_and_start("1 (short) S 1"), None);
    }

    #[test]
    fn the_real_uid_is_the_first_of_the_uid_line() {
        let status =
            "Name:\tbwrap\nUmask:\t0022\nUid:\t1000\t0\t0\t0\nGid:\t1000\t1000\t1000\t1000\n";
        assert_eq!(real_uid(status), Some(1000));
        assert_eq!(real_uid("Name:\tx\n"), None);
    }

    #[test]
    fn a_record_reads_back_and_a_damaged_one_does_not() {
        let r = Record {
            boot: "b0a7".into(),
            start: 77,
        };
        assert_eq!(Record::parse(&r.to_text()), Some(r));
        assert_eq!(Record::parse(""), None);
        assert_eq!(Record::parse("boot=\nstart=1\n"), None);
        assert_eq!(Record::parse("boot=x\nstart=y\n"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reads_as_its_own_record() {
        let me = std::process::id();
        let r = platform::this_shim(me).expect("a record of this process");
        assert_eq!(Some(r.boot.clone()), platform::boot_id());
        assert!(platform::alive(me));
        let dir = std::env::temp_dir().join(format!("relay-strays-{me}"));
        let shims = Shims::open(dir.clone()).unwrap();
        let rec = shims.record(me).expect("written");
        assert!(dir.join(me.to_string()).exists());
        drop(rec);
        assert!(!dir.join(me.to_string()).exists());
        // A record left for a live process (this one) is forgotten and nothing killed.
        let rec = shims.record(me).expect("written");
        std::mem::forget(rec);
        assert_eq!(shims.sweep(), 0);
        assert!(!dir.join(me.to_string()).exists());
        let _ = std::fs::remove_dir(&dir);
    }
}
