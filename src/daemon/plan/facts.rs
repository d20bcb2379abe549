//! What a plan knows of the machine and of relay, taken once per launch.
//! [`Facts::snapshot`] is the one place the plan reads the daemon.
//! A test builds a `Facts` literal instead.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::authorize::Prior;
use crate::daemon::egress::ROUTING_URL_VARS;
use crate::daemon::paths::Paths;
use crate::daemon::{Daemon, Entry};
use crate::sandbox::HostPaths;

/// A snapshot of what one launch's plan reads beyond the settings and the request.
#[derive(Debug, Clone)]
pub struct Facts {
    /// The person's home folder.
    pub home: PathBuf,
    /// relay's config dir and what lies in it.
    pub paths: Paths,
    /// relay's own environment: the base of a target's, and its `PATH`.
    pub relay_env: Vec<(OsString, OsString)>,
    /// relay's API port, when it listens on one.
    pub api_port: Option<u16>,
    /// relay-shim as the kernel names the file relay opened (or why it cannot).
    pub shim: Result<PathBuf, String>,
    /// relay's own programs: `relay`, `relay-sessions`, `relay-shim`.
    pub relay_programs: Vec<PathBuf>,
    /// The sandboxed sessions running or starting now, this one left out.
    pub live: Vec<Entry>,
    /// Every sandboxed session relay remembers, this one left out.
    pub remembered: Vec<Entry>,
    /// The caller descends from a live session's root.
    pub caller_inside_session: bool,
    /// A resume: what the dormant session ran with.
    pub prior: Option<Prior>,
    /// Facts of the Mac a Seatbelt profile is written for.
    pub host_paths: HostPaths,
    /// The names this launch's own folders get.
    pub names: Names,
    /// The cgroup folder relay made at its start for its sessions, or why there is
    /// none (`crate::limits`).
    pub limits: crate::limits::Prepared,
}

/// The names of what a launch makes for itself.
#[derive(Debug, Clone)]
pub struct Names {
    /// The session's id; empty when it is only explained (none is minted).
    pub id: String,
    /// Its temp folder (`<tmp>/relay-<id>`), as relay names it.
    pub temp_dir: PathBuf,
    /// The same folder with every link above it resolved.
    pub temp_real: PathBuf,
    /// A token launch's home of relay's, inside the temp folder.
    pub token_home: PathBuf,
}

impl Names {
    /// The names of a launch with id `id`; `home` is the name of its home folder.
    pub fn new(tmp: &Path, tmp_real: &Path, id: &str, home: &str) -> Names {
        let folder = format!("relay-{}", if id.is_empty() { "<id>" } else { id });
        Names {
            id: id.to_string(),
            temp_dir: tmp.join(&folder),
            temp_real: tmp_real.join(&folder),
            token_home: tmp.join(&folder).join(home),
        }
    }

    /// The folder Claude Code's configuration lives in (`CLAUDE_CONFIG_DIR`).
    pub fn claude_dir(&self) -> PathBuf {
        self.temp_dir.join("claude-config")
    }
}

impl Facts {
    /// What the daemon knows now, for a launch of session `id` by `caller_pid` (a
    /// resume of `id` when `resume`). `home_name` names a token launch's home folder.
    pub fn snapshot(
        d: &Daemon,
        id: &str,
        home_name: &str,
        caller_pid: Option<u32>,
        resume: bool,
    ) -> Facts {
        let prior = resume.then(|| d.entry(id)).flatten().map(|e| Prior {
            model: e.record.model,
            permission_mode: e.record.permission_mode,
            claude: e.record.claude,
        });
        Facts {
            home: d.home.clone(),
            paths: d.paths.clone(),
            relay_env: std::env::vars_os().collect(),
            api_port: d.api_port(),
            shim: d.host.shim_helper.real_path(),
            relay_programs: super::guard::relay_programs(),
            live: d.live_sandboxed(id),
            remembered: d.sandboxed_since_start(id),
            caller_inside_session: caller_pid.is_some_and(|pid| d.descends_from_session(pid)),
            prior,
            host_paths: HostPaths::current(),
            names: Names::new(&d.tmp, &d.tmp_real, id, home_name),
            limits: d.limits(),
        }
    }

    /// One of relay's own environment variables.
    pub fn relay_var(&self, name: &str) -> Option<&OsStr> {
        self.relay_env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_os_str())
    }

    /// relay's `PATH` (empty when unset).
    pub fn relay_path(&self) -> OsString {
        self.relay_var("PATH")
            .map(OsStr::to_os_string)
            .unwrap_or_default()
    }

    /// relay's own values of the routing URL variables, which a sandboxed launch
    /// inherits where its template sets none.
    pub fn relay_routing(&self) -> BTreeMap<String, String> {
        ROUTING_URL_VARS
            .iter()
            .filter_map(|n| {
                let v = self.relay_var(n)?.to_str()?;
                Some((n.to_string(), v.to_string()))
            })
            .collect()
    }
}
