//! The login-service files `relay service install` writes (docs/cli.md#relay-service):
//! a systemd user unit on Linux, a LaunchAgent plist on macOS. Pure renderers, so both
//! are golden-tested on any platform (`src/cli/testdata/`), and where the file goes
//! ([`place`]), for `relay service` and the "relay is not running" message.
//!
//! What goes in is only what a person could read in `relay service install --dry-run`:
//! the program, the config dir, the log file and `PATH`. Never the token or any other
//! secret, and no other environment variable (a proxy URL can carry a password).

use std::path::{Path, PathBuf};

use crate::daemon::paths::home_dir;

/// The systemd unit's name, in `~/.config/systemd/user/`.
pub const SYSTEMD_UNIT: &str = "relay.service";
/// The LaunchAgent's label; its file is `~/Library/LaunchAgents/<label>.plist`.
pub const LAUNCHD_LABEL: &str = "relay.serve";

/// The service manager this platform has.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Manager {
    Systemd,
    Launchd,
}

impl Manager {
    fn here() -> Manager {
        if cfg!(target_os = "macos") {
            Manager::Launchd
        } else {
            Manager::Systemd
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Manager::Systemd => "systemd",
            Manager::Launchd => "launchd",
        }
    }
}

/// Where the service file lives, and (systemd) the link that enables it at login.
pub struct Place {
    pub manager: Manager,
    pub file: PathBuf,
    pub wants_link: Option<PathBuf>,
}

pub fn place() -> Result<Place, String> {
    let manager = Manager::here();
    match manager {
        // systemd reads user units from $XDG_CONFIG_HOME/systemd/user (~/.config when
        // unset), the directory the `directories` crate names on Linux.
        Manager::Systemd => {
            let base = directories::BaseDirs::new()
                .map(|b| b.config_dir().join("systemd/user"))
                .ok_or("no home directory (HOME is not set and the account has none)")?;
            Ok(Place {
                manager,
                file: base.join(SYSTEMD_UNIT),
                wants_link: Some(base.join("default.target.wants").join(SYSTEMD_UNIT)),
            })
        }
        Manager::Launchd => {
            let home =
                home_dir().ok_or("no home directory (HOME is not set and the account has none)")?;
            Ok(Place {
                manager,
                file: home
                    .join("Library/LaunchAgents")
                    .join(format!("{LAUNCHD_LABEL}.plist")),
                wants_link: None,
            })
        }
    }
}

/// What a service runs: `<relay> --config-dir <config> serve`, its output appended to
/// `log`, with `path` as its `PATH`.
pub struct ServiceSpec<'a> {
    pub relay: &'a Path,
    pub config_dir: &'a Path,
    pub log: &'a Path,
    pub path: &'a str,
}

