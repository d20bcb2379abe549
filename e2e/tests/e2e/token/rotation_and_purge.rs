//! Token hygiene after launch, through the real daemon, host, shim and bwrap: which
//! token each session runs on (its fingerprint), what happens to those sessions when the
//! token file is replaced or removed (`claude_token_on_change`), purging an ended
//! session's record, logs and temp folder (by hand and by `retain_ended`), and
//! `relay audit scan`. docs/THREAT-MODEL.md ("A token that appears or changes",
//! "Leftovers and purge"); docs/testing.md says which guard was removed to see each test
//! fail.

use relay::wire::Code;
use std::io::Write;
use std::os::unix::fs::{symlink, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use relay_e2e::daemon::{base_settings, Relay, TOKEN_SETTING};
use relay_e2e::{assert_absent, fake_token, sha256_hex, wait, WAIT};
use serde_json::{json, Value};

/// The fingerprint relay shows for a token: the first 12 hex of its SHA-256.
fn fp(token: &str) -> String {
    sha256_hex(token.as_bytes())[..12].to_string()
}

fn start_session(r: &Relay) -> String {
    let (status, v, _) = r.api("POST", "/api/sessions", Some(&json!({"project": "p1"})));
    assert_eq!(status, 201, "{v}");
    v["id"].as_str().unwrap().to_string()
}

/// A terminal of `template`; `script` runs under `sh -c`, else the program waits on
/// its pty (a shell, or the fake agent's interactive mode).
fn terminal(r: &Relay, template: &str, script: Option<&str>) -> String {
    let mut body = json!({"project": "p1", "template": template});
    if let Some(script) = script {
        body["extra_args"] = json!(["-c", script]);
    }
    let (status, v, _) = r.api("POST", "/api/terminals", Some(&body));
    assert_eq!(status, 201, "{v}");
    v["id"].as_str().unwrap().to_string()
}

/// The entry of `id` in `relay session list` or `relay terminal list`, if listed.
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

fn last_audit(r: &Relay, action: &str, id: &str) -> Value {
    r.audit_rows()
        .into_iter()
        .rev()
        .find(|row| row["action"] == action && row["session_id"] == id)
        .unwrap_or_else(|| panic!("no {action} row for {id}"))
}

/// Waits for `id`'s exit: `reason` in the event and in the `session_end` row, which also
/// names the token it ran on.
fn assert_stopped(r: &Relay, id: &str, reason: &str, fingerprint: &str) {
    let ev = r.wait_exited(id);
    assert_eq!(ev["reason"], reason, "{ev}");
    let row = last_audit(r, "session_end", id);
    assert_eq!(row["error"], reason, "{row}");
    assert_eq!(row["token_fingerprint"], fingerprint, "{row}");
}

/// Writes the token into the file it is already in (same inode), as `>` does.
fn rewrite_in_place(path: &Path, token: &str) {
    let ino = std::fs::metadata(path).unwrap().ino();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .unwrap();
    writeln!(f, "{token}").unwrap();
    drop(f);
    assert_eq!(std::fs::metadata(path).unwrap().ino(), ino);
}

fn assert_no_token_anywhere(r: &Relay, tokens: &[&str], token_path: &Path) {
    assert_no_token_but_in(r, tokens, &[token_path]);
}

/// No token in the daemon's output or in any file of the instance but `token_files`.
fn assert_no_token_but_in(r: &Relay, tokens: &[&str], token_files: &[&Path]) {
    for t in tokens {
        assert_absent(&r.output(), t, "the daemon's output");
        for (p, bytes) in r.all_files(token_files) {
            assert_absent(&bytes, t, &p.display().to_string());
        }
    }
}

fn session_tmp(r: &Relay, id: &str) -> PathBuf {
    r.tmp.join(format!("relay-{id}"))
}

fn log_files(r: &Relay, id: &str) -> Vec<PathBuf> {
    ["head", "tail"]
        .iter()
        .map(|ext| r.config.join(format!("sessions/logs/{id}.{ext}")))
        .filter(|p| p.exists())
        .collect()
}

#[test]
fn a_token_replaced_in_place_stops_its_sessions_and_a_resume_runs_on_the_new_one() {
    let first = fake_token();
    let second = fake_token();
    let r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    let path = r.write_token(&first);
    let s = start_session(&r);
    assert_eq!(r.turn(&s, "hi"), "echo: hi");
    let t = terminal(&r, "claude-code", None);
    let shell = terminal(&r, "shell", None);

    // Each token launch names its token by fingerprint: the lists, the launch row.
    assert_eq!(listed(&r, &s).unwrap()["token_fingerprint"], fp(&first));
    assert_eq!(listed(&r, &t).unwrap()["token_fingerprint"], fp(&first));
    assert!(listed(&r, &shell)
        .unwrap()
        .get("token_fingerprint")
        .is_none());
    let text = r.cli(&["session", "list"]).stdout;
    assert!(text.contains(&format!("token={}", fp(&first))), "{text}");
    let text = r.cli(&["terminal", "list"]).stdout;
    assert!(text.contains(&format!("token={}", fp(&first))), "{text}");
    assert_eq!(
        last_audit(&r, "session_launch", &s)["token_fingerprint"],
        fp(&first)
    );

    rewrite_in_place(&path, &second);
    assert_stopped(&r, &s, "claude_token_replaced", &fp(&first));
    assert_stopped(&r, &t, "claude_token_replaced", &fp(&first));
    assert_eq!(listed(&r, &s).unwrap()["state"], "dormant");
    assert_eq!(listed(&r, &t).unwrap()["state"], "exited");
    // A session without the token goes on.
    assert_eq!(listed(&r, &shell).unwrap()["state"], "running");

    // Resumed, it runs on the new token.
    let v = r.cli_json(&["session", "resume", "--id", &s]);
    assert_eq!(v["token_fingerprint"], fp(&second), "{v}");
    assert_eq!(r.turn(&s, "again"), "echo: again");
    let last = r
        .start_lines()
        .into_iter()
        .rev()
        .find(|l| l["env"]["RELAY_SESSION_ID"] == s.as_str())
        .unwrap();
    assert_eq!(last["token_sha256"], sha256_hex(second.as_bytes()));
    assert_eq!(
        last_audit(&r, "session_resume", &s)["token_fingerprint"],
        fp(&second)
    );
    assert_no_token_anywhere(&r, &[&first, &second], &path);
}

#[test]
fn a_token_replaced_by_rename_stops_its_sessions() {
    let first = fake_token();
    let second = fake_token();
    let r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    let path = r.write_token(&first);
    let s = start_session(&r);
    let t = terminal(&r, "claude-code", None);
    // A new file renamed over the old one, as editors and `mv` save.
    let ino = std::fs::metadata(&path).unwrap().ino();
    r.write_token(&second);
    assert_ne!(std::fs::metadata(&path).unwrap().ino(), ino);
    assert_stopped(&r, &s, "claude_token_replaced", &fp(&first));
    assert_stopped(&r, &t, "claude_token_replaced", &fp(&first));
    // The next launch runs on the new token and is left alone.
    let next = start_session(&r);
    assert_eq!(listed(&r, &next).unwrap()["token_fingerprint"], fp(&second));
    assert_eq!(r.turn(&next, "hi"), "echo: hi");
    assert_no_token_anywhere(&r, &[&first, &second], &path);
}

#[test]
fn a_removed_token_stops_its_sessions_as_removed() {
    let token = fake_token();
    let r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    let path = r.write_token(&token);
    let s = start_session(&r);
    let t = terminal(&r, "claude-code", None);
    std::fs::remove_file(&path).unwrap();
    assert_stopped(&r, &s, "claude_token_removed", &fp(&token));
    assert_stopped(&r, &t, "claude_token_removed", &fp(&token));
    // No token, no resume; the file back, the resume runs.
    let (status, v, _) = r.api("POST", &format!("/api/sessions/{s}/resume"), None);
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("does not exist"),
        "{v}"
    );
    r.write_token(&token);
    let v = r.cli_json(&["session", "resume", "--id", &s]);
    assert_eq!(v["state"], "running", "{v}");
    assert_eq!(r.turn(&s, "back"), "echo: back");
    assert_no_token_anywhere(&r, &[&token], &path);
}

