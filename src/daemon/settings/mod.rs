//! `settings.json` (docs/settings.md): its shape and its defaults, in one place, and the
//! first-run seed. Settings are read fresh for every launch and never cached across
//! launches: a fixed file takes effect at the next launch.
//!
//! - `load.rs`: reading the file; unknown keys, each with the known key it resembles;
//!   serde's messages reworded, with the line, the column and the key path.
//! - `check.rs`: what the shape cannot say (ids, paths, names, lists, ports), each
//!   problem at its key.
//! - `values.rs`: `detach_keys` and `retain_ended`, each spelled its own way.
//! - `tokens.rs`: the token file each project's launches run on.
//! - `schema.rs`: the JSON Schema of the file, derived from these types
//!   (docs/settings.schema.json).
//!
//! Nothing here imports a launch (`src/daemon/plan/`, `src/daemon/launch/`) or the egress
//! proxy (`src/daemon/egress/`): the lists the checks read are in `src/sandbox/`.

mod check;
mod load;
mod schema;
mod tokens;
mod values;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::protocol::SessionLimits;
use crate::sandbox::MacOptIns;

pub use check::{valid_mac_name, valid_model, valid_permission_mode};
pub use load::{
    describe_unknown, load, parse, unknown_keys, Loaded, SettingsError, UnknownKey,
    SETTINGS_MAX_BYTES,
};
pub use schema::{schema, schema_text, SCHEMA_FILE};
pub use tokens::{
    configured_tokens, every_token, project_token_path, project_token_value, token_file_path,
    ConfiguredToken,
};
pub use values::{DetachKeys, Retention};

pub const FILE_NAME: &str = "settings.json";

fn is_false(b: &bool) -> bool {
    !*b
}

fn default_true() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

/// relay's `settings.json` (docs/settings.md). Unknown keys are reported, not fatal.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(title = "relay settings.json", deny_unknown_fields)]
pub struct Settings {
    /// The JSON Schema an editor checks this file against (`relay settings schema`
    /// prints it); relay keeps the key and reads nothing from it.
    #[serde(rename = "$schema", default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String")]
    pub schema: Option<String>,
    /// Path of the file holding the long-lived Claude token, absolute or `~/…`. Empty:
    /// unset (docs/settings.md#claude_token_file).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub claude_token_file: String,
    /// The folders sessions may run in, each with the templates it allows
    /// (docs/settings.md#projects).
    #[serde(default)]
    pub projects: Vec<Project>,
    /// What a launch runs and its sandbox's grants (docs/settings.md#terminal_templates).
    #[serde(default)]
    pub terminal_templates: Vec<Template>,
    /// Options of every sandboxed session (docs/settings.md#session_sandbox).
    #[serde(default)]
    pub session_sandbox: SessionSandbox,
    /// relay's HTTP API (docs/settings.md#api).
    #[serde(default)]
    pub api: Api,
    /// The Claude program of every Claude launch: a name looked up in PATH, or a path
    /// (docs/settings.md#which-claude-runs).
    #[serde(
        default = "default_claude_path",
        skip_serializing_if = "is_default_claude_path"
    )]
    #[schemars(extend("default" = "claude"))]
    pub claude_path: String,
    /// What happens to sessions running on the token when `claude_token_file`'s content
    /// changes (docs/settings.md#claude_token_on_change).
    #[serde(default, skip_serializing_if = "is_stop")]
    #[schemars(extend("default" = "stop"))]
    pub claude_token_on_change: OnTokenChange,
    /// How long an ended session's record, logs and temp folder are kept: seconds, a
    /// duration such as `"7d"`, `"12h"`, `"30m"` or `"90s"`, or `"never"`
    /// (docs/settings.md#retain_ended).
    #[serde(default, skip_serializing_if = "Retention::is_default")]
    pub retain_ended: Retention,
    /// The keys that detach `relay terminal attach` and `relay sandbox` from a terminal,
    /// leaving it running: comma-separated, each `ctrl-<c>` (a letter or one of
    /// `@ [ \ ] ^ _`) or one printable character, at most 8; `none` turns detaching off
    /// (docs/settings.md#detach_keys).
    #[serde(default, skip_serializing_if = "DetachKeys::is_default")]
    pub detach_keys: DetachKeys,
    /// Names of relay's environment every sandboxed launch inherits besides the base
    /// list and the routing names: exact names or `PREFIX*` (docs/settings.md#env_passthrough).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_passthrough: Vec<String>,
}

