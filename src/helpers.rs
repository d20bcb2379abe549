//! relay's own programs outside every sandbox, `relay-sessions` and `relay-shim`,
//! opened once when `relay serve` starts and run through that descriptor from then on.
//!
//! Threat (docs/THREAT-MODEL.md#relays-own-programs): both run unsandboxed at every
//! launch and every host start. Found by path, a session that can rename their folder
//! (`~/.cargo/bin` under a home project) would have its own `relay-shim` run at the
//! next launch, beside the token. So the daemon opens each file at start, checks that it
//! is relay's own version, and runs exactly that file afterwards: on Linux through
//! `/proc/self/fd/N` (the kernel execs the open file, whatever the folder holds now);
//! on macOS, which has no `fexecve`, by path once the path still names the same inode
//! with the same content digest. The folders are also pinned read-only in every
//! sandbox (`src/daemon/plan/guard.rs`), so the path keeps naming them.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The environment every helper relay runs outside a sandbox starts with: nothing from
/// the person's shell (no loader or libc variable), only a fixed `PATH`.
pub const CLEAN_PATH: &str = "/usr/bin:/bin";

/// One of relay's programs, open since the daemon's start.
#[derive(Debug)]
pub struct Helper {
    pub name: &'static str,
    /// Where it was found (beside `relay`).
    pub path: PathBuf,
    file: File,
    /// `(dev, ino)` of the open file.
    pub identity: (u64, u64),
    /// SHA-256 of its content when it was opened, hex.
    pub sha256: String,
}

impl Helper {
    /// Opens `path` and reads its digest. Errors name the path, never content. The
    /// descriptor sits at 10 or above, clear of the host's fixed numbers (src/host/fds.rs).
    pub fn open(name: &'static str, path: &Path) -> Result<Helper, String> {
        let shown = path.display().to_string();
        let file = File::open(path)
            .and_then(above_fixed_numbers)
            .map_err(|e| format!("{shown}: {e}"))?;
        Helper::from_file(name, path, file, &shown)
    }

    /// The checks and the digest of an open `file`; `shown` names it in errors.
    fn from_file(
        name: &'static str,
        path: &Path,
        file: File,
        shown: &str,
    ) -> Result<Helper, String> {
        let meta = file.metadata().map_err(|e| format!("{shown}: {e}"))?;
        if !meta.is_file() {
            return Err(format!("{shown}: not a regular file"));
        }
        let sha256 = digest(&file).map_err(|e| format!("{shown}: {e}"))?;
        Ok(Helper {
            name,
            path: path.to_path_buf(),
            file,
            identity: (meta.dev(), meta.ino()),
            sha256,
        })
    }

    /// A descriptor of `path` handed over by the daemon (`relay-sessions --shim-fd`):
    /// moved to 10 or above (clear of the host's fixed numbers, src/host/fds.rs) and
    /// made close-on-exec.
    pub fn adopt(name: &'static str, path: &Path, fd: RawFd) -> Result<Helper, String> {
        use std::os::fd::FromRawFd;
        let shown = format!("{name} descriptor {fd}");
        // Safety: `fd` was handed to this process to own; nothing else holds it.
        let file = above_fixed_numbers(unsafe { File::from_raw_fd(fd) })
            .map_err(|e| format!("{shown}: {e}"))?;
        Helper::from_file(name, path, file, &shown)
    }

    /// Where the opened file is now: on Linux the kernel's name for the descriptor (it
    /// follows a rename of the folder); elsewhere the checked path. The shim runs
    /// inside the sandbox from there (`relay-shim enter`), as its own `current_exe`.
    pub fn real_path(&self) -> Result<PathBuf, String> {
        #[cfg(target_os = "linux")]
        {
            let real = std::fs::read_link(fd_exec_path(self.raw_fd()))
                .map_err(|e| format!("{}: {e}", self.path.display()))?;
            // The kernel's name for a file no folder holds any more: replaced or
            // removed since (an upgrade), so no sandbox can be given it by path.
            if real.as_os_str().as_encoded_bytes().ends_with(b" (deleted)") {
                return Err(format!(
                    "the {} relay started with ({}) was replaced or removed since, an \
                     upgrade perhaps; restart relay serve to run the new one",
                    self.name,
                    self.path.display()
                ));
            }
            Ok(real)
        }
        #[cfg(not(target_os = "linux"))]
        {
            self.exec_path().and_then(|p| {
                std::fs::canonicalize(&p).map_err(|e| format!("{}: {e}", p.display()))
            })
        }
    }

