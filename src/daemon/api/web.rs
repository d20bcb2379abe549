//! The Settings page: sources from `web/`, built into the binary, served at `/` on the
//! loopback listener. A person gets in without copying the API token by hand:
//! `relay settings` asks the daemon (over the same-uid unix socket) for a one-time
//! login code, valid for a minute, and prints `http://127.0.0.1:PORT/login?code=…`;
//! that link sets an HttpOnly, SameSite=Strict session cookie and redirects to `/`.
//! The cookie reads (GET) only; driving verbs still need the bearer.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const INDEX_HTML: &str = include_str!("../../../web/index.html");
pub const APP_JS: &str = include_str!("../../../web/app.js");
pub const STYLE_CSS: &str = include_str!("../../../web/style.css");

pub const COOKIE: &str = "relay_session";
const CODE_TTL: Duration = Duration::from_secs(60);
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// The page's files: path → (content type, body).
pub fn asset(path: &str) -> Option<(&'static str, &'static str)> {
    match path {
        "/" | "/index.html" => Some(("text/html; charset=utf-8", INDEX_HTML)),
        "/app.js" => Some(("text/javascript; charset=utf-8", APP_JS)),
        "/style.css" => Some(("text/css; charset=utf-8", STYLE_CSS)),
        _ => None,
    }
}

#[derive(Default)]
pub struct WebAuth {
    codes: Mutex<HashMap<String, Instant>>,
    sessions: Mutex<HashMap<String, Instant>>,
}

impl WebAuth {
    pub fn new_code(&self) -> std::io::Result<String> {
        let code = crate::daemon::ids::random_hex(16)?;
        let mut codes = self.codes.lock().unwrap_or_else(|p| p.into_inner());
        codes.retain(|_, t| t.elapsed() < CODE_TTL);
        codes.insert(code.clone(), Instant::now());
        Ok(code)
    }

    /// Trades a code (single use) for a session id.
    pub fn redeem(&self, code: &str) -> Option<String> {
        let issued = self
            .codes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(code)?;
        if issued.elapsed() >= CODE_TTL {
            return None;
        }
        let sid = match crate::daemon::ids::random_hex(32) {
            Ok(sid) => sid,
            Err(e) => {
                crate::listen::log(format_args!(
                    "relay: settings page session: random bytes: {e}"
                ));
                return None;
            }
        };
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.retain(|_, t| t.elapsed() < SESSION_TTL);
        sessions.insert(sid.clone(), Instant::now());
        Some(sid)
    }

    /// Whether a `Cookie:` header carries a live session.
    pub fn cookie_ok(&self, header: Option<&str>) -> bool {
        let Some(h) = header else { return false };
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        h.split(';')
            .filter_map(|kv| kv.trim().strip_prefix(COOKIE)?.strip_prefix('='))
            .any(|v| {
                sessions.iter().any(|(sid, t)| {
                    t.elapsed() < SESSION_TTL
                        && crate::http::same_secret(sid.as_bytes(), v.as_bytes())
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_single_use_and_cookies_must_match() {
        let w = WebAuth::default();
        let code = w.new_code().unwrap();
        let sid = w.redeem(&code).expect("first use");
        assert!(w.redeem(&code).is_none(), "a code works once");
        assert!(w.cookie_ok(Some(&format!("a=b; {COOKIE}={sid}"))));
        assert!(!w.cookie_ok(Some(&format!("{COOKIE}=nope"))));
        assert!(!w.cookie_ok(None));
    }

    #[test]
    fn the_page_never_carries_a_token_field() {
        for (_, body) in ["/", "/app.js", "/style.css"]
            .iter()
            .filter_map(|p| asset(p))
        {
            assert!(!body.contains("api-token") && !body.to_lowercase().contains("bearer"));
        }
    }
}
