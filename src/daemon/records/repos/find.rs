//! The git folders under a session's write grants, wherever git would take one: a
//! `.git` folder, `.git/modules/<name>` and `.git/worktrees/<name>` in one, a bare
//! repository — any folder holding `HEAD` with `objects` and `refs`, or `HEAD` with a
//! `commondir` — and the git folder a `.git` file or a `commondir` names, when it lies in
//! the same grants. A folder one step short of one (a `config` or `hooks` beside any of
//! `HEAD`, `objects`, `refs`, `commondir`) counts too: a later session could complete
//! it. One walk per grant (`crate::tree::walk`: no link followed, bounded
//! in depth and entries), and everything after it, under one deadline.
//!
//! Memory is bounded whatever a session planted: a folder's entries are told together,
//! so only the folder being read is marked, and a git folder is visited (`on_git`) the
//! moment it is read through, never kept. Kept are only what `.git` files and
//! `commondir` files name ([`MAX_NAMED`], [`NAMED_BYTES`]) and what was not read, as
//! counts and a few examples ([`Unfinished`]).

use std::collections::HashMap;
use std::ffi::CStr;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Component, Path, PathBuf};
use std::time::Instant;

use crate::tree::{Kind, Limits, Place as At, Unread, Visitor};

use super::at;

/// A git folder found: the grant it is in (an index of the roots) and its path below it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Place {
    pub root: usize,
    pub rel: Vec<u8>,
    /// Named by a `.git` file or a `commondir` the session made or changed: every file
    /// of it counts as the session's.
    pub named_anew: bool,
}

/// What the search could not finish, by kind: each a count and its first few places.
#[derive(Debug, Default)]
pub struct Unfinished {
    pub notes: Vec<String>,
    /// Notes past [`MAX_NOTES`], counted.
    pub more: usize,
}

impl Unfinished {
    pub fn note(&mut self, n: String) {
        if self.notes.len() < MAX_NOTES {
            self.notes.push(crate::daemon::records::journal::cap(&n));
        } else {
            self.more += 1;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.notes.is_empty() && self.more == 0
    }

    /// Every note, the ones past the bound as one.
    pub fn said(&self) -> Vec<String> {
        let mut v = self.notes.clone();
        if self.more > 0 {
            v.push(format!(
                "{} more places not finished, not listed",
                self.more
            ));
        }
        v
    }
}

/// Most notes kept of one search.
pub const MAX_NOTES: usize = 32;

const HEAD: u8 = 1;
const OBJECTS: u8 = 2;
const REFS: u8 = 4;
const COMMONDIR: u8 = 8;
const CONFIG: u8 = 16;
const HOOKS: u8 = 32;

/// Most git folders taken from `.git` files and `commondir` files of one session.
pub const MAX_NAMED: usize = 4096;
/// Most bytes of paths of those kept at once.
pub const NAMED_BYTES: usize = 4 << 20;
/// Most bytes of a `.git` file or a `commondir` read.
const POINTER_MAX: u64 = 4096;

/// Whether the deadline has passed.
pub fn late(deadline: Instant) -> bool {
    Instant::now() >= deadline
}

/// The walk of one grant.
struct Finder<'a, F: FnMut(RawFd, &Path, bool)> {
    roots: &'a [PathBuf],
    root: usize,
    deadline: Instant,
    created_ms: u64,
    timed_out: bool,
    /// What the folder being read holds of a git folder's names.
    bits: u8,
    git_file: bool,
    named: &'a mut Named,
    on_git: F,
    unread: Counts,
    unlocked: &'a mut Counts,
    /// Folders that could not be opened, to be probed by name ([`probe`]).
    probes: &'a mut Vec<(usize, Vec<u8>)>,
    entries: u64,
}

/// Most folders probed by name in one search, and most bytes of their paths.
pub const MAX_PROBES: usize = 256;
pub const PROBE_BYTES: usize = 1 << 20;

