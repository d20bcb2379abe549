//! Issue 39: a fork bomb or a memory hog in one session took the whole login down,
//! relay with it: there were no per-session limits. Now each sandboxed session runs in
//! a cgroup of its own with `pids.max`, `memory.max` and `cpu.weight` (src/limits/),
//! and a limit reached says so in the session's end (docs/settings.md#limits).
//!
//! Both attacks are bounded in themselves (300 forks, 512 MiB), and the limits are
//! small, so that a run without the guard (the guard-removal check) cannot put the
//! machine in danger either.

use relay_e2e::daemon::{base_settings, Relay};
use serde_json::{json, Value};

/// Forks up to 300 children that wait on a pipe, keeps trying after a refusal as a
/// bomb does, writes how many it made and how many were refused, then holds them.
const BOMB: &str = r#"
import os, sys
r, w = os.pipe()
made, refused = 0, 0
for i in range(300):
    try:
        pid = os.fork()
    except OSError:
        refused += 1
        continue
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    made += 1
out = os.path.join(os.environ["HOME"], "project", "bomb.out")
with open(out + ".part", "w") as f:
    f.write("%d %d\n" % (made, refused))
os.rename(out + ".part", out)
os.read(r, 1)
"#;

/// Takes 1 MiB at a time, written, up to 512 MiB; prints `survived` if it got there.
const HOG: &str = r#"
held = []
for i in range(512):
    held.append(b"x" * (1 << 20))
print("survived", flush=True)
"#;

/// The settings with the `shell` template's limits.
fn limited(limits: Value) -> Value {
    let mut s = base_settings(None);
    for t in s["terminal_templates"].as_array_mut().unwrap() {
        if t["id"] == "shell" {
            t["limits"] = limits.clone();
        }
    }
    s
}

/// Whether the instance's sessions get a cgroup (`relay sandbox explain`); the test
/// says so and stops where they do not (macOS, a login without a delegated cgroup).
fn cgroups_hold(r: &Relay, test: &str) -> bool {
    if relay_e2e::bwrap_only(test) {
        return false;
    }
    let x = r.cli_json(&["sandbox", "explain", "shell"]);
    let by = x["limits"]["by"].as_str().unwrap_or_default().to_string();
    if !by.starts_with("cgroup") {
        eprintln!(
            "{test}: does not apply here: relay has no cgroup it can write ({})",
            x["limits"]
        );
        return false;
    }
    true
}

/// The session's `session_end` row, once written.
fn end_row(r: &Relay, id: &str) -> Value {
    r.wait_exited(id);
    r.audit_rows()
        .into_iter()
        .find(|row| row["action"] == "session_end" && row["session_id"] == id)
        .expect("a session_end row")
}

