//! Turning the strings of a template and of the settings into [`ResolvedPath`]s.
//!
//! The threat: a sandboxed session can write inside its read-write grants, and it
//! keeps running while the next launch resolves paths. A symlink it plants there can
//! point a later grant or deny somewhere else. So:
//!
//! - a read-write entry may not go through any symlink (the person is told to write the
//!   real path);
//! - a deny entry may not go through a symlink that sits in a user-writable directory,
//!   since a session could have planted it and the deny would then mask a decoy;
//! - a read entry may follow links; its canonical form is what gets granted.
//!
//! The walk is done by hand, one component at a time, so every followed link is seen
//! and a path that does not exist yet still gets a canonical form (the deepest existing
//! ancestor's real path plus the missing tail).
//!
//! The canonical form is also spelled as the volume stores it. A macOS volume is
//! case-insensitive: `~/.config/x` opens `~/.Config/x`, while Seatbelt compares its
//! rules with the path the kernel reports, `~/.Config/x`, so a deny spelled as written
//! would match nothing. Each component is looked up through [`Lookup`], a seam: the
//! real one asks the volume for the stored name on macOS, and a test puts a
//! case-insensitive view of a Linux folder behind it.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use super::policy::{Access, Grant, Network, PathKind, ResolvedPath, Spec};

/// More followed links than this refuses the path (Linux's own limit is 40; a loop
/// is caught either way).
pub const MAX_LINKS: usize = 32;

/// Why an entry is resolved: the refusal rules differ per role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Read,
    ReadWrite,
    Deny,
}

/// A path entry that cannot be used. Every message names the path as written, never
/// anything read from the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathError {
    /// Neither absolute nor `~`/`~/…`.
    Relative { path: PathBuf },
    /// The home directory or a symlink target is not UTF-8; profiles are text.
    NotUtf8 { path: PathBuf },
    /// A read-write entry whose walk follows `link`.
    ReadWriteThroughLink { path: PathBuf, link: PathBuf },
    /// A deny entry whose walk follows `link`, which sits in a user-writable directory.
    DenyThroughWritableLink { path: PathBuf, link: PathBuf },
    /// A read grant, a pinned path, a project folder or a session directory whose walk
    /// follows `link`, which sits in a folder some sandboxed session can write.
    LinkInSessionWritable { path: PathBuf, link: PathBuf },
    /// More than [`MAX_LINKS`] links followed (a loop, most likely).
    TooManyLinks { path: PathBuf },
    /// The walk could not inspect a component (permission denied, …).
    Io { path: PathBuf, reason: String },
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathError::Relative { path } => write!(
                f,
                "sandbox path {}: not absolute (write an absolute path or one starting with ~/)",
                path.display()
            ),
            PathError::NotUtf8 { path } => {
                write!(f, "sandbox path {}: not valid UTF-8", path.display())
            }
            PathError::ReadWriteThroughLink { path, link } => write!(
                f,
                "sandbox path {}: read-write grant goes through symlink {}; grant the real path instead",
                path.display(),
                link.display()
            ),
            PathError::DenyThroughWritableLink { path, link } => write!(
                f,
                "sandbox path {}: deny goes through symlink {} in a user-writable directory \
                 (a sandboxed session could have planted it); deny the real path instead",
                path.display(),
                link.display()
            ),
            PathError::LinkInSessionWritable { path, link } => write!(
                f,
                "sandbox path {}: goes through symlink {}, which sits in a folder a sandboxed \
                 session can write (it could have planted it); use the real path instead",
                path.display(),
                link.display()
            ),
            PathError::TooManyLinks { path } => write!(
                f,
                "sandbox path {}: more than {MAX_LINKS} symlinks to follow (a loop?)",
                path.display()
            ),
            PathError::Io { path, reason } => {
                write!(f, "sandbox path {}: {reason}", path.display())
            }
        }
    }
}

impl std::error::Error for PathError {}

/// Resolves one entry for `role`: expands `~` against `home`, normalizes, walks the
/// filesystem following links, and applies the role's refusals.
pub fn resolve(entry: &str, home: &Path, role: Role) -> Result<ResolvedPath, PathError> {
    resolve_in(entry, home, role, &[]).map(|(resolved, _)| resolved)
}

/// [`resolve`], and also refuses a read entry whose walk follows a link that sits in
/// one of `session_writable` (the folders some sandboxed session can write: a session
/// could have planted that link to point the grant elsewhere). Returns the folders that
/// hold each followed link, in walk order.
pub fn resolve_in(
    entry: &str,
    home: &Path,
    role: Role,
    session_writable: &[PathBuf],
) -> Result<(ResolvedPath, Vec<PathBuf>), PathError> {
    resolve_with(&SystemLookup, entry, home, role, session_writable)
}

