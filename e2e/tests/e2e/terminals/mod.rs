//! Terminals on a real pty: attach and detach, and what a session prints on the
//! person's terminal.

mod attach;
mod output;
