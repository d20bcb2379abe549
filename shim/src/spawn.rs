//! The whole child recipe: fork, own process group, foreground of the session pty,
//! clean signal state, exec; then the wait loop that forwards signals to the target's
//! group and turns its end into the shim's exit code.
//!
//! The signals the shim handles are blocked before fork and taken with `sigwait`, so none
//! is lost between fork and the wait loop and no handler ever runs. Exec failures come
//! back over a close-on-exec pipe: EOF means the exec happened.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::exit_codes;
use crate::status::Event;

/// The signals the shim takes with `sigwait`: the four it forwards and SIGCHLD.
pub(crate) fn handled_signals() -> SigSet {
    let mut set = SigSet::empty();
    for sig in [
        Signal::SIGHUP,
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGQUIT,
        Signal::SIGCHLD,
    ] {
        set.add(sig);
    }
    set
}

/// A program, its argv, its whole environment and the folder it starts in, converted
/// before fork so the child allocates nothing.
pub(crate) struct Program {
    path: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: Option<CString>,
}

impl Program {
    /// `envp` is everything the program gets (nothing is inherited); with `cwd` the
    /// child changes there before exec, else it starts where the shim is (`/`).
    pub(crate) fn new(
        path: &Path,
        argv: &[OsString],
        envp: Vec<CString>,
        cwd: Option<&Path>,
    ) -> io::Result<Program> {
        let c = |b: &[u8]| CString::new(b).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL));
        Ok(Program {
            path: c(path.as_os_str().as_bytes())?,
            argv: argv
                .iter()
                .map(|a| c(a.as_bytes()))
                .collect::<io::Result<_>>()?,
            envp,
            cwd: cwd.map(|d| c(d.as_os_str().as_bytes())).transpose()?,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        Path::new(std::ffi::OsStr::from_bytes(self.path.as_bytes()))
    }
}

/// The step of the child recipe that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    Exec = 0,
    Setpgid = 1,
    Tcsetpgrp = 2,
    Chdir = 3,
}

impl Stage {
    fn from_wire(n: u32) -> Option<Stage> {
        match n {
            0 => Some(Stage::Exec),
            1 => Some(Stage::Setpgid),
            2 => Some(Stage::Tcsetpgrp),
            3 => Some(Stage::Chdir),
            _ => None,
        }
    }
}

#[derive(Debug)]
pub(crate) enum SpawnError {
    /// The shim's own side failed (pipe, fork, setpgid); `what` names the call.
    Setup { what: &'static str, err: io::Error },
    /// The child reported a failure before or at exec; the child has been reaped.
    Child { stage: Stage, errno: i32 },
}

/// The shim's exit code when the child reported `errno` at `stage`.
pub(crate) fn child_failure_code(stage: Stage, errno: i32) -> i32 {
    match (stage, errno) {
        (Stage::Exec, libc::ENOENT) => exit_codes::NOT_FOUND,
        (Stage::Exec, libc::EACCES | libc::ENOEXEC | libc::EPERM) => exit_codes::NOT_EXECUTABLE,
        _ => exit_codes::SETUP,
    }
}

/// The event and exit code for the target's end, or `None` when `status` is not an end.
pub(crate) fn outcome(status: WaitStatus) -> Option<(Event, i32)> {
    match status {
        WaitStatus::Exited(_, code) => Some((
            Event::Exit {
                status: Some(code),
                signal: None,
            },
            code,
        )),
        WaitStatus::Signaled(_, sig, _) => {
            let n = sig as i32;
            Some((
                Event::Exit {
                    status: None,
                    signal: Some(n),
                },
                128 + n,
            ))
        }
        _ => None,
    }
}

/// Forks and execs `program`. The caller has blocked [`handled_signals`]. With `pty`,
/// fd 0 is the session's controlling terminal and the target's group becomes its
/// foreground group.
pub(crate) fn spawn(program: &Program, pty: bool) -> Result<Pid, SpawnError> {
    let setup = |what: &'static str| move |err: io::Error| SpawnError::Setup { what, err };
    let (err_r, err_w) = exec_error_pipe().map_err(setup("exec-error pipe"))?;

    // Everything the child touches is built here, before fork.
    let mut argv_ptrs: Vec<*const libc::c_char> = program.argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut env_ptrs: Vec<*const libc::c_char> = program.envp.iter().map(|a| a.as_ptr()).collect();
    env_ptrs.push(std::ptr::null());
    let empty_mask = SigSet::empty();
    let parent = std::process::id() as libc::pid_t;

    // Safety: the shim is single-threaded at this point (no thread is ever started), so
    // the child may run any code; it still calls only async-signal-safe functions.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(setup("fork")(io::Error::last_os_error()));
    }
    if pid == 0 {
        drop(err_r);
        // Safety: we are the freshly forked child; every pointer was prepared above and
        // stays valid because the parent's memory is copied as it was.
        unsafe {
            child(
                program,
                &argv_ptrs,
                &env_ptrs,
                &empty_mask,
                err_w.as_raw_fd(),
                pty,
                parent,
            )
        }
    }
    let child_pid = Pid::from_raw(pid);
    drop(err_w);

