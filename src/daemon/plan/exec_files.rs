//! A launch's execution-bearing pins: each name of the list
//! ([`crate::sandbox::exec_list`]) that one of its read-write grants would hold, pinned
//! read-only (docs/session-host.md#execution-bearing-files); under bwrap, what must be
//! made first listed ([`ToMake`]; `launch/made.rs` makes it).
//!
//! A template's `writable_exceptions` reopens an entry; `relay sandbox explain` names
//! each reopened path and each one left open.

use std::path::{Component, Path, PathBuf};

use crate::protocol::Backend;
use crate::sandbox::exec_list::{
    Base, Entry, Missing, Shape, GIT_FOLDER, LIST, PATH_FOLDER, PATH_FOLDER_OUTSIDE,
};
use crate::sandbox::resolve::expand_home;
use crate::sandbox::{self, Access, PathKind, ResolvedPath};

/// What `~/.bash_profile` is made with where it is missing: bash reads the first of
/// `.bash_profile`, `.bash_login`, `.profile`, so these lines read on as it would.
fn bash_profile_text(home: &Path) -> &'static str {
    if home.join(".bash_login").exists() {
        "# Made by relay (docs/session-host.md#execution-bearing-files): what bash does without\n\
         # this file. Edit it as your own.\n\
         [ -f ~/.bash_login ] && . ~/.bash_login\n"
    } else {
        "# Made by relay (docs/session-host.md#execution-bearing-files): what bash does without\n\
         # this file. Edit it as your own.\n\
         [ -f ~/.profile ] && . ~/.profile\n"
    }
}

/// What one launch needs to decide its execution-bearing pins.
pub struct Input<'a> {
    pub backend: Backend,
    pub home: &'a Path,
    /// The spec's grants, resolved.
    pub grants: &'a [sandbox::Grant],
    /// The session's own temp folder: relay's, made and removed with it.
    pub temp_dir: &'a Path,
    /// The session's directory, canonical.
    pub directory: &'a Path,
    /// Folders some sandboxed session can write.
    pub session_writable: &'a [PathBuf],
    /// relay's own `PATH`: its folders in the home are your tools by name.
    pub path_env: &'a std::ffi::OsStr,
    pub exceptions: &'a [String],
    pub make: Make,
}

/// What a plan does with a missing name a bwrap launch needs made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Make {
    /// List it in [`Pins::makes`] and pin it as the launch will make it (a launch, and
    /// `relay sandbox explain`, which says it so).
    List,
    /// Leave it missing, unrendered (`relay doctor`'s probes, which make nothing).
    Leave,
}

/// The pins, why each is there, and what `relay sandbox explain` says about the rest.
#[derive(Debug, Default)]
pub struct Pins {
    pub pins: Vec<ResolvedPath>,
    pub labels: Vec<(PathBuf, String)>,
    pub notes: Vec<String>,
    /// What the launch makes before its sandbox starts, each pinned as made.
    pub makes: Vec<ToMake>,
}

/// A missing name a bwrap launch makes, as its reader takes no file at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToMake {
    /// The name as the list has it.
    pub path: PathBuf,
    /// The read-write grant that holds it, and the name below it.
    pub holder: PathBuf,
    pub rel: PathBuf,
    /// A folder (else a file with `text`).
    pub dir: bool,
    pub text: &'static str,
    /// Who runs it or reads it as code.
    pub reader: &'static str,
    /// The pin the plan holds for it.
    pub canonical: PathBuf,
}

/// One candidate: a path of the list under one base folder.
struct Candidate {
    entry: Entry,
    /// The entry's name (a `PATH` folder's is its own).
    name: String,
    /// In the canonical base folder.
    path: PathBuf,
    /// As written, in the home as given.
    written: PathBuf,
    /// The read-write grant that holds it.
    holder: PathBuf,
}

/// The execution-bearing pins of one launch. Errors are `sandbox_unavailable` messages.
pub fn plan(input: &Input) -> Result<Pins, String> {
    // relay's own temp folder is made and removed with the session: nothing in it runs
    // later.
    let holders: Vec<&Path> = input
        .grants
        .iter()
        .filter(|g| g.access == Access::ReadWrite && g.path.kind == PathKind::Dir)
        .filter(|g| {
            !g.path.written.starts_with(input.temp_dir)
                && !g.path.canonical.starts_with(input.temp_dir)
        })
        .map(|g| g.path.canonical.as_path())
        .collect();
    let mut out = Pins::default();
    if holders.is_empty() {
        return Ok(out);
    }
    // Every write grant, files too (`read_write: ["~/.bashrc"]`).
    let granted: Vec<&Path> = input
        .grants
        .iter()
        .filter(|g| g.access == Access::ReadWrite)
        .filter(|g| {
            !g.path.written.starts_with(input.temp_dir)
                && !g.path.canonical.starts_with(input.temp_dir)
        })
        .map(|g| g.path.canonical.as_path())
        .collect();
    inside_a_listed_folder(input, &granted)?;
    if empty_start(input) && holders.iter().any(|h| input.directory.starts_with(h)) {
        out.notes.push(format!(
            "{} was empty at launch: what the session makes there is its own, as in a \
             folder it makes (nothing is made there; git clone into it works)",
            input.directory.display()
        ));
    }
    let mut seen: Vec<PathBuf> = Vec::new();
    for cand in candidates(input, &holders) {
        if seen.contains(&cand.path) {
            continue;
        }
        seen.push(cand.path.clone());
        if let Some(exception) = reopened(&cand, input) {
            out.notes.push(format!(
                "reopened by writable_exceptions ({exception}): {} — {}",
                cand.written.display(),
                cand.entry.reader
            ));
            continue;
        }
        pin_one(input, &cand, &mut out)?;
    }
    Ok(out)
}

