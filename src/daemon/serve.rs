//! `relay serve`'s start-up and shutdown: the config dir, the helpers, the ledger read back, the sockets, `ready.json`.

use std::collections::HashMap;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use super::records::journal::{Audit, Events};
use super::{api, bridge, hostlink, paths, plan, random_hex, records, settings, Daemon};
use crate::wire;

fn ensure_dir(path: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700))
}

/// The login service that started this `relay serve` (docs/cli.md#relay-service): its
/// name (`relay.service`, `relay.serve`) and the command that stops it. `None` in
/// [`serve`]'s argument: started by hand.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Service {
    pub name: String,
    pub stop: String,
}

/// What the config dir's lock file says of the relay that holds it: written by that
/// relay once it holds the lock, read by a second one to say which relay runs and how
/// to stop it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Holder {
    pid: u32,
    service: Option<Service>,
}

/// The lock that makes one `relay serve` per config dir: `flock(LOCK_EX)` on
/// `<config>/relay.lock`, held for the daemon's life (docs/cli.md#one-relay-per-config-dir).
///
/// Taken before anything else is read or written, so a second `relay serve` is refused
/// having touched nothing (the folder is only made when it is missing, and then no
/// relay can hold it). The kernel drops a `flock` when the last descriptor of its open
/// file goes, however the holder ends: a lock left by a killed relay is simply free.
/// Threat: a child that inherits the descriptor keeps the lock for as long as it
/// lives — a host or a session outliving a killed daemon would then refuse every
/// restart. The file is opened close-on-exec (std opens every file so; checked here),
/// and no fork of relay's keeps it past its exec.
pub struct ConfigLock {
    _held: nix::fcntl::Flock<std::fs::File>,
}

/// The lock file's name in the config dir.
pub const LOCK_FILE: &str = "relay.lock";

/// Takes the config dir's lock, or refuses with the relay that holds it.
pub fn lock_config(config: &Path, service: Option<&Service>) -> Result<ConfigLock, String> {
    use nix::fcntl::{Flock, FlockArg};
    use std::io::Read;
    use std::os::unix::fs::FileExt;
    if std::fs::symlink_metadata(config).is_err() {
        std::fs::create_dir_all(config)
            .map_err(|e| format!("config dir {}: {e}", config.display()))?;
    }
    let path = config.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| format!("lock {}: {e}", path.display()))?;
    if !crate::cloexec::is_cloexec(&file) {
        return Err(format!("lock {}: not close-on-exec", path.display()));
    }
    let held = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(held) => held,
        Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
            let mut text = String::new();
            let _ = (&mut file).take(4096).read_to_string(&mut text);
            return Err(already_running(config, &path, &text));
        }
        Err((_, e)) => return Err(format!("lock {}: {e}", path.display())),
    };
    // Who holds it, for the next one; a write that fails (a full disk) only makes that
    // one's message vaguer.
    let holder = Holder {
        pid: std::process::id(),
        service: service.cloned(),
    };
    if let Ok(mut line) = serde_json::to_vec(&holder) {
        line.push(b'\n');
        let _ = held.set_len(0).and_then(|()| held.write_all_at(&line, 0));
    }
    Ok(ConfigLock { _held: held })
}

/// The refusal of a second `relay serve`: which relay runs, and how to stop it.
fn already_running(config: &Path, lock: &Path, text: &str) -> String {
    let dir = config.display();
    match serde_json::from_str::<Holder>(text.trim()) {
        Ok(Holder {
            pid,
            service: Some(s),
        }) => format!(
            "relay is already running for {dir} (pid {pid}, started by its login service \
             {}); stop it with `{}`",
            s.name, s.stop
        ),
        Ok(Holder { pid, service: None }) => format!(
            "relay is already running for {dir} (pid {pid}, started by hand); stop it with \
             Ctrl-C where it runs, or `kill {pid}`"
        ),
        Err(_) => format!(
            "relay is already running for {dir} (it is starting: {} names no pid yet); stop \
             it before starting another",
            lock.display()
        ),
    }
}