impl Settings {
    /// The terminal template with this id.
    pub fn template(&self, id: &str) -> Option<&Template> {
        self.terminal_templates.iter().find(|t| t.id == id)
    }

    /// The one Claude program every Claude launch runs, headless sessions and
    /// `claude-code` terminals alike (docs/settings.md, "Which Claude runs"):
    /// `claude_path` when it is set to anything but its default `claude`, else the
    /// `claude-code` template's `command` when it names one, else `claude`.
    pub fn claude_program(&self) -> String {
        if !self.claude_path.is_empty() && !is_default_claude_path(&self.claude_path) {
            return self.claude_path.clone();
        }
        self.template(crate::protocol::CLAUDE_CODE_TEMPLATE)
            .map(|t| t.command.clone())
            .filter(|c| !c.is_empty())
            .unwrap_or_else(default_claude_path)
    }

    /// The template of every Claude launch: the settings' `claude-code` template (a
    /// built-in one with no grants when there is none), running [`Self::claude_program`].
    pub fn claude_template(&self) -> Template {
        let mut t = self
            .template(crate::protocol::CLAUDE_CODE_TEMPLATE)
            .cloned()
            .unwrap_or_else(|| {
                Template::new(crate::protocol::CLAUDE_CODE_TEMPLATE, "Claude Code", "")
            });
        t.command = self.claude_program();
        t
    }

    /// What a sandboxed launch of `template` may inherit from relay's environment
    /// besides the base list and the routing names: the settings' `env_passthrough`,
    /// then the template's, each entry once.
    pub fn env_passthrough_for(&self, template: &Template) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for p in self.env_passthrough.iter().chain(&template.env_passthrough) {
            if !out.contains(p) {
                out.push(p.clone());
            }
        }
        out
    }

    /// The sandbox backend launches use: `auto` is Seatbelt on macOS and bubblewrap
    /// elsewhere. `relay doctor` checks the same one.
    pub fn backend(&self) -> crate::protocol::Backend {
        use crate::protocol::Backend;
        match self.session_sandbox.backend {
            BackendChoice::Seatbelt => Backend::Seatbelt,
            BackendChoice::Bwrap => Backend::Bwrap,
            BackendChoice::Auto if cfg!(target_os = "macos") => Backend::Seatbelt,
            BackendChoice::Auto => Backend::Bwrap,
        }
    }

    /// The launcher program of [`Self::backend`] (`~/` expanded).
    pub fn launcher(&self, home: &Path) -> PathBuf {
        use crate::protocol::Backend;
        let sb = &self.session_sandbox;
        let (set, default) = match self.backend() {
            Backend::Seatbelt => (&sb.seatbelt_launcher, "/usr/bin/sandbox-exec"),
            Backend::Bwrap => (&sb.bwrap_launcher, "/usr/bin/bwrap"),
        };
        let launcher = if set.is_empty() { default } else { set };
        crate::sandbox::resolve::expand_home(launcher, home)
    }
}

/// `claude_token_on_change`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnTokenChange {
    /// Sessions on the old token are stopped: sessions go dormant (a resume runs on the
    /// new token), terminals end.
    #[default]
    Stop,
    /// They go on, listed as `stale`.
    Keep,
}

fn is_stop(v: &OnTokenChange) -> bool {
    *v == OnTokenChange::Stop
}

fn default_claude_path() -> String {
    "claude".into()
}

fn is_default_claude_path(s: &String) -> bool {
    s == "claude"
}

/// A folder sessions may run in (docs/settings.md#projects).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Project {
    /// Its id, unique among the projects (`relay session start --project ID`).
    pub id: String,
    /// Its name as lists show it.
    #[serde(default)]
    pub name: String,
    /// The folder, absolute or `~/…`; a launch runs in it or below it.
    pub path: String,
    /// The template ids its launches may run: `[]` none, `["*"]` all.
    #[serde(default)]
    pub allowed_templates: Vec<String>,
    /// A sandboxed launch may run in the home folder itself (or `/`, or a folder above
    /// the home folder), which grants it read-write on all of it; off, such a launch is
    /// refused (`home_directory`, docs/settings.md).
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_home_directory: bool,
    /// This project's own setup token file, over the top-level `claude_token_file`
    /// (absent: the top-level one; `""`: none for this project) (docs/settings.md#claude_token_file).
    #[serde(
        default,
        deserialize_with = "present_string",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "String")]
    pub claude_token_file: Option<String>,
    /// A label for the account this project's token belongs to (`"work"`), shown
    /// beside the token's fingerprint in every list; never checked against the token.
    #[serde(
        default,
        deserialize_with = "present_string",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "String")]
    pub account: Option<String>,
}

