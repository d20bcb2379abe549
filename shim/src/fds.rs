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
//!
//! How every descriptor is found: on Linux `close_range` marks the whole range at once
//! (a loop to the soft `RLIMIT_NOFILE` on kernels before 5.11); macOS has neither
//! `close_range` nor `/proc/self/fd`, so the kernel lists the open descriptors
//! (`proc_pidinfo(PROC_PIDLISTFDS)`) and each is marked. The listing and the loop are
//! both unit-tested on Linux.

use std::io;
use std::os::fd::RawFd;

/// The fd that carries the token pipe to the target with `--pass-token`.
pub const TOKEN_FD: RawFd = 5;
/// The fd of the identity secret pipe with `--identity`.
pub const IDENTITY_FD: RawFd = 3;

/// The status pipe without `--status-fd`: the first fd after the identity pipe.
pub fn default_status_fd(identity: bool) -> RawFd {
    if identity {
        IDENTITY_FD + 1
    } else {
        IDENTITY_FD
    }
}

/// Highest descriptor number the fallback loop visits, whatever the rlimit says.
#[cfg(any(target_os = "linux", test))]
const FALLBACK_CAP: u64 = 65536;

/// Marks every descriptor above 2 close-on-exec; with `keep_token`, clears the flag on
/// fd 5 afterwards so the token pipe (and only it) survives exec.
pub(crate) fn mark_inherited_cloexec(keep_token: bool) -> io::Result<()> {
    sweep()?;
    if keep_token {
        set_cloexec(TOKEN_FD, false)?;
    }
    Ok(())
}

/// Linux: `close_range(3, ~0, CLOSE_RANGE_CLOEXEC)`, or on a kernel without it a loop up
/// to the soft `RLIMIT_NOFILE`.
#[cfg(target_os = "linux")]
fn sweep() -> io::Result<()> {
    match close_range_cloexec() {
        Ok(()) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EINVAL)) => {
            fcntl_loop(3, fallback_limit(soft_nofile()?))
        }
        Err(e) => Err(e),
    }
}

/// macOS has neither close_range nor `/proc/self/fd`: the kernel lists this process's
/// open descriptors (`proc_pidinfo(PROC_PIDLISTFDS)`) and each one above 2 is marked.
/// The listing is exact, so a descriptor above the rlimit is marked too. A failed
/// listing fails the launch.
#[cfg(target_os = "macos")]
fn sweep() -> io::Result<()> {
    mark_listed(&listed_fds(proc_list_fds)?)
}

/// One entry of a `PROC_PIDLISTFDS` answer: `struct proc_fdinfo` of `<sys/proc_info.h>`.
#[cfg(any(target_os = "macos", test))]
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct FdInfo {
    fd: i32,
    _kind: u32,
}

#[cfg(target_os = "macos")]
const _: () = assert!(std::mem::size_of::<FdInfo>() == std::mem::size_of::<libc::proc_fdinfo>());

/// Most entries the listing asks room for (8 MiB): far above any descriptor limit.
#[cfg(any(target_os = "macos", test))]
const LISTING_CAP: usize = 1 << 20;

/// Lists open descriptors through `fill`, which writes entries into the slice and
/// answers how many bytes it wrote (`proc_pidinfo`'s answer). A full buffer may have
/// been cut short, so the buffer grows and the question is asked again.
#[cfg(any(target_os = "macos", test))]
fn listed_fds(fill: impl Fn(&mut [FdInfo]) -> io::Result<usize>) -> io::Result<Vec<RawFd>> {
    let mut room = 256;
    loop {
        let mut buf = vec![FdInfo::default(); room];
        let n = fill(&mut buf)? / std::mem::size_of::<FdInfo>();
        if n < room {
            return Ok(buf[..n].iter().map(|e| e.fd).collect());
        }
        if room >= LISTING_CAP {
            return Err(io::Error::other(format!(
                "more than {LISTING_CAP} open descriptors"
            )));
        }
        room *= 4;
    }
}

