//! The token contract suite: `claude_token_file` through the real daemon, host, shim
//! and bwrap, from the CLI and the API. Each test has its own instance and its own
//! fake token; every test checks that the token's bytes appear nowhere they must not.

use relay::wire::Code;
use std::path::{Path, PathBuf};

use relay_e2e::daemon::{base_settings, Relay, RelayOptions, TOKEN_SETTING};
use relay_e2e::{assert_absent, fake_token, sha256_hex};
use serde_json::{json, Value};

const FD_VAR: &str = "CLAUDE_CODE_OAUTH_TOKEN_FILE_DESCRIPTOR";

fn start_session(r: &Relay) -> (String, Vec<u8>) {
    let (status, v, raw) = r.api("POST", "/api/sessions", Some(&json!({"project": "p1"})));
    assert_eq!(status, 201, "session start: {v}");
    (v["id"].as_str().unwrap().to_string(), raw)
}

fn with_template_env(mut s: Value, template: &str, env: Value) -> Value {
    for t in s["terminal_templates"].as_array_mut().unwrap() {
        if t["id"] == template {
            t["env"] = env.clone();
        }
    }
    s
}

fn assert_token_nowhere(r: &Relay, token: &str, token_path: &Path, extra: &[(&str, &[u8])]) {
    assert_absent(&r.output(), token, "the daemon's stdout/stderr");
    for (path, bytes) in r.all_files(&[token_path]) {
        assert_absent(&bytes, token, &path.display().to_string());
    }
    for (place, bytes) in extra {
        assert_absent(bytes, token, place);
    }
}

#[test]
fn t01_setting_empty_session_has_no_token_terminal_keeps_template_value() {
    let s = with_template_env(base_settings(None), "shell", json!({}));
    let mut s = s;
    s["terminal_templates"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "tool", "command": "claude", "env": {FD_VAR: "9"}}));
    let r = Relay::start(s);
    let (id, _) = start_session(&r);
    assert_eq!(r.turn(&id, "hi"), "echo: hi");
    let line = r.start_line(&id);
    assert!(line["env"].get(FD_VAR).is_none(), "{line}");
    assert!(line.get("token_sha256").is_none(), "{line}");
    let t = r.auth_status_terminal("tool");
    let line = r.start_line(t["id"].as_str().unwrap());
    assert_eq!(line["env"][FD_VAR], "9", "{line}");
}

