//! What a killed host leaves behind, ended by the next host
//! (docs/session-host.md#when-a-parent-dies).
//!
//! Every shim leads a session of its own (`setsid`), and what a launch starts stays in
//! that session until bwrap's inner process has set the sandbox up. Parent-death
//! signals take the shim, its target and a set-up sandbox down with a killed host; one
//! process slips through: bwrap's inner process, forked an instant before its parent
//! died and before it armed its own parent-death signal, waits for that parent forever
//! (it never runs the tool, but it is a sandbox nobody ends). So the host keeps one
//! file per live shim of a bwrap launch in `<state>/shims/`, named by the shim's pid and
//! holding the boot it ran in and its start time, removed once the shim is reaped. A
//! host starting up reads what a killed one left there and kills every process that is
//! all of: of the same user, inside a pid namespace below the host's (bwrap's inner
//! process is pid 1 of the sandbox's), in the session of a shim that is gone, and
//! started within [`LAUNCH_WINDOW_SECS`] of that shim. Then it forgets the records of
//! the shims that are gone (a live one's stays, for a later sweep).
//!
//! Why nothing else is hit: only sandboxes qualify (a job a person left running from
//! an unsandboxed terminal, `nohup` and all, is in the host's own pid namespace, and
//! unsandboxed launches leave no record); a session id stays taken while any process
//! is in that session, so its number cannot go to a new process meanwhile; records of
//! an earlier boot are dropped; a process of a later session that reused the number
//! after ours emptied would have to start within seconds of our shim, which needs the
//! whole pid range to wrap in that time; and the host itself and its parent are never
//! candidates.
//!
//! macOS has no parent-death signal and no bwrap: there the shim and its target outlive
//! a killed host and daemon (docs/macos.md), no record is written and nothing is swept.

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
    /// In a pid namespace below the reader's (`NSpid:` has more than one number).
    nested: bool,
}

/// The processes to kill: those of `uid`, in a nested pid namespace, in the session of
/// a shim that is gone (`gone`: its pid and start time), started no earlier than it and
/// within `window` ticks after it; never one of `spared` (the host and its parent).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn strays(procs: &[Proc], gone: &[(u32, u64)], uid: u32, window: u64, spared: &[u32]) -> Vec<u32> {
    procs
        .iter()
        .filter(|p| p.uid == uid && p.nested && !spared.contains(&p.pid))
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

/// The fields of a `/proc/<pid>/stat` line from the third on (state, ppid, pgrp,
/// session, …): those after the command's closing parenthesis (the command may hold
/// spaces and parentheses).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    Some(stat[stat.rfind(')')? + 1..].split_whitespace().collect())
}

/// The session id and start time from a `/proc/<pid>/stat` line.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn session_and_start(stat: &str) -> Option<(u32, u64)> {
    let fields = stat_fields(stat)?;
    // state(3) ppid(4) pgrp(5) session(6) … starttime(22): indices from field 3.
    let session = fields.get(6 - 3)?.parse().ok()?;
    let start = fields.get(22 - 3)?.parse().ok()?;
    Some((session, start))
}

/// The real uid from `/proc/<pid>/status` (`Uid:` real, effective, saved, fs) and
/// whether the process is in a pid namespace below the reader's (`NSpid:` lists its
/// pid in each namespace from the reader's down).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn uid_and_nested(status: &str) -> Option<(u32, bool)> {
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name));
    let uid = field("Uid:")?.split_whitespace().next()?.parse().ok()?;
    let nested = field("NSpid:").is_some_and(|ns| ns.split_whitespace().count() > 1);
    Some((uid, nested))
}

/// The most a record holds; anything longer is not one.
const RECORD_MAX: u64 = 256;

/// A record's text, read without following a link, without blocking on a FIFO and only
/// from a plain file of at most [`RECORD_MAX`] bytes (the folder is the user's own).
fn read_record(path: &std::path::Path) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = f.metadata().ok()?;
    if !meta.is_file() || meta.len() > RECORD_MAX {
        return None;
    }
    let mut text = String::new();
    f.take(RECORD_MAX).read_to_string(&mut text).ok()?;
    Some(text)
}

