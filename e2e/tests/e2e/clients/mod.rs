//! Real clients: a real Claude Code logged in and taking turns, the README's flow for a
//! new user, and the Settings page in a real headless Chromium.

mod readme_flow;
pub(crate) mod real_claude;
pub(crate) mod real_interrupt;
pub(crate) mod real_turns;
mod settings_live;
mod settings_open;
mod settings_page;
mod token_rewrite;
