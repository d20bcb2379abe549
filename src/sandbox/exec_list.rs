//! The execution-bearing list: what the person's own tools run, or read as code, the next
//! time they start — outside every sandbox — and what a later launch reads the same way.
//! Each name is read-only in every sandbox wherever one of its read-write grants would
//! cover it (docs/session-host.md#execution-bearing-files). [`LIST`] is the one list; a
//! launch's plan pins it (`src/daemon/plan/exec_files.rs`), and the settings check a
//! template's `writable_exceptions` against it.
//!
//! A file that does not exist yet must not be creatable either. Seatbelt denies writes to
//! a path whether or not it exists. bubblewrap can only hold read-only what exists (a
//! bind needs a mount point, made on the person's disk), so before a bwrap launch relay
//! makes each missing one itself, as its reader takes no file at all: an empty folder, an
//! empty start-up file, `{}`, or for `~/.bash_profile` two lines doing what bash does
//! without it. Where an empty file would change what its reader does or litter a
//! repository, the entry says why a new one runs nothing ([`Missing::Left`]).
//!
//! Data only: nothing here reads the disk.

/// Where an entry's name is taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base {
    /// The person's home folder.
    Home,
    /// Every folder a read-write grant holds, from the grant down to the session's
    /// directory: a project, the repository it is in. The `.git` names also in each
    /// repository directly inside a grant (`~/src/*`).
    Root,
    /// An absolute path: a folder of relay's `PATH` outside the home.
    Path,
    /// Every git folder found in those repositories: `.git`, and each
    /// `.git/modules/<name>` and `.git/worktrees/<name>` in it.
    GitDir,
}

/// What is pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Dir,
    File,
    /// `.git`: pinned when it is a file (naming the repository's folder elsewhere); a
    /// folder gets its own entries ([`Base::GitDir`]); missing, it is made an empty
    /// folder.
    GitLink,
}

/// What a bwrap launch does when the entry does not exist yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// Made empty first (folders 0700, files 0600): its reader takes an empty one as
    /// none.
    Empty,
    /// Made with this text first (0600).
    Text(&'static str),
    /// `~/.bash_profile`: made with the lines that do what bash does without one.
    BashProfile,
    /// Made empty only where its folder exists (`~/.cargo/env` where there is a
    /// `~/.cargo`).
    InParent,
    /// Not made: why a new one runs nothing, or what is left open.
    Left(&'static str),
}

/// One execution-bearing name.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub base: Base,
    /// Relative to the base, `/`-separated.
    pub name: &'static str,
    pub shape: Shape,
    /// Who runs it or reads it as code.
    pub reader: &'static str,
    pub missing: Missing,
    /// A macOS name: pinned for Seatbelt launches only.
    pub macos: bool,
}

const fn home(name: &'static str, shape: Shape, reader: &'static str, missing: Missing) -> Entry {
    Entry {
        base: Base::Home,
        name,
        shape,
        reader,
        missing,
        macos: false,
    }
}

const fn root(name: &'static str, shape: Shape, reader: &'static str, missing: Missing) -> Entry {
    Entry {
        base: Base::Root,
        name,
        shape,
        reader,
        missing,
        macos: false,
    }
}

const fn mac(name: &'static str, reader: &'static str) -> Entry {
    Entry {
        base: Base::Home,
        name,
        shape: Shape::Dir,
        reader,
        missing: Missing::Empty,
        macos: true,
    }
}

use Missing::{Empty, InParent, Left};
use Shape::{Dir, File, GitLink};

const BASH_LOGIN_LEFT: &str =
    "bash reads it only when ~/.bash_profile is missing, and relay makes that one first";
const GIT_LEFT: &str = "git init works here: what a session plants in a repository it \
     makes is set aside while it runs and when it ends \
     (docs/THREAT-MODEL.md#repositories-a-session-made-or-changed)";
const GITMODULES_LEFT: &str =
    "git runs no command a .gitmodules names (`update = !command` counts \
     only in .git/config, which is pinned), and a new one shows in git status";
const ENVRC_LEFT: &str = "direnv runs a new or changed .envrc only once you allow it \
     (`direnv allow`), and its allow list and whitelist are pinned";
const MCP_LEFT: &str = "Claude Code asks before it starts a server a new .mcp.json names, and \
     keeps your answer in ~/.claude.json or .claude/, both pinned";
const NPMRC_LEFT: &str = "left open under bwrap: an empty one made in your project would show \
     in git status; read a new .npmrc before you run npm there";
const WORKTREE_CONFIG_LEFT: &str = "git reads it only when .git/config turns on \
     extensions.worktreeConfig, and .git/config is pinned";
const XINITRC_LEFT: &str = "an empty one would start no session at all; left open under \
     bwrap where missing";

