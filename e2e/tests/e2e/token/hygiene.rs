//! Token hygiene beyond the contract, through the real daemon, host, shim and bwrap:
//! Claude settings that would sign Claude Code in another way refuse the token launch
//! (naming the file and the key, never a value), a token file holding an API key is
//! refused, `relay doctor` warns on a token not shaped like a setup token, the daemon
//! and the host keep same-uid readers out of their memory, and what the shell that
//! started relay exported reaches a sandbox only as far as `env_passthrough` says. The
//! guards are in `docs/THREAT-MODEL.md` ("Other sign-ins", "Hardened processes",
//! "Guards and where they are enforced"); `docs/testing.md` says which guard was
//! removed to see each test fail.

use relay::wire::Code;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use relay_e2e::daemon::{base_settings, Relay, RelayOptions, TOKEN_SETTING};
use relay_e2e::{assert_absent, fake_token};
use serde_json::{json, Value};

const REFUSED: &str = Code::SandboxUnavailable.as_str();

/// A value a hostile file would carry: 16 random bytes in hex, made inside the
/// session's shell so the command line that planted it never holds it.
const RANDOM_VALUE: &str = "sk-ant-api03-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')";

/// Settings whose `shell` template may write a project's `.claude/`: every sandbox keeps
/// it read-only otherwise (attacks/planted_for_later.rs), and what these tests show is
/// that a token launch refuses what a session could have written there.
fn claude_folder_writable() -> Value {
    let mut s = base_settings(Some(TOKEN_SETTING));
    for t in s["terminal_templates"].as_array_mut().unwrap() {
        if t["id"] == "shell" {
            t["writable_exceptions"] = json!([".claude"]);
        }
    }
    s
}

fn start_session(r: &Relay) -> (u16, Value, Vec<u8>) {
    r.api("POST", "/api/sessions", Some(&json!({"project": "p1"})))
}

/// Runs `script` in a token-less sandboxed shell terminal in the project, to its end.
fn in_a_shell(r: &Relay, script: &str) {
    let v = r.shell_terminal(script);
    let ev = r.wait_exited(v["id"].as_str().unwrap());
    assert_eq!(ev["exit_status"], 0, "{script}: {ev}");
}

/// The value a planted settings file holds under `key` (`env.NAME` or a top-level key).
fn planted_value(file: &Path, key: &str) -> String {
    let v: Value = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
    let value = match key.strip_prefix("env.") {
        Some(name) => &v["env"][name],
        None => &v[key],
    };
    let value = value.as_str().unwrap().to_string();
    assert!(value.len() > 20, "{file:?}: {value}");
    value
}

/// Asserts the launch was refused `400 sandbox_unavailable` naming `file` and `key`,
/// and that the refusal is in the audit row and the event too.
fn assert_refused_naming(r: &Relay, status: u16, v: &Value, action: &str, file: &Path, key: &str) {
    assert_eq!((status, v["code"].as_str()), (400, Some(REFUSED)), "{v}");
    let named = format!("the Claude settings file {} sets {key} ", file.display());
    let msg = v["error"].as_str().unwrap();
    assert!(msg.contains(&named), "{msg}");
    let row = r
        .audit_rows()
        .into_iter()
        .rev()
        .find(|row| row["action"] == action)
        .unwrap();
    assert_eq!(
        (row["outcome"].as_str(), row["code"].as_str()),
        (Some("error"), Some(REFUSED)),
        "{row}"
    );
    assert!(row["error"].as_str().unwrap().contains(&named), "{row}");
    let ev = r.wait_event(|e| e["name"] == "session.launch" && e["status"] == "error");
    assert!(ev["reason"].as_str().unwrap().contains(&named), "{ev}");
}

/// The value appears in no answer, log, audit row, event or file relay keeps (the file
/// that holds it aside).
fn assert_value_nowhere(r: &Relay, value: &str, holders: &[&Path], answers: &[&[u8]]) {
    assert_absent(&r.output(), value, "the daemon's stdout/stderr");
    for (path, bytes) in r.all_files(holders) {
        assert_absent(&bytes, value, &path.display().to_string());
    }
    for (i, a) in answers.iter().enumerate() {
        assert_absent(a, value, &format!("answer {i}"));
    }
}

