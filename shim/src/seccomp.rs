//! A seccomp filter for the ways into TCP that Landlock's connect rule does not see.
//!
//! The denied loopback ports of a bwrap sandbox with a shared network are a Landlock
//! ruleset (`landlock.rs`). Landlock checks `connect()` on TCP sockets, and nothing else,
//! so other ways reach a denied port (relay's own API port included):
//!
//! - an MPTCP socket (`socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP)`): Landlock does not
//!   treat it as TCP, yet it talks plain TCP to a plain TCP listener;
//! - an SMC socket (`socket(AF_SMC, …)`, or `socket(AF_INET, SOCK_STREAM, IPPROTO_SMC)`
//!   since Linux 6.11), where the kernel has the `smc` module: it falls back to plain
//!   TCP too, through a TCP socket of the kernel's own that no hook sees;
//! - TCP Fast Open: `sendto`/`sendmsg`/`sendmmsg` with `MSG_FASTOPEN` and an address
//!   connects from inside the send, without passing the connect hook.
//!
//! A seccomp filter cannot read the address a call points at, so it cannot tell a
//! denied port from an allowed one: these calls are refused outright, with `EACCES`
//! like Landlock's own refusal. `TCP_FASTOPEN_CONNECT` is refused as well (today its
//! `connect()` is still checked; the option is closed so no later kernel path opens it).
//! io_uring is refused with `EPERM`, the errno of `kernel.io_uring_disabled`: its
//! submissions (a socket, a `sendmsg` with `MSG_FASTOPEN`) never pass through seccomp.
//!
//! Only the native architecture gets through: a 32-bit (i386 via `int 0x80`, arm)
//! call, or an x32 one, kills the process — on i386 every socket call goes through
//! `socketcall(2)`, whose arguments sit behind a pointer no filter can read.
//!
//! Landlock's bind rule (the shield's, `relay-shim --shield`) has the same blind spots:
//! an MPTCP or SMC listener on a port the shield refuses takes plain TCP connections
//! (measured: an MPTCP `bind` goes through where a TCP one is refused, Linux 6.18).
//!
//! The shim installs it right after the Landlock ruleset, in the same step, so the
//! launcher (bwrap) and the target inherit both ([session-host.md](../../docs/session-host.md));
//! the shield installs it after its own domain, for the command and what it starts.
//!
//! The policy is data, one rule per call with its reason ([`policy`]); [`program`]
//! compiles it to classic BPF, plain data checked without the kernel; [`install`] hands
//! it to the kernel. Numbers are libc's names (`libc::SYS_*`), for the architecture the
//! shim is built for.
//!
//! Why not the `seccompiler` crate (rust-vmm's, which codex's `linux-sandbox` uses):
//! version 0.5.0 was weighed and does not fit. Its dependencies would (libc alone,
//! without its `json` feature). So would its install: no-new-privs, then the calling
//! thread only. But its filters cannot say this policy:
//!
//! - Its only guard is the `AUDIT_ARCH` check. x32 calls carry x86_64's, with
//!   `__X32_SYSCALL_BIT` in the number. They match none of its rules and get the
//!   default answer, allow: an x32 `socket(…, IPPROTO_MPTCP)` would pass. Its rules
//!   compare the number for equality only, so none can catch the bit
//!   (rust-vmm/seccompiler issue 74, open). This filter kills every x32 call.
//! - A filter has one answer for all its matches. This policy has two (`EACCES`,
//!   `EPERM`): two filters, plus a third, hand-written, for x32.
//!
//! So the program stays hand-built: five kinds of instruction, a short compiler, and
//! an interpreter in the tests that runs it.

use std::io;

#[cfg(target_os = "linux")]
mod policy;
#[cfg(target_os = "linux")]
mod program;

/// Installs the filter on the calling thread (the shim is single-threaded), setting
/// no-new-privs first (Landlock has already set it; the kernel requires it).
pub(crate) fn install() -> io::Result<()> {
    sys::install()
}

#[cfg(target_os = "linux")]
mod sys {
    use super::{policy, program};
    use std::io;

    pub(super) fn install() -> io::Result<()> {
        let arch = program::NATIVE.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::Unsupported,
                "no seccomp filter for this architecture",
            )
        })?;
        let mut filter: Vec<libc::sock_filter> = program::program(arch, policy::RULES)
            .iter()
            .map(|i| libc::sock_filter {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: i.k,
            })
            .collect();
        let len = u16::try_from(filter.len()).map_err(|_| io::Error::other("filter too long"))?;
        let fprog = libc::sock_fprog {
            len,
            filter: filter.as_mut_ptr(),
        };
        // Safety: prctl with integer arguments only; no memory is passed.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // Safety: `fprog` points at `filter`, which lives until this call returns; the
        // kernel copies the program and only reads it.
        let ret = unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &fprog as *const libc::sock_fprog,
            )
        };
        if ret != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    use std::io;

    pub(super) fn install() -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "seccomp is Linux only",
        ))
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A seccomp filter binds the thread that installs it (and what it starts), not the
    /// rest of the process: installed on a thread of its own, the real kernel answers.
    #[test]
    fn the_installed_filter_refuses_mptcp_and_io_uring_on_its_thread_only() {
        fn socket(protocol: libc::c_int) -> Option<i32> {
            // Safety: socket(2) with integer arguments; a descriptor it returns is closed.
            let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, protocol) };
            if fd >= 0 {
                // Safety: the descriptor was just made here and nothing else owns it.
                unsafe { libc::close(fd) };
                return None;
            }
            io::Error::last_os_error().raw_os_error()
        }
        fn io_uring_setup() -> Option<i32> {
            let mut params = [0u8; 120];
            // Safety: io_uring_setup reads and writes `params`, a buffer of the size of
            // struct io_uring_params; a descriptor it returns is closed.
            let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
            if fd >= 0 {
                // Safety: as above.
                unsafe { libc::close(fd as libc::c_int) };
                return None;
            }
            io::Error::last_os_error().raw_os_error()
        }
        let mptcp = libc::IPPROTO_MPTCP;
        let before = socket(mptcp);
        assert_ne!(before, Some(libc::EACCES), "refused before any filter");
        std::thread::spawn(move || {
            install().unwrap();
            assert_eq!(socket(mptcp), Some(libc::EACCES));
            assert_eq!(socket(libc::IPPROTO_TCP), None);
            assert_eq!(io_uring_setup(), Some(libc::EPERM));
        })
        .join()
        .unwrap();
        assert_eq!(socket(mptcp), before, "the filter reached another thread");
    }
}