/// What `.git` and `commondir` files named, bounded: each folder once, or twice when a
/// pointer the session changed names it after one it did not.
#[derive(Debug, Default)]
pub struct Named {
    pub places: Vec<Place>,
    index: HashMap<(usize, Vec<u8>), bool>,
    bytes: usize,
    /// Names past the bounds, counted.
    pub dropped: usize,
}

impl Named {
    fn add(&mut self, root: usize, rel: Vec<u8>, named_anew: bool) {
        match self.index.get(&(root, rel.clone())) {
            Some(&before) if before || !named_anew => return,
            _ => {}
        }
        if self.places.len() >= MAX_NAMED || self.bytes + 2 * rel.len() > NAMED_BYTES {
            self.dropped += 1;
            return;
        }
        self.bytes += 2 * rel.len();
        self.index.insert((root, rel.clone()), named_anew);
        self.places.push(Place {
            root,
            rel,
            named_anew,
        });
    }
}

/// Folders not read, by kind: a count and the first [`EXAMPLES`] places.
#[derive(Default)]
struct Counts {
    kinds: Vec<(&'static str, usize, Vec<String>)>,
}

const EXAMPLES: usize = 4;

impl Counts {
    fn add(&mut self, kind: &'static str, place: impl FnOnce() -> String) {
        let i = match self.kinds.iter().position(|(k, _, _)| *k == kind) {
            Some(i) => i,
            None => {
                self.kinds.push((kind, 0, Vec::new()));
                self.kinds.len() - 1
            }
        };
        let (_, n, examples) = &mut self.kinds[i];
        *n += 1;
        if examples.len() < EXAMPLES {
            examples.push(crate::daemon::records::journal::cap(&place()));
        }
    }
}

impl<F: FnMut(RawFd, &Path, bool)> Visitor for Finder<'_, F> {
    fn entry(&mut self, _dir: RawFd, name: &CStr, kind: Kind, _at: At<'_>) {
        self.entries += 1;
        self.bits |= match name.to_bytes() {
            b"HEAD" => HEAD,
            b"objects" => OBJECTS,
            b"refs" => REFS,
            b"commondir" => COMMONDIR,
            b"config" => CONFIG,
            b"hooks" => HOOKS,
            b".git" if kind == Kind::File => {
                self.git_file = true;
                0
            }
            _ => 0,
        };
    }

    fn read_through(&mut self, dir: RawFd, at: At<'_>) {
        let (bits, git_file) = (self.bits, self.git_file);
        self.bits = 0;
        self.git_file = false;
        let is_git = bits & HEAD != 0
            && (bits & (OBJECTS | REFS) == OBJECTS | REFS || bits & COMMONDIR != 0);
        // One name short of a git folder, with a configuration or hooks: what an earlier
        // session leaves for a later one to complete (by a `HEAD`, which then changed).
        let near = bits & (CONFIG | HOOKS) != 0 && bits & (HEAD | OBJECTS | REFS | COMMONDIR) != 0;
        let is_git = is_git || near;
        if !git_file && !is_git {
            return;
        }
        // Its path, made only for a folder that matters (a path can be long).
        let here = self.roots[self.root].join(at::os(at.rel));
        let new = (self.created_ms, false);
        if git_file {
            named_by_pointer(self.roots, (dir, &here), ".git", new, self.named);
        }
        if is_git {
            if bits & COMMONDIR != 0 {
                named_by_pointer(self.roots, (dir, &here), "commondir", new, self.named);
            }
            (self.on_git)(dir, &here, false);
        }
    }

    fn unread(&mut self, at: At<'_>, why: Unread) {
        let held: usize = self.probes.iter().map(|(_, r)| r.len()).sum();
        if matches!(why, Unread::Unreadable(_))
            && self.probes.len() < MAX_PROBES
            && held + at.rel.len() <= PROBE_BYTES
        {
            self.probes.push((self.root, at.rel.to_vec()));
        }
        let kind = match why {
            Unread::TooDeep => "deeper than the search's bound of levels",
            Unread::TooMany => "past the search's bound of entries",
            Unread::Link => "a link, not followed",
            Unread::Moved => "moved while the search read it",
            Unread::Unreadable(_) => "could not be read",
        };
        let root = &self.roots[self.root];
        self.unread
            .add(kind, || root.join(at::os(at.rel)).display().to_string());
    }