#[test]
fn an_api_key_helper_planted_in_the_projects_settings_refuses_the_token_launch() {
    let r = Relay::start(claude_folder_writable());
    let token_path = r.write_token(&fake_token());
    // A token-less session plants a helper that would sign the next Claude in, as
    // whatever its program prints.
    in_a_shell(
        &r,
        &format!(
            "mkdir -p .claude && printf '{{\"apiKeyHelper\": \"echo %s\"}}' \"{RANDOM_VALUE}\" > .claude/settings.json"
        ),
    );
    let file = std::fs::canonicalize(&r.project)
        .unwrap()
        .join(".claude/settings.json");
    let value = planted_value(&file, "apiKeyHelper");

    let (status, v, raw) = start_session(&r);
    assert_refused_naming(&r, status, &v, "session_launch", &file, "apiKeyHelper");
    // Nothing ran: no Claude stand-in was started.
    assert!(r.start_lines().is_empty(), "{:?}", r.start_lines());
    assert_value_nowhere(&r, &value, &[&file, &token_path], &[&raw]);

    // The file gone, token launches go on.
    std::fs::remove_file(&file).unwrap();
    let (status, v, _) = start_session(&r);
    assert_eq!(status, 201, "{v}");
}

#[test]
fn an_api_key_in_the_projects_local_settings_env_refuses_the_token_launch() {
    let r = Relay::start(claude_folder_writable());
    let token_path = r.write_token(&fake_token());
    in_a_shell(
        &r,
        &format!(
            "mkdir -p .claude && printf '{{\"env\": {{\"DEBUG\": \"1\", \"ANTHROPIC_API_KEY\": \"%s\"}}}}' \"{RANDOM_VALUE}\" > .claude/settings.local.json"
        ),
    );
    let file = std::fs::canonicalize(&r.project)
        .unwrap()
        .join(".claude/settings.local.json");
    let value = planted_value(&file, "env.ANTHROPIC_API_KEY");

    // A Claude Code terminal is a token launch too.
    let (status, v, raw) = r.api(
        "POST",
        "/api/terminals",
        Some(&json!({"project": "p1", "template": "claude-code"})),
    );
    assert_refused_naming(
        &r,
        status,
        &v,
        "session_launch",
        &file,
        "env.ANTHROPIC_API_KEY",
    );
    assert!(r.start_lines().is_empty(), "{:?}", r.start_lines());
    // A token-less launch is not a Claude sign-in: the shell still starts.
    in_a_shell(&r, "true");
    assert_value_nowhere(&r, &value, &[&file, &token_path], &[&raw]);
}

