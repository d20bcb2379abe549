//! The Claude config folder of a sandboxed Claude launch (`$TMPDIR/relay-<id>/claude-config`,
//! which `CLAUDE_CONFIG_DIR` names), seeded with the first-run answers Claude Code would
//! otherwise ask for (docs/routes.md#launch-authorization, step 8).
//!
//! The folder lies in the session's own temp dir, which the session can write, so
//! nothing here follows a link or blocks on a FIFO: the folder is opened
//! `O_NOFOLLOW|O_DIRECTORY` and every file in it is opened, replaced and renamed relative
//! to that descriptor (`openat`, `renameat`). Any failure refuses the launch.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use nix::fcntl::{openat, renameat, OFlag};
use nix::sys::stat::{fchmod, Mode};
use nix::unistd::{unlinkat, UnlinkatFlags};
use serde_json::{json, Value};

const FILE: &str = ".claude.json";
/// Keys of `.claude.json` relay drops at each launch: its `env` (applied to Claude Code
/// itself), a stored API key, and MCP servers.
const UNTRUSTED_KEYS: &[&str] = &["env", "primaryApiKey", "mcpServers"];
/// The user settings of a launch whose `CLAUDE_CONFIG_DIR` this is.
pub const SETTINGS: &str = "settings.json";
const NEW: &str = ".claude.json.relay-new";
/// A `.claude.json` larger than this is not read (the session could have grown it).
const READ_MAX: u64 = 4 * 1024 * 1024;

/// Opens `path` (relative to `dir`, or as is) without following a final link, close-on-exec.
fn open_nofollow(
    dir: Option<RawFd>,
    path: &Path,
    flags: OFlag,
    mode: Mode,
) -> std::io::Result<OwnedFd> {
    let fd = openat(
        dir,
        path,
        flags | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        mode,
    )?;
    // Safety: `fd` was just returned by openat(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The folder itself: a link or a file planted in its place is removed, the folder made
/// (0700) when missing, then opened without following a link and set to 0700.
fn open_folder(dir: &Path) -> std::io::Result<OwnedFd> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_dir() => {}
        Ok(_) => std::fs::remove_file(dir)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let fd = open_nofollow(
        None,
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Mode::empty(),
    )?;
    fchmod(fd.as_raw_fd(), Mode::from_bits_truncate(0o700))?;
    Ok(fd)
}