/// Why `relay serve` could not write `path` at its start, with the path and what to do:
/// a full disk (or quota) names the disk to free, a read-only one the flag to move to.
fn cannot_write(path: &Path, e: &std::io::Error) -> String {
    if let Some(full) = crate::daemon::error::disk_full(path, e, "start relay again") {
        return full;
    }
    let reason = crate::token::plain_io(e);
    match e.raw_os_error() {
        Some(libc::EROFS) => format!(
            "cannot write {}: {reason}: relay needs a config dir it can write; start it with \
             --config-dir on a writable disk",
            path.display()
        ),
        _ => format!("cannot write {}: {reason}", path.display()),
    }
}

/// The API bearer: created 0600 at open time on first run, read afterwards.
fn api_token(path: &Path) -> std::io::Result<String> {
    use std::io::Write;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(mut f) => {
            let t = random_hex(32)?;
            f.write_all(t.as_bytes())?;
            Ok(t)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            Ok(std::fs::read_to_string(path)?.trim().to_string())
        }
        Err(e) => Err(e),
    }
}

/// Makes sure `path` is an empty regular file of mode 0000 owned by us (the bwrap
/// file mask); anything else there is replaced.
pub fn ensure_mask(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    if let Ok(m) = std::fs::symlink_metadata(path) {
        let ok = m.file_type().is_file()
            && m.len() == 0
            && m.mode() & 0o7777 == 0
            && m.uid() == nix::unistd::geteuid().as_raw();
        if ok {
            return Ok(());
        }
        std::fs::remove_file(path)?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o000)
        .open(path)?;
    Ok(())
}

/// Writes `path` through `<path>.tmp-<pid>`, which no failure leaves behind (a full
/// disk fails the write, a folder at `path` the rename).
fn write_atomic_0600(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    // One an earlier relay of the same pid left.
    let _ = std::fs::remove_file(&tmp);
    crate::atomic::write_0600(path, &tmp, bytes)
}

/// The daemon's log: `<config>/relay.log`, capped, and stderr (src/logging.rs). A bad
/// `RUST_LOG` falls back to `info`, saying so; `--log-level` was checked by the CLI.
fn start_logging(config: &Path, flag: Option<&str>) {
    let path = paths::Paths {
        config: config.to_path_buf(),
    }
    .log();
    let mut text = crate::logging::choose_level(flag);
    let bad = crate::logging::parse_level(&text).err();
    if bad.is_some() {
        text = crate::logging::DEFAULT_LEVEL.into();
    }
    if let Err(e) = crate::logging::init("relay", &path, &text) {
        tracing::warn!("{e}; logging to stderr only");
    }
    if let Some(e) = bad {
        tracing::warn!(
            "RUST_LOG: {e}; logging at {}",
            crate::logging::DEFAULT_LEVEL
        );
    }
    tracing::info!(
        target: crate::logging::FILE_ONLY,
        "relay {} starting, config {}, log level {text}",
        env!("CARGO_PKG_VERSION"),
        config.display()
    );
}

/// What to do about a missing helper or one of another version.
const HELPERS_FIX: &str = "relay runs relay-sessions and relay-shim from its own folder; install the three together (`cargo install --locked --path .`, README)";

/// The config dir's fixed parts: the profiles folder (emptied: profiles of an earlier
/// run are stale), the mask file, and on first run the seeded settings.
/// Whether this was the first run (settings seeded).
fn prepare_config(paths: &paths::Paths) -> Result<bool, String> {
    ensure_dir(&paths.profiles()).map_err(|e| cannot_write(&paths.profiles(), &e))?;
    ensure_mask(&paths.mask()).map_err(|e| cannot_write(&paths.mask(), &e))?;
    // Profiles of an earlier run are stale.
    if let Ok(rd) = std::fs::read_dir(paths.profiles()) {
        for e in rd.flatten() {
            if let Err(err) = std::fs::remove_file(e.path()) {
                tracing::warn!("stale profile {}: {err}", e.path().display());
            }
        }
    }
    // First run: seed settings so everything works out of the box.
    if paths.settings().exists() {
        return Ok(false);
    }
    write_atomic_0600(
        &paths.settings(),
        settings::to_pretty(&settings::seed()).as_bytes(),
    )
    .map_err(|e| cannot_write(&paths.settings(), &e))?;
    Ok(true)
}

