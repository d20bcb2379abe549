//! The environment a session's shim (and so its target) receives
//! ([session-host.md](../../docs/session-host.md#what-a-child-inherits)).
//!
//! Order, later wins: `relay serve`'s environment (sent with each launch request; the
//! host itself runs with none of it) minus relay's credentials and the
//! launching Claude Code session's variables — for a sandboxed launch only an allowlist
//! of it (the base names, the routing names and the settings' `env_passthrough`); the
//! template's `env`; the host's names; on a token launch, every other way of signing in
//! removed and the token descriptor variable set last, so relay's value beats a
//! template's. What routes the traffic (the API's address, proxies, certificate
//! authorities) is the person's and stays.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::path::Path;

use crate::protocol::{Routing, TOKEN_FD_VAR};

/// Names a launching Claude Code session leaves behind, removed from the base (but the
/// routing names among them, which are the person's network).
fn is_claude_session_var(name: &str) -> bool {
    matches!(name, "CLAUDECODE" | "CLAUDE_PID" | "CLAUDE_EFFORT")
        || name.starts_with("CLAUDE_CODE_")
}

/// Relay's own names (secrets, sockets of the daemon) never flow from the base.
fn is_relay_var(name: &str) -> bool {
    name.starts_with("RELAY_")
}

/// What *routes* Claude Code's traffic: the API's address, proxies, certificate
/// authorities and client certificates. They are the person's network, so a token
/// launch keeps them from relay's environment and from the template, and its event and
/// audit row name the ones in effect (docs/session-host.md, "What a child inherits").
pub const ROUTING: &[&str] = &[
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_UNIX_SOCKET",
    "CLAUDE_CODE_API_BASE_URL",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "CLAUDE_CODE_HTTP_PROXY",
    "CLAUDE_CODE_HTTPS_PROXY",
    "CLAUDE_CODE_PROXY_URL",
    "NODE_USE_ENV_PROXY",
    "NODE_EXTRA_CA_CERTS",
    "NODE_TLS_REJECT_UNAUTHORIZED",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "CLAUDE_CODE_CLIENT_CERT",
    "CLAUDE_CODE_CLIENT_KEY",
    "CLAUDE_CODE_CLIENT_KEY_PASSPHRASE",
];

pub fn is_routing(name: &str) -> bool {
    ROUTING.contains(&name)
}

/// On a token launch these would sign Claude Code in some other way than the token on
/// fd 5 (another credential, or another provider that ignores it); removed from every
/// source, even when a template sets them. Besides these names: every `ANTHROPIC_*` or
/// `CLAUDE_CODE_*` name ending in `_TOKEN`, `_TOKEN_FILE`, `_FILE_DESCRIPTOR`,
/// `_API_KEY` or `_SECRET` ([`is_sign_in`]).
pub const SIGN_IN: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_REFRESH_TOKEN",
    "CLAUDE_CODE_API_KEY_FILE_DESCRIPTOR",
    "CLAUDE_CODE_HOST_CREDS_FILE",
    "CLAUDE_CODE_HOST_AUTH_ENV_VAR",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "CLAUDE_CODE_USE_FOUNDRY",
    "CLAUDE_CODE_USE_MANTLE",
    "CLAUDE_CODE_USE_GATEWAY",
    "CLAUDE_CODE_USE_ANTHROPIC_AWS",
    "CLAUDE_CODE_USE_ANTHROPIC_GOOGLE_CLOUD",
    "AWS_BEARER_TOKEN_BEDROCK",
];

/// Whether a token launch removes `name` ([`SIGN_IN`] and the credential patterns).
pub fn is_sign_in(name: &str) -> bool {
    if is_routing(name) {
        return false;
    }
    SIGN_IN.contains(&name)
        || ((name.starts_with("ANTHROPIC_") || name.starts_with("CLAUDE_CODE_"))
            && [
                "_TOKEN",
                "_TOKEN_FILE",
                "_FILE_DESCRIPTOR",
                "_API_KEY",
                "_SECRET",
            ]
            .iter()
            .any(|s| name.ends_with(s)))
}

