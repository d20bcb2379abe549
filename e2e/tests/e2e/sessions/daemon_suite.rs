//! The daemon end to end: first run, settings read fresh, launch authorization, the
//! CLI's failure contract, `relay sandbox` on a real pty, callers inside a session,
//! the TCP listener's bearer, the API port denied to sessions, host restart, SIGTERM.

use relay::wire::Code;
use relay::wire::Terminals;
use relay_e2e::daemon::{base_settings, Relay};
use relay_e2e::pty::Pty;
use relay_e2e::wait;
use serde_json::{json, Value};

fn exit_code(pty: &mut Pty) -> i32 {
    let st = wait::child_within(&mut pty.child, relay_e2e::WAIT).expect("relay sandbox exited");
    st.code().unwrap_or(-1)
}

#[test]
fn first_run_seeds_settings_and_relay_sandbox_runs_a_shell_on_a_real_pty() {
    // No settings.json: relay seeds a shell and a claude-code template and a home project.
    let r = Relay::start(Value::Null);
    let seeded: Value =
        serde_json::from_slice(&std::fs::read(r.config.join("settings.json")).unwrap()).unwrap();
    let ids: Vec<&str> = seeded["terminal_templates"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["id"].as_str())
        .collect();
    assert_eq!(ids, vec!["shell", "claude-code"]);
    assert!(
        seeded.get("claude_token_file").is_none(),
        "an unset token key is not written"
    );

    let mut pty = Pty::spawn(r.cli_command(&["sandbox", "shell"]), 100, 30);
    pty.write(b"stty size; echo inside-$((6*7))\r");
    pty.wait_for("30 100");
    pty.wait_for("inside-42");
    // Job control inside the session: a background job, then Ctrl-C on a foreground one.
    pty.write(b"sleep 60 & jobs\r");
    pty.wait_for("Running");
    pty.write(b"kill %1\r");
    // Ctrl-C flushes unread input, so it goes once the foreground job has said it runs
    // (the echo and the sleep are one process); then a marker proves the shell is back.
    pty.write(b"sh -c 'echo fore$((1+1)); exec sleep 60'\r");
    pty.wait_for("fore2");
    pty.write(b"\x03");
    pty.write(b"echo after$((2+3))\r");
    pty.wait_for("after5");
    pty.write(b"exit 7\r");
    assert_eq!(
        exit_code(&mut pty),
        7,
        "the tool's exit status; screen:\n{}",
        pty.screen()
    );
    assert!(
        !pty.screen().contains("Cannot set tty process group"),
        "{}",
        pty.screen()
    );
}

#[test]
fn relay_sandbox_claude_code_talks_to_the_fake_agent_and_passes_its_exit() {
    let r = Relay::start(Value::Null);
    let mut pty = Pty::spawn(r.cli_command(&["sandbox", "claude-code"]), 80, 24);
    pty.wait_for("fakeagent ready");
    pty.write(b"hi there\r");
    pty.wait_for("echo: hi there");
    pty.write(b"\x04");
    assert_eq!(exit_code(&mut pty), 0, "screen:\n{}", pty.screen());
    // The run ended with status 0, and its terminal was removed after it.
    r.wait_event(|e| e["name"] == "session.purged");
    let events = r.all_events();
    assert!(
        events
            .iter()
            .any(|e| e["name"] == "session.exited" && e["exit_status"] == 0),
        "{events:?}"
    );
    let list = r.cli_json(&["terminal", "list"]);
    assert_eq!(list["terminals"], json!([]), "{list}");
}

#[test]
fn closing_the_terminal_of_relay_sandbox_ends_the_session() {
    let r = Relay::start(base_settings(None));
    let mut pty = Pty::spawn(r.cli_command(&["sandbox", "shell"]), 80, 24);
    pty.write(b"echo u$((1+1))p\r");
    pty.wait_for("u2p");
    let id = r.cli_typed::<Terminals>(&["terminal", "list"]).terminals[0]
        .id
        .clone();
    // Safety: SIGHUP to our own child, as a closing terminal sends.
    unsafe { libc::kill(pty.child.id() as libc::pid_t, libc::SIGHUP) };
    let ev = r.wait_exited(&id);
    assert_eq!(ev["reason"], "terminated", "{ev}");
    assert_eq!(exit_code(&mut pty), 128 + libc::SIGHUP);
    // The run leaves nothing, as one that ends by itself does.
    r.wait_event(|e| e["name"] == "session.purged" && e["session_id"] == id.as_str());
    let list = r.cli_json(&["terminal", "list"]);
    assert_eq!(list["terminals"], json!([]), "{list}");
}