/// `proc_pidinfo(getpid(), PROC_PIDLISTFDS)` into `buf`: the bytes written.
#[cfg(target_os = "macos")]
fn proc_list_fds(buf: &mut [FdInfo]) -> io::Result<usize> {
    let bytes = libc::c_int::try_from(std::mem::size_of_val(buf))
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // Safety: the buffer is `buf`, writable and exactly `bytes` long, of entries laid out
    // as the kernel's proc_fdinfo (checked above); the call writes at most `bytes`.
    let wrote = unsafe {
        libc::proc_pidinfo(
            libc::getpid(),
            libc::PROC_PIDLISTFDS,
            0,
            buf.as_mut_ptr().cast(),
            bytes,
        )
    };
    if wrote <= 0 {
        // 0 cannot be right: the shim holds at least its status pipe.
        let e = io::Error::last_os_error();
        return Err(if e.raw_os_error() == Some(0) {
            io::Error::other("the descriptor listing was empty")
        } else {
            e
        });
    }
    usize::try_from(wrote).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Marks each listed descriptor above 2 close-on-exec.
#[cfg(any(target_os = "macos", test))]
fn mark_listed(fds: &[RawFd]) -> io::Result<()> {
    for &fd in fds.iter().filter(|fd| **fd > 2) {
        set_cloexec(fd, true)?;
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
#[cfg(any(target_os = "linux", test))]
fn fallback_limit(soft: Option<u64>) -> RawFd {
    let limit = soft.map_or(FALLBACK_CAP, |s| s.min(FALLBACK_CAP));
    RawFd::try_from(limit).unwrap_or(RawFd::MAX)
}

/// Marks `from..limit` close-on-exec; numbers that are not open are skipped.
#[cfg(any(target_os = "linux", test))]
fn fcntl_loop(from: RawFd, limit: RawFd) -> io::Result<()> {
    for fd in from..limit {
        match set_cloexec(fd, true) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EBADF) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(any(target_os = "linux", test))]
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
        // Asking again for what is already there changes nothing, both ways.
        set_cloexec(fd, true).unwrap();
        assert_eq!(fd_flags(fd).unwrap(), libc::FD_CLOEXEC);
        set_cloexec(fd, false).unwrap();
        assert_eq!(fd_flags(fd).unwrap(), 0);
        set_cloexec(fd, false).unwrap();
        assert_eq!(fd_flags(fd).unwrap(), 0);
        drop(r);
        assert!(!is_open(fd));
        assert_eq!(
            set_cloexec(fd, true).unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
    }

    /// The soft limit the fallback loop goes to, as the kernel reports it.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_soft_descriptor_limit_is_the_kernels() {
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .unwrap();
        let soft = line.split_whitespace().nth(3).unwrap();
        let expected = if soft == "unlimited" {
            None
        } else {
            Some(soft.parse::<u64>().unwrap())
        };
        assert_eq!(soft_nofile().unwrap(), expected, "{line}");
    }

    /// A listing of `open` descriptors the way the kernel answers: as many entries as
    /// fit, and the bytes written.
    fn kernel_listing(open: Vec<RawFd>) -> impl Fn(&mut [FdInfo]) -> io::Result<usize> {
        move |buf: &mut [FdInfo]| {
            let n = open.len().min(buf.len());
            for (slot, fd) in buf.iter_mut().zip(&open) {
                *slot = FdInfo { fd: *fd, _kind: 1 };
            }
            Ok(n * std::mem::size_of::<FdInfo>())
        }
    }

    #[test]
    fn the_listing_grows_until_every_descriptor_fits() {
        for count in [3, 255, 256, 257, 1024, 5000] {
            let open: Vec<RawFd> = (0..count).collect();
            assert_eq!(listed_fds(kernel_listing(open.clone())).unwrap(), open);
        }
    }

    #[test]
    fn a_failed_or_endless_listing_is_an_error() {
        let err = listed_fds(|_: &mut [FdInfo]| Err(io::Error::from_raw_os_error(libc::EPERM)));
        assert_eq!(err.unwrap_err().raw_os_error(), Some(libc::EPERM));
        // Always full: the buffer never proves the listing complete.
        let full = |buf: &mut [FdInfo]| Ok(std::mem::size_of_val(buf));
        assert!(listed_fds(full).is_err());
    }

    /// A pipe end moved to `number`, close-on-exec cleared (numbers no other test uses).
    fn open_at(number: RawFd) -> RawFd {
        use std::os::fd::IntoRawFd;
        let (r, _w) = nix::unistd::pipe().unwrap();
        let r = r.into_raw_fd();
        // The pipe may have landed on `number` itself (a low one, in a process started
        // with 3 and 4 taken, as cargo's jobserver leaves them).
        if r != number {
            // Safety: dup2 onto a number this test owns; the source is closed right after.
            assert_eq!(unsafe { libc::dup2(r, number) }, number);
            // Safety: `r` was just taken out of its OwnedFd and is closed once.
            unsafe { libc::close(r) };
        }
        set_cloexec(number, false).unwrap();
        number
    }

    fn close(fd: RawFd) {
        // Safety: the test opened `fd` itself and closes it once.
        unsafe { libc::close(fd) };
    }

    #[test]
    fn listed_descriptors_above_2_are_marked_and_0_1_2_left_alone() {
        let a = open_at(910);
        let b = open_at(911);
        let before: Vec<_> = (0..3).map(|fd| fd_flags(fd).ok()).collect();
        mark_listed(&[0, 1, 2, a, b]).unwrap();
        assert_ne!(fd_flags(a).unwrap() & libc::FD_CLOEXEC, 0);
        assert_ne!(fd_flags(b).unwrap() & libc::FD_CLOEXEC, 0);
        let after: Vec<_> = (0..3).map(|fd| fd_flags(fd).ok()).collect();
        assert_eq!(before, after);
        // A number that is not open fails: the listing said it was.
        close(b);
        assert!(mark_listed(&[b]).is_err());
        close(a);
    }

    /// The sweep marks every descriptor of the whole process, which would race the
    /// tests beside it that clear the flag and read it back: such a test runs alone.
    fn alone(name: &str, body: fn()) {
        crate::alone::alone(&format!("{}::{name}", module_path!()), body);
    }

    fn cloexec(fd: RawFd) -> bool {
        fd_flags(fd).unwrap() & libc::FD_CLOEXEC != 0
    }

    #[test]
    fn the_sweep_marks_every_inherited_descriptor_and_keeps_only_the_token() {
        alone(
            "the_sweep_marks_every_inherited_descriptor_and_keeps_only_the_token",
            || {
                let token = open_at(TOKEN_FD);
                let stray = open_at(930);
                let std_flags: Vec<_> = (0..3).map(|fd| fd_flags(fd).ok()).collect();
                mark_inherited_cloexec(true).unwrap();
                assert!(cloexec(stray), "a stray descriptor reaches the target");
                assert!(!cloexec(token), "the token pipe is lost at exec");
                mark_inherited_cloexec(false).unwrap();
                assert!(cloexec(token), "fd 5 reaches a launch without the token");
                let after: Vec<_> = (0..3).map(|fd| fd_flags(fd).ok()).collect();
                assert_eq!(std_flags, after);
                close(stray);
                close(token);
            },
        );
    }

    #[test]
    fn the_status_pipe_follows_the_identity_pipe() {
        assert_eq!((IDENTITY_FD, TOKEN_FD), (3, 5));
        assert_eq!(default_status_fd(true), 4);
        assert_eq!(default_status_fd(false), 3);
    }

    #[test]
    fn the_bounded_loop_marks_every_open_number_below_its_limit() {
        let a = open_at(920);
        let b = open_at(923);
        let beyond = open_at(925);
        fcntl_loop(920, 925).unwrap();
        assert_ne!(fd_flags(a).unwrap() & libc::FD_CLOEXEC, 0);
        assert_ne!(fd_flags(b).unwrap() & libc::FD_CLOEXEC, 0);
        assert_eq!(
            fd_flags(beyond).unwrap() & libc::FD_CLOEXEC,
            0,
            "the limit is exclusive"
        );
        for fd in [a, b, beyond] {
            close(fd);
        }
        assert!(soft_nofile().is_ok());
    }
}