    fn stop(&mut self) -> bool {
        self.timed_out = self.timed_out || late(self.deadline);
        self.timed_out
    }

    fn unlock(&self) -> bool {
        true
    }

    fn unlocked(&mut self, at: At<'_>) {
        let root = &self.roots[self.root];
        self.unlocked.add("unlocked", || {
            root.join(at::os(at.rel)).display().to_string()
        });
    }
}

/// What one search did not finish, and how much it read.
#[derive(Debug, Default)]
pub struct Walked {
    pub unfinished: Unfinished,
    /// Folders of the person's that a session had made unreadable, given back their
    /// owner's `r-x` to be read: how many, and the first few.
    pub unlocked: (usize, Vec<String>),
    /// Folders that could not be read, to be probed by name ([`probe`]).
    pub probes: Vec<(usize, Vec<u8>)>,
    pub entries: u64,
    pub named: Named,
}

/// Walks each of `roots` (canonical folders, none inside another), calling `on_git`
/// with each git folder as it is read through (open, its path, and `false`: not named
/// by a pointer the session changed). What `.git` and `commondir` files name is
/// returned for [`follow`], bounded.
pub fn walk(
    roots: &[PathBuf],
    limits: Limits,
    deadline: Instant,
    created_ms: u64,
    mut on_git: impl FnMut(RawFd, &Path, bool),
) -> Walked {
    let mut out = Walked::default();
    let mut named = Named::default();
    let mut unlocked = Counts::default();
    let mut probes = Vec::new();
    for root in 0..roots.len() {
        let mut f = Finder {
            roots,
            root,
            deadline,
            created_ms,
            timed_out: false,
            bits: 0,
            git_file: false,
            named: &mut named,
            on_git: &mut on_git,
            unread: Counts::default(),
            unlocked: &mut unlocked,
            probes: &mut probes,
            entries: 0,
        };
        crate::tree::walk(&roots[root], limits, &mut f);
        out.entries += f.entries;
        if f.timed_out {
            out.unfinished.note(format!(
                "{}: the search ran out of time; repositories past that point were not looked at",
                roots[root].display()
            ));
        }
        for (kind, n, examples) in &f.unread.kinds {
            out.unfinished.note(format!(
                "{n} folder{} {kind}, a repository in one not looked at: {}{}",
                if *n == 1 { "" } else { "s" },
                examples.join(", "),
                if *n > examples.len() { ", …" } else { "" }
            ));
        }
    }
    if named.dropped > 0 {
        out.unfinished.note(format!(
            "{} git folders named by `.git` or `commondir` files past the search's bound,              not looked at",
            named.dropped
        ));
    }
    out.named = named;
    out.probes = probes;
    if let Some((_, n, examples)) = unlocked.kinds.pop() {
        out.unlocked = (n, examples);
    }
    out
}

/// Each git folder `named` holds, opened without following a link, and in turn the
/// folder its own `commondir` names: `visit` with it open, its path and whether a
/// pointer the session changed named it. Stops at `deadline`, saying what was left.
pub fn follow(
    roots: &[PathBuf],
    named: &mut Named,
    deadline: Instant,
    created_ms: u64,
    unfinished: &mut Unfinished,
    mut visit: impl FnMut(RawFd, &Path, bool),
) {
    let dropped = named.dropped;
    let mut n = 0;
    while n < named.places.len() {
        if late(deadline) {
            unfinished.note(format!(
                "the search ran out of time; {} git folders named by `.git` or `commondir` \
                 files were not looked at",
                named.places.len() - n
            ));
            return;
        }
        let p = named.places[n].clone();
        n += 1;
        let path = roots[p.root].join(at::os(&p.rel));
        let dir = match at::open_rel(&roots[p.root], &p.rel) {
            Ok(d) => d,
            Err(nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR) => {
                unfinished.note(format!(
                    "{}: reached through a link, not followed",
                    path.display()
                ));
                continue;
            }
            Err(_) => continue,
        };
        let at = (dir.as_raw_fd(), path.as_path());
        named_by_pointer(roots, at, "commondir", (created_ms, p.named_anew), named);
        visit(dir.as_raw_fd(), &path, p.named_anew);
    }
    if named.dropped > dropped {
        unfinished.note(format!(
            "{} git folders named by `commondir` files past the search's bound, not looked at",
            named.dropped - dropped
        ));
    }
}

