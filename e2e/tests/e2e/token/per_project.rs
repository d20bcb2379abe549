//! An account per project (docs/settings.md#claude_token_file): `projects[].claude_token_file`
//! over the top-level one, each launch handed its own project's token on fd 5, every
//! configured file denied to every sandbox, rotation of one file stopping only the
//! sessions on it, `""` meaning no token, the `account` label in every list, and the
//! token's secret part masked when printed without its public prefix.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use relay_e2e::daemon::{base_settings, Relay, TOKEN_SETTING};
use relay_e2e::{assert_absent, fake_token, random_hex, sha256_hex};
use serde_json::{json, Value};

const MARKER: &str = "[redacted:claude-token]";
const WORK_SETTING: &str = "~/.config/acme-work/token";

fn fp(token: &str) -> String {
    sha256_hex(token.as_bytes())[..12].to_string()
}

/// p1 (account "personal") on the top-level file, p2 (account "work") on its own, and a
/// template that reads `~/.config`, where both token folders are.
fn two_accounts() -> Value {
    let mut s = base_settings(Some(TOKEN_SETTING));
    s["projects"][0]["account"] = json!("personal");
    s["projects"].as_array_mut().unwrap().push(json!({
        "id": "p2", "path": "~/project2", "allowed_templates": ["*"],
        "claude_token_file": WORK_SETTING, "account": "work",
    }));
    s["terminal_templates"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "cfg", "command": "/bin/sh", "read": ["~/.config"]}));
    s
}

/// Writes `token` to `~/.config/acme-work/token` (0600, its folder 0700), by rename.
fn write_work_token(r: &Relay, token: &str) -> PathBuf {
    let dir = r.home.join(".config/acme-work");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let tmp = dir.join(".token.new");
    std::fs::write(&tmp, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
    let path = dir.join("token");
    std::fs::rename(&tmp, &path).unwrap();
    path
}

/// p2's folder, which the instance does not make.
fn start(r: &Relay) {
    std::fs::create_dir_all(r.home.join("project2")).unwrap();
}

/// An instance of [`two_accounts`] with both token files written: the relay, the two
/// tokens and their paths (personal first).
fn with_both_tokens() -> (Relay, [String; 2], [PathBuf; 2]) {
    let (personal, work) = (fake_token(), fake_token());
    let r = Relay::start(two_accounts());
    start(&r);
    let p_path = r.write_token(&personal);
    let w_path = write_work_token(&r, &work);
    (r, [personal, work], [p_path, w_path])
}

fn session(r: &Relay, project: &str) -> String {
    let (status, v, _) = r.api(
        "POST",
        "/api/sessions",
        Some(&json!({ "project": project })),
    );
    assert_eq!(status, 201, "{v}");
    v["id"].as_str().unwrap().to_string()
}

fn terminal(r: &Relay, project: &str, template: &str, script: &str) -> String {
    let body = json!({"project": project, "template": template, "extra_args": ["-c", script]});
    let (status, v, _) = r.api("POST", "/api/terminals", Some(&body));
    assert_eq!(status, 201, "{v}");
    v["id"].as_str().unwrap().to_string()
}

fn entry(list: &Value, key: &str, id: &str) -> Value {
    list[key]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("{id} not in {list}"))
}

/// No token in the daemon's output or any file of the instance but the token files.
fn assert_nowhere(r: &Relay, tokens: &[&str], files: &[&Path]) {
    for t in tokens {
        assert_absent(&r.output(), t, "the daemon's output");
        for (p, bytes) in r.all_files(files) {
            assert_absent(&bytes, t, &p.display().to_string());
        }
    }
}

