//! `relay service install | uninstall | status`: `relay serve` as a login service — a
//! systemd user unit on Linux, a LaunchAgent on macOS (docs/cli.md#relay-service). The
//! files are rendered, and where they go named, by [`super::unit`]; this module places
//! them and asks the service manager (`systemctl --user`, `launchctl`) to enable,
//! start, stop them.
//!
//! Without a reachable user manager (no `systemctl` on `PATH`, or no user bus: a root
//! shell in a container, an ssh session without lingering) `install` still writes the
//! unit and links it into `default.target.wants/` — what `systemctl --user enable`
//! would do — so the next login's manager starts it, and says so.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use super::client::Client;
use super::unit::{self, place, Manager, ServiceSpec, LAUNCHD_LABEL, SYSTEMD_UNIT};
use super::Out;
use crate::daemon::paths::Paths;

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

/// `relay service install [--dry-run]`.
pub(crate) fn install(config: &Path, dry_run: bool) -> Result<Out, String> {
    let place = place()?;
    let content = render(place.manager, config)?;
    if dry_run {
        return Ok(Out {
            json: json!({"manager": place.manager.name(), "file": place.file, "content": content, "written": false}),
            text: content,
            raw: None,
        });
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
    // A relay started by hand keeps the config dir's lock: the service's relay could
    // not start beside it (one relay per config dir), so it is not asked to.
    let by_hand = running
        .as_ref()
        .filter(|r| r.service.is_none())
        .map(|r| r.pid);
    let mut notes = Vec::new();
    let (enabled, started) = match place.manager {
        Manager::Systemd => match systemd_reachable() {
            Ok(()) => {
                systemctl(&["daemon-reload"])?;
                if let Some(pid) = by_hand {
                    systemctl(&["enable", SYSTEMD_UNIT])?;
                    notes.push(format!("relay already runs for this config dir (pid {pid}, started by hand), so the service was enabled, not started (one relay per config dir): stop that relay (Ctrl-C where it runs, or `kill {pid}`), then `systemctl --user start {SYSTEMD_UNIT}`"));
                    (true, false)
                } else if let Some(r) = &running {
                    systemctl(&["enable", SYSTEMD_UNIT])?;
                    notes.push(format!("the service already runs relay (pid {}); `systemctl --user restart {SYSTEMD_UNIT}` runs it from the file written now", r.pid));
                    (true, false)
                } else {
                    systemctl(&["enable", "--now", SYSTEMD_UNIT])?;
                    (true, true)
                }
            }
            Err(why) => {
                let link = place.wants_link.as_ref().ok_or("no wants folder")?;
                let dir = link.parent().ok_or("no wants folder")?;
                std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                remove_if_there(link)?;
                std::os::unix::fs::symlink(&place.file, link)
                    .map_err(|e| format!("{}: {e}", link.display()))?;
                let now = match by_hand {
                    Some(pid) => format!("relay already runs for this config dir (pid {pid}, started by hand); the service's relay cannot start while it runs (one relay per config dir)"),
                    None => "Start relay now with `relay serve`".into(),
                };
                notes.push(format!(
                    "systemctl --user is not available here ({why}): the unit is written and linked into default.target.wants, so a systemd user manager starts it at your next login; nothing was started now. {now}"
                ));
                (true, false)
            }
        },
        Manager::Launchd => {
            let file = place.file.to_string_lossy().into_owned();
            // A LaunchAgent in ~/Library/LaunchAgents is loaded at every login; loading
            // it now starts it (RunAtLoad), unless a relay started by hand runs. One the
            // service runs ends with the bootout and starts again from the new file.
            let _ = launchctl(&["bootout", &format!("{}/{LAUNCHD_LABEL}", gui_domain())]);
            if let Some(pid) = by_hand {
                notes.push(format!("relay already runs for this config dir (pid {pid}, started by hand), so the LaunchAgent was not loaded now (one relay per config dir): it starts at your next login, or stop that relay (Ctrl-C where it runs, or `kill {pid}`) and run `launchctl bootstrap {} '{file}'`", gui_domain()));
                (true, false)
            } else {
                launchctl(&["bootstrap", &gui_domain(), &file])?;
                (true, true)
            }
        }
    };
    let log = Paths {
        config: config.to_path_buf(),
    }
    .log();
    let mut text = format!(
        "installed {} ({})\nruns: relay serve for {} at login, restarted when it fails\nlog: {}",
        place.file.display(),
        place.manager.name(),
        config.display(),
        log.display()
    );
    if started {
        text.push_str("\nstarted now");
    }
    for n in &notes {
        text.push_str(&format!("\nnote: {n}"));
    }
    Ok(Out {
        json: json!({
            "manager": place.manager.name(),
            "file": place.file,
            "written": true,
            "enabled": enabled,
            "started": started,
            "log": log,
            "notes": notes,
        }),
        text,
        raw: None,
    })
}

/// `relay service uninstall`: stopped, disabled, its file removed. Not installed is
/// not an error.
pub(crate) fn uninstall() -> Result<Out, String> {
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
    let mut text = if removed {
        format!("uninstalled {}", place.file.display())
    } else {
        format!("not installed (no {})", place.file.display())
    };
    for n in &notes {
        text.push_str(&format!("\nnote: {n}"));
    }
    Ok(Out {
        json: json!({"manager": place.manager.name(), "file": place.file, "removed": removed, "notes": notes}),
        text,
        raw: None,
    })
}

/// `relay service status`: the file, what the manager says of it, and whether a relay
/// answers on this config dir. A report: exit 0 either way.
pub(crate) fn status(config: &Path) -> Result<Out, String> {
    let place = place()?;
    let installed = std::fs::read_to_string(&place.file).ok();
    let current = match (&installed, render(place.manager, config)) {
        (Some(have), Ok(want)) => Some(*have == want),
        _ => None,
    };
    let (enabled, active, manager_note): (Option<bool>, Option<String>, Option<String>) =
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
                    (Some(en == "enabled"), Some(word("is-active")), None)
                }
                Err(why) => (
                    place
                        .wants_link
                        .as_ref()
                        .map(|l| l.symlink_metadata().is_ok()),
                    None,
                    Some(format!("systemctl --user is not available here ({why})")),
                ),
            },
            Manager::Launchd => {
                match launchctl(&["print", &format!("{}/{LAUNCHD_LABEL}", gui_domain())]) {
                    Ok(out) => {
                        let state = out
                            .lines()
                            .find_map(|l| l.trim().strip_prefix("state = "))
                            .unwrap_or("loaded")
                            .to_string();
                        (Some(installed.is_some()), Some(state), None)
                    }
                    Err(_) => (Some(installed.is_some()), Some("not loaded".into()), None),
                }
            }
        };
    let running = running(config);
    let conflict = running
        .as_ref()
        .and_then(|r| collision(config, r.pid, r.service.as_deref()));
    let log = Paths {
        config: config.to_path_buf(),
    }
    .log();
    let mut text = match &installed {
        Some(_) => format!(
            "installed {} ({})",
            place.file.display(),
            place.manager.name()
        ),
        None => format!(
            "not installed (no {}); `relay service install` installs it",
            place.file.display()
        ),
    };
    if installed.is_some() {
        if let Some(e) = enabled {
            text.push_str(if e {
                "\nenabled at login"
            } else {
                "\nnot enabled at login"
            });
        }
        if let Some(a) = &active {
            text.push_str(&format!("\nservice state: {a}"));
        }
        if current == Some(false) {
            text.push_str("\nthe file differs from what `relay service install` writes now (another relay, config dir or PATH); run it again to update");
        }
    }
    if let Some(n) = &manager_note {
        text.push_str(&format!("\nnote: {n}"));
    }
    text.push_str(&match &running {
        Some(r) => format!(
            "\nrelay: running (pid {}, {}) for {}",
            r.pid,
            started_by(r.service.as_deref()),
            config.display()
        ),
        None => format!("\nrelay: not running for {}", config.display()),
    });
    if let Some(c) = &conflict {
        text.push_str(&format!("\nnote: {c}"));
    }
    text.push_str(&format!("\nlog: {}", log.display()));
    let v: Value = json!({
        "manager": place.manager.name(),
        "file": place.file,
        "installed": installed.is_some(),
        "current": current,
        "enabled": enabled,
        "active": active,
        "running": running.is_some(),
        "pid": running.as_ref().map(|r| r.pid),
        "service": running.as_ref().and_then(|r| r.service.clone()),
        "conflict": conflict,
        "log": log,
        "note": manager_note,
    });
    Ok(Out {
        json: v,
        text,
        raw: None,
    })
}