/// What `relay serve` says on stderr once it is ready (docs/cli.md#relay-serve): the
/// settings it wrote on a first run, what listens, how to stop it.
fn started_lines(
    paths: &paths::Paths,
    seeded: bool,
    api: Option<std::net::SocketAddr>,
    service: Option<&Service>,
) -> String {
    let mut out = String::new();
    if seeded {
        out.push_str(&format!(
            "relay: first run: wrote the default settings to {} (a `home` project at ~ \
             with the shell and claude-code templates; edit it any time: each launch reads \
             it; api.listen takes a restart)\n",
            paths.settings().display()
        ));
    }
    out.push_str(&format!(
        "relay: listening on {} for the relay command",
        paths.socket().display()
    ));
    match api {
        Some(a) => out.push_str(&format!(
            " and on http://{a} for the API and the Settings page\n"
        )),
        None => out.push_str(" (the Settings page is off: set api.listen, then restart relay)\n"),
    }
    match service {
        Some(s) => out.push_str(&format!(
            "relay: running as the login service {}; stop it with `{}`\n",
            s.name, s.stop
        )),
        None => out.push_str(&format!(
            "relay: running until Ctrl-C (or `kill {}`), which ends every session\n",
            std::process::id()
        )),
    }
    out
}

/// The daemon's state, the host link (not started yet), the audit and event logs open.
fn build_daemon(
    paths: paths::Paths,
    home: PathBuf,
    tmp: PathBuf,
    tmp_real: PathBuf,
    service: Option<Service>,
) -> Result<(Arc<Daemon>, Arc<hostlink::HostLink>), String> {
    // The helpers come from relay's own folder (docs/architecture.md#binaries): without
    // the host nothing can run, so say which file and how to get it, once.
    // Each is opened once (run nothing yet: `serve` checks the remembered sessions
    // first) and run through that descriptor from then on (src/helpers.rs).
    let helper = |name: &'static str| -> Result<crate::helpers::Helper, String> {
        let path = crate::helpers::sibling(name);
        if !path.is_file() {
            return Err(format!("{} is missing: {HELPERS_FIX}", path.display()));
        }
        crate::helpers::Helper::open(name, &path)
    };
    daemon_with(paths, home, tmp, tmp_real, service, helper)
}

/// [`build_daemon`] with the helpers opened by `helper`.
fn daemon_with(
    paths: paths::Paths,
    home: PathBuf,
    tmp: PathBuf,
    tmp_real: PathBuf,
    service: Option<Service>,
    helper: impl Fn(&'static str) -> Result<crate::helpers::Helper, String>,
) -> Result<(Arc<Daemon>, Arc<hostlink::HostLink>), String> {
    let token = api_token(&paths.api_token()).map_err(|e| cannot_write(&paths.api_token(), &e))?;
    let host_secret = random_hex(32).map_err(|e| format!("random bytes: {e}"))?;
    let host = Arc::new(hostlink::HostLink::new(
        paths.host_state(),
        helper("relay-sessions")?,
        helper("relay-shim")?,
        paths.bridge(),
        host_secret,
    ));
    let audit = Audit::new(paths.audit());
    audit.open().map_err(|e| cannot_write(&paths.audit(), &e))?;
    let events = Events::new(paths.events());
    events
        .open()
        .map_err(|e| cannot_write(&paths.events(), &e))?;
    let store = records::ledger::Store::new(&paths.config);
    let made_folders = records::made_folders::MadeFolders::open(paths.made_folders());
    let doctor_probes = super::diagnostics::last_probes::load(&paths.doctor_probes());
    let daemon = Arc::new(Daemon {
        audit,
        events,
        paths,
        home,
        tmp,
        host: host.clone(),
        bridge: bridge::Pending::default(),
        api_token: token,
        ledger: Mutex::new(HashMap::new()),
        store,
        resuming: Mutex::new(HashMap::new()),
        purged: Mutex::new(HashMap::new()),
        token_watch: Mutex::new(records::rotation::Watch::default()),
        tmp_real,
        purge_failed: Mutex::new(Default::default()),
        api_addr: OnceLock::new(),
        settings_note: Mutex::new(None),
        web: api::web::WebAuth::default(),
        doctor_probes: Mutex::new(doctor_probes),
        egress: Default::default(),
        egress_budget: Default::default(),
        repo_watches: Default::default(),
        turns: Default::default(),
        helpers_withheld: OnceLock::new(),
        made_folders,
        service: service.map(|s| s.name),
        ended: Default::default(),
        cgroups: OnceLock::new(),
    });
    Ok((daemon, host))
}

/// The token watcher: a token that appears, is replaced or removed while sessions run;
/// and on the same tick, ended sessions past `retain_ended`.
fn spawn_watcher(watcher: Arc<Daemon>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        let mut n: u64 = 0;
        loop {
            tick.tick().await;
            watcher.check_token().await;
            crate::daemon::egress::flush_due(&watcher, std::time::Instant::now());
            records::purge::sweep(&watcher, n.is_multiple_of(60)).await;
            n += 1;
        }
    });
}

