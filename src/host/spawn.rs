//! The whole child recipe for one shim, in one place: argv and flags, explicit
//! environment, working directory, the fd table (identity pipe, status pipe, token
//! pipe), and the wait for the shim's `started`. A launch with denied ports runs
//! [`spawn`] on its port set's confined thread (`confined.rs`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{OwnedFd, RawFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use relay_shim::status::Event;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};

use relay_shim::cli::{ExecArgs, Sandbox};
use relay_shim::fds::default_status_fd;

use super::fds::{self, Staging, IDENTITY_FD, TOKEN_FD};
use super::LaunchError;
use crate::cloexec::{self, ForkGuard};
use crate::protocol::{SandboxLaunch, Secret};

/// How long the host waits for the shim's `started`.
pub const STARTED_TIMEOUT: Duration = Duration::from_secs(10);
const STATUS_LINE_MAX: usize = 4096;

pub struct Plan {
    /// What to exec for the shim: its descriptor's path (`relay::helpers`).
    pub shim: PathBuf,
    pub session_id: String,
    pub argv: Vec<String>,
    pub env: BTreeMap<OsString, OsString>,
    pub cwd: PathBuf,
    pub pty: bool,
    pub sandbox: Option<SandboxLaunch>,
    pub identity: Option<Secret>,
    pub token: Option<Secret>,
    /// Forked from a confined thread: the shim starts inside the Landlock domain of
    /// the denied ports, and checks it with a connect to this one (set only by
    /// `Confined::spawn`).
    pub landlock_inherited: Option<u16>,
    pub stdin: Stdio,
    pub stdout: Stdio,
    pub stderr: Stdio,
    /// The session's cgroup files to join and memory limit (`crate::limits`).
    pub cgroup_procs: Vec<std::ffi::CString>,
    pub data_limit: Option<u64>,
}

/// Linux: the shim gets SIGKILL when the host dies, however it dies (and the shim's
/// own children get the same from the shim), so a host killed together with its daemon
/// leaves no session running (docs/session-host.md#when-a-parent-dies). The signal
/// follows the thread that forked: launches fork on the runtime's worker threads or on a
/// confined thread (`confined.rs`), all of which live as long as the host. Runs between
/// fork and exec.
#[cfg(target_os = "linux")]
fn die_with_host(host_pid: libc::pid_t) -> std::io::Result<()> {
    // Safety: prctl with integer arguments and getppid; no memory is passed.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // The host died before the signal was armed.
        if libc::getppid() != host_pid {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
    }
    Ok(())
}

/// macOS has no parent-death signal: when the host dies the daemon kills the session's
/// process groups; a host and daemon killed together leave them running there.
#[cfg(not(target_os = "linux"))]
fn die_with_host(_host_pid: libc::pid_t) -> std::io::Result<()> {
    Ok(())
}

pub struct Spawned {
    pub child: Child,
    pub shim_pid: u32,
    pub status: BufReader<pipe::Receiver>,
}

/// A pipe whose write end got `bytes` and was closed; the read end is returned.
fn filled_pipe(g: &ForkGuard, bytes: &[u8]) -> std::io::Result<OwnedFd> {
    let (read, write) = g.pipe()?;
    let mut w = std::fs::File::from(write);
    // Below the pipe buffer (the token is capped at 4096 bytes), so this never blocks.
    w.write_all(bytes)?;
    drop(w);
    Ok(read)
}

/// The shim's command line, built by the shim crate's own [`ExecArgs::to_args`].
fn shim_args(plan: &Plan, status_fd: RawFd) -> Vec<OsString> {
    ExecArgs {
        session_id: plan.session_id.clone(),
        identity: plan.identity.is_some(),
        pty: plan.pty,
        sandbox: plan.sandbox.as_ref().map(|sb| Sandbox {
            backend: sb.backend,
            profile: sb.profile_path.clone(),
            launcher: sb
                .launcher
                .clone()
                .unwrap_or_else(|| sb.backend.default_launcher().into()),
        }),
        status_fd,
        pass_token: plan.token.is_some(),
        landlock_fd: None,
        landlock_inherited: plan.landlock_inherited,
        argv: plan.argv.iter().map(OsString::from).collect(),
    }
    .to_args()
}

