//! `settings.json`: the shape, the defaults (in one place), parsing with unknown keys
//! reported, and the first-run seed. Settings are read fresh for every launch and never
//! cached across launches: a fixed file takes effect at the next launch.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::jsonpath::{self, KeyPath};
use crate::sandbox::MacOptIns;

pub const FILE_NAME: &str = "settings.json";
pub const SETTINGS_MAX_BYTES: u64 = 1024 * 1024;

fn is_false(b: &bool) -> bool {
    !*b
}

fn default_true() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// Path of the file holding the long-lived Claude token. Empty: unset.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub claude_token_file: String,
    #[serde(default)]
    pub projects: Vec<Project>,
    #[serde(default)]
    pub terminal_templates: Vec<Template>,
    #[serde(default)]
    pub session_sandbox: SessionSandbox,
    #[serde(default)]
    pub api: Api,
    /// The `claude` binary for provider sessions (a name looked up in PATH, or a path).
    #[serde(
        default = "default_claude_path",
        skip_serializing_if = "is_default_claude_path"
    )]
    pub claude_path: String,
    /// What happens to sessions running on the token when `claude_token_file`'s content
    /// changes (docs/settings.md).
    #[serde(default, skip_serializing_if = "is_stop")]
    pub claude_token_on_change: OnTokenChange,
    /// How long an ended session's record, logs and temp folder are kept.
    #[serde(default, skip_serializing_if = "Retention::is_default")]
    pub retain_ended: Retention,
    /// The keys that detach `relay terminal attach` and `relay sandbox` from a terminal,
    /// leaving it running (docs/settings.md#detach_keys).
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

/// `detach_keys`: a comma-separated sequence of keys, each `ctrl-<c>` (a letter or one
/// of `@ [ \ ] ^ _`) or one printable ASCII character other than a comma; `"none"` turns
/// detaching off. At most 8 keys. The default is `ctrl-\,ctrl-\` (Ctrl-\ twice).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetachKeys(Vec<u8>);

impl DetachKeys {
    pub const MAX_KEYS: usize = 8;

    pub fn default_keys() -> DetachKeys {
        DetachKeys(vec![0x1c, 0x1c])
    }

    fn is_default(&self) -> bool {
        *self == Self::default_keys()
    }

    /// The bytes a terminal sends for the sequence; empty when detaching is off.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// From the setting's or the flag's text; the error names the key and the value.
    pub fn parse(text: &str) -> Result<DetachKeys, String> {
        let bad = |why: &str| {
            format!(
                "detach_keys {text:?}: {why} (expected keys such as ctrl-a,d or ctrl-\\,ctrl-\\, or none)"
            )
        };
        if text == "none" {
            return Ok(DetachKeys(Vec::new()));
        }
        let mut out = Vec::new();
        for key in text.split(',') {
            let lower = key.to_ascii_lowercase();
            let byte = match lower.strip_prefix("ctrl-") {
                Some(c) if c.len() == 1 => match c.as_bytes()[0] {
                    b @ b'a'..=b'z' => b - b'a' + 1,
                    b'@' => 0,
                    b @ (b'[' | b'\\' | b']' | b'^' | b'_') => b - 0x40,
                    _ => return Err(bad(&format!("no control key ctrl-{c}"))),
                },
                _ if key.len() == 1 && (0x21..0x7f).contains(&key.as_bytes()[0]) => {
                    key.as_bytes()[0]
                }
                _ => return Err(bad(&format!("{key:?} is not a key"))),
            };
            out.push(byte);
        }
        if out.len() > Self::MAX_KEYS {
            return Err(bad(&format!("more than {} keys", Self::MAX_KEYS)));
        }
        Ok(DetachKeys(out))
    }

    /// As a person reads it: `Ctrl-\ Ctrl-\`, or `none`.
    pub fn describe(&self) -> String {
        if self.0.is_empty() {
            return "none".into();
        }
        self.0
            .iter()
            .map(|b| match b {
                0..=0x1f => format!("Ctrl-{}", (b + 0x40) as char),
                _ => (*b as char).to_string(),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// As the setting spells it (what `parse` reads back).
    fn spelled(&self) -> String {
        if self.0.is_empty() {
            return "none".into();
        }
        self.0
            .iter()
            .map(|b| match b {
                0..=0x1f => format!("ctrl-{}", (b + 0x40).to_ascii_lowercase() as char),
                _ => (*b as char).to_string(),
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl Default for DetachKeys {
    fn default() -> Self {
        Self::default_keys()
    }
}

impl Serialize for DetachKeys {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.spelled())
    }
}

impl<'de> Deserialize<'de> for DetachKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        match v.as_str() {
            Some(text) => DetachKeys::parse(text).map_err(serde::de::Error::custom),
            None => Err(serde::de::Error::custom(format!(
                "detach_keys {v}: expected a string such as ctrl-\\,ctrl-\\"
            ))),
        }
    }
}

/// `claude_token_on_change`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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

/// `retain_ended`: seconds as a number, a string `<n>s|m|h|d` (`"7d"`, `"12h"`), or
/// `"never"`. The default is 7 days.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retention {
    Never,
    Secs(u64),
}

impl Retention {
    pub const DEFAULT: Retention = Retention::Secs(7 * 86_400);

    fn is_default(&self) -> bool {
        *self == Self::DEFAULT
    }

    /// From what the file says; the error names the key and the value.
    pub fn parse(v: &Value) -> Result<Retention, String> {
        let bad = || {
            format!(
                "retain_ended {v}: expected seconds, a duration such as \"7d\", \"12h\", \"30m\" \
                 or \"90s\", or \"never\""
            )
        };
        match v {
            Value::Number(n) => n.as_u64().map(Retention::Secs).ok_or_else(bad),
            Value::String(s) if s == "never" => Ok(Retention::Never),
            Value::String(s) => {
                let (digits, unit) = match s.char_indices().last() {
                    Some((i, c)) if c.is_ascii_alphabetic() => (&s[..i], c),
                    _ => (s.as_str(), 's'),
                };
                let scale = match unit {
                    's' => 1,
                    'm' => 60,
                    'h' => 3600,
                    'd' => 86_400,
                    _ => return Err(bad()),
                };
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                digits
                    .parse::<u64>()
                    .ok()
                    .and_then(|n| n.checked_mul(scale))
                    .map(Retention::Secs)
                    .ok_or_else(bad)
            }
            _ => Err(bad()),
        }
    }
}

impl Default for Retention {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl Serialize for Retention {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Retention::Never => s.serialize_str("never"),
            Retention::Secs(n) if *n > 0 && n % 86_400 == 0 => {
                s.serialize_str(&format!("{}d", n / 86_400))
            }
            Retention::Secs(n) => s.serialize_u64(*n),
        }
    }
}

impl<'de> Deserialize<'de> for Retention {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Retention::parse(&v).map_err(serde::de::Error::custom)
    }
}

fn default_claude_path() -> String {
    "claude".into()
}