/// Each folder the walk could not read (`chmod 0111` by a user other than relay's, or
/// one that kept refusing), looked into by name alone, as the person's git does when it
/// passes through: its `.git` (a folder visited, a file followed), and the folder itself
/// when it holds a `HEAD`. What lies deeper stays unread, as the notes already say.
pub fn probe(
    roots: &[PathBuf],
    probes: &[(usize, Vec<u8>)],
    (deadline, created_ms): (Instant, u64),
    named: &mut Named,
    mut visit: impl FnMut(RawFd, &Path, bool),
) {
    for (root, rel) in probes {
        if late(deadline) {
            return;
        }
        let Ok(dir) = at::open_path(&roots[*root], rel) else {
            continue;
        };
        let fd = dir.as_raw_fd();
        let here = roots[*root].join(at::os(rel));
        match at::look(fd, &at::c(".git")) {
            Ok(st) if at::is_kind(&st, nix::sys::stat::SFlag::S_IFDIR) => {
                let git = at::c(".git");
                let opened = at::folder(fd, &git).or_else(|_| {
                    at::searchable(fd, &git);
                    at::folder(fd, &git)
                });
                if let Ok(g) = opened {
                    visit(g.as_raw_fd(), &here.join(".git"), false);
                }
            }
            Ok(_) => named_by_pointer(roots, (fd, &here), ".git", (created_ms, false), named),
            Err(_) => {}
        }
        if at::look(fd, &at::c("HEAD")).is_ok() {
            visit(fd, &here, false);
        }
    }
}

/// The git folder the pointer file `name` (`.git`: `gitdir: <path>`; `commondir`: a
/// path) of the folder `dir` at `here` names, when it lies in one of `roots`; it counts
/// as the session's when the pointer changed since the launch, or `anew`: the folder
/// holding it is the session's.
fn named_by_pointer(
    roots: &[PathBuf],
    (dir, here): (RawFd, &Path),
    name: &str,
    (created_ms, anew): (u64, bool),
    out: &mut Named,
) {
    let Ok((text, st, _)) = at::read_small(dir, &at::c(name), POINTER_MAX) else {
        return;
    };
    let target = if name == ".git" {
        let Some(t) = text.strip_prefix(b"gitdir: ") else {
            return;
        };
        t
    } else {
        &text[..]
    };
    if let Some((r, rel)) = locate(roots, here, target) {
        out.add(r, rel, anew || at::since_launch(&st, created_ms));
    }
}

/// `pointer` (a path as a `.git` file or `commondir` holds it, relative to `base`),
/// lexically resolved, as a grant and a path below it; `None` outside every grant.
pub fn locate(roots: &[PathBuf], base: &Path, pointer: &[u8]) -> Option<(usize, Vec<u8>)> {
    let end = pointer
        .iter()
        .rposition(|&b| b != b'\n' && b != b'\r')
        .map_or(0, |i| i + 1);
    let clean = lexical(&base.join(at::os(&pointer[..end])));
    roots.iter().enumerate().find_map(|(i, r)| {
        let rel = clean.strip_prefix(r).ok()?;
        Some((
            i,
            std::os::unix::ffi::OsStrExt::as_bytes(rel.as_os_str()).to_vec(),
        ))
    })
}

