//! One git folder of a session's grants: whether the session made or changed it, and if
//! so its configuration cut to the inert entries and its hooks moved out, into
//! `<git folder>/relay-set-aside/<session id>-<unix ms>/` (never deleted), with a
//! README saying what, which session and how to restore it.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::renameat;
use nix::sys::stat::{fchmod, FileStat, Mode, SFlag};

use super::at::{self, c, Unread};
use super::config::{self, Cut, File};
use crate::wire::SetAside;

/// Most bytes of a configuration file read; a larger one is set aside whole.
const CONFIG_MAX: u64 = 1 << 20;
/// Most entries of a hooks folder moved.
const HOOKS_MAX: usize = 10_000;

/// The session whose end it is, as the decisions need it.
pub struct Ctx<'a> {
    pub session: &'a str,
    /// When the setting aside happens (the folder's name).
    pub stamp_ms: u64,
    /// The session's launch (ms since the epoch).
    pub created_ms: u64,
    /// bwrap: each path bound read-only over a write grant, with its device and inode
    /// at launch (`Reach::held`).
    pub held: &'a [(PathBuf, Option<(u64, u64)>)],
    /// The paths the launch pinned read-only (`Reach::pins`): a git folder whose
    /// `config` or `hooks` is among them was one at launch.
    pub pins: &'a [PathBuf],
    /// The live watch, while the session runs: a rebase's state and legacy remotes
    /// wait for its end.
    pub live: bool,
}

impl Ctx<'_> {
    /// Whether the entry was changed at or after the launch (its ctime, which no
    /// process can set back).
    fn is_new(&self, st: &FileStat) -> bool {
        at::since_launch(st, self.created_ms)
    }

    /// Whether the entry at `path` (`id`: its device and inode now) was read-only to the
    /// session all along: bound read-only at launch, and still the very file bound (one
    /// the person's tool renamed over it the session could write until the watcher
    /// stopped it). Known only to the relay that launched it, and only under bwrap.
    fn held(&self, path: &Path, id: (u64, u64)) -> bool {
        self.held
            .iter()
            .any(|(p, held)| p == path && *held == Some(id))
    }

    /// The entry `name` of the git folder `dir` at `path`, when it is there, was not
    /// held, and changed since the launch.
    fn changed(&self, dir: RawFd, path: &Path, name: &str) -> bool {
        at::look(dir, &c(name))
            .is_ok_and(|st| !self.held(&path.join(name), at::ident(&st)) && self.is_new(&st))
    }

    /// Whether the folder at `path` became a git folder, or another one, during the
    /// session: one the launch did not pin whose `HEAD`, `commondir` or `gitdir` changed
    /// since. Its `config` and hooks may be older than the launch — planted by an
    /// earlier session in a folder that was no git folder then — and are the session's
    /// all the same. (`objects` and `refs` change with every commit; a folder that
    /// already had a `HEAD` was looked at as one step short of a git folder at the end
    /// of the session that made it: `find`.)
    fn made_anew(&self, dir: RawFd, path: &Path) -> bool {
        let pinned = ["config", "hooks"]
            .iter()
            .any(|n| self.pins.iter().any(|p| *p == path.join(n)));
        !pinned
            && STRUCTURE
                .iter()
                .any(|n| at::look(dir, &c(n)).is_ok_and(|st| self.is_new(&st)))
    }
}

/// The names that make a folder a git folder, or point it at another, that git's own
/// work leaves alone in a repository it uses (a checkout writes `HEAD` anew).
const STRUCTURE: [&str; 3] = ["HEAD", "commondir", "gitdir"];

/// A git folder's state that the person's git runs commands from: an interrupted
/// rebase's, `cherry-pick`'s or `am`'s todo list (`exec` lines, run at
/// `git rebase --continue`), and the legacy `remotes/` and `branches/` files (a URL of
/// any transport). Moved aside whole when the session changed them.
const STATE: [&str; 5] = [
    "rebase-merge",
    "rebase-apply",
    "sequencer",
    "remotes",
    "branches",
];

