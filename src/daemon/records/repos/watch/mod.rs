//! The live watch: while a sandboxed session with write grants runs, its grants'
//! folders are watched (inotify on Linux, FSEvents on macOS), and a git folder whose
//! names change is looked at within a fraction of a second, as at the session's end: a
//! `config` or hooks the session changed since its launch are set aside at once
//! (docs/THREAT-MODEL.md#repositories-a-session-made-or-changed). Bounded: on Linux at
//! most [`MAX_WATCHES`] folders a session, shallowest first; past that, or past the
//! kernel's own limit, the end's search is what holds, and the log says so. FSEvents
//! watches a whole tree with one stream; where it drops events, the end's search is
//! what holds. A rebase's state and legacy remotes wait for the end (moving them would
//! break a rebase the session is in the middle of).

use std::collections::HashSet;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::daemon::{Daemon, Entry};

use super::{act, at, journal, Report};

#[cfg(target_os = "linux")]
mod inotify;
#[cfg(target_os = "linux")]
use inotify as source;
#[cfg(target_os = "macos")]
mod fsevents;
#[cfg(target_os = "macos")]
use fsevents as source;

/// Most folders one batch of changes names before the watch looks (the rest wait for
/// the end's search).
const MAX_DIRTY: usize = 4096;
/// Longest the watch lets changes that never pause wait before it looks.
const LONGEST: Duration = Duration::from_millis(300);
/// How long the watch waits for more changes before it looks (and how often it looks
/// whether its session still runs).
const TICK: Duration = Duration::from_millis(100);

/// One session's watch, while it runs.
pub struct Handle {
    stop: Arc<AtomicBool>,
    waker: source::Waker,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Handle {
    /// Stops the watch and waits for it: the end's search never runs beside it. The
    /// watch is woken, not waited out: a session's end (and `relay sandbox`'s return)
    /// never waits a [`TICK`] for it.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts the watch of `e`'s write grants, when it is a sandboxed session with some.
pub fn start(d: &Arc<Daemon>, e: &Entry) -> Option<Handle> {
    let r = &e.record;
    if !r.sandboxed || e.probe || r.reach.read_write.is_empty() {
        return None;
    }
    let (source, waker) = match source::Source::new(&r.id) {
        Ok(s) => s,
        Err(err) => {
            tracing::warn!(session = %r.id, "no live watch of its repositories: {err}");
            return None;
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let mut w = Watcher {
        source,
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
        waker,
        thread: Some(thread),
    })
}

struct Watcher {
    source: source::Source,
    d: Arc<Daemon>,
    entry: Entry,
    stop: Arc<AtomicBool>,
}

impl Watcher {
    fn run(&mut self) {
        let roots = super::roots(&super::grants_to_walk(&self.d, &self.entry));
        self.source.watch(&roots);
        let mut dirty: HashSet<PathBuf> = HashSet::new();
        let mut since: Option<std::time::Instant> = None;
        while !self.stop.load(Ordering::SeqCst) && self.running() {
            let got = self.source.wait_into(TICK, &mut dirty);
            if got {
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
                if !seen.insert(c.clone()) || !is_git(&c) || pinned(&r.reach, &c) {
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

/// Whether the launch pinned the git folder `dir`'s configuration or hooks: one the
/// person's repository had at launch. A change there is the person's own (the session
/// cannot write it), or, under bwrap, one the person's tool made by replacing a bound
/// file, which stops the session (`Daemon::check_held`); the session's end looks at it
/// either way. The live watch is for what the launch did not pin. Under bwrap a pin
/// holds the file that was there ([`Reach::held`]); Seatbelt keeps the path itself
/// read-only throughout ([`Reach::pins`]).
///
/// [`Reach::held`]: crate::daemon::session::Reach::held
/// [`Reach::pins`]: crate::daemon::session::Reach::pins
fn pinned(reach: &crate::daemon::session::Reach, dir: &Path) -> bool {
    let (config, hooks) = (dir.join("config"), dir.join("hooks"));
    let by_path = |p: &PathBuf| *p == config || *p == hooks;
    if cfg!(target_os = "linux") {
        reach.held.iter().any(|(p, _)| by_path(p))
    } else {
        reach.pins.iter().any(by_path)
    }
}

/// `path`, a change FSEvents names by its real path, as the grant of `roots` (each its
/// real path and the path the session's record names) holding it is named; none when
/// no grant holds it.
#[cfg(any(test, target_os = "macos"))]
fn as_granted(roots: &[(PathBuf, PathBuf)], path: &Path) -> Option<PathBuf> {
    roots.iter().find_map(|(real, given)| {
        if path.starts_with(given) {
            return Some(path.to_path_buf());
        }
        path.strip_prefix(real).ok().map(|rel| given.join(rel))
    })
}

/// Whether git would take `dir` for a git folder, by its names alone.
fn is_git(dir: &Path) -> bool {
    let has = |n: &str| std::fs::symlink_metadata(dir.join(n)).is_ok();
    has("HEAD") && ((has("objects") && has("refs")) || has("commondir"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_named_by_its_real_path_is_taken_back_to_the_grant_as_recorded() {
        let roots = [
            (PathBuf::from("/private/var/p"), PathBuf::from("/var/p")),
            (
                PathBuf::from("/Users/me/src"),
                PathBuf::from("/Users/me/src"),
            ),
        ];
        let got = |p: &str| as_granted(&roots, Path::new(p));
        assert_eq!(
            got("/private/var/p/lib/.git/config"),
            Some(PathBuf::from("/var/p/lib/.git/config"))
        );
        assert_eq!(got("/var/p/.git"), Some(PathBuf::from("/var/p/.git")));
        assert_eq!(got("/private/var/p"), Some(PathBuf::from("/var/p")));
        assert_eq!(
            got("/Users/me/src/a/.git/hooks/pre-commit"),
            Some(PathBuf::from("/Users/me/src/a/.git/hooks/pre-commit"))
        );
        // A name that only begins like a grant is not in it.
        assert_eq!(got("/private/var/pp/.git/config"), None);
        assert_eq!(got("/Users/me/other/.git"), None);
    }

    #[test]
    fn a_pin_of_config_or_hooks_marks_the_git_folder_the_launchs() {
        use crate::daemon::session::Reach;
        let git = Path::new("/p/.git");
        let mut reach = Reach::default();
        assert!(!pinned(&reach, git));
        let config = PathBuf::from("/p/.git/config");
        if cfg!(target_os = "linux") {
            reach.held.push((config, None));
        } else {
            reach.pins.push(config);
        }
        assert!(pinned(&reach, git));
        assert!(!pinned(&reach, Path::new("/p/lib/.git")));
    }
}
