//! The policy ([`super::policy`]) compiled to classic BPF for the architecture the shim
//! is built for. Plain data, built and checked here without the kernel.
//!
//! In order: the architecture check (any other kills the process, and on x86_64 so does
//! an x32 call), one jump per call of the policy, allow; then each call's argument
//! tests; then the answers.

use std::collections::HashMap;
use std::mem::offset_of;

use super::policy::{Arg, Rule, When};

/// One instruction, laid out as the kernel's `struct sock_filter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

// The five instructions the program uses (linux/bpf_common.h). libc has their parts
// as u32; an opcode is 16 bits.
const LD_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const JSET: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const RET: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// What the filter answers.
const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const KILL_PROCESS: u32 = libc::SECCOMP_RET_KILL_PROCESS;
fn errno(e: libc::c_int) -> u32 {
    libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA)
}

// Where the program reads `struct seccomp_data`. Both architectures are little endian,
// so an argument's low 32 bits come first.
const NR: u32 = offset_of!(libc::seccomp_data, nr) as u32;
const ARCH: u32 = offset_of!(libc::seccomp_data, arch) as u32;
fn arg_low(i: u32) -> u32 {
    offset_of!(libc::seccomp_data, args) as u32 + 8 * i
}

/// linux/audit.h's `__AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`, which libc lacks.
const AUDIT_64BIT_LE: u32 = 0x8000_0000 | 0x4000_0000;
/// asm/unistd.h's `__X32_SYSCALL_BIT`: x32 calls carry x86_64's `AUDIT_ARCH` and this
/// bit in their number. libc has it only when building for x32.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The architecture a program is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Arch {
    /// Its `AUDIT_ARCH_*`: the ELF machine, 64-bit, little endian.
    pub audit: u32,
    /// Whether x32 calls come in under the same `audit` (x86_64), to be killed too.
    pub x32: bool,
}

/// The architecture this shim was built for, when the filter knows it.
pub(crate) const NATIVE: Option<Arch> = if cfg!(target_arch = "x86_64") {
    Some(Arch {
        audit: AUDIT_64BIT_LE | libc::EM_X86_64 as u32,
        x32: true,
    })
} else if cfg!(target_arch = "aarch64") {
    Some(Arch {
        audit: AUDIT_64BIT_LE | libc::EM_AARCH64 as u32,
        x32: false,
    })
} else {
    None
};

/// A jump's target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum To {
    Next,
    /// The argument tests of rule `n`.
    Tests(usize),
    Allow,
    Errno(libc::c_int),
    Kill,
}

enum Op {
    Ld(u32),
    Jump(u16, u32, To, To),
    Ret(u32),
    Label(To),
}

/// The filter of `rules` for `arch`.
pub(crate) fn program(arch: Arch, rules: &[Rule]) -> Vec<Insn> {
    use Op::*;
    let mut ops = vec![Ld(ARCH), Jump(JEQ, arch.audit, To::Next, To::Kill), Ld(NR)];
    if arch.x32 {
        ops.push(Jump(JGE, X32_SYSCALL_BIT, To::Kill, To::Next));
    }
    for (n, rule) in rules.iter().enumerate() {
        let to = match rule.refuse {
            When::Always => To::Errno(rule.errno),
            When::Any(_) | When::All(_) => To::Tests(n),
        };
        // Call numbers are small and positive (the policy's tests hold it).
        ops.push(Jump(JEQ, rule.call as u32, to, To::Next));
    }
    ops.push(Ret(ALLOW));
    for (n, rule) in rules.iter().enumerate() {
        tests(&mut ops, n, rule);
    }
    ops.extend([Label(To::Allow), Ret(ALLOW)]);
    let mut answered = Vec::new();
    for rule in rules {
        if !answered.contains(&rule.errno) {
            answered.push(rule.errno);
            ops.extend([Label(To::Errno(rule.errno)), Ret(errno(rule.errno))]);
        }
    }
    ops.extend([Label(To::Kill), Ret(KILL_PROCESS)]);
    assemble(&ops)
}

/// Rule `n`'s argument tests: with `Any` the first that holds refuses and the last that
/// fails allows; with `All` the first that fails allows and the last that holds refuses.
fn tests(ops: &mut Vec<Op>, n: usize, rule: &Rule) {
    let (tests, any) = match rule.refuse {
        When::Always => return,
        When::Any(tests) => (tests, true),
        When::All(tests) => (tests, false),
    };
    ops.push(Op::Label(To::Tests(n)));
    let refuse = To::Errno(rule.errno);
    for (i, test) in tests.iter().enumerate() {
        let (hit, miss) = match (any, i + 1 == tests.len()) {
            (_, true) => (refuse, To::Allow),
            (true, false) => (refuse, To::Next),
            (false, false) => (To::Next, To::Allow),
        };
        let (arg, code, k) = match *test {
            Arg::Is(arg, value) => (arg, JEQ, value),
            Arg::Has(arg, bits) => (arg, JSET, bits),
        };
        // The kernel reads the argument as an int: its bits, as the filter sees them.
        ops.extend([Op::Ld(arg_low(arg)), Op::Jump(code, k as u32, hit, miss)]);
    }
}

