//! The daemon's side of the host: spawn `relay-sessions` with its bearer secret on a
//! pipe, check the protocol version it announces, read its event lines, restart it
//! with backoff when it dies, and send it requests over `host.sock`.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hyper::body::Bytes;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::sync::watch;

use crate::http::client::{self, Addr, CallError};
use crate::protocol::{HostEvent, HOST_PROTOCOL_VERSION};

#[derive(Clone, Debug)]
pub struct Live {
    pub pid: u32,
    pub socket: PathBuf,
}

pub struct HostLink {
    pub state_dir: PathBuf,
    /// Both helpers, open since the daemon's start and run through those descriptors
    /// (src/helpers.rs): a folder renamed and refilled later changes nothing.
    pub host_helper: crate::helpers::Helper,
    pub shim_helper: crate::helpers::Helper,
    pub bridge: PathBuf,
    secret: String,
    live: watch::Sender<Option<Live>>,
    stdin: Mutex<Option<ChildStdin>>,
    /// Set when this start runs no host (`Daemon::helpers_withheld`): calls fail at once.
    withheld: std::sync::atomic::AtomicBool,
}

#[derive(Debug)]
pub enum HostCallError {
    /// No host is up (starting or restarting).
    Unavailable(String),
    Io(String),
}

impl std::fmt::Display for HostCallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostCallError::Unavailable(m) => write!(f, "session host unavailable: {m}"),
            HostCallError::Io(m) => write!(f, "session host: {m}"),
        }
    }
}

impl HostLink {
    /// `secret` is the host's bearer, minted once at the daemon's start.
    pub fn new(
        state_dir: PathBuf,
        host_helper: crate::helpers::Helper,
        shim_helper: crate::helpers::Helper,
        bridge: PathBuf,
        secret: String,
    ) -> Self {
        let (live, _) = watch::channel(None);
        HostLink {
            state_dir,
            host_helper,
            shim_helper,
            bridge,
            secret,
            live,
            stdin: Mutex::new(None),
            withheld: Default::default(),
        }
    }

    pub fn live(&self) -> Option<Live> {
        self.live.borrow().clone()
    }

    /// Waits (bounded) until a host is up.
    pub async fn wait_live(&self, limit: Duration) -> Option<Live> {
        let mut rx = self.live.subscribe();
        let r = tokio::time::timeout(limit, rx.wait_for(|l| l.is_some())).await;
        match r {
            Ok(Ok(l)) => l.clone(),
            _ => None,
        }
    }

