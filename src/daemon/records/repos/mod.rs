//! Repositories a session made or changed, neutralized once it ended: at its end, before
//! anyone is told it ended, and at relay's next start for a session that was running
//! when relay died (docs/THREAT-MODEL.md#repositories-a-session-made-or-changed).
//!
//! 1. **Which repositories**: every git folder under the session's read-write grants
//!    ([`find`]: one bounded walk per grant that follows no link).
//! 2. **Which of them**: those whose `config`, `config.worktree`, `hooks/` or an entry
//!    of it changed (its ctime, which no process can set back) at or after the
//!    session's launch; or that a `.git` file the session made names. A file the launch
//!    bound read-only and that is still the one it bound is not the session's
//!    ([`act::Ctx`]).
//! 3. **What**: in each configuration file that changed, every entry but the inert
//!    ones of an allowlist ([`allow`]), each include among them; when the hooks did,
//!    every hook but git's samples; moved into
//!    `<git folder>/relay-set-aside/<session id>-<unix ms>/` ([`act`]). Never deleted.
//! 4. **Told**: one `repository_set_aside` audit row and event per session end that set
//!    something aside or could not look everywhere.

mod act;
mod allow;
mod at;
mod config;
mod find;
mod pending;
pub(in crate::daemon) mod watch;

use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::daemon::records::journal::{self, AuditRow, Event};
use crate::daemon::{Daemon, Entry};
use crate::tree::Limits;
use crate::wire::{Outcome, SetAside, REPOSITORY_SET_ASIDE, REPOSITORY_SET_ASIDE_EVENT};

pub use pending::Pending;

/// How far one session's search goes.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub limits: Limits,
    pub time: Duration,
}

impl Bounds {
    /// The walks of `src/tree.rs` over what a session could write (depth and entries),
    /// and 30 s in all: the walks and everything after them.
    pub const SESSION: Bounds = Bounds {
        limits: Limits::SESSION,
        time: Duration::from_secs(30),
    };
}

/// One session, as the search needs it.
pub struct Session<'a> {
    pub id: &'a str,
    /// Its launch (ms since the epoch).
    pub created_ms: u64,
    pub read_write: &'a [PathBuf],
    pub held: &'a [(PathBuf, Option<(u64, u64)>)],
    pub pins: &'a [PathBuf],
}

/// What one session's search did. Bounded whatever the session planted: the first
/// [`MAX_LISTED`] repositories set aside, the rest counted; what it did not finish as
/// a few notes ([`find::Unfinished`]).
#[derive(Debug, Default)]
pub struct Report {
    pub repositories: Vec<SetAside>,
    /// Repositories set aside past [`MAX_LISTED`].
    pub more: usize,
    /// A repository could not be wholly set aside.
    pub problems: bool,
    pub unfinished: find::Unfinished,
    /// Folders a session had made unreadable that were given back their owner's `r-x`.
    pub unlocked: (usize, Vec<String>),
    pub git_folders: usize,
    pub entries: u64,
    pub ms: u64,
}

impl Report {
    fn add(&mut self, s: SetAside) {
        self.problems |= s.problem.is_some();
        if self.repositories.len() < MAX_LISTED {
            self.repositories.push(capped(s));
        } else {
            self.more += 1;
        }
    }

    /// What the row says went wrong or was left, in words.
    fn notes(&self) -> Vec<String> {
        let mut notes = self.unfinished.said();
        let (n, examples) = &self.unlocked;
        if *n > 0 {
            notes.push(format!(
                "{n} folder{} the session had made unreadable given back their owner's \
                 read and search (u+rx) to be looked at: {}{}",
                if *n == 1 { "" } else { "s" },
                examples.join(", "),
                if *n > examples.len() { ", …" } else { "" }
            ));
        }
        if self.problems {
            notes.push("a repository could not be wholly set aside (its problem is listed)".into());
        }
        if self.more > 0 {
            notes.push(format!(
                "{} more repositories set aside, not listed",
                self.more
            ));
        }
        notes
    }
}

