//! Issue 39: every reader of the audit log reads bounded and from the end. `relay audit
//! --since TIME` prints only the rows written since, `relay audit --follow` the rows as
//! they are written, across a rotation of the log, each row once.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::sync::mpsc;

use relay_e2e::daemon::{base_settings, Relay};
use serde_json::Value;

/// The `session_id`s of the rows of `v` with `action`.
fn ids(rows: &[Value], action: &str) -> Vec<String> {
    rows.iter()
        .filter(|r| r["action"] == action)
        .filter_map(|r| r["session_id"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn relay_audit_since_prints_only_newer_rows_and_follow_prints_each_new_row_once_across_a_rotation()
{
    let r = Relay::start(base_settings(None));
    let (code, _) = r.sandbox_shell("true");
    assert_eq!(code, 0);
    let first = ids(&r.audit_rows(), "session_launch");
    assert_eq!(first.len(), 1);
    r.wait_exited(&first[0]);

    // --since: the last hour has the run, the far future nothing; a bad time is said.
    let hour: Value = r.cli_json(&["audit", "--since", "1h"]);
    let rows = hour["rows"].as_array().unwrap().clone();
    assert_eq!(ids(&rows, "session_end"), first);
    let none = r.cli_json(&["audit", "--since", "2099-01-01T00:00:00Z"]);
    assert_eq!(none["rows"], serde_json::json!([]), "{none}");
    let bad = r.cli(&["audit", "--since", "yesterday"]);
    assert_eq!(bad.status, 1);
    assert!(
        bad.stderr.contains("--since \"yesterday\""),
        "{}",
        bad.stderr
    );

    // --follow from now on, one JSON row a line: from a time before anything below, so
    // however late the follower starts it misses nothing.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let from = relay::text::utc_ms(now);
    let mut follower = r
        .cli_command(&["audit", "--follow", "--json", "--since", &from])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = follower.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(serde_json::from_str(&line).unwrap()).is_err() {
                break;
            }
        }
    });

    // The log grows past its rotation size with old rows (not since the follow), so the
    // next row relay writes rotates it.
    let pad = format!(
        "{{\"ts\":1,\"action\":\"padding\",\"outcome\":\"allowed\",\"error\":\"{}\"}}\n",
        "x".repeat(1000)
    );
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(r.config.join("audit.jsonl"))
        .unwrap();
    log.write_all(pad.repeat(8 * 1024 + 512).as_bytes())
        .unwrap();
    drop(log);
    let (code, _) = r.sandbox_shell("true");
    assert_eq!(code, 0);
    assert!(r.config.join("audit.jsonl.1").exists(), "no rotation");

    // The follower prints the run's launch and end, once each, and nothing older.
    let mut got: Vec<Value> = vec![];
    while ids(&got, "session_end").is_empty() {
        let row = lines
            .recv_timeout(relay_e2e::WAIT)
            .unwrap_or_else(|_| panic!("the follower printed no end within the wait: {got:?}"));
        got.push(row);
    }
    let _ = follower.kill();
    let _ = follower.wait();
    let (launched, ended) = (ids(&got, "session_launch"), ids(&got, "session_end"));
    assert_eq!(launched.len(), 1, "{got:?}");
    assert_eq!(ended, launched, "{got:?}");
    assert_ne!(ended, first);
    assert!(got.iter().all(|r| r["action"] != "padding"), "{got:?}");
    while let Ok(row) = lines.try_recv() {
        assert!(
            row["session_id"] != ended[0].as_str() || row["action"] != "session_end",
            "printed twice: {row}"
        );
    }
}
