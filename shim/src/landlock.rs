//! Landlock TCP-connect rulesets for the Linux sandbox's denied loopback ports.
//!
//! bwrap shares the network namespace when network is `shared`, so denied ports are
//! enforced with Landlock instead: a ruleset that handles TCP connect and allows it on
//! every port but the denied ones (Landlock is an allow-list). Building it means 65536
//! rules (tens of milliseconds to build, and 25–30 ms for every `landlock_restrict_self`
//! that merges them into a new domain), so the host builds it once per port set with
//! [`build_tcp_connect_ruleset`] and applies it once, to one thread of its own that
//! forks every shim for that port set: the shim starts inside the domain and runs with
//! `--landlock-inherited` ([session-host.md](../../docs/session-host.md#the-confined-thread)).
//! A caller that has no such thread passes the descriptor instead (`--landlock-fd N`)
//! and the shim applies it to itself just before it execs bwrap.
//!
//! The shield ([`shield`]) is the other use: a domain of its own for each Bash command
//! a token launch's Claude Code runs, so that no tool can read Claude's memory, signal
//! Claude or relay's forwarder, or listen on a port Claude's traffic goes to
//! ([session-host.md](../../docs/session-host.md#the-shield)).

use std::io;
use std::os::fd::{OwnedFd, RawFd};

/// The first Landlock ABI that can restrict TCP connect.
pub const MIN_NET_ABI: u32 = 4;

/// The first Landlock ABI the shield works on: 6 (Linux 6.12), the first with scopes
/// (signals, abstract unix sockets). Its ruleset handles TCP bind (ABI 4) and no file
/// access: a domain that handles any makes the kernel refuse every rename and link
/// across folders (`EXDEV`) wherever a layer — the denied ports' own, for one — has no
/// rule allowing it (measured).
pub const MIN_SHIELD_ABI: u32 = 6;

/// The kernel's Landlock ABI version; an error when Landlock is absent or disabled.
pub fn abi_version() -> io::Result<u32> {
    sys::abi_version()
}

/// A ruleset that handles TCP connect and allows it on every port except `denied_ports`.
///
/// The descriptor is close-on-exec in this process; the caller places it in the shim's
/// fd table on purpose. Fails with [`io::ErrorKind::Unsupported`] when the kernel's
/// Landlock ABI is older than [`MIN_NET_ABI`] (or Landlock is unavailable).
pub fn build_tcp_connect_ruleset(denied_ports: &[u16]) -> io::Result<OwnedFd> {
    at_least(abi_version(), MIN_NET_ABI, |abi| {
        format!("landlock ABI {abi} cannot restrict TCP connect (needs {MIN_NET_ABI})")
    })?;
    let ruleset = sys::create_net_ruleset()?;
    let mut denied = [false; 65536];
    for &port in denied_ports {
        denied[usize::from(port)] = true;
    }
    for port in 0..=u16::MAX {
        if !denied[usize::from(port)] {
            sys::allow_port(&ruleset, ACCESS_NET_CONNECT_TCP, port)?;
        }
    }
    Ok(ruleset)
}

/// Refuses, as [`io::ErrorKind::Unsupported`], a kernel without Landlock or whose ABI
/// (`abi`, as [`abi_version`] answered) is below `min`; `too_old` words the latter.
fn at_least(abi: io::Result<u32>, min: u32, too_old: impl FnOnce(u32) -> String) -> io::Result<()> {
    let abi = abi.map_err(|e| {
        io::Error::new(
            io::ErrorKind::Unsupported,
            format!("landlock unavailable: {e}"),
        )
    })?;
    if abi < min {
        return Err(io::Error::new(io::ErrorKind::Unsupported, too_old(abi)));
    }
    Ok(())
}

/// Sets no-new-privs and confines the calling thread (and every process it forks
/// afterwards) with the ruleset at `fd`; the process's other threads are not touched.
/// The caller closes `fd` afterwards.
pub fn restrict_self(fd: RawFd) -> io::Result<()> {
    sys::restrict_self(fd)
}

