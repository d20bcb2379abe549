//! A launch's environment, built in one place: the template's names, and over them
//! relay's own (`TMPDIR`, Claude's config folder, a token launch's home, the proxy, a
//! token launch's `PATH` and shield). `relay sandbox explain` shows the same names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::authorize::Decision;
use super::facts::Facts;
use super::{guard, shield};
use crate::daemon::egress::Rules;
use crate::protocol::Backend;
use crate::sandbox::Network;

/// The template's `env`, and over it `TMPDIR`, and for a sandboxed Claude launch
/// (`claude_dir`) its config folder and `IS_SANDBOX`.
pub fn relay_env(
    template_env: &BTreeMap<String, String>,
    temp_dir: &Path,
    claude_dir: Option<PathBuf>,
) -> BTreeMap<String, String> {
    let mut env = template_env.clone();
    env.insert("TMPDIR".into(), temp_dir.to_string_lossy().into_owned());
    if let Some(dir) = claude_dir {
        env.insert(
            "CLAUDE_CONFIG_DIR".into(),
            dir.to_string_lossy().into_owned(),
        );
        // Claude Code refuses `bypassPermissions` as root unless told it is sandboxed; it
        // is (docs/session-host.md, "claude (provider) sessions").
        env.insert("IS_SANDBOX".into(), "1".into());
    }
    env
}

/// The names that point a token launch's programs at its home of relay's, `home`.
pub fn home_env(home: &Path) -> BTreeMap<String, String> {
    let home_text = home.to_string_lossy().into_owned();
    BTreeMap::from([
        ("HOME".to_string(), home_text.clone()),
        (
            "XDG_CONFIG_HOME".to_string(),
            format!("{home_text}/.config"),
        ),
        (
            "GIT_CONFIG_GLOBAL".to_string(),
            format!("{home_text}/.gitconfig"),
        ),
        ("GIT_CONFIG_NOSYSTEM".to_string(), "1".to_string()),
        ("GIT_ATTR_NOSYSTEM".to_string(), "1".to_string()),
    ])
}

/// What a sandbox adds: the proxy's variables, and for a token launch its `PATH` and
/// its shield, which is returned.
pub fn sandbox_env(
    env: &mut BTreeMap<String, String>,
    decision: &Decision,
    f: &Facts,
    backend: Backend,
    (network, egress): (&Network, Option<&Rules>),
    (writable, pins): (&[PathBuf], &[PathBuf]),
    tools: &[super::toolchains::Toolchain],
) -> Option<shield::Shielded> {
    if let Some(rules) = egress {
        env.extend(super::proxy_env(network, rules));
        if decision.claude_launch {
            // Claude Code's telemetry and update checks would only be refused.
            env.entry("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into())
                .or_insert_with(|| "1".into());
        }
    }
    if !decision.token.pass {
        return None;
    }
    // What Claude Code runs by name (`git` at once) comes from folders no session can
    // write, or pinned ones.
    let path = guard::token_launch_path(&decision.launch_path_env, writable, pins);
    env.insert("PATH".into(), path.to_string_lossy().into_owned());
    // Its `HOME` is relay's: rustup and pyenv are told where the person's roots are.
    for (name, root) in super::toolchains::env(tools) {
        env.entry(name).or_insert(root);
    }
    // And what it runs for its tools runs where none can read its memory. The ports
    // its tools may never listen on: the forwarder's, the gateway's.
    let reserved = shield::reserved_ports(egress, &decision.template.env, &f.relay_routing());
    Some(shield::apply(
        backend,
        f.shim.as_deref().map_err(String::as_str),
        (&decision.template.listen_ports, &reserved),
        env,
    ))
}
