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

pub use crate::daemon::plan::claude_state::{State, STATE};

/// Every other name Claude Code 2.1.332 looks up in its config folder (the same
/// `strace` runs), with what it is: configuration it reads, or its own ways of
/// rewriting `.claude.json`. In a token launch the folder is read-only, so each of these
/// is relay's (`.claude.json`, `settings.json`, checked at every launch) or absent, and
/// stays absent: nothing in the sandbox can make it, and a launch sets aside any name
/// not relay's before Claude Code starts. An inventory test
/// (`e2e attacks::claude_config`) fails on a look-up this list and [`STATE`] do not
/// know. A name matches itself, what lies below it, and, as a folder on the way, what
/// lies above it; a final `*` matches any rest.
pub const CONFIG_READS: &[(&str, &str)] = &[
    (
        ".claude.json",
        "its global configuration: relay's, seeded and checked at every launch",
    ),
    (
        ".claude.json.lock",
        "its lock for rewriting .claude.json (refused)",
    ),
    (
        ".claude.json.tmp.*",
        "its new .claude.json before the rename (refused)",
    ),
    (
        ".claude.json.backup",
        "its backup of .claude.json (refused)",
    ),
    ("backups", "its backups of .claude.json (refused)"),
    (
        ".config.json",
        "its global configuration in place of .claude.json when it exists",
    ),
    (".credentials.json", "a stored login"),
    (
        ".hybrid_oauth_refresh.lock",
        "its lock for refreshing a stored login",
    ),
    (".storage-write.lock", "its lock for writing a stored login"),
    (
        ".deep-link-register-failed",
        "a marker of its link handler's registration",
    ),
    (".last-update-result.json", "its updater's last result"),
    (
        SETTINGS,
        "its user settings: relay's, checked at every launch",
    ),
    ("settings.local.json", "local user settings"),
    ("CLAUDE.md", "user instructions"),
    ("agents", "user subagents"),
    ("commands", "user slash commands"),
    ("skills", "user skills"),
    ("output-styles", "user output styles"),
    ("rules", "user rules"),
    ("themes", "user themes"),
    ("workflows", "user workflows"),
    ("keybindings.json", "user key bindings"),
    ("plugins", "plugins, their marketplaces and caches"),
    ("cowork_plugins", "plugins of another client"),
    ("cowork_settings.json", "settings of another client"),
    ("dev-mods", "development modifications"),
    ("daemon", "its background service"),
    ("daemon.json", "its background service's settings"),
    ("jobs", "its background jobs"),
    ("routines", "its routines"),
    ("ide", "its IDE connections"),
    ("local", "a local install of Claude Code"),
    ("cache", "its caches (the model catalogue)"),
    ("state", "its state of hybrid settings"),
];

/// Whether `path` (relative, `/`-separated) is one `list` knows: an entry itself, what
/// lies below one, or a folder on the way to one; an entry's final `*` matches any rest.
pub fn known(list: &[&str], path: &str) -> bool {
    list.iter().any(|entry| match entry.strip_suffix('*') {
        Some(stem) => path.starts_with(stem),
        None => {
            path == *entry
                || path
                    .strip_prefix(entry)
                    .is_some_and(|rest| rest.starts_with('/'))
                || entry
                    .strip_prefix(path)
                    .is_some_and(|rest| rest.starts_with('/'))
        }
    })
}