/// [`resolve_in`] through another [`Lookup`].
fn resolve_with(
    fs: &dyn Lookup,
    entry: &str,
    home: &Path,
    role: Role,
    session_writable: &[PathBuf],
) -> Result<(ResolvedPath, Vec<PathBuf>), PathError> {
    let expanded = expand_checked(entry, home)?;
    let written = lexical_normalize(&expanded);
    let walk = walk(fs, &expanded, &written)?;

    if let Some(hop) = walk.links.iter().find(|hop| {
        session_writable
            .iter()
            .any(|root| hop.dir.starts_with(root))
    }) {
        return Err(PathError::LinkInSessionWritable {
            path: written,
            link: hop.link.clone(),
        });
    }
    match role {
        Role::Read => {}
        Role::ReadWrite => {
            if let Some(hop) = walk.links.first() {
                return Err(PathError::ReadWriteThroughLink {
                    path: written,
                    link: hop.link.clone(),
                });
            }
        }
        Role::Deny if !walk.links.is_empty() => {
            let ids = Ids::current().map_err(|err| PathError::Io {
                path: written.clone(),
                reason: format!("cannot read the process's group list: {err}"),
            })?;
            for hop in &walk.links {
                let meta = std::fs::metadata(&hop.dir).map_err(|err| PathError::Io {
                    path: written.clone(),
                    reason: format!("cannot inspect {}: {err}", hop.dir.display()),
                })?;
                if is_user_writable(meta.mode(), meta.uid(), meta.gid(), &ids) {
                    return Err(PathError::DenyThroughWritableLink {
                        path: written,
                        link: hop.link.clone(),
                    });
                }
            }
        }
        Role::Deny => {}
    }

    if walk.canonical.to_str().is_none() {
        return Err(PathError::NotUtf8 { path: written });
    }
    let link_dirs = walk.links.into_iter().map(|hop| hop.dir).collect();
    Ok((
        ResolvedPath {
            written,
            canonical: walk.canonical,
            kind: walk.kind,
        },
        link_dirs,
    ))
}

/// What [`build_spec`] needs from the daemon for one launch.
#[derive(Debug, Clone)]
pub struct SpecInput<'a> {
    pub read: &'a [String],
    pub read_write: &'a [String],
    pub deny: &'a [String],
    /// Paths no session may change while the token setting is set: what a token launch
    /// runs (see `docs/THREAT-MODEL.md`). Read-only wherever a grant would let them be
    /// written; never a grant by themselves.
    pub read_only: &'a [String],
    /// Writable again inside a read-only pin ([`Spec::state`]).
    pub state: &'a [String],
    /// Folders some sandboxed session can write: a read grant or a pin that follows a
    /// link in one of them is refused.
    pub session_writable: &'a [PathBuf],
    pub network: Network,
    pub workdir: &'a Path,
    pub interactive: bool,
    pub file_mask: PathBuf,
    pub deny_unix_sockets: Vec<PathBuf>,
}

/// Resolves every entry with its role. Grants are the read entries, then the read-write
/// entries, each in the order given. The first refused entry refuses the whole spec.
pub fn build_spec(input: &SpecInput, home: &Path) -> Result<Spec, PathError> {
    let mut grants = Vec::with_capacity(input.read.len() + input.read_write.len());
    let checked = |entry: &String, role: Role| {
        resolve_in(entry, home, role, input.session_writable).map(|(resolved, _)| resolved)
    };
    for entry in input.read {
        grants.push(Grant {
            path: checked(entry, Role::Read)?,
            access: Access::Read,
        });
    }
    for entry in input.read_write {
        grants.push(Grant {
            path: resolve(entry, home, Role::ReadWrite)?,
            access: Access::ReadWrite,
        });
    }
    let deny = input
        .deny
        .iter()
        .map(|entry| resolve(entry, home, Role::Deny))
        .collect::<Result<Vec<_>, _>>()?;
    let read_only = input
        .read_only
        .iter()
        .map(|entry| checked(entry, Role::Read))
        .collect::<Result<Vec<_>, _>>()?;
    let state = input
        .state
        .iter()
        .map(|entry| resolve(entry, home, Role::ReadWrite))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Spec {
        grants,
        deny,
        read_only,
        state,
        deny_unix_sockets: input.deny_unix_sockets.clone(),
        network: input.network.clone(),
        workdir: input.workdir.to_path_buf(),
        interactive: input.interactive,
        file_mask: input.file_mask.clone(),
    })
}

/// The effective ids the writable decision is made against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ids {
    pub euid: u32,
    /// The effective gid and the supplementary groups.
    pub groups: Vec<u32>,
}

impl Ids {
    fn current() -> io::Result<Ids> {
        let mut groups = supplementary_groups()?;
        groups.push(nix::unistd::getegid().as_raw());
        Ok(Ids {
            euid: nix::unistd::geteuid().as_raw(),
            groups,
        })
    }
}

/// Whether the owner of `ids` could create or replace entries in a directory with this
/// mode and owner, from the mode bits alone.
///
/// Deliberately not access(2): that answers for the real uid and, as root, says yes to
/// everything without saying why. Root is not special-cased either: a root-owned 0755
/// directory counts as writable when running as root, because it is. The sticky bit
/// does not help: it stops unlinking others' entries, not planting new ones.
pub fn is_user_writable(mode: u32, owner_uid: u32, owner_gid: u32, ids: &Ids) -> bool {
    (owner_uid == ids.euid && mode & 0o200 != 0)
        || (ids.groups.contains(&owner_gid) && mode & 0o020 != 0)
        || mode & 0o002 != 0
}

fn supplementary_groups() -> io::Result<Vec<u32>> {
    // nix has no getgroups on macOS, so one libc call serves both platforms.
    // Safety: a zero size with a null buffer only asks for the count.
    let count = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if count < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf: Vec<libc::gid_t> = vec![0; count as usize];
    // Safety: `buf` holds exactly `count` gids, the size passed in.
    let filled = unsafe { libc::getgroups(count, buf.as_mut_ptr()) };
    if filled < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(filled as usize);
    Ok(buf)
}

/// `~` and `~/…` against `home` (extra slashes after `~/` dropped, so `~//x` stays
/// under home); anything else as written. The one place relay expands `~`
/// ([settings.md](../../docs/settings.md)).
pub fn expand_home(entry: &str, home: &Path) -> PathBuf {
    if entry == "~" {
        home.to_path_buf()
    } else if let Some(rest) = entry.strip_prefix("~/") {
        home.join(rest.trim_start_matches('/'))
    } else {
        PathBuf::from(entry)
    }
}