#[test]
fn two_projects_each_launch_gets_its_own_projects_token_and_every_list_names_the_account() {
    let (r, [personal, work], [p_path, w_path]) = with_both_tokens();
    let s1 = session(&r, "p1");
    let s2 = session(&r, "p2");
    assert_eq!(r.turn(&s1, "hi"), "echo: hi");
    assert_eq!(r.turn(&s2, "hi"), "echo: hi");
    assert_eq!(
        r.start_line(&s1)["token_sha256"],
        sha256_hex(personal.as_bytes())
    );
    assert_eq!(
        r.start_line(&s2)["token_sha256"],
        sha256_hex(work.as_bytes())
    );
    let list = r.cli_json(&["session", "list"]);
    for (id, token, account) in [(&s1, &personal, "personal"), (&s2, &work, "work")] {
        let e = entry(&list, "sessions", id);
        assert_eq!(e["token_fingerprint"], fp(token), "{e}");
        assert_eq!(e["account"], account, "{e}");
    }
    let text = r.cli(&["session", "list"]).stdout;
    assert!(
        text.contains(&format!("token={}  account=work", fp(&work))),
        "{text}"
    );
    // The launch rows name the account too.
    let rows = r.audit_rows();
    let launch = rows
        .iter()
        .find(|row| row["action"] == "session_launch" && row["session_id"] == s2.as_str())
        .expect("p2's launch row");
    assert_eq!(launch["account"], "work", "{launch}");

    // `relay token list`: both files, their projects and labels, who runs on each.
    let tokens = r.cli_json(&["token", "list"]);
    let files = tokens["tokens"].as_array().unwrap();
    assert_eq!(files.len(), 2, "{tokens}");
    let of = |path: &Path| {
        files
            .iter()
            .find(|f| f["path"] == path.to_str().unwrap())
            .unwrap_or_else(|| panic!("{} not listed: {tokens}", path.display()))
            .clone()
    };
    let p = of(&p_path);
    assert_eq!(p["fingerprint"], fp(&personal), "{p}");
    assert_eq!(p["projects"], json!([{"id": "p1", "account": "personal"}]));
    assert_eq!(p["keys"], json!(["claude_token_file"]));
    assert_eq!(p["mode"], "0600");
    assert_eq!(p["sessions"], json!([s1]));
    let w = of(&w_path);
    assert_eq!(w["fingerprint"], fp(&work), "{w}");
    assert_eq!(w["projects"], json!([{"id": "p2", "account": "work"}]));
    assert_eq!(w["keys"], json!(["projects[1].claude_token_file"]));
    assert_eq!(w["size"], work.len() + 1);
    assert_eq!(w["sessions"], json!([s2]));
    let text = r.cli(&["token", "list"]).stdout;
    assert!(text.contains("p2 (account work)"), "{text}");
    assert!(text.contains(&format!("running on it: {s2}")), "{text}");
    for t in [&personal, &work] {
        assert_absent(text.as_bytes(), t, "relay token list");
        assert_absent(tokens.to_string().as_bytes(), t, "relay token list --json");
    }
    // Doctor checks the project's own file too.
    let doctor = r.cli_json(&["doctor"]);
    let own = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "project_token_file")
        .cloned()
        .unwrap_or_else(|| panic!("no project_token_file check: {doctor}"));
    // (`warn`: the suite's fake tokens do not look like setup tokens.)
    assert!(own["status"] == "ok" || own["status"] == "warn", "{own}");
    assert!(
        own["detail"]
            .as_str()
            .unwrap()
            .starts_with("projects[1].claude_token_file: "),
        "{own}"
    );
    let canary = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "canary")
        .cloned()
        .unwrap();
    assert_eq!(canary["status"], "ok", "{canary}");
    assert!(
        canary["detail"]
            .as_str()
            .unwrap()
            .contains(w_path.to_str().unwrap()),
        "{canary}"
    );
    assert_nowhere(&r, &[&personal, &work], &[&p_path, &w_path]);
}