/// A write grant inside one of the home's listed folders (a session started in
/// `~/.ssh` or `~/.local/bin`, a template granting `~/.config/git`) would make it
/// writable whole: refused unless `writable_exceptions` reopens that folder.
fn inside_a_listed_folder(input: &Input, holders: &[&Path]) -> Result<(), String> {
    let home = std::fs::canonicalize(input.home).unwrap_or_else(|_| input.home.to_path_buf());
    let seatbelt = input.backend == Backend::Seatbelt;
    let listed = LIST
        .iter()
        .filter(|e| seatbelt || !e.macos)
        .map(|e| (*e, e.name.to_string()))
        .chain(path_entries(input.home, input.path_env));
    for (entry, name) in listed {
        let path = match entry.base {
            Base::Home => home.join(&name),
            // A PATH folder outside the home, not `/` or a top folder like `/usr`.
            Base::Path if Path::new(&name).components().count() > 2 => PathBuf::from(&name),
            // A name in each session's own folders: no grant lies in one of those.
            _ => continue,
        };
        // A file's name holds no grant but itself.
        let Some(grant) = holders.iter().find(|h| h.starts_with(&path)) else {
            continue;
        };
        let cand = Candidate {
            entry,
            written: match entry.base {
                Base::Home => input.home.join(&name),
                _ => path.clone(),
            },
            name,
            path,
            holder: grant.to_path_buf(),
        };
        if reopened(&cand, input).is_some() {
            continue;
        }
        return Err(format!(
            "{} is write-granted, and it lies in {} ({}), which relay keeps read-only in \
             every sandbox: start the session in another folder, or name {} in the \
             template's writable_exceptions to grant it on purpose \
             (docs/session-host.md#execution-bearing-files)",
            grant.display(),
            cand.written.display(),
            entry.reader,
            match entry.base {
                Base::Home => tilde(&cand.name),
                _ => cand.name.clone(),
            }
        ));
    }
    Ok(())
}

fn tilde(name: &str) -> String {
    format!("~/{name}")
}

/// Every path of the list (and of relay's `PATH` in the home) that lies under one of
/// `holders`, home entries first.
fn candidates(input: &Input, holders: &[&Path]) -> Vec<Candidate> {
    let seatbelt = input.backend == Backend::Seatbelt;
    // Grants are canonical: so is the home the names are taken in.
    let home = std::fs::canonicalize(input.home).unwrap_or_else(|_| input.home.to_path_buf());
    let named = LIST
        .iter()
        .filter(|e| seatbelt || !e.macos)
        .map(|e| (*e, e.name.to_string()))
        .chain(path_entries(input.home, input.path_env));
    let roots = roots(input, holders);
    let repositories = repositories_in(holders);
    // The git folders of the session's own folders and of the repositories inside a
    // grant, by their names below the folder (`.git`, `.git/modules/x`).
    let git_roots: Vec<&PathBuf> = roots.iter().chain(&repositories).collect();
    let mut git_folders: Vec<(PathBuf, String)> = Vec::new();
    for r in &git_roots {
        for rel in git_folders_of(r) {
            if !git_folders.iter().any(|(b, n)| b == *r && *n == rel) {
                git_folders.push((r.to_path_buf(), rel));
            }
        }
    }
    let git_entries = GIT_FOLDER.iter().flat_map(|e| {
        git_folders
            .iter()
            .map(move |(root, rel)| (*e, root.clone(), format!("{rel}/{}", e.name)))
    });
    let mut out = Vec::new();
    let mut push = |entry: Entry, base: &Path, written: &Path, name: &str| {
        let path = base.join(name);
        // The holder is the deepest grant that holds the path, below it.
        if let Some(holder) = holders
            .iter()
            .filter(|h| path.starts_with(h) && path != **h)
            .max_by_key(|h| h.components().count())
        {
            out.push(Candidate {
                entry,
                written: written.join(name),
                name: name.to_string(),
                path,
                holder: holder.to_path_buf(),
            });
        }
    };
    for (entry, root, name) in git_entries {
        push(entry, &root, &root, &name);
    }
    for (entry, name) in named {
        let bases: Vec<(PathBuf, PathBuf)> = match entry.base {
            Base::Home => vec![(home.clone(), input.home.to_path_buf())],
            Base::Root if entry.shape == Shape::GitLink => git_roots
                .iter()
                .map(|r| (r.to_path_buf(), r.to_path_buf()))
                .collect(),
            Base::Root => roots.iter().map(|r| (r.clone(), r.clone())).collect(),
            // The name is the path.
            Base::Path => vec![(PathBuf::new(), PathBuf::new())],
            Base::GitDir => vec![],
        };
        for (base, written) in bases {
            push(entry, &base, &written, &name);
        }
    }
    out
}

/// A git folder git takes as one: a folder with a `HEAD` (relay's empty `.git` is not).
fn is_repository(git: &Path) -> bool {
    std::fs::symlink_metadata(git).is_ok_and(|m| m.is_dir())
        && std::fs::symlink_metadata(git.join("HEAD")).is_ok()
}

/// At most this many git folders of one repository's submodules and worktrees.
const GIT_FOLDERS_MAX: usize = 256;

/// The git folders of a repository at `root`, relative to it: `.git` when it is a
/// folder, and each `.git/modules/<name>` and `.git/worktrees/<name>` (one level).
fn git_folders_of(root: &Path) -> Vec<String> {
    let git = root.join(".git");
    if !is_repository(&git) {
        return vec![];
    }
    let mut out = vec![".git".to_string()];
    for sub in ["modules", "worktrees"] {
        let Ok(rd) = std::fs::read_dir(git.join(sub)) else {
            continue;
        };
        for e in rd.flatten().take(GIT_FOLDERS_MAX) {
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            if let (true, Some(name)) = (is_dir, e.file_name().to_str()) {
                out.push(format!(".git/{sub}/{name}"));
            }
        }
    }
    out
}

/// At most this many entries of a grant are looked at for repositories inside it.
const REPOSITORY_SCAN: usize = 4096;

/// The repositories inside each grant (a `.git` in a folder up to three levels down), whose
/// hooks and config the person's git runs when they work there.
fn repositories_in(holders: &[&Path]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for h in holders {
        // Breadth first, a few levels down (`~/src/org/repo`), a bounded number of
        // entries read; no link followed, nothing inside `.git` or a build folder.
        let mut queue: std::collections::VecDeque<(PathBuf, usize)> =
            std::collections::VecDeque::from([(h.to_path_buf(), 0)]);
        let mut read = 0;
        'walk: while let Some((dir, depth)) = queue.pop_front() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                read += 1;
                if read > REPOSITORY_SCAN {
                    break 'walk;
                }
                let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
                let name = entry.file_name();
                if !is_dir
                    || [".git", "node_modules", "target"]
                        .iter()
                        .any(|n| name == *n)
                {
                    continue;
                }
                let path = entry.path();
                let git = path.join(".git");
                // A `.git` file names the repository elsewhere (a worktree, a
                // submodule); a `.git` link is one too, whose target a session
                // could change: its candidate is refused (`resolve_unlinked`).
                let a_repository = is_repository(&git)
                    || std::fs::symlink_metadata(&git).is_ok_and(|m| m.is_file() || m.is_symlink());
                if a_repository && !out.contains(&path) {
                    out.push(path.clone());
                }
                if depth + 1 < REPOSITORY_DEPTH {
                    queue.push_back((path, depth + 1));
                }
            }
        }
    }
    out
}

