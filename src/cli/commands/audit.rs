//! `relay audit [--tail N] [--since TIME] [--follow]` prints the audit log, a line per
//! row, read from its end by the daemon (`GET /api/audit`). `relay audit scan` looks for
//! the token in every file relay keeps (docs/cli.md#relay-audit-scan).

use std::process::ExitCode;

use super::entry::times;
use crate::cli::args::{AuditVerb, Json};
use crate::cli::client::Client;
use crate::cli::{emit, fail, json_bytes, print, text_line, Out};
use crate::wire;

mod follow;

/// Which rows `relay audit` prints.
pub struct Log {
    pub tail: Option<usize>,
    pub since: Option<String>,
    pub follow: bool,
}

/// `--json` may stand before `scan` or after it.
pub fn run(c: &Client, verb: Option<AuditVerb>, log_opts: Log, json: Json) -> ExitCode {
    match verb {
        Some(AuditVerb::Scan {
            json: Json { json: after },
        }) => scan(c, json.json || after),
        None => {
            let since = match log_opts.since.as_deref().map(since_ms).transpose() {
                Ok(s) => s,
                Err(e) => return fail(e),
            };
            if log_opts.follow {
                return follow::run(c, log_opts.tail, since, json.json);
            }
            print(json.json, log(c, log_opts.tail, since))
        }
    }
}

fn since_ms(text: &str) -> Result<u64, String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    crate::text::parse_since(text, now)
}

/// `GET /api/audit` with what was asked.
fn audit_path(tail: Option<usize>, since: Option<u64>) -> String {
    let mut q = vec![];
    if let Some(n) = tail {
        q.push(format!("tail={n}"));
    }
    if let Some(ms) = since {
        q.push(format!("since={ms}"));
    }
    if q.is_empty() {
        "/api/audit".into()
    } else {
        format!("/api/audit?{}", q.join("&"))
    }
}

fn log(c: &Client, tail: Option<usize>, since: Option<u64>) -> Result<Out, String> {
    let (a, v): (wire::AuditRows, _) = c.call_as("GET", &audit_path(tail, since))?;
    Ok(Out::new(v, rows_text(&a)))
}

/// A line per row: time, action, outcome, session, then what the row has.
fn rows_text(a: &wire::AuditRows) -> String {
    a.rows.iter().map(row).collect::<Vec<_>>().join("\n")
}

pub(super) fn row(r: &wire::AuditRow) -> String {
    let mut line = format!(
        "{}  {}  {}  {}",
        crate::text::utc_ms(r.ts),
        r.action,
        r.outcome.as_str(),
        r.session_id.as_deref().unwrap_or("-")
    );
    if let Some(code) = r.code {
        line.push_str(&format!("  {code}"));
    }
    if let Some(e) = &r.error {
        line.push_str(&format!("  {e}"));
    }
    if let Some(p) = r.token_projects.as_ref().filter(|p| !p.is_empty()) {
        line.push_str(&format!("  token of project {}", p.join(", ")));
    }
    if let Some(a) = &r.account {
        line.push_str(&format!("  account={a}"));
    }
    if let Some(reached) = r.limits.as_ref().and_then(|l| l.reached.as_ref()) {
        line.push_str(&format!("  {reached}"));
    }
    if let Some(g) = &r.egress {
        line.push_str(&format!(
            "  {}{}  {} B out, {} B in, {} ms  {}",
            g.target(),
            times(g),
            g.sent,
            g.received,
            g.ms,
            g.rule
        ));
    }
    line
}

