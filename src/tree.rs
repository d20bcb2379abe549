//! Walks over a tree a session could write (its temp folder `$TMPDIR/relay-<id>`), made
//! to hold whatever the session left there (docs/THREAT-MODEL.md, "Leftovers and
//! purge"):
//!
//! - **No recursion.** The way down is a stack on the heap, so a tree 60,000 folders
//!   deep costs memory, not call stack: `std::fs::remove_dir_all` recurses once per
//!   level and overflowed the stack of the daemon's thread, which aborted the daemon.
//! - **A bounded number of descriptors.** Only the folder being read is open (three
//!   descriptors at most, for a moment, on the way back up): the walk climbs back
//!   through `..` and checks by device and inode that it reached the folder it came
//!   down from, so a folder moved meanwhile stops the walk instead of leading it
//!   elsewhere.
//! - **No link followed.** Every step is relative to a folder's descriptor (`openat`,
//!   `fstatat`, `unlinkat`) with `O_NOFOLLOW` / `AT_SYMLINK_NOFOLLOW`: a link is removed
//!   or passed over as itself, and a link put in a folder's place is never entered.
//! - **Bounded work.** At most [`MAX_DEPTH`] levels and [`MAX_ENTRIES`] entries, and at
//!   most [`NAME_BUDGET`] bytes of folder names waiting to be visited; past them the
//!   walk stops with an error (removal) or says what it did not read (the scan).

use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fchmod, fchmodat, fstat, fstatat, FchmodatFlags, FileStat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

/// Deepest level walked (the top folder is level 0). A path the kernel takes is at
/// most 4096 bytes (`PATH_MAX`), which names at most 2048 levels even with one-letter
/// names: a deeper folder is made only by a program that changes into each level in
/// turn, never by a tool that works with paths, and nothing relay or Claude Code keeps
/// comes near it.
pub const MAX_DEPTH: usize = 2048;

/// Most entries read in one walk (a folder read again counts again). About ten times a
/// large build or `node_modules` tree; removing that many takes seconds on a tmpfs and
/// a few minutes on a slow disk, on a blocking thread while the daemon goes on.
pub const MAX_ENTRIES: u64 = 2_000_000;

/// Most bytes of names the walk holds at once (folders waiting to be visited, and the
/// entries of the folder being emptied). A real tree holds a few thousand at a time; a
/// folder with more waiting names is read again once those are done (removal) or
/// reported as not wholly read (the scan).
pub const NAME_BUDGET: usize = 16 << 20;

/// What one held name costs beyond its bytes (its allocation).
const NAME_COST: usize = 32;

/// How far a walk may go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub depth: usize,
    pub entries: u64,
}

impl Limits {
    /// For a tree a session could write.
    pub const SESSION: Limits = Limits {
        depth: MAX_DEPTH,
        entries: MAX_ENTRIES,
    };
    /// No bound but memory, for a tree the caller made itself (the e2e harness's own
    /// deep tree). Still no recursion and a bounded number of descriptors.
    pub const NONE: Limits = Limits {
        depth: usize::MAX,
        entries: u64::MAX,
    };
}

/// Why a removal stopped. Its text names no entry: the names are the session's.
#[derive(Debug)]
pub enum TreeError {
    /// A folder deeper than this many levels.
    TooDeep(usize),
    /// More entries than this.
    TooMany(u64),
    /// The folder this many levels down was no longer where the walk came from.
    Moved(usize),
    /// A step failed this many levels down.
    Io {
        step: &'static str,
        depth: usize,
        err: std::io::Error,
    },
}

impl std::fmt::Display for TreeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TreeError::TooDeep(n) => write!(f, "a folder more than {n} levels down"),
            TreeError::TooMany(n) => write!(f, "more than {n} entries"),
            TreeError::Moved(d) => write!(f, "a folder {d} levels down moved while it was walked"),
            TreeError::Io {
                step,
                depth: 0,
                err,
            } => write!(f, "{step}: {err}"),
            TreeError::Io { step, depth, err } => write!(f, "{step} {depth} levels down: {err}"),
        }
    }
}

impl std::error::Error for TreeError {}

impl TreeError {
    /// A limit of the walk, rather than a failed step: what is left of the tree stays
    /// until a removal without the limits (`rm -rf` by hand) takes it.
    pub fn is_limit(&self) -> bool {
        matches!(self, TreeError::TooDeep(_) | TreeError::TooMany(_))
    }
}

fn io(step: &'static str, depth: usize, e: Errno) -> TreeError {
    TreeError::Io {
        step,
        depth,
        err: e.into(),
    }
}