#[test]
fn with_keep_sessions_on_an_old_token_go_on_listed_stale() {
    let first = fake_token();
    let second = fake_token();
    let mut settings = base_settings(Some(TOKEN_SETTING));
    settings["claude_token_on_change"] = json!("keep");
    let r = Relay::start(settings);
    let path = r.write_token(&first);
    let s = start_session(&r);
    let t = terminal(&r, "claude-code", None);
    assert!(listed(&r, &s).unwrap().get("stale").is_none());

    r.write_token(&second);
    assert!(
        wait::until(WAIT, || listed(&r, &s).unwrap()["stale"] == true),
        "never listed stale: {:?}",
        listed(&r, &s)
    );
    assert!(wait::until(WAIT, || listed(&r, &t).unwrap()["stale"] == true));
    // It goes on, on the token it has.
    assert_eq!(r.turn(&s, "still here"), "echo: still here");
    assert_eq!(listed(&r, &t).unwrap()["state"], "running");
    let text = r.cli(&["session", "list"]).stdout;
    assert!(
        text.contains(&format!("token={}  stale", fp(&first))),
        "{text}"
    );
    // A new launch runs on the new token, not stale.
    let next = start_session(&r);
    let e = listed(&r, &next).unwrap();
    assert_eq!(e["token_fingerprint"], fp(&second));
    assert!(e.get("stale").is_none(), "{e}");
    // The old token back: the first session is current again, the new one stale.
    r.write_token(&first);
    assert!(wait::until(WAIT, || {
        listed(&r, &s).unwrap().get("stale").is_none()
            && listed(&r, &next).unwrap()["stale"] == true
    }));
    assert!(!r.all_events().iter().any(|e| e["name"] == "session.exited"));
    assert_no_token_anywhere(&r, &[&first, &second], &path);
}

