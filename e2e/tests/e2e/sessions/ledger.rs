//! The persistent ledger through the real daemon, host, shim and bwrap: sessions read
//! back after a clean restart and after a SIGKILL (a dormant session resumes its
//! conversation with Claude Code's own id on `--resume`; one that was running ends
//! `relay_restarted`), a SIGKILL in the middle of ledger writes, corrupt and planted
//! ledger files set aside, purge and `retain_ended` across a restart, the token in no
//! record in any encoding, and a session that cannot reach the ledger.
//! docs/architecture.md ("The ledger file"), docs/THREAT-MODEL.md.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use relay::daemon::diagnostics::scan::needles;
use relay_e2e::daemon::{base_settings, doctor_check, Relay, TOKEN_SETTING};
use relay_e2e::{fake_token, sha256_hex, wait, WAIT};
use serde_json::{json, Value};

fn fp(token: &str) -> String {
    sha256_hex(token.as_bytes())[..12].to_string()
}

fn ledger_dir(r: &Relay) -> PathBuf {
    r.config.join("ledger")
}

/// The record files, by name (the set-aside folder and temp files left out).
fn records(r: &Relay) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(ledger_dir(r))
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

fn record(r: &Relay, id: &str) -> Value {
    let bytes = std::fs::read(ledger_dir(r).join(format!("{id}.json")))
        .unwrap_or_else(|e| panic!("no ledger file for {id}: {e}"));
    serde_json::from_slice(&bytes).unwrap()
}

/// The token in none of the ledger's files, byte for byte or in any encoding
/// `relay audit scan` knows (JSON-escaped, URL-encoded, base64 at every alignment), nor
/// as hex.
fn assert_token_not_in_ledger(r: &Relay, token: &str) {
    let mut forms = needles(token.as_bytes());
    let hex: String = token.bytes().map(|b| format!("{b:02x}")).collect();
    forms.push(("hex", hex.into_bytes()));
    let mut files = Vec::new();
    relay_e2e::walk_files(&ledger_dir(r), &mut |p| files.push(p.to_path_buf()));
    assert!(!files.is_empty(), "the ledger holds no file");
    for p in files {
        let bytes = std::fs::read(&p).unwrap();
        for (name, n) in &forms {
            assert!(
                !bytes.windows(n.len()).any(|w| w == n.as_slice()),
                "the token ({name}) is in {}",
                p.display()
            );
        }
    }
}

fn listed(r: &Relay, id: &str) -> Option<Value> {
    let (what, key) = if id.starts_with("s-") {
        ("session", "sessions")
    } else {
        ("terminal", "terminals")
    };
    let v = r.cli_json(&[what, "list"]);
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == id)
        .cloned()
}

fn start_session(r: &Relay, extra: &[&str]) -> Value {
    let mut args = vec!["session", "start", "--project", "p1"];
    args.extend_from_slice(extra);
    r.cli_json(&args)
}

fn terminal(r: &Relay, script: &str) -> String {
    r.shell_terminal(script)["id"].as_str().unwrap().to_string()
}

