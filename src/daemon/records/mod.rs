//! What relay keeps of its sessions: the ledger on disk, the audit and event logs, purging
//! ended sessions, and the token watcher's memory (docs/architecture.md).

pub mod budget;
pub mod journal;
pub mod ledger;
pub mod made_folders;
pub mod purge;
pub mod rotation;
pub mod strays;
