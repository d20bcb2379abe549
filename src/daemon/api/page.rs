//! The Settings page's routes: its files, the login link, the login itself
//! (docs/routes.md#the-settings-page-and-its-login).

use hyper::body::{Bytes, Incoming};
use hyper::header::HeaderValue;
use hyper::Request;

use super::{refuse, Resp};
use crate::daemon::api::web;
use crate::daemon::Daemon;
use crate::http;
use crate::wire::Code;

fn with(mut r: Resp, headers: &[(&'static str, String)]) -> Resp {
    for (k, v) in headers {
        if let Ok(v) = HeaderValue::from_str(v) {
            r.headers_mut().insert(*k, v);
        }
    }
    r
}

/// `GET /`, `/index.html`, `/app.js`, `/style.css`.
pub(super) fn file(path: &str) -> Resp {
    let Some((kind, body)) = web::asset(path) else {
        return refuse(Code::NotFound, "no such route");
    };
    with(
        http::bytes(200, Some(kind), Bytes::from_static(body.as_bytes())),
        &[
            ("x-content-type-options", "nosniff".into()),
            (
                "content-security-policy",
                "default-src 'self'; frame-ancestors 'none'".into(),
            ),
        ],
    )
}

/// Why there is no page, and what to do: `api.listen` is read only when relay starts,
/// so one set since needs a restart (docs/cli.md, `relay settings`).
fn no_listener(d: &Daemon) -> String {
    let file = d.paths.settings();
    match d.load_settings().map(|s| s.api.listen) {
        Ok(listen) if !listen.is_empty() => format!(
            "api.listen is set to {listen} in {}, but relay reads it only when it starts: \
             restart relay (stop it, then `relay serve`) to serve the Settings page",
            file.display()
        ),
        _ => format!(
            "set api.listen in {} (e.g. \"127.0.0.1:4850\"), then restart relay, to serve \
             the Settings page",
            file.display()
        ),
    }
}

/// `POST /api/login-code` (unix socket only): a one-time link to the page.
pub(super) fn login_code(d: &Daemon) -> Resp {
    let Some(addr) = d.api_addr() else {
        return refuse(Code::NoListener, no_listener(d));
    };
    let code = match d.web.new_code() {
        Ok(c) => c,
        Err(e) => return refuse(Code::Internal, format!("login code: {e}")),
    };
    http::json(
        201,
        &crate::wire::LoginLink {
            url: format!("http://{addr}/login?code={code}"),
            expires_in_s: 60,
        },
    )
}

/// `GET /login?code=C` (TCP, no bearer): the code redeemed for a session cookie.
pub(super) fn login(d: &Daemon, req: &Request<Incoming>) -> Resp {
    match http::query(req, "code").and_then(|c| d.web.redeem(&c)) {
        Some(sid) => with(
            http::empty(303),
            &[
                ("location", "/".into()),
                (
                    "set-cookie",
                    format!("{}={sid}; HttpOnly; SameSite=Strict; Path=/", web::COOKIE),
                ),
            ],
        ),
        None => http::bytes(
            403,
            Some("text/plain; charset=utf-8"),
            Bytes::from_static(
                b"This login link is used up or expired. Run `relay settings` for a new one.\n",
            ),
        ),
    }
}
