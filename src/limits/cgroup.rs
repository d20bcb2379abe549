//! Linux cgroups for sessions: the daemon's folder ([`prepare`]), one folder per
//! sandboxed session under it ([`Group`]), the shim's join between fork and exec
//! ([`join`]), and what the kernel counted at the end ([`Group::reached`]).
//!
//! Which cgroup relay uses, in order (docs/session-host.md#limits-on-processes-and-memory):
//! 1. cgroup v2, when relay's own cgroup offers `memory` and `pids`: at the root of a
//!    hierarchy (a container's own) relay makes `relay-<ns>-<pid>` beside itself;
//!    elsewhere (a systemd unit with `Delegate=`, as `relay service install` writes) it
//!    must be the only process there, moves itself into `daemon/` (a cgroup with
//!    processes cannot give controllers to its children) and makes `relay-<ns>-<pid>`.
//! 2. cgroup v1, when relay can write in its own `pids` and `memory` hierarchies (as
//!    root): `relay-<ns>-<pid>` in each, under relay's own cgroup, so whatever bounds
//!    relay bounds its sessions too.
//!
//! The `cpu` controller is taken where it is offered (v2: in relay's cgroup; v1: a
//! `cpu` hierarchy relay can write) and never required: without it a session's CPU
//! weight is said not to hold ([`super::describe`]).
//!
//! `<ns>` is relay's pid namespace, `<pid>` its pid. At its start relay sweeps what a
//! relay of its namespace that died left: the processes the kernel lists in those
//! folders are killed and the folders removed ([`sweep`]).
//!
//! The folder holds only relay's sessions; a session's own folder is named after its
//! id and removed at its end, after every process left in it is killed: the kernel
//! says which processes are the session's, never a name.

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};

use crate::protocol::{Cgroups, Reached, SessionLimits};

/// One line of `/proc/self/mountinfo` that mounts a cgroup hierarchy.
#[derive(Debug, PartialEq, Eq)]
struct Mount {
    /// The hierarchy's folder shown at the mount point (`/` unless a namespace hides
    /// the rest).
    root: String,
    point: PathBuf,
    v2: bool,
    /// v1: the controllers it holds (its super options).
    controllers: Vec<String>,
}

fn mounts(mountinfo: &str) -> Vec<Mount> {
    let mut out = vec![];
    for line in mountinfo.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let pre: Vec<&str> = pre.split(' ').collect();
        let post: Vec<&str> = post.split(' ').collect();
        if pre.len() < 5 || post.len() < 3 {
            continue;
        }
        let v2 = match post[0] {
            "cgroup2" => true,
            "cgroup" => false,
            _ => continue,
        };
        out.push(Mount {
            root: unescape(pre[3]),
            point: PathBuf::from(unescape(pre[4])),
            v2,
            controllers: post[2].split(',').map(str::to_string).collect(),
        });
    }
    out
}

/// mountinfo writes a space, a tab, a newline and a backslash as octal escapes.
fn unescape(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// The folder of the cgroup `path` (as `/proc/self/cgroup` gives it) under `m`.
fn dir_of(m: &Mount, path: &str) -> Option<PathBuf> {
    let rel = if m.root == "/" {
        path
    } else {
        path.strip_prefix(m.root.as_str())?
    };
    let rel = rel.trim_start_matches('/');
    if rel.split('/').any(|c| c == "..") {
        return None;
    }
    Some(if rel.is_empty() {
        m.point.clone()
    } else {
        m.point.join(rel)
    })
}

/// Where relay's own cgroups are: the v2 folder (and whether it is its hierarchy's
/// root), and the v1 `pids`, `memory` and `cpu` folders.
#[derive(Debug, Default, PartialEq, Eq)]
struct Own {
    v2: Option<(PathBuf, bool)>,
    pids: Option<PathBuf>,
    memory: Option<PathBuf>,
    cpu: Option<PathBuf>,
}

fn own(proc_cgroup: &str, mountinfo: &str) -> Own {
    let ms = mounts(mountinfo);
    let mut out = Own::default();
    for line in proc_cgroup.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(ctrl), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if ctrl.is_empty() {
            if let Some(m) = ms.iter().find(|m| m.v2) {
                out.v2 = dir_of(m, path).map(|d| {
                    let root = d == m.point;
                    (d, root)
                });
            }
            continue;
        }
        for c in ctrl.split(',') {
            let Some(m) = ms
                .iter()
                .find(|m| !m.v2 && m.controllers.iter().any(|x| x == c))
            else {
                continue;
            };
            match c {
                "pids" => out.pids = dir_of(m, path),
                "memory" => out.memory = dir_of(m, path),
                "cpu" => out.cpu = dir_of(m, path),
                _ => {}
            }
        }
    }
    out
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    std::fs::write(path, value)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

fn make_dir(path: &Path) -> io::Result<()> {
    match std::fs::create_dir(path) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
            Err(io::Error::new(e.kind(), format!("{}: {e}", path.display())))
        }
        _ => Ok(()),
    }
}

