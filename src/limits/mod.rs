//! Per-session limits on processes and memory, so that a fork bomb or a memory hog in
//! one session ends or holds inside it, and relay, the person's login and the other
//! sessions go on; and a CPU weight, the session's share beside the other sessions
//! (docs/THREAT-MODEL.md#resources, issue 39).
//!
//! - Where relay can write a cgroup (cgroup v2 with `memory` and `pids` delegated to it,
//!   or cgroup v1 hierarchies as root), the daemon makes one folder at its start
//!   ([`prepare`]) and the host one per sandboxed session under it (`cgroup.rs`): the
//!   shim joins it between fork and exec, so every process of the session is in it.
//!   `pids.max` bounds the session's processes and threads, `memory.max` its memory,
//!   `cpu.weight` (v1 `cpu.shares`) weighs it where the `cpu` controller is there; at
//!   the end the host reads what the kernel counted (OOM kills, refused forks) and says
//!   so in the session's end.
//! - Elsewhere (no cgroup, macOS) only `RLIMIT_DATA` holds, per process. relay never
//!   sets `RLIMIT_NPROC`: it counts every process of the person's user, so a value
//!   low enough to stop a bomb would stop the person's own shell and every other
//!   session too. `relay doctor`, `relay sandbox explain` and the launch's audit row
//!   say what is not in force ([`describe`]).

#[cfg(target_os = "linux")]
pub mod cgroup;

use crate::protocol::{Cgroups, Reached, SessionLimits};

/// How a session's limits hold on this machine, for the audit row, `relay sandbox
/// explain` and `relay doctor`: `by` is `cgroup_v2`, `cgroup_v1`, `rlimit`, or `none`
/// when all three are 0, and each line of `not_in_force` is a limit that does not hold,
/// with why.
pub fn describe(limits: &SessionLimits, no_cgroup: Option<&str>) -> (&'static str, Vec<String>) {
    if limits.pids_max == 0 && limits.memory_max_mib == 0 && limits.cpu_weight == 0 {
        return ("none", vec![]);
    }
    let cpu = |why: &str| {
        (limits.cpu_weight > 0)
            .then(|| format!("CPU weight {}: not in force ({why})", limits.cpu_weight))
    };
    match &limits.cgroup {
        Some(Cgroups::V2 { cpu: true, .. }) => ("cgroup_v2", vec![]),
        Some(Cgroups::V2 { cpu: false, .. }) => (
            "cgroup_v2",
            cpu("relay's cgroup v2 has no cpu controller delegated to it")
                .into_iter()
                .collect(),
        ),
        Some(Cgroups::V1 { cpu: Some(_), .. }) => ("cgroup_v1", vec![]),
        Some(Cgroups::V1 { cpu: None, .. }) => (
            "cgroup_v1",
            cpu("no cgroup v1 cpu hierarchy relay can write")
                .into_iter()
                .collect(),
        ),
        None => {
            let why = no_cgroup.unwrap_or("no cgroup relay can write");
            let mut out = vec![];
            if limits.pids_max > 0 {
                out.push(format!(
                    "process limit {}: not in force ({why}); RLIMIT_NPROC counts every \
                     process of your user, so relay does not set it",
                    limits.pids_max
                ));
            }
            if limits.memory_max_mib > 0 {
                out.push(format!(
                    "memory limit {} MiB: per process only (RLIMIT_DATA), not for the \
                     session as a whole ({why})",
                    limits.memory_max_mib
                ));
            }
            out.extend(cpu(why));
            ("rlimit", out)
        }
    }
}