/// SIGTERM and SIGINT, caught from before relay says it is ready: a signal sent as soon
/// as `ready.json` (or the `running until` line) is there stops relay in order.
struct Stops {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Stops {
    fn catch() -> Result<Stops, String> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Stops {
            term: signal(SignalKind::terminate()).map_err(|e| e.to_string())?,
            int: signal(SignalKind::interrupt()).map_err(|e| e.to_string())?,
        })
    }

    /// Waits for either: which, in words.
    async fn wait(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "Ctrl-C (SIGINT)",
        }
    }
}

/// Runs the daemon until SIGTERM/SIGINT.
/// `log_level` is `relay serve --log-level` (src/logging.rs); `service`, the login
/// service that started it (`None`: by hand).
pub async fn serve(
    config_dir: PathBuf,
    log_level: Option<String>,
    service: Option<Service>,
) -> Result<(), String> {
    // It reads the token at every launch: no core dump, no same-uid reader of its memory.
    crate::harden::harden_process().map_err(|e| format!("harden the daemon: {e}"))?;
    let home =
        paths::home_dir().ok_or("no home directory: HOME is not set and the account has none")?;
    let (tmp, tmp_real) = temp_dir();
    let paths = paths::Paths { config: config_dir };
    // One relay per config dir, before anything there is read or written; held until
    // this function returns, after the sockets are gone (dropped last).
    let _lock = lock_config(&paths.config, service.as_ref())?;
    ensure_dir(&paths.config).map_err(|e| cannot_write(&paths.config, &e))?;
    start_logging(&paths.config, log_level.as_deref());
    let cap = connection_cap();
    let seeded = prepare_config(&paths)?;
    let said = service.clone();
    let (daemon, host) = build_daemon(paths, home, tmp, tmp_real, service)?;
    // Before the host starts: on cgroup v2 relay may move itself into a folder of its
    // own, and the host must start there (src/limits/cgroup.rs).
    let _ = daemon
        .cgroups
        .set(crate::limits::prepare(std::process::id()));
    // Removed however `relay serve` ends, after its sessions (dropped last).
    let _cgroups = crate::limits::Releaser(daemon.limits());
    let listen = settings_at_start(&daemon);
    restore_records(&daemon)?;
    let run_helpers = helpers_may_run(&daemon, &host)?;

    // From the first socket bound on, every way out removes them (and `ready.json`),
    // the stop below as a start that fails later (a full disk at `ready.json`, a port
    // taken): no socket is left that reads as a relay running. The config dir's lock
    // is held, so they are this start's.
    let sockets = RemovedOnDrop(vec![
        daemon.paths.bridge(),
        daemon.paths.socket(),
        daemon.paths.ready(),
    ]);
    bridge::serve(daemon.clone(), &daemon.paths.bridge(), cap)
        .await
        .map_err(|e| format!("bridge socket: {e}"))?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let supervisor = start_host(&daemon, &host, run_helpers, stop_rx).await?;
    let addr = open_api(&daemon, &listen, cap).await?;
    let mut stops = Stops::catch()?;
    say_ready(&daemon, seeded, addr, said.as_ref())?;

    let why = stops.wait().await;
    stop_sessions(&daemon, &host, &stop_tx, supervisor).await;
    drop(sockets);
    eprintln!("relay: stopped ({why}); every session ended");
    Ok(())
}

/// The temp dir sessions' temp folders go in: `TMPDIR` when it is absolute, else
/// `/tmp`; and the same canonical (itself, if it cannot be resolved).
fn temp_dir() -> (PathBuf, PathBuf) {
    let tmp = std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| "/tmp".into());
    let tmp_real = std::fs::canonicalize(&tmp).unwrap_or_else(|_| tmp.clone());
    (tmp, tmp_real)
}