/// How deep below a grant repositories are looked for.
const REPOSITORY_DEPTH: usize = 3;

/// The folders whose names a [`Base::Root`] entry is taken in: each read-write grant,
/// and each folder from a grant down to the session's directory. Not the session's
/// directory when it is empty at launch ([`empty_start`]).
fn roots(input: &Input, holders: &[&Path]) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    let empty = empty_start(input);
    let mut add = |p: &Path| {
        let left = empty && p == input.directory;
        if !left && !roots.iter().any(|r| r == p) {
            roots.push(p.to_path_buf());
        }
    };
    for h in holders {
        add(h);
    }
    for h in holders {
        if input.directory.starts_with(h) {
            for a in input.directory.ancestors() {
                if !a.starts_with(h) {
                    break;
                }
                add(a);
            }
        }
    }
    roots
}

/// Whether the session's directory is empty at launch: a new folder, as one the
/// session makes below it is, where nothing of the person's is to keep. Its project
/// names (`.vscode`, `.idea`, `.claude`, …) are the session's own there, as in any folder
/// it makes, so relay makes none of them: `git clone URL .` and a new project work
/// there as one folder down (docs/THREAT-MODEL.md#what-the-persons-tools-run-later).
fn empty_start(input: &Input) -> bool {
    std::fs::read_dir(input.directory).is_ok_and(|mut rd| rd.next().is_none())
}

/// relay's `PATH` folders that the list does not name already: those below the home by
/// their name in it, the others (absolute, as they resolve) by their path.
fn path_entries(home: &Path, path_env: &std::ffi::OsStr) -> Vec<(Entry, String)> {
    let mut out: Vec<(Entry, String)> = Vec::new();
    for dir in std::env::split_paths(path_env) {
        let dir = expand_home(&dir.to_string_lossy(), home);
        if !dir.is_absolute()
            || dir
                .components()
                .any(|c| !matches!(c, Component::Normal(_) | Component::RootDir))
        {
            continue;
        }
        let (entry, name) = match dir.strip_prefix(home) {
            Ok(rel) => (PATH_FOLDER, rel.to_string_lossy().into_owned()),
            Err(_) => {
                let real = std::fs::canonicalize(&dir).unwrap_or(dir);
                (PATH_FOLDER_OUTSIDE, real.to_string_lossy().into_owned())
            }
        };
        // The home itself on `PATH` is not a folder of programs to hold read-only.
        if name.is_empty()
            || LIST.iter().any(|e| e.base == Base::Home && e.name == name)
            || out.iter().any(|(_, n)| *n == name)
        {
            continue;
        }
        out.push((entry, name));
    }
    out
}

/// The `writable_exceptions` entry that reopens a candidate, if any.
fn reopened<'e>(cand: &Candidate, input: &'e Input) -> Option<&'e str> {
    input
        .exceptions
        .iter()
        .find(|x| {
            if x.starts_with('/') || x.starts_with('~') {
                let at = expand_home(x, input.home);
                cand.written.starts_with(&at) || cand.path.starts_with(&at)
            } else {
                matches!(cand.entry.base, Base::Root | Base::GitDir)
                    && (cand.name == x.as_str()
                        || cand
                            .name
                            .strip_prefix(x.as_str())
                            .is_some_and(|rest| rest.starts_with('/')))
            }
        })
        .map(String::as_str)
}

/// Resolves one candidate and pins it, making it first where bwrap needs it made.
fn pin_one(input: &Input, cand: &Candidate, out: &mut Pins) -> Result<(), String> {
    let resolved = resolve_unlinked(
        input.home,
        input.session_writable,
        (&cand.path, cand.entry.reader),
    )?;
    let why = format!(
        "{} runs it or reads it as code: read-only in every sandbox",
        cand.entry.reader
    );
    match (resolved.kind, cand.entry.shape) {
        // A repository's folder: its own names are pinned (`GIT_FOLDER`). A `.git`
        // folder that is none (relay's empty one) is pinned whole.
        (PathKind::Dir, Shape::GitLink) if is_repository(&resolved.canonical) => return Ok(()),
        (PathKind::File, _) => {
            one_name(&resolved, cand)?;
            out.labels.push((resolved.canonical.clone(), why));
            out.pins.push(resolved);
            return Ok(());
        }
        (PathKind::Dir, _) => {
            out.labels.push((resolved.canonical.clone(), why));
            out.pins.push(resolved);
            return Ok(());
        }
        (PathKind::Missing, _) => {}
    }
    pin_missing(input, cand, resolved, why, out)
}

/// Pins a candidate that does not exist yet: as it is under Seatbelt (and where the plan
/// makes nothing); under bwrap listed to be made first ([`Pins::makes`]), unless its entry
/// leaves it missing (a note says why).
fn pin_missing(
    input: &Input,
    cand: &Candidate,
    resolved: ResolvedPath,
    why: String,
    out: &mut Pins,
) -> Result<(), String> {
    // Some only where their folder is (`~/.cargo/env` for a Rust user).
    if cand.entry.missing == Missing::InParent {
        let parent_is_dir = cand
            .path
            .parent()
            .is_some_and(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_dir()));
        if !parent_is_dir {
            return Ok(());
        }
    }
    // Seatbelt holds a path that does not exist as well as one that does.
    if input.backend == Backend::Seatbelt {
        out.labels.push((resolved.canonical.clone(), why));
        out.pins.push(resolved);
        return Ok(());
    }
    let text = match cand.entry.missing {
        Missing::Left(reason) => {
            out.notes.push(format!(
                "not held, as it does not exist: {} ({}): {reason}",
                cand.path.display(),
                cand.entry.reader
            ));
            return Ok(());
        }
        Missing::Text(text) => text,
        Missing::InParent | Missing::Empty => "",
        Missing::BashProfile => bash_profile_text(input.home),
    };
    let made = "made by relay before each bwrap launch, as bwrap can hold only what exists";
    if input.make == Make::Leave {
        out.labels.push((resolved.canonical.clone(), why));
        out.pins.push(resolved);
        return Ok(());
    }
    let rel = resolved
        .canonical
        .strip_prefix(&cand.holder)
        .map_err(|_| format!("{}: outside {}", cand.path.display(), cand.holder.display()))?;
    let dir = matches!(cand.entry.shape, Shape::Dir | Shape::GitLink);
    out.makes.push(ToMake {
        path: cand.path.clone(),
        holder: cand.holder.clone(),
        rel: rel.to_path_buf(),
        dir,
        text,
        reader: cand.entry.reader,
        canonical: resolved.canonical.clone(),
    });
    let kind = if dir { PathKind::Dir } else { PathKind::File };
    out.labels
        .push((resolved.canonical.clone(), format!("{why} ({made})")));
    out.pins.push(ResolvedPath { kind, ..resolved });
    Ok(())
}

