//! The daemon API's bodies, defined once (docs/routes.md): what the CLI sends and
//! reads, what the daemon answers, what the e2e harness checks, and the lines of
//! `ready.json`, `audit.jsonl` and `events.jsonl`. The daemon ↔ host bodies are in
//! [`crate::protocol`]; the shim's Hello is in the shim crate (`relay_shim::hello`).
//!
//! Every type here is `Serialize + Deserialize`, so a field renamed on one side is a
//! build error or a failed read on the other, never a `?` on the person's screen. The
//! JSON is the API's as documented: the tests below pin the session view's field names
//! and round-trip each type.

mod codes;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::protocol::{ClaudeInit, PtySize, Routing, SessionKind};
pub use codes::{Code, Outcome};

// ---- requests -------------------------------------------------------------------

/// `POST /api/sessions` (docs/routes.md#request-bodies).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionStart {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
    /// The caller's current folder: the start folder when it is inside the project and
    /// no `directory` is asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// Claude Code's `--model` for this session, over the template's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Claude Code's `--permission-mode` for this session, over the template's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
}

/// `POST /api/terminals` (docs/routes.md#request-bodies).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalStart {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
    /// The caller's current folder: the start folder when it is inside the project and
    /// no `directory` is asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cols: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u16>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_args: Vec<String>,
    /// Take the project holding `directory` when `project` is absent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub project_from_directory: bool,
    /// Hold the output until the first attach (docs/routes.md#attaching-to-a-terminal).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hold_output: bool,
}

/// `POST /api/terminals/{id}/resume` (docs/routes.md#request-bodies): the resumed
/// terminal's size, and whether its output waits for the first attach.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalResume {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cols: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u16>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hold_output: bool,
}

/// `POST /api/sessions/{id}/message`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    pub text: String,
    /// Answer with the turn's events as they happen (`application/x-ndjson`, one
    /// `protocol::TurnEvent` per line).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
}

// ---- sessions -------------------------------------------------------------------

/// A session's state as the API shows it. `Launching` never leaves the daemon: lists
/// leave such entries out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryState {
    Launching,
    Running,
    /// A Claude session that was stopped or exited: `resume` starts it again.
    Dormant,
    Exited,
}

impl EntryState {
    /// Whether an entry of `kind` in this state may be launched again under its id: a
    /// dormant Claude session, or an ended terminal (a Claude Code run kept with its
    /// conversation; the resume route checks the rest).
    pub fn resumable(self, kind: crate::protocol::SessionKind) -> bool {
        match kind {
            crate::protocol::SessionKind::Claude => self == EntryState::Dormant,
            crate::protocol::SessionKind::Pty => self == EntryState::Exited,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EntryState::Launching => "launching",
            EntryState::Running => "running",
            EntryState::Dormant => "dormant",
            EntryState::Exited => "exited",
        }
    }
}

/// One session as the API shows it (docs/routes.md#entry): the answer of a launch, a
/// resume and a stop, an item of the lists, the `entry` of a purge. The daemon's
/// `Entry` (`src/daemon/session.rs`) holds more and serializes through this.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    pub id: String,
    pub kind: SessionKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub template_id: String,
    pub project_id: String,
    pub directory: PathBuf,
    pub state: EntryState,
    /// The shim's pid (the session root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_pid: Option<u32>,
    pub created_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<i32>,
    /// Why it ended (`exited`, `terminated`, `host_died`, `relay_restarted`, …): the
    /// reason its `session.exited` event and `session_end` row carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_reason: Option<String>,
    pub sandboxed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<PtySize>,
    /// Whether this launch carried the token on fd 5 (never the token itself).
    pub token_passed: bool,
    /// Claude launches: the `--model` relay passed (absent: Claude Code's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Claude launches: the `--permission-mode` relay passed (absent: Claude Code's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
    /// Sessions: what Claude Code said in its last `system`/`init` event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claude: Option<ClaudeInit>,
    /// The fingerprint of the token it carried (`crate::token::fingerprint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_fingerprint: Option<String>,
    /// Its project's `account` label (`projects[].account`) at launch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// It runs on another token than the file holds now (`claude_token_on_change:
    /// keep`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stale: bool,
    /// When it ended, for `retain_ended`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<u64>,
}