/// Puts the calling process, and everything it starts from then on, in a Landlock
/// domain of its own nested below the one it is in (none, or the denied ports'). The
/// kernel then refuses it, towards every process outside that domain (its parents
/// first: Claude, and relay's forwarder beside it):
///
/// - `ptrace` and the `/proc/<pid>/` files that need it (`mem`, `environ`, `maps`, the
///   `fd` links, …);
/// - every signal (`kill`, `tgkill`, `pidfd_send_signal`, a `SIGIO` owner) —
///   [`SCOPE_SIGNAL`];
/// - connecting to an abstract unix socket bound outside it —
///   [`SCOPE_ABSTRACT_UNIX_SOCKET`];
///
/// and it refuses the domain binding a TCP socket to any port but `listen_ports`
/// (the ruleset handles [`ACCESS_NET_BIND_TCP`] with a rule for each of those; `0`
/// allows a port the kernel picks). No file access is handled: see
/// [`MIN_SHIELD_ABI`]. Sets `no_new_privs`. Fails with [`io::ErrorKind::Unsupported`]
/// below [`MIN_SHIELD_ABI`].
pub fn shield(listen_ports: &[u16]) -> io::Result<()> {
    at_least(abi_version(), MIN_SHIELD_ABI, |abi| {
        format!("landlock ABI {abi} has no scopes (the shield needs {MIN_SHIELD_ABI})")
    })?;
    let ruleset = sys::create_shield_ruleset()?;
    for &port in listen_ports {
        sys::allow_port(&ruleset, ACCESS_NET_BIND_TCP, port)?;
    }
    sys::restrict_self(std::os::fd::AsRawFd::as_raw_fd(&ruleset))
}

/// `LANDLOCK_ACCESS_NET_BIND_TCP` (ABI 4): bind a TCP socket to a local port.
pub const ACCESS_NET_BIND_TCP: u64 = 1 << 0;
/// `LANDLOCK_ACCESS_NET_CONNECT_TCP` (ABI 4): connect a TCP socket to a remote port.
pub const ACCESS_NET_CONNECT_TCP: u64 = 1 << 1;
/// `LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET` (ABI 6).
pub const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
/// `LANDLOCK_SCOPE_SIGNAL` (ABI 6).
pub const SCOPE_SIGNAL: u64 = 1 << 1;

/// What the shield's ruleset handles: `(handled_access_fs, handled_access_net, scoped)`.
/// No file access (a domain that handles one makes the kernel refuse renames and links
/// across folders, [`MIN_SHIELD_ABI`]); TCP bind, allowed port by port; both scopes.
pub const SHIELD_HANDLES: (u64, u64, u64) = (
    0,
    ACCESS_NET_BIND_TCP,
    SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL,
);

/// What a shim started with `--landlock-inherited PORT` checks of its inheritance: the
/// kernel offers no query for a Landlock domain, so it asks the domain itself. The
/// confined thread set no-new-privs together with its domain, and a TCP connect to
/// `127.0.0.1:PORT` (one of the denied ports) must be refused with `EACCES` — Landlock's
/// answer, given before any packet leaves. Anything else (connected, refused by the
/// port, in progress) means the shim is not inside the domain, and it refuses to go on.
pub(crate) fn check_inherited(port: u16) -> io::Result<()> {
    if !sys::no_new_privs()? {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "--landlock-inherited but no_new_privs is not set: not started from a confined thread",
        ));
    }
    match sys::probe_connect(port) {
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => Ok(()),
        other => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "--landlock-inherited but a connect to the denied port {port} was not refused \
                 by Landlock ({}): not started from a confined thread",
                match other {
                    Ok(()) => "it went through".to_string(),
                    Err(e) => e.to_string(),
                }
            ),
        )),
    }
}

#[cfg(target_os = "linux")]
mod sys {
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

