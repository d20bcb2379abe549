//! The e2e harness: the real binaries from `target/`, one isolated instance per test
//! (own folder with home, temp and state dirs, own sockets), waited on through the
//! host's `ready` line, its events and exits, never sleeps. An instance stops on drop
//! and keeps its folder when the test failed.

pub mod daemon;
pub mod exec_file;
pub mod fakeapi;
pub mod procs;
pub mod pty;
pub mod registry;
pub mod seatbelt;
pub mod tmpfs;
pub mod wait;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relay::http::client::{self, Addr, Blocking};
use relay::protocol::{
    Backend, IdentityLaunch, LaunchRequest, ProjectRef, SandboxLaunch, Secret, SessionKind,
    HOST_PROTOCOL_VERSION,
};
use relay_shim::hello::{Answer, Hello};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Every wait in the suite is bounded by this.
pub const WAIT: Duration = Duration::from_secs(30);

/// `target/debug` (or wherever this test binary was built): the test binary sits in
/// its `deps/`, the bench binary (e2e/src/bin/bench.rs) beside the others.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("exe dir");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().expect("profile dir").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.exists(),
        "{} is not built: run `cargo build --workspace` first",
        p.display()
    );
    p
}

pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("urandom");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `acme-fake-token-` plus 32 random hex characters, new per call.
/// ROT13 of `s`, which the redactor does not mask: a session given it rebuilds a token
/// with `tr`, so the token's bytes are never in what a test sends.
pub fn rot13(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            'a'..='z' => (((c as u8 - b'a') + 13) % 26 + b'a') as char,
            'A'..='Z' => (((c as u8 - b'A') + 13) % 26 + b'A') as char,
            _ => c,
        })
        .collect()
}

pub fn fake_token() -> String {
    format!("acme-fake-token-{}", random_hex(16))
}

/// For a test that only means something under bubblewrap: on macOS it prints, plainly,
/// that it does not apply there and returns true (the test then returns); elsewhere
/// false. Nothing is skipped on Linux: a missing `bwrap` fails the test there.
pub fn bwrap_only(test: &str) -> bool {
    if cfg!(target_os = "macos") {
        eprintln!("{test}: does not apply on macOS (it tests the bubblewrap sandbox)");
        return true;
    }
    false
}

/// Panics, naming each one, when the fake `sandbox-exec` recorded an answer under `dir`
/// that contradicts the policy: every Seatbelt launch of an instance is checked when the
/// instance is dropped, whether or not its test looked.
pub(crate) fn assert_seatbelt_answers_hold(dir: &Path) {
    if std::thread::panicking() {
        return;
    }
    let wrong = seatbelt::wrong_answers(dir);
    assert!(
        wrong.is_empty(),
        "a Seatbelt launch's profile breaks its policy (fake sandbox-exec answers):\n{}",
        wrong.join("\n")
    );
}

/// Asserts that `needle` appears nowhere in `hay`, naming where.
pub fn assert_absent(hay: &[u8], needle: &str, place: &str) {
    let n = needle.as_bytes();
    assert!(!n.is_empty());
    let found = hay.windows(n.len()).any(|w| w == n);
    assert!(!found, "the token appears in {place}");
}

