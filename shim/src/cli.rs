//! The command line, parsed by hand into an [`ExecArgs`]; every refusal is a
//! [`UsageError`] that the caller prints as `relay-shim: usage: <what>` and exit 64.
//! The host builds the same command line with [`ExecArgs::to_args`] (the flags are
//! [`flags`]), so the two sides cannot drift.
//!
//! ```text
//! relay-shim exec --session-id ID [--identity] [--pty]
//!     [--sandbox-backend seatbelt|bwrap --sandbox-profile ABS_PATH] [--sandbox-launcher PATH]
//!     [--status-fd N] [--pass-token] [--landlock-fd N | --landlock-inherited PORT] -- ARGV…
//! relay-shim enter [--pty] -- ARGV…      (inside the sandbox: crate::enter)
//! relay-shim --shield COMMAND             (Claude's Bash commands: crate::shield)
//! relay-shim --shield-listen=PORTS COMMAND
//! relay-shim --version
//! ```

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::fd::RawFd;
use std::path::PathBuf;

use crate::fds::{default_status_fd, IDENTITY_FD, TOKEN_FD};

/// The flags of `relay-shim exec`.
pub mod flags {
    pub const EXEC: &str = "exec";
    pub const ENTER: &str = "enter";
    pub const VERSION: &str = "--version";
    /// `--shield COMMAND`: what a token launch's Claude Code runs each Bash command
    /// through (`CLAUDE_CODE_SHELL_PREFIX`, see `crate::shield`). A flag, not a word:
    /// Claude Code splits its prefix at the last ` -`.
    pub const SHIELD: &str = "--shield";
    /// `--shield-listen=PORTS COMMAND`: the same, the command's tools allowed to bind the
    /// TCP ports listed (comma-separated, `0` a port the kernel picks): the template's
    /// `listen_ports`. One word, for the same reason.
    pub const SHIELD_LISTEN: &str = "--shield-listen=";
    pub const SESSION_ID: &str = "--session-id";
    pub const IDENTITY: &str = "--identity";
    pub const PTY: &str = "--pty";
    pub const SANDBOX_BACKEND: &str = "--sandbox-backend";
    pub const SANDBOX_PROFILE: &str = "--sandbox-profile";
    pub const SANDBOX_LAUNCHER: &str = "--sandbox-launcher";
    pub const STATUS_FD: &str = "--status-fd";
    pub const PASS_TOKEN: &str = "--pass-token";
    pub const LANDLOCK_FD: &str = "--landlock-fd";
    pub const LANDLOCK_INHERITED: &str = "--landlock-inherited";
    /// Ends the flags; the target's argv follows.
    pub const ARGV: &str = "--";
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Version,
    Exec(ExecArgs),
    /// `enter [--pty] -- ARGV`: the first program inside a sandbox, which gives the
    /// target its environment and folder (see `crate::enter`).
    Enter {
        pty: bool,
        argv: Vec<OsString>,
    },
    /// `--shield COMMAND`: the command Claude Code built, run by its shell inside a
    /// Landlock domain of its own (see `crate::shield`), which may bind the TCP ports
    /// `listen` alone (`--shield-listen=PORTS`; none with `--shield`).
    Shield {
        listen: Vec<u16>,
        command: OsString,
    },
}

