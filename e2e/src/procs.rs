//! Processes as the kernel shows them (Linux's `/proc`): which belong to a session, which
//! are alive, which hold a file open. For the tests that kill relay and look at what is
//! left.

use std::path::Path;

/// The pids of every process whose environment names session `id` (its shim, its
/// launcher and everything the target started, sandboxed or not). Zombies, whose
/// environment is gone, are not counted: they run nothing.
pub fn session_pids(id: &str) -> Vec<u32> {
    let needle = format!("RELAY_SESSION_ID={id}\0");
    // The shim and the launcher carry the target's environment hex-encoded
    // (relay_shim::target), the target itself as plain variables.
    let hex: String = needle.bytes().map(|b| format!("{b:02x}")).collect();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Ok(env) = std::fs::read(e.path().join("environ")) {
            if env.windows(needle.len()).any(|w| w == needle.as_bytes())
                || env.windows(hex.len()).any(|w| w == hex.as_bytes())
            {
                out.push(pid);
            }
        }
    }
    out
}

/// Whether `pid` runs (a zombie does not).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|st| !st.contains(") Z "))
        .unwrap_or(false)
}

/// Sends `sig` to `pid`.
pub fn signal(pid: u32, sig: libc::c_int) {
    // Safety: kill(2) of a process the test's instance started; no memory.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// SIGKILL to `pid`.
pub fn kill9(pid: u32) {
    signal(pid, libc::SIGKILL);
}

/// Whether `pid` has a descriptor open on `path` (its `/proc/<pid>/fd` links).
pub fn holds_open(pid: u32, path: &Path) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| {
            rd.flatten()
                .any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == path))
        })
        .unwrap_or(false)
}
