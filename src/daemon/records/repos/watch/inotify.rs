//! The live watch's changes on Linux: inotify, one watch a folder, at most
//! [`MAX_WATCHES`] a session, shallowest first, and new folders as they are made
//! (docs/THREAT-MODEL.md#repositories-a-session-made-or-changed).

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::super::at;
use super::MAX_DIRTY;

/// Most folders one session's watch holds. The kernel's limit of watches is the
/// person's, shared with their editors' file watchers (8,192 in all on kernels before
/// 5.11): a session takes at most half of that.
pub const MAX_WATCHES: usize = 4096;

const MASK: u32 = libc::IN_CREATE
    | libc::IN_MOVED_TO
    | libc::IN_CLOSE_WRITE
    | libc::IN_ATTRIB
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_ONLYDIR
    | libc::IN_DONT_FOLLOW;

/// Wakes the watch's wait at once: a byte on a pipe it polls beside inotify.
pub struct Waker(OwnedFd);

impl Waker {
    pub fn wake(&self) {
        // Safety: one byte from a valid buffer to a descriptor this owns.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
    }
}

pub struct Source {
    fd: OwnedFd,
    /// The read end of the [`Waker`]'s pipe.
    woken: OwnedFd,
    /// Each watch's folder.
    dirs: HashMap<i32, PathBuf>,
    /// [`MAX_WATCHES`] or the kernel's limit reached (said once).
    full: bool,
    session: String,
}

impl Source {
    pub fn new(session: &str) -> std::io::Result<(Source, Waker)> {
        // Safety: inotify_init1 takes flags only; the descriptor it returns is owned here.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::other(format!(
                "inotify: {}",
                std::io::Error::last_os_error()
            )));
        }
        // Safety: `fd` was just returned by inotify_init1 and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut pipe = [-1; 2];
        // Safety: pipe2 writes two descriptors into the array, owned here from then on.
        if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(std::io::Error::other(format!(
                "a pipe: {}",
                std::io::Error::last_os_error()
            )));
        }
        // Safety: both were just returned by pipe2 and are owned by nobody else.
        let (woken, wake) =
            unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
        let source = Source {
            fd,
            woken,
            dirs: HashMap::new(),
            full: false,
            session: session.to_string(),
        };
        Ok((source, Waker(wake)))
    }

    /// Watches each of `roots` and the folders below them.
    pub fn watch(&mut self, roots: &[PathBuf]) {
        for root in roots {
            self.add_tree(root, None);
        }
    }

    /// Waits up to `tick` for changes: the folders they happened in go into `dirty`,
    /// and a folder made or moved in is watched with what it holds. Whether any came.
    pub fn wait_into(&mut self, tick: Duration, dirty: &mut HashSet<PathBuf>) -> bool {
        let fd = |fd: &OwnedFd| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let mut p = [fd(&self.fd), fd(&self.woken)];
        // Safety: two pollfds, valid for the call.
        let n = unsafe { libc::poll(p.as_mut_ptr(), 2, tick.as_millis() as i32) };
        // Woken: the caller looks at why (it is told to stop) at once.
        let got = n > 0 && p[0].revents & libc::POLLIN != 0;
        if got {
            self.read_into(dirty);
        }
        got
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
                    // What was written in it before its watch was set made no event:
                    // each folder the watch takes on is looked at once.
                    self.add_tree(&dir.join(at::os(name)), Some(dirty));
                }
                if dirty.len() < MAX_DIRTY {
                    dirty.insert(dir);
                }
            }
        }
    }

    /// Watches `top` and the folders below it, shallowest first, no link followed,
    /// while the bound lasts; each one watched goes into `dirty` when given.
    fn add_tree(&mut self, top: &Path, mut dirty: Option<&mut HashSet<PathBuf>>) {
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
            if let Some(dirty) = dirty.as_deref_mut() {
                if dirty.len() < MAX_DIRTY {
                    dirty.insert(dir.clone());
                }
            }
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
                session = %self.session,
                "the live watch of its repositories reached {what}: folders past it are looked at when it ends"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_made_with_what_it_holds_before_its_watch_is_looked_at_whole() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let (mut s, _waker) = Source::new("t-1").unwrap();
        s.watch(std::slice::from_ref(&root));
        // All of it is there before the watch reads the one event it made (the
        // folder's creation in `root`): nothing inside `vendor` made an event.
        let git = root.join("vendor/lib/.git");
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        std::fs::write(git.join("config"), "[core]\n\tfsmonitor = x\n").unwrap();
        let mut dirty = HashSet::new();
        assert!(s.wait_into(Duration::from_secs(5), &mut dirty));
        for d in [
            root.clone(),
            root.join("vendor"),
            root.join("vendor/lib"),
            git.clone(),
            git.join("hooks"),
        ] {
            assert!(
                dirty.contains(&d),
                "{} not looked at: {dirty:?}",
                d.display()
            );
        }
        // And the folders are watched from now on.
        dirty.clear();
        std::fs::write(git.join("hooks/pre-commit"), "x").unwrap();
        assert!(s.wait_into(Duration::from_secs(5), &mut dirty));
        assert!(dirty.contains(&git.join("hooks")), "{dirty:?}");
    }

    #[test]
    fn the_first_watch_takes_every_folder_and_looks_at_none() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        for i in 0..3 {
            std::fs::create_dir_all(root.join(format!("d{i}/e"))).unwrap();
        }
        let (mut s, waker) = Source::new("t-1").unwrap();
        s.watch(std::slice::from_ref(&root));
        assert_eq!(s.dirs.len(), 7);
        // Woken, the wait ends long before its tick, with nothing.
        waker.wake();
        let t = std::time::Instant::now();
        assert!(!s.wait_into(Duration::from_secs(30), &mut HashSet::new()));
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        let mut dirty = HashSet::new();
        assert!(!s.wait_into(Duration::from_millis(10), &mut dirty));
        assert!(dirty.is_empty());
    }
}
