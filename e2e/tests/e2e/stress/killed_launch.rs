//! Issue 26: a launch killed at any step leaves nothing that the next start does not find
//! and remove. `relay serve` is stopped at each step by `RELAY_E2E_LAUNCH_PAUSE` (the
//! launch writes `<step> <id>` into a FIFO the test reads, then waits there for good:
//! docs/testing.md#stopping-a-launch-at-a-step), SIGKILLed there, and started again.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Stdio;

use relay::daemon::launch::PAUSE_STEPS;
use relay::wire;
use relay_e2e::daemon::{base_settings, Relay};
use relay_e2e::procs::{alive, session_pids};
use relay_e2e::{wait, WAIT};
use serde_json::Value;

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // Safety: mkfifo reads the NUL-terminated path and creates a FIFO; no other memory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
}

/// The names in `dir` (none when it is not there).
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// What of launch `id` is on disk or running: its temp folder (and Claude's config in
/// it), profiles, log files, ledger files, processes.
fn traces(r: &Relay, id: &str) -> Vec<String> {
    let mut out = Vec::new();
    let folder = r.tmp.join(format!("relay-{id}"));
    if folder.symlink_metadata().is_ok() {
        out.push(format!("{} {:?}", folder.display(), names(&folder)));
    }
    out.extend(
        names(&r.config.join("profiles"))
            .into_iter()
            .map(|p| format!("profile {p}")),
    );
    out.extend(
        names(&r.config.join("sessions/logs"))
            .into_iter()
            .filter(|n| n.starts_with(id))
            .map(|n| format!("log {n}")),
    );
    out.extend(
        names(&r.config.join("ledger"))
            .into_iter()
            .filter(|n| n.contains(id))
            .map(|n| format!("ledger {n}")),
    );
    out.extend(session_pids(id).into_iter().map(|p| format!("process {p}")));
    out
}

