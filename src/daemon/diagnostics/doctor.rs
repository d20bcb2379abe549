//! `relay doctor`: checks, each with a status and a one-line fix. The canary launches a
//! sandboxed probe through the real launch path (same spec, same profile, same token
//! hand-off) that tries to read the token file, and passes only when that read was
//! denied. When a Claude Code binary is found, `claude auth status` runs the same way
//! and must report `oauth_token`. Never the token's content.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::daemon::launch::{self, LaunchInput};
use crate::daemon::plan;
use crate::daemon::plan::guard;
use crate::daemon::settings::{self, Limits, Settings};
use crate::daemon::Daemon;
use crate::protocol::{Backend, SessionKind, CLAUDE_CODE_TEMPLATE};

pub use crate::wire::CheckStatus as Status;

/// One check as the daemon makes it (`wire::Check`, its name `&'static str`).
pub type Check = crate::wire::Check<&'static str>;

fn check(
    name: &'static str,
    status: Status,
    detail: impl Into<String>,
    fix: Option<&str>,
) -> Check {
    Check {
        name,
        status,
        detail: detail.into(),
        fix: fix.map(str::to_string),
    }
}

/// A short command's stdout, or None when it failed or took longer than 10 s.
async fn quick_output(program: &std::path::Path, arg: &str) -> Option<String> {
    let mut cmd = tokio::process::Command::new(program);
    crate::helpers::clean(cmd.as_std_mut());
    cmd.arg(arg)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    // Every fork of the daemon happens under the fork lock (src/cloexec.rs).
    let child = {
        let _g = crate::cloexec::lock();
        cmd.spawn()
    };
    let Ok(child) = child else {
        return None;
    };
    match tokio::time::timeout(Duration::from_secs(10), child.wait_with_output()).await {
        Ok(Ok(out)) if out.status.success() => {
            Some(String::from_utf8_lossy(&out.stdout).into_owned())
        }
        _ => None,
    }
}

/// relay's helpers as the daemon runs them: `relay-sessions`, and the `relay-shim` it
/// hands the host, both opened beside its own executable at start (`sibling` in
/// `src/daemon/serve.rs`) and run through those descriptors (src/helpers.rs). Each must
/// still be the file relay opened and answer `--version` with relay's own version. A
/// file replaced since is never run here: doctor runs nothing it inspects. And relay's
/// folder must lie outside every folder a session can write (docs/cli.md#relay-doctor).
async fn helpers_check(d: &Daemon, s: &Settings) -> Check {
    const VERSION: &str = env!("CARGO_PKG_VERSION");
    if let Some(why) = d.helpers_withheld.get() {
        return check(
            "helpers",
            Status::Fail,
            format!("{why}; relay runs neither helper until then"),
            Some("reinstall relay (`cargo install --locked --path .`), purge that session, then restart relay serve"),
        );
    }
    let mut problems = Vec::new();
    for h in [&d.host.host_helper, &d.host.shim_helper] {
        if !h.path.is_file() {
            problems.push(format!("{} is missing (no {})", h.name, h.path.display()));
            continue;
        }
        if let Some(why) = h.replaced() {
            problems.push(format!(
                "{why}; relay runs the one it opened at start and not this one"
            ));
            continue;
        }
        let line = {
            let h = h.try_clone();
            tokio::task::spawn_blocking(move || h.and_then(|h| h.version_line()))
                .await
                .ok()
                .flatten()
        };
        match line {
            None => problems.push(format!("{} --version failed", h.path.display())),
            Some(out) => match crate::helpers::version_of(&out, h.name) {
                Some(v) if v == VERSION => {}
                other => problems.push(format!(
                    "{} is version {}, relay is {VERSION}",
                    h.path.display(),
                    other.unwrap_or("unknown")
                )),
            },
        }
    }
    let dir = d
        .host
        .host_helper
        .path
        .parent()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let writable = guard::session_writable_roots(s, &d.home, &[]);
    let inside: Vec<String> = guard::relay_programs()
        .iter()
        .filter_map(|p| {
            let real = std::fs::canonicalize(p).ok()?;
            writable.iter().find(|w| real.starts_with(w)).map(|w| {
                format!(
                    "{} lies in {}, which sessions can write",
                    real.display(),
                    w.display()
                )
            })
        })
        .collect();
    if !problems.is_empty() {
        return check(
            "helpers",
            Status::Fail,
            problems.join("; "),
            Some("install relay, relay-sessions and relay-shim together from one source tree: `cargo install --locked --path .` in it (README, Install), then restart relay"),
        );
    }
    if let Some(c) = relay_place(d, &dir, &inside) {
        return c;
    }
    check(
        "helpers",
        Status::Ok,
        format!("relay-sessions and relay-shim {VERSION} beside relay in {dir}"),
        None,
    )
}

/// relay's folder in a folder sessions can write (`inside` says where) is pinned
/// read-only in every sandbox, as a native `claude` is: `ok` with a note, unless a
/// session relay remembers could have written it without the pin.
fn relay_place(d: &Daemon, dir: &str, inside: &[String]) -> Option<Check> {
    const VERSION: &str = env!("CARGO_PKG_VERSION");
    if inside.is_empty() {
        return None;
    }
    let remembered = d.sandboxed_since_start("");
    if crate::daemon::plan::sandbox::own_pins_hold(&d.home, &remembered).is_err() {
        return Some(check(
            "helpers",
            Status::Fail,
            format!(
                "relay-sessions and relay-shim {VERSION} beside relay in {dir}; {}: relay keeps \
                 that folder read-only in every sandbox, but a session started before could \
                 have changed it",
                inside.join("; ")
            ),
            Some("install relay outside every project and template grant (`cargo install --locked --path . --root /opt/relay`, then run /opt/relay/bin/relay), or narrow the project that covers it"),
        ));
    }
    Some(check(
        "helpers",
        Status::Ok,
        format!(
            "relay-sessions and relay-shim {VERSION} beside relay in {dir}; note: {}; relay \
             pins it read-only in every sandbox, so no session can change relay's programs \
             (and sessions cannot write there either; to keep it writable, install relay \
             outside every project: `cargo install --locked --path . --root /opt/relay`)",
            inside.join("; ")
        ),
        None,
    ))
}

/// The launcher that launches use (`Settings::backend` and `Settings::launcher`).
async fn launcher_check(s: &Settings, home: &Path) -> Check {
    let (backend, launcher) = (s.backend(), s.launcher(home));
    let writable = guard::session_writable_roots(s, home, &[]);
    if let Err(why) = guard::launcher_outside_sessions(&launcher, &writable) {
        // Never run: it may be a session's.
        return check("sandbox_launcher", Status::Fail, why, Some("point session_sandbox.bwrap_launcher (or seatbelt_launcher) at a launcher outside every project, or leave it empty for the system's"));
    }
    match backend {
        Backend::Seatbelt => seatbelt_launcher_check(&launcher),
        Backend::Bwrap => match quick_output(&launcher, "--version").await {
            Some(version) => check("sandbox_launcher", Status::Ok, version.trim().to_string(), None),
            None => check("sandbox_launcher", Status::Fail, format!("bubblewrap not runnable at {}", launcher.display()), Some("install bubblewrap (apt-get install bubblewrap) or set session_sandbox.bwrap_launcher")),
        },
    }
}