/// A key that is there holds a string: `null` is refused, never read as "absent" (for
/// a token file that would mean the top-level one, another account).
fn present_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    String::deserialize(d).map(Some)
}

impl Project {
    pub fn allows(&self, template: &str) -> bool {
        self.allowed_templates
            .iter()
            .any(|t| t == "*" || t == template)
    }
}

/// What a launch runs, and its sandbox (docs/settings.md#terminal_templates).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Template {
    /// Its id, unique among the templates (`shell`, `claude-code`, `relay sandbox ID`).
    pub id: String,
    /// Its name as lists show it.
    #[serde(default)]
    pub name: String,
    /// The program: a name looked up in PATH, or a path; its arguments go in `args`.
    pub command: String,
    /// The program's arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Variables set for the program.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Names of relay's environment this template's sandboxed launches inherit too,
    /// added to the top-level `env_passthrough`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_passthrough: Vec<String>,
    /// Absent means sandboxed; only `false` opts out.
    #[serde(default = "default_true", skip_serializing_if = "is_true")]
    #[schemars(extend("default" = true))]
    pub sandbox: bool,
    /// Paths its sandboxes may read, absolute or `~/…`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<String>,
    /// Paths its sandboxes may read and write, absolute or `~/…`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_write: Vec<String>,
    /// Paths its sandboxes may not reach at all, absolute or `~/…`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    /// Claude launches only: `--model` for Claude Code (`""`: its default).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    /// Claude launches only: `--permission-mode` for Claude Code (`""`: relay's default,
    /// `bypassPermissions` for a sandboxed headless session, else Claude Code's own).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub permission_mode: String,
    /// As a project's `allow_home_directory`, for this template's launches.
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_home_directory: bool,
    /// Execution-bearing paths this template's sandboxes may write after all: a path
    /// (`~/…` or absolute) or a name relay takes in every granted folder (`.git/config`)
    /// (docs/session-host.md#execution-bearing-files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writable_exceptions: Vec<String>,
    /// This template's sandboxes' limits on processes and memory, key by key over
    /// `session_sandbox.limits` (docs/settings.md#limits).
    #[serde(default, skip_serializing_if = "Limits::is_unset")]
    pub limits: Limits,
    /// The network of this template's sandboxes (absent: `proxied`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkMode>,
    /// Where a proxied sandbox may connect: `host[:port]`, `*.domain[:port]`, an
    /// address with its port, or a preset (`@registries`), added to
    /// `session_sandbox.egress` (docs/settings.md#network).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<String>,
    /// The TCP ports a token launch's shielded tools may listen on (a dev server, a
    /// test server; `0`: one the kernel picks); every other bind is refused
    /// (docs/settings.md#terminal_templates). Never the forwarder's proxy port nor a
    /// port the egress list or a routing URL sends to loopback.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listen_ports: Vec<u16>,
    /// The person's toolchains behind relay's `PATH`, read-only (docs/settings.md#toolchains);
    /// `false` leaves them out.
    #[serde(default = "default_true", skip_serializing_if = "is_true")]
    #[schemars(extend("default" = true))]
    pub toolchains: bool,
    /// What this template's Seatbelt sandboxes may reach that every other one is
    /// refused: the keychain, the clipboard, Apple Events to named apps, named Mach
    /// services (docs/settings.md#macos). Ignored by bubblewrap.
    #[serde(default, skip_serializing_if = "MacOptIns::is_empty")]
    pub macos: MacOptIns,
}

/// A template's network (docs/settings.md#network).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// A network namespace of its own; out through relay's egress proxy alone.
    Proxied,
    /// No network at all.
    None,
    /// The host's network, shared: not isolated (the API port and the denied ports
    /// refused).
    Host,
}

impl Template {
    /// A sandboxed template with no grants, arguments or environment of its own.
    pub fn new(id: &str, name: &str, command: &str) -> Template {
        Template {
            id: id.into(),
            name: name.into(),
            command: command.into(),
            args: vec![],
            env: BTreeMap::new(),
            env_passthrough: vec![],
            sandbox: true,
            read: vec![],
            read_write: vec![],
            deny: vec![],
            model: String::new(),
            permission_mode: String::new(),
            allow_home_directory: false,
            writable_exceptions: vec![],
            limits: Limits::default(),
            network: None,
            egress: vec![],
            listen_ports: vec![],
            toolchains: true,
            macos: MacOptIns::default(),
        }
    }
}

