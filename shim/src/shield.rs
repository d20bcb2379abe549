//! `relay-shim --shield COMMAND`: what a token launch's Claude Code runs each Bash
//! command through. The daemon sets `CLAUDE_CODE_SHELL_PREFIX` to this binary's path
//! inside the sandbox (bound read-only there) and `--shield` (or
//! `--shield-listen=PORTS`); Claude Code then runs `'<shim>' --shield '<the command it
//! built>'` from its shell, which execs the shim.
//!
//! Threat (docs/THREAT-MODEL.md#claudes-tools-cannot-reach-claude): a tool runs as
//! Claude's own uid in Claude's own sandbox, and Claude holds the token in memory and
//! sends it with every request; a prompt-injected command could read it from
//! `/proc/<claude>/mem`, or kill relay's forwarder and listen on the port Claude sends
//! it to. So the shim first puts itself in a Landlock domain nested below Claude's
//! ([`crate::landlock::shield`]), which every process the command starts inherits: the
//! kernel refuses all of them Claude's memory, every signal to a process outside the
//! domain, and every TCP bind but the template's `listen_ports`. The seccomp filter of
//! [`crate::seccomp`] closes the sockets Landlock does not count as TCP (MPTCP, SMC)
//! and io_uring. Then it drops fd 5 (the drained token pipe Claude's children inherit)
//! and execs the shell Claude Code picked, with the command, in the same environment
//! and folder.
//!
//! Fail closed: a domain or a filter the kernel refuses runs nothing (exit 70, one line
//! on stderr, which Claude Code shows as the command's output).

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::fds::{self, TOKEN_FD};
use crate::{exit_codes, landlock, seccomp};

/// The folders Claude Code 2.1.332 looks in for a shell after `CLAUDE_CODE_SHELL` and
/// `SHELL`.
const SHELL_DIRS: [&str; 4] = ["/bin", "/usr/bin", "/usr/local/bin", "/opt/homebrew/bin"];

/// Runs `command` shielded, its tools allowed to bind `listen_ports` alone.
pub(crate) fn run(listen_ports: &[u16], command: &OsStr) -> ! {
    if let Err(e) = landlock::shield(listen_ports) {
        die(&format!("landlock: {e}"), exit_codes::SETUP);
    }
    if let Err(e) = seccomp::install() {
        die(&format!("seccomp: {e}"), exit_codes::SETUP);
    }
    if fds::is_open(TOKEN_FD) {
        if let Err(e) = fds::set_cloexec(TOKEN_FD, true) {
            die(&format!("fd 5: {e}"), exit_codes::SETUP);
        }
    }
    let var = |name: &str| std::env::var_os(name);
    let path = var("PATH");
    let Some(shell) = pick_shell(
        var("CLAUDE_CODE_SHELL").as_deref(),
        var("SHELL").as_deref(),
        path.as_deref(),
        is_executable,
    ) else {
        die("no bash or zsh found", exit_codes::NOT_FOUND);
    };
    let argv = [shell.as_os_str(), OsStr::new("-c"), command];
    let Ok(cargs) = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<Vec<CString>, _>>()
    else {
        die("the command holds NUL", exit_codes::USAGE);
    };
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // Safety: NUL-terminated strings and a NULL-terminated array that outlive the call;
    // the environment is this process's own.
    unsafe { libc::execv(ptrs[0], ptrs.as_ptr()) };
    let e = std::io::Error::last_os_error();
    die(
        &format!("exec {}: {e}", shell.display()),
        exit_codes::NOT_EXECUTABLE,
    )
}

