//! Sandbox wrapping: which program the shim actually execs, with which argv.
//!
//! - no sandbox: the resolved target, with `argv[0]` as the caller gave it;
//! - seatbelt: `<launcher> -f <profile> -- <resolved target> ARGV[1..]`;
//! - bwrap: `<launcher> <profile args…> -- <resolved target> ARGV[1..]`, the arguments
//!   read from the profile file the daemon rendered (see [`crate::bwrap_profile`]).

use std::ffi::OsString;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::bwrap_profile::{self, MAX_PROFILE_BYTES};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wrap<'a> {
    None,
    Seatbelt {
        launcher: &'a Path,
        profile: &'a Path,
    },
    Bwrap {
        launcher: &'a Path,
        args: &'a [String],
        /// With a pty: this shim's own path, run inside as `pty-init -- target…`.
        pty_init: Option<&'a Path>,
    },
}

/// The program to exec and its full argv (argv[0] included).
pub(crate) fn command_line(
    wrap: Wrap<'_>,
    resolved: &Path,
    argv: &[OsString],
) -> (PathBuf, Vec<OsString>) {
    let rest = argv.iter().skip(1).cloned();
    match wrap {
        Wrap::None => {
            let mut full = Vec::with_capacity(argv.len());
            full.extend(argv.iter().take(1).cloned());
            full.extend(rest);
            (resolved.to_path_buf(), full)
        }
        Wrap::Seatbelt { launcher, profile } => {
            let mut full: Vec<OsString> = vec![
                launcher.into(),
                "-f".into(),
                profile.into(),
                "--".into(),
                resolved.into(),
            ];
            full.extend(rest);
            (launcher.to_path_buf(), full)
        }
        Wrap::Bwrap {
            launcher,
            args,
            pty_init,
        } => {
            let mut full: Vec<OsString> = Vec::with_capacity(args.len() + argv.len() + 5);
            full.push(launcher.into());
            full.extend(args.iter().map(OsString::from));
            full.push("--".into());
            if let Some(init) = pty_init {
                full.push(init.into());
                full.push("pty-init".into());
                full.push("--".into());
            }
            full.push(resolved.into());
            full.extend(rest);
            (launcher.to_path_buf(), full)
        }
    }
}

/// Reads and decodes a bwrap profile. Errors carry the errno the host is told
/// (`EFBIG` for an oversize profile, `EINVAL` for a malformed one) and a reason that
/// never quotes the profile's content.
pub(crate) fn read_bwrap_profile(path: &Path) -> Result<Vec<String>, (i32, String)> {
    let os_err = |e: io::Error| (e.raw_os_error().unwrap_or(libc::EIO), e.to_string());
    let file = std::fs::File::open(path).map_err(os_err)?;
    let mut bytes = Vec::new();
    file.take(MAX_PROFILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(os_err)?;
    if bytes.len() > MAX_PROFILE_BYTES {
        return Err((
            libc::EFBIG,
            format!("larger than {MAX_PROFILE_BYTES} bytes"),
        ));
    }
    let args = bwrap_profile::decode(&bytes).map_err(|e| (libc::EINVAL, e.to_string()))?;
    if args.is_empty() {
        return Err((libc::EINVAL, "profile holds no arguments".to_string()));
    }
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn unwrapped_keeps_argv0_as_given() {
        let (prog, argv) = command_line(
            Wrap::None,
            Path::new("/usr/bin/claude"),
            &os(&["claude", "-p"]),
        );
        assert_eq!(prog, PathBuf::from("/usr/bin/claude"));
        assert_eq!(argv, os(&["claude", "-p"]));
    }

    #[test]
    fn seatbelt_passes_the_resolved_target() {
        let wrap = Wrap::Seatbelt {
            launcher: Path::new("/usr/bin/sandbox-exec"),
            profile: Path::new("/cfg/s1.sb"),
        };
        let (prog, argv) = command_line(
            wrap,
            Path::new("/usr/bin/claude"),
            &os(&["claude", "-p", "--"]),
        );
        assert_eq!(prog, PathBuf::from("/usr/bin/sandbox-exec"));
        assert_eq!(
            argv,
            os(&[
                "/usr/bin/sandbox-exec",
                "-f",
                "/cfg/s1.sb",
                "--",
                "/usr/bin/claude",
                "-p",
                "--"
            ])
        );
    }

    #[test]
    fn bwrap_puts_profile_args_before_the_target() {
        let args = vec!["--unshare-pid".to_string(), "--proc".into(), "/proc".into()];
        let wrap = Wrap::Bwrap {
            launcher: Path::new("/usr/bin/bwrap"),
            args: &args,
            pty_init: None,
        };
        let (prog, argv) = command_line(wrap, Path::new("/bin/sh"), &os(&["sh", "-c", "id"]));
        assert_eq!(prog, PathBuf::from("/usr/bin/bwrap"));
        assert_eq!(
            argv,
            os(&[
                "/usr/bin/bwrap",
                "--unshare-pid",
                "--proc",
                "/proc",
                "--",
                "/bin/sh",
                "-c",
                "id"
            ])
        );
    }

    #[test]
    fn profile_reading_refuses_bad_files() {
        let dir = std::env::temp_dir().join(format!("relay-shim-wrap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let p = dir.join(name);
            std::fs::write(&p, bytes).unwrap();
            p
        };
        let ok = write("ok", b"--dev\0/dev\0");
        assert_eq!(read_bwrap_profile(&ok).unwrap(), vec!["--dev", "/dev"]);
        let errno = |p: &Path| read_bwrap_profile(p).unwrap_err().0;
        assert_eq!(errno(&write("empty", b"")), libc::EINVAL);
        assert_eq!(errno(&write("unterminated", b"--dev\0/dev")), libc::EINVAL);
        assert_eq!(errno(&write("binary", b"\xff\0")), libc::EINVAL);
        assert_eq!(
            errno(&write("big", &vec![b'a'; MAX_PROFILE_BYTES + 1])),
            libc::EFBIG
        );
        assert_eq!(errno(&dir.join("missing")), libc::ENOENT);
        assert_eq!(errno(&dir), libc::EISDIR);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
