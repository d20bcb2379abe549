//! Turning the target's `argv[0]` into the absolute path that is executed.
//!
//! The lookup is done by the shim, outside the sandbox, so that a missing or
//! non-executable target is reported as such (127/126) instead of as a launcher failure,
//! and so that the launcher is handed one absolute path.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// `PATH` when the environment has none.
pub(crate) const DEFAULT_PATH: &str = "/usr/bin:/bin";

/// What a candidate path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    Missing,
    /// Exists but is a directory, not a regular file, or fails `access(X_OK)`.
    NotExecutable,
    Executable,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ResolveError {
    NotFound,
    NotExecutable(PathBuf),
}

/// Resolves `argv0`: a name containing `/` is that path (made absolute against `cwd`),
/// anything else is looked up in `path_env` (default [`DEFAULT_PATH`]). The first
/// executable candidate wins; when none is but some candidate exists, the answer is
/// [`ResolveError::NotExecutable`], as `execvp` would say EACCES.
///
/// Empty and relative `PATH` entries are skipped: the answer must not depend on the
/// directory the shim happens to run in.
pub(crate) fn resolve(
    argv0: &OsStr,
    path_env: Option<&OsStr>,
    cwd: &Path,
    probe: impl Fn(&Path) -> Probe,
) -> Result<PathBuf, ResolveError> {
    if argv0.is_empty() {
        return Err(ResolveError::NotFound);
    }
    if argv0.as_bytes().contains(&b'/') {
        let path = cwd.join(argv0);
        return match probe(&path) {
            Probe::Executable => Ok(path),
            Probe::NotExecutable => Err(ResolveError::NotExecutable(path)),
            Probe::Missing => Err(ResolveError::NotFound),
        };
    }
    let path_env = path_env.unwrap_or(OsStr::new(DEFAULT_PATH));
    let mut not_executable = None;
    for dir in path_env.as_bytes().split(|&b| b == b':') {
        let dir = Path::new(OsStr::from_bytes(dir));
        if !dir.is_absolute() {
            continue;
        }
        let candidate = dir.join(argv0);
        match probe(&candidate) {
            Probe::Executable => return Ok(candidate),
            Probe::NotExecutable => {
                not_executable.get_or_insert(candidate);
            }
            Probe::Missing => {}
        }
    }
    Err(not_executable.map_or(ResolveError::NotFound, ResolveError::NotExecutable))
}

/// The real probe: `stat` (following links), regular file, `access(X_OK)`.
pub(crate) fn probe_fs(path: &Path) -> Probe {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Probe::Missing,
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Probe::Missing,
        Err(_) => return Probe::NotExecutable,
    };
    if !meta.is_file() {
        return Probe::NotExecutable;
    }
    match nix::unistd::access(path, nix::unistd::AccessFlags::X_OK) {
        Ok(()) => Probe::Executable,
        Err(_) => Probe::NotExecutable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn fake(entries: &[(&str, Probe)]) -> impl Fn(&Path) -> Probe {
        let map: HashMap<PathBuf, Probe> = entries
            .iter()
            .map(|(p, k)| (PathBuf::from(p), *k))
            .collect();
        move |p| map.get(p).copied().unwrap_or(Probe::Missing)
    }

    fn run(argv0: &str, path: Option<&str>, fs: &[(&str, Probe)]) -> Result<PathBuf, ResolveError> {
        resolve(
            OsStr::new(argv0),
            path.map(OsStr::new),
            Path::new("/work/dir"),
            fake(fs),
        )
    }

    #[test]
    fn names_with_slash_are_used_as_given() {
        let fs = [
            ("/bin/echo", Probe::Executable),
            ("/work/dir/./x", Probe::Executable),
        ];
        assert_eq!(
            run("/bin/echo", Some("/nowhere"), &fs),
            Ok("/bin/echo".into())
        );
        assert_eq!(run("./x", None, &fs), Ok("/work/dir/./x".into()));
        assert_eq!(run("/bin/none", None, &fs), Err(ResolveError::NotFound));
        assert_eq!(
            run(
                "/etc/hostname",
                None,
                &[("/etc/hostname", Probe::NotExecutable)]
            ),
            Err(ResolveError::NotExecutable("/etc/hostname".into()))
        );
    }

    #[test]
    fn path_search_first_executable_wins() {
        let fs = [
            ("/a/tool", Probe::NotExecutable),
            ("/b/tool", Probe::Executable),
            ("/c/tool", Probe::Executable),
        ];
        assert_eq!(run("tool", Some("/a:/b:/c"), &fs), Ok("/b/tool".into()));
        assert_eq!(
            run("tool", Some("/a:/z"), &fs),
            Err(ResolveError::NotExecutable("/a/tool".into()))
        );
        assert_eq!(run("tool", Some("/y:/z"), &fs), Err(ResolveError::NotFound));
    }

    #[test]
    fn default_path_and_skipped_entries() {
        let fs = [
            ("/bin/sh", Probe::Executable),
            ("/work/dir/sh", Probe::Executable),
        ];
        assert_eq!(run("sh", None, &fs), Ok("/bin/sh".into()));
        assert_eq!(run("sh", Some(""), &fs), Err(ResolveError::NotFound));
        assert_eq!(run("sh", Some(":.:rel"), &fs), Err(ResolveError::NotFound));
        assert_eq!(run("", None, &fs), Err(ResolveError::NotFound));
    }

    #[test]
    fn real_probe() {
        assert_eq!(probe_fs(Path::new("/bin/sh")), Probe::Executable);
        assert_eq!(probe_fs(Path::new("/")), Probe::NotExecutable);
        assert_eq!(probe_fs(Path::new("/nonexistent/x")), Probe::Missing);
        assert_eq!(probe_fs(Path::new("/bin/sh/x")), Probe::Missing);
    }
}
