//! The person's toolchains under `~` (rustup's proxies in `~/.cargo/bin` and its
//! toolchains in `~/.rustup`; pyenv's shims and versions) run in a token-less
//! `relay sandbox shell` and in the Bash tool of a sandboxed Claude that got the token.
//! The credential files a grant would hold stay masked.

use std::path::Path;

use serde_json::{json, Value};

use relay_e2e::daemon::{base_settings, Relay, TOKEN_SETTING};
use relay_e2e::exec_file::write_executable;
use relay_e2e::fakeapi::FakeApi;

use crate::clients::real_claude::claude_code;
use crate::clients::real_turns::{fake_oauth_token, message, settings, start_session};

/// relay's `PATH`, as a developer with rustup and pyenv has it.
const DEVELOPER_PATH: &str =
    "~/.cargo/bin:~/.pyenv/shims:~/.local/bin:/usr/local/bin:/usr/bin:/bin";

/// A rustup-style proxy and toolchain, and a pyenv-style shim and version, in `home`:
/// each proxy finds its root as the real ones do (`RUSTUP_HOME`, `PYENV_ROOT`, else
/// under `HOME`).
fn developer_home(home: &Path) {
    for dir in [
        ".cargo/bin",
        ".rustup/toolchains/stable/bin",
        ".pyenv/shims",
        ".pyenv/versions/3.99.0/bin",
    ] {
        std::fs::create_dir_all(home.join(dir)).unwrap();
    }
    write_executable(
        &home.join(".cargo/bin/relaytool"),
        "#!/bin/sh\nexec \"${RUSTUP_HOME:-$HOME/.rustup}/toolchains/stable/bin/relaytool\" \"$@\"\n",
    );
    write_executable(
        &home.join(".rustup/toolchains/stable/bin/relaytool"),
        "#!/bin/sh\necho rustup toolchain ran\n",
    );
    write_executable(
        &home.join(".pyenv/shims/relaypy"),
        "#!/bin/sh\nexec \"${PYENV_ROOT:-$HOME/.pyenv}/versions/3.99.0/bin/relaypy\" \"$@\"\n",
    );
    write_executable(
        &home.join(".pyenv/versions/3.99.0/bin/relaypy"),
        "#!/bin/sh\necho pyenv python 3.99 ran\n",
    );
}

const BOTH: &str = "relaytool; relaypy";

fn ran_both(text: &str) -> bool {
    text.contains("rustup toolchain ran") && text.contains("pyenv python 3.99 ran")
}

#[test]
fn the_persons_toolchains_in_the_home_run_in_a_shell_and_in_claudes_bash_tool() {
    let claude = claude_code();
    let mut r = Relay::prepare(None, false);
    r.path = Some(DEVELOPER_PATH.into());
    developer_home(&r.home);
    let script = json!({"turns": [
        {"text": "Building.", "tool_use": [
            {"id": "toolu_tools", "name": "Bash", "input": {"command": BOTH, "description": "run the toolchains"}},
        ]},
        {"text": "built"},
    ]});
    let api = FakeApi::start(&r.root, &script);
    let token = fake_oauth_token();
    r.write_token(&token);
    let s = match &claude {
        Some(c) => settings(c, &api, Some(TOKEN_SETTING)),
        None => base_settings(Some(TOKEN_SETTING)),
    };
    r.write_settings(&s);
    r.launch_daemon();

    // A token-less shell in the project.
    let text = super::shell(&r, &r.project, BOTH).0;
    assert!(
        ran_both(&text),
        "a shell did not run the toolchains: {text}"
    );
    // explain names each root and why.
    let x = r.cli_json(&["sandbox", "explain", "shell"]);
    let read = x["read"].to_string();
    for root in [".rustup", ".pyenv", ".cargo/bin"] {
        let path = r.home.join(root).display().to_string();
        assert!(
            read.contains(&format!("\"{path}\"")),
            "{root} not in {read}"
        );
    }
    assert!(read.contains("rustup's toolchains"), "{read}");

    // Claude's Bash tool, in a launch that got the token (its HOME is relay's).
    let Some(_) = claude else { return };
    let id = start_session(&r, &[]);
    let reply = message(&r, &id, "build it", &[]);
    assert_eq!(reply.status, 0, "{}", reply.stderr);
    let result: Value = api
        .messages()
        .iter()
        .flat_map(|q| q["tool_results"].as_array().cloned().unwrap_or_default())
        .find(|t| t["tool_use_id"] == "toolu_tools")
        .expect("the tool call's result");
    let text = result["text"].as_str().unwrap_or_default();
    assert!(
        ran_both(text),
        "Claude's Bash tool did not run them: {result}"
    );
}

