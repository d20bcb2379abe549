//! Test stand-ins for relay's end-to-end suite.
//!
//! Three binaries live here, each a thin `main` over a module of this library:
//!
//! - `fakeagent` ([`agent`]) answers like Claude Code, in headless stream-json mode and
//!   in interactive mode, and records a *start line* per launch (argv, cwd, watched
//!   environment, open descriptors, a digest of the token read from the token fd).
//! - `fakeapi` ([`api`]) stands in for the Anthropic API on loopback: it answers
//!   Claude Code from a script and records the SHA-256 of each bearer it is sent.
//! - `sandbox-exec` ([`sandbox_exec`]) stands in for macOS's `/usr/bin/sandbox-exec` on
//!   Linux: it refuses a profile that is not well-formed SBPL ([`sbpl`]), records the
//!   profile it was given, and execs the command with every descriptor as inherited.
//!
//! Both write JSON lines to call logs under `$TMPDIR` ([`call_log`]) so a test can read
//! what happened inside a sandbox after the process is gone. Neither ever writes token
//! bytes anywhere: only sizes and digests.

pub mod agent;
pub mod api;
pub mod call_log;
pub mod sandbox_exec;
pub mod sbpl;
pub mod sbpl_escapes;
pub mod sbpl_eval;
pub mod sbpl_questions;

/// Exit code when a call log or a profile copy cannot be written (sysexits `EX_IOERR`).
/// A fake that cannot record what it saw fails loudly instead of running unrecorded.
pub const EXIT_RECORD_FAILED: i32 = 74;