/// The argv of every start of session `id` (its temp folder's fakeagent log).
fn argvs(r: &Relay, id: &str) -> Vec<Vec<String>> {
    r.start_lines()
        .iter()
        .filter(|l| l["env"]["RELAY_SESSION_ID"] == id)
        .map(|l| {
            l["argv"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

fn resumes_with(argv: &[String], claude_id: &str) -> bool {
    argv.windows(2)
        .any(|w| w[0] == "--resume" && w[1] == claude_id)
}

fn alive(pid: u64) -> bool {
    // Safety: kill(2) with signal 0 only checks that the pid exists.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

fn token_relay() -> (Relay, String) {
    let r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    let token = fake_token();
    r.write_token(&token);
    (r, token)
}

#[test]
fn after_a_clean_restart_a_dormant_session_resumes_its_conversation_and_ended_ones_are_listed() {
    let (mut r, token) = token_relay();
    let s = start_session(
        &r,
        &["--model", "sonnet", "--permission-mode", "acceptEdits"],
    );
    let sid = s["id"].as_str().unwrap().to_string();
    assert_eq!(r.turn(&sid, "hi"), "echo: hi");
    let t = terminal(&r, "exit 3");
    r.wait_exited(&t);
    r.cli_json(&["session", "stop", "--id", &sid]);
    r.wait_exited(&sid);
    let before_s = listed(&r, &sid).unwrap();
    let before_t = listed(&r, &t).unwrap();
    let claude_id = before_s["claude"]["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(before_s["state"], "dormant");
    assert_eq!(before_s["exit_reason"], "terminated", "{before_s}");
    assert_eq!(before_t["exit_status"], 3, "{before_t}");

    // One still running when relay stops: its record says why it ended at shutdown.
    let running = start_session(&r, &[])["id"].as_str().unwrap().to_string();
    r.stop();
    let rec = record(&r, &running);
    assert_eq!(
        (rec["state"].as_str(), rec["exit_reason"].as_str()),
        (Some("dormant"), Some("relay_restarted")),
        "{rec}"
    );
    // What the file says, before relay reads it again: the fingerprint, never the token.
    let rec = record(&r, &sid);
    assert_eq!(rec["token_fingerprint"], fp(&token), "{rec}");
    assert_eq!(rec["claude"]["session_id"], claude_id.as_str(), "{rec}");
    assert_eq!(rec["state"], "dormant", "{rec}");
    assert_token_not_in_ledger(&r, &token);
    r.launch_daemon();
    // The start's line counts the one the stop ended (issue 40: it said `0 ended
    // relay_restarted` while the list showed it so).
    let log = std::fs::read_to_string(r.config.join("relay.log")).unwrap();
    assert!(
        log.contains(
            "ledger: 3 sessions read back (1 ended relay_restarted: 1 when relay last \
             stopped, 0 now, as they were running when it went)"
        ),
        "{log}"
    );

    // Listed as before the restart, field for field.
    let after_s = listed(&r, &sid).expect("the dormant session after the restart");
    let after_t = listed(&r, &t).expect("the exited terminal after the restart");
    for k in [
        "id",
        "kind",
        "project_id",
        "template_id",
        "directory",
        "state",
        "created_ms",
        "ended_ms",
        "model",
        "permission_mode",
        "claude",
        "token_fingerprint",
        "token_passed",
        "sandboxed",
        "exit_reason",
    ] {
        assert_eq!(after_s[k], before_s[k], "{k}: {after_s} / {before_s}");
    }
    for k in ["state", "exit_status", "exit_reason", "template_id", "pty"] {
        assert_eq!(after_t[k], before_t[k], "{k}: {after_t} / {before_t}");
    }
    assert_eq!(after_s["model"], "sonnet");
    assert_eq!(after_s["permission_mode"], "acceptEdits");

    // The resume goes on with Claude Code's own session id, model and mode.
    let resumed = r.cli_json(&["session", "resume", "--id", &sid]);
    assert_eq!(resumed["state"], "running", "{resumed}");
    assert_eq!(r.turn(&sid, "again"), "echo: again");
    let starts = argvs(&r, &sid);
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert!(!starts[0].iter().any(|a| a == "--resume"), "{starts:?}");
    assert!(resumes_with(&starts[1], &claude_id), "{:?}", starts[1]);
    for flag in ["sonnet", "acceptEdits"] {
        assert!(starts[1].iter().any(|a| a == flag), "{:?}", starts[1]);
    }
    assert_eq!(
        r.start_line(&sid)["token_sha256"],
        sha256_hex(token.as_bytes())
    );
    assert_eq!(record(&r, &sid)["state"], "running");
    assert_token_not_in_ledger(&r, &token);
}

#[test]
fn sessions_running_when_relay_is_sigkilled_end_relay_restarted_and_the_session_resumes() {
    let (mut r, token) = token_relay();
    let s = start_session(&r, &[]);
    let sid = s["id"].as_str().unwrap().to_string();
    assert_eq!(r.turn(&sid, "remember"), "echo: remember");
    let claude_id = listed(&r, &sid).unwrap()["claude"]["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let t = terminal(&r, "exec sleep 600");
    let roots: Vec<u64> = [&sid, &t]
        .iter()
        .map(|id| listed(&r, id).unwrap()["root_pid"].as_u64().unwrap())
        .collect();
    assert_eq!(record(&r, &t)["state"], "running");

    r.kill();
    // The old host saw its daemon go and ends what it ran.
    assert!(
        wait::until(WAIT, || roots.iter().all(|p| !alive(*p))),
        "a session of the killed relay still runs"
    );
    r.launch_daemon();

    for id in [&sid, &t] {
        let ev = r.wait_exited(id);
        assert_eq!(ev["reason"], "relay_restarted", "{ev}");
        let row = r
            .audit_rows()
            .into_iter()
            .rev()
            .find(|a| a["action"] == "session_end" && a["session_id"] == id.as_str())
            .unwrap();
        assert_eq!(row["error"], "relay_restarted", "{row}");
    }
    let e = listed(&r, &sid).unwrap();
    assert_eq!(
        (e["state"].as_str(), e["exit_reason"].as_str()),
        (Some("dormant"), Some("relay_restarted")),
        "{e}"
    );
    assert!(e.get("root_pid").is_none(), "{e}");
    let e = listed(&r, &t).unwrap();
    assert_eq!(
        (e["state"].as_str(), e["exit_reason"].as_str()),
        (Some("exited"), Some("relay_restarted")),
        "{e}"
    );
    let text = r.cli(&["session", "list"]);
    assert!(
        text.stdout.contains(&format!("{sid}  dormant"))
            && text.stdout.contains("ended=relay_restarted"),
        "{}",
        text.stdout
    );
    assert_eq!(record(&r, &t)["exit_reason"], "relay_restarted");

    // A terminal does not come back; the session does, on its own conversation.
    let (status, v, _) = r.api("POST", &format!("/api/sessions/{sid}/resume"), None);
    assert_eq!(status, 201, "{v}");
    assert_eq!(r.turn(&sid, "go on"), "echo: go on");
    let starts = argvs(&r, &sid);
    assert!(
        resumes_with(starts.last().unwrap(), &claude_id),
        "{starts:?}"
    );
    assert_token_not_in_ledger(&r, &token);
}

/// One API request that may fail (the daemon may be gone): `None` when it did.
fn try_api(sock: &Path, method: &str, path: &str, body: &Value) -> Option<(u16, Value)> {
    let mut s = UnixStream::connect(sock).ok()?;
    s.set_read_timeout(Some(WAIT)).ok()?;
    let body = serde_json::to_vec(body).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: relay\r\nConnection: close\r\nContent-Type: \
         application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).ok()?;
    s.write_all(&body).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    if raw.is_empty() {
        return None;
    }
    let (status, body) = relay_e2e::parse_response_pub(&raw);
    Some((status, serde_json::from_slice(&body).unwrap_or(Value::Null)))
}

#[test]
fn a_sigkill_in_the_middle_of_ledger_writes_loses_no_record_and_tears_none() {
    let mut r = Relay::start(base_settings(None));
    let sock = r.socket();
    let pid = r.daemon_pid().unwrap();
    // Terminals that end at once: each is two writes (running, then exited), and they
    // come from several launches at a time while relay is killed.
    let answered = Mutex::new(Vec::<String>::new());
    std::thread::scope(|scope| {
        for script in ["exit 7", "sleep 0.1; exit 7", "exit 7"] {
            let answered = &answered;
            let sock = &sock;
            scope.spawn(move || loop {
                let body =
                    json!({"project": "p1", "template": "shell", "extra_args": ["-c", script]});
                match try_api(sock, "POST", "/api/terminals", &body) {
                    Some((201, v)) => answered
                        .lock()
                        .unwrap()
                        .push(v["id"].as_str().unwrap().to_string()),
                    _ => return,
                }
            });
        }
        assert!(
            wait::until(WAIT, || answered.lock().unwrap().len() >= 12),
            "the launches did not go through"
        );
        // Safety: kill(2) on the daemon this test started.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    });
    r.kill();
    let answered = answered.into_inner().unwrap();
    let out_before = r.output_text().len();
    r.launch_daemon();

    // Nothing torn, nothing set aside, no temp file left; every record parses and
    // names itself.
    let out = r.output_text()[out_before..].to_string();
    assert!(!out.contains("set aside as"), "{out}");
    assert!(
        !r.audit_rows()
            .iter()
            .any(|a| a["action"] == "ledger_set_aside"),
        "a ledger file was set aside"
    );
    let names: Vec<String> = std::fs::read_dir(ledger_dir(&r))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n.contains(".tmp-")),
        "a temp file stayed: {names:?}"
    );
    for (name, bytes) in records(&r) {
        let v: Value =
            serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{name} does not parse: {e}"));
        assert_eq!(format!("{}.json", v["id"].as_str().unwrap()), name);
    }
    // Every launch relay answered 201 is listed, ended one way or the other.
    let list = r.cli_json(&["terminal", "list"]);
    let listed: Vec<&Value> = list["terminals"].as_array().unwrap().iter().collect();
    for id in &answered {
        let e = listed
            .iter()
            .find(|e| e["id"] == id.as_str())
            .unwrap_or_else(|| panic!("{id} was lost: {list}"));
        assert_eq!(e["state"], "exited", "{e}");
        let ended = (e["exit_status"].as_i64(), e["exit_reason"].as_str());
        assert!(
            ended == (Some(7), Some("exited")) || ended.1 == Some("relay_restarted"),
            "{e}"
        );
    }
    let cut = listed
        .iter()
        .filter(|e| e["exit_reason"] == "relay_restarted")
        .count();
    eprintln!(
        "ledger: {} launches answered before the SIGKILL, {cut} cut short by it",
        answered.len()
    );
    let doctor = r.cli_json(&["doctor"]);
    assert_eq!(doctor_check(&doctor, "ledger")["status"], "ok");
}

#[test]
fn a_corrupt_truncated_or_planted_ledger_file_is_set_aside_and_the_others_survive() {
    let mut r = Relay::start(base_settings(None));
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = start_session(&r, &[])["id"].as_str().unwrap().to_string();
        r.cli_json(&["session", "stop", "--id", &id]);
        r.wait_exited(&id);
        ids.push(id);
    }
    let t = terminal(&r, "exit 0");
    r.wait_exited(&t);
    r.stop();

    let dir = ledger_dir(&r);
    let file = |id: &str| dir.join(format!("{id}.json"));
    // A torn write, garbage, a link to a file of the person's, a leftover temp file.
    let whole = std::fs::read(file(&ids[0])).unwrap();
    std::fs::write(file(&ids[0]), &whole[..whole.len() / 2]).unwrap();
    std::fs::write(file(&t), b"{\"v\": 1, \"id\": [").unwrap();
    let precious = r.home.join("precious.json");
    std::fs::write(&precious, std::fs::read(file(&ids[2])).unwrap()).unwrap();
    std::fs::remove_file(file(&ids[2])).unwrap();
    std::os::unix::fs::symlink(&precious, file(&ids[2])).unwrap();
    let leftover = dir.join(format!(".{}.json.tmp-1-0", ids[1]));
    std::fs::write(&leftover, &whole[..10]).unwrap();
    let good = std::fs::read(file(&ids[1])).unwrap();

    let out_before = r.output_text().len();
    r.launch_daemon();
    let out = r.output_text()[out_before..].to_string();

    // Relay is up with the record it could read; the others are set aside and reported.
    let list = r.cli_json(&["session", "list"]);
    let ids_listed: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids_listed, [ids[1].as_str()], "{list}");
    assert!(listed(&r, &t).is_none());
    assert_eq!(std::fs::read(file(&ids[1])).unwrap(), good);
    assert!(!leftover.exists(), "the temp file of a cut write stayed");
    let bad = [&ids[0], &t, &ids[2]];
    let rows: Vec<Value> = r
        .audit_rows()
        .into_iter()
        .filter(|a| a["action"] == "ledger_set_aside")
        .collect();
    assert_eq!(rows.len(), 3, "{rows:?}");
    for id in bad {
        let name = format!("{id}.json");
        assert!(
            out.lines()
                .any(|l| l.contains(&name) && l.contains("set aside as")),
            "no stderr line for {name}:\n{out}"
        );
        assert!(
            rows.iter()
                .any(|row| row["error"].as_str().unwrap().contains(&name)),
            "{rows:?}"
        );
        assert!(!file(id).exists() && std::fs::symlink_metadata(file(id)).is_err());
    }
    assert!(
        rows.iter().any(|row| row["error"]
            .as_str()
            .unwrap()
            .contains("a link, not a file")),
        "{rows:?}"
    );
    // The link was moved, never followed: the person's file is as it was.
    assert!(precious.is_file());
    let aside: Vec<PathBuf> = std::fs::read_dir(dir.join("set-aside"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(aside.len(), 3, "{aside:?}");
    let doctor = r.cli_json(&["doctor"]);
    let check = doctor_check(&doctor, "ledger");
    assert_eq!(check["status"], "warn", "{check}");
    for id in bad {
        assert!(
            check["detail"].as_str().unwrap().contains(id.as_str()),
            "{check}"
        );
    }

    // The readable one resumes; a restart reads nothing set aside again.
    let (status, v, _) = r.api("POST", &format!("/api/sessions/{}/resume", ids[1]), None);
    assert_eq!(status, 201, "{v}");
    r.stop();
    r.launch_daemon();
    let rows = r
        .audit_rows()
        .into_iter()
        .filter(|a| a["action"] == "ledger_set_aside")
        .count();
    assert_eq!(rows, 3);
    assert_eq!(
        listed(&r, &ids[1]).unwrap()["exit_reason"],
        "relay_restarted"
    );
}

#[test]
fn a_purged_session_stays_forgotten_after_a_restart_and_retain_ended_purges_read_back_ones() {
    let mut r = Relay::start(base_settings(None));
    let kept = start_session(&r, &[])["id"].as_str().unwrap().to_string();
    r.cli_json(&["session", "stop", "--id", &kept]);
    r.wait_exited(&kept);
    let gone = terminal(&r, "exit 0");
    r.wait_exited(&gone);
    r.cli_json(&["terminal", "purge", "--id", &gone]);
    assert!(!ledger_dir(&r).join(format!("{gone}.json")).exists());
    r.stop();
    r.launch_daemon();
    assert!(listed(&r, &gone).is_none(), "a purged terminal came back");
    assert!(listed(&r, &kept).is_some());

    // Read back, it is purged on the timer like any ended session.
    let mut s = base_settings(None);
    s["retain_ended"] = json!("1s");
    r.write_settings(&s);
    let ev = r.wait_event(|e| e["name"] == "session.purged" && e["session_id"] == kept.as_str());
    assert_eq!(ev["reason"], "retain_ended", "{ev}");
    assert!(!ledger_dir(&r).join(format!("{kept}.json")).exists());
    assert!(!r.tmp.join(format!("relay-{kept}")).exists());
    r.stop();
    r.launch_daemon();
    assert!(listed(&r, &kept).is_none(), "a purged session came back");
}

#[test]
fn a_session_cannot_read_list_or_rewrite_the_ledger() {
    if relay_e2e::bwrap_only("a_session_cannot_read_list_or_rewrite_the_ledger") {
        return;
    }
    let (r, token) = token_relay();
    // A record with the token's fingerprint and Claude Code's id, as a target.
    let sid = start_session(&r, &[])["id"].as_str().unwrap().to_string();
    assert_eq!(r.turn(&sid, "hi"), "echo: hi");
    let dir = ledger_dir(&r);
    let target = dir.join(format!("{sid}.json"));
    let before = std::fs::read(&target).unwrap();
    let out = r.project.join("ledger-probe");
    let d = dir.display();
    let f = target.display();
    let script = format!(
        "for step in 'cat {f}' 'ls {d}' 'echo {{}} > {f}' 'rm -f {f}' 'mv {f} {d}/x.json' \
         'ln -s /etc/passwd {d}/s-000000000001.json' 'cat {d}/../ledger/{sid}.json'; do \
         if sh -c \"$step\" >/dev/null 2>&1; then echo \"allowed: $step\"; else echo \"denied: $step\"; fi; \
         done > {out}",
        out = out.display()
    );
    let t = terminal(&r, &script);
    let ev = r.wait_exited(&t);
    assert_eq!(ev["exit_status"], 0, "{ev}");
    let lines = std::fs::read_to_string(&out).unwrap();
    assert_eq!(lines.lines().count(), 7, "{lines}");
    assert!(
        lines.lines().all(|l| l.starts_with("denied: ")),
        "a session reached the ledger:\n{lines}"
    );
    // What relay wrote is what is there, and nothing was added.
    assert_eq!(std::fs::read(&target).unwrap(), before);
    let mut names: Vec<String> = records(&r).into_iter().map(|(n, _)| n).collect();
    names.sort();
    let mut want = vec![format!("{sid}.json"), format!("{t}.json")];
    want.sort();
    assert_eq!(names, want);
    assert_token_not_in_ledger(&r, &token);
}

#[test]
fn real_claude_resumes_its_conversation_after_relay_is_sigkilled() {
    use crate::clients::real_turns::{message, relay_with_api, session_entry};
    let Some(claude) = crate::clients::real_claude::claude_code() else {
        return;
    };
    let word = format!("heron-{}", relay_e2e::random_hex(4));
    let (mut r, api, token) = relay_with_api(&claude, json!({"turns": [{"text": "noted"}]}), true);
    let id = crate::clients::real_turns::start_session(&r, &[]);
    let first = format!("remember the word {word}");
    let out = message(&r, &id, &first, &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let claude_id = session_entry(&r, &id)["claude"]["session_id"].clone();
    assert!(claude_id.is_string(), "no Claude session id");
    let root = session_entry(&r, &id)["root_pid"].as_u64().unwrap();
    let before = api.messages().len();

    r.kill();
    assert!(
        wait::until(WAIT, || !alive(root)),
        "the session outlived relay"
    );
    r.launch_daemon();
    let e = session_entry(&r, &id);
    assert_eq!(e["state"], "dormant", "{e}");
    assert_eq!(e["exit_reason"], "relay_restarted", "{e}");
    assert_eq!(e["claude"]["session_id"], claude_id, "{e}");

    r.cli_json(&["session", "resume", "--id", &id]);
    let out = message(&r, &id, "which word was it?", &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let after = api.messages();
    let resumed = after
        .get(before)
        .unwrap_or_else(|| panic!("no request after the resume: {after:?}"));
    // Claude Code read its own transcript back: the turn before the crash is sent.
    let texts = resumed["user_texts"].as_array().unwrap();
    assert!(
        texts.contains(&json!(first)),
        "the earlier turn is not in {resumed}"
    );
    assert!(texts.contains(&json!("which word was it?")), "{resumed}");
    assert!(resumed["messages"].as_u64().unwrap() >= 3, "{resumed}");
    crate::clients::real_turns::assert_every_bearer_is(&api, &after, &token);
    assert_token_not_in_ledger(&r, &token);
}

#[test]
fn the_host_of_a_killed_relay_leaves_the_next_hosts_socket_alone() {
    // Unsandboxed, so SIGTERM reaches the shell itself (no launcher between).
    let mut s = base_settings(None);
    s["terminal_templates"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "plain", "name": "Plain", "command": "/bin/sh", "sandbox": false}));
    let mut r = Relay::start(s);
    let old_host = r.wait_event(|e| e["name"] == "host.started")["pid"]
        .as_u64()
        .unwrap();
    // A terminal that ignores SIGTERM keeps the old host ending it for its whole grace,
    // long after the next relay's host listens at the same path.
    let body = json!({"project": "p1", "template": "plain",
        "extra_args": ["-c", "trap '' TERM; echo armed; while :; do sleep 1; done"]});
    let (status, v, _) = r.api("POST", "/api/terminals", Some(&body));
    assert_eq!(status, 201, "{v}");
    let t = v["id"].as_str().unwrap().to_string();
    let armed = wait::until(WAIT, || {
        r.cli(&["terminal", "log", "--id", &t])
            .stdout
            .contains("armed")
    });
    assert!(armed, "the terminal never printed its marker");
    r.kill();
    r.launch_daemon();
    assert!(
        wait::until(WAIT, || !alive(old_host)),
        "the old host never ended"
    );
    // The new host still answers at its socket: launches and lists work.
    let again = terminal(&r, "echo fine");
    let ev = r.wait_exited(&again);
    assert_eq!(ev["exit_status"], 0, "{ev}");
    assert!(r.config.join("sessions/host.sock").exists());
    assert_eq!(listed(&r, &t).unwrap()["exit_reason"], "relay_restarted");
}
