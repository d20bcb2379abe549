//! A seccomp filter for the ways into TCP that Landlock's connect rule does not see.
//!
//! The denied loopback ports of a bwrap sandbox with a shared network are a Landlock
//! ruleset (`landlock.rs`). Landlock checks `connect()` on TCP sockets, and nothing else,
//! so two other ways reach a denied port (relay's own API port included):
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
//! The program is plain data, built and checked here without the kernel ([`program`]).

use std::io;

/// The architectures relay builds the filter for, by their `AUDIT_ARCH_*` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    /// The architecture this shim was built for, when the filter knows it.
    pub fn native() -> Option<Arch> {
        if cfg!(target_arch = "x86_64") {
            Some(Arch::X86_64)
        } else if cfg!(target_arch = "aarch64") {
            Some(Arch::Aarch64)
        } else {
            None
        }
    }

    /// `AUDIT_ARCH_X86_64` / `AUDIT_ARCH_AARCH64`: the ELF machine, 64-bit, little endian.
    pub fn audit_arch(self) -> u32 {
        const AUDIT_64BIT_LE: u32 = 0x8000_0000 | 0x4000_0000;
        match self {
            Arch::X86_64 => AUDIT_64BIT_LE | 62,
            Arch::Aarch64 => AUDIT_64BIT_LE | 183,
        }
    }

    fn nr(self, call: Call) -> u32 {
        match (self, call) {
            (Arch::X86_64, Call::Socket) => 41,
            (Arch::X86_64, Call::Sendto) => 44,
            (Arch::X86_64, Call::Sendmsg) => 46,
            (Arch::X86_64, Call::Setsockopt) => 54,
            (Arch::X86_64, Call::Sendmmsg) => 307,
            (Arch::Aarch64, Call::Socket) => 198,
            (Arch::Aarch64, Call::Sendto) => 206,
            (Arch::Aarch64, Call::Setsockopt) => 208,
            (Arch::Aarch64, Call::Sendmsg) => 211,
            (Arch::Aarch64, Call::Sendmmsg) => 269,
            (_, Call::IoUringSetup) => 425,
            (_, Call::IoUringEnter) => 426,
            (_, Call::IoUringRegister) => 427,
        }
    }
}

/// The calls the filter looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Socket,
    Sendto,
    Sendmsg,
    Sendmmsg,
    Setsockopt,
    IoUringSetup,
    IoUringEnter,
    IoUringRegister,
}

/// Linux ABI values, spelled out so the program is the same data on every build host.
const IPPROTO_TCP: u32 = 6;
const IPPROTO_MPTCP: u32 = 262;
const IPPROTO_SMC: u32 = 256;
const AF_SMC: u32 = 43;
const TCP_FASTOPEN_CONNECT: u32 = 30;
const MSG_FASTOPEN: u32 = 0x2000_0000;
const EPERM: u32 = 1;
const EACCES: u32 = 13;
/// Syscall numbers of the x32 ABI carry this bit on x86_64.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// What the filter answers.
pub const RET_ALLOW: u32 = 0x7fff_0000;
pub const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;
pub const RET_EACCES: u32 = RET_ERRNO | EACCES;
pub const RET_EPERM: u32 = RET_ERRNO | EPERM;

// Classic BPF opcodes (linux/bpf_common.h).
/// `BPF_LD | BPF_W | BPF_ABS` (0x00 | 0x00 | 0x20).
const BPF_LD_W_ABS: u16 = 0x20;
/// `BPF_JMP | BPF_JEQ | BPF_K`, and so on.
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
const BPF_JMP_JSET_K: u16 = 0x05 | 0x40;
const BPF_RET_K: u16 = 0x06;

// Offsets into `struct seccomp_data`: nr, arch, instruction_pointer, args[6]. Both
// architectures are little endian, so an argument's low 32 bits come first. The kernel
// reads the arguments checked here as 32-bit `int`s, so only the low half counts.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
fn arg_low(i: u32) -> u32 {
    16 + 8 * i
}