/// Where a name the launch made is now, its links checked again (a session could have
/// swapped one in meanwhile). Errors are `sandbox_unavailable` messages.
pub fn found_made(
    home: &Path,
    session_writable: &[PathBuf],
    m: &ToMake,
) -> Result<ResolvedPath, String> {
    let resolved = resolve_unlinked(home, session_writable, (&m.path, m.reader))?;
    if resolved.kind == PathKind::Missing {
        return Err(format!("{}: made, then gone", m.path.display()));
    }
    Ok(resolved)
}

/// `path` resolved, refused when its walk follows a link in a folder some session can
/// write (it could point it at a file of its own).
fn resolve_unlinked(
    home: &Path,
    session_writable: &[PathBuf],
    (path, reader): (&Path, &str),
) -> Result<ResolvedPath, String> {
    let (resolved, link_dirs) =
        sandbox::resolve::resolve_in(text_of(path)?, home, sandbox::Role::Read, &[])
            .map_err(|e| e.to_string())?;
    if let Some(dir) = link_dirs
        .iter()
        .find(|d| session_writable.iter().any(|w| d.starts_with(w)))
    {
        return Err(format!(
            "{} ({}) is reached through a symlink in {}, which a sandboxed session can write, \
             so it could point it at a file of its own; replace the link with the real file \
             or folder, grant a narrower folder, or name it in the template's \
             writable_exceptions (docs/session-host.md#execution-bearing-files)",
            path.display(),
            reader,
            dir.display()
        ));
    }
    Ok(resolved)
}

/// A pinned file with a second name (a hard link kept elsewhere, as dotfile managers
/// do) could be written through that name: refused.
fn one_name(resolved: &ResolvedPath, cand: &Candidate) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let links = std::fs::symlink_metadata(&resolved.canonical).map_or(1, |m| m.nlink());
    if links > 1 {
        return Err(format!(
            "{} ({}) has {links} names (hard links): a sandboxed session could write it \
             through another one; keep one name for it, or name it in the template's \
             writable_exceptions (docs/session-host.md#execution-bearing-files)",
            cand.path.display(),
            cand.entry.reader
        ));
    }
    Ok(())
}

