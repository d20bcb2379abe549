//! A launch's plan: from the settings, the request and a snapshot of the machine to
//! what the launch will be, or a refusal. Nothing here writes anything.

pub mod authorize;
pub mod claude_state;
pub mod exec_files;
pub mod guard;
pub mod sandbox;
pub mod shield;
