//! Issue 12: relay under load and under faults. `relay sandbox` never loses a run, and
//! each fault (a host, a daemon or a shim killed, a token file rewritten under
//! launches, a settings file broken mid-run, targets that flood or never read, a full
//! disk, a host of another protocol version) leaves nothing lost and nothing behind
//! (docs/testing.md, "Faults").

use relay::wire::Code;
use std::process::{Child, Command, Stdio};

use relay_e2e::daemon::{base_settings, Relay};
use relay_e2e::procs::{alive, kill9, session_pids};
use relay_e2e::{wait, WAIT};
use serde_json::{json, Value};

/// `n` runs of `relay sandbox shell -- -c SCRIPT(i)` started at once, as child
/// processes with no terminal (stdin null, stdout and stderr piped); each one's exit
/// code, stdout and stderr once they all ended.
fn sandbox_runs_at_once(
    r: &Relay,
    n: usize,
    script: impl Fn(usize) -> String,
) -> Vec<(i32, String, String)> {
    let children: Vec<Child> = (0..n)
        .map(|i| {
            let s = script(i);
            let mut cmd: Command = r.cli_command(&["sandbox", "shell", "--", "-c", &s]);
            cmd.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            cmd.spawn().expect("spawn relay sandbox")
        })
        .collect();
    // Read every child's pipes on its own thread, so none blocks on a full pipe.
    let readers: Vec<_> = children
        .into_iter()
        .map(|mut c| {
            std::thread::spawn(move || {
                use std::io::Read;
                let mut out = Vec::new();
                let mut err = Vec::new();
                let mut so = c.stdout.take().unwrap();
                let mut se = c.stderr.take().unwrap();
                let t = std::thread::spawn(move || {
                    let _ = se.read_to_end(&mut err);
                    err
                });
                let _ = so.read_to_end(&mut out);
                let err = t.join().unwrap_or_default();
                let st = wait::child_within(&mut c, WAIT * 2);
                let code = match st {
                    Some(st) => st.code().unwrap_or(-1),
                    None => {
                        let _ = c.kill();
                        -2
                    }
                };
                (
                    code,
                    String::from_utf8_lossy(&out).into_owned(),
                    String::from_utf8_lossy(&err).into_owned(),
                )
            })
        })
        .collect();
    readers.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn sixty_four_relay_sandbox_runs_at_once_each_print_their_line_and_exit_4() {
    let r = Relay::start(base_settings(None));
    let runs = sandbox_runs_at_once(&r, 64, |i| format!("echo line-{i}-end; exit 4"));
    let mut lost = Vec::new();
    for (i, (code, out, err)) in runs.iter().enumerate() {
        let want = format!("line-{i}-end");
        // A pty turns the newline into CR LF; the line is all the run prints.
        if *code != 4 || out.trim_end() != want || !err.is_empty() {
            lost.push(format!(
                "run {i}: exit {code}, stdout {out:?}, stderr {err:?}"
            ));
        }
    }
    assert!(
        lost.is_empty(),
        "{} of 64 runs lost:\n{}",
        lost.len(),
        lost.join("\n")
    );

    // A tool that exits at once, printing nothing: its status still arrives.
    let runs = sandbox_runs_at_once(&r, 64, |_| "exit 4".to_string());
    let lost: Vec<_> = runs
        .iter()
        .enumerate()
        .filter(|(_, (code, out, err))| *code != 4 || !out.is_empty() || !err.is_empty())
        .map(|(i, (code, out, err))| {
            format!("run {i}: exit {code}, stdout {out:?}, stderr {err:?}")
        })
        .collect();
    assert!(
        lost.is_empty(),
        "{} of 64 silent runs lost:\n{}",
        lost.len(),
        lost.join("\n")
    );
    // Every run was a terminal of its own, each ended with status 4, and each run's
    // terminal was purged once the run had printed it (the daemon does it after the
    // attach; none is left listed).
    r.wait_events(128, |e| e["name"] == "session.purged");
    let events = r.all_events();
    let ended = events
        .iter()
        .filter(|e| e["name"] == "session.exited" && e["exit_status"] == 4)
        .count();
    let purged = events
        .iter()
        .filter(|e| e["name"] == "session.purged")
        .count();
    assert_eq!((ended, purged), (128, 128));
    let (_, list, _) = r.api("GET", "/api/terminals", None);
    assert_eq!(list["terminals"], json!([]), "{list}");
    let launched = r
        .audit_rows()
        .iter()
        .filter(|row| row["action"] == "session_launch" && row["outcome"] == "allowed")
        .count();
    assert_eq!(launched, 128);
    // A tool that ends before its launch is recorded still has its rows in order.
    let rows = r.audit_rows();
    for (i, row) in rows.iter().enumerate() {
        if row["action"] == "session_end" {
            assert!(
                rows[..i].iter().any(
                    |l| l["action"] == "session_launch" && l["session_id"] == row["session_id"]
                ),
                "session_end before session_launch: {row}"
            );
        }
    }
}

fn id_of(v: &Value) -> String {
    v["id"].as_str().expect("an id").to_string()
}

fn host_pid(r: &Relay) -> u32 {
    let st: relay::wire::Status = r.api_typed("GET", "/api/status");
    st.host.expect("a live host").pid
}

fn profiles(r: &Relay) -> Vec<String> {
    std::fs::read_dir(r.config.join("profiles"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn claude_session(r: &Relay) -> String {
    let (st, v, _) = r.api("POST", "/api/sessions", Some(&json!({"project": "p1"})));
    assert_eq!(st, 201, "{v}");
    id_of(&v)
}

fn message(r: &Relay, id: &str, text: &str) -> (u16, Value) {
    let (st, v, _) = r.api(
        "POST",
        &format!("/api/sessions/{id}/message"),
        Some(&json!({ "text": text })),
    );
    (st, v)
}

/// Settings with an unsandboxed `open` template and one whose program is missing.
fn fault_settings() -> Value {
    let mut s = base_settings(None);
    let t = s["terminal_templates"].as_array_mut().unwrap();
    t.push(json!({"id": "open", "command": "/bin/sh", "sandbox": false}));
    t.push(json!({"id": "missing", "command": "/nonexistent/tool"}));
    s
}

fn terminal(r: &Relay, template: &str, script: &str) -> String {
    let (st, v, _) = r.api(
        "POST",
        "/api/terminals",
        Some(&json!({"project": "p1", "template": template, "extra_args": ["-c", script]})),
    );
    assert_eq!(st, 201, "{v}");
    id_of(&v)
}

/// A terminal that prints `word` and exits 0 runs start to finish, its log says so.
fn launches_work(r: &Relay, word: &str) {
    let id = terminal(r, "shell", &format!("echo {word}"));
    let ev = r.wait_exited(&id);
    assert_eq!(ev["exit_status"], 0, "{ev}");
    let (st, _, log) = r.api("GET", &format!("/api/terminals/{id}/log"), None);
    assert_eq!(st, 200);
    assert!(
        String::from_utf8_lossy(&log).contains(word),
        "{word} not in the log of {id}"
    );
}

#[test]
fn a_killed_host_ends_its_sessions_as_host_died_leaves_no_profile_and_is_replaced() {
    let r = Relay::start(fault_settings());
    let first = host_pid(&r);
    let term = terminal(&r, "shell", "sleep 600");
    let open = terminal(&r, "open", "sleep 600");
    let sess = claude_session(&r);
    assert_eq!(message(&r, &sess, "before").1["text"], "echo: before");
    assert_eq!(profiles(&r).len(), 2, "{:?}", profiles(&r));
    for id in [&term, &open, &sess] {
        assert!(!session_pids(id).is_empty(), "{id} runs nothing");
    }

    kill9(first);
    for id in [&term, &open, &sess] {
        let ev = r.wait_exited(id);
        assert_eq!(ev["reason"], "host_died", "{ev}");
        assert!(
            wait::until(WAIT, || session_pids(id).is_empty()),
            "{id} outlived its host: {:?}",
            session_pids(id)
        );
    }
    assert!(profiles(&r).is_empty(), "{:?}", profiles(&r));
    let ends: Vec<Value> = r
        .audit_rows()
        .into_iter()
        .filter(|row| row["action"] == "session_end")
        .collect();
    assert_eq!(ends.len(), 3, "{ends:?}");
    assert!(ends.iter().all(|e| e["error"] == "host_died"), "{ends:?}");
    let (_, list, _) = r.api("GET", "/api/sessions", None);
    assert_eq!(list["sessions"][0]["state"], "dormant", "{list}");

    // A new host, and every kind of launch works again, the old session resumed too.
    r.wait_event(|e| e["name"] == "host.started" && e["pid"] != first);
    launches_work(&r, "again");
    let (st, v, _) = r.api("POST", &format!("/api/sessions/{sess}/resume"), None);
    assert_eq!(st, 201, "{v}");
    assert_eq!(message(&r, &sess, "after").1["text"], "echo: after");
}

/// A sandboxed sleeper, an unsandboxed one that ignores HUP and TERM, and a Claude
/// session, each with processes to find.
fn three_sessions(r: &Relay) -> Vec<String> {
    let ids = vec![
        terminal(r, "shell", "sleep 600"),
        terminal(r, "open", "trap '' HUP TERM; while :; do sleep 1; done"),
        claude_session(r),
    ];
    for id in &ids {
        assert!(!session_pids(id).is_empty(), "{id} runs nothing");
    }
    ids
}

#[test]
fn a_daemon_killed_with_sigkill_leaves_no_session_running() {
    // The daemon alone: its host sees its stdin close and ends every session.
    let r = Relay::start(fault_settings());
    let ids = three_sessions(&r);
    let host = host_pid(&r);
    kill9(r.ready.pid);
    assert!(
        wait::until(WAIT, || !alive(host)),
        "the host outlived its daemon"
    );
    for id in &ids {
        assert!(
            wait::until(WAIT, || session_pids(id).is_empty()),
            "{id} outlived its daemon: {:?}",
            session_pids(id)
        );
    }
    assert!(!r.config.join("sessions/host.sock").exists());

    // The daemon and its host at once (a kill of the whole service): every shim gets
    // its parent-death signal, bwrap takes the sandbox down with it, and the shims'
    // own targets die with them.
    let r = Relay::start(fault_settings());
    let ids = three_sessions(&r);
    let host = host_pid(&r);
    kill9(r.ready.pid);
    kill9(host);
    for id in &ids {
        // The unsandboxed loop's `sleep 1` may finish its second on its own.
        assert!(
            wait::until(WAIT, || session_pids(id).is_empty()),
            "{id} outlived its daemon and host: {:?}",
            session_pids(id)
        );
    }
}

#[test]
fn a_sandbox_caught_mid_launch_by_a_sigkill_of_relay_is_ended_when_relay_is_back() {
    if relay_e2e::bwrap_only(
        "a_sandbox_caught_mid_launch_by_a_sigkill_of_relay_is_ended_when_relay_is_back",
    ) {
        return;
    }
    // bwrap's inner process, forked an instant before relay died and before it armed
    // its own parent-death signal, waits forever for its parent. A launcher standing in
    // for bwrap makes that moment last: a process in a pid namespace of its own (as
    // bwrap's inner process is), in the launch's session, that no parent-death signal
    // reaches and that ignores the hangup. Beside it, a job of the same session outside
    // any sandbox, as a person may leave from a terminal: relay leaves that one alone.
    // Each in a process group of its own, so that however the host ends (its group
    // kills at a shutdown, or none when it is killed first) both are left.
    let mut r = Relay::prepare(None, false);
    let pids_file = r.root.join("stray.pids");
    let launcher = r.root.join("bwrap-caught-mid-launch");
    relay_e2e::exec_file::write_executable(
        &launcher,
        format!(
            "#!/bin/sh\n\
             own_group='import os, sys; os.setpgid(0, 0); os.execvp(sys.argv[1], sys.argv[1:])'\n\
             (trap '' HUP; exec python3 -c \"$own_group\" unshare --user --map-root-user --pid --fork sleep 600) &\n\
             u=$!\n\
             (trap '' HUP; exec python3 -c \"$own_group\" sleep 600) &\n\
             echo \"$u $!\" > '{0}.part' && mv '{0}.part' '{0}'\n\
             exec sleep 600\n",
            pids_file.display()
        ),
    );
    let mut s = fault_settings();
    // Without limits, so without a cgroup: a session's cgroup would take the job with
    // it (stress::limits); this test is of what ends a stray where there is none.
    s["session_sandbox"] = json!({"bwrap_launcher": launcher,
        "limits": {"pids_max": 0, "memory_max_mib": 0, "cpu_weight": 0}});
    r.write_settings(&s);
    r.launch_daemon();
    let id = terminal(&r, "shell", "true");
    assert!(
        wait::until(WAIT, || pids_file.exists()),
        "the launcher never started"
    );
    let pids: Vec<u32> = std::fs::read_to_string(&pids_file)
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    let (unshare, job) = (pids[0], pids[1]);
    // The sandboxed one: unshare's child, pid 1 of its namespace.
    let children = |pid: u32| -> Vec<u32> {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    };
    assert!(
        wait::until(WAIT, || children(unshare).len() == 1),
        "unshare started nothing"
    );
    let stray = children(unshare)[0];
    let nspid = std::fs::read_to_string(format!("/proc/{stray}/status")).unwrap();
    assert!(
        nspid
            .lines()
            .any(|l| l.starts_with("NSpid:") && l.ends_with("\t1")),
        "not pid 1 of a namespace of its own: {nspid}"
    );

    // relay goes, daemon and host at once: the shim and its target get their
    // parent-death signals, the two others do not.
    let host = host_pid(&r);
    kill9(r.ready.pid);
    kill9(host);
    assert!(wait::until(WAIT, || !alive(host)), "the host survived");
    let mut left = vec![unshare, stray, job];
    left.sort();
    assert!(
        wait::until(WAIT, || {
            let mut now = session_pids(&id);
            now.sort();
            now == left
        }),
        "not the stray, its unshare and the job alone are left of the launch: {:?}",
        session_pids(&id)
    );

    // relay is back (the killed one reaped: gone whole, its lock with it): its new host
    // ends what the killed one left in its shims' sessions.
    assert!(r.reap().is_some(), "the killed relay never went");
    r.launch_daemon();
    assert!(
        wait::until(WAIT, || !alive(stray)),
        "a sandbox left by a killed relay is still running after relay came back"
    );
    assert!(
        wait::until(WAIT, || !alive(unshare)),
        "unshare outlived its child"
    );
    // The job outside every sandbox is the person's: it runs on.
    assert!(alive(job), "relay killed a process outside every sandbox");
    kill9(job);
    assert_eq!(
        std::fs::read_dir(r.config.join("sessions/shims"))
            .unwrap()
            .count(),
        0,
        "shim records left after the sweep"
    );
    // With bwrap itself again, launches work.
    r.write_settings(&fault_settings());
    launches_work(&r, "after-the-sweep");
}

#[test]
fn a_token_file_rewritten_under_launches_gives_every_launch_one_whole_token() {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    // The token watcher would stop a session on a rotated token before its start line
    // is written; this test is about what each launch read, so sessions stay (`keep`).
    let mut s = base_settings(Some(relay_e2e::daemon::TOKEN_SETTING));
    s["claude_token_on_change"] = json!("keep");
    let r = Relay::start(s);
    // Two tokens of different lengths: any mix of them matches neither digest.
    let a = relay_e2e::fake_token();
    let b = format!("{}{}", relay_e2e::fake_token(), relay_e2e::random_hex(8));
    let path = r.write_token(&a);
    let dir = path.parent().unwrap().to_path_buf();
    let stop = Arc::new(AtomicBool::new(false));
    let rewrites = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (a, b, stop, rewrites) = (a.clone(), b.clone(), stop.clone(), rewrites.clone());
        std::thread::spawn(move || {
            let mut i = 0usize;
            while !stop.load(Ordering::SeqCst) {
                let token = if i.is_multiple_of(2) { &b } else { &a };
                let line = format!("{token}\n");
                if (i / 2).is_multiple_of(2) {
                    // In place: truncated, then written (as `echo … > token` does).
                    let mut f = std::fs::OpenOptions::new()
                        .write(true)
                        .truncate(true)
                        .open(&path)
                        .unwrap();
                    f.write_all(line.as_bytes()).unwrap();
                } else {
                    // By rename: a new 0600 file moved over the old one.
                    let tmp = dir.join(".token.new");
                    let mut f = std::fs::OpenOptions::new()
                        .write(true)
                        .create(true)
                        .truncate(true)
                        .mode(0o600)
                        .open(&tmp)
                        .unwrap();
                    f.write_all(line.as_bytes()).unwrap();
                    drop(f);
                    std::fs::rename(&tmp, &path).unwrap();
                }
                rewrites.fetch_add(1, Ordering::SeqCst);
                i += 1;
                // Pacing, not waiting: leave the two cores to the launches.
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        })
    };
    let whole = [
        relay_e2e::sha256_hex(a.as_bytes()),
        relay_e2e::sha256_hex(b.as_bytes()),
    ];
    let mut failures = Vec::new();
    let before = rewrites.load(Ordering::SeqCst);
    for n in 0..24 {
        let (st, v, _) = r.api("POST", "/api/sessions", Some(&json!({"project": "p1"})));
        if st != 201 {
            failures.push(format!("launch {n}: {st} {v}"));
            continue;
        }
        let id = id_of(&v);
        assert!(
            wait::until(WAIT, || r
                .start_lines()
                .iter()
                .any(|l| l["env"]["RELAY_SESSION_ID"] == id.as_str())),
            "no start line for {id}"
        );
        let line = r.start_line(&id);
        match line["token_sha256"].as_str() {
            Some(sha) if whole.contains(&sha.to_string()) => {}
            _ => failures.push(format!(
                "launch {n}: token_sha256 {} ({} bytes), error {}",
                line["token_sha256"], line["token_bytes"], line["token_error"]
            )),
        }
        let (st, _, _) = r.api("DELETE", &format!("/api/sessions/{id}"), None);
        assert_eq!(st, 200);
    }
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    let during = rewrites.load(Ordering::SeqCst) - before;
    assert!(during > 24, "the file was rewritten only {during} times");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    relay_e2e::assert_absent(&r.output(), &a, "the daemon's output");
    relay_e2e::assert_absent(&r.output(), &b, "the daemon's output");
}

#[test]
fn settings_made_invalid_mid_run_refuse_launches_and_leave_running_sessions_alone() {
    let r = Relay::start(fault_settings());
    let sess = claude_session(&r);
    let term = terminal(&r, "shell", "sleep 600");
    std::fs::write(r.config.join("settings.json"), "{\"projects\": [").unwrap();
    let (st, v, _) = r.api(
        "POST",
        "/api/terminals",
        Some(&json!({"project": "p1", "template": "shell"})),
    );
    assert_eq!(
        (st, v["code"].as_str()),
        (500, Some(Code::SettingsInvalid.as_str())),
        "{v}"
    );
    assert!(
        v["error"].as_str().unwrap().contains("settings.json"),
        "{v}"
    );
    let (st, v, _) = r.api("POST", &format!("/api/sessions/{sess}/resume"), None);
    assert_eq!(st, 409, "a running session is not resumed: {v}");
    // What runs is untouched: a turn is answered, the terminal runs, its log reads.
    assert_eq!(
        message(&r, &sess, "still here").1["text"],
        "echo: still here"
    );
    let (_, list, _) = r.api("GET", "/api/terminals", None);
    assert_eq!(list["terminals"][0]["state"], "running", "{list}");
    let (st, _, _) = r.api("GET", &format!("/api/terminals/{term}/log"), None);
    assert_eq!(st, 200);
    assert_eq!(r.cli_json(&["status"])["settings"]["ok"], false);
    // Fixed: launches work again; the earlier sessions are still the same ones.
    r.write_settings(&fault_settings());
    launches_work(&r, "recovered");
    assert_eq!(message(&r, &sess, "after").1["text"], "echo: after");
    let ended: Vec<Value> = r
        .all_events()
        .into_iter()
        .filter(|e| {
            e["name"] == "session.exited" && (e["session_id"] == sess || e["session_id"] == term)
        })
        .collect();
    assert!(ended.is_empty(), "{ended:?}");
}

/// Attaches to terminal `id` over `relay.sock` and writes `bytes` of input frames from a
/// thread that gives up when a write blocks for 5 s (a target that never reads).
fn attach_and_type(r: &Relay, id: &str, bytes: usize) -> std::thread::JoinHandle<usize> {
    use std::io::Write;
    let mut s = r.raw_attach(id, "");
    s.set_write_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    std::thread::spawn(move || {
        let chunk = vec![b'x'; 64 * 1024];
        let mut frame = vec![1u8];
        frame.extend_from_slice(&(chunk.len() as u32).to_be_bytes());
        frame.extend_from_slice(&chunk);
        let mut sent = 0;
        while sent < bytes {
            if s.write_all(&frame).is_err() {
                break;
            }
            sent += chunk.len();
        }
        sent
    })
}

#[test]
fn the_host_stays_responsive_through_a_flood_a_deaf_target_a_failed_start_and_a_killed_shim() {
    let r = Relay::start(fault_settings());
    // A target that floods its terminal as fast as it can.
    let flood = terminal(&r, "shell", "yes flood-line");
    // One that never reads its input, typed at by an attach (the pty's input fills).
    let deaf = terminal(&r, "shell", "sleep 600");
    let typing = attach_and_type(&r, &deaf, 16 * 1024 * 1024);
    launches_work(&r, "alive-1");
    let st = r.cli_json(&["status"]);
    assert_eq!(st["sessions_running"], 2, "{st}");

    // One that never starts: its program is missing. Refused, named, audited, and
    // nothing is left of it.
    let before = profiles(&r).len();
    let (st, v, _) = r.api(
        "POST",
        "/api/terminals",
        Some(&json!({"project": "p1", "template": "missing"})),
    );
    assert_eq!(
        (st, v["code"].as_str()),
        (500, Some(Code::SpawnFailed.as_str())),
        "{v}"
    );
    assert!(
        v["error"].as_str().unwrap().contains("/nonexistent/tool"),
        "{v}"
    );
    assert_eq!(profiles(&r).len(), before);
    let (_, list, _) = r.api("GET", "/api/terminals", None);
    assert!(
        list["terminals"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["template_id"] != "missing"),
        "{list}"
    );
    let row = r
        .audit_rows()
        .into_iter()
        .rfind(|row| row["action"] == "session_launch")
        .unwrap();
    assert_eq!(
        (row["outcome"].as_str(), row["code"].as_str()),
        (Some("error"), Some(Code::SpawnFailed.as_str())),
        "{row}"
    );
    launches_work(&r, "alive-2");

    // Shims killed, sandboxed and not: each reported as `shim_failed`, its target gone.
    for template in ["shell", "open"] {
        let id = terminal(&r, template, "sleep 600");
        let (_, list, _) = r.api("GET", "/api/terminals", None);
        let shim = list["terminals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id.as_str())
            .and_then(|t| t["root_pid"].as_u64())
            .unwrap() as u32;
        kill9(shim);
        let ev = r.wait_exited(&id);
        assert_eq!(
            (ev["reason"].as_str(), ev["signal"].as_i64()),
            (Some("shim_failed"), Some(9)),
            "{ev}"
        );
        assert!(
            wait::until(WAIT, || session_pids(&id).is_empty()),
            "the {template} target outlived its shim: {:?}",
            session_pids(&id)
        );
        launches_work(&r, "alive-3");
    }

    // The flood has filled its log past the kept head and tail (so the log says what it
    // dropped) before it is asked to end.
    assert!(
        wait::until(WAIT, || {
            let (_, _, log) = r.api("GET", &format!("/api/terminals/{flood}/log"), None);
            String::from_utf8_lossy(&log).contains("bytes dropped")
        }),
        "the flood never filled its log"
    );
    // The flood and the deaf target end when asked, each reported.
    for id in [&flood, &deaf] {
        let (st, v, _) = r.api("DELETE", &format!("/api/terminals/{id}"), None);
        assert_eq!(st, 200, "{v}");
        assert_eq!(r.wait_exited(id)["reason"], "terminated");
        assert!(wait::until(WAIT, || session_pids(id).is_empty()));
    }
    // A pty in line mode drops what its reader never takes, so the typing ends either
    // way; what matters is that the host answered everything meanwhile.
    assert!(typing.join().unwrap() > 0);
    let (_, _, log) = r.api("GET", &format!("/api/terminals/{flood}/log"), None);
    let log = String::from_utf8_lossy(&log);
    assert!(
        log.contains("flood-line") && log.contains("bytes dropped"),
        "{}",
        &log[..200.min(log.len())]
    );
    launches_work(&r, "alive-4");
}

/// The number in the log's cut note (`; N more bytes not written]`), if it has one.
fn unwritten(log: &str) -> Option<u64> {
    let at = log.rfind("[relay: log cut here: ")?;
    let tail = &log[at..];
    let n = tail.rsplit_once("; ")?.1.split(' ').next()?;
    n.parse().ok()
}

/// A relay started with its config dir (settings, audit and event logs, profiles, the
/// host's state and terminal logs) on a disk of its own, 4 MiB; none where this is not
/// root (mounting needs it), which CI is.
fn relay_on_a_small_disk() -> Option<(Relay, relay_e2e::tmpfs::Tmpfs)> {
    // Safety: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root");
        eprintln!("skip: mounting a small tmpfs needs root");
        return None;
    }
    let mut r = Relay::prepare(None, false);
    let disk = relay_e2e::tmpfs::Tmpfs::mount(&r.config, "4m").expect("a tmpfs, as root");
    r.write_settings(&fault_settings());
    r.launch_daemon();
    Some((r, disk))
}

#[test]
fn a_full_disk_under_the_config_dir_cuts_the_log_keeps_the_session_and_refuses_or_audits_the_next_launch(
) {
    let Some((mut r, disk)) = relay_on_a_small_disk() else {
        return;
    };
    let ticker = terminal(
        &r,
        "shell",
        "i=0; while :; do echo tick-$i; i=$((i+1)); sleep 0.01; done",
    );
    let log_of = |id: &str| {
        let (st, _, log) = r.api("GET", &format!("/api/terminals/{id}/log"), None);
        assert_eq!(st, 200);
        String::from_utf8_lossy(&log).into_owned()
    };
    assert!(wait::until(WAIT, || log_of(&ticker).contains("tick-3")));

    // Fill the disk.
    let filler = r.config.join("filler");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while f.write_all(&chunk).is_ok() {}
    }
    // The log says where it was cut, and the session runs on: its output is counted.
    assert!(
        wait::until(WAIT, || unwritten(&log_of(&ticker)).is_some()),
        "no cut note: {}",
        log_of(&ticker)
    );
    let log = log_of(&ticker);
    assert!(
        log.contains("[relay: log cut here: No space left on device (os error 28); "),
        "{log}"
    );
    let first = unwritten(&log).unwrap();
    assert!(
        wait::until(WAIT, || unwritten(&log_of(&ticker)) > Some(first)),
        "the session stopped writing"
    );
    let (_, list, _) = r.api("GET", "/api/terminals", None);
    assert_eq!(list["terminals"][0]["state"], "running", "{list}");

    // The next launch: refused, or run with its audit row. Never run unaudited.
    let (st, v, _) = r.api(
        "POST",
        "/api/terminals",
        Some(&json!({"project": "p1", "template": "shell", "extra_args": ["-c", "sleep 600"]})),
    );
    if st == 201 {
        let id = id_of(&v);
        assert!(
            r.audit_rows()
                .iter()
                .any(|row| row["session_id"] == id.as_str()
                    && row["action"] == "session_launch"
                    && row["outcome"] == "allowed"),
            "{id} ran without its audit row"
        );
        r.api("DELETE", &format!("/api/terminals/{id}"), None);
    } else {
        assert!(st >= 400, "{st} {v}");
        let (_, list, _) = r.api("GET", "/api/terminals", None);
        assert_eq!(list["terminals"].as_array().unwrap().len(), 1, "{list}");
        assert!(profiles(&r).len() <= 1, "{:?}", profiles(&r));
    }
    // Room again: launches work, each with its audit row; the first one is still there.
    std::fs::remove_file(&filler).unwrap();
    let id = terminal(&r, "shell", "echo room-again");
    r.wait_exited(&id);
    assert!(
        r.audit_rows()
            .iter()
            .any(|row| row["session_id"] == id.as_str()
                && row["action"] == "session_launch"
                && row["outcome"] == "allowed"),
        "{id} has no audit row"
    );
    assert!(log_of(&id).contains("room-again"));
    let (st, _, _) = r.api("DELETE", &format!("/api/terminals/{ticker}"), None);
    assert_eq!(st, 200);
    assert_eq!(r.wait_exited(&ticker)["reason"], "terminated");
    r.stop();
    drop(disk);
}

/// Every regular file under `dir` and its bytes (`skip` left out).
fn files_under(
    dir: &std::path::Path,
    skip: &std::path::Path,
) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = vec![];
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let (p, t) = (e.path(), e.file_type().unwrap());
            if t.is_dir() {
                todo.push(p);
            } else if t.is_file() && p != skip {
                out.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
            }
        }
    }
    out
}

