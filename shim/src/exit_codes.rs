//! The shim's own exit codes, one per failure class, so the host can tell a refused
//! identity from a broken sandbox from a missing binary without parsing stderr.
//!
//! Otherwise the shim exits with the target's exit code, or 128 + signal when the target
//! was killed by a signal.

/// The command line was refused.
pub const USAGE: i32 = 64;
/// The identity secret was malformed (`bad_secret`) or the daemon refused the Hello
/// (`hello_refused`).
pub const IDENTITY: i32 = 65;
/// `--pass-token` was given but fd 5 ([`crate::fds::TOKEN_FD`]) is not open.
pub const NO_TOKEN_FD: i32 = 66;
/// Any other setup step failed: setsid, the controlling terminal, Landlock (the
/// shield's domain too), the seccomp filter, fd hygiene, the sandbox profile, fork.
pub const SETUP: i32 = 70;
/// The target (or the sandbox launcher) exists but cannot be executed.
pub const NOT_EXECUTABLE: i32 = 126;
/// The target (or the sandbox launcher) was not found.
pub const NOT_FOUND: i32 = 127;
