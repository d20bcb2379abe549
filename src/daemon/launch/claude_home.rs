//! The home folder a token launch runs with (docs/THREAT-MODEL.md#what-a-token-launch-reads).
//!
//! Claude Code starts other programs at once — git, a login shell for its Bash tool —
//! and they read their configuration from `HOME`: `~/.gitconfig` (a `filter.*.clean`
//! runs on `git status`), `~/.bashrc`, `~/.profile`, `~/.config/…`. Under the person's
//! own home, any of those may have been written by a session. So a launch that gets the
//! token runs with a home of relay's: a fresh folder in its temp dir, made for this
//! launch alone, holding one file — a `.gitconfig` with the person's git identity
//! (`user.name`, `user.email`) copied as data and nothing else — and pinned read-only
//! inside the sandbox. No shell start-up file is there, and git reads no system
//! configuration or attributes either (`GIT_CONFIG_NOSYSTEM`, `GIT_ATTR_NOSYSTEM`).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;

/// What Claude Code 2.1.332 and the programs it starts look up in `HOME`, measured with
/// `strace` (a start, a turn with a Bash tool call, a resume, an interactive turn), with
/// what each is. A token launch's home is relay's and read-only whole, holding only the
/// `.gitconfig` written here, so each of these is that file or absent, and stays absent.
/// The inventory test (`e2e attacks::claude_config`) fails on a look-up this list does
/// not know; names match as `claude_config::CONFIG_READS` says.
pub const HOME_READS: &[(&str, &str)] = &[
    (
        ".gitconfig",
        "git's global configuration: relay's, the person's identity alone",
    ),
    (
        ".config/git",
        "git's global configuration, attributes and ignores",
    ),
    (".bashrc", "the Bash tool's shell start-up"),
    (".bash_profile", "a login shell's start-up"),
    (".bash_login", "a login shell's start-up"),
    (".profile", "a login shell's start-up"),
    (".claude", "Claude Code's legacy config folder"),
    (".claude.json", "Claude Code's legacy global configuration"),
    (
        ".config/anthropic",
        "Anthropic's shared client configuration",
    ),
    (".local/bin/claude", "a native install of Claude Code"),
    (
        ".local/share/applications",
        "its link handler's registration",
    ),
    (".config/mimeapps.list", "its link handler's registration"),
    (
        ".config/mimeapps.list.new",
        "its link handler's registration",
    ),
    (".config/chromium", "a browser it can drive"),
    (".config/google-chrome", "a browser it can drive"),
    (".config/BraveSoftware", "a browser it can drive"),
    (".config/microsoft-edge", "a browser it can drive"),
    (".config/opera", "a browser it can drive"),
    (".config/vivaldi", "a browser it can drive"),
    (".npm", "npm's cache, for its updater"),
    (".npmrc", "npm's configuration, for its updater"),
    ("node_modules", "npm's look-up, for its updater"),
    ("package.json", "npm's look-up, for its updater"),
];

/// A git configuration file larger than this is not read for the identity.
const CONFIG_MAX: u64 = 256 * 1024;
/// The longest identity value copied.
const VALUE_MAX: usize = 256;

