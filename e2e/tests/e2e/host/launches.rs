//! The host on its own: the real host, shim, bwrap and fakes, the test playing the
//! daemon (harness `Instance`). The helpers here do by hand what the daemon does for a
//! launch.

use std::path::{Path, PathBuf};

use relay::protocol::{Backend, HostCode, LaunchRequest, PtySize, Secret, SessionKind};
use relay::sandbox::{build_spec, render_bwrap, render_sbpl, Network, SpecInput};
use relay_e2e::*;
use serde_json::Value;

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The token file a power user keeps: `<home>/.config/acme-ltt/token`, 0600, with a
/// trailing newline (the daemon trims it).
fn write_token(inst: &Instance) -> (PathBuf, String) {
    use std::os::unix::fs::PermissionsExt;
    let token = fake_token();
    let dir = inst.home.join(".config/acme-ltt");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    (path, token)
}

/// What the daemon will do for a sandboxed launch, done here by hand: a template that
/// grants `~` read-write (so the token's folder is inside a grant), the binaries'
/// folder read-only, the token file and the state dir denied.
struct Prepared {
    #[allow(dead_code)]
    profile: PathBuf,
}

fn sandbox_inputs(inst: &Instance, token_path: &Path) -> (Vec<String>, Vec<String>, Vec<String>) {
    let read = vec![s(&bin_dir())];
    let read_write = vec!["~".to_string(), s(&inst.project), s(&inst.tmp)];
    let deny = vec![s(token_path), s(&inst.state)];
    (read, read_write, deny)
}

fn prepare_bwrap(
    inst: &Instance,
    req: &mut LaunchRequest,
    token_path: &Path,
    interactive: bool,
) -> Prepared {
    let (read, read_write, deny) = sandbox_inputs(inst, token_path);
    let spec = build_spec(
        &SpecInput {
            read: &read,
            read_write: &read_write,
            deny: &deny,
            network: Network::Shared {
                denied_loopback_ports: vec![],
            },
            workdir: &req.directory,
            interactive,
            file_mask: mask(inst),
            read_only: &[],
            state: &[],
            session_writable: &[],
            deny_unix_sockets: vec![inst.socket(), inst.bridge.path.clone()],
        },
        &inst.home,
    )
    .expect("spec");
    let bytes =
        relay::sandbox::bwrap_profile::encode(&render_bwrap(&spec)).expect("encode profile");
    let profile = inst.with_profile(req, Backend::Bwrap, &bytes, None);
    Prepared { profile }
}

/// The mode-0000 file masks are made of, as the daemon keeps one in its config dir.
fn mask(inst: &Instance) -> PathBuf {
    let p = inst.state.join("mask");
    relay::daemon::ensure_mask(&p).expect("mask file");
    p
}

fn fakeagent_headless() -> Vec<String> {
    vec![
        s(&bin("fakeagent")),
        "-p".into(),
        "--input-format".into(),
        "stream-json".into(),
        "--output-format".into(),
        "stream-json".into(),
        "--verbose".into(),
    ]
}

/// A sandboxed (bwrap) claude session with identity and the token.
fn claude_session(
    inst: &Instance,
    id: &str,
    token_path: &Path,
    token: &str,
) -> (LaunchRequest, Prepared) {
    let mut req = inst.request_for(id, SessionKind::Claude, fakeagent_headless());
    inst.with_identity(&mut req);
    let prepared = prepare_bwrap(inst, &mut req, token_path, false);
    req.claude_token = Some(Secret::new(token));
    (req, prepared)
}

fn start_line_for<'a>(lines: &'a [Value], id: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["env"]["RELAY_SESSION_ID"] == id)
        .unwrap_or_else(|| panic!("no start line for {id} in {lines:?}"))
}

fn reply(inst: &Instance, id: &str, text: &str) -> String {
    let (status, v) = inst.message(id, text);
    assert_eq!(status, 200, "message {text:?}: {v}");
    v["text"].as_str().unwrap_or_default().to_string()
}

