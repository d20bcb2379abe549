//! `relay session start | message | interrupt | list | log | stop | resume | purge | egress`: headless
//! Claude Code sessions (docs/cli.md). A turn, streamed or whole, is
//! [`crate::cli::turn`].

use std::process::ExitCode;

use super::entry::{self, describe, here, one};
use crate::cli::args::{Json, SessionVerb, Target};
use crate::cli::client::Client;
use crate::cli::{fail, print, turn, Out};
use crate::wire;

pub fn run(c: &Client, v: SessionVerb) -> ExitCode {
    let id_of = |t: Target| entry::resolve(c, "sessions", &t.given());
    match v {
        SessionVerb::Start {
            project,
            directory,
            name,
            model,
            permission_mode,
            json: Json { json },
        } => {
            let body = wire::SessionStart {
                project: Some(project),
                directory,
                name,
                model,
                permission_mode,
                ..Default::default()
            };
            print(json, start(c, body))
        }
        SessionVerb::Message {
            id,
            text,
            file,
            stream,
            json: Json { json },
        } => match turn::prompt(&text, file.as_deref()) {
            Ok(text) => turn::run(c, &id, &text, stream, json),
            Err(e) => fail(e),
        },
        SessionVerb::List {
            filter,
            json: Json { json },
        } => print(
            json,
            entry::list(
                c,
                "sessions",
                (filter.running, filter.project.as_deref(), filter.quiet),
            ),
        ),
        SessionVerb::Prune {
            project,
            json: Json { json },
        } => print(json, entry::prune(c, "sessions", project.as_deref())),
        SessionVerb::Log {
            id,
            json: Json { json },
        } => print(
            json,
            id_of(id).and_then(|id| super::terminal::log_of(c, "sessions", &id, false)),
        ),
        SessionVerb::Interrupt {
            id,
            json: Json { json },
        } => print(json, interrupt(c, &id)),
        SessionVerb::Stop {
            id,
            json: Json { json },
        } => print(
            json,
            id_of(id).and_then(|id| entry::stop(c, "sessions", &id)),
        ),
        SessionVerb::Resume {
            id,
            json: Json { json },
        } => print(json, id_of(id).and_then(|id| resume(c, &id))),
        SessionVerb::Purge {
            id,
            json: Json { json },
        } => print(
            json,
            id_of(id).and_then(|id| entry::purge(c, "sessions", &id)),
        ),
        SessionVerb::Egress {
            id,
            json: Json { json },
        } => print(
            json,
            id_of(id).and_then(|id| entry::egress(c, "sessions", &id)),
        ),
    }
}

/// `relay session start`. Without `--directory`: here when here is inside the project,
/// else the project's folder (the daemon decides).
fn start(c: &Client, mut body: wire::SessionStart) -> Result<Out, String> {
    body.cwd = here(body.directory.as_deref())?;
    one("started", c.send_as("POST", "/api/sessions", &body))
}

/// `relay session interrupt`: the running turn asked to stop; its reply so far goes to
/// whoever waits for it and to `relay session log`.
fn interrupt(c: &Client, id: &str) -> Result<Out, String> {
    c.call_as("POST", &format!("/api/sessions/{id}/interrupt"))
        .map(|(_, v): (serde_json::Value, _)| {
            Out::new(
                v,
                format!(
                    "interrupted the turn of {id}; its reply so far: relay session log --id {id}"
                ),
            )
        })
}

fn resume(c: &Client, id: &str) -> Result<Out, String> {
    c.call_as("POST", &format!("/api/sessions/{id}/resume"))
        .map(|(r, v): (wire::Resumed, _)| Out::new(v, resumed_text(&r)))
}

/// The resumed entry, and the daemon's notice on a line of its own.
fn resumed_text(r: &wire::Resumed) -> String {
    let mut text = format!("resumed {}", describe(&r.entry));
    if let Some(n) = &r.notice {
        text.push_str(&format!("\nnote: {n}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::commands::entry::tests::entry;
    use serde_json::json;

    #[test]
    fn a_resume_is_its_entry_and_its_notice_when_there_is_one() {
        let plain: wire::Resumed = serde_json::from_value(entry(json!({}))).unwrap();
        assert_eq!(
            resumed_text(&plain),
            "resumed s-0123456789ab  running  project=p  template=claude-code  /home/ada/p"
        );
        let noted: wire::Resumed =
            serde_json::from_value(entry(json!({"notice": "the model changed"}))).unwrap();
        assert_eq!(
            resumed_text(&noted),
            "resumed s-0123456789ab  running  project=p  template=claude-code  /home/ada/p\n\
             note: the model changed"
        );
    }
}
