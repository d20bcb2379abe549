//! Who is calling: the pid at the other end of a unix socket, and a process's parent;
//! and, for the egress proxy's lifeline, the launcher of the sandbox a process runs in
//! and whether it still runs.
//! The two kernel facts the daemon's inside-session check and the host's parent check
//! rest on (docs/THREAT-MODEL.md, "Callers inside a session"); the decisions built on
//! them live with their callers and are tested there through seams.
//!
//! | fact | Linux | macOS |
//! |---|---|---|
//! | peer pid | `SO_PEERCRED` | `LOCAL_PEERPID` (`SOL_LOCAL`) |
//! | parent pid | `/proc/<pid>/stat` | `proc_pidinfo(PROC_PIDTBSDINFO)` |
//!
//! On macOS relay asks for `LOCAL_PEERPID`, the process that connected, itself: tokio's
//! `peer_cred` reports `LOCAL_PEEREPID`, the pid the peer acts on behalf of.

use std::os::fd::AsFd;

/// The pid of the process that connected `sock`, when the kernel says.
#[cfg(target_os = "linux")]
pub fn peer_pid(sock: &impl AsFd) -> Option<u32> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let cred = getsockopt(sock, PeerCredentials).ok()?;
    u32::try_from(cred.pid()).ok().filter(|p| *p > 0)
}

/// The pid of the process that connected `sock`, when the kernel says.
#[cfg(target_os = "macos")]
pub fn peer_pid(sock: &impl AsFd) -> Option<u32> {
    use nix::sys::socket::{getsockopt, sockopt::LocalPeerPid};
    let pid = getsockopt(sock, LocalPeerPid).ok()?;
    u32::try_from(pid).ok().filter(|p| *p > 0)
}

/// The parent pid of `pid`, from `/proc/<pid>/stat`; None when the process is gone.
#[cfg(target_os = "linux")]
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parent_from_stat(&stat)
}

/// The parent pid field of a `/proc/<pid>/stat` line. The command name may hold spaces
/// and parentheses: the fields are read after the last `)`.
#[cfg(any(target_os = "linux", test))]
fn parent_from_stat(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The parent pid of `pid`, from `proc_pidinfo(PROC_PIDTBSDINFO)`; None when the process
/// is gone or not ours to inspect.
#[cfg(target_os = "macos")]
pub fn parent_of(pid: u32) -> Option<u32> {
    let pid = libc::c_int::try_from(pid).ok()?;
    // Safety: proc_bsdinfo is plain integers and byte arrays; all zeroes is a valid value.
    let mut info: libc::proc_bsdinfo = unsafe { std::mem::zeroed() };
    let size = libc::c_int::try_from(std::mem::size_of::<libc::proc_bsdinfo>()).ok()?;
    // Safety: the buffer is `info`, writable and exactly `size` bytes; the call writes at
    // most that many and returns how many it wrote.
    let wrote =
        unsafe { libc::proc_pidinfo(pid, libc::PROC_PIDTBSDINFO, 0, (&raw mut info).cast(), size) };
    (wrote == size).then_some(info.pbi_ppid)
}

/// One process, told from a later one given the same pid by its start time (clock ticks
/// after boot, `/proc/<pid>/stat`'s 22nd field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Process {
    pub pid: u32,
    pub start: u64,
}

/// The fields of a `/proc/<pid>/stat` line after the command name (from the state on),
/// which may hold spaces and parentheses.
#[cfg(any(target_os = "linux", test))]
fn stat_fields(stat: &str) -> Vec<&str> {
    stat.rfind(')')
        .map_or(vec![], |at| stat[at + 1..].split_whitespace().collect())
}

/// The state letter and the start time of a `/proc/<pid>/stat` line.
#[cfg(any(target_os = "linux", test))]
fn state_and_start(stat: &str) -> Option<(char, u64)> {
    let fields = stat_fields(stat);
    let state = fields.first()?.chars().next()?;
    Some((state, fields.get(19)?.parse().ok()?))
}

/// How deep in nested pid namespaces a `/proc/<pid>/status` says the process is: the
/// number of its `NSpid` entries (1 outside every sandbox).
#[cfg(any(target_os = "linux", test))]
fn pid_depth(status: &str) -> Option<usize> {
    let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
    Some(line.split_whitespace().count()).filter(|n| *n > 0)
}

/// Whether a `/proc/<pid>/stat` line is of `p`, still running: the same start time,
/// and neither a zombie nor dead.
#[cfg(any(target_os = "linux", test))]
fn runs_by_stat(p: Process, stat: &str) -> bool {
    state_and_start(stat)
        .is_some_and(|(state, start)| start == p.start && !matches!(state, 'Z' | 'X' | 'x'))
}

/// The process that started the pid namespace `pid` lives in, seen from this process's
/// own: the first of `pid` and its ancestors that is no deeper in nested pid
/// namespaces than this process. For the process a bwrap sandbox runs first, its
/// launcher, bwrap's outer process (the one its shim started). `pid` itself when it is
/// in this process's namespace; None when the walk finds a process gone.
#[cfg(target_os = "linux")]
pub fn launcher_of(pid: u32) -> Option<Process> {
    let depth = |pid: u32| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        pid_depth(&status)
    };
    let own = depth(std::process::id())?;
    let mut cur = pid;
    // Each nested namespace adds a bwrap init between a sandbox and its launcher: a few
    // steps at most.
    for _ in 0..16 {
        if depth(cur)? <= own {
            let stat = std::fs::read_to_string(format!("/proc/{cur}/stat")).ok()?;
            let (_, start) = state_and_start(&stat)?;
            return Some(Process { pid: cur, start });
        }
        cur = parent_of(cur).filter(|p| *p > 1)?;
    }
    None
}