/// What a sandboxed target takes from relay's environment besides the routing names
/// and `env_passthrough`: what a shell and the tools it runs need to find programs and
/// the home, name the user, draw the terminal and speak the person's language and time
/// zone. `TMPDIR` is relay's own anyway (the session's temp folder). Every other name —
/// `GITHUB_TOKEN`, `AWS_SECRET_ACCESS_KEY`, whatever the shell that started relay
/// exported — stays out of a sandbox unless the settings pass it through
/// (docs/settings.md#env_passthrough).
pub const BASE: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "COLORTERM",
    "LANG",
    "TZ",
    "TMPDIR",
];

/// Besides [`BASE`]: the locale's categories, `LC_*` (`LC_ALL`, `LC_CTYPE`, …).
pub const BASE_PREFIX: &str = "LC_";

pub fn is_base(name: &str) -> bool {
    BASE.contains(&name) || name.starts_with(BASE_PREFIX)
}

/// An `env_passthrough` entry: an exact name, or a prefix followed by one `*` as its
/// last character (`AWS_*`). The prefix must be a usable name of its own: a lone `*`,
/// which would pass everything, is not an entry.
pub fn valid_pattern(pattern: &str) -> bool {
    let name = pattern.strip_suffix('*').unwrap_or(pattern);
    valid_name(name) && !name.contains('*')
}

/// Whether `name` is one that `pattern` ([`valid_pattern`]) passes through.
pub fn pattern_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
}

pub struct EnvInput<'a> {
    /// `relay serve`'s environment, from the launch request (`LaunchRequest::base_env`).
    pub base: Vec<(OsString, OsString)>,
    pub template: &'a BTreeMap<String, String>,
    pub host_names: Vec<(String, String)>,
    pub token_launch: bool,
    /// A sandboxed launch: of `base`, only the [`BASE`] names, the [`ROUTING`] names and
    /// those these `env_passthrough` patterns match. `None` (an unsandboxed launch):
    /// all of it but relay's scrub.
    pub allowlist: Option<&'a [String]>,
    /// A pty session: `TERM` gets a default when nothing set it.
    pub pty: bool,
}

/// The environment [`build`] made.
#[derive(Debug, Default)]
pub struct Built {
    pub vars: BTreeMap<OsString, OsString>,
    /// The names whose value came from `base` (relay's environment) and were not
    /// replaced or removed by a later step, sorted: what the audit row names.
    pub inherited: Vec<String>,
}

pub fn build(input: EnvInput<'_>) -> Built {
    let mut env: BTreeMap<OsString, OsString> = BTreeMap::new();
    let mut inherited: BTreeSet<String> = BTreeSet::new();
    for (name, value) in input.base {
        let Some(n) = name.to_str() else { continue };
        // The scrub holds for every launch, so no passthrough brings these back.
        let scrubbed = is_relay_var(n) || (is_claude_session_var(n) && !is_routing(n));
        let allowed = match input.allowlist {
            None => true,
            Some(patterns) => {
                is_base(n) || is_routing(n) || patterns.iter().any(|p| pattern_matches(p, n))
            }
        };
        if !scrubbed && allowed {
            inherited.insert(n.to_string());
            env.insert(name, value);
        }
    }
    for (name, value) in input.template {
        inherited.remove(name.as_str());
        env.insert(name.into(), value.into());
    }
    for (name, value) in input.host_names {
        inherited.remove(name.as_str());
        env.insert(name.into(), value.into());
    }
    if input.token_launch {
        env.retain(|name, _| name.to_str().is_none_or(|n| !is_sign_in(n)));
        inherited.retain(|n| !is_sign_in(n));
        env.insert(
            TOKEN_FD_VAR.into(),
            relay_shim::fds::TOKEN_FD.to_string().into(),
        );
    }
    if input.pty && !env.contains_key(OsStr::new("TERM")) {
        env.insert("TERM".into(), "xterm-256color".into());
    }
    Built {
        vars: env,
        inherited: inherited.into_iter().collect(),
    }
}

