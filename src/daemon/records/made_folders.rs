//! The folders relay made in the person's folders so that bubblewrap could hold them
//! read-only (`.git`, `.vscode`, `.idea`, `.claude`, a repository's `hooks`; the
//! execution-bearing list, docs/session-host.md#execution-bearing-files), and their
//! removal once no launch uses them: nothing relay made for a session stays behind.
//!
//! A launch notes what it made and what it uses ([`MadeFolders::claim`]); its end lets
//! go ([`MadeFolders::release`]), and every folder relay made that no running launch
//! uses is removed if it is still the empty folder relay made: the same `(dev, ino)`,
//! reached without following a link, and `rmdir`, which removes nothing but an empty
//! folder. One that holds something now is the person's, and is left and forgotten. The
//! list is kept in `<config>/made-folders.json`, so a relay that died removes them at its
//! next start.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, Mode, SFlag};
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

#[derive(Default)]
struct State {
    made: Vec<Made>,
    /// Each claim's paths, by its key.
    using: HashMap<String, Vec<PathBuf>>,
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
        s.using.insert(key.clone(), paths);
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
        let used: Vec<PathBuf> = s.using.values().flatten().cloned().collect();
        let before = s.made.len();
        // The deepest first: a folder relay made inside another it made.
        s.made
            .sort_by_key(|m| std::cmp::Reverse(m.path.components().count()));
        let mut removed = Vec::new();
        s.made.retain(|m| {
            if used.iter().any(|u| u == &m.path) {
                return true;
            }
            if remove_if_made(m) {
                removed.push(m.path.clone());
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

/// Removes `m` if it is still the folder relay made and empty.
fn remove_if_made(m: &Made) -> bool {
    let (Some(parent), Some(name)) = (m.path.parent(), m.path.file_name()) else {
        return false;
    };
    let Ok(at) = open_dir(parent) else {
        return false;
    };
    let Ok(st) = fstatat(Some(at.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
        return false;
    };
    let is_dir = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR;
    if !is_dir || dev_ino(&st) != (m.dev, m.ino) {
        return false;
    }
    unlinkat(Some(at.as_raw_fd()), name, UnlinkatFlags::RemoveDir).is_ok()
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
        // Remembered on file: a new relay removes it once nothing uses it.
        let again = MadeFolders::open(file);
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
    fn a_list_that_cannot_be_read_is_started_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("made.json");
        std::fs::write(&file, "not json").unwrap();
        let list = MadeFolders::open(file);
        assert!(list.state().made.is_empty());
    }
}
