//! One launch, start to finish: validate the request, reserve the id, open the
//! session's I/O, build the environment, spawn the shim, wait for `started`, and on any
//! failure kill and reap everything spawned. Also terminate and the exit watcher.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relay_shim::status::Event;
use tokio::io::BufReader;
use tokio::net::unix::pipe;
use tokio::process::Child;
use tokio::task::JoinHandle;

use super::confined::Confined;
use super::provider::{self, Provider};
use super::redact::{Patterns, Redactor};
use super::spawn::{self, Plan};
use super::strays::ShimRecord;
use super::terminal::{self, Terminal};
use super::termlog::DiskLog;
use super::{env, Host, Session, SessionIo, Slot};
use crate::limits::SessionGroup;
use crate::protocol::{
    Backend, ExitReason, HostCode, HostEvent, LaunchRequest, LaunchResponse, Routing, SessionInfo,
    SessionKind, SessionState, HOST_PROTOCOL_VERSION,
};

/// How long a terminated session gets between SIGTERM and SIGKILL.
pub const TERMINATE_GRACE: Duration = Duration::from_secs(3);
pub const TOKEN_MAX_BYTES: usize = 4096;

#[derive(Debug)]
pub enum LaunchError {
    InvalidSpec(String),
    SessionExists(String),
    IdentityRefused(String),
    SpawnFailed(String),
}

impl LaunchError {
    /// The one mapping from launch errors to the host's error codes and HTTP statuses.
    pub fn code(&self) -> HostCode {
        match self {
            LaunchError::InvalidSpec(_) => HostCode::InvalidSpec,
            LaunchError::SessionExists(_) => HostCode::SessionExists,
            LaunchError::IdentityRefused(_) => HostCode::IdentityRefused,
            LaunchError::SpawnFailed(_) => HostCode::SpawnFailed,
        }
    }
    pub fn message(&self) -> &str {
        match self {
            LaunchError::InvalidSpec(m)
            | LaunchError::SessionExists(m)
            | LaunchError::IdentityRefused(m)
            | LaunchError::SpawnFailed(m) => m,
        }
    }
}

/// Session ids become file names: a conservative alphabet.
pub fn valid_session_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// Every check that needs no side effect. Messages never carry the token.
pub fn validate(req: &LaunchRequest) -> Result<(), LaunchError> {
    let bad = |m: &str| Err(LaunchError::InvalidSpec(m.to_string()));
    if req.v != HOST_PROTOCOL_VERSION {
        return Err(LaunchError::InvalidSpec(format!(
            "protocol version {} (this host speaks {HOST_PROTOCOL_VERSION})",
            req.v
        )));
    }
    if !valid_session_id(&req.session_id) {
        return bad("session_id must be 1-64 characters of [A-Za-z0-9._-], not starting with '.'");
    }
    if req.argv.is_empty() || req.argv[0].is_empty() {
        return bad("argv must name a program");
    }
    if req.argv.iter().any(|a| a.contains('\0')) {
        return bad("argv must not contain NUL");
    }
    if !req.directory.is_absolute() {
        return bad("directory must be absolute");
    }
    if !req.directory.is_dir() {
        return Err(LaunchError::InvalidSpec(format!(
            "directory {} is not a folder",
            req.directory.display()
        )));
    }
    if let Some(name) = req.env.keys().find(|k| !env::valid_name(k)) {
        return Err(LaunchError::InvalidSpec(format!(
            "env name {name:?} is not valid"
        )));
    }
    if req.env.values().any(|v| v.contains('\0')) {
        return bad("env values must not contain NUL");
    }
    if let Some(p) = req
        .env_allowlist
        .iter()
        .flat_map(|a| &a.passthrough)
        .find(|p| !env::valid_pattern(p))
    {
        return Err(LaunchError::InvalidSpec(format!(
            "env_allowlist entry {p:?} is not a name or a PREFIX* pattern"
        )));
    }
    if let Some(pty) = req.pty {
        if pty.cols == 0 || pty.rows == 0 {
            return bad("pty size must be at least 1x1");
        }
    }
    if let Some(sb) = &req.sandbox {
        if !sb.profile_path.is_absolute() {
            return bad("sandbox.profile_path must be absolute");
        }
        if sb.launcher.as_ref().is_some_and(|l| !l.is_absolute()) {
            return bad("sandbox.launcher must be absolute");
        }
    }
    if let Some(id) = &req.identity {
        let s = id.secret.expose();
        if s.len() != 64
            || !s
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return bad("identity.secret must be 64 lowercase hex characters");
        }
    }
    if let Some(token) = &req.claude_token {
        if req.sandbox.is_none() {
            return bad("claude_token needs a sandboxed launch");
        }
        if !req.is_claude_launch() {
            return bad("claude_token is only for a claude session or a pty launch of the claude-code template");
        }
        if token.is_empty() || token.len() > TOKEN_MAX_BYTES {
            return bad("claude_token must be 1 to 4096 bytes");
        }
    }
    if req
        .redact_token
        .as_ref()
        .is_some_and(|t| t.len() > TOKEN_MAX_BYTES)
    {
        return bad("redact_token must be at most 4096 bytes");
    }
    Ok(())
}