/// The token must not appear in anything the instance produced: host output, every
/// file under the instance folder except the token file itself.
fn assert_token_nowhere(inst: &Instance, token: &str, token_path: &Path, extra: &[(&str, &[u8])]) {
    assert_absent(&inst.host_output(), token, "the host's stdout/stderr");
    for (path, bytes) in inst.all_files(&[token_path]) {
        assert_absent(&bytes, token, &path.display().to_string());
    }
    for (place, bytes) in extra {
        assert_absent(bytes, token, place);
    }
}

#[test]
fn token_reaches_target_on_fd5_and_a_grandchild_reads_nothing() {
    if bwrap_only("token_reaches_target_on_fd5_and_a_grandchild_reads_nothing") {
        return;
    }
    let inst = Instance::start();
    let (token_path, token) = write_token(&inst);
    let (req, _p) = claude_session(&inst, "s-fd5", &token_path, &token);
    let (status, body, raw) = inst.launch(&req);
    assert_eq!(status, 201, "launch: {body}");

    let echo = reply(&inst, "s-fd5", "hello");
    assert_eq!(echo, "echo: hello");
    let lines = inst.start_lines();
    let line = start_line_for(&lines, "s-fd5");
    assert_eq!(line["env"]["CLAUDE_CODE_OAUTH_TOKEN_FILE_DESCRIPTOR"], "5");
    assert_eq!(
        line["token_sha256"],
        sha256_hex(token.as_bytes()),
        "start line: {line}"
    );
    assert_eq!(line["token_bytes"], token.len());

    // The pipe was drained by the target: a grandchild reading fd 5 gets nothing.
    let grandchild = reply(&inst, "s-fd5", "!sh wc -c <&5");
    assert_eq!(
        grandchild.trim(),
        "exit: 0\n0",
        "grandchild read: {grandchild:?}"
    );

    let (st, _, _) = inst.request(
        "POST",
        "/terminate",
        Some(&serde_json::json!({"session_id":"s-fd5"})),
    );
    assert_eq!(st, 200);
    inst.wait_exit("s-fd5");
    assert_token_nowhere(
        &inst,
        &token,
        &token_path,
        &[
            ("the launch answer", &raw),
            ("replies", grandchild.as_bytes()),
        ],
    );
}