#[test]
fn a_token_less_shell_of_either_project_reads_neither_token_file() {
    let (r, [personal, work], [p_path, w_path]) = with_both_tokens();
    let config = r.home.join(".config");
    // Through the granted parent folder, by path, and by listing the folders.
    let script = format!(
        "for f in '{p}' '{w}'; do cat \"$f\" && echo READ; done; ls '{c}'; \
         ls '{c}/acme-ltt' '{c}/acme-work' && echo LISTED; echo done",
        p = p_path.display(),
        w = w_path.display(),
        c = config.display()
    );
    for project in ["p1", "p2"] {
        let id = terminal(&r, project, "cfg", &script);
        r.wait_exited(&id);
        let log = r.cli_json(&["terminal", "log", "--id", &id]);
        let text = log["log"].as_str().unwrap();
        assert!(text.contains("done"), "{project}: {text}");
        // The grant works: both folders are seen in ~/.config, neither can be opened.
        assert!(
            text.contains("acme-ltt") && text.contains("acme-work"),
            "{project}: {text}"
        );
        assert!(
            !text.contains("READ") && !text.contains("LISTED"),
            "{project}: {text}"
        );
    }
    // A token launch of p1 cannot read p2's file either (nor its own).
    let s1 = session(&r, "p1");
    for path in [&w_path, &p_path] {
        let reply = r.turn(&s1, &format!("!sh cat {}", path.display()));
        assert!(!reply.starts_with("exit: 0"), "{reply}");
    }
    assert_nowhere(&r, &[&personal, &work], &[&p_path, &w_path]);
}

#[test]
fn rotating_one_projects_token_stops_only_the_sessions_on_it() {
    let (r, [personal, work], [p_path, w_path]) = with_both_tokens();
    let next = fake_token();
    let s1 = session(&r, "p1");
    let s2 = session(&r, "p2");
    let shell = terminal(&r, "p2", "shell", "exec sleep 600");
    assert_eq!(r.turn(&s2, "hi"), "echo: hi");
    write_work_token(&r, &next);
    let ev = r.wait_exited(&s2);
    assert_eq!(ev["reason"], "claude_token_replaced", "{ev}");
    assert_eq!(ev["token_projects"], json!(["p2"]), "{ev}");
    let row = r
        .audit_rows()
        .into_iter()
        .find(|row| row["action"] == "session_end" && row["session_id"] == s2.as_str())
        .expect("s2's session_end row");
    assert_eq!(row["token_projects"], json!(["p2"]), "{row}");
    assert_eq!(row["token_fingerprint"], fp(&work), "{row}");
    assert_eq!(row["account"], "work", "{row}");
    // The same look left p1's session and p2's token-less shell running.
    assert_eq!(r.turn(&s1, "still"), "echo: still");
    let terms = r.cli_json(&["terminal", "list"]);
    assert_eq!(entry(&terms, "terminals", &shell)["state"], "running");
    let sessions = r.cli_json(&["session", "list"]);
    assert_eq!(entry(&sessions, "sessions", &s1)["state"], "running");
    // A resume runs on the new token.
    let (status, v, _) = r.api("POST", &format!("/api/sessions/{s2}/resume"), None);
    assert_eq!(status, 201, "{v}");
    assert_eq!(r.turn(&s2, "again"), "echo: again");
    let shas: Vec<Value> = r
        .start_lines()
        .iter()
        .filter(|l| l["env"]["RELAY_SESSION_ID"] == s2.as_str())
        .map(|l| l["token_sha256"].clone())
        .collect();
    assert_eq!(shas.last(), Some(&json!(sha256_hex(next.as_bytes()))));
    assert_nowhere(&r, &[&personal, &work, &next], &[&p_path, &w_path]);
}

