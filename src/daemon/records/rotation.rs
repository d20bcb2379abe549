//! Token rotation: which token the file holds now, and what becomes of the sessions that
//! run on another one (docs/THREAT-MODEL.md, "A token that appears or changes"). The
//! token watcher (`Daemon::check_token`, every second) asks [`Watch::observe`]; the file
//! is read only when its `(dev, ino, size, mtime, ctime)` changed, and only its
//! fingerprint is kept.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::daemon::launch;
use crate::daemon::settings::{self, OnTokenChange};
use crate::daemon::{Daemon, EntryState};

/// What tells one version of the token file from another without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileKey {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

/// The key of what sits at `path` (never following a link): `Ok(None)` when nothing
/// does.
pub fn file_key(path: &Path) -> std::io::Result<Option<FileKey>> {
    match std::fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(FileKey {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The token the setting names, as the watcher last saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    /// A readable token, by its fingerprint.
    Token(String),
    /// No file at the path, or the setting is unset.
    Removed,
    /// Something relay would refuse to read (empty, a link, a FIFO, a second name…),
    /// or a path it cannot look at: nothing is decided until it changes again (an
    /// editor may be half-way through a save).
    Unknown,
}

/// The watcher's memory: the path, the key and what was found there last time.
#[derive(Default)]
pub struct Watch {
    last: Option<(PathBuf, Option<FileKey>, Observed)>,
}

impl Watch {
    /// Looks at the token file; reads it (with `read_token_file`, which refuses links,
    /// FIFOs and second names) only when its key changed since the last look.
    pub fn observe(&mut self, path: Option<&Path>) -> Observed {
        let Some(path) = path else {
            self.last = None;
            return Observed::Removed;
        };
        let key = match file_key(path) {
            Ok(k) => k,
            Err(_) => return Observed::Unknown,
        };
        if let Some((p, k, seen)) = &self.last {
            if p == path && *k == key {
                return seen.clone();
            }
        }
        let seen = match key {
            None => Observed::Removed,
            Some(_) => match crate::token::read_token_file(path) {
                Ok(t) => Observed::Token(crate::token::fingerprint(t.token.expose())),
                Err(_) => Observed::Unknown,
            },
        };
        self.last = Some((path.to_path_buf(), key, seen.clone()));
        seen
    }
}

/// What the watcher does to one running session that got the token.
#[derive(Debug, PartialEq, Eq)]
pub enum Action {
    /// Stop it, with this reason in its exit event and audit row.
    Stop(&'static str),
    /// Mark whether it runs on another token than the file's (`keep`).
    Stale(bool),
    Nothing,
}

/// For a session launched on `session` (its fingerprint) while the file holds `now`.
pub fn decide(session: Option<&str>, now: &Observed, on_change: OnTokenChange) -> Action {
    let current = match now {
        Observed::Token(fp) => Some(fp.as_str()),
        Observed::Removed => None,
        Observed::Unknown => return Action::Nothing,
    };
    let differs = session != current;
    match on_change {
        OnTokenChange::Keep => Action::Stale(differs),
        OnTokenChange::Stop if !differs => Action::Nothing,
        OnTokenChange::Stop if current.is_none() => Action::Stop("claude_token_removed"),
        OnTokenChange::Stop => Action::Stop("claude_token_replaced"),
    }
}

impl Daemon {
    /// One look at the token (the token watcher calls this every second). First
    /// exposure: stops, with reason `claude_token_changed`, every running sandboxed
    /// session that could now see a token it was not protected from — a session started
    /// before the setting named this path (and whose grants reach the token's folder),
    /// or one whose grants reach the token's folder when that folder was replaced since
    /// it started (a replaced folder is no longer under the session's mask). Then
    /// rotation: every running session that got the token and runs on another one than
    /// the file holds now is handled as `claude_token_on_change` says (`stop`: reason
    /// `claude_token_replaced`, or `claude_token_removed`; `keep`: marked `stale`).
    /// Exposure wins: a session it stops keeps `claude_token_changed`. Returns the ids
    /// it stopped.
    pub async fn check_token(&self) -> Vec<String> {
        let mut stopped = self.check_held().await;
        let Ok(settings) = settings::load(&self.paths.settings()) else {
            return stopped;
        };
        let settings = settings.settings;
        let Ok(token) = settings::token_file_path(&settings.claude_token_file, &self.home) else {
            return vec![];
        };
        let mut stop: Vec<(String, &'static str)> = Vec::new();
        if let Some(token) = &token {
            // The deepest part of the token's path that exists now: what a grant must
            // reach for the session to see the token or make its folder.
            let mut near = token.clone();
            while !near.exists() && near.pop() {}
            let near = std::fs::canonicalize(&near).unwrap_or(near);
            for e in self.live_sandboxed("") {
                let unprotected = e.reach.token_path.as_ref() != Some(token)
                    && e.reach.grants.iter().any(|g| near.starts_with(g));
                let unmasked = e
                    .reach
                    .token_folder
                    .as_ref()
                    .is_some_and(|(folder, id)| launch::guard::identity(folder) != *id);
                if (unprotected || unmasked) && e.state == EntryState::Running {
                    stop.push((e.id.clone(), "claude_token_changed"));
                }
            }
        }
        // Rotation: the file is read only when its key changed.
        let now = self
            .token_watch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .observe(token.as_deref());
        {
            let mut l = self.ledger();
            for e in l.values_mut() {
                if e.state != EntryState::Running
                    || !e.token_passed
                    || e.stop_reason.is_some()
                    || stop.iter().any(|(id, _)| *id == e.id)
                {
                    continue;
                }
                match decide(
                    e.token_fingerprint.as_deref(),
                    &now,
                    settings.claude_token_on_change,
                ) {
                    Action::Stop(reason) => stop.push((e.id.clone(), reason)),
                    Action::Stale(stale) => e.stale = stale,
                    Action::Nothing => {}
                }
            }
        }
        for (id, reason) in &stop {
            self.stop_for(id, reason).await;
        }
        stopped.extend(stop.into_iter().map(|(id, _)| id));
        stopped
    }

    /// Stops, with reason `pinned_path_replaced`, every running bwrap session one of
    /// whose read-only binds no longer holds what is at its path: the person's tool
    /// replaced the file by rename (`git config`, an editor) or removed it, and the new
    /// one is the session's to write (docs/THREAT-MODEL.md#what-the-persons-tools-run-later).
    pub async fn check_held(&self) -> Vec<String> {
        let mut stop = Vec::new();
        for e in self.live_sandboxed("") {
            if e.state != EntryState::Running {
                continue;
            }
            if let Some((path, _)) = e
                .reach
                .held
                .iter()
                .find(|(path, id)| launch::guard::identity(path) != *id)
            {
                tracing::warn!(
                    session = %e.id,
                    path = %path.display(),
                    "a read-only path was replaced outside the sandbox: the session is stopped"
                );
                stop.push(e.id.clone());
            }
        }
        for id in &stop {
            self.stop_for(id, "pinned_path_replaced").await;
        }
        stop
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    fn save(path: &Path, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    #[test]
    fn the_file_is_read_only_when_its_key_changes() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("token");
        let mut w = Watch::default();
        assert_eq!(w.observe(Some(&path)), Observed::Removed);
        save(&path, "first-token-0123456789\n");
        let first = Observed::Token(crate::token::fingerprint("first-token-0123456789"));
        assert_eq!(w.observe(Some(&path)), first);
        assert_eq!(w.observe(Some(&path)), first);
        // Replaced by rename: a new inode.
        let new = d.path().join(".token.new");
        save(&new, "second-token-0123456789\n");
        std::fs::rename(&new, &path).unwrap();
        let second = Observed::Token(crate::token::fingerprint("second-token-0123456789"));
        assert_eq!(w.observe(Some(&path)), second);
        // Half-saved (empty): nothing decided.
        save(&path, "");
        assert_eq!(w.observe(Some(&path)), Observed::Unknown);
        // A link is never followed.
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&new, &path).unwrap();
        assert_eq!(w.observe(Some(&path)), Observed::Unknown);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(w.observe(Some(&path)), Observed::Removed);
        assert_eq!(w.observe(None), Observed::Removed);
    }

    #[test]
    fn stop_replaced_or_removed_keep_marks_stale() {
        let a = Observed::Token("aaaaaaaaaaaa".into());
        let on = OnTokenChange::Stop;
        assert_eq!(decide(Some("aaaaaaaaaaaa"), &a, on), Action::Nothing);
        assert_eq!(
            decide(Some("bbbbbbbbbbbb"), &a, on),
            Action::Stop("claude_token_replaced")
        );
        assert_eq!(
            decide(Some("bbbbbbbbbbbb"), &Observed::Removed, on),
            Action::Stop("claude_token_removed")
        );
        assert_eq!(
            decide(Some("bbbbbbbbbbbb"), &Observed::Unknown, on),
            Action::Nothing
        );
        let keep = OnTokenChange::Keep;
        assert_eq!(decide(Some("bbbbbbbbbbbb"), &a, keep), Action::Stale(true));
        assert_eq!(decide(Some("aaaaaaaaaaaa"), &a, keep), Action::Stale(false));
        assert_eq!(
            decide(Some("aaaaaaaaaaaa"), &Observed::Removed, keep),
            Action::Stale(true)
        );
    }
}
