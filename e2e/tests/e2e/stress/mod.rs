//! Issue 12, relay under load and under faults: faults injected under launches, no
//! descriptor left behind, and a `relay sandbox` that loses no byte; issue 26, a launch
//! killed at each of its steps leaves nothing behind.

mod faults;
mod flood;
mod killed_launch;
mod leak;
mod limits;
mod lossless;