/// Resolves labels into the forward jump offsets classic BPF uses.
fn assemble(ops: &[Op]) -> Vec<Insn> {
    let mut at = HashMap::new();
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
                label => at[&label],
            };
            // Jumps go forward and the program is short: both hold by construction,
            // and the tests walk every jump.
            u8::try_from(target - (here + 1)).unwrap_or(u8::MAX)
        };
        let insn = |code, jt, jf, k| Insn { code, jt, jf, k };
        out.push(match *op {
            Op::Label(_) => continue,
            Op::Ld(k) => insn(LD_ABS, 0, 0, k),
            Op::Jump(code, k, t, f) => insn(code, off(t), off(f), k),
            Op::Ret(k) => insn(RET, 0, 0, k),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::policy::{AF_SMC, IPPROTO_SMC, RULES};
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
                LD_ABS => acc = word(i.k),
                JEQ => pc += jump(acc == i.k),
                JGE => pc += jump(acc >= i.k),
                JSET => pc += jump(acc & i.k != 0),
                RET => return i.k,
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }

    fn native() -> Arch {
        NATIVE.expect("relay builds for x86_64 and aarch64")
    }

    fn call(nr: libc::c_long, args: [u64; 6]) -> u32 {
        let arch = native();
        run(&program(arch, RULES), arch.audit, nr as u32, args)
    }

    const AF_INET: u64 = libc::AF_INET as u64;
    const SOCK_STREAM: u64 = libc::SOCK_STREAM as u64;
    const EACCES: u32 = libc::SECCOMP_RET_ERRNO | libc::EACCES as u32;
    const EPERM: u32 = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;

    #[test]
    fn the_architecture_values_are_the_kernels() {
        // linux/audit.h: the ELF machine (EM_X86_64 62, EM_AARCH64 183) with the 64-bit
        // and little-endian bits; asm/unistd.h of each architecture for the numbers.
        let (audit, x32, numbers) = if cfg!(target_arch = "x86_64") {
            (0xC000_003E, true, [41, 44, 46, 307, 54, 425, 426, 427])
        } else {
            (0xC000_00B7, false, [198, 206, 211, 269, 208, 425, 426, 427])
        };
        assert_eq!(native(), Arch { audit, x32 });
        let calls = [
            libc::SYS_socket,
            libc::SYS_sendto,
            libc::SYS_sendmsg,
            libc::SYS_sendmmsg,
            libc::SYS_setsockopt,
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
            libc::SYS_io_uring_register,
        ];
        assert_eq!(calls, numbers);
    }

    #[test]
    fn the_answers_and_opcodes_are_the_kernels() {
        // linux/seccomp.h: SECCOMP_RET_ERRNO with the errno in the low 16 bits.
        assert_eq!(errno(libc::EACCES), 0x0005_000D);
        assert_eq!(errno(libc::EPERM), 0x0005_0001);
        assert_eq!((EACCES, EPERM), (0x0005_000D, 0x0005_0001));
        assert_eq!((ALLOW, KILL_PROCESS), (0x7fff_0000, 0x8000_0000));
        // linux/bpf_common.h: BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_{JEQ,JGE,JSET}|BPF_K, BPF_RET|BPF_K.
        assert_eq!(LD_ABS, 0x20);
        assert_eq!((JEQ, JGE, JSET, RET), (0x15, 0x35, 0x45, 0x06));
        // linux/seccomp.h's struct seccomp_data: nr, arch, instruction_pointer, args[6].
        assert_eq!((NR, ARCH, arg_low(0), arg_low(5)), (0, 4, 16, 56));
    }

    #[test]
    fn every_jump_lands_inside_the_program_and_it_ends_in_returns() {
        let p = program(native(), RULES);
        assert!(p.len() < 64, "{}", p.len());
        for (i, insn) in p.iter().enumerate() {
            if insn.code & 0x07 == 0x05 {
                assert!(i + 1 + (insn.jt as usize) < p.len());
                assert!(i + 1 + (insn.jf as usize) < p.len());
                assert!(insn.jt < u8::MAX && insn.jf < u8::MAX);
            }
        }
        assert_eq!(p.last().unwrap().code, RET);
    }

    #[test]
    fn mptcp_sockets_are_eacces_and_tcp_sockets_pass() {
        let mptcp = libc::IPPROTO_MPTCP as u64;
        let socket = |args| call(libc::SYS_socket, args);
        assert_eq!(socket([AF_INET, SOCK_STREAM, mptcp, 0, 0, 0]), EACCES);
        // SOCK_CLOEXEC in the type and junk in the upper half change nothing: the
        // kernel reads the protocol as an int.
        let junk = 0xdead_beef_0000_0000;
        let inet6 = libc::AF_INET6 as u64;
        let cloexec = libc::SOCK_CLOEXEC as u64;
        assert_eq!(
            socket([inet6, SOCK_STREAM | cloexec, mptcp | junk, 0, 0, 0]),
            EACCES
        );
        for proto in [0, 6, 17] {
            assert_eq!(socket([AF_INET, SOCK_STREAM, proto, 0, 0, 0]), ALLOW);
        }
    }

    #[test]
    fn smc_sockets_are_eacces_and_other_families_pass() {
        let smc =
            |family: u64, proto: u64| call(libc::SYS_socket, [family, SOCK_STREAM, proto, 0, 0, 0]);
        let af_smc = AF_SMC as u64;
        // AF_SMC with either of its protocols (SMCPROTO_SMC, SMCPROTO_SMC6), and the
        // upper half of the family ignored as the kernel does.
        assert_eq!(smc(af_smc, 0), EACCES);
        assert_eq!(smc(af_smc | 0xffff_0000_0000_0000, 1), EACCES);
        assert_eq!(smc(AF_INET, IPPROTO_SMC as u64), EACCES);
        assert_eq!(smc(libc::AF_INET6 as u64, IPPROTO_SMC as u64), EACCES);
        // unix (1), netlink (16), and the family numbers beside SMC's.
        for family in [1, 16, af_smc - 1, af_smc + 1] {
            assert_eq!(smc(family, 0), ALLOW, "family {family}");
        }
    }

    #[test]
    fn fast_open_sends_are_eacces_and_plain_sends_pass() {
        let fo = libc::MSG_FASTOPEN as u64;
        let nosignal = libc::MSG_NOSIGNAL as u64;
        for (nr, flags_at) in [
            (libc::SYS_sendto, 3),
            (libc::SYS_sendmmsg, 3),
            (libc::SYS_sendmsg, 2),
        ] {
            let mut args = [3, 0x1000, 1, 0, 0x2000, 16];
            args[flags_at] = fo | nosignal;
            assert_eq!(call(nr, args), EACCES, "{nr}");
            args[flags_at] = nosignal;
            assert_eq!(call(nr, args), ALLOW, "{nr}");
        }
    }

    #[test]
    fn tcp_fastopen_connect_is_eacces_other_options_pass() {
        let tfo_connect = libc::TCP_FASTOPEN_CONNECT as u64;
        let tcp = libc::IPPROTO_TCP as u64;
        let setsockopt = |level, name| call(libc::SYS_setsockopt, [3, level, name, 0x1000, 4, 0]);
        assert_eq!(setsockopt(tcp, tfo_connect), EACCES);
        // TCP_FASTOPEN (a listener's queue), TCP_NODELAY, and option 30 at another level.
        let fastopen = libc::TCP_FASTOPEN as u64;
        let nodelay = libc::TCP_NODELAY as u64;
        let sol_socket = libc::SOL_SOCKET as u64;
        for (level, name) in [(tcp, fastopen), (tcp, nodelay), (sol_socket, tfo_connect)] {
            assert_eq!(setsockopt(level, name), ALLOW, "{level} {name}");
        }
    }

    #[test]
    fn io_uring_is_eperm() {
        for nr in [
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
            libc::SYS_io_uring_register,
        ] {
            assert_eq!(call(nr, [0; 6]), EPERM, "{nr}");
        }
    }

    #[test]
    fn a_foreign_architecture_or_x32_is_killed_everything_else_passes() {
        // linux/audit.h: i386 (EM_386 3) and arm (EM_ARM 40), 32-bit little endian.
        const AUDIT_ARCH_I386: u32 = 0x4000_0003;
        const AUDIT_ARCH_ARM: u32 = 0x4000_0028;
        let native = native();
        // The program shaped for the other 64-bit architecture too (its x32 check or
        // none), with this one's numbers: only the numbers differ on a real build.
        let other_64 = if native.x32 { 0xC000_00B7 } else { 0xC000_003E };
        let other = Arch {
            audit: other_64,
            x32: !native.x32,
        };
        for (arch, foreign_64) in [(native, other_64), (other, native.audit)] {
            let prog = program(arch, RULES);
            // i386's socketcall (102) and socket (359) through int 0x80, arm's socket
            // (281), and the other 64-bit architecture's socket.
            for (audit, nr) in [
                (AUDIT_ARCH_I386, 102),
                (AUDIT_ARCH_I386, 359),
                (AUDIT_ARCH_ARM, 281),
                (foreign_64, libc::SYS_socket as u32),
            ] {
                let got = run(&prog, audit, nr, [0; 6]);
                assert_eq!(got, KILL_PROCESS, "{arch:?}: {audit:#x} {nr}");
            }
            // x32's socket, killed where x32 shares the architecture (x86_64).
            let x32_socket = X32_SYSCALL_BIT | libc::SYS_socket as u32;
            let x32 = if arch.x32 { KILL_PROCESS } else { ALLOW };
            assert_eq!(run(&prog, arch.audit, x32_socket, [0; 6]), x32, "{arch:?}");
            // connect, read, write: untouched.
            for nr in [libc::SYS_connect, libc::SYS_read, libc::SYS_write] {
                let got = run(&prog, arch.audit, nr as u32, [0; 6]);
                assert_eq!(got, ALLOW, "{arch:?}: {nr}");
            }
        }
    }
}