/// Makes this launch's home, `home` (`<temp_dir>/home-<hex>`), new (a folder that
/// exists already is never reused), 0700, with its `.gitconfig` (the identity from `person_home` and
/// `xdg_config`, relay's `XDG_CONFIG_HOME`). Returns its path.
pub fn seed(home: &Path, person_home: &Path, xdg_config: Option<&Path>) -> std::io::Result<()> {
    std::fs::DirBuilder::new().mode(0o700).create(home)?;
    let dir = openat(
        None,
        home,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    // Safety: `dir` was just returned by openat(2) and is owned by nobody else.
    let dir = unsafe { OwnedFd::from_raw_fd(dir) };
    write_new(
        &dir,
        ".gitconfig",
        &gitconfig(&identity(person_home, xdg_config)),
    )?;
    Ok(())
}

/// Writes `text` to a new file `name` in `dir`, 0600: nothing there already is
/// followed or written.
fn write_new(dir: &OwnedFd, name: &str, text: &str) -> std::io::Result<()> {
    let fd = openat(
        Some(dir.as_raw_fd()),
        name,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )?;
    // Safety: `fd` was just returned by openat(2) and is owned by nobody else.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    file.write_all(text.as_bytes())
}

/// The person's `user.name` and `user.email`, as git would take them from the global
/// files (`$XDG_CONFIG_HOME/git/config`, then `~/.gitconfig`; the last one set wins).
/// Read as text, never by running git: nothing in those files runs. Includes are not
/// followed.
fn identity(person_home: &Path, xdg_config: Option<&Path>) -> BTreeMap<&'static str, String> {
    let xdg = xdg_config
        .filter(|p| p.is_absolute())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| person_home.join(".config"));
    let mut found = BTreeMap::new();
    for path in [xdg.join("git/config"), person_home.join(".gitconfig")] {
        // A link is followed (dotfiles often are links); a FIFO or a device is not read.
        let Ok(file) = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
        else {
            continue;
        };
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            continue;
        }
        let mut text = String::new();
        if file.take(CONFIG_MAX).read_to_string(&mut text).is_err() {
            continue;
        }
        for (key, value) in user_values(&text) {
            found.insert(key, value);
        }
    }
    found
}

/// `name` and `email` of every `[user]` section of a git configuration text, in order.
/// A value with a control character, or longer than [`VALUE_MAX`], is left out.
fn user_values(text: &str) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let mut in_user = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            let section = line.trim_start_matches('[');
            let section = section.split(']').next().unwrap_or("").trim();
            in_user = section.eq_ignore_ascii_case("user");
            continue;
        }
        if !in_user {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = match key.trim().to_ascii_lowercase().as_str() {
            "name" => "name",
            "email" => "email",
            _ => continue,
        };
        let value = unquote(value.trim());
        if !value.is_empty() && value.len() <= VALUE_MAX && !value.chars().any(char::is_control) {
            out.push((key, value));
        }
    }
    out
}

/// A git value without its comment and surrounding quotes, escapes resolved.
fn unquote(v: &str) -> String {
    let mut out = String::new();
    let (mut quoted, mut chars) = (false, v.chars());
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => {}
            },
            ';' | '#' if !quoted => break,
            c => out.push(c),
        }
    }
    out.trim().to_string()
}