/// The sandbox backend (docs/settings.md#session_sandbox).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BackendChoice {
    /// Seatbelt on macOS, bubblewrap elsewhere.
    #[default]
    Auto,
    /// macOS's `sandbox-exec`.
    Seatbelt,
    /// bubblewrap.
    Bwrap,
}

/// Options of every sandboxed session (docs/settings.md#session_sandbox).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SessionSandbox {
    /// Loopback ports no sandboxed session may connect to (relay's API port is added).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied_loopback_ports: Vec<u16>,
    /// The sandbox backend: `auto` is Seatbelt on macOS and bubblewrap elsewhere.
    #[serde(default, skip_serializing_if = "is_auto")]
    #[schemars(extend("default" = "auto"))]
    pub backend: BackendChoice,
    /// The Seatbelt launcher (`/usr/bin/sandbox-exec` when empty); a test seam.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub seatbelt_launcher: String,
    /// The bubblewrap binary (`/usr/bin/bwrap` when empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bwrap_launcher: String,
    /// Network for sandboxed sessions: `true` cuts it off entirely.
    #[serde(default, skip_serializing_if = "is_false")]
    pub network_off: bool,
    /// Egress entries every proxied template gets besides its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<String>,
    /// Every sandboxed session's limits on processes and memory (docs/settings.md#limits).
    #[serde(default, skip_serializing_if = "Limits::is_unset")]
    pub limits: Limits,
    /// What relay does when a proxied session goes over its egress budget (more than
    /// 120 connections in a minute): `tell` says so once, in an `egress_budget` row and
    /// event; `stop` says so and stops the session (`egress_over_budget`). Read when the
    /// budget is exceeded (docs/routes.md#logs-and-their-bounds).
    #[serde(default, skip_serializing_if = "OverBudget::is_tell")]
    #[schemars(extend("default" = "tell"))]
    pub egress_over_budget: OverBudget,
}

/// `session_sandbox.egress_over_budget`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OverBudget {
    /// Said once; the session goes on, the rest of each minute's connections folded
    /// into counted rows.
    #[default]
    Tell,
    /// Said once, and the session is stopped, its end saying `egress_over_budget`.
    Stop,
}

impl OverBudget {
    fn is_tell(&self) -> bool {
        *self == OverBudget::Tell
    }
}

/// Limits on one sandboxed session (docs/settings.md#limits): an absent key takes the
/// next one out (the template's, then `session_sandbox.limits`, then the default); `0`
/// is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Limits {
    /// The most processes and threads at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_max: Option<u32>,
    /// The most memory, in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_max_mib: Option<u64>,
    /// Its share of the CPU beside the other sessions, 1 to 10000 (`cpu.weight`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 10000))]
    pub cpu_weight: Option<u32>,
}

impl Limits {
    /// A session's processes and threads: enough for a build on a large machine, far
    /// below what takes a login down (`kernel.pid_max` is 4,194,304 on 64-bit).
    pub const DEFAULT_PIDS_MAX: u32 = 4096;
    /// A session's memory: 8 GiB.
    pub const DEFAULT_MEMORY_MAX_MIB: u64 = 8192;
    /// A session's CPU weight: the kernel's own default, so sessions share the CPU
    /// evenly; a template below it yields to the others (docs/settings.md#limits).
    pub const DEFAULT_CPU_WEIGHT: u32 = 100;
    /// cgroup v2's range of `cpu.weight` (0 is no weight written).
    pub const CPU_WEIGHTS: std::ops::RangeInclusive<u32> = 1..=10000;

    fn is_unset(&self) -> bool {
        *self == Limits::default()
    }
}

impl Settings {
    /// A sandboxed launch of `template`'s limits (without a cgroup folder).
    pub fn limits_for(&self, template: &Template) -> SessionLimits {
        Self::limits_over(&template.limits, &self.session_sandbox.limits)
    }

    /// `t`'s limits key by key over `s`'s, then the defaults.
    pub fn limits_over(t: &Limits, s: &Limits) -> SessionLimits {
        SessionLimits {
            pids_max: t
                .pids_max
                .or(s.pids_max)
                .unwrap_or(Limits::DEFAULT_PIDS_MAX),
            memory_max_mib: t
                .memory_max_mib
                .or(s.memory_max_mib)
                .unwrap_or(Limits::DEFAULT_MEMORY_MAX_MIB),
            cpu_weight: t
                .cpu_weight
                .or(s.cpu_weight)
                .unwrap_or(Limits::DEFAULT_CPU_WEIGHT),
            cgroup: None,
        }
    }
}

