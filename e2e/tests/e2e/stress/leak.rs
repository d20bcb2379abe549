//! Issue 12: nothing grows with the number of launches. The daemon's and the host's
//! open descriptors before and after many `relay sandbox` runs and ended terminals,
//! counted in `/proc/<pid>/fd` (docs/performance.md, "1,000 sequential launches").

use std::collections::BTreeMap;
use std::path::Path;

use relay_e2e::daemon::{base_settings, Relay};
use relay_e2e::{wait, WAIT};
use serde_json::Value;

/// What a few descriptors may come and go by (a connection the CLI just closed, the
/// runtime's own) without being a leak: far below one per launch.
const NOISE: usize = 4;

/// A process's open descriptors by what they point at, `<instance>` for the test's
/// folder: shown when the count grew, so the failure says what leaked.
fn fds(pid: u64, root: &Path) -> BTreeMap<String, usize> {
    let mut kinds = BTreeMap::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        let target = std::fs::read_link(e.path())
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let kind = match target.split_once(":[") {
            Some((k, _)) => k.to_string(),
            None => match Path::new(&target).parent() {
                Some(dir) if target.starts_with('/') => format!("{}/*", dir.display())
                    .replace(&root.display().to_string(), "<instance>"),
                _ => target,
            },
        };
        *kinds.entry(kind).or_insert(0) += 1;
    }
    kinds
}

fn total(m: &BTreeMap<String, usize>) -> usize {
    m.values().sum()
}

fn host_pid(r: &Relay) -> u64 {
    r.all_events()
        .iter()
        .rev()
        .find(|e| e["name"] == "host.started")
        .and_then(|e| e["pid"].as_u64())
        .expect("a host.started event with a pid")
}

#[test]
fn fifty_relay_sandbox_runs_and_twenty_ended_terminals_leave_no_descriptor_behind() {
    let r = Relay::start(base_settings(None));
    let daemon = u64::from(r.ready.pid);
    // Warm-up: what the first launches open once (the audit and event files, the
    // host's first connection) is not growth.
    for _ in 0..3 {
        assert_eq!(r.sandbox_shell("true").0, 0);
    }
    // Each run's terminal is purged by the daemon after its attach: wait for that too.
    r.wait_events(3, |e| e["name"] == "session.purged");
    let warm = r.shell_terminal("true");
    r.wait_exited(warm["id"].as_str().unwrap());
    let host = host_pid(&r);
    let before = (fds(daemon, &r.root), fds(host, &r.root));

    for i in 0..50 {
        let (code, out) = r.sandbox_shell(&format!("echo run-{i}-end; exit 3"));
        assert_eq!((code, out.trim_end()), (3, format!("run-{i}-end").as_str()));
    }
    r.wait_events(50, |e| e["name"] == "session.purged");
    // Ended terminals nobody purges: listed, their output kept, their descriptors not.
    let mut kept = Vec::new();
    for i in 0..20 {
        let t = r.shell_terminal(&format!("echo kept-{i}"));
        let id = t["id"].as_str().unwrap().to_string();
        r.wait_exited(&id);
        kept.push(id);
    }
    assert_eq!(host_pid(&r), host, "the host was restarted");

    // An ended terminal closes its descriptors right after its exit is reported: wait
    // for that (bounded), then compare.
    let grown = || {
        let now = (fds(daemon, &r.root), fds(host, &r.root));
        total(&now.0) > total(&before.0) + NOISE || total(&now.1) > total(&before.1) + NOISE
    };
    wait::until(WAIT, || !grown());
    let after = (fds(daemon, &r.root), fds(host, &r.root));
    assert!(
        !grown(),
        "descriptors grew over 50 relay sandbox runs and 20 ended terminals:\n\
         daemon {} -> {}: {:?} -> {:?}\nhost {} -> {}: {:?} -> {:?}",
        total(&before.0),
        total(&after.0),
        before.0,
        after.0,
        total(&before.1),
        total(&after.1),
        before.1,
        after.1
    );

    // Each `relay sandbox` removed its terminal once it had printed it; the terminals
    // started without it are still listed, and their output still reads.
    let (_, list, _) = r.api("GET", "/api/terminals", None);
    let mut listed: Vec<String> = list["terminals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect();
    listed.sort();
    let mut want: Vec<String> = kept.clone();
    want.push(warm["id"].as_str().unwrap().to_string());
    want.sort();
    assert_eq!(listed.len(), want.len(), "terminals listed after the runs");
    assert_eq!(listed, want);
    let log = r.cli(&["terminal", "log", "--id", &kept[19]]);
    assert!(log.stdout.contains("kept-19"), "{}", log.stdout);
    let purged = r
        .all_events()
        .iter()
        .filter(|e: &&Value| e["name"] == "session.purged")
        .count();
    assert_eq!(purged, 53);
}