    /// Another handle on the same open file (for a probe on a blocking thread).
    pub fn try_clone(&self) -> Option<Helper> {
        Some(Helper {
            name: self.name,
            path: self.path.clone(),
            file: self.file.try_clone().ok()?,
            identity: self.identity,
            sha256: self.sha256.clone(),
        })
    }

    /// The descriptor of the open file (close-on-exec).
    pub fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// What to hand `execve` so that exactly the opened file runs.
    #[cfg(target_os = "linux")]
    pub fn exec_path(&self) -> Result<PathBuf, String> {
        Ok(fd_exec_path(self.raw_fd()))
    }

    /// macOS: the path, once it still names the opened file with the same content.
    #[cfg(not(target_os = "linux"))]
    pub fn exec_path(&self) -> Result<PathBuf, String> {
        match self.replaced() {
            None => Ok(self.path.clone()),
            Some(why) => Err(why),
        }
    }

    /// Whether `path` no longer names the file relay opened (renamed, replaced,
    /// rewritten or gone), said in words; `None` while it does.
    pub fn replaced(&self) -> Option<String> {
        let now = match std::fs::metadata(&self.path) {
            Ok(m) => m,
            Err(e) => return Some(format!("{} is gone ({e})", self.path.display())),
        };
        let same_digest = || {
            File::open(&self.path)
                .and_then(|f| digest(&f))
                .is_ok_and(|d| d == self.sha256)
        };
        if (now.dev(), now.ino()) != self.identity || !same_digest() {
            return Some(format!(
                "{} is not the {} relay started with: it was replaced since",
                self.path.display(),
                self.name
            ));
        }
        None
    }

    /// `--version` of the opened file, run clean (see [`clean`]); `None` when it failed.
    pub fn version_line(&self) -> Option<String> {
        let mut cmd = std::process::Command::new(self.exec_path().ok()?);
        clean(&mut cmd);
        std::os::unix::process::CommandExt::arg0(&mut cmd, self.name);
        cmd.arg("--version")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        // A `#!` script run through `/proc/self/fd/N` is read by its interpreter under
        // that name after the exec, so the probe keeps N open across it.
        let fd = self.raw_fd();
        // Safety: fcntl between fork and exec is async-signal-safe; nothing is allocated.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = {
            let _g = crate::cloexec::lock();
            cmd.spawn()
        }
        .ok()?;
        // Bounded: a helper that does not answer within 10 s is not relay's.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return None;
                }
            }
        }
        let out = child.wait_with_output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Fails unless the opened file says it is relay's own version of `name`.
    pub fn check_version(&self) -> Result<(), String> {
        const VERSION: &str = env!("CARGO_PKG_VERSION");
        let line = self.version_line().unwrap_or_default();
        match version_of(&line, self.name) {
            Some(v) if v == VERSION => Ok(()),
            other => Err(format!(
                "{} is version {}, relay is {VERSION}",
                self.path.display(),
                other.unwrap_or("unknown")
            )),
        }
    }
}

/// `file` on a close-on-exec descriptor numbered 10 or above (the original is closed).
fn above_fixed_numbers(file: File) -> std::io::Result<File> {
    use std::os::fd::FromRawFd;
    // Safety: F_DUPFD_CLOEXEC on a descriptor `file` owns; the result is checked.
    let moved = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
    if moved < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // Safety: `moved` is a fresh descriptor owned by nothing else.
    Ok(unsafe { File::from_raw_fd(moved) })
}