/// `sandbox-exec` has no `--version`: present and executable is what can be checked
/// without a profile. The canary proves that it enforces one.
fn seatbelt_launcher_check(p: &Path) -> Check {
    let fix = Some("sandbox-exec ships with macOS at /usr/bin/sandbox-exec; set session_sandbox.seatbelt_launcher only to point elsewhere");
    match std::fs::metadata(p) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => check(
            "sandbox_launcher",
            Status::Ok,
            format!("sandbox-exec present at {}", p.display()),
            None,
        ),
        Ok(_) => check(
            "sandbox_launcher",
            Status::Fail,
            format!("{} is not an executable file", p.display()),
            fix,
        ),
        Err(e) => check(
            "sandbox_launcher",
            Status::Fail,
            format!("no sandbox-exec at {}: {e}", p.display()),
            fix,
        ),
    }
}

fn kernel_check(d: &Daemon, s: &Settings) -> Check {
    let backend = s.backend();
    if backend != Backend::Bwrap || !cfg!(target_os = "linux") {
        return check(
            "kernel",
            Status::Skip,
            "only bubblewrap on Linux needs kernel features (user namespaces, Landlock)",
            None,
        );
    }
    let userns = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let landlock = relay_shim::landlock::abi_version().unwrap_or(0);
    let ports_needed =
        !s.session_sandbox.denied_loopback_ports.is_empty() || d.api_port().is_some();
    let detail = format!(
        "user namespaces: {}; Landlock ABI {landlock}",
        if userns > 0 { "available" } else { "off" }
    );
    if userns == 0 {
        return check(
            "kernel",
            Status::Fail,
            detail,
            Some("enable user namespaces (user.max_user_namespaces > 0)"),
        );
    }
    if landlock < relay_shim::landlock::MIN_NET_ABI && ports_needed {
        return check("kernel", Status::Fail, detail, Some("denied loopback ports need Landlock ABI 4 (Linux 6.7+); or clear api.listen and denied_loopback_ports"));
    }
    check("kernel", Status::Ok, detail, None)
}

/// Whether each sandboxed session's limits on processes, memory and CPU hold here.
fn limits_check(d: &Daemon, s: &Settings) -> Check {
    limits_verdict(&d.limits(), &s.session_sandbox.limits)
}

/// What [`limits_check`] says of the cgroups relay made at its start (`crate::limits`,
/// docs/settings.md#limits): `ok` with a cgroup that holds every limit; `warn` with one
/// that lacks the `cpu` controller, and `warn` without one, naming what holds then
/// (memory per process only, no process limit, no CPU weight) and how to get one.
fn limits_verdict(prepared: &crate::limits::Prepared, set: &Limits) -> Check {
    let mut l = Settings::limits_over(&Limits::default(), set);
    l.cgroup = prepared.cgroups().cloned();
    let (pids, mib, weight) = (l.pids_max, l.memory_max_mib, l.cpu_weight);
    let (_, missing) = crate::limits::describe(&l, prepared.why_none());
    let Some(c) = prepared.cgroups() else {
        return check(
            "limits",
            Status::Warn,
            format!(
                "not in force: {}. A session's processes are not bounded (RLIMIT_NPROC \
                 counts every process of your user, so relay does not set it), its memory \
                 only per process ({mib} MiB, RLIMIT_DATA), and its CPU weight not at all",
                prepared.why_none().unwrap_or_default()
            ),
            Some(if cfg!(target_os = "linux") {
                "run relay as its service (`relay service install`: its unit has \
                 Delegate=memory pids cpu), or start it alone in a delegated scope \
                 (`systemd-run --user --scope -p Delegate=yes relay serve`), or as root"
            } else {
                "macOS has no cgroups: nothing more to do here"
            }),
        );
    };
    let (version, dir, next) = match c {
        crate::protocol::Cgroups::V2 { parent, .. } => (
            "v2",
            parent,
            "delegate the cpu controller to relay's cgroup too (`relay service install` \
             again writes a unit with Delegate=memory pids cpu)",
        ),
        crate::protocol::Cgroups::V1 { memory, .. } => (
            "v1",
            memory,
            "mount the cgroup v1 cpu controller where relay can write it",
        ),
    };
    let detail = format!(
        "in force: each sandboxed session runs in a cgroup {version} of its own under {}, \
         at most {pids} processes and {mib} MiB, CPU weight {weight} (a template's limits \
         over these)",
        dir.display()
    );
    if missing.is_empty() {
        return check("limits", Status::Ok, detail, None);
    }
    let detail = format!("{detail}; {}", missing.join("; "));
    check("limits", Status::Warn, detail, Some(next))
}

/// Whether a token launch's Claude Code runs its tools shielded on this machine
/// (`plan::shield`, docs/THREAT-MODEL.md#claudes-tools-cannot-reach-claude): `ok` with
/// Landlock ABI 6 under bubblewrap, `warn` on an older kernel (launches run unshielded),
/// `skip` under Seatbelt, which has no Landlock.
fn shield_check(s: &Settings) -> Check {
    let backend = s.backend();
    match plan::shield::available(backend) {
        Ok(abi) => check(
            "shield",
            Status::Ok,
            format!(
                "in force: a token launch's Claude Code runs every Bash command in a Landlock \
                 domain of its own (ABI {abi}), where no tool can read Claude's memory, \
                 signal Claude or relay's egress forwarder, or listen on a TCP port but the \
                 template's listen_ports"
            ),
            None,
        ),
        Err(why) if backend == Backend::Bwrap => check(
            "shield",
            Status::Warn,
            format!(
                "not in force: {why}; token launches still run, but a Bash command Claude \
                 runs can read Claude's memory, the token with it, signal Claude and relay's \
                 egress forwarder, and listen on the port Claude's requests go to"
            ),
            Some("run relay on Linux 6.12 or later with Landlock enabled (landlock in the kernel's lsm= list)"),
        ),
        Err(why) => check("shield", Status::Skip, why, None),
    }
}

