//! Denied ports from inside a session, every way into TCP, a flood of connections, and
//! the confined thread that holds the ports' Landlock domain.

mod landlock_thread;
mod ports_and_pressure;
// A network namespace of its own is Linux's (bwrap); the Seatbelt side is not built yet.
#[cfg(target_os = "linux")]
mod private;
