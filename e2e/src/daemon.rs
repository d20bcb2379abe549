//! A whole relay instance for the daemon tests: `relay serve` from `target/` with its
//! own config dir, HOME, TMPDIR and a `127.0.0.1:0` API port, waited on through the
//! ready.json path it prints first and through its events, stopped on drop (SIGTERM),
//! its folder kept when the test failed. The fake agent is installed as `claude` in
//! the instance's `~/.local/bin`.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use relay::wire;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::exec_file::copy_executable;
use crate::{bin, http, seatbelt, wait, WAIT};

/// The token setting the suite uses (proving `~/` expansion).
pub const TOKEN_SETTING: &str = "~/.config/acme-ltt/token";

pub struct RelayOptions {
    pub settings: Value,
    /// Run the daemon (and every CLI call) as this unprivileged uid/gid.
    pub uid: Option<u32>,
    /// Keep the config dir at `~/.config/relay` (the platform default) instead of
    /// beside the home folder.
    pub config_in_home: bool,
    /// `PATH` for the daemon and every CLI call, `~/` against the instance's home;
    /// `~/.local/bin:/usr/local/bin:/usr/bin:/bin` when `None`.
    pub path: Option<String>,
}

pub struct Relay {
    dir: Option<tempfile::TempDir>,
    pub root: PathBuf,
    pub home: PathBuf,
    pub config: PathBuf,
    pub tmp: PathBuf,
    pub project: PathBuf,
    bin_dir: PathBuf,
    uid: Option<u32>,
    /// Start `relay serve` with this soft and hard `RLIMIT_NOFILE` (set before
    /// `launch_daemon`), so a descriptor flood is cheap to make.
    pub nofile_limit: Option<u64>,
    /// See [`RelayOptions::path`].
    pub path: Option<String>,
    /// `relay serve --log-level` (set before `launch_daemon`).
    pub log_level: Option<String>,
    /// Variables `relay serve` is started with besides the instance's own (set before
    /// `launch_daemon`): what the shell that started relay exported. CLI calls do not
    /// get them.
    pub serve_env: Vec<(String, String)>,
    child: Option<Child>,
    /// `ready.json` as the daemon wrote it (`relay::wire::Ready`); a placeholder
    /// (pid 0) until `launch_daemon`.
    pub ready: wire::Ready,
    /// `relay audit scan` at drop (on by default; off for a test that plants the token).
    pub scan_on_drop: bool,
    /// Paths every Seatbelt launch of this instance must keep read-only (the pinned
    /// folders of what a token launch runs), for the policy file; set before
    /// `launch_daemon`.
    pub seatbelt_pins: Vec<PathBuf>,
    /// The settings last written, for the Seatbelt policy file.
    settings: Mutex<Value>,
    output: Arc<Mutex<Vec<u8>>>,
    cursor: Mutex<u64>,
    seen: Mutex<Vec<Value>>,
}

/// The settings the suite starts from: one project at `~/project` allowing every
/// template, a `claude-code` template (the fake agent, also reading `~/.config`), a
/// `shell` and a `tool` template.
pub fn base_settings(token_setting: Option<&str>) -> Value {
    let mut v = json!({
        "projects": [{"id": "p1", "name": "Project One", "path": "~/project", "allowed_templates": ["*"]}],
        "terminal_templates": [
            {"id": "claude-code", "name": "Claude Code", "command": "claude", "read": ["~/.config"]},
            {"id": "shell", "name": "Shell", "command": "/bin/sh"},
        ],
        "api": {"listen": "127.0.0.1:0"},
    });
    if let Some(t) = token_setting {
        v["claude_token_file"] = json!(t);
    }
    v
}

/// Every template of `settings` on the host's network (`"network": "host"`): for the
/// tests of what holds there (the denied ports, relay's API port).
pub fn host_network(mut settings: Value) -> Value {
    for t in settings["terminal_templates"].as_array_mut().unwrap() {
        t["network"] = "host".into();
    }
    settings
}

/// One check of a `relay doctor --json` report (a `wire::Doctor`), by name; a missing
/// check, or a report that is not one, fails the test.
pub fn doctor_check(report: &Value, name: &str) -> Value {
    let typed: wire::Doctor = typed(report, "relay doctor --json");
    let check = typed
        .checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no {name} check: {report}"));
    serde_json::to_value(check).unwrap()
}

