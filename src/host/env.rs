//! The environment a session's shim (and so its target) receives (DESIGN.md section 6).
//!
//! Order, later wins: the host's own environment minus relay's credentials and the
//! launching Claude Code session's variables; the template's `env`; the host's names;
//! on a token launch, the sign-in overrides removed and the token descriptor variable
//! set last, so relay's value beats a template's.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

use crate::protocol::TOKEN_FD_VAR;

/// Names a launching Claude Code session leaves behind, removed from the base.
fn is_claude_session_var(name: &str) -> bool {
    matches!(name, "CLAUDECODE" | "CLAUDE_PID" | "CLAUDE_EFFORT")
        || name.starts_with("CLAUDE_CODE_")
}

/// Relay's own names (secrets, sockets of the daemon) never flow from the base.
fn is_relay_var(name: &str) -> bool {
    name.starts_with("RELAY_")
}

/// On a token launch these would sign Claude Code in some other way or send the token
/// elsewhere; removed even when a template sets them.
pub const TOKEN_LAUNCH_REMOVED: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "CLAUDE_CODE_USE_FOUNDRY",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "NODE_EXTRA_CA_CERTS",
    "NODE_TLS_REJECT_UNAUTHORIZED",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
];

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
            Some(n) => !is_claude_session_var(n) && !is_relay_var(n),
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
        for name in TOKEN_LAUNCH_REMOVED {
            env.remove(OsStr::new(name));
        }
        env.insert(TOKEN_FD_VAR.into(), "5".into());
    }
    env
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
        assert_eq!(get(&env, "ANTHROPIC_BASE_URL"), None);
        assert_eq!(get(&env, "ANTHROPIC_API_KEY"), None);
        assert_eq!(get(&env, "FOO"), Some("bar"));
        assert_eq!(get(&env, "RELAY_SESSION_ID"), Some("s1"));
    }
}