/// What `.claude.json` holds now, when it is a plain file of a sane size holding a JSON
/// object; anything else (a FIFO, a link, garbage) counts as absent.
fn read_existing(dir: &OwnedFd) -> std::io::Result<Option<Value>> {
    let Ok(fd) = open_nofollow(
        Some(dir.as_raw_fd()),
        Path::new(FILE),
        OFlag::O_RDONLY | OFlag::O_NONBLOCK,
        Mode::empty(),
    ) else {
        return Ok(None);
    };
    let file = std::fs::File::from(fd);
    let meta = file.metadata()?;
    if !meta.file_type().is_file() || meta.len() > READ_MAX {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    file.take(READ_MAX).read_to_end(&mut bytes)?;
    Ok(serde_json::from_slice::<Value>(&bytes)
        .ok()
        .filter(Value::is_object))
}

/// The first-run answers added to `v` (an object): onboarding done, a theme, and trust
/// for `directory`. What is there already is kept.
fn add_answers(v: &mut Value, directory: &Path) {
    let Some(obj) = v.as_object_mut() else {
        return;
    };
    // Claude Code applies `.claude.json`'s `env` to itself at start, over relay's, and
    // reads a key and servers from it too: what a session may have written there
    // (docs/THREAT-MODEL.md#what-a-token-launch-reads) is dropped at every launch.
    for key in UNTRUSTED_KEYS {
        obj.remove(*key);
    }
    obj.entry("hasCompletedOnboarding").or_insert(true.into());
    obj.entry("theme").or_insert("dark".into());
    let projects = obj.entry("projects").or_insert_with(|| json!({}));
    if !projects.is_object() {
        *projects = json!({});
    }
    if let Some(p) = projects.as_object_mut() {
        let entry = p
            .entry(directory.to_string_lossy().into_owned())
            .or_insert_with(|| json!({}));
        if !entry.is_object() {
            *entry = json!({});
        }
        if let Some(e) = entry.as_object_mut() {
            e.insert("hasTrustDialogAccepted".into(), true.into());
            e.insert("hasCompletedProjectOnboarding".into(), true.into());
        }
    }
}

/// Writes `text` as `.claude.json` in `dir`: a new file (0600, `O_EXCL`) renamed over it.
fn replace(dir: &OwnedFd, text: &[u8]) -> std::io::Result<()> {
    let dfd = Some(dir.as_raw_fd());
    // A leftover from an earlier attempt (or one the session planted) goes first.
    let _ = unlinkat(dfd, NEW, UnlinkatFlags::NoRemoveDir);
    let fd = open_nofollow(
        dfd,
        Path::new(NEW),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
        Mode::from_bits_truncate(0o600),
    )?;
    std::fs::File::from(fd).write_all(text)?;
    renameat(dfd, NEW, dfd, FILE)?;
    Ok(())
}

/// The first-run answers Claude Code would otherwise ask for: onboarding done, a
/// theme, and trust for the session's folder. An existing file (a resumed session)
/// keeps its content and gets the trust entry added.
pub fn seed(dir: &Path, directory: &Path) -> std::io::Result<()> {
    let folder = open_folder(dir)?;
    let mut v = read_existing(&folder)?.unwrap_or_else(|| json!({}));
    add_answers(&mut v, directory);
    let text = serde_json::to_vec_pretty(&v).map_err(std::io::Error::other)?;
    replace(&folder, &text)?;
    user_settings(&folder)
}

/// The user settings file, `settings.json`, made (`{}`, 0600) when missing, so that a
/// token launch can pin it read-only (a missing file cannot be pinned under bwrap);
/// what is there is left for the settings check to judge.
fn user_settings(dir: &OwnedFd) -> std::io::Result<()> {
    match open_nofollow(
        Some(dir.as_raw_fd()),
        Path::new(SETTINGS),
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
        Mode::from_bits_truncate(0o600),
    ) {
        Ok(fd) => std::fs::File::from(fd).write_all(b"{}\n"),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::{seed, READ_MAX};

    fn seeded(cfg: &std::path::Path) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(cfg.join(".claude.json")).unwrap()).unwrap()
    }

    #[test]
    fn a_missing_folder_or_a_file_in_its_place_becomes_a_private_folder() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let cfg = d.path().join("claude-config");
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        seed(&cfg, d.path()).unwrap();
        assert_eq!(mode(&cfg), 0o700);
        // Seeded again: what is there is kept, the user settings too.
        std::fs::write(cfg.join("settings.json"), "{\"model\":\"x\"}").unwrap();
        std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o755)).unwrap();
        seed(&cfg, d.path()).unwrap();
        assert_eq!(mode(&cfg), 0o700);
        assert_eq!(
            std::fs::read_to_string(cfg.join("settings.json")).unwrap(),
            "{\"model\":\"x\"}"
        );
        std::fs::remove_dir_all(&cfg).unwrap();
        std::fs::write(&cfg, "a file").unwrap();
        seed(&cfg, d.path()).unwrap();
        assert!(std::fs::symlink_metadata(&cfg).unwrap().is_dir());
        assert_eq!(seeded(&cfg)["hasCompletedOnboarding"], true);
    }

    #[test]
    fn trust_is_added_whatever_shape_the_projects_had() {
        let d = tempfile::tempdir().unwrap();
        let cfg = d.path().join("claude-config");
        std::fs::create_dir(&cfg).unwrap();
        for planted in [r#"{"projects":[1]}"#, r#"{"projects":{"/b":5}}"#] {
            std::fs::write(cfg.join(".claude.json"), planted).unwrap();
            seed(&cfg, std::path::Path::new("/b")).unwrap();
            let v = seeded(&cfg);
            assert_eq!(
                v["projects"]["/b"]["hasTrustDialogAccepted"], true,
                "{planted}: {v}"
            );
        }
    }

    #[test]
    fn a_file_up_to_the_limit_is_read_and_a_larger_one_is_not() {
        let d = tempfile::tempdir().unwrap();
        let cfg = d.path().join("claude-config");
        std::fs::create_dir(&cfg).unwrap();
        let object = |len: usize| {
            let head = r#"{"keep":1,"pad":""#;
            let tail = r#""}"#;
            format!("{head}{}{tail}", "x".repeat(len - head.len() - tail.len()))
        };
        let limit = READ_MAX as usize;
        for (text, kept) in [
            (object(10 * 1024), true),
            (object(2 * 1024 * 1024), true),
            (object(limit), true),
            // Its first READ_MAX bytes are a whole object: still not read.
            (format!(r#"{{"keep":1}}{}"#, " ".repeat(limit)), false),
        ] {
            std::fs::write(cfg.join(".claude.json"), &text).unwrap();
            seed(&cfg, d.path()).unwrap();
            assert_eq!(
                seeded(&cfg).get("keep").is_some(),
                kept,
                "{} bytes",
                text.len()
            );
        }
    }

    #[test]
    fn seeding_never_follows_a_planted_link_and_never_blocks_on_a_fifo() {
        let d = tempfile::tempdir().unwrap();
        let secret = d.path().join("secret.json");
        std::fs::write(&secret, r#"{"accessToken":"sk-ant-oat01-secret"}"#).unwrap();
        let cfg = d.path().join("claude-config");
        std::fs::create_dir(&cfg).unwrap();
        std::os::unix::fs::symlink(&secret, cfg.join(".claude.json")).unwrap();
        seed(&cfg, d.path()).unwrap();
        let seeded = std::fs::read_to_string(cfg.join(".claude.json")).unwrap();
        assert!(!seeded.contains("sk-ant"), "{seeded}");
        assert!(seeded.contains("hasCompletedOnboarding"));
        assert_eq!(
            std::fs::read_to_string(&secret).unwrap(),
            r#"{"accessToken":"sk-ant-oat01-secret"}"#
        );

        // A FIFO in its place does not block; a link in place of the folder is replaced.
        std::fs::remove_file(cfg.join(".claude.json")).unwrap();
        nix::unistd::mkfifo(
            &cfg.join(".claude.json"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        seed(&cfg, d.path()).unwrap();
        std::fs::remove_dir_all(&cfg).unwrap();
        let elsewhere = d.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &cfg).unwrap();
        seed(&cfg, d.path()).unwrap();
        assert!(std::fs::symlink_metadata(&cfg).unwrap().is_dir());
        assert!(!elsewhere.join(".claude.json").exists());
    }

    /// What a session may have planted in `.claude.json` for the next start — `env`
    /// (applied to Claude Code itself: `ANTHROPIC_BASE_URL`, `CLAUDE_CODE_SHELL_PREFIX`),
    /// a key, MCP servers — is gone after the seed; the rest stays, and the user
    /// settings file is there, `{}`.
    #[test]
    fn a_planted_env_key_or_server_in_claude_json_is_dropped_at_each_launch() {
        let d = tempfile::tempdir().unwrap();
        let cfg = d.path().join("claude-config");
        std::fs::create_dir(&cfg).unwrap();
        std::fs::write(
            cfg.join(".claude.json"),
            r#"{"env":{"ANTHROPIC_BASE_URL":"http://127.0.0.1:9"},"primaryApiKey":"k",
                "mcpServers":{"x":{"command":"sh"}},"numStartups":3}"#,
        )
        .unwrap();
        seed(&cfg, d.path()).unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(cfg.join(".claude.json")).unwrap()).unwrap();
        for gone in ["env", "primaryApiKey", "mcpServers"] {
            assert!(v.get(gone).is_none(), "{gone} kept: {v}");
        }
        assert_eq!(v["numStartups"], 3);
        assert_eq!(
            std::fs::read_to_string(cfg.join("settings.json")).unwrap(),
            "{}\n"
        );
    }

    #[test]
    fn a_resumed_sessions_file_keeps_its_content_and_gets_trust_for_the_folder() {
        let d = tempfile::tempdir().unwrap();
        let cfg = d.path().join("claude-config");
        std::fs::create_dir(&cfg).unwrap();
        std::fs::write(
            cfg.join(".claude.json"),
            r#"{"theme":"light","projects":{"/a":{"x":1}},"userID":"u"}"#,
        )
        .unwrap();
        // A planted leftover of the temporary name is not followed.
        let target = d.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, cfg.join(".claude.json.relay-new")).unwrap();
        seed(&cfg, std::path::Path::new("/b")).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(cfg.join(".claude.json")).unwrap())
                .unwrap();
        assert_eq!(v["theme"], "light");
        assert_eq!(v["userID"], "u");
        assert_eq!(v["projects"]["/a"]["x"], 1);
        assert_eq!(v["projects"]["/b"]["hasTrustDialogAccepted"], true);
        assert_eq!(v["hasCompletedOnboarding"], true);
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(cfg.join(".claude.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
