//! A small tmpfs for the tests of a full disk (root only; `umount -l` when dropped).

use std::path::Path;

/// A small tmpfs mounted on a folder for one test (`umount -l` when dropped), or none
/// where `mount` is not allowed (a refusal under CI).
pub struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    pub fn mount(on: &Path, size: &str) -> Option<Tmpfs> {
        let ok = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(on)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            assert!(
                std::env::var_os("CI").is_none(),
                "mount tmpfs on {}",
                on.display()
            );
            eprintln!("skipped: cannot mount a tmpfs here");
            return None;
        }
        Some(Tmpfs(on.to_path_buf()))
    }

    /// Fills it: one file grown until the disk says no room.
    pub fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).expect("filler");
        let chunk = vec![0u8; 64 * 1024];
        while f.write_all(&chunk).is_ok() {}
        while f.write_all(&chunk[..512]).is_ok() {}
        let _ = f.sync_all();
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}