#[test]
fn a_project_with_an_empty_token_file_setting_launches_without_a_token() {
    let personal = fake_token();
    let mut s = two_accounts();
    s["projects"][1]["claude_token_file"] = json!("");
    let r = Relay::start(s);
    start(&r);
    let p_path = r.write_token(&personal);
    let s2 = session(&r, "p2");
    assert_eq!(r.turn(&s2, "hi"), "echo: hi");
    let line = r.start_line(&s2);
    assert!(line.get("token_sha256").is_none(), "{line}");
    assert!(line["env"]
        .get("CLAUDE_CODE_OAUTH_TOKEN_FILE_DESCRIPTOR")
        .is_none());
    let e = entry(&r.cli_json(&["session", "list"]), "sessions", &s2);
    assert_eq!(e["token_passed"], false, "{e}");
    assert!(e.get("token_fingerprint").is_none(), "{e}");
    // Its Claude is not logged in.
    let v = r.cli_json(&[
        "terminal",
        "start",
        "--project",
        "p2",
        "--template",
        "claude-code",
        "--extra-arg",
        "auth",
        "--extra-arg",
        "status",
    ]);
    let id = v["id"].as_str().unwrap();
    r.wait_exited(id);
    let log = r.cli_json(&["terminal", "log", "--id", id]);
    assert!(
        log["log"].as_str().unwrap().contains("\"loggedIn\": false"),
        "{log}"
    );
    // p1 still runs on the top-level token, and p2's shells are still denied it.
    let s1 = session(&r, "p1");
    assert_eq!(r.turn(&s1, "hi"), "echo: hi");
    assert_eq!(
        r.start_line(&s1)["token_sha256"],
        sha256_hex(personal.as_bytes())
    );
    let reply = r.turn(&s2, &format!("!sh cat {}", p_path.display()));
    assert!(!reply.starts_with("exit: 0"), "{reply}");
    assert_nowhere(&r, &[&personal], &[&p_path]);
}

/// Shell that prints the token's secret part alone, split across two writes, between
/// `body:` and `:`. Built from its ROT13, so the test never sends the bytes.
fn print_body(body: &str) -> String {
    format!(
        r#"B=$(printf %s '{rot}' | tr 'A-Za-z' 'N-ZA-Mn-za-m'); printf 'body:%s' "$(printf %s "$B" | cut -c1-12)"; sleep 0.3; printf '%s:\n' "$(printf %s "$B" | cut -c13-)""#,
        rot = relay_e2e::rot13(body)
    )
}

#[test]
fn the_secret_part_printed_alone_is_masked_in_the_log_the_disk_logs_and_a_reply() {
    let body = format!("{}-{}", random_hex(20), random_hex(20));
    let token = format!("sk-ant-oat01-{body}");
    let r = Relay::start(two_accounts());
    start(&r);
    let p_path = r.write_token(&token);
    let w_path = write_work_token(&r, &fake_token());
    let want = format!("body:{MARKER}:");
    // A token-less shell of the project: the host masks its project's token.
    let id = r.shell_terminal(&format!("{}; echo done", print_body(&body)))["id"]
        .as_str()
        .unwrap()
        .to_string();
    r.wait_exited(&id);
    let raw = r.cli(&["terminal", "log", "--id", &id, "--raw"]);
    assert_eq!(raw.status, 0, "{}", raw.stderr);
    assert!(raw.stdout.contains(&want), "{}", raw.stdout);
    assert_absent(raw.stdout.as_bytes(), &body, "relay terminal log --raw");
    // A headless session's reply.
    let s1 = session(&r, "p1");
    let reply = r.turn(&s1, &format!("!sh {}", print_body(&body)));
    assert!(reply.contains(&want), "{reply}");
    assert_absent(reply.as_bytes(), &body, "the reply");
    assert_eq!(r.cli(&["session", "stop", "--id", &s1]).status, 0);
    r.wait_exited(&s1);
    // The disk logs, and every other file of the instance.
    let logs: Vec<PathBuf> = std::fs::read_dir(r.config.join("sessions/logs"))
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(!logs.is_empty(), "no disk logs");
    for p in &logs {
        assert_absent(&std::fs::read(p).unwrap(), &body, &p.display().to_string());
    }
    assert_nowhere(&r, &[&body], &[&p_path, &w_path]);
}

