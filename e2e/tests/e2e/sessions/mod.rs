//! The daemon and its sessions: the daemon end to end, restarts with the ledger, and
//! one daemon per config dir.

mod daemon_suite;
mod ledger;
mod one_daemon;
