//! `relay-shim exec`: the launch steps in their order. Each step either succeeds or
//! returns a [`Failure`] that names it; [`run`] prints that one line, sends its status
//! event and exits with its code. The shim fails closed: no step is skipped on error.

use std::ffi::OsString;
use std::io;
use std::os::fd::{OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::signal::SigmaskHow;

use crate::cli::{self, Backend, ExecArgs};
use crate::fds::{self, IDENTITY_FD, TOKEN_FD};
use crate::resolve::{self, ResolveError};
use crate::spawn::{self, Program, SpawnError, Stage};
use crate::status::Event;
use crate::target::{self, Target};
use crate::wrap::{self, Wrap};
use crate::{exit_codes, identity, landlock, seccomp};

/// The environment variable naming the daemon's bridge socket.
pub(crate) const BRIDGE_SOCKET_ENV: &str = "RELAY_BRIDGE_SOCKET";

/// A failed step: what to print, what to tell the host, how to exit.
struct Failure {
    step: &'static str,
    reason: String,
    code: i32,
    event: Option<Event>,
}

impl Failure {
    fn new(step: &'static str, reason: impl Into<String>, code: i32) -> Failure {
        Failure {
            step,
            reason: reason.into(),
            code,
            event: None,
        }
    }

    fn event(mut self, event: Event) -> Failure {
        self.event = Some(event);
        self
    }

    /// A setup failure (exit 70) reported to the host as `spawn_failed{errno}`.
    fn setup(step: &'static str, err: io::Error) -> Failure {
        let errno = err.raw_os_error().unwrap_or(libc::EIO);
        Failure::new(step, err.to_string(), exit_codes::SETUP).event(Event::SpawnFailed { errno })
    }
}

/// The status fd: events are written whole; a host that went away (EPIPE) or any other
/// write error is not the shim's problem to report.
struct StatusFd(RawFd);

impl StatusFd {
    fn emit(&self, event: Event) {
        let line = event.to_line();
        let mut bytes = line.as_bytes();
        while !bytes.is_empty() {
            match nix::unistd::write(borrowed(self.0), bytes) {
                Ok(0) => return,
                Ok(n) => bytes = &bytes[n..],
                Err(Errno::EINTR) => {}
                Err(_) => return,
            }
        }
    }
}

fn borrowed(fd: RawFd) -> std::os::fd::BorrowedFd<'static> {
    // Safety: only used for fds the shim keeps open until it exits (the status fd).
    unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }
}

/// Prints the one stderr line and exits.
fn die(msg: std::fmt::Arguments<'_>, code: i32) -> ! {
    eprintln!("relay-shim: {}", one_line(&msg.to_string()));
    std::process::exit(code)
}

/// `s` with control characters escaped, so a name holding a newline (a target's argv[0],
/// a profile path) cannot split the message into several lines.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Entry point of the binary.
pub(crate) fn run() -> ! {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let exec_args = match cli::parse(&args) {
        Ok(cli::Command::Version) => {
            println!("relay-shim {}", env!("CARGO_PKG_VERSION"));
            std::process::exit(0)
        }
        Ok(cli::Command::Exec(e)) => e,
        Ok(cli::Command::Enter { pty, argv }) => crate::enter::run(pty, &argv),
        Ok(cli::Command::Shield { listen, command }) => crate::shield::run(&listen, &command),
        Err(e) => die(format_args!("usage: {e}"), exit_codes::USAGE),
    };

    // The host may have gone away; a write to the status fd must not kill the shim.
    // SIGCHLD must not be ignored (an inherited SIG_IGN would auto-reap the target).
    // Safety: installing SIG_IGN / SIG_DFL runs no code of ours.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
    }

    let status_fd = exec_args.status_fd;
    if !fds::is_open(status_fd) {
        die(
            format_args!("usage: --status-fd {status_fd} is not open"),
            exit_codes::USAGE,
        );
    }
    // 0-2 belong to the target (a manual run may report on stdout); above 2 the status
    // pipe is the shim's alone.
    if status_fd > 2 {
        if let Err(e) = fds::set_cloexec(status_fd, true) {
            die(format_args!("status fd: {e}"), exit_codes::SETUP);
        }
    }
    let status = StatusFd(status_fd);

    match launch(&exec_args, &status) {
        Ok(never) => match never {},
        Err(f) => {
            if let Some(event) = f.event {
                status.emit(event);
            }
            die(format_args!("{}: {}", f.step, f.reason), f.code)
        }
    }
}

