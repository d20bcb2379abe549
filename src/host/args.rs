//! The command line of `relay-sessions`, parsed here and built by the daemon from the
//! same struct ([`HostArgs::to_args`]), so the two sides cannot drift
//! ([session-host.md](../../docs/session-host.md)).

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::LazyLock;

use clap::{CommandFactory, FromArgMatches, Parser};

/// `relay-sessions --version`: its version and the protocol it speaks.
static VERSION: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{} (protocol {})",
        env!("CARGO_PKG_VERSION"),
        crate::protocol::HOST_PROTOCOL_VERSION
    )
});

#[derive(Parser, Debug, Clone, PartialEq, Eq)]
#[command(
    name = "relay-sessions",
    about = "relay's session host, started and supervised by `relay serve`"
)]
pub struct HostArgs {
    /// The host's state folder (absolute): host.sock and the session logs.
    #[arg(long, value_name = "DIR", value_parser = absolute_path)]
    pub state_dir: PathBuf,
    /// The descriptor the bearer secret arrives on (read to EOF, then closed).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(0..))]
    pub secret_fd: i32,
    /// The relay-shim binary (default: `relay-shim` beside this program).
    #[arg(long, value_name = "PATH")]
    pub shim: Option<PathBuf>,
    /// An open descriptor of that binary, the file the daemon checked at its start: the
    /// host runs the shim through it, never by path (src/helpers.rs).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(0..))]
    pub shim_fd: Option<i32>,
    /// The daemon's bridge socket, where each shim says Hello.
    #[arg(long, value_name = "PATH")]
    pub bridge_socket: Option<PathBuf>,
    /// The log filter: a level or `target=level` pairs (default: $RUST_LOG, else info).
    #[arg(long, value_name = "FILTER", value_parser = log_filter)]
    pub log_level: Option<String>,
}

fn log_filter(s: &str) -> Result<String, String> {
    crate::logging::parse_level(s).map(|_| s.to_string())
}

fn absolute_path(s: &str) -> Result<PathBuf, String> {
    let p = PathBuf::from(s);
    if p.is_absolute() {
        Ok(p)
    } else {
        Err("must be absolute".into())
    }
}

impl HostArgs {
    /// The argv (after the program name) that [`HostArgs::parse_from_args`] reads back
    /// as `self`.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec![
            "--state-dir".into(),
            self.state_dir.clone().into(),
            "--secret-fd".into(),
            self.secret_fd.to_string().into(),
        ];
        if let Some(shim) = &self.shim {
            a.extend(["--shim".into(), shim.clone().into()]);
        }
        if let Some(fd) = self.shim_fd {
            a.extend(["--shim-fd".into(), fd.to_string().into()]);
        }
        if let Some(bridge) = &self.bridge_socket {
            a.extend(["--bridge-socket".into(), bridge.clone().into()]);
        }
        if let Some(level) = &self.log_level {
            a.extend(["--log-level".into(), level.into()]);
        }
        a
    }

    /// The command tree, with `--version` naming the protocol too.
    pub fn command() -> clap::Command {
        <Self as CommandFactory>::command().version(VERSION.as_str())
    }

    /// Parses `relay-sessions ARGS…` (the program name first, as `std::env::args_os`).
    pub fn parse_from_args<I, T>(argv: I) -> Result<HostArgs, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let m = Self::command().try_get_matches_from(argv)?;
        Self::from_arg_matches(&m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<HostArgs, String> {
        HostArgs::parse_from_args(std::iter::once("relay-sessions").chain(args.iter().copied()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn what_the_daemon_builds_reads_back_the_same() {
        let full = HostArgs {
            state_dir: "/home/ada/.config/relay/sessions".into(),
            secret_fd: 7,
            shim: Some("/opt/relay/relay-shim".into()),
            shim_fd: Some(9),
            bridge_socket: Some("/home/ada/.config/relay/bridge.sock".into()),
            log_level: Some("relay::host=debug,info".into()),
        };
        let bare = HostArgs {
            shim: None,
            shim_fd: None,
            bridge_socket: None,
            log_level: None,
            secret_fd: 0,
            ..full.clone()
        };
        for a in [full, bare] {
            let argv = std::iter::once(OsString::from("relay-sessions")).chain(a.to_args());
            assert_eq!(HostArgs::parse_from_args(argv).unwrap(), a);
        }
    }

    #[test]
    fn a_bad_command_line_is_refused() {
        assert!(parse(&["--secret-fd", "3"])
            .unwrap_err()
            .contains("--state-dir"));
        assert!(parse(&["--state-dir", "/s"])
            .unwrap_err()
            .contains("--secret-fd"));
        assert!(parse(&["--state-dir", "rel", "--secret-fd", "3"])
            .unwrap_err()
            .contains("must be absolute"));
        assert!(parse(&["--state-dir", "/s", "--secret-fd", "-1"]).is_err());
        assert!(parse(&["--state-dir", "/s", "--secret-fd", "x"]).is_err());
        assert!(parse(&["--state-dir", "/s", "--secret-fd", "3", "--other"]).is_err());
        assert!(parse(&[
            "--state-dir",
            "/s",
            "--secret-fd",
            "3",
            "--log-level",
            "loud"
        ])
        .is_err());
    }

    #[test]
    fn version_names_the_protocol() {
        let e = parse(&["--version"]).unwrap_err();
        assert_eq!(
            e.trim(),
            format!(
                "relay-sessions {} (protocol {})",
                env!("CARGO_PKG_VERSION"),
                crate::protocol::HOST_PROTOCOL_VERSION
            )
        );
    }
}
