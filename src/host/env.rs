//! The environment a session's shim (and so its target) receives
//! ([session-host.md](../../docs/session-host.md#what-a-child-inherits)).
//!
//! Order, later wins: the host's own environment minus relay's credentials and the
//! launching Claude Code session's variables; the template's `env`; the host's names;
//! on a token launch, every other way of signing in removed and the token descriptor
//! variable set last, so relay's value beats a template's. What routes the traffic (the
//! API's address, proxies, certificate authorities) is the person's and stays.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

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

pub struct EnvInput<'a> {
    pub base: Vec<(OsString, OsString)>,
    pub template: &'a BTreeMap<String, String>,
    pub host_names: Vec<(String, String)>,
    pub token_launch: bool,
}

pub fn build(input: EnvInput<'_>) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = BTreeMap::new();
    for (name, value) in input.base {
        let keep = match name.to_str() {
            Some(n) => !is_relay_var(n) && (!is_claude_session_var(n) || is_routing(n)),
            None => false,
        };
        if keep {
            env.insert(name, value);
        }
    }
    for (name, value) in input.template {
        env.insert(name.into(), value.into());
    }
    for (name, value) in input.host_names {
        env.insert(name.into(), value.into());
    }
    if input.token_launch {
        env.retain(|name, _| name.to_str().is_none_or(|n| !is_sign_in(n)));
        env.insert(
            TOKEN_FD_VAR.into(),
            relay_shim::fds::TOKEN_FD.to_string().into(),
        );
    }
    env
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
        });
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
        });
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
        });
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
        });
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

    #[test]
    fn url_host_keeps_only_the_host() {
        assert_eq!(url_host("http://127.0.0.1:4242"), "127.0.0.1:4242");
        assert_eq!(url_host("https://a@b.example/x#y"), "b.example");
        assert_eq!(url_host("b.example"), "(not a URL)");
        assert_eq!(url_host("http:///x"), "(not a URL)");
    }
}