/// One argument of `ExecStart=`, quoted: systemd reads `"…"` with C escapes, and
/// expands `%` specifiers and `$` variables unless they are doubled.
fn systemd_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '%' => out.push_str("%%"),
            '$' => out.push_str("$$"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A value of a setting that is not a command line: only `%` is special there.
fn systemd_value(s: &str) -> String {
    s.replace('%', "%%")
}

/// The systemd user unit: `relay serve` at login (`default.target`), restarted when it
/// fails, stopped with SIGTERM to relay alone so it ends its sessions itself
/// (`KillMode=mixed`; docs/cli.md#relay-serve), its output appended to relay's log. Its
/// cgroup's `memory`, `pids` and `cpu` are delegated to relay, which gives each sandboxed
/// session a cgroup of its own (`Delegate=`; src/limits/cgroup.rs).
pub fn systemd_unit(spec: &ServiceSpec) -> String {
    let exec = [
        systemd_quote(&spec.relay.to_string_lossy()),
        "--config-dir".to_string(),
        systemd_quote(&spec.config_dir.to_string_lossy()),
        "serve".to_string(),
    ]
    .join(" ");
    let log = systemd_value(&spec.log.to_string_lossy());
    format!(
        "# Written by `relay service install`; removed by `relay service uninstall`.\n\
         [Unit]\n\
         Description=relay: sandboxed Claude Code sessions (relay serve)\n\
         \n\
         [Service]\n\
         Type=simple\n\
         ExecStart={exec}\n\
         Environment={env}\n\
         Restart=on-failure\n\
         RestartSec=2\n\
         KillMode=mixed\n\
         Delegate=memory pids cpu\n\
         TimeoutStopSec=30\n\
         StandardOutput=append:{log}\n\
         StandardError=append:{log}\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
        env = systemd_quote(&format!("PATH={}", spec.path)),
    )
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The LaunchAgent: `relay serve` at login (`RunAtLoad`), started again when it exits
/// with a failure (`KeepAlive` / `SuccessfulExit` false), its output appended to relay's
/// log.
pub fn launchd_plist(spec: &ServiceSpec) -> String {
    let args = [
        spec.relay.to_string_lossy().into_owned(),
        "--config-dir".to_string(),
        spec.config_dir.to_string_lossy().into_owned(),
        "serve".to_string(),
    ]
    .iter()
    .map(|a| format!("\t\t<string>{}</string>\n", xml(a)))
    .collect::<String>();
    let log = xml(&spec.log.to_string_lossy());
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n\
         <!-- Written by `relay service install`; removed by `relay service uninstall`. -->\n\
         <plist version=\"1.0\">\n\
         <dict>\n\
         \t<key>Label</key>\n\
         \t<string>{LAUNCHD_LABEL}</string>\n\
         \t<key>ProgramArguments</key>\n\
         \t<array>\n\
         {args}\
         \t</array>\n\
         \t<key>EnvironmentVariables</key>\n\
         \t<dict>\n\
         \t\t<key>PATH</key>\n\
         \t\t<string>{path}</string>\n\
         \t</dict>\n\
         \t<key>RunAtLoad</key>\n\
         \t<true/>\n\
         \t<key>KeepAlive</key>\n\
         \t<dict>\n\
         \t\t<key>SuccessfulExit</key>\n\
         \t\t<false/>\n\
         \t</dict>\n\
         \t<key>ThrottleInterval</key>\n\
         \t<integer>2</integer>\n\
         \t<key>ExitTimeOut</key>\n\
         \t<integer>30</integer>\n\
         \t<key>StandardOutPath</key>\n\
         \t<string>{log}</string>\n\
         \t<key>StandardErrorPath</key>\n\
         \t<string>{log}</string>\n\
         </dict>\n\
         </plist>\n",
        path = xml(spec.path),
    )
}

/// The login service that started this process, when it is relay's own: systemd runs a
/// unit's processes in its cgroup (`…/relay.service` in `/proc/self/cgroup`), launchd
/// names the job in `XPC_SERVICE_NAME`. `None`: started by hand (a shell, a script).
/// `relay serve` says so in its lock file and in `GET /api/status`
/// (docs/cli.md#one-relay-per-config-dir).
pub fn started_by() -> Option<&'static str> {
    match Manager::here() {
        Manager::Systemd => std::fs::read_to_string("/proc/self/cgroup")
            .is_ok_and(|cg| in_unit(&cg))
            .then_some(SYSTEMD_UNIT),
        Manager::Launchd => std::env::var("XPC_SERVICE_NAME")
            .is_ok_and(|job| job == LAUNCHD_LABEL)
            .then_some(LAUNCHD_LABEL),
    }
}

/// Whether `/proc/self/cgroup` (v1 or v2) puts the process in relay's unit: a line
/// whose path ends in `/relay.service`, or in `/relay.service/daemon` where relay moved
/// itself to give its sessions cgroups of their own (src/limits/cgroup.rs).
fn in_unit(cgroup: &str) -> bool {
    cgroup
        .lines()
        .filter_map(|l| l.split_once(':').and_then(|(_, rest)| rest.split_once(':')))
        .any(|(_, path)| {
            let path = path.strip_suffix("/daemon").unwrap_or(path);
            path.rsplit('/').next() == Some(SYSTEMD_UNIT)
        })
}

/// The command that stops relay's login service now.
pub fn stop_command() -> String {
    match Manager::here() {
        Manager::Systemd => format!("systemctl --user stop {SYSTEMD_UNIT}"),
        Manager::Launchd => format!(
            "launchctl bootout gui/{}/{LAUNCHD_LABEL}",
            nix::unistd::getuid().as_raw()
        ),
    }
}

