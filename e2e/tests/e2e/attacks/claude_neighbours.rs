//! Claude's neighbours: a token launch whose template routes Claude Code to a loopback
//! gateway (`ANTHROPIC_BASE_URL=http://127.0.0.1:<port>`, the port bridged by its egress
//! list) sends every request, bearer and all, through relay's forwarder inside the
//! sandbox. The forwarder (`relay-forward`) shares the sandbox's pid and network
//! namespaces with Claude's tools. A shielded Bash command that killed it and then
//! listened on the bridged port would take Claude's next request, token included. The
//! shield refuses each step: no signal leaves a command's own Landlock domain, and no
//! TCP port but the template's `listen_ports` can be bound
//! (docs/THREAT-MODEL.md#claudes-tools-cannot-reach-claude). A forwarder that dies
//! anyway stops the session at once (its lifeline, docs/session-host.md#the-egress-proxy),
//! and a background job is still Claude's own to stop (its `TaskStop` tool).

use std::path::Path;

use relay_e2e::daemon::{Relay, TOKEN_SETTING};
use relay_e2e::fakeapi::FakeApi;
use relay_e2e::procs::{alive, kill9};
use relay_e2e::{random_hex, wait, WAIT};
use serde_json::{json, Value};

use crate::clients::real_claude::claude_code;
use crate::clients::real_turns::{
    assert_every_bearer_is, assert_the_token_went_to_the_stand_in_alone, assert_token_nowhere,
    fake_oauth_token, message, session_entry, settings, start_session,
};

/// The port a tool of these tests' template may listen on (`listen_ports`).
const LISTEN_PORT: u16 = 3000;

/// Whether the shield can hold here (Landlock ABI 6) and the tools the probes use are
/// installed; under CI nothing is skipped.
fn shield_here() -> bool {
    let abi = relay_shim::landlock::abi_version().unwrap_or(0);
    let why = if abi < relay_shim::landlock::MIN_SHIELD_ABI {
        format!("the shield needs Landlock ABI 6 (Linux 6.12); this kernel has {abi}")
    } else if !on_path("python3") {
        "python3 not found".to_string()
    } else {
        return true;
    };
    assert!(
        std::env::var_os("CI").is_none(),
        "{why} (CI is set: nothing is skipped)"
    );
    eprintln!("skip: {why}");
    false
}

/// Whether `tool` is in one of this process's `PATH` folders.
fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// A relay with the real Claude Code on the token, its template routed to `api` on
/// loopback, that port bridged by its egress list (a proxied sandbox: Claude's requests
/// go through the forwarder), and [`LISTEN_PORT`] its tools' to listen on.
fn gateway_relay(claude: &Path, script: &Value) -> (Relay, FakeApi, String) {
    let mut r = Relay::prepare(None, false);
    let api = FakeApi::start(&r.root, script);
    let token = fake_oauth_token();
    r.write_token(&token);
    let mut s = settings(claude, &api, Some(TOKEN_SETTING));
    s["terminal_templates"][0]["egress"] = json!([format!("127.0.0.1:{}", api.port)]);
    s["terminal_templates"][0]["listen_ports"] = json!([LISTEN_PORT]);
    r.write_settings(&s);
    r.launch_daemon();
    (r, api, token)
}

/// The `/proc/<pid>/stat` fields after the command name (state, ppid, …).
fn stat(pid: u32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let at = s.rfind(')')?;
    Some(s[at + 1..].split_whitespace().map(String::from).collect())
}

/// The name of `pid` (`/proc/<pid>/comm`), empty when it is gone.
fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end().to_string())
        .unwrap_or_default()
}

/// Every running process below `root` (its children, theirs, …), as this test's pid
/// namespace numbers them.
fn descendants(root: u32) -> Vec<u32> {
    let parents: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            Some((pid, parent(pid)?))
        })
        .collect();
    let mut out = vec![];
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(child, parent) in &parents {
            if parent == p && !out.contains(&child) {
                out.push(child);
                frontier.push(child);
            }
        }
    }
    out.retain(|p| alive(*p));
    out
}

/// The parent of `pid`.
fn parent(pid: u32) -> Option<u32> {
    stat(pid)?.get(1)?.parse().ok()
}

