//! One file per verb group of `relay`, as `relay --help` lists them
//! ([cli.md](../../../docs/cli.md)). Each file opens with the verbs it serves. It asks
//! the daemon, then turns the answer into what the verb prints ([`super::Out`]). The
//! text form is a pure function of the answer, so each file's tests check it without
//! a daemon. [`entry`] is what terminals and sessions print alike.

pub(super) mod audit;
pub(super) mod completions;
pub(super) mod doctor;
mod entry;
pub(super) mod sandbox;
pub(super) mod serve;
pub(super) mod service;
pub(super) mod session;
pub(super) mod settings;
pub(super) mod status;
pub(super) mod terminal;
pub(super) mod token;
pub(super) mod version;