/// The shell Claude Code 2.1.332 picks for its Bash tool, so the command it built runs
/// in the shell it was built for: `CLAUDE_CODE_SHELL`, then `SHELL`, when they name a
/// bash or a zsh; then, bash first when `SHELL` is a bash and zsh first otherwise, the
/// first of them on `PATH`, each in [`SHELL_DIRS`], the other on `PATH`. Only absolute
/// executable files count. Whatever it picks runs inside the domain already.
fn pick_shell(
    claude_code_shell: Option<&OsStr>,
    shell: Option<&OsStr>,
    path: Option<&OsStr>,
    executable: impl Fn(&Path) -> bool,
) -> Option<PathBuf> {
    let names_one = |p: &&OsStr| {
        let b = p.as_bytes();
        b.windows(4).any(|w| w == b"bash") || b.windows(3).any(|w| w == b"zsh")
    };
    let bash_first = shell
        .map(Path::new)
        .and_then(Path::file_name)
        .is_some_and(|n| n == "bash");
    let order = if bash_first {
        ["bash", "zsh"]
    } else {
        ["zsh", "bash"]
    };
    let on_path = |name: &str| -> Option<PathBuf> {
        let path = path?;
        std::env::split_paths(path)
            .filter(|d| d.is_absolute())
            .map(|d| d.join(name))
            .find(|p| executable(p))
    };
    let named = [claude_code_shell, shell]
        .into_iter()
        .flatten()
        .filter(names_one)
        .map(PathBuf::from);
    let fixed = order
        .iter()
        .flat_map(|name| SHELL_DIRS.iter().map(move |d| Path::new(d).join(name)));
    named
        .chain(on_path(order[0]))
        .chain(fixed)
        .chain(on_path(order[1]))
        .find(|p| p.is_absolute() && executable(p))
}

/// A regular file this process may execute (following links).
fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file())
        && nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok()
}

fn die(msg: &str, code: i32) -> ! {
    eprintln!("relay-shim: shield: {msg}");
    std::process::exit(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(cc: Option<&str>, shell: Option<&str>, path: &str, have: &[&str]) -> Option<String> {
        pick_shell(
            cc.map(OsStr::new),
            shell.map(OsStr::new),
            Some(OsStr::new(path)),
            |p| have.iter().any(|h| Path::new(h) == p),
        )
        .map(|p| p.display().to_string())
    }

    #[test]
    fn the_shell_is_the_one_claude_code_picks() {
        let both = ["/bin/bash", "/usr/bin/zsh", "/opt/nix/bin/bash"];
        // CLAUDE_CODE_SHELL, then SHELL, when each names a bash or a zsh that runs.
        let p = |cc, sh| pick(cc, sh, "/opt/nix/bin:/usr/bin", &both);
        assert_eq!(
            p(Some("/usr/bin/zsh"), Some("/bin/bash")).unwrap(),
            "/usr/bin/zsh"
        );
        assert_eq!(p(None, Some("/bin/bash")).unwrap(), "/bin/bash");
        // A SHELL that is neither: zsh first, from PATH, then the fixed folders.
        assert_eq!(p(None, Some("/usr/bin/fish")).unwrap(), "/usr/bin/zsh");
        // A bash SHELL that is missing: bash first, from PATH.
        assert_eq!(
            pick(None, Some("/gone/bash"), "/opt/nix/bin", &both).unwrap(),
            "/opt/nix/bin/bash"
        );
        // Relative entries and names are never taken.
        assert_eq!(
            pick(
                Some("bash"),
                Some("zsh"),
                "bin:/usr/bin",
                &["bin/bash", "/bin/bash"]
            )
            .unwrap(),
            "/bin/bash"
        );
        assert_eq!(pick(None, None, "/usr/bin", &[]), None);
        // A shell that runs but is neither bash nor zsh is not taken by name.
        assert_eq!(
            pick(
                Some("/usr/bin/fish"),
                Some("/usr/bin/fish"),
                "/usr/bin",
                &["/usr/bin/fish", "/usr/bin/zsh"]
            )
            .unwrap(),
            "/usr/bin/zsh"
        );
    }

    #[test]
    fn only_an_executable_file_counts_as_a_shell() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("relay-shim-shell-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, mode: u32| {
            let p = dir.join(name);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            p
        };
        assert!(is_executable(&file("runs", 0o755)));
        assert!(!is_executable(&file("text", 0o644)));
        // A folder can be searched, not run.
        assert!(!is_executable(&dir));
        assert!(!is_executable(&dir.join("missing")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
