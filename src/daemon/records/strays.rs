//! Processes an earlier relay's sessions left running, found by the kernel's identity of
//! their sandbox, never by a name.
//!
//! When relay is killed, each session dies with it: the host, the shim and bwrap each
//! carry a parent-death signal (docs/session-host.md#when-a-parent-dies). One window
//! stays: bwrap's first process in the sandbox arms that signal only once the sandbox is
//! set up, so a kill of relay that lands between bwrap's `clone` and that moment leaves
//! that process (and what it starts) running with no parent of relay's. So at start,
//! before anything is launched, relay ends what is left of each session that was
//! running or launching when the earlier relay stopped
//! (docs/THREAT-MODEL.md#leftovers-and-purge).
//!
//! What relay records. Once the host has answered a bwrap launch with bwrap's pid,
//! [`find`] reads the sandbox's first process: bwrap's child, pid 1 of a pid namespace
//! of its own and in a mount namespace of its own. Its pid, its start time, the boot it
//! runs in and the inodes of its mount and pid namespaces ([`Sandbox`]) go into the
//! launch's marker at once (a write without a sync: what it guards against is a kill of
//! relay, which the page cache outlives), then into the session's ledger record.
//!
//! What the next start ends ([`end`]). A recorded sandbox counts only while its first
//! process still runs: the same pid with the same start time in the same boot, of
//! relay's uid, in both recorded namespaces. Then that process and every process of
//! relay's uid in both namespaces that started no earlier get SIGKILL; and once the first
//! process of a pid namespace ends, the kernel kills whatever is left in it.
//!
//! Why nothing else is ever hit:
//! - a session chooses names (a folder `relay-<id>` in its project, which any later
//!   sandbox of that project binds: the name-based search this replaced killed that
//!   other sandbox), but not the kernel's identities. Only what starts inside a sandbox
//!   is in its namespaces (or what a process of the person's joined to them with
//!   `nsenter`, which is then inside it too);
//! - the kernel reuses a namespace's inode once the namespace is gone, and bwrap makes
//!   both namespaces at one `clone`, so a later sandbox may well get both numbers again.
//!   Hence the first process: a namespace lives as long as a process in it, so while that
//!   process runs (the pid and start time are one process's in a boot) its namespaces are
//!   still the recorded ones and no other sandbox has them; once it is gone, the pid
//!   namespace has emptied and nothing is ended;
//! - processes of other users are not relay's to end.
//!
//! What it cannot end: a session with no sandbox on file. That is a record an earlier
//! relay wrote (it kept none; the field is absent), an unsandboxed or Seatbelt launch
//! (nothing to find), a bwrap launch whose sandbox was not found within
//! [`FIND_WITHIN`] (a launcher that is not bwrap; logged), or a kill of relay in the
//! milliseconds between bwrap's `clone` and the marker's write. For those nothing is
//! ended (for a record, a line says so at start); a sandbox caught before its setup is
//! still in its shim's session, where the next host's sweep finds it
//! (docs/session-host.md#what-a-killed-host-leaves-behind).
//!
//! Linux only: macOS has no namespaces, no bwrap and no parent-death signal; nothing is
//! recorded and nothing is ended at start, and the daemon ends a dead host's sessions
//! by their process groups (docs/macos.md).

use serde::{Deserialize, Serialize};

/// A bwrap sandbox as the kernel knows it: its first process and its namespaces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sandbox {
    /// The boot it ran in (`/proc/sys/kernel/random/boot_id`).
    pub boot: String,
    /// Its first process (bwrap's child, pid 1 inside), as the host's pid namespace
    /// numbers it.
    pub pid: u32,
    /// That process's start time, in clock ticks since boot (`/proc/<pid>/stat`).
    pub start: u64,
    /// The inode of its mount namespace (`/proc/<pid>/ns/mnt`).
    pub mnt: u64,
    /// The inode of its pid namespace (`/proc/<pid>/ns/pid`).
    pub pid_ns: u64,
}