/// The names git takes configuration from in a git folder.
const CONFIGS: [(&str, File); 2] = [
    ("config", File::Config),
    ("config.worktree", File::Worktree),
];

/// The git folder open as `dir`, at `path`: what was set aside there, `None` when the
/// session changed nothing git runs there. Each configuration file is cut when it
/// changed; the hooks are moved when the folder or one of them did. `named_anew`: a
/// `.git` file the session made names this folder, and every file of it counts.
pub fn visit(ctx: &Ctx, fd: RawFd, path: &Path, named_anew: bool) -> Option<SetAside> {
    let named_anew = named_anew || ctx.made_anew(fd, path);
    let unheld = |name: &str| {
        at::look(fd, &c(name)).is_ok_and(|st| !ctx.held(&path.join(name), at::ident(&st)))
    };
    let changed = |name: &str| {
        if named_anew {
            unheld(name)
        } else {
            ctx.changed(fd, path, name)
        }
    };
    let configs: Vec<(&str, File)> = CONFIGS.into_iter().filter(|(n, _)| changed(n)).collect();
    let hooks = changed("hooks") || (unheld("hooks") && entries_changed(ctx, fd, "hooks"));
    let state: Vec<&str> = STATE
        .into_iter()
        .filter(|_| !ctx.live)
        .filter(|n| {
            at::look(fd, &c(n)).is_ok()
                && (named_anew || ctx.changed(fd, path, n) || entries_changed(ctx, fd, n))
                && !empty_folder(fd, n)
        })
        .collect();
    if configs.is_empty() && !hooks && state.is_empty() {
        return None;
    }
    at::writable(fd);
    let mut out = SetAside {
        repository: path.display().to_string(),
        ..Default::default()
    };
    let mut aside = Aside::new(fd, path, ctx);
    for (name, file) in configs {
        if let Err(e) = cut_config((fd, path), name, file, &mut aside, &mut out) {
            problem(&mut out, format!("{name}: {e}"));
        }
    }
    if hooks {
        if let Err(e) = move_hooks(fd, &mut aside, &mut out) {
            problem(&mut out, format!("hooks: {e}"));
        }
    }
    for name in state {
        match aside.take(fd, &c(name), name) {
            Ok(()) => out.whole.push(name.to_string()),
            Err(e) => problem(&mut out, format!("{name}: {e}")),
        }
    }
    aside.finish(&mut out, ctx.session);
    let moved = !(out.keys.is_empty() && out.whole.is_empty() && out.hooks.is_empty());
    (moved || out.problem.is_some()).then_some(out)
}

/// Whether `name` of `dir` is a folder with nothing in it (`git init`'s `branches/`).
fn empty_folder(dir: RawFd, name: &str) -> bool {
    at::folder(dir, &c(name))
        .ok()
        .and_then(|mut d| at::names(&mut d, 1).ok())
        .is_some_and(|n| n.is_empty())
}

fn problem(out: &mut SetAside, p: String) {
    out.problem = Some(match out.problem.take() {
        Some(before) => format!("{before}; {p}"),
        None => p,
    });
}

/// An entry of the folder `name` (the hooks, a rebase's state) changed since the
/// launch (one renamed or linked in counts: both change its ctime); one that cannot be
/// listed within the bound counts too.
fn entries_changed(ctx: &Ctx, dir: RawFd, name: &str) -> bool {
    let Ok(mut folder) = at::folder(dir, &c(name)) else {
        // Not a folder (a link, a file git would read) or not to be opened: the
        // session's, as far as anyone can tell.
        return at::look(dir, &c(name)).is_ok_and(|st| !at::is_kind(&st, SFlag::S_IFDIR));
    };
    let fd = folder.as_raw_fd();
    match at::names(&mut folder, HOOKS_MAX) {
        Ok(names) => names
            .iter()
            .any(|n| at::look(fd, n).is_ok_and(|st| ctx.is_new(&st))),
        Err(_) => true,
    }
}