/// Finds the git folders under `s`'s read-write grants and sets aside what `s` planted
/// in them: the walks and what follows them all under one deadline.
pub fn run(s: &Session, bounds: Bounds) -> Report {
    let started = Instant::now();
    let deadline = started + bounds.time;
    let roots = roots(s.read_write);
    let ctx = act::Ctx {
        session: s.id,
        stamp_ms: journal::now_ms(),
        created_ms: s.created_ms,
        held: s.held,
        pins: s.pins,
        live: false,
    };
    let mut report = Report::default();
    let mut visit = |fd: RawFd, path: &Path, named_anew: bool| {
        report.git_folders += 1;
        if let Some(set) = act::visit(&ctx, fd, path, named_anew) {
            report.add(set);
        }
    };
    let mut walked = find::walk(&roots, bounds.limits, deadline, s.created_ms, &mut visit);
    let when = (deadline, s.created_ms);
    find::probe(&roots, &walked.probes, when, &mut walked.named, &mut visit);
    find::follow(
        &roots,
        &mut walked.named,
        deadline,
        s.created_ms,
        &mut walked.unfinished,
        &mut visit,
    );
    report.unfinished = walked.unfinished;
    report.unlocked = walked.unlocked;
    report.entries = walked.entries;
    report.ms = started.elapsed().as_millis() as u64;
    report
}

/// The grants to walk: folders that are there (not links), none inside another.
fn roots(read_write: &[PathBuf]) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = read_write
        .iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()))
        .cloned()
        .collect();
    v.sort();
    v.dedup();
    let all = v.clone();
    v.retain(|p| !all.iter().any(|q| q != p && p.starts_with(q)));
    v
}

/// The write grants of `e` the search and the live watch walk: all but the session's
/// own temp folder, which is relay's (no tool of the person's runs git there) and goes
/// with the session, however much it holds.
pub(super) fn grants_to_walk(d: &Daemon, e: &Entry) -> Vec<PathBuf> {
    let name = format!("relay-{}", e.record.id);
    let own = [d.tmp.join(&name), d.tmp_real.join(&name)];
    e.record
        .reach
        .read_write
        .iter()
        .filter(|p| !own.iter().any(|o| p.starts_with(o)))
        .cloned()
        .collect()
}

/// At the end of `e` (exited, stopped, its host gone, or ended at relay's start): its
/// repositories neutralized, and the person told. Before its end is written or said.
pub(in crate::daemon) fn at_end(d: &Daemon, e: &Entry) {
    let r = &e.record;
    let watch = d
        .repo_watches
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&r.id);
    if let Some(w) = watch {
        w.stop();
    }
    if !r.sandboxed || e.probe || r.reach.read_write.is_empty() {
        return;
    }
    let dir = pending::dir(d.store.dir());
    // A search of it a relay died in is on file: this is one more.
    let attempts = pending::read(&dir, &r.id).map_or(0, |p| p.attempts);
    let p = Pending {
        id: r.id.clone(),
        created_ms: r.created_ms,
        read_write: grants_to_walk(d, e),
        pins: r.reach.pins.clone(),
        attempts,
        ..Default::default()
    };
    search(d, p, (&r.reach.held, Some(e)), Bounds::SESSION);
}

/// Once `e` runs: the live watch of its write grants (Linux), kept until its end.
pub(in crate::daemon) fn watching(d: &std::sync::Arc<Daemon>, e: &Entry) {
    if let Some(h) = watch::start(d, e) {
        d.repo_watches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(e.record.id.clone(), h);
    }
}

/// The searches on file that never finished ([`pending`]), at relay's start once the
/// sessions it found running have ended (`ended`, searched just now): each taken up
/// again, or told given up.
pub(in crate::daemon) fn resume(d: &Daemon, ended: &[String]) {
    let dir = pending::dir(d.store.dir());
    for p in pending::all(&dir) {
        if ended.contains(&p.id) {
            continue;
        }
        if !p.given_up {
            let entry = d.entry(&p.id);
            search(d, p, (&[], entry.as_ref()), Bounds::SESSION);
        }
    }
}

/// One search of `p`'s grants, on file before it begins ([`pending`]) and taken off
/// once it finishes; told when it set anything aside or did not finish.
type Held<'a> = &'a [(PathBuf, Option<(u64, u64)>)];