/// A record's file name as a pid: the plain decimal a record is written with, and
/// nothing else (`0123` or `+123` are not records).
fn pid_of_name(name: &str) -> Option<u32> {
    let pid: u32 = name.parse().ok()?;
    (pid.to_string() == name && pid > 1).then_some(pid)
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
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.dir.join(pid.to_string());
        let text = platform::this_shim(pid)
            .map(|r| r.to_text())
            .unwrap_or_default();
        // Never through a link planted at the name.
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()));
        match written {
            Ok(()) => Some(ShimRecord { path }),
            Err(e) => {
                tracing::warn!("shim record {}: {e}", path.display());
                None
            }
        }
    }

    /// Ends what the shims recorded by a host that is gone left running, and forgets
    /// their records (a live shim's stays). Called once, before this host starts any
    /// shim. Returns how many processes it killed.
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
            let pid = entry.file_name().to_str().and_then(pid_of_name);
            if pid.is_some_and(platform::alive) {
                // Its host may be ending it still; a later sweep has it.
                continue;
            }
            let record = read_record(&path).and_then(|t| Record::parse(&t));
            if let (Some(pid), Some(record), Some(boot)) = (pid, record, boot.as_deref()) {
                if record.boot == boot {
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
    use super::{
        session_and_start, stat_fields, strays, uid_and_nested, Proc, Record, LAUNCH_WINDOW_SECS,
    };

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
            .and_then(|stat| stat_fields(&stat)?.first().map(|state| *state != "Z"))
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
                let (uid, nested) = uid_and_nested(&status)?;
                let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
                let (session, start) = session_and_start(&stat)?;
                Some(Proc {
                    pid,
                    session,
                    start,
                    uid,
                    nested,
                })
            })
            .collect()
    }

    pub fn kill_strays(gone: &[(u32, u64)]) -> usize {
        // Safety: sysconf and getuid take no pointers.
        let (ticks, uid) = unsafe { (libc::sysconf(libc::_SC_CLK_TCK), libc::getuid()) };
        let window = LAUNCH_WINDOW_SECS * u64::try_from(ticks).unwrap_or(100).max(1);
        let spared = [std::process::id(), std::os::unix::process::parent_id()];
        let found = strays(&processes(), gone, uid, window, &spared);
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
            nested: true,
        }
    }

    #[test]
    fn only_a_sandboxed_process_of_a_gone_shims_session_started_just_after_it_is_stray() {
        let mut host_ns = p(205, 100, 5_000, 1000); // a job left from a plain terminal
        host_ns.nested = false;
        let procs = [
            p(200, 100, 5_000, 1000), // the stray: in shim 100's session, just after it
            p(201, 100, 5_010, 1000), // another
            p(300, 300, 5_000, 1000), // a leader of its own session
            p(202, 100, 4_999, 1000), // started before the shim: not its
            p(203, 100, 8_001, 1000), // long after: a later session of the same number
            p(204, 100, 5_000, 0),    // another user's
            p(100, 100, 5_000, 1000), // the leader itself (not gone after all)
            host_ns,
            p(206, 100, 5_000, 1000), // spared: the host itself, say
        ];
        let gone = [(100, 5_000)];
        assert_eq!(strays(&procs, &gone, 1000, 3_000, &[206]), vec![200, 201]);
        assert!(strays(&procs, &[], 1000, 3_000, &[]).is_empty());
    }

    #[test]
    fn a_record_name_is_a_plain_pid() {
        assert_eq!(pid_of_name("4242"), Some(4242));
        for bad in ["0123", "+123", "1", "0", "-5", "12a", ""] {
            assert_eq!(pid_of_name(bad), None, "{bad}");
        }
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
    fn the_real_uid_and_the_pid_namespaces_come_from_status() {
        let status =
            "Name:\tbwrap\nUid:\t1000\t0\t0\t0\nGid:\t1000\t1000\t1000\t1000\nNSpid:\t4242\t1\n";
        assert_eq!(uid_and_nested(status), Some((1000, true)));
        let plain = "Name:\tsleep\nUid:\t1000\t1000\t1000\t1000\nNSpid:\t4243\n";
        assert_eq!(uid_and_nested(plain), Some((1000, false)));
        assert_eq!(uid_and_nested("Name:\tx\n"), None);
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
    fn this_process_reads_as_its_own_record_and_hostile_records_are_not_read() {
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
        // A record of a live process (this one) stays for a later sweep; nothing killed.
        let rec = shims.record(me).expect("written");
        assert_eq!(shims.sweep(), 0);
        assert!(dir.join(me.to_string()).exists());
        drop(rec);
        // A FIFO, a link and an oversized file under record names of no process: none
        // is read (nothing blocks), all are forgotten.
        let fifo = dir.join("4194301");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // Safety: mkfifo with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink("/dev/zero", dir.join("4194302")).unwrap();
        std::fs::write(dir.join("4194303"), vec![b'x'; 4096]).unwrap();
        assert_eq!(read_record(&fifo), None);
        assert_eq!(read_record(&dir.join("4194302")), None);
        assert_eq!(shims.sweep(), 0);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        // A link planted at a record's name is not written through.
        let target = std::env::temp_dir().join(format!("relay-strays-target-{me}"));
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, dir.join(me.to_string())).unwrap();
        assert!(shims.record(me).is_none());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        let _ = std::fs::remove_file(dir.join(me.to_string()));
        let _ = std::fs::remove_file(&target);
        let _ = std::fs::remove_dir(&dir);
    }
}