    // Both sides set the group, so that it exists whichever runs first; the child may
    // already have exec'd (EACCES) or exited (ESRCH).
    match nix::unistd::setpgid(child_pid, child_pid) {
        Ok(()) | Err(Errno::EACCES) | Err(Errno::ESRCH) => {}
        Err(e) => {
            kill_and_reap(child_pid);
            return Err(setup("setpgid")(e.into()));
        }
    }
    if pty {
        // The shim is now a background process on the pty; with SIGTTOU ignored its own
        // stderr writes and this call do not stop it. The child did the same, so an
        // error here (it already exec'd and moved on) changes nothing.
        // Safety: installing SIG_IGN runs no code of ours.
        unsafe { libc::signal(libc::SIGTTOU, libc::SIG_IGN) };
        let _ = nix::unistd::tcsetpgrp(std::io::stdin(), child_pid);
    }

    match read_exec_error(&err_r) {
        Ok(None) => Ok(child_pid),
        Ok(Some((stage, errno))) => {
            reap(child_pid);
            Err(SpawnError::Child { stage, errno })
        }
        Err(err) => {
            kill_and_reap(child_pid);
            Err(SpawnError::Setup {
                what: "exec-error pipe",
                err,
            })
        }
    }
}

/// The child side. Never returns.
///
/// # Safety
/// Must be called only in the child right after fork; `argv` and `envp` must be the
/// NULL-terminated pointers into `program.argv` and `program.envp`.
unsafe fn child(
    program: &Program,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    empty_mask: &SigSet,
    err_w: RawFd,
    pty: bool,
    parent: libc::pid_t,
) -> ! {
    // Safety: only async-signal-safe calls (prctl, getppid, setpgid, signal, tcsetpgrp,
    // getpid, sigprocmask, chdir, execve, write, _exit), on pointers prepared before fork.
    unsafe {
        // The target (or the launcher) dies with the shim: a shim killed, or taken down
        // with its host, leaves nothing running (docs/session-host.md#when-a-parent-dies).
        // bwrap sets the same for itself (`--die-with-parent`). The signal is cleared by
        // the exec of a set-uid program; macOS has no parent-death signal.
        #[cfg(target_os = "linux")]
        {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() != parent {
                libc::_exit(exit_codes::SETUP);
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = parent;
        if libc::setpgid(0, 0) != 0 {
            report(err_w, Stage::Setpgid);
        }
        if pty {
            libc::signal(libc::SIGTTOU, libc::SIG_IGN);
            if libc::tcsetpgrp(0, libc::getpid()) != 0 {
                report(err_w, Stage::Tcsetpgrp);
            }
        }
        // Ignored dispositions survive exec; the target starts with every default,
        // including SIGPIPE (ignored in the shim) and SIGTTOU.
        for sig in 1..65 {
            libc::signal(sig, libc::SIG_DFL);
        }
        libc::sigprocmask(libc::SIG_SETMASK, empty_mask.as_ref(), std::ptr::null_mut());
        if let Some(cwd) = &program.cwd {
            if libc::chdir(cwd.as_ptr()) != 0 {
                report(err_w, Stage::Chdir);
            }
        }
        libc::execve(program.path.as_ptr(), argv.as_ptr(), envp.as_ptr());
        report(err_w, Stage::Exec)
    }
}

/// Sends `(stage, errno)` to the parent and exits. Async-signal-safe.
fn report(err_w: RawFd, stage: Stage) -> ! {
    let errno = Errno::last_raw();
    let mut buf = [0u8; 8];
    buf[..4].copy_from_slice(&(stage as u32).to_ne_bytes());
    buf[4..].copy_from_slice(&errno.to_ne_bytes());
    // Safety: `buf` is a live 8-byte buffer; write and _exit are async-signal-safe. A
    // short or failed write leaves the parent with a partial message or EOF, which it
    // treats as a failure or as an exec that happened and exited 127.
    unsafe {
        libc::write(err_w, buf.as_ptr().cast(), buf.len());
        libc::_exit(exit_codes::NOT_FOUND)
    }
}

/// Reads the child's report: `None` on EOF (the exec happened).
fn read_exec_error(err_r: &OwnedFd) -> io::Result<Option<(Stage, i32)>> {
    let mut buf = [0u8; 8];
    let mut len = 0;
    while len < buf.len() {
        match nix::unistd::read(err_r.as_raw_fd(), &mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    match len {
        0 => Ok(None),
        8 => {
            let stage = u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]);
            let errno = i32::from_ne_bytes([buf[4], buf[5], buf[6], buf[7]]);
            let stage = Stage::from_wire(stage)
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unknown stage"))?;
            Ok(Some((stage, errno)))
        }
        _ => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "partial report from the child",
        )),
    }
}

