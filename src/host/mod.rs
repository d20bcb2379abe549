//! `relay-sessions`, the session host. Started and supervised by the daemon; accepts
//! launch and terminate requests only from it; owns ptys, children, scrollback and
//! terminal logs; reports every exit on stdout as a JSON line.
//!
//! Start: `relay-sessions --state-dir DIR --secret-fd N [--shim PATH]
//! [--bridge-socket PATH]` ([`HostArgs`]). The bearer secret arrives on descriptor N
//! (read to EOF).
//! The host listens on `DIR/host.sock` (0600) and prints a `ready` line.

mod args;
mod attach;
mod confined;
pub(crate) mod env;
mod fds;
mod launch;
mod provider;
/// Public for the bench's `redact` case (the redactor alone).
pub mod redact;
mod server;
mod spawn;
mod strays;
mod terminal;
mod termlog;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use crate::protocol::{HostEvent, SessionInfo};

pub use args::HostArgs;
pub use launch::LaunchError;

pub struct HostConfig {
    pub state_dir: PathBuf,
    /// The shim, open since the start and run through that descriptor (src/helpers.rs).
    pub shim: crate::helpers::Helper,
    pub bridge_socket: Option<PathBuf>,
    pub secret: String,
}

impl HostConfig {
    pub fn socket_path(&self) -> PathBuf {
        self.state_dir.join("host.sock")
    }
    pub fn log_dir(&self) -> PathBuf {
        self.state_dir.join("logs")
    }
}

pub enum SessionIo {
    Terminal(Arc<terminal::Terminal>),
    Provider(Arc<provider::Provider>),
}

pub struct Session {
    pub info: Mutex<SessionInfo>,
    pub shim_pid: u32,
    pub target_pid: u32,
    pub terminating: AtomicBool,
    pub exited: tokio::sync::watch::Receiver<bool>,
    pub io: SessionIo,
    pub log: Arc<Mutex<termlog::DiskLog>>,
}

pub enum Slot {
    Launching,
    Live(Arc<Session>),
}

pub struct Host {
    pub cfg: HostConfig,
    pub sessions: Mutex<HashMap<String, Slot>>,
    /// The confined thread of each denied port set (`confined.rs`): building a ruleset
    /// costs hundreds of milliseconds, applying it tens, so each is done once.
    pub landlock: Mutex<HashMap<Vec<u16>, Arc<confined::Confined>>>,
    /// A record per live shim, for the next host should this one be killed
    /// (`strays.rs`); `None` when its folder could not be made.
    pub shims: Option<strays::Shims>,
    stdout: Mutex<std::io::Stdout>,
}

impl Host {
    pub fn new(cfg: HostConfig, shims: Option<strays::Shims>) -> Self {
        Host {
            cfg,
            sessions: Mutex::new(HashMap::new()),
            landlock: Mutex::new(HashMap::new()),
            shims,
            stdout: Mutex::new(std::io::stdout()),
        }
    }

    /// One JSON line on stdout for the daemon.
    pub fn report(&self, ev: &HostEvent) {
        if let Ok(mut line) = serde_json::to_vec(ev) {
            line.push(b'\n');
            let mut out = self.stdout.lock().unwrap_or_else(|p| p.into_inner());
            let _ = out.write_all(&line);
            let _ = out.flush();
        }
    }

    pub fn live(&self, id: &str) -> Option<Arc<Session>> {
        match self
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
        {
            Some(Slot::Live(s)) => Some(s.clone()),
            _ => None,
        }
    }
}

fn read_secret(fd: i32) -> Result<String, String> {
    // Safety: the daemon handed us this descriptor; we take ownership and close it.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut buf = Vec::new();
    file.take(257)
        .read_to_end(&mut buf)
        .map_err(|e| format!("read secret fd {fd}: {e}"))?;
    let s = String::from_utf8(buf).map_err(|_| "the secret is not UTF-8".to_string())?;
    let s = s.trim().to_string();
    if s.len() < 32 || s.len() > 256 || !s.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("the secret must be 32 to 256 printable characters".into());
    }
    Ok(s)
}

/// The host's log: `<state dir>/host.log`, capped, and stderr, at the level the daemon
/// passed (src/logging.rs). The state dir is made here (0700) if it is missing.
fn start_logging(state_dir: &std::path::Path, flag: Option<&str>) {
    use std::os::unix::fs::DirBuilderExt;
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(state_dir);
    let mut text = crate::logging::choose_level(flag);
    if crate::logging::parse_level(&text).is_err() {
        text = crate::logging::DEFAULT_LEVEL.into();
    }
    if let Err(e) = crate::logging::init("relay-sessions", &state_dir.join("host.log"), &text) {
        tracing::warn!("{e}; logging to stderr only");
    }
}

fn default_shim() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("relay-shim")))
        .unwrap_or_else(|| PathBuf::from("relay-shim"))
}

pub fn run() -> ExitCode {
    // It holds the token while it writes a launch's pipe, and its bearer: no core dump,
    // no same-uid reader of its memory (src/harden.rs).
    if let Err(e) = crate::harden::harden_process() {
        eprintln!("relay-sessions: harden: {e}");
        return ExitCode::from(70);
    }
    let args = match HostArgs::parse_from_args(std::env::args_os()) {
        Ok(a) => a,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                print!("{e}");
                return ExitCode::SUCCESS;
            }
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            eprintln!(
                "relay-sessions: usage: {}",
                first.trim_start_matches("error: ")
            );
            return ExitCode::from(64);
        }
    };
    start_logging(&args.state_dir, args.log_level.as_deref());
    let secret = match read_secret(args.secret_fd) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(64);
        }
    };
    // Room for what a flood of connections cannot take (src/listen.rs).
    let nofile = crate::listen::raise_nofile().unwrap_or_else(|e| {
        tracing::warn!("raise the descriptor limit: {e}");
        crate::listen::nofile()
    });
    // The shim the daemon checked, moved clear of 3..=5 before the placeholders take
    // those numbers; started alone, the host opens the one beside itself.
    let shim_path = args.shim.clone().unwrap_or_else(default_shim);
    let shim = match args.shim_fd {
        Some(fd) => crate::helpers::Helper::adopt("relay-shim", &shim_path, fd),
        None => crate::helpers::Helper::open("relay-shim", &shim_path),
    };
    let shim = match shim {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("relay-shim: {e}");
            return ExitCode::from(64);
        }
    };
    if let Err(e) = fds::reserve_placeholders() {
        tracing::error!("reserve descriptors: {e}");
        return ExitCode::from(70);
    }
    // What a killed host left running ends before this one starts anything.
    let shims = match strays::Shims::open(args.state_dir.join("shims")) {
        Ok(s) => {
            let killed = s.sweep();
            if killed > 0 {
                tracing::warn!(
                    "ended {killed} process(es) left running in the sessions of shims of a \
                     host that was killed"
                );
            }
            Some(s)
        }
        Err(e) => {
            tracing::warn!("shim records: {e}");
            None
        }
    };
    let cfg = HostConfig {
        state_dir: args.state_dir,
        shim,
        bridge_socket: args.bridge_socket,
        secret,
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("runtime: {e}");
            return ExitCode::from(70);
        }
    };
    let cap = crate::listen::connection_cap(nofile);
    match rt.block_on(server::serve(Arc::new(Host::new(cfg, shims)), cap)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::from(70)
        }
    }
}
