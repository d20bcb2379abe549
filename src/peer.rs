//! Who is calling: the pid at the other end of a unix socket, and a process's parent.
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

#[cfg(test)]
mod tests {
    use super::*;

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