#[test]
fn a_fork_bomb_in_a_sandbox_shell_holds_within_its_limit_and_leaves_relay_and_another_session_responsive(
) {
    let test = "a_fork_bomb_in_a_sandbox_shell_holds_within_its_limit_and_leaves_relay_and_another_session_responsive";
    let r = Relay::start(limited(
        json!({"pids_max": 64, "memory_max_mib": 256, "cpu_weight": 50}),
    ));
    if !cgroups_hold(&r, test) {
        return;
    }
    std::fs::write(r.project.join("bomb.py"), BOMB).unwrap();
    let bomb = r.shell_terminal("exec python3 \"$HOME/project/bomb.py\"");
    let id = bomb["id"].as_str().unwrap().to_string();
    let out = r.project.join("bomb.out");
    assert!(
        relay_e2e::wait::until(relay_e2e::WAIT, || out.exists()),
        "the bomb wrote no count"
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let (made, refused): (u32, u32) = {
        let mut w = text.split_whitespace().map(|n| n.parse().unwrap());
        (w.next().unwrap(), w.next().unwrap())
    };
    // The session holds at most 64 tasks: the shim, bwrap's, python and its children.
    assert!(made < 64 && refused > 0, "made {made}, refused {refused}");
    // Its CPU weight is written in its own cgroup, or said not to hold.
    let explained = r.cli_json(&["sandbox", "explain", "shell"])["limits"].clone();
    match cpu_weight_written(r.daemon_pid().unwrap(), &id) {
        Some((file, value)) => {
            let want = if file == "cpu.shares" { "512" } else { "50" };
            assert_eq!(value.trim(), want, "{file}");
            assert_eq!(explained["not_in_force"], json!(null), "{explained}");
        }
        None => assert!(
            explained["not_in_force"][0]
                .as_str()
                .is_some_and(|l| l.starts_with("CPU weight 50: not in force")),
            "{explained}"
        ),
    }

    // While the bomb holds: relay answers, and another session starts, runs and ends.
    let (code, said) = r.sandbox_shell("echo another session");
    assert_eq!((code, said.trim()), (0, "another session"));
    let tail = r.cli(&["audit", "--tail", "5", "--json"]);
    assert_eq!(tail.status, 0, "{}", tail.stderr);

    // Stopped, the bomb's session says which limit it reached.
    let (status, v, _) = r.api("DELETE", &format!("/api/terminals/{id}"), None);
    assert!((200..300).contains(&status), "{status} {v}");
    let row = end_row(&r, &id);
    assert_eq!(row["error"], "pids_limit", "{row}");
    let reached = row["limits"]["reached"].as_str().unwrap_or_default();
    assert!(reached.starts_with("process limit 64 reached"), "{row}");
    let launch = r
        .audit_rows()
        .into_iter()
        .find(|row| row["action"] == "session_launch" && row["session_id"] == id.as_str())
        .expect("a launch row");
    assert_eq!(launch["limits"]["pids_max"], 64, "{launch}");
}

#[test]
fn a_memory_hog_in_a_sandbox_is_killed_and_its_session_says_why() {
    let test = "a_memory_hog_in_a_sandbox_is_killed_and_its_session_says_why";
    let r = Relay::start(limited(json!({"pids_max": 64, "memory_max_mib": 64})));
    if !cgroups_hold(&r, test) {
        return;
    }
    std::fs::write(r.project.join("hog.py"), HOG).unwrap();
    let hog = r.shell_terminal("exec python3 \"$HOME/project/hog.py\"");
    let id = hog["id"].as_str().unwrap().to_string();
    let row = end_row(&r, &id);
    assert_eq!(row["error"], "memory_limit", "{row}");
    // Killed by SIGKILL, as bwrap's init reports it.
    assert_eq!(row["exit_status"], 137, "{row}");
    let reached = row["limits"]["reached"].as_str().unwrap_or_default();
    assert!(
        reached.starts_with("memory limit 64 MiB reached: 1 process killed"),
        "{row}"
    );
    // The terminal's entry says it too, and relay goes on.
    let (_, list, _) = r.api("GET", "/api/terminals", None);
    let entry = list["terminals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id.as_str())
        .cloned()
        .expect("the terminal listed");
    assert_eq!(entry["exit_reason"], "memory_limit", "{entry}");
    let (code, said) = r.sandbox_shell("echo still here");
    assert_eq!((code, said.trim()), (0, "still here"));

    // A `relay sandbox` run says it on the person's terminal, and exits as the hog did.
    let out = r
        .cli_command(&[
            "sandbox",
            "shell",
            "--",
            "-c",
            "exec python3 \"$HOME/project/hog.py\"",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(137), "{stderr}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("survived"));
    assert!(
        stderr.contains(" ended: memory limit 64 MiB reached: 1 process killed"),
        "{stderr}"
    );
}

/// The daemon's cgroup v1 folder of `controller` (`/sys/fs/cgroup/<controller>/<path>`),
/// when the machine has one.
fn v1_dir(pid: u32, controller: &str) -> Option<std::path::PathBuf> {
    let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = cg.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, c, p) = (f.next()?, f.next()?, f.next()?);
        c.split(',').any(|x| x == controller).then(|| p.to_string())
    })?;
    let root = std::path::Path::new("/sys/fs/cgroup").join(controller);
    root.is_dir()
        .then(|| root.join(path.trim_start_matches('/')))
}

/// This process's pid namespace, as relay names its cgroup folders (`relay-<ns>-<pid>`).
fn pid_ns() -> String {
    let ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let ns = ns.to_string_lossy();
    ns["pid:[".len()..ns.len() - 1].to_string()
}

/// The CPU weight the kernel holds for the session `id` of the relay `pid`, as its file
/// and value: v1 `cpu.shares`, v2 `cpu.weight`; `None` where the session has no such
/// file (no cpu controller).
fn cpu_weight_written(pid: u32, id: &str) -> Option<(&'static str, String)> {
    let name = format!("relay-{}-{pid}", pid_ns());
    let (dir, file) = match v1_dir(pid, "cpu") {
        Some(cpu) => (cpu.join(name), "cpu.shares"),
        None => {
            let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
            let path = cg.lines().find_map(|l| l.strip_prefix("0::"))?;
            let path = path.strip_suffix("/daemon").unwrap_or(path);
            let own = std::path::Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
            (own.join(name), "cpu.weight")
        }
    };
    let value = std::fs::read_to_string(dir.join(id).join(file)).ok()?;
    Some((file, value))
}

/// A `sleep` of the test's own, moved into the cgroups `dirs`.
fn sleeper_in(dirs: &[std::path::PathBuf]) -> std::process::Child {
    let child = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    for d in dirs {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("cgroup.procs"), child.id().to_string()).unwrap();
    }
    child
}