#[test]
fn target_fd_table_is_exactly_0_1_2_5_despite_stray_host_fds() {
    if bwrap_only("target_fd_table_is_exactly_0_1_2_5_despite_stray_host_fds") {
        return;
    }
    // The host inherits stray descriptors, one of them on the token file itself.
    let pre = tempfile::tempdir().unwrap();
    let stray_token = pre.path().join("stray-token");
    let token = fake_token();
    std::fs::write(&stray_token, &token).unwrap();
    let inst = Instance::start_with(InstanceOptions {
        stray_files: vec![stray_token.clone(), "/etc/hostname".into()],
    });
    // The test is only meaningful if the host really holds the strays.
    let host_fds: Vec<PathBuf> = std::fs::read_dir(format!("/proc/{}/fd", inst.host_pid))
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .collect();
    assert!(
        host_fds.contains(&stray_token),
        "host does not hold the stray token fd: {host_fds:?}"
    );

    let (token_path, _) = write_token(&inst);
    for backend in ["bwrap", "none"] {
        let id = format!("s-fds-{backend}");
        let mut req = inst.request_for(&id, SessionKind::Claude, fakeagent_headless());
        inst.with_identity(&mut req);
        if backend == "bwrap" {
            prepare_bwrap(&inst, &mut req, &token_path, false);
            req.claude_token = Some(Secret::new(token.clone()));
        }
        let (status, body, _) = inst.launch(&req);
        assert_eq!(status, 201, "launch {backend}: {body}");
        reply(&inst, &id, "hi");
        let lines = inst.start_lines();
        let line = start_line_for(&lines, &id);
        let want: Vec<u64> = if backend == "bwrap" {
            vec![0, 1, 2, 5]
        } else {
            vec![0, 1, 2]
        };
        let fds: Vec<u64> = line["fds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        assert_eq!(fds, want, "fd table inside the target ({backend})");
    }
    assert_token_nowhere(&inst, &token, &token_path, &[]);
}

#[test]
fn missing_or_non_executable_target_is_spawn_failed_not_a_start() {
    if bwrap_only("missing_or_non_executable_target_is_spawn_failed_not_a_start") {
        return;
    }
    let inst = Instance::start();
    let (token_path, token) = write_token(&inst);
    let not_exec = inst.project.join("not-exec");
    std::fs::write(&not_exec, "#!/bin/sh\n").unwrap();
    let cases = [
        ("s-missing-plain", "/nonexistent/claude", false),
        ("s-missing-bwrap", "/nonexistent/claude", true),
        ("s-noexec-plain", not_exec.to_str().unwrap(), false),
    ];
    for (id, program, sandboxed) in cases {
        let mut req = inst.request_for(id, SessionKind::Claude, vec![program.to_string()]);
        inst.with_identity(&mut req);
        if sandboxed {
            prepare_bwrap(&inst, &mut req, &token_path, false);
            req.claude_token = Some(Secret::new(token.clone()));
        }
        let (status, body, raw) = inst.launch(&req);
        assert_eq!(status, 500, "{id}: {body}");
        assert_eq!(
            body["error"],
            HostCode::SpawnFailed.as_str(),
            "{id}: {body}"
        );
        assert_absent(&raw, &token, "the refusal");
        let (_, list, _) = inst.request("GET", "/sessions", None);
        assert_eq!(
            list["sessions"],
            serde_json::json!([]),
            "{id} left a session behind"
        );
    }
    assert_token_nowhere(&inst, &token, &token_path, &[]);
}

#[test]
fn token_file_masked_while_home_granted_rw_even_through_links_proc_and_umount() {
    if bwrap_only("token_file_masked_while_home_granted_rw_even_through_links_proc_and_umount") {
        return;
    }
    let inst = Instance::start();
    let (token_path, token) = write_token(&inst);
    // A link planted before the launch (by an earlier session, say) in the granted home.
    let planted = inst.home.join("planted-link");
    std::os::unix::fs::symlink(&token_path, &planted).unwrap();
    let (req, _p) = claude_session(&inst, "s-mask", &token_path, &token);
    let (status, body, _) = inst.launch(&req);
    assert_eq!(status, 201, "launch: {body}");

    let tp = token_path.display();
    let mut replies = Vec::new();
    let mut ask = |text: String| {
        let r = reply(&inst, "s-mask", &text);
        replies.push(r.clone());
        r
    };
    let by_path = ask(format!("!sh cat '{tp}'; echo rc=$?"));
    assert!(by_path.contains("rc="), "{by_path}");
    let planted_read = ask(format!("!sh cat '{}'", planted.display()));
    let fresh_link = ask(format!(
        "!sh ln -s '{tp}' \"$HOME/fresh-link\" && cat \"$HOME/fresh-link\""
    ));
    let via_proc = ask(format!(
        "!sh cat '/proc/{}/root{tp}'; cat '/proc/1/root{tp}'",
        inst.host_pid
    ));
    let caps = ask("!sh grep -E '^Cap(Eff|Prm|Amb):' /proc/self/status".into());
    let umount = ask(format!(
        "!sh umount '{tp}' || umount -l '{tp}'; echo umount_rc=$?; cat '{tp}'"
    ));
    let write = ask(format!("!sh echo overwritten > '{tp}'; echo write_rc=$?"));
    // Every guard is checked and reported, so one broken guard shows all it opens.
    let mut failures = Vec::new();
    for cap in ["CapEff", "CapPrm", "CapAmb"] {
        if !caps.contains(&format!("{cap}:\t0000000000000000")) {
            failures.push(format!("{cap} is not zero inside: {caps}"));
        }
    }
    if by_path.contains("rc=0") {
        failures.push(format!(
            "reading the masked token path succeeded: {by_path}"
        ));
    }
    if umount.contains("umount_rc=0") {
        failures.push(format!("unmounting the mask worked: {umount}"));
    }
    if write.contains("write_rc=0") {
        failures.push(format!("the masked token path was writable: {write}"));
    }
    for (place, r) in [
        ("cat by path", &by_path),
        ("cat through the planted link", &planted_read),
        ("cat through a fresh link", &fresh_link),
        ("cat through /proc/<pid>/root", &via_proc),
        ("cat after umount", &umount),
    ] {
        if r.contains(token.as_str()) {
            failures.push(format!("{place} read the token"));
        }
    }
    assert!(
        failures.is_empty(),
        "sandbox guards failed:\n{}",
        failures.join("\n")
    );
    for r in [&by_path, &planted_read, &fresh_link, &via_proc, &umount] {
        assert_absent(r.as_bytes(), &token, "a probe's reply");
    }
    let _ = inst.request(
        "POST",
        "/terminate",
        Some(&serde_json::json!({"session_id":"s-mask"})),
    );
    inst.wait_exit("s-mask");
    assert_eq!(
        std::fs::read_to_string(&token_path).unwrap().trim(),
        token,
        "the token file was changed"
    );
    let all: Vec<u8> = replies.join("\n").into_bytes();
    assert_token_nowhere(&inst, &token, &token_path, &[("replies", &all)]);
}

#[test]
fn hard_link_or_symlinked_token_path_refuses_the_launch() {
    let inst = Instance::start();
    let (token_path, token) = write_token(&inst);

    // A hard link to the token in the granted home: a path mask cannot hide the second name.
    let second = inst.home.join("second-name");
    std::fs::hard_link(&token_path, &second).unwrap();
    let err = relay::token::read_token_file(&token_path)
        .expect_err("a hard-linked token file is refused");
    let text = err.to_string();
    assert!(
        text.contains(&s(&token_path)) && text.contains("hard links"),
        "{text}"
    );
    assert_absent(text.as_bytes(), &token, "the refusal");
    std::fs::remove_file(&second).unwrap();

    // The setting points at a symlink in a user-writable folder.
    let link = inst.home.join(".config/acme-ltt/token-link");
    std::os::unix::fs::symlink(&token_path, &link).unwrap();
    let err = relay::token::read_token_file(&link).expect_err("a symlinked token path is refused");
    assert!(err.to_string().contains("symlink"), "{err}");
    let (read, read_write, _) = sandbox_inputs(&inst, &link);
    let deny = vec![s(&link)];
    let spec = build_spec(
        &SpecInput {
            read: &read,
            read_write: &read_write,
            deny: &deny,
            network: Network::Off,
            workdir: &inst.project,
            interactive: false,
            file_mask: mask(&inst),
            read_only: &[],
            state: &[],
            session_writable: &[],
            deny_unix_sockets: vec![],
        },
        &inst.home,
    );
    let err = spec.expect_err("a deny through a planted link is refused");
    assert!(err.to_string().contains(&s(&link)), "{err}");
    assert_absent(err.to_string().as_bytes(), &token, "the refusal");
    // Nothing was launched: no start line, no session.
    assert!(inst.start_lines().is_empty());
    let (_, list, _) = inst.request("GET", "/sessions", None);
    assert_eq!(list["sessions"], serde_json::json!([]));
    assert_token_nowhere(&inst, &token, &token_path, &[]);
}

#[test]
fn seatbelt_launch_records_a_profile_that_denies_the_token_after_every_grant() {
    let inst = Instance::start();
    let (token_path, token) = write_token(&inst);
    let mut req = inst.request_for("s-sbpl", SessionKind::Claude, fakeagent_headless());
    inst.with_identity(&mut req);
    let (read, read_write, deny) = sandbox_inputs(&inst, &token_path);
    let spec = build_spec(
        &SpecInput {
            read: &read,
            read_write: &read_write,
            deny: &deny,
            network: Network::Shared {
                denied_loopback_ports: vec![4100],
            },
            workdir: &req.directory,
            interactive: false,
            file_mask: mask(&inst),
            read_only: &[],
            state: &[],
            session_writable: &[],
            deny_unix_sockets: vec![inst.socket(), inst.bridge.path.clone()],
        },
        &inst.home,
    )
    .unwrap();
    let sbpl = render_sbpl(&spec);
    // What the fake's evaluator checks this launch against: the token and the state dir
    // denied, the host's and bridge's sockets and port 4100 refused.
    inst.write_seatbelt_policy(std::slice::from_ref(&token_path), &[4100]);
    let profile = inst.with_profile(
        &mut req,
        Backend::Seatbelt,
        sbpl.as_bytes(),
        Some(relay_e2e::seatbelt::launcher()),
    );
    req.claude_token = Some(Secret::new(token.clone()));
    let (status, body, _) = inst.launch(&req);
    assert_eq!(status, 201, "launch: {body}");
    assert_eq!(reply(&inst, "s-sbpl", "hi"), "echo: hi");
    if relay_e2e::seatbelt::enforced() {
        // The real Seatbelt: the token cannot be read by path from inside.
        let r = reply(
            &inst,
            "s-sbpl",
            &format!("!sh cat '{}'", token_path.display()),
        );
        assert!(!r.starts_with("exit: 0"), "{r}");
        assert_absent(r.as_bytes(), &token, "the reply");
        return;
    }

    // The evaluator's answers: the token, as every grant's last word, is refused.
    let answers = relay_e2e::seatbelt::answers_under(&inst.tmp);
    assert_eq!(answers.len(), 1, "{answers:?}");
    use relay_e2e::seatbelt::{failed_checks, Check, Target};
    let mut checks: Vec<Check> = [
        "file-read-data",
        "file-read-metadata",
        "file-write-data",
        "file-write-unlink",
        "file-clone",
        "file-link",
    ]
    .into_iter()
    .map(|op| Check::denied(op, Target::Path(token_path.clone())))
    .collect();
    checks.push(Check::denied(
        "file-read-data",
        Target::Path(inst.state.clone()),
    ));
    checks.push(Check::denied(
        "network-outbound",
        Target::Socket(inst.socket()),
    ));
    checks.push(Check::denied("network-outbound", Target::Port(4100)));
    checks.push(Check::allowed(
        "file-read-data",
        Target::Path("/dev/fd/5".into()),
    ));
    let failed = failed_checks(&answers[0], &checks);
    assert!(
        failed.is_empty() && answers[0]["failures"] == 0,
        "the profile breaks its policy:\n{}\n{}",
        failed.join("\n"),
        answers[0]
    );

    let calls = read_jsonl(&inst.tmp.join("fake-sandbox-exec.jsonl"));
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["profile"], s(&profile));
    let digest = sha256_hex(sbpl.as_bytes());
    assert_eq!(calls[0]["sha256"], digest);
    let recorded =
        std::fs::read_to_string(inst.tmp.join(format!("fake-sandbox-exec/{digest}.sb"))).unwrap();
    let lines: Vec<&str> = recorded.lines().collect();
    let quoted = format!("\"{}\"", token_path.display());
    // The last allow that can open a file (the network's socket allows name none).
    let last_allow = lines
        .iter()
        .rposition(|l| l.starts_with("(allow") && l.contains("file-"))
        .expect("allow rules");
    let token_denies: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("(deny file-read*") && l.contains(&quoted))
        .map(|(i, _)| i)
        .collect();
    assert!(
        !token_denies.is_empty(),
        "no deny of the token path:\n{recorded}"
    );
    assert!(
        token_denies.iter().all(|&i| i > last_allow),
        "a token deny comes before a grant:\n{recorded}"
    );
    // The token still reached the target on fd 5 through the Seatbelt launcher path.
    let lines = inst.start_lines();
    let line = start_line_for(&lines, "s-sbpl");
    assert_eq!(line["token_sha256"], sha256_hex(token.as_bytes()));
    let _ = inst.request(
        "POST",
        "/terminate",
        Some(&serde_json::json!({"session_id":"s-sbpl"})),
    );
    inst.wait_exit("s-sbpl");
    assert_token_nowhere(&inst, &token, &token_path, &[]);
}