/// How long [`find`] looks for a launch's sandbox: bwrap clones it at once, so this is
/// only reached when the launcher is not bwrap (or the machine too loaded to run it).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub const FIND_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// One process as relay reads it from `/proc`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
#[derive(Clone, Debug, PartialEq, Eq)]
struct Proc {
    pid: u32,
    /// The real uid.
    uid: u32,
    start: u64,
    mnt: u64,
    pid_ns: u64,
    /// Its pid in each pid namespace from the reader's down (`NSpid:`).
    nspid: Vec<u32>,
}

/// Of `children` (the launcher's), the sandbox's first process: pid 1 of a pid namespace
/// one below relay's (`relay`: relay itself, whose namespaces the host, the shim and the
/// launcher share), in a mount namespace other than relay's.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn first_process<'a>(relay: &Proc, children: &'a [Proc]) -> Option<&'a Proc> {
    children.iter().find(|c| {
        c.nspid.len() == relay.nspid.len() + 1
            && c.nspid.last() == Some(&1)
            && c.pid_ns != relay.pid_ns
            && c.mnt != relay.mnt
    })
}

/// What to end of `recorded` (each session's id and sandbox) among `procs`: for each
/// sandbox of boot `boot` whose first process still runs as recorded (pid, start time,
/// uid `uid`, both namespaces), that process and every other process of `uid` in both
/// of its namespaces started no earlier; never one of `spared`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn doomed(
    procs: &[Proc],
    recorded: &[(String, Sandbox)],
    uid: u32,
    boot: &str,
    spared: &[u32],
) -> Vec<(u32, String)> {
    let mut out: Vec<(u32, String)> = Vec::new();
    for (id, sb) in recorded.iter().filter(|(_, sb)| sb.boot == boot) {
        let inside = |p: &&Proc| p.uid == uid && p.mnt == sb.mnt && p.pid_ns == sb.pid_ns;
        let first_runs = procs
            .iter()
            .filter(inside)
            .any(|p| p.pid == sb.pid && p.start == sb.start);
        if !first_runs {
            continue;
        }
        for p in procs.iter().filter(inside).filter(|p| p.start >= sb.start) {
            if !spared.contains(&p.pid) && !out.iter().any(|(pid, _)| *pid == p.pid) {
                out.push((p.pid, id.clone()));
            }
        }
    }
    out
}

/// The start time (clock ticks since boot) on a `/proc/<pid>/stat` line: field 22,
/// counted after the command's closing parenthesis (a command may hold spaces and
/// parentheses).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn start_of(stat: &str) -> Option<u64> {
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    // starttime is field 22; `fields` starts at field 3.
    fields.get(22 - 3)?.parse().ok()
}

/// The real uid and the `NSpid:` list of a `/proc/<pid>/status` text.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn uid_and_nspid(status: &str) -> Option<(u32, Vec<u32>)> {
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name));
    let uid = field("Uid:")?.split_whitespace().next()?.parse().ok()?;
    let nspid = field("NSpid:")?
        .split_whitespace()
        .map(|p| p.parse().ok())
        .collect::<Option<Vec<u32>>>()?;
    Some((uid, nspid))
}

