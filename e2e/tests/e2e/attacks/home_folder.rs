//! The home folder is never a silent grant: a sandboxed launch whose directory is the
//! home folder itself — `relay sandbox` run in `~`, or a start from outside the project
//! when the project's folder is the home folder — would hand the session every file of
//! the home, `~/.ssh` among them. Refused unless the project or the template says
//! `allow_home_directory` (docs/settings.md, docs/THREAT-MODEL.md).

use std::process::{Command, Output, Stdio};

use relay::wire::Code;
use relay_e2e::assert_absent;
use relay_e2e::daemon::Relay;
use serde_json::{json, Value};

/// `relay ARGS` run from `dir`, as a person types it there.
fn relay_in(r: &Relay, dir: &std::path::Path, args: &[&str]) -> Output {
    let mut cmd: Command = r.cli_command(args);
    cmd.current_dir(dir).stdin(Stdio::null());
    cmd.output().expect("run relay")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// First run's settings (the `home` project at `~`, every template allowed), a key
/// planted where a home-wide grant would reach it.
fn first_run() -> (Relay, String) {
    let mut r = Relay::prepare(None, false);
    r.launch_daemon();
    let ssh = r.home.join(".ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    let key = format!("PRIVATE-KEY-{}", relay_e2e::random_hex(16));
    std::fs::write(ssh.join("id_ed25519"), &key).unwrap();
    (r, key)
}

fn assert_home_refusal(out: &Output, key: &str, needle: &str) {
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "refused: {stderr}");
    for want in [Code::HomeDirectory.as_str(), needle, "allow_home_directory"] {
        assert!(stderr.contains(want), "{want:?} not in: {stderr}");
    }
    assert_absent(&out.stdout, key, "the refused launch's output");
}

#[test]
fn relay_sandbox_in_the_home_folder_cannot_read_the_homes_ssh_key() {
    let (r, key) = first_run();
    let read = "cat \"$HOME/.ssh/id_ed25519\"; echo rc=$?";
    let out = relay_in(&r, &r.home, &["sandbox", "shell", "--", "-c", read]);
    assert_home_refusal(&out, &key, "cd into a folder below it");
    // Below the home folder the same command runs, and the key is not there.
    let demo = r.home.join("src/demo");
    std::fs::create_dir_all(&demo).unwrap();
    let out = relay_in(&r, &demo, &["sandbox", "shell", "--", "-c", read]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("rc=") && !stdout.contains("rc=0"),
        "{stdout}"
    );
    assert_absent(&out.stdout, &key, "a sandbox below the home");
    // Opted in, the home is granted whole: the setting does what it says (a file beside
    // the key reads), and a private key, a credential, stays masked even so
    // (docs/settings.md#toolchains).
    std::fs::write(r.home.join(".ssh/known_hosts"), "known-host-line").unwrap();
    let mut s: Value =
        serde_json::from_slice(&std::fs::read(r.config.join("settings.json")).unwrap()).unwrap();
    s["projects"][0]["allow_home_directory"] = json!(true);
    r.write_settings(&s);
    let both = "cat \"$HOME/.ssh/known_hosts\"; echo; cat \"$HOME/.ssh/id_ed25519\"; echo rc=$?";
    let out = relay_in(&r, &r.home, &["sandbox", "shell", "--", "-c", both]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("known-host-line"),
        "{}",
        text(&out.stdout)
    );
    assert_absent(&out.stdout, &key, "a sandbox granted the home whole");
}

#[test]
fn a_session_started_from_outside_the_home_project_does_not_fall_back_to_the_home_folder() {
    let (r, key) = first_run();
    let outside = r.root.join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    for args in [
        &["session", "start", "--project", "home"][..],
        &[
            "terminal",
            "start",
            "--project",
            "home",
            "--template",
            "shell",
        ][..],
    ] {
        let out = relay_in(&r, &outside, args);
        assert_home_refusal(&out, &key, "the current folder is not inside the project");
    }
    // A refusal is a denied row and event, like every authorization refusal.
    let rows = r.cli_json(&["audit"]);
    let denied = rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| row["code"] == Code::HomeDirectory.as_str() && row["outcome"] == "denied")
        .count();
    assert_eq!(denied, 2, "{rows}");
    // `--directory` below the home folder, or the template's opt-in, starts it.
    let out = relay_in(
        &r,
        &outside,
        &[
            "terminal",
            "start",
            "--project",
            "home",
            "--template",
            "shell",
            "--directory",
            "~/project",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mut s: Value =
        serde_json::from_slice(&std::fs::read(r.config.join("settings.json")).unwrap()).unwrap();
    for t in s["terminal_templates"].as_array_mut().unwrap() {
        if t["id"] == "claude-code" {
            t["allow_home_directory"] = json!(true);
        }
    }
    r.write_settings(&s);
    let out = relay_in(&r, &outside, &["session", "start", "--project", "home"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains(&r.home.display().to_string()),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_folder_whose_name_is_not_utf8_is_refused_never_replaced_by_the_projects_folder() {
    use std::os::unix::ffi::OsStrExt;
    let (r, _) = first_run();
    let odd = r
        .home
        .join("src")
        .join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
    std::fs::create_dir_all(&odd).unwrap();
    for args in [
        &[
            "terminal",
            "start",
            "--project",
            "home",
            "--template",
            "shell",
        ][..],
        &["session", "start", "--project", "home"][..],
        &["sandbox", "shell", "--", "-c", "true"][..],
    ] {
        let out = relay_in(&r, &odd, args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("not UTF-8"), "{args:?}: {stderr}");
    }
    // Nothing started anywhere: not in the project's folder, not in the home.
    let listed = r.cli_json(&["terminal", "list"]);
    assert_eq!(listed["terminals"], json!([]), "{listed}");
    let listed = r.cli_json(&["session", "list"]);
    assert_eq!(listed["sessions"], json!([]), "{listed}");
}