/// `GET /api/sessions`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sessions {
    pub sessions: Vec<Session>,
}

/// `GET /api/terminals`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Terminals {
    pub terminals: Vec<Session>,
}

/// `POST /api/{sessions,terminals}/{id}/purge` (docs/routes.md#purge).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Purged {
    pub id: String,
    pub purged: bool,
    pub entry: Session,
}

/// `POST /api/sessions/{id}/resume`: the entry, and when the resume does not continue
/// the conversation relay recorded, why and what it does instead (docs/cli.md#resume).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resumed {
    #[serde(flatten)]
    pub entry: Session,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
}

/// `POST /api/sessions/{id}/message` without `stream`: the turn's end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnAnswer {
    pub id: String,
    pub text: String,
    pub is_error: bool,
    /// When the turn failed on an API answer: its HTTP status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_error_status: Option<u16>,
    /// Why Claude Code ended the turn (its `terminal_reason`, else its `subtype`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    /// The turn was interrupted (`relay session interrupt`, or Ctrl-C): `text` is the
    /// reply so far.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// What relay could not do for the turn (its ledger update failed), in words: the
    /// CLI prints each on standard error and exits 1 (docs/cli.md#exit-codes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

// ---- relay itself ---------------------------------------------------------------

/// Every refusal's body but the empty 401 (docs/routes.md#refusals):
/// `{"code": …, "error": message}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: Code,
    #[serde(rename = "error")]
    pub message: String,
}

/// `<config>/ready.json`, written once every listener is up (docs/cli.md).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ready {
    pub pid: u32,
    pub version: String,
    pub config_dir: PathBuf,
    pub socket: PathBuf,
    /// The bound loopback TCP address, `null` without `api.listen`.
    pub api: Option<String>,
}

/// `GET /api/status` (docs/routes.md#get-apistatus).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub version: String,
    pub pid: u32,
    pub paths: StatusPaths,
    /// The bound loopback TCP address, `null` without `api.listen`.
    pub api: Option<String>,
    /// The live session host, `null` while it is down.
    pub host: Option<HostInfo>,
    pub settings: SettingsState,
    pub sessions_running: u64,
    /// The login service that started this relay (`relay.service`, `relay.serve`),
    /// `null` when it was started by hand.
    #[serde(default)]
    pub service: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusPaths {
    pub config: PathBuf,
    pub settings: PathBuf,
    pub socket: PathBuf,
    pub audit: PathBuf,
    pub events: PathBuf,
    /// The setting as stored (a path, `~/` unexpanded), never the file's content.
    pub claude_token_file: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInfo {
    pub pid: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingsState {
    /// Whether `settings.json` parses right now.
    pub ok: bool,
    /// The settings problem or the unknown keys; `null` when clean.
    pub note: Option<String>,
}

/// `POST /api/login-code`: a one-time link to the Settings page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoginLink {
    pub url: String,
    pub expires_in_s: u64,
}

/// `GET /api/tokens` (docs/routes.md#get-apitokens): every configured token file, never
/// a token.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    pub tokens: Vec<TokenFile>,
}

/// One configured token file: where it is set, who runs on it, and what is there now.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenFile {
    pub path: PathBuf,
    /// The settings keys that name it (`claude_token_file`, `projects[1].claude_token_file`).
    pub keys: Vec<String>,
    /// The projects whose launches run on it.
    pub projects: Vec<TokenProject>,
    /// The fingerprint of the token it holds (`crate::token::fingerprint`), when it
    /// reads as relay would read it at a launch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// Its permission bits in octal (`"0600"`), when it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Its last change (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_ms: Option<u64>,
    /// Why a launch on it would be refused now (names the path, never the content).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// The running sessions and terminals that carry its token.
    pub sessions: Vec<String>,
}

/// A project running on a token file, with its `account` label.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenProject {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
}

// ---- audit rows and events ------------------------------------------------------

