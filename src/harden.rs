//! Hardening for the two processes that hold the token in memory, the daemon and the
//! session host (docs/THREAT-MODEL.md, "Hardened processes"). Threat: a process of the
//! same uid — an unsandboxed session, or anything else the user runs — reading their
//! memory (`/proc/<pid>/mem`, `ptrace`, `process_vm_readv`), and a core dump writing it
//! to disk. Both run this first thing:
//!
//! - `RLIMIT_CORE` 0, soft and hard: no core file, and no process of the uid can raise the
//!   limit again (`prlimit` cannot go above the hard limit without a capability). Every
//!   process they start inherits it, sessions included: a Claude target holds the token
//!   too, and a terminal gets no core dumps.
//! - Linux: `PR_SET_DUMPABLE` 0. The kernel then lets only a process with
//!   `CAP_SYS_PTRACE` open `/proc/<pid>/mem`, `environ`, `maps` or `fd`, attach with
//!   `ptrace` or read with `process_vm_readv`, and hands those files to root. It is reset
//!   by `execve`, so the sessions relay starts are dumpable again (they hold no relay
//!   secret but what the launch gives them).
//! - macOS: the core limit only, no `PT_DENY_ATTACH`. `task_for_pid` on another process
//!   (what a memory reader needs) takes root, or a debugger's entitlement plus the
//!   user's Developer Tools authorization; a plain same-uid process has neither.
//!   `PT_DENY_ATTACH` would add nothing against those two and is easy to get around.

/// Makes this process non-dumpable (Linux) and sets its core limit to 0. An error is a
/// reason not to start: the process would hold the token unprotected.
pub fn harden_process() -> Result<(), String> {
    let zero = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // Safety: setrlimit only reads `zero`, a plain struct on our stack.
    if unsafe { libc::setrlimit(libc::RLIMIT_CORE, &zero) } != 0 {
        return Err(format!(
            "set RLIMIT_CORE to 0: {}",
            std::io::Error::last_os_error()
        ));
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // Safety: prctl with integer arguments only; no memory is passed.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            return Err(format!(
                "PR_SET_DUMPABLE 0: {}",
                std::io::Error::last_os_error()
            ));
        }
        // Safety: as above.
        if unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            return Err("PR_SET_DUMPABLE 0 did not hold".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_hardened_child_has_no_core_limit_and_is_not_dumpable() {
        // In a child, so the test process itself stays as it was.
        // Safety: fork in a test; the child makes only async-signal-safe calls
        // (setrlimit, prctl, getrlimit, _exit) — `harden_process` allocates only on
        // its error path.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let ok = super::harden_process().is_ok();
            let mut lim = libc::rlimit {
                rlim_cur: 1,
                rlim_max: 1,
            };
            // Safety: getrlimit writes into `lim`, ours.
            let got = unsafe { libc::getrlimit(libc::RLIMIT_CORE, &mut lim) } == 0;
            #[cfg(any(target_os = "linux", target_os = "android"))]
            // Safety: integer arguments only.
            let dumpable = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) };
            #[cfg(not(any(target_os = "linux", target_os = "android")))]
            let dumpable = 0;
            let code = if ok && got && lim.rlim_cur == 0 && lim.rlim_max == 0 && dumpable == 0 {
                0
            } else {
                1
            };
            // Safety: _exit in the forked child.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // Safety: waitpid on our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "status {status}"
        );
    }
}
