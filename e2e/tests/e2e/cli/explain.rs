//! `relay sandbox explain TEMPLATE [--directory D] [--backend B] [--json]`: the sandbox a
//! terminal of the template gets, from the launch path's own spec — the same words the
//! Settings page shows for a running terminal of that template, the token's folder
//! among the denied, for this platform's backend and the other's.

use relay::wire::Code;
use relay_e2e::daemon::{base_settings, Relay, TOKEN_SETTING};
use relay_e2e::fake_token;
use serde_json::{json, Value};

fn places(v: &Value, list: &str) -> Vec<String> {
    v[list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list} in {v}"))
        .iter()
        .map(|p| p["path"].as_str().unwrap().to_string())
        .collect()
}

fn relay_with_token() -> (Relay, String) {
    let token = fake_token();
    let mut settings = relay_e2e::daemon::host_network(base_settings(Some(TOKEN_SETTING)));
    settings["session_sandbox"] = json!({"denied_loopback_ports": [5432]});
    settings["terminal_templates"][1]["deny"] = json!(["~/project/secrets"]);
    let r = Relay::start(settings);
    r.write_token(&token);
    std::fs::create_dir_all(r.project.join("secrets")).unwrap();
    (r, token)
}

#[test]
fn sandbox_explain_prints_what_a_terminal_of_the_template_gets_and_a_launch_gets_it() {
    let (r, token) = relay_with_token();
    let dir = r.project.join("sub");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    let x = r.cli_json(&["sandbox", "explain", "shell", "--directory", d]);
    assert_eq!(
        (x["backend"].as_str(), x["sandboxed"].as_bool()),
        (Some("bwrap"), Some(true))
    );
    assert_eq!(x["workdir"], d);
    let token_dir = r.token_path().parent().unwrap().display().to_string();
    let denied = &x["denied"];
    let token_place = denied
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["path"] == token_dir.as_str())
        .unwrap_or_else(|| panic!("the token's folder is not denied: {x}"));
    assert!(token_place["why"]
        .as_str()
        .unwrap()
        .contains("claude_token_file"));
    let denied = places(&x, "denied");
    assert!(
        denied.contains(&r.config.display().to_string()),
        "{denied:?}"
    );
    assert!(denied.contains(&r.project.join("secrets").display().to_string()));
    assert!(places(&x, "write").contains(&d.to_string()));
    let ports: Vec<u64> = x["network"]["denied_ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap())
        .collect();
    assert!(ports.contains(&5432) && ports.contains(&(r.api_port().unwrap() as u64)));

    // A relative --directory is taken from where the command runs (the project).
    let rel = r.cli_json(&["sandbox", "explain", "shell", "--directory", "sub"]);
    assert_eq!(rel["workdir"], d);

    // What a real terminal of that template in that folder was launched with: the same.
    let t = r.cli_json(&[
        "terminal",
        "start",
        "--project",
        "p1",
        "--template",
        "shell",
        "--directory",
        d,
        "--extra-arg",
        "-c",
        "--extra-arg",
        "sleep 60",
    ]);
    let tid = t["id"].as_str().unwrap();
    let (st, live, _) = r.api("GET", &format!("/api/terminals/{tid}/sandbox"), None);
    assert_eq!(st, 200, "{live}");
    for list in ["read", "denied", "read_only", "denied_sockets", "system"] {
        assert_eq!(live[list], x[list], "{list} differs from the launch's");
    }
    assert_eq!(live["network"], x["network"]);
    // The same environment, by name: relay's, the template's and the base names.
    assert_eq!(live["environment"], x["environment"]);
    let names = x["environment"]["names"].as_array().unwrap();
    for name in ["HOME", "PATH", "RELAY_SESSION_ID", "TMPDIR", "TERM"] {
        assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
    }
    // Only the temp folder's name differs: the launch minted an id.
    let temp = |v: &Value| -> Vec<String> {
        let all = v["write"].as_array().unwrap().iter();
        all.filter(|p| p["why"].as_str().unwrap().contains("temp folder"))
            .map(|p| p["path"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        temp(&x),
        vec![r.tmp.join("relay-<id>").display().to_string()]
    );
    assert_eq!(
        temp(&live),
        vec![r.tmp.join(format!("relay-{tid}")).display().to_string()]
    );
    let others = |v: &Value| {
        let mut w = places(v, "write");
        w.retain(|p| !temp(v).contains(p));
        w
    };
    assert_eq!(others(&x), others(&live));
    r.cli_json(&["terminal", "stop", "--id", tid]);

    // The text form: one path a line, the sections named, the token's folder denied.
    let out = r.cli(&["sandbox", "explain", "shell", "--directory", d]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    for want in [
        "sandbox: bwrap  (working directory ",
        "can read and write:\n",
        "denied (after every grant):\n",
        &format!("  {token_dir}  — claude_token_file"),
        "network: shared; denied ports: ",
    ] {
        assert!(out.stdout.contains(want), "{want:?} not in\n{}", out.stdout);
    }
    for text in [&out.stdout, &out.stderr, &x.to_string()] {
        relay_e2e::assert_absent(text.as_bytes(), &token, "relay sandbox explain");
    }
}

#[test]
fn sandbox_explain_for_the_other_backend_and_its_refusals() {
    let (r, _token) = relay_with_token();
    let d = r.project.display().to_string();
    let x = r.cli_json(&["sandbox", "explain", "claude-code", "--backend", "seatbelt"]);
    assert_eq!(x["backend"], "seatbelt");
    assert_eq!(
        x["workdir"],
        d.as_str(),
        "the default folder is the current one"
    );
    let system = places(&x, "system");
    assert!(
        system.contains(&"/System/Library".to_string()),
        "{system:?}"
    );
    // Seatbelt denies by path at access time: the token file itself, by its path.
    let denied = places(&x, "denied");
    assert!(
        denied.iter().any(|p| r.token_path().starts_with(p)),
        "{denied:?}"
    );
    let sockets = &x["denied_sockets"][0]["how"];
    assert_eq!(sockets, "connecting refused");
    assert!(x["network"]["how"].as_str().unwrap().contains("localhost"));
    assert!(
        x["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("launches here use bwrap")),
        "{x}"
    );
    // A token launch's tools: no shield without Landlock; under bwrap the prefix the
    // launch gets, and the note, whichever the kernel allows.
    let notes = |x: &Value| x["notes"].as_array().unwrap().clone();
    assert!(
        notes(&x).iter().any(|n| n
            .as_str()
            .unwrap()
            .starts_with("Claude's tools are not shielded: no Landlock under Seatbelt")),
        "{x}"
    );
    let b = r.cli_json(&["sandbox", "explain", "claude-code", "--backend", "bwrap"]);
    let shielded = relay_shim::landlock::abi_version()
        .is_ok_and(|abi| abi >= relay_shim::landlock::MIN_SHIELD_ABI);
    let want = if shielded {
        "Claude's tools are shielded: every Bash command runs through relay-shim --shield"
    } else {
        "Claude's tools are not shielded: "
    };
    assert!(
        notes(&b)
            .iter()
            .any(|n| n.as_str().unwrap().starts_with(want)),
        "{b}"
    );
    let names = b["environment"]["names"].as_array().unwrap();
    assert_eq!(
        names.iter().any(|n| n == "CLAUDE_CODE_SHELL_PREFIX"),
        shielded,
        "{names:?}"
    );
    let text = r.cli(&["sandbox", "explain", "claude-code", "--backend", "seatbelt"]);
    assert!(
        text.stdout.starts_with("sandbox: seatbelt"),
        "{}",
        text.stdout
    );

    // Exit 3 for what is not there, 1 for the rest (docs/cli.md#exit-codes).
    let fails = |args: &[&str], code: &str| {
        let out = r.cli(args);
        let status = if code.starts_with("unknown_") { 3 } else { 1 };
        assert_eq!(out.status, status, "{args:?}: {}", out.stdout);
        assert!(out.stdout.is_empty());
        assert!(
            out.stderr.starts_with("error: ")
                && out.stderr.trim_end().ends_with(&format!("({code})")),
            "{args:?}: {}",
            out.stderr
        );
    };
    fails(
        &["sandbox", "explain", "nope"],
        Code::UnknownTemplate.as_str(),
    );
    fails(
        &["sandbox", "explain", "shell", "--directory", "/"],
        Code::UnknownProject.as_str(),
    );
    fails(
        &["sandbox", "explain", "shell", "--directory", "missing"],
        Code::InvalidDirectory.as_str(),
    );
    let bad = r.cli(&["sandbox", "explain", "shell", "--backend", "firejail"]);
    assert_eq!(bad.status, 2);
    assert!(
        bad.stderr
            .contains("error: invalid value 'firejail' for '--backend <B>'"),
        "{}",
        bad.stderr
    );
    // Nothing was launched or audited by any of it.
    let (_, list, _) = r.api("GET", "/api/terminals", None);
    assert_eq!(list["terminals"], json!([]));
    assert!(r.audit_rows().is_empty(), "{:?}", r.audit_rows());
    // `relay sandbox TEMPLATE` still runs a template.
    let run = r.cli(&["sandbox", "shell", "--", "-c", "echo ran; exit 4"]);
    assert_eq!(run.status, 4, "{}", run.stderr);
    assert!(run.stdout.contains("ran"), "{}", run.stdout);
}

/// `v` as text with the names a launch mints made the pattern explain shows: its id,
/// and its home's random suffix.
fn as_explained(v: &Value, id: &str) -> Value {
    let text = v.to_string().replace(id, "<id>");
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = rest.find("/home-") {
        let (head, tail) = rest.split_at(at + "/home-".len());
        out.push_str(head);
        let hex = tail.bytes().take_while(u8::is_ascii_hexdigit).count();
        out.push_str(if hex == 12 { "<hex>" } else { &tail[..hex] });
        rest = &tail[hex..];
    }
    out.push_str(rest);
    serde_json::from_str(&out).unwrap()
}

#[test]
fn a_claude_code_terminal_explained_is_the_one_launched_with_the_token() {
    let token = fake_token();
    let r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    r.write_token(&token);
    let d = r.project.display().to_string();
    let x = r.cli_json(&["sandbox", "explain", "claude-code", "--directory", &d]);
    let t = r.auth_status_terminal("claude-code");
    let tid = t["id"].as_str().unwrap();
    let (st, live, _) = r.api("GET", &format!("/api/terminals/{tid}/sandbox"), None);
    assert_eq!(st, 200, "{live}");
    let live = as_explained(&live, tid);
    // Every path, the network with its egress list, and the environment's names: the
    // launch's own (its shield, its PATH, its home, its proxy) and explain's agree.
    for list in [
        "read",
        "denied",
        "read_only",
        "denied_sockets",
        "system",
        "network",
        "environment",
    ] {
        assert_eq!(live[list], x[list], "{list} differs from the launch's");
    }
    let names = x["environment"]["names"].as_array().unwrap();
    for name in [
        "CLAUDE_CONFIG_DIR",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
        "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL",
        "HTTPS_PROXY",
        "GIT_CONFIG_GLOBAL",
        "PATH",
    ] {
        assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
    }
    // The writable places: the same but for how explain words the temp folder.
    let paths = |v: &Value| places(v, "write");
    assert_eq!(paths(&live), paths(&x));
    for text in [&x.to_string(), &live.to_string()] {
        relay_e2e::assert_absent(text.as_bytes(), &token, "the explanations");
    }
}

/// `relay sandbox why WHAT` in `dir`, which must succeed: its `--json` answer and text.
fn why(r: &Relay, dir: &std::path::Path, args: &[&str]) -> (Value, String) {
    let run = |json: bool| {
        let mut a = vec!["sandbox", "why"];
        a.extend_from_slice(args);
        if json {
            a.push("--json");
        }
        let out = r.cli_command(&a).current_dir(dir).output().unwrap();
        assert!(out.status.success(), "{a:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    (serde_json::from_str(&run(true)).unwrap(), run(false))
}

#[test]
fn relay_sandbox_why_says_what_the_sandbox_does_with_a_path_or_a_host_and_why() {
    let token = fake_token();
    let mut s = base_settings(Some(TOKEN_SETTING));
    s["terminal_templates"][1]["egress"] = json!(["registry.npmjs.org"]);
    let r = Relay::start(s);
    r.write_token(&token);
    assert!(std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&r.project)
        .status()
        .unwrap()
        .success());
    // What it says of each path, and what the shell finds when it tries.
    // (This suite's homes lie in /tmp, which a sandbox has of its own.)
    let cases = [
        (".git/hooks/pre-commit", &["read-only"][..]),
        ("./notes.txt", &["writable"]),
        ("~/.ssh/id_ed25519", &["not-granted", "its-own"]),
    ];
    for (what, access) in cases {
        let (v, text) = why(&r, &r.project, &[what]);
        let said = v["access"].as_str().unwrap_or_default();
        assert!(access.contains(&said), "{what}: {v}");
        let access = said;
        assert!(!v["why"].as_str().unwrap_or_default().is_empty(), "{v}");
        assert!(
            text.contains(access) && text.contains("to change it: "),
            "{text}"
        );
    }
    let hook = why(&r, &r.project, &[".git/hooks/pre-commit"]).0;
    assert!(
        hook["change"]
            .as_str()
            .unwrap()
            .contains("writable_exceptions"),
        "{hook}"
    );
    let (code, out) = r.sandbox_shell(
        "cd ~/project && { touch .git/hooks/pre-commit 2>/dev/null; echo hook=$?; }; \
         { touch notes.txt; echo notes=$?; }; { cat ~/.ssh/id_ed25519 2>/dev/null; echo key=$?; }",
    );
    assert_eq!(code, 0);
    assert!(out.contains("hook=1") && out.contains("notes=0"), "{out}");
    assert!(!out.contains("key=0"), "{out}");
    // The token's folder: denied, naming the setting.
    let t = r.token_path().display().to_string();
    let denied = why(&r, &r.project, &[&t]).0;
    assert_eq!(denied["access"], "denied", "{denied}");
    assert!(
        denied["why"]
            .as_str()
            .unwrap()
            .contains("claude_token_file"),
        "{denied}"
    );
    // Hosts: the template's egress list.
    let (v, _) = why(&r, &r.project, &["registry.npmjs.org"]);
    assert_eq!(v["access"], "allowed", "{v}");
    let (v, text) = why(&r, &r.project, &["example.com:80"]);
    assert_eq!(
        (v["access"].as_str(), v["asked"].as_str()),
        (Some("refused"), Some("example.com:80"))
    );
    assert!(text.contains("egress"), "{text}");
    // A running terminal's own sandbox.
    let t = r.shell_terminal("exec sleep 600");
    let id = t["id"].as_str().unwrap();
    let (v, _) = why(&r, &r.project, &["--id", id, ".git/config"]);
    assert_eq!(v["access"], "read-only", "{v}");
    for out in [&text, &v.to_string()] {
        relay_e2e::assert_absent(out.as_bytes(), &token, "why's answers");
    }
    assert_eq!(r.cli(&["terminal", "stop", "--id", id]).status, 0);
}
