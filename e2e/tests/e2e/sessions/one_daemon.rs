//! One `relay serve` per config dir (docs/cli.md#one-relay-per-config-dir): a second one
//! is refused at once and touches nothing of the first's, and the lock a killed relay
//! leaves is taken by the next one, whatever of the killed one's is still alive.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use relay::wire;
use relay_e2e::daemon::{base_settings, Relay};
use relay_e2e::procs::{alive, holds_open, kill9, session_pids, signal};
use relay_e2e::{wait, WAIT};
use serde_json::{json, Value};

/// Settings with an unsandboxed `open` template beside the suite's.
fn settings() -> Value {
    let mut s = base_settings(None);
    s["terminal_templates"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "open", "command": "/bin/sh", "sandbox": false}));
    s
}

/// Whether every thread of `pid` is stopped by a signal (state `T`).
fn stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("stat")).is_ok_and(|st| {
            st.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T'))
        })
    })
}

/// A child killed and reaped when it goes out of scope.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn terminal(r: &Relay, template: &str, script: &str) -> String {
    let (st, v, _) = r.api(
        "POST",
        "/api/terminals",
        Some(&json!({"project": "p1", "template": template, "extra_args": ["-c", script]})),
    );
    assert_eq!(st, 201, "{v}");
    v["id"].as_str().expect("an id").to_string()
}

fn session(r: &Relay) -> String {
    let (st, v, _) = r.api("POST", "/api/sessions", Some(&json!({"project": "p1"})));
    assert_eq!(st, 201, "{v}");
    v["id"].as_str().expect("an id").to_string()
}

/// Every file under `dir` with its bytes, sorted (what "untouched" is checked against).
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    relay_e2e::walk_files(dir, &mut |p| {
        out.push((p.to_path_buf(), std::fs::read(p).unwrap()));
    });
    out.sort();
    out
}

/// What of the config dir a second `relay serve` must leave as it was: the ledger files,
/// the event and audit logs, the daemon's log, `ready.json`, the lock file, the
/// settings and the API bearer, byte for byte; the sockets by inode; the profiles by name.
#[derive(PartialEq)]
struct Snapshot {
    files: Vec<(PathBuf, Vec<u8>)>,
    sockets: Vec<u64>,
    profiles: Vec<String>,
}