/// The names the host sets in every session: its id, and the bridge socket the shim says
/// Hello on (when the host was given one).
pub fn host_names(session_id: &str, bridge_socket: Option<&Path>) -> Vec<(String, String)> {
    let mut names = vec![("RELAY_SESSION_ID".to_string(), session_id.to_string())];
    if let Some(b) = bridge_socket {
        names.push((
            "RELAY_BRIDGE_SOCKET".to_string(),
            b.to_string_lossy().into_owned(),
        ));
    }
    names
}

/// The routing variables in effect in `env`: their names, and for
/// `ANTHROPIC_BASE_URL` the host (and port) it sends the token to.
pub fn routing(env: &BTreeMap<OsString, OsString>) -> Routing {
    let mut names: Vec<String> = env
        .keys()
        .filter_map(|k| k.to_str())
        .filter(|k| is_routing(k))
        .map(str::to_string)
        .collect();
    names.sort();
    let anthropic_base_url_host = env
        .get(OsStr::new("ANTHROPIC_BASE_URL"))
        .map(|v| url_host(&v.to_string_lossy()));
    Routing {
        names,
        anthropic_base_url_host,
    }
}

/// `host[:port]` of a URL: no scheme, user info, path, query or fragment (those can
/// hold secrets of their own). A value that is not a URL reads `(not a URL)`.
pub fn url_host(url: &str) -> String {
    let Some((_, rest)) = url.split_once("://") else {
        return "(not a URL)".into();
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    if host.is_empty() || host.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return "(not a URL)".into();
    }
    host.to_string()
}

