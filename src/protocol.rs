//! Wire types between the daemon and the host (`relay-sessions`), defined once.
//!
//! The host speaks HTTP/1.1 over `<state>/host.sock`; bodies are these structs as JSON.
//! Exits and the start handshake travel as JSON lines on the host's stdout ([`HostEvent`]).
//! The shim's status events live in the `relay-shim` crate (`relay_shim::status`).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Version of the daemon ↔ host protocol. A host announcing another version is refused.
pub const HOST_PROTOCOL_VERSION: u32 = 1;

/// The template whose pty launches may carry a Claude token.
pub const CLAUDE_CODE_TEMPLATE: &str = "claude-code";

/// The variable that tells Claude Code which descriptor holds its OAuth token.
pub const TOKEN_FD_VAR: &str = "CLAUDE_CODE_OAUTH_TOKEN_FILE_DESCRIPTOR";

/// A secret string: serialized as-is on the wire, never shown by `Debug`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionKind {
    /// An interactive terminal on a pty pair.
    Pty,
    /// A headless Claude Code provider session (stream-json over pipes).
    Claude,
}

impl SessionKind {
    /// Its wire name, as it serializes (`pty`, `claude`): the `kind` of audit rows and
    /// events.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionKind::Claude => "claude",
            SessionKind::Pty => "pty",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectRef {
    pub id: String,
    pub name: String,
    pub path: PathBuf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtySize {
    pub cols: u16,
    pub rows: u16,
}

impl Default for PtySize {
    fn default() -> Self {
        PtySize { cols: 80, rows: 24 }
    }
}

/// The sandbox backend: one enum, the shim's (`relay_shim::cli::Backend`).
pub use relay_shim::cli::Backend;

/// [`Backend`] on the wire: `"seatbelt"` or `"bwrap"`.
#[derive(Serialize, Deserialize)]
#[serde(remote = "Backend", rename_all = "snake_case")]
enum BackendName {
    Seatbelt,
    Bwrap,
}

/// How the shim wraps the target. The profile file was written by the daemon (0600).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxLaunch {
    #[serde(with = "BackendName")]
    pub backend: Backend,
    pub profile_path: PathBuf,
    /// The launcher binary (`sandbox-exec` or `bwrap`); a test seam. Absent: the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<PathBuf>,
    /// Loopback ports the target must not connect to. Seatbelt carries them in the
    /// profile; on bwrap the host hands the shim a Landlock ruleset.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied_loopback_ports: Vec<u16>,
    /// What the session may use of the machine, and where its cgroup is made
    /// (docs/session-host.md#limits-on-processes-and-memory). Absent: no limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<SessionLimits>,
}

/// One sandboxed session's limits on processes, memory and CPU. 0: no limit of that
/// kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionLimits {
    /// The most processes and threads at once (`pids.max`).
    pub pids_max: u32,
    /// The most memory, in MiB (`memory.max`, or `RLIMIT_DATA` per process without a
    /// cgroup).
    pub memory_max_mib: u64,
    /// Its share of the CPU beside its siblings, 1 to 10000 (`cpu.weight`; v1
    /// `cpu.shares`, scaled).
    #[serde(default)]
    pub cpu_weight: u32,
    /// Where the host makes the session's cgroup; absent where relay has none it can
    /// write, and then only `RLIMIT_DATA` holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<Cgroups>,
}

/// The cgroup folders relay made at its start, under which each session gets one of
/// its own, named after its id (`src/limits/`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "version", rename_all = "snake_case")]
pub enum Cgroups {
    /// cgroup v2: one folder with `memory` and `pids` enabled for its children, and
    /// `cpu` when relay's cgroup offers it.
    V2 {
        parent: PathBuf,
        #[serde(default)]
        cpu: bool,
    },
    /// cgroup v1: the `pids` and the `memory` hierarchies' folders, and the `cpu`
    /// one's where relay can write it.
    V1 {
        pids: PathBuf,
        memory: PathBuf,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cpu: Option<PathBuf>,
    },
}