/// The network each sandboxed template's sessions get (docs/settings.md#network): `ok`
/// when every one is private (`proxied`, the default, or `none`), naming those with no
/// network; `warn` naming each template on the host's network (`"host"`), which is not
/// isolated, with the fix.
pub fn network_check(s: &Settings) -> Check {
    use crate::daemon::settings::NetworkMode;
    if s.session_sandbox.network_off {
        return check(
            "network",
            Status::Ok,
            "session_sandbox.network_off: no sandbox has any network",
            None,
        );
    }
    let sandboxed = || s.terminal_templates.iter().filter(|t| t.sandbox);
    let of = |mode: NetworkMode| {
        sandboxed()
            .filter(|t| t.network.unwrap_or(NetworkMode::Proxied) == mode)
            .map(|t| t.id.as_str())
            .collect::<Vec<_>>()
    };
    let (host, none) = (of(NetworkMode::Host), of(NetworkMode::None));
    let offline = match none.is_empty() {
        true => String::new(),
        false => format!("; no network at all: {}", none.join(", ")),
    };
    if host.is_empty() {
        return check(
            "network",
            Status::Ok,
            format!(
                "every sandbox has a private network, out only through relay's egress proxy to its template's egress list{offline}"
            ),
            None,
        );
    }
    check(
        "network",
        Status::Warn,
        format!(
            "not isolated: {} run{} on the host's network (\"network\": \"host\"), where a \
             session reaches the host's loopback services, its abstract sockets (the X \
             server's among them) and the internet directly{offline}",
            host.join(", "),
            if host.len() == 1 { "s" } else { "" }
        ),
        Some("remove \"network\": \"host\" from those templates: the default gives each sandbox a private network; name in \"egress\" each host it must reach (`relay sandbox explain <id>` shows the list)"),
    )
}

/// The templates whose Seatbelt sandboxes open one of the escapes on purpose (`macos`,
/// docs/settings.md#macos), each with what it opens: `ok` with none or with a `note:`
/// naming them; `warn` for a `macos.mach` name the escape section keeps closed anyway
/// (the opt-in does nothing; the fix is to remove it).
pub fn macos_opt_ins_check(s: &Settings) -> Check {
    use crate::sandbox::MacOptIns;
    let mut opened = Vec::new();
    let mut closed = Vec::new();
    for t in s.terminal_templates.iter().filter(|t| !t.macos.is_empty()) {
        let m = &t.macos;
        let mut what = Vec::new();
        if m.keychain {
            what.push("the keychain".to_string());
        }
        if m.clipboard {
            what.push("the clipboard".to_string());
        }
        if !m.automation.is_empty() {
            what.push(format!("Apple Events to {}", m.automation.join(", ")));
        }
        for name in &m.mach {
            if MacOptIns::is_escape(name) && m.reopened_by(name).is_none() {
                closed.push(format!("{}: {name}", t.id));
            } else {
                what.push(format!("the Mach service {name}"));
            }
        }
        if !what.is_empty() {
            opened.push(format!("{} opens {}", t.id, what.join(", ")));
        }
    }
    let ignored = if s.backend() == Backend::Bwrap && !(opened.is_empty() && closed.is_empty()) {
        " (Seatbelt only: bubblewrap ignores them)"
    } else {
        ""
    };
    let detail = if opened.is_empty() {
        "no template opens the keychain, the clipboard, Apple Events or a Mach service \
         beyond every session's"
            .to_string()
    } else {
        format!(
            "note: {}; `relay sandbox explain <id>` says what each opens{ignored}",
            opened.join("; ")
        )
    };
    if closed.is_empty() {
        return check("macos_opt_ins", Status::Ok, detail, None);
    }
    check(
        "macos_opt_ins",
        Status::Warn,
        format!(
            "{detail}; macos.mach names what the escape section keeps closed, so it stays \
             closed: {}{ignored}",
            closed.join(", ")
        ),
        Some("remove those names from macos.mach; keychain, clipboard and automation are the opt-ins that open an escape"),
    )
}

fn config_check(d: &Daemon) -> Check {
    let me = nix::unistd::geteuid().as_raw();
    let mut problems = Vec::new();
    for (p, want) in [
        (d.paths.config.clone(), 0o700),
        (d.paths.api_token(), 0o600),
    ] {
        match std::fs::symlink_metadata(&p) {
            Ok(m) => {
                let mode = m.permissions().mode() & 0o777;
                if mode & !want != 0 {
                    problems.push(format!("{} is {mode:03o}, want {want:03o}", p.display()));
                }
                if m.uid() != me {
                    problems.push(format!("{} belongs to uid {}", p.display(), m.uid()));
                }
            }
            Err(e) => problems.push(format!("{}: {e}", p.display())),
        }
    }
    if problems.is_empty() {
        check(
            "config_dir",
            Status::Ok,
            format!("{} is 0700, api-token 0600", d.paths.config.display()),
            None,
        )
    } else {
        check(
            "config_dir",
            Status::Fail,
            problems.join("; "),
            Some(&format!(
                "chmod 700 {}; chmod 600 {}",
                d.paths.config.display(),
                d.paths.api_token().display()
            )),
        )
    }
}

fn token_check(s: &Settings, home: &std::path::Path) -> (Check, Option<std::path::PathBuf>) {
    let path =
        match settings::token_file_path(&s.claude_token_file, home) {
            Ok(None) => return (
                check(
                    "token_file",
                    Status::Skip,
                    "claude_token_file is not set",
                    Some("run `claude setup-token`, paste the token it prints into a file in a folder of its own, such as ~/.config/claude-ltt/token (chmod 600), and set claude_token_file in settings.json to that path"),
                ),
                None,
            ),
            Ok(Some(p)) => p,
            Err(e) => {
                return (
                    check(
                        "token_file",
                        Status::Fail,
                        e,
                        Some("use an absolute path or one starting with ~/"),
                    ),
                    None,
                )
            }
        };
    let c = file_check("token_file", &path);
    (c, Some(path))
}

/// One project's own token file (`projects[i].claude_token_file`), checked as the
/// top-level one is, its keys first in the detail.
fn project_token_checks(s: &Settings, home: &std::path::Path) -> Vec<Check> {
    let Ok(all) = settings::configured_tokens(s, home) else {
        // A bad value: named by the launch refusal and by this check.
        return match s
            .projects
            .iter()
            .map(|p| settings::project_token_path(s, &p.id, home))
            .find_map(Result::err)
        {
            Some(e) => vec![check(
                "project_token_file",
                Status::Fail,
                e,
                Some("use an absolute path or one starting with ~/"),
            )],
            None => vec![],
        };
    };
    all.into_iter()
        .filter(|t| !t.keys.iter().any(|k| k == "claude_token_file"))
        .map(|t| {
            let mut c = file_check("project_token_file", &t.path);
            c.detail = format!("{}: {}", t.keys.join(", "), c.detail);
            c
        })
        .collect()
}

