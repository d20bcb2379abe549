//! Makes what a plan lists before a bwrap launch (`exec_files::ToMake`): bwrap can hold
//! read-only only what exists. Nothing is followed: every name is made relative to
//! its folder's descriptor, and each one is found again, links checked, before it is
//! pinned (docs/session-host.md#execution-bearing-files).

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;

use crate::daemon::plan::exec_files::{found_made, ToMake};
use crate::daemon::plan::facts::Names;
use crate::daemon::plan::guard;
use crate::daemon::plan::sandbox::own_folder;
use crate::daemon::records::made_folders::{dev_ino, Made};
use crate::sandbox::{PathKind, ResolvedPath, Role, Spec};

/// Makes each listed name, then pins what is there in place of the plan's pin.
/// Returns each folder it made (`records::made_folders`: removed once no launch uses
/// it). Errors are `sandbox_unavailable` messages.
pub fn make_listed(
    spec: &mut Spec,
    makes: &[ToMake],
    home: &Path,
    session_writable: &[PathBuf],
) -> Result<Vec<Made>, String> {
    let mut made = Vec::new();
    for m in makes {
        let (found, new) = make_one(m, home, session_writable)?;
        made.extend(new);
        if let Some(pin) = spec
            .read_only
            .iter_mut()
            .find(|p| p.canonical == m.canonical)
        {
            *pin = found;
        }
    }
    Ok(made)
}

/// Whether the launch's own folders are, once made, what its plan has in the spec
/// (`plan::sandbox::own_folder`): where relay made them, of the kind it made, no link
/// followed. A session's link in its own temp folder refuses the launch.
pub fn check_own(spec: &Spec, names: &Names, home: &Path) -> Result<(), String> {
    let paths = spec
        .grants
        .iter()
        .map(|g| &g.path)
        .chain(&spec.read_only)
        .chain(&spec.state);
    for planned in paths {
        if own_folder(names, &planned.written).is_none() {
            continue;
        }
        let text = planned.written.to_string_lossy();
        let found = crate::sandbox::resolve(&text, home, Role::Deny).map_err(|e| e.to_string())?;
        if found.canonical != planned.canonical || found.kind != planned.kind {
            return Err(format!(
                "{} is not the {} relay made for this launch (it is {:?} at {}); \
                 the launch is refused",
                planned.written.display(),
                if planned.kind == PathKind::File {
                    "file"
                } else {
                    "folder"
                },
                found.kind,
                found.canonical.display()
            ));
        }
    }
    Ok(())
}

/// The identity of each read-only pin a bwrap spec holds in a write grant, once made:
/// what the next launches check was not swapped.
pub fn held(spec: &Spec) -> Vec<(PathBuf, Option<(u64, u64)>)> {
    crate::sandbox::policy::effective_read_only(spec)
        .into_iter()
        .filter(|pin| pin.kind != PathKind::Missing)
        .map(|pin| (pin.canonical.clone(), guard::identity(&pin.canonical)))
        .collect()
}

/// Makes one listed name and finds it again, links checked.
pub fn make_one(
    m: &ToMake,
    home: &Path,
    session_writable: &[PathBuf],
) -> Result<(ResolvedPath, Vec<Made>), String> {
    let made = make(&m.holder, &m.rel, m.dir, m.text).map_err(|e| {
        format!(
            "{} ({}) does not exist, and relay could not make it to hold it read-only: {e}",
            m.path.display(),
            m.reader
        )
    })?;
    Ok((found_made(home, session_writable, m)?, made))
}

/// Makes `rel` below `holder`, one component at a time, following no link: folders 0700,
/// the file (if not a folder) 0600 with `text`. What exists already is kept. Returns
/// each folder it made, as it found it once made.
pub(crate) fn make(holder: &Path, rel: &Path, dir: bool, text: &str) -> std::io::Result<Vec<Made>> {
    let mut made = Vec::new();
    let open_dir = |at: Option<i32>, name: &Path| -> std::io::Result<OwnedFd> {
        let fd = openat(
            at,
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        // Safety: `fd` was just returned by openat(2) and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    let mut at = open_dir(None, holder)?;
    let parts: Vec<&std::ffi::OsStr> = rel
        .components()
        .map(|c| match c {
            Component::Normal(n) => Ok(n),
            _ => Err(std::io::Error::other("not a plain relative path")),
        })
        .collect::<Result<_, _>>()?;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        if last && !dir {
            let fd = match openat(
                Some(at.as_raw_fd()),
                *part,
                OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o600),
            ) {
                Ok(fd) => fd,
                // Made meanwhile: it is pinned as it is.
                Err(nix::errno::Errno::EEXIST) => return Ok(made),
                Err(e) => return Err(e.into()),
            };
            // Safety: as above.
            let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
            file.write_all(text.as_bytes())?;
            return Ok(made);
        }
        let new = match nix::sys::stat::mkdirat(
            Some(at.as_raw_fd()),
            *part,
            Mode::from_bits_truncate(0o700),
        ) {
            Ok(()) => true,
            Err(nix::errno::Errno::EEXIST) => false,
            Err(e) => return Err(e.into()),
        };
        at = open_dir(Some(at.as_raw_fd()), Path::new(part))?;
        if new {
            let (dev, ino) = dev_ino(&nix::sys::stat::fstat(at.as_raw_fd())?);
            made.push(Made {
                path: holder.join(parts[..=i].iter().collect::<PathBuf>()),
                dev,
                ino,
            });
        }
    }
    Ok(made)
}
