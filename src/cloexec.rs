//! Close-on-exec descriptors on Linux and macOS alike, and the lock every fork takes.
//!
//! Threat: a descriptor that is not yet close-on-exec when another thread forks reaches
//! that child: the token pipe of one launch in the shim of another, the host's bearer
//! pipe in a `relay doctor` probe. Linux can make pipes and duplicates close-on-exec in
//! one call (`pipe2`, `dup3`); macOS cannot, so there a descriptor is made and then
//! marked. The daemon and the host are multi-threaded, so each of them makes such
//! descriptors, and forks, only while holding [`FORK_LOCK`]: no fork of theirs can fall
//! between the two calls. A [`ForkGuard`] is the proof of holding it.
//!
//! std makes its own descriptors the same way on macOS (the sockets it accepts, the
//! pipes of `Command`), outside this lock. The sweep a child runs before exec
//! ([`keep_only`]) is what keeps those out of it.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, MutexGuard};

/// Held around every fork of the daemon and the host, and around every descriptor they
/// make in two steps.
static FORK_LOCK: Mutex<()> = Mutex::new(());

/// Highest descriptor number the child's sweep visits, whatever the rlimit says.
const SWEEP_CAP: RawFd = 65536;

/// Proof that [`FORK_LOCK`] is held: no fork of this process happens until it drops.
pub struct ForkGuard {
    _held: MutexGuard<'static, ()>,
}

/// Takes [`FORK_LOCK`]; a poisoned lock is recovered (it guards no data).
pub fn lock() -> ForkGuard {
    ForkGuard {
        _held: FORK_LOCK.lock().unwrap_or_else(|p| p.into_inner()),
    }
}

impl ForkGuard {
    /// A pipe with both ends close-on-exec: `(read, write)`. std uses `pipe2` where it
    /// exists and marks the ends right after `pipe` elsewhere; this guard keeps every fork
    /// of ours out of that window.
    pub fn pipe(&self) -> io::Result<(OwnedFd, OwnedFd)> {
        let (r, w) = std::io::pipe()?;
        Ok((r.into(), w.into()))
    }

    /// Puts a duplicate of `src` on number `dst` (closing what was there), close-on-exec:
    /// `dup2`, then the flag, with no fork of ours in between.
    pub fn dup_onto(&self, src: RawFd, dst: RawFd) -> io::Result<()> {
        loop {
            // Safety: dup2 only changes the descriptor table; both are plain numbers and a
            // failure is reported through errno.
            if unsafe { libc::dup2(src, dst) } >= 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        set_cloexec(dst, true)
    }
}

/// Sets or clears FD_CLOEXEC on `fd`, keeping its other descriptor flags.
pub fn set_cloexec(fd: RawFd, on: bool) -> io::Result<()> {
    // Safety: F_GETFD takes no argument and only reads the descriptor table.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    let new = if on {
        flags | libc::FD_CLOEXEC
    } else {
        flags & !libc::FD_CLOEXEC
    };
    // Safety: F_SETFD takes an integer argument; no memory is passed.
    if new != flags && unsafe { libc::fcntl(fd, libc::F_SETFD, new) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `fd` is open and close-on-exec.
pub fn is_cloexec(fd: &impl AsRawFd) -> bool {
    // Safety: F_GETFD takes no argument and only reads the descriptor table.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
    flags >= 0 && flags & libc::FD_CLOEXEC != 0
}

/// How far a child's sweep goes: the soft `RLIMIT_NOFILE` (no descriptor can be open
/// at or above it unless the limit was lowered later), capped at 65536. Read in the
/// parent: the child only loops.
pub fn sweep_limit() -> RawFd {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // Safety: `lim` is a valid, writable rlimit for the kernel to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0
        || lim.rlim_cur == libc::RLIM_INFINITY
    {
        return SWEEP_CAP;
    }
    RawFd::try_from(lim.rlim_cur).map_or(SWEEP_CAP, |n| n.min(SWEEP_CAP))
}

/// Runs in a forked child before exec: marks every descriptor from 3 up close-on-exec,
/// then clears the flag on `keep`. `close_range` where the kernel has it, else an
/// `fcntl` loop below `limit` ([`sweep_limit`], read before the fork). Async-signal-safe:
/// it allocates nothing and calls only fcntl and close_range.
pub fn keep_only(keep: &[RawFd], limit: RawFd) -> io::Result<()> {
    if !close_range_cloexec(3) {
        mark_range(3, limit);
    }
    for &fd in keep {
        // Safety: F_SETFD with 0 clears close-on-exec; an integer argument, no memory.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Marks `from..limit` close-on-exec; numbers that are not open are skipped.
fn mark_range(from: RawFd, limit: RawFd) {
    for fd in from..limit {
        // Safety: fcntl on a descriptor number; EBADF on a closed one is ignored.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}

/// `close_range(from, ~0, CLOSE_RANGE_CLOEXEC)`; false where the kernel lacks it.
#[cfg(target_os = "linux")]
fn close_range_cloexec(from: RawFd) -> bool {
    let Ok(from) = u32::try_from(from) else {
        return false;
    };
    // Safety: close_range with the CLOEXEC flag only changes descriptor flags.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            from,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC as libc::c_uint,
        )
    };
    rc == 0
}

/// macOS has no close_range: the caller loops.
#[cfg(not(target_os = "linux"))]
fn close_range_cloexec(_from: RawFd) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipes_and_duplicates_are_close_on_exec() {
        let g = lock();
        let (r, w) = g.pipe().unwrap();
        assert!(is_cloexec(&r) && is_cloexec(&w));
        // dup2 onto a number clears the flag; dup_onto must set it again.
        let (spare, _w2) = g.pipe().unwrap();
        set_cloexec(spare.as_raw_fd(), false).unwrap();
        g.dup_onto(r.as_raw_fd(), spare.as_raw_fd()).unwrap();
        assert!(is_cloexec(&spare));
        // Same file: what is written to `w` is read from the duplicate.
        use std::io::{Read, Write};
        std::fs::File::from(w).write_all(b"x").unwrap();
        let mut got = [0u8; 1];
        std::fs::File::from(spare).read_exact(&mut got).unwrap();
        assert_eq!(&got, b"x");
    }

    #[test]
    fn sweep_limit_is_bounded() {
        let n = sweep_limit();
        assert!(n > 2 && n <= SWEEP_CAP, "{n}");
    }

    #[test]
    fn the_fallback_loop_marks_every_open_number_in_its_range() {
        // The loop macOS uses, run here on numbers no other test touches.
        let g = lock();
        let (r, _w) = g.pipe().unwrap();
        let high: Vec<RawFd> = vec![900, 903];
        for &n in &high {
            g.dup_onto(r.as_raw_fd(), n).unwrap();
            set_cloexec(n, false).unwrap();
        }
        drop(g);
        mark_range(900, 905);
        for &n in &high {
            // Safety: F_GETFD only reads the table.
            let flags = unsafe { libc::fcntl(n, libc::F_GETFD) };
            assert!(flags >= 0 && flags & libc::FD_CLOEXEC != 0, "fd {n}");
            // Safety: the test placed `n` itself and closes it once.
            unsafe { libc::close(n) };
        }
    }
}
