//! The last `relay doctor`'s probes (`canary`, `claude_auth`), kept in
//! `<config>/doctor-probes.json` so the Settings page shows them, with when they ran,
//! after relay restarts too: a read starts no probe (`doctor::read_only`).
//!
//! The file is relay's own, in the config dir no sandbox can reach: written whole
//! (mode 0600, a temporary file renamed over it), read without following a link, and
//! only the probes' names are taken back. A file that does not read is as none: the
//! page says the probes have not run, and the next `relay doctor` writes it anew.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// A check as `doctor` makes it (`doctor::Check`, named here so the two modules do not
/// import each other).
type Check = crate::wire::Check<&'static str>;

/// The probes `relay doctor` runs, the only names read back.
pub const NAMES: [&str; 2] = ["canary", "claude_auth"];

/// More than the probes' checks ever take; a larger file is not read.
const MAX_BYTES: u64 = 64 * 1024;

/// The file: when the probes ran (ms since the epoch) and their checks.
#[derive(Serialize, Deserialize)]
struct Kept<C> {
    ran_ms: u64,
    checks: Vec<C>,
}

/// Writes the probes' `checks`, run at `ran_ms`, to `path`.
pub fn save(path: &Path, ran_ms: u64, checks: &[Check]) -> std::io::Result<()> {
    let kept = Kept {
        ran_ms,
        checks: checks.to_vec(),
    };
    let mut bytes = serde_json::to_vec_pretty(&kept).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    // A temporary file of this write alone (two runs of doctor may end at once),
    // renamed over the file: a reader sees the old whole or the new whole; a failure
    // leaves no temporary file behind.
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp-{}-{n}", std::process::id()));
    crate::atomic::write_0600(path, &tmp, &bytes)
}

/// The probes as the last `relay doctor` left them in `path`, or None when it holds
/// none (no file, a link, too large, not the format). Only the names of [`NAMES`] are
/// kept.
pub fn load(path: &Path) -> Option<(u64, Vec<Check>)> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path);
    let file = match file {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!("{}: {e}", path.display());
            return None;
        }
    };
    let mut bytes = Vec::new();
    if let Err(e) = file.take(MAX_BYTES + 1).read_to_end(&mut bytes) {
        tracing::warn!("{}: {e}", path.display());
        return None;
    }
    let kept: Kept<crate::wire::Check> = match serde_json::from_slice(&bytes) {
        Ok(k) if bytes.len() as u64 <= MAX_BYTES => k,
        Ok(_) => {
            tracing::warn!("{}: larger than {MAX_BYTES} bytes", path.display());
            return None;
        }
        Err(e) => {
            tracing::warn!("{}: not the probes' results: {e}", path.display());
            return None;
        }
    };
    let checks = kept
        .checks
        .into_iter()
        .filter_map(|c| {
            Some(Check {
                name: NAMES.into_iter().find(|n| *n == c.name)?,
                status: c.status,
                detail: c.detail,
                fix: c.fix,
            })
        })
        .collect();
    Some((kept.ran_ms, checks))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::CheckStatus;
    use std::os::unix::fs::PermissionsExt;

    fn probes() -> Vec<Check> {
        vec![
            Check {
                name: "canary",
                status: CheckStatus::Ok,
                detail: "a sandboxed probe was denied reading ~/.config/x/token".into(),
                fix: None,
            },
            Check {
                name: "claude_auth",
                status: CheckStatus::Skip,
                detail: "no Claude Code binary found".into(),
                fix: Some("install Claude Code".into()),
            },
        ]
    }

    #[test]
    fn the_probes_read_back_as_written_from_a_0600_file_and_no_temporary_file_stays() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("doctor-probes.json");
        assert_eq!(load(&path), None, "no file, no probes");
        save(&path, 1_700_000_000_123, &probes()).unwrap();
        assert_eq!(load(&path), Some((1_700_000_000_123, probes())));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // A later run replaces it whole.
        save(&path, 1_700_000_000_999, &probes()[..1]).unwrap();
        assert_eq!(
            load(&path),
            Some((1_700_000_000_999, probes()[..1].to_vec()))
        );
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["doctor-probes.json"]);
        // A write that fails (a folder in the file's place) leaves nothing behind.
        let folder = d.path().join("folder.json");
        std::fs::create_dir(&folder).unwrap();
        std::fs::write(folder.join("x"), "x").unwrap();
        assert!(save(&folder, 1, &probes()).is_err());
        let mut names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["doctor-probes.json", "folder.json"]);
    }

    #[test]
    fn a_file_that_does_not_read_is_as_none_and_unknown_names_are_left_out() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("doctor-probes.json");
        for bad in ["", "{", "[]", "{\"ran_ms\": \"soon\", \"checks\": []}"] {
            std::fs::write(&path, bad).unwrap();
            assert_eq!(load(&path), None, "{bad:?}");
        }
        std::fs::write(&path, vec![b' '; MAX_BYTES as usize + 1]).unwrap();
        assert_eq!(load(&path), None, "too large");
        std::fs::write(
            &path,
            r#"{"ran_ms": 5, "checks": [
                {"name": "settings", "status": "ok", "detail": "planted"},
                {"name": "canary", "status": "fail", "detail": "read", "fix": "f"}]}"#,
        )
        .unwrap();
        let (ran, checks) = load(&path).unwrap();
        assert_eq!(ran, 5);
        assert_eq!(checks.len(), 1, "{checks:?}");
        assert_eq!(
            (checks[0].name, checks[0].status),
            ("canary", CheckStatus::Fail)
        );
        // A link in its place is not followed.
        let elsewhere = d.path().join("elsewhere.json");
        save(&elsewhere, 7, &probes()).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert_eq!(load(&path), None);
    }
}