fn is_default_claude_path(s: &String) -> bool {
    s == "claude"
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Project {
    pub id: String,
    #[serde(default)]
    pub name: String,
    pub path: String,
    /// `[]` none, `["*"]` all.
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
    pub claude_token_file: Option<String>,
    /// A label for the account this project's token belongs to (`"work"`), shown
    /// beside the token's fingerprint in every list; never checked against the token.
    #[serde(
        default,
        deserialize_with = "present_string",
        skip_serializing_if = "Option::is_none"
    )]
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

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Template {
    pub id: String,
    #[serde(default)]
    pub name: String,
    pub command: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Names of relay's environment this template's sandboxed launches inherit too,
    /// added to the top-level `env_passthrough`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_passthrough: Vec<String>,
    /// Absent means sandboxed; only `false` opts out.
    #[serde(default = "default_true", skip_serializing_if = "is_true")]
    pub sandbox: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_write: Vec<String>,
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
    /// What this template's Seatbelt sandboxes may reach that every other one is
    /// refused: the keychain, the clipboard, Apple Events to named apps, named Mach
    /// services (docs/settings.md#macos). Ignored by bubblewrap.
    #[serde(default, skip_serializing_if = "MacOptIns::is_empty")]
    pub macos: MacOptIns,
}

/// A template's network (docs/settings.md#network).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
            network: None,
            egress: vec![],
            listen_ports: vec![],
            macos: MacOptIns::default(),
        }
    }
}

/// A `--model` value relay passes on: a model name or alias, 1-128 characters of
/// letters, digits and `._:/@[]-`, not starting with `-` (it must not read as a flag).
pub fn valid_model(m: &str) -> bool {
    (1..=128).contains(&m.len())
        && !m.starts_with('-')
        && m.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:/@[]-".contains(&b))
}

/// A `--permission-mode` value relay passes on: one word of 1-32 ASCII letters.
/// Claude Code itself checks it against its own list (2.1.332: `acceptEdits`, `auto`,
/// `bypassPermissions`, `manual`, `dontAsk`, `plan`).
pub fn valid_permission_mode(m: &str) -> bool {
    (1..=32).contains(&m.len()) && m.bytes().all(|b| b.is_ascii_alphabetic())
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendChoice {
    #[default]
    Auto,
    Seatbelt,
    Bwrap,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSandbox {
    /// Loopback ports no sandboxed session may connect to (relay's API port is added).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied_loopback_ports: Vec<u16>,
    #[serde(default, skip_serializing_if = "is_auto")]
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
}

fn is_auto(b: &BackendChoice) -> bool {
    *b == BackendChoice::Auto
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Api {
    /// Loopback TCP address for HTTP clients (`127.0.0.1:PORT`); empty: unix socket only.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub listen: String,
}

/// A settings file that cannot be used: the file, the line and column of the value at
/// fault, its key path, and the problem (`…/settings.json:4:28:
/// projects[0].allowed_templates: expected a list of template ids, got "*"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsError {
    pub path: PathBuf,
    /// Line and column, from 1; `None` when the file could not be read at all.
    pub at: Option<(usize, usize)>,
    /// Where in the document (`terminal_templates[2] ("build")`); empty for the whole file.
    pub key: String,
    pub problem: String,
}

impl std::fmt::Display for SettingsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some((line, col)) = self.at {
            write!(f, ":{line}:{col}")?;
        }
        if !self.key.is_empty() {
            write!(f, ": {}", self.key)?;
        }
        write!(f, ": {}", self.problem)
    }
}

pub struct Loaded {
    pub settings: Settings,
    /// Unknown keys; reported, not fatal.
    pub unknown_keys: Vec<UnknownKey>,
}

/// A key relay does not know, where it is and the known key it is closest to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownKey {
    /// Its path, `projects[0].allowed_template`.
    pub key: String,
    pub at: Option<(usize, usize)>,
    /// The known key of that object it most resembles (`allowed_templates`).
    pub closest: Option<&'static str>,
}

impl std::fmt::Display for UnknownKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.key)?;
        if let Some((line, col)) = self.at {
            write!(f, " at line {line} column {col}")?;
        }
        if let Some(c) = self.closest {
            write!(f, " (did you mean {c}?)")?;
        }
        Ok(())
    }
}

/// `unknown keys: a at line 1 column 2 (did you mean b?), c at …`, for `relay status`,
/// `relay serve`'s start and a refused launch.
pub fn describe_unknown(keys: &[UnknownKey]) -> String {
    let list: Vec<String> = keys.iter().map(ToString::to_string).collect();
    format!("unknown keys: {}", list.join(", "))
}

