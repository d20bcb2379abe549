//! `relay service install | uninstall | status`: `relay serve` as a login service — a
//! systemd user unit on Linux, a LaunchAgent on macOS (docs/cli.md#relay-service). The
//! files are rendered, and where they go named, by [`crate::cli::unit`]; this module places
//! them and asks the service manager (`systemctl --user`, `launchctl`) to enable,
//! start, stop them.
//!
//! Without a reachable user manager (no `systemctl` on `PATH`, or no user bus: a root
//! shell in a container, an ssh session without lingering) `install` still writes the
//! unit and links it into `default.target.wants/` — what `systemctl --user enable`
//! would do — so the next login's manager starts it, and says so.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use serde_json::json;

use crate::cli::args::{Json, ServiceVerb};
use crate::cli::client::Client;
use crate::cli::unit::{self, place, Manager, Place, ServiceSpec, LAUNCHD_LABEL, SYSTEMD_UNIT};
use crate::cli::{print, Out};
use crate::daemon::paths::Paths;

pub fn run(config: &Path, v: ServiceVerb) -> ExitCode {
    match v {
        ServiceVerb::Install {
            dry_run,
            json: Json { json },
        } => {
            let out = install(config, dry_run);
            if let (true, false, Ok(o)) = (dry_run, json, &out) {
                // stdout is the file, as written; where it would go is said beside it.
                if let Some(file) = o.json["file"].as_str() {
                    eprintln!("{}", dry_run_note(file));
                }
            }
            print(json, out)
        }
        ServiceVerb::Uninstall {
            json: Json { json },
        } => print(json, uninstall()),
        ServiceVerb::Status {
            json: Json { json },
        } => print(json, status(config)),
    }
}

/// `PATH` for the service: this shell's absolute entries (a service has no folder to
/// resolve a relative one against), so the `claude` relay finds is the one you find.
fn service_path() -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    let kept: Vec<&str> = path
        .split(':')
        .filter(|d| d.starts_with('/') && !d.contains('\n'))
        .collect();
    if kept.is_empty() {
        "/usr/local/bin:/usr/bin:/bin".to_string()
    } else {
        kept.join(":")
    }
}

/// The file `install` writes for this relay and this config dir.
fn render(manager: Manager, config: &Path) -> Result<String, String> {
    let relay = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| format!("find relay's own executable: {e}"))?;
    let log = Paths {
        config: config.to_path_buf(),
    }
    .output();
    for p in [&relay, &log] {
        if p.to_string_lossy().contains('\n') {
            return Err(format!(
                "{}: a path with a newline cannot go in a service file",
                p.display()
            ));
        }
    }
    let path = service_path();
    let spec = ServiceSpec {
        relay: &relay,
        config_dir: config,
        log: &log,
        path: &path,
    };
    Ok(match manager {
        Manager::Systemd => unit::systemd_unit(&spec),
        Manager::Launchd => unit::launchd_plist(&spec),
    })
}

/// A service-manager command: its stdout, or its first stderr line (or why it could not
/// run) as the error.
fn manager_tool(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).trim().to_string());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let first = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    Err(format!(
        "{program} {}: {}",
        args.join(" "),
        if first.is_empty() {
            format!("exit {}", out.status.code().unwrap_or(-1))
        } else {
            first.trim().to_string()
        }
    ))
}

fn systemctl(args: &[&str]) -> Result<String, String> {
    let mut a = vec!["--user"];
    a.extend_from_slice(args);
    manager_tool("systemctl", &a)
}

fn launchctl(args: &[&str]) -> Result<String, String> {
    manager_tool("launchctl", args)
}

fn gui_domain() -> String {
    format!("gui/{}", nix::unistd::getuid().as_raw())
}

/// Whether a user manager answers: `Err` says why not.
fn systemd_reachable() -> Result<(), String> {
    systemctl(&["show-environment"]).map(|_| ())
}

/// The relay that answers on this config dir's socket: its pid, and the login service
/// that started it (`None`: by hand).
struct Running {
    pid: u32,
    service: Option<String>,
}

fn running(config: &Path) -> Option<Running> {
    let a = Client::new(config).call("GET", "/api/status").ok()?;
    (a.status == 200)
        .then(|| a.typed::<crate::wire::Status>("GET /api/status").ok())
        .flatten()
        .map(|s| Running {
            pid: s.pid,
            service: s.service,
        })
}

/// How a running relay was started, in words.
pub(crate) fn started_by(service: Option<&str>) -> String {
    match service {
        Some(s) => format!("started by its login service {s}"),
        None => "started by hand".into(),
    }
}