/// The sandbox launcher a target runs under (one enum for the shim, the host and the
/// daemon; `relay::protocol` carries it on the wire as `"seatbelt"` / `"bwrap"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    Seatbelt,
    Bwrap,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Seatbelt => "seatbelt",
            Backend::Bwrap => "bwrap",
        }
    }

    /// The backend `name` (as [`Backend::as_str`] writes it) names.
    pub fn from_name(name: &str) -> Option<Backend> {
        match name {
            "seatbelt" => Some(Backend::Seatbelt),
            "bwrap" => Some(Backend::Bwrap),
            _ => None,
        }
    }

    /// The launcher without `--sandbox-launcher`.
    pub fn default_launcher(self) -> &'static str {
        match self {
            Backend::Seatbelt => "/usr/bin/sandbox-exec",
            Backend::Bwrap => "/usr/bin/bwrap",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub backend: Backend,
    /// Absolute path of the profile the daemon wrote.
    pub profile: PathBuf,
    /// The launcher to exec: `--sandbox-launcher`, else the backend's default.
    pub launcher: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecArgs {
    pub session_id: String,
    pub identity: bool,
    pub pty: bool,
    pub sandbox: Option<Sandbox>,
    pub status_fd: RawFd,
    pub pass_token: bool,
    pub landlock_fd: Option<RawFd>,
    /// The shim was forked already inside the Landlock domain of its denied ports (the
    /// host's confined thread, docs/session-host.md#the-confined-thread): it installs
    /// only the network filter. Never together with `landlock_fd`.
    pub landlock_inherited: Option<u16>,
    /// The target's argv as given after `--`; never empty.
    pub argv: Vec<OsString>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn usage(what: impl Into<String>) -> UsageError {
    UsageError(what.into())
}

/// `--shield` and `--shield-listen=…`: exactly one argument follows, the command.
fn shield(listen: Vec<u16>, rest: &[OsString]) -> Result<Command, UsageError> {
    match rest {
        [command] => Ok(Command::Shield {
            listen,
            command: command.clone(),
        }),
        _ => Err(usage("--shield takes one argument, the command")),
    }
}

/// The ports of `--shield-listen=PORTS`: decimal port numbers (0-65535), separated by
/// commas, at least one.
fn listen_ports(list: &str) -> Result<Vec<u16>, UsageError> {
    list.split(',')
        .map(|p| {
            p.parse::<u16>()
                .ok()
                .filter(|_| p.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| usage(format!("--shield-listen: {p:?} is not a port number")))
        })
        .collect()
}

/// Parses the arguments after the program name.
pub fn parse(args: &[OsString]) -> Result<Command, UsageError> {
    match args.first().map(|a| a.to_str()) {
        None => Err(usage("missing subcommand (expected exec)")),
        Some(Some(flags::VERSION)) if args.len() == 1 => Ok(Command::Version),
        Some(Some(flags::SHIELD)) => shield(vec![], &args[1..]),
        Some(Some(flag)) if flag.starts_with(flags::SHIELD_LISTEN) => {
            let ports = &flag[flags::SHIELD_LISTEN.len()..];
            shield(listen_ports(ports)?, &args[1..])
        }
        Some(Some(flags::EXEC)) => parse_exec(&args[1..]).map(Command::Exec),
        Some(Some(flags::ENTER)) => {
            let pty = args.get(1).and_then(|a| a.to_str()) == Some(flags::PTY);
            let rest = &args[1 + usize::from(pty)..];
            match rest.first().and_then(|a| a.to_str()) {
                Some(flags::ARGV) if rest.len() > 1 => Ok(Command::Enter {
                    pty,
                    argv: rest[1..].to_vec(),
                }),
                _ => Err(usage("enter needs [--pty] -- ARGV")),
            }
        }
        Some(other) => Err(usage(format!(
            "unknown subcommand {} (expected exec)",
            other.unwrap_or("<non-UTF-8>")
        ))),
    }
}

/// `exec`'s flags, then its argv after `--`; each flag read on its own
/// ([`Given::read`]), then checked together: the argv and the session id are there, the
/// sandbox flags come as a pair ([`sandbox`]), no two descriptors collide
/// ([`ExecArgs::check_fds`]).
fn parse_exec(args: &[OsString]) -> Result<ExecArgs, UsageError> {
    let mut given = Given::default();
    let mut argv: Option<Vec<OsString>> = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == flags::ARGV {
            argv = Some(it.by_ref().cloned().collect());
            break;
        }
        let Some(flag) = arg.to_str() else {
            return Err(usage("unknown flag <non-UTF-8>"));
        };
        given.read(flag, &mut it)?;
    }

    let argv = argv.ok_or_else(|| usage("missing -- before the target's argv"))?;
    if argv.is_empty() {
        return Err(usage("empty target argv after --"));
    }
    let session_id = given
        .session_id
        .ok_or_else(|| usage("--session-id is required"))?;
    let sandbox = sandbox(given.backend, given.profile, given.launcher)?;
    let exec = ExecArgs {
        session_id,
        identity: given.identity,
        pty: given.pty,
        sandbox,
        status_fd: given.status_fd.unwrap_or(default_status_fd(given.identity)),
        pass_token: given.pass_token,
        landlock_fd: given.landlock_fd,
        landlock_inherited: given.landlock_inherited,
        argv,
    };
    exec.check_fds()?;
    Ok(exec)
}

/// The flags of `exec` as given, each at most once, before they are checked together.
#[derive(Default)]
struct Given {
    session_id: Option<String>,
    identity: bool,
    pty: bool,
    backend: Option<Backend>,
    profile: Option<PathBuf>,
    launcher: Option<PathBuf>,
    status_fd: Option<RawFd>,
    pass_token: bool,
    landlock_fd: Option<RawFd>,
    landlock_inherited: Option<u16>,
}

impl Given {
    /// Takes `flag`, and its value from `rest` if it has one: refused when the flag is
    /// unknown or given twice, or its value is missing or not one the flag takes.
    fn read<'a>(
        &mut self,
        flag: &str,
        rest: &mut impl Iterator<Item = &'a OsString>,
    ) -> Result<(), UsageError> {
        let mut value = |what: &str| -> Result<&'a OsStr, UsageError> {
            rest.next()
                .map(OsString::as_os_str)
                .ok_or_else(|| usage(format!("missing value for {what}")))
        };
        match flag {
            flags::SESSION_ID => {
                let v = utf8(value(flag)?, flag)?;
                if v.is_empty() {
                    return Err(usage("--session-id is empty"));
                }
                set_once(&mut self.session_id, v.to_string(), flag)?;
            }
            flags::IDENTITY => set_flag(&mut self.identity, flag)?,
            flags::PTY => set_flag(&mut self.pty, flag)?,
            flags::PASS_TOKEN => set_flag(&mut self.pass_token, flag)?,
            flags::SANDBOX_BACKEND => {
                let name = utf8(value(flag)?, flag)?;
                let Some(b) = Backend::from_name(name) else {
                    return Err(usage(format!(
                        "unknown --sandbox-backend {name} (expected seatbelt or bwrap)"
                    )));
                };
                set_once(&mut self.backend, b, flag)?;
            }
            flags::SANDBOX_PROFILE => {
                let p = PathBuf::from(value(flag)?);
                if !p.is_absolute() {
                    return Err(usage("--sandbox-profile must be an absolute path"));
                }
                set_once(&mut self.profile, p, flag)?;
            }
            flags::SANDBOX_LAUNCHER => {
                let p = value(flag)?;
                if p.is_empty() {
                    return Err(usage("--sandbox-launcher is empty"));
                }
                set_once(&mut self.launcher, PathBuf::from(p), flag)?;
            }
            flags::STATUS_FD => {
                let fd = fd_number(value(flag)?, flag)?;
                set_once(&mut self.status_fd, fd, flag)?;
            }
            flags::LANDLOCK_INHERITED => {
                let v = utf8(value(flag)?, flag)?;
                let port = v
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| usage(format!("{flag} {v} is not a port (1-65535)")))?;
                set_once(&mut self.landlock_inherited, port, flag)?;
            }
            flags::LANDLOCK_FD => {
                let fd = fd_number(value(flag)?, flag)?;
                set_once(&mut self.landlock_fd, fd, flag)?;
            }
            other => return Err(usage(format!("unknown flag {other}"))),
        }
        Ok(())
    }
}