/// The confined thread of the port set (`confined.rs`), started on first use.
fn landlock_for(host: &Host, ports: &[u16]) -> Result<Arc<Confined>, LaunchError> {
    let mut key = ports.to_vec();
    key.sort_unstable();
    key.dedup();
    let mut cache = host.landlock.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = cache.get(&key) {
        return Ok(c.clone());
    }
    let confined = Arc::new(Confined::start(&key)?);
    cache.insert(key, confined.clone());
    Ok(confined)
}

fn failed(what: &str, e: std::io::Error) -> LaunchError {
    LaunchError::SpawnFailed(format!("{what}: {e}"))
}

/// What a launch has set up, undone when it does not complete: the log files removed,
/// the shim's record dropped (`strays.rs`), the reserved id freed, in that order. A
/// spawned shim is killed and reaped before that, by [`Shim::kill`] (an await, which a
/// drop cannot do). [`Undo::complete`] disarms it.
struct Undo<'a> {
    host: &'a Host,
    id: String,
    log: Option<Arc<Mutex<DiskLog>>>,
    record: Option<ShimRecord>,
    /// The session's cgroup: removed, with anything in it, when the launch fails.
    group: Option<SessionGroup>,
    armed: bool,
}

impl<'a> Undo<'a> {
    /// Reserves the id in the table: `409` if any session, running, exited or
    /// launching, has it.
    fn reserve(host: &'a Host, id: &str) -> Result<Undo<'a>, LaunchError> {
        {
            let mut table = host.sessions.lock().unwrap_or_else(|p| p.into_inner());
            if table.contains_key(id) {
                return Err(LaunchError::SessionExists(format!("session {id} exists")));
            }
            table.insert(id.to_string(), Slot::Launching);
        }
        Ok(Undo {
            host,
            id: id.to_string(),
            log: None,
            record: None,
            group: None,
            armed: true,
        })
    }

    /// The session's disk log, replacing the files an earlier session of the id left.
    fn create_log(&mut self) -> Result<Arc<Mutex<DiskLog>>, LaunchError> {
        let log = DiskLog::create(&self.host.cfg.log_dir(), &self.id)
            .map_err(|e| failed("session log", e))?;
        let log = Arc::new(Mutex::new(log));
        self.log = Some(log.clone());
        Ok(log)
    }

    /// The session's cgroup (`crate::limits`), made before the shim is spawned.
    fn create_group(&mut self, req: &LaunchRequest) -> Result<&SessionGroup, LaunchError> {
        let limits = req.sandbox.as_ref().and_then(|sb| sb.limits.as_ref());
        let g = SessionGroup::create(&self.id, limits).map_err(|e| failed("session cgroup", e))?;
        Ok(self.group.insert(g))
    }

    /// The launch completed: the id's slot holds the live session and nothing is undone;
    /// the shim's record and the cgroup go to the exit watcher.
    fn complete(mut self, session: Arc<Session>) -> (Option<ShimRecord>, Option<SessionGroup>) {
        self.host
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(self.id.clone(), Slot::Live(session));
        self.armed = false;
        (self.record.take(), self.group.take())
    }
}

impl Drop for Undo<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(log) = &self.log {
            log.lock().unwrap_or_else(|p| p.into_inner()).remove();
        }
        drop(self.record.take());
        if let Some(g) = self.group.take() {
            g.abandon();
        }
        self.host
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

/// A spawned shim, and its target's pid once it reported `started`.
struct Shim {
    child: Child,
    pid: u32,
    status: BufReader<pipe::Receiver>,
    target: Option<u32>,
}

impl Shim {
    /// A launch that failed after the spawn: SIGKILL to the shim's group (and the
    /// target's once it started; before that to the shim itself as well), then reap it.
    async fn kill(&mut self) {
        spawn::signal_groups(self.pid, self.target, libc::SIGKILL);
        if self.target.is_none() {
            let _ = self.child.start_kill();
        }
        let _ = self.child.wait().await;
    }
}

/// A bwrap launch with denied loopback ports forks on its port set's confined thread.
fn confined_for(host: &Host, req: &LaunchRequest) -> Result<Option<Arc<Confined>>, LaunchError> {
    match &req.sandbox {
        Some(sb) if sb.backend == Backend::Bwrap && !sb.denied_loopback_ports.is_empty() => {
            landlock_for(host, &sb.denied_loopback_ports).map(Some)
        }
        _ => Ok(None),
    }
}

/// The target's environment, and what the answer says of it.
struct Environment {
    vars: BTreeMap<OsString, OsString>,
    routing: Option<Routing>,
    /// Names only, for the audit row: what this sandbox took from relay's environment.
    env_names: Option<Vec<String>>,
}

fn environment(host: &Host, req: &LaunchRequest) -> Environment {
    let token_launch = req.claude_token.is_some();
    let built = env::build(env::EnvInput {
        base: req
            .base_env
            .iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect(),
        template: &req.env,
        host_names: env::host_names(&req.session_id, host.cfg.bridge_socket.as_deref()),
        token_launch,
        allowlist: req.env_allowlist.as_ref().map(|a| a.passthrough.as_slice()),
        pty: req.kind == SessionKind::Pty,
    });
    Environment {
        routing: token_launch.then(|| env::routing(&built.vars)),
        env_names: req.env_allowlist.is_some().then_some(built.inherited),
        vars: built.vars,
    }
}

/// A pty's master, kept for the terminal, and the shim's stdin, stdout and stderr.
type Stdios = (Option<OwnedFd>, [Stdio; 3]);

/// The pty's slave on all three of the shim's standard descriptors, or three pipes.
fn session_stdio(req: &LaunchRequest) -> Result<Stdios, LaunchError> {
    if req.kind != SessionKind::Pty {
        return Ok((None, [Stdio::piped(), Stdio::piped(), Stdio::piped()]));
    }
    let (master, slave) =
        terminal::open_pty(req.pty.unwrap_or_default()).map_err(|e| failed("open pty", e))?;
    let dup = |s: &OwnedFd| s.try_clone().map(Stdio::from);
    match (dup(&slave), dup(&slave), dup(&slave)) {
        (Ok(a), Ok(b), Ok(c)) => Ok((Some(master), [a, b, c])),
        _ => Err(LaunchError::SpawnFailed("duplicate pty descriptor".into())),
    }
}

/// Spawns the shim (`spawn.rs`), on the port set's confined thread when there is one.
async fn spawn_shim(
    req: &LaunchRequest,
    shim: PathBuf,
    env: BTreeMap<OsString, OsString>,
    [stdin, stdout, stderr]: [Stdio; 3],
    confined: Option<&Confined>,
    group: &SessionGroup,
) -> Result<Shim, LaunchError> {
    let plan = Plan {
        shim,
        session_id: req.session_id.clone(),
        argv: req.argv.clone(),
        env,
        cwd: req.directory.clone(),
        pty: req.kind == SessionKind::Pty,
        sandbox: req.sandbox.clone(),
        identity: req.identity.as_ref().map(|i| i.secret.clone()),
        token: req.claude_token.clone(),
        landlock_inherited: None,
        stdin,
        stdout,
        stderr,
        cgroup_procs: group.procs.clone(),
        data_limit: group.data_limit,
    };
    let spawned = match confined {
        Some(c) => c.spawn(plan).await?,
        None => spawn::spawn(plan)?,
    };
    Ok(Shim {
        child: spawned.child,
        pid: spawned.shim_pid,
        status: spawned.status,
        target: None,
    })
}

/// Kept until the shim is reaped (strays.rs): bwrap launches only, the ones whose
/// sandbox can be left behind.
fn shim_record(host: &Host, req: &LaunchRequest, shim_pid: u32) -> Option<ShimRecord> {
    match (&host.shims, &req.sandbox) {
        (Some(s), Some(sb)) if sb.backend == Backend::Bwrap => s.record(shim_pid),
        _ => None,
    }
}

/// Waits for the shim's `started`, then opens the session's I/O: the terminal on the
/// pty's master, or the provider on the pipes. The master stays open, in `master`, until
/// the target started.
async fn start(
    shim: &mut Shim,
    req: &LaunchRequest,
    master: &mut Option<OwnedFd>,
    log: &Arc<Mutex<DiskLog>>,
    redactions: &Arc<AtomicU64>,
) -> Result<(u32, SessionIo), LaunchError> {
    let target_pid = match spawn::wait_started(&mut shim.status, req.identity.is_some()).await {
        Ok(pid) => pid,
        // Name the program: which launch failed is plain from the answer alone.
        Err(LaunchError::SpawnFailed(m)) => {
            return Err(LaunchError::SpawnFailed(format!("{}: {m}", req.argv[0])))
        }
        Err(other) => return Err(other),
    };
    shim.target = Some(target_pid);

    // The token stays in memory only, inside the patterns (src/host/redact.rs).
    let patterns = Arc::new(Patterns::new(
        req.claude_token.as_ref().or(req.redact_token.as_ref()),
    ));
    let redactor = || Redactor::new(patterns.clone(), redactions.clone());
    let io = match master.take() {
        Some(master) => {
            let term = Terminal::new(master, log.clone(), redactor(), req.hold_output)
                .map_err(|e| failed("watch pty", e))?;
            SessionIo::Terminal(Arc::new(term))
        }
        None => provider_io(&mut shim.child, log, redactor)?,
    };
    Ok((target_pid, io))
}

/// A Claude session's pipes: stdin and stdout for the provider, stderr drained into the
/// log.
fn provider_io(
    child: &mut Child,
    log: &Arc<Mutex<DiskLog>>,
    redactor: impl Fn() -> Redactor,
) -> Result<SessionIo, LaunchError> {
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(LaunchError::SpawnFailed("session pipes missing".into()));
    };
    if let Some(stderr) = child.stderr.take() {
        let log = log.clone();
        tokio::spawn(provider::drain_stderr(stderr, redactor(), move |b| {
            let _ = log.lock().unwrap_or_else(|p| p.into_inner()).append(b);
        }));
    }
    Ok(SessionIo::Provider(Arc::new(Provider::new(
        stdin, stdout, redactor,
    ))))
}