/// The token file at `path`: there, one regular private file relay reads, shaped like
/// a setup token.
fn file_check(name: &'static str, path: &std::path::Path) -> Check {
    let path = path.to_path_buf();
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) => {
            return check(
                    name,
                    Status::Fail,
                    format!("{}: {e}", path.display()),
                    Some("run `claude setup-token`, paste the token it prints into that file, then chmod 600 it"),
                );
        }
    };
    let mode = meta.permissions().mode() & 0o7777;
    let detail = format!(
        "{}: mode {mode:04o}, owner uid {}, {} link(s), {} bytes",
        path.display(),
        meta.uid(),
        meta.nlink(),
        meta.len()
    );
    let shaped = match crate::token::read_token_file(&path) {
        Ok(t) => crate::token::looks_like_setup_token(t.token.expose()),
        Err(e) => {
            let fix = if e.reason.contains("API key") {
                "run `claude setup-token` and save the token it prints in place of the API key"
            } else if e.reason.contains("empty") {
                "paste the token from `claude setup-token` into the file (one line), then run relay doctor again"
            } else {
                "keep one regular 0600 file of at most 4096 bytes, no links"
            };
            return check(
                name,
                Status::Fail,
                format!("{detail}; {}", e.reason),
                Some(fix),
            );
        }
    };
    // Warnings only: launches go on (Claude Code judges a token it does not know).
    let mut notes = Vec::new();
    let mut fixes = Vec::new();
    if mode & 0o077 != 0 {
        notes.push("readable by others".to_string());
        fixes.push(format!("chmod 600 {}", path.display()));
    }
    if !shaped {
        notes.push(format!(
            "does not look like a token from `claude setup-token` ({}…)",
            crate::token::SETUP_TOKEN_PREFIX
        ));
        fixes.push("run `claude setup-token` and save the token it prints".into());
    }
    if !notes.is_empty() {
        return check(
            name,
            Status::Warn,
            format!("{detail}; {}", notes.join("; ")),
            Some(&fixes.join("; ")),
        );
    }
    check(name, Status::Ok, detail, None)
}

/// What `claude_program` says when Claude Code is not found: a warning (relay runs,
/// shells and other templates work), with how to get it.
const INSTALL_CLAUDE: &str = "install Claude Code (its native installer puts it at \
     ~/.local/bin/claude, or npm install -g @anthropic-ai/claude-code), then set \
     \"claude_path\" in settings.json to where it is (relay looks on the PATH it was \
     started with, which may not be your shell's; no restart needed), and run relay doctor \
     again";

/// The fix for a Claude Code not found: for the bare name `claude`, where the native
/// installer put one, when it did; else [`INSTALL_CLAUDE`].
fn install_fix(home: &Path, program: &str) -> String {
    let native = home.join(".local/bin/claude");
    if program == "claude" && super::super::plan::guard::is_executable(&native) {
        return format!(
            "{} is there but not on the PATH relay was started with: set \"claude_path\": \
             \"~/.local/bin/claude\" in settings.json (no restart needed), then run relay \
             doctor again",
            native.display()
        );
    }
    INSTALL_CLAUDE.to_string()
}

/// Where the programs a token launch runs live. Not found is a warning with the way to
/// install it. A folder a sandboxed session can write (a native install's
/// `~/.local/bin` under a home project) is pinned read-only in every sandbox, so
/// launches stay safe: `ok`, with a note, since the person may not expect it to be
/// read-only there.
fn program_check(d: &Daemon, s: &Settings, token_set: bool) -> Check {
    let path_env = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    if !token_set {
        let program = s.claude_program();
        let detail = "claude_token_file is not set: nothing is handed the token";
        return match guard::program_pins(&program, &d.home, &path_env).program {
            Some(p) => check(
                "claude_program",
                Status::Skip,
                format!("{detail} ({program} is {})", p.display()),
                None,
            ),
            None => check(
                "claude_program",
                Status::Warn,
                format!("{program}: not found; {detail}"),
                Some(&install_fix(&d.home, &program)),
            ),
        };
    }
    let live: Vec<std::path::PathBuf> = d
        .live_sandboxed("")
        .iter()
        .flat_map(|e| e.record.reach.read_write.clone())
        .collect();
    let writable = guard::session_writable_roots(s, &d.home, &live);
    let mut found = Vec::new();
    for program in guard::token_programs(s) {
        let pins = guard::program_pins(&program, &d.home, &path_env);
        let Some(path) = &pins.program else {
            return check(
                "claude_program",
                Status::Warn,
                format!(
                    "{program}: not found (relay searched the PATH it was started with: {}); \
                     Claude sessions cannot start",
                    path_env.to_string_lossy()
                ),
                Some(&install_fix(&d.home, &program)),
            );
        };
        if let Some(missing) = pins
            .missing_path_dirs
            .iter()
            .find(|m| writable.iter().any(|r| m.starts_with(r)))
        {
            return check(
                "claude_program",
                Status::Fail,
                format!(
                    "{}: the PATH folder {} comes first and does not exist, and a sandboxed \
                     session could create it; token launches are refused",
                    path.display(),
                    missing.display()
                ),
                Some("set claude_path to the program's absolute path, or drop that folder from relay's PATH"),
            );
        }
        match pins
            .folders
            .iter()
            .find_map(|f| Some((f, writable.iter().find(|r| f.starts_with(r))?)))
        {
            Some((folder, root)) => found.push(format!(
                "{}: note: {} {} lies in {}, which a sandboxed session can write; \
                 relay pins it read-only in every sandbox, so sessions cannot change what \
                 gets the token (and cannot write there either; to keep it writable, install \
                 Claude Code outside every project and set claude_path to it)",
                path.display(),
                folder_role(path, folder),
                folder.display(),
                root.display()
            )),
            None => found.push(format!(
                "{}: outside every folder a session can write",
                path.display()
            )),
        }
    }
    check("claude_program", Status::Ok, found.join("; "), None)
}

/// What a pinned folder is to the program at `path`: its own folder (as named or where
/// its real file is), or one it depends on: a `PATH` folder searched before it, a link's
/// folder on the way, its interpreter's.
fn folder_role(path: &Path, folder: &Path) -> &'static str {
    let real = std::fs::canonicalize(path).ok();
    let own = [path.parent(), real.as_deref().and_then(Path::parent)];
    if own.iter().flatten().any(|f| *f == folder) {
        "its folder"
    } else {
        "the folder it depends on (a PATH folder searched before it, a link's, or its interpreter's)"
    }
}

/// Strips terminal escape sequences and whitespace, for matching a pty log.
pub fn plain(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            match chars.peek() {
                Some('[') => {
                    chars.next();
                    while let Some(&n) = chars.peek() {
                        chars.next();
                        if ('@'..='~').contains(&n) {
                            break;
                        }
                    }
                }
                Some(']') => {
                    for n in chars.by_ref() {
                        if n == '\u{7}' {
                            break;
                        }
                    }
                }
                _ => {
                    chars.next();
                }
            }
        } else if !c.is_whitespace() {
            out.push(c);
        }
    }
    out
}

