//! What a failing verb prints (docs/cli.md#output-contract): one `error: <message>`
//! line on stderr, or, when the verb was given `--json`, one `{"error": {"code",
//! "message"}}` line on stdout. The code is the daemon's when it refused
//! (`wire::Code`, written last in the message as `(<code>)`), else one of the CLI's
//! own ([`CLI_CODES`]).
//!
//! Verbs hand [`crate::cli::fail`] a sentence, as they always have; the code is read
//! back from it here, in one place, so no verb needs to carry it.

use std::io::Write;

use serde_json::json;

use super::{client, termout};
use crate::wire::{Code, Outcome};

/// The codes the CLI gives a failure of its own.
pub(super) const CLI_CODES: &[&str] = &[
    // No relay listens on the config dir's socket.
    "daemon_unreachable",
    // relay took the connection and gave no answer.
    "daemon_not_answering",
    // The connection broke off during the call.
    "connection_lost",
    // A prefix that starts several listed ids.
    "ambiguous_id",
    // A command line relay cannot run (clap's refusal).
    "usage",
    // Anything else.
    "failed",
];

/// A failure as `--json` prints it: its code and its message without the code.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Failure {
    pub code: &'static str,
    pub message: String,
}

/// The code of `msg` and its message: `<message> (<code>)` for a known code; the
/// client's sentences for a relay that is not there; `failed` for the rest.
pub(super) fn classify(msg: &str) -> Failure {
    if let Some((message, code)) = trailing_code(msg) {
        return Failure {
            code,
            message: message.to_string(),
        };
    }
    let code = client::unavailable(msg).unwrap_or("failed");
    Failure {
        code,
        message: msg.to_string(),
    }
}

/// `("no session s-1", not_found)` from `no session s-1 (not_found)`, when the
/// bracket holds the daemon's code or one of the CLI's.
fn trailing_code(msg: &str) -> Option<(&str, &'static str)> {
    let (message, last) = msg.strip_suffix(')')?.rsplit_once(" (")?;
    let code = Code::ALL
        .iter()
        .map(|c| c.as_str())
        .chain(CLI_CODES.iter().copied())
        .find(|c| *c == last)?;
    Some((message, code))
}

/// The exit status of a verb that failed (docs/cli.md#exit-codes): what was named is
/// not there, relay refused it, relay is not there to ask; else 1.
const NOT_FOUND: u8 = 3;
const REFUSED: u8 = 4;
/// sysexits' `EX_UNAVAILABLE`, as `systemctl` and the BSD tools use it.
const UNAVAILABLE: u8 = 69;

/// The exit status for a failure's code: a daemon code by its class in
/// `crate::wire::Code` (a 404 is not found, another `Denied` one refused), relay not
/// running or not answering 69, usage 2, everything else 1.
pub(super) fn exit_status(code: &str) -> u8 {
    if let Some(c) = Code::ALL.iter().find(|c| c.as_str() == code) {
        return match (c.status(), c.outcome()) {
            (404, _) => NOT_FOUND,
            (_, Outcome::Denied) => REFUSED,
            _ => 1,
        };
    }
    match code {
        "daemon_unreachable" | "daemon_not_answering" => UNAVAILABLE,
        "usage" => 2,
        _ => 1,
    }
}

/// The one line `--json` prints for a failure.
pub(super) fn json_line(f: &Failure) -> String {
    let mut line = termout::json_line(&json!({"error": {"code": f.code, "message": f.message}}));
    line.push('\n');
    line
}

/// Prints `msg` as the failure of a verb (`json`: its error object on stdout) and
/// answers its exit status. A closed stdout or stderr is ignored.
pub(super) fn report(msg: &str, json: bool) -> u8 {
    let f = classify(msg);
    if json {
        let mut out = std::io::stdout().lock();
        let _ = out
            .write_all(json_line(&f).as_bytes())
            .and_then(|()| out.flush());
    } else {
        let word = super::colour::error_word(super::colour::on_stderr());
        let line = format!("{word} {}\n", termout::visible(msg.as_bytes()));
        let _ = std::io::stderr().write_all(line.as_bytes());
    }
    exit_status(f.code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_refused_and_not_running_have_exit_statuses_of_their_own() {
        let status = |c: Code| exit_status(c.as_str());
        assert_eq!(status(Code::NotFound), 3);
        assert_eq!(status(Code::UnknownProject), 3);
        assert_eq!(status(Code::SessionRunning), 4);
        assert_eq!(status(Code::TemplateNotAllowed), 4);
        assert_eq!(status(Code::SessionNotRunning), 1);
        assert_eq!(status(Code::SpawnFailed), 1);
        assert_eq!(exit_status("daemon_unreachable"), 69);
        assert_eq!(exit_status("daemon_not_answering"), 69);
        assert_eq!(exit_status("connection_lost"), 1);
        assert_eq!(exit_status("ambiguous_id"), 1);
        assert_eq!(exit_status("usage"), 2);
        assert_eq!(exit_status("failed"), 1);
    }

    #[test]
    fn a_failure_is_the_daemons_code_the_clis_or_failed() {
        assert_eq!(
            classify("no session s-1 (not_found)"),
            Failure {
                code: Code::NotFound.as_str(),
                message: "no session s-1".into()
            }
        );
        assert_eq!(
            classify("t- starts the ids of 2 terminals: a, b; type more (ambiguous_id)").code,
            "ambiguous_id"
        );
        // A bracket that is no code stays in the message.
        let odd = classify("cannot read x (permission denied)");
        assert_eq!(
            (odd.code, odd.message.as_str()),
            ("failed", "cannot read x (permission denied)")
        );
        let line = json_line(&classify(
            "session s-1 is running; stop it first (session_running)",
        ));
        assert_eq!(
            line,
            "{\"error\":{\"code\":\"session_running\",\"message\":\"session s-1 is running; stop it first\"}}\n"
        );
    }
}