    use super::{ACCESS_NET_CONNECT_TCP, SHIELD_HANDLES};

    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1 << 0;
    const LANDLOCK_RULE_NET_PORT: libc::c_int = 2;

    /// `struct landlock_ruleset_attr` up to `handled_access_net` (ABI 4); the kernel
    /// accepts a prefix of its current struct.
    #[repr(C)]
    struct RulesetAttr {
        handled_access_fs: u64,
        handled_access_net: u64,
    }

    /// `struct landlock_ruleset_attr` up to `scoped` (ABI 6).
    #[repr(C)]
    struct ScopedRulesetAttr {
        handled_access_fs: u64,
        handled_access_net: u64,
        scoped: u64,
    }

    /// `struct landlock_net_port_attr`.
    #[repr(C)]
    struct NetPortAttr {
        allowed_access: u64,
        port: u64,
    }

    pub(super) fn abi_version() -> io::Result<u32> {
        // Safety: with a NULL attr, size 0 and the VERSION flag the kernel reads no
        // memory and only returns the ABI number.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<RulesetAttr>(),
                0usize,
                LANDLOCK_CREATE_RULESET_VERSION,
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        u32::try_from(ret).map_err(|_| io::Error::other("landlock ABI out of range"))
    }

    pub(super) fn create_net_ruleset() -> io::Result<OwnedFd> {
        let attr = RulesetAttr {
            handled_access_fs: 0,
            handled_access_net: ACCESS_NET_CONNECT_TCP,
        };
        // Safety: `attr` is a live, initialised #[repr(C)] struct and the size passed is
        // its exact size; the kernel only reads it.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                std::mem::size_of::<RulesetAttr>(),
                0u32,
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        let raw = RawFd::try_from(ret).map_err(|_| io::Error::other("fd out of range"))?;
        // Safety: the syscall just returned this descriptor and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // Safety: F_SETFD on a descriptor this function owns; no memory is passed.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(fd)
    }

    /// The shield's ruleset: [`SHIELD_HANDLES`], no rule yet.
    pub(super) fn create_shield_ruleset() -> io::Result<OwnedFd> {
        let (handled_access_fs, handled_access_net, scoped) = SHIELD_HANDLES;
        let attr = ScopedRulesetAttr {
            handled_access_fs,
            handled_access_net,
            scoped,
        };
        // Safety: `attr` is a live, initialised #[repr(C)] struct and the size passed is
        // its exact size; the kernel only reads it.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const ScopedRulesetAttr,
                std::mem::size_of::<ScopedRulesetAttr>(),
                0u32,
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        let raw = RawFd::try_from(ret).map_err(|_| io::Error::other("fd out of range"))?;
        // Safety: the syscall just returned this descriptor and nothing else owns it; it
        // is closed as soon as the domain is made.
        Ok(unsafe { OwnedFd::from_raw_fd(raw) })
    }

