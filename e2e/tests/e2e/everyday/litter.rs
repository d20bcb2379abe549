//! Nothing relay made for a session stays behind: the empty `.vscode`, `.idea` and
//! `.claude` relay makes so that bubblewrap can hold them read-only go once no
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

/// What relay makes in a project folder with none of them (a `.git` it does not make:
/// `git init` is the session's there).
const MADE: [&str; 3] = [".claude", ".idea", ".vscode"];

#[test]
fn nothing_relay_made_for_a_session_stays_in_the_folder_it_started_in() {
    let r = Relay::start(base_settings(None));
    // A project with something in it (an empty one is the session's own: nothing is
    // made there at all, git_by_claude::git_clone_into_the_empty_folder…).
    std::fs::write(r.project.join("README"), "mine\n").unwrap();
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

#[test]
fn a_session_cannot_plant_vscode_tasks_when_another_relays_session_on_its_project_ends() {
    // Two relays (two config dirs) on one project folder.
    let a = Relay::start(base_settings(None));
    let mut s = base_settings(None);
    s["projects"][0]["path"] = serde_json::json!(a.project);
    let b = Relay::start(s);
    let project = a.project.clone();
    let fifo = project.join("go.fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    // a makes the empty read-only .vscode; b's session, found it there and holds it,
    // waits.
    let held = a.shell_terminal("exec sleep 600");
    let held_id = held["id"].as_str().unwrap().to_string();
    assert!(project.join(".vscode").is_dir());
    let script = format!(
        "cd {p} && read go < go.fifo; \
         if mkdir -p .vscode 2>/dev/null && echo '{{\"tasks\": []}}' > .vscode/tasks.json 2>/dev/null; \
         then echo planted; else echo refused; fi > plant.txt",
        p = project.display()
    );
    let planter = b.shell_terminal(&script);
    let planter_id = planter["id"].as_str().unwrap().to_string();
    // a's session ends: its sweep must leave what b's sandbox holds.
    assert_eq!(a.cli(&["terminal", "stop", "--id", &held_id]).status, 0);
    a.wait_exited(&held_id);
    // The write waits for b's reader; b's exit is what the test waits on.
    std::thread::spawn(move || std::fs::write(&fifo, "go\n"));
    b.wait_exited(&planter_id);
    let said = std::fs::read_to_string(project.join("plant.txt")).unwrap_or_default();
    assert_eq!(
        said.trim(),
        "refused",
        "b's session wrote .vscode/tasks.json"
    );
    assert!(!project.join(".vscode/tasks.json").exists());
    assert!(
        project.join(".vscode").is_dir(),
        "relay's .vscode went while b held it"
    );
}