#[test]
fn a_sign_in_a_session_wrote_into_its_own_claude_config_refuses_its_resume() {
    let r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    let token_path = r.write_token(&fake_token());
    let (status, v, _) = start_session(&r);
    assert_eq!(status, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    // The session cannot write the user settings of its own next launch (they are
    // read-only inside); another one granted relay's TMPDIR could, while it is stopped.
    let out = r.turn(&id, "!sh echo '{}' > \"$CLAUDE_CONFIG_DIR/settings.json\"");
    assert!(!out.starts_with("exit: 0"), "{out}");
    assert_eq!(r.cli(&["session", "stop", "--id", &id]).status, 0);
    r.wait_exited(&id);
    let file: PathBuf = r
        .tmp
        .join(format!("relay-{id}/claude-config/settings.json"));
    std::fs::write(
        &file,
        format!(
            "{{\"env\": {{\"ANTHROPIC_AUTH_TOKEN\": \"sk-ant-api03-{}\"}}}}",
            relay_e2e::random_hex(16)
        ),
    )
    .unwrap();
    let value = planted_value(&file, "env.ANTHROPIC_AUTH_TOKEN");

    let (status, v, raw) = r.api("POST", &format!("/api/sessions/{id}/resume"), None);
    assert_refused_naming(
        &r,
        status,
        &v,
        "session_resume",
        &file,
        "env.ANTHROPIC_AUTH_TOKEN",
    );
    assert_eq!(
        r.start_lines()
            .iter()
            .filter(|l| l["env"]["RELAY_SESSION_ID"] == id.as_str())
            .count(),
        1,
        "the resume started the Claude stand-in"
    );
    assert_value_nowhere(&r, &value, &[&file, &token_path], &[&raw]);

    // The key gone, the session resumes.
    std::fs::write(&file, "{}").unwrap();
    let resumed = r.cli_json(&["session", "resume", "--id", &id]);
    assert_eq!(resumed["state"], "running", "{resumed}");
}

#[test]
fn a_token_file_holding_an_api_key_refuses_the_launch_and_names_no_key() {
    let r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    let key = format!("sk-ant-api03-{}", relay_e2e::random_hex(32));
    let path = r.write_token(&key);
    let (status, v, raw) = start_session(&r);
    assert_eq!((status, v["code"].as_str()), (400, Some(REFUSED)), "{v}");
    assert_eq!(
        v["error"],
        format!(
            "claude_token_file {}: holds an API key; relay takes a token from claude setup-token",
            path.display()
        ),
        "{v}"
    );
    assert!(r.start_lines().is_empty(), "{:?}", r.start_lines());
    let row = r.audit_rows().into_iter().next_back().unwrap();
    assert_eq!(row["code"], REFUSED, "{row}");
    assert!(row["error"].as_str().unwrap().contains("holds an API key"));
    // `relay doctor` says the same, and fails.
    let out = r.cli(&["doctor", "--json"]);
    let doctor: Value = serde_json::from_str(&out.stdout).unwrap();
    let check = token_check(&doctor);
    assert_eq!(check["status"], "fail", "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("holds an API key"),
        "{check}"
    );
    assert_value_nowhere(&r, &key, &[&path], &[&raw, out.stdout.as_bytes()]);
}

fn token_check(doctor: &Value) -> Value {
    relay_e2e::daemon::doctor_check(doctor, "token_file")
}

#[test]
fn relay_doctor_warns_on_a_token_not_shaped_like_a_setup_token_and_launches_go_on() {
    let r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    let odd = fake_token();
    let path = r.write_token(&odd);
    let doctor = || {
        let out = r.cli(&["doctor", "--json"]);
        let v: Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {} {}", out.stdout, out.stderr));
        (v, out.stdout)
    };
    let (v, first) = doctor();
    let check = token_check(&v);
    assert_eq!(check["status"], "warn", "{check}");
    assert!(
        check["detail"]
            .as_str()
            .unwrap()
            .contains("does not look like a token from `claude setup-token` (sk-ant-oat01-…)"),
        "{check}"
    );
    assert!(
        check["fix"]
            .as_str()
            .unwrap()
            .contains("claude setup-token"),
        "{check}"
    );
    // A warning: the launch goes on, with the token handed over as it is.
    let (status, v2, raw) = start_session(&r);
    assert_eq!(status, 201, "{v2}");

    let shaped = format!("sk-ant-oat01-{}", relay_e2e::random_hex(40));
    r.write_token(&shaped);
    let (v, second) = doctor();
    let check = token_check(&v);
    assert_eq!(check["status"], "ok", "{check}");
    for t in [&odd, &shaped] {
        assert_value_nowhere(
            &r,
            t,
            &[&path],
            &[&raw, first.as_bytes(), second.as_bytes()],
        );
    }
}

/// What a process of `uid`, holding no capability, can open of each pid's `/proc`
/// files: a line `<pid>:<file>:open|denied` each. Also of a process of its own it
/// starts (`self-child`), which shows the prober can read what the kernel allows it.
fn probe_proc_as(uid: u32, pids: &[u32]) -> String {
    let script = r#"
sleep 30 &
child=$!
for pid in "$@" self-child; do
  [ "$pid" = self-child ] && p=$child || p=$pid
  for f in mem environ maps; do
    if { true 3<"/proc/$p/$f"; } 2>/dev/null; then r=open; else r=denied; fi
    echo "$pid:$f:$r"
  done
done
kill $child
"#;
    let mut cmd = std::process::Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .args([
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--",
            "/bin/sh",
            "-c",
            script,
            "sh",
        ])
        .args(pids.iter().map(|p| p.to_string()));
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("setpriv (util-linux) must be installed: {e}");
    });
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_same_uid_process_cannot_read_the_daemons_or_the_hosts_memory() {
    if relay_e2e::bwrap_only("a_same_uid_process_cannot_read_the_daemons_or_the_hosts_memory") {
        return;
    }
    // As root the kernel's capability check alone would keep a capless prober out, so
    // the instance runs as `nobody` and so does the prober.
    const NOBODY: u32 = 65534;
    let r = Relay::start_with(RelayOptions {
        settings: base_settings(None),
        uid: Some(NOBODY),
        config_in_home: false,
        path: None,
    });
    let daemon = r.ready.pid;
    let host = r.wait_event(|e| e["name"] == "host.started")["pid"]
        .as_u64()
        .unwrap() as u32;
    for pid in [daemon, host] {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        assert!(
            status
                .lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("65534")),
            "{pid} is not nobody's: {status}"
        );
        // Non-dumpable: the kernel gives its sensitive /proc files to root.
        for f in ["environ", "mem", "maps", "fd"] {
            let meta = std::fs::metadata(format!("/proc/{pid}/{f}")).unwrap();
            assert_eq!(
                meta.uid(),
                0,
                "/proc/{pid}/{f} belongs to uid {}",
                meta.uid()
            );
        }
        // No core file, and the limit cannot be raised again.
        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
        assert_eq!(core_limit(&limits), Some(("0", "0")), "{pid}: {limits}");
    }
    let seen = probe_proc_as(NOBODY, &[daemon, host]);
    for pid in [daemon, host] {
        for f in ["mem", "environ", "maps"] {
            assert!(
                seen.contains(&format!("{pid}:{f}:denied\n")),
                "a same-uid process opened /proc/{pid}/{f}:\n{seen}"
            );
        }
    }
    // The prober can open what the kernel lets it: its own child's memory.
    for f in ["mem", "environ", "maps"] {
        assert!(
            seen.contains(&format!("self-child:{f}:open\n")),
            "the prober cannot open its own child's {f}:\n{seen}"
        );
    }
    // Sessions inherit the core limit (a Claude target holds the token too).
    let v = r.shell_terminal("grep 'Max core file size' /proc/self/limits");
    let id = v["id"].as_str().unwrap();
    r.wait_exited(id);
    let (_, _, log) = r.api("GET", &format!("/api/terminals/{id}/log"), None);
    let log = String::from_utf8_lossy(&log);
    assert_eq!(core_limit(&log), Some(("0", "0")), "{log}");
}