/// One instruction, laid out as the kernel's `struct sock_filter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

#[derive(Clone, Copy)]
enum To {
    Next,
    L(&'static str),
}

enum Op {
    Ld(u32),
    Jeq(u32, To, To),
    Jge(u32, To, To),
    Jset(u32, To, To),
    Ret(u32),
    Label(&'static str),
}

/// The filter for `arch`, in order: architecture check, then the calls above, then allow.
pub fn program(arch: Arch) -> Vec<Insn> {
    use Op::*;
    use To::{Next, L};
    let mut ops = vec![
        Ld(OFF_ARCH),
        Jeq(arch.audit_arch(), Next, L("kill")),
        Ld(OFF_NR),
    ];
    if arch == Arch::X86_64 {
        ops.push(Jge(X32_SYSCALL_BIT, L("kill"), Next));
    }
    ops.extend([
        Jeq(arch.nr(Call::Socket), L("socket"), Next),
        Jeq(arch.nr(Call::Sendto), L("flags_arg3"), Next),
        Jeq(arch.nr(Call::Sendmmsg), L("flags_arg3"), Next),
        Jeq(arch.nr(Call::Sendmsg), L("flags_arg2"), Next),
        Jeq(arch.nr(Call::Setsockopt), L("setsockopt"), Next),
        Jeq(arch.nr(Call::IoUringSetup), L("eperm"), Next),
        Jeq(arch.nr(Call::IoUringEnter), L("eperm"), Next),
        Jeq(arch.nr(Call::IoUringRegister), L("eperm"), Next),
        Ret(RET_ALLOW),
        // socket(domain, type, protocol)
        Label("socket"),
        Ld(arg_low(0)),
        Jeq(AF_SMC, L("eacces"), Next),
        Ld(arg_low(2)),
        Jeq(IPPROTO_MPTCP, L("eacces"), Next),
        Jeq(IPPROTO_SMC, L("eacces"), L("allow")),
        // sendto(fd, buf, len, flags, addr, addrlen), sendmmsg(fd, vec, vlen, flags)
        Label("flags_arg3"),
        Ld(arg_low(3)),
        Jset(MSG_FASTOPEN, L("eacces"), L("allow")),
        // sendmsg(fd, msg, flags)
        Label("flags_arg2"),
        Ld(arg_low(2)),
        Jset(MSG_FASTOPEN, L("eacces"), L("allow")),
        // setsockopt(fd, level, optname, optval, optlen)
        Label("setsockopt"),
        Ld(arg_low(1)),
        Jeq(IPPROTO_TCP, Next, L("allow")),
        Ld(arg_low(2)),
        Jeq(TCP_FASTOPEN_CONNECT, L("eacces"), L("allow")),
        Label("allow"),
        Ret(RET_ALLOW),
        Label("eacces"),
        Ret(RET_EACCES),
        Label("eperm"),
        Ret(RET_EPERM),
        Label("kill"),
        Ret(RET_KILL_PROCESS),
    ]);
    assemble(&ops)
}

/// Resolves labels into the forward jump offsets classic BPF uses.
fn assemble(ops: &[Op]) -> Vec<Insn> {
    let mut at = std::collections::HashMap::new();
    let mut n = 0usize;
    for op in ops {
        match op {
            Op::Label(l) => {
                at.insert(*l, n);
            }
            _ => n += 1,
        }
    }
    let mut out = Vec::with_capacity(n);
    for op in ops {
        let here = out.len();
        let off = |to: To| -> u8 {
            let target = match to {
                To::Next => here + 1,
                To::L(l) => at[l],
            };
            // Jumps go forward and the program is short: both hold by construction,
            // and the tests walk every jump.
            u8::try_from(target - (here + 1)).unwrap_or(u8::MAX)
        };
        let insn = |code, jt, jf, k| Insn { code, jt, jf, k };
        out.push(match *op {
            Op::Label(_) => continue,
            Op::Ld(k) => insn(BPF_LD_W_ABS, 0, 0, k),
            Op::Jeq(k, t, f) => insn(BPF_JMP_JEQ_K, off(t), off(f), k),
            Op::Jge(k, t, f) => insn(BPF_JMP_JGE_K, off(t), off(f), k),
            Op::Jset(k, t, f) => insn(BPF_JMP_JSET_K, off(t), off(f), k),
            Op::Ret(k) => insn(BPF_RET_K, 0, 0, k),
        });
    }
    out
}

/// Installs the filter on the calling thread (the shim is single-threaded), setting
/// no-new-privs first (Landlock has already set it; the kernel requires it).
pub(crate) fn install() -> io::Result<()> {
    let arch = Arch::native().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::Unsupported,
            "no seccomp filter for this architecture",
        )
    })?;
    sys::install(&program(arch))
}