/// Runs a pty launch to its end and returns its log; the probe is purged then (its
/// record, logs and temp folder), as it was never listed.
async fn run_probe(d: &Arc<Daemon>, project: &str, input: LaunchInput) -> Result<String, String> {
    let mut input = input;
    input.kind = Some(SessionKind::Pty);
    input.project = Some(project.to_string());
    let seq = d.events.last_seq();
    let entry = launch::launch(d, input)
        .await
        .map_err(|e| format!("{} ({})", e.message, e.code))?;
    let log = probe_log(d, &entry.record.id, seq).await;
    // For the e2e suite only: `RELAY_E2E_KEEP_PROBES=1` in `relay serve`'s environment
    // keeps an ended probe's temp folder (still never listed), for a test that reads
    // what its launcher was asked there (seatbelt::doctor).
    if std::env::var_os("RELAY_E2E_KEEP_PROBES").is_some_and(|v| v == "1") {
        return log;
    }
    if let Err(e) =
        crate::daemon::records::purge::purge(d, &entry.record.id, SessionKind::Pty, "doctor_probe")
            .await
    {
        tracing::warn!(session = %entry.record.id, "doctor: the probe was not purged: {}", e.message);
    }
    log
}

/// The log of probe `id` once it has ended (ended by force after 60 s).
async fn probe_log(d: &Arc<Daemon>, id: &str, seq: u64) -> Result<String, String> {
    let entry_id = id.to_string();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut after = seq;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            // It holds the token on fd 5: it does not outlive the check.
            d.terminate(&entry_id).await;
            settle(d, &entry_id, after).await;
            return Err("the probe did not end within 60 s".into());
        }
        let evs = d.events.wait_for(after, left).await;
        if let Some(last) = evs.last() {
            after = last.seq;
        }
        if evs
            .iter()
            .any(|e| e.name == "session.exited" && e.session_id.as_ref() == Some(&entry_id))
        {
            break;
        }
    }
    let (status, bytes) = d
        .host
        .call("GET", &format!("/sessions/{entry_id}/log"), None)
        .await
        .map_err(|e| e.to_string())?;
    if status != 200 {
        return Err(format!("probe log: host answered {status}"));
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Waits (10 s at most) for `id`'s exit event after `after`, so it can be purged.
async fn settle(d: &Arc<Daemon>, id: &str, mut after: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return;
        }
        let evs = d.events.wait_for(after, left).await;
        if let Some(last) = evs.last() {
            after = last.seq;
        }
        if evs
            .iter()
            .any(|e| e.name == "session.exited" && e.session_id.as_deref() == Some(id))
        {
            return;
        }
    }
}

/// Each sandboxed template as a launch of it would be planned, in the first project that
/// allows it: the same [`plan::plan`] call a launch and `relay sandbox explain` make, on
/// the same facts (docs/cli.md `relay doctor`). `ok` naming each planned one; `warn`
/// naming each that a launch would be refused, in the refusal's own words; `skip` when
/// no project allows one.
pub fn templates_check(d: &Daemon, s: &Settings) -> Check {
    let facts = plan::facts::Facts::snapshot(d, "", "home-<hex>", None, false);
    let (mut planned, mut refused) = (Vec::new(), Vec::new());
    for t in s.terminal_templates.iter().filter(|t| t.sandbox) {
        let Some(project) = s.projects.iter().find(|p| p.allows(&t.id)) else {
            continue;
        };
        let input = LaunchInput {
            kind: Some(SessionKind::Pty),
            project: Some(project.id.clone()),
            template: Some(t.id.clone()),
            ..Default::default()
        };
        let at = format!("{} in {}", t.id, project.id);
        match plan::plan(s, &input, &facts).map(|p| p.sandbox) {
            Err(r) => refused.push(format!("{at}: {}", r.error.message)),
            Ok(Some(Err(e))) => refused.push(format!("{at}: {}", e.message)),
            Ok(_) => planned.push(at),
        }
    }
    match (planned.is_empty(), refused.is_empty()) {
        (true, true) => check(
            "templates",
            Status::Skip,
            "no project allows a sandboxed template",
            None,
        ),
        (_, true) => check(
            "templates",
            Status::Ok,
            format!("planned as a launch would be: {}", planned.join(", ")),
            None,
        ),
        (_, false) => check(
            "templates",
            Status::Warn,
            format!("a launch would be refused: {}", refused.join("; ")),
            Some("`relay sandbox explain <template> --directory <project folder>` shows the plan; change the setting the refusal names"),
        ),
    }
}

fn probe_project(s: &Settings) -> Option<String> {
    s.projects
        .iter()
        .find(|p| p.allows(CLAUDE_CODE_TEMPLATE))
        .map(|p| p.id.clone())
}

/// The checks that launch nothing; with the settings, whether every configured token
/// file is usable (and one is), when the settings read.
async fn checks_without_probes(d: &Arc<Daemon>) -> (Vec<Check>, Option<(Settings, bool)>) {
    let mut checks = Vec::new();
    let settings = match d.load_settings() {
        Ok(s) => s,
        Err(e) => {
            checks.push(check(
                "settings",
                Status::Fail,
                e.to_string(),
                Some("fix settings.json; relay picks it up at the next launch"),
            ));
            return (checks, None);
        }
    };
    checks.push(check(
        "settings",
        Status::Ok,
        d.paths.settings().display().to_string(),
        None,
    ));
    checks.push(launcher_check(&settings, &d.home).await);
    checks.push(helpers_check(d, &settings).await);
    checks.push(kernel_check(d, &settings));
    checks.push(shield_check(&settings));
    checks.push(limits_check(d, &settings));
    checks.push(macos_opt_ins_check(&settings));
    checks.push(network_check(&settings));
    checks.push(templates_check(d, &settings));
    checks.push(config_check(d));
    checks.push(ledger_check(d));
    checks.push(space_check(d));
    let (token, token_path) = token_check(&settings, &d.home);
    let usable = |c: &Check| c.status == Status::Ok || c.status == Status::Warn;
    let projects = project_token_checks(&settings, &d.home);
    let token_ok = (usable(&token) || (token_path.is_none() && token.status == Status::Skip))
        && projects.iter().all(usable);
    let any_token = token_path.is_some() || !projects.is_empty();
    let token_ok = token_ok && any_token;
    checks.push(token);
    checks.extend(projects);
    checks.push(program_check(d, &settings, any_token));
    (checks, Some((settings, token_ok)))
}

/// `GET /api/doctor` (the Settings page): the checks that launch nothing, run now, and
/// the probes (`canary`, `claude_auth`) as the last `relay doctor` left them, before a
/// restart too (`last_probes`) — a probe is a launch, and a read starts nothing
/// (docs/routes.md).
pub async fn read_only(d: &Arc<Daemon>) -> crate::wire::DoctorPage<&'static str> {
    let (mut checks, rest) = checks_without_probes(d).await;
    let last = d
        .doctor_probes
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    if rest.is_some() {
        match &last {
            Some((_, probes)) => checks.extend(probes.iter().cloned()),
            None => {
                for name in super::last_probes::NAMES {
                    checks.push(check(
                        name,
                        Status::Skip,
                        "not run yet: it launches a sandboxed probe",
                        Some("run `relay doctor`"),
                    ));
                }
            }
        }
    }
    let ok = checks.iter().all(|c| c.status != Status::Fail);
    crate::wire::DoctorPage {
        ok,
        checks,
        probes_ran_ms: last.map(|l| l.0),
    }
}