/// `v` read as its wire type (`relay::wire`); one that is not fails the test, naming
/// `what` and the field.
pub fn typed<T: DeserializeOwned>(v: &Value, what: &str) -> T {
    T::deserialize(v).unwrap_or_else(|e| panic!("{what}: {e}: {v}"))
}

#[derive(Debug)]
pub struct Cli {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Relay {
    pub fn start(settings: Value) -> Relay {
        Self::start_with(RelayOptions {
            settings,
            uid: None,
            config_in_home: false,
            path: None,
        })
    }

    pub fn start_with(opts: RelayOptions) -> Relay {
        let mut r = Self::prepare(opts.uid, opts.config_in_home);
        r.path = opts.path;
        if !opts.settings.is_null() {
            r.write_settings(&opts.settings);
        }
        r.launch_daemon();
        r
    }

    /// The folders and binaries, without starting anything.
    pub fn prepare(uid: Option<u32>, config_in_home: bool) -> Relay {
        let base = std::env::var_os("RELAY_E2E_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        std::fs::create_dir_all(&base).ok();
        let dir = tempfile::Builder::new()
            .prefix("relay-e2e-d-")
            .tempdir_in(&base)
            .expect("instance dir");
        let root = dir.path().to_path_buf();
        let home = root.join("home");
        let config = if config_in_home {
            home.join(".config/relay")
        } else {
            root.join("config")
        };
        let tmp = root.join("tmp");
        let project = home.join("project");
        let local_bin = home.join(".local/bin");
        for d in [&home, &config, &tmp, &project, &local_bin] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o700)).unwrap();
        // The fake agent is the instance's `claude`.
        copy_executable(&bin("fakeagent"), &local_bin.join("claude"));
        // The binaries, copied so that an unprivileged instance can run them too (by a
        // child process: crate::exec_file says why).
        let bin_dir = root.join("bin");
        std::fs::create_dir_all(&bin_dir).unwrap();
        for b in ["relay", "relay-sessions", "relay-shim", "relay-e2e-http"] {
            copy_executable(&bin(b), &bin_dir.join(b));
        }
        if let Some(uid) = uid {
            chown_tree(&root, uid);
        }
        Relay {
            dir: Some(dir),
            root,
            home,
            config,
            tmp,
            project,
            bin_dir,
            uid,
            nofile_limit: None,
            path: None,
            log_level: None,
            serve_env: Vec::new(),
            child: None,
            ready: wire::Ready {
                pid: 0,
                version: String::new(),
                config_dir: PathBuf::new(),
                socket: PathBuf::new(),
                api: None,
            },
            scan_on_drop: true,
            seatbelt_pins: Vec::new(),
            settings: Mutex::new(Value::Null),
            output: Arc::default(),
            cursor: Mutex::new(0),
            seen: Mutex::new(Vec::new()),
        }
    }

    fn env(&self, cmd: &mut Command) {
        let home = self.home.display().to_string();
        let path = self
            .path
            .as_deref()
            .unwrap_or("~/.local/bin:/usr/local/bin:/usr/bin:/bin")
            .split(':')
            .map(|d| match d.strip_prefix("~/") {
                Some(rest) => format!("{home}/{rest}"),
                None => d.to_string(),
            })
            .collect::<Vec<_>>()
            .join(":");
        cmd.env_clear()
            .env("HOME", &self.home)
            .env("TMPDIR", &self.tmp)
            .env(seatbelt::POLICY_ENV, self.root.join(seatbelt::POLICY_FILE))
            .env("PATH", path)
            .env("LANG", "C.UTF-8")
            .current_dir(&self.project);
        if let Some(uid) = self.uid {
            // std drops the supplementary groups itself when root sets a uid.
            cmd.uid(uid).gid(uid);
        }
    }

