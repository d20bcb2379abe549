//! A file replaced whole or not at all: written to a temporary name of the caller's
//! (0600, never through a link, made new), synced, then renamed over the file, so a
//! reader sees the old whole or the new whole; a failure leaves no temporary file
//! behind. The ledger's records, `ready.json` and doctor's last probes are written so.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Writes `bytes` to `path` through `tmp`, a name beside it that no other write uses.
pub fn write_0600(path: &Path, tmp: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_file_is_replaced_whole_and_a_failed_write_leaves_no_temporary_file() {
        let d = tempfile::tempdir().unwrap();
        let (path, tmp) = (d.path().join("f.json"), d.path().join("f.json.tmp"));
        write_0600(&path, &tmp, b"one").unwrap();
        write_0600(&path, &tmp, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(!tmp.exists());
        // A folder where the file goes: the rename fails, the temporary file goes.
        let dir = d.path().join("dir");
        std::fs::create_dir_all(dir.join("x")).unwrap();
        let tmp2 = d.path().join("dir.tmp");
        assert!(write_0600(&dir, &tmp2, b"x").is_err());
        assert!(!tmp2.exists());
        // A link at the temporary name is not followed.
        std::os::unix::fs::symlink(&path, &tmp).unwrap();
        assert!(write_0600(&path, &tmp, b"three").is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
    }
}