/// SIGTERM (a supervisor stopping the run) ends the session and leaves nothing, as
/// closing the window does; the run exits 143.
#[test]
fn a_relay_sandbox_run_stopped_by_sigterm_ends_its_session_and_leaves_nothing() {
    let r = Relay::start(base_settings(None));
    let mut child = r
        .cli_command(&[
            "sandbox",
            "shell",
            "--",
            "-c",
            "echo up > up; exec sleep 600",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("relay sandbox");
    assert!(
        wait::until(relay_e2e::WAIT, || r.project.join("up").exists()),
        "the run never started"
    );
    let id = r.cli_typed::<Terminals>(&["terminal", "list"]).terminals[0]
        .id
        .clone();
    // Safety: SIGTERM to our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let st = wait::child_within(&mut child, relay_e2e::WAIT).expect("relay sandbox exited");
    assert_eq!(st.code(), Some(128 + libc::SIGTERM));
    let ev = r.wait_exited(&id);
    assert_eq!(ev["reason"], "terminated", "{ev}");
    r.wait_event(|e| e["name"] == "session.purged" && e["session_id"] == id.as_str());
    let list = r.cli_json(&["terminal", "list"]);
    assert_eq!(list["terminals"], json!([]), "{list}");
}

#[test]
fn malformed_settings_refuse_launches_keep_relay_up_and_a_fixed_file_recovers() {
    let r = Relay::start(base_settings(None));
    std::fs::write(r.config.join("settings.json"), "{\"projects\": [").unwrap();
    let out = r.cli(&[
        "terminal",
        "start",
        "--project",
        "p1",
        "--template",
        "shell",
    ]);
    assert_eq!(out.status, 1);
    assert!(out.stdout.is_empty(), "stdout on failure: {:?}", out.stdout);
    assert!(out.stderr.starts_with("error: "), "{}", out.stderr);
    assert!(
        out.stderr.contains("settings.json") && out.stderr.contains("not valid JSON"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(Code::SettingsInvalid.as_str()),
        "{}",
        out.stderr
    );
    let status = r.cli_json(&["status"]);
    assert_eq!(status["settings"]["ok"], false);
    // Fixed, with an unknown key: reported, not fatal, and no restart needed.
    let mut s = base_settings(None);
    s["colour"] = json!("teal");
    r.write_settings(&s);
    let v = r.shell_terminal("true");
    assert_eq!(v["state"], "running");
    let status = r.cli_json(&["status"]);
    assert_eq!(status["settings"]["ok"], true);
    assert!(
        status["settings"]["note"]
            .as_str()
            .unwrap()
            .contains("colour"),
        "{status}"
    );
}

#[test]
fn every_authorization_refusal_has_a_code_an_event_and_an_audit_row() {
    let mut s = base_settings(None);
    s["projects"].as_array_mut().unwrap().push(
        json!({"id": "narrow", "name": "Narrow", "path": "~/project", "allowed_templates": []}),
    );
    let r = Relay::start(s);
    let outside = r.home.join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    let cases: Vec<(Value, u16, &str)> = vec![
        (
            json!({"template": "shell"}),
            400,
            Code::ProjectRequired.as_str(),
        ),
        (
            json!({"project": "nope", "template": "shell"}),
            404,
            Code::UnknownProject.as_str(),
        ),
        (
            json!({"project": "p1", "template": "nope"}),
            404,
            Code::UnknownTemplate.as_str(),
        ),
        (
            json!({"project": "narrow", "template": "shell"}),
            403,
            Code::TemplateNotAllowed.as_str(),
        ),
        (
            json!({"project": "p1", "template": "shell", "directory": outside}),
            403,
            Code::DirectoryOutsideProject.as_str(),
        ),
        (
            json!({"project": "p1", "template": "shell", "directory": "~/project/../elsewhere"}),
            403,
            Code::DirectoryOutsideProject.as_str(),
        ),
    ];
    for (body, status, code) in &cases {
        let (st, v, _) = r.api("POST", "/api/terminals", Some(body));
        assert_eq!(
            (st, v["code"].as_str()),
            (*status, Some(*code)),
            "{body}: {v}"
        );
        assert!(v["error"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
        let ev = r.wait_event(|e| e["name"] == "session.launch" && e["code"] == *code);
        assert_eq!(ev["status"], "denied", "{ev}");
    }
    let rows = r.audit_rows();
    for (_, _, code) in &cases {
        assert!(
            rows.iter().any(|row| row["action"] == "session_launch"
                && row["outcome"] == "denied"
                && row["code"] == *code),
            "{code}: {rows:?}"
        );
    }
    // Request-supplied strings are capped in the audit log and in events.
    let long = "p".repeat(1000);
    let (st, _, _) = r.api(
        "POST",
        "/api/terminals",
        Some(&json!({"project": long, "template": "shell"})),
    );
    assert_eq!(st, 404);
    let row = r.audit_rows().into_iter().last().unwrap();
    assert!(
        row["project"].as_str().unwrap().chars().count() <= 257,
        "{row}"
    );
    let ev = r.wait_event(|e| {
        e["name"] == "session.launch" && e["code"] == Code::UnknownProject.as_str()
    });
    let reason = ev["reason"].as_str().unwrap();
    assert!(
        reason.ends_with('…') && reason.chars().count() <= 257,
        "{ev}"
    );
    assert!(row["project"].as_str().unwrap().ends_with('…'), "{row}");
    // Oversized and malformed bodies.
    let big = json!({"project": "x".repeat(70 * 1024)});
    assert_eq!(r.api("POST", "/api/terminals", Some(&big)).0, 413);
    let (st, v, _) = r.api(
        "POST",
        "/api/terminals",
        Some(&json!({"project": "p1", "bogus": 1})),
    );
    assert_eq!(
        (st, v["code"].as_str()),
        (400, Some(Code::InvalidRequest.as_str())),
        "{v}"
    );
    // A malformed launch body is a refused launch too: audited.
    let row = r.audit_rows().into_iter().last().unwrap();
    assert_eq!(
        (row["code"].as_str(), row["outcome"].as_str()),
        (Some(Code::InvalidRequest.as_str()), Some("denied")),
        "{row}"
    );
    assert_eq!(r.api("GET", "/api/nothing", None).0, 404);
}

#[test]
fn a_caller_inside_a_session_cannot_drive_relay() {
    let mut s = base_settings(None);
    s["terminal_templates"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "open", "command": "/bin/sh", "sandbox": false}));
    let r = Relay::start(s);
    let relay = r.relay_bin();
    let script = format!(
        "'{relay}' --config-dir '{cfg}' terminal start --project p1 --template shell; echo start_rc=$?; '{relay}' --config-dir '{cfg}' terminal list >/dev/null; echo list_rc=$?",
        relay = relay.display(),
        cfg = r.config.display()
    );
    let v = r.template_terminal("open", &script);
    let id = v["id"].as_str().unwrap();
    r.wait_exited(id);
    let log = r.cli(&["terminal", "log", "--id", id]).stdout;
    assert!(
        log.contains("cannot be run from inside a relay session"),
        "{log}"
    );
    // Refused (exit 4, docs/cli.md#exit-codes).
    assert!(log.contains("start_rc=4"), "{log}");
    assert!(log.contains("list_rc=0"), "reading is not driving: {log}");
    let row = r
        .audit_rows()
        .into_iter()
        .find(|row| row["code"] == Code::InsideSession.as_str())
        .expect("audit row");
    assert_eq!(row["outcome"], "denied");
    // Only the outside terminal exists.
    assert_eq!(
        r.cli_typed::<Terminals>(&["terminal", "list"])
            .terminals
            .len(),
        1
    );
}

#[test]
fn the_tcp_listener_needs_the_bearer_and_its_port_is_denied_to_sessions() {
    // On the host's network, where the port could be reached at all.
    let r = Relay::start(relay_e2e::daemon::host_network(base_settings(None)));
    let addr = r.ready.api.clone().expect("api address in ready.json");
    let token = std::fs::read_to_string(r.config.join("api-token")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(r.config.join("api-token"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    let get = |bearer: Option<&str>| {
        let auth = bearer
            .map(|b| format!("Authorization: Bearer {b}\r\n"))
            .unwrap_or_default();
        let (status, raw) = relay_e2e::tcp_http(&addr, "GET", "/api/status", &auth);
        (status, relay_e2e::parse_response_pub(&raw).1)
    };
    let (st, body) = get(None);
    assert_eq!((st, body.len()), (401, 0));
    assert_eq!(get(Some("wrong")).0, 401);
    let (st, body) = get(Some(token.trim()));
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));

    // From inside a sandboxed session the API port refuses the connection (Landlock).
    let (status, v, _) = r.api("POST", "/api/sessions", Some(&json!({"project": "p1"})));
    assert_eq!(status, 201, "{v}");
    let id = v["id"].as_str().unwrap();
    let port = addr.rsplit(':').next().unwrap();
    let probe = format!("!sh python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)\"");
    let (_, reply, _) = r.api(
        "POST",
        &format!("/api/sessions/{id}/message"),
        Some(&json!({"text": probe})),
    );
    let text = reply["text"].as_str().unwrap();
    assert!(
        !text.starts_with("exit: 0"),
        "the session reached the API port: {text}"
    );
    assert!(text.contains("PermissionError"), "{text}");
}

#[test]
fn a_dead_host_is_restarted_and_launches_work_again() {
    let mut s = base_settings(None);
    s["terminal_templates"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "open", "command": "/bin/sh", "sandbox": false}));
    let r = Relay::start(s);
    let first = r.wait_event(|e| e["name"] == "host.started");
    let v = r.shell_terminal("sleep 600");
    let id = v["id"].as_str().unwrap().to_string();
    // An unsandboxed target that shrugs off HUP and TERM: only a kill of its own
    // process group ends it when the host is gone.
    let stubborn = r.template_terminal(
        "open",
        "trap '' HUP TERM; echo $$ > \"$TMPDIR/pid\"; while :; do sleep 1; done",
    );
    let sid = stubborn["id"].as_str().unwrap().to_string();
    let pid_file = r.tmp.join(format!("relay-{sid}/pid"));
    // The shell creates the file before it writes the pid: wait for a whole line.
    let read_pid = || {
        std::fs::read_to_string(&pid_file)
            .ok()
            .filter(|t| t.ends_with('\n'))
            .and_then(|t| t.trim().parse::<u32>().ok())
    };
    assert!(
        relay_e2e::wait::until(relay_e2e::WAIT, || read_pid().is_some()),
        "no pid file"
    );
    let target: u32 = read_pid().unwrap();
    let pid = first["pid"].as_u64().unwrap() as libc::pid_t;
    // Safety: SIGKILL to the host process this instance started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let ev = r.wait_exited(&id);
    assert_eq!(ev["reason"], "host_died", "{ev}");
    assert_eq!(r.wait_exited(&sid)["reason"], "host_died");
    let gone = || {
        std::fs::read_to_string(format!("/proc/{target}/stat"))
            .map(|st| st.contains(") Z "))
            .unwrap_or(true)
    };
    assert!(
        relay_e2e::wait::until(relay_e2e::WAIT, gone),
        "the target {target} outlived its host"
    );
    let second = r.wait_event(|e| e["name"] == "host.started");
    assert_ne!(second["pid"], first["pid"]);
    let v = r.shell_terminal("echo again");
    r.wait_exited(v["id"].as_str().unwrap());
    let log = r.cli_json(&["terminal", "log", "--id", v["id"].as_str().unwrap()]);
    assert!(log["log"].as_str().unwrap().contains("again"), "{log}");
}

#[test]
fn sigterm_ends_every_session_and_exits_0() {
    let mut r = Relay::start(base_settings(None));
    let v = r.shell_terminal("sleep 600");
    let id = v["id"].as_str().unwrap().to_string();
    let (st, s, _) = r.api("POST", "/api/sessions", Some(&json!({"project": "p1"})));
    assert_eq!(st, 201, "{s}");
    let status = r.stop().expect("daemon ran");
    assert!(status.success(), "{status:?}");
    let events = relay_e2e::read_jsonl(&r.config.join("events.jsonl"));
    for sid in [id.as_str(), s["id"].as_str().unwrap()] {
        assert!(
            events
                .iter()
                .any(|e| e["name"] == "session.exited" && e["session_id"] == sid),
            "{sid} not ended: {events:?}"
        );
    }
    assert!(!r.config.join("ready.json").exists());
    assert_eq!(
        std::fs::read_dir(r.config.join("profiles"))
            .unwrap()
            .count(),
        0,
        "profiles left behind"
    );
}

#[test]
fn a_failing_verb_is_one_error_line_or_with_json_one_error_object() {
    let r = Relay::start(base_settings(None));
    for args in [
        vec!["terminal", "log", "--id", "t-nope"],
        vec!["session", "message", "--id", "s-nope", "hi"],
    ] {
        let out = r.cli(&args);
        // Not found: exit 3 (docs/cli.md#exit-codes).
        assert_eq!(out.status, 3, "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}: {:?}", out.stdout);
        assert!(
            out.stderr.starts_with("error: ")
                && out.stderr.ends_with(" (not_found)\n")
                && out.stderr.trim_end().lines().count() == 1,
            "{args:?}: {:?}",
            out.stderr
        );
        // With `--json`: one error object on stdout, the API's code apart.
        let json = r.cli(&[&args[..], &["--json"]].concat());
        assert_eq!(json.status, out.status, "{args:?}");
        assert_eq!(json.stderr, "", "{args:?}");
        let v: Value = serde_json::from_str(&json.stdout).unwrap();
        assert_eq!(json.stdout.lines().count(), 1, "{args:?}");
        assert_eq!(v["error"]["code"], Code::NotFound.as_str(), "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert_eq!(
            format!("error: {message} (not_found)\n"),
            out.stderr,
            "{args:?}"
        );
    }
    // A command line relay cannot run is clap's whole message, exit 2 (cli/usage.rs);
    // with `--json`, that message in an object of code `usage`.
    let out = r.cli(&["bogus-verb"]);
    assert_eq!(out.status, 2);
    assert!(out.stdout.is_empty(), "{:?}", out.stdout);
    assert!(
        out.stderr.starts_with("error: ") && out.stderr.contains("\nUsage: relay "),
        "{:?}",
        out.stderr
    );
    let out = r.cli(&["terminal", "start", "--template", "shell", "--json"]);
    assert_eq!(out.status, 2);
    assert_eq!(out.stderr, "");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["error"]["code"], "usage", "{v}");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("the following required arguments were not provided:")
            && message.contains("\nUsage: relay terminal start"),
        "{message}"
    );
}

/// A template's program reached through a link to a link, as a native installer lays
/// out versions (`~/.local/bin/tool` → `~/.local/share/tool/versions/current` → the real
/// program): the sandbox can read every hop, so it runs (it exited 127 when only the
/// first link's folder and the real file's were granted).
#[test]
fn a_program_reached_through_a_link_to_a_link_runs_in_its_sandbox() {
    let mut s = base_settings(None);
    s["terminal_templates"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "tool", "name": "Tool", "command": "~/.local/bin/tool"}));
    let r = Relay::start(s);
    let versions = r.home.join(".local/share/tool/versions");
    std::fs::create_dir_all(&versions).unwrap();
    std::os::unix::fs::symlink("/bin/echo", versions.join("current")).unwrap();
    std::fs::create_dir_all(r.home.join(".local/bin")).unwrap();
    std::os::unix::fs::symlink(versions.join("current"), r.home.join(".local/bin/tool")).unwrap();
    let out = r
        .cli_command(&["sandbox", "tool", "--", "two-hops"])
        .current_dir(&r.project)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("relay sandbox");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "two-hops\r\n");
}