/// The collision of a relay started by hand with the login service installed for the
/// same config dir: the service's relay cannot start while this one runs (one relay per
/// config dir, docs/cli.md#one-relay-per-config-dir). `None` when the running relay is
/// the service's, or no service for `config` is installed.
pub(crate) fn collision(config: &Path, pid: u32, service: Option<&str>) -> Option<String> {
    if service.is_some() {
        return None;
    }
    let place = place().ok()?;
    let content = std::fs::read_to_string(&place.file).ok()?;
    if !unit::names_config_dir(&content, config) {
        return None;
    }
    Some(format!(
        "the login service for this config dir is installed ({}), but this relay was \
         started by hand, so the service cannot start its own while it runs (one relay per \
         config dir); to hand over, stop this one (Ctrl-C where it runs, or `kill {pid}`), \
         then run `{}`",
        place.file.display(),
        unit::start_command()
    ))
}

/// Writes `bytes` to `path` through a temp file and a rename, mode 0644 (a unit file
/// is read by the user's service manager; it holds no secret).
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().ok_or("no parent folder")?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

fn remove_if_there(path: &Path) -> Result<bool, String> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The log the service's relay appends to.
fn log_of(config: &Path) -> PathBuf {
    Paths {
        config: config.to_path_buf(),
    }
    .log()
}

/// What `install` did with the service manager: the service is enabled at login,
/// started now or not, and why not.
struct Enabled {
    enabled: bool,
    started: bool,
    notes: Vec<String>,
}

/// What `install --dry-run` says on stderr, beside the file on stdout: where it would
/// be written (issue 40: it did not name the file).
fn dry_run_note(file: &str) -> String {
    format!("relay: --dry-run: relay would write this to {file}; nothing was written")
}

/// `relay service install [--dry-run]`.
fn install(config: &Path, dry_run: bool) -> Result<Out, String> {
    let place = place()?;
    let content = render(place.manager, config)?;
    if dry_run {
        return Ok(Out::new(
            json!({"manager": place.manager.name(), "file": place.file, "content": content, "written": false}),
            content,
        ));
    }
    // The log is appended to in the config dir, which must exist before the manager
    // opens it (relay serve makes it 0700 too).
    std::fs::create_dir_all(config).map_err(|e| format!("config dir {}: {e}", config.display()))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(config, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("config dir {}: {e}", config.display()))?;
    }
    write_file(&place.file, content.as_bytes())?;
    let running = running(config);
    let done = match place.manager {
        Manager::Systemd => match systemd_reachable() {
            Ok(()) => enable_systemd(running.as_ref())?,
            Err(why) => link_for_next_login(&place, running.as_ref(), &why)?,
        },
        Manager::Launchd => load_launchd(&place, running.as_ref())?,
    };
    Ok(installed(&place, config, &log_of(config), done))
}

/// A relay started by hand keeps the config dir's lock: the service's relay could not
/// start beside it (one relay per config dir), so it is not asked to. Its pid.
fn by_hand(running: Option<&Running>) -> Option<u32> {
    running.filter(|r| r.service.is_none()).map(|r| r.pid)
}

/// `systemctl --user`: reloaded, enabled, and started unless a relay already runs.
fn enable_systemd(running: Option<&Running>) -> Result<Enabled, String> {
    systemctl(&["daemon-reload"])?;
    let mut notes = Vec::new();
    if let Some(pid) = by_hand(running) {
        systemctl(&["enable", SYSTEMD_UNIT])?;
        notes.push(format!("relay already runs for this config dir (pid {pid}, started by hand), so the service was enabled, not started (one relay per config dir): stop that relay (Ctrl-C where it runs, or `kill {pid}`), then `systemctl --user start {SYSTEMD_UNIT}`"));
    } else if let Some(r) = running {
        systemctl(&["enable", SYSTEMD_UNIT])?;
        notes.push(format!("the service already runs relay (pid {}); `systemctl --user restart {SYSTEMD_UNIT}` runs it from the file written now", r.pid));
    } else {
        systemctl(&["enable", "--now", SYSTEMD_UNIT])?;
    }
    let started = notes.is_empty();
    Ok(Enabled {
        enabled: true,
        started,
        notes,
    })
}