/// The sandbox of `--sandbox-backend` and `--sandbox-profile`, which come together or
/// not at all; `--sandbox-launcher` only with them (without it, the backend's default).
fn sandbox(
    backend: Option<Backend>,
    profile: Option<PathBuf>,
    launcher: Option<PathBuf>,
) -> Result<Option<Sandbox>, UsageError> {
    match (backend, profile) {
        (Some(backend), Some(profile)) => Ok(Some(Sandbox {
            backend,
            profile,
            launcher: launcher.unwrap_or_else(|| PathBuf::from(backend.default_launcher())),
        })),
        (Some(_), None) => Err(usage("--sandbox-backend without --sandbox-profile")),
        (None, Some(_)) => Err(usage("--sandbox-profile without --sandbox-backend")),
        (None, None) => {
            if launcher.is_some() {
                return Err(usage("--sandbox-launcher without --sandbox-backend"));
            }
            Ok(None)
        }
    }
}

impl ExecArgs {
    /// No two descriptors the shim is given are one: the status fd is neither the
    /// token's (with `--pass-token`) nor the identity's (with `--identity`); the
    /// Landlock ruleset's is above the fd table (0-5) and not the status fd, and comes
    /// without `--landlock-inherited`.
    fn check_fds(&self) -> Result<(), UsageError> {
        if self.pass_token && self.status_fd == TOKEN_FD {
            return Err(usage(
                "--status-fd 5 collides with the token fd of --pass-token",
            ));
        }
        if self.identity && self.status_fd == IDENTITY_FD {
            return Err(usage(
                "--status-fd 3 collides with the identity fd of --identity",
            ));
        }
        if self.landlock_inherited.is_some() && self.landlock_fd.is_some() {
            return Err(usage("--landlock-inherited together with --landlock-fd"));
        }
        if let Some(fd) = self.landlock_fd {
            if fd <= TOKEN_FD {
                return Err(usage(format!(
                    "--landlock-fd {fd} collides with the fd table (0-5)"
                )));
            }
            if fd == self.status_fd {
                return Err(usage(format!(
                    "--landlock-fd {fd} collides with the status fd"
                )));
            }
        }
        Ok(())
    }