/// One credential file in a home a template reads whole: unreadable in the sandbox,
/// while a file beside it reads.
fn a_credential_is_masked(name: &str) {
    let mut settings = base_settings(None);
    settings["terminal_templates"][1]["read"] = json!(["~"]);
    let r = Relay::start(settings);
    let secret = format!("secret-{}", relay_e2e::random_hex(8));
    let path = r.home.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    if name.ends_with("keyrings") {
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(path.join("login.keyring"), &secret).unwrap();
    } else {
        std::fs::write(&path, &secret).unwrap();
    }
    std::fs::write(r.home.join("plain.txt"), "plain").unwrap();
    let script = format!("cat ~/plain.txt; echo; cat ~/{name} ~/{name}/* 2>/dev/null; echo rc=$?");
    let text = super::shell(&r, &r.project, &script).1;
    assert!(text.starts_with("plain"), "the home is not read: {text}");
    assert!(!text.contains(&secret), "{name} was read: {text}");
}

macro_rules! masked {
    ($($test:ident: $name:literal,)*) => {$(
        #[test]
        fn $test() {
            a_credential_is_masked($name);
        }
    )*};
}

masked! {
    cargo_credentials_toml_is_masked: ".cargo/credentials.toml",
    cargo_credentials_is_masked: ".cargo/credentials",
    npmrc_is_masked: ".npmrc",
    pypirc_is_masked: ".pypirc",
    docker_config_json_is_masked: ".docker/config.json",
    gh_hosts_yml_is_masked: ".config/gh/hosts.yml",
    netrc_is_masked: ".netrc",
    git_credentials_is_masked: ".git-credentials",
    keyrings_are_masked: ".local/share/keyrings",
}

#[test]
fn a_toolchain_a_session_can_write_is_never_granted_to_another_sandbox() {
    // A second project over the whole home: its sessions can write every toolchain
    // folder in it, so no sandbox is given them.
    let mut settings = base_settings(Some(TOKEN_SETTING));
    settings["projects"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "home", "name": "home", "path": "~", "allowed_templates": ["*"], "allow_home_directory": true}));
    let mut r = Relay::prepare(None, false);
    r.path = Some(DEVELOPER_PATH.into());
    developer_home(&r.home);
    r.write_token(&fake_oauth_token());
    r.write_settings(&settings);
    r.launch_daemon();
    // The home session tries to plant its own program where the toolchain is: the root
    // is read-only to it, as to every sandbox that could write it.
    let plant = super::shell(
        &r,
        &r.home,
        "echo 'echo planted' > ~/.rustup/toolchains/stable/bin/relaytool; echo rc=$?",
    );
    assert!(
        plant.1.contains("rc=") && !plant.1.contains("rc=0"),
        "{}",
        plant.0
    );
    // A shell in the project is not given it: nothing planted runs, and explain says why.
    let text = super::shell(&r, &r.project, BOTH).0;
    assert!(!text.contains("planted") && !ran_both(&text), "{text}");
    let x = r.cli_json(&["sandbox", "explain", "shell"]);
    let notes = x["notes"].to_string();
    let rustup = r.home.join(".rustup").display().to_string();
    assert!(
        notes.contains(&format!("toolchain not granted: {rustup}"))
            && notes.contains("sessions can write"),
        "{notes}"
    );
    assert!(
        !x["read"].to_string().contains(&format!("\"{rustup}\"")),
        "{x}"
    );
}

#[test]
fn a_session_that_could_write_a_toolchain_a_running_sandbox_reads_is_refused() {
    let mut r = Relay::prepare(None, false);
    r.path = Some(DEVELOPER_PATH.into());
    developer_home(&r.home);
    r.write_settings(&base_settings(None));
    r.launch_daemon();
    // A shell in the project is given the toolchain, and waits.
    let fifo = r.project.join("go");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let reader = r.template_terminal("shell", "read x < go; relaytool");
    let reader = reader["id"].as_str().unwrap().to_string();
    // Then the person adds a template that writes `~/.rustup` (for `rustup update`), and
    // a session of it tries to put its own program where the waiting shell will look.
    let mut settings = base_settings(None);
    settings["terminal_templates"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "rustup-rw", "name": "rustup", "command": "/bin/sh", "read_write": ["~/.rustup"]}));
    r.write_settings(&settings);
    let (status, refused, _) = r.api(
        "POST",
        "/api/terminals",
        Some(
            &json!({"project": "p1", "template": "rustup-rw", "extra_args": ["-c",
            "echo 'echo planted' > ~/.rustup/toolchains/stable/bin/relaytool"]}),
        ),
    );
    assert_eq!(
        (status, refused["code"].as_str()),
        (400, Some(relay::wire::Code::SandboxUnavailable.as_str())),
        "{refused}"
    );
    let why = refused["error"].as_str().unwrap();
    assert!(why.contains(&reader) && why.contains(".rustup"), "{why}");
    std::fs::write(&fifo, "go\n").unwrap();
    r.wait_exited(&reader);
    let (_, _, log) = r.api("GET", &format!("/api/terminals/{reader}/log"), None);
    let log = String::from_utf8_lossy(&log).into_owned();
    assert!(
        log.contains("rustup toolchain ran") && !log.contains("planted"),
        "{log}"
    );
}
