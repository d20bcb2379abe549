//! Where relay keeps its files. Everything lives in the config dir, which every sandbox
//! profile denies.

use std::path::PathBuf;

/// The user's home: `$HOME`, or the account's home when `HOME` is unset or empty (the
/// `directories` crate's rule, so `~` and the default config dir always agree).
pub fn home_dir() -> Option<PathBuf> {
    directories::BaseDirs::new().map(|b| b.home_dir().to_path_buf())
}

/// The platform's config dir for relay, as the `directories` crate names it:
/// `~/Library/Application Support/relay` on macOS; `$XDG_CONFIG_HOME/relay` when that
/// is an absolute path, else `~/.config/relay`, on Linux.
pub fn default_config_dir() -> Option<PathBuf> {
    directories::BaseDirs::new().map(|b| b.config_dir().join("relay"))
}

#[derive(Clone, Debug)]
pub struct Paths {
    pub config: PathBuf,
}

impl Paths {
    pub fn settings(&self) -> PathBuf {
        self.config.join(super::settings::FILE_NAME)
    }
    pub fn socket(&self) -> PathBuf {
        self.config.join("relay.sock")
    }
    pub fn bridge(&self) -> PathBuf {
        self.config.join("bridge.sock")
    }
    pub fn api_token(&self) -> PathBuf {
        self.config.join("api-token")
    }
    pub fn ready(&self) -> PathBuf {
        self.config.join("ready.json")
    }
    pub fn audit(&self) -> PathBuf {
        self.config.join("audit.jsonl")
    }
    pub fn events(&self) -> PathBuf {
        self.config.join("events.jsonl")
    }
    /// The folders relay made for bwrap to hold (`records::made_folders`).
    pub fn made_folders(&self) -> PathBuf {
        self.config.join("made-folders.json")
    }
    pub fn host_state(&self) -> PathBuf {
        self.config.join("sessions")
    }
    pub fn host_socket(&self) -> PathBuf {
        self.host_state().join("host.sock")
    }
    /// The empty mode-0000 file bwrap binds over every denied file.
    pub fn mask(&self) -> PathBuf {
        self.config.join("mask")
    }
    pub fn profiles(&self) -> PathBuf {
        self.config.join("profiles")
    }
    /// Each proxied session's egress socket (`<id>.sock`), bound into its sandbox
    /// (src/daemon/egress/mod.rs).
    pub fn egress(&self) -> PathBuf {
        self.config.join("egress")
    }
    /// The last `relay doctor`'s probes, kept for the Settings page across restarts
    /// (`diagnostics::last_probes`).
    pub fn doctor_probes(&self) -> PathBuf {
        self.config.join("doctor-probes.json")
    }
    /// The daemon's log, written through `tracing` and capped (src/logging.rs,
    /// docs/architecture.md#logs).
    pub fn log(&self) -> PathBuf {
        self.config.join("relay.log")
    }

    /// What a login service's `relay serve` prints (stdout and stderr), appended by
    /// the service manager: panics and anything printed before the log is open
    /// (docs/cli.md#relay-service). The log itself is [`Self::log`].
    pub fn output(&self) -> PathBuf {
        self.config.join("relay.out")
    }
}