/// `relay doctor`: the checks that launch nothing, then the two probes, each a
/// sandboxed launch in the first project that allows `claude-code` ([`canary_check`],
/// [`claude_auth_check`]), kept for the Settings page ([`read_only`]).
pub async fn run(d: &Arc<Daemon>) -> crate::wire::Doctor<&'static str> {
    let (mut checks, rest) = checks_without_probes(d).await;
    let Some((settings, token_ok)) = rest else {
        return crate::wire::Doctor { ok: false, checks };
    };
    let first_probe = checks.len();
    let project = probe_project(&settings);
    checks.push(canary_check(d, &settings, token_ok, project.as_deref()).await);
    checks.push(claude_auth_check(d, &settings, token_ok, project.as_deref()).await);
    let (ran_ms, probes) = (
        crate::daemon::records::journal::now_ms(),
        checks[first_probe..].to_vec(),
    );
    // Kept for the page after a restart too; a failed write only loses that.
    let kept = d.paths.doctor_probes();
    if let Err(e) = super::last_probes::save(&kept, ran_ms, &probes) {
        tracing::warn!("{}: {e}", kept.display());
    }
    *d.doctor_probes.lock().unwrap_or_else(|p| p.into_inner()) = Some((ran_ms, probes));
    let ok = checks.iter().all(|c| c.status != Status::Fail);
    crate::wire::Doctor { ok, checks }
}

/// The canary: a probe launched in `project` as a token launch is tries to read every
/// configured token file, and passes only when each read was denied. Skipped without
/// such a project or a usable token file (`token_ok`).
async fn canary_check(
    d: &Arc<Daemon>,
    settings: &Settings,
    token_ok: bool,
    project: Option<&str>,
) -> Check {
    // Every configured token file, each of which the probe must be denied.
    let paths: Vec<std::path::PathBuf> = settings::configured_tokens(settings, &d.home)
        .map(|all| all.into_iter().map(|t| t.path).collect())
        .unwrap_or_default();
    match (paths.first(), token_ok, project) {
        (Some(_), true, Some(project)) => {
            let path = paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ");
            let script = "for f; do if cat -- \"$f\" >/dev/null 2>&1; then echo relay-canary:read; exit 0; fi; done; echo relay-canary:denied";
            let mut argv: Vec<String> =
                vec!["/bin/sh".into(), "-c".into(), script.into(), "sh".into()];
            argv.extend(paths.iter().map(|p| p.to_string_lossy().into_owned()));
            let input = LaunchInput {
                template: Some(CLAUDE_CODE_TEMPLATE.into()),
                name: Some("relay doctor canary".into()),
                relay_probe: true,
                probe_argv: Some(argv),
                ..Default::default()
            };
            match run_probe(d, project, input).await {
                Ok(log) if plain(&log).contains("relay-canary:denied") => check("canary", Status::Ok, format!("a sandboxed probe was denied reading {path}"), None),
                Ok(log) if plain(&log).contains("relay-canary:read") => check("canary", Status::Fail, format!("a sandboxed probe READ one of {path}"), Some("the sandbox does not deny the token file: do not launch Claude sessions; report this")),
                Ok(_) => check("canary", Status::Fail, "the probe gave no answer", Some("see `relay terminal list` for the canary terminal")),
                Err(e) => check("canary", Status::Fail, format!("the probe could not run: {e}"), Some("fix the launch error above")),
            }
        }
        (_, _, None) => check(
            "canary",
            Status::Skip,
            "no project allows the claude-code template",
            Some("allow claude-code in a project"),
        ),
        _ => check(
            "canary",
            Status::Skip,
            "no usable token file to protect",
            None,
        ),
    }
}

/// `claude auth status`, launched in `project` with its token on fd 5, must report
/// `oauth_token`. Skipped without a Claude Code binary (the test stand-in is none),
/// or without a usable token file for that project.
async fn claude_auth_check(
    d: &Arc<Daemon>,
    settings: &Settings,
    token_ok: bool,
    project: Option<&str>,
) -> Check {
    let claude = match launch::which(
        &settings.claude_program(),
        &d.home,
        &guard::claude_path_env(settings),
    ) {
        Some(p) if !is_fake(&p).await => Some(p),
        _ => None,
    };
    // The probe runs on the token of the project it runs in.
    let on_token = project.is_some_and(|p| {
        settings::project_token_path(settings, p, &d.home).is_ok_and(|t| t.is_some())
    });
    match (claude, token_ok && on_token, project) {
        (Some(bin), true, Some(project)) => {
            let input = LaunchInput {
                template: Some(CLAUDE_CODE_TEMPLATE.into()),
                name: Some("relay doctor auth status".into()),
                relay_probe: true,
                extra_args: vec!["auth".into(), "status".into()],
                ..Default::default()
            };
            match run_probe(d, project, input).await {
                Ok(log)
                    if plain(&log).contains("\"authMethod\":\"oauth_token\"")
                        && plain(&log).contains("\"loggedIn\":true") =>
                {
                    check(
                        "claude_auth",
                        Status::Ok,
                        format!("{} auth status: oauth_token through fd 5", bin.display()),
                        None,
                    )
                }
                Ok(_) => check(
                    "claude_auth",
                    Status::Fail,
                    format!("{} auth status did not report oauth_token", bin.display()),
                    Some("check the token file holds a `claude setup-token` token"),
                ),
                Err(e) => check(
                    "claude_auth",
                    Status::Fail,
                    format!("could not run {}: {e}", bin.display()),
                    Some("check the claude-code template's command"),
                ),
            }
        }
        (None, _, _) => check(
            "claude_auth",
            Status::Skip,
            format!(
                "no Claude Code binary found for {:?}",
                settings.claude_program()
            ),
            Some("install Claude Code or set the claude-code template's command"),
        ),
        _ => check(
            "claude_auth",
            Status::Skip,
            "needs a usable token file and a project allowing claude-code",
            None,
        ),
    }
}

/// The test stand-in answers `auth status` too, but it is not Claude Code.
///
/// Looked for in the file rather than by running it: the program may lie where a session
/// could have changed it, and doctor runs outside every sandbox.
async fn is_fake(p: &std::path::Path) -> bool {
    let p = p.to_path_buf();
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        const MARKER: &[u8] = b"Claude Code stand-in";
        let Ok(f) = std::fs::File::open(&p) else {
            return false;
        };
        // The stand-in is a few MiB; the real program is far larger and never says this.
        let mut bytes = Vec::new();
        if f.take(32 << 20).read_to_end(&mut bytes).is_err() {
            return false;
        }
        bytes.windows(MARKER.len()).any(|w| w == MARKER)
    })
    .await
    .unwrap_or(false)
}