/// The session's one process named `name` (its forwarder `relay-forward`, `claude`),
/// the topmost of that name: Claude Code runs its own binary for some tools (`rg`).
/// Waited for: `session start` answers once the sandbox runs, before the forwarder and
/// Claude inside it have started.
fn session_process(r: &Relay, id: &str, name: &str) -> u32 {
    let root = session_entry(r, id)["root_pid"]
        .as_u64()
        .expect("a running session has a root pid") as u32;
    let find = || -> Vec<u32> {
        descendants(root)
            .into_iter()
            .filter(|p| comm(*p) == name && parent(*p).map(comm).as_deref() != Some(name))
            .collect()
    };
    relay_e2e::wait::until(std::time::Duration::from_secs(30), || !find().is_empty());
    let found = find();
    assert_eq!(found.len(), 1, "{name} below {root}: {found:?}");
    found[0]
}

/// A scripted call's result, as Claude Code sent it back.
fn tool_result(api: &FakeApi, tid: &str) -> Value {
    api.messages()
        .iter()
        .flat_map(|q| q["tool_results"].as_array().cloned().unwrap_or_default())
        .find(|t| t["tool_use_id"] == tid)
        .unwrap_or_else(|| panic!("no tool_result {tid} in {:?}", api.messages()))
}

/// The attack, from inside a shielded Bash command: find the forwarder (`relay-forward`)
/// and Claude; stop and kill the forwarder; listen on the bridged gateway port and on
/// the proxy port, as a command that wanted Claude's next request would; then stop and
/// kill Claude. Each step prints the kernel's answer; a stop that got through is undone
/// at once (`SIGCONT`). Also a bind of the template's `listen_ports`, which must work.
fn attack(gateway: u16) -> String {
    format!(
        r#"python3 -c '
import errno, os, signal, socket
def comm(pid):
    try:
        return open("/proc/%d/comm" % pid).read().strip()
    except OSError:
        return ""
def ppid(pid):
    s = open("/proc/%d/stat" % pid).read()
    return int(s[s.rindex(")") + 2:].split()[1])
def why(e):
    return errno.errorcode.get(e.errno, str(e.errno))
claude = os.getppid()
while claude > 1 and comm(claude) != "claude":
    claude = ppid(claude)
forwarders = [int(p) for p in os.listdir("/proc") if p.isdigit() and comm(int(p)) == "relay-forward"]
print("claude:", claude if claude > 1 else "none")
print("forwarder:", forwarders[0] if forwarders else "none")
def send(who, pid, sig, name):
    try:
        os.kill(pid, sig)
        print(who, name + ": delivered")
        if sig == signal.SIGSTOP:
            os.kill(pid, signal.SIGCONT)
    except OSError as e:
        print(who, name + ":", why(e))
def bind(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(1)
        print("bind %d: bound" % port)
    except OSError as e:
        print("bind %d: %s" % (port, why(e)))
    finally:
        s.close()
for pid in forwarders[:1]:
    send("forwarder", pid, signal.SIGSTOP, "SIGSTOP")
    send("forwarder", pid, signal.SIGKILL, "SIGKILL")
bind({gateway})
bind({proxy})
bind({listen})
if claude > 1:
    send("claude", claude, signal.SIGSTOP, "SIGSTOP")
    send("claude", claude, signal.SIGKILL, "SIGKILL")
'"#,
        proxy = relay::daemon::egress::PROXY_PORT,
        listen = LISTEN_PORT,
    )
}

#[test]
fn a_bash_tool_call_cannot_kill_the_forwarder_or_claude_nor_take_the_gateway_port() {
    let Some(claude) = claude_code() else { return };
    if !shield_here() {
        return;
    }
    let done = format!("done-{}", random_hex(4));
    // The gateway's port is the stand-in's: the script is written once it is known.
    let (r, api, token) = gateway_relay(&claude, &json!({"turns": [{"text": "ready"}]}));
    api.set_script(&json!({"turns": [
        {"text": "Taking the port.", "tool_use": [
            {"id": "toolu_attack", "name": "Bash", "input": {"command": attack(api.port), "description": "take the gateway's port"}},
        ]},
        {"text": done},
    ]}));
    let id = start_session(&r, &[]);
    let (forwarder, claude_pid) = (
        session_process(&r, &id, "relay-forward"),
        session_process(&r, &id, "claude"),
    );
    let out = message(&r, &id, "listen on the gateway's port", &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, format!("{done}\n"));

    let result = tool_result(&api, "toolu_attack");
    let text = result["text"].as_str().unwrap_or_default();
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    // It found both, and the kernel refused it each of them and both ports.
    assert!(
        !lines.contains(&"claude: none") && !lines.contains(&"forwarder: none"),
        "{result}"
    );
    let gateway = api.port;
    let proxy = relay::daemon::egress::PROXY_PORT;
    for want in [
        "forwarder SIGSTOP: EPERM".to_string(),
        "forwarder SIGKILL: EPERM".to_string(),
        format!("bind {gateway}: EACCES"),
        format!("bind {proxy}: EACCES"),
        "claude SIGSTOP: EPERM".to_string(),
        "claude SIGKILL: EPERM".to_string(),
        // The template's own port is still the tools'.
        format!("bind {LISTEN_PORT}: bound"),
    ] {
        assert!(lines.contains(&want.as_str()), "no {want:?} in {result}");
    }
    // Both still run, the same processes, and the session goes on.
    assert!(alive(forwarder) && comm(forwarder) == "relay-forward");
    assert!(alive(claude_pid) && comm(claude_pid) == "claude");
    assert_eq!(session_entry(&r, &id)["state"], "running");
    // The sandbox's explanation names the ports the tools may listen on.
    let (status, x, _) = r.api("GET", &format!("/api/sessions/{id}/sandbox"), None);
    assert_eq!(status, 200, "{x}");
    let listening = format!("listen on a TCP port but the template's listen_ports ({LISTEN_PORT})");
    assert!(
        x["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains(&listening)),
        "{x}"
    );

    let requests = api.messages();
    assert_the_token_went_to_the_stand_in_alone(&r, &api, &requests, &token, &out.stdout);
}

/// The network namespace `pid` is in (the `/proc/<pid>/ns/net` link).
fn net_ns(pid: u32) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/net")).ok()
}

/// Every process in the network namespace `ns`.
fn in_net_ns(ns: &Path) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| net_ns(*p).as_deref() == Some(ns) && alive(*p))
        .collect()
}

