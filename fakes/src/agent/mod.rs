//! `fakeagent`: answers like Claude Code.
//!
//! Every launch first appends one start line to `$TMPDIR/fakeagent-calls.jsonl`
//! ([`start`]), then answers turns: headless stream-json when argv holds
//! `--input-format stream-json` ([`stream_json`]), otherwise line by line on a terminal
//! ([`interactive`]). What a turn answers is in [`reply`]. `fakeagent auth status`
//! prints `{"loggedIn": …, "authMethod": …}` as Claude Code does, true when a token was
//! read from the descriptor, and exits.

pub mod interactive;
pub mod reply;
pub mod start;
pub mod stream_json;

use std::io::{self, Write};

/// What `fakeagent --version` prints.
pub const VERSION_LINE: &str = "fakeagent 0.1.0 (Claude Code stand-in)";

/// Exit code when stdout cannot be written (the reader went away).
const EXIT_STDOUT_FAILED: i32 = 1;

/// The whole fake. Returns only by exiting.
pub fn run() -> ! {
    // First, before this process opens anything: the descriptors it was given.
    let fds = start::open_fds();
    let argv: Vec<String> = std::env::args_os()
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    let captured = start::StartLine::capture(fds, argv.clone());
    let logged_in =
        matches!(captured.token, Some(start::TokenRead::Read { bytes, .. }) if bytes > 0);
    let line = captured.to_json();
    let log = crate::call_log::tmp_dir().join(start::CALL_LOG);
    if let Err(err) = crate::call_log::append_line(&log, &line) {
        let _ = writeln!(io::stderr(), "fakeagent: call log {}: {err}", log.display());
        std::process::exit(crate::EXIT_RECORD_FAILED);
    }

    let mut args = argv.get(1..).unwrap_or_default();
    // Top-level options Claude Code also takes before a subcommand (relay puts
    // `--setting-sources user --strict-mcp-config` first on a token launch).
    loop {
        match args.first().map(String::as_str) {
            Some("--setting-sources") => args = args.get(2..).unwrap_or_default(),
            Some("--strict-mcp-config") => args = &args[1..],
            _ => break,
        }
    }
    let outcome = if let Some(refusal) = bad_permission_mode(args) {
        // As Claude Code refuses a mode it does not know: one stderr line, status 1,
        // before anything else.
        let _ = writeln!(io::stderr(), "{refusal}");
        Ok(1)
    } else if args.iter().any(|arg| arg == "--version") {
        let mut out = io::stdout().lock();
        writeln!(out, "{VERSION_LINE}")
            .and_then(|()| out.flush())
            .map(|()| 0)
    } else if args.len() >= 2 && args[0] == "auth" && args[1] == "status" {
        // Like `claude auth status`: the login state, from the descriptor alone.
        let mut out = io::stdout().lock();
        let method = if logged_in { "oauth_token" } else { "none" };
        writeln!(
            out,
            "{{\"loggedIn\": {logged_in}, \"authMethod\": \"{method}\"}}"
        )
        .and_then(|()| out.flush())
        .map(|()| if logged_in { 0 } else { 1 })
    } else if is_stream_json(args) {
        let session = stream_json::Session::for_this_process();
        stream_json::run(io::stdin().lock(), &mut io::stdout().lock(), &session)
    } else {
        interactive::run(io::stdin().lock(), &mut io::stdout().lock())
    };
    match outcome {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            let _ = writeln!(io::stderr(), "fakeagent: stdio: {err}");
            std::process::exit(EXIT_STDOUT_FAILED)
        }
    }
}

/// Claude Code 2.1.332's permission modes (`claude --help`).
const PERMISSION_MODES: &str = "acceptEdits, auto, bypassPermissions, manual, dontAsk, plan";

/// Claude Code's refusal of a `--permission-mode` it does not know, word for word.
fn bad_permission_mode(args: &[String]) -> Option<String> {
    let mode = args
        .windows(2)
        .find(|pair| pair[0] == "--permission-mode")
        .map(|pair| pair[1].as_str())?;
    (!PERMISSION_MODES.split(", ").any(|m| m == mode)).then(|| {
        format!(
            "error: option '--permission-mode <mode>' argument '{mode}' is invalid. Allowed \
             choices are {PERMISSION_MODES}."
        )
    })
}

/// Headless mode: `--input-format stream-json` (or `--input-format=stream-json`) among
/// the arguments, as Claude Code is driven by `-p --input-format stream-json
/// --output-format stream-json --verbose`.
pub fn is_stream_json(args: &[String]) -> bool {
    args.iter().any(|arg| arg == "--input-format=stream-json")
        || args
            .windows(2)
            .any(|pair| pair[0] == "--input-format" && pair[1] == "stream-json")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn stream_json_needs_the_input_format_pair() {
        assert!(is_stream_json(&args(&[
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose"
        ])));
        assert!(is_stream_json(&args(&["--input-format=stream-json"])));
        assert!(!is_stream_json(&args(&["--output-format", "stream-json"])));
        assert!(!is_stream_json(&args(&[
            "--input-format",
            "text",
            "stream-json"
        ])));
        assert!(!is_stream_json(&args(&["--input-format"])));
        assert!(!is_stream_json(&[]));
    }
}
