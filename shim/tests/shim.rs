//! The real `relay-shim` binary, probed from the target's side.
//!
//! Descriptor tables are set up through `sh -c 'exec "$@" 5<… 7<…'`, so the test process
//! (multi-threaded) never has to place a descriptor at a fixed number itself.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use relay_shim::status::Event;
use relay_shim::target::{Target, TARGET_VAR};

const SHIM: &str = env!("CARGO_BIN_EXE_relay-shim");
const TIMEOUT: Duration = Duration::from_secs(30);
const SECRET: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// A scratch directory, removed on drop unless the test failed.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let path =
            std::env::temp_dir().join(format!("relay-shim-it-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Scratch(path)
    }

    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        } else {
            eprintln!("kept {}", self.0.display());
        }
    }
}

/// The target's environment and folder as the host passes them (`relay_shim::target`):
/// this test's own, plus `extra`, minus the names in `drop`.
fn target_here(extra: &[(&str, &std::ffi::OsStr)], drop: &[&str]) -> String {
    let mut env: Vec<(std::ffi::OsString, std::ffi::OsString)> = std::env::vars_os()
        .filter(|(k, _)| !drop.iter().any(|d| k == d) && k != TARGET_VAR)
        .collect();
    env.extend(extra.iter().map(|(k, v)| ((*k).into(), (*v).into())));
    Target {
        cwd: Some(std::env::current_dir().unwrap()),
        env,
    }
    .encode()
    .unwrap()
}

/// `relay-shim` with the target's data as the host passes it.
fn shim_cmd() -> Command {
    let mut cmd = Command::new(SHIM);
    cmd.env(TARGET_VAR, target_here(&[], &[]));
    cmd
}

/// `sh -c 'exec relay-shim ARGS <redirs>'`: the shim starts with the fd table `redirs`.
fn shim_with_fds(redirs: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(format!("exec \"$0\" \"$@\" {redirs}"))
        .arg(SHIM)
        .args(args)
        .env(TARGET_VAR, target_here(&[], &[]))
        .stdin(Stdio::null());
    cmd
}

/// Runs `cmd` to its end within [`TIMEOUT`].
fn output(cmd: Command) -> Output {
    output_with_stdin(cmd, Stdio::null())
}