/// `name` in the folder of relay's own executable (`std::env::current_exe()`), where
/// relay looks for its helpers (docs/architecture.md#binaries); just `name` when that
/// folder is unknown.
pub fn sibling(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(name)))
        .unwrap_or_else(|| PathBuf::from(name))
}

/// `/proc/self/fd/N`: exec'ing it runs the open file `N` (Linux's `fexecve`).
pub fn fd_exec_path(fd: RawFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{fd}"))
}

/// A helper's command made clean: no variable from relay's environment but a fixed
/// `PATH`, and `/` as its folder, so neither a loader variable nor a library in a
/// session-written folder reaches a program outside the sandbox.
pub fn clean(cmd: &mut std::process::Command) {
    cmd.env_clear().env("PATH", CLEAN_PATH).current_dir("/");
}

/// The version in a helper's `--version` line (`relay-shim 0.1.0`,
/// `relay-sessions 0.1.0 (protocol 3)`), when the line names that helper.
pub fn version_of<'a>(out: &'a str, name: &str) -> Option<&'a str> {
    let mut words = out.lines().next()?.split_whitespace();
    (words.next()? == name).then(|| words.next()).flatten()
}

/// The content's SHA-256, read from the start whatever the file's offset.
fn digest(f: &File) -> std::io::Result<String> {
    use std::os::unix::fs::FileExt;
    let mut h = Sha256::new();
    let mut at = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read_at(&mut buf, at)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        at += n as u64;
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// An executable script put in place by rename, its bytes written by `cp`: a file
    /// this multi-threaded test binary wrote itself could still be open for writing in
    /// a sibling test's child between its fork and its exec, and running it would fail
    /// with `ETXTBSY` (docs/testing.md#programs-a-test-makes).
    fn script(path: &Path, body: &str) {
        let (src, tmp) = (path.with_extension("src"), path.with_extension("new"));
        std::fs::write(&src, body).unwrap();
        let cp = std::process::Command::new("cp")
            .arg("--")
            .arg(&src)
            .arg(&tmp)
            .status()
            .unwrap();
        assert!(cp.success());
        std::fs::remove_file(&src).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }

    #[test]
    fn versions_are_read_from_the_first_line_naming_the_helper() {
        assert_eq!(
            version_of("relay-shim 0.1.0\n", "relay-shim"),
            Some("0.1.0")
        );
        assert_eq!(
            version_of("relay-sessions 0.1.0 (protocol 3)\n", "relay-sessions"),
            Some("0.1.0")
        );
        assert_eq!(version_of("relay-shim 0.1.0", "relay-sessions"), None);
        assert_eq!(version_of("relay-shim", "relay-shim"), None);
        assert_eq!(version_of("", "relay-shim"), None);
    }

    #[test]
    fn a_replaced_file_is_noticed_and_the_opened_one_still_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relay-shim");
        let version = env!("CARGO_PKG_VERSION");
        script(&path, &format!("#!/bin/sh\necho 'relay-shim {version}'\n"));
        let h = Helper::open("relay-shim", &path).unwrap();
        assert_eq!(h.replaced(), None);
        h.check_version().unwrap();

        // Renamed away and a new file put in its place.
        std::fs::rename(&path, dir.path().join("old")).unwrap();
        script(&path, "#!/bin/sh\necho 'relay-shim 9.9.9'\n");
        let why = h.replaced().unwrap();
        assert!(why.contains("replaced since"), "{why}");
        if cfg!(target_os = "linux") {
            // The descriptor still runs the file relay opened.
            h.check_version().unwrap();
        } else {
            assert!(h.exec_path().is_err());
        }
        std::fs::remove_file(&path).unwrap();
        assert!(h.replaced().unwrap().contains("is gone"));
    }

    #[test]
    fn another_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relay-sessions");
        script(
            &path,
            "#!/bin/sh\necho 'relay-sessions 9.9.9 (protocol 1)'\n",
        );
        let h = Helper::open("relay-sessions", &path).unwrap();
        let e = h.check_version().unwrap_err();
        assert!(e.contains("is version 9.9.9"), "{e}");
    }
}