/// The inode a namespace link names: `mnt:[4026531841]` for `kind` `mnt`.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn ns_inode(link: &str, kind: &str) -> Option<u64> {
    link.strip_prefix(kind)?
        .strip_prefix(":[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

#[cfg(target_os = "linux")]
mod platform {
    use super::{first_process, ns_inode, start_of, uid_and_nspid, Proc, Sandbox};

    pub fn boot_id() -> Option<String> {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }

    /// Process `pid` as `/proc` shows it, when every part reads (a namespace link
    /// reads only for a process relay may trace: its own user's).
    pub fn read(pid: u32) -> Option<Proc> {
        let dir = format!("/proc/{pid}");
        let status = std::fs::read_to_string(format!("{dir}/status")).ok()?;
        let (uid, nspid) = uid_and_nspid(&status)?;
        let stat = std::fs::read_to_string(format!("{dir}/stat")).ok()?;
        let ns = |kind: &str| {
            let link = std::fs::read_link(format!("{dir}/ns/{kind}")).ok()?;
            ns_inode(link.to_str()?, kind)
        };
        Some(Proc {
            pid,
            uid,
            start: start_of(&stat)?,
            mnt: ns("mnt")?,
            pid_ns: ns("pid")?,
            nspid,
        })
    }

    /// The children of every thread of `pid` (`/proc/<pid>/task/*/children`).
    fn children_of(pid: u32) -> Vec<u32> {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return Vec::new();
        };
        tasks
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
            .flat_map(|s| {
                s.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .collect()
    }

    /// The sandbox under `launcher` now, if bwrap has made it.
    pub fn sandbox_under(launcher: u32) -> Option<Sandbox> {
        let relay = read(std::process::id())?;
        let children: Vec<Proc> = children_of(launcher).into_iter().filter_map(read).collect();
        let first = first_process(&relay, &children)?;
        // Still the same process, still the launcher's: its pid was not reused between
        // the reads.
        let again = read(first.pid)?;
        (again == *first && children_of(launcher).contains(&first.pid)).then(|| Sandbox {
            boot: boot_id().unwrap_or_default(),
            pid: first.pid,
            start: first.start,
            mnt: first.mnt,
            pid_ns: first.pid_ns,
        })
    }

    /// Whether `pid` still runs (a zombie does not).
    pub fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                let state = stat[stat.rfind(')')? + 1..].split_whitespace().next()?;
                Some(state != "Z")
            })
            .unwrap_or(false)
    }

    /// Every process of `uid` whose parts all read.
    pub fn processes_of(uid: u32) -> Vec<Proc> {
        let Ok(rd) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        let of_uid = |pid: &u32| {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .ok()
                .and_then(|s| uid_and_nspid(&s))
                .is_some_and(|(u, _)| u == uid)
        };
        rd.flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(of_uid)
            .filter_map(read)
            .filter(|p| p.uid == uid)
            .collect()
    }
}

/// Why [`find`] found no sandbox.
#[derive(Debug, PartialEq, Eq)]
pub enum NotFound {
    /// The launcher ended first (a launch that failed, or ended at once).
    Ended,
    /// None within [`FIND_WITHIN`]: the launcher is not bwrap, or not on Linux.
    NotMade,
}

/// The sandbox of a bwrap launch whose launcher (bwrap, or a launcher that execs it)
/// runs as `launcher`: looked for until bwrap has made it, the launcher has ended, or
/// [`FIND_WITHIN`] has passed.
#[cfg(target_os = "linux")]
pub async fn find(launcher: u32) -> Result<Sandbox, NotFound> {
    let deadline = std::time::Instant::now() + FIND_WITHIN;
    let mut pause = std::time::Duration::from_micros(200);
    loop {
        if let Some(sb) = platform::sandbox_under(launcher) {
            return Ok(sb);
        }
        if !platform::alive(launcher) {
            return Err(NotFound::Ended);
        }
        if std::time::Instant::now() >= deadline {
            return Err(NotFound::NotMade);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_millis(50));
    }
}

#[cfg(not(target_os = "linux"))]
pub async fn find(_launcher: u32) -> Result<Sandbox, NotFound> {
    Err(NotFound::NotMade)
}

/// Finds the sandbox of launch `id`, whose launcher runs as `launcher`, and keeps it:
/// in its entry (its ledger record from then on) and in its launch marker at once
/// (`Store::note_sandbox`). A sandbox not found is logged: a kill of relay would leave
/// nothing the next start could end of it.
pub(in crate::daemon) async fn note(d: &crate::daemon::Daemon, id: &str, launcher: u32) {
    let sb = match find(launcher).await {
        Ok(sb) => sb,
        Err(NotFound::Ended) => return,
        Err(NotFound::NotMade) => {
            tracing::warn!(
                session = id,
                "session {id}: its launcher made no sandbox within {} s (is it bwrap?); a \
                 stray of it would not be ended after a kill of relay",
                FIND_WITHIN.as_secs()
            );
            return;
        }
    };
    if let Some(e) = d.ledger().get_mut(id) {
        e.record.sandbox = Some(sb.clone());
    }
    if let Err(e) = d.store.note_sandbox(id, &d.tmp_real, &sb) {
        tracing::warn!(session = id, "session {id}: its launch marker: {e}");
    }
}