/// The child's exec-error pipe, both ends close-on-exec. macOS has no `pipe2`, so the
/// pipe is made, then marked; the shim is single-threaded, so no fork can come between.
fn exec_error_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = nix::unistd::pipe()?;
    crate::fds::set_cloexec(r.as_raw_fd(), true)?;
    crate::fds::set_cloexec(w.as_raw_fd(), true)?;
    Ok((r, w))
}

fn reap(pid: Pid) {
    loop {
        match nix::sys::wait::waitpid(pid, None) {
            Err(Errno::EINTR) => continue,
            _ => return,
        }
    }
}

fn kill_and_reap(pid: Pid) {
    let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
    reap(pid);
}

/// Waits for the target, forwarding HUP/INT/TERM/QUIT to its process group and reaping
/// every child. Returns the target's end; `signals` must be blocked.
pub(crate) fn supervise(target: Pid, signals: &SigSet) -> io::Result<(Event, i32)> {
    let group = Pid::from_raw(-target.as_raw());
    loop {
        match signals.wait()? {
            Signal::SIGCHLD => loop {
                match nix::sys::wait::waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) => break,
                    Ok(status) => {
                        if status.pid() == Some(target) {
                            if let Some(end) = outcome(status) {
                                return Ok(end);
                            }
                        }
                    }
                    Err(Errno::EINTR) => {}
                    Err(Errno::ECHILD) => {
                        return Err(io::Error::other("the target vanished without a status"))
                    }
                    Err(e) => return Err(e.into()),
                }
            },
            sig => {
                // ESRCH: the group is already gone; its SIGCHLD is on its way.
                let _ = nix::sys::signal::kill(group, sig);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_failures_map_to_exit_codes() {
        assert_eq!(child_failure_code(Stage::Exec, libc::ENOENT), 127);
        assert_eq!(child_failure_code(Stage::Exec, libc::EACCES), 126);
        assert_eq!(child_failure_code(Stage::Exec, libc::ENOEXEC), 126);
        assert_eq!(child_failure_code(Stage::Exec, libc::EPERM), 126);
        assert_eq!(child_failure_code(Stage::Exec, libc::E2BIG), 70);
        assert_eq!(child_failure_code(Stage::Setpgid, libc::ENOENT), 70);
        assert_eq!(child_failure_code(Stage::Tcsetpgrp, libc::ENOTTY), 70);
    }

    #[test]
    fn outcomes() {
        let pid = Pid::from_raw(42);
        assert_eq!(
            outcome(WaitStatus::Exited(pid, 3)),
            Some((
                Event::Exit {
                    status: Some(3),
                    signal: None
                },
                3
            ))
        );
        assert_eq!(
            outcome(WaitStatus::Signaled(pid, Signal::SIGTERM, false)),
            Some((
                Event::Exit {
                    status: None,
                    signal: Some(15)
                },
                143
            ))
        );
        assert_eq!(outcome(WaitStatus::StillAlive), None);
        assert_eq!(outcome(WaitStatus::Stopped(pid, Signal::SIGTSTP)), None);
    }

    #[test]
    fn program_refuses_interior_nul() {
        assert!(Program::new(
            Path::new("/bin/sh"),
            &[OsString::from("a\0b")],
            vec![],
            None
        )
        .is_err());
        let p = Program::new(Path::new("/bin/sh"), &[OsString::from("sh")], vec![], None).unwrap();
        assert_eq!(p.path(), Path::new("/bin/sh"));
    }
}
