//! The folders relay made in the person's folders so that bubblewrap could hold them
//! read-only (`.git`, `.vscode`, `.idea`, `.claude`, a repository's `hooks`; the
//! execution-bearing list, docs/session-host.md#execution-bearing-files), and their
//! removal once no launch uses them: nothing relay made for a session stays behind.
//!
//! A launch notes what it made and what it uses ([`MadeFolders::claim`]); its end lets
//! go ([`MadeFolders::release`]), and every folder relay made that no running launch
//! uses is removed if it is still the empty folder relay made: the same `(dev, ino)`,
//! reached without following a link, and `rmdir`, which removes nothing but an empty
//! folder. One that holds something now is the person's, and is left and forgotten. A
//! claim holds a shared `flock` on each folder its launch holds, and a removal takes it
//! exclusively first, so no relay removes what another relay's sandbox on the same
//! folder holds (a host `rmdir` would lift that sandbox's read-only bind). The list is
//! kept in `<config>/made-folders.json`, so a relay that died removes them at its next
//! start.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use nix::fcntl::{openat, Flock, FlockArg, OFlag};
use nix::sys::stat::{fstat, Mode};
use nix::unistd::{unlinkat, UnlinkatFlags};
use serde::{Deserialize, Serialize};

/// One folder relay made: where (canonical), and which folder it was.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Made {
    pub path: PathBuf,
    pub dev: u64,
    pub ino: u64,
}

/// What relay made, and what each launch in flight or running uses.
pub struct MadeFolders {
    file: PathBuf,
    state: Mutex<State>,
}

/// A path a launch holds, with the shared lock on it when it is a folder ([`hold`]).
type Held = (PathBuf, Option<Flock<std::fs::File>>);

#[derive(Default)]
struct State {
    made: Vec<Made>,
    /// Each claim's paths, by its key, each folder with its shared lock ([`hold`]).
    using: HashMap<String, Vec<Held>>,
    claims: u64,
    /// Launches under way ([`Flight`]): a plan that found a folder there counts on it.
    flying: usize,
    /// An end came while launches were under way: the last one's landing sweeps.
    due: bool,
}

/// A launch under way, from before its plan looks at the disk to its answer: no folder
/// relay made is removed meanwhile, as the plan may have found it there and not list it
/// to be made.
pub struct Flight<'a>(&'a MadeFolders);

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        let mut s = self.0.state();
        s.flying -= 1;
        if s.flying == 0 && s.due {
            self.0.sweep(&mut s);
        }
    }
}

/// At most this many folders are remembered: a launch makes a few per grant.
const MOST: usize = 10_000;

impl MadeFolders {
    /// The list kept in `file`; one that cannot be read is started afresh (logged).
    pub fn open(file: PathBuf) -> MadeFolders {
        let made = match std::fs::read(&file) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                crate::listen::log(format_args!(
                    "relay: {}: {e}; the folders it named are left where they are",
                    file.display()
                ));
                Vec::new()
            }),
            Err(_) => Vec::new(),
        };
        MadeFolders {
            file,
            state: Mutex::new(State {
                made,
                ..State::default()
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A launch of session `id` runs `make`, which makes what it makes (`Made`) and
    /// names every path the launch holds, under the list's lock: no other launch's end
    /// removes a folder between its making and this claim. Returns the claim's key,
    /// which [`MadeFolders::release`] takes.
    pub fn claim<T, E>(
        &self,
        id: &str,
        make: impl FnOnce() -> Result<(T, Vec<Made>, Vec<PathBuf>), E>,
    ) -> Result<(T, String), E> {
        let mut s = self.state();
        let (out, made, paths) = make()?;
        s.claims += 1;
        let key = format!("{id}/{}", s.claims);
        if !made.is_empty() {
            for m in made {
                if s.made.len() < MOST && !s.made.iter().any(|o| o.path == m.path) {
                    s.made.push(m);
                }
            }
            self.write(&s.made);
        }
        let held = paths
            .into_iter()
            .map(|p| {
                let lock = hold(&p);
                (p, lock)
            })
            .collect();
        s.using.insert(key.clone(), held);
        Ok((out, key))
    }

    /// A launch begins: see [`Flight`].
    pub fn flight(&self) -> Flight<'_> {
        self.state().flying += 1;
        Flight(self)
    }

    /// The launch of claim `key` ended, or was refused: each folder relay made that no
    /// other launch uses is removed, now or, while launches are under way, once the
    /// last one has its answer. Returns the folders removed now.
    pub fn release(&self, key: &str) -> Vec<PathBuf> {
        let mut s = self.state();
        s.using.remove(key);
        if s.flying > 0 {
            s.due = true;
            return Vec::new();
        }
        self.sweep(&mut s)
    }

    fn sweep(&self, s: &mut State) -> Vec<PathBuf> {
        s.due = false;
        let used: HashSet<PathBuf> = s.using.values().flatten().map(|(p, _)| p.clone()).collect();
        let before = s.made.len();
        // The deepest first: a folder relay made inside another it made.
        s.made
            .sort_by_key(|m| std::cmp::Reverse(m.path.components().count()));
        let mut removed = Vec::new();
        s.made.retain(|m| {
            if used.contains(&m.path) {
                return true;
            }
            match remove_if_made(m) {
                Fate::Removed => removed.push(m.path.clone()),
                Fate::Held => return true,
                Fate::Forgotten => {}
            }
            false
        });
        if s.made.len() != before {
            self.write(&s.made);
        }
        removed
    }

    fn write(&self, made: &[Made]) {
        let tmp = self.file.with_extension("json.tmp");
        let written = serde_json::to_vec(made)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, &self.file));
        if let Err(e) = written {
            crate::listen::log(format_args!("relay: {}: {e}", self.file.display()));
        }
    }
}