/// Without a user manager: the unit linked into `default.target.wants/`, as
/// `systemctl --user enable` would, so the next login's manager starts it.
fn link_for_next_login(
    place: &Place,
    running: Option<&Running>,
    why: &str,
) -> Result<Enabled, String> {
    let link = place.wants_link.as_ref().ok_or("no wants folder")?;
    let dir = link.parent().ok_or("no wants folder")?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    remove_if_there(link)?;
    std::os::unix::fs::symlink(&place.file, link)
        .map_err(|e| format!("{}: {e}", link.display()))?;
    let now = match by_hand(running) {
        Some(pid) => format!("relay already runs for this config dir (pid {pid}, started by hand); the service's relay cannot start while it runs (one relay per config dir)"),
        None => "Start relay now with `relay serve`".into(),
    };
    Ok(Enabled {
        enabled: true,
        started: false,
        notes: vec![format!(
            "systemctl --user is not available here ({why}): the unit is written and linked into default.target.wants, so a systemd user manager starts it at your next login; nothing was started now. {now}"
        )],
    })
}

/// `launchctl`: a LaunchAgent in ~/Library/LaunchAgents is loaded at every login;
/// loading it now starts it (RunAtLoad), unless a relay started by hand runs. One the
/// service runs ends with the bootout and starts again from the new file.
fn load_launchd(place: &Place, running: Option<&Running>) -> Result<Enabled, String> {
    let file = place.file.to_string_lossy().into_owned();
    let _ = launchctl(&["bootout", &format!("{}/{LAUNCHD_LABEL}", gui_domain())]);
    let mut notes = Vec::new();
    if let Some(pid) = by_hand(running) {
        notes.push(format!("relay already runs for this config dir (pid {pid}, started by hand), so the LaunchAgent was not loaded now (one relay per config dir): it starts at your next login, or stop that relay (Ctrl-C where it runs, or `kill {pid}`) and run `launchctl bootstrap {} '{file}'`", gui_domain()));
    } else {
        launchctl(&["bootstrap", &gui_domain(), &file])?;
    }
    let started = notes.is_empty();
    Ok(Enabled {
        enabled: true,
        started,
        notes,
    })
}

/// What `install` prints once the file is written.
fn installed(place: &Place, config: &Path, log: &Path, done: Enabled) -> Out {
    let mut text = format!(
        "installed {} ({})\nruns: relay serve for {} at login, restarted when it fails\nlog: {}",
        place.file.display(),
        place.manager.name(),
        config.display(),
        log.display()
    );
    if done.started {
        text.push_str("\nstarted now");
    }
    for n in &done.notes {
        text.push_str(&format!("\nnote: {n}"));
    }
    let json = json!({
        "manager": place.manager.name(),
        "file": place.file,
        "written": true,
        "enabled": done.enabled,
        "started": done.started,
        "log": log,
        "notes": done.notes,
    });
    Out::new(json, text)
}

/// `relay service uninstall`: stopped, disabled, its file removed. Not installed is
/// not an error.
fn uninstall() -> Result<Out, String> {
    let place = place()?;
    let mut notes = Vec::new();
    let installed = place.file.exists()
        || place
            .wants_link
            .as_ref()
            .is_some_and(|l| l.symlink_metadata().is_ok());
    if installed {
        match place.manager {
            Manager::Systemd => match systemd_reachable() {
                Ok(()) => {
                    systemctl(&["disable", "--now", SYSTEMD_UNIT])?;
                }
                Err(why) => notes.push(format!(
                    "systemctl --user is not available here ({why}): the files are removed; a relay the service started is left running"
                )),
            },
            Manager::Launchd => {
                // Not loaded is fine: the file goes either way.
                let _ = launchctl(&["bootout", &format!("{}/{LAUNCHD_LABEL}", gui_domain())]);
            }
        }
    }
    let mut removed = false;
    if let Some(link) = &place.wants_link {
        removed |= remove_if_there(link)?;
    }
    removed |= remove_if_there(&place.file)?;
    if removed && place.manager == Manager::Systemd && notes.is_empty() {
        let _ = systemctl(&["daemon-reload"]);
    }
    Ok(uninstalled(&place, removed, notes))
}

fn uninstalled(place: &Place, removed: bool, notes: Vec<String>) -> Out {
    let mut text = if removed {
        format!("uninstalled {}", place.file.display())
    } else {
        format!("not installed (no {})", place.file.display())
    };
    for n in &notes {
        text.push_str(&format!("\nnote: {n}"));
    }
    Out::new(
        json!({"manager": place.manager.name(), "file": place.file, "removed": removed, "notes": notes}),
        text,
    )
}

/// What the service manager says of the service: enabled at login, its state, and
/// why it could not be asked.
#[derive(Default)]
struct ManagerSays {
    enabled: Option<bool>,
    active: Option<String>,
    note: Option<String>,
}