/// One line of `audit.jsonl` (docs/routes.md#get-apiaudit). `S` is the type of the
/// fixed words (`action`): the daemon writes rows with `&'static str`
/// (`daemon::journal::AuditRow`), readers read them as `String`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRow<S = String> {
    /// When it was written (ms since the epoch), set by `Audit::record`.
    pub ts: u64,
    pub action: S,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
    /// `allowed`, `denied` or `error`.
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<Code>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandboxed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_passed: Option<bool>,
    /// The fingerprint of the token a launch carried (`crate::token::fingerprint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_fingerprint: Option<String>,
    /// The project's `account` label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    /// `session_end` of a `claude_token_*` stop: the projects whose token file changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_projects: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// A token launch's routing variables (names, and the API's host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<Routing>,
    /// A sandboxed launch: the names its environment took from relay's (the base list,
    /// the routing names, `env_passthrough`), never their values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_names: Option<Vec<String>>,
    /// A token launch whose sandbox was built: whether its Claude's tools run shielded,
    /// in a Landlock domain of their own (docs/THREAT-MODEL.md#claudes-tools-cannot-reach-claude).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shield: Option<bool>,
    /// `session_end`: how many times the host masked a token in the session's output
    /// (absent when the host died and could not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redactions: Option<u64>,
    /// `egress`: one connection through a session's egress proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Egress>,
    /// `repository_set_aside`: each repository a session made or changed whose
    /// configuration or hooks were moved out of git's reach at its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repositories: Option<Vec<SetAside>>,
    /// A sandboxed launch: its limits on processes and memory and how they hold;
    /// `session_end`: the limit it reached, when it did (docs/settings.md#limits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
}

/// A sandboxed session's limits on processes and memory (`crate::limits`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// 0: none.
    pub pids_max: u32,
    pub memory_max_mib: u64,
    /// 0: none (`cpu.weight`, 1 to 10000).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cpu_weight: u32,
    /// `cgroup_v2`, `cgroup_v1`, `rlimit`, or `none` (all three limits 0).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
    /// What does not hold, with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_in_force: Vec<String>,
    /// The limit reached, in words: `memory limit 64 MiB reached: 1 process killed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reached: Option<String>,
}

/// One connection a proxied session asked for (docs/session-host.md#the-egress-proxy):
/// its `egress` event and audit row, at its close (at once when refused).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Egress {
    /// The name (or address) asked for.
    pub host: String,
    pub port: u16,
    pub allowed: bool,
    /// Which rule decided, in words (for a refusal: how to allow it).
    pub rule: String,
    /// Bytes sent to the far end, and received from it.
    pub sent: u64,
    pub received: u64,
    /// How long it was open.
    pub ms: u64,
    /// A row standing for this many connections to the same target with the same
    /// verdict, folded once the session went over its budget (its bytes summed, its
    /// time the longest): docs/routes.md#logs-and-their-bounds. Absent on a row of one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub folded: u64,
}

/// The audit action of a session's end that set repositories aside
/// (docs/THREAT-MODEL.md#repositories-a-session-made-or-changed).
pub const REPOSITORY_SET_ASIDE: &str = "repository_set_aside";
/// Its event's name.
pub const REPOSITORY_SET_ASIDE_EVENT: &str = "repository.set_aside";

/// One repository a session made or changed, and what of its configuration and hooks
/// was moved out of git's reach once it ended: names only, never a value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetAside {
    /// The git folder (`…/vendor/lib/.git`, a bare repository, `…/.git/modules/x`).
    pub repository: String,
    /// Where what was moved lies: `<repository>/relay-set-aside/<session id>-<unix ms>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folder: Option<String>,
    /// The configuration keys moved out, each once, a subsection as `*`
    /// (`core.fsmonitor`, `filter.*.clean`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// What was moved out whole: a configuration file unreadable as git's syntax
    /// (`config`, `config.worktree`), a `hooks` that is no folder, a rebase's state
    /// (`rebase-merge`, `rebase-apply`, `sequencer`), legacy `remotes`, `branches`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub whole: Vec<String>,
    /// The hooks moved out, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<String>,
    /// What could not be done there, in words (a link not followed, a step that failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

impl Egress {
    /// `host:port`, an IPv6 address in brackets.
    pub fn target(&self) -> String {
        match self.host.parse::<std::net::IpAddr>() {
            Ok(ip) => std::net::SocketAddr::new(ip, self.port).to_string(),
            Err(_) => format!("{}:{}", self.host, self.port),
        }
    }
}

/// `GET /api/audit`: the last 1000 rows, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRows {
    pub rows: Vec<AuditRow>,
}