/// Sends SIGKILL to what is left of each recorded sandbox (`recorded`: a session's id
/// and its sandbox), as the module says; never to relay itself. Returns each process
/// ended, with the session it belonged to.
#[cfg(target_os = "linux")]
pub fn end(recorded: &[(String, Sandbox)]) -> Vec<(u32, String)> {
    if recorded.is_empty() {
        return Vec::new();
    }
    let Some(boot) = platform::boot_id() else {
        return Vec::new();
    };
    let uid = nix::unistd::getuid().as_raw();
    let spared = [std::process::id(), 1];
    let found = doomed(&platform::processes_of(uid), recorded, uid, &boot, &spared);
    found
        .into_iter()
        .filter(|(pid, _)| {
            let Ok(pid) = i32::try_from(*pid) else {
                return false;
            };
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            )
            .is_ok()
        })
        .collect()
}

#[cfg(not(target_os = "linux"))]
pub fn end(_recorded: &[(String, Sandbox)]) -> Vec<(u32, String)> {
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: u32, uid: u32, start: u64, mnt: u64, pid_ns: u64) -> Proc {
        Proc {
            pid,
            uid,
            start,
            mnt,
            pid_ns,
            nspid: vec![pid],
        }
    }

    fn sandbox(pid: u32, start: u64, mnt: u64, pid_ns: u64) -> Sandbox {
        Sandbox {
            boot: "b0".into(),
            pid,
            start,
            mnt,
            pid_ns,
        }
    }

    #[test]
    fn only_the_recorded_sandbox_whose_first_process_still_runs_is_ended() {
        let procs = [
            p(200, 1000, 5_000, 41, 42), // the sandbox's first process, as recorded
            p(201, 1000, 5_010, 41, 42), // a process it started
            p(202, 1000, 4_000, 41, 42), // older than the sandbox: not its
            p(203, 0, 5_010, 41, 42),    // another user's
            p(204, 1000, 5_010, 41, 99), // its mount namespace only
            p(205, 1000, 5_010, 98, 42), // its pid namespace only
            // Another relay's sandbox, whose mount table holds a folder named after the
            // session: other namespaces, so nothing of it qualifies.
            p(300, 1000, 6_000, 51, 52),
            p(301, 1000, 6_001, 51, 52),
            p(206, 1000, 5_010, 41, 42), // spared: relay itself, say
        ];
        let rec = |sb| vec![("t-aa".to_string(), sb)];
        assert_eq!(
            doomed(
                &procs,
                &rec(sandbox(200, 5_000, 41, 42)),
                1000,
                "b0",
                &[206]
            ),
            vec![(200, "t-aa".into()), (201, "t-aa".into())]
        );
        // The first process gone, or its pid reused (another start time), or the
        // namespaces' numbers reused by a later sandbox: nothing is ended.
        for sb in [
            sandbox(210, 5_000, 41, 42),
            sandbox(200, 5_001, 41, 42),
            sandbox(300, 5_000, 51, 52),
            sandbox(200, 5_000, 51, 52),
        ] {
            assert!(
                doomed(&procs, &rec(sb.clone()), 1000, "b0", &[]).is_empty(),
                "{sb:?}"
            );
        }
        // A record of another boot, or of a sandbox of another user's.
        assert!(doomed(&procs, &rec(sandbox(200, 5_000, 41, 42)), 1000, "b1", &[]).is_empty());
        assert!(doomed(&procs, &rec(sandbox(200, 5_000, 41, 42)), 0, "b0", &[]).is_empty());
        assert!(doomed(&procs, &[], 1000, "b0", &[]).is_empty());
        // Two sessions' records naming one sandbox end each process once.
        let twice = vec![
            ("t-aa".to_string(), sandbox(200, 5_000, 41, 42)),
            ("t-bb".to_string(), sandbox(200, 5_000, 41, 42)),
        ];
        assert_eq!(doomed(&procs, &twice, 1000, "b0", &[206]).len(), 2);
    }

    #[test]
    fn the_first_process_is_the_launchers_child_at_pid_1_in_namespaces_of_its_own() {
        let mut relay = p(100, 1000, 10, 1, 2);
        relay.nspid = vec![100];
        let mut plain = p(101, 1000, 11, 1, 2); // a child in relay's namespaces
        plain.nspid = vec![101];
        let mut not_one = p(102, 1000, 11, 7, 8); // pid 2 of a namespace
        not_one.nspid = vec![102, 2];
        let mut shared_mnt = p(103, 1000, 11, 1, 9); // no mount namespace of its own
        shared_mnt.nspid = vec![103, 1];
        let mut first = p(104, 1000, 11, 5, 6);
        first.nspid = vec![104, 1];
        let kids = [plain, not_one, shared_mnt, first.clone()];
        assert_eq!(first_process(&relay, &kids), Some(&first));
        assert_eq!(first_process(&relay, &kids[..3]), None);
        // Two levels below relay's (a sandbox inside a sandbox): not bwrap's child.
        let mut deep = first.clone();
        deep.nspid = vec![104, 3, 1];
        assert_eq!(first_process(&relay, &[deep]), None);
    }

    #[test]
    fn proc_texts_read_as_relay_reads_them() {
        let stat = "4242 (we ird) (x) S 1 4240 4240 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 \
                    98765 1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(start_of(stat), Some(98_765));
        assert_eq!(start_of("1 (short) S 1"), None);
        let status = "Name:\tbwrap\nUid:\t1000\t0\t0\t0\nNSpid:\t4242\t1\n";
        assert_eq!(uid_and_nspid(status), Some((1000, vec![4242, 1])));
        assert_eq!(
            uid_and_nspid("Name:\tx\nUid:\t1000\t1000\t1000\t1000\n"),
            None
        );
        assert_eq!(ns_inode("mnt:[4026531841]", "mnt"), Some(4_026_531_841));
        assert_eq!(ns_inode("pid:[4026531836]", "mnt"), None);
        assert_eq!(ns_inode("mnt:[x]", "mnt"), None);
        let sb = sandbox(200, 5_000, 41, 42);
        let text = serde_json::to_string(&sb).unwrap();
        assert_eq!(
            text,
            r#"{"boot":"b0","pid":200,"start":5000,"mnt":41,"pid_ns":42}"#
        );
        assert_eq!(serde_json::from_str::<Sandbox>(&text).unwrap(), sb);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_real_sandbox_is_found_under_its_launcher_and_ended_and_this_process_is_not() {
        if std::process::Command::new("unshare")
            .args([
                "--user",
                "--map-root-user",
                "--pid",
                "--mount",
                "--fork",
                "true",
            ])
            .status()
            .map_or(true, |s| !s.success())
        {
            assert!(std::env::var_os("CI").is_none(), "CI has unshare");
            eprintln!("skip: no unprivileged namespaces here");
            return;
        }
        // unshare stands in for bwrap: its child is pid 1 of new pid and mount
        // namespaces. It holds stdin open, so the child lives until it is ended.
        let mut launcher = std::process::Command::new("unshare")
            .args(["--user", "--map-root-user", "--pid", "--mount", "--fork"])
            .args(["sh", "-c", "read x"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let sb = rt
            .block_on(find(launcher.id()))
            .expect("the sandbox under unshare");
        assert_eq!(Some(sb.boot.clone()), platform::boot_id());
        let me = platform::read(std::process::id()).unwrap();
        assert!(sb.mnt != me.mnt && sb.pid_ns != me.pid_ns, "{sb:?} {me:?}");
        // This process is in neither namespace: a record naming its pid with the
        // sandbox's namespaces ends nothing.
        let mut imposter = sb.clone();
        imposter.pid = std::process::id();
        imposter.start = me.start;
        assert!(end(&[("t-00".into(), imposter)]).is_empty());
        let ended = end(&[("t-01".into(), sb.clone())]);
        assert_eq!(ended, vec![(sb.pid, "t-01".to_string())]);
        let st = launcher.wait().unwrap();
        assert!(!st.success(), "{st:?}");
        // Gone now: the same record ends nothing again.
        assert!(end(&[("t-01".into(), sb)]).is_empty());
    }
}
