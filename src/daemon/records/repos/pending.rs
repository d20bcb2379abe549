//! A session whose repositories are not yet wholly looked at: `<config>/repos-pending/
//! <id>.json`, written before each search of them begins and removed once one finishes.
//! The search a relay died in (a crash, a kill) and the one that ran out of its bounds
//! are both on file, so the next start takes it up again; never silently dropped.
//! After [`MAX_ATTEMPTS`] searches that never finished it is tried no more: said once
//! in the row, and the file stays for the person.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The folder, beside the ledger's.
pub const DIR: &str = "repos-pending";

/// Searches of one session begun before it is tried no more.
pub const MAX_ATTEMPTS: u32 = 3;

/// Most bytes of one file read back.
const FILE_MAX: u64 = 1 << 20;

/// What a search needs of its session, and how often it began.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    pub id: String,
    pub created_ms: u64,
    pub read_write: Vec<PathBuf>,
    #[serde(default)]
    pub pins: Vec<PathBuf>,
    /// Searches begun.
    pub attempts: u32,
    /// What the last one did not finish, in words.
    #[serde(default)]
    pub left: Vec<String>,
    /// Tried [`MAX_ATTEMPTS`] times, and the person told.
    #[serde(default)]
    pub given_up: bool,
}

/// `<config>/repos-pending`, for the ledger's folder `ledger`.
pub fn dir(ledger: &Path) -> PathBuf {
    ledger.parent().unwrap_or(ledger).join(DIR)
}

fn file(dir: &Path, id: &str) -> Option<PathBuf> {
    crate::daemon::ids::is_relay_id(id).then(|| dir.join(format!("{id}.json")))
}

/// Writes `p` (0600, under a new name first, then renamed over the old one, synced).
pub fn write(dir: &Path, p: &Pending) -> std::io::Result<()> {
    let path = file(dir, &p.id).ok_or_else(|| std::io::Error::other("not relay's id"))?;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let tmp = dir.join(format!(".{}.json.tmp-{}", p.id, std::process::id()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)?;
    f.write_all(&serde_json::to_vec(p).map_err(std::io::Error::other)?)?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)
}

/// The file of `id`, when there and readable.
pub fn read(dir: &Path, id: &str) -> Option<Pending> {
    read_path(&file(dir, id)?)
}

fn read_path(path: &Path) -> Option<Pending> {
    use std::io::Read;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    f.take(FILE_MAX).read_to_end(&mut bytes).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Every file on file, oldest session first.
pub fn all(dir: &Path) -> Vec<Pending> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<Pending> = rd
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|e| read_path(&e.path()))
        .collect();
    v.sort_by(|a, b| (a.created_ms, &a.id).cmp(&(b.created_ms, &b.id)));
    v
}

/// The search of `id` finished: its file goes.
pub fn done(dir: &Path, id: &str) {
    if let Some(p) = file(dir, id) {
        let _ = std::fs::remove_file(p);
    }
}

/// Where `id`'s file is, for the person.
pub fn path_of(dir: &Path, id: &str) -> PathBuf {
    file(dir, id).unwrap_or_else(|| dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_search_reads_back_and_goes_once_done() {
        let d = tempfile::tempdir().unwrap();
        let dir = dir(&d.path().join("ledger"));
        let p = Pending {
            id: "t-0123456789ab".into(),
            created_ms: 5,
            read_write: vec!["/p".into()],
            attempts: 2,
            left: vec!["x".into()],
            ..Default::default()
        };
        write(&dir, &p).unwrap();
        assert_eq!(read(&dir, &p.id), Some(p.clone()));
        assert_eq!(all(&dir), vec![p.clone()]);
        done(&dir, &p.id);
        assert!(all(&dir).is_empty());
        assert!(write(
            &dir,
            &Pending {
                id: "../x".into(),
                ..Default::default()
            }
        )
        .is_err());
    }
}