/// The soft and hard core limits of a `/proc/<pid>/limits` text.
fn core_limit(limits: &str) -> Option<(&str, &str)> {
    let line = limits.lines().find(|l| l.contains("Max core file size"))?;
    let mut words = line.split("Max core file size").nth(1)?.split_whitespace();
    Some((words.next()?, words.next()?))
}

/// Fails naming `what` (never the value) when `needle` is in `hay`.
fn assert_not_in(hay: &[u8], needle: &str, what: &str, place: &str) {
    let n = needle.as_bytes();
    assert!(
        !hay.windows(n.len()).any(|w| w == n),
        "{what} reached {place}"
    );
}

fn holds(hay: &[u8], needle: &str) -> bool {
    let n = needle.as_bytes();
    hay.windows(n.len()).any(|w| w == n)
}

/// What `env` prints in a terminal of `template` in the project, run to its end: the
/// terminal's id and its log.
fn env_in_terminal(r: &Relay, template: &str) -> (String, Vec<u8>) {
    let v = r.template_terminal(template, "env");
    let id = v["id"].as_str().unwrap().to_string();
    let ev = r.wait_exited(&id);
    assert_eq!(ev["exit_status"], 0, "{ev}");
    let (status, _, log) = r.api("GET", &format!("/api/terminals/{id}/log"), None);
    assert_eq!(status, 200);
    (id, log)
}

