//! Token rotation: which token the file holds now, and what becomes of the sessions that
//! run on another one (docs/THREAT-MODEL.md, "A token that appears or changes"). The
//! token watcher (`Daemon::check_token`, every second) asks [`Watch::observe`]; the file
//! is read only when its `(dev, ino, size, mtime, ctime)` changed, and only its
//! fingerprint is kept.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::daemon::plan;
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

/// The watcher's memory: for each configured token file, its key and what was found
/// there last time.
#[derive(Default)]
pub struct Watch {
    last: std::collections::HashMap<PathBuf, (Option<FileKey>, Observed)>,
}

impl Watch {
    /// Looks at one token file; reads it (with `read_token_file`, which refuses links,
    /// FIFOs and second names) only when its key changed since the last look.
    pub fn observe(&mut self, path: Option<&Path>) -> Observed {
        let Some(path) = path else {
            return Observed::Removed;
        };
        let key = match file_key(path) {
            Ok(k) => k,
            Err(_) => return Observed::Unknown,
        };
        if let Some((k, seen)) = self.last.get(path) {
            if *k == key {
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
        self.last.insert(path.to_path_buf(), (key, seen.clone()));
        seen
    }

    /// Forgets the files no longer configured.
    pub fn keep_only(&mut self, paths: &[&Path]) {
        self.last.retain(|p, _| paths.contains(&p.as_path()));
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

/// A session to stop: its id, the reason, the projects whose token file it was.
type Stop = (String, &'static str, Vec<String>);

impl Daemon {
    /// One look at every configured token file (the token watcher calls this every
    /// second). First exposure: stops, with reason `claude_token_changed`, every running
    /// sandboxed session that could now see a token it was not protected from — a
    /// session started before the settings named this path (and whose grants reach the
    /// token's folder), or one whose grants reach a token's folder when that folder was
    /// replaced since it started (a replaced folder is no longer under the session's
    /// mask). Then rotation: every running session that got a token and runs on another
    /// one than its project's file holds now is handled as `claude_token_on_change` says
    /// (`stop`: reason `claude_token_replaced`, or `claude_token_removed`; `keep`: marked
    /// `stale`). Every stop names the projects whose token file it was. Exposure wins: a
    /// session it stops keeps `claude_token_changed`. Returns the ids it stopped.
    pub async fn check_token(&self) -> Vec<String> {
        let mut stopped = self.check_held().await;
        let Ok(settings) = settings::load(&self.paths.settings()) else {
            return stopped;
        };
        let settings = settings.settings;
        // A bad value elsewhere refuses launches; every file that is a path is still
        // watched, and a session whose own project's value went bad is stopped below.
        let (tokens, _) = settings::every_token(&settings, &self.home);
        let mut stop = self.exposed(&tokens);
        // Rotation: each file is read only when its key changed.
        {
            let mut watch = self.token_watch.lock().unwrap_or_else(|p| p.into_inner());
            watch.keep_only(&tokens.iter().map(|t| t.path.as_path()).collect::<Vec<_>>());
            let mut l = self.ledger();
            for e in l.values_mut() {
                if e.record.state != EntryState::Running
                    || !e.record.token_passed
                    || e.stop_reason.is_some()
                    || stop.iter().any(|(id, ..)| *id == e.record.id)
                {
                    continue;
                }
                // A value that is no path names no token: as removed.
                let path =
                    settings::project_token_path(&settings, &e.record.project_id, &self.home)
                        .unwrap_or(None);
                let now = watch.observe(path.as_deref());
                let on_change = settings.claude_token_on_change;
                match decide(e.record.token_fingerprint.as_deref(), &now, on_change) {
                    Action::Stop(reason) => {
                        let file = path.as_ref().or(e.token_file.as_ref());
                        let projects = file
                            .and_then(|f| tokens.iter().find(|t| &t.path == f))
                            .map(|t| t.projects.clone())
                            .unwrap_or_else(|| vec![e.record.project_id.clone()]);
                        stop.push((e.record.id.clone(), reason, projects));
                    }
                    Action::Stale(stale) => e.stale = stale,
                    Action::Nothing => {}
                }
            }
        }
        for (id, reason, projects) in &stop {
            self.stop_for_token(id, reason, projects.clone()).await;
        }
        stopped.extend(stop.into_iter().map(|(id, ..)| id));
        stopped
    }

    /// The running sandboxed sessions one of `tokens` is exposed to, each with the
    /// projects whose token it is (`claude_token_changed`).
    fn exposed(&self, tokens: &[settings::ConfiguredToken]) -> Vec<Stop> {
        let mut stop: Vec<Stop> = Vec::new();
        let live: Vec<_> = self
            .live_sandboxed("")
            .into_iter()
            .filter(|e| e.record.state == EntryState::Running)
            .collect();
        for t in tokens {
            // The deepest part of the token's path that exists now: what a grant must
            // reach for the session to see the token or make its folder.
            let mut near = t.path.clone();
            while !near.exists() && near.pop() {}
            let near = std::fs::canonicalize(&near).unwrap_or(near);
            for e in &live {
                let unprotected = !e.record.reach.token_paths.contains(&t.path)
                    && e.record.reach.grants.iter().any(|g| near.starts_with(g));
                if unprotected && !stop.iter().any(|(id, ..)| *id == e.record.id) {
                    stop.push((
                        e.record.id.clone(),
                        "claude_token_changed",
                        t.projects.clone(),
                    ));
                }
            }
        }
        // A token's folder that only a mount hid, replaced since the launch: the new one
        // is not under the mask.
        for e in &live {
            let Some((folder, _)) = e
                .record
                .reach
                .token_folders
                .iter()
                .find(|(f, id)| plan::guard::identity(f) != *id)
            else {
                continue;
            };
            if stop.iter().any(|(id, ..)| *id == e.record.id) {
                continue;
            }
            let projects = tokens
                .iter()
                .filter(|t| {
                    t.path
                        .parent()
                        .and_then(|p| std::fs::canonicalize(p).ok())
                        .is_some_and(|p| &p == folder)
                })
                .flat_map(|t| t.projects.clone())
                .collect();
            stop.push((e.record.id.clone(), "claude_token_changed", projects));
        }
        stop
    }

    /// Stops, with reason `pinned_path_replaced`, every running bwrap session one of
    /// whose read-only binds no longer holds what is at its path: the person's tool
    /// replaced the file by rename (`git config`, an editor) or removed it, and the new
    /// one is the session's to write (docs/THREAT-MODEL.md#what-the-persons-tools-run-later).
    pub async fn check_held(&self) -> Vec<String> {
        let mut stop = Vec::new();
        for e in self.live_sandboxed("") {
            if e.record.state != EntryState::Running {
                continue;
            }
            if let Some((path, _)) = e
                .record
                .reach
                .held
                .iter()
                .find(|(path, id)| plan::guard::identity(path) != *id)
            {
                tracing::warn!(
                    session = %e.record.id,
                    path = %path.display(),
                    "a read-only path was replaced outside the sandbox: the session is stopped"
                );
                stop.push(e.record.id.clone());
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
    fn each_file_has_its_own_memory() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        save(&a, "token-of-work-0123456789\n");
        save(&b, "token-of-home-0123456789\n");
        let mut w = Watch::default();
        let fa = Observed::Token(crate::token::fingerprint("token-of-work-0123456789"));
        let fb = Observed::Token(crate::token::fingerprint("token-of-home-0123456789"));
        assert_eq!(w.observe(Some(&a)), fa);
        assert_eq!(w.observe(Some(&b)), fb);
        assert_eq!(w.observe(Some(&a)), fa, "b's look did not replace a's");
        w.keep_only(&[b.as_path()]);
        assert_eq!(w.last.len(), 1);
        assert!(w.last.contains_key(&b));
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
