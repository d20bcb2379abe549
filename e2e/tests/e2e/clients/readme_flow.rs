//! The README's flow for a new user, end to end: first run, then "Get a sandboxed Claude
//! logged in" step by step, with the real Claude Code installed the native way under
//! `~/.local` (the common case), relay installed as the README says (`cargo install` puts
//! it in `~/.cargo/bin`) and the first-run `home` project, opted in to the whole home
//! (`allow_home_directory`) after relay refused a sandbox there.

use std::os::unix::fs::{symlink, PermissionsExt};

use relay::daemon::diagnostics::doctor::plain;
use relay::wire::Code;
use relay_e2e::daemon::{doctor_check, Relay};
use relay_e2e::pty::Pty;
use relay_e2e::{assert_absent, random_hex, wait};
use serde_json::{json, Value};

use crate::clients::real_claude::claude_code;

/// `relay ARGS` run from the home folder (the first-run `home` project's root), as a
/// person would after `cd`.
fn in_home(r: &Relay, args: &[&str]) -> std::process::Output {
    let mut cmd = r.cli_command(args);
    cmd.current_dir(&r.home).stdin(std::process::Stdio::null());
    cmd.output().expect("run relay")
}

fn exit_code(pty: &mut Pty) -> i32 {
    let st = wait::child_within(&mut pty.child, relay_e2e::WAIT).expect("relay sandbox exited");
    st.code().unwrap_or(-1)
}

#[test]
fn the_readme_flow_logs_a_native_claude_in_and_keeps_its_folders_read_only() {
    let Some(claude) = claude_code() else { return };
    let token = format!("sk-ant-oat01-{}", random_hex(40));
    // First run from `~/.cargo/bin`: no settings, relay seeds them.
    let mut r = Relay::prepare(None, false);
    let cargo_bin = r.home.join(".cargo/bin");
    r.install_in(&cargo_bin);
    r.launch_daemon();
    // Claude Code installed the native way.
    let versions = r.home.join(".local/share/claude/versions");
    std::fs::create_dir_all(&versions).unwrap();
    let real = versions.join("2.1.332");
    relay_e2e::exec_file::copy_executable(&claude, &real);
    let link = r.home.join(".local/bin/claude");
    std::fs::remove_file(&link).unwrap();
    symlink(&real, &link).unwrap();

    // A sandbox in the home folder itself is refused as first run writes the settings:
    // it would grant the whole home. The refusal says what to do.
    let out = in_home(&r, &["sandbox", "shell", "--", "-c", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "refused: {stderr}");
    assert!(
        stderr.contains(Code::HomeDirectory.as_str())
            && stderr.contains("cd into a folder below it")
            && stderr.contains("allow_home_directory"),
        "{stderr}"
    );
    // This person wants sandboxes over the whole home, and says so.
    let settings_path = r.config.join("settings.json");
    let mut s: Value = serde_json::from_slice(&std::fs::read(&settings_path).unwrap()).unwrap();
    s["projects"][0]["allow_home_directory"] = json!(true);
    // Step 1: the setting first.
    s["claude_token_file"] = json!("~/.config/claude-ltt/token");
    r.write_settings(&s);
    // Before the folder exists, a sandbox in the home could create it: refused, and the
    // refusal says what to do.
    let out = in_home(&r, &["sandbox", "shell", "--", "-c", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("mkdir -m 700"), "{stderr}");

    // Step 2: the folder and an empty file only the user can read.
    let folder = r.home.join(".config/claude-ltt");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o700)).unwrap();
    let path = folder.join("token");
    std::fs::write(&path, "").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    // Step 3: paste the token and save, the way an editor does (a new file, renamed).
    let saved = folder.join(".token.swp");
    std::fs::write(&saved, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&saved, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::rename(&saved, &path).unwrap();

    // `relay sandbox claude-code` in a project folder starts logged in, through fd 5
    // (never in the home folder itself, opted in or not: it would read what any
    // session could have written there).
    let demo = r.home.join("src/demo");
    std::fs::create_dir_all(&demo).unwrap();
    let out = in_home(&r, &["sandbox", "claude-code", "--", "auth", "status"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(4) && stderr.contains("gets the token never runs there"),
        "{stderr}"
    );
    let mut cmd = r.cli_command(&["sandbox", "claude-code", "--", "auth", "status"]);
    cmd.current_dir(&demo);
    let mut pty = Pty::spawn(cmd, 120, 40);
    pty.wait_for("oauth_token");
    assert_eq!(exit_code(&mut pty), 0, "screen:\n{}", pty.screen());
    let screen = plain(&pty.screen());
    assert!(screen.contains("\"loggedIn\":true"), "{screen}");
    assert!(
        screen.contains("\"authMethod\":\"oauth_token\""),
        "{screen}"
    );

    // A shell in the home: the home is writable, the folders that decide what gets the
    // token are not, and the token's folder is not there at all.
    let script = "touch \"$HOME/mine\" && echo home-ok; \
                  touch \"$HOME/.local/bin/x\" 2>/dev/null || echo bin-ro; \
                  touch \"$HOME/.local/share/claude/versions/x\" 2>/dev/null || echo versions-ro; \
                  touch \"$HOME/.cargo/bin/x\" 2>/dev/null || echo relay-ro; \
                  ls \"$HOME/.config/claude-ltt\" >/dev/null 2>&1 || echo token-hidden";
    let out = in_home(&r, &["sandbox", "shell", "--", "-c", script]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for word in [
        "home-ok",
        "bin-ro",
        "versions-ro",
        "relay-ro",
        "token-hidden",
    ] {
        assert!(stdout.contains(word), "{word}: {stdout}");
    }
    assert!(r.home.join("mine").exists());
    assert!(!r.home.join(".local/bin/x").exists());
    assert!(!cargo_bin.join("x").exists());

    // `relay doctor` says where claude lives and what relay does about it.
    let doctor = r.cli(&["doctor", "--json"]);
    let v: Value = serde_json::from_str(&doctor.stdout).unwrap();
    // A native install under a home project is pinned: ok, with the note.
    let program = doctor_check(&v, "claude_program");
    assert_eq!(program["status"], "ok", "{program}");
    assert!(
        program["detail"]
            .as_str()
            .unwrap()
            .contains("pins it read-only"),
        "{program}"
    );
    // And relay, installed by the README's one command into ~/.cargo/bin: pinned as
    // well, so `ok`, with the same kind of note.
    let helpers = doctor_check(&v, "helpers");
    assert_eq!(helpers["status"], "ok", "{helpers}");
    let detail = helpers["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!(
            "{} lies in {}",
            cargo_bin.join("relay").display(),
            r.home.display()
        )) && detail.contains("pins it read-only"),
        "{helpers}"
    );
    for (place, bytes) in [
        ("the screen", pty.screen().into_bytes()),
        ("relay doctor", doctor.stdout.into_bytes()),
        ("the daemon output", r.output()),
    ] {
        assert_absent(&bytes, &token, place);
    }
}