/// The `env_names` of `id`'s launch row (`None` when the row has none).
fn launch_env_names(r: &Relay, id: &str) -> Option<Vec<String>> {
    let row = r
        .audit_rows()
        .into_iter()
        .rev()
        .find(|row| row["action"] == "session_launch" && row["session_id"] == id)
        .unwrap_or_else(|| panic!("no launch row for {id}"));
    row.get("env_names").map(|names| {
        names
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect()
    })
}

/// `relay sandbox explain TEMPLATE --json`'s environment: every name, and those from
/// relay's environment.
fn explained_env(r: &Relay, template: &str) -> (Vec<String>, Vec<String>) {
    let x = r.cli_json(&["sandbox", "explain", template]);
    let list = |key: &str| -> Vec<String> {
        x["environment"][key]
            .as_array()
            .unwrap_or_else(|| panic!("no environment.{key}: {x}"))
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect()
    };
    (list("names"), list("inherited"))
}

#[test]
fn relays_environment_secrets_never_reach_a_sandboxed_session() {
    // What the shell that started `relay serve` exported: credentials of its own, each
    // a random value of its own.
    let github = format!("ghp_{}", relay_e2e::random_hex(18));
    let aws = format!("aws-{}", relay_e2e::random_hex(18));
    let api_key = format!("key-{}", relay_e2e::random_hex(18));
    let secrets = [
        ("GITHUB_TOKEN", github.as_str()),
        ("AWS_SECRET_ACCESS_KEY", aws.as_str()),
        ("ANTHROPIC_API_KEY", api_key.as_str()),
    ];
    let mut r = Relay::prepare(None, false);
    r.serve_env = secrets
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut s = base_settings(Some(TOKEN_SETTING));
    s["terminal_templates"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "open", "command": "/bin/sh", "sandbox": false}));
    r.write_settings(&s);
    r.write_token(&fake_token());
    r.launch_daemon();
    let absent_everywhere = |hay: &[u8], place: &str| {
        for (name, value) in &secrets {
            assert_not_in(hay, &format!("{name}="), name, place);
            assert_not_in(hay, value, &format!("the value of {name}"), place);
        }
    };

    // A sandboxed shell gets none of it, by name or by value; the base names it gets.
    let (shell, log) = env_in_terminal(&r, "shell");
    absent_everywhere(&log, "a sandboxed terminal's env");
    for kept in [
        "HOME=",
        "PATH=",
        "LANG=C.UTF-8",
        "TMPDIR=",
        "RELAY_SESSION_ID=",
    ] {
        assert!(holds(&log, kept), "{kept} not in the sandboxed env");
    }
    // Its launch row names what it took from relay's environment, and only that.
    assert_eq!(
        launch_env_names(&r, &shell).as_deref(),
        Some(&["HOME", "LANG", "PATH"].map(String::from)[..])
    );
    let (names, inherited) = explained_env(&r, "shell");
    for (name, _) in &secrets {
        assert!(!names.iter().any(|n| n == name), "explain lists {name}");
    }
    assert!(names.iter().any(|n| n == "RELAY_SESSION_ID"), "{names:?}");
    assert_eq!(inherited, ["HOME", "LANG", "PATH"]);
    // A headless Claude session (bypassPermissions, on the token): none of it either.
    let (status, v, _) = start_session(&r);
    assert_eq!(status, 201, "{v}");
    let sid = v["id"].as_str().unwrap().to_string();
    let reply = r.turn(&sid, "!sh env");
    assert!(reply.starts_with("exit: 0\n"), "{reply}");
    absent_everywhere(reply.as_bytes(), "a headless session's env");
    assert!(reply.contains("\nHOME="), "{reply}");
    assert_eq!(
        launch_env_names(&r, &sid).as_deref(),
        Some(&["LANG"].map(String::from)[..]),
        "a token launch's PATH and HOME are relay's own"
    );
    // An unsandboxed template keeps the whole environment, as before, and its row
    // names nothing.
    let (open, log) = env_in_terminal(&r, "open");
    assert!(holds(&log, &format!("GITHUB_TOKEN={github}")));
    assert_eq!(launch_env_names(&r, &open), None);

    // Passed through by the settings (a name for every launch, a prefix for the shell
    // template only), they reach the sandboxes that name them.
    s["env_passthrough"] = json!(["GITHUB_TOKEN", "ANTHROPIC_API_KEY"]);
    s["terminal_templates"][1]["env_passthrough"] = json!(["AWS_*"]);
    r.write_settings(&s);
    let (shell, log) = env_in_terminal(&r, "shell");
    for (name, value) in &secrets {
        assert!(
            holds(&log, &format!("{name}={value}")),
            "{name} not passed through"
        );
    }
    let passed = [
        "ANTHROPIC_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "GITHUB_TOKEN",
        "HOME",
        "LANG",
        "PATH",
    ]
    .map(String::from);
    assert_eq!(launch_env_names(&r, &shell).as_deref(), Some(&passed[..]));
    let ev = r.wait_event(|e| e["name"] == "session.launch" && e["session_id"] == shell.as_str());
    assert_eq!(ev["env_names"], json!(passed), "{ev}");
    assert_eq!(explained_env(&r, "shell").1, passed);
    let (names, inherited) = explained_env(&r, "claude-code");
    assert_eq!(inherited, ["GITHUB_TOKEN", "LANG"]);
    assert!(
        !names
            .iter()
            .any(|n| n == "AWS_SECRET_ACCESS_KEY" || n == "ANTHROPIC_API_KEY"),
        "{names:?}"
    );
    let text = r.cli(&["sandbox", "explain", "shell"]);
    assert!(
        text.stdout
            .contains("  from relay's environment: ANTHROPIC_API_KEY AWS_SECRET_ACCESS_KEY GITHUB_TOKEN HOME LANG PATH\n"),
        "{}",
        text.stdout
    );
    // The headless session's template has no `AWS_*`, and a token launch still loses
    // every other sign-in, passed through or not.
    let (status, v, _) = start_session(&r);
    assert_eq!(status, 201, "{v}");
    let sid = v["id"].as_str().unwrap().to_string();
    let reply = r.turn(&sid, "!sh env");
    assert!(
        reply.contains(&format!("\nGITHUB_TOKEN={github}\n")),
        "{reply}"
    );
    for (name, value) in &secrets[1..] {
        assert_not_in(
            reply.as_bytes(),
            &format!("{name}="),
            name,
            "the token session",
        );
        assert_not_in(reply.as_bytes(), value, name, "the token session");
    }
    assert_eq!(
        launch_env_names(&r, &sid).as_deref(),
        Some(&["GITHUB_TOKEN", "LANG"].map(String::from)[..])
    );
    assert!(!r.start_line(&sid)["env_names"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n == "ANTHROPIC_API_KEY" || n == "AWS_SECRET_ACCESS_KEY"));

    // Names, never values: no audit row, event, log line or explanation holds one.
    let (_, events, _) = r.api("GET", "/api/events?after=0", None);
    for (place, bytes) in [
        (
            "audit.jsonl",
            std::fs::read(r.config.join("audit.jsonl")).unwrap(),
        ),
        (
            "events.jsonl",
            std::fs::read(r.config.join("events.jsonl")).unwrap(),
        ),
        ("GET /api/events", events.to_string().into_bytes()),
        (
            "relay.log",
            std::fs::read(r.config.join("relay.log")).unwrap(),
        ),
        (
            "host.log",
            std::fs::read(r.config.join("sessions/host.log")).unwrap(),
        ),
        ("relay serve's output", r.output()),
        ("relay sandbox explain", text.stdout.into_bytes()),
    ] {
        for (name, value) in &secrets {
            assert_not_in(&bytes, value, &format!("the value of {name}"), place);
        }
    }
}