/// What a session's cgroup counted by its end: a limit reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reached {
    pub pids_max: u32,
    pub memory_max_mib: u64,
    /// Processes the kernel killed for going over `memory_max_mib`.
    pub oom_kills: u64,
    /// Forks (and thread starts) refused at `pids_max`.
    pub forks_refused: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityLaunch {
    /// 64 lowercase hex characters, single use.
    pub secret: Secret,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchRequest {
    pub v: u32,
    pub session_id: String,
    pub kind: SessionKind,
    #[serde(default)]
    pub resume: bool,
    pub project: ProjectRef,
    pub directory: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_id: Option<String>,
    pub argv: Vec<String>,
    /// Template environment, applied after the base scrub and before the host's names.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The base of the target's environment: `relay serve`'s own (UTF-8 names and
    /// values). The host itself starts with a fixed minimal environment, so nothing a
    /// loader reads from the person's shell reaches it (docs/session-host.md#what-a-child-inherits).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub base_env: Vec<(String, String)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<PtySize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxLaunch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<IdentityLaunch>,
    /// Only on a sandboxed Claude launch. Never logged, never in an error message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claude_token: Option<Secret>,
    /// The current token on a launch that does not get it, when the setting is set: the
    /// host only masks it in the session's output (src/host/redact.rs) and never hands
    /// it to the session (docs/THREAT-MODEL.md, "Redaction").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redact_token: Option<Secret>,
    /// Terminals: read no output until the first attach (at most 10 s), so the attach
    /// that asked gets all of it (`relay sandbox`; docs/session-host.md#attach).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hold_output: bool,
    /// Sandboxed launches: the target inherits only an allowlist of the host's own
    /// environment. Absent: all of it but relay's scrub (an unsandboxed launch)
    /// (docs/session-host.md, "What a child inherits").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_allowlist: Option<EnvAllowlist>,
}

/// What a sandboxed target may inherit of `base_env` (relay's environment) besides the base
/// names and the routing names (`crate::host::env`): the settings' and the template's
/// `env_passthrough`, exact names and `PREFIX*` patterns.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvAllowlist {
    #[serde(default)]
    pub passthrough: Vec<String>,
}

impl LaunchRequest {
    /// Whether this launch is one that may carry a token: a `claude` session, or a pty
    /// launch of the `claude-code` template.
    pub fn is_claude_launch(&self) -> bool {
        match self.kind {
            SessionKind::Claude => true,
            SessionKind::Pty => self.template_id.as_deref() == Some(CLAUDE_CODE_TEMPLATE),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchResponse {
    pub session_id: String,
    pub kind: SessionKind,
    /// The shim's pid: the session root.
    pub root_pid: u32,
    /// The target's pid as the shim reported it (the sandbox launcher when wrapped).
    pub target_pid: u32,
    /// On a token launch: the routing variables in its environment (never values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<Routing>,
    /// On a launch with an [`EnvAllowlist`]: the names its environment took from the
    /// host's (relay's), never their values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_names: Option<Vec<String>>,
}

/// Where a token launch's traffic goes, as its environment says: the names of the
/// routing variables set (proxies, certificate authorities, the API's address), and the
/// host of `ANTHROPIC_BASE_URL` when set, since it decides where the token is sent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Routing {
    pub names: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anthropic_base_url_host: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminateRequest {
    pub session_id: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageRequest {
    pub text: String,
    /// Answer with the turn's events as they happen (`application/x-ndjson`, one
    /// [`TurnEvent`] per line) instead of one [`MessageResponse`] at its end.
    #[serde(default)]
    pub stream: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageResponse {
    pub session_id: String,
    pub text: String,
    pub is_error: bool,
    /// When the turn failed on an API answer: its HTTP status, as Claude Code reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_error_status: Option<u16>,
}

/// What Claude Code says about itself in its `system`/`init` event: which build runs,
/// on which model, how it signed in, in which permission mode, and its own session id
/// (what `--resume` takes).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaudeInit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Claude Code's `apiKeySource` (`none` when it runs on an OAuth token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
}

/// One thing that happened in a turn, as the host reads it from Claude Code's
/// stream-json output (`src/host/provider.rs`). A streamed turn is these, one JSON
/// line each, ending with `result` or `error`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TurnEvent {
    /// Claude Code's `system`/`init` line (it sends one at the start of each turn).
    Init(ClaudeInit),
    /// A piece of assistant text, as it arrives.
    Text { text: String },
    /// A tool call Claude Code is about to run.
    ToolUse {
        id: String,
        name: String,
        input: serde_json::Value,
    },
    /// What a tool call gave back (cut to [`TOOL_RESULT_MAX`] bytes).
    ToolResult {
        tool_use_id: String,
        is_error: bool,
        text: String,
    },
    /// The end of the turn: Claude Code's `result` line.
    Result {
        text: String,
        is_error: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_error_status: Option<u16>,
        /// Why Claude Code ended the turn: its `terminal_reason` (`completed`,
        /// `aborted_streaming`, …), else its `subtype`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ended: Option<String>,
        /// relay interrupted it (`relay session interrupt`): `text` is what it had
        /// said so far.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        interrupted: bool,
    },
    /// The turn broke before a result: `code` is `session_exited`.
    Error { code: HostCode, message: String },
    /// relay's own, never the host's: something about the turn relay could not do (its
    /// ledger update failed). The turn goes on; `relay session message` prints it on
    /// standard error and exits 1 (docs/cli.md#exit-codes).
    Warning { message: String },
}

/// A tool result's text in a [`TurnEvent::ToolResult`] is cut to this many bytes.
pub const TOOL_RESULT_MAX: usize = 16 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    Running,
    Exited,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub session_id: String,
    pub kind: SessionKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_id: Option<String>,
    pub project_id: String,
    pub directory: PathBuf,
    pub root_pid: u32,
    pub state: SessionState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<PtySize>,
    pub sandboxed: bool,
    /// An ended session that reached a limit: which, in words
    /// (`crate::limits::reached_text`); its attach's exit frame says it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_reached: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionList {
    pub sessions: Vec<SessionInfo>,
}

/// Host error body: `{"error": code, "message": text}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostErrorBody {
    pub error: HostCode,
    pub message: String,
}

/// Every code the host answers with, and its HTTP status, in one `match`
/// (docs/session-host.md#routes). The daemon maps each to one of its own codes in one
/// place (`daemon::error::ApiError::from_host`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostCode {
    InvalidSpec,
    NotFound,
    MethodNotAllowed,
    PayloadTooLarge,
    RequestTimeout,
    SessionExists,
    SessionExited,
    IdentityRefused,
    SpawnFailed,
    Internal,
    /// A code this build does not know (an older or newer host): never sent.
    #[serde(other)]
    Unknown,
}