#[test]
fn host_answers_403_with_empty_body_to_a_wrong_bearer_or_a_foreign_peer() {
    let inst = Instance::start();
    let (status, body) = http(&inst.socket(), "GET", "/sessions", Some("wrong"), None);
    assert_eq!((status, body.len()), (403, 0));
    let (status, body) = http(&inst.socket(), "GET", "/sessions", None, None);
    assert_eq!((status, body.len()), (403, 0));
    // The right bearer from a process that is not the host's parent.
    let out = std::process::Command::new(relay_e2e::bin("relay-e2e-http"))
        .arg(inst.socket())
        .args(["GET", "/sessions"])
        .arg(format!("authorization: Bearer {}", inst.secret))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("relay-e2e-http");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("content-length: 0"),
        "{text}"
    );
    let (status, _, _) = inst.request("GET", "/sessions", None);
    assert_eq!(status, 200);
}

#[test]
fn token_on_an_unsandboxed_or_non_claude_launch_is_invalid_spec_and_never_echoed() {
    if bwrap_only("token_on_an_unsandboxed_or_non_claude_launch_is_invalid_spec_and_never_echoed") {
        return;
    }
    let inst = Instance::start();
    let (token_path, token) = write_token(&inst);
    let mut plain = inst.request_for("s-plain", SessionKind::Claude, fakeagent_headless());
    plain.claude_token = Some(Secret::new(token.clone()));
    let mut shell = inst.request_for("s-shell", SessionKind::Pty, vec!["/bin/sh".into()]);
    shell.template_id = Some("shell".into());
    prepare_bwrap(&inst, &mut shell, &token_path, true);
    shell.claude_token = Some(Secret::new(token.clone()));
    for req in [plain, shell] {
        let (status, body, raw) = inst.launch(&req);
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some(HostCode::InvalidSpec.as_str())),
            "{body}"
        );
        assert_absent(&raw, &token, "the refusal");
    }
    assert!(inst.start_lines().is_empty());
    assert_token_nowhere(&inst, &token, &token_path, &[]);
}