/// [`expand_home`], and the result must be absolute and UTF-8.
fn expand_checked(entry: &str, home: &Path) -> Result<PathBuf, PathError> {
    let expanded = expand_home(entry, home);
    if !expanded.is_absolute() {
        return Err(PathError::Relative {
            path: PathBuf::from(entry),
        });
    }
    if expanded.to_str().is_none() {
        return Err(PathError::NotUtf8 { path: expanded });
    }
    Ok(expanded)
}

/// Drops `.`, collapses repeated slashes, and lets `..` remove the component before it
/// (at `/` it stays `/`). This is the written spelling only; the canonical walk applies
/// `..` to the real directory reached so far, as the kernel does.
fn lexical_normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// How the walk looks up one name in a directory it reached.
trait Lookup {
    /// The entry `name` in `dir`: the name the volume stores it under (which differs
    /// from `name` only on a case-insensitive volume) and its own metadata (links not
    /// followed).
    fn lookup(&self, dir: &Path, name: &OsStr) -> io::Result<(OsString, std::fs::Metadata)>;
}

/// The real filesystem.
struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(&self, dir: &Path, name: &OsStr) -> io::Result<(OsString, std::fs::Metadata)> {
        let meta = std::fs::symlink_metadata(dir.join(name))?;
        // Only macOS volumes answer to a name in another case; elsewhere the name found is
        // the name stored.
        let stored = if cfg!(target_os = "macos") {
            stored_name(dir, name, names_match_ignoring_case).unwrap_or_else(|| name.into())
        } else {
            name.to_os_string()
        };
        Ok((stored, meta))
    }
}

/// The entry of `dir` that `same` says is `name`, preferring an exact match; `None`
/// when the folder cannot be listed or holds neither (the caller keeps `name`).
fn stored_name(dir: &Path, name: &OsStr, same: fn(&OsStr, &OsStr) -> bool) -> Option<OsString> {
    let mut found = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let entry = entry.file_name();
        if entry == name {
            return Some(entry);
        }
        if found.is_none() && same(&entry, name) {
            found = Some(entry);
        }
    }
    found
}

/// Equal under case folding, as APFS and HFS+ compare names by default. Lowercasing
/// is close to the volume's folding, not identical (and Unicode normalization is not
/// applied); an unmatched name keeps the spelling it was written with.
fn names_match_ignoring_case(a: &OsStr, b: &OsStr) -> bool {
    match (a.to_str(), b.to_str()) {
        (Some(a), Some(b)) => a.to_lowercase() == b.to_lowercase(),
        _ => a == b,
    }
}

/// A followed symlink and the real directory that holds it.
struct Hop {
    link: PathBuf,
    dir: PathBuf,
}

struct Walk {
    canonical: PathBuf,
    kind: PathKind,
    links: Vec<Hop>,
}

/// Walks `path` component by component from `/`, following every symlink. `written`
/// only names the entry in errors.
fn walk(fs: &dyn Lookup, path: &Path, written: &Path) -> Result<Walk, PathError> {
    let mut pending: VecDeque<OsString> = VecDeque::new();
    push_front_components(&mut pending, path);

    let mut current = PathBuf::from("/");
    let mut links = Vec::new();
    // How many trailing components of `current` do not exist. Below a missing component
    // nothing can be a link, so those are joined and popped lexically; a `..` that climbs
    // back out of them resumes the real walk.
    let mut missing = 0usize;
    let mut kind = PathKind::Dir;
    // The kind of the last name that exists, for a `..` that climbs back out of the
    // missing names onto it (`file/x/..` is the file, not a folder).
    let mut kind_before_missing = PathKind::Dir;

    while let Some(name) = pending.pop_front() {
        if name == ".." {
            current.pop();
            kind = if missing == 1 {
                kind_before_missing
            } else {
                PathKind::Dir
            };
            missing = missing.saturating_sub(1);
            continue;
        }
        if missing > 0 {
            missing += 1;
            current.push(&name);
            continue;
        }
        let (stored, meta) = match fs.lookup(&current, &name) {
            Ok(found) => found,
            Err(err) if is_absent(&err) => {
                kind_before_missing = kind;
                missing = 1;
                current.push(&name);
                continue;
            }
            Err(err) => {
                return Err(PathError::Io {
                    path: written.to_path_buf(),
                    reason: format!("cannot inspect {}: {err}", current.join(&name).display()),
                })
            }
        };
        let candidate = current.join(stored);
        if meta.file_type().is_symlink() {
            if links.len() == MAX_LINKS {
                return Err(PathError::TooManyLinks {
                    path: written.to_path_buf(),
                });
            }
            let target = std::fs::read_link(&candidate).map_err(|err| PathError::Io {
                path: written.to_path_buf(),
                reason: format!("cannot read symlink {}: {err}", candidate.display()),
            })?;
            links.push(Hop {
                link: candidate,
                dir: current.clone(),
            });
            if target.is_absolute() {
                current = PathBuf::from("/");
            }
            push_front_components(&mut pending, &target);
            continue;
        }
        kind = if meta.is_dir() {
            PathKind::Dir
        } else {
            PathKind::File
        };
        current = candidate;
    }

    Ok(Walk {
        canonical: current,
        kind: if missing > 0 { PathKind::Missing } else { kind },
        links,
    })
}

/// Puts the components of `path` in front of `pending`, keeping `..` (the walk applies
/// it) and dropping `/` and `.`.
fn push_front_components(pending: &mut VecDeque<OsString>, path: &Path) {
    let names: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    for name in names.into_iter().rev() {
        pending.push_front(name);
    }
}

