//! The live watch (Linux): while a sandboxed session with write grants runs, its
//! grants' folders are watched with inotify, and a git folder whose names change is
//! looked at within a fraction of a second, as at the session's end: a `config` or
//! hooks the session changed since its launch are set aside at once
//! (docs/THREAT-MODEL.md#repositories-a-session-made-or-changed). Bounded: at most
//! [`MAX_WATCHES`] folders a session, shallowest first; past that, or past the
//! kernel's own limit, the end's search is what holds, and the log says so. A rebase's
//! state and legacy remotes wait for the end (moving them would break a rebase the
//! session is in the middle of).

#[cfg(target_os = "linux")]
use std::collections::{HashMap, HashSet, VecDeque};
#[cfg(target_os = "linux")]
use std::ffi::CString;
#[cfg(target_os = "linux")]
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
#[cfg(target_os = "linux")]
use std::os::unix::ffi::OsStrExt;
#[cfg(target_os = "linux")]
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
#[cfg(target_os = "linux")]
use std::time::Duration;

use crate::daemon::{Daemon, Entry};

#[cfg(target_os = "linux")]
use super::{act, at, journal, Report};

/// Most folders one session's watch holds. The kernel's limit of watches is the
/// person's, shared with their editors' file watchers (8,192 in all on kernels before
/// 5.11): a session takes at most half of that.
#[cfg(target_os = "linux")]
pub const MAX_WATCHES: usize = 4096;
/// Longest the watch lets changes that never pause wait before it looks.
#[cfg(target_os = "linux")]
const LONGEST: Duration = Duration::from_millis(300);
/// How long the watch waits for more changes before it looks (and how often it checks
/// whether to stop).
#[cfg(target_os = "linux")]
const TICK: Duration = Duration::from_millis(100);

/// One session's watch, while it runs.
pub struct Handle {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Handle {
    /// Stops the watch and waits for it: the end's search never runs beside it.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// No live watch where there is no inotify: the end's search is what holds.
#[cfg(not(target_os = "linux"))]
pub fn start(_d: &Arc<Daemon>, _e: &Entry) -> Option<Handle> {
    None
}

/// Starts the watch of `e`'s write grants, when it is a sandboxed session with some.
#[cfg(target_os = "linux")]
pub fn start(d: &Arc<Daemon>, e: &Entry) -> Option<Handle> {
    let r = &e.record;
    if !r.sandboxed || e.probe || r.reach.read_write.is_empty() {
        return None;
    }
    // Safety: inotify_init1 takes flags only; the descriptor it returns is owned here.
    let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
    if fd < 0 {
        tracing::warn!(session = %r.id, "no live watch of its repositories: inotify: {}", std::io::Error::last_os_error());
        return None;
    }
    // Safety: `fd` was just returned by inotify_init1 and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let stop = Arc::new(AtomicBool::new(false));
    let mut w = Watcher {
        fd,
        dirs: HashMap::new(),
        full: false,
        d: d.clone(),
        entry: e.clone(),
        stop: stop.clone(),
    };
    let thread = std::thread::Builder::new()
        .name(format!("repos-watch-{}", r.id))
        .spawn(move || w.run())
        .ok()?;
    Some(Handle {
        stop,
        thread: Some(thread),
    })
}

#[cfg(target_os = "linux")]
struct Watcher {
    fd: OwnedFd,
    /// Each watch's folder.
    dirs: HashMap<i32, PathBuf>,
    /// [`MAX_WATCHES`] or the kernel's limit reached (said once).
    full: bool,
    d: Arc<Daemon>,
    entry: Entry,
    stop: Arc<AtomicBool>,
}

#[cfg(target_os = "linux")]
const MASK: u32 = libc::IN_CREATE
    | libc::IN_MOVED_TO
    | libc::IN_CLOSE_WRITE
    | libc::IN_ATTRIB
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_ONLYDIR
    | libc::IN_DONT_FOLLOW;

#[cfg(target_os = "linux")]
impl Watcher {
    fn run(&mut self) {
        for root in super::roots(&super::grants_to_walk(&self.d, &self.entry)) {
            self.add_tree(&root);
        }
        let mut dirty: HashSet<PathBuf> = HashSet::new();
        let mut since: Option<std::time::Instant> = None;
        while !self.stop.load(Ordering::SeqCst) && self.running() {
            let got = self.wait();
            if got {
                self.read_into(&mut dirty);
                since = since.or_else(|| Some(std::time::Instant::now()));
            }
            // More may follow at once (a `git init`): look once they pause, or after
            // [`LONGEST`] of changes that never pause (a build).
            let due = since.is_some_and(|t| !got || t.elapsed() >= LONGEST);
            if due && !dirty.is_empty() {
                let batch: Vec<PathBuf> = dirty.drain().collect();
                self.look(&batch);
                since = None;
            }
        }
    }

    /// Whether the session still runs (an end that came before the watch was kept
    /// stops it here).
    fn running(&self) -> bool {
        self.d
            .entry(&self.entry.record.id)
            .is_some_and(|e| e.record.state == crate::daemon::session::EntryState::Running)
    }