/// `path` with `.` and `..` taken away by its text alone.
pub fn lexical(path: &Path) -> PathBuf {
    let mut clean = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                clean.pop();
            }
            Component::CurDir => {}
            other => clean.push(other),
        }
    }
    clean
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(at: &Path) {
        std::fs::create_dir_all(at.join("objects")).unwrap();
        std::fs::create_dir_all(at.join("refs")).unwrap();
        std::fs::write(at.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    }

    /// Every git folder visited (its path below `top`, whether named anew), sorted, and
    /// what was not finished.
    fn find(
        top: &Path,
        roots: &[PathBuf],
        limits: Limits,
        deadline: Instant,
        created_ms: u64,
    ) -> (Vec<(String, bool)>, Unfinished) {
        let mut seen = Vec::new();
        let mut visit = |_fd: RawFd, path: &Path, anew: bool| {
            let rel = path.strip_prefix(top).unwrap();
            seen.push((rel.display().to_string(), anew));
        };
        let mut w = walk(roots, limits, deadline, created_ms, &mut visit);
        follow(
            roots,
            &mut w.named,
            deadline,
            created_ms,
            &mut w.unfinished,
            &mut visit,
        );
        seen.sort();
        (seen, w.unfinished)
    }

    #[test]
    fn every_kind_of_git_folder_is_found_and_nothing_through_a_link() {
        let d = tempfile::tempdir().unwrap();
        let top = d.path();
        let a = top.join("a");
        let b = top.join("b");
        repo(&a.join("x/.git"));
        repo(&a.join("x/.git/modules/sub/inner"));
        std::fs::create_dir_all(a.join("x/.git/worktrees/w")).unwrap();
        std::fs::write(a.join("x/.git/worktrees/w/HEAD"), "x").unwrap();
        std::fs::write(a.join("x/.git/worktrees/w/commondir"), "../..\n").unwrap();
        repo(&a.join("bare.git"));
        // A `.git` file naming a folder in the other grant, and one naming a folder
        // outside both; a `commondir` naming a folder with no HEAD of its own.
        repo(&b.join("store/sep.git"));
        std::fs::create_dir_all(a.join("y")).unwrap();
        std::fs::write(
            a.join("y/.git"),
            format!("gitdir: {}\n", b.join("store/sep.git").display()),
        )
        .unwrap();
        std::fs::create_dir_all(a.join("z")).unwrap();
        std::fs::write(a.join("z/.git"), "gitdir: /nowhere/x\n").unwrap();
        std::fs::create_dir_all(b.join("common/objects")).unwrap();
        std::fs::create_dir_all(b.join("common/refs")).unwrap();
        std::fs::create_dir_all(b.join("wt")).unwrap();
        std::fs::write(b.join("wt/HEAD"), "x").unwrap();
        std::fs::write(b.join("wt/commondir"), "../common").unwrap();
        // A repository behind a link is not walked into.
        let outside = top.join("outside");
        repo(&outside.join("r"));
        std::os::unix::fs::symlink(&outside, a.join("link")).unwrap();
        // Folders that are not git folders.
        std::fs::create_dir_all(a.join("empty/.git")).unwrap();
        std::fs::create_dir_all(a.join("half/refs")).unwrap();
        std::fs::write(a.join("half/HEAD"), "x").unwrap();

        let roots = [a.clone(), b.clone()];
        let future = Instant::now() + std::time::Duration::from_secs(60);
        let (seen, unfinished) = find(top, &roots, Limits::SESSION, future, 0);
        let want: Vec<(String, bool)> = [
            ("a/bare.git", false),
            ("a/x/.git", false),
            // Once walked, once named by the worktree's new `commondir`.
            ("a/x/.git", true),
            ("a/x/.git/modules/sub/inner", false),
            ("a/x/.git/worktrees/w", false),
            ("b/common", true),
            ("b/store/sep.git", false),
            ("b/store/sep.git", true),
            ("b/wt", false),
        ]
        .iter()
        .map(|(p, n)| (p.to_string(), *n))
        .collect();
        assert_eq!(seen, want);
        assert!(unfinished.is_empty(), "{unfinished:?}");

        // Pointers older than the session do not make what they name changed; a
        // deadline already past stops the search and says so.
        let (seen, _) = find(top, &roots, Limits::SESSION, future, u64::MAX);
        assert!(seen.iter().all(|(_, anew)| !anew), "{seen:?}");
        let (seen, unfinished) = find(top, &roots, Limits::SESSION, Instant::now(), 0);
        assert!(seen.is_empty());
        assert!(
            unfinished.notes[0].contains("ran out of time"),
            "{unfinished:?}"
        );
        let few = Limits {
            depth: 64,
            entries: 3,
        };
        let (_, unfinished) = find(top, &roots, few, future, 0);
        assert!(
            unfinished
                .notes
                .iter()
                .any(|n| n.contains("bound of entries")),
            "{unfinished:?}"
        );
    }

    /// A session that plants folders by the hundred thousand, each with a `HEAD` (no
    /// git folder) or a `.git` file, costs the search no memory for each: nothing of a
    /// folder that is no git folder is kept, and what pointers name is bounded.
    #[test]
    fn what_a_search_keeps_is_bounded_whatever_was_planted() {
        let d = tempfile::tempdir().unwrap();
        let top = d.path().canonicalize().unwrap();
        repo(&top.join("real.git"));
        for i in 0..(MAX_NAMED + 50) {
            let f = top.join(format!("f{i}"));
            std::fs::create_dir(&f).unwrap();
            std::fs::write(f.join("HEAD"), "x").unwrap();
            std::fs::write(f.join(".git"), format!("gitdir: ../f{i}\n")).unwrap();
        }
        let roots = [top.clone()];
        let future = Instant::now() + std::time::Duration::from_secs(600);
        let w = walk(&roots, Limits::SESSION, future, 0, |_, _, _| {});
        assert_eq!(w.named.places.len(), MAX_NAMED);
        assert_eq!(w.named.dropped, 50);
        assert!(w.named.bytes <= NAMED_BYTES);
        assert!(
            w.unfinished
                .notes
                .iter()
                .any(|n| n.starts_with("50 git folders named")),
            "{:?}",
            w.unfinished
        );
        // Notes are bounded too.
        let mut u = Unfinished::default();
        for i in 0..1000 {
            u.note(format!("{i}: {}", "x".repeat(10_000)));
        }
        assert_eq!(u.notes.len(), MAX_NOTES);
        assert!(u.notes.iter().all(|n| n.len() <= 1024));
        assert_eq!(
            u.said().last().unwrap(),
            "968 more places not finished, not listed"
        );
    }

    /// A folder the walk could not list is looked into by name: its `.git` folder
    /// visited, its `.git` file followed, and itself when it holds a `HEAD`. (Its modes
    /// are not taken away here: the tests run as root, whom no mode stops.)
    #[test]
    fn a_folder_the_walk_could_not_read_is_probed_by_name() {
        let d = tempfile::tempdir().unwrap();
        let top = d.path().canonicalize().unwrap();
        repo(&top.join("hid/.git"));
        repo(&top.join("sep.git"));
        std::fs::create_dir_all(top.join("file")).unwrap();
        std::fs::write(top.join("file/.git"), "gitdir: ../sep.git\n").unwrap();
        repo(&top.join("bare"));
        let roots = [top.clone()];
        let probes: Vec<(usize, Vec<u8>)> = ["hid", "file", "bare", "gone"]
            .iter()
            .map(|r| (0, r.as_bytes().to_vec()))
            .collect();
        let mut named = Named::default();
        let mut seen = Vec::new();
        let when = (Instant::now() + std::time::Duration::from_secs(60), 0);
        probe(&roots, &probes, when, &mut named, |_, path, anew| {
            seen.push((path.strip_prefix(&top).unwrap().display().to_string(), anew))
        });
        assert_eq!(
            seen,
            [("hid/.git".to_string(), false), ("bare".into(), false)]
        );
        assert_eq!(named.places.len(), 1);
        assert_eq!(named.places[0].rel, b"sep.git");
    }
}
