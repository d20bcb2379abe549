//! Everyday work in relay's sandbox, as a developer's day has it: the person's own
//! toolchains under `~`, in a shell and in Claude's own tools (docs/settings.md#toolchains).

mod toolchains;