/// One event (docs/routes.md#get-apievents), in `events.jsonl` and `GET /api/events`.
/// `S` is the type of the fixed words (`name`, `status`): the daemon emits events with
/// `&'static str` (`daemon::journal::Event`), readers read them as `String`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event<S = String> {
    /// Its number since `relay serve` started, from 1; set by `Events::emit`.
    pub seq: u64,
    /// When it happened (ms since the epoch), set by `Events::emit`.
    pub ts: u64,
    pub name: S,
    /// `ok`, `denied` or `error` for launches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<Code>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// A token launch's routing variables (names, and the API's host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<Routing>,
    /// `session.launch` of a sandboxed launch: the names its environment took from
    /// relay's, never their values (as in its audit row).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_names: Option<Vec<String>>,
    /// `egress`: one connection through the session's egress proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<Egress>,
    /// `session.exited` of a `claude_token_*` stop: the projects whose token file
    /// changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_projects: Option<Vec<String>>,
    /// `repository.set_aside`: each repository a session made or changed whose
    /// configuration or hooks were moved out of git's reach at its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repositories: Option<Vec<SetAside>>,
    /// `session.exited` of a session that reached a limit: which, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
}

/// `GET /api/events?after=N&wait_ms=M`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Events {
    pub events: Vec<Event>,
}

// ---- audit scan and doctor ------------------------------------------------------

/// `POST /api/audit/scan` (docs/cli.md#relay-audit-scan). `S` is the type of the fixed
/// words (`encoding`, `why`): `&'static str` where the daemon makes them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanReport<S = String> {
    /// Whether the token was found nowhere.
    pub ok: bool,
    pub token_fingerprint: String,
    pub files: u64,
    pub bytes: u64,
    pub findings: Vec<Finding<S>>,
    /// What could not be read, with why (names masked as findings are): files, and
    /// folders too deep, past the walk's entry count or unreadable. At most 1000.
    pub skipped: Vec<Skipped<S>>,
    /// Places not read beyond those listed in `skipped`.
    #[serde(default)]
    pub skipped_more: u64,
    /// Whether everything was read (`skipped` empty, `skipped_more` 0): with `ok` and
    /// not `complete`, the token is nowhere the scan could read. An answer without the
    /// field (relay before it) cannot say, and reads as false.
    #[serde(default)]
    pub complete: bool,
}

/// One place the token was found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding<S = String> {
    /// The path, with any copy of the token in it masked.
    pub file: String,
    /// Byte offset in the file; absent when the token is in the name itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    pub encoding: S,
}

/// A place the scan could not read, and why: `unreadable file`, `unreadable folder`,
/// `too deep`, `too many entries`, `a link, not followed`, `moved while read`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped<S = String> {
    pub file: String,
    pub why: S,
}

/// A doctor check's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckStatus {
    Ok,
    Warn,
    Fail,
    Skip,
}

impl CheckStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Ok => "ok",
            CheckStatus::Warn => "warn",
            CheckStatus::Fail => "fail",
            CheckStatus::Skip => "skip",
        }
    }
}

/// One `relay doctor` check (docs/cli.md#relay-doctor). `S` is the type of `name`:
/// `&'static str` where the daemon makes them (`daemon::doctor::Check`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Check<S = String> {
    pub name: S,
    pub status: CheckStatus,
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// `POST /api/doctor`: every check, the probes too.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Doctor<S = String> {
    /// No check failed.
    pub ok: bool,
    pub checks: Vec<Check<S>>,
}

