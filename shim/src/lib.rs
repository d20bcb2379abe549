//! `relay-shim`: the per-session launcher between the host and the sandboxed target.
//!
//! One shim runs per session; its pid is the session root. In order it checks fd 5,
//! starts a new session, proves its identity to the daemon, applies the host's Landlock
//! ruleset and the seccomp filter that completes it, marks every other descriptor close-on-exec, resolves the target, wraps it in
//! the sandbox launcher, spawns it in its own process group, forwards signals to that
//! group and exits with the target's code. Each step reports on the status fd
//! ([`status::Event`]) and fails with its own exit code ([`exit_codes`]).
//!
//! The library also holds what the host and the daemon share with the shim: its command
//! line ([`cli`]: flags, [`cli::Backend`], [`cli::ExecArgs::to_args`]), its descriptor
//! numbers ([`fds`]), its exit codes, the status wire type, the bwrap profile format
//! and the Landlock ruleset builder.

#[cfg(test)]
mod alone;
pub mod bwrap_profile;
pub mod cli;
pub mod exit_codes;
pub mod fds;
pub mod forward;
pub mod hello;
pub mod landlock;
pub mod status;
pub mod target;

mod enter;
mod exec;
mod identity;
mod json;
mod resolve;
mod seccomp;
mod shield;
mod spawn;
mod wrap;

/// Runs the `relay-shim` command line and exits.
pub fn run() -> ! {
    exec::run()
}