#[test]
fn t02_sandboxed_session_gets_the_token_on_fd5_after_its_hello() {
    let token = fake_token();
    let r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    let path = r.write_token(&token);
    let (id, raw) = start_session(&r);
    assert_eq!(r.turn(&id, "hello"), "echo: hello");
    let line = r.start_line(&id);
    assert_eq!(line["env"][FD_VAR], "5", "{line}");
    assert_eq!(line["token_sha256"], sha256_hex(token.as_bytes()), "{line}");
    assert_eq!(line["fds"], json!([0, 1, 2, 5]), "{line}");
    // Told it is sandboxed (Claude Code takes bypassPermissions as root only so).
    let said = r.turn(&id, "!sh echo \"is_sandbox=[$IS_SANDBOX]\"");
    assert!(said.contains("is_sandbox=[1]"), "{said}");
    let list = r.cli_json(&["session", "list"]);
    assert_eq!(list["sessions"][0]["token_passed"], true);
    // The profile of the running session: 0600, in the config dir, removed at teardown.
    use std::os::unix::fs::PermissionsExt;
    let profiles: Vec<_> = std::fs::read_dir(r.config.join("profiles"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(profiles.len(), 1);
    assert_eq!(
        profiles[0].metadata().unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(r.cli(&["session", "stop", "--id", &id]).status, 0);
    r.wait_exited(&id);
    assert_eq!(
        std::fs::read_dir(r.config.join("profiles"))
            .unwrap()
            .count(),
        0,
        "profile left after teardown"
    );
    assert_token_nowhere(&r, &token, &path, &[("the 201 body", &raw)]);
}

#[test]
fn t03_claude_code_terminal_gets_the_token_on_fd5() {
    let token = fake_token();
    let r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    let path = r.write_token(&token);
    let v = r.auth_status_terminal("claude-code");
    let id = v["id"].as_str().unwrap();
    let line = r.start_line(id);
    assert_eq!(line["env"][FD_VAR], "5", "{line}");
    assert_eq!(line["token_sha256"], sha256_hex(token.as_bytes()), "{line}");
    let log = r.cli_json(&["terminal", "log", "--id", id]);
    assert!(
        log["log"].as_str().unwrap().contains("\"loggedIn\": true"),
        "{log}"
    );
    assert_token_nowhere(
        &r,
        &token,
        &path,
        &[("the log", log.to_string().as_bytes())],
    );
}

#[test]
fn t04_a_rewritten_token_file_reaches_the_next_launch_without_restart() {
    let first = fake_token();
    let second = fake_token();
    let r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    let path = r.write_token(&first);
    let (a, _) = start_session(&r);
    r.turn(&a, "one");
    r.write_token(&second);
    let (b, _) = start_session(&r);
    r.turn(&b, "two");
    assert_eq!(
        r.start_line(&a)["token_sha256"],
        sha256_hex(first.as_bytes())
    );
    assert_eq!(
        r.start_line(&b)["token_sha256"],
        sha256_hex(second.as_bytes())
    );
    // A resume reads the file again too.
    let third = fake_token();
    assert_eq!(r.cli(&["session", "stop", "--id", &a]).status, 0);
    r.write_token(&third);
    let resumed = r.cli_json(&["session", "resume", "--id", &a]);
    assert_eq!(resumed["state"], "running", "{resumed}");
    r.turn(&a, "three");
    let shas: Vec<Value> = r
        .start_lines()
        .into_iter()
        .filter(|l| l["env"]["RELAY_SESSION_ID"] == a.as_str())
        .map(|l| l["token_sha256"].clone())
        .collect();
    assert_eq!(
        shas,
        vec![
            json!(sha256_hex(first.as_bytes())),
            json!(sha256_hex(third.as_bytes()))
        ]
    );
    assert!(r
        .audit_rows()
        .iter()
        .any(|row| row["action"] == "session_resume" && row["outcome"] == "allowed"));
    for t in [&first, &second, &third] {
        assert_token_nowhere(&r, t, &path, &[]);
    }
}

#[test]
fn t05_the_token_is_in_no_answer_listing_audit_event_or_file() {
    let token = fake_token();
    let mut r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    let path = r.write_token(&token);
    let (id, session_body) = start_session(&r);
    let reply = r.turn(&id, "a turn");
    let term = r.auth_status_terminal("claude-code");
    let (_, _, sessions) = r.api("GET", "/api/sessions", None);
    let terminals = r.cli_json(&["terminal", "list"]);
    let audit = r.cli_json(&["audit"]);
    let status = r.cli_json(&["status"]);
    let (_, _, api_status) = r.api("GET", "/api/status", None);
    let events: Vec<u8> = serde_json::to_vec(&r.all_events()).unwrap();
    assert_eq!(status["paths"]["claude_token_file"], TOKEN_SETTING);
    let lines = r.start_lines();
    assert!(lines.len() >= 2);
    for l in &lines {
        assert_absent(
            l["argv"].to_string().as_bytes(),
            &token,
            "a start line's argv",
        );
        assert_absent(
            l["env"].to_string().as_bytes(),
            &token,
            "a start line's environ",
        );
    }
    let stopped = r.stop().expect("daemon ran");
    assert!(stopped.success(), "relay serve exit: {stopped:?}");
    assert_token_nowhere(
        &r,
        &token,
        &path,
        &[
            ("the session 201", &session_body),
            ("the turn", reply.as_bytes()),
            ("the terminal 201", term.to_string().as_bytes()),
            ("GET /api/sessions", &sessions),
            (
                "relay terminal list --json",
                terminals.to_string().as_bytes(),
            ),
            ("relay audit --json", audit.to_string().as_bytes()),
            ("relay status --json", status.to_string().as_bytes()),
            ("GET /api/status", &api_status),
            ("events", &events),
        ],
    );
}

#[test]
fn t06_a_session_cannot_cat_the_token_although_config_is_granted_read() {
    let token = fake_token();
    let r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    let path = r.write_token(&token);
    let (id, _) = start_session(&r);
    let reply = r.turn(&id, &format!("!sh cat {}", path.display()));
    assert!(!reply.starts_with("exit: 0"), "{reply}");
    assert_absent(reply.as_bytes(), &token, "the reply");
    // The grant works: `~/.config` is readable. Only the token's own folder is masked,
    // whole (so a token saved there later by rename stays hidden).
    let folder = path.parent().unwrap();
    let ls = r.turn(
        &id,
        &format!("!sh ls {}", folder.parent().unwrap().display()),
    );
    assert!(ls.starts_with("exit: 0") && ls.contains("acme-ltt"), "{ls}");
    let ls = r.turn(&id, &format!("!sh ls {}", folder.display()));
    assert!(!ls.starts_with("exit: 0"), "{ls}");
    assert_token_nowhere(&r, &token, &path, &[]);
}

#[test]
fn t07_another_template_with_home_read_write_cannot_read_the_token() {
    let token = fake_token();
    let mut s = base_settings(Some(TOKEN_SETTING));
    let tp = "$HOME/.config/acme-ltt/token";
    s["terminal_templates"].as_array_mut().unwrap().push(json!({
        "id": "home-rw", "command": "/bin/sh", "read_write": ["~"],
        "args": ["-c", format!("cat \"{tp}\" > \"$TMPDIR/out\"; echo $? > \"$TMPDIR/rc\"")],
    }));
    let r = Relay::start(s);
    let path = r.write_token(&token);
    let v = r.cli_json(&[
        "terminal",
        "start",
        "--project",
        "p1",
        "--template",
        "home-rw",
    ]);
    let id = v["id"].as_str().unwrap();
    r.wait_exited(id);
    let tmp = r.tmp.join(format!("relay-{id}"));
    let rc = std::fs::read_to_string(tmp.join("rc")).expect("rc written");
    assert_ne!(rc.trim(), "0", "cat of the token succeeded");
    let out = std::fs::read(tmp.join("out")).unwrap_or_default();
    assert_absent(&out, &token, "out");
    let log = r.cli(&["terminal", "log", "--id", id]);
    assert_eq!(log.status, 0);
    assert_absent(log.stdout.as_bytes(), &token, "relay terminal log");
    assert_token_nowhere(&r, &token, &path, &[]);
}

fn assert_refused_with_path(r: &Relay, status: u16, v: &Value, path: &Path) {
    assert_eq!(
        (status, v["code"].as_str()),
        (400, Some(Code::SandboxUnavailable.as_str())),
        "{v}"
    );
    let msg = v["error"].as_str().unwrap();
    assert!(
        msg.contains(&path.display().to_string()),
        "message names the path: {msg}"
    );
    let row = r
        .audit_rows()
        .into_iter()
        .rev()
        .find(|row| row["action"] == "session_launch")
        .expect("audit row");
    assert_eq!(row["outcome"], "error", "{row}");
    assert_eq!(row["code"], Code::SandboxUnavailable.as_str(), "{row}");
    assert!(
        row["error"]
            .as_str()
            .unwrap()
            .contains(&path.display().to_string()),
        "{row}"
    );
    let ev = r.wait_event(|e| e["name"] == "session.launch" && e["status"] == "error");
    assert_eq!(ev["code"], Code::SandboxUnavailable.as_str());
}

#[test]
fn t08_a_missing_token_file_refuses_the_session_naming_the_path() {
    let r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    let (status, v, _) = r.api("POST", "/api/sessions", Some(&json!({"project": "p1"})));
    assert_refused_with_path(&r, status, &v, &r.token_path());
    assert!(
        v["error"].as_str().unwrap().contains("does not exist"),
        "{v}"
    );
    assert!(r.start_lines().is_empty(), "a start line was written");
    // Nothing left behind: no profile.
    assert_eq!(
        std::fs::read_dir(r.config.join("profiles"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn t09_an_unreadable_token_file_refuses_the_terminal_naming_the_path() {
    // As root a mode-000 file is still readable, so this instance runs as `nobody`
    // and the token file belongs to root with mode 0600.
    const NOBODY: u32 = 65534;
    let token = fake_token();
    let r = Relay::start_with(RelayOptions {
        settings: base_settings(Some(TOKEN_SETTING)),
        uid: Some(NOBODY),
        config_in_home: false,
        path: None,
    });
    let path = r.write_token(&token);
    std::os::unix::fs::chown(&path, Some(0), Some(0)).unwrap();
    let probe = std::process::Command::new("python3")
        .args(["-c", &format!("import os; os.setgid({NOBODY}); os.setgroups([]); os.setuid({NOBODY}); open({:?}).read()", path.display().to_string())])
        .output()
        .unwrap();
    assert!(
        !probe.status.success(),
        "the token file is readable by the instance's user"
    );
    let (status, v, raw) = r.api(
        "POST",
        "/api/terminals",
        Some(&json!({"project": "p1", "template": "claude-code"})),
    );
    assert_eq!(
        (status, v["code"].as_str()),
        (400, Some(Code::SandboxUnavailable.as_str())),
        "{v}"
    );
    let msg = v["error"].as_str().unwrap();
    assert!(
        msg.contains(&path.display().to_string()) && msg.contains("permission denied"),
        "{msg}"
    );
    let row = r
        .audit_rows()
        .into_iter()
        .rev()
        .find(|row| row["action"] == "session_launch")
        .unwrap();
    assert_eq!(row["outcome"], "error");
    assert!(row["error"]
        .as_str()
        .unwrap()
        .contains(&path.display().to_string()));
    assert_token_nowhere(&r, &token, &path, &[("the refusal", &raw)]);
}

#[test]
fn t10_a_token_launch_overrides_the_template_value_of_the_variable() {
    let token = fake_token();
    let s = with_template_env(
        base_settings(Some(TOKEN_SETTING)),
        "claude-code",
        json!({FD_VAR: "9", "ANTHROPIC_API_KEY": "sk-template"}),
    );
    let r = Relay::start(s);
    let path = r.write_token(&token);
    let v = r.auth_status_terminal("claude-code");
    let line = r.start_line(v["id"].as_str().unwrap());
    assert_eq!(line["env"][FD_VAR], "5", "{line}");
    assert_eq!(line["token_sha256"], sha256_hex(token.as_bytes()));
    assert!(
        line["env"].get("ANTHROPIC_API_KEY").is_none(),
        "another sign-in survived: {line}"
    );
    assert_token_nowhere(&r, &token, &path, &[]);
}

#[test]
fn t11_unsandboxed_claude_code_gets_no_token() {
    let token = fake_token();
    let mut s = base_settings(Some(TOKEN_SETTING));
    s["terminal_templates"][0]["sandbox"] = json!(false);
    let r = Relay::start(s);
    let path = r.write_token(&token);
    let v = r.auth_status_terminal("claude-code");
    let line = r.start_line(v["id"].as_str().unwrap());
    assert!(line["env"].get(FD_VAR).is_none(), "{line}");
    assert!(line.get("token_sha256").is_none(), "{line}");
    assert_token_nowhere(&r, &token, &path, &[]);
}

#[test]
fn t12_bad_token_files_refuse_the_launch_and_a_fifo_never_blocks() {
    let token = fake_token();
    let r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    let path = r.token_path();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let real = r.home.join("real-token");
    type Make<'a> = Box<dyn Fn() + 'a>;
    let cases: Vec<(&str, Make)> = vec![
        ("empty", Box::new(|| std::fs::write(&path, "\n").unwrap())),
        (
            "larger than 4096",
            Box::new(|| std::fs::write(&path, "x".repeat(5000)).unwrap()),
        ),
        ("not a regular file", Box::new(|| nix_mkfifo(&path))),
        (
            "not a regular file",
            Box::new(|| std::fs::create_dir(&path).unwrap()),
        ),
        (
            "symlink",
            Box::new(|| {
                std::fs::write(&real, &token).unwrap();
                std::os::unix::fs::symlink(&real, &path).unwrap();
            }),
        ),
        (
            "hard links",
            Box::new(|| {
                std::fs::write(&path, &token).unwrap();
                std::fs::hard_link(&path, r.home.join("second-name")).unwrap();
            }),
        ),
    ];
    for (reason, make) in cases {
        clear(&path);
        let _ = std::fs::remove_file(r.home.join("second-name"));
        make();
        let (status, v, raw) = r.api("POST", "/api/sessions", Some(&json!({"project": "p1"})));
        assert_refused_with_path(&r, status, &v, &path);
        assert!(
            v["error"].as_str().unwrap().contains(reason),
            "{reason}: {v}"
        );
        assert_absent(&raw, &token, "the refusal");
    }
    assert!(r.start_lines().is_empty());
    clear(&path);
    let _ = std::fs::remove_file(&real);
    let _ = std::fs::remove_file(r.home.join("second-name"));
    assert_token_nowhere(&r, &token, &path, &[]);
}

fn clear(path: &PathBuf) {
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_dir(path);
}

fn nix_mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // Safety: mkfifo with a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

#[test]
fn t13_a_token_path_through_a_planted_folder_link_refuses_every_sandboxed_launch() {
    let token = fake_token();
    let r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    // `~/.config/acme-ltt` is a link in a folder the user (and a session) can write.
    let real = r.home.join("real-dir");
    std::fs::create_dir_all(&real).unwrap();
    std::fs::create_dir_all(r.home.join(".config")).unwrap();
    std::os::unix::fs::symlink(&real, r.home.join(".config/acme-ltt")).unwrap();
    std::fs::write(real.join("token"), &token).unwrap();
    // Not a Claude launch: the token is not read, but its deny must hold.
    let (status, v, raw) = r.api(
        "POST",
        "/api/terminals",
        Some(&json!({"project": "p1", "template": "shell"})),
    );
    assert_eq!(
        (status, v["code"].as_str()),
        (400, Some(Code::SandboxUnavailable.as_str())),
        "{v}"
    );
    assert!(
        v["error"].as_str().unwrap().contains(".config/acme-ltt"),
        "{v}"
    );
    assert_absent(&raw, &token, "the refusal");
    assert_eq!(
        std::fs::read_dir(r.config.join("profiles"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn t14_a_session_cannot_rename_the_folders_above_the_config_dir_or_the_token() {
    let token = fake_token();
    let mut s = base_settings(Some(TOKEN_SETTING));
    // The claude-code template grants all of home read-write, and relay's config dir is
    // the default `~/.config/relay`: every folder above it and above the token is
    // writable by path, so only the pins keep them in place. Renaming `~/.config` away
    // would let the session plant its own settings.json for the next launch.
    s["terminal_templates"][0]["read_write"] = json!(["~"]);
    s["terminal_templates"][0]["read"] = json!([]);
    let r = Relay::start_with(RelayOptions {
        settings: s,
        uid: None,
        config_in_home: true,
        path: None,
    });
    let path = r.write_token(&token);
    let (id, _) = start_session(&r);
    for mv in [
        "mv \"$HOME/.config\" \"$HOME/moved-config\"",
        "mv \"$HOME/.config/acme-ltt\" \"$HOME/moved-ltt\"",
        "mv \"$HOME/.config/relay\" \"$HOME/moved-relay\"",
    ] {
        let reply = r.turn(&id, &format!("!sh {mv}"));
        assert!(!reply.starts_with("exit: 0"), "{mv} worked: {reply}");
    }
    assert!(r.config.join("settings.json").exists());
    assert_eq!(std::fs::read_to_string(&path).unwrap().trim(), token);
    let (next, _) = start_session(&r);
    r.turn(&next, "hi");
    assert_eq!(
        r.start_line(&next)["token_sha256"],
        sha256_hex(token.as_bytes())
    );
    assert_token_nowhere(&r, &token, &path, &[]);
}

/// This machine's address on the way out (the source of a route to a documentation
/// address; no packet is sent), when it has one that is not loopback: a listener there
/// stands in for a remote host the bearer must never reach in cleartext.
fn outward_address() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("203.0.113.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

/// The attack (issue 35 item 3): a template routes Claude Code to plain `http://` on
/// another host, so the bearer of every turn crosses the network readable by every hop.
/// The launch is refused before anything starts, naming the setting (never the value),
/// `relay sandbox explain` says so first, and the stand-in for that host (a listener on
/// this machine's own outward address, which the routing URL adds to the egress list)
/// gets nothing: no session, no turn, no bearer. Without the refusal the real Claude
/// Code takes a turn there, and the listener records the bearer.
#[test]
fn a_token_launch_routed_over_cleartext_http_to_a_remote_host_is_refused() {
    use crate::clients::real_claude::claude_code;
    use crate::clients::real_turns::{fake_oauth_token, message, settings};
    use relay_e2e::fakeapi::FakeApi;
    use std::io::Read;
    use std::sync::{Arc, Mutex};

    let Some(claude) = claude_code() else { return };
    let ip = outward_address();
    // Everything the remote host receives, each connection read to its end.
    let got = Arc::new(Mutex::new(Vec::<u8>::new()));
    let remote = ip.map(|ip| std::net::TcpListener::bind((ip, 0)).unwrap());
    let url = match &remote {
        Some(l) => format!("http://user:pw@{}", l.local_addr().unwrap()),
        None => {
            eprintln!("no outward address: the refusal alone is checked");
            "http://user:pw@203.0.113.1:4000".to_string()
        }
    };
    if let Some(l) = remote {
        let got = got.clone();
        std::thread::spawn(move || {
            for mut c in l.incoming().flatten() {
                let mut buf = [0u8; 65536];
                let n = c.read(&mut buf).unwrap_or(0);
                got.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
    }
    let mut r = Relay::prepare(None, false);
    let api = FakeApi::start(&r.root, &json!([{"text": "unused"}]));
    let token = fake_oauth_token();
    let path = r.write_token(&token);
    let mut s = settings(&claude, &api, Some(TOKEN_SETTING));
    s["terminal_templates"][0]["env"]["ANTHROPIC_BASE_URL"] = json!(url);
    r.write_settings(&s);
    r.launch_daemon();
    let key = "terminal_templates[0].env.ANTHROPIC_BASE_URL in settings.json is plain http://";

    // Said before any launch: explain is the launch's own plan, refused for the same
    // reason.
    let dir = r.project.display().to_string();
    let x = r.cli(&["sandbox", "explain", "claude-code", "--directory", &dir]);
    assert_eq!(x.status, 1, "{}", x.stdout);
    assert!(
        x.stderr.contains(key) && x.stderr.contains(Code::SandboxUnavailable.as_str()),
        "explain does not say it: {}",
        x.stderr
    );
    // And doctor's plan of the template, the same call, says the same words.
    let (st, page, _) = r.api("GET", "/api/doctor", None);
    assert_eq!(st, 200, "{page}");
    let templates = page["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "templates")
        .cloned()
        .unwrap_or_default();
    let said = templates["detail"].as_str().unwrap_or_default();
    assert!(
        templates["status"] == "warn"
            && said.contains("claude-code in p1: ")
            && said.contains(key)
            && x.stderr
                .contains(said.split("claude-code in p1: ").nth(1).unwrap_or("?")),
        "doctor's plan does not say what explain says: {templates} / {}",
        x.stderr
    );

    let session = r.cli(&["session", "start", "--project", "p1", "--json"]);
    if session.status == 0 {
        // The attack, had the launch started: a turn, its bearer sent to the remote host.
        let v: Value = serde_json::from_str(session.stdout.trim()).unwrap();
        message(&r, v["id"].as_str().unwrap(), "hello", &[]);
    }
    let terminal = r.cli(&[
        "terminal",
        "start",
        "--project",
        "p1",
        "--template",
        "claude-code",
        "--json",
    ]);
    let got = got.lock().unwrap().clone();
    let text = String::from_utf8_lossy(&got);
    assert!(
        got.is_empty(),
        "the remote host got {} bytes ({:?}), the bearer among them: {}",
        got.len(),
        text.lines().next().unwrap_or_default(),
        text.contains(&format!("Bearer {token}"))
    );
    for (what, out) in [("session", &session), ("terminal", &terminal)] {
        assert_ne!(out.status, 0, "the {what} started: {}", out.stdout);
        let said = format!("{}{}", out.stdout, out.stderr);
        assert!(
            said.contains(key)
                && said.contains("cleartext")
                && said.contains(Code::SandboxUnavailable.as_str()),
            "the {what}'s refusal: {said}"
        );
        assert!(!said.contains("user:pw"), "the value was shown: {said}");
    }
    let rows: Vec<Value> = r
        .audit_rows()
        .into_iter()
        .filter(|row| row["action"] == "session_launch")
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in &rows {
        assert_eq!(
            (row["outcome"].as_str(), row["code"].as_str()),
            (Some("error"), Some(Code::SandboxUnavailable.as_str())),
            "{row}"
        );
        assert!(row["error"].as_str().unwrap().contains(key), "{row}");
    }
    // Nothing started, nothing was sent.
    assert_eq!(r.cli_json(&["session", "list"])["sessions"], json!([]));
    assert_eq!(r.cli_json(&["terminal", "list"])["terminals"], json!([]));
    assert!(api.records().is_empty(), "the stand-in got a request");
    assert_token_nowhere(&r, &token, &path, &[]);
}