fn search(d: &Daemon, mut p: Pending, (held, e): (Held, Option<&Entry>), bounds: Bounds) {
    let dir = pending::dir(d.store.dir());
    if p.attempts >= pending::MAX_ATTEMPTS {
        if !p.given_up {
            p.given_up = true;
            let _ = pending::write(&dir, &p);
            let report = Report {
                unfinished: given_up(&p, &dir),
                ..Default::default()
            };
            tell(d, &p.id, e, report);
        }
        return;
    }
    p.attempts += 1;
    if let Err(err) = pending::write(&dir, &p) {
        tracing::error!("{}: {err}", pending::path_of(&dir, &p.id).display());
    }
    let s = Session {
        id: &p.id,
        created_ms: p.created_ms,
        read_write: &p.read_write,
        held,
        pins: &p.pins,
    };
    let mut report = blocking(|| run(&s, bounds));
    tracing::debug!(
        session = %p.id,
        git_folders = report.git_folders,
        entries = report.entries,
        ms = report.ms,
        "repositories of an ended session looked at"
    );
    if report.unfinished.is_empty() {
        pending::done(&dir, &p.id);
    } else {
        p.left = report.unfinished.said();
        let _ = pending::write(&dir, &p);
        report.unfinished.note(format!(
            "not finished (search {} of at most {}): taken up again at relay's next start \
             ({})",
            p.attempts,
            pending::MAX_ATTEMPTS,
            pending::path_of(&dir, &p.id).display()
        ));
    }
    if report.repositories.is_empty() && report.notes().is_empty() {
        return;
    }
    tell(d, &p.id, e, report);
}