/// The session as the table holds it, running.
fn session(
    req: &LaunchRequest,
    shim_pid: u32,
    target_pid: u32,
    io: SessionIo,
    log: Arc<Mutex<DiskLog>>,
    exited: tokio::sync::watch::Receiver<bool>,
) -> Arc<Session> {
    let is_pty = req.kind == SessionKind::Pty;
    let info = SessionInfo {
        session_id: req.session_id.clone(),
        kind: req.kind,
        name: req.name.clone(),
        template_id: req.template_id.clone(),
        project_id: req.project.id.clone(),
        directory: req.directory.clone(),
        root_pid: shim_pid,
        state: SessionState::Running,
        exit_status: None,
        exit_signal: None,
        pty: is_pty.then_some(req.pty.unwrap_or_default()),
        sandboxed: req.sandbox.is_some(),
        limit_reached: None,
    };
    Arc::new(Session {
        info: Mutex::new(info),
        shim_pid,
        target_pid,
        terminating: AtomicBool::new(false),
        exited,
        io,
        log,
    })
}

pub async fn launch(host: &Arc<Host>, req: LaunchRequest) -> Result<LaunchResponse, LaunchError> {
    validate(&req)?;
    let mut undo = Undo::reserve(host, &req.session_id)?;
    let shim = host
        .cfg
        .shim
        .exec_path()
        .map_err(LaunchError::SpawnFailed)?;
    let log = undo.create_log()?;
    let confined = confined_for(host, &req)?;

    // A `Secret`'s Debug is its length: the log says a token came, never which.
    tracing::debug!(
        session = %req.session_id,
        token = ?req.claude_token,
        redact_token = ?req.redact_token,
        "launch"
    );
    let env = environment(host, &req);
    let (mut master, stdio) = session_stdio(&req)?;
    let group = undo.create_group(&req)?;
    let mut shim = spawn_shim(&req, shim, env.vars, stdio, confined.as_deref(), group).await?;
    undo.record = shim_record(host, &req, shim.pid);

    let redactions = Arc::new(AtomicU64::new(0));
    let (target_pid, io) = match start(&mut shim, &req, &mut master, &log, &redactions).await {
        Ok(started) => started,
        Err(e) => {
            shim.kill().await;
            return Err(e);
        }
    };

    let (exited_tx, exited_rx) = tokio::sync::watch::channel(false);
    let session = session(&req, shim.pid, target_pid, io, log, exited_rx);
    let (record, group) = undo.complete(session.clone());
    let pump = match &session.io {
        SessionIo::Terminal(t) => {
            let t = t.clone();
            Some(tokio::spawn(async move { t.pump().await }))
        }
        SessionIo::Provider(_) => None,
    };
    let root_pid = shim.pid;
    let exit = Exit {
        shim,
        record,
        group,
        pump,
        redactions,
        exited: exited_tx,
    };
    tokio::spawn(watch(host.clone(), session, exit));

    Ok(LaunchResponse {
        session_id: req.session_id,
        kind: req.kind,
        root_pid,
        target_pid,
        routing: env.routing,
        env_names: env.env_names,
    })
}

