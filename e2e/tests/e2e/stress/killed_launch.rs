//! Issue 26: a launch killed at any step leaves nothing that the next start does not find
//! and remove. `relay serve` is stopped at each step by `RELAY_E2E_LAUNCH_PAUSE` (the
//! launch writes `<step> <id>` into a FIFO the test reads, then waits there for good:
//! docs/testing.md#stopping-a-launch-at-a-step), SIGKILLed there, and started again.
//! Issue 39: what a killed relay leaves running of a session is ended at the next start
//! by the sandbox recorded at launch, and nothing else is, whatever a session named its
//! folders (docs/THREAT-MODEL.md#leftovers-and-purge).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use relay::daemon::launch::PAUSE_STEPS;
use relay::wire;
use relay_e2e::daemon::{base_settings, Relay};
use relay_e2e::procs::{alive, session_pids};
use relay_e2e::{wait, WAIT};
use serde_json::{json, Value};

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
        // Never answered: a failure, its error object (`--json`) the one line out.
        let failed: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        assert!(
            !out.status.success() && failed["error"]["code"].is_string(),
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

/// A bwrap launcher of `r`'s whose sandbox outlives it and relay, as one caught in
/// bwrap's unguarded moment does (its first process forked, bwrap killed before that
/// process armed its parent-death signal): the real bwrap, without
/// `--die-with-parent` and with a session of its own, so that neither a parent-death
/// signal nor the host's group kills reach the sandbox. relay finds and records this
/// sandbox at launch as it does any bwrap sandbox.
fn outliving_launcher(r: &Relay) -> PathBuf {
    let launcher = r.root.join("bwrap-outliving");
    relay_e2e::exec_file::write_executable(
        &launcher,
        "#!/bin/sh\n\
         for a do shift; [ \"$a\" = --die-with-parent ] || set -- \"$@\" \"$a\"; done\n\
         exec /usr/bin/bwrap --new-session \"$@\"\n",
    );
    launcher
}

/// Of `pids`, those inside a sandbox (in a pid namespace below the test's), sorted.
fn in_a_sandbox(pids: &[u32]) -> Vec<u32> {
    let mut v: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/status")).is_ok_and(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("NSpid:"))
                    .is_some_and(|ns| ns.split_whitespace().count() > 1)
            })
        })
        .collect();
    v.sort();
    v
}

/// `id`'s processes, sorted.
fn sorted_pids(id: &str) -> Vec<u32> {
    let mut v = session_pids(id);
    v.sort();
    v
}

/// A process's start time (`/proc/<pid>/stat`, after the command's parenthesis).
fn started(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    fields.get(22 - 3).map(|s| s.to_string())
}

/// Sessions without limits, so without a cgroup: where a session has one, the host
/// kills what is left in it at the session's end and no sandbox outlives a killed relay
/// (`stress::limits`); these tests are of what ends a stray where there is none.
fn no_cgroup(s: &mut serde_json::Value) {
    s["session_sandbox"]["limits"] = json!({"pids_max": 0, "memory_max_mib": 0, "cpu_weight": 0});
}

/// A killed relay's stray, SIGKILLed when dropped if relay left it running (each
/// process only while it is still the one it was): a test that fails leaves none.
struct Stray(Vec<(u32, Option<String>)>);

impl Stray {
    fn pids(&self) -> Vec<u32> {
        self.0.iter().map(|(p, _)| *p).collect()
    }
}

impl Drop for Stray {
    fn drop(&mut self) {
        for (pid, start) in &self.0 {
            if start.is_some() && started(*pid) == *start {
                relay_e2e::procs::kill9(*pid);
            }
        }
    }
}

/// A terminal of `r`'s whose sandbox outlives a SIGKILL of `r`: `r` is killed, the
/// old host ends what it reaches (the shim, the launcher), and the sandbox's processes
/// are left, running, no parent of relay's above them. Returns them.
fn kill_leaving_a_stray(r: &mut Relay, id: &str) -> Stray {
    let inside = in_a_sandbox(&session_pids(id));
    assert!(!inside.is_empty(), "{id} runs in no sandbox");
    let stray = Stray(inside.iter().map(|p| (*p, started(*p))).collect());
    r.kill();
    assert!(
        wait::until(WAIT, || sorted_pids(id) == inside),
        "not the sandbox alone is left of {id}: {:?}, inside {inside:?}",
        sorted_pids(id)
    );
    stray
}