/// One request through relay's own client (hyper's, `relay::http::client`), as
/// `(status, body)`; `headers` are `(name, value)` pairs.
fn call(
    addr: Addr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> client::Answer {
    let client = Blocking::new(addr.clone()).expect("runtime");
    client
        .call(method, path, headers, body.to_vec())
        .unwrap_or_else(|e| panic!("{method} {path} on {addr}: {e}"))
}

/// One request over a unix socket: status and body.
pub fn http(
    sock: &Path,
    method: &str,
    path: &str,
    bearer: Option<&str>,
    body: Option<&[u8]>,
) -> (u16, Vec<u8>) {
    let body = body.unwrap_or(b"");
    let auth = bearer.map(|b| format!("Bearer {b}"));
    let mut headers = Vec::new();
    if let Some(a) = &auth {
        headers.push(("authorization", a.as_str()));
    }
    if !body.is_empty() {
        headers.push(("content-type", "application/json"));
    }
    let a = call(Addr::Unix(sock.to_path_buf()), method, path, &headers, body);
    (a.status, a.body.to_vec())
}

/// One request over loopback TCP with extra header lines (each `Name: value\r\n`);
/// returns the status and the answer as written (head, then body).
pub fn tcp_http(addr: &str, method: &str, path: &str, headers: &str) -> (u16, Vec<u8>) {
    let headers: Vec<(&str, &str)> = headers
        .split("\r\n")
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect();
    let a = call(Addr::Tcp(addr.to_string()), method, path, &headers, b"");
    (a.status, written(&a))
}

/// An answer as a server wrote it: its head, then its body.
pub fn written(a: &client::Answer) -> Vec<u8> {
    let mut raw = a.head().into_bytes();
    raw.extend_from_slice(&a.body);
    raw
}

/// The status and body of an answer as [`written`] gives it.
pub fn parse_response_pub(raw: &[u8]) -> (u16, Vec<u8>) {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("http response head");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    (status, raw[split + 4..].to_vec())
}

/// Stands in for the daemon's bridge socket: answers a session's Hello with OK when the
/// secret matches the one registered for it, and records every Hello it saw.
pub struct Bridge {
    pub path: PathBuf,
    secrets: Arc<Mutex<HashMap<String, String>>>,
    pub hellos: Arc<Mutex<Vec<Hello>>>,
}

impl Bridge {
    fn start(path: PathBuf) -> Bridge {
        let listener = UnixListener::bind(&path).expect("bind bridge");
        let secrets: Arc<Mutex<HashMap<String, String>>> = Arc::default();
        let hellos: Arc<Mutex<Vec<Hello>>> = Arc::default();
        let (s2, h2) = (secrets.clone(), hellos.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let (s3, h3) = (s2.clone(), h2.clone());
                std::thread::spawn(move || {
                    conn.set_read_timeout(Some(WAIT)).ok();
                    let mut line = String::new();
                    let mut r = BufReader::new(&conn);
                    if r.read_line(&mut line).is_err() {
                        return;
                    }
                    let Ok(hello) = Hello::parse(&line) else {
                        return;
                    };
                    // One use per secret, as the daemon will do.
                    let ok = s3
                        .lock()
                        .unwrap()
                        .remove(&hello.session_id)
                        .is_some_and(|s| s == hello.secret);
                    h3.lock().unwrap().push(hello.clone());
                    let answer = if ok {
                        Answer::Ok {
                            session_id: hello.session_id,
                            pid: std::process::id(),
                        }
                    } else {
                        Answer::Refused {
                            reason: "unknown session or secret".into(),
                        }
                    };
                    let mut w = &conn;
                    let _ = w.write_all(answer.to_line().as_bytes());
                });
            }
        });
        Bridge {
            path,
            secrets,
            hellos,
        }
    }

    pub fn expect(&self, session_id: &str, secret: &str) {
        self.secrets
            .lock()
            .unwrap()
            .insert(session_id.into(), secret.into());
    }
}

pub struct InstanceOptions {
    /// Files the host inherits at descriptors >= 100 without close-on-exec (strays).
    pub stray_files: Vec<PathBuf>,
}

/// One isolated host with its own folder.
pub struct Instance {
    dir: Option<tempfile::TempDir>,
    pub root: PathBuf,
    pub home: PathBuf,
    pub tmp: PathBuf,
    pub state: PathBuf,
    pub project: PathBuf,
    pub secret: String,
    pub bridge: Bridge,
    host: Child,
    host_stdin: Option<ChildStdin>,
    pub host_pid: u32,
    events: Receiver<Value>,
    /// Every line the host printed on stdout, for the "nowhere" checks.
    pub host_stdout: Arc<Mutex<Vec<u8>>>,
    pub host_stderr: Arc<Mutex<Vec<u8>>>,
    pending: Mutex<Vec<Value>>,
}

impl Instance {
    pub fn start() -> Instance {
        Self::start_with(InstanceOptions {
            stray_files: vec![],
        })
    }