/// `GET /api/doctor` (the Settings page): the checks that launch nothing, and the
/// probes as the last `POST` left them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoctorPage<S = String> {
    pub ok: bool,
    pub checks: Vec<Check<S>>,
    /// When the probes last ran (kept across restarts in `<config>/doctor-probes.json`),
    /// `null` when they never have.
    pub probes_ran_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_dormant_session_and_an_ended_terminal_resume_and_nothing_else() {
        use crate::protocol::SessionKind::{Claude, Pty};
        for (state, claude, pty) in [
            (EntryState::Launching, false, false),
            (EntryState::Running, false, false),
            (EntryState::Dormant, true, false),
            (EntryState::Exited, false, true),
        ] {
            assert_eq!(state.resumable(Claude), claude, "{state:?}");
            assert_eq!(state.resumable(Pty), pty, "{state:?}");
        }
    }

    use super::*;
    use serde::de::DeserializeOwned;
    use std::fmt::Debug;

    /// Serialize, read back, compare; and the JSON read back serializes the same.
    fn round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(v: &T) {
        let text = serde_json::to_string(v).unwrap();
        let back: T = serde_json::from_str(&text).unwrap();
        assert_eq!(&back, v, "{text}");
        assert_eq!(serde_json::to_string(&back).unwrap(), text);
    }

    pub(crate) fn session() -> Session {
        Session {
            id: "t-0123456789ab".into(),
            kind: SessionKind::Pty,
            name: Some("n".into()),
            template_id: "shell".into(),
            project_id: "p".into(),
            directory: "/home/ada/p".into(),
            state: EntryState::Exited,
            root_pid: Some(42),
            created_ms: 1,
            exit_status: Some(3),
            exit_signal: Some(9),
            exit_reason: Some("exited".into()),
            sandboxed: true,
            pty: Some(PtySize { cols: 80, rows: 24 }),
            token_passed: true,
            model: Some("m".into()),
            permission_mode: Some("plan".into()),
            claude: Some(ClaudeInit {
                session_id: Some("c".into()),
                version: Some("2".into()),
                model: Some("m".into()),
                api_key_source: Some("none".into()),
                permission_mode: Some("plan".into()),
            }),
            token_fingerprint: Some("abcdef012345".into()),
            account: Some("work".into()),
            stale: true,
            ended_ms: Some(2),
        }
    }

    fn bare(s: &Session) -> Session {
        Session {
            name: None,
            root_pid: None,
            exit_status: None,
            exit_signal: None,
            exit_reason: None,
            pty: None,
            model: None,
            permission_mode: None,
            claude: None,
            token_fingerprint: None,
            account: None,
            stale: false,
            ended_ms: None,
            ..s.clone()
        }
    }

    /// The session view's field names and order, as docs/routes.md#entry lists them
    /// and the e2e tests read them: a rename here is a rename of the API.
    #[test]
    fn the_session_view_keeps_its_field_names() {
        let golden = include_str!("testdata/session-view.json").trim_end();
        assert_eq!(serde_json::to_string_pretty(&session()).unwrap(), golden);
        // Empty optional fields are left out, not `null`.
        assert_eq!(
            serde_json::to_string(&bare(&session())).unwrap(),
            r#"{"id":"t-0123456789ab","kind":"pty","template_id":"shell","project_id":"p","directory":"/home/ada/p","state":"exited","created_ms":1,"sandboxed":true,"token_passed":true}"#
        );
    }

    /// The error body's bytes, as every refusal has written them
    /// (docs/routes.md#refusals).
    #[test]
    fn the_error_body_keeps_its_bytes() {
        let e = ErrorBody {
            code: Code::UnknownProject,
            message: "no project \"x\"".into(),
        };
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            format!(
                r#"{{"code":"{}","error":"no project \"x\""}}"#,
                Code::UnknownProject
            )
        );
    }

    #[test]
    fn every_request_body_round_trips() {
        round_trip(&SessionStart {
            project: Some("p".into()),
            directory: Some("/d".into()),
            cwd: Some("/d/sub".into()),
            name: Some("n".into()),
            template: Some("claude-code".into()),
            model: Some("m".into()),
            permission_mode: Some("plan".into()),
        });
        round_trip(&SessionStart::default());
        round_trip(&TerminalStart {
            project: Some("p".into()),
            template: Some("shell".into()),
            directory: Some("/d".into()),
            cwd: Some("/d/sub".into()),
            name: Some("n".into()),
            cols: Some(100),
            rows: Some(30),
            extra_args: vec!["-c".into(), "true".into()],
            project_from_directory: true,
            hold_output: true,
        });
        round_trip(&TerminalStart::default());
        round_trip(&Message {
            text: "hi".into(),
            stream: true,
        });
    }

    #[test]
    fn every_answer_body_round_trips() {
        for s in [session(), bare(&session())] {
            round_trip(&s);
            round_trip(&Purged {
                id: s.id.clone(),
                purged: true,
                entry: s.clone(),
            });
        }
        round_trip(&Sessions {
            sessions: vec![session(), bare(&session())],
        });
        round_trip(&Terminals {
            terminals: vec![session()],
        });
        for api_error_status in [None, Some(401)] {
            round_trip(&TurnAnswer {
                id: "s-1".into(),
                text: "t".into(),
                is_error: api_error_status.is_some(),
                api_error_status,
                ended: api_error_status.map(|_| "completed".into()),
                interrupted: api_error_status.is_none(),
                warnings: api_error_status
                    .map(|_| vec!["w".into()])
                    .unwrap_or_default(),
            });
        }
        for code in Code::ALL {
            round_trip(&ErrorBody {
                code: *code,
                message: "m".into(),
            });
        }
    }

    #[test]
    fn ready_status_and_login_round_trip() {
        for api in [None, Some("127.0.0.1:1".to_string())] {
            round_trip(&Ready {
                pid: 1,
                version: "0.1.0".into(),
                config_dir: "/c".into(),
                socket: "/c/relay.sock".into(),
                api: api.clone(),
            });
            round_trip(&Status {
                version: "0.1.0".into(),
                pid: 1,
                paths: StatusPaths {
                    config: "/c".into(),
                    settings: "/c/settings.json".into(),
                    socket: "/c/relay.sock".into(),
                    audit: "/c/audit.jsonl".into(),
                    events: "/c/events.jsonl".into(),
                    claude_token_file: api.as_ref().map(|_| "~/t".into()),
                },
                api: api.clone(),
                host: api.as_ref().map(|_| HostInfo { pid: 2 }),
                settings: SettingsState {
                    ok: api.is_some(),
                    note: api.as_ref().map(|_| "unknown keys: x".into()),
                },
                sessions_running: 3,
                service: api.as_ref().map(|_| "relay.service".into()),
            });
        }
        round_trip(&Tokens {
            tokens: vec![
                TokenFile {
                    path: "/home/ada/.config/work/token".into(),
                    keys: vec!["projects[0].claude_token_file".into()],
                    projects: vec![TokenProject {
                        id: "work".into(),
                        account: Some("work".into()),
                    }],
                    fingerprint: Some("abcdef012345".into()),
                    mode: Some("0600".into()),
                    size: Some(109),
                    changed_ms: Some(5),
                    problem: None,
                    sessions: vec!["s-1".into()],
                },
                TokenFile::default(),
            ],
        });
        round_trip(&LoginLink {
            url: "http://127.0.0.1:1/login?code=c".into(),
            expires_in_s: 60,
        });
    }

    #[test]
    fn audit_rows_and_events_round_trip() {
        let row = AuditRow {
            ts: 5,
            action: "session_launch".to_string(),
            session_id: Some("s-1".into()),
            kind: Some("claude".into()),
            project: Some("p".into()),
            template: Some("claude-code".into()),
            directory: Some("/d".into()),
            outcome: Outcome::Denied,
            code: Some(Code::TemplateNotAllowed),
            error: Some("e".into()),
            sandboxed: Some(true),
            token_passed: Some(false),
            token_fingerprint: Some("f".into()),
            account: Some("work".into()),
            token_projects: Some(vec!["p".into()]),
            exit_status: Some(1),
            signal: Some(15),
            routing: Some(Routing {
                names: vec!["HTTPS_PROXY".into()],
                anthropic_base_url_host: Some("api.example".into()),
            }),
            env_names: Some(vec!["HOME".into(), "PATH".into()]),
            shield: Some(true),
            redactions: Some(2),
            egress: Some(Egress {
                host: "api.example".into(),
                port: 443,
                allowed: true,
                rule: "allowed by egress entry \"api.example\"".into(),
                sent: 10,
                received: 20,
                ms: 3,
                folded: 7,
            }),
            repositories: Some(vec![SetAside {
                repository: "/p/vendor/lib/.git".into(),
                folder: Some("/p/vendor/lib/.git/relay-set-aside/t-1-5".into()),
                keys: vec!["core.fsmonitor".into(), "filter.*.clean".into()],
                whole: vec!["config.worktree".into()],
                hooks: vec!["pre-commit".into()],
                problem: Some("p".into()),
            }]),
            limits: Some(Limits {
                pids_max: 64,
                memory_max_mib: 128,
                cpu_weight: 50,
                by: "cgroup_v1".into(),
                not_in_force: vec!["x".into()],
                reached: Some("process limit 64 reached: 2 forks refused".into()),
            }),
        };
        round_trip(&row);
        round_trip(&AuditRows {
            rows: vec![row, AuditRow::default()],
        });
        let ev = Event {
            seq: 7,
            ts: 5,
            name: "session.launch".to_string(),
            status: Some("denied".into()),
            code: Some(Code::UnknownProject),
            reason: Some("r".into()),
            session_id: Some("s-1".into()),
            kind: Some("claude".into()),
            exit_status: Some(0),
            signal: Some(9),
            pid: Some(3),
            routing: Some(Routing::default()),
            env_names: Some(vec![]),
            token_projects: Some(vec!["p".into(), "q".into()]),
            egress: Some(Egress::default()),
            repositories: Some(vec![SetAside::default()]),
            limits: Some(Limits::default()),
        };
        round_trip(&ev);
        round_trip(&Events {
            events: vec![ev, Event::default()],
        });
    }

    #[test]
    fn the_scan_and_doctor_answers_round_trip() {
        round_trip(&ScanReport {
            ok: false,
            token_fingerprint: "abcdef012345".into(),
            files: 3,
            bytes: 400,
            findings: vec![
                Finding {
                    file: "/c/audit.jsonl".into(),
                    offset: Some(7),
                    encoding: "raw".to_string(),
                },
                Finding {
                    file: "/c/[token]".into(),
                    offset: None,
                    encoding: "raw".into(),
                },
            ],
            skipped: vec![Skipped {
                file: "/c/x".into(),
                why: "unreadable file".into(),
            }],
            skipped_more: 2,
            complete: false,
        });
        // An answer from before `skipped_more` and `complete` still reads, and cannot
        // vouch for having read everything.
        let old: ScanReport = serde_json::from_str(
            r#"{"ok": true, "token_fingerprint": "abcdef012345", "files": 1, "bytes": 2,
                "findings": [], "skipped": []}"#,
        )
        .unwrap();
        assert_eq!((old.skipped_more, old.complete), (0, false));
        let checks: Vec<Check> = [
            CheckStatus::Ok,
            CheckStatus::Warn,
            CheckStatus::Fail,
            CheckStatus::Skip,
        ]
        .into_iter()
        .map(|status| Check {
            name: status.as_str().to_string(),
            status,
            detail: "d".into(),
            fix: (status != CheckStatus::Ok).then(|| "f".into()),
        })
        .collect();
        for c in &checks {
            assert_eq!(serde_json::to_value(c.status).unwrap(), c.status.as_str());
        }
        round_trip(&Doctor {
            ok: false,
            checks: checks.clone(),
        });
        for probes_ran_ms in [None, Some(9)] {
            round_trip(&DoctorPage {
                ok: true,
                checks: checks.clone(),
                probes_ran_ms,
            });
        }
        for state in [
            EntryState::Launching,
            EntryState::Running,
            EntryState::Dormant,
            EntryState::Exited,
        ] {
            assert_eq!(serde_json::to_value(state).unwrap(), state.as_str());
        }
    }

    /// The daemon writes rows and events with `&'static str` words; they read back as
    /// the same row with `String`s.
    #[test]
    fn what_the_daemon_writes_reads_back_as_the_readers_type() {
        let row: AuditRow<&'static str> = AuditRow {
            action: "session_end",
            outcome: Outcome::Allowed,
            error: Some("exited".into()),
            ..Default::default()
        };
        let back: AuditRow = serde_json::from_value(serde_json::to_value(&row).unwrap()).unwrap();
        assert_eq!(back.action, "session_end");
        assert_eq!(back.error.as_deref(), Some("exited"));
        let ev: Event<&'static str> = Event {
            name: "host.started",
            status: Some("ok"),
            pid: Some(4),
            ..Default::default()
        };
        let back: Event = serde_json::from_value(serde_json::to_value(&ev).unwrap()).unwrap();
        assert_eq!(
            (back.name.as_str(), back.status.as_deref(), back.pid),
            ("host.started", Some("ok"), Some(4))
        );
    }
}