/// How many connections each socket serves at once: room for what a flood of them
/// cannot take (src/listen.rs), from the descriptor limit, raised first.
fn connection_cap() -> usize {
    let nofile = crate::listen::raise_nofile().unwrap_or_else(|e| {
        tracing::warn!("raise the descriptor limit: {e}");
        crate::listen::nofile()
    });
    crate::listen::connection_cap(nofile)
}

/// The settings as this start reads them, said in the log when they are broken (relay
/// starts all the same, refusing launches) or carry a note. Answers `api.listen`, the
/// address the API binds for this start (empty: none, and for broken settings).
fn settings_at_start(daemon: &Daemon) -> String {
    let initial = daemon.load_settings();
    if let Err(e) = &initial {
        tracing::warn!("{e} (launches are refused until it is fixed)");
    }
    if let Some(note) = daemon
        .settings_note
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
    {
        tracing::warn!("settings: {note}");
    }
    initial
        .as_ref()
        .map(|s| s.api.listen.clone())
        .unwrap_or_default()
}

/// Whether this start runs the helpers. Neither runs, not even for `--version`, while
/// a remembered session could have put its own program in relay's folder: the host is
/// withheld, launches say why, a purge still works. Otherwise both must answer with
/// relay's version, or relay does not start.
fn helpers_may_run(daemon: &Daemon, host: &hostlink::HostLink) -> Result<bool, String> {
    match plan::sandbox::own_pins_hold(&daemon.home, &daemon.sandboxed_since_start("")) {
        Ok(()) => {
            for h in [&host.host_helper, &host.shim_helper] {
                h.check_version()
                    .map_err(|e| format!("{e}: {HELPERS_FIX}"))?;
            }
            Ok(true)
        }
        Err(why) => {
            tracing::error!("{why}; relay runs neither helper until then");
            let _ = daemon.helpers_withheld.set(why);
            host.withhold();
            Ok(false)
        }
    }
}