/// Steps 0-9; returns only on failure.
fn launch(args: &ExecArgs, status: &StatusFd) -> Result<std::convert::Infallible, Failure> {
    // 0. The target's environment and folder, as data: nothing outside the sandbox is
    //    started with them (crate::target).
    let target = Target::from_process().map_err(|e| {
        Failure::new("target", e, exit_codes::USAGE).event(Event::SpawnFailed {
            errno: libc::EINVAL,
        })
    })?;

    // 1. The token fd must be there before anything runs.
    if args.pass_token && !fds::is_open(TOKEN_FD) {
        return Err(Failure::new(
            "token fd",
            "--pass-token but fd 5 is not open",
            exit_codes::NO_TOKEN_FD,
        )
        .event(Event::SpawnFailed { errno: libc::EBADF }));
    }

    // 2-4. A session of its own, the identity, Landlock and the network filter.
    new_session(args.pty)?;
    identify(args, &target, status)?;
    confine(args)?;

    // 5. Nothing but 0, 1, 2 (and 5 with the token) survives exec.
    fds::mark_inherited_cloexec(args.pass_token).map_err(|e| Failure::setup("fd hygiene", e))?;

    // 6. The target.
    let argv0 = &args.argv[0];
    let cwd = target.cwd.clone().unwrap_or_else(|| PathBuf::from("/"));
    let resolved = resolve::resolve(argv0, target.var("PATH"), &cwd, resolve::probe_fs)
        .map_err(|e| resolve_failure(argv0, e))?;

    // 7. The sandbox launcher; the bind sources' descriptors live until exec (bwrap
    //    inherits them and closes each after its mount).
    let (program, bind_fds) = program(args, &target, &resolved)?;

    // 8. Spawn with the handled signals blocked, so none is lost before the wait loop.
    let signals = spawn::handled_signals();
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&signals), None)
        .map_err(|e| Failure::setup("spawn", e.into()))?;
    let child = spawn::spawn(&program, args.pty).map_err(|e| spawn_failure(&program, e))?;
    // bwrap has its copies; the shim needs none.
    drop(bind_fds);
    status.emit(Event::Started {
        pid: child.as_raw().unsigned_abs(),
    });

    // 9. Forward signals, report the end, exit with the target's code.
    let (end, code) = spawn::supervise(child, &signals)
        .map_err(|e| Failure::new("wait", e.to_string(), exit_codes::SETUP))?;
    status.emit(end);
    std::process::exit(code)
}

/// 2. A new session: no target may reach the terminal relay was started from.
fn new_session(pty: bool) -> Result<(), Failure> {
    nix::unistd::setsid().map_err(|e| Failure::setup("setsid", e.into()))?;
    if pty {
        // Safety: TIOCSCTTY takes an integer argument (0: do not steal).
        if unsafe { libc::ioctl(0, libc::TIOCSCTTY as _, 0) } != 0 {
            return Err(Failure::setup(
                "controlling terminal",
                io::Error::last_os_error(),
            ));
        }
    }
    Ok(())
}

/// 3. Identity: the Hello with the secret from fd 3, then `hello_ok`; without
///    `--identity`, `no_identity`.
fn identify(args: &ExecArgs, target: &Target, status: &StatusFd) -> Result<(), Failure> {
    let me = std::process::id();
    if !args.identity {
        status.emit(Event::NoIdentity { pid: me });
        return Ok(());
    }
    let secret = identity::read_secret(IDENTITY_FD).map_err(|r| {
        Failure::new("identity secret", r.0, exit_codes::IDENTITY).event(Event::BadSecret)
    })?;
    let hello_refused =
        |why: String| Failure::new("hello", why, exit_codes::IDENTITY).event(Event::HelloRefused);
    let socket = target
        .var(BRIDGE_SOCKET_ENV)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| hello_refused(format!("{BRIDGE_SOCKET_ENV} is not set")))?;
    identity::say_hello(&PathBuf::from(socket), &args.session_id, &secret)
        .map_err(|r| hello_refused(r.0))?;
    status.emit(Event::HelloOk { pid: me });
    Ok(())
}

/// 4. Landlock, applied to the shim itself so the launcher and target inherit it
///    (or, with --landlock-inherited, already inherited from the host's confined
///    thread: docs/session-host.md#the-confined-thread), then the seccomp filter for
///    the ways into TCP that Landlock does not see (MPTCP, TCP Fast Open, io_uring):
///    denied ports hold for every socket.
fn confine(args: &ExecArgs) -> Result<(), Failure> {
    if let Some(fd) = args.landlock_fd {
        landlock::restrict_self(fd).map_err(|e| Failure::setup("landlock", e))?;
        nix::unistd::close(fd).map_err(|e| Failure::setup("landlock", e.into()))?;
    }
    if let Some(port) = args.landlock_inherited {
        landlock::check_inherited(port).map_err(|e| {
            Failure::new("landlock", e.to_string(), exit_codes::SETUP)
                .event(Event::SpawnFailed { errno: libc::EPERM })
        })?;
    }
    if args.landlock_fd.is_some() || args.landlock_inherited.is_some() {
        seccomp::install().map_err(|e| Failure::setup("seccomp", e))?;
    }
    Ok(())
}