    /// The command line [`parse`] reads back as this (program name excluded): what the
    /// host runs the shim with.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec![flags::EXEC.into(), flags::SESSION_ID.into()];
        a.push(self.session_id.clone().into());
        if self.identity {
            a.push(flags::IDENTITY.into());
        }
        if self.pty {
            a.push(flags::PTY.into());
        }
        if let Some(sb) = &self.sandbox {
            a.push(flags::SANDBOX_BACKEND.into());
            a.push(sb.backend.as_str().into());
            a.push(flags::SANDBOX_PROFILE.into());
            a.push(sb.profile.clone().into());
            if sb.launcher.as_os_str() != sb.backend.default_launcher() {
                a.push(flags::SANDBOX_LAUNCHER.into());
                a.push(sb.launcher.clone().into());
            }
        }
        if self.status_fd != default_status_fd(self.identity) {
            a.push(flags::STATUS_FD.into());
            a.push(self.status_fd.to_string().into());
        }
        if self.pass_token {
            a.push(flags::PASS_TOKEN.into());
        }
        if let Some(fd) = self.landlock_fd {
            a.push(flags::LANDLOCK_FD.into());
            a.push(fd.to_string().into());
        }
        if let Some(port) = self.landlock_inherited {
            a.push(flags::LANDLOCK_INHERITED.into());
            a.push(port.to_string().into());
        }
        a.push(flags::ARGV.into());
        a.extend(self.argv.iter().cloned());
        a
    }
}

fn utf8<'a>(v: &'a OsStr, flag: &str) -> Result<&'a str, UsageError> {
    v.to_str()
        .ok_or_else(|| usage(format!("{flag} value is not UTF-8")))
}

fn fd_number(v: &OsStr, flag: &str) -> Result<RawFd, UsageError> {
    let text = utf8(v, flag)?;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(usage(format!("{flag} {text} is not a descriptor number")));
    }
    text.parse()
        .map_err(|_| usage(format!("{flag} {text} is not a descriptor number")))
}

fn set_once<T>(slot: &mut Option<T>, value: T, flag: &str) -> Result<(), UsageError> {
    if slot.is_some() {
        return Err(usage(format!("{flag} given twice")));
    }
    *slot = Some(value);
    Ok(())
}

