//! Issue 12, relay under load and under faults: faults injected under launches, no
//! descriptor left behind, and a `relay sandbox` that loses no byte.

mod faults;
mod leak;
mod lossless;
