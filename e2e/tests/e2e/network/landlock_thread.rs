//! The Landlock domain of the denied ports lives on one host thread per port set, and
//! every shim for that set is forked there (docs/session-host.md#the-confined-thread).
//! Two ways that can go wrong, probed from real sessions: a sandboxed target forked
//! somewhere else (it would reach a denied port), and the domain leaking to the host's
//! other threads (an unsandboxed terminal would lose the port).

use std::net::TcpListener;

use relay_e2e::daemon::{base_settings, host_network, Relay};
use serde_json::json;

/// Connects to each port given on the command line and sends its tag; prints one line
/// per port: `PORT ok` or `PORT errno N`.
const PROBE: &str = r#"
import socket, sys
tag = sys.argv[1].encode()
for p in sys.argv[2:]:
    try:
        s = socket.create_connection(("127.0.0.1", int(p)), timeout=10)
        s.sendall(tag)
        s.close()
        print(p, "ok")
    except OSError as e:
        print(p, "errno", e.errno)
"#;

/// The names of the host's threads (`/proc/<pid>/task/*/comm`).
fn thread_names(pid: u64) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect()
}

#[test]
fn after_many_launches_a_target_is_still_denied_and_an_unsandboxed_terminal_is_not() {
    if relay_e2e::bwrap_only(
        "after_many_launches_a_target_is_still_denied_and_an_unsandboxed_terminal_is_not",
    ) {
        return;
    }
    let denied = TcpListener::bind("127.0.0.1:0").unwrap();
    let allowed = TcpListener::bind("127.0.0.1:0").unwrap();
    let (dp, ap) = (
        denied.local_addr().unwrap().port(),
        allowed.local_addr().unwrap().port(),
    );
    let mut s = host_network(base_settings(None));
    s["session_sandbox"] = json!({"denied_loopback_ports": [dp]});
    s["terminal_templates"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "open", "command": "/bin/sh", "sandbox": false}));
    let r = Relay::start(s);
    std::fs::write(r.project.join("probe.py"), PROBE).unwrap();
    let host = r
        .wait_event(|e| e["name"] == "host.started")
        .get("pid")
        .and_then(|p| p.as_u64())
        .expect("host.started with a pid");

    // An unsandboxed terminal: launched on one of the host's ordinary threads after
    // `first` sandboxed launches have gone through the confined thread.
    let unsandboxed = |tag: &str| {
        let v = r.template_terminal("open", &format!("exec python3 probe.py {tag} {dp} {ap}"));
        assert_eq!(v["sandboxed"], false, "{v}");
        let id = v["id"].as_str().unwrap();
        let ev = r.wait_exited(id);
        let log = r.cli(&["terminal", "log", "--id", id]).stdout;
        assert_eq!(ev["exit_status"], 0, "{ev}\n{log}");
        log
    };

    // Five rounds: the host has two runtime threads, and a domain leaked to one of them
    // shows only in the terminals launched there.
    for round in 0..5 {
        for _ in 0..8 {
            assert_eq!(r.sandbox_shell("true"), (0, String::new()));
        }
        // The sandboxed target: the denied port refuses (Landlock's EACCES), the other
        // one answers.
        let tag = format!("sandboxed-{round}");
        let (code, out) = r.sandbox_shell(&format!("exec python3 probe.py {tag} {dp} {ap}"));
        assert_eq!(code, 0, "{out}");
        assert!(
            out.contains(&format!("{dp} errno {}", libc::EACCES)),
            "round {round}: the sandboxed target was not denied: {out}"
        );
        assert!(out.contains(&format!("{ap} ok")), "round {round}: {out}");
        assert_eq!(
            relay_e2e::tags_reached(&denied),
            Vec::<String>::new(),
            "round {round}"
        );
        assert_eq!(
            relay_e2e::tags_reached(&allowed),
            vec![tag],
            "round {round}"
        );

        // The unsandboxed terminal reaches both: the domain stayed on its thread.
        let tag = format!("unsandboxed-{round}");
        let log = unsandboxed(&tag);
        assert!(
            log.contains(&format!("{dp} ok")) && log.contains(&format!("{ap} ok")),
            "round {round}: the unsandboxed terminal was confined: {log}"
        );
        assert_eq!(
            relay_e2e::tags_reached(&denied),
            vec![tag.clone()],
            "round {round}"
        );
        assert_eq!(
            relay_e2e::tags_reached(&allowed),
            vec![tag],
            "round {round}"
        );
    }

    // One confined thread for the one port set, however many launches went through it.
    let names = thread_names(host);
    assert_eq!(
        names.iter().filter(|n| *n == "relay-confined").count(),
        1,
        "{names:?}"
    );
}
