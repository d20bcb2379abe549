//! The token: the `claude_token_file` contract, hygiene beyond it, rotation and purge,
//! redaction of a token a session prints, and the log files.

mod contract;
mod hygiene;
mod logs;
mod per_project;
mod redaction;
mod rotation_and_purge;