impl HostCode {
    /// Every code the host sends.
    pub const ALL: &'static [HostCode] = &[
        HostCode::InvalidSpec,
        HostCode::NotFound,
        HostCode::MethodNotAllowed,
        HostCode::PayloadTooLarge,
        HostCode::RequestTimeout,
        HostCode::SessionExists,
        HostCode::SessionExited,
        HostCode::IdentityRefused,
        HostCode::SpawnFailed,
        HostCode::Internal,
    ];

    /// The code's wire spelling and its HTTP status.
    const fn spec(self) -> (&'static str, u16) {
        match self {
            HostCode::InvalidSpec => ("invalid_spec", 400),
            HostCode::NotFound => ("not_found", 404),
            HostCode::MethodNotAllowed => ("method_not_allowed", 405),
            HostCode::PayloadTooLarge => ("payload_too_large", 413),
            HostCode::RequestTimeout => ("request_timeout", 408),
            HostCode::SessionExists => ("session_exists", 409),
            HostCode::SessionExited => ("session_exited", 409),
            HostCode::IdentityRefused => ("identity_refused", 502),
            HostCode::SpawnFailed => ("spawn_failed", 500),
            HostCode::Internal => ("internal", 500),
            HostCode::Unknown => ("unknown", 500),
        }
    }

    pub const fn as_str(self) -> &'static str {
        self.spec().0
    }

    pub fn status(self) -> u16 {
        self.spec().1
    }
}

impl fmt::Display for HostCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a session ended, as the host reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitReason {
    /// The target exited on its own.
    Exited,
    /// The target died of a signal it was not sent by relay.
    Signaled,
    /// Relay terminated it (`POST /terminate` or host shutdown).
    Terminated,
    /// The shim itself failed or died before reporting the target's exit.
    ShimFailed,
}