/// The `.gitconfig` of relay's home: the identity, quoted, and nothing else.
fn gitconfig(identity: &BTreeMap<&'static str, String>) -> String {
    let mut text =
        String::from("# Written by relay for this launch alone (docs/THREAT-MODEL.md).\n");
    if !identity.is_empty() {
        text.push_str("[user]\n");
        for (key, value) in identity {
            let escaped = value.replace('\\', "\\\\").replace('"', "\\\"");
            text.push_str(&format!("\t{key} = \"{escaped}\"\n"));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_identity_is_copied_and_nothing_that_runs() {
        let text = r#"
[user]
    name = "Ada \"the\" Lovelace" ; a comment
    email = ada@example.com
[filter "x"]
    clean = sh -c 'cat /proc/1/mem'
[core]
    fsmonitor = /tmp/x
    hooksPath = /tmp/hooks
[include]
    path = ~/.other
[User]
    email = ada@work.example
    name = bad\u0007
"#;
        let values = user_values(text);
        assert_eq!(
            values,
            [
                ("name", "Ada \"the\" Lovelace".to_string()),
                ("email", "ada@example.com".to_string()),
                ("email", "ada@work.example".to_string()),
                ("name", "badu0007".to_string()),
            ]
        );
        let written = gitconfig(&values.into_iter().collect());
        assert!(written.contains("name = \"badu0007\""), "{written}");
        assert!(
            written.contains("email = \"ada@work.example\""),
            "{written}"
        );
        for never in [
            "filter",
            "clean",
            "fsmonitor",
            "hooksPath",
            "include",
            "/proc",
        ] {
            assert!(!written.contains(never), "{never} in {written}");
        }
        // A control character or a newline never reaches the file.
        assert!(user_values("[user]\nname = \"a\\nb\"\n").is_empty());
        assert!(user_values(&format!("[user]\nname = {}\n", "x".repeat(300))).is_empty());
        assert!(
            user_values("[user]\nname = \"a\\tb\"\n").is_empty(),
            "a tab"
        );
        assert!(
            user_values("[user]\nname =\nemail = \"\"\n").is_empty(),
            "empty"
        );
        let longest = "x".repeat(VALUE_MAX);
        assert_eq!(
            user_values(&format!("[user]\nname = {longest}\nemail = {longest}x\n")),
            [("name", longest.clone())]
        );
        // `;` and `#` inside quotes are the value's, outside they start a comment.
        assert_eq!(
            user_values("[user]\nname = \"A; B # C\" # mine\n"),
            [("name", "A; B # C".to_string())]
        );
    }

    #[test]
    fn an_identity_far_down_a_long_configuration_is_found() {
        let t = tempfile::tempdir().unwrap();
        let mut text = "# a comment line of some length, as dotfiles have\n".repeat(400);
        text.push_str("[user]\nname = Ada\n");
        assert!(text.len() > 16 * 1024 && (text.len() as u64) < CONFIG_MAX);
        std::fs::write(t.path().join(".gitconfig"), text).unwrap();
        assert_eq!(
            identity(t.path(), None),
            BTreeMap::from([("name", "Ada".to_string())])
        );
    }

    #[test]
    fn a_fifo_in_place_of_the_gitconfig_is_not_read() {
        let t = tempfile::tempdir().unwrap();
        let fifo = t.path().join(".gitconfig");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        // Returns at once, with no identity: the FIFO has no writer.
        assert!(identity(t.path(), None).is_empty());
    }

    #[test]
    fn each_launch_gets_a_new_home_with_only_its_gitconfig() {
        let t = tempfile::tempdir().unwrap();
        let person = t.path().join("person");
        std::fs::create_dir_all(person.join(".config/git")).unwrap();
        std::fs::write(
            person.join(".config/git/config"),
            "[user]\nname = X\nemail = x@x\n",
        )
        .unwrap();
        std::fs::write(person.join(".gitconfig"), "[user]\nname = Ada\n").unwrap();
        let temp = t.path().join("relay-s-1");
        std::fs::create_dir_all(&temp).unwrap();
        let (a, b) = (temp.join("home-a"), temp.join("home-b"));
        seed(&a, &person, None).unwrap();
        seed(&b, &person, Some(Path::new("relative/is/ignored"))).unwrap();
        assert!(seed(&a, &person, None).is_err(), "a home is never reused");
        let names: Vec<_> = std::fs::read_dir(&a)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [".gitconfig"]);
        let text = std::fs::read_to_string(a.join(".gitconfig")).unwrap();
        assert!(
            text.contains("name = \"Ada\"") && text.contains("email = \"x@x\""),
            "{text}"
        );
        // A relative XDG_CONFIG_HOME is not git's: `~/.config` is read instead.
        assert_eq!(std::fs::read_to_string(b.join(".gitconfig")).unwrap(), text);
        let env = crate::daemon::plan::env::home_env(&a);
        assert_eq!(env["HOME"], a.to_string_lossy());
        assert_eq!(
            env["GIT_CONFIG_GLOBAL"],
            a.join(".gitconfig").to_string_lossy()
        );
        assert_eq!(env["GIT_CONFIG_NOSYSTEM"], "1");
    }
    #[test]
    fn the_gitconfig_is_written_new_never_through_what_is_there() {
        let t = tempfile::tempdir().unwrap();
        let dir: OwnedFd = std::fs::File::open(t.path()).unwrap().into();
        std::fs::write(t.path().join("kept"), "mine").unwrap();
        let outside = t.path().join("outside");
        std::fs::write(&outside, "theirs").unwrap();
        std::os::unix::fs::symlink(&outside, t.path().join("link")).unwrap();
        for name in ["kept", "link"] {
            let e = write_new(&dir, name, "relay's").unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{name}: {e}");
        }
        assert_eq!(
            std::fs::read_to_string(t.path().join("kept")).unwrap(),
            "mine"
        );
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "theirs");
        write_new(&dir, "new", "relay's").unwrap();
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(t.path().join("new")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::read_to_string(t.path().join("new")).unwrap(),
            "relay's"
        );
    }
}