/// The command that starts relay's installed login service now.
pub fn start_command() -> String {
    match Manager::here() {
        Manager::Systemd => format!("systemctl --user start {SYSTEMD_UNIT}"),
        Manager::Launchd => format!(
            "launchctl kickstart gui/{}/{LAUNCHD_LABEL}",
            nix::unistd::getuid().as_raw()
        ),
    }
}

/// Whether a service file (either kind) runs relay on `config`.
pub fn names_config_dir(content: &str, config: &Path) -> bool {
    let c = config.to_string_lossy();
    content.contains(&format!("--config-dir {} serve", systemd_quote(&c)))
        || content.contains(&format!(
            "<string>--config-dir</string>\n\t\t<string>{}</string>",
            xml(&c)
        ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn golden(name: &str, got: &str) {
        let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("src/cli/testdata")
            .join(name);
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&p, got).unwrap();
        }
        let want = std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", p.display()));
        assert_eq!(
            got,
            want,
            "{} differs (UPDATE_GOLDEN=1 rewrites it)",
            p.display()
        );
    }

    fn ada() -> ServiceSpec<'static> {
        ServiceSpec {
            relay: Path::new("/Users/ada/.cargo/bin/relay"),
            config_dir: Path::new("/Users/ada/Library/Application Support/relay"),
            log: Path::new("/Users/ada/Library/Application Support/relay/relay.out"),
            path: "/Users/ada/.local/bin:/opt/homebrew/bin:/usr/bin:/bin",
        }
    }

    #[test]
    fn launch_agent_plist_is_the_golden_file() {
        golden("relay.serve.plist", &launchd_plist(&ada()));
    }

    #[test]
    fn systemd_unit_is_the_golden_file() {
        let spec = ServiceSpec {
            relay: Path::new("/home/ada/.cargo/bin/relay"),
            config_dir: Path::new("/home/ada/.config/relay"),
            log: Path::new("/home/ada/.config/relay/relay.out"),
            path: "/home/ada/.local/bin:/usr/local/bin:/usr/bin:/bin",
        };
        golden("relay.service", &systemd_unit(&spec));
    }

    #[test]
    fn only_relays_own_unit_counts_as_started_by_the_service() {
        let unit = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/relay.service\n";
        assert!(in_unit(unit));
        assert!(in_unit(
            "12:pids:/user.slice/user-1000.slice/user@1000.service/app.slice/relay.service\n\
             0::/user.slice/user-1000.slice/user@1000.service/app.slice/relay.service\n"
        ));
        for by_hand in [
            "0::/user.slice/user-1000.slice/session-3.scope\n",
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-1.scope\n",
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/relay.service/inner\n",
            "0::/system.slice/not-relay.service\n",
            "0::/\n",
            "",
        ] {
            assert!(!in_unit(by_hand), "{by_hand:?}");
        }
    }

    #[test]
    fn odd_characters_are_quoted_not_interpreted() {
        let spec = ServiceSpec {
            relay: Path::new("/opt/a \"b\"/50%/$HOME\\relay"),
            config_dir: Path::new("/x/<&>"),
            log: Path::new("/x/100%.log"),
            path: "/bin:/a&b",
        };
        let unit = systemd_unit(&spec);
        assert!(
            unit.contains(
                r#"ExecStart="/opt/a \"b\"/50%%/$$HOME\\relay" --config-dir "/x/<&>" serve"#
            ),
            "{unit}"
        );
        assert!(
            unit.contains("StandardOutput=append:/x/100%%.log\n"),
            "{unit}"
        );
        let plist = launchd_plist(&spec);
        assert!(
            plist.contains("<string>/x/&lt;&amp;&gt;</string>"),
            "{plist}"
        );
        assert!(plist.contains("<string>/bin:/a&amp;b</string>"), "{plist}");
        assert!(names_config_dir(&unit, spec.config_dir));
        assert!(names_config_dir(&plist, spec.config_dir));
        assert!(!names_config_dir(&plist, Path::new("/x")));
        assert!(!names_config_dir(&unit, Path::new("/x/<&")));
    }
}