/// Device and inode: who a folder is, to know it again.
// The casts are not needless on every platform (macOS's st_dev is an i32).
#[allow(clippy::unnecessary_cast)]
fn ident(st: &FileStat) -> (u64, u64) {
    (st.st_dev as u64, st.st_ino as u64)
}

fn is_dir(st: &FileStat) -> bool {
    st.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFDIR.bits()
}

fn cost(name: &CStr) -> usize {
    name.to_bytes().len() + NAME_COST
}

fn is_dot(name: &CStr) -> bool {
    matches!(name.to_bytes(), b"." | b"..")
}

/// Opens the folder `name` in `parent`, close-on-exec, never through a link (a link
/// or anything else in its place fails to open). `writable`: gives the owner `rwx` on
/// it first, through its name without following a link (`fchmodat` with
/// `AT_SYMLINK_NOFOLLOW`) or, where the platform refuses that, through the descriptor
/// once open, so a folder the session made unreadable or unwritable still empties.
fn open_folder(parent: RawFd, name: &CStr, writable: bool) -> nix::Result<(Dir, (u64, u64))> {
    if writable {
        if let Ok(st) = fstatat(Some(parent), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            if is_dir(&st) && st.st_mode & 0o700 != 0o700 {
                let _ = fchmodat(
                    Some(parent),
                    name,
                    Mode::S_IRWXU,
                    FchmodatFlags::NoFollowSymlink,
                );
            }
        }
    }
    let dir = Dir::openat(
        Some(parent),
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let st = fstat(dir.as_raw_fd())?;
    if writable && st.st_mode & 0o700 != 0o700 {
        // Not fatal: a step it was needed for fails on its own, and says which.
        let _ = fchmod(dir.as_raw_fd(), Mode::S_IRWXU);
    }
    Ok((dir, ident(&st)))
}

/// The folder above `dir`, through `..`; it must be `expect`, the folder the walk came
/// down from, or the walk stops (`Err(None)`: `dir` was moved meanwhile).
fn up(dir: &Dir, expect: (u64, u64)) -> Result<Dir, Option<Errno>> {
    let above = Dir::openat(
        Some(dir.as_raw_fd()),
        "..",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    if ident(&fstat(above.as_raw_fd())?) != expect {
        return Err(None);
    }
    Ok(above)
}

/// What an entry is, from the folder's listing when it says, else from `fstatat`
/// (never following a link).
fn kind_of(dir: RawFd, entry: &nix::dir::Entry) -> Kind {
    match entry.file_type() {
        Some(Type::Directory) => Kind::Folder,
        Some(Type::File) => Kind::File,
        Some(_) => Kind::Other,
        None => match fstatat(Some(dir), entry.file_name(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) if is_dir(&st) => Kind::Folder,
            Ok(st) if st.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFREG.bits() => Kind::File,
            _ => Kind::Other,
        },
    }
}

/// The folder `parent` opened for a walk, without following a link in its last
/// component (the caller vouches for the ones above).
fn open_parent(parent: &Path) -> Result<Dir, TreeError> {
    Dir::open(
        parent,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io("open the folder above", 0, e))
}

fn c_name(name: &OsStr) -> Result<CString, TreeError> {
    CString::new(name.as_bytes()).map_err(|_| io("name the folder", 0, Errno::EINVAL))
}

/// Removes `path` without following a link in its last component or below it: a link
/// or a file there goes itself, a folder goes with everything in it. `Ok(false)`:
/// nothing was there. The folders above `path` are the caller's to vouch for.
pub fn remove(path: &Path, limits: Limits) -> Result<bool, TreeError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io("name the folder", 0, Errno::EINVAL));
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    remove_in(parent, name, limits)
}

/// Removes the entry `name` of the folder `parent`, as [`remove`] does.
pub fn remove_in(parent: &Path, name: &OsStr, limits: Limits) -> Result<bool, TreeError> {
    let parent = open_parent(parent)?;
    remove_at(parent.as_raw_fd(), &c_name(name)?, limits)
}

/// One folder on the way down: its name in the folder above, who it is (to know the
/// folder above again on the way back up), and its folders still to visit.
struct Level {
    name: CString,
    id: (u64, u64),
    pending: Vec<CString>,
    /// Entries not read yet: before its first read, or after a read the name budget cut
    /// short.
    unread: bool,
}