fn snapshot(r: &Relay) -> Snapshot {
    let mut kept = files(&r.config.join("ledger"));
    for name in [
        "events.jsonl",
        "audit.jsonl",
        "relay.log",
        "ready.json",
        "relay.lock",
        "settings.json",
        "api-token",
    ] {
        let p = r.config.join(name);
        kept.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
    }
    let sockets = ["relay.sock", "bridge.sock", "sessions/host.sock"]
        .iter()
        .map(|s| {
            std::fs::symlink_metadata(r.config.join(s))
                .unwrap_or_else(|e| panic!("{s}: {e}"))
                .ino()
        })
        .collect();
    let mut profiles: Vec<String> = std::fs::read_dir(r.config.join("profiles"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    profiles.sort();
    Snapshot {
        files: kept,
        sockets,
        profiles,
    }
}

/// `relay serve` started again on `r`'s config dir, as a person would in another
/// terminal: its exit status, stdout and stderr. A serve that is not refused prints
/// its ready path (the test fails there); one that is refused prints nothing on stdout
/// and exits, and the read ends at its end of file: no wait on a clock either way.
fn second_serve(r: &Relay) -> (i32, String, String) {
    let mut child = r
        .cli_command(&["serve"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the second relay serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if !line.is_empty() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("a second relay serve ran on the same config dir: it printed {line:?}");
    }
    let status = wait::child_within(&mut child, WAIT).expect("the second relay serve exits");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    (status.code().unwrap_or(-1), line, err)
}

fn refusal(config: &Path, pid: u32) -> String {
    format!(
        "error: relay is already running for {} (pid {pid}, started by hand); stop it with \
         Ctrl-C where it runs, or `kill {pid}`\n",
        config.display()
    )
}

#[test]
fn a_second_relay_serve_is_refused_at_once_and_the_first_keeps_its_sessions_ledger_and_events() {
    let r = Relay::start(settings());
    let pid = r.ready.pid;
    let term = terminal(&r, "shell", "echo term-started; exec sleep 600");
    let open = terminal(&r, "open", "echo open-started; exec sleep 600");
    let sess = session(&r);
    assert_eq!(r.turn(&sess, "before"), "echo: before");
    let ended = terminal(&r, "shell", "exit 3");
    r.wait_exited(&ended);
    // Every launch is on file, and the sandboxed ones have their profiles.
    for id in [&term, &open, &sess, &ended] {
        assert!(
            r.config.join(format!("ledger/{id}.json")).exists(),
            "{id} has no ledger file"
        );
    }
    let before = snapshot(&r);
    assert_eq!(
        before.profiles.len(),
        2,
        "two sandboxed sessions run: {:?}",
        before.profiles
    );
    let lock: Value = serde_json::from_slice(&std::fs::read(r.config.join("relay.lock")).unwrap())
        .expect("the lock file names its holder");
    assert_eq!(lock, json!({"pid": pid, "service": null}));

    let (code, out, err) = second_serve(&r);
    assert_eq!((code, out.as_str()), (1, ""), "{err}");
    assert_eq!(err, refusal(&r.config, pid));
    // Nothing of the first's was read back, rewritten, removed or taken over.
    assert!(
        snapshot(&r) == before,
        "the second relay serve touched the first's files"
    );

    // The first answers on its socket, with its sessions running and reachable.
    let st: wire::Status = r.api_typed("GET", "/api/status");
    assert_eq!((st.pid, st.sessions_running, st.service), (pid, 3, None));
    for (id, word) in [(&term, "term-started"), (&open, "open-started")] {
        let (code, _, log) = r.api("GET", &format!("/api/terminals/{id}/log"), None);
        assert_eq!(code, 200);
        assert!(String::from_utf8_lossy(&log).contains(word), "{id}");
        assert!(!session_pids(id).is_empty(), "{id} runs nothing");
    }
    assert_eq!(r.turn(&sess, "after"), "echo: after");
    let text = r.cli(&["status"]);
    assert!(
        text.stdout.starts_with(&format!(
            "relay {} running (pid {pid}, started by hand)\n",
            st.version
        )),
        "{}",
        text.stdout
    );
    // No event of a restart: the only ends are the one terminal that exited.
    let ends: Vec<Value> = r
        .all_events()
        .into_iter()
        .filter(|e| e["name"] == "session.exited")
        .collect();
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(ends[0]["session_id"], ended.as_str());
}

#[test]
fn a_lock_left_by_a_killed_relay_is_taken_over_though_its_host_still_lives() {
    let mut r = Relay::start(settings());
    let lock = r.config.join("relay.lock");
    let ids = [
        terminal(&r, "shell", "exec sleep 600"),
        terminal(&r, "open", "exec sleep 600"),
        session(&r),
    ];
    let st: wire::Status = r.api_typed("GET", "/api/status");
    let host = st.host.expect("a live host").pid;
    // No child of relay holds the lock: not the host, not a process of any session
    // (sandboxed, unsandboxed, Claude), or it would outlive a killed relay holding it.
    let mut children = vec![host];
    for id in &ids {
        let pids = session_pids(id);
        assert!(!pids.is_empty(), "{id} runs nothing");
        children.extend(pids);
    }
    for p in &children {
        assert!(
            !holds_open(*p, &lock),
            "process {p} holds {}",
            lock.display()
        );
    }
    assert!(
        holds_open(r.ready.pid, &lock),
        "relay serve does not hold its lock"
    );

    // The daemon killed while its host is stopped, so the host and its sessions stay
    // alive for as long as the test wants: whatever they hold stays held. The host leads
    // a process group of its own; once relay dies that group would be orphaned with a
    // stopped member, and the kernel sends such a group SIGHUP then SIGCONT, which ends
    // the host. A group-mate whose parent is the test (same session, another group)
    // keeps the group from being orphaned.
    let mate = std::process::Command::new("sleep")
        .arg("600")
        .process_group(host as i32)
        .spawn()
        .map(KillOnDrop)
        .expect("a group-mate for the host");
    signal(host, libc::SIGSTOP);
    assert!(wait::until(WAIT, || stopped(host)), "the host did not stop");
    let old = r.ready.pid;
    r.kill();
    assert!(alive(host), "the stopped host is gone");
    r.launch_daemon();
    let new = r.ready.pid;
    assert_ne!(new, old);
    let holder: Value = serde_json::from_slice(&std::fs::read(&lock).unwrap()).unwrap();
    assert_eq!(holder["pid"], new, "{holder}");
    // The new one holds the lock for real: a third is refused naming it.
    let (code, _, err) = second_serve(&r);
    assert_eq!(code, 1, "{err}");
    assert_eq!(err, refusal(&r.config, new));

    // The old host goes (SIGKILL ends a stopped process), and its sessions with it.
    kill9(host);
    assert!(wait::until(WAIT, || !alive(host)), "the old host lives on");
    drop(mate);
    for id in &ids {
        assert!(
            wait::until(WAIT, || session_pids(id).is_empty()),
            "{id} outlived its host: {:?}",
            session_pids(id)
        );
    }
    // The new relay read them back as ended by the restart, and launches work.
    let list: wire::Terminals = r.api_typed("GET", "/api/terminals");
    assert!(
        list.terminals
            .iter()
            .all(|t| t.exit_reason.as_deref() == Some("relay_restarted")),
        "{:?}",
        list.terminals
    );
    let id = terminal(&r, "shell", "echo after-takeover");
    assert_eq!(r.wait_exited(&id)["exit_status"], 0);
}

/// A start that fails after its sockets are bound (here `api.listen` on a port that is
/// taken) removes them: no `relay.sock` or `bridge.sock` is left to read as a relay
/// running, and the next start works.
#[test]
fn a_start_that_fails_after_binding_leaves_no_socket() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let mut s = base_settings(None);
    s["api"]["listen"] = json!(format!("127.0.0.1:{port}"));
    let mut r = Relay::prepare(None, false);
    r.write_settings(&s);
    let out = r
        .serve_command()
        .stdin(Stdio::null())
        .output()
        .expect("relay serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("api.listen 127.0.0.1:{port}")),
        "{err}"
    );
    for name in ["relay.sock", "bridge.sock", "ready.json"] {
        assert!(
            r.config.join(name).symlink_metadata().is_err(),
            "{name} left behind: {err}"
        );
    }
    drop(taken);
    r.launch_daemon();
    assert_eq!(r.cli(&["status"]).status, 0);
}