fn output_with_stdin(mut cmd: Command, stdin: Stdio) -> Output {
    cmd.stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let out = reader(child.stdout.take().unwrap());
    let err = reader(child.stderr.take().unwrap());
    let status = wait_bounded(&mut child);
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn reader(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

fn wait_bounded(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + TIMEOUT;
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("relay-shim did not exit within {TIMEOUT:?}");
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

fn events(bytes: &[u8]) -> Vec<Event> {
    String::from_utf8_lossy(bytes)
        .lines()
        .filter_map(Event::parse)
        .collect()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The shim's stderr is exactly one line naming `step`.
fn assert_one_line(out: &Output, step: &str) {
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "stderr: {err:?}");
    assert!(
        err.starts_with(&format!("relay-shim: {step}: ")),
        "stderr: {err:?}"
    );
}

fn fd_numbers(listing: &str) -> Vec<RawFd> {
    let mut fds: Vec<RawFd> = listing
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    fds.sort_unstable();
    fds
}

#[test]
fn echo_reports_no_identity_started_exit_around_output() {
    let mut cmd = shim_cmd();
    cmd.args([
        "exec",
        "--session-id",
        "t",
        "--status-fd",
        "1",
        "--",
        "/bin/echo",
        "hi",
    ]);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(matches!(
        Event::parse(lines[0]),
        Some(Event::NoIdentity { .. })
    ));
    // `started` is written once exec has happened, so the target may print first.
    let mut middle = [lines[1], lines[2]];
    middle.sort_by_key(|l| Event::parse(l).is_none());
    assert!(
        matches!(Event::parse(middle[0]), Some(Event::Started { .. })),
        "{stdout}"
    );
    assert_eq!(middle[1], "hi");
    assert_eq!(
        Event::parse(lines[3]),
        Some(Event::Exit {
            status: Some(0),
            signal: None
        })
    );
}

#[test]
fn fd7_leak_does_not_reach_target() {
    let out = output(shim_with_fds(
        "5</etc/hostname 7</etc/hostname 9</etc/hostname 3>/dev/null",
        &[
            "exec",
            "--session-id",
            "t",
            "--pass-token",
            "--",
            "/bin/ls",
            "/proc/self/fd",
        ],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let fds = fd_numbers(&text(&out.stdout));
    // 3 is the directory ls itself opens to list /proc/self/fd.
    assert_eq!(fds, vec![0, 1, 2, 3, 5], "{}", text(&out.stdout));
}

#[test]
fn fd5_does_not_reach_target_without_pass_token() {
    let out = output(shim_with_fds(
        "5</etc/hostname 3>/dev/null",
        &[
            "exec",
            "--session-id",
            "t",
            "--",
            "/bin/ls",
            "/proc/self/fd",
        ],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(fd_numbers(&text(&out.stdout)), vec![0, 1, 2, 3]);
}

/// Runs the shim with `extra` arguments and the status pipe on stdout, and checks the exit
/// code, the one stderr line naming `step`, and the last status event.
fn expect_failure(extra: &[&str], redirs: &str, code: i32, event: Option<Event>, step: &str) {
    let mut args = vec!["exec", "--session-id", "t"];
    args.extend_from_slice(extra);
    let out = output(shim_with_fds(&format!("3>&1 {redirs}"), &args));
    assert_eq!(
        out.status.code(),
        Some(code),
        "{extra:?}: {}",
        text(&out.stderr)
    );
    assert_one_line(&out, step);
    let got = events(&out.stdout);
    if let Some(event) = event {
        assert_eq!(got.last(), Some(&event), "{extra:?}");
    }
    if code == 64 || code == 66 {
        assert!(
            !got.iter().any(|e| matches!(e, Event::NoIdentity { .. })),
            "{extra:?}: ran past the check: {got:?}"
        );
    }
}

fn spawn_failed(errno: i32) -> Option<Event> {
    Some(Event::SpawnFailed { errno })
}

#[test]
fn missing_target_is_127() {
    expect_failure(
        &["--", "no-such-tool-xyz"],
        "",
        127,
        spawn_failed(libc::ENOENT),
        "resolve target",
    );
    expect_failure(
        &["--", "/no/such/tool"],
        "",
        127,
        spawn_failed(libc::ENOENT),
        "resolve target",
    );
}

#[test]
fn non_executable_target_is_126() {
    let scratch = Scratch::new("codes");
    let plain = scratch.file("plain", b"not a program\n");
    let plain = plain.to_str().unwrap();
    expect_failure(
        &["--", plain],
        "",
        126,
        spawn_failed(libc::EACCES),
        "resolve target",
    );
    expect_failure(
        &["--", "/tmp"],
        "",
        126,
        spawn_failed(libc::EACCES),
        "resolve target",
    );
}

#[test]
fn pass_token_without_fd5_is_66_before_anything_runs() {
    expect_failure(
        &["--pass-token", "--", "/bin/true"],
        "5<&-",
        66,
        spawn_failed(libc::EBADF),
        "token fd",
    );
}

#[test]
fn usage_errors_are_64() {
    expect_failure(&["--bogus", "--", "/bin/true"], "", 64, None, "usage");
    expect_failure(
        &["--status-fd", "8", "--", "/bin/true"],
        "",
        64,
        None,
        "usage",
    );
    expect_failure(
        &["--pass-token", "--status-fd", "5", "--", "/bin/true"],
        "5</dev/null",
        64,
        None,
        "usage",
    );
}

#[test]
fn setup_failures_are_70() {
    let profile = [
        "--sandbox-backend",
        "bwrap",
        "--sandbox-profile",
        "/no/such/profile",
        "--",
        "/bin/true",
    ];
    expect_failure(
        &profile,
        "",
        70,
        spawn_failed(libc::ENOENT),
        "sandbox profile",
    );
    expect_failure(
        &["--landlock-fd", "9", "--", "/bin/true"],
        "",
        70,
        spawn_failed(libc::EBADF),
        "landlock",
    );
    expect_failure(
        &["--pty", "--", "/bin/true"],
        "",
        70,
        spawn_failed(libc::ENOTTY),
        "controlling terminal",
    );
}

#[test]
fn missing_launcher_is_127_from_exec() {
    let args = [
        "--sandbox-backend",
        "seatbelt",
        "--sandbox-profile",
        "/p.sb",
        "--sandbox-launcher",
        "/no/launcher",
        "--",
        "/bin/true",
    ];
    expect_failure(&args, "", 127, spawn_failed(libc::ENOENT), "exec");
}

#[test]
fn target_exit_code_and_signal_are_the_shims() {
    let mut cmd = shim_cmd();
    cmd.args([
        "exec",
        "--session-id",
        "t",
        "--status-fd",
        "1",
        "--",
        "sh",
        "-c",
        "exit 3",
    ]);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        events(&out.stdout).last(),
        Some(&Event::Exit {
            status: Some(3),
            signal: None
        })
    );

    let mut cmd = shim_cmd();
    cmd.args([
        "exec",
        "--session-id",
        "t",
        "--status-fd",
        "1",
        "--",
        "sh",
        "-c",
        "kill -9 $$",
    ]);
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(137));
    assert_eq!(
        events(&out.stdout).last(),
        Some(&Event::Exit {
            status: None,
            signal: Some(9)
        })
    );
}

#[test]
fn sigterm_to_shim_reaches_target_group() {
    let mut child = shim_cmd()
        .args([
            "exec",
            "--session-id",
            "t",
            "--status-fd",
            "1",
            "--",
            "sleep",
            "30",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let target = loop {
        let line = rx.recv_timeout(TIMEOUT).expect("no started event");
        if let Some(Event::Started { pid }) = Event::parse(&line) {
            break pid;
        }
    };
    let stat = std::fs::read_to_string(format!("/proc/{target}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    assert_eq!(
        fields[2],
        target.to_string(),
        "target leads its own process group"
    );
    assert_eq!(
        fields[3],
        child.id().to_string(),
        "the shim leads the target's session"
    );

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = wait_bounded(&mut child);
    assert_eq!(status.code(), Some(143));
    let last = rx.recv_timeout(TIMEOUT).unwrap();
    assert_eq!(
        Event::parse(&last),
        Some(Event::Exit {
            status: None,
            signal: Some(15)
        })
    );
}

#[test]
fn pty_target_is_foreground_of_its_own_terminal() {
    let pty = nix::pty::openpty(None, None).unwrap();
    for fd in [&pty.master, &pty.slave] {
        nix::fcntl::fcntl(
            fd.as_raw_fd(),
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        )
        .unwrap();
    }
    let mut cmd = shim_cmd();
    cmd.args([
        "exec",
        "--session-id",
        "t",
        "--pty",
        "--status-fd",
        "1",
        "--",
        "/bin/cat",
        "/proc/self/stat",
    ]);
    let out = output_with_stdin(cmd, Stdio::from(pty.slave));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let stat = stdout
        .lines()
        .find(|l| l.contains("(cat)"))
        .expect("cat's stat");
    let (pid, rest) = stat.split_once(" (cat) ").unwrap();
    let f: Vec<&str> = rest.split(' ').collect();
    // state ppid pgrp session tty_nr tpgid
    assert_eq!(f[2], pid, "own process group");
    assert_eq!(f[3], f[1], "session led by the shim, cat's parent");
    assert_ne!(f[4], "0", "has the session pty as controlling terminal");
    assert_eq!(f[5], pid, "foreground group of the pty");
    drop(pty.master);
}

#[test]
fn target_has_no_controlling_terminal_without_pty() {
    let mut cmd = shim_cmd();
    cmd.args([
        "exec",
        "--session-id",
        "t",
        "--status-fd",
        "1",
        "--",
        "/bin/cat",
        "/proc/self/stat",
    ]);
    let out = output(cmd);
    let stdout = text(&out.stdout);
    let stat = stdout
        .lines()
        .find(|l| l.contains("(cat)"))
        .expect("cat's stat");
    let f: Vec<&str> = stat.split_once(" (cat) ").unwrap().1.split(' ').collect();
    assert_eq!(f[4], "0", "no controlling terminal");
    let own_sid = nix::unistd::getsid(None).unwrap().as_raw().to_string();
    assert_ne!(f[3], own_sid, "not in the launcher's session");
}

/// A bridge that answers every Hello with `answer(hello_line)`; records the Hellos.
struct Bridge {
    path: PathBuf,
    hellos: mpsc::Receiver<String>,
}

fn bridge(scratch: &Scratch, answer: fn(&str) -> String) -> Bridge {
    let path = scratch.0.join("bridge.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let (tx, hellos) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut line = String::new();
            if BufReader::new(&stream).read_line(&mut line).is_err() {
                continue;
            }
            let _ = stream.write_all(answer(line.trim_end()).as_bytes());
            let _ = tx.send(line);
        }
    });
    Bridge { path, hellos }
}

fn identity_run(
    scratch: &Scratch,
    bridge: Option<&Path>,
    secret: &[u8],
    target: &[&str],
) -> Output {
    let secret = scratch.file("secret", secret);
    let mut args = vec!["exec", "--session-id", "sess-1", "--identity", "--"];
    args.extend_from_slice(target);
    let mut cmd = shim_with_fds(&format!("3<{} 4>&1", secret.display()), &args);
    let bridge_var: Vec<(&str, &std::ffi::OsStr)> = bridge
        .map(|p| ("RELAY_BRIDGE_SOCKET", p.as_os_str()))
        .into_iter()
        .collect();
    cmd.env(
        TARGET_VAR,
        target_here(&bridge_var, &["RELAY_BRIDGE_SOCKET"]),
    );
    output(cmd)
}

#[test]
fn hello_ok_then_target_runs() {
    let scratch = Scratch::new("hello-ok");
    // The answer must name the bridge's own process (this test process).
    let bridge = bridge(&scratch, |_| {
        format!(
            "{{\"type\":\"OK\",\"name\":\"sess-1\",\"pid\":{}}}\n",
            std::process::id()
        )
    });
    let out = identity_run(
        &scratch,
        Some(&bridge.path),
        SECRET.as_bytes(),
        &["/bin/true"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let got = events(&out.stdout);
    assert!(
        matches!(got[0], Event::HelloOk { pid } if pid > 0),
        "{got:?}"
    );
    assert!(matches!(got[1], Event::Started { .. }), "{got:?}");
    let hello = bridge.hellos.recv_timeout(TIMEOUT).unwrap();
    assert_eq!(
        hello,
        format!("{{\"type\":\"Hello\",\"kind\":\"project_session\",\"name\":\"sess-1\",\"token\":\"{SECRET}\"}}\n")
    );
}

#[test]
fn hello_for_another_session_is_refused_and_target_never_runs() {
    let scratch = Scratch::new("hello-other");
    let marker = scratch.0.join("ran");
    let bridge = bridge(&scratch, |_| {
        "{\"type\":\"OK\",\"name\":\"sess-2\",\"pid\":1}\n".into()
    });
    let touch = format!("touch {}", marker.display());
    let out = identity_run(
        &scratch,
        Some(&bridge.path),
        SECRET.as_bytes(),
        &["sh", "-c", &touch],
    );
    assert_eq!(out.status.code(), Some(65));
    assert_eq!(events(&out.stdout), vec![Event::HelloRefused]);
    assert_one_line(&out, "hello");
    assert!(!text(&out.stderr).contains(SECRET));
    assert!(!marker.exists());
}

#[test]
fn bad_secret_never_reaches_the_bridge() {
    let scratch = Scratch::new("bad-secret");
    let bridge = bridge(&scratch, |_| {
        "{\"type\":\"OK\",\"name\":\"sess-1\",\"pid\":1}\n".into()
    });
    let with_newline = format!("{SECRET}\n");
    for secret in [with_newline.as_bytes(), &SECRET.as_bytes()[..63], b""] {
        let out = identity_run(&scratch, Some(&bridge.path), secret, &["/bin/true"]);
        assert_eq!(out.status.code(), Some(65));
        assert_eq!(events(&out.stdout), vec![Event::BadSecret]);
        assert_one_line(&out, "identity secret");
    }
    assert!(bridge.hellos.try_recv().is_err());
}

#[test]
fn hello_without_bridge_is_refused() {
    let scratch = Scratch::new("no-bridge");
    let out = identity_run(&scratch, None, SECRET.as_bytes(), &["/bin/true"]);
    assert_eq!(out.status.code(), Some(65));
    assert_eq!(events(&out.stdout), vec![Event::HelloRefused]);
    let out = identity_run(
        &scratch,
        Some(&scratch.0.join("none.sock")),
        SECRET.as_bytes(),
        &["/bin/true"],
    );
    assert_eq!(out.status.code(), Some(65));
    assert_eq!(events(&out.stdout), vec![Event::HelloRefused]);
}

const BWRAP: &str = "/usr/bin/bwrap";

fn bwrap_profile(scratch: &Scratch) -> PathBuf {
    // The shim itself runs inside as `relay-shim enter` (the daemon grants it the same way).
    let shim = std::fs::canonicalize(SHIM).unwrap();
    let shim = shim.to_str().unwrap();
    let args: Vec<String> = [
        "--ro-bind",
        shim,
        shim,
        "--die-with-parent",
        "--unshare-user",
        "--unshare-pid",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/usr",
        "/usr",
        "--ro-bind-try",
        "/bin",
        "/bin",
        "--ro-bind-try",
        "/lib",
        "/lib",
        "--ro-bind-try",
        "/lib64",
        "/lib64",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    scratch.file(
        "profile.bwrap",
        &relay_shim::bwrap_profile::encode(&args).unwrap(),
    )
}

#[test]
fn bwrap_target_has_no_capabilities_and_no_leaked_fds() {
    if cfg!(target_os = "macos") {
        eprintln!("does not apply on macOS (it tests the bubblewrap sandbox)");
        return;
    }
    if !Path::new(BWRAP).exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{BWRAP} is not installed (CI is set: nothing is skipped)"
        );
        eprintln!("skip: {BWRAP} is not installed");
        return;
    }
    let scratch = Scratch::new("bwrap");
    let profile = bwrap_profile(&scratch);
    let profile = profile.to_str().unwrap();
    let out = output(shim_with_fds(
        "7</etc/hostname 3>/dev/null",
        &[
            "exec",
            "--session-id",
            "t",
            "--sandbox-backend",
            "bwrap",
            "--sandbox-profile",
            profile,
            "--",
            "/bin/sh",
            "-c",
            "grep CapEff /proc/self/status; ls /proc/self/fd",
        ],
    ));
    let stdout = text(&out.stdout);
    eprintln!("{stdout}{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(stdout.contains("CapEff:\t0000000000000000"), "{stdout}");
    assert!(!fd_numbers(&stdout).contains(&7), "{stdout}");
}

/// Landlock TCP rules and python3 (the probing target) are both here; else why not, on
/// stderr.
fn landlock_net_and_python() -> bool {
    if cfg!(target_os = "macos") {
        eprintln!("does not apply on macOS (Landlock is Linux's)");
        return false;
    }
    let ci = std::env::var_os("CI").is_some();
    match relay_shim::landlock::abi_version() {
        Ok(abi) if abi >= relay_shim::landlock::MIN_NET_ABI => {}
        other => {
            assert!(
                !ci,
                "landlock networking unavailable here ({other:?}; CI is set: nothing is skipped)"
            );
            eprintln!("skip: landlock networking unavailable here ({other:?})");
            return false;
        }
    }
    if Command::new("python3").arg("-V").output().is_err() {
        assert!(
            !ci,
            "python3 is not installed (CI is set: nothing is skipped)"
        );
        eprintln!("skip: python3 is not installed");
        return false;
    }
    true
}

#[test]
fn denied_port_connect_is_eacces_inside_target() {
    if !landlock_net_and_python() {
        return;
    }
    let denied = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let allowed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let denied_port = denied.local_addr().unwrap().port();
    let allowed_port = allowed.local_addr().unwrap().port();
    let ruleset = relay_shim::landlock::build_tcp_connect_ruleset(&[denied_port]).unwrap();
    let script = format!(
        "import socket\nfor p in ({denied_port}, {allowed_port}):\n    try:\n        socket.create_connection(('127.0.0.1', p)).close(); print(p, 'connected')\n    except OSError as e:\n        print(p, type(e).__name__, e.errno)\n"
    );
    let mut cmd = shim_cmd();
    cmd.args([
        "exec",
        "--session-id",
        "t",
        "--status-fd",
        "1",
        "--landlock-fd",
        "6",
        "--",
        "python3",
        "-c",
        &script,
    ]);
    place_at_fd6(&mut cmd, ruleset);
    let out = output(cmd);
    let stdout = text(&out.stdout);
    eprintln!("{stdout}{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        stdout.contains(&format!("{denied_port} PermissionError {}", libc::EACCES)),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("{allowed_port} connected")),
        "{stdout}"
    );
}

/// Puts `fd` at 6 in the child. If std's own exec-error pipe sat at 6 it is replaced,
/// which only costs std its report of a failed exec; the shim binary exists.
fn place_at_fd6(cmd: &mut Command, fd: OwnedFd) {
    // Safety: the closure runs in the forked child and calls only dup2/fcntl, which are
    // async-signal-safe; ``fd` is owned by the closure, so it stays open until the Command is dropped.
    unsafe {
        cmd.pre_exec(move || {
            let raw = fd.as_raw_fd();
            let ok = if raw == 6 {
                libc::fcntl(6, libc::F_SETFD, 0) == 0
            } else {
                libc::dup2(raw, 6) == 6
            };
            if ok {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

#[cfg(target_os = "linux")]
/// The shim run with `--landlock-inherited PORT`, its process given no-new-privs and,
/// with `ruleset`, that Landlock domain before exec (what the host's confined thread
/// gives it).
fn inherited_run(port: u16, ruleset: Option<OwnedFd>, script: &str) -> Output {
    let mut cmd = shim_cmd();
    cmd.args([
        "exec",
        "--session-id",
        "t",
        "--status-fd",
        "1",
        "--landlock-inherited",
        &port.to_string(),
        "--",
        "python3",
        "-c",
        script,
    ]);
    // Safety: the closure runs in the forked child and calls only prctl and the
    // landlock syscall (async-signal-safe); the ruleset is owned by the closure.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(fd) = &ruleset {
                if libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    output(cmd)
}

#[cfg(target_os = "linux")]
#[test]
fn landlock_inherited_is_proven_by_a_refused_connect_not_by_no_new_privs() {
    if !landlock_net_and_python() {
        return;
    }
    let denied = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = denied.local_addr().unwrap().port();
    let script = format!(
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port})).close(); print('connected')\nexcept OSError as e:\n    print('refused', e.errno)\n"
    );
    // No-new-privs alone (a host under NoNewPrivileges=yes, a shim forked from the wrong
    // thread): the shim refuses to start the target, whether the port listens or not.
    let out = inherited_run(port, None, &script);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(70), "{stdout}{}", text(&out.stderr));
    assert!(!stdout.contains("connected"), "{stdout}");
    assert_one_line(&out, "landlock");
    assert_eq!(
        events(&out.stdout).last(),
        Some(&Event::SpawnFailed { errno: libc::EPERM })
    );
    drop(denied);
    let out = inherited_run(port, None, &script);
    assert_eq!(out.status.code(), Some(70), "{}", text(&out.stderr));
    // Inside the domain: the check passes and the target is denied the port too.
    let denied = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let ruleset = relay_shim::landlock::build_tcp_connect_ruleset(&[port]).unwrap();
    let out = inherited_run(port, Some(ruleset), &script);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(&format!("refused {}", libc::EACCES)),
        "{stdout}"
    );
    drop(denied);
}

/// The kernel's Landlock ABI has the shield's scopes; else why not, on stderr (a
/// failure when CI is set: nothing is skipped there).
fn shield_here() -> bool {
    if cfg!(target_os = "macos") {
        eprintln!("does not apply on macOS (Landlock is Linux's)");
        return false;
    }
    match relay_shim::landlock::abi_version() {
        Ok(abi) if abi >= relay_shim::landlock::MIN_SHIELD_ABI => true,
        other => {
            assert!(
                std::env::var_os("CI").is_none(),
                "landlock ABI {other:?} has no scopes (CI is set: nothing is skipped)"
            );
            eprintln!("skip: landlock ABI {other:?} has no scopes");
            false
        }
    }
}

/// `relay-shim --shield COMMAND` (docs/session-host.md#the-shield):
/// the command runs in the shell `SHELL` names, in a Landlock domain of its own, where
/// the kernel refuses it its parent's memory (this test's), which the same command in a
/// plain shell of the same uid opens; a rename and a hard link across folders still
/// work (a domain that handled any file access would refuse them); fd 5 does not reach
/// it; the status is the command's.
#[test]
fn shield_refuses_the_parents_memory_and_leaves_ordinary_work_alone() {
    if !shield_here() {
        return;
    }
    let s = Scratch::new("shield");
    let script = "exec 3</proc/$PPID/mem && echo mem:opened || echo mem:refused
        cd \"$(mktemp -d ./run.XXXXXX)\" && mkdir a b && echo x > a/f && mv a/f b/f && ln b/f a/g && echo moved
        [ -e /proc/self/fd/5 ] && echo fd5:open || echo fd5:closed
        echo \"shell:$0\"
        exit 7";
    let run = |program: &str, args: &[&str]| {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg("exec \"$0\" \"$@\" 5</dev/null")
            .arg(program)
            .args(args)
            .arg(script)
            .current_dir(&s.0)
            .env("SHELL", "/bin/bash");
        output(cmd)
    };
    let plain = run("/bin/bash", &["-c"]);
    let plain_out = text(&plain.stdout);
    if !plain_out.contains("mem:opened") {
        eprintln!("skip: a plain shell is refused its parent's memory here already: {plain_out}");
        return;
    }
    let shielded = run(SHIM, &["--shield"]);
    let out = text(&shielded.stdout);
    assert_eq!(
        shielded.status.code(),
        Some(7),
        "{out}{}",
        text(&shielded.stderr)
    );
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["mem:refused", "moved", "fd5:closed", "shell:/bin/bash"],
        "{}",
        text(&shielded.stderr)
    );
    assert!(
        text(&shielded.stderr).contains("Permission denied"),
        "{}",
        text(&shielded.stderr)
    );
}

/// `relay-shim --shield` and `--shield-listen=PORTS` (docs/session-host.md#the-shield):
/// the command cannot signal a process outside its domain (this test, its parent),
/// bind a TCP port but the ones listed, or open an MPTCP socket (which Landlock's bind
/// rule does not see); it still signals what it started itself.
#[test]
fn shield_refuses_signals_outside_and_binds_but_its_listen_ports() {
    if !shield_here() {
        return;
    }
    if Command::new("python3").arg("-c").arg("").output().is_err() {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 not found (CI is set: nothing is skipped)"
        );
        eprintln!("skip: python3 not found");
        return;
    }
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (listen, other) = (free(), free());
    let script = format!(
        "kill -0 $PPID 2>/dev/null && echo parent:signalled || echo parent:refused
        sleep 600 & kill -KILL $! && echo own:killed
        python3 -c '
import errno, socket
def bind(port, proto=0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, proto)
    try:
        s.bind((\"127.0.0.1\", port))
        return \"bound\"
    except OSError as e:
        return errno.errorcode[e.errno]
    finally:
        s.close()
def mptcp():
    # The socket itself is refused: socket() raises before bind is tried.
    try:
        return bind({other}, 262)
    except OSError as e:
        return errno.errorcode[e.errno]
print(\"listen:\" + bind({listen}))
print(\"other:\" + bind({other}))
print(\"mptcp:\" + mptcp())
'"
    );
    let run = |flag: &str| {
        let mut cmd = Command::new(SHIM);
        cmd.arg(flag)
            .arg(&script)
            .stdin(Stdio::null())
            .env("SHELL", "/bin/bash");
        output(cmd)
    };
    let lines = |o: &Output| -> Vec<String> { text(&o.stdout).lines().map(String::from).collect() };
    let shielded = run(&format!("--shield-listen={listen}"));
    assert_eq!(
        lines(&shielded),
        [
            "parent:refused",
            "own:killed",
            "listen:bound",
            "other:EACCES",
            "mptcp:EACCES"
        ],
        "{}",
        text(&shielded.stderr)
    );
    // Plain --shield: no port at all.
    let none = run("--shield");
    assert!(
        lines(&none).contains(&"listen:EACCES".to_string()),
        "{}{}",
        text(&none.stdout),
        text(&none.stderr)
    );
}