/// Opens `dir` (absolute) one component at a time, following no link.
fn open_dir(dir: &Path) -> nix::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let raw = openat(None, "/", flags, Mode::empty())?;
    // Safety: `raw` was just returned by openat(2) and is owned by nobody else.
    let mut at = unsafe { OwnedFd::from_raw_fd(raw) };
    for c in dir.components() {
        match c {
            Component::RootDir => continue,
            Component::Normal(name) => {
                let raw = openat(Some(at.as_raw_fd()), name, flags, Mode::empty())?;
                // Safety: as above.
                at = unsafe { OwnedFd::from_raw_fd(raw) };
            }
            _ => return Err(nix::errno::Errno::EINVAL),
        }
    }
    Ok(at)
}

/// What became of a folder relay made, at a sweep.
#[derive(Debug, PartialEq, Eq)]
enum Fate {
    Removed,
    /// Some launch holds it, maybe another relay's on the same folder: tried again at
    /// the next sweep.
    Held,
    /// Not relay's to remove any more: gone, replaced, reached through a link now, or
    /// holding something.
    Forgotten,
}

/// Removes `m` if it is still the folder relay made, empty, and no launch of any relay
/// holds it: each claim holds a shared `flock` on the folders it holds
/// ([`MadeFolders::claim`]), so a sweep that cannot take it exclusively leaves it.
fn remove_if_made(m: &Made) -> Fate {
    let (Some(parent), Some(name)) = (m.path.parent(), m.path.file_name()) else {
        return Fate::Forgotten;
    };
    let Ok(at) = open_dir(parent) else {
        return Fate::Forgotten;
    };
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let Ok(raw) = openat(Some(at.as_raw_fd()), name, flags, Mode::empty()) else {
        return Fate::Forgotten;
    };
    // Safety: `raw` was just returned by openat(2) and is owned by nobody else.
    let folder = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(raw) });
    match fstat(folder.as_raw_fd()) {
        Ok(st) if dev_ino(&st) == (m.dev, m.ino) => {}
        _ => return Fate::Forgotten,
    }
    let Ok(_locked) = Flock::lock(folder, FlockArg::LockExclusiveNonblock) else {
        return Fate::Held;
    };
    match unlinkat(Some(at.as_raw_fd()), name, UnlinkatFlags::RemoveDir) {
        Ok(()) => Fate::Removed,
        Err(nix::errno::Errno::EBUSY) => Fate::Held,
        Err(_) => Fate::Forgotten,
    }
}

/// A shared `flock` on the folder at `path`, reached without a link, for as long as a
/// launch holds it: what no relay's sweep removes meanwhile. `None` for what is no
/// folder, or one a sweep holds right now (it is about to go; the launch's bind then
/// fails, and says so).
fn hold(path: &Path) -> Option<Flock<std::fs::File>> {
    let (parent, name) = (path.parent()?, path.file_name()?);
    let at = open_dir(parent).ok()?;
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let raw = openat(Some(at.as_raw_fd()), name, flags, Mode::empty()).ok()?;
    // Safety: as above.
    let folder = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(raw) });
    Flock::lock(folder, FlockArg::LockSharedNonblock).ok()
}

/// A stat's `(dev, ino)`, as `MetadataExt` gives them on every platform.
#[allow(clippy::unnecessary_cast)] // `st_dev` is an i32 on macOS
pub fn dev_ino(st: &nix::sys::stat::FileStat) -> (u64, u64) {
    (st.st_dev as u64, st.st_ino as u64)
}