fn set_flag(slot: &mut bool, flag: &str) -> Result<(), UsageError> {
    if *slot {
        return Err(usage(format!("{flag} given twice")));
    }
    *slot = true;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    fn exec(args: &[&str]) -> Result<ExecArgs, UsageError> {
        let mut full = vec!["exec"];
        full.extend_from_slice(args);
        match parse(&os(&full))? {
            Command::Exec(e) => Ok(e),
            Command::Version | Command::Enter { .. } | Command::Shield { .. } => {
                panic!("not exec")
            }
        }
    }

    fn refused(args: &[&str]) -> String {
        match exec(args) {
            Err(UsageError(what)) => what,
            Ok(e) => panic!("{args:?} was accepted: {e:?}"),
        }
    }

    #[test]
    fn minimal_exec_defaults() {
        let e = exec(&["--session-id", "s1", "--", "/bin/echo", "hi"]).unwrap();
        assert_eq!(
            e,
            ExecArgs {
                session_id: "s1".into(),
                identity: false,
                pty: false,
                sandbox: None,
                status_fd: 3,
                pass_token: false,
                landlock_fd: None,
                landlock_inherited: None,
                argv: os(&["/bin/echo", "hi"]),
            }
        );
    }

    #[test]
    fn identity_moves_default_status_fd_to_4() {
        let e = exec(&["--identity", "--session-id", "s", "--", "x"]).unwrap();
        assert!(e.identity);
        assert_eq!(e.status_fd, 4);
    }

    #[test]
    fn full_command_line() {
        let e = exec(&[
            "--session-id",
            "s",
            "--identity",
            "--pty",
            "--sandbox-backend",
            "bwrap",
            "--sandbox-profile",
            "/p/profile",
            "--sandbox-launcher",
            "/fake/bwrap",
            "--status-fd",
            "9",
            "--pass-token",
            "--landlock-fd",
            "6",
            "--",
            "claude",
            "--",
            "--flag",
        ])
        .unwrap();
        assert!(e.identity && e.pty && e.pass_token);
        assert_eq!(e.status_fd, 9);
        assert_eq!(e.landlock_fd, Some(6));
        assert_eq!(
            e.sandbox,
            Some(Sandbox {
                backend: Backend::Bwrap,
                profile: "/p/profile".into(),
                launcher: "/fake/bwrap".into(),
            })
        );
        assert_eq!(e.argv, os(&["claude", "--", "--flag"]));
    }

    #[test]
    fn to_args_reads_back_as_the_same_exec() {
        let full = ExecArgs {
            session_id: "s-1".into(),
            identity: true,
            pty: true,
            sandbox: Some(Sandbox {
                backend: Backend::Bwrap,
                profile: "/p/profile".into(),
                launcher: "/fake/bwrap".into(),
            }),
            status_fd: 9,
            pass_token: true,
            landlock_fd: Some(6),
            landlock_inherited: None,
            argv: os(&["claude", "--", "--flag"]),
        };
        let plain = ExecArgs {
            session_id: "--".into(),
            identity: false,
            pty: false,
            sandbox: Some(Sandbox {
                backend: Backend::Seatbelt,
                profile: "/p.sb".into(),
                launcher: Backend::Seatbelt.default_launcher().into(),
            }),
            status_fd: 3,
            pass_token: false,
            landlock_fd: None,
            landlock_inherited: Some(4850),
            argv: os(&["x"]),
        };
        for e in [full, plain] {
            assert_eq!(parse(&e.to_args()), Ok(Command::Exec(e.clone())));
        }
    }

    #[test]
    fn default_launchers() {
        let e = exec(&[
            "--session-id",
            "s",
            "--sandbox-backend",
            "seatbelt",
            "--sandbox-profile",
            "/p.sb",
            "--",
            "x",
        ])
        .unwrap();
        assert_eq!(
            e.sandbox.unwrap().launcher,
            PathBuf::from("/usr/bin/sandbox-exec")
        );
        let e = exec(&[
            "--sandbox-profile",
            "/p",
            "--sandbox-backend",
            "bwrap",
            "--session-id",
            "s",
            "--",
            "x",
        ])
        .unwrap();
        assert_eq!(e.sandbox.unwrap().launcher, PathBuf::from("/usr/bin/bwrap"));
    }

    #[test]
    fn version_and_subcommands() {
        assert_eq!(parse(&os(&["--version"])), Ok(Command::Version));
        assert!(parse(&os(&[])).is_err());
        assert!(parse(&os(&["run"])).is_err());
        assert!(parse(&os(&["--version", "x"])).is_err());
        assert!(parse(&os(&["--help"])).is_err());
    }

    #[test]
    fn shield_takes_the_whole_command_as_one_argument() {
        // What Claude Code runs for a prefix of `<shim> --shield`: the command it built,
        // quoted as one word.
        let command = "source snap.sh && eval 'git status' < /dev/null && pwd -P >| /tmp/x";
        assert_eq!(
            parse(&os(&["--shield", command])),
            Ok(Command::Shield {
                listen: vec![],
                command: command.into()
            })
        );
        // With the ports a template lets its tools listen on.
        assert_eq!(
            parse(&os(&["--shield-listen=3000,0,65535", command])),
            Ok(Command::Shield {
                listen: vec![3000, 0, 65535],
                command: command.into()
            })
        );
        for (list, bad) in [
            ("", ""),
            ("65536", "65536"),
            ("+80", "+80"),
            ("3000,", ""),
            ("80, 81", " 81"),
            ("80;id", "80;id"),
            ("-1", "-1"),
        ] {
            assert_eq!(
                parse(&os(&[&format!("--shield-listen={list}"), command])),
                Err(UsageError(format!(
                    "--shield-listen: {bad:?} is not a port number"
                ))),
                "{list:?}"
            );
        }
        for args in [
            &["--shield"][..],
            &["--shield", "a", "b"],
            &["--shield-listen=80"],
            &["--shield-listen=80", "a", "b"],
        ] {
            assert_eq!(
                parse(&os(args)),
                Err(UsageError(
                    "--shield takes one argument, the command".into()
                ))
            );
        }
    }

    /// Every case is refused, its message holding the wanted words.
    fn assert_refused(cases: &[(&[&str], &str)]) {
        for (args, want) in cases {
            let got = refused(args);
            assert!(got.contains(want), "{args:?}: got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn an_unknown_flag_a_missing_value_or_a_missing_part_is_refused() {
        assert_refused(&[
            (
                &["--bogus", "--session-id", "s", "--", "x"],
                "unknown flag --bogus",
            ),
            (&["--session-id"], "missing value for --session-id"),
            (
                &["--session-id", "s", "--status-fd"],
                "missing value for --status-fd",
            ),
            (
                &["--session-id", "s", "--landlock-fd"],
                "missing value for --landlock-fd",
            ),
            (&["--session-id", "s", "--sandbox-backend"], "missing value"),
            (&["--session-id", "s", "--sandbox-profile"], "missing value"),
            (
                &["--session-id", "s", "--sandbox-launcher"],
                "missing value",
            ),
            (&["--session-id", "s"], "missing --"),
            (&["--session-id", "s", "x"], "unknown flag x"),
            (&["--session-id", "s", "--"], "empty target argv"),
            (&["--", "x"], "--session-id is required"),
            (&["--session-id", "", "--", "x"], "--session-id is empty"),
        ]);
    }

    #[test]
    fn a_flag_given_twice_is_refused() {
        assert_refused(&[
            (
                &["--session-id", "a", "--session-id", "b", "--", "x"],
                "given twice",
            ),
            (
                &["--session-id", "s", "--pty", "--pty", "--", "x"],
                "given twice",
            ),
        ]);
    }

    #[test]
    fn a_sandbox_flag_without_its_partners_or_with_a_bad_value_is_refused() {
        assert_refused(&[
            (
                &["--session-id", "s", "--sandbox-backend", "bwrap", "--", "x"],
                "--sandbox-backend without --sandbox-profile",
            ),
            (
                &["--session-id", "s", "--sandbox-profile", "/p", "--", "x"],
                "--sandbox-profile without --sandbox-backend",
            ),
            (
                &["--session-id", "s", "--sandbox-launcher", "/l", "--", "x"],
                "--sandbox-launcher without --sandbox-backend",
            ),
            (
                &[
                    "--session-id",
                    "s",
                    "--sandbox-backend",
                    "docker",
                    "--sandbox-profile",
                    "/p",
                    "--",
                    "x",
                ],
                "unknown --sandbox-backend docker",
            ),
            (
                &[
                    "--session-id",
                    "s",
                    "--sandbox-backend",
                    "bwrap",
                    "--sandbox-profile",
                    "rel/p",
                    "--",
                    "x",
                ],
                "must be an absolute path",
            ),
            (
                &[
                    "--session-id",
                    "s",
                    "--sandbox-backend",
                    "bwrap",
                    "--sandbox-profile",
                    "",
                    "--",
                    "x",
                ],
                "must be an absolute path",
            ),
        ]);
    }

    #[test]
    fn a_descriptor_that_is_no_number_or_collides_is_refused() {
        assert_refused(&[
            (
                &[
                    "--session-id",
                    "s",
                    "--pass-token",
                    "--status-fd",
                    "5",
                    "--",
                    "x",
                ],
                "--status-fd 5 collides",
            ),
            (
                &[
                    "--session-id",
                    "s",
                    "--identity",
                    "--status-fd",
                    "3",
                    "--",
                    "x",
                ],
                "--status-fd 3 collides",
            ),
            (
                &["--session-id", "s", "--status-fd", "-1", "--", "x"],
                "not a descriptor number",
            ),
            (
                &["--session-id", "s", "--status-fd", "x", "--", "x"],
                "not a descriptor number",
            ),
            (
                &["--session-id", "s", "--status-fd", "", "--", "x"],
                "not a descriptor number",
            ),
            (
                &["--session-id", "s", "--status-fd", "99999999999", "--", "x"],
                "not a descriptor number",
            ),
            (
                &[
                    "--session-id",
                    "s",
                    "--status-fd",
                    "7",
                    "--landlock-fd",
                    "7",
                    "--",
                    "x",
                ],
                "--landlock-fd 7 collides with the status fd",
            ),
            (
                &["--session-id", "s", "--landlock-fd", "3", "--", "x"],
                "--landlock-fd 3 collides with the fd table",
            ),
        ]);
        for fd in 0..=5 {
            let fd = fd.to_string();
            let got = refused(&[
                "--session-id",
                "s",
                "--status-fd",
                "9",
                "--landlock-fd",
                &fd,
                "--",
                "x",
            ]);
            assert!(got.contains("collides with the fd table"), "{fd}: {got}");
        }
    }

    #[test]
    fn collisions_that_are_allowed() {
        // fd 5 is free for status without the token, fd 3 without identity.
        assert_eq!(
            exec(&["--session-id", "s", "--status-fd", "5", "--", "x"])
                .unwrap()
                .status_fd,
            5
        );
        assert_eq!(
            exec(&[
                "--session-id",
                "s",
                "--identity",
                "--status-fd",
                "5",
                "--",
                "x"
            ])
            .unwrap()
            .status_fd,
            5
        );
        assert_eq!(
            exec(&["--session-id", "s", "--status-fd", "1", "--", "x"])
                .unwrap()
                .status_fd,
            1
        );
        // The default status fd (3) and identity's default (4) do not collide with 6.
        assert_eq!(
            exec(&["--session-id", "s", "--landlock-fd", "6", "--", "x"])
                .unwrap()
                .landlock_fd,
            Some(6)
        );
    }

    #[test]
    fn landlock_inherited_excludes_a_ruleset_fd() {
        assert!(
            exec(&[
                "--session-id",
                "s",
                "--landlock-inherited",
                "4850",
                "--",
                "x"
            ])
            .unwrap()
            .landlock_inherited
                == Some(4850)
        );
        assert_eq!(
            refused(&[
                "--session-id",
                "s",
                "--landlock-inherited",
                "4850",
                "--landlock-fd",
                "6",
                "--",
                "x"
            ]),
            "--landlock-inherited together with --landlock-fd"
        );
        assert_eq!(
            refused(&[
                "--session-id",
                "s",
                "--landlock-inherited",
                "1",
                "--landlock-inherited",
                "2",
                "--",
                "x"
            ]),
            "--landlock-inherited given twice"
        );
        for bad in ["0", "65536", "x", ""] {
            assert_eq!(
                refused(&["--session-id", "s", "--landlock-inherited", bad, "--", "x"]),
                format!("--landlock-inherited {bad} is not a port (1-65535)")
            );
        }
    }

    #[test]
    fn non_utf8_target_arguments_are_kept() {
        use std::os::unix::ffi::OsStringExt;
        let raw = OsString::from_vec(vec![b'a', 0xff]);
        let mut args = os(&["exec", "--session-id", "s", "--", "x"]);
        args.push(raw.clone());
        match parse(&args).unwrap() {
            Command::Exec(e) => assert_eq!(e.argv[1], raw),
            Command::Version | Command::Enter { .. } | Command::Shield { .. } => unreachable!(),
        }
    }
}

/// Property tests (docs/testing.md#fuzzing): `cargo test -p relay-shim --lib cli::fuzz`.
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;
    use std::os::unix::ffi::OsStringExt;

    /// One argument: a real flag, a number, a path, `--`, or any bytes.
    fn arg() -> impl Strategy<Value = OsString> {
        prop_oneof![
            prop::sample::select(vec![
                "exec",
                "enter",
                "--version",
                "--shield",
                "--shield-listen=80",
                "--session-id",
                "--identity",
                "--pty",
                "--sandbox-backend",
                "--sandbox-profile",
                "--sandbox-launcher",
                "--status-fd",
                "--pass-token",
                "--landlock-fd",
                "--landlock-inherited",
                "--",
                "bwrap",
                "seatbelt",
                "3",
                "4",
                "5",
                "6",
                "7",
                "-1",
                "/p",
                "rel",
                "",
            ])
            .prop_map(OsString::from),
            proptest::collection::vec(any::<u8>(), 0..12).prop_map(OsString::from_vec),
        ]
    }

    /// Every documented rule of an accepted command line (docs/session-host.md#relay-shim).
    fn keeps_the_rules(args: &[OsString]) -> Result<(), TestCaseError> {
        match parse(args) {
            Ok(Command::Exec(a)) => {
                prop_assert!(!a.argv.is_empty());
                prop_assert!(!a.session_id.is_empty());
                prop_assert!(a.status_fd >= 0);
                if a.pass_token {
                    prop_assert_ne!(a.status_fd, 5);
                }
                if a.identity {
                    prop_assert_ne!(a.status_fd, 3);
                }
                if let Some(fd) = a.landlock_fd {
                    prop_assert!(fd > 5 && fd != a.status_fd);
                    prop_assert!(a.landlock_inherited.is_none());
                }
                if let Some(sb) = &a.sandbox {
                    prop_assert!(sb.profile.is_absolute());
                    prop_assert!(!sb.launcher.as_os_str().is_empty());
                }
                // The target's argv is the rest of the line after a `--` (not a flag's
                // value), kept byte for byte.
                prop_assert!(args.ends_with(&a.argv));
                prop_assert_eq!(&args[args.len() - a.argv.len() - 1], "--");
                // What the host writes for it reads back as the same (`to_args`).
                prop_assert_eq!(parse(&a.to_args()), Ok(Command::Exec(a.clone())));
            }
            Ok(Command::Enter { pty, argv }) => {
                prop_assert_eq!(&argv[..], &args[2 + usize::from(pty)..]);
                prop_assert!(!argv.is_empty());
            }
            Ok(Command::Version) => prop_assert_eq!(args.len(), 1),
            Ok(Command::Shield { listen, command }) => {
                prop_assert_eq!(args.len(), 2);
                prop_assert_eq!(&command, &args[1]);
                // Ports only with the flag that lists them (at least one).
                let flag = args[0].to_str().unwrap_or_default();
                prop_assert_eq!(listen.is_empty(), flag == flags::SHIELD);
            }
            Err(_) => {}
        }
        Ok(())
    }

    /// `exec`, some flags each with a value drawn like any argument, `--`, an argv.
    fn exec_line() -> impl Strategy<Value = Vec<OsString>> {
        let flag = prop_oneof![
            arg().prop_map(|v| vec![OsString::from("--session-id"), v]),
            Just(vec![OsString::from("--identity")]),
            Just(vec![OsString::from("--pty")]),
            Just(vec![OsString::from("--pass-token")]),
            arg().prop_map(|v| vec![OsString::from("--landlock-inherited"), v]),
            arg().prop_map(|v| vec![OsString::from("--sandbox-backend"), v]),
            arg().prop_map(|v| vec![OsString::from("--sandbox-profile"), v]),
            arg().prop_map(|v| vec![OsString::from("--sandbox-launcher"), v]),
            arg().prop_map(|v| vec![OsString::from("--status-fd"), v]),
            arg().prop_map(|v| vec![OsString::from("--landlock-fd"), v]),
        ];
        (
            proptest::collection::vec(flag, 0..8),
            proptest::collection::vec(arg(), 0..4),
        )
            .prop_map(|(flags, argv)| {
                let mut line = vec![OsString::from("exec")];
                line.extend(flags.into_iter().flatten());
                line.push(OsString::from("--"));
                line.extend(argv);
                line
            })
    }

    proptest! {
        /// Any command line: a command or a usage error, never a panic.
        #[test]
        fn any_command_line_is_parsed_or_refused(
            args in proptest::collection::vec(arg(), 0..14),
        ) {
            keeps_the_rules(&args)?;
        }

        /// Lines shaped like the host's: what is accepted keeps every rule.
        #[test]
        fn an_accepted_exec_line_keeps_every_rule(args in exec_line()) {
            keeps_the_rules(&args)?;
        }
    }
}