/// Not there: either no such entry, or an ancestor is not a directory (`file/x`).
fn is_absent(err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::NotFound || err.raw_os_error() == Some(libc::ENOTDIR)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    /// A tempdir with its real path (on macOS the temp dir itself sits behind /var).
    fn tempdir() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        (dir, real)
    }

    fn s(path: &Path) -> String {
        path.to_str().unwrap().to_string()
    }

    fn ids(euid: u32, groups: &[u32]) -> Ids {
        Ids {
            euid,
            groups: groups.to_vec(),
        }
    }

    /// A case-insensitive volume, as macOS's, over a Linux folder: a name matches an
    /// entry in any letter case, and the entry's stored name comes back.
    struct CaseInsensitive;

    impl Lookup for CaseInsensitive {
        fn lookup(&self, dir: &Path, name: &OsStr) -> io::Result<(OsString, std::fs::Metadata)> {
            let stored = stored_name(dir, name, names_match_ignoring_case)
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
            let meta = std::fs::symlink_metadata(dir.join(&stored))?;
            Ok((stored, meta))
        }
    }

    #[test]
    fn a_deny_is_spelled_as_the_volume_stores_it() {
        let (_guard, home) = tempdir();
        std::fs::create_dir_all(home.join(".Config/Acme-LTT")).unwrap();
        std::fs::write(home.join(".Config/Acme-LTT/token"), b"x").unwrap();

        let deny = resolve_with(
            &CaseInsensitive,
            "~/.config/acme-ltt/token",
            &home,
            Role::Deny,
            &[],
        )
        .map(|(r, _)| r)
        .unwrap();
        assert_eq!(deny.canonical, home.join(".Config/Acme-LTT/token"));
        assert_eq!(deny.written, home.join(".config/acme-ltt/token"));
        assert_eq!(deny.kind, PathKind::File);
        // Both reach the profile; the stored one is what Seatbelt compares with.
        assert_eq!(
            deny.spellings(),
            vec![
                home.join(".Config/Acme-LTT/token").as_path(),
                home.join(".config/acme-ltt/token").as_path()
            ]
        );
        let profile = crate::sandbox::render_sbpl(&Spec {
            grants: vec![],
            deny: vec![deny],
            read_only: vec![],
            state: vec![],
            deny_unix_sockets: vec![],
            network: Network::Off,
            workdir: home.clone(),
            interactive: false,
            file_mask: "/dev/null".into(),
        });
        let stored = format!(
            "(subpath \"{}\")",
            home.join(".Config/Acme-LTT/token").display()
        );
        assert!(profile.contains(&stored), "{profile}");
        let pin = format!("(literal \"{}\")", home.join(".Config").display());
        assert!(
            profile.contains(&pin),
            "the ancestor pin uses the stored name:\n{profile}"
        );

        // On the real (case-sensitive) filesystem the same entry is simply missing.
        let plain = resolve("~/.config/acme-ltt/token", &home, Role::Deny).unwrap();
        assert_eq!(plain.kind, PathKind::Missing);
        assert_eq!(plain.canonical, home.join(".config/acme-ltt/token"));
    }

    #[test]
    fn the_exact_name_wins_and_a_missing_tail_keeps_its_spelling() {
        let (_guard, home) = tempdir();
        // Two entries that differ in case only (possible here, not on a Mac volume).
        std::fs::create_dir(home.join("Data")).unwrap();
        std::fs::create_dir(home.join("data")).unwrap();
        let exact = resolve_with(&CaseInsensitive, "~/data/New/x", &home, Role::Read, &[])
            .map(|(r, _)| r)
            .unwrap();
        assert_eq!(exact.canonical, home.join("data/New/x"));
        assert_eq!(exact.kind, PathKind::Missing);
        let other = resolve_with(&CaseInsensitive, "~/DATA", &home, Role::Read, &[])
            .map(|(r, _)| r)
            .unwrap();
        assert!(
            other.canonical == home.join("Data") || other.canonical == home.join("data"),
            "{other:?}"
        );
    }

    #[test]
    fn a_link_found_in_another_case_is_still_a_link() {
        let (_guard, root) = tempdir();
        std::fs::create_dir(root.join("real")).unwrap();
        symlink(root.join("real"), root.join("Link")).unwrap();
        let err = resolve_with(
            &CaseInsensitive,
            &format!("{}/link/x", s(&root)),
            &root,
            Role::ReadWrite,
            &[],
        )
        .map(|(r, _)| r)
        .unwrap_err();
        assert_eq!(
            err,
            PathError::ReadWriteThroughLink {
                path: root.join("link/x"),
                link: root.join("Link"),
            }
        );
        let read = resolve_with(
            &CaseInsensitive,
            &format!("{}/LINK/x", s(&root)),
            &root,
            Role::Read,
            &[],
        )
        .map(|(r, _)| r)
        .unwrap();
        assert_eq!(read.canonical, root.join("real/x"));
    }

    #[test]
    fn tilde_expands_against_home() {
        let (_guard, home) = tempdir();
        std::fs::create_dir(home.join(".config")).unwrap();

        let bare = resolve("~", &home, Role::Read).unwrap();
        assert_eq!(bare.written, home);
        assert_eq!(bare.canonical, home);
        assert_eq!(bare.kind, PathKind::Dir);

        let sub = resolve("~/.config", &home, Role::ReadWrite).unwrap();
        assert_eq!(sub.canonical, home.join(".config"));
        assert_eq!(sub.kind, PathKind::Dir);
    }

    #[test]
    fn relative_entries_are_refused() {
        let (_guard, home) = tempdir();
        for entry in ["relative/path", "./x", "", "~ada/x", "..", "~x"] {
            let err = resolve(entry, &home, Role::Read).unwrap_err();
            assert_eq!(
                err,
                PathError::Relative {
                    path: PathBuf::from(entry)
                },
                "{entry:?}"
            );
        }
        let message = resolve("x/y", &home, Role::Read).unwrap_err().to_string();
        assert!(message.contains("x/y"), "{message}");
    }

    #[test]
    fn written_spelling_is_lexically_normalized() {
        let (_guard, home) = tempdir();
        let entry = format!("{}//a/./b/../c/", s(&home));
        let resolved = resolve(&entry, &home, Role::Read).unwrap();
        assert_eq!(resolved.written, home.join("a/c"));
        assert_eq!(resolved.canonical, home.join("a/c"));
        assert_eq!(resolved.kind, PathKind::Missing);
    }

    #[test]
    fn missing_tail_keeps_canonical_form_of_existing_ancestor() {
        let (_guard, root) = tempdir();
        std::fs::create_dir(root.join("real")).unwrap();
        symlink(root.join("real"), root.join("link")).unwrap();

        let entry = format!("{}/link/not/yet/there", s(&root));
        let resolved = resolve(&entry, &root, Role::Read).unwrap();
        assert_eq!(resolved.canonical, root.join("real/not/yet/there"));
        assert_eq!(resolved.written, root.join("link/not/yet/there"));
        assert_eq!(resolved.kind, PathKind::Missing);
    }

    #[test]
    fn kind_is_taken_from_the_canonical_path() {
        let (_guard, root) = tempdir();
        std::fs::write(root.join("file"), b"x").unwrap();
        symlink(root.join("file"), root.join("to-file")).unwrap();
        symlink(root.join("gone"), root.join("dangling")).unwrap();

        let file = resolve(&s(&root.join("to-file")), &root, Role::Read).unwrap();
        assert_eq!(file.canonical, root.join("file"));
        assert_eq!(file.kind, PathKind::File);

        let dangling = resolve(&s(&root.join("dangling")), &root, Role::Read).unwrap();
        assert_eq!(dangling.canonical, root.join("gone"));
        assert_eq!(dangling.kind, PathKind::Missing);

        let under_file = resolve(&s(&root.join("file/x")), &root, Role::Read).unwrap();
        assert_eq!(under_file.kind, PathKind::Missing);

        // Climbing out of a missing tail with `..` lands on what exists again.
        let back = resolve(&s(&root.join("no/such/../../to-file")), &root, Role::Read).unwrap();
        assert_eq!(back.canonical, root.join("file"));
        assert_eq!(back.kind, PathKind::File);
    }

    #[test]
    fn dotdot_after_a_link_applies_to_the_link_target() {
        let (_guard, root) = tempdir();
        std::fs::create_dir_all(root.join("deep/real")).unwrap();
        symlink(root.join("deep/real"), root.join("link")).unwrap();

        let resolved = resolve(&format!("{}/link/../x", s(&root)), &root, Role::Read).unwrap();
        assert_eq!(resolved.canonical, root.join("deep/x"));
        assert_eq!(resolved.written, root.join("x"));
    }

    #[test]
    fn read_write_through_symlink_is_refused() {
        let (_guard, root) = tempdir();
        std::fs::create_dir(root.join("real")).unwrap();
        symlink("real", root.join("link")).unwrap();

        let entry = format!("{}/link/sub", s(&root));
        let err = resolve(&entry, &root, Role::ReadWrite).unwrap_err();
        assert_eq!(
            err,
            PathError::ReadWriteThroughLink {
                path: root.join("link/sub"),
                link: root.join("link"),
            }
        );
        let message = err.to_string();
        assert!(message.contains(&entry), "{message}");
        assert!(message.contains("real path"), "{message}");

        // The same entry is fine to read.
        let read = resolve(&entry, &root, Role::Read).unwrap();
        assert_eq!(read.canonical, root.join("real/sub"));
    }

    #[test]
    fn token_deny_through_symlink_in_writable_dir_is_refused() {
        // The tempdir is ours and 0700, so whoever runs the test can write it.
        let (_guard, root) = tempdir();
        std::fs::create_dir(root.join("decoy")).unwrap();
        std::fs::write(root.join("decoy/token"), b"not the token").unwrap();
        std::fs::create_dir(root.join(".config")).unwrap();
        symlink(root.join("decoy"), root.join(".config/acme-ltt")).unwrap();

        let err = resolve("~/.config/acme-ltt/token", &root, Role::Deny).unwrap_err();
        assert_eq!(
            err,
            PathError::DenyThroughWritableLink {
                path: root.join(".config/acme-ltt/token"),
                link: root.join(".config/acme-ltt"),
            }
        );
        assert!(err.to_string().contains("user-writable"), "{err}");
    }

    #[test]
    fn deny_without_links_resolves() {
        let (_guard, root) = tempdir();
        std::fs::create_dir(root.join("secrets")).unwrap();
        let resolved = resolve("~/secrets", &root, Role::Deny).unwrap();
        assert_eq!(resolved.canonical, root.join("secrets"));
        assert_eq!(resolved.kind, PathKind::Dir);
    }

    #[test]
    fn symlink_loop_is_refused() {
        let (_guard, root) = tempdir();
        symlink(root.join("b"), root.join("a")).unwrap();
        symlink(root.join("a"), root.join("b")).unwrap();
        let err = resolve(&s(&root.join("a/x")), &root, Role::Read).unwrap_err();
        assert_eq!(
            err,
            PathError::TooManyLinks {
                path: root.join("a/x")
            }
        );
    }

    #[test]
    fn thirty_three_links_are_refused_thirty_two_are_followed() {
        let (_guard, root) = tempdir();
        std::fs::create_dir(root.join("end")).unwrap();
        // l0 -> end, l1 -> l0, …: following l<n> takes n + 1 links.
        symlink(root.join("end"), root.join("l0")).unwrap();
        for n in 1..33 {
            symlink(root.join(format!("l{}", n - 1)), root.join(format!("l{n}"))).unwrap();
        }
        let ok = resolve(&s(&root.join("l31")), &root, Role::Read).unwrap();
        assert_eq!(ok.canonical, root.join("end"));
        let err = resolve(&s(&root.join("l32")), &root, Role::Read).unwrap_err();
        assert!(matches!(err, PathError::TooManyLinks { .. }), "{err:?}");
    }

    #[test]
    fn both_spellings_when_written_path_has_a_symlink() {
        let (_guard, root) = tempdir();
        std::fs::create_dir(root.join("real")).unwrap();
        std::fs::write(root.join("real/f"), b"").unwrap();
        symlink(root.join("real"), root.join("link")).unwrap();

        // Read entries may follow links, wherever they sit.
        let read = resolve(&s(&root.join("link/f")), &root, Role::Read).unwrap();
        assert_eq!(
            read.spellings(),
            vec![root.join("real/f").as_path(), root.join("link/f").as_path()]
        );

        // A deny through the same link is accepted only where the link's directory is
        // not writable; that decision is `is_user_writable`, tested on its own below,
        // and it says "writable" for this tempdir.
        let meta = std::fs::metadata(&root).unwrap();
        let me = Ids::current().unwrap();
        assert!(is_user_writable(meta.mode(), meta.uid(), meta.gid(), &me));
        assert!(!is_user_writable(
            0o755,
            me.euid.wrapping_add(1),
            u32::MAX,
            &me
        ));
    }

    #[test]
    fn deny_through_link_in_non_writable_dir_is_accepted() {
        // 0o555 has no write bit for anyone, so this holds as root too: the decision is
        // made from the mode bits, not from what root could do anyway.
        let (_guard, root) = tempdir();
        std::fs::create_dir_all(root.join("locked")).unwrap();
        std::fs::create_dir_all(root.join("real")).unwrap();
        symlink(root.join("real"), root.join("locked/link")).unwrap();
        std::fs::set_permissions(root.join("locked"), std::fs::Permissions::from_mode(0o555))
            .unwrap();

        let result = resolve(&s(&root.join("locked/link/token")), &root, Role::Deny);
        std::fs::set_permissions(root.join("locked"), std::fs::Permissions::from_mode(0o755))
            .unwrap();

        let resolved = result.unwrap();
        assert_eq!(resolved.canonical, root.join("real/token"));
        assert_eq!(
            resolved.spellings(),
            vec![
                root.join("real/token").as_path(),
                root.join("locked/link/token").as_path()
            ]
        );
    }

    /// A folder writable through a supplementary group is user-writable: a deny through
    /// a link planted there is refused. The group list is the whole process's, so this
    /// runs alone, as root (CI), with a group list it sets itself.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_deny_through_a_link_in_a_folder_of_a_supplementary_group_is_refused() {
        crate::alone::alone(
            concat!(
                module_path!(),
                "::a_deny_through_a_link_in_a_folder_of_a_supplementary_group_is_refused"
            ),
            || {
                use nix::unistd::{chown, geteuid, setgroups, Gid, Uid};
                if !geteuid().is_root() {
                    eprintln!("skip: setting the group list needs root");
                    return;
                }
                const GROUP: u32 = 4242;
                setgroups(&[Gid::from_raw(GROUP)]).unwrap();
                assert_eq!(supplementary_groups().unwrap(), vec![GROUP]);
                let current = Ids::current().unwrap();
                assert!(current.groups.contains(&GROUP), "{current:?}");
                assert!(current.groups.contains(&nix::unistd::getegid().as_raw()));

                let (_guard, root) = tempdir();
                std::fs::create_dir(root.join("real")).unwrap();
                let shared = root.join("shared");
                std::fs::create_dir(&shared).unwrap();
                symlink(root.join("real"), shared.join("link")).unwrap();
                // Another owner, and only the group may write.
                let other = Some(Uid::from_raw(4343));
                chown(&shared, other, Some(Gid::from_raw(GROUP))).unwrap();
                std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o770)).unwrap();
                let entry = s(&shared.join("link/token"));
                assert_eq!(
                    resolve(&entry, &root, Role::Deny),
                    Err(PathError::DenyThroughWritableLink {
                        path: shared.join("link/token"),
                        link: shared.join("link"),
                    })
                );
                // Out of that group, the same folder is not writable and the deny stands.
                setgroups(&[Gid::from_raw(GROUP + 1)]).unwrap();
                let resolved = resolve(&entry, &root, Role::Deny).unwrap();
                assert_eq!(resolved.canonical, root.join("real/token"));
            },
        );
    }

    /// Folds letter case only: a name is never the same as a different name.
    #[test]
    fn names_match_in_any_letter_case_and_only_then() {
        let m = |a: &str, b: &str| names_match_ignoring_case(OsStr::new(a), OsStr::new(b));
        assert!(m(".Config", ".config"));
        assert!(m("ACME-LTT", "acme-ltt"));
        assert!(!m(".config", ".config2"));
        assert!(!m("token", "tokem"));
        // Names that are not UTF-8 compare byte for byte.
        use std::os::unix::ffi::OsStrExt;
        let raw = OsStr::from_bytes(b"\xffA");
        assert!(names_match_ignoring_case(raw, raw));
        assert!(!names_match_ignoring_case(raw, OsStr::from_bytes(b"\xffa")));
    }

    #[test]
    fn a_name_no_entry_matches_has_no_stored_name() {
        let (_guard, root) = tempdir();
        std::fs::create_dir(root.join("Data")).unwrap();
        std::fs::create_dir(root.join("data")).unwrap();
        std::fs::write(root.join("notes"), b"").unwrap();
        let stored = |name: &str| stored_name(&root, OsStr::new(name), names_match_ignoring_case);
        assert_eq!(stored("missing"), None);
        assert_eq!(stored("NOTES"), Some(OsString::from("notes")));
        // The exact name wins over an entry that only folds to it, whatever the order.
        assert_eq!(stored("data"), Some(OsString::from("data")));
        assert_eq!(stored("Data"), Some(OsString::from("Data")));
        assert_eq!(
            stored_name(&root.join("nowhere"), OsStr::new("x"), |_, _| true),
            None
        );
    }

    /// A volume that cannot answer for `name` (permission denied, an I/O error).
    struct Refusing(&'static str, i32);

    impl Lookup for Refusing {
        fn lookup(&self, dir: &Path, name: &OsStr) -> io::Result<(OsString, std::fs::Metadata)> {
            if name == self.0 {
                return Err(io::Error::from_raw_os_error(self.1));
            }
            SystemLookup.lookup(dir, name)
        }
    }

    /// Only a name that is not there makes the rest of the path missing; a component
    /// the walk cannot inspect refuses the entry, whatever its role.
    #[test]
    fn a_component_that_cannot_be_inspected_refuses_the_entry() {
        let (_guard, root) = tempdir();
        std::fs::create_dir(root.join("locked")).unwrap();
        let entry = s(&root.join("locked/token"));
        for role in [Role::Read, Role::ReadWrite, Role::Deny] {
            let err = resolve_with(&Refusing("locked", libc::EACCES), &entry, &root, role, &[])
                .map(|(r, _)| r)
                .unwrap_err();
            let PathError::Io { path, reason } = &err else {
                panic!("{role:?}: {err:?}");
            };
            assert_eq!(path, &root.join("locked/token"));
            assert!(reason.contains("cannot inspect"), "{reason}");
        }
        for errno in [libc::ENOENT, libc::ENOTDIR] {
            let missing = resolve_with(&Refusing("locked", errno), &entry, &root, Role::Deny, &[])
                .map(|(r, _)| r)
                .unwrap();
            assert_eq!(missing.kind, PathKind::Missing, "errno {errno}");
            assert_eq!(missing.canonical, root.join("locked/token"));
        }
    }

    #[test]
    fn writable_decision_from_mode_bits() {
        let me = ids(1000, &[1000, 20]);
        // Owner bit counts only for the owner.
        assert!(is_user_writable(0o700, 1000, 5, &me));
        assert!(!is_user_writable(0o500, 1000, 5, &me));
        assert!(!is_user_writable(0o755, 0, 0, &me));
        // Group bit counts only for members.
        assert!(is_user_writable(0o770, 0, 20, &me));
        assert!(!is_user_writable(0o770, 0, 30, &me));
        // Other bit counts for everyone; sticky /tmp is still writable.
        assert!(is_user_writable(0o1777, 0, 0, &me));
        assert!(is_user_writable(0o002, 0, 0, &me));
        // Owner without the owner bit is not rescued by the group bit of another group.
        assert!(!is_user_writable(0o570, 1000, 30, &me));
    }

    #[test]
    fn writable_decision_does_not_special_case_root() {
        let root = ids(0, &[0]);
        assert!(is_user_writable(0o755, 0, 0, &root));
        assert!(!is_user_writable(0o555, 0, 0, &root));
        // A dir owned by someone else without write bits stays non-writable, even
        // though root could write it anyway: the question is who owns the dir.
        assert!(!is_user_writable(0o755, 1000, 1000, &root));
    }

    #[test]
    fn build_spec_orders_grants_read_then_read_write() {
        let (_guard, home) = tempdir();
        for dir in ["a", "b", "c", "d"] {
            std::fs::create_dir(home.join(dir)).unwrap();
        }
        let read = vec!["~/b".to_string(), "~/a".to_string()];
        let read_write = vec!["~/d".to_string(), "~/c".to_string()];
        let deny = vec!["~/a/token".to_string()];
        let workdir = home.join("c");
        let input = SpecInput {
            read: &read,
            read_write: &read_write,
            deny: &deny,
            network: Network::Shared {
                denied_loopback_ports: vec![8080],
            },
            workdir: &workdir,
            interactive: true,
            file_mask: "/dev/null".into(),
            read_only: &[],
            state: &[],
            session_writable: &[],
            deny_unix_sockets: vec![home.join("relay.sock")],
        };
        let spec = build_spec(&input, &home).unwrap();
        let grants: Vec<_> = spec
            .grants
            .iter()
            .map(|g| (g.path.canonical.clone(), g.access))
            .collect();
        assert_eq!(
            grants,
            vec![
                (home.join("b"), Access::Read),
                (home.join("a"), Access::Read),
                (home.join("d"), Access::ReadWrite),
                (home.join("c"), Access::ReadWrite),
            ]
        );
        assert_eq!(spec.deny.len(), 1);
        assert_eq!(spec.deny[0].canonical, home.join("a/token"));
        assert_eq!(spec.deny[0].kind, PathKind::Missing);
        assert_eq!(spec.deny_unix_sockets, vec![home.join("relay.sock")]);
        assert_eq!(spec.workdir, workdir);
        assert!(spec.interactive);
    }

    #[test]
    fn build_spec_refuses_on_the_first_bad_entry() {
        let (_guard, home) = tempdir();
        let read = vec!["~/fine".to_string()];
        let deny = vec!["not/absolute".to_string()];
        let input = SpecInput {
            read: &read,
            read_write: &[],
            deny: &deny,
            network: Network::Off,
            workdir: &home,
            interactive: false,
            file_mask: "/dev/null".into(),
            read_only: &[],
            state: &[],
            session_writable: &[],
            deny_unix_sockets: vec![],
        };
        let err = build_spec(&input, &home).unwrap_err();
        assert_eq!(
            err,
            PathError::Relative {
                path: PathBuf::from("not/absolute")
            }
        );
    }
}