/// A process of a session that outlived a killed relay — what a kill in bwrap's one
/// unguarded moment (between its `clone` and the parent-death signal of the sandbox's
/// first process) leaves, made here by a launcher whose sandbox outlives it — is
/// ended by the next start, before the folder goes, found by the namespaces relay
/// recorded at launch (docs/THREAT-MODEL.md#leftovers-and-purge).
#[test]
fn a_process_a_killed_relay_left_in_a_sessions_sandbox_is_ended_at_the_next_start() {
    if relay_e2e::bwrap_only(
        "a_process_a_killed_relay_left_in_a_sessions_sandbox_is_ended_at_the_next_start",
    ) {
        return;
    }
    let mut r = Relay::prepare(None, false);
    let mut s = base_settings(None);
    s["session_sandbox"] = json!({ "bwrap_launcher": outliving_launcher(&r) });
    no_cgroup(&mut s);
    r.write_settings(&s);
    r.launch_daemon();
    let v = r.shell_terminal("touch up && exec sleep 600");
    let id = v["id"].as_str().unwrap().to_string();
    assert!(
        wait::until(WAIT, || r.project.join("up").exists()),
        "the session never started"
    );
    let stray = kill_leaving_a_stray(&mut r, &id);
    r.launch_daemon();
    assert!(
        wait::until(WAIT, || stray.pids().iter().all(|p| !alive(*p))),
        "the stray outlived the next start: {:?}",
        stray.pids()
    );
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

/// Issue 39: a session knows its own id, so it names a repository in its project
/// `relay-<id>`; a later sandbox of the project (here another relay's terminal) pins
/// that repository, so its mount table holds the name. After a SIGKILL of the first
/// relay its next start ends its own session's stray, found by the namespaces recorded
/// at launch, and leaves the other sandbox running: relay ends nothing by a name
/// (docs/THREAT-MODEL.md#leftovers-and-purge).
#[test]
fn a_session_made_relay_id_folder_gets_no_other_sandbox_killed_at_the_next_start() {
    if relay_e2e::bwrap_only(
        "a_session_made_relay_id_folder_gets_no_other_sandbox_killed_at_the_next_start",
    ) {
        return;
    }
    let mut a = Relay::prepare(None, false);
    let mut s = base_settings(None);
    s["session_sandbox"] = json!({ "bwrap_launcher": outliving_launcher(&a) });
    no_cgroup(&mut s);
    a.write_settings(&s);
    a.launch_daemon();
    let v = a.shell_terminal(
        "mkdir -p \"relay-$RELAY_SESSION_ID/.git/hooks\" && \
         echo 'ref: refs/heads/main' > \"relay-$RELAY_SESSION_ID/.git/HEAD\" && \
         touch made && exec sleep 600",
    );
    let id = v["id"].as_str().unwrap().to_string();
    assert!(
        wait::until(WAIT, || a.project.join("made").exists()),
        "the session never made its folder"
    );
    assert!(a.project.join(format!("relay-{id}/.git/hooks")).is_dir());

    // Another relay on the same project folder: its terminal's sandbox pins the
    // repository the session made, so its mount table holds `relay-<id>`.
    let mut b = Relay::prepare(None, false);
    let mut bs = base_settings(None);
    bs["projects"][0]["path"] = json!(a.project);
    b.write_settings(&bs);
    b.launch_daemon();
    let ping = a.project.join("ping");
    mkfifo(&ping);
    let w = b.shell_terminal("touch other-up && read x < ping && touch pong && exec sleep 600");
    let other = w["id"].as_str().unwrap().to_string();
    assert!(
        wait::until(WAIT, || a.project.join("other-up").exists()),
        "the other relay's terminal never started"
    );
    let others = in_a_sandbox(&session_pids(&other));
    let name = format!("/relay-{id}/");
    assert!(
        others
            .iter()
            .any(|p| std::fs::read_to_string(format!("/proc/{p}/mountinfo"))
                .is_ok_and(|t| t.contains(&name))),
        "the other sandbox's mount table does not hold {name}: the test proves nothing"
    );

    // The first relay dies uncleanly, its session's sandbox left running; at its next
    // start that stray is ended, and the other relay's sandbox is not.
    let stray = kill_leaving_a_stray(&mut a, &id);
    a.launch_daemon();
    assert!(
        wait::until(WAIT, || stray.pids().iter().all(|p| !alive(*p))),
        "the real stray outlived the next start: {:?}",
        stray.pids()
    );
    assert!(
        others.iter().all(|p| alive(*p)),
        "relay killed a sandbox that was no session of its own: {others:?} of {other}\n{}",
        a.output_text()
    );
    // And it still answers.
    let writer = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&ping);
    let mut writer = writer.unwrap_or_else(|e| {
        panic!(
            "the other sandbox no longer reads: {e}\n{}",
            a.output_text()
        )
    });
    use std::io::Write;
    writer.write_all(b"x\n").unwrap();
    drop(writer);
    assert!(
        wait::until(WAIT, || a.project.join("pong").exists()),
        "the other sandbox never answered"
    );
    let listed = b.cli_json(&["terminal", "list"]);
    assert_eq!(listed["terminals"][0]["state"], "running", "{listed}");
    assert!(
        !a.output_text().contains(&other),
        "the first relay names the other's session: {}",
        a.output_text()
    );
}