/// 7. What the shim execs: the target itself, or the sandbox launcher, which starts it
///    through `relay-shim enter` (granted read-only inside the sandbox by the daemon),
///    which applies the target's environment and folder there. With the descriptors of
///    a bwrap profile's bind sources.
fn program(
    args: &ExecArgs,
    target: &Target,
    resolved: &Path,
) -> Result<(Program, Vec<OwnedFd>), Failure> {
    let bwrap_args;
    let mut bind_fds = Vec::new();
    let self_exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| Failure::setup("own path", e))?;
    let tty = wrap::session_tty();
    let wrap = match &args.sandbox {
        None => Wrap::None,
        Some(s) if s.backend == Backend::Seatbelt => Wrap::Seatbelt {
            launcher: &s.launcher,
            profile: &s.profile,
            enter: &self_exe,
            tty: &tty,
        },
        Some(s) => {
            let (pinned, fds) = bwrap_profile(&s.profile)?;
            bwrap_args = pinned;
            bind_fds = fds;
            Wrap::Bwrap {
                launcher: &s.launcher,
                args: &bwrap_args,
                enter: &self_exe,
                pty: args.pty,
            }
        }
    };
    let (path, argv) = wrap::command_line(wrap, resolved, &args.argv);
    let program = match wrap {
        // No sandbox: the target is started here with what it was given.
        Wrap::None => Program::new(&path, &argv, target.envp(), target.cwd.as_deref()),
        // bwrap changes to the profile's `--chdir` itself; Seatbelt's `enter` changes
        // to the target's folder inside.
        Wrap::Bwrap { .. } | Wrap::Seatbelt { .. } => {
            let inside = Target {
                cwd: matches!(wrap, Wrap::Seatbelt { .. })
                    .then(|| target.cwd.clone())
                    .flatten(),
                env: target.env.clone(),
            };
            let encoded = inside
                .encode()
                .map_err(|e| Failure::setup("target", io::Error::other(e)))?;
            Program::new(&path, &argv, target::launcher_envp(&encoded), None)
        }
    }
    .map_err(|e| Failure::setup("spawn", e))?;
    Ok((program, bind_fds))
}

/// A bwrap profile's arguments, every bind source opened now without following a link
/// (the arguments then name the descriptors).
fn bwrap_profile(profile: &Path) -> Result<(Vec<String>, Vec<OwnedFd>), Failure> {
    let rendered = wrap::read_bwrap_profile(profile).map_err(|(errno, why)| {
        Failure::new(
            "sandbox profile",
            format!("{}: {why}", profile.display()),
            exit_codes::SETUP,
        )
        .event(Event::SpawnFailed { errno })
    })?;
    wrap::pin_bind_sources(&rendered).map_err(|(path, e)| {
        let errno = e.raw_os_error().unwrap_or(libc::EIO);
        Failure::new(
            "sandbox path",
            format!("{path}: {e} (changed since relay checked it: a link on the way?)"),
            exit_codes::SETUP,
        )
        .event(Event::SpawnFailed { errno })
    })
}

fn resolve_failure(argv0: &OsString, e: ResolveError) -> Failure {
    match e {
        ResolveError::NotFound => Failure::new(
            "resolve target",
            format!("{}: not found", argv0.to_string_lossy()),
            exit_codes::NOT_FOUND,
        )
        .event(Event::SpawnFailed {
            errno: libc::ENOENT,
        }),
        ResolveError::NotExecutable(path) => Failure::new(
            "resolve target",
            format!("{}: not executable", path.display()),
            exit_codes::NOT_EXECUTABLE,
        )
        .event(Event::SpawnFailed {
            errno: libc::EACCES,
        }),
    }
}

fn spawn_failure(program: &Program, e: SpawnError) -> Failure {
    match e {
        SpawnError::Setup { what, err } => Failure::setup(what, err),
        SpawnError::Child { stage, errno } => {
            let err = io::Error::from_raw_os_error(errno);
            let (step, reason) = match stage {
                Stage::Exec => ("exec", format!("{}: {err}", program.path().display())),
                Stage::Setpgid => ("spawn", format!("setpgid in the child: {err}")),
                Stage::Tcsetpgrp => ("spawn", format!("tcsetpgrp in the child: {err}")),
                Stage::Chdir => ("working folder", err.to_string()),
            };
            Failure::new(step, reason, spawn::child_failure_code(stage, errno))
                .event(Event::SpawnFailed { errno })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_stay_on_one_line() {
        assert_eq!(
            one_line("resolve target: a\nb: not found"),
            "resolve target: a\\nb: not found"
        );
        assert_eq!(one_line("tab\there é"), "tab\\there é");
    }
}
