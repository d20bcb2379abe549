//! File steps relative to a folder's descriptor, never through a link: what the search
//! and the setting aside of a session's repositories do on the person's disk.

use std::ffi::{CStr, CString, OsStr};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, OFlag};
use nix::sys::stat::{fchmod, fstat, fstatat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::{fsync, unlinkat, UnlinkatFlags};

const FOLDER: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

pub fn c(name: &str) -> CString {
    // The names passed are relay's own words or entries read from a folder: no NUL.
    CString::new(name).unwrap_or_default()
}

/// The folder `name` of `dir`, not through a link (a link there fails with `ELOOP` or
/// `ENOTDIR`).
pub fn folder(dir: RawFd, name: &CStr) -> nix::Result<Dir> {
    Dir::openat(Some(dir), name, FOLDER, Mode::empty())
}

/// `root` (canonical: its own path is the caller's to vouch for), then each
/// `/`-separated component of `rel` below it, none through a link.
pub fn open_rel(root: &Path, rel: &[u8]) -> nix::Result<Dir> {
    let mut cur = Dir::open(root, FOLDER, Mode::empty())?;
    for part in rel.split(|&b| b == b'/').filter(|p| !p.is_empty()) {
        if part == b"." || part == b".." {
            return Err(Errno::EINVAL);
        }
        let name = CString::new(part).map_err(|_| Errno::EINVAL)?;
        cur = folder(cur.as_raw_fd(), &name)?;
    }
    Ok(cur)
}

/// `root`, then `rel` below it as [`open_rel`] does, its last folder opened for lookups
/// by name alone (`O_PATH`: it needs no read, only search) where the platform can.
pub fn open_path(root: &Path, rel: &[u8]) -> nix::Result<OwnedFd> {
    let (above, last) = match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => (&b""[..], rel),
    };
    let above = open_rel(root, above)?;
    if last.is_empty() || last == b"." || last == b".." {
        return Err(Errno::EINVAL);
    }
    let name = CString::new(last).map_err(|_| Errno::EINVAL)?;
    #[cfg(target_os = "linux")]
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    #[cfg(not(target_os = "linux"))]
    let flags = FOLDER;
    let fd = openat(
        Some(above.as_raw_fd()),
        name.as_c_str(),
        flags,
        Mode::empty(),
    )?;
    // Safety: `fd` was just returned by openat(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Gives the folder `name` of `dir` its owner's `r-x` back when it is the person's own
/// and lacks them, never following a link.
pub fn searchable(dir: RawFd, name: &CStr) {
    if let Ok(st) = look(dir, name) {
        if is_kind(&st, SFlag::S_IFDIR)
            && st.st_uid == nix::unistd::geteuid().as_raw()
            && st.st_mode & 0o500 != 0o500
        {
            let mode = Mode::from_bits_truncate((st.st_mode | 0o500) & 0o7777);
            let _ = nix::sys::stat::fchmodat(
                Some(dir),
                name,
                mode,
                nix::sys::stat::FchmodatFlags::NoFollowSymlink,
            );
        }
    }
}

/// The entry `name` of `dir` as itself (a link is a link).
pub fn look(dir: RawFd, name: &CStr) -> nix::Result<FileStat> {
    fstatat(Some(dir), name, AtFlags::AT_SYMLINK_NOFOLLOW)
}

pub fn is_kind(st: &FileStat, kind: SFlag) -> bool {
    st.st_mode & SFlag::S_IFMT.bits() == kind.bits()
}

/// When the entry last changed, in ms since the epoch: a write, a rename, a new link, a
/// mode. No process can set it back.
pub fn ctime_ms(st: &FileStat) -> u64 {
    let ms = (st.st_ctime as i128) * 1000 + (st.st_ctime_nsec as i128) / 1_000_000;
    ms.clamp(0, u64::MAX as i128) as u64
}

/// How far before a launch a change still counts as the session's: Linux stamps a file
/// from a clock a tick coarser than the one relay reads; a file system that keeps whole
/// seconds (HFS+, FAT) rounds down by up to one.
const SLACK_MS: u64 = 50;
const SLACK_WHOLE_SECONDS_MS: u64 = 2_000;

/// Whether the entry changed at or after the launch at `created_ms`.
pub fn since_launch(st: &FileStat, created_ms: u64) -> bool {
    let whole_seconds = st.st_ctime_nsec == 0 && st.st_mtime_nsec == 0;
    let slack = if whole_seconds {
        SLACK_WHOLE_SECONDS_MS
    } else {
        SLACK_MS
    };
    ctime_ms(st) >= created_ms.saturating_sub(slack)
}

/// Device and inode.
// The casts are not needless on every platform (macOS's st_dev is an i32).
#[allow(clippy::unnecessary_cast)]
pub fn ident(st: &FileStat) -> (u64, u64) {
    (st.st_dev as u64, st.st_ino as u64)
}

/// Why a file was not read as text.
#[derive(Debug)]
pub enum Unread {
    Missing,
    /// A link, a folder, a FIFO: not a regular file.
    NotAFile,
    TooLarge,
    Failed(Errno),
}

/// The regular file `name` of `dir`, at most `max` bytes, opened without following a
/// link or waiting on a FIFO; with its status and the open file.
pub fn read_small(
    dir: RawFd,
    name: &CStr,
    max: u64,
) -> Result<(Vec<u8>, FileStat, std::fs::File), Unread> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let fd = match openat(Some(dir), name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Err(Unread::Missing),
        Err(Errno::ELOOP) => return Err(Unread::NotAFile),
        Err(e) => return Err(Unread::Failed(e)),
    };
    // Safety: `fd` was just returned by openat(2) and is owned by nobody else.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let st = fstat(file.as_raw_fd()).map_err(Unread::Failed)?;
    if !is_kind(&st, SFlag::S_IFREG) {
        return Err(Unread::NotAFile);
    }
    if st.st_size as u64 > max {
        return Err(Unread::TooLarge);
    }
    let mut bytes = Vec::new();
    (&mut file)
        .take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Unread::Failed(Errno::from_raw(e.raw_os_error().unwrap_or(0))))?;
    if bytes.len() as u64 > max {
        return Err(Unread::TooLarge);
    }
    Ok((bytes, st, file))
}

