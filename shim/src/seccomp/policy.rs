//! The network filter's policy, as data: each call the filter looks at, when it refuses
//! it, with which errno, and why. [`super::program`] compiles it; nothing here decides.
//!
//! Numbers are the C library's names (`libc::SYS_*`, `libc::IPPROTO_*`, …). The two libc
//! lacks are spelled out below, each with the header it comes from.

/// `AF_SMC` (linux/socket.h): the SMC address family. libc has no constant for it.
pub(crate) const AF_SMC: libc::c_int = 43;
/// `IPPROTO_SMC` (linux/in.h, Linux 6.11): SMC asked for through `AF_INET`/`AF_INET6`.
/// libc has no constant for it.
pub(crate) const IPPROTO_SMC: libc::c_int = 256;

/// A test on one argument of a call (its index, from 0). The kernel reads every argument
/// tested here as a 32-bit `int`, so only the argument's low half counts.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Arg {
    /// The argument equals the value.
    Is(u32, libc::c_int),
    /// The argument has one of these bits set.
    Has(u32, libc::c_int),
}

/// When a call is refused.
#[derive(Clone, Copy, Debug)]
pub(crate) enum When {
    /// Always, whatever its arguments.
    Always,
    /// When one of the tests holds.
    Any(&'static [Arg]),
    /// When every one of the tests holds.
    All(&'static [Arg]),
}

/// One call of the policy. Every call not named here is allowed.
#[derive(Debug)]
pub(crate) struct Rule {
    /// The call's number on the architecture the shim is built for.
    pub call: libc::c_long,
    pub refuse: When,
    /// The errno a refused call fails with.
    pub errno: libc::c_int,
    /// Why the call is refused: for whoever reads the policy (and its test), not the
    /// program.
    #[cfg_attr(not(test), allow(dead_code))]
    pub why: &'static str,
}

/// The refusals of [`super`]'s module doc, one rule per call.
pub(crate) const RULES: &[Rule] = &[
    // socket(domain, type, protocol)
    Rule {
        call: libc::SYS_socket,
        refuse: When::Any(&[
            Arg::Is(0, AF_SMC),
            Arg::Is(2, libc::IPPROTO_MPTCP),
            Arg::Is(2, IPPROTO_SMC),
        ]),
        errno: libc::EACCES,
        why: "Landlock does not count an MPTCP or an SMC socket as TCP, yet both talk plain \
              TCP to a plain TCP listener (SMC through a socket of the kernel's own), so \
              neither connect nor bind is checked",
    },
    // sendto(fd, buf, len, flags, addr, addrlen)
    Rule {
        call: libc::SYS_sendto,
        refuse: When::Any(&[Arg::Has(3, libc::MSG_FASTOPEN)]),
        errno: libc::EACCES,
        why: "TCP Fast Open: MSG_FASTOPEN with an address connects from inside the send, \
              past Landlock's connect hook",
    },
    // sendmsg(fd, msg, flags)
    Rule {
        call: libc::SYS_sendmsg,
        refuse: When::Any(&[Arg::Has(2, libc::MSG_FASTOPEN)]),
        errno: libc::EACCES,
        why: "TCP Fast Open, as sendto: the address is in the message",
    },
    // sendmmsg(fd, msgvec, vlen, flags)
    Rule {
        call: libc::SYS_sendmmsg,
        refuse: When::Any(&[Arg::Has(3, libc::MSG_FASTOPEN)]),
        errno: libc::EACCES,
        why: "TCP Fast Open, as sendto, for a batch of messages",
    },
    // setsockopt(fd, level, optname, optval, optlen)
    Rule {
        call: libc::SYS_setsockopt,
        refuse: When::All(&[
            Arg::Is(1, libc::IPPROTO_TCP),
            Arg::Is(2, libc::TCP_FASTOPEN_CONNECT),
        ]),
        errno: libc::EACCES,
        why: "TCP_FASTOPEN_CONNECT makes connect a Fast Open one; that connect is still \
              checked today, and the option is closed so no later kernel path opens it",
    },
    Rule {
        call: libc::SYS_io_uring_setup,
        refuse: When::Always,
        errno: libc::EPERM,
        why: "io_uring's submissions (a socket, a sendmsg with MSG_FASTOPEN) never pass \
              through seccomp; EPERM is what kernel.io_uring_disabled answers",
    },
    Rule {
        call: libc::SYS_io_uring_enter,
        refuse: When::Always,
        errno: libc::EPERM,
        why: "submits io_uring work, which seccomp never sees (as io_uring_setup)",
    },
    Rule {
        call: libc::SYS_io_uring_register,
        refuse: When::Always,
        errno: libc::EPERM,
        why: "sets up io_uring resources, whose use seccomp never sees (as io_uring_setup)",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_call_is_named_once_and_says_why() {
        let mut seen = std::collections::BTreeSet::new();
        for rule in RULES {
            assert!(seen.insert(rule.call), "{} named twice", rule.call);
            assert!(u32::try_from(rule.call).is_ok(), "{rule:?}");
            assert!(rule.why.split(' ').count() >= 5, "no reason: {rule:?}");
            assert!(
                [libc::EACCES, libc::EPERM].contains(&rule.errno),
                "{rule:?}"
            );
            // A syscall has six arguments, and an empty list would refuse nothing (Any)
            // or everything (All): `Always` says the latter.
            let tests = match rule.refuse {
                When::Always => continue,
                When::Any(t) | When::All(t) => t,
            };
            assert!(!tests.is_empty(), "{rule:?}");
            for t in tests {
                let (Arg::Is(i, _) | Arg::Has(i, _)) = *t;
                assert!(i < 6, "{rule:?}");
            }
        }
        assert_eq!(seen.len(), 8);
    }

    #[test]
    fn the_values_libc_lacks_are_the_kernels() {
        // linux/socket.h and linux/in.h.
        assert_eq!((AF_SMC, IPPROTO_SMC), (43, 256));
        // And the ones it has, as the kernel's headers give them.
        assert_eq!(libc::IPPROTO_MPTCP, 262);
        assert_eq!(libc::MSG_FASTOPEN, 0x2000_0000);
        assert_eq!((libc::IPPROTO_TCP, libc::TCP_FASTOPEN_CONNECT), (6, 30));
    }
}