/// Below this much free space where relay keeps its records (the config dir) or the
/// sessions' folders (the temp dir), `free_space` fails: a session record or Claude's
/// transcript may not be written.
pub const SPACE_FAIL: u64 = 16 << 20;
/// Below this, `free_space` warns.
pub const SPACE_WARN: u64 = 256 << 20;

/// `relay doctor`'s `free_space`: the space left for relay's files and the sessions'.
fn space_check(d: &Daemon) -> Check {
    // The field types differ by platform (u32 blocks on macOS): the casts are not
    // needless everywhere.
    #[allow(clippy::unnecessary_cast)]
    let free = |p: &Path| {
        nix::sys::statvfs::statvfs(p)
            .map(|v| (v.blocks_available() as u64).saturating_mul(v.fragment_size() as u64))
            .map_err(|e| e.to_string())
    };
    space_verdict(&[
        ("config dir", &d.paths.config, free(&d.paths.config)),
        ("temp dir", &d.tmp, free(&d.tmp)),
    ])
}

/// The verdict on each place's free bytes (or why they could not be read).
pub fn space_verdict(places: &[(&str, &Path, Result<u64, String>)]) -> Check {
    let mut worst = Status::Ok;
    let mut parts = Vec::new();
    let mut low = Vec::new();
    for (what, path, free) in places {
        match free {
            Ok(n) => {
                parts.push(format!("{what} {}: {} MiB free", path.display(), n >> 20));
                let status = if *n < SPACE_FAIL {
                    Status::Fail
                } else if *n < SPACE_WARN {
                    Status::Warn
                } else {
                    continue;
                };
                if status == Status::Fail || worst == Status::Ok {
                    worst = status;
                }
                low.push(path.display().to_string());
            }
            Err(e) => {
                parts.push(format!("{what} {}: {e}", path.display()));
                if worst == Status::Ok {
                    worst = Status::Warn;
                }
            }
        }
    }
    let fix = (!low.is_empty()).then(|| {
        format!(
            "free space on the disk holding {} (relay records each session and turn there, \
             and a session's Claude writes its transcript in the temp dir)",
            low.join(" and ")
        )
    });
    Check {
        name: "free_space",
        status: worst,
        detail: parts.join("; "),
        fix,
    }
}