    pub fn start_with(opts: InstanceOptions) -> Instance {
        let base = std::env::var_os("RELAY_E2E_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        std::fs::create_dir_all(&base).ok();
        let dir = tempfile::Builder::new()
            .prefix("relay-e2e-")
            .tempdir_in(&base)
            .expect("instance dir");
        let root = dir.path().to_path_buf();
        let home = root.join("home");
        let tmp = root.join("tmp");
        let state = root.join("state");
        let project = home.join("project");
        for d in [&home, &tmp, &state, &project] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
        let bridge = Bridge::start(root.join("bridge.sock"));
        let secret = random_hex(32);

        let (secret_r, secret_w) = pipe();
        {
            let mut w = std::fs::File::from(secret_w);
            w.write_all(secret.as_bytes()).unwrap();
        }
        let secret_fd = secret_r.as_raw_fd();
        let strays: Vec<std::fs::File> = opts
            .stray_files
            .iter()
            .map(|p| std::fs::File::open(p).expect("open stray file"))
            .collect();
        let stray_fds: Vec<i32> = strays.iter().map(|f| f.as_raw_fd()).collect();

        let mut cmd = Command::new(bin("relay-sessions"));
        let args = relay::host::HostArgs {
            state_dir: state.clone(),
            secret_fd,
            shim: Some(bin("relay-shim")),
            shim_fd: None,
            bridge_socket: Some(bridge.path.clone()),
            log_level: None,
        };
        cmd.args(args.to_args())
            .env("HOME", &home)
            .env("TMPDIR", &tmp)
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env(seatbelt::POLICY_ENV, root.join(seatbelt::POLICY_FILE))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Safety: only fcntl between fork and exec. F_DUPFD never replaces a used
        // number, so std's exec-error pipe cannot be clobbered.
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(secret_fd, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                for &fd in &stray_fds {
                    if libc::fcntl(fd, libc::F_DUPFD, 100) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut host = cmd.spawn().expect("spawn relay-sessions");
        drop(secret_r);
        drop(strays);
        let host_pid = host.id();
        let host_stdin = host.stdin.take();
        let stdout = host.stdout.take().unwrap();
        let stderr = host.stderr.take().unwrap();
        let host_stdout: Arc<Mutex<Vec<u8>>> = Arc::default();
        let host_stderr: Arc<Mutex<Vec<u8>>> = Arc::default();
        let (tx, events) = mpsc::channel();
        let out = host_stdout.clone();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = Vec::new();
                match r.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        out.lock().unwrap().extend_from_slice(&line);
                        if let Ok(v) = serde_json::from_slice::<Value>(&line) {
                            let _ = tx.send(v);
                        }
                    }
                }
            }
        });
        let err = host_stderr.clone();
        std::thread::spawn(move || {
            let mut r = stderr;
            let mut buf = [0u8; 4096];
            loop {
                match r.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => err.lock().unwrap().extend_from_slice(&buf[..n]),
                }
            }
        });
        let inst = Instance {
            dir: Some(dir),
            root,
            home,
            tmp,
            state,
            project,
            secret,
            bridge,
            host,
            host_stdin,
            host_pid,
            events,
            host_stdout,
            host_stderr,
            pending: Mutex::new(Vec::new()),
        };
        inst.write_seatbelt_policy(&[], &[]);
        let ready = inst.wait_event(|v| v["event"] == "ready");
        assert_eq!(ready["v"], HOST_PROTOCOL_VERSION, "host protocol version");
        inst
    }

    /// The policy the fake `sandbox-exec` checks this instance's Seatbelt launches
    /// against: `deny` (the token, say) plus the state dir, the host's and the bridge's
    /// sockets, and `ports`.
    pub fn write_seatbelt_policy(&self, deny: &[PathBuf], ports: &[u16]) {
        let mut all = deny.to_vec();
        all.push(self.state.clone());
        seatbelt::write_policy(
            &self.root,
            &all,
            &[],
            &[self.socket(), self.bridge.path.clone()],
            ports,
            &serde_json::json!({}),
            // The host's own tests launch specs on the host's network.
            "shared",
        );
    }

    pub fn socket(&self) -> PathBuf {
        self.state.join("host.sock")
    }

    /// Waits for the first host event matching `pred` (events seen earlier and not
    /// matched are kept for later waits).
    pub fn wait_event(&self, pred: impl Fn(&Value) -> bool) -> Value {
        {
            let mut pending = self.pending.lock().unwrap();
            if let Some(i) = pending.iter().position(&pred) {
                return pending.remove(i);
            }
        }
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.events.recv_timeout(left) {
                Ok(v) if pred(&v) => return v,
                Ok(v) => self.pending.lock().unwrap().push(v),
                Err(_) => panic!(
                    "no matching host event within {WAIT:?}; host stderr:\n{}",
                    String::from_utf8_lossy(&self.host_stderr.lock().unwrap())
                ),
            }
        }
    }

    pub fn wait_exit(&self, session_id: &str) -> Value {
        self.wait_event(|v| v["event"] == "session_exited" && v["session_id"] == session_id)
    }

    pub fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value, Vec<u8>) {
        let bytes = body.map(|b| serde_json::to_vec(b).unwrap());
        let (status, raw) = http(
            &self.socket(),
            method,
            path,
            Some(&self.secret),
            bytes.as_deref(),
        );
        let v = serde_json::from_slice(&raw).unwrap_or(Value::Null);
        (status, v, raw)
    }

    pub fn launch(&self, req: &LaunchRequest) -> (u16, Value, Vec<u8>) {
        let body = serde_json::to_value(req).unwrap();
        self.request("POST", "/launch", Some(&body))
    }

    pub fn message(&self, session_id: &str, text: &str) -> (u16, Value) {
        let (s, v, _) = self.request(
            "POST",
            &format!("/sessions/{session_id}/message"),
            Some(&serde_json::json!({"text": text})),
        );
        (s, v)
    }

    pub fn log(&self, session_id: &str) -> Vec<u8> {
        let (status, raw) = http(
            &self.socket(),
            "GET",
            &format!("/sessions/{session_id}/log"),
            Some(&self.secret),
            None,
        );
        assert_eq!(status, 200, "log of {session_id}");
        raw
    }

    /// The fakeagent start lines written under this instance's temp dir.
    pub fn start_lines(&self) -> Vec<Value> {
        read_jsonl(&self.tmp.join("fakeagent-calls.jsonl"))
    }

    /// A base request for this instance: project folder, fakeagent target.
    pub fn request_for(
        &self,
        session_id: &str,
        kind: SessionKind,
        argv: Vec<String>,
    ) -> LaunchRequest {
        LaunchRequest {
            v: HOST_PROTOCOL_VERSION,
            session_id: session_id.into(),
            kind,
            resume: false,
            project: ProjectRef {
                id: "p1".into(),
                name: "project".into(),
                path: self.project.clone(),
            },
            directory: self.project.clone(),
            name: None,
            template_id: None,
            argv,
            env: [
                (
                    "TMPDIR".to_string(),
                    self.tmp.to_string_lossy().into_owned(),
                ),
                ("HOME".to_string(), self.home.to_string_lossy().into_owned()),
            ]
            .into_iter()
            .collect(),
            // What the daemon sends: its own environment (the host starts with none),
            // here the test's and the fake sandbox-exec's policy.
            base_env: std::env::vars()
                .filter(|(k, _)| !k.starts_with("RELAY_"))
                .chain([(
                    seatbelt::POLICY_ENV.to_string(),
                    self.root
                        .join(seatbelt::POLICY_FILE)
                        .to_string_lossy()
                        .into_owned(),
                )])
                .collect(),
            pty: None,
            sandbox: None,
            identity: None,
            claude_token: None,
            redact_token: None,
            hold_output: false,
            // The host-level tests build the daemon's part by hand: the whole
            // environment, as an unsandboxed launch has it.
            env_allowlist: None,
        }
    }

    /// Adds a fresh identity secret to the request and registers it with the bridge.
    pub fn with_identity(&self, req: &mut LaunchRequest) {
        let secret = random_hex(32);
        self.bridge.expect(&req.session_id, &secret);
        req.identity = Some(IdentityLaunch {
            secret: Secret::new(secret),
        });
    }

    /// Writes a profile file (0600, in the instance's state dir, which every spec
    /// denies) and points the request at it.
    pub fn with_profile(
        &self,
        req: &mut LaunchRequest,
        backend: Backend,
        bytes: &[u8],
        launcher: Option<PathBuf>,
    ) -> PathBuf {
        let path = self.state.join(format!("{}.profile", req.session_id));
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        req.sandbox = Some(SandboxLaunch {
            backend,
            profile_path: path.clone(),
            launcher,
            denied_loopback_ports: vec![],
            limits: None,
        });
        path
    }

    /// Every regular file under the instance folder, except `skip`.
    pub fn all_files(&self, skip: &[&Path]) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        walk_files(&self.root, &mut |p| {
            if !skip.contains(&p) {
                if let Ok(b) = std::fs::read(p) {
                    out.push((p.to_path_buf(), b));
                }
            }
        });
        out
    }

    /// Host stdout and stderr as captured so far.
    pub fn host_output(&self) -> Vec<u8> {
        let mut v = self.host_stdout.lock().unwrap().clone();
        v.extend_from_slice(&self.host_stderr.lock().unwrap());
        v
    }

    /// Stops the host (closing its stdin ends every session) and waits for it.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        drop(self.host_stdin.take());
        self.host.wait().expect("wait host")
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        drop(self.host_stdin.take());
        if wait::child_within(&mut self.host, Duration::from_secs(10)).is_none() {
            let _ = self.host.kill();
            let _ = self.host.wait();
        }
        assert_seatbelt_answers_hold(&self.root);
        if std::thread::panicking() {
            if let Some(dir) = self.dir.take() {
                let kept = dir.keep();
                eprintln!("e2e: instance kept at {}", kept.display());
            }
        }
    }
}

