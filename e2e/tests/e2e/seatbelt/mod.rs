//! The Seatbelt (macOS) backend: launches checked against their policy, and
//! `relay doctor` on that path (the fake `sandbox-exec` on Linux).

mod doctor;
mod escapes;
mod launches;
#[cfg(target_os = "macos")]
mod mac_probe;
mod network;