    /// `relay serve` for this instance, its environment set, not started.
    pub fn serve_command(&self) -> Command {
        let mut cmd = Command::new(self.bin_dir.join("relay"));
        cmd.arg("--config-dir").arg(&self.config).arg("serve");
        if let Some(level) = &self.log_level {
            cmd.arg("--log-level").arg(level);
        }
        self.env(&mut cmd);
        cmd.envs(self.serve_env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    pub fn launch_daemon(&mut self) {
        let mut cmd = self.serve_command();
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(n) = self.nofile_limit {
            let lim = libc::rlimit {
                rlim_cur: n,
                rlim_max: n,
            };
            // Safety: setrlimit between fork and exec is async-signal-safe and only
            // reads `lim`, a copied plain struct.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd.spawn().expect("spawn relay serve");
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let out = self.output.clone();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut first = true;
            loop {
                let mut line = String::new();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        out.lock().unwrap().extend_from_slice(line.as_bytes());
                        if first {
                            let _ = tx.send(line.trim().to_string());
                            first = false;
                        }
                    }
                }
            }
        });
        let out = self.output.clone();
        std::thread::spawn(move || {
            let mut r = stderr;
            let mut buf = [0u8; 4096];
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    return;
                }
                out.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let ready_path = match rx.recv_timeout(WAIT) {
            Ok(p) => p,
            Err(_) => panic!(
                "relay serve printed no ready path; output:\n{}",
                self.output_text()
            ),
        };
        assert_eq!(PathBuf::from(&ready_path), self.config.join("ready.json"));
        self.ready = serde_json::from_slice(&std::fs::read(&ready_path).expect("ready.json"))
            .expect("ready.json is a wire::Ready");
        // A new daemon numbers its events from 1 again.
        *self.cursor.lock().unwrap() = 0;
        self.seen.lock().unwrap().clear();
        self.child = Some(child);
        self.write_seatbelt_policy();
    }

    /// What every Seatbelt launch of this instance must refuse, for the fake
    /// `sandbox-exec` (e2e/src/seatbelt.rs): the token file the settings name, the
    /// config dir, the paths in `seatbelt_pins`, relay's three sockets and its API port;
    /// and the `claude-code` template's `macos` opt-ins, which the fake asks about.
    pub fn write_seatbelt_policy(&self) {
        let settings = self.settings.lock().unwrap().clone();
        let mut deny = Vec::new();
        if let Some(token) = settings["claude_token_file"]
            .as_str()
            .filter(|t| !t.is_empty())
        {
            deny.push(match token.strip_prefix("~/") {
                Some(rest) => self.home.join(rest),
                None => PathBuf::from(token),
            });
        }
        deny.push(self.config.clone());
        let sockets = [
            self.socket(),
            self.config.join("bridge.sock"),
            self.config.join("sessions/host.sock"),
        ];
        let ports: Vec<u16> = self.api_port().into_iter().collect();
        // Sessions run the `claude-code` template: its opt-ins are theirs.
        let macos = settings["terminal_templates"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["id"] == "claude-code")
            .and_then(|t| t.get("macos").cloned())
            .unwrap_or_else(|| json!({}));
        // The claude-code template's network, as relay would give it.
        let template_network = settings["terminal_templates"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["id"] == "claude-code")
            .and_then(|t| t["network"].as_str())
            .unwrap_or("proxied");
        let network = match (
            settings["session_sandbox"]["network_off"] == true,
            template_network,
        ) {
            (true, _) | (_, "none") => "off",
            (_, "host") => "shared",
            _ => "proxied",
        };
        seatbelt::write_policy(
            &self.root,
            &deny,
            &self.seatbelt_pins,
            &sockets,
            &ports,
            &macos,
            network,
        );
    }

    /// The loopback API port from ready.json, once the daemon is up with `api.listen`.
    pub fn api_port(&self) -> Option<u16> {
        self.ready
            .api
            .as_deref()
            .and_then(|a| a.rsplit_once(':'))
            .and_then(|(_, p)| p.parse().ok())
    }

    pub fn output_text(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned()
    }

    pub fn output(&self) -> Vec<u8> {
        self.output.lock().unwrap().clone()
    }

    pub fn write_settings(&self, v: &Value) {
        *self.settings.lock().unwrap() = v.clone();
        self.write_seatbelt_policy();
        let p = self.config.join("settings.json");
        std::fs::write(&p, serde_json::to_string_pretty(v).unwrap()).unwrap();
        if let Some(uid) = self.uid {
            std::os::unix::fs::chown(&p, Some(uid), Some(uid)).unwrap();
        }
    }