#[cfg(target_os = "linux")]
mod sys {
    use super::Insn;
    use std::io;

    pub(super) fn install(prog: &[Insn]) -> io::Result<()> {
        let mut filter: Vec<libc::sock_filter> = prog
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
    use super::Insn;
    use std::io;

    pub(super) fn install(_prog: &[Insn]) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "seccomp is Linux only",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic-BPF interpreter for the five instructions the program uses, over a
    /// `struct seccomp_data` laid out as the kernel does.
    fn run(prog: &[Insn], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let mut data = Vec::with_capacity(64);
        data.extend(nr.to_le_bytes());
        data.extend(arch.to_le_bytes());
        data.extend(0u64.to_le_bytes());
        for a in args {
            data.extend(a.to_le_bytes());
        }
        let word = |off: u32| {
            let o = off as usize;
            u32::from_le_bytes(data[o..o + 4].try_into().unwrap())
        };
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let i = prog[pc];
            pc += 1;
            let jump = |cond: bool| if cond { i.jt } else { i.jf } as usize;
            match i.code {
                BPF_LD_W_ABS => acc = word(i.k),
                BPF_JMP_JEQ_K => pc += jump(acc == i.k),
                BPF_JMP_JGE_K => pc += jump(acc >= i.k),
                BPF_JMP_JSET_K => pc += jump(acc & i.k != 0),
                BPF_RET_K => return i.k,
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }

    fn call(arch: Arch, c: Call, args: [u64; 6]) -> u32 {
        run(&program(arch), arch.audit_arch(), arch.nr(c), args)
    }

    const AF_INET: u64 = 2;
    const SOCK_STREAM: u64 = 1;

    #[test]
    fn the_architecture_values_are_the_kernels() {
        // linux/audit.h: the ELF machine (EM_X86_64 62, EM_AARCH64 183) with the
        // 64-bit and little-endian bits.
        assert_eq!(Arch::X86_64.audit_arch(), 0xC000_003E);
        assert_eq!(Arch::Aarch64.audit_arch(), 0xC000_00B7);
        // asm/unistd.h of each architecture.
        let table = [
            (Call::Socket, 41, 198),
            (Call::Sendto, 44, 206),
            (Call::Sendmsg, 46, 211),
            (Call::Sendmmsg, 307, 269),
            (Call::Setsockopt, 54, 208),
            (Call::IoUringSetup, 425, 425),
            (Call::IoUringEnter, 426, 426),
            (Call::IoUringRegister, 427, 427),
        ];
        for (c, x86_64, aarch64) in table {
            assert_eq!(Arch::X86_64.nr(c), x86_64, "{c:?}");
            assert_eq!(Arch::Aarch64.nr(c), aarch64, "{c:?}");
        }
    }

    #[test]
    fn the_answers_and_opcodes_are_the_kernels() {
        // linux/seccomp.h: SECCOMP_RET_ERRNO with the errno in the low 16 bits.
        assert_eq!(RET_EACCES, 0x0005_000D);
        assert_eq!(RET_EPERM, 0x0005_0001);
        assert_eq!((RET_ALLOW, RET_KILL_PROCESS), (0x7fff_0000, 0x8000_0000));
        // linux/bpf_common.h: BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_{JEQ,JGE,JSET}|BPF_K, BPF_RET|BPF_K.
        assert_eq!(BPF_LD_W_ABS, 0x20);
        assert_eq!(
            (BPF_JMP_JEQ_K, BPF_JMP_JGE_K, BPF_JMP_JSET_K, BPF_RET_K),
            (0x15, 0x35, 0x45, 0x06)
        );
    }

    /// A seccomp filter binds the thread that installs it (and what it starts), not the
    /// rest of the process: installed on a thread of its own, the real kernel answers.
    #[cfg(target_os = "linux")]
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
        let mptcp = IPPROTO_MPTCP as libc::c_int;
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

    /// The architecture the filter is built for is the one these tests run on: its
    /// numbers are the C library's.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_native_architecture_is_the_one_running() {
        let arch = Arch::native().expect("relay builds for x86_64 and aarch64");
        let libc_nr = |n: libc::c_long| u32::try_from(n).unwrap();
        for (c, n) in [
            (Call::Socket, libc::SYS_socket),
            (Call::Sendto, libc::SYS_sendto),
            (Call::Sendmsg, libc::SYS_sendmsg),
            (Call::Sendmmsg, libc::SYS_sendmmsg),
            (Call::Setsockopt, libc::SYS_setsockopt),
            (Call::IoUringSetup, libc::SYS_io_uring_setup),
        ] {
            assert_eq!(arch.nr(c), libc_nr(n), "{c:?}");
        }
    }

    #[test]
    fn every_jump_lands_inside_the_program_and_it_ends_in_returns() {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let p = program(arch);
            assert!(p.len() < 64, "{}", p.len());
            for (i, insn) in p.iter().enumerate() {
                if insn.code & 0x07 == 0x05 {
                    assert!(i + 1 + (insn.jt as usize) < p.len());
                    assert!(i + 1 + (insn.jf as usize) < p.len());
                    assert!(insn.jt < u8::MAX && insn.jf < u8::MAX);
                }
            }
            assert_eq!(p.last().unwrap().code, BPF_RET_K);
        }
    }