/// The identity of the folder at `path`, not followed.
pub fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.is_dir())
        .map(|m| (m.dev(), m.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn made(path: &Path) -> Made {
        let (dev, ino) = identity(path).unwrap();
        Made {
            path: path.to_path_buf(),
            dev,
            ino,
        }
    }

    fn claim(list: &MadeFolders, id: &str, made: Vec<Made>, paths: Vec<PathBuf>) -> String {
        list.claim(id, || Ok::<_, ()>(((), made, paths))).unwrap().1
    }

    #[test]
    fn an_empty_folder_relay_made_goes_when_no_launch_uses_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let (vscode, git, hooks) = (
            root.join(".vscode"),
            root.join("repo/.git"),
            root.join("repo/.git/hooks"),
        );
        for p in [&vscode, &hooks] {
            std::fs::create_dir_all(p).unwrap();
        }
        let file = root.join("made.json");
        let list = MadeFolders::open(file.clone());
        let a = claim(
            &list,
            "a",
            vec![made(&vscode), made(&git), made(&hooks)],
            vec![vscode.clone(), git.clone(), hooks.clone()],
        );
        // A second launch of the same id (a resume) holds .vscode, found made.
        let b = claim(&list, "a", vec![], vec![vscode.clone()]);
        assert_ne!(a, b);
        // The first ends: the second still uses .vscode; .git and its hooks go, the
        // deeper first.
        assert_eq!(list.release(&a), vec![hooks.clone(), git.clone()]);
        assert!(vscode.is_dir() && !git.exists() && root.join("repo").is_dir());
        // Remembered on file: the next relay removes it once nothing holds it (while
        // this one's launch holds it, it stays).
        let again = MadeFolders::open(file);
        assert!(again.release("none").is_empty());
        drop(list);
        assert_eq!(again.release("none"), vec![vscode.clone()]);
        assert!(!vscode.exists());
        assert!(again.release("none").is_empty());
    }

    #[test]
    fn a_folder_that_holds_something_or_was_replaced_or_linked_stays() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let (idea, claude, real, via) = (
            root.join(".idea"),
            root.join(".claude"),
            root.join("real"),
            root.join("via"),
        );
        for p in [&idea, &claude, &real.join(".vscode")] {
            std::fs::create_dir_all(p).unwrap();
        }
        let (m_idea, m_claude, m_linked) = (
            made(&idea),
            made(&claude),
            Made {
                path: via.join(".vscode"),
                ..made(&real.join(".vscode"))
            },
        );
        std::fs::write(idea.join("workspace.xml"), "the person's").unwrap();
        // Replaced by another empty folder, the one relay made kept elsewhere.
        std::fs::rename(&claude, root.join("moved")).unwrap();
        std::fs::create_dir(&claude).unwrap();
        std::os::unix::fs::symlink(&real, &via).unwrap();
        let list = MadeFolders::open(root.join("made.json"));
        let a = claim(&list, "a", vec![m_idea, m_claude, m_linked], vec![]);
        assert!(list.release(&a).is_empty());
        assert!(idea.join("workspace.xml").exists() && claude.is_dir());
        assert!(real.join(".vscode").is_dir(), "removed through a link");
        // Each is forgotten: the person's now.
        assert!(list.state().made.is_empty());
    }

    #[test]
    fn nothing_goes_while_a_launch_is_under_way_and_the_last_one_sweeps() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let vscode = root.join(".vscode");
        std::fs::create_dir(&vscode).unwrap();
        let list = MadeFolders::open(root.join("made.json"));
        let a = claim(&list, "a", vec![made(&vscode)], vec![vscode.clone()]);
        let (one, two) = (list.flight(), list.flight());
        // A plan under way found .vscode there: a ends, and it stays.
        assert!(list.release(&a).is_empty());
        drop(one);
        assert!(vscode.is_dir());
        drop(two);
        assert!(!vscode.exists());
    }

    #[test]
    fn a_folder_another_relays_launch_holds_stays_until_it_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let git = root.join(".git");
        std::fs::create_dir(&git).unwrap();
        // Two relays on one project: a made it, b's sandbox holds it, found there.
        let (a, b) = (
            MadeFolders::open(root.join("a.json")),
            MadeFolders::open(root.join("b.json")),
        );
        let ka = claim(&a, "t-a", vec![made(&git)], vec![git.clone()]);
        let kb = claim(&b, "t-b", vec![], vec![git.clone()]);
        assert!(a.release(&ka).is_empty());
        assert!(
            git.is_dir(),
            "removed while another relay's sandbox holds it"
        );
        assert_eq!(a.state().made.len(), 1, "forgotten while held");
        assert!(b.release(&kb).is_empty());
        assert_eq!(a.release(""), vec![git.clone()]);
        assert!(!git.exists());
    }

    #[test]
    fn a_list_that_cannot_be_read_is_started_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("made.json");
        std::fs::write(&file, "not json").unwrap();
        let list = MadeFolders::open(file);
        assert!(list.state().made.is_empty());
    }
}