/// What the exit watcher holds besides the session.
struct Exit {
    shim: Shim,
    record: Option<ShimRecord>,
    group: Option<SessionGroup>,
    pump: Option<JoinHandle<()>>,
    redactions: Arc<AtomicU64>,
    exited: tokio::sync::watch::Sender<bool>,
}

/// The exit watcher: reads the shim's events to their end, reaps it, records the exit
/// in the session, reports `session_exited` and lets an ended terminal go.
async fn watch(host: Arc<Host>, session: Arc<Session>, exit: Exit) {
    let Exit {
        mut shim,
        record,
        group,
        mut pump,
        redactions,
        exited,
    } = exit;
    let mut last_exit = None;
    while let Some(ev) = spawn::next_event(&mut shim.status).await {
        if let Event::Exit { status, signal } = ev {
            last_exit = Some((status, signal));
        }
    }
    let shim_status = shim.child.wait().await.ok();
    if last_exit.is_none() {
        // The shim died without reporting the target's end (it was killed): the
        // target must not outlive it, unwatched (docs/session-host.md#when-a-parent-dies).
        spawn::signal_groups(session.shim_pid, Some(session.target_pid), libc::SIGKILL);
    }
    drop(record);
    // What the kernel counted, then whatever is left of the session in its cgroup is
    // killed: its processes by the kernel's word, whatever they are named.
    let reached = match group {
        Some(g) => tokio::task::spawn_blocking(move || g.finish())
            .await
            .ok()
            .flatten(),
        None => None,
    };
    let mut drained = true;
    if let Some(p) = pump.as_mut() {
        // Read what the target wrote before it exited; a stray process still
        // holding the pty must not hold the report back for long.
        drained = tokio::time::timeout(Duration::from_secs(2), p)
            .await
            .is_ok();
    }
    let terminated = session.terminating.load(Ordering::SeqCst);
    let (exit_status, signal, reason) = ending(last_exit, shim_status, terminated);
    {
        let mut info = session.info.lock().unwrap_or_else(|p| p.into_inner());
        info.state = SessionState::Exited;
        info.exit_status = exit_status;
        info.exit_signal = signal;
        info.limit_reached = reached.as_ref().and_then(crate::limits::reached_text);
    }
    host.report(&HostEvent::SessionExited {
        session_id: session
            .info
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .session_id
            .clone(),
        root_pid: session.shim_pid,
        exit_status,
        signal,
        reason,
        redactions: redactions.load(Ordering::Relaxed),
        reached,
    });
    let _ = exited.send(true);
    release(&session, pump, drained);
}