fn manager_says(place: &Place, installed: bool) -> ManagerSays {
    match place.manager {
        Manager::Systemd => match systemd_reachable() {
            Ok(()) => {
                // `is-enabled` and `is-active` answer a word and exit non-zero for
                // the negative ones.
                let word = |verb: &str| match systemctl(&[verb, SYSTEMD_UNIT]) {
                    Ok(w) => w,
                    Err(e) => e.rsplit(": ").next().unwrap_or("unknown").to_string(),
                };
                let en = word("is-enabled");
                ManagerSays {
                    enabled: Some(en == "enabled"),
                    active: Some(word("is-active")),
                    note: None,
                }
            }
            Err(why) => ManagerSays {
                enabled: place
                    .wants_link
                    .as_ref()
                    .map(|l| l.symlink_metadata().is_ok()),
                active: None,
                note: Some(format!("systemctl --user is not available here ({why})")),
            },
        },
        Manager::Launchd => {
            let state = match launchctl(&["print", &format!("{}/{LAUNCHD_LABEL}", gui_domain())]) {
                Ok(out) => out
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("state = "))
                    .unwrap_or("loaded")
                    .to_string(),
                Err(_) => "not loaded".into(),
            };
            ManagerSays {
                enabled: Some(installed),
                active: Some(state),
                note: None,
            }
        }
    }
}

/// What `relay service status` found.
struct Found<'a> {
    place: &'a Place,
    config: &'a Path,
    installed: bool,
    /// Whether the file is what `install` writes now (`None`: no file, or no render).
    current: Option<bool>,
    manager: ManagerSays,
    running: Option<Running>,
    conflict: Option<String>,
    log: PathBuf,
}

/// `relay service status`: the file, what the manager says of it, and whether a relay
/// answers on this config dir. A report: exit 0 either way.
fn status(config: &Path) -> Result<Out, String> {
    let place = place()?;
    let installed = std::fs::read_to_string(&place.file).ok();
    let current = match (&installed, render(place.manager, config)) {
        (Some(have), Ok(want)) => Some(*have == want),
        _ => None,
    };
    let manager = manager_says(&place, installed.is_some());
    let running = running(config);
    let conflict = running
        .as_ref()
        .and_then(|r| collision(config, r.pid, r.service.as_deref()));
    let found = Found {
        place: &place,
        config,
        installed: installed.is_some(),
        current,
        manager,
        running,
        conflict,
        log: log_of(config),
    };
    Ok(Out::new(status_json(&found), status_text(&found)))
}

fn status_text(f: &Found) -> String {
    let (place, m) = (f.place, &f.manager);
    let mut text = match f.installed {
        true => format!(
            "installed {} ({})",
            place.file.display(),
            place.manager.name()
        ),
        false => format!(
            "not installed (no {}); `relay service install` installs it",
            place.file.display()
        ),
    };
    if f.installed {
        if let Some(e) = m.enabled {
            text.push_str(if e {
                "\nenabled at login"
            } else {
                "\nnot enabled at login"
            });
        }
        if let Some(a) = &m.active {
            text.push_str(&format!("\nservice state: {a}"));
        }
        if f.current == Some(false) {
            text.push_str("\nthe file differs from what `relay service install` writes now (another relay, config dir or PATH); run it again to update");
        }
    }
    if let Some(n) = &m.note {
        text.push_str(&format!("\nnote: {n}"));
    }
    text.push_str(&match &f.running {
        Some(r) => format!(
            "\nrelay: running (pid {}, {}) for {}",
            r.pid,
            started_by(r.service.as_deref()),
            f.config.display()
        ),
        None => format!("\nrelay: not running for {}", f.config.display()),
    });
    if let Some(c) = &f.conflict {
        text.push_str(&format!("\nnote: {c}"));
    }
    text.push_str(&format!("\nlog: {}", f.log.display()));
    text
}

