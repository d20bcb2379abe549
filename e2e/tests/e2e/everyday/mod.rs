//! Everyday work in relay's sandbox, as a developer's day has it: the person's own
//! toolchains under `~` and package installs with their caches, in a shell and in Claude's
//! own tools (docs/settings.md#toolchains, docs/settings.md#caches).

mod caches;
mod litter;
mod tasks;
mod toolchains;
