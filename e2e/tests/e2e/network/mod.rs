//! Denied ports from inside a session, every way into TCP, a flood of connections, and
//! the confined thread that holds the ports' Landlock domain.

mod landlock_thread;
mod ports_and_pressure;