#[test]
fn a_sigkill_of_relay_at_each_launch_step_leaves_nothing_after_the_next_start() {
    // Every step is tried before the test says what was left, and where.
    let mut left_behind = Vec::new();
    for step in PAUSE_STEPS {
        let mut r = Relay::prepare(None, false);
        r.write_settings(&base_settings(None));
        let fifo = r.root.join("pause.fifo");
        mkfifo(&fifo);
        r.serve_env.push((
            "RELAY_E2E_LAUNCH_PAUSE".into(),
            format!("{step}:{}", fifo.display()),
        ));
        r.launch_daemon();
        let st: wire::Status = r.api_typed("GET", "/api/status");
        let host = st.host.expect("a live host").pid;

        // A sandboxed Claude session: every step a launch has (its Claude config, its
        // profile, the host's session, the audit row).
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = fifo.clone();
        std::thread::spawn(move || {
            let _ = tx.send(std::fs::read_to_string(reader));
        });
        let start = r
            .cli_command(&["session", "start", "--project", "p1", "--json"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("relay session start");
        let told = rx
            .recv_timeout(WAIT)
            .unwrap_or_else(|_| panic!("{step}: the launch never paused"))
            .unwrap();
        let (at, id) = told.trim_end().split_once(' ').expect("<step> <id>");
        assert_eq!(at, step);
        let id = id.to_string();

        // What the launch has made by then, so the test can fail.
        let folder = r.tmp.join(format!("relay-{id}"));
        assert!(folder.is_dir(), "{step}: no temp folder");
        let seeded = folder.join("claude-config/.claude.json").is_file();
        assert_eq!(seeded, step != "temp_dir", "{step}: Claude's config");
        let profiles = names(&r.config.join("profiles")).len();
        let sandboxed = !matches!(step, "temp_dir" | "claude_config");
        assert_eq!(profiles, usize::from(sandboxed), "{step}: profiles");
        let running = matches!(step, "host" | "audited");
        assert_eq!(!session_pids(&id).is_empty(), running, "{step}: processes");
        let logs = names(&r.config.join("sessions/logs"));
        assert_eq!(
            logs.iter().any(|n| n.starts_with(&id)),
            running,
            "{step}: {logs:?}"
        );
        let rows = r.audit_rows();
        let audited = rows
            .iter()
            .any(|row| row["action"] == "session_launch" && row["session_id"] == id.as_str());
        assert_eq!(audited, step == "audited", "{step}: {rows:?}");

        // A link the session could have left in its folder, to a folder of the person's:
        // removed as a link, what it points at kept.
        let precious = r.root.join("precious");
        std::fs::create_dir_all(&precious).unwrap();
        std::fs::write(precious.join("keep"), "keep").unwrap();
        std::os::unix::fs::symlink(&precious, folder.join("planted-link")).unwrap();

        // SIGKILL there. The launch was never answered.
        r.kill();
        let out = start.wait_with_output().unwrap();
        assert!(
            !out.status.success() && out.stdout.is_empty(),
            "{step}: {out:?}"
        );
        assert!(wait::until(WAIT, || !alive(host)), "{step}: the host lives");
        assert!(
            wait::until(WAIT, || session_pids(&id).is_empty()),
            "{step}: {id} outlived its relay"
        );
        assert!(
            !traces(&r, &id).is_empty(),
            "{step}: the kill left nothing to find"
        );

        // The next start finds it and removes it, saying so once.
        r.serve_env.clear();
        r.launch_daemon();
        assert_eq!(
            std::fs::read_to_string(precious.join("keep")).unwrap(),
            "keep",
            "{step}: the removal followed the planted link"
        );
        let left = traces(&r, &id);
        if !left.is_empty() {
            left_behind.push(format!("{step}: {left:?}"));
            continue;
        }
        let stray: Vec<String> = names(&r.tmp)
            .into_iter()
            .filter(|n| n.starts_with("relay-"))
            .collect();
        assert!(stray.is_empty(), "{step}: {stray:?}");
        let (_, list, _) = r.api("GET", "/api/sessions", None);
        assert_eq!(list["sessions"], serde_json::json!([]), "{step}");
        let purges: Vec<Value> = r
            .audit_rows()
            .into_iter()
            .filter(|row| row["action"] == "session_purge")
            .collect();
        assert_eq!(purges.len(), 1, "{step}: {purges:?}");
        assert_eq!(purges[0]["session_id"], id.as_str());
        assert_eq!(purges[0]["error"], "launch_cut_short");
        let ev = r.wait_event(|e| e["name"] == "session.purged");
        assert_eq!(
            (&ev["session_id"], &ev["reason"]),
            (&Value::from(id.as_str()), &Value::from("launch_cut_short")),
            "{step}"
        );

        // And launches work: a session starts and answers.
        let s: wire::Session = r.cli_typed(&["session", "start", "--project", "p1"]);
        assert_eq!(r.turn(&s.id, "after"), "echo: after", "{step}");
        assert!(
            r.config.join(format!("ledger/{}.json", s.id)).is_file()
                && !r.config.join(format!("ledger/{}.launching", s.id)).exists(),
            "{step}: the answered launch is on file, its marker gone"
        );
    }
    assert!(
        left_behind.is_empty(),
        "left after the next start:\n{}",
        left_behind.join("\n")
    );
}

/// A process of a session that outlived a killed relay — what a kill in bwrap's one
/// unguarded moment (between its `clone` and the parent-death signal of the sandbox's
/// first process) leaves, stood in for by a process holding a mount of the session's
/// temp folder in a mount namespace of its own — is ended by the next start, before
/// the folder goes (docs/THREAT-MODEL.md#leftovers).
#[test]
fn a_process_a_killed_relay_left_in_a_sessions_sandbox_is_ended_at_the_next_start() {
    let mut r = Relay::start(base_settings(None));
    let v = r.shell_terminal("touch up && exec sleep 600");
    let id = v["id"].as_str().unwrap().to_string();
    assert!(
        wait::until(WAIT, || r.project.join("up").exists()),
        "the session never started"
    );
    r.kill();
    let folder = r.tmp.join(format!("relay-{id}"));
    assert!(folder.is_dir(), "{}", folder.display());
    let mut stray = std::process::Command::new("unshare")
        .args([
            "--map-root-user",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
        ])
        .arg("mount --bind \"$0\" \"$0\" && exec sleep 600")
        .arg(&folder)
        .stdin(Stdio::null())
        .spawn()
        .expect("unshare");
    let name = format!("relay-{id}");
    assert!(
        wait::until(WAIT, || std::fs::read_to_string(format!(
            "/proc/{}/mountinfo",
            stray.id()
        ))
        .is_ok_and(|t| t.contains(&name))),
        "the stand-in never held the folder"
    );
    r.launch_daemon();
    let st = wait::child_within(&mut stray, WAIT).expect("the stray outlived the next start");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(st.signal(), Some(libc::SIGKILL), "{st:?}");
    assert!(
        r.output_text().contains(&format!(
            "a process of session {id} outlived the relay that ran it"
        )),
        "{}",
        r.output_text()
    );
    let e = r.cli_json(&["terminal", "list"]);
    assert_eq!(e["terminals"][0]["exit_reason"], "relay_restarted", "{e}");
}
