//! Issue 39: a session that floods its egress proxy with refused connections. Each
//! refusal was an audit row and an event, with no budget and no rotation: relay's config
//! dir grew by hundreds of MiB in seconds, and every reader of the audit log read the
//! whole file into the daemon. Now a session's rows have a budget, the logs rotate, and
//! the readers read from the end (docs/routes.md#logs-and-their-bounds); with
//! `session_sandbox.egress_over_budget: "stop"`, a session over its budget is stopped.

use relay_e2e::daemon::{base_settings, Relay};
use serde_json::{json, Value};

/// Pipelines `N` `CONNECT`s to hosts off the list through the proxy, on 16
/// connections, then prints how many were refused (`403`).
const FLOOD: &str = r#"
import os, socket, threading
N = int(os.environ["FLOOD_N"])
per, lanes = N // 16, 16
counts = [0] * lanes
def lane(k):
    s = socket.create_connection(("127.0.0.1", 3128))
    ask = b"".join(b"CONNECT h%d.flood.invalid:443 HTTP/1.1\r\nHost: x\r\n\r\n" % (k * per + i % 50) for i in range(per))
    done = threading.Event()
    def reader():
        buf = b""
        while counts[k] < per:
            b = s.recv(65536)
            if not b:
                break
            buf += b
            n = buf.count(b"HTTP/1.1 403")
            counts[k] += n
            buf = buf[buf.rfind(b"HTTP/1.1 403") + 1:] if n else buf[-16:]
        done.set()
    t = threading.Thread(target=reader)
    t.start()
    s.sendall(ask)
    t.join()
    s.close()
threads = [threading.Thread(target=lane, args=(k,)) for k in range(lanes)]
for t in threads: t.start()
for t in threads: t.join()
print("refused", sum(counts))
"#;

/// The bytes of every file under `dir`.
fn size_of(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let m = std::fs::symlink_metadata(e.path()).unwrap();
        if m.is_dir() {
            total += size_of(&e.path());
        } else {
            total += m.len();
        }
    }
    total
}

/// The daemon's resident set, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

#[test]
fn a_session_refused_100000_times_leaves_relays_disk_and_memory_bounded() {
    if relay_e2e::bwrap_only("a_session_refused_100000_times_leaves_relays_disk_and_memory_bounded")
    {
        return;
    }
    let mut s = base_settings(None);
    for t in s["terminal_templates"].as_array_mut().unwrap() {
        if t["id"] == "shell" {
            t["egress"] = json!(["api.example.invalid:443"]);
        }
    }
    let r = Relay::start(s.clone());
    std::fs::write(r.project.join("flood.py"), FLOOD).unwrap();
    let pid = r.daemon_pid().unwrap();
    let (disk, rss) = (size_of(&r.config), rss_kib(pid));

    const N: u64 = 100_000;
    let (code, out) = r.sandbox_shell(&format!(
        "cd \"$HOME/project\" && FLOOD_N={N} python3 flood.py"
    ));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("refused {N}")), "{out}");
    let id = r
        .audit_rows()
        .iter()
        .find(|row| row["action"] == "egress")
        .and_then(|row| row["session_id"].as_str().map(str::to_string))
        .expect("an egress row");
    r.wait_exited(&id);

    // Every refusal is counted, one by one or folded, in a few hundred rows. (A refusal
    // is answered before its row is written: the last rows may follow the exit.)
    let session_rows = || -> Vec<Value> {
        r.audit_rows()
            .into_iter()
            .filter(|row| row["session_id"] == id.as_str())
            .collect()
    };
    let counted = |rows: &[Value]| -> u64 {
        rows.iter()
            .filter(|r| r["action"] == "egress")
            .map(|r| r["egress"]["folded"].as_u64().unwrap_or(1))
            .sum()
    };
    relay_e2e::wait::until(relay_e2e::WAIT, || counted(&session_rows()) >= N);
    let rows = session_rows();
    let egress: Vec<&Value> = rows.iter().filter(|r| r["action"] == "egress").collect();
    assert_eq!(counted(&rows), N, "{} egress rows", egress.len());
    assert!(egress.len() < 400, "{} egress rows", egress.len());
    assert!(egress.iter().all(|r| r["outcome"] == "denied"));
    let told: Vec<&Value> = rows
        .iter()
        .filter(|r| r["action"] == "egress_budget")
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(
        told[0]["error"].as_str().unwrap().contains("folded"),
        "{told:?}"
    );

    // relay's config dir and memory grew by little.
    let grown = size_of(&r.config).saturating_sub(disk);
    assert!(
        grown < 2 * 1024 * 1024,
        "the config dir grew by {grown} bytes"
    );
    let rss_grown = rss_kib(pid).saturating_sub(rss);
    assert!(rss_grown < 64 * 1024, "the daemon grew by {rss_grown} KiB");

    // The last rows, read from the end.
    let tail = r.cli(&["audit", "--tail", "50", "--json"]);
    assert_eq!(tail.status, 0, "{}", tail.stderr);
    let v: Value = serde_json::from_str(&tail.stdout).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), 50, "{v}");

    // With `egress_over_budget: "stop"`, read when the budget is exceeded, a small flood
    // stops its session: its end, audit row and event say `egress_over_budget`.
    s["session_sandbox"]["egress_over_budget"] = json!("stop");
    r.write_settings(&s);
    let started = r.shell_terminal("cd \"$HOME/project\" && FLOOD_N=4000 python3 flood.py");
    let id = started["id"].as_str().expect("a terminal id").to_string();
    let ended = r.wait_exited(&id);
    assert_eq!(ended["reason"], "egress_over_budget", "{ended}");
    let ended_row = |rows: &[Value]| rows.iter().any(|r| r["action"] == "session_end");
    assert!(
        relay_e2e::wait::until(relay_e2e::WAIT, || ended_row(&session_rows_of(&r, &id))),
        "no session_end row"
    );
    let rows = session_rows_of(&r, &id);
    let told = rows.iter().find(|r| r["action"] == "egress_budget");
    assert!(
        told.is_some_and(|t| t["error"]
            .as_str()
            .unwrap()
            .contains("the session is stopped")),
        "{rows:?}"
    );
    let end = rows.iter().find(|r| r["action"] == "session_end");
    assert_eq!(end.map(|e| &e["error"]), Some(&json!("egress_over_budget")));
    let (status, v, _) = r.api("GET", "/api/terminals", None);
    assert_eq!(status, 200, "{v}");
    let entry = v["terminals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id.as_str());
    assert_eq!(
        entry.map(|t| &t["exit_reason"]),
        Some(&json!("egress_over_budget")),
        "{v}"
    );
}

/// The audit rows of session `id`.
fn session_rows_of(r: &Relay, id: &str) -> Vec<Value> {
    r.audit_rows()
        .into_iter()
        .filter(|row| row["session_id"] == id)
        .collect()
}