    /// Whether an event came within [`TICK`].
    fn wait(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // Safety: one pollfd, valid for the call.
        let n = unsafe { libc::poll(&mut p, 1, TICK.as_millis() as i32) };
        n > 0 && p.revents & libc::POLLIN != 0
    }

    /// The events waiting: each folder they happened in marked, and a folder made or
    /// moved in watched with what it holds.
    fn read_into(&mut self, dirty: &mut HashSet<PathBuf>) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // Safety: `buf` is valid for its length for the call.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                )
            };
            if n <= 0 {
                return;
            }
            let mut off = 0usize;
            let head = std::mem::size_of::<libc::inotify_event>();
            while off + head <= n as usize {
                // Safety: the kernel wrote a whole event at `off`; read unaligned.
                let ev: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(buf[off..].as_ptr() as *const _) };
                let name_bytes = &buf[off + head..off + head + ev.len as usize];
                let name = &name_bytes[..name_bytes
                    .iter()
                    .position(|&b| b == 0)
                    .unwrap_or(name_bytes.len())];
                off += head + ev.len as usize;
                let Some(dir) = self.dirs.get(&ev.wd).cloned() else {
                    continue;
                };
                if ev.mask & libc::IN_IGNORED != 0 {
                    self.dirs.remove(&ev.wd);
                    continue;
                }
                let is_dir = ev.mask & libc::IN_ISDIR != 0;
                if is_dir && ev.mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0 {
                    self.add_tree(&dir.join(at::os(name)));
                }
                if dirty.len() < MAX_WATCHES {
                    dirty.insert(dir);
                }
            }
        }
    }

    /// Watches `top` and the folders below it, shallowest first, no link followed,
    /// while the bound lasts.
    fn add_tree(&mut self, top: &Path) {
        let mut queue = VecDeque::from([top.to_path_buf()]);
        while let Some(dir) = queue.pop_front() {
            if self.dirs.len() >= MAX_WATCHES {
                self.said_full("its bound of folders");
                return;
            }
            let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
                continue;
            };
            // Safety: a NUL-terminated path valid for the call.
            let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), c.as_ptr(), MASK) };
            if wd < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSPC) {
                    self.said_full("the kernel's limit of watches");
                    return;
                }
                continue;
            }
            self.dirs.insert(wd, dir.clone());
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) && queue.len() < MAX_WATCHES {
                    queue.push_back(e.path());
                }
            }
        }
    }

    fn said_full(&mut self, what: &str) {
        if !self.full {
            self.full = true;
            tracing::info!(
                session = %self.entry.record.id,
                "the live watch of its repositories reached {what}: folders past it are looked at when it ends"
            );
        }
    }

    /// Each git folder among the folders changed, the git folders they hold, and the
    /// ones above them (a change in `hooks/`), looked at as at the end.
    fn look(&self, changed: &[PathBuf]) {
        let r = &self.entry.record;
        let ctx = act::Ctx {
            session: &r.id,
            stamp_ms: journal::now_ms(),
            created_ms: r.created_ms,
            held: &r.reach.held,
            pins: &r.reach.pins,
            live: true,
        };
        let roots = super::roots(&super::grants_to_walk(&self.d, &self.entry));
        let mut seen = HashSet::new();
        let mut report = Report::default();
        for dir in changed {
            let mut candidates = vec![dir.clone(), dir.join(".git")];
            if let Some(up) = dir.parent() {
                candidates.push(up.to_path_buf());
            }
            for c in candidates {
                if !seen.insert(c.clone()) || !is_git(&c) || pinned(&r.reach.held, &c) {
                    continue;
                }
                let Some((root, rel)) = roots.iter().find_map(|g| {
                    Some((g, c.strip_prefix(g).ok()?.as_os_str().as_bytes().to_vec()))
                }) else {
                    continue;
                };
                let Ok(open) = at::open_rel(root, &rel) else {
                    continue;
                };
                report.git_folders += 1;
                if let Some(set) = act::visit(&ctx, open.as_raw_fd(), &c, false) {
                    report.add(set);
                }
            }
        }
        if !report.repositories.is_empty() {
            super::tell(&self.d, &r.id, Some(&self.entry), report);
        }
    }
}

#[cfg(target_os = "linux")]
/// Whether the launch bound the git folder `dir`'s configuration or hooks read-only:
/// one the person's repository had at launch. A change there is the person's own (the
/// session cannot write through the bind), or one the person's tool made by replacing
/// a bound file, which stops the session (`Daemon::check_held`); the session's end
/// looks at it either way. The live watch is for what the launch did not pin.
fn pinned(held: &[(PathBuf, Option<(u64, u64)>)], dir: &Path) -> bool {
    held.iter()
        .any(|(p, _)| *p == dir.join("config") || *p == dir.join("hooks"))
}

#[cfg(target_os = "linux")]
/// Whether git would take `dir` for a git folder, by its names alone.
fn is_git(dir: &Path) -> bool {
    let has = |n: &str| std::fs::symlink_metadata(dir.join(n)).is_ok();
    has("HEAD") && ((has("objects") && has("refs")) || has("commondir"))
}
