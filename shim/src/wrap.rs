//! Sandbox wrapping: which program the shim actually execs, with which argv.
//!
//! - no sandbox: the resolved target, with `argv[0]` as the caller gave it;
//! - seatbelt: `<launcher> -D RELAY_TTY=<tty> -f <profile> -- <shim> enter -- <resolved
//!   target> ARGV[1..]`, `<tty>` the session's own terminal ([`session_tty`]), which the
//!   profile alone may open of all terminals;
//! - bwrap: `<launcher> <profile args…> -- <shim> enter [--pty] -- <resolved target>
//!   ARGV[1..]`, the arguments read from the profile file the daemon rendered (see
//!   [`crate::bwrap_profile`]).
//!
//! Under a launcher the target's environment and folder are applied by `relay-shim
//! enter` inside the sandbox ([`crate::target`]); the launcher itself runs with none of
//! them.

use std::ffi::OsString;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::bwrap_profile::{self, MAX_PROFILE_BYTES};
use crate::cli::flags;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wrap<'a> {
    None,
    Seatbelt {
        launcher: &'a Path,
        profile: &'a Path,
        /// This shim's own path, run inside as `enter -- target…`.
        enter: &'a Path,
        /// The session's terminal, bound to the profile's `(param "RELAY_TTY")`.
        tty: &'a Path,
    },
    Bwrap {
        launcher: &'a Path,
        args: &'a [String],
        /// This shim's own path, run inside as `enter [--pty] -- target…`.
        enter: &'a Path,
        /// A terminal: `enter` makes a process group inside the pid namespace.
        pty: bool,
    },
}

/// The program to exec and its full argv (argv[0] included).
pub(crate) fn command_line(
    wrap: Wrap<'_>,
    resolved: &Path,
    argv: &[OsString],
) -> (PathBuf, Vec<OsString>) {
    let rest = argv.iter().skip(1).cloned();
    let enter_then_target = |full: &mut Vec<OsString>, enter: &Path, pty: bool| {
        full.push(enter.into());
        full.push(flags::ENTER.into());
        if pty {
            full.push(flags::PTY.into());
        }
        full.push(flags::ARGV.into());
        full.push(resolved.into());
    };
    match wrap {
        Wrap::None => {
            let mut full = Vec::with_capacity(argv.len());
            full.extend(argv.iter().take(1).cloned());
            full.extend(rest);
            (resolved.to_path_buf(), full)
        }
        Wrap::Seatbelt {
            launcher,
            profile,
            enter,
            tty,
        } => {
            let mut param = OsString::from(format!("{TTY_PARAM}="));
            param.push(tty);
            let mut full: Vec<OsString> = vec![
                launcher.into(),
                "-D".into(),
                param,
                "-f".into(),
                profile.into(),
                "--".into(),
            ];
            enter_then_target(&mut full, enter, false);
            full.extend(rest);
            (launcher.to_path_buf(), full)
        }
        Wrap::Bwrap {
            launcher,
            args,
            enter,
            pty,
        } => {
            let mut full: Vec<OsString> = Vec::with_capacity(args.len() + argv.len() + 6);
            full.push(launcher.into());
            full.extend(args.iter().map(OsString::from));
            full.push("--".into());
            enter_then_target(&mut full, enter, pty);
            full.extend(rest);
            (launcher.to_path_buf(), full)
        }
    }
}

/// The Seatbelt profile parameter naming the session's own terminal.
pub(crate) const TTY_PARAM: &str = "RELAY_TTY";

/// The terminal this shim was started on (the first of fds 0, 1, 2 that is one, by the
/// name the kernel gives it), or `/dev/null` for a pipe session. The profile lets the
/// session open, read, write and ioctl this one terminal and no other.
pub(crate) fn session_tty() -> PathBuf {
    use std::os::fd::BorrowedFd;
    for raw in 0..=2 {
        if !nix::unistd::isatty(raw).unwrap_or(false) {
            continue;
        }
        // Safety: `raw` is open (isatty just answered for it) and stays open while
        // borrowed: the shim closes none of 0, 1, 2, and the borrow ends here.
        let fd = unsafe { BorrowedFd::borrow_raw(raw) };
        if let Ok(name) = nix::unistd::ttyname(fd) {
            return name;
        }
    }
    PathBuf::from("/dev/null")
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

/// Replaces every `--bind SRC DEST` and `--ro-bind SRC DEST` by `--bind-fd N DEST` /
/// `--ro-bind-fd N DEST`, where N is `SRC` opened now with a walk that follows no
/// symlink at all. The daemon resolved each source to a link-free canonical path; a link
/// a session swapped in since then (to point a grant at `/proc`, a socket folder or the
/// token) fails the launch here instead of being followed by bwrap's own `realpath`,
/// and bwrap checks that what it mounted is the descriptor's file. The descriptors are
/// inherited by bwrap only, which closes each after its mount (docs/session-host.md).
pub(crate) fn pin_bind_sources(
    args: &[String],
) -> Result<(Vec<String>, Vec<std::os::fd::OwnedFd>), (String, io::Error)> {
    use std::os::fd::AsRawFd;
    let mut out = Vec::with_capacity(args.len());
    let mut fds = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let flag = match args[i].as_str() {
            "--bind" => Some("--bind-fd"),
            "--ro-bind" => Some("--ro-bind-fd"),
            _ => None,
        };
        match (flag, args.get(i + 1), args.get(i + 2)) {
            (Some(fd_flag), Some(src), Some(dest)) => {
                let fd = open_no_links(Path::new(src)).map_err(|e| (src.clone(), e))?;
                out.push(fd_flag.to_string());
                out.push(fd.as_raw_fd().to_string());
                out.push(dest.clone());
                fds.push(fd);
                i += 3;
            }
            _ => {
                out.push(args[i].clone());
                i += 1;
            }
        }
    }
    Ok((out, fds))
}