/// `name` of the git folder cut to its inert entries, what it held saved aside first. A
/// file git could not read as text (a link, which git would follow; a FIFO; too large)
/// is moved aside whole and, for `config`, replaced by the format version alone.
fn cut_config(
    (dir, path): (RawFd, &Path),
    name: &str,
    file: File,
    aside: &mut Aside,
    out: &mut SetAside,
) -> Result<(), String> {
    let cname = c(name);
    let saved = format!("{name}.txt");
    // One the session made unreadable (`chmod 0`) is given back its owner's read.
    let read = match at::read_small(dir, &cname, CONFIG_MAX) {
        Err(Unread::Failed(Errno::EACCES)) if at::readable(dir, &cname) => {
            at::read_small(dir, &cname, CONFIG_MAX)
        }
        other => other,
    };
    let (bytes, st, opened) = match read {
        Ok(read) => read,
        Err(Unread::Missing) => return Ok(()),
        Err(Unread::NotAFile | Unread::TooLarge) => {
            aside.take(dir, &cname, &saved)?;
            out.whole.push(name.to_string());
            if file == File::Worktree {
                return Ok(());
            }
            let kept = config::replacement(file);
            let mode = Mode::from_bits_truncate(0o644);
            return at::write_new(dir, &cname, &kept, mode).map_err(|e| format!("write: {e}"));
        }
        Err(Unread::Failed(e)) => return Err(format!("read: {e}")),
    };
    let keep =
        |e: &config::Entry| super::allow::admits(e) && super::allow::worktree_is_gits(path, e);
    let (kept, keys, whole) = match config::cut(&bytes, file, keep) {
        Cut::Inert => return Ok(()),
        Cut::Trimmed { kept, moved } => (kept, moved.into_iter().collect(), false),
        Cut::Unreadable { kept } => (kept, Vec::new(), true),
    };
    if let Err(e) = aside.save(&saved, &bytes) {
        // Nothing it held is lost, and git runs nothing of it: git stops at a
        // configuration file it cannot read.
        let _ = fchmod(opened.as_raw_fd(), Mode::empty());
        return Err(format!("{e}; made unreadable instead"));
    }
    // Its modes as they were, but never writable by others.
    at::replace(
        dir,
        &cname,
        &kept,
        Mode::from_bits_truncate(st.st_mode & 0o664),
    )
    .map_err(|e| format!("replace: {e}"))?;
    if whole {
        out.whole.push(name.to_string());
    }
    out.keys.extend(keys);
    Ok(())
}

/// Every hook but git's samples moved aside by name; a `hooks` that is not a folder (a
/// link git would follow), or cannot be opened or listed, moved aside whole.
fn move_hooks(dir: RawFd, aside: &mut Aside, out: &mut SetAside) -> Result<(), String> {
    let st = match at::look(dir, &c("hooks")) {
        Ok(st) => st,
        Err(Errno::ENOENT) => return Ok(()),
        Err(e) => return Err(e.to_string()),
    };
    let listed = if at::is_kind(&st, SFlag::S_IFDIR) {
        at::folder(dir, &c("hooks")).ok().and_then(|mut hooks| {
            at::writable(hooks.as_raw_fd());
            let names = at::names(&mut hooks, HOOKS_MAX).ok()?;
            Some((hooks, names))
        })
    } else {
        None
    };
    // Not a folder, or one that cannot be opened or listed within the bound (a session
    // may take its modes away, or fill it): it goes whole.
    let Some((hooks, names)) = listed else {
        aside.take(dir, &c("hooks"), "hooks.moved")?;
        out.whole.push("hooks".into());
        return Ok(());
    };
    let mut moved: Vec<String> = Vec::new();
    for name in names.iter().filter(|n| !n.to_bytes().ends_with(b".sample")) {
        let into = aside.hooks()?;
        renameat(
            Some(hooks.as_raw_fd()),
            name.as_c_str(),
            Some(into),
            name.as_c_str(),
        )
        .map_err(|e| format!("move {}: {e}", name.to_string_lossy()))?;
        moved.push(name.to_string_lossy().into_owned());
    }
    moved.sort();
    out.hooks.extend(moved);
    Ok(())
}