#[test]
fn with_keep_a_session_that_could_see_the_new_token_is_still_stopped() {
    // Exposure wins over `keep`: the claude-code template reads `~/.config`, so a
    // replaced token folder is no longer under this session's mask.
    let first = fake_token();
    let second = fake_token();
    let mut settings = base_settings(Some(TOKEN_SETTING));
    settings["claude_token_on_change"] = json!("keep");
    let r = Relay::start(settings);
    let path = r.write_token(&first);
    let s = start_session(&r);
    // Its sandbox is set up (a folder replaced while bwrap mounts it fails the launch
    // instead: seen on a CI run, exit 1).
    assert_eq!(r.turn(&s, "hi"), "echo: hi");
    let folder = path.parent().unwrap();
    let fresh = r.home.join(".config/acme-ltt.new");
    std::fs::create_dir(&fresh).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(fresh.join("token"))
        .unwrap();
    writeln!(f, "{second}").unwrap();
    drop(f);
    let old = r.home.join(".config/acme-ltt.old");
    std::fs::rename(folder, &old).unwrap();
    std::fs::rename(&fresh, folder).unwrap();
    assert_stopped(&r, &s, "claude_token_changed", &fp(&first));
    assert_no_token_but_in(&r, &[&first, &second], &[&path, &old.join("token")]);
}

