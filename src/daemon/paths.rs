//! Where relay keeps its files. Everything lives in the config dir, which every sandbox
//! profile denies.

use std::path::{Path, PathBuf};

pub fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// The platform's config dir for relay: `~/Library/Application Support/relay` on
/// macOS, `$XDG_CONFIG_HOME/relay` or `~/.config/relay` elsewhere.
pub fn default_config_dir() -> Option<PathBuf> {
    let home = home_dir()?;
    if cfg!(target_os = "macos") {
        return Some(home.join("Library/Application Support/relay"));
    }
    match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(x) if Path::new(&x).is_absolute() => Some(PathBuf::from(x).join("relay")),
        _ => Some(home.join(".config/relay")),
    }
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
}