/// Where names of the config folder that are neither relay's nor [`STATE`] are moved at
/// a launch (beside the folder, in the session's temp folder): nothing Claude Code
/// reads, nothing lost.
pub const SET_ASIDE: &str = "claude-config.set-aside";
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
///
/// Then the rest of the folder as a token launch pins it: every [`STATE`] name made (a
/// link or a file in a folder's place removed first), the per-process ones emptied, and
/// every other name — a `.config.json`, a `CLAUDE.md`, an `agents/` a session wrote
/// before the folder was pinned, or Claude Code's own caches from then — moved to
/// [`SET_ASIDE`] beside the folder. Returns the names set aside.
pub fn seed(dir: &Path, directory: &Path) -> std::io::Result<Vec<String>> {
    let folder = open_folder(dir)?;
    let mut v = read_existing(&folder)?.unwrap_or_else(|| json!({}));
    add_answers(&mut v, directory);
    let text = serde_json::to_vec_pretty(&v).map_err(std::io::Error::other)?;
    replace(&folder, &text)?;
    user_settings(&folder)?;
    for state in STATE {
        make_state(&folder, dir, state)?;
    }
    set_aside_the_rest(&folder, dir)
}

/// Whether `name` is one relay keeps at the top of the config folder.
fn kept(name: &str) -> bool {
    name == FILE || name == SETTINGS || STATE.iter().any(|s| s.name == name)
}

/// One [`STATE`] name, as a plain folder (0700) or file (0600) of its own: anything
/// else at the name goes first, and a per-process folder starts empty.
fn make_state(folder: &OwnedFd, dir: &Path, state: &State) -> std::io::Result<()> {
    let dfd = Some(folder.as_raw_fd());
    let path = dir.join(state.name);
    // A name that cannot be looked at is made below, which then fails with the reason.
    let meta = std::fs::symlink_metadata(&path).ok();
    let right = meta.as_ref().is_some_and(|m| {
        if state.folder {
            m.file_type().is_dir()
        } else {
            m.file_type().is_file()
        }
    });
    if let Some(m) = meta {
        if !right || (state.folder && state.per_process) {
            if m.file_type().is_dir() {
                // Does not follow links, at the top or below.
                std::fs::remove_dir_all(&path)?;
            } else {
                unlinkat(dfd, state.name, UnlinkatFlags::NoRemoveDir)?;
            }
        } else {
            return Ok(());
        }
    }
    if state.folder {
        nix::sys::stat::mkdirat(dfd, state.name, Mode::from_bits_truncate(0o700))?;
    } else {
        drop(open_nofollow(
            dfd,
            Path::new(state.name),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL,
            Mode::from_bits_truncate(0o600),
        )?);
    }
    Ok(())
}