/// No pid namespaces, no sandbox launcher to find (no proxied sandbox with a forwarder
/// runs here).
#[cfg(not(target_os = "linux"))]
pub fn launcher_of(_pid: u32) -> Option<Process> {
    None
}

/// Whether `p` still runs: the same process (its start time), not a zombie.
#[cfg(target_os = "linux")]
pub fn still_runs(p: Process) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", p.pid))
        .is_ok_and(|stat| runs_by_stat(p, &stat))
}

#[cfg(not(target_os = "linux"))]
pub fn still_runs(_p: Process) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_and_status_lines_give_the_state_the_start_and_the_depth() {
        // `/proc/<pid>/stat`: pid (comm) state ppid … starttime is the 22nd field.
        let line = |comm: &str, state: char, start: u64| {
            let mut f: Vec<String> = (4..=21).map(|n| n.to_string()).collect();
            f.push(start.to_string());
            f.push("23".into());
            format!("42 ({comm}) {state} {}", f.join(" "))
        };
        assert_eq!(state_and_start(&line("sh", 'S', 777)), Some(('S', 777)));
        assert_eq!(state_and_start(&line("a) Z (b", 'R', 9)), Some(('R', 9)));
        assert_eq!(state_and_start("42 (sh) S 1 2 3"), None);
        assert_eq!(state_and_start("42 sh S"), None);
        let p = Process {
            pid: 42,
            start: 777,
        };
        assert!(runs_by_stat(p, &line("sh", 'S', 777)));
        assert!(runs_by_stat(p, &line("sh", 'D', 777)));
        // A zombie, a dead one, or another process given the same pid.
        for gone in [
            line("sh", 'Z', 777),
            line("sh", 'X', 777),
            line("sh", 'x', 777),
            line("sh", 'S', 778),
        ] {
            assert!(!runs_by_stat(p, &gone), "{gone}");
        }
        assert!(!runs_by_stat(p, ""));
        // `/proc/<pid>/status`: one NSpid entry per pid namespace, outermost first.
        assert_eq!(pid_depth("Name:\tsh\nNSpid:\t4300\n"), Some(1));
        assert_eq!(pid_depth("NSpid:\t4300\t2\nNSpgid:\t1\n"), Some(2));
        assert_eq!(pid_depth("NSpid:\t4300\t7\t2"), Some(3));
        assert_eq!(pid_depth("NSpid:"), None);
        assert_eq!(pid_depth("Name:\tsh"), None);
    }

    /// The real kernel: this test's own child, in this test's pid namespace, is its own
    /// launcher; it runs until it is reaped, not once it is a zombie; a pid that is no
    /// process has none.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_child_in_this_namespace_is_its_own_launcher_and_runs_until_it_ends() {
        let mut child = std::process::Command::new("cat")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let me = launcher_of(std::process::id()).unwrap();
        assert_eq!(me.pid, std::process::id());
        assert!(still_runs(me));
        let p = launcher_of(child.id()).unwrap();
        assert_eq!(p.pid, child.id());
        assert!(still_runs(p));
        assert!(!still_runs(Process {
            start: p.start + 1,
            ..p
        }));
        // Its stdin closed, it ends: a zombie until it is reaped (waited for without
        // reaping: WNOWAIT), then nothing.
        drop(child.stdin.take());
        // Safety: siginfo_t is plain data, all zeroes a valid value; waitid writes it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // Safety: waitid on this test's own child, into `info`, which outlives the call.
        let waited =
            unsafe { libc::waitid(libc::P_PID, p.pid, &mut info, libc::WEXITED | libc::WNOWAIT) };
        assert_eq!(waited, 0);
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", p.pid)).unwrap();
        assert_eq!(state_and_start(&stat).map(|(s, _)| s), Some('Z'));
        assert!(!still_runs(p));
        child.wait().unwrap();
        assert!(!still_runs(p));
        assert_eq!(launcher_of(p.pid), None);
        assert_eq!(launcher_of(u32::MAX), None);
    }

    #[test]
    fn parent_of_this_process_is_its_parent() {
        let me = std::process::id();
        let parent = nix::unistd::getppid().as_raw() as u32;
        assert_eq!(parent_of(me), Some(parent));
        assert_eq!(parent_of(u32::MAX), None);
    }

    #[test]
    fn stat_lines_with_odd_command_names() {
        assert_eq!(parent_from_stat("42 (sh) S 7 42 42 0"), Some(7));
        assert_eq!(parent_from_stat("42 (a) b) (c) S 9 42 42 0"), Some(9));
        assert_eq!(parent_from_stat("42 (x y z) R 1 1 1"), Some(1));
        assert_eq!(parent_from_stat("42 sh S 7"), None);
        assert_eq!(parent_from_stat("42 (sh) S"), None);
    }

    #[test]
    fn peer_pid_of_a_socketpair_is_this_process() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(peer_pid(&a), Some(std::process::id()));
    }
}