/// Calls `f` for every regular file under `dir`, following no link. Its stack is on
/// the heap: an instance holds what its sessions wrote, which can be folders nested far
/// deeper than a recursion survives (past a path's length, they are simply not read).
pub fn walk_files(dir: &Path, f: &mut dyn FnMut(&Path)) {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                Ok(t) if t.is_file() => f(&p),
                _ => {}
            }
        }
    }
}

pub fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A close-on-exec pipe: std makes it with `pipe2` on Linux, and marks it right after
/// `pipe` on macOS (as it does for every pipe of `Command`).
fn pipe() -> (OwnedFd, OwnedFd) {
    let (r, w) = std::io::pipe().expect("pipe");
    (r.into(), w.into())
}

fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..=c.len() {
            out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

/// The token in the forms a leak would take, each named for a failure message: raw,
/// its base64 at each of the three alignments (the bytes no neighbour changes), URL
/// and JSON escaped, and its second half alone.
pub fn token_forms(token: &str) -> Vec<(String, String)> {
    let mut out = vec![("the token".to_string(), token.to_string())];
    for lead in ["", "x", "xy"] {
        let enc = base64(format!("{lead}{token}").as_bytes());
        out.push((
            format!("its base64 after {lead:?}"),
            enc[4..enc.len() - 4].to_string(),
        ));
    }
    out.push((
        "its URL encoding".into(),
        token
            .replace('+', "%2B")
            .replace('/', "%2F")
            .replace('=', "%3D"),
    ));
    out.push(("its JSON form".into(), token.replace('/', "\\/")));
    out.push((
        "its second half".into(),
        token[token.len() / 2..].to_string(),
    ));
    out
}

/// What reached a test's TCP listener since the last call: the tag each accepted
/// connection sent, in the order accepted. Only connections already queued count (the
/// listener is read without blocking); each is read to its end, at most [`WAIT`].
pub fn tags_reached(l: &std::net::TcpListener) -> Vec<String> {
    use std::io::Read;
    l.set_nonblocking(true).unwrap();
    let mut got = Vec::new();
    while let Ok((mut s, _)) = l.accept() {
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        got.push(String::from_utf8_lossy(&buf).into_owned());
    }
    got
}