#[test]
fn one_id_namespace_across_kinds_and_identity_refusal_is_502() {
    let inst = Instance::start();
    let req = inst.request_for("same", SessionKind::Claude, fakeagent_headless());
    assert_eq!(inst.launch(&req).0, 201);
    let mut pty = inst.request_for("same", SessionKind::Pty, vec!["/bin/sh".into()]);
    pty.pty = Some(PtySize {
        cols: 100,
        rows: 30,
    });
    let (status, body, _) = inst.launch(&pty);
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some(HostCode::SessionExists.as_str()))
    );

    // The bridge knows another secret for this session: the Hello is refused.
    let mut req = inst.request_for("s-refused", SessionKind::Claude, fakeagent_headless());
    inst.with_identity(&mut req);
    inst.bridge.expect("s-refused", &random_hex(32));
    let (status, body, _) = inst.launch(&req);
    assert_eq!(
        (status, body["error"].as_str()),
        (502, Some(HostCode::IdentityRefused.as_str())),
        "{body}"
    );
    assert!(inst
        .start_lines()
        .iter()
        .all(|l| l["env"]["RELAY_SESSION_ID"] != "s-refused"));
    let (_, list, _) = inst.request("GET", "/sessions", None);
    let ids: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["session_id"].as_str())
        .collect();
    assert_eq!(ids, vec!["same"]);
}