/// The list: every execution-bearing name relay keeps read-only.
pub const LIST: &[Entry] = &[
    // Shells, at start and exit.
    home(".bashrc", File, "bash, at every interactive shell", Empty),
    home(
        ".bash_profile",
        File,
        "bash, at every login shell",
        Missing::BashProfile,
    ),
    home(
        ".bash_login",
        File,
        "bash, at a login shell",
        Left(BASH_LOGIN_LEFT),
    ),
    home(".profile", File, "sh and bash, at a login shell", Empty),
    home(".bash_logout", File, "bash, as a login shell exits", Empty),
    home(".zshenv", File, "zsh, at every start", Empty),
    home(".zprofile", File, "zsh, at a login shell", Empty),
    home(".zshrc", File, "zsh, at every interactive shell", Empty),
    home(".zlogin", File, "zsh, at a login shell", Empty),
    home(".zlogout", File, "zsh, as a login shell exits", Empty),
    home(".config/fish", Dir, "fish, at every start", Empty),
    home(
        ".bash_aliases",
        File,
        "bash, through Debian's .bashrc",
        Empty,
    ),
    home(
        ".config/zsh",
        Dir,
        "zsh, where ZDOTDIR points there",
        InParent,
    ),
    home(
        ".cargo/env",
        File,
        "sh and bash, through rustup's lines",
        InParent,
    ),
    home(".cargo/bin", Dir, "your shell, by name (PATH)", InParent),
    home(
        ".local/share/systemd/user",
        Dir,
        "systemd, your user services",
        Empty,
    ),
    home(
        ".local/share/dbus-1/services",
        Dir,
        "D-Bus, your session's services",
        Empty,
    ),
    home(
        ".local/share/applications",
        Dir,
        "the desktop's menus (Exec=)",
        Empty,
    ),
    home(
        ".config/plasma-workspace/env",
        Dir,
        "KDE Plasma, at login",
        InParent,
    ),
    home(".xinitrc", File, "startx", Left(XINITRC_LEFT)),
    home(
        ".xsession",
        File,
        "the X session, at login",
        Left(XINITRC_LEFT),
    ),
    home(
        ".gnupg/gpg-agent.conf",
        File,
        "gpg-agent (pinentry-program)",
        InParent,
    ),
    home(
        ".kube/config",
        File,
        "kubectl (exec credential plugins)",
        InParent,
    ),
    // What runs by name from your PATH (relay's own PATH adds its folders in the home).
    home("bin", Dir, "your shell, by name (PATH)", Empty),
    home(".local/bin", Dir, "your shell, by name (PATH)", Empty),
    // git, at every command: filters, fsmonitor, hooksPath, aliases, pager, editor.
    home(".gitconfig", File, "git, at every command", Empty),
    home(
        ".config/git",
        Dir,
        "git, at every command (config, attributes)",
        Empty,
    ),
    // ssh: ProxyCommand, LocalCommand, rc, authorized_keys.
    home(".ssh", Dir, "ssh, at every connection", Empty),
    // The desktop and the service managers, at login.
    home(".config/autostart", Dir, "the desktop, at login", Empty),
    home(".xprofile", File, "the display manager, at login", Empty),
    home(".xsessionrc", File, "the X session, at login", Empty),
    home(
        ".config/environment.d",
        Dir,
        "systemd, your login's environment",
        Empty,
    ),
    home(
        ".config/systemd/user",
        Dir,
        "systemd, your user services",
        Empty,
    ),
    mac("Library/LaunchAgents", "launchd, at login"),
    // Python's user site-packages: a .pth file runs at every start.
    home(
        ".local/lib",
        Dir,
        "Python, at every start (user site-packages)",
        Empty,
    ),
    mac(
        "Library/Python",
        "Python, at every start (user site-packages)",
    ),
    home(
        ".npmrc",
        File,
        "npm, at every command (script-shell, node-options)",
        Empty,
    ),
    home(
        ".config/direnv",
        Dir,
        "direnv (direnvrc, its whitelist)",
        Empty,
    ),
    home(
        ".local/share/direnv",
        Dir,
        "direnv (which .envrc it runs)",
        Empty,
    ),
    // Package caches: what the person's tools build and run from them, outside every
    // sandbox, unchecked (a sandbox keeps its own: docs/settings.md#caches).
    home(
        ".cargo/registry",
        Dir,
        "cargo, at every build (the crate sources it builds, build.rs included)",
        InParent,
    ),
    home(
        ".cargo/git",
        Dir,
        "cargo, at every build (git dependencies' checkouts)",
        InParent,
    ),
    home(
        ".npm",
        Dir,
        "npm (the packages it installs from its cache)",
        Empty,
    ),
    home(
        ".cache",
        Dir,
        "pip, uv, go, pre-commit, node-gyp (caches whose code they run)",
        Empty,
    ),
    home(
        "go/pkg/mod",
        Dir,
        "go, at every build (module sources)",
        InParent,
    ),
    home(".bun/install", Dir, "bun (its package cache)", InParent),
    home(
        ".local/share/pnpm",
        Dir,
        "pnpm (its store, hard-linked into projects)",
        InParent,
    ),
    home(
        ".m2",
        Dir,
        "Maven (its settings and the plugins it runs)",
        InParent,
    ),
    home(
        ".gradle",
        Dir,
        "Gradle (init scripts, its caches)",
        InParent,
    ),
    // Claude Code outside relay: settings with hooks, commands, agents, MCP servers.
    home(".claude", Dir, "Claude Code, started outside relay", Empty),
    home(
        ".claude.json",
        File,
        "Claude Code, started outside relay (MCP servers)",
        Missing::Text("{}\n"),
    ),
    // In each folder a read-write grant holds.
    // `.git` itself: a file naming the repository elsewhere is pinned; where there is
    // no repository, none is made, so `git init` and `git clone` work there: what a
    // session plants in a repository it made is set aside while it runs and at its end.
    root(
        ".git",
        GitLink,
        "git (the repository's folder)",
        Left(GIT_LEFT),
    ),
    root(".gitmodules", File, "git submodule", Left(GITMODULES_LEFT)),
    root(
        ".envrc",
        File,
        "direnv, when you cd there",
        Left(ENVRC_LEFT),
    ),
    root(
        ".vscode",
        Dir,
        "VS Code (tasks run on opening the folder)",
        Empty,
    ),
    root(
        ".idea",
        Dir,
        "JetBrains IDEs (run configurations, start-up tasks)",
        Empty,
    ),
    root(
        ".claude",
        Dir,
        "Claude Code (settings with hooks, commands, agents)",
        Empty,
    ),
    root(
        ".mcp.json",
        File,
        "Claude Code (a project's MCP servers)",
        Left(MCP_LEFT),
    ),
    root(".npmrc", File, "npm, in that folder", Left(NPMRC_LEFT)),
];