/// Property tests (docs/testing.md#fuzzing): `cargo test -p relay --lib resolve::fuzz`.
/// Entries are walked through a small real tree with folders, a file, links (one up,
/// one looping, one dangling) and names spelled oddly; the walk must agree with the
/// kernel's own resolution and keep every role's refusals.
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    /// A fresh tree, removed when dropped: `<root>/a/b/`, `<root>/a/f`, `<root>/l -> a`,
    /// `<root>/a/up -> ..`, `<root>/loop -> loop`, `<root>/gone -> nowhere`.
    fn tree() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/f"), b"").unwrap();
        std::os::unix::fs::symlink("a", root.join("l")).unwrap();
        std::os::unix::fs::symlink("..", root.join("a/up")).unwrap();
        std::os::unix::fs::symlink("loop", root.join("loop")).unwrap();
        std::os::unix::fs::symlink("nowhere", root.join("gone")).unwrap();
        (dir, root)
    }

    fn component() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => prop::sample::select(vec!["a", "b", "f", "l", "up", "loop", "gone", "..", ".", "", "x"])
                .prop_map(String::from),
            1 => "[^/\0]{1,8}",
        ]
    }

    /// Where the entry starts (`/<root>/`, `~/`, or nothing: relative) and its rest.
    fn entry() -> impl Strategy<Value = (&'static str, String)> {
        (
            prop::sample::select(vec!["root", "home", "relative"]),
            proptest::collection::vec(component(), 0..6),
        )
            .prop_map(|(start, parts)| (start, parts.join("/")))
    }

    fn role() -> impl Strategy<Value = Role> {
        prop::sample::select(vec![Role::Read, Role::ReadWrite, Role::Deny])
    }

    fn normal(p: &Path) -> bool {
        p.is_absolute()
            && p.components()
                .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
    }

    /// The case proptest found: climbing back out of a name under a file lands on the
    /// file, and the walk says so.
    #[test]
    fn a_dot_dot_out_of_a_name_under_a_file_is_the_file() {
        let (_dir, root) = tree();
        let entry = format!("{}/a/f/a/..", root.display());
        let r = resolve(&entry, &root, Role::Read).unwrap();
        assert_eq!(r.canonical, root.join("a/f"));
        assert_eq!(r.kind, PathKind::File);
    }

    proptest! {
        #[test]
        fn the_walk_agrees_with_the_kernel_and_keeps_each_roles_refusals(
            (start, rest) in entry(),
            role in role(),
        ) {
            let (_dir, root) = tree();
            let home = root.as_path();
            let entry = match start {
                "root" => format!("{}/{rest}", root.display()),
                "home" => format!("~/{rest}"),
                _ => rest,
            };
            let result = resolve(&entry, home, role);
            let expanded = if entry == "~" {
                Some(home.to_path_buf())
            } else if let Some(rest) = entry.strip_prefix("~/") {
                Some(home.join(rest.trim_start_matches('/')))
            } else if entry.starts_with('/') {
                Some(PathBuf::from(&entry))
            } else {
                None
            };
            let Some(expanded) = expanded else {
                prop_assert!(matches!(result, Err(PathError::Relative { .. })), "{result:?}");
                return Ok(());
            };
            match result {
                Ok(r) => {
                    prop_assert!(normal(&r.written), "{r:?}");
                    prop_assert!(normal(&r.canonical), "{r:?}");
                    match r.kind {
                        PathKind::Dir | PathKind::File => {
                            prop_assert!(r.canonical.exists(), "{r:?}");
                            prop_assert_eq!(r.kind == PathKind::Dir, r.canonical.is_dir());
                            // Where the kernel resolves the entry, both agree. (Past a
                            // missing name the walk goes on by the letters, where the
                            // kernel stops: `b/..` with no `b` is the folder itself.)
                            if let Ok(kernel) = std::fs::canonicalize(&expanded) {
                                prop_assert_eq!(&kernel, &r.canonical);
                            }
                        }
                        PathKind::Missing => prop_assert!(!r.canonical.exists(), "{r:?}"),
                    }
                    if role == Role::ReadWrite {
                        // A read-write grant never goes through a link.
                        prop_assert_eq!(&r.canonical, &r.written);
                    }
                }
                Err(PathError::TooManyLinks { .. }) => {
                    prop_assert!(entry.contains("loop"), "{entry}");
                }
                Err(PathError::ReadWriteThroughLink { .. }) => prop_assert_eq!(role, Role::ReadWrite),
                Err(PathError::Relative { .. }) => prop_assert!(false, "{entry} is absolute"),
                Err(_) => {}
            }
        }

        /// Any string at all: a path or a refusal, never a panic.
        #[test]
        fn any_entry_is_resolved_or_refused(entry in any::<String>(), role in role()) {
            let (_dir, root) = tree();
            let _ = resolve(&entry, &root, role);
        }
    }
}
