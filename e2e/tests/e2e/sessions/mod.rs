//! The daemon and its sessions: the daemon end to end, and restarts with the ledger.

mod daemon_suite;
mod ledger;