    /// Closing the host's stdin tells it to end every session and exit.
    pub fn shutdown(&self) {
        self.stdin.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    /// Runs the host until the daemon exits, calling `on_event` for every line and
    /// `on_death` when a host went away.
    pub async fn supervise(
        self: Arc<Self>,
        on_event: impl Fn(HostEvent) + Send + Sync + 'static,
        on_death: impl Fn() + Send + Sync + 'static,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut backoff = Duration::from_millis(100);
        loop {
            if *stop.borrow() {
                return;
            }
            let started = Instant::now();
            match self.run_once(&on_event).await {
                // Asked to stop: its exit is the stop, not news.
                Err(_) if *stop.borrow() => {}
                Ok(()) => {}
                Err(e) => tracing::warn!("session host: {e}"),
            }
            self.live.send_replace(None);
            on_death();
            if *stop.borrow() {
                return;
            }
            if started.elapsed() > Duration::from_secs(30) {
                backoff = Duration::from_millis(100);
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.changed() => return,
            }
            backoff = (backoff * 2).min(Duration::from_secs(10));
        }
    }

    /// Starts `relay-sessions` with the bearer on a pipe. Synchronous: it holds the fork
    /// lock from the pipe to the spawn (on macOS the pipe is made and then marked
    /// close-on-exec, and no other fork of the daemon may fall in between).
    fn start_host(&self) -> Result<tokio::process::Child, String> {
        let g = crate::cloexec::lock();
        let (read, write) = g.pipe().map_err(|e| format!("pipe: {e}"))?;
        {
            use std::io::Write;
            let mut w = std::fs::File::from(write);
            w.write_all(self.secret.as_bytes())
                .map_err(|e| format!("secret pipe: {e}"))?;
        }
        let fd = read.as_raw_fd();
        let shim_fd = self.shim_helper.raw_fd();
        // Kept open across the exec too: a `#!` host is read by its interpreter through
        // `/proc/self/fd/N` after it.
        let host_fd = self.host_helper.raw_fd();
        let limit = crate::cloexec::sweep_limit();
        // The file checked at the daemon's start, whatever its folder holds now; started
        // clean, with the base of the targets' environment sent per launch instead.
        let mut cmd = Command::new(self.host_helper.exec_path()?);
        cmd.arg0("relay-sessions");
        crate::helpers::clean(cmd.as_std_mut());
        let args = crate::host::HostArgs {
            state_dir: self.state_dir.clone(),
            secret_fd: fd,
            shim: Some(self.shim_helper.path.clone()),
            shim_fd: Some(shim_fd),
            bridge_socket: Some(self.bridge.clone()),
            // The host logs at the daemon's level (src/logging.rs).
            log_level: crate::logging::level(),
        };
        // A group of its own: Ctrl-C at `relay serve`'s terminal reaches relay, which
        // ends the host in order (its stdin closed), not the host first.
        cmd.process_group(0);
        cmd.args(args.to_args())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        // Safety: only fcntl/close_range between fork and exec, no allocation; the
        // descriptors keep their numbers, so std's exec-error pipe is never clobbered.
        // Everything else from 3 up is marked close-on-exec: on macOS std marks its own
        // descriptors (accepted sockets) outside the fork lock.
        unsafe {
            cmd.pre_exec(move || crate::cloexec::keep_only(&[fd, shim_fd, host_fd], limit));
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("start {}: {e}", self.host_helper.path.display()))?;
        drop(g);
        drop(read);
        Ok(child)
    }

    async fn run_once(&self, on_event: &(impl Fn(HostEvent) + Send + Sync)) -> Result<(), String> {
        let mut child = self.start_host()?;
        *self.stdin.lock().unwrap_or_else(|p| p.into_inner()) = child.stdin.take();
        let stdout = child.stdout.take().ok_or("host stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let mut ready = false;
        loop {
            let line = match lines.next_line().await {
                Ok(Some(l)) => l,
                Ok(None) | Err(_) => break,
            };
            let Ok(ev) = serde_json::from_str::<HostEvent>(&line) else {
                continue;
            };
            match ev {
                HostEvent::Ready { v, pid, socket } => {
                    if v != HOST_PROTOCOL_VERSION {
                        let _ = child.start_kill();
                        let _ = child.wait().await;
                        return Err(format!("host speaks protocol {v}, this daemon {HOST_PROTOCOL_VERSION}; restarting"));
                    }
                    ready = true;
                    self.live.send_replace(Some(Live {
                        pid,
                        socket: socket.clone(),
                    }));
                    on_event(HostEvent::Ready { v, pid, socket });
                }
                other => on_event(other),
            }
        }
        let status = child.wait().await.map_err(|e| e.to_string())?;
        if ready {
            Err(format!("host exited ({status})"))
        } else {
            Err(format!("host exited before it was ready ({status})"))
        }
    }

    /// Where the host listens, waiting (bounded) for one to come up when `wait`.
    /// This start runs no host: every call fails at once instead of waiting for one.
    pub fn withhold(&self) {
        self.withheld
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    async fn addr(&self, wait: bool) -> Result<Addr, HostCallError> {
        if self.withheld.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(HostCallError::Unavailable("withheld in this start".into()));
        }
        let live = match self.live() {
            Some(l) => Some(l),
            None if wait => self.wait_live(Duration::from_secs(5)).await,
            None => None,
        };
        live.map(|l| Addr::Unix(l.socket))
            .ok_or_else(|| HostCallError::Unavailable("not running".into()))
    }

    async fn send(
        &self,
        addr: &Addr,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, HostCallError> {
        let bearer = format!("Bearer {}", self.secret);
        let mut all = vec![("authorization", bearer.as_str())];
        all.extend_from_slice(headers);
        let req = client::request(method, path, &all, body).map_err(HostCallError::from)?;
        client::send(addr, req).await.map_err(HostCallError::from)
    }

    /// An upgraded attach stream to a host terminal, or the host's refusal.
    pub async fn attach(
        &self,
        session_id: &str,
        lossless: bool,
    ) -> Result<Result<hyper::upgrade::Upgraded, (u16, Bytes)>, HostCallError> {
        let addr = self.addr(false).await?;
        let headers = [
            ("connection", "upgrade"),
            ("upgrade", crate::protocol::attach::ATTACH_PROTOCOL),
        ];
        let path = if lossless {
            format!("/sessions/{session_id}/attach?lossless=true")
        } else {
            format!("/sessions/{session_id}/attach")
        };
        let resp = self.send(&addr, "GET", &path, &headers, Vec::new()).await?;
        match client::upgraded(resp).await? {
            Ok(u) => Ok(Ok(u)),
            Err(a) => Ok(Err((a.status, a.body))),
        }
    }

    /// One request to the host; returns status and body.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(u16, Bytes), HostCallError> {
        let resp = self
            .call_streaming(method, path, body.unwrap_or_default())
            .await?;
        let a = client::collect(resp).await?;
        Ok((a.status, a.body))
    }

    /// One request to the host whose answer is read as it arrives (a streamed turn):
    /// the status and the body, unread.
    pub async fn call_streaming(
        &self,
        method: &str,
        path: &str,
        body: Vec<u8>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, HostCallError> {
        let addr = self.addr(true).await?;
        let headers = [("content-type", "application/json")];
        self.send(&addr, method, path, &headers, body).await
    }
}

impl From<CallError> for HostCallError {
    fn from(e: CallError) -> Self {
        match e {
            CallError::Connect(e) => HostCallError::Unavailable(e.to_string()),
            CallError::Http(m) => HostCallError::Io(m),
        }
    }
}