fn status_json(f: &Found) -> serde_json::Value {
    json!({
        "manager": f.place.manager.name(),
        "file": f.place.file,
        "installed": f.installed,
        "current": f.current,
        "enabled": f.manager.enabled,
        "active": f.manager.active,
        "running": f.running.is_some(),
        "pid": f.running.as_ref().map(|r| r.pid),
        "service": f.running.as_ref().and_then(|r| r.service.clone()),
        "conflict": f.conflict,
        "log": f.log,
        "note": f.manager.note,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dry_run_names_the_file_it_would_write() {
        assert_eq!(
            dry_run_note("/home/ada/.config/systemd/user/relay.service"),
            "relay: --dry-run: relay would write this to \
             /home/ada/.config/systemd/user/relay.service; nothing was written"
        );
    }

    fn systemd() -> Place {
        Place {
            manager: Manager::Systemd,
            file: "/home/ada/.config/systemd/user/relay.service".into(),
            wants_link: Some(
                "/home/ada/.config/systemd/user/default.target.wants/relay.service".into(),
            ),
        }
    }

    #[test]
    fn install_says_what_runs_where_it_logs_and_each_note() {
        let place = systemd();
        let (config, log) = (Path::new("/c"), Path::new("/c/relay.log"));
        let done = |started, notes: &[&str]| Enabled {
            enabled: true,
            started,
            notes: notes.iter().map(|n| n.to_string()).collect(),
        };
        let head = "installed /home/ada/.config/systemd/user/relay.service (systemd)\n\
                    runs: relay serve for /c at login, restarted when it fails\nlog: /c/relay.log";
        let out = installed(&place, config, log, done(true, &[]));
        assert_eq!(out.text, format!("{head}\nstarted now"));
        assert_eq!(
            out.json,
            json!({"manager": "systemd", "file": place.file, "written": true, "enabled": true,
                   "started": true, "log": "/c/relay.log", "notes": []})
        );
        let out = installed(&place, config, log, done(false, &["a", "b"]));
        assert_eq!(out.text, format!("{head}\nnote: a\nnote: b"));
        assert_eq!(out.json["notes"], json!(["a", "b"]));
    }

    #[test]
    fn uninstall_says_what_went_or_that_nothing_was_there() {
        let place = systemd();
        let out = uninstalled(&place, true, vec![]);
        assert_eq!(
            out.text,
            "uninstalled /home/ada/.config/systemd/user/relay.service"
        );
        assert_eq!(out.json["removed"], true);
        let out = uninstalled(&place, false, vec!["n".into()]);
        assert_eq!(
            out.text,
            "not installed (no /home/ada/.config/systemd/user/relay.service)\nnote: n"
        );
        assert_eq!(out.json["notes"], json!(["n"]));
    }

    /// What `status` finds of an installed, current service that is enabled and runs
    /// the relay of `/c`.
    fn found(place: &Place) -> Found<'_> {
        Found {
            place,
            config: Path::new("/c"),
            installed: true,
            current: Some(true),
            manager: ManagerSays {
                enabled: Some(true),
                active: Some("active".into()),
                note: None,
            },
            running: Some(Running {
                pid: 42,
                service: Some("relay.service".into()),
            }),
            conflict: None,
            log: "/c/relay.log".into(),
        }
    }

    #[test]
    fn status_of_an_installed_service_says_its_state_and_the_running_relay() {
        let place = systemd();
        let stale = Found {
            current: Some(false),
            ..found(&place)
        };
        assert_eq!(
            status_text(&stale),
            "installed /home/ada/.config/systemd/user/relay.service (systemd)\n\
             enabled at login\nservice state: active\n\
             the file differs from what `relay service install` writes now (another relay, config dir or PATH); run it again to update\n\
             relay: running (pid 42, started by its login service relay.service) for /c\n\
             log: /c/relay.log"
        );
        let v = status_json(&stale);
        assert_eq!(
            (&v["running"], &v["pid"], &v["service"], &v["current"]),
            (
                &json!(true),
                &json!(42),
                &json!("relay.service"),
                &json!(false)
            )
        );
        assert!(!status_text(&found(&place)).contains("the file differs"));
    }

    #[test]
    fn status_without_a_service_or_a_manager_says_so_and_names_the_collision() {
        let place = systemd();
        let found = Found {
            installed: false,
            current: None,
            manager: ManagerSays {
                enabled: Some(false),
                active: None,
                note: Some("systemctl --user is not available here (no bus)".into()),
            },
            running: Some(Running {
                pid: 7,
                service: None,
            }),
            conflict: Some("the login service …".into()),
            ..found(&place)
        };
        // Not installed: nothing said of enabling.
        assert_eq!(
            status_text(&found),
            "not installed (no /home/ada/.config/systemd/user/relay.service); `relay service install` installs it\n\
             note: systemctl --user is not available here (no bus)\n\
             relay: running (pid 7, started by hand) for /c\n\
             note: the login service …\nlog: /c/relay.log"
        );
        let v = status_json(&found);
        assert_eq!(v["service"], serde_json::Value::Null);
        assert_eq!(v["note"], "systemctl --user is not available here (no bus)");
        let none = Found {
            running: None,
            conflict: None,
            manager: ManagerSays::default(),
            ..found
        };
        assert!(status_text(&none).ends_with("\nrelay: not running for /c\nlog: /c/relay.log"));
    }
}