pub fn spawn(plan: Plan) -> Result<Spawned, LaunchError> {
    let failed = |what: &str, e: std::io::Error| LaunchError::SpawnFailed(format!("{what}: {e}"));
    // Held from the first pipe to the last placeholder: on macOS a pipe is made and then
    // marked close-on-exec, and no other launch may fork in between (src/cloexec.rs).
    let g = cloexec::lock();
    let mut staging = Staging::default();
    let status_fd = default_status_fd(plan.identity.is_some());
    if let Some(secret) = &plan.identity {
        let r =
            filled_pipe(&g, secret.expose().as_bytes()).map_err(|e| failed("identity pipe", e))?;
        staging.put(IDENTITY_FD, r);
    }
    let (status_read, status_write) = g.pipe().map_err(|e| failed("status pipe", e))?;
    staging.put(status_fd, status_write);
    if let Some(token) = &plan.token {
        // Never name the token in an error: only the step.
        let r = filled_pipe(&g, token.expose().as_bytes()).map_err(|e| failed("token pipe", e))?;
        staging.put(TOKEN_FD, r);
    }

    // The shim runs outside every sandbox: it starts with one variable, the target's
    // environment and folder as data, and in `/`, so no loader variable and no
    // session-written library in the session's folder reaches it (relay_shim::target).
    let target = relay_shim::target::Target {
        cwd: Some(plan.cwd.clone()),
        env: plan
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
    .encode()
    .map_err(LaunchError::SpawnFailed)?;
    let mut cmd = Command::new(&plan.shim);
    cmd.arg0("relay-shim")
        .args(shim_args(&plan, status_fd))
        .env_clear()
        .env(relay_shim::target::TARGET_VAR, target)
        .current_dir("/")
        .stdin(plan.stdin)
        .stdout(plan.stdout)
        .stderr(plan.stderr)
        .kill_on_drop(false);
    let keep: Vec<RawFd> = staging.numbers();
    let keep_arr: [RawFd; 3] = {
        let mut a = [-1; 3];
        for (i, n) in keep.iter().enumerate() {
            a[i] = *n;
        }
        a
    };
    let n_keep = keep.len();
    let limit = cloexec::sweep_limit();
    let host_pid = std::process::id() as libc::pid_t;
    let (procs, data_limit) = (plan.cgroup_procs.clone(), plan.data_limit);
    // Safety: the closure runs between fork and exec and only calls fcntl/close_range,
    // prctl, getppid, open/write/close and setrlimit (async-signal-safe); it allocates
    // nothing: `keep_arr` is a copied array, `procs` made before the fork. It marks
    // everything else from 3 up close-on-exec (the placeholders on 3..=5 are already),
    // then joins the session's cgroup, so all the session starts is in it.
    unsafe {
        cmd.pre_exec(move || {
            cloexec::keep_only(&keep_arr[..n_keep], limit)?;
            die_with_host(host_pid)?;
            crate::limits::enter(&procs, data_limit)
        });
    }

    let child = {
        if let Err(e) = staging.stage(&g) {
            let _ = fds::restore_placeholders(&g);
            return Err(failed("stage descriptors", e));
        }
        let spawned = cmd.spawn();
        let restored = fds::restore_placeholders(&g);
        let child = spawned.map_err(|e| failed("start relay-shim", e))?;
        restored.map_err(|e| failed("restore descriptors", e))?;
        child
    };
    drop(g);
    drop(staging);
    let shim_pid = child.id().unwrap_or(0);
    let receiver =
        pipe::Receiver::from_owned_fd(status_read).map_err(|e| failed("status pipe", e))?;
    Ok(Spawned {
        child,
        shim_pid,
        status: BufReader::new(receiver),
    })
}

/// Reads one status event; `None` on EOF or a malformed/oversized line.
pub async fn next_event(status: &mut BufReader<pipe::Receiver>) -> Option<Event> {
    let mut line = String::new();
    match status.read_line(&mut line).await {
        Ok(0) | Err(_) => None,
        Ok(n) if n > STATUS_LINE_MAX => None,
        Ok(_) => Event::parse(&line),
    }
}

/// Waits for `started` and returns the target's pid.
pub async fn wait_started(
    status: &mut BufReader<pipe::Receiver>,
    identity: bool,
) -> Result<u32, LaunchError> {
    let run = async {
        loop {
            match next_event(status).await {
                Some(Event::Started { pid }) => return Ok(pid),
                Some(Event::HelloOk { .. }) if identity => continue,
                Some(Event::NoIdentity { .. }) if !identity => continue,
                Some(Event::HelloOk { .. }) | Some(Event::NoIdentity { .. }) => {
                    return Err(LaunchError::SpawnFailed(
                        "shim reported the wrong identity mode".into(),
                    ))
                }
                Some(Event::BadSecret) => {
                    return Err(LaunchError::IdentityRefused(
                        "the shim refused the identity secret".into(),
                    ))
                }
                Some(Event::HelloRefused) => {
                    return Err(LaunchError::IdentityRefused(
                        "the daemon refused the session's Hello".into(),
                    ))
                }
                Some(Event::SpawnFailed { errno }) if errno == libc::ELOOP => {
                    // The shim's bind-source walk met a symlink (shim/src/wrap.rs).
                    return Err(LaunchError::SpawnFailed(
                        "a sandbox path became a symlink after relay checked it (a session \
                         may have planted it); the launch was stopped"
                            .into(),
                    ));
                }
                Some(Event::SpawnFailed { errno }) => {
                    let reason = std::io::Error::from_raw_os_error(errno);
                    return Err(LaunchError::SpawnFailed(format!(
                        "the target could not be started: {reason}"
                    )));
                }
                Some(Event::Exit { .. }) => {
                    return Err(LaunchError::SpawnFailed(
                        "the shim reported an exit before the start".into(),
                    ))
                }
                None => {
                    return Err(LaunchError::SpawnFailed(
                        "the shim ended before the target started".into(),
                    ))
                }
            }
        }
    };
    match tokio::time::timeout(STARTED_TIMEOUT, run).await {
        Ok(r) => r,
        Err(_) => Err(LaunchError::SpawnFailed(
            "no start from the shim within 10 s".into(),
        )),
    }
}

/// Signals a session's process groups: the shim is a session (and group) leader, the
/// target leads its own group.
pub fn signal_groups(shim_pid: u32, target_pid: Option<u32>, sig: libc::c_int) {
    for pid in [Some(shim_pid), target_pid].into_iter().flatten() {
        if pid > 1 {
            // Safety: kill(2) with a negative pid signals a process group; no memory.
            unsafe { libc::kill(-(pid as libc::pid_t), sig) };
        }
    }
}
