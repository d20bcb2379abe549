//! What Claude Code writes in its config folder: the names a token launch keeps
//! writable inside the folder it pins read-only. Data the plan reads; the launch seeds
//! the same names (`launch/claude_config.rs`).

/// One name Claude Code writes in its config folder, which a token launch's sandbox
/// keeps writable inside the folder it pins read-only whole.
pub struct State {
    pub name: &'static str,
    /// A folder (else a file Claude Code appends to).
    pub folder: bool,
    /// Claude Code's state of one process: emptied at every launch, so nothing one run
    /// left there is what the next one sources.
    pub per_process: bool,
    pub why: &'static str,
}

/// What Claude Code writes in its config folder, measured with `strace` on the pinned
/// 2.1.332 (a start, a turn with a Bash tool call, a resume, an interactive turn), each
/// with why; docs/THREAT-MODEL.md#claudes-configuration lists the same. It is data
/// Claude Code keeps, never configuration: the rest of the folder (`.claude.json`,
/// `.config.json`, `settings.json`, `CLAUDE.md`, `agents/`, `commands/`, `skills/`,
/// `plugins/` and every other name) is read-only to every process of a token launch.
pub const STATE: &[State] = &[
    State {
        name: "projects",
        folder: true,
        per_process: false,
        why:
            "its transcripts (the conversation a resume reads back) and each folder's memory notes",
    },
    State {
        name: "sessions",
        folder: true,
        per_process: false,
        why: "the record of each running Claude Code process",
    },
    State {
        name: "shell-snapshots",
        folder: true,
        per_process: true,
        why: "the Bash tool's snapshot of its shell, which each of its commands sources",
    },
    State {
        name: "session-env",
        folder: true,
        per_process: true,
        why: "the environment the Bash tool's hooks leave for its commands",
    },
    State {
        name: "todos",
        folder: true,
        per_process: false,
        why: "its todo lists",
    },
    State {
        name: "plans",
        folder: true,
        per_process: false,
        why: "plan mode's plans",
    },
    State {
        name: "file-history",
        folder: true,
        per_process: false,
        why: "the file checkpoints a rewind restores",
    },
    State {
        name: "telemetry",
        folder: true,
        per_process: false,
        why: "usage events that failed to send, sent again later",
    },
    State {
        name: "history.jsonl",
        folder: false,
        per_process: false,
        why: "the prompt history the arrow keys recall (appended to)",
    },
];