/// The exit status, signal and reason: the shim's `exit` report, or without one (the
/// shim was killed) the shim's own status.
fn ending(
    last_exit: Option<(Option<i32>, Option<i32>)>,
    shim_status: Option<std::process::ExitStatus>,
    terminated: bool,
) -> (Option<i32>, Option<i32>, ExitReason) {
    match last_exit {
        Some((st, sig)) => {
            let reason = if terminated {
                ExitReason::Terminated
            } else if sig.is_some() {
                ExitReason::Signaled
            } else {
                ExitReason::Exited
            };
            (st, sig, reason)
        }
        None => {
            use std::os::unix::process::ExitStatusExt;
            let st = shim_status.and_then(|s| s.code());
            let sig = shim_status.and_then(|s| s.signal());
            (
                st,
                sig,
                if terminated {
                    ExitReason::Terminated
                } else {
                    ExitReason::ShimFailed
                },
            )
        }
    }
}

/// An ended terminal keeps its ring and its status, not its descriptors: the master and
/// the log files close once its output is drained (docs/session-host.md#attach).
fn release(session: &Session, pump: Option<JoinHandle<()>>, drained: bool) {
    if let SessionIo::Terminal(t) = &session.io {
        match pump {
            Some(p) if !drained => {
                let t = t.clone();
                tokio::spawn(async move {
                    let _ = p.await;
                    t.release();
                });
            }
            _ => t.release(),
        }
    }
}