/// The session host, started and supervised until `stop` turns true, when the helpers
/// run: relay goes on once it is live (10 s at most, or relay does not start). The
/// supervisor's task, to wait for at the stop; `None` when the helpers are withheld.
async fn start_host(
    daemon: &Arc<Daemon>,
    host: &Arc<hostlink::HostLink>,
    run_helpers: bool,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Option<tokio::task::JoinHandle<()>>, String> {
    let d1 = daemon.clone();
    let d2 = daemon.clone();
    let supervisor = run_helpers.then(|| {
        tokio::spawn(host.clone().supervise(
            move |ev| match ev {
                // A session's end first sets aside what it planted in repositories,
                // which may take up to the search's deadline: on a thread of its own, so
                // the host's other events and the runtime never wait behind it.
                ev @ crate::protocol::HostEvent::SessionExited { .. } => {
                    let (d, slot) = (d1.clone(), Arc::new(Mutex::new(Some(ev))));
                    let theirs = slot.clone();
                    let spawned = std::thread::Builder::new()
                        .name("session-end".into())
                        .spawn(move || {
                            let ev = theirs.lock().unwrap_or_else(|p| p.into_inner()).take();
                            if let Some(ev) = ev {
                                d.on_host_event(ev);
                            }
                        });
                    if spawned.is_err() {
                        // No thread to be had: handled here, late rather than lost.
                        let ev = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
                        if let Some(ev) = ev {
                            d1.on_host_event(ev);
                        }
                    }
                }
                ev => d1.on_host_event(ev),
            },
            move || d2.on_host_death(),
            stop,
        ))
    });
    if run_helpers {
        host.wait_live(std::time::Duration::from_secs(10))
            .await
            .ok_or("the session host did not start")?;
    }
    Ok(supervisor)
}

/// The API's sockets bound and served: the unix socket always, TCP at `listen` when it
/// names an address; the token watcher started. The TCP address bound, if any.
async fn open_api(
    daemon: &Arc<Daemon>,
    listen: &str,
    cap: usize,
) -> Result<Option<std::net::SocketAddr>, String> {
    let unix = api::bind_unix(&daemon.paths.socket())
        .map_err(|e| format!("{}: {e}", daemon.paths.socket().display()))?;
    let tcp = if listen.is_empty() {
        None
    } else {
        Some(
            tokio::net::TcpListener::bind(listen)
                .await
                .map_err(|e| format!("api.listen {listen}: {e}"))?,
        )
    };
    let addr = tcp.as_ref().and_then(|l| l.local_addr().ok());
    let _ = daemon.api_addr.set(addr);
    spawn_watcher(daemon.clone());
    tokio::spawn(api::serve_unix(daemon.clone(), unix, cap));
    if let Some(l) = tcp {
        tokio::spawn(api::serve_tcp(daemon.clone(), l, cap));
    }
    Ok(addr)
}

/// Relay says it is ready: `ready.json` written, its path on stdout, and on stderr
/// what listens and how to stop it (`started_lines`).
fn say_ready(
    daemon: &Daemon,
    seeded: bool,
    addr: Option<std::net::SocketAddr>,
    service: Option<&Service>,
) -> Result<(), String> {
    let ready = wire::Ready {
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").into(),
        config_dir: daemon.paths.config.clone(),
        socket: daemon.paths.socket(),
        api: addr.map(|a| a.to_string()),
    };
    let ready = serde_json::to_string(&ready).map_err(|e| format!("ready.json: {e}"))?;
    write_atomic_0600(&daemon.paths.ready(), format!("{ready}\n").as_bytes())
        .map_err(|e| cannot_write(&daemon.paths.ready(), &e))?;
    println!("{}", daemon.paths.ready().display());
    eprint!("{}", started_lines(&daemon.paths, seeded, addr, service));
    Ok(())
}

/// The stop: every session ends (the host terminates them all when its stdin closes),
/// and relay waits up to 10 s for the supervisor to see the host go.
async fn stop_sessions(
    daemon: &Daemon,
    host: &hostlink::HostLink,
    stop: &tokio::sync::watch::Sender<bool>,
    supervisor: Option<tokio::task::JoinHandle<()>>,
) {
    records::ledger::stopping_all(daemon);
    let _ = stop.send(true);
    host.shutdown();
    if let Some(supervisor) = supervisor {
        if tokio::time::timeout(std::time::Duration::from_secs(10), supervisor)
            .await
            .is_err()
        {
            tracing::warn!("the session host did not end within 10 s of the stop");
        }
    }
}

/// The sessions of earlier runs, before the host or any API can start one; what of
/// them still runs (a kill of relay in bwrap's one unguarded moment) ends, found by the
/// sandboxes recorded at launch (`records::strays`); then the ones that ran have what
/// they planted in repositories set aside and their end recorded, and the searches of
/// earlier ends that never finished are taken up again; then what the
/// launches a stop of relay cut short before their record had made goes.
fn restore_records(daemon: &Daemon) -> Result<(), String> {
    let (cut_short, restarted, ended) = records::ledger::restore(daemon)?;
    let mut recorded = Vec::new();
    for (id, sandbox) in restarted {
        match sandbox {
            Some(sb) => recorded.push((id, sb)),
            // Ended by no name: only what relay recorded of a sandbox is ended.
            None if cfg!(target_os = "linux") => tracing::info!(
                session = %id,
                "session {id} was running when relay stopped, and no sandbox of it is on \
                 file (recorded by an earlier relay, or not found at launch): nothing of \
                 it is ended"
            ),
            None => {}
        }
    }
    recorded.extend(
        cut_short
            .iter()
            .filter_map(|m| Some((m.id.clone(), m.sandbox.clone()?))),
    );
    for (pid, id) in records::strays::end(&recorded) {
        tracing::warn!(
            session = %id,
            pid,
            "a process of session {id} outlived the relay that ran it: ended"
        );
    }
    records::ledger::end_restarted(daemon, &ended);
    records::repos::resume(daemon, &ended);
    records::purge::launches_cut_short(daemon, &cut_short);
    // No launch runs yet: what relay made for those that ran before goes.
    daemon.made_folders.release("");
    Ok(())
}

/// Files removed when it goes, however the function holding it returns.
struct RemovedOnDrop(Vec<PathBuf>);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A daemon for unit tests, its host not started: the config dir, home and temp dir
/// are folders of `root` (made here), its helpers two files there.
#[cfg(test)]
pub(crate) fn test_daemon(root: &Path) -> Arc<Daemon> {
    let root = std::fs::canonicalize(root).expect("test root");
    for dir in ["config", "home", "tmp", "helpers"] {
        std::fs::create_dir_all(root.join(dir)).expect("test folder");
    }
    let helper = |name: &'static str| {
        let path = root.join("helpers").join(name);
        std::fs::write(&path, name).map_err(|e| e.to_string())?;
        crate::helpers::Helper::open(name, &path)
    };
    let paths = paths::Paths {
        config: root.join("config"),
    };
    daemon_with(
        paths,
        root.join("home"),
        root.join("tmp"),
        root.join("tmp"),
        None,
        helper,
    )
    .expect("test daemon")
    .0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn by_hand_refusal(dir: &Path) -> String {
        let pid = std::process::id();
        format!(
            "relay is already running for {} (pid {pid}, started by hand); stop it with \
             Ctrl-C where it runs, or `kill {pid}`",
            dir.display()
        )
    }

    #[test]
    fn a_second_lock_on_one_config_dir_is_refused_naming_the_holder_and_freed_at_drop() {
        let d = tempfile::tempdir().unwrap();
        let config = d.path().join("config");
        // A config dir that is not there yet is made, then locked.
        let first = lock_config(&config, None).unwrap();
        let holder: Holder =
            serde_json::from_slice(&std::fs::read(config.join(LOCK_FILE)).unwrap()).unwrap();
        assert_eq!(
            holder,
            Holder {
                pid: std::process::id(),
                service: None
            }
        );
        assert_eq!(
            lock_config(&config, None).err().as_deref(),
            Some(by_hand_refusal(&config).as_str())
        );
        drop(first);

        // Taken again once freed; a service names itself and its stop command.
        let svc = Service {
            name: "relay.service".into(),
            stop: "systemctl --user stop relay.service".into(),
        };
        let again = lock_config(&config, Some(&svc)).unwrap();
        assert_eq!(
            lock_config(&config, None).err().unwrap(),
            format!(
                "relay is already running for {} (pid {}, started by its login service \
                 relay.service); stop it with `systemctl --user stop relay.service`",
                config.display(),
                std::process::id()
            )
        );
        drop(again);

        // A holder that has not written its pid yet.
        let file = std::fs::File::create(config.join(LOCK_FILE)).unwrap();
        let _held = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).unwrap();
        let e = lock_config(&config, None).err().unwrap();
        assert!(
            e.contains("(it is starting: ") && e.contains("names no pid yet)"),
            "{e}"
        );
    }

    #[test]
    fn a_child_relay_starts_never_holds_the_lock() {
        // Threat: a child that inherited the lock's descriptor would keep the config
        // dir locked after relay died, and refuse the next `relay serve`.
        let d = tempfile::tempdir().unwrap();
        let lock = lock_config(d.path(), None).unwrap();
        assert!(crate::cloexec::is_cloexec(&lock._held.as_raw_fd()));
        let mut child = {
            let _g = crate::cloexec::lock();
            std::process::Command::new("/bin/sh")
                .args(["-c", "read x"])
                .stdin(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        drop(lock);
        // The child still runs, holding whatever it inherited.
        let relocked = lock_config(d.path(), None);
        drop(child.stdin.take());
        child.wait().unwrap();
        assert!(relocked.is_ok(), "{:?}", relocked.err());
    }

    #[test]
    fn a_planted_link_in_the_lock_files_place_is_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let elsewhere = d.path().join("elsewhere");
        std::fs::write(&elsewhere, "keep").unwrap();
        std::os::unix::fs::symlink(&elsewhere, d.path().join(LOCK_FILE)).unwrap();
        let e = lock_config(d.path(), None).err().unwrap();
        assert!(e.starts_with("lock "), "{e}");
        assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "keep");
    }

    #[test]
    fn a_ready_file_that_cannot_be_written_leaves_no_temporary_file() {
        let d = tempfile::tempdir().unwrap();
        let ready = d.path().join("ready.json");
        // A folder where the file goes: the write lands, the rename fails.
        std::fs::create_dir(&ready).unwrap();
        std::fs::write(ready.join("x"), "x").unwrap();
        assert!(write_atomic_0600(&ready, b"{}\n").is_err());
        let mut names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["ready.json"]);
        write_atomic_0600(&d.path().join("ok.json"), b"{}\n").unwrap();
        assert_eq!(std::fs::read(d.path().join("ok.json")).unwrap(), b"{}\n");
    }
}