#[test]
fn the_forwarder_killed_from_outside_stops_the_session_saying_why() {
    let Some(claude) = claude_code() else { return };
    if !shield_here() {
        return;
    }
    let (r, api, token) = gateway_relay(&claude, &json!({"turns": [{"text": "pong"}]}));
    let id = start_session(&r, &[]);
    let out = message(&r, &id, "ping", &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "pong\n");
    let forwarder = session_process(&r, &id, "relay-forward");
    // The sandbox's own network, where the forwarder held the gateway's port.
    let ns = net_ns(forwarder).expect("the forwarder's network namespace");
    assert_ne!(net_ns(std::process::id()).as_ref(), Some(&ns));
    kill9(forwarder);

    // The session stops at once, and its end says why, everywhere it is recorded.
    let exited = r.wait_exited(&id);
    assert_eq!(exited["reason"], "forwarder_died", "{exited}");
    let e = session_entry(&r, &id);
    assert_eq!(e["state"], "dormant", "{e}");
    assert_eq!(e["exit_reason"], "forwarder_died", "{e}");
    let row = r
        .audit_rows()
        .into_iter()
        .find(|a| a["action"] == "session_end" && a["session_id"] == id.as_str())
        .expect("a session_end row");
    assert_eq!(row["error"], "forwarder_died", "{row}");
    assert!(
        r.output_text().contains(&format!(
            "session {id}: its egress forwarder died; stopping it"
        )),
        "{}",
        r.output_text()
    );
    // Nothing is left in the sandbox's network to listen on the port.
    assert!(
        wait::until(WAIT, || in_net_ns(&ns).is_empty()),
        "still in the sandbox's network: {:?}",
        in_net_ns(&ns)
    );
    // A turn now is refused, not sent anywhere.
    let before = api.messages().len();
    let out = message(&r, &id, "anyone there?", &[]);
    assert_eq!(out.status, 1, "{}", out.stdout);
    assert_eq!(api.messages().len(), before);
    assert_every_bearer_is(&api, &api.messages(), &token);
    assert_token_nowhere(&r, &token, &[]);
}

