//! `relay doctor`: the daemon's checks of this machine and these settings, one line
//! each with its fix; exit 1 when one failed (docs/cli.md#relay-doctor).

use std::process::ExitCode;

use crate::cli::client::Client;
use crate::cli::{emit, fail, json_bytes, text_line};
use crate::wire;

/// The report on stdout either way (`--json`: the answer as it came).
pub fn run(c: &Client, json_out: bool) -> ExitCode {
    let (d, v): (wire::Doctor, _) = match c.call_as("POST", "/api/doctor") {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let code = if d.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    if json_out {
        return emit(&json_bytes(&v), code);
    }
    let text = text(&d);
    if text.is_empty() {
        return emit(b"", code);
    }
    let line = String::from_utf8_lossy(&text_line(&text)).into_owned();
    let painted = crate::cli::colour::doctor_report(&line, crate::cli::colour::on_stdout());
    emit(painted.as_bytes(), code)
}

/// A line per check: status, name, detail; a failed or warned one's fix below it.
fn text(d: &wire::Doctor) -> String {
    let mut text = String::new();
    for ch in &d.checks {
        text.push_str(&format!(
            "{:<5} {:<16} {}\n",
            ch.status.as_str(),
            ch.name,
            ch.detail
        ));
        if matches!(ch.status, wire::CheckStatus::Fail | wire::CheckStatus::Warn) {
            if let Some(fix) = &ch.fix {
                text.push_str(&format!("{:<22} fix: {fix}\n", ""));
            }
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doctor(checks: serde_json::Value) -> wire::Doctor {
        serde_json::from_value(json!({"ok": false, "checks": checks})).unwrap()
    }

    #[test]
    fn each_check_is_a_line_and_only_a_failed_or_warned_one_shows_its_fix() {
        let d = doctor(json!([
            {"name": "sandbox", "status": "ok", "detail": "bwrap 0.9", "fix": "never shown"},
            {"name": "token_file", "status": "fail", "detail": "mode 0644", "fix": "chmod 600 t"},
            {"name": "claude", "status": "warn", "detail": "not found"},
            {"name": "probe_token_denied", "status": "skip", "detail": "no token"},
        ]));
        assert_eq!(
            text(&d),
            "ok    sandbox          bwrap 0.9\n\
             fail  token_file       mode 0644\n\
             \x20                      fix: chmod 600 t\n\
             warn  claude           not found\n\
             skip  probe_token_denied no token\n"
        );
        assert_eq!(text(&doctor(json!([]))), "");
    }
}