fn is_auto(b: &BackendChoice) -> bool {
    *b == BackendChoice::Auto
}

/// relay's HTTP API (docs/settings.md#api).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Api {
    /// Loopback TCP address for HTTP clients (`127.0.0.1:PORT`); empty: unix socket only.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub listen: String,
}

/// The first-run settings: a `shell` and a `claude-code` template and a project for
/// the home folder that allows both.
pub fn seed() -> Settings {
    Settings {
        schema: None,
        claude_token_file: String::new(),
        projects: vec![Project {
            id: "home".into(),
            name: "Home".into(),
            path: "~".into(),
            allowed_templates: vec!["*".into()],
            allow_home_directory: false,
            claude_token_file: None,
            account: None,
        }],
        terminal_templates: vec![
            Template::new("shell", "Shell", "/bin/sh"),
            Template::new(
                crate::protocol::CLAUDE_CODE_TEMPLATE,
                "Claude Code",
                "claude",
            ),
        ],
        // Package installs work from the first run: the registries every template
        // reaches (docs/settings.md#first-run-settings says why).
        session_sandbox: SessionSandbox {
            egress: vec!["@registries".into()],
            ..SessionSandbox::default()
        },
        api: Api::default(),
        claude_path: default_claude_path(),
        claude_token_on_change: OnTokenChange::Stop,
        retain_ended: Retention::DEFAULT,
        detach_keys: DetachKeys::default_keys(),
        env_passthrough: vec![],
    }
}

pub fn to_pretty(s: &Settings) -> String {
    let mut text = serde_json::to_string_pretty(s).unwrap_or_else(|_| "{}".into());
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_round_trips_byte_identical_and_never_writes_an_unset_token_key() {
        let text = to_pretty(&seed());
        assert!(!text.contains("claude_token_file"), "{text}");
        let loaded = parse(Path::new("/x/settings.json"), text.as_bytes()).unwrap();
        assert_eq!(to_pretty(&loaded.settings), text);
        // A user's file without the key stays byte-identical when written back.
        let fixture = include_str!("../testdata/settings-no-token.json");
        let loaded = parse(Path::new("/x/settings.json"), fixture.as_bytes()).unwrap();
        assert_eq!(to_pretty(&loaded.settings), fixture);
    }

    #[test]
    fn a_templates_limits_go_over_the_sandboxes_key_by_key_then_the_defaults() {
        let p = Path::new("/cfg/settings.json");
        let l = parse(
            p,
            br#"{"session_sandbox":{"limits":{"pids_max":100,"memory_max_mib":200,"cpu_weight":20}},
                 "terminal_templates":[{"id":"a","command":"x","limits":{"memory_max_mib":0,"cpu_weight":5}},
                                       {"id":"b","command":"x"}],
                 "projects":[{"id":"p","path":"/","limits":1}]}"#,
        )
        .unwrap();
        let s = &l.settings;
        let three = |l: SessionLimits| (l.pids_max, l.memory_max_mib, l.cpu_weight);
        assert_eq!(three(s.limits_for(&s.terminal_templates[0])), (100, 0, 5));
        assert_eq!(
            three(s.limits_for(&s.terminal_templates[1])),
            (100, 200, 20)
        );
        assert_eq!(
            three(seed().limits_for(&seed().terminal_templates[0])),
            (
                Limits::DEFAULT_PIDS_MAX,
                Limits::DEFAULT_MEMORY_MAX_MIB,
                Limits::DEFAULT_CPU_WEIGHT
            )
        );
        let keys: Vec<&str> = l.unknown_keys.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(keys, ["projects[0].limits"]);
        let typo = parse(
            p,
            br#"{"session_sandbox":{"limits":{"pid_max":1}},"terminal_templates":[{"id":"a","command":"x","limits":{"memory":1}}]}"#,
        )
        .unwrap();
        let keys: Vec<&str> = typo.unknown_keys.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "terminal_templates[0].limits.memory",
                "session_sandbox.limits.pid_max"
            ]
        );
    }

    #[test]
    fn sandbox_false_is_the_only_opt_out() {
        let p = Path::new("/cfg/settings.json");
        let l = parse(p, br#"{"terminal_templates":[{"id":"a","command":"x"},{"id":"b","command":"x","sandbox":false}]}"#).unwrap();
        assert!(l.settings.terminal_templates[0].sandbox);
        assert!(!l.settings.terminal_templates[1].sandbox);
    }
}