#[test]
fn purge_removes_an_ended_sessions_record_logs_and_temp_folder() {
    let token = fake_token();
    let r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    let path = r.write_token(&token);
    let s = start_session(&r);
    assert_eq!(r.turn(&s, "hi"), "echo: hi");
    let t = terminal(
        &r,
        "shell",
        Some("echo purge-me > \"$TMPDIR/note\"; echo printed"),
    );
    r.wait_exited(&t);
    assert!(session_tmp(&r, &t).join("note").exists());
    assert!(session_tmp(&r, &s).join("claude-config").is_dir());
    assert!(!log_files(&r, &t).is_empty());

    // Running: refused; the wrong kind: not found.
    let out = r.cli(&["session", "purge", "--id", &s]);
    assert_eq!(out.status, 4, "refused: {}", out.stderr);
    assert!(
        out.stderr.contains(Code::SessionRunning.as_str()),
        "{}",
        out.stderr
    );
    assert!(session_tmp(&r, &s).is_dir());
    let (status, v, _) = r.api("POST", &format!("/api/terminals/{s}/purge"), None);
    assert_eq!(
        (status, v["code"].as_str()),
        (404, Some(Code::NotFound.as_str())),
        "{v}"
    );

    // An ended terminal: record, logs and folder go.
    let v = r.cli_json(&["terminal", "purge", "--id", &t]);
    assert_eq!(
        (v["id"].as_str(), v["purged"].as_bool()),
        (Some(t.as_str()), Some(true))
    );
    assert!(!session_tmp(&r, &t).exists());
    assert!(log_files(&r, &t).is_empty(), "{:?}", log_files(&r, &t));
    assert!(listed(&r, &t).is_none());
    let (status, _, _) = r.api("GET", &format!("/api/terminals/{t}/log"), None);
    assert_eq!(status, 404);
    let ev = r.wait_event(|e| e["name"] == "session.purged" && e["session_id"] == t.as_str());
    assert_eq!(ev["reason"], "purged", "{ev}");
    assert_eq!(last_audit(&r, "session_purge", &t)["error"], "purged");

    // A dormant session: its Claude config and transcripts go with it.
    assert_eq!(r.cli(&["session", "stop", "--id", &s]).status, 0);
    let out = r.cli(&["session", "purge", "--id", &s]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert!(
        out.stdout.starts_with(&format!("purged {s}")),
        "{}",
        out.stdout
    );
    assert!(!session_tmp(&r, &s).exists());
    assert!(log_files(&r, &s).is_empty());
    assert!(listed(&r, &s).is_none());
    let (status, v, _) = r.api("POST", &format!("/api/sessions/{s}/resume"), None);
    assert_eq!(
        (status, v["code"].as_str()),
        (404, Some(Code::NotFound.as_str())),
        "{v}"
    );
    assert_eq!(
        last_audit(&r, "session_purge", &s)["token_fingerprint"],
        fp(&token)
    );
    let out = r.cli(&["session", "purge", "--id", &s]);
    assert!(
        out.status == 3 && out.stderr.contains(Code::NotFound.as_str()),
        "{}",
        out.stderr
    );
    assert_no_token_anywhere(&r, &[&token], &path);
}

#[test]
fn purge_never_follows_a_link_the_session_planted_or_one_in_the_temp_folders_path() {
    let r = Relay::start(base_settings(None));
    let precious = r.home.join("precious");
    std::fs::create_dir_all(precious.join("inner")).unwrap();
    std::fs::write(precious.join("inner/file"), "keep").unwrap();
    // The session points links in its folder at the person's files, and locks a folder.
    let plant = r#"ln -s "$HOME/precious" "$TMPDIR/to-folder" &&
        ln -s "$HOME/precious/inner/file" "$TMPDIR/to-file" &&
        mkdir -p "$TMPDIR/locked/inner" && echo x >"$TMPDIR/locked/inner/f" &&
        chmod 500 "$TMPDIR/locked" && echo planted"#;
    let t = terminal(&r, "shell", Some(plant));
    let ev = r.wait_exited(&t);
    assert_eq!(ev["exit_status"], 0, "{ev}");
    assert!(std::fs::symlink_metadata(session_tmp(&r, &t).join("to-folder")).is_ok());
    r.cli_json(&["terminal", "purge", "--id", &t]);
    assert!(!session_tmp(&r, &t).exists());
    assert_eq!(
        std::fs::read_to_string(precious.join("inner/file")).unwrap(),
        "keep"
    );

    // The folder above the temp folders turned into a link (what a session that can
    // write that folder could do): nothing is removed through it.
    let t2 = terminal(&r, "shell", Some("echo mine >\"$TMPDIR/mine\""));
    r.wait_exited(&t2);
    let real = r.root.join("tmp.real");
    let decoy = r.root.join("decoy");
    std::fs::create_dir_all(decoy.join(format!("relay-{t2}"))).unwrap();
    std::fs::write(decoy.join(format!("relay-{t2}/precious")), "keep").unwrap();
    std::fs::rename(&r.tmp, &real).unwrap();
    symlink(&decoy, &r.tmp).unwrap();
    let (status, v, _) = r.api("POST", &format!("/api/terminals/{t2}/purge"), None);
    std::fs::remove_file(&r.tmp).unwrap();
    std::fs::rename(&real, &r.tmp).unwrap();
    assert_eq!(
        (status, v["code"].as_str()),
        (500, Some(Code::PurgeFailed.as_str())),
        "{v}"
    );
    assert!(
        v["error"].as_str().unwrap().contains("no longer resolves"),
        "{v}"
    );
    assert_eq!(
        std::fs::read_to_string(decoy.join(format!("relay-{t2}/precious"))).unwrap(),
        "keep"
    );
    assert!(session_tmp(&r, &t2).join("mine").exists());
    assert!(
        listed(&r, &t2).is_some(),
        "the record went without its folder"
    );
    // The path restored, the purge goes through.
    r.cli_json(&["terminal", "purge", "--id", &t2]);
    assert!(!session_tmp(&r, &t2).exists());
}

#[test]
fn retain_ended_purges_ended_sessions_on_a_timer() {
    let mut settings = base_settings(None);
    settings["retain_ended"] = json!("1s");
    let r = Relay::start(settings);
    let running = terminal(&r, "shell", None);
    let t = terminal(&r, "shell", Some("echo short-lived"));
    let ev = r.wait_event(|e| e["name"] == "session.purged" && e["session_id"] == t.as_str());
    assert_eq!(ev["reason"], "retain_ended", "{ev}");
    assert!(!session_tmp(&r, &t).exists());
    assert!(log_files(&r, &t).is_empty());
    assert!(listed(&r, &t).is_none());
    assert_eq!(last_audit(&r, "session_purge", &t)["error"], "retain_ended");
    // A running session is never purged.
    assert_eq!(listed(&r, &running).unwrap()["state"], "running");
    assert!(session_tmp(&r, &running).is_dir());
}

#[test]
fn purging_an_unpinned_session_does_not_make_relay_forget_what_it_could_write() {
    let token = fake_token();
    let local_rw = json!({"id": "local-rw", "command": "/bin/sh", "read_write": ["~/.local"]});
    // At first both Claude programs live elsewhere, so nothing pins `~/.local`.
    let mut first = base_settings(None);
    first["claude_path"] = json!("/bin/true");
    first["terminal_templates"][0]["command"] = json!("/bin/true");
    first["terminal_templates"]
        .as_array_mut()
        .unwrap()
        .push(local_rw.clone());
    let r = Relay::start(first);
    // Claude installed the native way: `~/.local/bin/claude` a link into versions.
    let versions = r.home.join(".local/share/claude/versions");
    std::fs::create_dir_all(&versions).unwrap();
    std::fs::rename(r.home.join(".local/bin/claude"), versions.join("1.0.0")).unwrap();
    symlink(versions.join("1.0.0"), r.home.join(".local/bin/claude")).unwrap();
    let early = terminal(&r, "local-rw", Some("echo could-write-the-program"));
    r.wait_exited(&early);
    let mut second = base_settings(Some(TOKEN_SETTING));
    second["terminal_templates"]
        .as_array_mut()
        .unwrap()
        .push(local_rw);
    r.write_settings(&second);
    let path = r.write_token(&token);
    let refused = |r: &Relay| {
        let (status, v, raw) = r.api("POST", "/api/sessions", Some(&json!({"project": "p1"})));
        assert_eq!(
            (status, v["code"].as_str()),
            (400, Some(Code::SandboxUnavailable.as_str())),
            "{v}"
        );
        assert_absent(&raw, &token, "the refusal");
        v["error"].as_str().unwrap().to_string()
    };
    assert!(refused(&r).contains(&early));
    // Purged, its record is gone, and what it could write is still remembered.
    r.cli_json(&["terminal", "purge", "--id", &early]);
    assert!(listed(&r, &early).is_none());
    let msg = refused(&r);
    assert!(msg.contains(&early) && msg.contains("could write"), "{msg}");
    assert!(r.start_lines().is_empty(), "a Claude launch started");
    assert_no_token_anywhere(&r, &[&token], &path);
}

/// Standard base64, written out here so the test does not lean on relay's own encoder.
fn base64(data: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn audit_scan_finds_no_token_after_a_representative_token_flow() {
    let token = fake_token();
    let r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    let path = r.write_token(&token);
    // Sessions: turns, a tool run, a stop and a resume.
    let s = start_session(&r);
    assert_eq!(r.turn(&s, "hi"), "echo: hi");
    r.turn(&s, "!sh echo from-a-tool; ls -a \"$TMPDIR\"");
    assert_eq!(r.cli(&["session", "stop", "--id", &s]).status, 0);
    r.cli_json(&["session", "resume", "--id", &s]);
    assert_eq!(r.turn(&s, "again"), "echo: again");
    // Terminals: Claude Code logged in through fd 5, a shell, their logs read.
    let auth = r.auth_status_terminal("claude-code");
    let auth = auth["id"].as_str().unwrap();
    let sh = terminal(&r, "shell", Some("echo a-shell; env | sort"));
    r.wait_exited(&sh);
    for id in [auth, sh.as_str()] {
        assert_eq!(r.cli(&["terminal", "log", "--id", id]).status, 0);
    }
    r.cli_json(&["audit"]);

    let out = r.cli(&["audit", "scan"]);
    assert_eq!(out.status, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .contains(&format!("for the token {}: not found", fp(&token))),
        "{}",
        out.stdout
    );
    let out = r.cli(&["audit", "scan", "--json"]);
    assert_eq!(out.status, 0, "{}", out.stdout);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["findings"], json!([]), "{v}");
    // It looked at relay's files: the logs, the audit, the sessions' folders.
    assert!(v["files"].as_u64().unwrap() >= 8, "{v}");
    assert!(v["bytes"].as_u64().unwrap() > 0, "{v}");
    assert_no_token_anywhere(&r, &[&token], &path);
}

#[test]
fn audit_scan_reports_a_planted_token_by_file_and_offset_never_the_value() {
    let token = fake_token();
    let mut r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    // It plants the token on purpose.
    r.scan_on_drop = false;
    r.write_token(&token);
    let t = terminal(&r, "shell", Some("echo some output"));
    r.wait_exited(&t);
    // The token as base64 in a file of the session's temp folder, raw at the end of
    // its log, and as the name of a file.
    let dir = session_tmp(&r, &t);
    let encoded = base64(format!("{token}\n").as_bytes());
    std::fs::write(dir.join("notes.txt"), format!("hello {encoded} bye")).unwrap();
    let log = r.config.join(format!("sessions/logs/{t}.head"));
    let at = std::fs::metadata(&log).unwrap().len();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .unwrap()
        .write_all(format!("{token}\r\n").as_bytes())
        .unwrap();
    std::fs::write(dir.join(format!("{token}.txt")), "x").unwrap();

    let out = r.cli(&["audit", "scan"]);
    assert_eq!(out.status, 1, "{}{}", out.stdout, out.stderr);
    let notes = dir.join("notes.txt");
    for line in [
        format!("found  {}:6  base64\n", notes.display()),
        format!("found  {}:{at}  raw\n", log.display()),
        format!("found  {}/[token].txt (its name)  raw\n", dir.display()),
    ] {
        assert!(out.stdout.contains(&line), "{line}:\n{}", out.stdout);
    }
    assert!(out.stdout.contains("found in 3 places"), "{}", out.stdout);
    let json_out = r.cli(&["audit", "scan", "--json"]);
    assert_eq!(json_out.status, 1);
    let v: Value = serde_json::from_str(&json_out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["findings"].as_array().unwrap().len(), 3, "{v}");
    for text in [&out.stdout, &out.stderr, &json_out.stdout] {
        assert_absent(text.as_bytes(), &token, "the scan's report");
        assert_absent(
            text.as_bytes(),
            &encoded[..40],
            "the scan's report (base64)",
        );
    }

    // Purged, the session's folder and log go, and the scan finds nothing.
    r.cli_json(&["terminal", "purge", "--id", &t]);
    let out = r.cli(&["audit", "scan"]);
    assert_eq!(out.status, 0, "{}", out.stdout);
}

/// Folders the attack nests in its temp folder: far past any depth relay walks, and
/// far past what a recursion per level survives on a 2 MiB thread stack.
const NESTED: usize = 60_000;

#[test]
fn a_session_that_leaves_60000_nested_folders_fails_only_its_own_purge() {
    let token = fake_token();
    let mut r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    r.write_token(&token);
    let bystander = terminal(&r, "shell", None);
    // Inside the sandbox, one level at a time by name, so no path ever grows long.
    let nest = format!(
        "cd \"$TMPDIR\" && exec python3 -c 'import os\n\
         for _ in range({NESTED}):\n    os.mkdir(\"d\"); os.chdir(\"d\")\n\
         print(\"nested\")'"
    );
    let deep = terminal(&r, "shell", Some(&nest));
    let ev = r.wait_exited(&deep);
    assert_eq!(ev["exit_status"], 0, "{ev}");
    let dir = session_tmp(&r, &deep);
    assert!(dir.join("d/d/d").is_dir());

    // Its purge fails, and only its own: the record stays, the daemon answers, the
    // bystander runs on and a new launch works.
    let (status, v, _) = r.api("POST", &format!("/api/terminals/{deep}/purge"), None);
    assert_eq!(
        (status, v["code"].as_str()),
        (500, Some(Code::PurgeFailed.as_str())),
        "{v}\n{}",
        r.output_text()
    );
    let msg = v["error"].as_str().unwrap();
    assert!(msg.contains(&dir.display().to_string()), "{v}");
    assert!(msg.contains("levels down"), "{v}");
    assert!(!msg.contains("/d/d/"), "{v}");
    let (status, _, _) = r.api("GET", "/api/status", None);
    assert_eq!(status, 200);
    assert_eq!(listed(&r, &deep).unwrap()["state"], "exited");
    assert_eq!(listed(&r, &bystander).unwrap()["state"], "running");
    let next = terminal(&r, "shell", Some("echo still-launching"));
    assert_eq!(r.wait_exited(&next)["exit_status"], 0);

    // The scan says what it could not read, and does not call that clean.
    let out = r.cli(&["audit", "scan"]);
    assert_eq!(out.status, 1, "{}{}", out.stdout, out.stderr);
    assert!(
        !out.stdout.lines().any(|l| l.starts_with("found ")),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.lines().any(|l| l.starts_with("skipped  ")
            && l.contains(&dir.display().to_string())
            && l.ends_with("  too deep")),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("not found in what it could read"),
        "{}",
        out.stdout
    );
    let v: Value = serde_json::from_str(&r.cli(&["audit", "scan", "--json"]).stdout).unwrap();
    assert_eq!(
        (v["ok"].as_bool(), v["complete"].as_bool()),
        (Some(true), Some(false)),
        "{v}"
    );
    assert_eq!(v["findings"], json!([]), "{v}");
    assert!(
        v["skipped"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["why"] == "too deep"),
        "{v}"
    );

    // A restart past `retain_ended` tries that purge again on its first tick: it fails
    // again, and the daemon stays up with the record.
    r.stop();
    let mut settings = base_settings(Some(TOKEN_SETTING));
    settings["retain_ended"] = json!("1s");
    r.write_settings(&settings);
    let before = r.output_text().len();
    r.launch_daemon();
    // The bystander, ended by the restart, is purged by the same sweep.
    r.wait_event(|e| e["name"] == "session.purged" && e["session_id"] == bystander.as_str());
    let failed = format!("purge {deep}: ");
    assert!(
        wait::until(WAIT, || r.output_text()[before..].contains(&failed)),
        "no failed purge logged:\n{}",
        &r.output_text()[before..]
    );
    let (status, _, _) = r.api("GET", "/api/status", None);
    assert_eq!(status, 200);
    assert_eq!(listed(&r, &deep).unwrap()["state"], "exited");

    // Taken away by hand (the walk without limits), the purge goes through.
    assert!(relay::tree::remove(&dir, relay::tree::Limits::NONE).unwrap());
    let (status, v, _) = r.api("POST", &format!("/api/terminals/{deep}/purge"), None);
    assert_eq!(status, 200, "{v}");
    assert!(listed(&r, &deep).is_none());
}
