//! The git folders under a session's write grants, wherever git would take one: a
//! `.git` folder, `.git/modules/<name>` and `.git/worktrees/<name>` in one, a bare
//! repository — any folder holding `HEAD` with `objects` and `refs`, or `HEAD` with a
//! `commondir` — and the git folder a `.git` file or a `commondir` names, when it lies in
//! the same grants. One walk per grant (`crate::tree::walk`: no link followed, bounded
//! in depth and entries), bounded in time too.

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
    /// Named by a `.git` file the session made or changed: it counts as changed.
    pub named_anew: bool,
}

/// What the search found, and what it could not look at, in words.
#[derive(Debug, Default)]
pub struct Found {
    pub places: Vec<Place>,
    pub notes: Vec<String>,
    pub entries: u64,
}

const HEAD: u8 = 1;
const OBJECTS: u8 = 2;
const REFS: u8 = 4;
const COMMONDIR: u8 = 8;

/// Most git folders taken from `.git` files and `commondir` files of one session.
const MAX_NAMED: usize = 10_000;
/// Most bytes of a `.git` file or a `commondir` read.
const POINTER_MAX: u64 = 4096;

struct Finder {
    deadline: Instant,
    timed_out: bool,
    marks: HashMap<Vec<u8>, u8>,
    git_files: Vec<Vec<u8>>,
    unread: Vec<(Vec<u8>, Unread)>,
    entries: u64,
}

impl Visitor for Finder {
    fn entry(&mut self, _dir: RawFd, name: &CStr, kind: Kind, at: At<'_>) {
        self.entries += 1;
        let bit = match name.to_bytes() {
            b"HEAD" => HEAD,
            b"objects" => OBJECTS,
            b"refs" => REFS,
            b"commondir" => COMMONDIR,
            b".git" if kind == Kind::File => {
                self.git_files.push(at.rel.to_vec());
                return;
            }
            _ => return,
        };
        *self.marks.entry(at.rel.to_vec()).or_default() |= bit;
    }

    fn unread(&mut self, at: At<'_>, why: Unread) {
        self.unread.push((at.rel.to_vec(), why));
    }

    fn stop(&mut self) -> bool {
        self.timed_out = self.timed_out || Instant::now() >= self.deadline;
        self.timed_out
    }
}

/// The git folders under `roots` (canonical folders, none inside another), each once.
pub fn find(roots: &[PathBuf], limits: Limits, deadline: Instant, created_ms: u64) -> Found {
    let mut found = Found::default();
    for (i, root) in roots.iter().enumerate() {
        let mut f = Finder {
            deadline,
            timed_out: false,
            marks: HashMap::new(),
            git_files: Vec::new(),
            unread: Vec::new(),
            entries: 0,
        };
        crate::tree::walk(root, limits, &mut f);
        found.entries += f.entries;
        say_unread(root, &f, &mut found.notes);
        for (rel, bits) in &f.marks {
            if bits & HEAD != 0
                && (bits & (OBJECTS | REFS) == OBJECTS | REFS || bits & COMMONDIR != 0)
            {
                add(&mut found.places, i, rel.clone(), false);
            }
        }
        for rel in &f.git_files {
            named_by_git_file(roots, i, rel, created_ms, &mut found);
        }
    }
    // The folder each `commondir` names, judged by what it holds itself.
    let mut n = 0;
    while n < found.places.len() && found.places.len() < MAX_NAMED {
        let p = found.places[n].clone();
        n += 1;
        let Ok(dir) = at::open_rel(&roots[p.root], &p.rel) else {
            continue;
        };
        let Ok((text, _, _)) = at::read_small(dir.as_raw_fd(), &at::c("commondir"), POINTER_MAX)
        else {
            continue;
        };
        let here = roots[p.root].join(at::os(&p.rel));
        if let Some((root, rel)) = locate(roots, &here, &text) {
            add(&mut found.places, root, rel, false);
        }
    }
    found
        .places
        .sort_by(|a, b| (a.root, &a.rel).cmp(&(b.root, &b.rel)));
    found
}

fn add(places: &mut Vec<Place>, root: usize, rel: Vec<u8>, named_anew: bool) {
    match places.iter_mut().find(|p| p.root == root && p.rel == rel) {
        Some(p) => p.named_anew |= named_anew,
        None => places.push(Place {
            root,
            rel,
            named_anew,
        }),
    }
}

/// The git folder the `.git` file in the folder `rel` of `roots[root]` names, when it
/// lies in one of `roots`.
fn named_by_git_file(roots: &[PathBuf], root: usize, rel: &[u8], created_ms: u64, out: &mut Found) {
    let Ok(dir) = at::open_rel(&roots[root], rel) else {
        return;
    };
    let Ok((text, st, _)) = at::read_small(dir.as_raw_fd(), &at::c(".git"), POINTER_MAX) else {
        return;
    };
    let Some(target) = text.strip_prefix(b"gitdir: ") else {
        return;
    };
    let here = roots[root].join(at::os(rel));
    if let Some((r, target_rel)) = locate(roots, &here, target) {
        if out.places.len() < MAX_NAMED {
            add(
                &mut out.places,
                r,
                target_rel,
                at::since_launch(&st, created_ms),
            );
        }
    }
}

