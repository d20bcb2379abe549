//! Descriptor hygiene before the target is spawned.
//!
//! Threat: whatever descriptor the shim inherited and leaves open reaches the target, and
//! bwrap forwards every inherited descriptor into the sandbox. A leaked socket to the
//! daemon or the host, a log file, a pipe of another session or the Landlock ruleset
//! would hand the sandboxed target a capability the profile denies, without any path
//! lookup the sandbox could check. So every descriptor above 2 is marked close-on-exec,
//! except fd 5 when the launch carries the token.
//!
//! Descriptors are only ever marked, never closed: closing would free their numbers for
//! reuse (std's exec-error pipe, for one, could land on fd 5) and could close a
//! descriptor the shim itself still uses.

use std::io;
use std::os::fd::RawFd;

/// The fd that carries the token pipe to the target with `--pass-token`.
pub(crate) const TOKEN_FD: RawFd = 5;

/// Highest descriptor number the fallback loop visits, whatever the rlimit says.
const FALLBACK_CAP: u64 = 65536;

/// Marks every descriptor above 2 close-on-exec; with `keep_token`, clears the flag on
/// fd 5 afterwards so the token pipe (and only it) survives exec.
pub(crate) fn mark_inherited_cloexec(keep_token: bool) -> io::Result<()> {
    if let Err(e) = close_range_cloexec() {
        match e.raw_os_error() {
            Some(libc::ENOSYS) | Some(libc::EINVAL) => fcntl_loop(fallback_limit(soft_nofile()?))?,
            _ => return Err(e),
        }
    }
    if keep_token {
        set_cloexec(TOKEN_FD, false)?;
    }
    Ok(())
}

/// Sets or clears FD_CLOEXEC on `fd`, keeping its other descriptor flags.
pub(crate) fn set_cloexec(fd: RawFd, on: bool) -> io::Result<()> {
    let flags = fd_flags(fd)?;
    let new = if on {
        flags | libc::FD_CLOEXEC
    } else {
        flags & !libc::FD_CLOEXEC
    };
    if new != flags {
        // Safety: F_SETFD takes an integer argument; no memory is passed.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, new) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The descriptor flags of `fd`; an error (EBADF) when it is not open.
pub(crate) fn fd_flags(fd: RawFd) -> io::Result<libc::c_int> {
    // Safety: F_GETFD takes no argument and only reads the descriptor table.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(flags)
}

/// Whether `fd` is an open descriptor.
pub(crate) fn is_open(fd: RawFd) -> bool {
    fd_flags(fd).is_ok()
}

/// The number of descriptors the fallback loop visits for a soft `RLIMIT_NOFILE` of
/// `soft` (`None` for unlimited).
fn fallback_limit(soft: Option<u64>) -> RawFd {
    let limit = soft.map_or(FALLBACK_CAP, |s| s.min(FALLBACK_CAP));
    RawFd::try_from(limit).unwrap_or(RawFd::MAX)
}

fn fcntl_loop(limit: RawFd) -> io::Result<()> {
    for fd in 3..limit {
        match set_cloexec(fd, true) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EBADF) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn soft_nofile() -> io::Result<Option<u64>> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // Safety: `lim` is a valid, writable rlimit for the kernel to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    #[allow(clippy::unnecessary_cast)]
    let cur = lim.rlim_cur as u64;
    Ok((lim.rlim_cur != libc::RLIM_INFINITY).then_some(cur))
}

#[cfg(target_os = "linux")]
fn close_range_cloexec() -> io::Result<()> {
    // Safety: close_range with CLOSE_RANGE_CLOEXEC takes integers only and changes flags,
    // it closes nothing.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn close_range_cloexec() -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_limit_is_bounded() {
        assert_eq!(fallback_limit(Some(1024)), 1024);
        assert_eq!(fallback_limit(Some(1 << 20)), 65536);
        assert_eq!(fallback_limit(None), 65536);
        assert_eq!(fallback_limit(Some(0)), 0);
    }

    #[test]
    fn set_cloexec_toggles_only_that_flag() {
        use std::os::fd::AsRawFd;
        let (r, _w) = nix::unistd::pipe().unwrap();
        let fd = r.as_raw_fd();
        set_cloexec(fd, false).unwrap();
        assert_eq!(fd_flags(fd).unwrap() & libc::FD_CLOEXEC, 0);
        set_cloexec(fd, true).unwrap();
        assert_ne!(fd_flags(fd).unwrap() & libc::FD_CLOEXEC, 0);
        assert!(is_open(fd));
    }
}