#[test]
fn after_relay_is_killed_what_its_sessions_left_in_their_cgroups_is_ended_at_the_next_start_and_a_live_relays_is_not(
) {
    let test = "after_relay_is_killed_what_its_sessions_left_in_their_cgroups_is_ended_at_the_next_start_and_a_live_relays_is_not";
    let mut r = Relay::start(limited(json!({"pids_max": 64})));
    if !cgroups_hold(&r, test) {
        return;
    }
    let pid = r.daemon_pid().unwrap();
    let (Some(pids), Some(memory)) = (v1_dir(pid, "pids"), v1_dir(pid, "memory")) else {
        eprintln!("{test}: does not apply here: relay's cgroups are not v1");
        return;
    };
    let ns = pid_ns();
    let dead = format!("relay-{ns}-{pid}");
    assert!(
        pids.join(&dead).is_dir(),
        "no {dead} under {}",
        pids.display()
    );
    r.kill();

    // A stray of the dead relay's, by the kernel's word: in a session cgroup of its
    // folder. And one in the folder of a relay that runs (this test's own pid).
    let stray_dirs = [
        pids.join(&dead).join("t-stray"),
        memory.join(&dead).join("t-stray"),
    ];
    let mut stray = sleeper_in(&stray_dirs);
    let live = format!("relay-{ns}-{}", std::process::id());
    let live_dirs = [
        pids.join(&live).join("t-live"),
        memory.join(&live).join("t-live"),
    ];
    let mut bystander = sleeper_in(&live_dirs);

    r.launch_daemon();
    let ended = relay_e2e::wait::child_within(&mut stray, relay_e2e::WAIT);
    let _ = stray.kill();
    let _ = stray.wait();
    let still = bystander.try_wait().unwrap();
    let _ = bystander.kill();
    let _ = bystander.wait();
    for d in live_dirs
        .iter()
        .chain(&[pids.join(&live), memory.join(&live)])
    {
        relay_e2e::wait::until(relay_e2e::WAIT, || std::fs::remove_dir(d).is_ok());
    }
    assert!(ended.is_some(), "the stray still runs");
    assert_eq!(still, None, "the live relay's process was ended");
    assert!(!pids.join(&dead).exists() && !memory.join(&dead).exists());
}