    #[test]
    fn mptcp_sockets_are_eacces_and_tcp_sockets_pass() {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let mptcp = u64::from(IPPROTO_MPTCP);
            assert_eq!(
                call(arch, Call::Socket, [AF_INET, SOCK_STREAM, mptcp, 0, 0, 0]),
                RET_EACCES
            );
            // SOCK_CLOEXEC in the type and junk in the upper half change nothing: the
            // kernel reads the protocol as an int.
            let junk = 0xdead_beef_0000_0000;
            assert_eq!(
                call(
                    arch,
                    Call::Socket,
                    [10, SOCK_STREAM | 0x80000, mptcp | junk, 0, 0, 0]
                ),
                RET_EACCES
            );
            for proto in [0, 6, 17] {
                assert_eq!(
                    call(arch, Call::Socket, [AF_INET, SOCK_STREAM, proto, 0, 0, 0]),
                    RET_ALLOW
                );
            }
        }
    }

    #[test]
    fn smc_sockets_are_eacces_and_other_families_pass() {
        // linux/socket.h and linux/in.h.
        assert_eq!((AF_SMC, IPPROTO_SMC), (43, 256));
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let smc = |family: u64, proto: u64| {
                call(arch, Call::Socket, [family, SOCK_STREAM, proto, 0, 0, 0])
            };
            // AF_SMC with either of its protocols (SMCPROTO_SMC, SMCPROTO_SMC6), and the
            // upper half of the family ignored as the kernel does.
            assert_eq!(smc(43, 0), RET_EACCES);
            assert_eq!(smc(43 | 0xffff_0000_0000_0000, 1), RET_EACCES);
            assert_eq!(smc(AF_INET, u64::from(IPPROTO_SMC)), RET_EACCES);
            assert_eq!(smc(10, u64::from(IPPROTO_SMC)), RET_EACCES);
            // unix (1), netlink (16), and the family numbers beside SMC's.
            for family in [1, 16, 42, 44] {
                assert_eq!(smc(family, 0), RET_ALLOW, "family {family}");
            }
        }
    }

    #[test]
    fn fast_open_sends_are_eacces_and_plain_sends_pass() {
        let fo = u64::from(MSG_FASTOPEN);
        let nosignal = 0x4000;
        for arch in [Arch::X86_64, Arch::Aarch64] {
            for (c, flags_at) in [(Call::Sendto, 3), (Call::Sendmmsg, 3), (Call::Sendmsg, 2)] {
                let mut args = [3, 0x1000, 1, 0, 0x2000, 16];
                args[flags_at] = fo | nosignal;
                assert_eq!(call(arch, c, args), RET_EACCES, "{c:?}");
                args[flags_at] = nosignal;
                assert_eq!(call(arch, c, args), RET_ALLOW, "{c:?}");
            }
        }
    }

    #[test]
    fn tcp_fastopen_connect_is_eacces_other_options_pass() {
        let tfo_connect = u64::from(TCP_FASTOPEN_CONNECT);
        for arch in [Arch::X86_64, Arch::Aarch64] {
            assert_eq!(
                call(arch, Call::Setsockopt, [3, 6, tfo_connect, 0x1000, 4, 0]),
                RET_EACCES
            );
            // TCP_FASTOPEN (a listener's queue), TCP_NODELAY, and option 30 at another level.
            for (level, name) in [(6, 23), (6, 1), (1, tfo_connect)] {
                assert_eq!(
                    call(arch, Call::Setsockopt, [3, level, name, 0x1000, 4, 0]),
                    RET_ALLOW
                );
            }
        }
    }

    #[test]
    fn io_uring_is_eperm() {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            for c in [
                Call::IoUringSetup,
                Call::IoUringEnter,
                Call::IoUringRegister,
            ] {
                assert_eq!(call(arch, c, [0; 6]), RET_EPERM, "{c:?}");
            }
        }
    }

    #[test]
    fn a_foreign_architecture_or_x32_is_killed_everything_else_passes() {
        const AUDIT_ARCH_I386: u32 = 0x4000_0003;
        const AUDIT_ARCH_ARM: u32 = 0x4000_0028;
        let x86 = program(Arch::X86_64);
        // i386's socketcall (102) and socket (359) through int 0x80.
        assert_eq!(run(&x86, AUDIT_ARCH_I386, 102, [0; 6]), RET_KILL_PROCESS);
        assert_eq!(run(&x86, AUDIT_ARCH_I386, 359, [0; 6]), RET_KILL_PROCESS);
        // x32 socket.
        let x32_socket = X32_SYSCALL_BIT | 41;
        assert_eq!(
            run(&x86, Arch::X86_64.audit_arch(), x32_socket, [0; 6]),
            RET_KILL_PROCESS
        );
        let arm = program(Arch::Aarch64);
        assert_eq!(run(&arm, AUDIT_ARCH_ARM, 281, [0; 6]), RET_KILL_PROCESS);
        assert_eq!(
            run(&arm, Arch::X86_64.audit_arch(), 198, [0; 6]),
            RET_KILL_PROCESS
        );
        // connect, read, write: untouched.
        for (arch, nrs) in [(Arch::X86_64, [42, 0, 1]), (Arch::Aarch64, [203, 63, 64])] {
            for nr in nrs {
                assert_eq!(
                    run(&program(arch), arch.audit_arch(), nr, [0; 6]),
                    RET_ALLOW
                );
            }
        }
    }
}