/// Gives the owner `rwx` on the open folder `dir` when it lacks it (a session may have
/// taken it away): what is set aside must be movable.
pub fn writable(dir: RawFd) {
    if let Ok(st) = fstat(dir) {
        if st.st_mode & 0o700 != 0o700 {
            // Not fatal: the step it was needed for fails on its own, and says which.
            let _ = fchmod(dir, Mode::from_bits_truncate((st.st_mode | 0o700) & 0o7777));
        }
    }
}

/// Gives the regular file `name` of `dir` its owner's read and write back when it is
/// the person's own (owned by this process's user) and lacks them, never following a
/// link. Whether it changed a mode.
pub fn readable(dir: RawFd, name: &CStr) -> bool {
    let Ok(st) = look(dir, name) else {
        return false;
    };
    if !is_kind(&st, SFlag::S_IFREG)
        || st.st_uid != nix::unistd::geteuid().as_raw()
        || st.st_mode & 0o600 == 0o600
    {
        return false;
    }
    let mode = Mode::from_bits_truncate((st.st_mode | 0o600) & 0o7777);
    nix::sys::stat::fchmodat(
        Some(dir),
        name,
        mode,
        nix::sys::stat::FchmodatFlags::NoFollowSymlink,
    )
    .is_ok()
}

/// A new file `name` in `dir` holding `bytes`, made with `mode` at open time and synced;
/// never over anything there.
pub fn write_new(dir: RawFd, name: &CStr, bytes: &[u8], mode: Mode) -> nix::Result<()> {
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = openat(Some(dir), name, flags, mode)?;
    // Safety: `fd` was just returned by openat(2) and is owned by nobody else.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let errno = |e: std::io::Error| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO));
    file.write_all(bytes).map_err(errno)?;
    fsync(file.as_raw_fd())
}

/// `name` in `dir` replaced by a file holding `bytes` (mode `mode`), written under a new
/// name first and renamed over it: git never reads half of it.
pub fn replace(dir: RawFd, name: &CStr, bytes: &[u8], mode: Mode) -> nix::Result<()> {
    let base = name.to_string_lossy();
    for n in 0..100u32 {
        let tmp = c(&format!(".{base}.relay-{}-{n}.tmp", std::process::id()));
        match write_new(dir, &tmp, bytes, mode) {
            Ok(()) => {}
            Err(Errno::EEXIST) => continue,
            Err(e) => {
                let _ = unlinkat(Some(dir), tmp.as_c_str(), UnlinkatFlags::NoRemoveDir);
                return Err(e);
            }
        }
        return renameat(Some(dir), tmp.as_c_str(), Some(dir), name).inspect_err(|_| {
            let _ = unlinkat(Some(dir), tmp.as_c_str(), UnlinkatFlags::NoRemoveDir);
        });
    }
    Err(Errno::EEXIST)
}