/// `relay doctor`'s `ledger` check: files set aside are a warning to look at.
fn ledger_check(d: &Daemon) -> Check {
    let aside = d.store.set_aside_files();
    if aside.is_empty() {
        return Check {
            name: "ledger",
            status: Status::Ok,
            detail: format!("{} holds every session's record", d.store.dir().display()),
            fix: None,
        };
    }
    let names: Vec<String> = aside.iter().map(|p| p.display().to_string()).collect();
    Check {
        name: "ledger",
        status: Status::Warn,
        detail: format!(
            "{} ledger files could not be read and were set aside: {}",
            aside.len(),
            names.join(", ")
        ),
        fix: Some(format!(
            "look at them (relay never reads them again), then remove them from {}",
            d.store.set_aside_dir().display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{
        folder_role, install_fix, limits_verdict, macos_opt_ins_check, network_check, plain,
        seatbelt_launcher_check, space_verdict, Status,
    };
    use crate::daemon::settings::{seed, BackendChoice, SessionSandbox, Settings, Template};
    use crate::protocol::Backend;

    #[test]
    fn the_limits_check_warns_without_a_cgroup_and_names_how_to_get_one() {
        use crate::daemon::settings::Limits;
        use crate::limits::Prepared;
        use crate::protocol::Cgroups;
        let none = Prepared::None("cgroup v2 /x: no memory and pids controllers delegated".into());
        let c = limits_verdict(&none, &Limits::default());
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(c.detail.starts_with("not in force: cgroup v2 /x"), "{c:?}");
        assert!(c
            .detail
            .contains("RLIMIT_NPROC counts every process of your user"));
        if cfg!(target_os = "linux") {
            let fix = c.fix.unwrap_or_default();
            assert!(fix.contains("relay service install") && fix.contains("systemd-run"));
        }
        let v1 = |cpu: Option<&str>| {
            Prepared::Cgroups(Cgroups::V1 {
                pids: "/p".into(),
                memory: "/m".into(),
                cpu: cpu.map(Into::into),
            })
        };
        let held = limits_verdict(&v1(Some("/c")), &Limits::default());
        assert_eq!((held.status, held.fix), (Status::Ok, None));
        let no_cpu = limits_verdict(&v1(None), &Limits::default());
        assert_eq!(no_cpu.status, Status::Warn);
        assert!(
            no_cpu.detail.ends_with(
                "CPU weight 100: not in force (no cgroup v1 cpu hierarchy relay can write)"
            ),
            "{no_cpu:?}"
        );
        // No weight asked for: nothing is missing.
        let unweighted = Limits {
            cpu_weight: Some(0),
            ..Limits::default()
        };
        assert_eq!(limits_verdict(&v1(None), &unweighted).status, Status::Ok);
    }

    #[test]
    fn a_pinned_folder_is_the_programs_own_only_where_it_or_its_real_file_lies() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        for dir in ["cargo-bin", "local-bin", "versions"] {
            std::fs::create_dir(root.join(dir)).unwrap();
        }
        std::fs::write(root.join("versions/claude"), "").unwrap();
        std::os::unix::fs::symlink(root.join("versions/claude"), root.join("local-bin/claude"))
            .unwrap();
        let program = root.join("local-bin/claude");
        assert_eq!(folder_role(&program, &root.join("local-bin")), "its folder");
        assert_eq!(folder_role(&program, &root.join("versions")), "its folder");
        let other = folder_role(&program, &root.join("cargo-bin"));
        assert!(other.starts_with("the folder it depends on"), "{other}");
    }
    use crate::sandbox::MacOptIns;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    #[test]
    fn a_claude_not_on_relays_path_but_where_the_native_installer_puts_it_is_named() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        assert!(install_fix(d.path(), "claude").starts_with("install Claude Code"));
        let bin = d.path().join(".local/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("claude"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(bin.join("claude"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let fix = install_fix(d.path(), "claude");
        assert!(
            fix.starts_with(&format!(
                "{} is there but not on the PATH",
                bin.join("claude").display()
            )) && fix.contains("\"claude_path\": \"~/.local/bin/claude\""),
            "{fix}"
        );
        // A path that names another place: installing is the fix.
        assert!(install_fix(d.path(), "/nowhere/claude").starts_with("install Claude Code"));
    }

    #[test]
    fn network_warns_of_each_template_on_the_hosts_network_and_names_those_with_none() {
        use crate::daemon::settings::NetworkMode;
        let mut s = seed();
        let c = network_check(&s);
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert_eq!(
            c.detail,
            "every sandbox has a private network, out only through relay's egress proxy to \
             its template's egress list"
        );
        s.terminal_templates[0].network = Some(NetworkMode::None);
        let c = network_check(&s);
        assert_eq!(c.status, Status::Ok, "{c:?}");
        let first = s.terminal_templates[0].id.clone();
        assert!(
            c.detail.ends_with(&format!("no network at all: {first}")),
            "{c:?}"
        );
        s.terminal_templates[1].network = Some(NetworkMode::Host);
        let c = network_check(&s);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        let second = &s.terminal_templates[1].id;
        assert!(
            c.detail.starts_with(&format!(
                "not isolated: {second} runs on the host's network"
            )),
            "{c:?}"
        );
        assert!(c.fix.as_deref().unwrap().contains("egress"), "{c:?}");
        // An unsandboxed template has no sandbox network to speak of.
        s.terminal_templates[1].sandbox = false;
        assert_eq!(network_check(&s).status, Status::Ok);
        s.terminal_templates[1].sandbox = true;
        s.session_sandbox.network_off = true;
        let c = network_check(&s);
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert!(c.detail.contains("network_off"), "{c:?}");
    }

    #[test]
    fn macos_opt_ins_names_each_template_that_opens_an_escape_and_warns_of_a_closed_name() {
        let mut s = seed();
        s.session_sandbox.backend = BackendChoice::Seatbelt;
        let c = macos_opt_ins_check(&s);
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert!(c.detail.starts_with("no template opens"), "{c:?}");
        let mut t = Template::new("osa", "Scripts", "/bin/zsh");
        t.macos = MacOptIns {
            keychain: true,
            automation: vec!["com.apple.Terminal".into()],
            mach: vec!["com.example.service".into()],
            ..MacOptIns::default()
        };
        s.terminal_templates.push(t);
        let c = macos_opt_ins_check(&s);
        assert_eq!(c.status, Status::Ok, "{c:?}");
        assert!(
            c.detail.contains(
                "osa opens the keychain, Apple Events to com.apple.Terminal, the Mach \
                 service com.example.service"
            ),
            "{c:?}"
        );
        assert!(!c.detail.contains("shell") && !c.detail.contains("claude-code"));
        let mut t = Template::new("ls", "LS", "/bin/sh");
        t.macos.mach = vec!["com.apple.coreservices.launchservicesd".into()];
        s.terminal_templates.push(t);
        let c = macos_opt_ins_check(&s);
        assert_eq!(c.status, Status::Warn, "{c:?}");
        assert!(
            c.detail
                .ends_with("stays closed: ls: com.apple.coreservices.launchservicesd"),
            "{c:?}"
        );
        assert!(c.fix.unwrap().starts_with("remove those names"));
        s.session_sandbox.backend = BackendChoice::Bwrap;
        assert!(macos_opt_ins_check(&s)
            .detail
            .ends_with("(Seatbelt only: bubblewrap ignores them)"));
    }

    #[test]
    fn doctor_and_launches_pick_the_same_backend_and_launcher() {
        let home = Path::new("/home/ada");
        let sandbox_launcher = |sb: &SessionSandbox, home: &Path| {
            let s = Settings {
                session_sandbox: sb.clone(),
                ..Default::default()
            };
            (s.backend(), s.launcher(home))
        };
        let auto = sandbox_launcher(&SessionSandbox::default(), home);
        if cfg!(target_os = "macos") {
            assert_eq!(auto, (Backend::Seatbelt, "/usr/bin/sandbox-exec".into()));
        } else {
            assert_eq!(auto, (Backend::Bwrap, "/usr/bin/bwrap".into()));
        }
        let seatbelt = SessionSandbox {
            backend: BackendChoice::Seatbelt,
            seatbelt_launcher: "~/bin/sandbox-exec".into(),
            bwrap_launcher: "/opt/bwrap".into(),
            ..Default::default()
        };
        assert_eq!(
            sandbox_launcher(&seatbelt, home),
            (Backend::Seatbelt, "/home/ada/bin/sandbox-exec".into())
        );
        let bwrap = SessionSandbox {
            backend: BackendChoice::Bwrap,
            ..seatbelt
        };
        assert_eq!(
            sandbox_launcher(&bwrap, home),
            (Backend::Bwrap, "/opt/bwrap".into())
        );
    }

    #[test]
    fn seatbelt_launcher_must_be_an_executable_file() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("sandbox-exec");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let ok = seatbelt_launcher_check(&exe);
        assert_eq!(ok.status, Status::Ok, "{ok:?}");
        assert!(ok.detail.contains(&*exe.to_string_lossy()), "{ok:?}");

        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o644)).unwrap();
        let plain_file = seatbelt_launcher_check(&exe);
        assert_eq!(plain_file.status, Status::Fail, "{plain_file:?}");
        assert!(plain_file.detail.contains("not an executable file"));

        let folder = seatbelt_launcher_check(dir.path());
        assert_eq!(folder.status, Status::Fail, "{folder:?}");

        let missing = seatbelt_launcher_check(&dir.path().join("none"));
        assert_eq!(missing.status, Status::Fail, "{missing:?}");
        assert!(missing.detail.starts_with("no sandbox-exec at "));
        assert!(missing.fix.is_some());
    }

    #[test]
    fn free_space_fails_below_16_mib_and_warns_below_256() {
        let c = Path::new("/c");
        let t = Path::new("/t");
        let v = space_verdict(&[("config dir", c, Ok(1 << 30)), ("temp dir", t, Ok(1 << 30))]);
        assert_eq!(v.status, Status::Ok, "{}", v.detail);
        assert_eq!(
            v.detail,
            "config dir /c: 1024 MiB free; temp dir /t: 1024 MiB free"
        );
        let v = space_verdict(&[
            ("config dir", c, Ok(100 << 20)),
            ("temp dir", t, Ok(1 << 30)),
        ]);
        assert_eq!(v.status, Status::Warn);
        assert!(v
            .fix
            .as_deref()
            .unwrap()
            .starts_with("free space on the disk holding /c "));
        let v = space_verdict(&[("config dir", c, Ok(100 << 20)), ("temp dir", t, Ok(4096))]);
        assert_eq!(v.status, Status::Fail);
        assert!(v.fix.unwrap().contains("/c and /t"));
        let v = space_verdict(&[
            ("config dir", c, Err("gone".into())),
            ("temp dir", t, Ok(1 << 30)),
        ]);
        assert_eq!(v.status, Status::Warn);
    }

    #[test]
    fn plain_drops_escape_sequences_and_spaces() {
        let log = "\u{1b}7\u{1b}[r\u{1b}8{\n\u{1b}[3G\"loggedIn\":\u{1b}[15Gtrue,\n\u{1b}]0;title\u{7}\"authMethod\": \"oauth_token\"";
        assert_eq!(
            plain(log),
            "{\"loggedIn\":true,\"authMethod\":\"oauth_token\""
        );
    }
}