/// JSON lines on the host's stdout, read by the daemon.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum HostEvent {
    /// First line: the host listens and speaks protocol `v`.
    Ready { v: u32, pid: u32, socket: PathBuf },
    SessionExited {
        session_id: String,
        root_pid: u32,
        #[serde(default)]
        exit_status: Option<i32>,
        #[serde(default)]
        signal: Option<i32>,
        reason: ExitReason,
        /// How many times the host masked a token in the session's output
        /// (src/host/redact.rs).
        #[serde(default)]
        redactions: u64,
        /// A limit the session reached (`memory_max_mib` or `pids_max`), when it did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reached: Option<Reached>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_debug_never_shows_the_value() {
        let s = Secret::new("acme-fake-token-0123");
        assert_eq!(format!("{s:?}"), "Secret(20 bytes)");
        let req = IdentityLaunch { secret: s };
        assert!(!format!("{req:?}").contains("acme"));
    }

    #[test]
    fn host_event_lines_have_the_documented_shape() {
        let ev = HostEvent::SessionExited {
            session_id: "s1".into(),
            root_pid: 42,
            exit_status: Some(0),
            signal: None,
            reason: ExitReason::Exited,
            redactions: 2,
            reached: None,
        };
        assert_eq!(
            serde_json::to_string(&ev).unwrap(),
            r#"{"event":"session_exited","session_id":"s1","root_pid":42,"exit_status":0,"signal":null,"reason":"exited","redactions":2}"#
        );
    }
}

/// Framing of an attached terminal stream (after an HTTP upgrade to [`ATTACH_PROTOCOL`]),
/// the same end to end: CLI ↔ daemon (which copies frames, taking out only
/// [`attach::FORGET`]) ↔ host.
/// A frame is one kind byte, a big-endian u32 length, then the payload.
pub mod attach {
    pub const ATTACH_PROTOCOL: &str = "relay-attach";
    /// Host → client: terminal output bytes.
    pub const OUTPUT: u8 = 1;
    /// Host → client: the session ended; payload `{"exit_status":…,"signal":…}`.
    pub const EXIT: u8 = 2;
    /// Client → host: keystrokes.
    pub const INPUT: u8 = 1;
    /// Client → host: the window size, cols then rows, two big-endian u16.
    pub const RESIZE: u8 = 2;
    /// Client → daemon, empty: the exit frame has arrived, the terminal may go. The
    /// daemon takes it out of the stream and purges the terminal once the attach is over
    /// (`relay sandbox`; docs/routes.md#attaching-to-a-terminal).
    pub const FORGET: u8 = 3;
    /// Client → host, empty: the client's input has ended (`relay sandbox` with stdin
    /// not a terminal). The host gives the program end-of-file the way a terminal does
    /// ([`crate::host::terminal::Terminal::end_input`]).
    pub const EOF: u8 = 4;
    /// Largest payload either side accepts.
    pub const FRAME_MAX: usize = 1024 * 1024;

    /// Whether an `Upgrade:` header value asks for this protocol.
    pub fn wants(upgrade: Option<&str>) -> bool {
        upgrade.is_some_and(|v| v.eq_ignore_ascii_case(ATTACH_PROTOCOL))
    }

    pub fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(5 + payload.len());
        v.push(kind);
        v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        v.extend_from_slice(payload);
        v
    }

    /// Splits complete frames off the front of `buf`.
    pub fn take_frames(buf: &mut Vec<u8>) -> Result<Vec<(u8, Vec<u8>)>, String> {
        let mut out = Vec::new();
        loop {
            if buf.len() < 5 {
                return Ok(out);
            }
            let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            if len > FRAME_MAX {
                return Err(format!("frame of {len} bytes is larger than {FRAME_MAX}"));
            }
            if buf.len() < 5 + len {
                return Ok(out);
            }
            let kind = buf[0];
            let payload = buf[5..5 + len].to_vec();
            buf.drain(..5 + len);
            out.push((kind, payload));
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn frames_round_trip_in_pieces() {
            let mut wire = frame(INPUT, b"ls\r");
            wire.extend(frame(RESIZE, &[0, 80, 0, 24]));
            let mut buf = wire[..3].to_vec();
            assert!(take_frames(&mut buf).unwrap().is_empty());
            buf.extend_from_slice(&wire[3..]);
            let got = take_frames(&mut buf).unwrap();
            assert_eq!(
                got,
                vec![(INPUT, b"ls\r".to_vec()), (RESIZE, vec![0, 80, 0, 24])]
            );
            assert!(buf.is_empty());
            let mut huge = vec![1, 0xff, 0xff, 0xff, 0xff];
            assert!(take_frames(&mut huge).is_err());
        }
    }
}
