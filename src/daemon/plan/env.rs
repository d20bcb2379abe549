//! A launch's environment, built in one place: the template's names, and over them
//! relay's own (`TMPDIR`, Claude's config folder, a token launch's home, a sandbox's own
//! caches, the proxy, a token launch's `PATH` and shield). `relay sandbox explain` shows the same names.

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

/// Where package managers keep their caches and state in a sandbox: a folder of the
/// session's own (`<temp>/cache/…`), kept across its resumes and gone with it. The
/// person's own caches (`~/.npm`, `~/.cargo/registry`, `~/.cache`) are read outside
/// every sandbox by the person's tools, which build and run what they hold, so no
/// session writes them (they are on the execution-bearing list); and no launch reads a
/// cache another session wrote (docs/settings.md#caches). Each is the tool's own name
/// for its folder, with the tools that read it.
pub const CACHES: &[(&str, &str, &str)] = &[
    ("npm_config_cache", "cache/npm", "npm, npx"),
    ("PNPM_HOME", "cache/pnpm", "pnpm's store and global folder"),
    ("YARN_CACHE_FOLDER", "cache/yarn", "yarn"),
    ("BUN_INSTALL_CACHE_DIR", "cache/bun", "bun"),
    ("PIP_CACHE_DIR", "cache/pip", "pip"),
    ("UV_CACHE_DIR", "cache/uv", "uv"),
    ("GOMODCACHE", "cache/go-mod", "go's modules"),
    ("GOCACHE", "cache/go-build", "go's build cache"),
    (
        "CARGO_HOME",
        "cache/cargo",
        "cargo's registry, git checkouts, installs and its own config.toml",
    ),
];

/// The cache of every other tool that follows the XDG layout (node-gyp, deno, yarn 2+):
/// given to launches without the token only. Claude Code reads it too, for its
/// updater's staging folder among others, so in a token launch it stays in relay's
/// read-only home, where no tool of the launch can plant anything for Claude.
pub const XDG_CACHE: (&str, &str) = ("XDG_CACHE_HOME", "cache");

/// The [`CACHES`] of a launch whose temp folder is `temp` (and [`XDG_CACHE`] unless it
/// gets the token), under the names the template has not set itself. A token launch
/// also turns Claude Code's updater off: it runs `npm install -g` as Claude's own
/// child, outside the shield, with a cache the launch's tools can write.
pub fn cache_env(env: &mut BTreeMap<String, String>, temp: &Path, token_launch: bool) {
    let xdg = (!token_launch).then_some(XDG_CACHE);
    for (name, folder) in CACHES.iter().map(|(n, f, _)| (*n, *f)).chain(xdg) {
        let path = temp.join(folder).to_string_lossy().into_owned();
        env.entry(name.to_string()).or_insert(path);
    }
    if token_launch {
        env.insert("DISABLE_AUTOUPDATER".into(), "1".into());
    }
}

/// What a proxied Claude launch is told not to try, each of which its proxy would only
/// refuse (a red `egress` row at every start): its telemetry, error reports and update
/// checks (`CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC`, which also turns off `/bug`);
/// and the install of Anthropic's official plugin marketplace, which that one leaves on
/// (a fetch from `downloads.claude.ai`, then a clone from `github.com`, some 20 s after
/// the start; `/plugin marketplace add` still works where the egress list allows it).
pub const CLAUDE_QUIET: &[&str] = &[
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL",
];

/// Sets each of [`CLAUDE_QUIET`] to `1`, unless the template sets it itself.
pub fn quiet_claude(env: &mut BTreeMap<String, String>) {
    for name in CLAUDE_QUIET {
        env.entry(name.to_string()).or_insert_with(|| "1".into());
    }
}

/// What a sandbox adds: the session's own caches, the proxy's variables, and for a
/// token launch its `PATH` and its shield, which is returned.
pub fn sandbox_env(
    env: &mut BTreeMap<String, String>,
    decision: &Decision,
    f: &Facts,
    backend: Backend,
    (network, egress): (&Network, Option<&Rules>),
    (writable, pins): (&[PathBuf], &[PathBuf]),
    tools: &[super::toolchains::Toolchain],
) -> Option<shield::Shielded> {
    cache_env(env, &f.names.temp_dir, decision.token.pass);
    if let Some(rules) = egress {
        env.extend(super::proxy_env(network, rules));
        if decision.claude_launch {
            quiet_claude(env);
        }
    }
    // rustup and pyenv are told where the person's roots are: a token launch's `HOME`
    // is relay's, and a root the person keeps elsewhere (`RUSTUP_HOME` set for relay)
    // is not where `HOME` says in any sandbox.
    for (name, root) in super::toolchains::env(tools) {
        env.entry(name).or_insert(root);
    }
    if !decision.token.pass {
        return None;
    }
    // What Claude Code runs by name (`git` at once) comes from folders no session can
    // write, or pinned ones.
    let path = guard::token_launch_path(&decision.launch_path_env, writable, pins);
    env.insert("PATH".into(), path.to_string_lossy().into_owned());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cache_lies_in_the_sessions_folder_unless_the_template_names_it() {
        let mut env = BTreeMap::from([("npm_config_cache".to_string(), "/shared".to_string())]);
        cache_env(&mut env, Path::new("/tmp/relay-1"), false);
        assert_eq!(env["npm_config_cache"], "/shared");
        assert_eq!(env["XDG_CACHE_HOME"], "/tmp/relay-1/cache");
        assert_eq!(env["CARGO_HOME"], "/tmp/relay-1/cache/cargo");
        assert_eq!(env.len(), CACHES.len() + 1);
        for (name, folder, _) in CACHES {
            assert!(
                name == &"npm_config_cache" || env[*name] == format!("/tmp/relay-1/{folder}"),
                "{name}"
            );
        }
        assert!(!env.contains_key("DISABLE_AUTOUPDATER"));
    }

    #[test]
    fn a_proxied_claude_launch_tries_neither_telemetry_nor_the_plugin_marketplace() {
        let mut env = BTreeMap::from([(
            "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL".to_string(),
            "0".to_string(),
        )]);
        quiet_claude(&mut env);
        assert_eq!(env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"], "1");
        // The template's own value wins.
        assert_eq!(
            env["CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL"],
            "0"
        );
        assert_eq!(env.len(), CLAUDE_QUIET.len());
    }

    #[test]
    fn a_token_launch_keeps_claudes_own_cache_in_relays_home_and_no_updater() {
        let mut env = BTreeMap::from([("DISABLE_AUTOUPDATER".to_string(), "0".to_string())]);
        cache_env(&mut env, Path::new("/tmp/relay-1"), true);
        assert!(!env.contains_key("XDG_CACHE_HOME"), "{env:?}");
        assert_eq!(env["PIP_CACHE_DIR"], "/tmp/relay-1/cache/pip");
        // Whatever the template says.
        assert_eq!(env["DISABLE_AUTOUPDATER"], "1");
    }
}