/// `relay audit scan`: the report on stdout either way; exit 1 when the token was found
/// (as `relay doctor` does with a failed check), or when the scan could not read
/// everything and so cannot say the token is nowhere.
fn scan(c: &Client, json_out: bool) -> ExitCode {
    let (r, v): (wire::ScanReport, _) = match c.call_as("POST", "/api/audit/scan") {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let code = if r.findings.is_empty() && r.complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    if json_out {
        return emit(&json_bytes(&v), code);
    }
    emit(&text_line(&scan_text(&r)), code)
}

/// A line per finding and per place not read, then the verdict.
fn scan_text(r: &wire::ScanReport) -> String {
    let mut text = String::new();
    for f in &r.findings {
        let place = match f.offset {
            Some(o) => format!("{}:{o}", f.file),
            None => format!("{} (its name)", f.file),
        };
        text.push_str(&format!("found  {place}  {}\n", f.encoding));
    }
    for f in &r.skipped {
        text.push_str(&format!("skipped  {}  {}\n", f.file, f.why));
    }
    if r.skipped_more > 0 {
        text.push_str(&format!(
            "skipped  {} more places, not listed\n",
            r.skipped_more
        ));
    }
    let unread = r.skipped.len() as u64 + r.skipped_more;
    let verdict = match (r.findings.len(), r.complete) {
        (0, true) => "not found".to_string(),
        (0, false) => "not found in what it could read".to_string(),
        (n, _) => format!("found in {n} places"),
    };
    let missed = match (r.complete, unread) {
        (true, _) => String::new(),
        (false, 0) => "; it could not read everything".to_string(),
        (false, 1) => "; 1 place could not be read".to_string(),
        (false, n) => format!("; {n} places could not be read"),
    };
    text.push_str(&format!(
        "scanned {} files ({} bytes) for the token {}: {verdict}{missed}",
        r.files, r.bytes, r.token_fingerprint,
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::commands::entry::tests::egress_row;
    use serde_json::{json, Value};

    fn rows(rows: Value) -> wire::AuditRows {
        serde_json::from_value(json!({ "rows": rows })).unwrap()
    }

    #[test]
    fn a_row_is_one_line_with_what_it_has() {
        let a = rows(json!([
            {"ts": 1_700_000_000_123u64, "action": "session.start", "outcome": "allowed",
             "session_id": "s-1", "token_projects": ["p", "q"], "account": "work"},
            {"ts": 1_700_000_000_123u64, "action": "session.start", "outcome": "denied",
             "code": crate::wire::Code::UnknownProject.as_str(), "error": "no project \"x\"",
             "token_projects": []},
            egress_row(json!({"host": "example.com", "port": 443, "allowed": true,
                "rule": "allow *", "sent": 1, "received": 2, "ms": 3, "folded": 4})),
        ]));
        let t = "2023-11-14 22:13:20.123Z";
        assert_eq!(
            rows_text(&a),
            format!(
                "{t}  session.start  allowed  s-1  token of project p, q  account=work\n\
                 {t}  session.start  denied  -  unknown_project  no project \"x\"\n\
                 2023-11-14 22:13:20.000Z  egress  allowed  -  example.com:443 ×4  1 B out, 2 B in, 3 ms  allow *"
            )
        );
        assert_eq!(rows_text(&rows(json!([]))), "");
    }

    fn report(more: Value) -> wire::ScanReport {
        let mut v = json!({"ok": true, "token_fingerprint": "sha256:ab12", "files": 3,
            "bytes": 300, "findings": [], "skipped": [], "complete": true});
        for (k, x) in more.as_object().unwrap() {
            v[k] = x.clone();
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_clean_complete_scan_says_not_found() {
        assert_eq!(
            scan_text(&report(json!({}))),
            "scanned 3 files (300 bytes) for the token sha256:ab12: not found"
        );
    }

    #[test]
    fn findings_and_places_not_read_are_listed_before_the_verdict() {
        let r = report(json!({"ok": false, "complete": false, "skipped_more": 2,
            "findings": [{"file": "/c/relay.log", "offset": 17, "encoding": "raw"},
                         {"file": "/c/x-****", "encoding": "base64"}],
            "skipped": [{"file": "/c/sessions/s-1", "why": "too deep"}]}));
        assert_eq!(
            scan_text(&r),
            "found  /c/relay.log:17  raw\n\
             found  /c/x-**** (its name)  base64\n\
             skipped  /c/sessions/s-1  too deep\n\
             skipped  2 more places, not listed\n\
             scanned 3 files (300 bytes) for the token sha256:ab12: found in 2 places; 3 places could not be read"
        );
        let one = report(
            json!({"complete": false, "skipped": [{"file": "/c/a", "why": "moved while read"}]}),
        );
        assert!(scan_text(&one)
            .ends_with(": not found in what it could read; 1 place could not be read"));
        let old = report(json!({"complete": false}));
        assert!(scan_text(&old)
            .ends_with(": not found in what it could read; it could not read everything"));
    }
}