    /// `<home>/.config/acme-ltt/token`, 0600, with a trailing newline.
    pub fn write_token(&self, token: &str) -> PathBuf {
        let dir = self.home.join(".config/acme-ltt");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        let tmp = dir.join(".token.new");
        std::fs::write(&tmp, format!("{token}\n")).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
        if let Some(uid) = self.uid {
            std::os::unix::fs::chown(&dir, Some(uid), Some(uid)).unwrap();
            std::os::unix::fs::chown(&tmp, Some(uid), Some(uid)).unwrap();
        }
        std::fs::rename(&tmp, &path).unwrap();
        path
    }

    pub fn token_path(&self) -> PathBuf {
        self.home.join(".config/acme-ltt/token")
    }

    /// The `relay` command line for this instance, to run some other way (on a pty).
    pub fn cli_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(self.bin_dir.join("relay"));
        cmd.arg("--config-dir").arg(&self.config).args(args);
        self.env(&mut cmd);
        cmd
    }

    /// Puts relay's three binaries in `dir` as `cargo install` does in `~/.cargo/bin`
    /// (each copied beside its name and renamed over it, so a running one is replaced,
    /// not written), and runs them from there from the next `launch_daemon` on.
    pub fn install_in(&mut self, dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        for b in ["relay", "relay-sessions", "relay-shim", "relay-e2e-http"] {
            copy_executable(&bin(b), &dir.join(b));
        }
        self.bin_dir = dir.to_path_buf();
    }

    pub fn relay_bin(&self) -> PathBuf {
        self.bin_dir.join("relay")
    }

    pub fn cli(&self, args: &[&str]) -> Cli {
        let mut cmd = Command::new(self.bin_dir.join("relay"));
        cmd.arg("--config-dir").arg(&self.config).args(args);
        self.env(&mut cmd);
        cmd.stdin(Stdio::null());
        let out: Output = cmd.output().expect("run relay");
        Cli {
            status: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// A CLI call that must succeed with `--json`: its one line, parsed.
    pub fn cli_json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.push("--json");
        let out = self.cli(&a);
        assert_eq!(out.status, 0, "relay {args:?} failed: {}", out.stderr);
        assert_eq!(
            out.stdout.lines().count(),
            1,
            "--json prints one line: {:?}",
            out.stdout
        );
        serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("relay {args:?}: {e}: {}", out.stdout))
    }

    /// `relay terminal start --project p1 --template T --extra-arg auth --extra-arg status
    /// --json`, waited to its end: the agent writes its start line, prints its login
    /// state and exits. Returns the 201 entry.
    pub fn auth_status_terminal(&self, template: &str) -> Value {
        let v = self.cli_json(&[
            "terminal",
            "start",
            "--project",
            "p1",
            "--template",
            template,
            "--extra-arg",
            "auth",
            "--extra-arg",
            "status",
        ]);
        self.wait_exited(v["id"].as_str().expect("terminal id"));
        v
    }

    /// `relay terminal start --project p1 --template shell --extra-arg -c --extra-arg SCRIPT`.
    pub fn shell_terminal(&self, script: &str) -> Value {
        self.template_terminal("shell", script)
    }

    /// `relay terminal start --project p1 --template TEMPLATE --extra-arg -c
    /// --extra-arg SCRIPT`, which must succeed: its `--json` line.
    pub fn template_terminal(&self, template: &str, script: &str) -> Value {
        self.cli_json(&[
            "terminal",
            "start",
            "--project",
            "p1",
            "--template",
            template,
            "--extra-arg",
            "-c",
            "--extra-arg",
            script,
        ])
    }

    /// `relay sandbox shell -- -c SCRIPT` with stdin null, which must print nothing on
    /// stderr: its exit code and stdout.
    pub fn sandbox_shell(&self, script: &str) -> (i32, String) {
        let out = self
            .cli_command(&["sandbox", "shell", "--", "-c", script])
            .stdin(Stdio::null())
            .output()
            .expect("run relay sandbox");
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    pub fn socket(&self) -> PathBuf {
        self.config.join("relay.sock")
    }

    /// `GET /api/terminals/{id}/attach{query}` upgraded over `relay.sock`, by hand (the
    /// frames are the test's to read and write): the stream past the `101` answer's
    /// head, reads bounded by [`WAIT`].
    pub fn raw_attach(&self, id: &str, query: &str) -> std::os::unix::net::UnixStream {
        use std::io::Write;
        let mut s = std::os::unix::net::UnixStream::connect(self.socket()).unwrap();
        write!(
            s,
            "GET /api/terminals/{id}/attach{query} HTTP/1.1\r\nHost: relay\r\nConnection: Upgrade\r\nUpgrade: relay-attach\r\n\r\n"
        )
        .unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(s.read(&mut b).unwrap(), 1, "attach closed");
            head.push(b[0]);
        }
        assert!(
            head.starts_with(b"HTTP/1.1 101"),
            "{}",
            String::from_utf8_lossy(&head)
        );
        s
    }

    /// One API request over the unix socket (as the instance's uid).
    pub fn api(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value, Vec<u8>) {
        let bytes = body.map(|b| serde_json::to_vec(b).unwrap());
        let (status, raw) = match self.uid {
            None => http(&self.socket(), method, path, None, bytes.as_deref()),
            Some(_) => self.http_as_uid(method, path, bytes.as_deref()),
        };
        (
            status,
            serde_json::from_slice(&raw).unwrap_or(Value::Null),
            raw,
        )
    }

    /// One request from a process running as the instance's uid
    /// (`relay-e2e-http`, relay's own client).
    fn http_as_uid(&self, method: &str, path: &str, body: Option<&[u8]>) -> (u16, Vec<u8>) {
        let mut cmd = Command::new(self.bin_dir.join("relay-e2e-http"));
        cmd.arg(self.socket())
            .arg(method)
            .arg(path)
            .arg("content-type: application/json");
        self.env(&mut cmd);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = cmd.spawn().expect("relay-e2e-http");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(body.unwrap_or(b""))
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "relay-e2e-http {method} {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        crate::parse_response_pub(&out.stdout)
    }

    /// Waits for the first event (after those already consumed) matching `pred`.
    pub fn wait_event(&self, pred: impl Fn(&Value) -> bool) -> Value {
        {
            let mut seen = self.seen.lock().unwrap();
            if let Some(i) = seen.iter().position(&pred) {
                return seen.remove(i);
            }
        }
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no matching event within {WAIT:?}; output:\n{}",
                self.output_text()
            );
            let after = *self.cursor.lock().unwrap();
            let wait_ms = left.as_millis().min(5_000);
            let (status, v, _) = self.api(
                "GET",
                &format!("/api/events?after={after}&wait_ms={wait_ms}"),
                None,
            );
            assert_eq!(status, 200, "events: {v}");
            let events: wire::Events = typed(&v, "GET /api/events");
            let mut found = None;
            for e in events.events {
                *self.cursor.lock().unwrap() = e.seq;
                let ev = serde_json::to_value(&e).unwrap();
                if found.is_none() && pred(&ev) {
                    found = Some(ev);
                } else {
                    self.seen.lock().unwrap().push(ev);
                }
            }
            if let Some(ev) = found {
                return ev;
            }
        }
    }

    /// Waits for `n` events (after those already consumed) matching `pred`, in order.
    pub fn wait_events(&self, n: usize, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        (0..n).map(|_| self.wait_event(&pred)).collect()
    }

    /// One turn of a headless session over the API (`POST /api/sessions/{id}/message`),
    /// which must answer 200: the reply's text.
    pub fn turn(&self, id: &str, text: &str) -> String {
        let (status, v, _) = self.api(
            "POST",
            &format!("/api/sessions/{id}/message"),
            Some(&json!({ "text": text })),
        );
        assert_eq!(status, 200, "message: {v}");
        typed::<wire::TurnAnswer>(&v, "POST /api/sessions/{id}/message").text
    }

    pub fn wait_exited(&self, id: &str) -> Value {
        self.wait_event(|e| e["name"] == "session.exited" && e["session_id"] == id)
    }

    /// All events so far, as the API has them.
    pub fn all_events(&self) -> Vec<Value> {
        let (_, v, _) = self.api("GET", "/api/events?after=0", None);
        let events: wire::Events = typed(&v, "GET /api/events");
        events
            .events
            .iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect()
    }

    /// Every fakeagent start line of this instance (each session has its own TMPDIR).
    pub fn start_lines(&self) -> Vec<Value> {
        let mut out = Vec::new();
        if let Ok(rd) = std::fs::read_dir(&self.tmp) {
            for e in rd.flatten() {
                out.extend(crate::read_jsonl(&e.path().join("fakeagent-calls.jsonl")));
            }
        }
        out
    }

    pub fn start_line(&self, id: &str) -> Value {
        let lines = self.start_lines();
        lines
            .iter()
            .find(|l| l["env"]["RELAY_SESSION_ID"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no start line for {id} in {lines:?}"))
    }

    /// Every line of `audit.jsonl`, each checked to be a `wire::AuditRow`.
    pub fn audit_rows(&self) -> Vec<Value> {
        let rows = crate::read_jsonl(&self.config.join("audit.jsonl"));
        for row in &rows {
            let _: wire::AuditRow = typed(row, "audit.jsonl");
        }
        rows
    }

    /// A 2xx answer to `method path` (no body) read as its wire type.
    pub fn api_typed<T: DeserializeOwned>(&self, method: &str, path: &str) -> T {
        let (status, v, _) = self.api(method, path, None);
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {v}"
        );
        typed(&v, &format!("{method} {path}"))
    }

    /// A `relay … --json` call that must succeed, its line read as its wire type
    /// (`wire::Terminals` for `terminal list`, `wire::Session` for a start, …).
    pub fn cli_typed<T: DeserializeOwned>(&self, args: &[&str]) -> T {
        typed(&self.cli_json(args), &format!("relay {args:?}"))
    }

    /// SIGTERM, then wait for the exit.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        // Safety: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        match wait::child_within(&mut child, Duration::from_secs(20)) {
            Some(st) => Some(st),
            None => {
                let _ = child.kill();
                child.wait().ok()
            }
        }
    }

    /// SIGKILL, as a crash would end it, then wait for the exit. Its host sees its
    /// stdin close and ends every session on its own.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        // Safety: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
        child.wait().ok()
    }

    /// After the daemon was killed by its pid: waits (bounded) until it is gone whole
    /// and reaps it. A killed process's leader reads as a zombie while another of its
    /// threads still leaves a kernel call, and until then it holds its descriptors
    /// (`relay.lock` among them); `wait` answers only once every thread is gone.
    pub fn reap(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        wait::child_within(&mut child, WAIT)
    }

    /// The daemon's pid while it runs.
    pub fn daemon_pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn all_files(&self, skip: &[&Path]) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        crate::walk_files(&self.root, &mut |p| {
            if !skip.contains(&p) {
                if let Ok(b) = std::fs::read(p) {
                    out.push((p.to_path_buf(), b));
                }
            }
        });
        out
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        // Every instance that ends well is swept by `relay audit scan` for its token in
        // every form, in every file relay keeps (exit 1 names file and offset only).
        if self.scan_on_drop && self.child.is_some() && !std::thread::panicking() {
            // (Without a readable token it has nothing to look for and says so.)
            let out = self.cli(&["audit", "scan"]);
            assert!(
                !out.stdout.lines().any(|l| l.starts_with("found ")),
                "relay audit scan found the token:\n{}",
                out.stdout
            );
        }
        self.stop();
        crate::assert_seatbelt_answers_hold(&self.root);
        if std::thread::panicking() {
            if let Some(dir) = self.dir.take() {
                eprintln!("e2e: instance kept at {}", dir.keep().display());
            }
        } else if let Some(uid) = self.uid {
            // Files the unprivileged daemon made are removed by root either way.
            let _ = uid;
        }
    }
}

fn chown_tree(root: &Path, uid: u32) {
    std::os::unix::fs::chown(root, Some(uid), Some(uid)).unwrap();
    if let Ok(rd) = std::fs::read_dir(root) {
        for e in rd.flatten() {
            let p = e.path();
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                chown_tree(&p, uid);
            } else {
                std::os::unix::fs::chown(&p, Some(uid), Some(uid)).unwrap();
            }
        }
    }
}
