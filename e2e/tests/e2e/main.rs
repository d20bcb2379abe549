//! End-to-end tests through the real host, the real shim and the real bwrap (and the
//! Seatbelt code path through the fake `sandbox-exec`). Run as root, as CI does.
//! Every test that handles a token asserts that its bytes appear nowhere it captured.
//!
//! One test binary, a folder per area; docs/testing.md ("The e2e tests") says which
//! area holds what.

mod attacks;
mod cli;
mod clients;
mod everyday;
mod host;
mod network;
mod seatbelt;
mod sessions;
mod stress;
mod terminals;
mod token;