    /// A rule allowing `access` (TCP connect or bind) on `port`.
    pub(super) fn allow_port(ruleset: &OwnedFd, access: u64, port: u16) -> io::Result<()> {
        let rule = NetPortAttr {
            allowed_access: access,
            port: u64::from(port),
        };
        // Safety: `rule` is a live, initialised #[repr(C)] struct of the layout the
        // kernel expects for LANDLOCK_RULE_NET_PORT; the kernel only reads it.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset.as_raw_fd(),
                LANDLOCK_RULE_NET_PORT,
                &rule as *const NetPortAttr,
                0u32,
            )
        };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// A non-blocking TCP connect to `127.0.0.1:port`, its socket closed at once.
    pub(super) fn probe_connect(port: u16) -> io::Result<()> {
        use std::os::fd::{FromRawFd, OwnedFd};
        // Safety: socket(2) with integer arguments; the descriptor is owned at once.
        let fd = unsafe {
            libc::socket(
                libc::AF_INET,
                libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // Safety: `fd` is a fresh descriptor nothing else owns.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
            },
            sin_zero: [0; 8],
        };
        // Safety: `addr` is a valid sockaddr_in that outlives the call, its size given.
        let ret = unsafe {
            libc::connect(
                std::os::fd::AsRawFd::as_raw_fd(&sock),
                std::ptr::addr_of!(addr).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        drop(sock);
        if ret == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    pub(super) fn no_new_privs() -> io::Result<bool> {
        // Safety: prctl with integer arguments only; no memory is passed.
        let ret = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(ret == 1)
    }

    pub(super) fn restrict_self(fd: RawFd) -> io::Result<()> {
        // Safety: prctl with integer arguments only; no memory is passed.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // Safety: integer arguments only; an invalid fd is reported as EBADF.
        let ret = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) };
        if ret != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    use std::io;
    use std::os::fd::{OwnedFd, RawFd};

    fn unsupported() -> io::Error {
        io::Error::new(io::ErrorKind::Unsupported, "landlock is Linux only")
    }

    pub(super) fn abi_version() -> io::Result<u32> {
        Err(unsupported())
    }

    pub(super) fn create_net_ruleset() -> io::Result<OwnedFd> {
        Err(unsupported())
    }

    pub(super) fn allow_port(_ruleset: &OwnedFd, _access: u64, _port: u16) -> io::Result<()> {
        Err(unsupported())
    }

    pub(super) fn create_shield_ruleset() -> io::Result<OwnedFd> {
        Err(unsupported())
    }

    pub(super) fn no_new_privs() -> io::Result<bool> {
        Err(unsupported())
    }

    pub(super) fn probe_connect(_port: u16) -> io::Result<()> {
        Err(unsupported())
    }

    pub(super) fn restrict_self(_fd: RawFd) -> io::Result<()> {
        Err(unsupported())
    }
}

#[cfg(test)]
#[cfg(target_os = "linux")]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// The kernel's Landlock ABI, asked here and not through the code under test.
    fn kernel_abi() -> Option<u32> {
        // Safety: a NULL attr, size 0 and the VERSION flag (1): the kernel reads nothing.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<u8>(),
                0usize,
                1u32,
            )
        };
        u32::try_from(ret).ok()
    }

    /// Whether the kernel can run the tests that need `abi` (they skip below it).
    fn landlock_at_least(abi: u32) -> bool {
        match kernel_abi() {
            Some(v) if v >= abi => true,
            other => {
                eprintln!("skip: landlock ABI {other:?}, the test needs {abi}");
                false
            }
        }
    }

    #[test]
    fn a_kernel_below_the_abi_or_without_landlock_is_unsupported() {
        let old = |abi| format!("ABI {abi} is too old");
        assert!(at_least(Ok(MIN_NET_ABI), MIN_NET_ABI, old).is_ok());
        assert!(at_least(Ok(MIN_NET_ABI + 3), MIN_NET_ABI, old).is_ok());
        let below = at_least(Ok(MIN_SHIELD_ABI - 1), MIN_SHIELD_ABI, old).unwrap_err();
        assert_eq!(below.kind(), io::ErrorKind::Unsupported);
        assert_eq!(below.to_string(), "ABI 5 is too old");
        let absent = io::Error::from_raw_os_error(libc::EOPNOTSUPP);
        let none = at_least(Err(absent), MIN_NET_ABI, old).unwrap_err();
        assert_eq!(none.kind(), io::ErrorKind::Unsupported);
        assert!(
            none.to_string().starts_with("landlock unavailable: "),
            "{none}"
        );
    }

    #[test]
    fn the_abi_is_the_kernels() {
        match kernel_abi() {
            Some(v) => assert_eq!(abi_version().unwrap(), v),
            None => assert!(abi_version().is_err()),
        }
    }

    /// The calling thread's no-new-privs bit, as the kernel reports it.
    fn thread_no_new_privs() -> bool {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        status.lines().any(|l| l == "NoNewPrivs:\t1")
    }

    fn errno(r: io::Result<()>) -> Option<i32> {
        r.err().and_then(|e| e.raw_os_error())
    }

    /// Landlock domains and no-new-privs are per thread: each test confines a thread of
    /// its own, so the other tests of this process run unconfined.
    #[test]
    fn a_confined_thread_is_refused_the_denied_ports_only() {
        if !landlock_at_least(MIN_NET_ABI) {
            return;
        }
        let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let open_port = open.local_addr().unwrap().port();
        let denied = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let denied_port = denied.local_addr().unwrap().port();
        let ruleset = build_tcp_connect_ruleset(&[denied_port]).unwrap();
        // Outside the domain the denied port answers (a non-blocking connect: done or in
        // progress), and the check refuses.
        assert_ne!(errno(sys::probe_connect(denied_port)), Some(libc::EACCES));
        assert!(!sys::no_new_privs().unwrap() && !thread_no_new_privs());
        let outside = check_inherited(denied_port).unwrap_err();
        assert!(outside.to_string().contains("no_new_privs"), "{outside}");
        let fd = ruleset.as_raw_fd();
        std::thread::spawn(move || {
            restrict_self(fd).unwrap();
            assert!(sys::no_new_privs().unwrap() && thread_no_new_privs());
            assert_eq!(errno(sys::probe_connect(denied_port)), Some(libc::EACCES));
            assert_ne!(errno(sys::probe_connect(open_port)), Some(libc::EACCES));
            check_inherited(denied_port).unwrap();
            let not_denied = check_inherited(open_port).unwrap_err();
            assert!(
                not_denied
                    .to_string()
                    .contains("was not refused by Landlock"),
                "{not_denied}"
            );
        })
        .join()
        .unwrap();
        drop((open, denied, ruleset));
    }

    /// A rule the kernel refuses is an error, never a ruleset with a port left out.
    #[test]
    fn a_rule_the_kernel_refuses_fails_the_build() {
        if !landlock_at_least(MIN_NET_ABI) {
            return;
        }
        let (not_a_ruleset, _w) = nix::unistd::pipe().unwrap();
        let err = sys::allow_port(&not_a_ruleset, ACCESS_NET_CONNECT_TCP, 80).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EBADFD), "{err}");
        let ruleset = sys::create_net_ruleset().unwrap();
        sys::allow_port(&ruleset, ACCESS_NET_CONNECT_TCP, 80).unwrap();
        // An access the ruleset does not handle is refused, never taken as allowed.
        let err = sys::allow_port(&ruleset, ACCESS_NET_BIND_TCP, 80).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
        if landlock_at_least(MIN_SHIELD_ABI) {
            let shield = sys::create_shield_ruleset().unwrap();
            sys::allow_port(&shield, ACCESS_NET_BIND_TCP, 80).unwrap();
            let err = sys::allow_port(&shield, ACCESS_NET_CONNECT_TCP, 80).unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
        }
    }

    #[test]
    fn the_access_and_scope_bits_are_the_kernels() {
        // linux/landlock.h.
        assert_eq!((ACCESS_NET_BIND_TCP, ACCESS_NET_CONNECT_TCP), (1, 2));
        assert_eq!((SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL), (1, 2));
        // The shield handles no file access, TCP bind alone of the ports, both scopes.
        assert_eq!(SHIELD_HANDLES, (0, 1, 3));
    }

    /// The errno of binding a fresh TCP socket to `127.0.0.1:port`, `None` when bound.
    fn bind_errno(port: u16) -> Option<i32> {
        std::net::TcpListener::bind(("127.0.0.1", port))
            .err()
            .and_then(|e| e.raw_os_error())
    }

    /// A shielded thread binds no TCP port but the ones it was given (`0`, a port the
    /// kernel picks, among them only when given); a shield nested in it cannot give
    /// back a port the outer one refused.
    #[test]
    fn a_shielded_thread_binds_only_its_listen_ports() {
        if !landlock_at_least(MIN_SHIELD_ABI) {
            return;
        }
        // Ports free a moment ago; another test could take one meanwhile, which answers
        // EADDRINUSE, never Landlock's EACCES.
        let free = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        let (listen, other) = (free(), free());
        assert_ne!(bind_errno(0), Some(libc::EACCES));
        std::thread::spawn(move || {
            shield(&[listen]).unwrap();
            assert_ne!(bind_errno(listen), Some(libc::EACCES));
            assert_eq!(bind_errno(other), Some(libc::EACCES));
            assert_eq!(bind_errno(0), Some(libc::EACCES));
            // IPv6 is TCP too.
            let v6 = std::net::TcpListener::bind(("::1", other)).unwrap_err();
            assert_eq!(v6.raw_os_error(), Some(libc::EACCES), "{v6}");
            // Nested: only ever narrower.
            shield(&[listen, other]).unwrap();
            assert_eq!(bind_errno(other), Some(libc::EACCES));
            assert_ne!(bind_errno(listen), Some(libc::EACCES));
        })
        .join()
        .unwrap();
        std::thread::spawn(|| {
            shield(&[0]).unwrap();
            assert_eq!(bind_errno(0), None);
        })
        .join()
        .unwrap();
    }

    /// The errno of `kill(pid, sig)`, `None` when delivered.
    fn kill_errno(pid: u32, sig: i32) -> Option<i32> {
        // Safety: kill(2) with integer arguments, on a child of this test.
        let ret = unsafe { libc::kill(pid as libc::pid_t, sig) };
        (ret != 0).then(|| io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }

    /// A child that waits for its stdin to close: a process to signal.
    fn waiter() -> std::process::Child {
        std::process::Command::new("cat")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// A shielded thread cannot signal a process outside its domain (its parent, a
    /// sibling), not even to stop it; it still signals what it started itself.
    #[test]
    fn a_shielded_thread_signals_only_its_own_domain() {
        if !landlock_at_least(MIN_SHIELD_ABI) {
            return;
        }
        let mut outside = waiter();
        let pid = outside.id();
        assert_eq!(kill_errno(pid, 0), None);
        std::thread::spawn(move || {
            shield(&[]).unwrap();
            for sig in [0, libc::SIGSTOP, libc::SIGKILL] {
                assert_eq!(kill_errno(pid, sig), Some(libc::EPERM), "signal {sig}");
            }
            let mut inside = waiter();
            assert_eq!(kill_errno(inside.id(), libc::SIGKILL), None);
            assert!(inside.wait().unwrap().code().is_none());
        })
        .join()
        .unwrap();
        // Never stopped nor killed: it ends when its stdin closes.
        drop(outside.stdin.take());
        assert!(outside.wait().unwrap().success());
    }

    #[test]
    fn a_shielded_thread_cannot_reach_an_abstract_socket_bound_outside() {
        use std::os::linux::net::SocketAddrExt;
        use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
        if !landlock_at_least(MIN_SHIELD_ABI) {
            return;
        }
        let name = format!("relay-shim-test-shield-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixListener::bind_addr(&addr).unwrap();
        UnixStream::connect_addr(&addr).unwrap();
        std::thread::spawn(move || {
            shield(&[]).unwrap();
            assert!(thread_no_new_privs());
            let err = UnixStream::connect_addr(&addr).unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");
        })
        .join()
        .unwrap();
        drop(listener);
    }

    #[test]
    fn ruleset_is_close_on_exec() {
        match build_tcp_connect_ruleset(&[18765]) {
            Ok(fd) => {
                // Safety: F_GETFD on a descriptor this test owns.
                let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
                assert!(flags >= 0 && flags & libc::FD_CLOEXEC != 0);
            }
            Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                eprintln!("skip: landlock networking unavailable here: {e}");
            }
            Err(e) => panic!("building the ruleset failed: {e}"),
        }
    }
}