/// The names in each git folder ([`Base::GitDir`]): what git runs, or reads to find what
/// it runs.
pub const GIT_FOLDER: &[Entry] = &[
    gitdir(
        "hooks",
        Dir,
        "git, at commit, checkout, merge and push",
        Empty,
    ),
    gitdir(
        "config",
        File,
        "git, at every command in the repository",
        Empty,
    ),
    // Where git takes config and hooks from instead: `.` is what git does without it.
    gitdir(
        "commondir",
        File,
        "git (where its config and hooks are)",
        Missing::Text(".\n"),
    ),
    gitdir(
        "config.worktree",
        File,
        "git, with extensions.worktreeConfig",
        Left(WORKTREE_CONFIG_LEFT),
    ),
];

const fn gitdir(name: &'static str, shape: Shape, reader: &'static str, missing: Missing) -> Entry {
    Entry {
        base: Base::GitDir,
        name,
        shape,
        reader,
        missing,
        macos: false,
    }
}

/// A folder of relay's `PATH` in the home (its name is the candidate's own).
pub const PATH_FOLDER: Entry = home("", Dir, "your shell, by name (PATH)", Empty);
/// One outside it: pinned where a grant holds it, never made.
pub const PATH_FOLDER_OUTSIDE: Entry = Entry {
    base: Base::Path,
    name: "",
    shape: Dir,
    reader: "your shell, by name (PATH)",
    missing: Left("a missing PATH folder outside your home is not made"),
    macos: false,
};

/// Whether a `writable_exceptions` entry is one relay understands: a path (absolute or
/// `~/…`) or the name of a [`Base::Root`] entry.
pub fn valid_exception(entry: &str) -> bool {
    entry.starts_with('/')
        || entry == "~"
        || entry.starts_with("~/")
        || LIST.iter().any(|e| e.base == Base::Root && e.name == entry)
        || GIT_FOLDER
            .iter()
            .any(|e| entry == format!(".git/{}", e.name))
}

/// The names a relative `writable_exceptions` entry may take.
pub fn root_names() -> Vec<String> {
    let mut names: Vec<String> = LIST
        .iter()
        .filter(|e| e.base == Base::Root)
        .map(|e| e.name.to_string())
        .collect();
    names.extend(GIT_FOLDER.iter().map(|e| format!(".git/{}", e.name)));
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_has_each_name_once_per_base_and_only_relative_names() {
        for (i, a) in LIST.iter().enumerate() {
            assert!(
                !a.name.starts_with('/') && !a.name.ends_with('/'),
                "{}",
                a.name
            );
            assert!(
                !LIST[..i]
                    .iter()
                    .any(|b| b.base == a.base && b.name == a.name),
                "{} twice",
                a.name
            );
        }
    }

    #[test]
    fn exception_names_are_checked() {
        assert!(valid_exception(".git/config"));
        assert!(valid_exception("~/.bashrc"));
        assert!(valid_exception("/srv/x"));
        assert!(
            !valid_exception(".bashrc"),
            "a home name is written ~/.bashrc"
        );
        assert!(!valid_exception("hooks"));
    }

    #[test]
    fn the_names_an_exception_may_take_are_the_project_ones_and_the_git_folders() {
        let names = root_names();
        for n in [".envrc", ".git/hooks", ".git/config"] {
            assert!(names.iter().any(|x| x == n), "{n} in {names:?}");
        }
        assert!(
            !names
                .iter()
                .any(|x| x == ".bashrc" || x == ".ssh" || x.is_empty()),
            "{names:?}"
        );
    }
}