fn remove_at(parent: RawFd, name: &CStr, limits: Limits) -> Result<bool, TreeError> {
    let st = match fstatat(Some(parent), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::ENOENT) => return Ok(false),
        Err(e) => return Err(io("look at the folder", 0, e)),
    };
    if !is_dir(&st) {
        // A link or a file in the folder's place: it goes, what it points at stays.
        unlinkat(Some(parent), name, UnlinkatFlags::NoRemoveDir)
            .map_err(|e| io("remove what is in the folder's place", 0, e))?;
        return Ok(true);
    }
    let (mut cur, id) = open_folder(parent, name, true).map_err(|e| io("open the folder", 0, e))?;
    let mut stack = vec![Level {
        name: name.to_owned(),
        id,
        pending: Vec::new(),
        unread: true,
    }];
    let mut held = 0usize;
    let mut seen = 0u64;
    loop {
        let depth = stack.len().saturating_sub(1);
        let Some(top) = stack.last_mut() else {
            return Ok(true);
        };
        if top.pending.is_empty() && top.unread {
            empty_files(&mut cur, top, depth, &mut held, &mut seen, limits)?;
            continue;
        }
        if let Some(sub) = top.pending.pop() {
            held -= cost(&sub);
            if depth + 1 > limits.depth {
                return Err(TreeError::TooDeep(limits.depth));
            }
            match open_folder(cur.as_raw_fd(), &sub, true) {
                Ok((dir, id)) => {
                    stack.push(Level {
                        name: sub,
                        id,
                        pending: Vec::new(),
                        unread: true,
                    });
                    cur = dir;
                }
                Err(Errno::ENOENT) => {}
                // No longer a folder (a link or a file now): it goes as itself.
                Err(Errno::ENOTDIR | Errno::ELOOP) => {
                    match unlinkat(
                        Some(cur.as_raw_fd()),
                        sub.as_c_str(),
                        UnlinkatFlags::NoRemoveDir,
                    ) {
                        Ok(()) | Err(Errno::ENOENT) => {}
                        Err(e) => return Err(io("remove an entry", depth + 1, e)),
                    }
                }
                Err(e) => return Err(io("open a folder", depth + 1, e)),
            }
            continue;
        }
        // Empty now: back up one level and remove it there.
        let Some(done) = stack.pop() else {
            return Ok(true);
        };
        let above = match stack.last() {
            Some(level) => Some(up(&cur, level.id).map_err(|e| match e {
                Some(e) => io("open the folder above", depth, e),
                None => TreeError::Moved(depth),
            })?),
            None => None,
        };
        drop(cur);
        let above_fd = above.as_ref().map_or(parent, |d| d.as_raw_fd());
        match unlinkat(
            Some(above_fd),
            done.name.as_c_str(),
            UnlinkatFlags::RemoveDir,
        ) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(io("remove a folder", depth, e)),
        }
        match above {
            Some(dir) => cur = dir,
            None => return Ok(true),
        }
    }
}

/// One read of the folder `dir` (at `depth`) for its removal: every entry that is not
/// a folder is removed (after the read, so the listing never changes under it), and
/// the folders are added to `level.pending`. A read the name budget cuts short leaves
/// `level.unread` set, and the folder is read again once its pending folders are gone.
fn empty_files(
    dir: &mut Dir,
    level: &mut Level,
    depth: usize,
    held: &mut usize,
    seen: &mut u64,
    limits: Limits,
) -> Result<(), TreeError> {
    level.unread = false;
    let fd = dir.as_raw_fd();
    let mut files: Vec<CString> = Vec::new();
    for entry in dir.iter() {
        let entry = entry.map_err(|e| io("read a folder", depth, e))?;
        let name = entry.file_name();
        if is_dot(name) {
            continue;
        }
        *seen += 1;
        if *seen > limits.entries {
            return Err(TreeError::TooMany(limits.entries));
        }
        // At least one name per read, so every read makes progress.
        if *held + cost(name) > NAME_BUDGET && !(level.pending.is_empty() && files.is_empty()) {
            level.unread = true;
            break;
        }
        *held += cost(name);
        match kind_of(fd, &entry) {
            Kind::Folder => level.pending.push(name.to_owned()),
            _ => files.push(name.to_owned()),
        }
    }
    for name in files {
        *held -= cost(&name);
        match unlinkat(Some(fd), name.as_c_str(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            // A folder after all (it changed since the listing): visited as one.
            Err(Errno::EISDIR | Errno::EPERM)
                if fstatat(Some(fd), name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| is_dir(&st)) =>
            {
                *held += cost(&name);
                level.pending.push(name);
            }
            Err(e) => return Err(io("remove an entry", depth + 1, e)),
        }
    }
    Ok(())
}

/// What an entry is, never following a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Folder,
    File,
    /// A link, a FIFO, a socket, a device, or something that could not be looked at.
    Other,
}

/// Why a folder was not read, or not wholly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unread {
    /// Deeper than the walk's depth.
    TooDeep,
    /// The walk's entry count ran out here (nothing after it was read), or the folder
    /// had more folders waiting than the name budget holds (those were not entered).
    TooMany,
    /// Opening or listing it failed.
    Unreadable(Errno),
    /// The top of the walk is a link, which is not followed.
    Link,
    /// It was no longer where the walk came from, on the way back up: the walk of this
    /// tree stopped there.
    Moved,
}