#[test]
fn pty_terminal_runs_in_its_own_session_logs_after_exit_and_delete_removes_it() {
    let inst = Instance::start();
    let script = "tty; ps -o sid=,pgid=,tpgid= -p $$; echo done-$((6*7))";
    let mut req = inst.request_for(
        "t1",
        SessionKind::Pty,
        vec!["/bin/sh".into(), "-c".into(), script.into()],
    );
    req.template_id = Some("shell".into());
    inst.with_identity(&mut req);
    let (status, body, _) = inst.launch(&req);
    assert_eq!(status, 201, "{body}");
    let root = body["root_pid"].as_u64().unwrap();
    let ev = inst.wait_exit("t1");
    assert_eq!(
        (ev["exit_status"].as_i64(), ev["reason"].as_str()),
        (Some(0), Some("exited")),
        "{ev}"
    );
    let log = String::from_utf8_lossy(&inst.log("t1")).to_string();
    assert!(log.contains("done-42"), "log: {log}");
    assert!(
        log.contains("/dev/pts/"),
        "the target has the session's pty: {log}"
    );
    // sid is the shim (the session root); the target leads the foreground group.
    let ids: Vec<u64> = log
        .lines()
        .find_map(|l| {
            let n: Vec<u64> = l
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            (n.len() == 3).then_some(n)
        })
        .unwrap_or_else(|| panic!("no ps line in {log}"));
    assert_eq!(ids[0], root, "the session id is the shim's: {log}");
    assert_eq!(
        ids[1], ids[2],
        "the target's group is the foreground group: {log}"
    );
    let head = inst.state.join("logs/t1.head");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&head).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(inst.state.join("logs"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
    let (status, _, _) = inst.request("DELETE", "/sessions/t1", None);
    assert_eq!(status, 200);
    assert!(!head.exists());
    let (status, _, _) = inst.request("GET", "/sessions/t1/log", None);
    assert_eq!(status, 404);
}

#[test]
fn terminate_ends_a_running_session_and_reports_it() {
    let inst = Instance::start();
    let req = inst.request_for(
        "t-sleep",
        SessionKind::Pty,
        vec!["/bin/sleep".into(), "600".into()],
    );
    let (status, body, _) = inst.launch(&req);
    assert_eq!(status, 201, "{body}");
    let (status, info, _) = inst.request(
        "POST",
        "/terminate",
        Some(&serde_json::json!({"session_id":"t-sleep"})),
    );
    assert_eq!(status, 200);
    assert_eq!(info["state"], "exited");
    let ev = inst.wait_exit("t-sleep");
    assert_eq!(ev["reason"], "terminated", "{ev}");
    assert_eq!(ev["signal"], 15, "{ev}");
}

#[test]
fn terminate_kills_a_target_that_ignores_sigterm_after_the_grace() {
    let inst = Instance::start();
    let script = "trap '' TERM; echo armed; while :; do sleep 1; done";
    let req = inst.request_for(
        "t-stubborn",
        SessionKind::Pty,
        vec!["/bin/sh".into(), "-c".into(), script.into()],
    );
    let (status, body, _) = inst.launch(&req);
    assert_eq!(status, 201, "{body}");
    // The shell must have set its trap before it is asked to stop.
    let armed = relay_e2e::wait::until(relay_e2e::WAIT, || {
        String::from_utf8_lossy(&inst.log("t-stubborn")).contains("armed")
    });
    assert!(armed, "the target never printed its marker");
    let (status, info, _) = inst.request(
        "POST",
        "/terminate",
        Some(&serde_json::json!({"session_id": "t-stubborn"})),
    );
    assert_eq!(status, 200);
    assert_eq!(info["state"], "exited");
    let ev = inst.wait_exit("t-stubborn");
    assert_eq!(ev["reason"], "terminated", "{ev}");
    assert_eq!(ev["signal"], 9, "SIGKILL after the grace: {ev}");
}