/// Whether the controller list `file` of `dir` names each of `wanted`.
fn has_controllers(dir: &Path, file: &str, wanted: &[&str]) -> bool {
    std::fs::read_to_string(dir.join(file)).is_ok_and(|t| {
        let words: Vec<&str> = t.split_whitespace().collect();
        wanted.iter().all(|w| words.contains(w))
    })
}

/// Enables `memory` and `pids` for `dir`'s children, and `cpu` when `cpu` is true and
/// the kernel takes it: whether `cpu` is enabled.
fn enable(dir: &Path, cpu: bool) -> io::Result<bool> {
    let file = dir.join("cgroup.subtree_control");
    if !has_controllers(dir, "cgroup.subtree_control", &["memory", "pids"]) {
        write(&file, "+memory +pids")?;
    }
    Ok(cpu
        && (has_controllers(dir, "cgroup.subtree_control", &["cpu"])
            || write(&file, "+cpu").is_ok()))
}

/// Makes this daemon's (`pid`) folder for its sessions, or says why there is none.
pub fn prepare(pid: u32) -> Result<Cgroups, String> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let own = own(&read("/proc/self/cgroup"), &read("/proc/self/mountinfo"));
    let name = format!("{}{pid}", prefix());
    let mut why = vec![];
    if let Some((dir, root)) = &own.v2 {
        if has_controllers(dir, "cgroup.controllers", &["memory", "pids"]) {
            let cpu = has_controllers(dir, "cgroup.controllers", &["cpu"]);
            match prepare_v2(dir, *root, pid, &name, cpu) {
                Ok((parent, cpu)) => return Ok(Cgroups::V2 { parent, cpu }),
                Err(e) => why.push(format!("cgroup v2: {e}")),
            }
        } else {
            why.push(format!(
                "cgroup v2 {}: no memory and pids controllers delegated",
                dir.display()
            ));
        }
    }
    if let (Some(p), Some(m)) = (&own.pids, &own.memory) {
        sweep(p, pid, false);
        sweep(m, pid, false);
        let (pids, memory) = (p.join(&name), m.join(&name));
        match make_dir(&pids).and_then(|_| make_dir(&memory)) {
            Ok(()) => {
                let cpu = own.cpu.as_ref().and_then(|c| {
                    sweep(c, pid, false);
                    let d = c.join(&name);
                    make_dir(&d).ok().map(|_| d)
                });
                return Ok(Cgroups::V1 { pids, memory, cpu });
            }
            Err(e) => {
                let _ = std::fs::remove_dir(&pids);
                why.push(format!("cgroup v1: {e}"));
            }
        }
    }
    if why.is_empty() {
        why.push("no cgroup hierarchy with memory and pids".into());
    }
    Err(why.join("; "))
}

/// The v2 folder for this daemon's sessions, and whether `cpu` is enabled in it.
fn prepare_v2(
    own: &Path,
    root: bool,
    pid: u32,
    name: &str,
    cpu: bool,
) -> io::Result<(PathBuf, bool)> {
    if !root {
        let procs = std::fs::read_to_string(own.join("cgroup.procs"))?;
        let others = procs
            .split_whitespace()
            .filter(|p| *p != pid.to_string())
            .count();
        if others > 0 {
            return Err(io::Error::other(format!(
                "{} holds {others} other process(es); run relay as its service \
                 (`relay service install`), whose cgroup is delegated to it",
                own.display()
            )));
        }
        let daemon = own.join("daemon");
        make_dir(&daemon)?;
        write(&daemon.join("cgroup.procs"), &pid.to_string())?;
    }
    let cpu = enable(own, cpu)?;
    sweep(own, pid, true);
    let parent = own.join(name);
    make_dir(&parent)?;
    let cpu = enable(&parent, cpu)?;
    Ok((parent, cpu))
}

/// The start of this relay's folder's name: `relay-<pid namespace>-`, then its pid. A
/// pid means something only in its namespace, and a cgroup v1 hierarchy can be shared
/// by containers: a relay sweeps only the folders of its own namespace.
fn prefix() -> String {
    let ns = std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|l| {
            let l = l.to_string_lossy().into_owned();
            let ino = l.strip_prefix("pid:[")?.strip_suffix(']')?.to_string();
            Some(ino)
        })
        .unwrap_or_else(|| "0".into());
    format!("relay-{ns}-")
}