/// A new folder `name` in `dir` (0700), or `name-1`, `name-2`, … when taken: its name
/// and the folder, open.
pub fn new_folder(dir: RawFd, name: &str) -> nix::Result<(String, Dir)> {
    for n in 0..100u32 {
        let this = if n == 0 {
            name.to_string()
        } else {
            format!("{name}-{n}")
        };
        match mkdirat(Some(dir), c(&this).as_c_str(), Mode::S_IRWXU) {
            Ok(()) => return Ok((this.clone(), folder(dir, &c(&this))?)),
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(Errno::EEXIST)
}

/// The folder `name` of `dir`, made (0700) when missing. Anything else in its place (a
/// link, a file, a folder that cannot be opened) is renamed to `<name>.planted-<stamp>`
/// first, never followed.
pub fn ensure_folder(dir: RawFd, name: &str, stamp: u64) -> nix::Result<Dir> {
    let cname = c(name);
    match mkdirat(Some(dir), cname.as_c_str(), Mode::S_IRWXU) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => return Err(e),
    }
    match folder(dir, &cname) {
        Err(Errno::ELOOP | Errno::ENOTDIR | Errno::EACCES) => {
            let away = c(&format!("{name}.planted-{stamp}"));
            renameat(Some(dir), cname.as_c_str(), Some(dir), away.as_c_str())?;
            mkdirat(Some(dir), cname.as_c_str(), Mode::S_IRWXU)?;
            folder(dir, &cname)
        }
        other => other,
    }
}

/// The names in the folder `dir`, but `.` and `..`, at most `max` of them.
pub fn names(dir: &mut Dir, max: usize) -> nix::Result<Vec<CString>> {
    let mut out = Vec::new();
    for entry in dir.iter() {
        let entry = entry?;
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        if out.len() >= max {
            return Err(Errno::E2BIG);
        }
        out.push(name.to_owned());
    }
    Ok(out)
}

pub fn os(bytes: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_reached_or_made_through_a_link() {
        let d = tempfile::tempdir().unwrap();
        let outside = d.path().join("outside");
        std::fs::create_dir_all(outside.join("deep")).unwrap();
        let root = d.path().join("root");
        std::fs::create_dir_all(root.join("a")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("a/link")).unwrap();
        assert!(open_rel(&root, b"a").is_ok());
        assert!(matches!(
            open_rel(&root, b"a/link/deep"),
            Err(Errno::ELOOP | Errno::ENOTDIR)
        ));
        assert!(open_rel(&root, b"a/../a").is_err());

        // A link in a set-aside folder's place is moved away, and a real one made.
        let a = open_rel(&root, b"a").unwrap();
        let made = ensure_folder(a.as_raw_fd(), "link", 7).unwrap();
        assert!(fstat(made.as_raw_fd()).is_ok());
        assert!(root.join("a/link").is_dir());
        assert!(std::fs::symlink_metadata(root.join("a/link.planted-7"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);

        // A link is not read as a file; a file is replaced, not written through.
        std::os::unix::fs::symlink(outside.join("x"), root.join("a/cfg")).unwrap();
        assert!(matches!(
            read_small(a.as_raw_fd(), &c("cfg"), 10),
            Err(Unread::NotAFile)
        ));
        std::fs::write(root.join("a/file"), "old").unwrap();
        std::fs::hard_link(root.join("a/file"), d.path().join("second-name")).unwrap();
        replace(
            a.as_raw_fd(),
            &c("file"),
            b"new",
            Mode::S_IRUSR | Mode::S_IWUSR,
        )
        .unwrap();
        assert_eq!(std::fs::read(root.join("a/file")).unwrap(), b"new");
        assert_eq!(std::fs::read(d.path().join("second-name")).unwrap(), b"old");
        assert!(matches!(
            read_small(a.as_raw_fd(), &c("file"), 2),
            Err(Unread::TooLarge)
        ));
    }
}