/// Moves every name relay does not keep to [`SET_ASIDE`] beside the folder, each under
/// a name of its own; returns them.
fn set_aside_the_rest(folder: &OwnedFd, dir: &Path) -> std::io::Result<Vec<String>> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let mut aside: Option<OwnedFd> = None;
    let mut moved = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let raw = entry?.file_name();
        if raw.to_str().is_some_and(kept) {
            continue;
        }
        let to_dir = match &aside {
            Some(fd) => fd.as_raw_fd(),
            None => aside
                .insert(open_folder(&dir.with_file_name(SET_ASIDE))?)
                .as_raw_fd(),
        };
        let mut to = raw.clone();
        to.push(format!(".{stamp}"));
        renameat(
            Some(folder.as_raw_fd()),
            raw.as_os_str(),
            Some(to_dir),
            to.as_os_str(),
        )?;
        moved.push(raw.to_string_lossy().into_owned());
    }
    moved.sort();
    Ok(moved)
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

    #[test]
    fn the_state_is_made_the_per_process_state_emptied_and_every_other_name_set_aside() {
        use super::{SET_ASIDE, STATE};
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let cfg = d.path().join("claude-config");
        assert!(seed(&cfg, d.path()).unwrap().is_empty());
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        for s in STATE {
            let m = std::fs::symlink_metadata(cfg.join(s.name)).unwrap();
            assert_eq!(m.is_dir(), s.folder, "{}", s.name);
            assert_eq!(m.is_file(), !s.folder, "{}", s.name);
            let want = if s.folder { 0o700 } else { 0o600 };
            assert_eq!(mode(&cfg.join(s.name)), want, "{}", s.name);
        }
        // What one run left: a transcript and a history line (kept), a shell snapshot
        // (emptied), and names a session or an older layout put there (set aside).
        std::fs::write(cfg.join("projects/t.jsonl"), "turn").unwrap();
        std::fs::write(cfg.join("history.jsonl"), "line").unwrap();
        std::fs::write(cfg.join("shell-snapshots/snapshot.sh"), "planted").unwrap();
        std::fs::write(cfg.join("session-env/env"), "planted").unwrap();
        std::fs::write(cfg.join(".config.json"), "{}").unwrap();
        std::fs::create_dir(cfg.join("agents")).unwrap();
        std::fs::write(cfg.join("agents/a.md"), "x").unwrap();
        // A link in a state folder's place, and a folder in the history file's: neither
        // followed, both made right.
        let outside = d.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "keep").unwrap();
        std::fs::remove_dir(cfg.join("todos")).unwrap();
        std::os::unix::fs::symlink(&outside, cfg.join("todos")).unwrap();
        std::fs::remove_file(cfg.join("history.jsonl")).unwrap();
        std::fs::create_dir(cfg.join("history.jsonl")).unwrap();
        std::fs::write(cfg.join("history.jsonl/x"), "x").unwrap();
        let aside = seed(&cfg, d.path()).unwrap();
        assert_eq!(
            aside,
            vec![".config.json".to_string(), "agents".to_string()]
        );
        assert_eq!(
            std::fs::read_to_string(cfg.join("projects/t.jsonl")).unwrap(),
            "turn"
        );
        assert!(std::fs::symlink_metadata(cfg.join("todos"))
            .unwrap()
            .is_dir());
        assert_eq!(
            std::fs::read_to_string(outside.join("keep")).unwrap(),
            "keep"
        );
        assert!(std::fs::symlink_metadata(cfg.join("history.jsonl"))
            .unwrap()
            .is_file());
        for per_process in ["shell-snapshots", "session-env"] {
            assert_eq!(std::fs::read_dir(cfg.join(per_process)).unwrap().count(), 0);
        }
        let mut names: Vec<String> = std::fs::read_dir(&cfg)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let mut want: Vec<String> = STATE.iter().map(|s| s.name.to_string()).collect();
        want.extend([".claude.json".to_string(), "settings.json".to_string()]);
        want.sort();
        assert_eq!(names, want);
        // Set aside beside the folder, nothing lost, each under a name of its own.
        let set_aside: Vec<String> = std::fs::read_dir(d.path().join(SET_ASIDE))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(set_aside.len(), 2, "{set_aside:?}");
        let agents = set_aside.iter().find(|n| n.starts_with("agents.")).unwrap();
        assert_eq!(
            std::fs::read_to_string(d.path().join(SET_ASIDE).join(agents).join("a.md")).unwrap(),
            "x"
        );
        assert_eq!(mode(&d.path().join(SET_ASIDE)), 0o700);
        // A state file already right is kept as it is.
        std::fs::write(cfg.join("history.jsonl"), "line").unwrap();
        assert!(seed(&cfg, d.path()).unwrap().is_empty());
        assert_eq!(
            std::fs::read_to_string(cfg.join("history.jsonl")).unwrap(),
            "line"
        );
    }

    #[test]
    fn a_look_up_is_known_as_the_entry_what_lies_below_it_or_a_folder_on_the_way() {
        use super::known;
        let list = [
            ".claude.json",
            ".claude.json.tmp.*",
            ".config/git",
            "plugins",
        ];
        for yes in [
            ".claude.json",
            ".claude.json.tmp.77.ab",
            ".config/git",
            ".config/git/config",
            ".config",
            "plugins/store/x.json",
        ] {
            assert!(known(&list, yes), "{yes}");
        }
        for no in [
            ".claude.jsonx",
            ".claude.json.backup",
            ".config/gitx",
            ".conf",
            "pluginsx",
            "agents",
            "",
        ] {
            assert!(!known(&list, no), "{no}");
        }
    }
}
