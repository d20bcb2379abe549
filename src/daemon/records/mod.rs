//! What relay keeps of its sessions: the ledger on disk, the audit and event logs, purging
//! ended sessions, setting aside what a session planted in repositories, and the token
//! watcher's memory (docs/architecture.md).

pub mod budget;
pub mod journal;
pub mod ledger;
pub mod made_folders;
pub mod purge;
pub mod repos;
pub mod rotation;
pub mod strays;