/// A template env name is usable when it is a non-empty name without `=` or NUL.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('=') && !name.contains('\0')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(env: &'a BTreeMap<OsString, OsString>, k: &str) -> Option<&'a str> {
        env.get(OsStr::new(k)).and_then(|v| v.to_str())
    }

    fn base() -> Vec<(OsString, OsString)> {
        [
            ("PATH", "/usr/bin"),
            ("CLAUDECODE", "1"),
            ("CLAUDE_CODE_ENTRYPOINT", "cli"),
            ("CLAUDE_CODE_OAUTH_TOKEN_FILE_DESCRIPTOR", "7"),
            ("RELAY_API_TOKEN", "x"),
            ("ANTHROPIC_API_KEY", "sk-base"),
        ]
        .iter()
        .map(|(a, b)| (OsString::from(a), OsString::from(b)))
        .collect()
    }

    #[test]
    fn base_scrub_drops_claude_session_and_relay_names() {
        let t = BTreeMap::new();
        let env = build(EnvInput {
            base: base(),
            template: &t,
            host_names: vec![],
            token_launch: false,
            allowlist: None,
            pty: false,
        })
        .vars;
        assert_eq!(get(&env, "PATH"), Some("/usr/bin"));
        for gone in [
            "CLAUDECODE",
            "CLAUDE_CODE_ENTRYPOINT",
            TOKEN_FD_VAR,
            "RELAY_API_TOKEN",
        ] {
            assert_eq!(get(&env, gone), None, "{gone}");
        }
        assert_eq!(get(&env, "ANTHROPIC_API_KEY"), Some("sk-base"));
    }

    #[test]
    fn template_value_stays_without_a_token_launch() {
        let t = BTreeMap::from([(TOKEN_FD_VAR.to_string(), "9".to_string())]);
        let env = build(EnvInput {
            base: base(),
            template: &t,
            host_names: vec![],
            token_launch: false,
            allowlist: None,
            pty: false,
        })
        .vars;
        assert_eq!(get(&env, TOKEN_FD_VAR), Some("9"));
    }

    #[test]
    fn relay_value_wins_and_overrides_go_on_a_token_launch() {
        let t = BTreeMap::from([
            (TOKEN_FD_VAR.to_string(), "9".to_string()),
            ("ANTHROPIC_BASE_URL".to_string(), "http://evil".to_string()),
            ("FOO".to_string(), "bar".to_string()),
        ]);
        let env = build(EnvInput {
            base: base(),
            template: &t,
            host_names: vec![("RELAY_SESSION_ID".into(), "s1".into())],
            token_launch: true,
            allowlist: None,
            pty: false,
        })
        .vars;
        assert_eq!(get(&env, TOKEN_FD_VAR), Some("5"));
        assert_eq!(get(&env, "ANTHROPIC_BASE_URL"), Some("http://evil"));
        assert_eq!(get(&env, "ANTHROPIC_API_KEY"), None);
        assert_eq!(get(&env, "FOO"), Some("bar"));
        assert_eq!(get(&env, "RELAY_SESSION_ID"), Some("s1"));
    }

    #[test]
    fn sign_in_names_go_from_every_source_and_routing_names_stay() {
        let base: Vec<(OsString, OsString)> = [
            ("HTTPS_PROXY", "http://proxy.corp:3128"),
            ("NO_PROXY", "localhost"),
            ("ANTHROPIC_AUTH_TOKEN", "x"),
            ("CLAUDE_CODE_CLIENT_CERT", "/etc/cert.pem"),
            ("CLAUDE_CODE_ENTRYPOINT", "cli"),
            ("AWS_BEARER_TOKEN_BEDROCK", "x"),
        ]
        .iter()
        .map(|(a, b)| (OsString::from(a), OsString::from(b)))
        .collect();
        let t = BTreeMap::from([
            (
                "ANTHROPIC_BASE_URL".to_string(),
                "https://user:pw@gw.corp:8443/anthropic?k=v".to_string(),
            ),
            ("CLAUDE_CODE_USE_BEDROCK".to_string(), "1".to_string()),
            (
                "CLAUDE_CODE_GATEWAY_TOKEN_FILE_DESCRIPTOR".to_string(),
                "7".to_string(),
            ),
            ("CLAUDE_CODE_MAX_RETRIES".to_string(), "0".to_string()),
            ("ANTHROPIC_FOUNDRY_API_KEY".to_string(), "x".to_string()),
        ]);
        let env = build(EnvInput {
            base,
            template: &t,
            host_names: vec![],
            token_launch: true,
            allowlist: None,
            pty: false,
        })
        .vars;
        for gone in [
            "ANTHROPIC_AUTH_TOKEN",
            "AWS_BEARER_TOKEN_BEDROCK",
            "CLAUDE_CODE_USE_BEDROCK",
            "CLAUDE_CODE_GATEWAY_TOKEN_FILE_DESCRIPTOR",
            "ANTHROPIC_FOUNDRY_API_KEY",
            "CLAUDE_CODE_ENTRYPOINT",
        ] {
            assert_eq!(get(&env, gone), None, "{gone}");
        }
        assert_eq!(get(&env, "HTTPS_PROXY"), Some("http://proxy.corp:3128"));
        assert_eq!(get(&env, "CLAUDE_CODE_CLIENT_CERT"), Some("/etc/cert.pem"));
        assert_eq!(get(&env, "CLAUDE_CODE_MAX_RETRIES"), Some("0"));
        let r = routing(&env);
        assert_eq!(
            r.names,
            [
                "ANTHROPIC_BASE_URL",
                "CLAUDE_CODE_CLIENT_CERT",
                "HTTPS_PROXY",
                "NO_PROXY"
            ]
        );
        assert_eq!(r.anthropic_base_url_host.as_deref(), Some("gw.corp:8443"));
        let text = serde_json::to_string(&r).unwrap();
        assert!(!text.contains("pw") && !text.contains("k=v"), "{text}");
    }

    /// relay's environment as a shell that exported secrets leaves it.
    fn exported() -> Vec<(OsString, OsString)> {
        [
            ("PATH", "/usr/bin:/bin"),
            ("HOME", "/home/ada"),
            ("USER", "ada"),
            ("LOGNAME", "ada"),
            ("SHELL", "/bin/bash"),
            ("TERM", "xterm-kitty"),
            ("COLORTERM", "truecolor"),
            ("LANG", "de_DE.UTF-8"),
            ("LC_ALL", "de_DE.UTF-8"),
            ("LC_TIME", "en_GB.UTF-8"),
            ("TZ", "Europe/Berlin"),
            ("TMPDIR", "/tmp"),
            ("HTTPS_PROXY", "http://proxy.corp:3128"),
            ("GITHUB_TOKEN", "ghp_secret"),
            ("AWS_SECRET_ACCESS_KEY", "aws-secret"),
            ("AWS_PROFILE", "work"),
            ("AWSOME", "not-aws"),
            ("SSH_AUTH_SOCK", "/run/user/1000/ssh-agent"),
            ("ANTHROPIC_API_KEY", "sk-base"),
            ("RELAY_API_TOKEN", "x"),
            ("CLAUDE_CODE_ENTRYPOINT", "cli"),
        ]
        .iter()
        .map(|(a, b)| (OsString::from(a), OsString::from(b)))
        .collect()
    }

    fn sandboxed(passthrough: &[&str], token_launch: bool) -> Built {
        let patterns: Vec<String> = passthrough.iter().map(|p| p.to_string()).collect();
        let t = BTreeMap::from([
            ("TMPDIR".to_string(), "/tmp/relay-t1".to_string()),
            ("EDITOR".to_string(), "vi".to_string()),
        ]);
        build(EnvInput {
            base: exported(),
            template: &t,
            host_names: host_names("t1", Some(Path::new("/cfg/bridge.sock"))),
            token_launch,
            allowlist: Some(&patterns),
            pty: false,
        })
    }

    #[test]
    fn a_sandboxed_launch_keeps_the_base_names_and_drops_the_rest() {
        let built = sandboxed(&[], false);
        let env = &built.vars;
        for (name, value) in [
            ("PATH", "/usr/bin:/bin"),
            ("HOME", "/home/ada"),
            ("USER", "ada"),
            ("LOGNAME", "ada"),
            ("SHELL", "/bin/bash"),
            ("TERM", "xterm-kitty"),
            ("COLORTERM", "truecolor"),
            ("LANG", "de_DE.UTF-8"),
            ("LC_ALL", "de_DE.UTF-8"),
            ("LC_TIME", "en_GB.UTF-8"),
            ("TZ", "Europe/Berlin"),
            ("HTTPS_PROXY", "http://proxy.corp:3128"),
            // relay's and the template's own, whatever the allowlist.
            ("TMPDIR", "/tmp/relay-t1"),
            ("EDITOR", "vi"),
            ("RELAY_SESSION_ID", "t1"),
            ("RELAY_BRIDGE_SOCKET", "/cfg/bridge.sock"),
        ] {
            assert_eq!(get(env, name), Some(value), "{name}");
        }
        for gone in [
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_PROFILE",
            "AWSOME",
            "SSH_AUTH_SOCK",
            "ANTHROPIC_API_KEY",
            "RELAY_API_TOKEN",
            "CLAUDE_CODE_ENTRYPOINT",
        ] {
            assert_eq!(get(env, gone), None, "{gone}");
        }
        // Only what came from relay's environment is named; TMPDIR is relay's own.
        assert_eq!(
            built.inherited,
            [
                "COLORTERM",
                "HOME",
                "HTTPS_PROXY",
                "LANG",
                "LC_ALL",
                "LC_TIME",
                "LOGNAME",
                "PATH",
                "SHELL",
                "TERM",
                "TZ",
                "USER"
            ]
        );
    }

    #[test]
    fn passthrough_takes_exact_names_and_prefixes() {
        let built = sandboxed(&["GITHUB_TOKEN", "AWS_*"], false);
        let env = &built.vars;
        assert_eq!(get(env, "GITHUB_TOKEN"), Some("ghp_secret"));
        assert_eq!(get(env, "AWS_SECRET_ACCESS_KEY"), Some("aws-secret"));
        assert_eq!(get(env, "AWS_PROFILE"), Some("work"));
        // `AWS_*` is the prefix `AWS_`, not `AWS`.
        assert_eq!(get(env, "AWSOME"), None);
        assert_eq!(get(env, "SSH_AUTH_SOCK"), None);
        for name in ["GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"] {
            assert!(built.inherited.iter().any(|n| n == name), "{name}");
        }
        // No passthrough brings back relay's own names or a launching Claude Code's.
        let built = sandboxed(&["RELAY_*", "CLAUDE_CODE_*"], false);
        assert_eq!(get(&built.vars, "RELAY_API_TOKEN"), None);
        assert_eq!(get(&built.vars, "CLAUDE_CODE_ENTRYPOINT"), None);
    }

    #[test]
    fn a_token_launch_removes_sign_in_names_even_when_passed_through() {
        let built = sandboxed(&["ANTHROPIC_API_KEY", "ANTHROPIC_*"], true);
        assert_eq!(get(&built.vars, "ANTHROPIC_API_KEY"), None);
        assert_eq!(get(&built.vars, TOKEN_FD_VAR), Some("5"));
        assert!(!built.inherited.iter().any(|n| n == "ANTHROPIC_API_KEY"));
        // Without the token it passes, as asked.
        let built = sandboxed(&["ANTHROPIC_API_KEY"], false);
        assert_eq!(get(&built.vars, "ANTHROPIC_API_KEY"), Some("sk-base"));
    }

    #[test]
    fn an_unsandboxed_launch_keeps_all_but_the_scrub() {
        let t = BTreeMap::new();
        let built = build(EnvInput {
            base: exported(),
            template: &t,
            host_names: vec![],
            token_launch: false,
            allowlist: None,
            pty: true,
        });
        for name in [
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "SSH_AUTH_SOCK",
            "AWSOME",
        ] {
            assert!(get(&built.vars, name).is_some(), "{name}");
        }
        assert_eq!(get(&built.vars, "RELAY_API_TOKEN"), None);
        assert_eq!(get(&built.vars, "TERM"), Some("xterm-kitty"));
    }

    #[test]
    fn a_pty_gets_a_term_only_when_nothing_set_one() {
        let t = BTreeMap::new();
        let built = build(EnvInput {
            base: vec![],
            template: &t,
            host_names: vec![],
            token_launch: false,
            allowlist: Some(&[]),
            pty: true,
        });
        assert_eq!(get(&built.vars, "TERM"), Some("xterm-256color"));
        assert!(built.inherited.is_empty());
    }

    #[test]
    fn passthrough_patterns_are_names_or_one_trailing_star() {
        for good in ["GITHUB_TOKEN", "AWS_*", "A*", "lower_case", "X"] {
            assert!(valid_pattern(good), "{good}");
        }
        for bad in ["", "*", "**", "A*B", "*_KEY", "A**", "A=B", "A=*", "A\0B"] {
            assert!(!valid_pattern(bad), "{bad:?}");
        }
        assert!(pattern_matches("AWS_*", "AWS_"));
        assert!(pattern_matches("AWS_*", "AWS_REGION"));
        assert!(!pattern_matches("AWS_*", "AWS"));
        assert!(pattern_matches("GITHUB_TOKEN", "GITHUB_TOKEN"));
        assert!(!pattern_matches("GITHUB_TOKEN", "GITHUB_TOKEN_2"));
    }

    #[test]
    fn url_host_keeps_only_the_host() {
        assert_eq!(url_host("http://127.0.0.1:4242"), "127.0.0.1:4242");
        assert_eq!(url_host("https://a@b.example/x#y"), "b.example");
        assert_eq!(url_host("b.example"), "(not a URL)");
        assert_eq!(url_host("http:///x"), "(not a URL)");
        // A space or a control character in the host is no host of a URL (either alone).
        assert_eq!(url_host("http://gw corp/x"), "(not a URL)");
        assert_eq!(url_host("http://gw\u{7f}corp/x"), "(not a URL)");
    }
}