/// The job a background Bash command leaves running: `sleep`, named by `marker` (its
/// `argv[0]`, `exec -a`) so the test finds it from outside.
fn job(marker: &str) -> String {
    format!("exec -a {marker} sleep 600")
}

/// A later Bash command that finds the job by its name and sends it SIGTERM, printing
/// the kernel's answer.
fn later_kill(marker: &str) -> String {
    format!(
        r#"python3 -c '
import errno, os, signal
def cmdline(pid):
    try:
        return open("/proc/%d/cmdline" % pid, "rb").read().split(b"\0")[0]
    except OSError:
        return b""
jobs = [int(p) for p in os.listdir("/proc") if p.isdigit() and cmdline(int(p)) == b"{marker}"]
print("jobs:", len(jobs))
for pid in jobs:
    try:
        os.kill(pid, signal.SIGTERM)
        print("later kill: delivered")
    except OSError as e:
        print("later kill:", errno.errorcode.get(e.errno, str(e.errno)))
'"#
    )
}

/// The running processes whose `argv[0]` is `marker`.
fn jobs_named(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).next() == Some(marker.as_bytes()))
                && alive(*p)
        })
        .collect()
}

#[test]
fn a_background_job_a_later_command_cannot_signal_is_still_stopped_by_claudes_task_stop() {
    let Some(claude) = claude_code() else { return };
    if !shield_here() {
        return;
    }
    let marker = format!("relay-e2e-job-{}", random_hex(4));
    let script = json!({"turns": [
        {"text": "Starting it.", "tool_use": [
            {"id": "toolu_job", "name": "Bash", "input": {"command": job(&marker), "description": "a job", "run_in_background": true}},
        ]},
        {"text": "started"},
    ]});
    let (r, api, token) = gateway_relay(&claude, &script);
    let id = start_session(&r, &[]);
    let out = message(&r, &id, "start the job", &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "started\n");
    let started = tool_result(&api, "toolu_job");
    let text = started["text"].as_str().unwrap_or_default();
    let task = text
        .split("with ID: ")
        .nth(1)
        .and_then(|t| t.split(['.', ' ']).next())
        .unwrap_or_else(|| panic!("no task id in {started}"))
        .to_string();
    let running = jobs_named(&marker);
    assert_eq!(running.len(), 1, "{running:?}");

    // The next turn: a later Bash command cannot signal it (each shielded command is a
    // domain of its own); Claude's own tool stops it.
    api.set_script(&json!({"turns": [
        {"text": "Killing it.", "tool_use": [
            {"id": "toolu_kill", "name": "Bash", "input": {"command": later_kill(&marker), "description": "kill the job"}},
        ]},
        {"text": "Stopping it.", "tool_use": [
            {"id": "toolu_stop", "name": "TaskStop", "input": {"task_id": task}},
        ]},
        {"text": "stopped"},
    ]}));
    let out = message(&r, &id, "stop the job", &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, "stopped\n");
    let killed = tool_result(&api, "toolu_kill");
    let lines: Vec<&str> = killed["text"]
        .as_str()
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .collect();
    assert!(
        lines.contains(&"jobs: 1") && lines.contains(&"later kill: EPERM"),
        "{killed}"
    );
    let stopped = tool_result(&api, "toolu_stop");
    assert_ne!(stopped["is_error"], true, "{stopped}");
    assert!(
        stopped["text"]
            .as_str()
            .is_some_and(|t| t.contains(&format!("Successfully stopped task: {task}"))),
        "{stopped}"
    );
    assert!(
        wait::until(WAIT, || !alive(running[0])),
        "TaskStop left the job running: {stopped}"
    );
    assert_every_bearer_is(&api, &api.messages(), &token);
    assert_token_nowhere(&r, &token, &[]);
}