/// What a search given up on says.
fn given_up(p: &Pending, dir: &Path) -> find::Unfinished {
    let mut u = find::Unfinished::default();
    u.note(format!(
        "the search of this session's repositories began {} times and never finished \
         (relay stopped during it, or it ran past its bounds); not tried again. Its \
         grants: {}; what was left: {}. Remove {} once looked at",
        p.attempts,
        p.read_write
            .iter()
            .map(|g| g.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        if p.left.is_empty() {
            "unknown (relay stopped during it)".to_string()
        } else {
            p.left.join("; ")
        },
        pending::path_of(dir, &p.id).display()
    ));
    u
}

/// Runs `f` on this thread, letting the runtime move its other tasks elsewhere while it
/// reads the disk (a multi-threaded runtime), or as it is.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// Most repositories one row names, and most names of one kind it gives for each.
const MAX_LISTED: usize = 64;

/// The audit row and the event, with every name capped as a request's strings are.
fn tell(d: &Daemon, id: &str, e: Option<&Entry>, report: Report) {
    let notes = report.notes();
    let listed = report.repositories;
    tracing::warn!(
        session = %id,
        repositories = listed.len(),
        "session {id}: set aside what git would have run in {} repositor{} it made or changed{}",
        listed.len(),
        if listed.len() == 1 { "y" } else { "ies" },
        if notes.is_empty() { String::new() } else { format!("; {}", notes.join("; ")) }
    );
    let error = (!notes.is_empty()).then(|| journal::cap(&notes.join("; ")));
    let outcome = if error.is_some() {
        Outcome::Error
    } else {
        Outcome::Allowed
    };
    let r = e.map(|e| &e.record);
    let row = d.audit.record(&AuditRow {
        action: REPOSITORY_SET_ASIDE,
        session_id: Some(id.to_string()),
        kind: r.map(|r| r.kind.as_str().into()),
        project: r.map(|r| r.project_id.clone()),
        template: r.map(|r| r.template_id.clone()),
        outcome,
        error: error.clone(),
        repositories: Some(listed.clone()),
        ..Default::default()
    });
    if let Err(err) = row {
        tracing::error!("audit: {REPOSITORY_SET_ASIDE} of {id}: {err}");
    }
    d.events.emit(&Event {
        name: REPOSITORY_SET_ASIDE_EVENT,
        status: Some(outcome.as_str()),
        reason: error,
        session_id: Some(id.to_string()),
        kind: r.map(|r| r.kind.as_str().into()),
        repositories: Some(listed),
        ..Default::default()
    });
}

fn capped(s: SetAside) -> SetAside {
    let names = |v: Vec<String>| v.iter().take(MAX_LISTED).map(|n| journal::cap(n)).collect();
    SetAside {
        repository: journal::cap(&s.repository),
        folder: s.folder.map(|f| journal::cap(&f)),
        keys: names(s.keys),
        whole: names(s.whole),
        hooks: names(s.hooks),
        problem: s.problem.map(|p| journal::cap(&p)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A git folder at `at` as `git init` leaves it, with `config`.
    fn git_folder(at: &Path, config: &str) {
        for d in ["objects", "refs/heads", "hooks"] {
            std::fs::create_dir_all(at.join(d)).unwrap();
        }
        std::fs::write(at.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(at.join("hooks/pre-commit.sample"), "#!/bin/sh\n").unwrap();
        std::fs::write(at.join("config"), config).unwrap();
    }

    const PLANTED: &str = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\
        \tfsmonitor = touch /tmp/x\n[remote \"origin\"]\n\turl = /src/lib\n\
        \tuploadpack = touch /tmp/y\n[include]\n\tpath = ../elsewhere\n";

    fn session<'a>(
        grant: &'a [PathBuf],
        created_ms: u64,
        held: &'a [(PathBuf, Option<(u64, u64)>)],
    ) -> Session<'a> {
        Session {
            id: "t-0123456789ab",
            created_ms,
            read_write: grant,
            held,
            pins: &[],
        }
    }

    fn aside_folder(git: &Path) -> PathBuf {
        let mut v: Vec<PathBuf> = std::fs::read_dir(git.join("relay-set-aside"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(v.len(), 1, "{v:?}");
        v.remove(0)
    }

    #[test]
    fn a_planted_repository_is_cut_to_its_inert_entries_and_nothing_is_lost() {
        let d = tempfile::tempdir().unwrap();
        let grant = vec![d.path().canonicalize().unwrap()];
        let launched = journal::now_ms() - 1_000;
        let git = grant[0].join("vendor/lib/.git");
        git_folder(&git, PLANTED);
        std::fs::write(git.join("hooks/pre-commit"), "#!/bin/sh\ntouch /tmp/z\n").unwrap();
        let report = run(&session(&grant, launched, &[]), Bounds::SESSION);
        assert_eq!(report.git_folders, 1);
        assert!(report.unfinished.is_empty(), "{:?}", report.unfinished);
        let s = &report.repositories[0];
        assert_eq!(s.repository, git.display().to_string());
        assert_eq!(
            s.keys,
            ["core.fsmonitor", "include.path", "remote.*.uploadpack"]
        );
        assert_eq!(s.hooks, ["pre-commit"]);
        assert_eq!(
            std::fs::read_to_string(git.join("config")).unwrap(),
            "[core]\n\trepositoryformatversion = \"0\"\n\tbare = \"false\"\n\
             [remote \"origin\"]\n\turl = \"/src/lib\"\n"
        );
        let folder = aside_folder(&git);
        assert_eq!(s.folder.as_deref(), Some(folder.to_str().unwrap()));
        assert_eq!(
            std::fs::read_to_string(folder.join("config.txt")).unwrap(),
            PLANTED
        );
        assert!(folder.join("hooks.moved/pre-commit").is_file());
        assert!(git.join("hooks/pre-commit.sample").is_file());
        assert!(!git.join("hooks/pre-commit").exists());
        let readme = std::fs::read_to_string(folder.join("README.txt")).unwrap();
        assert!(
            readme.contains("t-0123456789ab") && readme.contains("core.fsmonitor"),
            "{readme}"
        );

        // Once done, a second end has nothing to do: what stays is inert.
        let again = run(&session(&grant, launched, &[]), Bounds::SESSION);
        assert!(again.repositories.is_empty(), "{:?}", again.repositories);
    }

    #[test]
    fn a_repository_older_than_the_session_or_still_the_bound_file_is_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let grant = vec![d.path().canonicalize().unwrap()];
        let git = grant[0].join(".git");
        git_folder(&git, PLANTED);
        // Changed before the launch: the person's.
        let later = journal::now_ms() + 60_000;
        assert!(run(&session(&grant, later, &[]), Bounds::SESSION)
            .repositories
            .is_empty());
        // Changed after it, but the very file bound read-only: the person's too.
        let launched = journal::now_ms() - 1_000;
        let id = |p: &Path| crate::daemon::plan::guard::identity(p);
        let held: Vec<_> = ["config", "hooks"]
            .iter()
            .map(|n| (git.join(n), id(&git.join(n))))
            .collect();
        assert!(run(&session(&grant, launched, &held), Bounds::SESSION)
            .repositories
            .is_empty());
        // A file renamed over the bound one (the person's `git config`, which the
        // session could then write) is judged by its time.
        let replaced = vec![(git.join("config"), Some((0, 0))), held[1].clone()];
        let report = run(&session(&grant, launched, &replaced), Bounds::SESSION);
        assert_eq!(report.repositories[0].keys.len(), 3);
        assert!(report.repositories[0].hooks.is_empty());
    }

    #[test]
    fn a_config_that_is_no_file_or_not_gits_syntax_goes_whole() {
        let d = tempfile::tempdir().unwrap();
        let grant = vec![d.path().canonicalize().unwrap()];
        let launched = journal::now_ms() - 1_000;
        let a = grant[0].join("a.git");
        git_folder(&a, "[core]\n\tbare = true\n\tfsmonitor = \"unterminated\n");
        let b = grant[0].join("b/.git");
        git_folder(&b, "");
        std::fs::remove_file(b.join("config")).unwrap();
        std::os::unix::fs::symlink("/etc/gitconfig-of-the-session", b.join("config")).unwrap();
        let report = run(&session(&grant, launched, &[]), Bounds::SESSION);
        assert_eq!(report.repositories.len(), 2, "{:?}", report.repositories);
        for s in &report.repositories {
            assert_eq!(s.whole, ["config"], "{s:?}");
        }
        assert_eq!(
            std::fs::read_to_string(a.join("config")).unwrap(),
            "[core]\n\trepositoryformatversion = 0\n\tbare = true\n"
        );
        assert!(std::fs::symlink_metadata(b.join("config"))
            .unwrap()
            .is_file());
        let moved = aside_folder(&b).join("config.txt");
        assert!(std::fs::symlink_metadata(moved)
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[test]
    fn what_the_session_put_in_the_way_is_moved_aside_never_followed() {
        let d = tempfile::tempdir().unwrap();
        let grant = vec![d.path().canonicalize().unwrap()];
        let launched = journal::now_ms() - 1_000;
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("post-checkout"), "#!/bin/sh\n").unwrap();
        let git = grant[0].join(".git");
        git_folder(&git, PLANTED);
        // `hooks` a link to a folder elsewhere, and a link where the set-aside folder goes.
        std::fs::remove_dir_all(git.join("hooks")).unwrap();
        std::os::unix::fs::symlink(outside.path(), git.join("hooks")).unwrap();
        std::os::unix::fs::symlink(outside.path(), git.join("relay-set-aside")).unwrap();
        let report = run(&session(&grant, launched, &[]), Bounds::SESSION);
        let s = &report.repositories[0];
        assert_eq!(s.whole, ["hooks"], "{s:?}");
        assert_eq!(s.keys.len(), 3, "{s:?}");
        let folder = aside_folder(&git);
        assert!(std::fs::symlink_metadata(folder.join("hooks.moved"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(!git.join("hooks").exists());
        let planted: Vec<_> = std::fs::read_dir(&git)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("relay-set-aside.planted-"))
            .collect();
        assert_eq!(planted.len(), 1, "{planted:?}");
        // Nothing was written through either link.
        let left: Vec<_> = std::fs::read_dir(outside.path()).unwrap().collect();
        assert_eq!(left.len(), 1);
    }

    #[test]
    fn a_git_folder_named_through_a_link_is_refused_and_said() {
        let d = tempfile::tempdir().unwrap();
        let grant = vec![d.path().canonicalize().unwrap()];
        let launched = journal::now_ms() - 1_000;
        let outside = tempfile::tempdir().unwrap();
        git_folder(&outside.path().join("x.git"), PLANTED);
        std::os::unix::fs::symlink(outside.path(), grant[0].join("link")).unwrap();
        std::fs::create_dir_all(grant[0].join("w")).unwrap();
        let target = grant[0].join("link/x.git");
        std::fs::write(
            grant[0].join("w/.git"),
            format!("gitdir: {}\n", target.display()),
        )
        .unwrap();
        let report = run(&session(&grant, launched, &[]), Bounds::SESSION);
        assert!(report.repositories.is_empty());
        assert!(
            report
                .notes()
                .iter()
                .any(|n| n.contains("reached through a link")),
            "{:?}",
            report.notes()
        );
        let kept = std::fs::read_to_string(outside.path().join("x.git/config")).unwrap();
        assert_eq!(kept, PLANTED);
    }

    /// The time a session's end takes over a project of `files` files (in folders of
    /// 100, a repository of `git init`'s shape every 1,000 folders, one planted), on
    /// the temp folder's file system with its cache warm (docs/performance.md).
    #[test]
    #[ignore = "a rough timing, printed; run with --ignored --nocapture"]
    fn time_to_neutralize_a_project() {
        for files in [10_000usize, 100_000, 1_000_000] {
            let d = tempfile::tempdir().unwrap();
            let grant = vec![d.path().canonicalize().unwrap()];
            let launched = journal::now_ms() - 1_000;
            for f in 0..files / 100 {
                let dir = grant[0].join(format!("src/m{}/d{f}", f / 1_000));
                std::fs::create_dir_all(&dir).unwrap();
                for i in 0..100 {
                    std::fs::write(dir.join(format!("f{i}.rs")), "").unwrap();
                }
                if f % 1_000 == 0 {
                    git_folder(&dir.join(".git"), "[core]\n\tbare = false\n");
                }
            }
            git_folder(&grant[0].join("vendor/lib/.git"), PLANTED);
            let warm = run(&session(&grant, launched, &[]), Bounds::SESSION);
            assert_eq!(warm.repositories.len(), 1);
            let again = run(&session(&grant, launched, &[]), Bounds::SESSION);
            println!(
                "{files} files: {} entries, {} git folders, {} ms (then {} ms with nothing to do)",
                warm.entries, warm.git_folders, warm.ms, again.ms
            );
        }
    }

    #[test]
    fn grants_inside_another_are_walked_once() {
        let d = tempfile::tempdir().unwrap();
        let top = d.path().canonicalize().unwrap();
        std::fs::create_dir_all(top.join("in")).unwrap();
        let got = roots(&[
            top.join("in"),
            top.clone(),
            top.join("missing"),
            top.clone(),
        ]);
        assert_eq!(got, vec![top]);
    }

    /// The `repository_set_aside` rows of `d` so far.
    fn rows(d: &Daemon) -> Vec<serde_json::Value> {
        std::fs::read_to_string(d.audit.path())
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|r| r["action"] == REPOSITORY_SET_ASIDE)
            .collect()
    }

    #[test]
    fn a_search_cut_short_stays_on_file_is_taken_up_at_the_next_start_and_given_up_once_said() {
        let t = tempfile::tempdir().unwrap();
        let d = crate::daemon::serve::test_daemon(t.path());
        let grant = t.path().canonicalize().unwrap().join("home/project");
        let git = grant.join(".git");
        git_folder(&git, PLANTED);
        let dir = pending::dir(d.store.dir());
        let p = Pending {
            id: "t-0123456789ab".into(),
            created_ms: journal::now_ms() - 1_000,
            read_write: vec![grant.clone()],
            ..Default::default()
        };
        // Out of time before anything: nothing done, all of it on file and said.
        let none = Bounds {
            limits: Limits::SESSION,
            time: Duration::ZERO,
        };
        search(&d, p.clone(), (&[], None), none);
        let on_file = pending::read(&dir, &p.id).unwrap();
        assert_eq!(on_file.attempts, 1);
        assert!(on_file.left[0].contains("ran out of time"), "{on_file:?}");
        assert_eq!(
            std::fs::read_to_string(git.join("config")).unwrap(),
            PLANTED
        );
        let told = rows(&d);
        let error = told[0]["error"].as_str().unwrap();
        assert!(
            error.contains("ran out of time") && error.contains("taken up again"),
            "{error}"
        );

        // The next start takes it up, finishes, and the file goes.
        resume(&d, &[]);
        assert!(pending::read(&dir, &p.id).is_none());
        assert!(!std::fs::read_to_string(git.join("config"))
            .unwrap()
            .contains("fsmonitor"));
        assert_eq!(rows(&d).len(), 2);
        assert_eq!(rows(&d)[1]["outcome"], "allowed");

        // One a relay died in three times is said once and left on file.
        let died = Pending {
            attempts: pending::MAX_ATTEMPTS,
            ..p.clone()
        };
        pending::write(&dir, &died).unwrap();
        resume(&d, &[]);
        resume(&d, &[]);
        let told = rows(&d);
        assert_eq!(told.len(), 3);
        let error = told[2]["error"].as_str().unwrap();
        assert!(error.contains("never finished"), "{error}");
        assert!(pending::read(&dir, &p.id).unwrap().given_up);
    }
}
