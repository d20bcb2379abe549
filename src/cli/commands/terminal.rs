//! `relay terminal start | list | log | stop | attach | resume | purge | egress`: interactive
//! terminals from templates (docs/cli.md). The attach itself is [`crate::cli::attach`].

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::json;

use super::entry::{self, here, one};
use crate::cli::args::{Json, Target, TerminalVerb};
use crate::cli::attach::{self, exit_code, exit_line, Attach, End};
use crate::cli::client::Client;
use crate::cli::{emit, fail, print, termout, Out};
use crate::wire;

pub fn run(config: &Path, v: TerminalVerb, config_flag: Option<&PathBuf>) -> ExitCode {
    let c = Client::new(config);
    let id_of = |t: Target| entry::resolve(&c, "terminals", &t.given());
    match v {
        TerminalVerb::Start {
            project,
            template,
            name,
            directory,
            cols,
            rows,
            extra_arg,
            json: Json { json },
        } => {
            let body = wire::TerminalStart {
                project: Some(project),
                template: Some(template),
                name,
                directory,
                cols,
                rows,
                extra_args: extra_arg,
                ..Default::default()
            };
            print(json, start(&c, body))
        }
        TerminalVerb::List {
            filter,
            json: Json { json },
        } => print(
            json,
            entry::list(
                &c,
                "terminals",
                (filter.running, filter.project.as_deref(), filter.quiet),
            ),
        ),
        TerminalVerb::Prune {
            project,
            json: Json { json },
        } => print(json, entry::prune(&c, "terminals", project.as_deref())),
        TerminalVerb::Log {
            id,
            raw,
            json: Json { json },
        } => print(json, id_of(id).and_then(|id| log(&c, &id, raw))),
        TerminalVerb::Stop {
            id,
            json: Json { json },
        } => print(
            json,
            id_of(id).and_then(|id| entry::stop(&c, "terminals", &id)),
        ),
        TerminalVerb::Attach {
            id,
            detach_keys,
            json: Json { json },
        } => match id_of(id) {
            Ok(id) => attach(&c, config, &id, detach_keys.as_deref(), json, config_flag),
            Err(e) => fail(e),
        },
        TerminalVerb::Resume {
            id,
            detach_keys,
            json: Json { json },
        } => match id_of(id) {
            Ok(id) => super::sandbox::resume(
                config,
                &id,
                super::sandbox::Options {
                    template: crate::protocol::CLAUDE_CODE_TEMPLATE,
                    args: &[],
                    detach_keys: detach_keys.as_deref(),
                    json_out: json,
                    config_flag,
                },
            ),
            Err(e) => fail(e),
        },
        TerminalVerb::Purge {
            id,
            json: Json { json },
        } => print(
            json,
            id_of(id).and_then(|id| entry::purge(&c, "terminals", &id)),
        ),
        TerminalVerb::Egress {
            id,
            json: Json { json },
        } => print(
            json,
            id_of(id).and_then(|id| entry::egress(&c, "terminals", &id)),
        ),
    }
}

/// `relay terminal start`. Without `--directory`: here when here is inside the project,
/// else the project's folder (the daemon decides).
fn start(c: &Client, mut body: wire::TerminalStart) -> Result<Out, String> {
    body.cwd = here(body.directory.as_deref())?;
    one("started", c.send_as("POST", "/api/terminals", &body))
}

/// `relay terminal log`: the log is what the session wrote, so its controls are made
/// visible as text; `--raw` hands the bytes over untouched; JSON escapes them.
fn log(c: &Client, id: &str, raw: bool) -> Result<Out, String> {
    log_of(c, "terminals", id, raw)
}

/// `relay terminal log` and `relay session log`: the log of the entry `id` of `kind`
/// (`terminals`, `sessions`), its control bytes as visible text unless `raw`.
pub(super) fn log_of(c: &Client, kind: &str, id: &str, raw: bool) -> Result<Out, String> {
    let a = c.call("GET", &format!("/api/{kind}/{id}/log"))?;
    if a.status != 200 {
        return Err(a.error_text());
    }
    Ok(log_out(id, a.body, raw))
}

fn log_out(id: &str, body: Vec<u8>, raw: bool) -> Out {
    Out {
        json: json!({"id": id, "log": String::from_utf8_lossy(&body)}),
        text: termout::visible(&body),
        raw: raw.then_some(body),
    }
}

/// `relay terminal attach --id ID`: this terminal joins a running terminal until it
/// ends (exit with its status, as `relay sandbox` does), the detach keys are typed
/// (exit 0, it runs on) or this terminal goes away (128 + the signal, it runs on).
fn attach(
    client: &Client,
    config: &Path,
    id: &str,
    detach_keys: Option<&str>,
    json_out: bool,
    config_flag: Option<&PathBuf>,
) -> ExitCode {
    let keys = match attach::detach_keys(config, detach_keys) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    let end = Attach {
        client,
        id,
        keys: &keys,
        to_stderr: json_out,
        lossless: false,
        forget: false,
        resume_hint: None,
        claude_run: false,
        end_input: false,
    }
    .run();
    let (code, line) = match end {
        Err(e) => return fail(e),
        Ok(End::Exited(result) | End::Gone(result)) => {
            (ExitCode::from(exit_code(&result)), exit_line(id, &result))
        }
        Ok(End::Detached) => {
            eprint!("{}", attach::detached_note(id, config_flag));
            (ExitCode::SUCCESS, json!({"id": id, "detached": true}))
        }
        Ok(End::Signal(sig)) => (
            ExitCode::from((128 + sig).clamp(0, 255) as u8),
            json!({"id": id, "detached": true, "signal": sig}),
        ),
    };
    if json_out {
        return emit(format!("{line}\n").as_bytes(), code);
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As text the log's controls are visible, raw it is the bytes, as JSON the text.
    #[test]
    fn a_log_is_visible_text_raw_bytes_or_json() {
        let body = b"start\x1b]52;c;c2VjcmV0\x07\r\nend\n".to_vec();
        let out = log_out("t-1", body.clone(), false);
        assert_eq!(out.text, "start^[]52;c;c2VjcmV0^G\r\nend\n");
        assert_eq!(out.raw, None);
        assert_eq!(
            out.json,
            json!({"id": "t-1", "log": "start\u{1b}]52;c;c2VjcmV0\u{7}\r\nend\n"})
        );
        assert_eq!(log_out("t-1", body.clone(), true).raw, Some(body));
        let empty = log_out("t-1", Vec::new(), false);
        assert_eq!((empty.text.as_str(), &empty.json["log"]), ("", &json!("")));
    }

    #[test]
    fn a_bad_byte_in_a_log_is_a_replacement_character_in_json() {
        let out = log_out("t-1", b"a\xffb".to_vec(), false);
        assert_eq!(out.json["log"], "a\u{fffd}b");
    }
}