/// The known key closest to `k`: a small edit distance, as for a typo or a missing `s`.
fn closest(k: &str, known: &[&'static str]) -> Option<&'static str> {
    known
        .iter()
        .map(|c| (edit_distance(k, c), *c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

const TOP_KEYS: &[&str] = &[
    "claude_token_file",
    "projects",
    "terminal_templates",
    "session_sandbox",
    "api",
    "claude_path",
    "claude_token_on_change",
    "retain_ended",
    "detach_keys",
    "env_passthrough",
];
const PROJECT_KEYS: &[&str] = &[
    "id",
    "name",
    "path",
    "allowed_templates",
    "allow_home_directory",
    "claude_token_file",
    "account",
];
const TEMPLATE_KEYS: &[&str] = &[
    "id",
    "name",
    "command",
    "args",
    "env",
    "env_passthrough",
    "sandbox",
    "read",
    "read_write",
    "deny",
    "model",
    "permission_mode",
    "allow_home_directory",
    "writable_exceptions",
    "network",
    "egress",
    "listen_ports",
    "macos",
];
const MACOS_KEYS: &[&str] = &["keychain", "clipboard", "automation", "mach"];
const SANDBOX_KEYS: &[&str] = &[
    "denied_loopback_ports",
    "backend",
    "seatbelt_launcher",
    "bwrap_launcher",
    "network_off",
    "egress",
];
const API_KEYS: &[&str] = &["listen"];

type Found = (KeyPath, &'static [&'static str]);

fn unknown_in(v: &Value, known: &'static [&'static str], at: KeyPath, out: &mut Vec<Found>) {
    if let Some(obj) = v.as_object() {
        for k in obj.keys() {
            if !known.contains(&k.as_str()) {
                out.push((at.clone().key(k), known));
            }
        }
    }
}

/// The keys of `v` no settings object has, each with where it is in `text`.
pub fn unknown_keys(v: &Value, text: &[u8]) -> Vec<UnknownKey> {
    let mut out = Vec::new();
    let top = KeyPath::default();
    unknown_in(v, TOP_KEYS, top.clone(), &mut out);
    for (list, known) in [
        ("projects", PROJECT_KEYS),
        ("terminal_templates", TEMPLATE_KEYS),
    ] {
        if let Some(items) = v.get(list).and_then(Value::as_array) {
            for (i, item) in items.iter().enumerate() {
                let at = top.clone().key(list).index(i);
                unknown_in(item, known, at.clone(), &mut out);
                if list == "terminal_templates" {
                    if let Some(macos) = item.get("macos") {
                        unknown_in(macos, MACOS_KEYS, at.key("macos"), &mut out);
                    }
                }
            }
        }
    }
    for (key, known) in [("session_sandbox", SANDBOX_KEYS), ("api", API_KEYS)] {
        if let Some(obj) = v.get(key) {
            unknown_in(obj, known, top.clone().key(key), &mut out);
        }
    }
    out.into_iter()
        .map(|(path, known)| UnknownKey {
            key: path.to_string(),
            at: jsonpath::locate(text, &path),
            closest: path.last_key().and_then(|k| closest(k, known)),
        })
        .collect()
}

/// A problem at a key path of the document.
struct Invalid {
    at: KeyPath,
    problem: String,
}

fn invalid(at: KeyPath, problem: impl Into<String>) -> Invalid {
    Invalid {
        at,
        problem: problem.into(),
    }
}

/// The error for `problem` at `at`: the line and column of it in `text`, and its path
/// as a person reads it, a project or template named by its id when the path ends at it.
fn located(path: &Path, text: &[u8], value: &Value, bad: Invalid) -> SettingsError {
    let mut key = bad.at.to_string();
    if let [jsonpath::Seg::Key(list), jsonpath::Seg::Index(i)] = bad.at.0.as_slice() {
        if let Some(id) = value
            .get(list)
            .and_then(|l| l.get(*i))
            .and_then(|item| item.get("id"))
            .and_then(Value::as_str)
        {
            key.push_str(&format!(" ({id:?})"));
        }
    }
    SettingsError {
        path: path.to_path_buf(),
        at: jsonpath::locate(text, &bad.at),
        key,
        problem: bad.problem,
    }
}

/// serde's message for a value of the wrong shape, as the person who wrote the file
/// reads it: `expected a list of template ids, got "*"`, `missing "command"`.
fn humane(at: &KeyPath, msg: &str) -> String {
    if let Some(field) = msg
        .strip_prefix("missing field `")
        .and_then(|r| r.strip_suffix('`'))
    {
        return format!("missing {field:?}");
    }
    if let Some(rest) = msg.strip_prefix("unknown variant `") {
        if let Some((got, expected)) = rest.split_once("`, expected ") {
            let expected = expected.replace("one of ", "").replace('`', "\"");
            return format!("expected {expected}, got {got:?}");
        }
    }
    let shape = msg
        .strip_prefix("invalid type: ")
        .or_else(|| msg.strip_prefix("invalid value: "));
    if let Some((got, expected)) = shape.and_then(|r| r.split_once(", expected ")) {
        let field = match at.0.last() {
            Some(jsonpath::Seg::Key(k)) => Some(k.as_str()),
            _ => None,
        };
        return format!("expected {}, got {}", wanted(field, expected), seen(got));
    }
    // relay's own checks (retain_ended, detach_keys) already say what was expected,
    // after the key the path names.
    let own = at
        .last_key()
        .and_then(|k| msg.strip_prefix(k))
        .map(str::trim_start);
    own.unwrap_or(msg).to_string()
}

/// What a key holds, in words.
fn wanted(field: Option<&str>, serde_says: &str) -> String {
    let by_key = match field {
        Some("allowed_templates") => "a list of template ids",
        Some("projects") => "a list of projects",
        Some("terminal_templates") => "a list of templates",
        Some("args") => "a list of strings",
        Some("read" | "read_write" | "deny") => "a list of paths",
        Some("env_passthrough") => "a list of variable names",
        Some("writable_exceptions") => "a list of paths or names",
        Some("automation") => "a list of bundle ids",
        Some("mach") => "a list of Mach service names",
        Some("denied_loopback_ports" | "listen_ports") => "a list of port numbers",
        Some("env") => "an object of names and string values",
        Some("claude_token_on_change") => "\"stop\" or \"keep\"",
        Some("backend") => "\"auto\", \"seatbelt\" or \"bwrap\"",
        _ => "",
    };
    if !by_key.is_empty() {
        return by_key.to_string();
    }
    match serde_says {
        "a sequence" => "a list".into(),
        "a boolean" => "true or false".into(),
        "u16" => "a port number (0 to 65535)".into(),
        "a map" => "an object".into(),
        s if s.starts_with("struct ") => "an object".into(),
        s => s.to_string(),
    }
}

/// A value serde saw, as it was written.
fn seen(serde_says: &str) -> String {
    match serde_says {
        "sequence" => "a list".into(),
        "map" => "an object".into(),
        s => {
            for word in ["boolean ", "integer ", "floating point ", "string "] {
                if let Some(v) = s.strip_prefix(word) {
                    return v.trim_matches('`').to_string();
                }
            }
            s.to_string()
        }
    }
}

pub fn parse(path: &Path, bytes: &[u8]) -> Result<Loaded, SettingsError> {
    let whole = |at: Option<(usize, usize)>, problem: String| SettingsError {
        path: path.to_path_buf(),
        at,
        key: String::new(),
        problem,
    };
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        // serde_json's message ends with where; the place is said first instead.
        let text = e.to_string();
        let what = text.split(" at line ").next().unwrap_or(&text);
        // serde_json says column 0 at the end of an empty line (an empty file): the
        // first column is 1 here.
        whole(
            Some((e.line(), e.column().max(1))),
            format!("not valid JSON: {what}"),
        )
    })?;
    if !value.is_object() {
        return Err(whole(
            Some((1, 1)),
            "the top level must be a JSON object".into(),
        ));
    }
    let unknown = unknown_keys(&value, bytes);
    let settings: Settings = serde_path_to_error::deserialize(&value).map_err(|e| {
        let at = KeyPath(
            e.path()
                .iter()
                .filter_map(|s| match s {
                    serde_path_to_error::Segment::Seq { index } => {
                        Some(jsonpath::Seg::Index(*index))
                    }
                    serde_path_to_error::Segment::Map { key } => {
                        Some(jsonpath::Seg::Key(key.clone()))
                    }
                    _ => None,
                })
                .collect(),
        );
        let problem = humane(&at, &e.inner().to_string());
        located(path, bytes, &value, invalid(at, problem))
    })?;
    validate(&settings).map_err(|bad| located(path, bytes, &value, bad))?;
    Ok(Loaded {
        settings,
        unknown_keys: unknown,
    })
}

/// An `egress` list: every entry a host, a `*.domain`, an address with its port or a
/// preset (docs/settings.md#network).
fn check_egress(list: &[String], at: KeyPath) -> Result<(), Invalid> {
    for (i, e) in list.iter().enumerate() {
        crate::sandbox::egress_rules::Rules::parse(std::slice::from_ref(e))
            .map_err(|why| invalid(at.clone().index(i), why))?;
    }
    Ok(())
}

/// An `env_passthrough` list: every entry a name without `=` or NUL, or a non-empty
/// prefix and one `*` as its last character (`crate::host::env::valid_pattern`).
fn check_passthrough(list: &[String], at: KeyPath) -> Result<(), Invalid> {
    match list
        .iter()
        .position(|p| !crate::host::env::valid_pattern(p))
    {
        None => Ok(()),
        Some(i) => Err(invalid(
            at.index(i),
            format!(
                "{:?} is not a variable name or a prefix ending in * (such as AWS_*)",
                list[i]
            ),
        )),
    }
}

fn validate(s: &Settings) -> Result<(), Invalid> {
    let top = KeyPath::default();
    check_passthrough(&s.env_passthrough, top.clone().key("env_passthrough"))?;
    check_egress(
        &s.session_sandbox.egress,
        top.clone().key("session_sandbox").key("egress"),
    )?;
    let mut ids = std::collections::HashMap::new();
    for (i, p) in s.projects.iter().enumerate() {
        let at = top.clone().key("projects").index(i);
        if p.id.is_empty() {
            return Err(invalid(at.key("id"), "empty: a project needs an id"));
        }
        if let Some(first) = ids.insert(&p.id, i) {
            return Err(invalid(
                at.key("id"),
                format!("{:?} is projects[{first}]'s id too", p.id),
            ));
        }
        if !(p.path.starts_with('/') || p.path == "~" || p.path.starts_with("~/")) {
            return Err(invalid(
                at.key("path"),
                format!("{:?} must be absolute or start with ~/", p.path),
            ));
        }
    }
    let mut ids = std::collections::HashMap::new();
    for (i, t) in s.terminal_templates.iter().enumerate() {
        validate_template(t, i, &mut ids)?;
        check_listen_ports(t, i, &s.session_sandbox)?;
    }
    if !s.api.listen.is_empty() {
        let at = || top.clone().key("api").key("listen");
        let addr: std::net::SocketAddr = s.api.listen.parse().map_err(|_| {
            invalid(
                at(),
                format!("{:?} is not an address like 127.0.0.1:4850", s.api.listen),
            )
        })?;
        if !addr.ip().is_loopback() {
            return Err(invalid(
                at(),
                format!("{:?} must be a loopback address", s.api.listen),
            ));
        }
    }
    Ok(())
}

/// A template's `listen_ports`: none the forwarder of its proxied sandbox listens on
/// (its proxy port, each loopback address its egress list bridges), nor the port of a
/// loopback address its routing URLs name: a tool listening there would get Claude's
/// requests, bearer and all (docs/THREAT-MODEL.md#claudes-tools-cannot-reach-claude).
fn check_listen_ports(t: &Template, i: usize, sandbox: &SessionSandbox) -> Result<(), Invalid> {
    if t.listen_ports.is_empty() {
        return Ok(());
    }
    use crate::sandbox::egress_rules::{held_ports, routing_entries, Rules};
    let proxied = !sandbox.network_off && matches!(t.network, None | Some(NetworkMode::Proxied));
    let mut list = routing_entries(&t.env);
    if proxied {
        list.extend(sandbox.egress.iter().cloned());
        list.extend(t.egress.iter().cloned());
    }
    // Each entry was checked on its own above.
    let rules = Rules::parse(&list).unwrap_or_default();
    let bridges = rules.bridges();
    let mut held: Vec<u16> = bridges.iter().map(|b| b.port()).collect();
    if proxied {
        held = held_ports(&rules);
    }
    let Some(x) = t.listen_ports.iter().position(|p| held.contains(p)) else {
        return Ok(());
    };
    let port = t.listen_ports[x];
    let why = match bridges.iter().find(|b| b.port() == port) {
        Some(b) if proxied => format!("the sandbox's forwarder listens on it for {b}"),
        Some(b) => format!("the template's routing URL sends Claude's requests to {b}"),
        None => "the sandbox's forwarder listens on it, the egress proxy's port".to_string(),
    };
    Err(invalid(
        KeyPath::default()
            .key("terminal_templates")
            .index(i)
            .key("listen_ports")
            .index(x),
        format!(
            "{port}: {why}, where Claude's traffic goes; a tool listening there would \
             take it (and the token with it)"
        ),
    ))
}

/// A name macOS gives an app or a Mach service, as relay takes it in `macos`: 1-255
/// ASCII letters, digits and `.-_`, with a dot, starting with a letter or digit
/// (`com.apple.Terminal`, `com.example.service`).
pub fn valid_mac_name(n: &str) -> bool {
    (1..=255).contains(&n.len())
        && n.contains('.')
        && n.starts_with(|c: char| c.is_ascii_alphanumeric())
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// A template's `macos` opt-ins: every `automation` entry a bundle id, every `mach`
/// entry a service name. A name the escape section closes is accepted and stays
/// closed (explain and doctor say so).
fn check_macos(m: &MacOptIns, at: KeyPath) -> Result<(), Invalid> {
    for (key, list, what) in [
        (
            "automation",
            &m.automation,
            "a bundle id (com.apple.Terminal)",
        ),
        ("mach", &m.mach, "a Mach service name (com.example.service)"),
    ] {
        if let Some(i) = list.iter().position(|n| !valid_mac_name(n)) {
            return Err(invalid(
                at.clone().key(key).index(i),
                format!("{:?} is not {what}", list[i]),
            ));
        }
    }
    Ok(())
}

fn validate_template<'a>(
    t: &'a Template,
    i: usize,
    ids: &mut std::collections::HashMap<&'a String, usize>,
) -> Result<(), Invalid> {
    let at = KeyPath::default().key("terminal_templates").index(i);
    if t.id.is_empty() {
        return Err(invalid(at.key("id"), "empty: a template needs an id"));
    }
    if let Some(first) = ids.insert(&t.id, i) {
        return Err(invalid(
            at.key("id"),
            format!("{:?} is terminal_templates[{first}]'s id too", t.id),
        ));
    }
    if t.command.is_empty() {
        return Err(invalid(
            at.key("command"),
            "empty: name the program the template runs",
        ));
    }
    if !t.model.is_empty() && !valid_model(&t.model) {
        return Err(invalid(
            at.key("model"),
            format!("{:?} is not a model name", t.model),
        ));
    }
    check_passthrough(&t.env_passthrough, at.clone().key("env_passthrough"))?;
    if let Some(x) = t
        .writable_exceptions
        .iter()
        .position(|x| !crate::sandbox::exec_list::valid_exception(x))
    {
        return Err(invalid(
            at.key("writable_exceptions").index(x),
            format!(
                "{:?} is neither a path (absolute or ~/…) nor one of {}",
                t.writable_exceptions[x],
                crate::sandbox::exec_list::root_names().join(", ")
            ),
        ));
    }
    check_egress(&t.egress, at.clone().key("egress"))?;
    check_macos(&t.macos, at.clone().key("macos"))?;
    if !t.permission_mode.is_empty() && !valid_permission_mode(&t.permission_mode) {
        return Err(invalid(
            at.key("permission_mode"),
            format!("{:?} is not one word of letters", t.permission_mode),
        ));
    }
    Ok(())
}

/// Reads and parses the file. A missing file is reported as such (the caller seeds it
/// on first run).
pub fn load(path: &Path) -> Result<Loaded, SettingsError> {
    let err = |problem: String| SettingsError {
        path: path.to_path_buf(),
        at: None,
        key: String::new(),
        problem,
    };
    let meta = std::fs::metadata(path).map_err(|e| err(format!("cannot read: {e}")))?;
    if meta.len() > SETTINGS_MAX_BYTES {
        return Err(err(format!("larger than {SETTINGS_MAX_BYTES} bytes")));
    }
    let bytes = std::fs::read(path).map_err(|e| err(format!("cannot read: {e}")))?;
    parse(path, &bytes)
}

/// The first-run settings: a `shell` and a `claude-code` template and a project for
/// the home folder that allows both.
pub fn seed() -> Settings {
    Settings {
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
        session_sandbox: SessionSandbox::default(),
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

/// The `claude_token_file` value a project's launches run on: the project's own when it
/// sets one (`""` meaning none), else the top-level one; with the key it came from, for
/// messages. A project id that names no project gets the top-level value.
pub fn project_token_value<'a>(s: &'a Settings, project_id: &str) -> (&'a str, String) {
    match s.projects.iter().position(|p| p.id == project_id) {
        Some(i) => match &s.projects[i].claude_token_file {
            Some(v) => (v.as_str(), format!("projects[{i}].claude_token_file")),
            None => (s.claude_token_file.as_str(), "claude_token_file".into()),
        },
        None => (s.claude_token_file.as_str(), "claude_token_file".into()),
    }
}

/// The token file a project's launches run on (`Ok(None)`: none), checked as
/// [`token_file_path`] checks it.
pub fn project_token_path(
    s: &Settings,
    project_id: &str,
    home: &Path,
) -> Result<Option<PathBuf>, String> {
    let (value, key) = project_token_value(s, project_id);
    token_file_path(value, home).map_err(|e| keyed(e, &key))
}

/// One configured token file and the projects whose launches run on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfiguredToken {
    pub path: PathBuf,
    /// Where it is set: `claude_token_file`, `projects[1].claude_token_file`, …
    pub keys: Vec<String>,
    /// The ids of the projects that run on it, in settings order.
    pub projects: Vec<String>,
}

/// Every token file the settings name (the top-level one even when every project sets
/// its own), each once, in settings order: what every sandboxed launch is denied. An
/// error names the first value that is not a path: no sandbox can be built that would
/// be sure to hide it.
pub fn configured_tokens(s: &Settings, home: &Path) -> Result<Vec<ConfiguredToken>, String> {
    match every_token(s, home) {
        (all, None) => Ok(all),
        (_, Some(e)) => Err(e),
    }
}

/// [`configured_tokens`] without giving up at a bad value: every file that is a path,
/// and the first error. The token watcher keeps watching those while the person fixes
/// the other (a launch is refused meanwhile).
pub fn every_token(s: &Settings, home: &Path) -> (Vec<ConfiguredToken>, Option<String>) {
    let mut out: Vec<ConfiguredToken> = Vec::new();
    let mut first_error = None;
    let mut add = |path: PathBuf, key: String, project: Option<&str>| {
        let i = match out.iter().position(|t| t.path == path) {
            Some(i) => i,
            None => {
                out.push(ConfiguredToken {
                    path,
                    keys: vec![],
                    projects: vec![],
                });
                out.len() - 1
            }
        };
        let t = &mut out[i];
        if !t.keys.contains(&key) {
            t.keys.push(key);
        }
        if let Some(p) = project {
            t.projects.push(p.to_string());
        }
    };
    match token_file_path(&s.claude_token_file, home) {
        Ok(Some(p)) => add(p, "claude_token_file".into(), None),
        Ok(None) => {}
        Err(e) => first_error = Some(e),
    }
    for p in &s.projects {
        match project_token_path(s, &p.id, home) {
            Ok(Some(path)) => {
                let (_, key) = project_token_value(s, &p.id);
                add(path, key, Some(&p.id));
            }
            Ok(None) => {}
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    (out, first_error)
}

/// `claude_token_file "x" must …` said of the key it came from.
fn keyed(message: String, key: &str) -> String {
    match message.strip_prefix("claude_token_file ") {
        Some(rest) if key != "claude_token_file" => format!("{key} {rest}"),
        _ => message,
    }
}

/// Checks the `claude_token_file` value: empty (unset), absolute or `~/`-prefixed.
pub fn token_file_path(value: &str, home: &Path) -> Result<Option<PathBuf>, String> {
    if value.is_empty() {
        return Ok(None);
    }
    if let Some(rest) = value.strip_prefix("~/") {
        if rest.trim_start_matches('/').is_empty() {
            return Err(format!(
                "claude_token_file {value:?} must name a file, absolute or starting with ~/"
            ));
        }
        return Ok(Some(crate::sandbox::resolve::expand_home(value, home)));
    }
    if value.starts_with('/') {
        return Ok(Some(PathBuf::from(value)));
    }
    Err(format!(
        "claude_token_file {value:?} must be an absolute path or start with ~/"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_file_parses_without_unknown_keys() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("settings.example.json");
        let loaded = load(&path).expect("settings.example.json parses");
        assert!(loaded.unknown_keys.is_empty(), "{:?}", loaded.unknown_keys);
        assert_eq!(
            loaded.settings.claude_token_file,
            "~/.config/claude-ltt/token"
        );
    }

    #[test]
    fn seed_round_trips_byte_identical_and_never_writes_an_unset_token_key() {
        let text = to_pretty(&seed());
        assert!(!text.contains("claude_token_file"), "{text}");
        let loaded = parse(Path::new("/x/settings.json"), text.as_bytes()).unwrap();
        assert_eq!(to_pretty(&loaded.settings), text);
        // A user's file without the key stays byte-identical when written back.
        let fixture = include_str!("testdata/settings-no-token.json");
        let loaded = parse(Path::new("/x/settings.json"), fixture.as_bytes()).unwrap();
        assert_eq!(to_pretty(&loaded.settings), fixture);
    }

    #[test]
    fn malformed_and_unknown_keys() {
        let p = Path::new("/cfg/settings.json");
        let e = parse(p, b"{\"projects\": [").err().unwrap();
        assert!(
            e.to_string()
                .starts_with("/cfg/settings.json:1:14: not valid JSON: "),
            "{e}"
        );
        let e = parse(p, br#"{"projects":[{"id":"a","path":"rel"}]}"#)
            .err()
            .unwrap();
        assert!(e.problem.contains("must be absolute"), "{e}");
        let l = parse(
            p,
            br#"{"colour":"red","api":{"listen":"127.0.0.1:0","tls":1}}"#,
        )
        .unwrap();
        let keys: Vec<&str> = l.unknown_keys.iter().map(|u| u.key.as_str()).collect();
        assert_eq!(keys, ["colour", "api.tls"]);
        let e = parse(p, br#"{"api":{"listen":"0.0.0.0:80"}}"#)
            .err()
            .unwrap();
        assert!(e.problem.contains("loopback"), "{e}");
    }

    /// Every error names the file, the line and column, and the key path, and says what
    /// was expected in words (issue 26 item 5).
    #[test]
    fn every_error_names_the_file_the_line_the_column_and_the_key() {
        let p = Path::new("/cfg/settings.json");
        let table: &[(&str, &str)] = &[
            (
                "",
                "/cfg/settings.json:1:1: not valid JSON: EOF while parsing a value",
            ),
            (
                "{\n  \"projects\": [\n    {\"id\": \"h\", \"path\": \"~\", \"allowed_templates\": \"*\"}\n  ]\n}",
                r#"/cfg/settings.json:3:51: projects[0].allowed_templates: expected a list of template ids, got "*""#,
            ),
            (
                r#"{"terminal_templates": [{"id": "a", "command": "x"}, {"id": "b", "command": "x"},
 {"id": "build", "args": []}]}"#,
                r#"/cfg/settings.json:2:2: terminal_templates[2] ("build"): missing "command""#,
            ),
            (
                r#"{"projects": [{"id": "h", "path": "relative"}]}"#,
                r#"/cfg/settings.json:1:35: projects[0].path: "relative" must be absolute or start with ~/"#,
            ),
            (
                r#"{"projects": [{"id": "h", "path": "~"}, {"id": "h", "path": "/p"}]}"#,
                r#"/cfg/settings.json:1:48: projects[1].id: "h" is projects[0]'s id too"#,
            ),
            (
                r#"{"terminal_templates": [{"id": "t", "command": "x", "args": ["a", 3]}]}"#,
                "/cfg/settings.json:1:67: terminal_templates[0].args[1]: expected a string, got 3",
            ),
            (
                r#"{"terminal_templates": [{"id": "t", "command": "x", "sandbox": "no"}]}"#,
                r#"/cfg/settings.json:1:64: terminal_templates[0].sandbox: expected true or false, got "no""#,
            ),
            (
                r#"{"session_sandbox": {"denied_loopback_ports": [80, 70000]}}"#,
                "/cfg/settings.json:1:52: session_sandbox.denied_loopback_ports[1]: expected a port number (0 to 65535), got 70000",
            ),
            (
                r#"{"claude_token_on_change": "restart"}"#,
                r#"/cfg/settings.json:1:28: claude_token_on_change: expected "stop" or "keep", got "restart""#,
            ),
            (
                r#"{"retain_ended": "7w"}"#,
                r#"/cfg/settings.json:1:18: retain_ended: "7w": expected seconds, a duration such as "7d", "12h", "30m" or "90s", or "never""#,
            ),
            (
                r#"{"env_passthrough": ["OK", "A=B"]}"#,
                r#"/cfg/settings.json:1:28: env_passthrough[1]: "A=B" is not a variable name or a prefix ending in * (such as AWS_*)"#,
            ),
            (
                r#"{"api": {"listen": "0.0.0.0:80"}}"#,
                r#"/cfg/settings.json:1:20: api.listen: "0.0.0.0:80" must be a loopback address"#,
            ),
            (
                r#"{"projects": {"id": "h"}}"#,
                "/cfg/settings.json:1:14: projects: expected a list of projects, got an object",
            ),
            ("[1]", "/cfg/settings.json:1:1: the top level must be a JSON object"),
            (
                "{\n  \"projects\": [,]\n}",
                "/cfg/settings.json:2:16: not valid JSON: expected value",
            ),
        ];
        let wrong: Vec<String> = table
            .iter()
            .filter_map(|(file, want)| {
                let got = parse(p, file.as_bytes()).err().unwrap().to_string();
                (got != *want).then(|| format!("{file}\n  got  {got}\n  want {want}"))
            })
            .collect();
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn an_unknown_key_names_where_it_is_and_the_key_it_resembles() {
        let p = Path::new("/cfg/settings.json");
        let file = "{\n  \"projects\": [{\"id\": \"h\", \"path\": \"~\",\n    \"allowed_template\": [\"*\"]}],\n  \"colour\": 1\n}";
        let l = parse(p, file.as_bytes()).unwrap();
        assert_eq!(
            describe_unknown(&l.unknown_keys),
            "unknown keys: colour at line 4 column 13, projects[0].allowed_template at line 3 \
             column 25 (did you mean allowed_templates?)"
        );
    }

    #[test]
    fn env_passthrough_entries_are_checked_and_merged_per_template() {
        let p = Path::new("/cfg/settings.json");
        let l = parse(
            p,
            br#"{"env_passthrough": ["GITHUB_TOKEN", "AWS_*"],
                 "terminal_templates": [{"id": "t", "command": "/bin/sh",
                                         "env_passthrough": ["AWS_*", "NPM_TOKEN"]}]}"#,
        )
        .unwrap();
        assert!(l.unknown_keys.is_empty(), "{:?}", l.unknown_keys);
        let t = l.settings.template("t").unwrap();
        assert_eq!(
            l.settings.env_passthrough_for(t),
            ["GITHUB_TOKEN", "AWS_*", "NPM_TOKEN"]
        );
        for bad in ["*", "A*B", "A=B", "", "**"] {
            let top = format!(r#"{{"env_passthrough": ["OK", {bad:?}]}}"#);
            let e = parse(p, top.as_bytes()).err().unwrap();
            assert_eq!(e.key, "env_passthrough[1]", "{e}");
            assert!(e.problem.starts_with(&format!("{bad:?} is not")), "{e}");
            let in_template = format!(
                r#"{{"terminal_templates": [{{"id": "t", "command": "/bin/sh", "env_passthrough": [{bad:?}]}}]}}"#
            );
            let e = parse(p, in_template.as_bytes()).err().unwrap();
            assert_eq!(e.key, "terminal_templates[0].env_passthrough[0]", "{e}");
            assert!(e.problem.starts_with(&format!("{bad:?} is not")), "{e}");
        }
        let e = parse(p, br#"{"env_passthrough": "GITHUB_TOKEN"}"#)
            .err()
            .unwrap();
        assert_eq!(
            e.to_string(),
            "/cfg/settings.json:1:21: env_passthrough: expected a list of variable names, \
             got \"GITHUB_TOKEN\""
        );
    }

    #[test]
    fn each_project_runs_on_its_own_token_file_or_the_top_level_one() {
        let home = Path::new("/home/ada");
        let text = br#"{"claude_token_file": "~/.config/relay/token",
            "projects": [
                {"id": "work", "path": "~/w", "claude_token_file": "~/.config/work/token",
                 "account": "work"},
                {"id": "home", "path": "~/h"},
                {"id": "none", "path": "~/n", "claude_token_file": ""},
                {"id": "also", "path": "~/a", "claude_token_file": "/home/ada/.config/work/token"}
            ]}"#;
        let s = parse(Path::new("/cfg/settings.json"), text)
            .unwrap()
            .settings;
        assert_eq!(s.projects[0].account.as_deref(), Some("work"));
        let path = |id: &str| project_token_path(&s, id, home).unwrap();
        assert_eq!(
            path("work"),
            Some(PathBuf::from("/home/ada/.config/work/token"))
        );
        assert_eq!(
            path("home"),
            Some(PathBuf::from("/home/ada/.config/relay/token"))
        );
        assert_eq!(path("none"), None);
        assert_eq!(
            path("unknown"),
            Some(PathBuf::from("/home/ada/.config/relay/token"))
        );
        let all = configured_tokens(&s, home).unwrap();
        let view: Vec<_> = all
            .iter()
            .map(|t| (t.path.to_str().unwrap(), t.keys.clone(), t.projects.clone()))
            .collect();
        assert_eq!(
            view,
            vec![
                (
                    "/home/ada/.config/relay/token",
                    vec!["claude_token_file".to_string()],
                    vec!["home".to_string()]
                ),
                (
                    "/home/ada/.config/work/token",
                    vec![
                        "projects[0].claude_token_file".to_string(),
                        "projects[3].claude_token_file".to_string()
                    ],
                    vec!["work".to_string(), "also".to_string()]
                ),
            ]
        );
        // Every project setting its own: the top-level file is still denied everywhere.
        let mut only = s.clone();
        only.projects.retain(|p| p.id != "home");
        let all = configured_tokens(&only, home).unwrap();
        assert_eq!(all[0].path, PathBuf::from("/home/ada/.config/relay/token"));
        assert!(all[0].projects.is_empty());
        // `null` is no value: refused, never read as "the top-level one".
        let null = br#"{"projects": [{"id": "w", "path": "~/w", "claude_token_file": null}]}"#;
        let e = parse(Path::new("/cfg/settings.json"), null).err().unwrap();
        assert!(e.to_string().contains("claude_token_file"), "{e}");
        // A bad project value is named by its key, and fails the whole list; the watcher
        // still gets every other file.
        let mut bad = s.clone();
        bad.projects[1].claude_token_file = Some("relative".into());
        let e = configured_tokens(&bad, home).unwrap_err();
        assert!(
            e.starts_with("projects[1].claude_token_file \"relative\""),
            "{e}"
        );
        assert_eq!(project_token_path(&bad, "home", home).unwrap_err(), e);
        let (watched, first) = every_token(&bad, home);
        assert_eq!(first, Some(e.clone()));
        assert_eq!(watched.len(), 2, "{watched:?}");
        assert!(project_token_path(&bad, "work", home).is_ok());
    }

    #[test]
    fn token_setting_values() {
        let home = Path::new("/home/ada");
        assert_eq!(token_file_path("", home), Ok(None));
        assert_eq!(
            token_file_path("~/.config/t", home),
            Ok(Some(PathBuf::from("/home/ada/.config/t")))
        );
        assert_eq!(
            token_file_path("/etc/t", home),
            Ok(Some(PathBuf::from("/etc/t")))
        );
        for bad in ["token", "./t", "~", "~/", "~bob/t"] {
            let e = token_file_path(bad, home).unwrap_err();
            assert!(e.contains("claude_token_file") && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn token_change_and_retention_values() {
        let p = Path::new("/cfg/settings.json");
        let l = parse(p, b"{}").unwrap();
        assert_eq!(l.settings.claude_token_on_change, OnTokenChange::Stop);
        assert_eq!(l.settings.retain_ended, Retention::Secs(7 * 86_400));
        let l = parse(
            p,
            br#"{"claude_token_on_change":"keep","retain_ended":"12h"}"#,
        )
        .unwrap();
        assert_eq!(l.settings.claude_token_on_change, OnTokenChange::Keep);
        assert_eq!(l.settings.retain_ended, Retention::Secs(12 * 3600));
        for (text, want) in [
            ("90", Retention::Secs(90)),
            ("\"90s\"", Retention::Secs(90)),
            ("\"30m\"", Retention::Secs(1800)),
            ("\"2d\"", Retention::Secs(2 * 86_400)),
            ("\"45\"", Retention::Secs(45)),
            ("0", Retention::Secs(0)),
            ("\"never\"", Retention::Never),
        ] {
            let body = format!(r#"{{"retain_ended":{text}}}"#);
            assert_eq!(
                parse(p, body.as_bytes()).unwrap().settings.retain_ended,
                want,
                "{text}"
            );
        }
        for bad in ["\"7w\"", "\"d\"", "\"-1d\"", "-5", "1.5", "true", "\"\""] {
            let body = format!(r#"{{"retain_ended":{bad}}}"#);
            let e = parse(p, body.as_bytes()).err().unwrap();
            assert_eq!(e.key, "retain_ended", "{bad}: {e}");
        }
        let e = parse(p, br#"{"claude_token_on_change":"restart"}"#)
            .err()
            .unwrap();
        assert_eq!(e.key, "claude_token_on_change", "{e}");
        // Written back: the default is left out, another value is spelled in days or seconds.
        let mut s = seed();
        assert!(!to_pretty(&s).contains("retain_ended"));
        s.retain_ended = Retention::Secs(3 * 86_400);
        assert!(to_pretty(&s).contains(r#""retain_ended": "3d""#));
    }

    #[test]
    fn detach_keys_values() {
        let p = Path::new("/cfg/settings.json");
        let l = parse(p, b"{}").unwrap();
        assert_eq!(l.settings.detach_keys.bytes(), b"\x1c\x1c");
        assert_eq!(l.settings.detach_keys.describe(), "Ctrl-\\ Ctrl-\\");
        for (text, want) in [
            ("ctrl-a,d", b"\x01d".to_vec()),
            ("CTRL-P,Ctrl-q", b"\x10\x11".to_vec()),
            (
                "ctrl-@,ctrl-[,ctrl-],ctrl-^,ctrl-_",
                b"\x00\x1b\x1d\x1e\x1f".to_vec(),
            ),
            ("none", Vec::new()),
            ("q", b"q".to_vec()),
        ] {
            let body = serde_json::to_vec(&serde_json::json!({ "detach_keys": text })).unwrap();
            let keys = parse(p, &body).unwrap().settings.detach_keys;
            assert_eq!(keys.bytes(), want.as_slice(), "{text}");
            // Written back, it reads the same.
            let again = serde_json::to_string(&keys).unwrap();
            assert_eq!(serde_json::from_str::<DetachKeys>(&again).unwrap(), keys);
        }
        for bad in [
            r#""""#,
            r#""ctrl-1""#,
            r#""ctrl-""#,
            r#""a,,b""#,
            r#""ab""#,
            r#""a,b,c,d,e,f,g,h,i""#,
            "3",
        ] {
            let body = format!(r#"{{"detach_keys":{bad}}}"#);
            let e = parse(p, body.as_bytes()).err().unwrap();
            assert_eq!(e.key, "detach_keys", "{bad}: {e}");
        }
        // The default is left out when written.
        assert!(!to_pretty(&seed()).contains("detach_keys"));
    }

    #[test]
    fn sandbox_false_is_the_only_opt_out() {
        let p = Path::new("/cfg/settings.json");
        let l = parse(p, br#"{"terminal_templates":[{"id":"a","command":"x"},{"id":"b","command":"x","sandbox":false}]}"#).unwrap();
        assert!(l.settings.terminal_templates[0].sandbox);
        assert!(!l.settings.terminal_templates[1].sandbox);
    }

    #[test]
    fn model_and_permission_mode_are_checked_in_the_file() {
        let p = Path::new("/cfg/settings.json");
        let l = parse(p, br#"{"terminal_templates":[{"id":"claude-code","command":"claude","model":"claude-opus-4-1[1m]","permission_mode":"acceptEdits"}]}"#).unwrap();
        assert_eq!(
            l.settings.terminal_templates[0].model,
            "claude-opus-4-1[1m]"
        );
        assert!(l.unknown_keys.is_empty());
        for bad in [
            br#"{"terminal_templates":[{"id":"c","command":"x","model":"--dangerously-skip-permissions"}]}"#.as_slice(),
            br#"{"terminal_templates":[{"id":"c","command":"x","model":"a b"}]}"#,
            br#"{"terminal_templates":[{"id":"c","command":"x","permission_mode":"plan --x"}]}"#,
        ] {
            let e = parse(p, bad).err().unwrap();
            assert!(e.key.starts_with("terminal_templates[0]."), "{e}");
        }
        assert!(valid_permission_mode("bypassPermissions"));
        assert!(!valid_permission_mode(""));
        assert!(valid_model("sonnet") && !valid_model("") && !valid_model("-m"));
    }

    /// `listen_ports`: read as port numbers; refused, naming the entry and why, when one
    /// is a port the template's forwarder or gateway holds (docs/settings.md#terminal_templates).
    #[test]
    fn listen_ports_never_name_a_port_claudes_traffic_goes_to() {
        let p = Path::new("/cfg/settings.json");
        let file = |template: &str, sandbox: &str| {
            format!(
                r#"{{"session_sandbox": {{{sandbox}}}, "terminal_templates": [{{"id": "a", "command": "x"}}, {template}]}}"#
            )
        };
        let ok = |template: &str, sandbox: &str| -> Vec<u16> {
            let l = parse(p, file(template, sandbox).as_bytes()).unwrap();
            assert!(l.unknown_keys.is_empty(), "{:?}", l.unknown_keys);
            l.settings.terminal_templates[1].listen_ports.clone()
        };
        let refused = |template: &str, sandbox: &str| -> (String, String) {
            let e = parse(p, file(template, sandbox).as_bytes()).err().unwrap();
            (e.key, e.problem)
        };
        let gateway = r#""env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:4000/v1"}"#;
        assert_eq!(
            ok(
                &format!(
                    r#"{{"id": "b", "command": "x", {gateway}, "listen_ports": [3000, 0, 5173]}}"#
                ),
                ""
            ),
            vec![3000, 0, 5173]
        );
        assert!(Template::new("t", "t", "x").listen_ports.is_empty());
        let want = |x: usize, port: u16, why: &str| {
            (
                format!("terminal_templates[1].listen_ports[{x}]"),
                format!(
                    "{port}: {why}, where Claude's traffic goes; a tool listening there would \
                     take it (and the token with it)"
                ),
            )
        };
        for (template, sandbox, x, port, why) in [
            // The proxy port, whichever the forwarder takes.
            (r#"{"id": "b", "command": "x", "listen_ports": [3000, 3128]}"#.to_string(), "", 1, 3128,
             "the sandbox's forwarder listens on it, the egress proxy's port".to_string()),
            (r#"{"id": "b", "command": "x", "egress": ["127.0.0.1:3128"], "listen_ports": [3129]}"#.to_string(),
             "", 0, 3129, "the sandbox's forwarder listens on it, the egress proxy's port".to_string()),
            // A bridge: the template's, the settings', its routing URL's.
            (r#"{"id": "b", "command": "x", "egress": ["127.0.0.1:5432"], "listen_ports": [5432]}"#.to_string(),
             "", 0, 5432, "the sandbox's forwarder listens on it for 127.0.0.1:5432".to_string()),
            (r#"{"id": "b", "command": "x", "network": "proxied", "listen_ports": [6379]}"#.to_string(),
             r#""egress": ["[::1]:6379"]"#, 0, 6379, "the sandbox's forwarder listens on it for [::1]:6379".to_string()),
            (format!(r#"{{"id": "b", "command": "x", {gateway}, "listen_ports": [4000]}}"#),
             "", 0, 4000, "the sandbox's forwarder listens on it for 127.0.0.1:4000".to_string()),
            // On the host's network the gateway's port is Claude's all the same.
            (format!(r#"{{"id": "b", "command": "x", "network": "host", {gateway}, "listen_ports": [4000]}}"#),
             "", 0, 4000, "the template's routing URL sends Claude's requests to 127.0.0.1:4000".to_string()),
            (format!(r#"{{"id": "b", "command": "x", {gateway}, "listen_ports": [4000]}}"#),
             r#""network_off": true"#, 0, 4000, "the template's routing URL sends Claude's requests to 127.0.0.1:4000".to_string()),
        ] {
            assert_eq!(refused(&template, sandbox), want(x, port, &why), "{template}");
        }
        // Without a forwarder (the host's network, or none), its ports are free to take,
        // and a bridge of another template is not this one's.
        for (template, sandbox) in [
            (
                r#"{"id": "b", "command": "x", "network": "host", "egress": ["127.0.0.1:5432"], "listen_ports": [3128, 5432]}"#,
                "",
            ),
            (
                r#"{"id": "b", "command": "x", "network": "none", "listen_ports": [3128]}"#,
                "",
            ),
            (
                r#"{"id": "b", "command": "x", "listen_ports": [3128]}"#,
                r#""network_off": true"#,
            ),
        ] {
            assert!(!ok(template, sandbox).is_empty(), "{template}");
        }
        let other = r#"{"terminal_templates": [{"id": "a", "command": "x", "egress": ["127.0.0.1:5432"]},
            {"id": "b", "command": "x", "listen_ports": [5432]}]}"#;
        assert!(parse(p, other.as_bytes()).is_ok());
        // Not a port number: serde's refusal, in words.
        let e = refused(
            r#"{"id": "b", "command": "x", "listen_ports": [80, 70000]}"#,
            "",
        );
        assert_eq!(
            e,
            (
                "terminal_templates[1].listen_ports[1]".to_string(),
                "expected a port number (0 to 65535), got 70000".to_string()
            )
        );
    }

    #[test]
    fn macos_opt_ins_are_read_checked_per_entry_and_absent_from_the_seed() {
        let p = Path::new("/cfg/settings.json");
        let l = parse(
            p,
            br#"{"terminal_templates": [{"id": "t", "command": "/bin/sh", "macos":
                  {"keychain": true, "clipboard": true, "automation": ["com.apple.Terminal"],
                   "mach": ["com.example.service", "com.apple.coreservices.launchservicesd"],
                   "keychian": true}}]}"#,
        )
        .unwrap();
        let m = &l.settings.template("t").unwrap().macos;
        assert!(m.keychain && m.clipboard);
        assert_eq!(m.automation, ["com.apple.Terminal"]);
        // An escape's name is taken; it stays closed (the renderer, explain, doctor).
        assert_eq!(m.mach[1], "com.apple.coreservices.launchservicesd");
        assert_eq!(
            describe_unknown(&l.unknown_keys).split(" at ").next(),
            Some("unknown keys: terminal_templates[0].macos.keychian")
        );
        // Written back as read; a template without opt-ins writes no `macos`.
        let text = to_pretty(&l.settings);
        let again = parse(p, text.as_bytes()).unwrap();
        assert_eq!(
            again.settings.terminal_templates,
            l.settings.terminal_templates
        );
        let seed = seed();
        assert!(seed.terminal_templates.iter().all(|t| t.macos.is_empty()));
        assert!(!to_pretty(&seed).contains("macos"));
        for (macos, key, problem) in [
            (
                r#"{"automation": ["com.apple.Terminal", "Terminal"]}"#,
                "terminal_templates[0].macos.automation[1]",
                "\"Terminal\" is not a bundle id",
            ),
            (
                r#"{"mach": ["com.example.a\")) (allow default"]}"#,
                "terminal_templates[0].macos.mach[0]",
                "is not a Mach service name",
            ),
            (
                r#"{"keychain": "yes"}"#,
                "terminal_templates[0].macos.keychain",
                "expected true or false",
            ),
            (
                r#"{"mach": "com.example.a"}"#,
                "terminal_templates[0].macos.mach",
                "expected a list of Mach service names",
            ),
        ] {
            let file = format!(
                r#"{{"terminal_templates": [{{"id": "t", "command": "/bin/sh", "macos": {macos}}}]}}"#
            );
            let e = parse(p, file.as_bytes()).err().unwrap();
            assert!(e.key.starts_with(key), "{e}");
            assert!(e.problem.contains(problem), "{e}");
        }
        assert!(valid_mac_name("com.apple.Terminal") && valid_mac_name("org.python-3.x_y"));
        assert!(!valid_mac_name("") && !valid_mac_name(".com.a") && !valid_mac_name("a b.c"));
    }
}

/// Property tests (docs/testing.md#fuzzing): `cargo test -p relay --lib settings::fuzz`.
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    /// A key: one `settings.json` knows, or any other.
    fn key() -> impl Strategy<Value = String> {
        let known: Vec<&'static str> = TOP_KEYS
            .iter()
            .chain(PROJECT_KEYS)
            .chain(TEMPLATE_KEYS)
            .chain(SANDBOX_KEYS)
            .chain(API_KEYS)
            .copied()
            .collect();
        prop_oneof![
            3 => prop::sample::select(known).prop_map(String::from),
            1 => any::<String>(),
        ]
    }

    /// Any JSON value, its objects keyed mostly with real settings keys, so the
    /// generated files reach past the first type check.
    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            prop::sample::select(vec![
                "~",
                "~/p",
                "/abs",
                "",
                "*",
                "claude-code",
                "127.0.0.1:0",
                "bwrap",
                "auto"
            ])
            .prop_map(Value::from),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map(key(), inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Any bytes: settings or a problem that names the file, never a panic.
        #[test]
        fn any_bytes_are_read_or_refused_naming_the_file(
            bytes in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            if let Err(e) = parse(Path::new("/c/settings.json"), &bytes) {
                prop_assert!(e.to_string().starts_with("/c/settings.json:"));
            }
        }

        /// Any JSON: read or refused; what is read writes out as a file that reads back
        /// the same (the Settings page and the first-run seed write settings this way).
        #[test]
        fn any_json_is_read_or_refused_and_what_is_read_round_trips(v in json()) {
            let bytes = serde_json::to_vec(&v).unwrap();
            if let Ok(loaded) = parse(Path::new("/c/settings.json"), &bytes) {
                let text = to_pretty(&loaded.settings);
                let again = parse(Path::new("/c/settings.json"), text.as_bytes())
                    .expect("written settings read back");
                prop_assert_eq!(&again.settings, &loaded.settings);
                prop_assert!(again.unknown_keys.is_empty());
            }
        }
    }
}
