//! Processes an earlier relay's sessions left running. When relay is killed, each
//! session dies with it: the host, the shim and bwrap each carry a parent-death signal
//! (docs/session-host.md#when-a-parent-dies). One window stays: a kill that lands while
//! bwrap is between its `clone` and arming that signal in the sandbox's first process
//! leaves that process (and what it starts) running with no parent of relay's. So at
//! start, before anything is launched, relay ends every process of its user whose mount
//! table holds the temp folder (`relay-<id>`) of a session that was running or launching
//! when the earlier relay stopped (docs/THREAT-MODEL.md#leftovers).
//!
//! Linux only: macOS has no parent-death signal, and there the daemon ends a dead
//! host's sessions by their process groups (docs/macos.md).

/// Whether `table` (a `/proc/<pid>/mountinfo`) has `relay-<id>` as a whole component
/// of some path in it.
#[cfg(any(target_os = "linux", test))]
fn holds(table: &str, id: &str) -> bool {
    let name = format!("relay-{id}");
    table
        .split([' ', '\n'])
        .any(|field| field.split('/').any(|c| c == name))
}

/// The real uid on a `/proc/<pid>/status` text.
#[cfg(any(target_os = "linux", test))]
fn uid_of(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|u| u.parse().ok())
}

/// Sends SIGKILL to every process of this user (but relay itself) whose mount table
/// holds the temp folder of one of `ids`, unless relay's own table does (then the
/// folder is a mount of the host's, not a sandbox's). Returns each process ended, with
/// the session it belonged to.
#[cfg(target_os = "linux")]
pub fn end(ids: &[String]) -> Vec<(u32, String)> {
    let mut ended = Vec::new();
    if ids.is_empty() {
        return ended;
    }
    let own = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let ids: Vec<&String> = ids.iter().filter(|id| !holds(&own, id)).collect();
    let me = std::process::id();
    let uid = nix::unistd::getuid().as_raw();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return ended;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me || pid == 1 {
            continue;
        }
        let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
        if uid_of(&status) != Some(uid) {
            continue;
        }
        let Ok(table) = std::fs::read_to_string(e.path().join("mountinfo")) else {
            continue;
        };
        let Some(id) = ids.iter().find(|id| holds(&table, id)) else {
            continue;
        };
        let Ok(pid_t) = i32::try_from(pid) else {
            continue;
        };
        if nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid_t),
            nix::sys::signal::Signal::SIGKILL,
        )
        .is_ok()
        {
            ended.push((pid, id.to_string()));
        }
    }
    ended
}

#[cfg(not(target_os = "linux"))]
pub fn end(_ids: &[String]) -> Vec<(u32, String)> {
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_holds_the_folder_as_a_whole_component_only() {
        let line = "812 790 0:45 /tmp/relay-s-0a1b2c3d4e5f /tmp/relay-s-0a1b2c3d4e5f \
                    rw,nosuid - tmpfs tmpfs rw\n";
        assert!(holds(line, "s-0a1b2c3d4e5f"));
        let deeper = "812 790 0:45 /relay-t-aa/claude-config /x rw - ext4 /dev/sda1 rw\n";
        assert!(holds(deeper, "t-aa"));
        assert!(!holds(line, "s-0a1b2c3d4e"), "a prefix of the id");
        assert!(!holds(
            "1 2 0:1 /tmp/relay-s-aa.old /x rw - ext4 x rw\n",
            "s-aa"
        ));
        assert!(!holds(
            "1 2 0:1 /tmp/xrelay-s-aa /x rw - ext4 x rw\n",
            "s-aa"
        ));
    }

    #[test]
    fn the_uid_is_the_real_one_on_the_status_line() {
        let status = "Name:\tbwrap\nUmask:\t0022\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\n";
        assert_eq!(uid_of(status), Some(1000));
        assert_eq!(uid_of("Name:\tx\n"), None);
    }
}