/// What a relay that died left in `parent`: each folder of this pid namespace whose
/// relay is gone (no process `<pid>`; one whose pid was taken again is left), its
/// sessions' processes killed (the kernel lists them) and its folders removed.
fn sweep(parent: &Path, own_pid: u32, v2: bool) {
    let prefix = prefix();
    let Ok(rd) = std::fs::read_dir(parent) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(prefix.as_str()))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == own_pid || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let dir = e.path();
        if let Ok(sessions) = std::fs::read_dir(&dir) {
            for s in sessions.flatten().filter(|s| s.path().is_dir()) {
                empty_and_remove(&s.path(), v2);
            }
        }
        let _ = std::fs::remove_dir(&dir);
    }
}

/// Kills every process the kernel lists in the cgroup `d`, then removes it. Bounded: a
/// folder still busy after about two seconds is left (empty folders cost nothing).
fn empty_and_remove(d: &Path, v2: bool) {
    if v2 {
        let _ = std::fs::write(d.join("cgroup.kill"), "1");
    }
    for round in 0..200u32 {
        if std::fs::remove_dir(d).is_ok() {
            return;
        }
        let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
        for pid in procs
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            // Safety: kill(2) with a pid the kernel listed in a session's own cgroup;
            // no memory is passed.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        // A killed process leaves its cgroup once it is reaped.
        std::thread::sleep(std::time::Duration::from_millis(u64::from(round.min(10))));
    }
}

/// Removes the daemon's folders at its stop; one still holding a session stays.
pub fn release(c: &Cgroups) {
    match c {
        Cgroups::V2 { parent, .. } => {
            let _ = std::fs::remove_dir(parent);
        }
        Cgroups::V1 { pids, memory, cpu } => {
            for d in [Some(pids), Some(memory), cpu.as_ref()]
                .into_iter()
                .flatten()
            {
                let _ = std::fs::remove_dir(d);
            }
        }
    }
}

/// One session's cgroup: a folder per hierarchy (one on v2; `pids`, `memory` and, where
/// relay has it, `cpu` on v1).
#[derive(Debug)]
pub struct Group {
    v2: bool,
    /// `pids` first, then `memory` (v1), then `cpu` (v1, where there is one).
    dirs: Vec<PathBuf>,
    /// Where the CPU weight is written; none without a `cpu` controller.
    cpu: Option<PathBuf>,
    limits: (u32, u64),
}

/// cgroup v1's `cpu.shares` for a v2 `cpu.weight`: the default weight 100 is the default
/// 1024 shares; never below the kernel's least, 2.
pub fn shares(weight: u32) -> u64 {
    (u64::from(weight) * 1024 / 100).max(2)
}

impl Group {
    /// Makes the session's folder(s) under `c` and writes its limits.
    pub fn create(c: &Cgroups, id: &str, l: &SessionLimits) -> io::Result<Group> {
        if id.is_empty() || id.contains('/') || id.starts_with('.') {
            return Err(io::Error::other(format!(
                "session id {id:?} as a cgroup name"
            )));
        }
        let limits = (l.pids_max, l.memory_max_mib);
        let g = match c {
            Cgroups::V2 { parent, cpu } => Group {
                v2: true,
                dirs: vec![parent.join(id)],
                cpu: cpu.then(|| parent.join(id)),
                limits,
            },
            Cgroups::V1 { pids, memory, cpu } => {
                let cpu = cpu.as_ref().map(|c| c.join(id));
                let mut dirs = vec![pids.join(id), memory.join(id)];
                dirs.extend(cpu.clone());
                Group {
                    v2: false,
                    dirs,
                    cpu,
                    limits,
                }
            }
        };
        for d in &g.dirs {
            make_dir(d)?;
        }
        if let Err(e) = g.write_limits(l) {
            g.remove();
            return Err(e);
        }
        Ok(g)
    }

    /// The folder of the `memory` controller.
    fn memory_dir(&self) -> &Path {
        &self.dirs[if self.v2 { 0 } else { 1 }]
    }

