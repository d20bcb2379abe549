//! Descriptor placement for the shim's fd table.
//!
//! Threat: a descriptor the host holds (a socket, another session's pty master, the
//! token pipe of a concurrent launch) reaching a shim and from there a sandboxed target,
//! or the token pipe landing on the wrong number.
//!
//! Trap (measured, DESIGN.md section 3): std's `Command` keeps an internal close-on-exec
//! pipe to report exec failures. If that pipe lands on 3, 4, 5 or 6 and `pre_exec`
//! `dup2`s onto that number, `spawn()` returns Ok for a missing binary. So the host
//! keeps 3..=6 occupied by `/dev/null` placeholders for its whole life: the error pipe
//! can never take one of those numbers. A launch stages its pipes onto the numbers in
//! the parent (still close-on-exec, under [`SPAWN_LOCK`]), the child's `pre_exec` only
//! clears close-on-exec on the numbers of the table, and the parent puts the
//! placeholders back right after `spawn()`.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

/// The table's numbers above 2.
pub const TABLE_FDS: [RawFd; 4] = [3, 4, 5, 6];
/// Where the shim finds the Landlock ruleset, when there is one.
pub const LANDLOCK_FD: RawFd = 6;
/// Where the target finds the token pipe.
pub const TOKEN_FD: RawFd = 5;

/// Serializes staging + spawn + restore, so two launches never share the numbers.
pub static SPAWN_LOCK: Mutex<()> = Mutex::new(());

fn dev_null() -> io::Result<std::fs::File> {
    std::fs::OpenOptions::new().read(true).open("/dev/null")
}

fn dup_onto(src: RawFd, dst: RawFd) -> io::Result<()> {
    // Safety: dup3 only manipulates the descriptor table; both numbers are plain ints
    // and a failure is reported through errno.
    let rc = unsafe { libc::dup3(src, dst, libc::O_CLOEXEC) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Occupies 3..=6 with close-on-exec `/dev/null`. Call once at start, before any
/// thread or socket exists (after reading the start secret, which may sit on one of
/// those numbers).
pub fn reserve_placeholders() -> io::Result<()> {
    let null = dev_null()?;
    for fd in TABLE_FDS {
        if fd != null.as_raw_fd() {
            dup_onto(null.as_raw_fd(), fd)?;
        }
    }
    // `null` itself may have landed on one of the numbers; make sure that number
    // still holds a placeholder once `null` is dropped.
    let own = null.as_raw_fd();
    drop(null);
    if TABLE_FDS.contains(&own) {
        let again = dev_null()?;
        if again.as_raw_fd() != own {
            dup_onto(again.as_raw_fd(), own)?;
        } else {
            std::mem::forget(again);
        }
    }
    Ok(())
}

/// One launch's descriptors, keyed by the number each must have in the shim.
#[derive(Default)]
pub struct Staging {
    pub entries: Vec<(RawFd, OwnedFd)>,
}

impl Staging {
    pub fn put(&mut self, number: RawFd, fd: OwnedFd) {
        self.entries.push((number, fd));
    }

    pub fn numbers(&self) -> Vec<RawFd> {
        self.entries.iter().map(|(n, _)| *n).collect()
    }

    /// Places every entry on its number (close-on-exec still set). The caller holds
    /// [`SPAWN_LOCK`] and calls [`restore_placeholders`] after spawning.
    pub fn stage(&self) -> io::Result<()> {
        for (number, fd) in &self.entries {
            debug_assert!(TABLE_FDS.contains(number));
            dup_onto(fd.as_raw_fd(), *number)?;
        }
        Ok(())
    }
}

/// Puts `/dev/null` back on 3..=6, dropping the host's staged copies.
pub fn restore_placeholders() -> io::Result<()> {
    let null = dev_null()?;
    for fd in TABLE_FDS {
        if fd != null.as_raw_fd() {
            dup_onto(null.as_raw_fd(), fd)?;
        }
    }
    let own = null.as_raw_fd();
    if TABLE_FDS.contains(&own) {
        std::mem::forget(null);
    }
    Ok(())
}

/// Runs in the forked child before exec: clear close-on-exec on the table's numbers,
/// mark everything from 7 up close-on-exec (tokio opens its descriptors close-on-exec
/// already; this is belt and braces). Async-signal-safe: fcntl and close_range only.
pub fn child_keep(keep: &[RawFd]) -> io::Result<()> {
    for &fd in keep {
        // Safety: fcntl on a descriptor number; no memory is touched.
        let rc = unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    #[cfg(target_os = "linux")]
    {
        // Safety: close_range with the CLOEXEC flag only changes descriptor flags.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_close_range,
                7u32,
                u32::MAX,
                libc::CLOSE_RANGE_CLOEXEC as libc::c_uint,
            )
        };
        if rc < 0 {
            for fd in 7..1024 {
                // Safety: as above; EBADF on closed numbers is ignored.
                unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
            }
        }
    }
    Ok(())
}
