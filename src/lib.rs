//! relay: a local session-host supervisor for sandboxed Claude Code sessions.
//!
//! - [`sandbox`]: the neutral policy, path resolution and the two renderers.
//! - [`host`]: `relay-sessions`, the process that owns ptys, children and the fd table.
//! - [`protocol`]: the daemon ↔ host wire types.
//! - [`wire`]: the daemon API's bodies (and `ready.json`, audit rows, events), for the
//!   daemon, the CLI and the e2e harness.
//! - [`peer`]: a socket peer's pid and a process's parent, per platform.
//! - [`cloexec`]: close-on-exec descriptors on both platforms and the fork lock.
//! - [`listen`]: accept loops, connection caps and the descriptor limit, shared by the
//!   daemon and the host.
//! - [`http`]: answers, bodies, serving and the client, for the daemon, the host and the CLI.
//! - [`logging`]: `tracing` for the daemon and the host: the capped log files, stderr.
//! - [`harden`]: no core dumps and no same-uid memory readers for the daemon and the host.
//! - [`helpers`]: relay's own programs, opened once and run by descriptor, started clean.
//! - [`tree`]: bounded walks without recursion over a tree a session could write (its
//!   removal, `relay audit scan`'s reading).
//! - [`text`]: text cut to a size without splitting a character.
//! - [`jsonpath`]: where a key path points in a JSON document (line and column).
//! - [`limits`]: per-session limits on processes and memory (cgroups, or rlimits).

pub mod atomic;
pub mod cli;
pub mod cloexec;
pub mod daemon;
pub mod harden;
pub mod helpers;
pub mod host;
pub mod http;
pub mod jsonpath;
pub mod limits;
pub mod listen;
pub mod logging;
pub mod peer;
pub mod protocol;
pub mod sandbox;
pub mod text;
pub mod token;
pub mod tree;
pub mod wire;

#[cfg(test)]
mod alone;
#[cfg(test)]
mod layout;