/// `pointer` (a path as a `.git` file or `commondir` holds it, relative to `base`),
/// lexically resolved, as a grant and a path below it; `None` outside every grant.
fn locate(roots: &[PathBuf], base: &Path, pointer: &[u8]) -> Option<(usize, Vec<u8>)> {
    let end = pointer
        .iter()
        .rposition(|&b| b != b'\n' && b != b'\r')
        .map_or(0, |i| i + 1);
    let path = at::os(&pointer[..end]);
    let joined = base.join(path);
    let mut clean = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                clean.pop();
            }
            Component::CurDir => {}
            other => clean.push(other),
        }
    }
    roots.iter().enumerate().find_map(|(i, r)| {
        let rel = clean.strip_prefix(r).ok()?;
        Some((
            i,
            std::os::unix::ffi::OsStrExt::as_bytes(rel.as_os_str()).to_vec(),
        ))
    })
}

/// What the walk of `root` did not read, for the person: its bounds, a link at its top,
/// folders it could not open.
fn say_unread(root: &Path, f: &Finder, notes: &mut Vec<String>) {
    if f.timed_out {
        notes.push(format!(
            "{}: the search ran out of time; repositories past that point were not looked at",
            root.display()
        ));
    }
    let mut unreadable = 0usize;
    for (rel, why) in &f.unread {
        let place = root.join(at::os(rel));
        match why {
            Unread::TooDeep => notes.push(format!(
                "{}: deeper than {} levels, not looked at",
                place.display(),
                crate::tree::MAX_DEPTH
            )),
            Unread::TooMany => notes.push(format!(
                "{}: the search's bound of entries was reached there; repositories past it \
                 were not looked at",
                place.display()
            )),
            Unread::Link => notes.push(format!("{}: a link, not followed", place.display())),
            Unread::Moved => notes.push(format!(
                "{}: moved while the search read it",
                place.display()
            )),
            Unread::Unreadable(_) => unreadable += 1,
        }
    }
    if unreadable > 0 {
        notes.push(format!(
            "{}: {unreadable} folder{} could not be read; a repository in one was not \
             looked at",
            root.display(),
            if unreadable == 1 { "" } else { "s" }
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(at: &Path) {
        std::fs::create_dir_all(at.join("objects")).unwrap();
        std::fs::create_dir_all(at.join("refs")).unwrap();
        std::fs::write(at.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    }

    fn rels(f: &Found) -> Vec<(usize, String, bool)> {
        f.places
            .iter()
            .map(|p| {
                (
                    p.root,
                    String::from_utf8_lossy(&p.rel).into_owned(),
                    p.named_anew,
                )
            })
            .collect()
    }

    #[test]
    fn every_kind_of_git_folder_is_found_and_nothing_through_a_link() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        let b = d.path().join("b");
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
        let outside = d.path().join("outside");
        repo(&outside.join("r"));
        std::os::unix::fs::symlink(&outside, a.join("link")).unwrap();
        // Folders that are not git folders.
        std::fs::create_dir_all(a.join("empty/.git")).unwrap();
        std::fs::create_dir_all(a.join("half/refs")).unwrap();
        std::fs::write(a.join("half/HEAD"), "x").unwrap();

        let roots = [a.clone(), b.clone()];
        let future = Instant::now() + std::time::Duration::from_secs(60);
        let f = find(&roots, Limits::SESSION, future, 0);
        assert_eq!(
            rels(&f),
            vec![
                (0, "bare.git".into(), false),
                (0, "x/.git".into(), false),
                (0, "x/.git/modules/sub/inner".into(), false),
                (0, "x/.git/worktrees/w".into(), false),
                (1, "common".into(), false),
                (1, "store/sep.git".into(), true),
                (1, "wt".into(), false),
            ]
        );
        assert!(f.notes.is_empty(), "{:?}", f.notes);

        // A `.git` file older than the session does not make its folder changed; a
        // deadline already past stops the search and says so.
        let f = find(&roots, Limits::SESSION, future, u64::MAX);
        assert!(f.places.iter().all(|p| !p.named_anew));
        let f = find(&roots, Limits::SESSION, Instant::now(), 0);
        assert!(f.places.is_empty());
        assert!(f.notes[0].contains("ran out of time"), "{:?}", f.notes);
        let few = Limits {
            depth: 64,
            entries: 3,
        };
        let f = find(&roots, few, future, 0);
        assert!(
            f.notes.iter().any(|n| n.contains("bound of entries")),
            "{:?}",
            f.notes
        );
    }
}