    fn write_limits(&self, l: &SessionLimits) -> io::Result<()> {
        let set = |file: &str, v: &str, dir: &Path| write(&dir.join(file), v);
        let (pdir, mdir) = (&self.dirs[0], self.memory_dir());
        if l.pids_max > 0 {
            set("pids.max", &l.pids_max.to_string(), pdir)?;
        }
        if l.memory_max_mib > 0 {
            let bytes = (l.memory_max_mib.saturating_mul(1 << 20)).to_string();
            if self.v2 {
                set("memory.max", &bytes, mdir)?;
                // A hog reaches its limit, not the swap: best effort, absent without
                // swap accounting.
                let _ = set("memory.swap.max", "0", mdir);
            } else {
                set("memory.limit_in_bytes", &bytes, mdir)?;
                let _ = set("memory.memsw.limit_in_bytes", &bytes, mdir);
            }
        }
        match &self.cpu {
            Some(cdir) if l.cpu_weight > 0 && self.v2 => {
                set("cpu.weight", &l.cpu_weight.to_string(), cdir)?;
            }
            Some(cdir) if l.cpu_weight > 0 => {
                set("cpu.shares", &shares(l.cpu_weight).to_string(), cdir)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// The `cgroup.procs` files the shim writes itself into ([`join`]).
    pub fn procs_files(&self) -> Vec<CString> {
        self.dirs
            .iter()
            .filter_map(|d| {
                use std::os::unix::ffi::OsStrExt;
                CString::new(d.join("cgroup.procs").as_os_str().as_bytes()).ok()
            })
            .collect()
    }

    /// What the kernel counted: OOM kills and refused forks.
    pub fn reached(&self) -> Reached {
        let count = |file: PathBuf, key: &str| -> u64 {
            std::fs::read_to_string(file)
                .unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
                .unwrap_or(0)
        };
        let (pdir, mdir) = (&self.dirs[0], self.memory_dir());
        let oom = if self.v2 {
            count(mdir.join("memory.events"), "oom_kill ")
        } else {
            count(mdir.join("memory.oom_control"), "oom_kill ")
        };
        Reached {
            pids_max: self.limits.0,
            memory_max_mib: self.limits.1,
            oom_kills: oom,
            forks_refused: count(pdir.join("pids.events"), "max "),
        }
    }

    /// Kills every process still in the session's cgroup, then removes its folders.
    pub fn remove(&self) {
        for d in &self.dirs {
            empty_and_remove(d, self.v2);
        }
    }
}

/// Between fork and exec: the calling process joins each cgroup (`"0"` is the writer
/// itself). Only `open`, `write` and `close`: async-signal-safe, no allocation.
pub fn join(procs: &[CString]) -> io::Result<()> {
    for p in procs {
        // Safety: `p` is a NUL-terminated path that outlives the call; the buffer is a
        // static one-byte string.
        unsafe {
            let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let n = libc::write(fd, b"0".as_ptr().cast(), 1);
            let err = io::Error::last_os_error();
            libc::close(fd);
            if n != 1 {
                return Err(err);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_MOUNTS: &str = "\
30 24 0:26 / /sys/fs/cgroup/unified rw,relatime shared:5 - cgroup2 cgroup2 rw
31 24 0:27 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
32 24 0:28 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
33 24 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
";

    #[test]
    fn a_hybrid_machine_gives_the_v1_pids_and_memory_folders() {
        let cg = "8:pids:/\n4:memory:/process_api/61e8\n1:cpu,cpuacct:/\n0::/\n";
        let o = own(cg, HYBRID_MOUNTS);
        assert_eq!(o.pids, Some(PathBuf::from("/sys/fs/cgroup/pids")));
        assert_eq!(
            o.memory,
            Some(PathBuf::from("/sys/fs/cgroup/memory/process_api/61e8"))
        );
        assert_eq!(o.v2, Some((PathBuf::from("/sys/fs/cgroup/unified"), true)));
    }

    #[test]
    fn a_v2_machine_gives_the_own_folder_below_a_namespace_root() {
        let mi = "40 30 0:30 /user.slice /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let cg = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/relay.service\n";
        let o = own(cg, mi);
        assert_eq!(
            o.v2,
            Some((
                PathBuf::from(
                    "/sys/fs/cgroup/user-1000.slice/user@1000.service/app.slice/relay.service"
                ),
                false
            ))
        );
        assert_eq!(o.pids, None);
        // Outside the mount's root, or climbing out of it: no folder.
        assert_eq!(own("0::/system.slice/x\n", mi).v2, None);
        assert_eq!(own("0::/user.slice/../x\n", mi).v2, None);
    }

    #[test]
    fn a_hybrid_machine_gives_its_v1_cpu_folder_too() {
        let cg = "8:pids:/\n4:memory:/\n1:cpu,cpuacct:/user.slice\n0::/\n";
        let o = own(cg, HYBRID_MOUNTS);
        assert_eq!(
            o.cpu,
            Some(PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/user.slice"))
        );
    }

    #[test]
    fn a_cpu_weight_is_v1_shares_scaled_from_the_default() {
        assert_eq!(shares(100), 1024);
        assert_eq!(shares(50), 512);
        assert_eq!(shares(10000), 102_400);
        // The kernel's least is 2.
        assert_eq!(shares(1), 10);
        assert_eq!(shares(0), 2);
    }

    #[test]
    fn mount_points_with_spaces_are_unescaped() {
        let mi = "1 2 0:3 / /a\\040b rw - cgroup cgroup rw,pids\n";
        assert_eq!(mounts(mi)[0].point, PathBuf::from("/a b"));
    }
}
