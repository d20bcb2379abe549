//! The sandbox routes: a launch's sandbox in words, and a template's before any launch
//! (docs/routes.md#sandbox-explanations).

use hyper::body::Incoming;
use hyper::Request;

use super::{err, refuse, Resp};
use crate::daemon::Daemon;
use crate::http;
use crate::protocol::SessionKind;
use crate::sandbox::explain;
use crate::wire::Code;

/// `GET /api/{sessions,terminals}/{id}/sandbox`: that launch's sandbox, from the spec
/// its profile was rendered from (kept with the entry at launch).
pub(super) fn of(d: &Daemon, id: &str, kind: SessionKind) -> Resp {
    let what = if kind == SessionKind::Pty {
        "terminal"
    } else {
        "session"
    };
    match d.entry(id).filter(|e| e.record.kind == kind) {
        None => refuse(Code::NotFound, format!("no {what} {id}")),
        Some(e) if !e.record.sandboxed => {
            http::json(200, &explain::unsandboxed(&e.record.directory))
        }
        Some(e) => match e.explained {
            Some(x) => http::json(200, &*x),
            None => refuse(
                Code::NotFound,
                format!("no sandbox explanation kept for {what} {id}"),
            ),
        },
    }
}

/// `GET /api/sandbox/explain?template=T&directory=D&backend=B` (`relay sandbox explain`).
pub(super) fn explain(d: &Daemon, req: &Request<Incoming>) -> Resp {
    let Some(template) = http::query(req, "template").filter(|t| !t.is_empty()) else {
        return refuse(
            Code::TemplateRequired,
            "a template is required (template=T)",
        );
    };
    let directory = http::query(req, "directory");
    let backend = http::query(req, "backend");
    match crate::daemon::api::explain::template(
        d,
        &template,
        directory.as_deref(),
        backend.as_deref(),
    ) {
        Ok(e) => http::json(200, &e),
        Err(e) => err(&e),
    }
}