/// The folder things are set aside in, made at the first need.
struct Aside<'a> {
    git: RawFd,
    path: &'a Path,
    name: String,
    stamp: u64,
    made: Option<(String, Dir)>,
    hooks: Option<Dir>,
}

const TOP: &str = "relay-set-aside";

impl<'a> Aside<'a> {
    fn new(git: RawFd, path: &'a Path, ctx: &Ctx) -> Aside<'a> {
        Aside {
            git,
            path,
            name: format!("{}-{}", ctx.session, ctx.stamp_ms),
            stamp: ctx.stamp_ms,
            made: None,
            hooks: None,
        }
    }

    fn dir(&mut self) -> Result<RawFd, String> {
        if let Some((_, d)) = &self.made {
            return Ok(d.as_raw_fd());
        }
        let top =
            at::ensure_folder(self.git, TOP, self.stamp).map_err(|e| format!("make {TOP}: {e}"))?;
        let made = at::new_folder(top.as_raw_fd(), &self.name)
            .map_err(|e| format!("make {TOP}/{}: {e}", self.name))?;
        Ok(self.made.insert(made).1.as_raw_fd())
    }

    fn hooks(&mut self) -> Result<RawFd, String> {
        if let Some(d) = &self.hooks {
            return Ok(d.as_raw_fd());
        }
        let mine = self.dir()?;
        let (_, d) =
            at::new_folder(mine, "hooks.moved").map_err(|e| format!("make hooks.moved: {e}"))?;
        Ok(self.hooks.insert(d).as_raw_fd())
    }

    fn save(&mut self, name: &str, bytes: &[u8]) -> Result<(), String> {
        let mine = self.dir()?;
        at::write_new(mine, &c(name), bytes, Mode::S_IRUSR | Mode::S_IWUSR)
            .map_err(|e| format!("save {name}: {e}"))
    }

    /// Moves the entry `name` of `from` into the folder as `to`.
    fn take(&mut self, from: RawFd, name: &CStr, to: &str) -> Result<(), String> {
        let mine = self.dir()?;
        renameat(Some(from), name, Some(mine), c(to).as_c_str())
            .map_err(|e| format!("move {}: {e}", name.to_string_lossy()))
    }

    /// The README, once something was set aside, and the folder's path in `out`.
    fn finish(self, out: &mut SetAside, session: &str) {
        let Some((name, dir)) = &self.made else {
            return;
        };
        let folder = self.path.join(TOP).join(name);
        let text = readme(out, session, self.path, &folder);
        if let Err(e) = at::write_new(
            dir.as_raw_fd(),
            &c("README.txt"),
            text.as_bytes(),
            Mode::S_IRUSR | Mode::S_IWUSR,
        ) {
            problem(out, format!("README.txt: {e}"));
        }
        out.folder = Some(folder.display().to_string());
    }
}

fn readme(out: &SetAside, session: &str, git: &Path, folder: &Path) -> String {
    let list = |v: &[String]| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    format!(
        "relay set these aside from the git folder\n  {git}\nwhen session {session} ended. \
         That session could write this repository, and git runs what a repository's \
         configuration and hooks name, outside every sandbox, as you \
         (docs/THREAT-MODEL.md#repositories-a-session-made-or-changed).\n\n\
         configuration keys moved out: {keys}\n\
         configuration files moved out whole: {whole}\n\
         hooks moved out: {hooks}\n\n\
         config.txt (and config.worktree.txt) is the file as the session left it, byte for \
         byte; the repository's file now holds only its inert entries. hooks.moved/ holds \
         the hooks under their names.\n\n\
         To restore one, read it first: it may run a program of the session's. Then copy \
         config.txt back over\n  {git}/config\nor move a hook from hooks.moved/ back into\n  \
         {git}/hooks/\n\nThis folder is yours to remove:\n  {folder}\n",
        git = git.display(),
        folder = folder.display(),
        keys = list(&out.keys),
        whole = list(&out.whole),
        hooks = list(&out.hooks),
    )
}