/// What a limit reached means, in a sentence: `memory limit 64 MiB reached: 1 process
/// killed`. `None` when none was.
pub fn reached_text(r: &Reached) -> Option<String> {
    let mut parts = vec![];
    if r.oom_kills > 0 {
        let s = if r.oom_kills == 1 { "" } else { "es" };
        parts.push(format!(
            "memory limit {} MiB reached: {} process{s} killed",
            r.memory_max_mib, r.oom_kills
        ));
    }
    if r.forks_refused > 0 {
        let s = if r.forks_refused == 1 { "" } else { "s" };
        parts.push(format!(
            "process limit {} reached: {} fork{s} refused",
            r.pids_max, r.forks_refused
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The end reason a limit gives a session: `memory_limit` over `pids_limit`.
pub fn reached_reason(r: &Reached) -> Option<&'static str> {
    if r.oom_kills > 0 {
        Some("memory_limit")
    } else if r.forks_refused > 0 {
        Some("pids_limit")
    } else {
        None
    }
}

/// What relay can use to bound sessions here, made at the daemon's start: the cgroup
/// folders, or why there are none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prepared {
    Cgroups(Cgroups),
    None(String),
}

impl Prepared {
    pub fn cgroups(&self) -> Option<&Cgroups> {
        match self {
            Prepared::Cgroups(c) => Some(c),
            Prepared::None(_) => None,
        }
    }

    pub fn why_none(&self) -> Option<&str> {
        match self {
            Prepared::Cgroups(_) => None,
            Prepared::None(why) => Some(why),
        }
    }
}

/// Makes relay's cgroup folder for this daemon (`pid`), where it can.
#[cfg(target_os = "linux")]
pub fn prepare(pid: u32) -> Prepared {
    match cgroup::prepare(pid) {
        Ok(c) => Prepared::Cgroups(c),
        Err(why) => Prepared::None(why),
    }
}

#[cfg(not(target_os = "linux"))]
pub fn prepare(_pid: u32) -> Prepared {
    Prepared::None("macOS has no cgroups".into())
}

/// Releases what [`prepare`] made when dropped: every way out of `relay serve`.
pub struct Releaser(pub Prepared);

impl Drop for Releaser {
    fn drop(&mut self) {
        release(&self.0);
    }
}

/// Removes what [`prepare`] made (the daemon's stop); a folder still in use stays.
pub fn release(p: &Prepared) {
    #[cfg(target_os = "linux")]
    if let Prepared::Cgroups(c) = p {
        cgroup::release(c);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = p;
}

/// A sandboxed session's cgroup, from its launch to its end (Linux; nothing elsewhere).
#[derive(Debug, Default)]
pub struct SessionGroup {
    #[cfg(target_os = "linux")]
    group: Option<cgroup::Group>,
    /// The shim's `cgroup.procs` files, made before the fork ([`enter`] allocates nothing).
    pub procs: Vec<std::ffi::CString>,
    /// Without a cgroup: `RLIMIT_DATA` for the shim and all it starts, in bytes.
    pub data_limit: Option<u64>,
}

impl SessionGroup {
    /// The session's cgroup under the daemon's folder, with its limits written; or,
    /// without a cgroup, the per-process memory limit. An error is the launch's.
    pub fn create(id: &str, limits: Option<&SessionLimits>) -> std::io::Result<SessionGroup> {
        let mut out = SessionGroup::default();
        let Some(l) = limits else {
            return Ok(out);
        };
        match &l.cgroup {
            #[cfg(target_os = "linux")]
            Some(c) => {
                let g = cgroup::Group::create(c, id, l)?;
                out.procs = g.procs_files();
                out.group = Some(g);
            }
            #[cfg(not(target_os = "linux"))]
            Some(_) => {
                let _ = id;
                return Err(std::io::Error::other("cgroups exist on Linux only"));
            }
            None if l.memory_max_mib > 0 => {
                out.data_limit = Some(l.memory_max_mib.saturating_mul(1 << 20));
            }
            None => {}
        }
        Ok(out)
    }

    /// At the session's end (blocking): what the kernel counted, when a limit was
    /// reached; then every process left in the cgroup is killed and its folder removed.
    pub fn finish(self) -> Option<Reached> {
        #[cfg(target_os = "linux")]
        if let Some(g) = self.group {
            let r = g.reached();
            g.remove();
            return reached_reason(&r).map(|_| r);
        }
        None
    }

    /// A launch that did not complete: the cgroup goes, with anything in it.
    pub fn abandon(self) {
        let _ = self.finish();
    }
}

/// Between fork and exec of the shim: join the session's cgroup, or set the memory
/// limit per process. Async-signal-safe: `open`, `write`, `close`, `setrlimit`.
pub fn enter(procs: &[std::ffi::CString], data_limit: Option<u64>) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    cgroup::join(procs)?;
    #[cfg(not(target_os = "linux"))]
    let _ = procs;
    if let Some(bytes) = data_limit {
        let lim = libc::rlimit {
            rlim_cur: bytes as libc::rlim_t,
            rlim_max: bytes as libc::rlim_t,
        };
        // Safety: setrlimit only reads `lim`, a plain struct on our stack.
        let failed = unsafe { libc::setrlimit(libc::RLIMIT_DATA, &lim) } != 0;
        // Linux fails the launch; elsewhere (macOS, whose allocator barely heeds it)
        // the limit is best effort and a refusal does not stop the session.
        if failed && cfg!(target_os = "linux") {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_cgroup_the_process_limit_is_said_not_to_hold() {
        let l = SessionLimits {
            pids_max: 64,
            memory_max_mib: 128,
            cpu_weight: 50,
            cgroup: None,
        };
        let (by, missing) = describe(&l, Some("cgroup v2 without pids"));
        assert_eq!(by, "rlimit");
        assert!(
            missing[0].contains("process limit 64: not in force"),
            "{missing:?}"
        );
        assert!(missing[1].contains("per process only"), "{missing:?}");
        assert_eq!(
            missing[2],
            "CPU weight 50: not in force (cgroup v2 without pids)"
        );
        let with = SessionLimits {
            cgroup: Some(Cgroups::V2 {
                parent: "/sys/fs/cgroup/x".into(),
                cpu: true,
            }),
            ..l.clone()
        };
        assert_eq!(describe(&with, None), ("cgroup_v2", vec![]));
        let none = SessionLimits {
            pids_max: 0,
            memory_max_mib: 0,
            cpu_weight: 0,
            cgroup: None,
        };
        assert_eq!(describe(&none, Some("x")), ("none", vec![]));
    }

    #[test]
    fn a_cgroup_without_the_cpu_controller_says_the_weight_does_not_hold() {
        let l = |cgroup| SessionLimits {
            pids_max: 64,
            memory_max_mib: 128,
            cpu_weight: 50,
            cgroup: Some(cgroup),
        };
        let v2 = l(Cgroups::V2 {
            parent: "/sys/fs/cgroup/x".into(),
            cpu: false,
        });
        assert_eq!(
            describe(&v2, None),
            (
                "cgroup_v2",
                vec![
                    "CPU weight 50: not in force (relay's cgroup v2 has no cpu controller \
                      delegated to it)"
                        .to_string()
                ]
            )
        );
        let v1 = l(Cgroups::V1 {
            pids: "/p".into(),
            memory: "/m".into(),
            cpu: None,
        });
        assert_eq!(describe(&v1, None).1.len(), 1);
        // No weight asked: nothing missing.
        let unweighted = SessionLimits {
            cpu_weight: 0,
            ..v1
        };
        assert_eq!(describe(&unweighted, None), ("cgroup_v1", vec![]));
    }

    #[test]
    fn a_limit_reached_is_said_in_words() {
        let mut r = Reached {
            pids_max: 64,
            memory_max_mib: 128,
            ..Default::default()
        };
        assert_eq!(reached_text(&r), None);
        r.forks_refused = 3;
        assert_eq!(reached_reason(&r), Some("pids_limit"));
        r.oom_kills = 1;
        assert_eq!(
            reached_text(&r).unwrap(),
            "memory limit 128 MiB reached: 1 process killed; process limit 64 reached: 3 forks refused"
        );
        assert_eq!(reached_reason(&r), Some("memory_limit"));
    }
}