/// Opens an absolute path as an `O_PATH` descriptor, one component at a time with
/// `O_NOFOLLOW`: any symlink on the way is `ELOOP`. The descriptor is inheritable (it is
/// meant for bwrap).
#[cfg(target_os = "linux")]
fn open_no_links(path: &Path) -> io::Result<std::os::fd::OwnedFd> {
    use std::ffi::CString;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    use std::path::Component;

    if !path.is_absolute() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let open_at = |dir: libc::c_int, name: &CString, flags: libc::c_int| -> io::Result<OwnedFd> {
        // Safety: NUL-terminated name; the result is a fresh descriptor we own.
        let fd = unsafe { libc::openat(dir, name.as_ptr(), flags) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // Safety: just returned by openat and owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    let root = CString::new("/").map_err(io::Error::other)?;
    let mut cur = open_at(libc::AT_FDCWD, &root, libc::O_PATH | libc::O_DIRECTORY)?;
    for component in path.components() {
        let name = match component {
            Component::Normal(name) => name,
            Component::RootDir => continue,
            _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
        };
        let name = CString::new(name.as_bytes()).map_err(io::Error::other)?;
        let next = open_at(cur.as_raw_fd(), &name, libc::O_PATH | libc::O_NOFOLLOW)?;
        // Safety: fstat on a descriptor we own into a zeroed stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // Safety: as above.
        if unsafe { libc::fstat(next.as_raw_fd(), &mut st) } < 0 {
            return Err(io::Error::last_os_error());
        }
        if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            return Err(io::Error::from_raw_os_error(libc::ELOOP));
        }
        cur = next;
    }
    Ok(cur)
}

/// bwrap runs on Linux only; elsewhere no profile reaches this.
#[cfg(not(target_os = "linux"))]
fn open_no_links(_path: &Path) -> io::Result<std::os::fd::OwnedFd> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
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
            enter: Path::new("/opt/relay/relay-shim"),
            tty: Path::new("/dev/ttys003"),
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
                "-D",
                "RELAY_TTY=/dev/ttys003",
                "-f",
                "/cfg/s1.sb",
                "--",
                "/opt/relay/relay-shim",
                "enter",
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
            enter: Path::new("/opt/relay/relay-shim"),
            pty: true,
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
                "/opt/relay/relay-shim",
                "enter",
                "--pty",
                "--",
                "/bin/sh",
                "-c",
                "id"
            ])
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn bind_sources_become_descriptors_and_a_link_is_refused() {
        use std::os::fd::AsRawFd;
        let dir = std::env::temp_dir().join(format!("relay-shim-pin-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("real")).unwrap();
        let real = std::fs::canonicalize(dir.join("real")).unwrap();
        let real = real.to_str().unwrap().to_string();
        let args: Vec<String> = [
            "--ro-bind-try",
            "/lib",
            "/lib",
            "--bind",
            &real,
            &real,
            "--chdir",
            "/",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let (out, fds) = pin_bind_sources(&args).unwrap();
        assert_eq!(fds.len(), 1);
        let n = fds[0].as_raw_fd().to_string();
        assert_eq!(
            out,
            vec![
                "--ro-bind-try",
                "/lib",
                "/lib",
                "--bind-fd",
                &n,
                &real,
                "--chdir",
                "/"
            ]
        );
        std::os::unix::fs::symlink("/proc", dir.join("swapped")).unwrap();
        let swapped = std::fs::canonicalize(&dir).unwrap().join("swapped/self");
        let swapped = swapped.to_str().unwrap().to_string();
        let (what, err) =
            pin_bind_sources(&["--ro-bind".into(), swapped.clone(), swapped.clone()]).unwrap_err();
        assert_eq!(what, swapped);
        assert_eq!(err.raw_os_error(), Some(libc::ELOOP));
        std::fs::remove_dir_all(&dir).unwrap();
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
