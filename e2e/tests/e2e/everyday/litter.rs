//! Nothing relay made for a session stays behind: the empty `.git`, `.vscode`, `.idea`
//! and `.claude` relay makes so that bubblewrap can hold them read-only go once no
//! running sandbox holds them, and at the next start after relay was killed
//! (docs/session-host.md#execution-bearing-files).

use std::path::Path;
use std::process::Stdio;

use relay_e2e::daemon::{base_settings, Relay};

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// What relay makes in a project folder with no repository and none of them.
const MADE: [&str; 4] = [".claude", ".git", ".idea", ".vscode"];

#[test]
fn nothing_relay_made_for_a_session_stays_in_the_folder_it_started_in() {
    let r = Relay::start(base_settings(None));
    let before = listing(&r.project);
    for name in MADE {
        assert!(!before.iter().any(|n| n == name), "{name} in {before:?}");
    }
    // A terminal holds what relay made while a `relay sandbox` run starts and ends.
    let b = r.shell_terminal("exec sleep 600");
    let b_id = b["id"].as_str().unwrap().to_string();
    let out = r
        .cli_command(&[
            "sandbox",
            "shell",
            "--",
            "-c",
            "ls -A; echo mine > mine.txt",
        ])
        .current_dir(&r.project)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let seen = String::from_utf8_lossy(&out.stdout).into_owned();
    for name in MADE {
        assert!(
            seen.contains(name),
            "relay made no {name} for the run: {seen}"
        );
    }
    r.wait_event(|e| e["name"] == "session.exited" && e["session_id"] != b_id.as_str());
    // The terminal still runs, and what it holds is still there.
    let listed = r.cli_json(&["terminal", "list"]);
    let b_now = listed["terminals"]
        .as_array()
        .and_then(|l| l.iter().find(|t| t["id"] == b_id.as_str()).cloned())
        .unwrap_or_default();
    assert_eq!(b_now["state"], "running", "{listed}");
    for name in MADE {
        assert!(r.project.join(name).is_dir(), "{name} went while held");
    }
    // Its end takes them: the folder holds what it held before, and the run's file.
    assert_eq!(r.cli(&["terminal", "stop", "--id", &b_id]).status, 0);
    r.wait_exited(&b_id);
    let mut want = before.clone();
    want.push("mine.txt".into());
    want.sort();
    assert_eq!(listing(&r.project), want);
}

#[test]
fn what_relay_made_for_the_sessions_of_a_killed_relay_goes_at_its_next_start() {
    let mut r = Relay::start(base_settings(None));
    let before = listing(&r.project);
    // The person's own folder, empty, is never relay's to remove.
    std::fs::create_dir(r.project.join(".idea")).unwrap();
    r.shell_terminal("exec sleep 600");
    for name in MADE {
        assert!(r.project.join(name).is_dir(), "relay made no {name}");
    }
    r.kill();
    r.launch_daemon();
    let mut want = before.clone();
    want.push(".idea".into());
    want.sort();
    assert_eq!(listing(&r.project), want);
}
