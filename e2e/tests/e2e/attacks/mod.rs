//! Attacks from inside a session, each test named after its attack: planted programs,
//! links and files, a token that appears or changes, and relay's own programs as the way
//! out.

mod claude_config;
mod claude_memory;
mod claude_neighbours;
mod home_folder;
mod in_session;
mod own_programs;
mod planted_for_later;
mod token_launch_reads;
