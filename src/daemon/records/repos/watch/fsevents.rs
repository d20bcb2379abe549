//! The live watch's changes on macOS: one FSEvents stream a session over its write
//! grants, whole trees, no bound of folders. FSEvents names the real path of each change
//! (`/private/var/…` for `/var/…`): it is taken back to the grant as the session's
//! record names it. Where FSEvents says it dropped events, the end's search is what
//! holds (docs/THREAT-MODEL.md#repositories-a-session-made-or-changed).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::Duration;

use notify::{Config, Event, RecommendedWatcher, RecursiveMode, Watcher as _};

use super::MAX_DIRTY;

/// Wakes the watch's wait at once: a message on the channel it waits on.
pub struct Waker(Sender<notify::Result<Event>>);

impl Waker {
    pub fn wake(&self) {
        let _ = self.0.send(Err(notify::Error::generic("stop")));
    }
}

pub struct Source {
    watcher: RecommendedWatcher,
    events: Receiver<notify::Result<Event>>,
    /// Each grant watched: its real path, and the path the record names.
    roots: Vec<(PathBuf, PathBuf)>,
    /// FSEvents dropped events (said once).
    dropped: bool,
    session: String,
}

impl Source {
    pub fn new(session: &str) -> std::io::Result<(Source, Waker)> {
        let (tx, events) = channel();
        let waker = Waker(tx.clone());
        let watcher = RecommendedWatcher::new(tx, Config::default())
            .map_err(|e| std::io::Error::other(format!("FSEvents: {e}")))?;
        let source = Source {
            watcher,
            events,
            roots: Vec::new(),
            dropped: false,
            session: session.to_string(),
        };
        Ok((source, waker))
    }

    /// Watches each of `roots`, whole.
    pub fn watch(&mut self, roots: &[PathBuf]) {
        for root in roots {
            if let Err(e) = self.watcher.watch(root, RecursiveMode::Recursive) {
                tracing::warn!(session = %self.session, "no live watch of {}: {e}", root.display());
                continue;
            }
            let real = std::fs::canonicalize(root).unwrap_or_else(|_| root.clone());
            self.roots.push((real, root.clone()));
        }
    }

    /// Waits up to `tick` for changes: each changed path and its folder go into
    /// `dirty`. Whether any came.
    pub fn wait_into(&mut self, tick: Duration, dirty: &mut HashSet<PathBuf>) -> bool {
        let Ok(first) = self.events.recv_timeout(tick) else {
            return false;
        };
        self.take(first, dirty);
        while let Ok(more) = self.events.try_recv() {
            self.take(more, dirty);
        }
        true
    }

    fn take(&mut self, got: notify::Result<Event>, dirty: &mut HashSet<PathBuf>) {
        let ev = match got {
            Ok(ev) => ev,
            Err(e) => {
                tracing::debug!(session = %self.session, "live watch: {e}");
                return;
            }
        };
        if ev.need_rescan() && !self.dropped {
            self.dropped = true;
            tracing::info!(
                session = %self.session,
                "FSEvents dropped changes of its grants: what they hid is looked at when it ends"
            );
        }
        for path in &ev.paths {
            let Some(path) = super::as_granted(&self.roots, path) else {
                continue;
            };
            for p in [path.parent().map(Path::to_path_buf), Some(path.clone())]
                .into_iter()
                .flatten()
            {
                if dirty.len() < MAX_DIRTY {
                    dirty.insert(p);
                }
            }
        }
    }
}