/// Fills the disk holding `file` to its last byte: big writes, then smaller ones.
fn fill(file: &std::path::Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(file).unwrap();
    for size in [64 * 1024, 4096, 1] {
        let chunk = vec![0u8; size];
        while f.write_all(&chunk).is_ok() {}
    }
}

#[test]
fn a_launch_on_a_full_disk_is_refused_naming_the_folder_and_losing_nothing() {
    let Some((mut r, disk)) = relay_on_a_small_disk() else {
        return;
    };
    // A session that ran and ended: its record, its log, its audit rows.
    let before = terminal(&r, "shell", "echo written-before");
    r.wait_exited(&before);
    let rows_before = r.audit_rows();
    let filler = r.config.join("filler");
    let files = files_under(&r.config, &filler);

    fill(&filler);
    let (st, v, _) = r.api(
        "POST",
        "/api/terminals",
        Some(&json!({"project": "p1", "template": "shell", "extra_args": ["-c", "echo x"]})),
    );
    assert!(st >= 400, "{st} {v}");
    let said = v["error"].as_str().unwrap_or_default();
    let config = r.config.display().to_string();
    assert!(
        said.starts_with(&format!("cannot write {config}/"))
            && said.contains(&format!(": the disk holding {config}"))
            && said.contains(" is full; free some space there")
            && said.ends_with("and start the session again"),
        "{said}"
    );
    // Nothing written before is lost: every file is there, starting with what it held.
    for (path, bytes) in &files {
        let now = std::fs::read(path).unwrap_or_default();
        assert!(now.starts_with(bytes), "{} lost bytes", path.display());
    }
    let (_, list, _) = r.api("GET", "/api/terminals", None);
    let listed = list["terminals"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{list}");
    assert_eq!(listed[0]["id"], before.as_str(), "{list}");
    let (_, _, log) = r.api("GET", &format!("/api/terminals/{before}/log"), None);
    assert!(String::from_utf8_lossy(&log).contains("written-before"));
    assert!(profiles(&r).is_empty(), "{:?}", profiles(&r));

    // Room again: the rows of before are all there, and a launch works.
    std::fs::remove_file(&filler).unwrap();
    let rows = r.audit_rows();
    assert_eq!(rows[..rows_before.len()], rows_before[..]);
    launches_work(&r, "room-again");
    r.stop();
    drop(disk);
}

#[test]
fn a_host_of_another_protocol_version_is_refused_and_replaced() {
    let mut r = Relay::prepare(None, false);
    // The host binary the daemon starts first announces protocol 999 and then waits;
    // every later start is the real host.
    let bin = r.root.join("bin");
    std::fs::rename(bin.join("relay-sessions"), bin.join("relay-sessions.real")).unwrap();
    let mark = r.root.join("old-host-ran");
    let pid_file = r.root.join("old-host-pid");
    let script = format!(
        "#!/bin/sh\n\
         if [ \"$1\" = --version ]; then exec '{real}' --version; fi\n\
         if [ ! -e '{mark}' ]; then\n\
         : > '{mark}'\n\
         echo $$ > '{pid}'\n\
         echo '{{\"event\":\"ready\",\"v\":999,\"pid\":'$$',\"socket\":\"/nonexistent/host.sock\"}}'\n\
         exec sleep 600\n\
         fi\n\
         exec '{real}' \"$@\"\n",
        mark = mark.display(),
        pid = pid_file.display(),
        real = bin.join("relay-sessions.real").display(),
    );
    relay_e2e::exec_file::write_executable(&bin.join("relay-sessions"), script);
    r.write_settings(&fault_settings());
    r.launch_daemon();

    let old: u32 = std::fs::read_to_string(&pid_file)
        .expect("the old host ran")
        .trim()
        .parse()
        .unwrap();
    assert!(wait::until(WAIT, || !alive(old)), "the old host still runs");
    let out = r.output_text();
    assert!(
        out.contains("relay: session host: host speaks protocol 999, this daemon 1; restarting"),
        "{out}"
    );
    let host = host_pid(&r);
    assert_ne!(host, old);
    let started: Vec<Value> = r
        .all_events()
        .into_iter()
        .filter(|e| e["name"] == "host.started")
        .collect();
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0]["pid"], host);
    launches_work(&r, "real-host");
}

/// Input still flowing when the tool ends: the host closes its side right after the exit
/// frame, so the CLI's last input frames meet a closed side in the daemon; the `forget`
/// frame behind them must still be read, or the terminal is never purged.
#[test]
fn relay_sandbox_fed_input_to_its_end_still_has_its_terminal_purged() {
    use std::io::Write;
    let r = Relay::start(base_settings(None));
    const RUNS: usize = 12;
    for i in 0..RUNS {
        let mut child = r
            .cli_command(&["sandbox", "shell", "--", "-c", "exit 3"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run relay sandbox");
        let mut stdin = child.stdin.take().unwrap();
        // Until the CLI exits and the pipe breaks.
        let feeder = std::thread::spawn(move || {
            let chunk = [b'y'; 4096];
            while stdin.write_all(&chunk).is_ok() {}
        });
        let out = child.wait_with_output().expect("wait for relay sandbox");
        feeder.join().unwrap();
        assert_eq!(
            out.status.code(),
            Some(3),
            "run {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    r.wait_events(RUNS, |e| e["name"] == "session.purged");
    let (_, list, _) = r.api("GET", "/api/terminals", None);
    assert_eq!(list["terminals"], json!([]), "{list}");
}