fn text_of(p: &Path) -> Result<&str, String> {
    p.to_str()
        .ok_or_else(|| format!("{}: not valid UTF-8", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::launch::made::make;
    use crate::sandbox::Grant;

    fn rw(path: &Path) -> Grant {
        Grant {
            path: ResolvedPath::fixed(path, path, PathKind::Dir),
            access: Access::ReadWrite,
        }
    }

    struct Case {
        _dir: tempfile::TempDir,
        home: PathBuf,
        project: PathBuf,
        tmp: PathBuf,
    }

    fn case() -> Case {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let home = base.join("home");
        let project = home.join("proj");
        let tmp = base.join("tmp");
        std::fs::create_dir_all(&project).unwrap();
        std::fs::create_dir_all(&tmp).unwrap();
        // A project with something in it ([`empty_start`] is its own case).
        std::fs::write(project.join("README"), "").unwrap();
        Case {
            _dir: dir,
            home,
            project,
            tmp,
        }
    }

    fn run(
        c: &Case,
        grants: &[Grant],
        backend: Backend,
        make: bool,
        exceptions: &[&str],
    ) -> Result<Pins, String> {
        let exceptions: Vec<String> = exceptions.iter().map(|s| s.to_string()).collect();
        plan(&Input {
            backend,
            home: &c.home,
            grants,
            temp_dir: &c.tmp,
            directory: &c.project,
            session_writable: &grants
                .iter()
                .map(|g| g.path.canonical.clone())
                .collect::<Vec<_>>(),
            path_env: std::ffi::OsStr::new("/usr/bin:/bin"),
            exceptions: &exceptions,
            make: Make::List,
        })
        .and_then(|p| {
            if make {
                made(p, &c.home, grants)
            } else {
                Ok(p)
            }
        })
    }

    /// The pins after a launch made what the plan lists, as the launch pins them.
    fn made(mut p: Pins, home: &Path, grants: &[Grant]) -> Result<Pins, String> {
        let writable: Vec<PathBuf> = grants.iter().map(|g| g.path.canonical.clone()).collect();
        for m in std::mem::take(&mut p.makes) {
            let (found, _) = crate::daemon::launch::made::make_one(&m, home, &writable)?;
            if let Some(pin) = p.pins.iter_mut().find(|pin| pin.canonical == m.canonical) {
                *pin = found;
            }
        }
        Ok(p)
    }

    fn pinned(p: &Pins) -> Vec<PathBuf> {
        p.pins.iter().map(|r| r.canonical.clone()).collect()
    }

    #[test]
    fn an_empty_start_folder_gets_nothing_made_or_pinned_and_the_folders_above_it_do() {
        let c = case();
        let new = c.project.join("new");
        std::fs::create_dir(&new).unwrap();
        let grants = [rw(&c.project), rw(&c.tmp)];
        let input = |backend, dir: &Path| {
            plan(&Input {
                backend,
                home: &c.home,
                grants: &grants,
                temp_dir: &c.tmp,
                directory: dir,
                session_writable: &[],
                path_env: std::ffi::OsStr::new(""),
                exceptions: &[],
                make: Make::List,
            })
            .unwrap()
        };
        for backend in [Backend::Bwrap, Backend::Seatbelt] {
            let p = input(backend, &new);
            let pins = pinned(&p);
            assert!(!pins.iter().any(|p| p.starts_with(&new)), "{pins:?}");
            assert!(
                !p.makes.iter().any(|m| m.path.starts_with(&new)),
                "{:?}",
                p.makes
            );
            // The project above it keeps its own.
            assert!(pins.contains(&c.project.join(".vscode")), "{pins:?}");
            assert!(
                p.notes.iter().any(|n| n.contains("was empty at launch")),
                "{:?}",
                p.notes
            );
        }
        // With one entry in it, it is the person's folder again.
        std::fs::write(new.join("a.txt"), "").unwrap();
        let pins = pinned(&input(Backend::Seatbelt, &new));
        assert!(pins.contains(&new.join(".vscode")), "{pins:?}");
    }

    #[test]
    fn a_project_grant_pins_its_repository_and_makes_its_missing_hooks_folder() {
        let c = case();
        std::fs::create_dir_all(c.project.join(".git")).unwrap();
        std::fs::write(c.project.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(c.project.join(".git/config"), "[core]\n").unwrap();
        let grants = [rw(&c.project), rw(&c.tmp)];
        let p = run(&c, &grants, Backend::Bwrap, true, &[]).unwrap();
        let pins = pinned(&p);
        assert!(pins.contains(&c.project.join(".git/config")), "{pins:?}");
        assert!(pins.contains(&c.project.join(".git/hooks")), "{pins:?}");
        // A repository's `.git` is not pinned whole: git writes its objects and refs.
        assert!(!pins.contains(&c.project.join(".git")), "{pins:?}");
        assert!(c.project.join(".git/hooks").is_dir(), "the placeholder");
        // The home is not granted: none of its names is pinned, nothing is made there.
        assert!(!pins
            .iter()
            .any(|p| p.starts_with(&c.home) && !p.starts_with(&c.project)));
        assert!(!c.home.join(".bashrc").exists());
        // Nothing is pinned in relay's own temp folder.
        assert!(!pins.iter().any(|p| p.starts_with(&c.tmp)));
        // Left ones are said, not made.
        assert!(!c.project.join(".envrc").exists());
        assert!(
            p.notes.iter().any(|n| n.contains(".envrc")),
            "{:?}",
            p.notes
        );
        // .vscode, .idea, .claude are made empty.
        for d in [".vscode", ".idea", ".claude"] {
            assert!(c.project.join(d).is_dir(), "{d}");
            assert_eq!(std::fs::read_dir(c.project.join(d)).unwrap().count(), 0);
        }
    }

    #[test]
    fn without_a_repository_no_git_folder_is_made_and_git_init_is_the_sessions() {
        let c = case();
        let grants = [rw(&c.project)];
        let p = run(&c, &grants, Backend::Bwrap, true, &[]).unwrap();
        assert!(!c.project.join(".git").exists());
        assert!(!pinned(&p)
            .iter()
            .any(|p| p.starts_with(c.project.join(".git"))));
        assert!(
            p.notes.iter().any(|n| n.contains("git init works here")),
            "{:?}",
            p.notes
        );
        // An empty `.git` found there (no repository) is held whole, as it is.
        std::fs::create_dir(c.project.join(".git")).unwrap();
        let p = run(&c, &grants, Backend::Bwrap, true, &[]).unwrap();
        assert!(pinned(&p).contains(&c.project.join(".git")));
    }

    #[test]
    fn a_repositorys_commondir_submodules_and_worktrees_are_held() {
        let c = case();
        let git = c.project.join(".git");
        std::fs::create_dir_all(git.join("modules/sub/hooks")).unwrap();
        std::fs::write(git.join("modules/sub/config"), "").unwrap();
        std::fs::create_dir_all(git.join("worktrees/wt")).unwrap();
        std::fs::write(git.join("config"), "").unwrap();
        std::fs::write(git.join("HEAD"), "").unwrap();
        let p = run(&c, &[rw(&c.project)], Backend::Bwrap, true, &[]).unwrap();
        let pins = pinned(&p);
        for want in [
            "commondir",
            "modules/sub/config",
            "modules/sub/hooks",
            "modules/sub/commondir",
            "worktrees/wt/commondir",
            "worktrees/wt/hooks",
        ] {
            assert!(pins.contains(&git.join(want)), "{want}: {pins:?}");
        }
        assert_eq!(
            std::fs::read_to_string(git.join("commondir")).unwrap(),
            ".\n"
        );
    }

    #[test]
    fn a_hard_linked_dotfile_and_a_file_grant_of_one_are_refused() {
        let c = case();
        std::fs::create_dir_all(c.home.join("dotfiles")).unwrap();
        std::fs::write(c.home.join("dotfiles/bashrc"), "").unwrap();
        std::fs::hard_link(c.home.join("dotfiles/bashrc"), c.home.join(".bashrc")).unwrap();
        let err = run(&c, &[rw(&c.home)], Backend::Bwrap, true, &[]).unwrap_err();
        assert!(err.contains("2 names"), "{err}");
        let c = case();
        std::fs::write(c.home.join(".bashrc"), "").unwrap();
        let file_grant = Grant {
            path: ResolvedPath::fixed(
                c.home.join(".bashrc"),
                c.home.join(".bashrc"),
                PathKind::File,
            ),
            access: Access::ReadWrite,
        };
        let err = run(&c, &[rw(&c.project), file_grant], Backend::Bwrap, true, &[]).unwrap_err();
        assert!(err.contains("~/.bashrc"), "{err}");
    }

    #[test]
    fn repositories_a_few_levels_inside_a_grant_are_held() {
        let c = case();
        let deep = c.home.join("src/org/repo");
        std::fs::create_dir_all(deep.join(".git/hooks")).unwrap();
        std::fs::write(deep.join(".git/HEAD"), "").unwrap();
        let p = run(&c, &[rw(&c.home)], Backend::Bwrap, true, &[]).unwrap();
        assert!(
            pinned(&p).contains(&deep.join(".git/hooks")),
            "{:?}",
            pinned(&p)
        );
        assert!(
            !c.home.join("src/.git").exists(),
            "no .git is made in a folder that is not a root"
        );
    }

    #[test]
    fn a_home_grant_makes_the_missing_start_up_files_as_their_readers_take_none() {
        let c = case();
        std::fs::write(c.home.join(".profile"), "PATH=$HOME/bin:$PATH\n").unwrap();
        let grants = [rw(&c.home)];
        let p = run(&c, &grants, Backend::Bwrap, true, &[]).unwrap();
        let pins = pinned(&p);
        for name in [
            ".bashrc",
            ".profile",
            ".zshrc",
            ".gitconfig",
            ".ssh",
            ".config/git",
            ".local/bin",
            ".bash_profile",
            ".claude.json",
        ] {
            assert!(pins.contains(&c.home.join(name)), "{name}: {pins:?}");
        }
        assert_eq!(std::fs::read(c.home.join(".bashrc")).unwrap(), b"");
        assert_eq!(
            std::fs::read_to_string(c.home.join(".profile")).unwrap(),
            "PATH=$HOME/bin:$PATH\n",
            "what exists is kept"
        );
        let profile = std::fs::read_to_string(c.home.join(".bash_profile")).unwrap();
        assert!(profile.contains(". ~/.profile"), "{profile}");
        assert_eq!(std::fs::read(c.home.join(".claude.json")).unwrap(), b"{}\n");
        // Names in a folder that is not there are neither made nor pinned; in one
        // that is, they are (`~/.cargo/env` for a Rust user).
        assert!(!c.home.join(".kube").exists());
        assert!(!pins.contains(&c.home.join(".kube/config")), "{pins:?}");
        std::fs::create_dir(c.home.join(".kube")).unwrap();
        let pins = pinned(&run(&c, &grants, Backend::Bwrap, true, &[]).unwrap());
        assert!(pins.contains(&c.home.join(".kube/config")), "{pins:?}");
        // bash never reads .bash_login now: it is left, and said.
        assert!(!c.home.join(".bash_login").exists());
        // macOS names are not made for bwrap.
        assert!(!c.home.join("Library").exists());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(c.home.join(".ssh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    #[test]
    fn only_read_write_folder_grants_hold_pins() {
        let c = case();
        let ro = Grant {
            path: ResolvedPath::fixed(&c.home, &c.home, PathKind::Dir),
            access: Access::Read,
        };
        let p = run(&c, &[ro, rw(&c.project)], Backend::Seatbelt, false, &[]).unwrap();
        let pins = pinned(&p);
        assert!(pins.contains(&c.project.join(".envrc")), "{pins:?}");
        assert!(pins.iter().all(|p| p.starts_with(&c.project)), "{pins:?}");
    }

    #[test]
    fn the_sessions_own_temp_folder_holds_no_pins_by_either_spelling() {
        // The temp folder granted through a link (macOS's /tmp and /private/tmp): its
        // written spelling alone is relay's temp folder, and the grant still holds none.
        let c = case();
        let other = c.home.join("elsewhere");
        std::fs::create_dir_all(&other).unwrap();
        for (written, canonical) in [(&c.tmp, &other), (&other, &c.tmp)] {
            let temp = Grant {
                path: ResolvedPath::fixed(written, canonical, PathKind::Dir),
                access: Access::ReadWrite,
            };
            let p = run(
                &c,
                std::slice::from_ref(&temp),
                Backend::Seatbelt,
                false,
                &[],
            )
            .unwrap();
            assert!(
                p.pins.is_empty(),
                "{written:?} {canonical:?}: {:?}",
                pinned(&p)
            );
            // Nor is it a write grant inside a listed folder when it resolves there.
            let ssh = c.home.join(".ssh");
            std::fs::create_dir_all(&ssh).unwrap();
            let temp = Grant {
                path: ResolvedPath::fixed(&c.tmp, &ssh, PathKind::Dir),
                access: Access::ReadWrite,
            };
            run(&c, &[temp, rw(&c.project)], Backend::Bwrap, false, &[]).unwrap();
        }
    }

    #[test]
    fn bash_profile_follows_an_existing_bash_login() {
        let c = case();
        std::fs::write(c.home.join(".bash_login"), "echo mine\n").unwrap();
        run(&c, &[rw(&c.home)], Backend::Bwrap, true, &[]).unwrap();
        let profile = std::fs::read_to_string(c.home.join(".bash_profile")).unwrap();
        assert!(profile.contains(". ~/.bash_login"), "{profile}");
        assert!(!profile.contains(".profile"), "{profile}");
    }

    #[test]
    fn seatbelt_pins_what_is_missing_and_makes_nothing() {
        let c = case();
        let p = run(&c, &[rw(&c.home)], Backend::Seatbelt, true, &[]).unwrap();
        let pins = pinned(&p);
        assert!(pins.contains(&c.home.join(".bashrc")), "{pins:?}");
        assert!(
            pins.contains(&c.home.join("Library/LaunchAgents")),
            "{pins:?}"
        );
        assert!(pins.contains(&c.project.join(".envrc")), "{pins:?}");
        assert!(!c.home.join(".bashrc").exists());
        assert_eq!(std::fs::read_dir(&c.home).unwrap().count(), 1, "only proj");
    }

    #[test]
    fn explaining_makes_nothing() {
        let c = case();
        let p = run(&c, &[rw(&c.home)], Backend::Bwrap, false, &[]).unwrap();
        assert!(pinned(&p).contains(&c.home.join(".bashrc")));
        assert_eq!(std::fs::read_dir(&c.home).unwrap().count(), 1, "only proj");
        // Said as a launch would have them, made: a file or a folder, as its reader
        // takes it.
        let kind = |name: &str| {
            let path = c.home.join(name);
            p.pins.iter().find(|r| r.canonical == path).map(|r| r.kind)
        };
        assert_eq!(
            (kind(".bashrc"), kind(".ssh")),
            (Some(PathKind::File), Some(PathKind::Dir))
        );
    }

    #[test]
    fn writable_exceptions_reopen_a_name_everywhere_or_one_path() {
        let c = case();
        std::fs::create_dir_all(c.project.join(".git/hooks")).unwrap();
        std::fs::write(c.project.join(".git/HEAD"), "").unwrap();
        std::fs::write(c.project.join(".git/config"), "").unwrap();
        let grants = [rw(&c.home)];
        let p = run(
            &c,
            &grants,
            Backend::Bwrap,
            true,
            &[".git/config", "~/.bashrc"],
        )
        .unwrap();
        let pins = pinned(&p);
        assert!(!pins.contains(&c.project.join(".git/config")), "{pins:?}");
        assert!(pins.contains(&c.project.join(".git/hooks")), "{pins:?}");
        assert!(!pins.contains(&c.home.join(".bashrc")), "{pins:?}");
        assert!(
            !c.home.join(".bashrc").exists(),
            "a reopened one is not made"
        );
        assert!(p
            .notes
            .iter()
            .any(|n| n.contains("writable_exceptions (~/.bashrc)")));
        // `.git` reopens both names below it.
        let p = run(&c, &grants, Backend::Bwrap, true, &[".git"]).unwrap();
        assert!(!pinned(&p)
            .iter()
            .any(|p| p.starts_with(c.project.join(".git"))));
    }

    #[test]
    fn a_link_a_session_could_retarget_is_refused() {
        let c = case();
        std::fs::create_dir_all(c.home.join("dotfiles")).unwrap();
        std::fs::write(c.home.join("dotfiles/bashrc"), "").unwrap();
        std::os::unix::fs::symlink("dotfiles/bashrc", c.home.join(".bashrc")).unwrap();
        let err = run(&c, &[rw(&c.home)], Backend::Bwrap, true, &[]).unwrap_err();
        assert!(err.contains(".bashrc") && err.contains("symlink"), "{err}");
        // Reopened, it is the person's choice.
        run(&c, &[rw(&c.home)], Backend::Bwrap, true, &["~/.bashrc"]).unwrap();
    }

    #[test]
    fn making_follows_no_link() {
        let c = case();
        let elsewhere = c.tmp.join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, c.project.join("sub")).unwrap();
        let err = make(&c.project, Path::new("sub/x"), true, "").unwrap_err();
        assert!(
            err.raw_os_error() == Some(libc::ELOOP) || err.raw_os_error() == Some(libc::ENOTDIR),
            "{err}"
        );
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    }

    #[test]
    fn making_a_folder_where_a_file_stands_fails() {
        let c = case();
        std::fs::write(c.project.join("hooks"), "").unwrap();
        let err = make(&c.project, Path::new("hooks"), true, "").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTDIR), "{err}");
        // A file is made once, with its text, 0600; one that is there is kept.
        make(&c.project, Path::new("d/f"), false, "text").unwrap();
        make(&c.project, Path::new("d/f"), false, "other").unwrap();
        let f = c.project.join("d/f");
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "text");
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&c.project.join("d")), mode(&f)), (0o700, 0o600));
    }

    #[test]
    fn relays_path_folders_in_the_home_are_pinned() {
        let c = case();
        let exceptions: Vec<String> = vec![];
        let grants = [rw(&c.home)];
        let p = plan(&Input {
            backend: Backend::Bwrap,
            home: &c.home,
            grants: &grants,
            temp_dir: &c.tmp,
            directory: &c.project,
            session_writable: std::slice::from_ref(&c.home),
            path_env: std::ffi::OsStr::new("~/go/bin:/usr/bin"),
            exceptions: &exceptions,
            make: Make::List,
        })
        .and_then(|p| made(p, &c.home, &grants))
        .unwrap();
        assert!(pinned(&p).contains(&c.home.join("go/bin")));
        assert!(c.home.join("go/bin").is_dir());
    }

    #[test]
    fn a_grant_inside_a_listed_home_folder_is_refused_unless_reopened() {
        let c = case();
        let ssh = c.home.join(".ssh");
        std::fs::create_dir_all(&ssh).unwrap();
        let err = run(&c, &[rw(&ssh)], Backend::Bwrap, true, &[]).unwrap_err();
        assert!(
            err.contains("writable_exceptions") && err.contains("~/.ssh"),
            "{err}"
        );
        let deeper = c.home.join(".local/bin/x");
        std::fs::create_dir_all(&deeper).unwrap();
        let err = run(&c, &[rw(&deeper)], Backend::Bwrap, true, &[]).unwrap_err();
        assert!(err.contains("~/.local/bin"), "{err}");
        run(&c, &[rw(&ssh)], Backend::Bwrap, true, &["~/.ssh"]).unwrap();
        // A folder beside them is fine.
        run(&c, &[rw(&c.project)], Backend::Bwrap, true, &[]).unwrap();
    }

    #[test]
    fn a_grant_in_a_listed_folder_is_named_as_the_home_is_written_and_reopened_so() {
        let c = case();
        let link = c.home.parent().unwrap().join("home-link");
        std::os::unix::fs::symlink(&c.home, &link).unwrap();
        let ssh = c.home.join(".ssh");
        std::fs::create_dir_all(&ssh).unwrap();
        let with = |exceptions: &[&str]| {
            let exceptions: Vec<String> = exceptions.iter().map(|s| s.to_string()).collect();
            let grants = [rw(&ssh)];
            plan(&Input {
                backend: Backend::Bwrap,
                home: &link,
                grants: &grants,
                temp_dir: &c.tmp,
                directory: &ssh,
                session_writable: std::slice::from_ref(&ssh),
                path_env: std::ffi::OsStr::new("/usr/bin:/bin"),
                exceptions: &exceptions,
                make: Make::List,
            })
        };
        let err = with(&[]).unwrap_err();
        assert!(
            err.contains(&format!("lies in {}", link.join(".ssh").display())),
            "{err}"
        );
        with(&[&format!("{}/.ssh", link.display())]).unwrap();
    }

    #[test]
    fn macos_folders_are_kept_from_grants_under_seatbelt_alone() {
        let c = case();
        let agents = c.home.join("Library/LaunchAgents/x");
        std::fs::create_dir_all(&agents).unwrap();
        let err = run(&c, &[rw(&agents)], Backend::Seatbelt, false, &[]).unwrap_err();
        assert!(err.contains("Library/LaunchAgents"), "{err}");
        run(&c, &[rw(&agents)], Backend::Bwrap, false, &[]).unwrap();
    }

    #[test]
    fn repositories_directly_inside_a_grant_get_their_git_pins_and_nothing_else() {
        let c = case();
        let other = c.home.join("other");
        std::fs::create_dir_all(other.join(".git/hooks")).unwrap();
        std::fs::write(other.join(".git/HEAD"), "").unwrap();
        std::fs::write(other.join(".git/config"), "").unwrap();
        // The session's own folder a repository too: each has its own `.git`.
        std::fs::create_dir_all(c.project.join(".git")).unwrap();
        std::fs::write(c.project.join(".git/HEAD"), "").unwrap();
        // A worktree below the grant: its `.git` file names the repository git uses.
        let wt = c.home.join("wt");
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::write(wt.join(".git"), "gitdir: /elsewhere\n").unwrap();
        let p = run(&c, &[rw(&c.home)], Backend::Bwrap, true, &[]).unwrap();
        let pins = pinned(&p);
        assert!(pins.contains(&wt.join(".git")), "{pins:?}");
        assert!(pins.contains(&c.project.join(".git/hooks")), "{pins:?}");
        assert!(pins.contains(&other.join(".git/config")), "{pins:?}");
        assert!(pins.contains(&other.join(".git/hooks")), "{pins:?}");
        // Only the session's own folders get placeholders.
        assert!(!other.join(".vscode").exists());
        assert!(c.project.join(".vscode").exists());
    }

    #[test]
    fn a_path_folder_outside_the_home_is_pinned_where_a_grant_holds_it() {
        let c = case();
        let tools = c.tmp.parent().unwrap().join("tools");
        let bin = tools.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let exceptions: Vec<String> = vec![];
        let grants = [rw(&tools)];
        let path_env = format!("{}:/usr/bin", bin.display());
        let p = plan(&Input {
            backend: Backend::Bwrap,
            home: &c.home,
            grants: &grants,
            temp_dir: &c.tmp,
            directory: &tools,
            session_writable: std::slice::from_ref(&tools),
            path_env: std::ffi::OsStr::new(&path_env),
            exceptions: &exceptions,
            make: Make::List,
        })
        .and_then(|p| made(p, &c.home, &grants))
        .unwrap();
        assert!(pinned(&p).contains(&bin), "{:?}", pinned(&p));
    }

    #[test]
    fn a_repository_is_a_git_folder_with_a_head_or_a_git_file_below_a_grant() {
        let d = tempfile::tempdir().unwrap();
        let g = std::fs::canonicalize(d.path()).unwrap();
        // Depth 1, 2 and 3 below the grant: found; depth 4: not looked at.
        for (rel, head) in [
            ("a", true),
            ("x/b", true),
            ("x/y/c", true),
            ("x/y/z/d", true),
            ("nohead", false),
        ] {
            std::fs::create_dir_all(g.join(rel).join(".git")).unwrap();
            if head {
                std::fs::write(g.join(rel).join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
            }
        }
        // A worktree's `.git` is a file naming the repository elsewhere.
        std::fs::create_dir_all(g.join("wt")).unwrap();
        std::fs::write(g.join("wt/.git"), "gitdir: /elsewhere\n").unwrap();
        // Nothing inside a build folder or a .git is looked at.
        std::fs::create_dir_all(g.join("target/t/.git")).unwrap();
        std::fs::write(g.join("target/t/.git/HEAD"), "x").unwrap();
        // A `.git` link names one too (its candidate is then refused, see below).
        std::fs::create_dir_all(g.join("ln")).unwrap();
        std::os::unix::fs::symlink(g.join("a/.git"), g.join("ln/.git")).unwrap();
        let mut found = repositories_in(&[g.as_path()]);
        found.sort();
        assert_eq!(
            found,
            vec![
                g.join("a"),
                g.join("ln"),
                g.join("wt"),
                g.join("x/b"),
                g.join("x/y/c")
            ]
        );
        assert!(is_repository(&g.join("a/.git")));
        assert!(!is_repository(&g.join("ln/.git")), "a link");
        assert!(!is_repository(&g.join("nohead/.git")), "no HEAD");
        assert!(!is_repository(&g.join("wt/.git")), "a file");
        assert!(!is_repository(&g.join("missing/.git")));
    }

    #[test]
    fn the_repository_scan_reads_a_bounded_number_of_entries() {
        // The grant holds `n` files and `sub`; `sub` holds `repo`: read breadth first,
        // `repo` is entry n + 2.
        for (n, found) in [(REPOSITORY_SCAN - 2, true), (REPOSITORY_SCAN - 1, false)] {
            let d = tempfile::tempdir().unwrap();
            let g = std::fs::canonicalize(d.path()).unwrap();
            for i in 0..n {
                std::fs::write(g.join(format!("f{i}")), "").unwrap();
            }
            std::fs::create_dir_all(g.join("sub/repo")).unwrap();
            std::fs::write(g.join("sub/repo/.git"), "gitdir: /elsewhere\n").unwrap();
            assert_eq!(
                repositories_in(&[g.as_path()]),
                if found {
                    vec![g.join("sub/repo")]
                } else {
                    vec![]
                },
                "{n} files"
            );
        }
    }

    #[test]
    fn a_git_link_in_a_repository_below_a_grant_is_refused() {
        // Threat: the person's git follows `other/.git` wherever the session points it.
        let c = case();
        let real = c.tmp.parent().unwrap().join("real-repo");
        std::fs::create_dir_all(real.join("hooks")).unwrap();
        std::fs::write(real.join("HEAD"), "").unwrap();
        let other = c.home.join("other");
        std::fs::create_dir_all(&other).unwrap();
        std::os::unix::fs::symlink(&real, other.join(".git")).unwrap();
        let err = run(&c, &[rw(&c.home)], Backend::Bwrap, false, &[]).unwrap_err();
        assert!(
            err.contains(&format!("{} (", other.join(".git").display()))
                && err.contains("through a symlink"),
            "{err}"
        );
    }

    #[test]
    fn path_folders_are_named_once_by_their_place_and_odd_entries_left_out() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let home = root.join("home");
        std::fs::create_dir_all(home.join("tools/bin")).unwrap();
        std::fs::create_dir_all(root.join("opt/bin")).unwrap();
        let path = std::env::join_paths([
            home.join("tools/bin"),
            home.join("tools/bin"),
            home.clone(),
            home.join(".local/bin"),
            PathBuf::from("relative/bin"),
            home.join("tools/../tools/bin"),
            root.join("opt/bin"),
            PathBuf::from("~/tools/bin"),
        ])
        .unwrap();
        let got: Vec<(Base, String)> = path_entries(&home, &path)
            .into_iter()
            .map(|(e, n)| (e.base, n))
            .collect();
        assert_eq!(
            got,
            vec![
                (Base::Home, "tools/bin".to_string()),
                (
                    Base::Path,
                    root.join("opt/bin").to_string_lossy().into_owned()
                ),
            ]
        );
    }

    #[test]
    fn a_grant_inside_a_path_folder_outside_the_home_is_refused_but_not_below_a_top_folder() {
        let c = case();
        let bin = c.tmp.parent().unwrap().join("tools/bin");
        std::fs::create_dir_all(bin.join("x")).unwrap();
        let with_path = |grant: &Path, path_env: &std::ffi::OsStr| {
            let grants = [rw(grant)];
            plan(&Input {
                backend: Backend::Bwrap,
                home: &c.home,
                grants: &grants,
                temp_dir: &c.tmp,
                directory: &c.project,
                session_writable: &[grant.to_path_buf()],
                path_env,
                exceptions: &[],
                make: Make::List,
            })
        };
        let path = std::env::join_paths([&bin]).unwrap();
        let err = with_path(&bin.join("x"), &path).unwrap_err();
        assert!(err.contains(&format!("lies in {}", bin.display())), "{err}");
        // `/usr` on PATH is a top folder: a grant below it is the template's business.
        with_path(
            Path::new("/usr/local/share/x"),
            std::ffi::OsStr::new("/usr"),
        )
        .unwrap();
    }
}