/// Where a [`Visitor`] is: the folder's path below the top of the walk (names joined
/// by `/`, empty for the top itself) and its level (the top is 0).
#[derive(Clone, Copy, Debug)]
pub struct Place<'a> {
    pub rel: &'a [u8],
    pub depth: usize,
}

/// What a read-only [`walk`] reports.
pub trait Visitor {
    /// An entry of the folder at `at`, open as `dir` for the call (for `openat`):
    /// every entry, folders included, before a folder is entered. Never followed.
    fn entry(&mut self, dir: RawFd, name: &CStr, kind: Kind, at: Place<'_>);
    /// A folder that was not read, or not wholly.
    fn unread(&mut self, at: Place<'_>, why: Unread);
    /// Whether to end the walk now (a bound of the visitor's own, such as time), asked
    /// before each folder is read: the walk then ends without a word to `unread`.
    fn stop(&mut self) -> bool {
        false
    }
    /// The folder at `at`, open as `dir`, has had all its entries told (before any of
    /// its folders is entered).
    fn read_through(&mut self, _dir: RawFd, _at: Place<'_>) {}
    /// Whether a folder of the person's own that cannot be opened or searched (a
    /// session took its modes away: `chmod 0111`) is given back the owner's `r-x` and
    /// read: a walk that must see everything a session could hide.
    fn unlock(&self) -> bool {
        false
    }
    /// A folder whose modes the walk gave the owner's `r-x` back ([`Self::unlock`]).
    fn unlocked(&mut self, _at: Place<'_>) {}
}

/// Gives the folder `name` of `parent` its owner's `r-x` when it lacks it and is the
/// person's own (owned by this process's user), through its name, never following a
/// link. Whether it changed a mode.
fn unlock_folder(parent: RawFd, name: &CStr) -> bool {
    let Ok(st) = fstatat(Some(parent), name, AtFlags::AT_SYMLINK_NOFOLLOW) else {
        return false;
    };
    if !is_dir(&st) || st.st_uid != nix::unistd::geteuid().as_raw() || st.st_mode & 0o500 == 0o500 {
        return false;
    }
    let mode = Mode::from_bits_truncate((st.st_mode | 0o500) & 0o7777);
    fchmodat(Some(parent), name, mode, FchmodatFlags::NoFollowSymlink).is_ok()
}

/// One folder on the way down of a read-only walk.
struct Frame {
    id: (u64, u64),
    pending: Vec<CString>,
    /// How long `rel` was before this folder's name was added.
    rel_len: usize,
}

/// Walks the folder `root` (never through a link), top down, reading each folder once,
/// and tells `v` every entry and every folder it could not read. Changes nothing.
pub fn walk(root: &Path, limits: Limits, v: &mut impl Visitor) {
    let Some(mut w) = Walk::open(root, limits, v) else {
        return;
    };
    if !w.read(0, v) {
        return;
    }
    loop {
        let Some(frame) = w.stack.last_mut() else {
            return;
        };
        let go_on = match frame.pending.pop() {
            Some(sub) => w.down(sub, v),
            None => w.climb(v),
        };
        if !go_on {
            return;
        }
    }
}

/// A read-only walk under way: the folder open, its path below the top, the folders
/// from the top down to it, and what the limits have counted so far.
struct Walk {
    cur: Dir,
    rel: Vec<u8>,
    stack: Vec<Frame>,
    /// Bytes of folder names waiting to be visited ([`NAME_BUDGET`]).
    held: usize,
    /// Entries read ([`Limits::entries`]).
    seen: u64,
    limits: Limits,
}

impl Walk {
    /// Opens the top of the walk, never through a link. `None`: nothing to walk; it is
    /// gone, or `v` was told it is a link or could not be read.
    fn open(root: &Path, limits: Limits, v: &mut impl Visitor) -> Option<Walk> {
        let top = Place { rel: b"", depth: 0 };
        if v.unlock() {
            // The top itself, a session's own folder, may have lost its modes too.
            let parent = root.parent().and_then(|p| open_parent(p).ok());
            if let (Some(parent), Some(name)) = (parent, root.file_name()) {
                let name = CString::new(name.as_bytes()).unwrap_or_default();
                if unlock_folder(parent.as_raw_fd(), &name) {
                    v.unlocked(top);
                }
            }
        }
        let cur = match Dir::open(
            root,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(d) => d,
            Err(Errno::ENOENT) => return None,
            // Linux says ENOTDIR for a link opened `O_DIRECTORY|O_NOFOLLOW`, macOS ELOOP.
            Err(Errno::ELOOP | Errno::ENOTDIR)
                if std::fs::symlink_metadata(root).is_ok_and(|m| m.file_type().is_symlink()) =>
            {
                v.unread(top, Unread::Link);
                return None;
            }
            Err(e) => {
                v.unread(top, Unread::Unreadable(e));
                return None;
            }
        };
        let id = match fstat(cur.as_raw_fd()) {
            Ok(st) => ident(&st),
            Err(e) => {
                v.unread(top, Unread::Unreadable(e));
                return None;
            }
        };
        Some(Walk {
            cur,
            rel: Vec::new(),
            stack: vec![Frame {
                id,
                pending: Vec::new(),
                rel_len: 0,
            }],
            held: 0,
            seen: 0,
            limits,
        })
    }

    /// Reads the folder open, at level `depth`, into the last frame ([`read_folder`]).
    /// `false`: the walk's entry count ran out, and the walk stops.
    fn read(&mut self, depth: usize, v: &mut impl Visitor) -> bool {
        let Some(frame) = self.stack.last_mut() else {
            return false;
        };
        read_folder(
            &mut self.cur,
            frame,
            &self.rel,
            depth,
            &mut self.held,
            &mut self.seen,
            self.limits,
            v,
        )
    }

    /// Goes down into `sub`, a folder of the one open, and reads it. A folder past the
    /// depth or one that cannot be opened is told to `v` and passed over; one gone, or
    /// no longer a folder (a link is not followed), is passed over. `false`: the walk
    /// stops.
    fn down(&mut self, sub: CString, v: &mut impl Visitor) -> bool {
        let depth = self.stack.len().saturating_sub(1);
        self.held -= cost(&sub);
        // `rel` names the folder below for a moment (no copy: it can be long).
        let rel_len = self.rel.len();
        if !self.rel.is_empty() {
            self.rel.push(b'/');
        }
        self.rel.extend_from_slice(sub.to_bytes());
        let at = Place {
            rel: &self.rel,
            depth: depth + 1,
        };
        if depth + 1 > self.limits.depth {
            v.unread(at, Unread::TooDeep);
            self.rel.truncate(rel_len);
            return true;
        }
        let mut opened = open_folder(self.cur.as_raw_fd(), &sub, false);
        let searchable = |r: &nix::Result<(Dir, (u64, u64))>| match r {
            Ok((d, _)) => fstat(d.as_raw_fd()).is_ok_and(|st| st.st_mode & 0o500 == 0o500),
            Err(e) => *e != Errno::EACCES,
        };
        if v.unlock() && !searchable(&opened) && unlock_folder(self.cur.as_raw_fd(), &sub) {
            v.unlocked(at);
            opened = open_folder(self.cur.as_raw_fd(), &sub, false);
        }
        let at = Place {
            rel: &self.rel,
            depth: depth + 1,
        };
        match opened {
            Ok((dir, id)) => {
                self.cur = dir;
                self.stack.push(Frame {
                    id,
                    pending: Vec::new(),
                    rel_len,
                });
                return self.read(depth + 1, v);
            }
            // Gone, or no longer a folder (a link is not followed).
            Err(Errno::ENOENT | Errno::ELOOP | Errno::ENOTDIR) => {}
            Err(e) => v.unread(at, Unread::Unreadable(e)),
        }
        self.rel.truncate(rel_len);
        true
    }

    /// Climbs from the folder open, read through, to the one above, which must be the
    /// folder the walk came down from (`up`). `false`: the walk is over (the top was
    /// read through), or stops where that folder could not be reached, as `v` is told.
    fn climb(&mut self, v: &mut impl Visitor) -> bool {
        let depth = self.stack.len().saturating_sub(1);
        let Some(done) = self.stack.pop() else {
            return false;
        };
        let Some(above) = self.stack.last() else {
            return false;
        };
        let at = Place {
            rel: &self.rel,
            depth,
        };
        match up(&self.cur, above.id) {
            Ok(dir) => self.cur = dir,
            Err(Some(e)) => {
                v.unread(at, Unread::Unreadable(e));
                return false;
            }
            Err(None) => {
                v.unread(at, Unread::Moved);
                return false;
            }
        }
        self.rel.truncate(done.rel_len);
        true
    }
}

/// Reads the folder `dir` once for a walk: tells `v` each entry and keeps its folders
/// in `frame.pending` while the name budget lasts. `false`: the walk's entry count ran
/// out, or the visitor asked to stop, and the walk stops.
#[allow(clippy::too_many_arguments)]
fn read_folder(
    dir: &mut Dir,
    frame: &mut Frame,
    rel: &[u8],
    depth: usize,
    held: &mut usize,
    seen: &mut u64,
    limits: Limits,
    v: &mut impl Visitor,
) -> bool {
    if v.stop() {
        return false;
    }
    let fd = dir.as_raw_fd();
    let at = Place { rel, depth };
    let mut cut = false;
    for entry in dir.iter() {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                v.unread(at, Unread::Unreadable(e));
                break;
            }
        };
        let name = entry.file_name();
        if is_dot(name) {
            continue;
        }
        *seen += 1;
        if *seen > limits.entries {
            v.unread(at, Unread::TooMany);
            return false;
        }
        let kind = kind_of(fd, &entry);
        v.entry(fd, name, kind, at);
        if kind == Kind::Folder {
            if *held + cost(name) > NAME_BUDGET && !frame.pending.is_empty() {
                cut = true;
            } else {
                *held += cost(name);
                frame.pending.push(name.to_owned());
            }
        }
    }
    if cut {
        v.unread(at, Unread::TooMany);
    }
    v.read_through(fd, at);
    // Visited in the order listed.
    frame.pending.reverse();
    true
}

/// For tests here and in the purge and the scan:
#[cfg(test)]
/// `levels` nested folders `d` under `top`, made one level at a time by name (as
/// the attack does: no path grows long), a file at the bottom.
pub(crate) fn nest(top: &Path, levels: usize) {
    std::fs::create_dir(top).unwrap();
    let mut cur = Dir::open(top, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty()).unwrap();
    for _ in 0..levels {
        nix::sys::stat::mkdirat(Some(cur.as_raw_fd()), "d", Mode::S_IRWXU).unwrap();
        cur = Dir::openat(
            Some(cur.as_raw_fd()),
            "d",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY,
            Mode::empty(),
        )
        .unwrap();
    }
    let fd = nix::fcntl::openat(
        Some(cur.as_raw_fd()),
        "bottom",
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_CLOEXEC,
        Mode::S_IRUSR | Mode::S_IWUSR,
    )
    .unwrap();
    let _ = nix::unistd::close(fd);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    /// A scratch folder, on a tmpfs where there is one: ext4 takes tens of seconds to
    /// make and remove 60,000 nested folders, a tmpfs about one.
    fn scratch() -> tempfile::TempDir {
        tempfile::tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .unwrap()
    }

    /// Takes a deep tree away before its `TempDir` is dropped, whatever the test did:
    /// `TempDir`'s own removal recurses once per level.
    struct Unnest(PathBuf);

    impl Drop for Unnest {
        fn drop(&mut self) {
            let _ = remove(&self.0, Limits::NONE);
        }
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn a_tree_deeper_than_the_limit_is_an_error_not_a_crash_and_a_deeper_limit_removes_it() {
        let d = scratch();
        let top = d.path().join("deep");
        let _unnest = Unnest(top.clone());
        // Far past what one stack frame per level survives on a test thread's stack.
        nest(&top, 60_000);
        let e = remove(&top, Limits::SESSION).unwrap_err();
        assert!(matches!(e, TreeError::TooDeep(MAX_DEPTH)), "{e}");
        assert!(e.is_limit());
        assert_eq!(e.to_string(), "a folder more than 2048 levels down");
        assert!(
            top.join("d/d/d").is_dir(),
            "a failed removal took the top away"
        );

        // Unbounded, the same walk gets to the bottom: with one descriptor held per
        // level it would need 60,000, past the usual soft limit (1024 on Linux, 256
        // on macOS), and fail with EMFILE.
        assert!(remove(&top, Limits::NONE).unwrap());
        assert!(std::fs::symlink_metadata(&top).is_err());
        assert!(
            !remove(&top, Limits::SESSION).unwrap(),
            "nothing left to remove"
        );
    }

    #[test]
    fn a_link_inside_is_removed_as_a_link_and_what_it_points_at_stays() {
        let d = scratch();
        let precious = d.path().join("precious");
        std::fs::create_dir_all(precious.join("inner")).unwrap();
        std::fs::write(precious.join("inner/file"), "keep").unwrap();
        std::fs::set_permissions(&precious, std::fs::Permissions::from_mode(0o751)).unwrap();
        std::fs::set_permissions(
            precious.join("inner"),
            std::fs::Permissions::from_mode(0o555),
        )
        .unwrap();
        let top = d.path().join("top");
        std::fs::create_dir_all(top.join("a/b")).unwrap();
        std::os::unix::fs::symlink(&precious, top.join("a/to-folder")).unwrap();
        std::os::unix::fs::symlink(precious.join("inner"), top.join("a/b/to-inner")).unwrap();
        std::os::unix::fs::symlink(precious.join("inner/file"), top.join("a/b/to-file")).unwrap();
        std::os::unix::fs::symlink("/nowhere", top.join("dangling")).unwrap();
        nix::unistd::mkfifo(&top.join("a/fifo"), Mode::S_IRUSR | Mode::S_IWUSR).unwrap();
        // A folder the session locked, and one it made unreadable.
        std::fs::create_dir_all(top.join("locked/inner")).unwrap();
        std::fs::write(top.join("locked/inner/f"), "x").unwrap();
        std::fs::set_permissions(top.join("locked"), std::fs::Permissions::from_mode(0o500))
            .unwrap();
        std::fs::create_dir_all(top.join("blind/inner")).unwrap();
        std::fs::set_permissions(top.join("blind"), std::fs::Permissions::from_mode(0o000))
            .unwrap();
        assert!(remove(&top, Limits::SESSION).unwrap());
        assert!(std::fs::symlink_metadata(&top).is_err());
        assert_eq!(
            std::fs::read_to_string(precious.join("inner/file")).unwrap(),
            "keep"
        );
        assert_eq!(mode(&precious), 0o751, "a linked folder's mode was changed");
        assert_eq!(mode(&precious.join("inner")), 0o555);
    }

    #[test]
    fn a_link_planted_in_the_folders_place_is_removed_itself() {
        let d = scratch();
        let precious = d.path().join("precious");
        std::fs::create_dir_all(&precious).unwrap();
        std::fs::write(precious.join("file"), "keep").unwrap();
        std::fs::set_permissions(&precious, std::fs::Permissions::from_mode(0o555)).unwrap();
        let top = d.path().join("top");
        std::os::unix::fs::symlink(&precious, &top).unwrap();
        assert!(remove(&top, Limits::SESSION).unwrap());
        assert!(std::fs::symlink_metadata(&top).is_err());
        assert_eq!(
            std::fs::read_to_string(precious.join("file")).unwrap(),
            "keep"
        );
        assert_eq!(mode(&precious), 0o555);
        // A file in its place goes too, and nothing there is nothing removed.
        std::fs::write(&top, "x").unwrap();
        assert!(remove(&top, Limits::SESSION).unwrap());
        assert!(!top.exists());
        assert!(!remove(&top, Limits::SESSION).unwrap());
        std::fs::set_permissions(&precious, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn more_entries_than_the_limit_stop_the_removal_and_exactly_the_limit_does_not() {
        let d = scratch();
        let top = d.path().join("wide");
        // 49 files and `sub` at the top, 50 files in `sub`: 100 entries.
        let make = || {
            std::fs::create_dir_all(top.join("sub")).unwrap();
            for i in 0..49 {
                std::fs::write(top.join(format!("f{i}")), "").unwrap();
            }
            for i in 0..50 {
                std::fs::write(top.join(format!("sub/g{i}")), "").unwrap();
            }
        };
        let limit = |entries| Limits {
            depth: MAX_DEPTH,
            entries,
        };
        make();
        let e = remove(&top, limit(99)).unwrap_err();
        assert!(matches!(e, TreeError::TooMany(99)), "{e}");
        assert!(e.is_limit());
        assert_eq!(e.to_string(), "more than 99 entries");
        assert!(top.join("sub").is_dir());
        make();
        assert!(remove(&top, limit(100)).unwrap());
        assert!(!top.exists());
    }

    #[test]
    fn a_folder_with_more_names_than_the_budget_holds_is_read_again_and_removed() {
        let d = scratch();
        let top = d.path().join("many");
        std::fs::create_dir(&top).unwrap();
        // Long names, so the budget runs out within one folder.
        let long = "n".repeat(250);
        let count = NAME_BUDGET / (250 + NAME_COST) + 500;
        for i in 0..count {
            std::fs::create_dir(top.join(format!("{long}{i}"))).unwrap();
        }
        assert!(remove(&top, Limits::SESSION).unwrap());
        assert!(!top.exists());
    }

    /// A visitor that writes down what it was told.
    #[derive(Default)]
    struct Seen {
        entries: Vec<(String, Kind, usize)>,
        unread: Vec<(String, Unread, usize)>,
    }

    impl Visitor for Seen {
        fn entry(&mut self, _dir: RawFd, name: &CStr, kind: Kind, at: Place<'_>) {
            let mut p = String::from_utf8_lossy(at.rel).into_owned();
            if !p.is_empty() {
                p.push('/');
            }
            p.push_str(&name.to_string_lossy());
            self.entries.push((p, kind, at.depth));
        }
        fn unread(&mut self, at: Place<'_>, why: Unread) {
            self.unread
                .push((String::from_utf8_lossy(at.rel).into_owned(), why, at.depth));
        }
    }

    #[test]
    fn the_walk_tells_every_entry_follows_no_link_and_says_what_it_did_not_read() {
        let d = scratch();
        let outside = d.path().join("outside");
        std::fs::create_dir_all(outside.join("secret")).unwrap();
        let top = d.path().join("top");
        std::fs::create_dir_all(top.join("a/b")).unwrap();
        std::fs::write(top.join("a/b/f"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, top.join("a/link")).unwrap();
        let mut v = Seen::default();
        walk(&top, Limits::SESSION, &mut v);
        let mut names: Vec<_> = v
            .entries
            .iter()
            .map(|(p, k, depth)| (p.as_str(), *k, *depth))
            .collect();
        names.sort_by_key(|(p, _, _)| p.to_string());
        assert_eq!(
            names,
            vec![
                ("a", Kind::Folder, 0),
                ("a/b", Kind::Folder, 1),
                ("a/b/f", Kind::File, 2),
                ("a/link", Kind::Other, 1),
            ]
        );
        assert!(v.unread.is_empty(), "{:?}", v.unread);

        // Too deep: the first folder past the limit is named, nothing below is read.
        let deep = d.path().join("deep");
        let _unnest = Unnest(deep.clone());
        nest(&deep, 60_000);
        let mut v = Seen::default();
        walk(&deep, Limits::SESSION, &mut v);
        assert_eq!(v.entries.len(), MAX_DEPTH + 1);
        assert_eq!(v.unread.len(), 1, "{:?}", v.unread.len());
        let (rel, why, depth) = &v.unread[0];
        assert_eq!((*why, *depth), (Unread::TooDeep, MAX_DEPTH + 1));
        assert_eq!(rel.len(), 2 * (MAX_DEPTH + 1) - 1);

        // The entry count: the walk stops where it ran out, and says so.
        let mut v = Seen::default();
        let two = Limits {
            depth: MAX_DEPTH,
            entries: 2,
        };
        walk(&top, two, &mut v);
        assert_eq!(v.entries.len(), 2);
        assert_eq!(v.unread.len(), 1);
        assert_eq!(v.unread[0].1, Unread::TooMany);

        // The top a link: not followed, and said.
        let link = d.path().join("link-top");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        let mut v = Seen::default();
        walk(&link, Limits::SESSION, &mut v);
        assert!(v.entries.is_empty());
        assert_eq!(v.unread.len(), 1);
        assert_eq!(v.unread[0].1, Unread::Link);
    }

    /// A visitor that unlocks, and writes down what it unlocked and read through.
    #[derive(Default)]
    struct Unlocks {
        seen: Seen,
        unlocked: Vec<String>,
        through: Vec<String>,
    }

    impl Visitor for Unlocks {
        fn entry(&mut self, dir: RawFd, name: &CStr, kind: Kind, at: Place<'_>) {
            self.seen.entry(dir, name, kind, at);
        }
        fn unread(&mut self, at: Place<'_>, why: Unread) {
            self.seen.unread(at, why);
        }
        fn read_through(&mut self, _dir: RawFd, at: Place<'_>) {
            self.through
                .push(String::from_utf8_lossy(at.rel).into_owned());
        }
        fn unlock(&self) -> bool {
            true
        }
        fn unlocked(&mut self, at: Place<'_>) {
            self.unlocked
                .push(String::from_utf8_lossy(at.rel).into_owned());
        }
    }

    #[test]
    fn a_walk_that_unlocks_reads_folders_a_session_made_unlistable_and_says_which() {
        use std::os::unix::fs::PermissionsExt;
        let d = scratch();
        let top = d.path().join("top");
        std::fs::create_dir_all(top.join("hid/den")).unwrap();
        std::fs::write(top.join("hid/den/config"), "x").unwrap();
        let set = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        set(&top.join("hid/den"), 0o111);
        set(&top.join("hid"), 0o111);
        set(&top, 0o311);
        let mut v = Unlocks::default();
        walk(&top, Limits::SESSION, &mut v);
        assert!(v.seen.unread.is_empty(), "{:?}", v.seen.unread);
        assert!(v.seen.entries.iter().any(|(p, _, _)| p == "hid/den/config"));
        assert_eq!(v.unlocked, ["", "hid", "hid/den"]);
        assert_eq!(v.through, ["", "hid", "hid/den"]);
        assert_eq!(mode(&top.join("hid")) & 0o777, 0o511);
        assert_eq!(mode(&top) & 0o777, 0o711);
        // A plain walk changes no mode.
        set(&top.join("hid"), 0o111);
        let mut plain = Seen::default();
        walk(&top, Limits::SESSION, &mut plain);
        assert_eq!(mode(&top.join("hid")) & 0o777, 0o111);
        set(&top.join("hid"), 0o755);
        set(&top.join("hid/den"), 0o755);
    }
}