#[test]
fn a_malformed_project_value_keeps_the_watcher_on_every_other_file() {
    let (r, [personal, work], [p_path, w_path]) = with_both_tokens();
    let next = fake_token();
    let s2 = session(&r, "p2");
    assert_eq!(r.turn(&s2, "hi"), "echo: hi");
    // A third project with a value that is no path: launches are refused...
    let mut s = two_accounts();
    s["projects"].as_array_mut().unwrap().push(json!({
        "id": "p3", "path": "~/project2", "allowed_templates": ["*"],
        "claude_token_file": "relative/token",
    }));
    r.write_settings(&s);
    let (status, v, _) = r.api("POST", "/api/sessions", Some(&json!({"project": "p1"})));
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("projects[2].claude_token_file"),
        "{v}"
    );
    // ...and the watcher still watches p2's file: its rotation stops p2's session.
    write_work_token(&r, &next);
    let ev = r.wait_exited(&s2);
    assert_eq!(ev["reason"], "claude_token_replaced", "{ev}");
    assert_eq!(ev["token_projects"], json!(["p2"]), "{ev}");
    assert_nowhere(&r, &[&personal, &work, &next], &[&p_path, &w_path]);
}

#[test]
fn a_null_or_misspelt_project_token_setting_never_falls_back_to_another_account() {
    let (r, [personal, work], [p_path, w_path]) = with_both_tokens();
    // `null`: the file is invalid, every launch refused, naming the key.
    let mut s = two_accounts();
    s["projects"][1]["claude_token_file"] = Value::Null;
    r.write_settings(&s);
    let (status, v, _) = r.api("POST", "/api/sessions", Some(&json!({"project": "p2"})));
    assert_eq!(status, 500, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("claude_token_file"),
        "{v}"
    );
    // A misspelt key meant as "no token" refuses sandboxed launches, naming it.
    let mut s = two_accounts();
    let p2 = s["projects"][1].as_object_mut().unwrap();
    p2.remove("claude_token_file");
    p2.insert("claude_token_fle".into(), json!(""));
    r.write_settings(&s);
    let (status, v, _) = r.api("POST", "/api/sessions", Some(&json!({"project": "p2"})));
    assert_eq!(status, 400, "{v}");
    let msg = v["error"].as_str().unwrap();
    assert!(msg.contains("claude_token_fle"), "{msg}");
    assert!(!r
        .start_lines()
        .iter()
        .any(|l| l.get("token_sha256").is_some()));
    assert_nowhere(&r, &[&personal, &work], &[&p_path, &w_path]);
}

#[test]
fn audit_scan_looks_for_every_projects_token_and_its_secret_part() {
    let (mut r, [personal, _], _) = with_both_tokens();
    // It plants p2's token on purpose: its secret part alone, in relay's log folder.
    r.scan_on_drop = false;
    let body = random_hex(24);
    let work = format!("sk-ant-oat01-{body}");
    write_work_token(&r, &work);
    let planted = r.config.join("sessions/logs/planted.txt");
    std::fs::create_dir_all(planted.parent().unwrap()).unwrap();
    std::fs::write(&planted, format!("before {body} after")).unwrap();
    let out = r.cli(&["audit", "scan", "--json"]);
    assert_eq!(out.status, 1, "{}{}", out.stdout, out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(
        v["token_fingerprint"],
        format!("{}, {}", fp(&personal), fp(&work)),
        "{v}"
    );
    let findings = v["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{v}");
    assert_eq!(findings[0]["file"], planted.to_str().unwrap(), "{v}");
    assert_eq!(findings[0]["offset"], 7, "{v}");
    assert_absent(out.stdout.as_bytes(), &body, "the scan's report");
    std::fs::remove_file(&planted).unwrap();
    assert_eq!(r.cli(&["audit", "scan"]).status, 0);
}