/// SIGTERM to the session's groups, SIGKILL after [`TERMINATE_GRACE`]; returns once the
/// exit was reported (or the kill was sent and reaped).
pub async fn terminate(session: &Arc<Session>) {
    let mut exited = session.exited.clone();
    if *exited.borrow() {
        return;
    }
    session.terminating.store(true, Ordering::SeqCst);
    spawn::signal_groups(session.shim_pid, Some(session.target_pid), libc::SIGTERM);
    let done = tokio::time::timeout(TERMINATE_GRACE, exited.wait_for(|e| *e))
        .await
        .is_ok();
    if !done {
        spawn::signal_groups(session.shim_pid, Some(session.target_pid), libc::SIGKILL);
        let _ = tokio::time::timeout(Duration::from_secs(5), exited.wait_for(|e| *e)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{IdentityLaunch, ProjectRef, SandboxLaunch, Secret};

    fn req() -> LaunchRequest {
        LaunchRequest {
            v: HOST_PROTOCOL_VERSION,
            session_id: "s1".into(),
            kind: SessionKind::Claude,
            resume: false,
            project: ProjectRef {
                id: "p".into(),
                name: "p".into(),
                path: "/".into(),
            },
            directory: "/".into(),
            name: None,
            template_id: None,
            argv: vec!["/bin/true".into()],
            env: Default::default(),
            base_env: Vec::new(),
            pty: None,
            sandbox: None,
            identity: None,
            claude_token: None,
            redact_token: None,
            hold_output: false,
            env_allowlist: None,
        }
    }

    fn sandbox() -> Option<SandboxLaunch> {
        Some(SandboxLaunch {
            backend: Backend::Bwrap,
            profile_path: "/p".into(),
            launcher: None,
            denied_loopback_ports: vec![],
            limits: None,
        })
    }

    fn code(r: Result<(), LaunchError>) -> Option<HostCode> {
        r.err().map(|e| e.code())
    }

    #[test]
    fn token_without_sandbox_or_on_another_kind_is_invalid_spec_and_never_echoed() {
        let token = "acme-fake-token-deadbeef";
        let mut r = req();
        r.claude_token = Some(Secret::new(token));
        let e = validate(&r).unwrap_err();
        assert_eq!(e.code(), HostCode::InvalidSpec);
        assert_eq!(e.code().status(), 400);
        assert!(!e.message().contains(token));

        r.sandbox = sandbox();
        assert_eq!(code(validate(&r)), None);

        r.kind = SessionKind::Pty;
        r.template_id = Some("shell".into());
        let e = validate(&r).unwrap_err();
        assert_eq!(e.code(), HostCode::InvalidSpec);
        assert!(!e.message().contains(token));

        r.template_id = Some("claude-code".into());
        assert_eq!(code(validate(&r)), None);

        r.claude_token = Some(Secret::new("x".repeat(4097)));
        assert_eq!(code(validate(&r)), Some(HostCode::InvalidSpec));
    }

    #[test]
    fn bad_ids_versions_and_secrets_are_refused() {
        for id in ["", ".hidden", "a/b", "a b", &"x".repeat(65)] {
            let mut r = req();
            r.session_id = id.into();
            assert_eq!(code(validate(&r)), Some(HostCode::InvalidSpec), "{id:?}");
        }
        let mut r = req();
        r.v = 99;
        assert_eq!(code(validate(&r)), Some(HostCode::InvalidSpec));
        let mut r = req();
        r.identity = Some(IdentityLaunch {
            secret: Secret::new("ABC"),
        });
        assert_eq!(code(validate(&r)), Some(HostCode::InvalidSpec));
        let mut r = req();
        r.argv.clear();
        assert_eq!(code(validate(&r)), Some(HostCode::InvalidSpec));
        let mut r = req();
        r.directory = "relative".into();
        assert_eq!(code(validate(&r)), Some(HostCode::InvalidSpec));
        for bad in ["*", "A*B", "A=B", ""] {
            let mut r = req();
            r.env_allowlist = Some(crate::protocol::EnvAllowlist {
                passthrough: vec!["GITHUB_TOKEN".into(), bad.into()],
            });
            assert_eq!(code(validate(&r)), Some(HostCode::InvalidSpec), "{bad:?}");
        }
        let mut r = req();
        r.env_allowlist = Some(crate::protocol::EnvAllowlist {
            passthrough: vec!["GITHUB_TOKEN".into(), "AWS_*".into()],
        });
        assert_eq!(code(validate(&r)), None);
    }
}

/// Property tests (docs/testing.md#fuzzing): `cargo test -p relay --lib launch::fuzz`.
/// The host decodes a launch request as `server.rs` does (`serde_json::from_slice`),
/// then validates it.
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "",
                "s1",
                "claude-code",
                "shell",
                "/",
                "/tmp",
                "relative",
                ".hidden",
                "a/b",
                "bwrap",
                "seatbelt",
                "claude",
                "pty",
                "PATH",
                "A=B",
                "x\0y",
            ])
            .prop_map(String::from),
            any::<String>(),
        ]
    }

    /// A request shaped like the daemon's, every field drawn loosely (a wrong type now
    /// and then), the token a marker that must never come back in an answer.
    fn request(token: String) -> impl Strategy<Value = Value> {
        let num = prop_oneof![
            Just(json!(1)),
            Just(json!(0)),
            any::<i64>().prop_map(Value::from)
        ];
        (
            (num.clone(), text(), prop::sample::select(vec!["claude", "pty", "other"]), text(), text()),
            (
                proptest::collection::vec(text(), 0..4),
                proptest::collection::btree_map(text(), text(), 0..3),
                proptest::option::of((num.clone(), num)),
                proptest::option::of((prop::sample::select(vec!["bwrap", "seatbelt"]), text(), proptest::option::of(text()))),
                proptest::option::of(text()),
                any::<bool>(),
            ),
        )
            .prop_map(move |((v, id, kind, dir, template), (argv, env, pty, sandbox, identity, with_token))| {
                let mut r = json!({
                    "v": v, "session_id": id, "kind": kind,
                    "project": {"id": "p", "name": "p", "path": "/"},
                    "directory": dir, "template_id": template, "argv": argv, "env": env,
                });
                if let Some((cols, rows)) = pty {
                    r["pty"] = json!({"cols": cols, "rows": rows});
                }
                if let Some((backend, profile, launcher)) = sandbox {
                    r["sandbox"] = json!({"backend": backend, "profile_path": profile, "launcher": launcher});
                }
                if let Some(secret) = identity {
                    r["identity"] = json!({"secret": secret});
                }
                if with_token {
                    r["claude_token"] = json!(token);
                }
                r
            })
    }

    proptest! {
        /// Any bytes on `POST /launch`: decoded and validated, or refused, never a panic.
        #[test]
        fn any_body_is_decoded_or_refused(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(req) = serde_json::from_slice::<LaunchRequest>(&bytes) {
                let _ = validate(&req);
            }
        }

        /// Requests shaped like the daemon's: validation answers without a panic, and no
        /// answer, no `Debug` of the request, ever holds the token.
        #[test]
        fn a_refusal_never_holds_the_token(
            (token, v) in "[a-zA-Z0-9_-]{12,64}"
                .prop_map(|t| format!("acme-fake-token-{t}"))
                .prop_flat_map(|t| (Just(t.clone()), request(t))),
        ) {
            let bytes = serde_json::to_vec(&v).unwrap();
            match serde_json::from_slice::<LaunchRequest>(&bytes) {
                Ok(req) => {
                    let shown = format!("{req:?}");
                    prop_assert!(!shown.contains(&token));
                    if let Err(e) = validate(&req) {
                        prop_assert!(!e.message().contains(&token), "{}", e.message());
                    }
                }
                // What the host would answer: the category, line and column only.
                Err(e) => {
                    let answer = format!("{:?} {} {}", e.classify(), e.line(), e.column());
                    prop_assert!(!answer.contains(&token));
                }
            }
        }
    }
}
