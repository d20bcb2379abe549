//! `relay audit --follow`: the rows as they are written. Each round waits for relay's
//! next event (`GET /api/events?wait_ms=`, at most 5 s), then asks for the rows written
//! since the last one printed (`GET /api/audit?since=`). The daemon reads them from the
//! end of the log and its rotated generations, so a rotation loses nothing and no read
//! is larger than the daemon's bound (docs/routes.md#logs-and-their-bounds).

use std::io::Write;
use std::process::ExitCode;

use crate::cli::client::Client;
use crate::cli::fail;
use crate::wire;

/// The rows a follow prints first when neither `--tail` nor `--since` says.
const FIRST_ROWS: usize = 10;
/// The most rows one round asks for (the daemon's own most).
const ROUND_ROWS: usize = 10_000;
const WAIT_MS: u64 = 5_000;

/// Where a follow stands: the time of the last row printed and how many rows of that
/// very millisecond it printed (the next round's answer starts with them again).
#[derive(Debug, Default, PartialEq, Eq)]
struct Mark {
    ts: u64,
    at_ts: usize,
}

impl Mark {
    /// The rows of `rows` (oldest first, none older than the mark) not printed yet;
    /// the mark moves past them.
    fn fresh<'a>(&mut self, rows: &'a [wire::AuditRow]) -> &'a [wire::AuditRow] {
        let seen = rows
            .iter()
            .take(self.at_ts)
            .take_while(|r| r.ts == self.ts)
            .count();
        let fresh = &rows[seen..];
        if let Some(last) = fresh.last() {
            let same = fresh.iter().rev().take_while(|r| r.ts == last.ts).count();
            self.at_ts = if last.ts == self.ts {
                self.at_ts + same
            } else {
                same
            };
            self.ts = last.ts;
        }
        fresh
    }
}

fn rows(
    c: &Client,
    tail: Option<usize>,
    since: Option<u64>,
) -> Result<Vec<wire::AuditRow>, String> {
    let (a, _): (wire::AuditRows, _) = c.call_as("GET", &super::audit_path(tail, since))?;
    Ok(a.rows)
}

/// The last event's number now, so the first wait waits for a new one.
fn last_event(c: &Client, after: u64, wait_ms: u64) -> Result<u64, String> {
    let path = format!("/api/events?after={after}&wait_ms={wait_ms}");
    let (e, _): (wire::Events, _) = c.call_as("GET", &path)?;
    Ok(e.events.iter().map(|e| e.seq).max().unwrap_or(after))
}

/// Writes the rows; `false` once stdout is gone (the reader went away).
fn put(rows: &[wire::AuditRow], json: bool) -> bool {
    let mut text = String::new();
    for r in rows {
        let line = if json {
            crate::cli::termout::json_line(&serde_json::to_value(r).unwrap_or_default())
        } else {
            crate::cli::termout::visible(super::row(r).as_bytes())
        };
        text.push_str(&line);
        text.push('\n');
    }
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_ok()
}

pub fn run(c: &Client, tail: Option<usize>, since: Option<u64>, json: bool) -> ExitCode {
    let start = super::since_ms("0s").unwrap_or(0);
    let first_tail = tail.or(since.is_none().then_some(FIRST_ROWS));
    let mut seq = match last_event(c, 0, 0) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let first = match rows(c, first_tail, since) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let mut mark = Mark {
        ts: since.unwrap_or(0),
        at_ts: 0,
    };
    if !put(mark.fresh(&first), json) {
        return ExitCode::SUCCESS;
    }
    // What was written before the follow and left out of the first rows (`--tail 0`)
    // stays out.
    if mark.ts < start {
        mark = Mark {
            ts: start,
            at_ts: 0,
        };
    }
    loop {
        seq = match last_event(c, seq, WAIT_MS) {
            Ok(s) => s,
            Err(e) => return fail(e),
        };
        let batch = match rows(c, Some(ROUND_ROWS), Some(mark.ts)) {
            Ok(r) => r,
            Err(e) => return fail(e),
        };
        if !put(mark.fresh(&batch), json) {
            return ExitCode::SUCCESS;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ts: u64, action: &str) -> wire::AuditRow {
        wire::AuditRow {
            ts,
            action: action.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_row_is_printed_once_even_when_the_next_round_starts_in_its_millisecond() {
        let mut m = Mark::default();
        let first = [at(5, "a"), at(7, "b"), at(7, "c")];
        assert_eq!(m.fresh(&first).len(), 3);
        assert_eq!(m, Mark { ts: 7, at_ts: 2 });
        // Asked again since 7: b and c come back, then what is new.
        let next = [at(7, "b"), at(7, "c"), at(7, "d"), at(9, "e")];
        let fresh: Vec<&str> = m.fresh(&next).iter().map(|r| r.action.as_str()).collect();
        assert_eq!(fresh, ["d", "e"]);
        assert_eq!(m, Mark { ts: 9, at_ts: 1 });
        // Nothing new: nothing printed, the mark stays.
        assert!(m.fresh(&[at(9, "e")]).is_empty());
        assert_eq!(m, Mark { ts: 9, at_ts: 1 });
        let more = [at(9, "e"), at(9, "f")];
        let fresh: Vec<&str> = m.fresh(&more).iter().map(|r| r.action.as_str()).collect();
        assert_eq!(fresh, ["f"]);
        assert_eq!(m, Mark { ts: 9, at_ts: 2 });
    }
}
