//! Denied ports hold for every way into TCP (MPTCP, TCP Fast Open, io_uring), probed
//! from inside a real bwrap session; and a flood of connections cannot take relay down.

use relay::wire::Code;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use relay_e2e::daemon::{base_settings, host_network, Relay};
use serde_json::{json, Value};

/// Runs each way into TCP named in `probe-methods.json` against each target (and
/// `io_uring_setup` once, when named) and writes one JSON line per attempt to
/// `probe-out.jsonl`: `ok`, or the errno and the step that failed. Sockets are blocking,
/// so a Fast Open send that gets through completes its connection before it returns.
const PROBE: &str = r#"
import ctypes, json, signal, socket, struct
signal.alarm(60)
libc = ctypes.CDLL(None, use_errno=True)
targets = json.load(open("probe-targets.json"))
methods = json.load(open("probe-methods.json"))
out = open("probe-out.jsonl", "w")

def rec(**kw):
    out.write(json.dumps(kw) + "\n")
    out.flush()

class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

class msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                ("iov", ctypes.POINTER(iovec)), ("iovlen", ctypes.c_size_t),
                ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]

class mmsghdr(ctypes.Structure):
    _fields_ = [("hdr", msghdr), ("len", ctypes.c_uint)]

def sockaddr(af, host, port):
    if af == socket.AF_INET:
        return struct.pack("=HH4s8x", af, socket.htons(port), socket.inet_pton(af, host))
    return struct.pack("=HHI16sI", af, socket.htons(port), 0, socket.inet_pton(af, host), 0)

def sendmmsg(s, tag, af, host, port):
    sa = sockaddr(af, host, port)
    name = ctypes.create_string_buffer(sa, len(sa))
    data = ctypes.create_string_buffer(tag, len(tag))
    iov = iovec(ctypes.cast(data, ctypes.c_void_p), len(tag))
    m = mmsghdr()
    m.hdr.name = ctypes.cast(name, ctypes.c_void_p)
    m.hdr.namelen = len(sa)
    m.hdr.iov = ctypes.pointer(iov)
    m.hdr.iovlen = 1
    if libc.sendmmsg(s.fileno(), ctypes.byref(m), 1, socket.MSG_FASTOPEN) < 0:
        e = ctypes.get_errno()
        raise OSError(e, "sendmmsg")

for method in [m for m in methods if m != "io_uring_setup"]:
    for label, fam, host, port in targets:
        af = socket.AF_INET if fam == "v4" else socket.AF_INET6
        addr = (host, port) if fam == "v4" else (host, port, 0, 0)
        tag = ("%s/%s" % (method, label)).encode()
        step, s = "socket", None
        try:
            s = socket.socket(af, socket.SOCK_STREAM, 262 if method == "mptcp" else 0)
            if method in ("connect", "mptcp"):
                step = "connect"; s.connect(addr); step = "send"; s.sendall(tag)
            elif method == "tfo_connect":
                step = "setsockopt"; s.setsockopt(6, 30, 1)
                step = "connect"; s.connect(addr); step = "send"; s.sendall(tag)
            elif method == "sendto":
                step = "send"; s.sendto(tag, socket.MSG_FASTOPEN, addr)
            elif method == "sendmsg":
                step = "send"; s.sendmsg([tag], [], socket.MSG_FASTOPEN, addr)
            else:
                step = "send"; sendmmsg(s, tag, af, host, port)
            rec(method=method, target=label, result="ok")
        except OSError as e:
            rec(method=method, target=label, result="errno", errno=e.errno, step=step)
        finally:
            if s is not None:
                s.close()

if "io_uring_setup" in methods:
    params = ctypes.create_string_buffer(120)
    fd = libc.syscall(425, 4, params)
    if fd >= 0:
        rec(method="io_uring_setup", target="-", result="ok")
    else:
        rec(method="io_uring_setup", target="-", result="errno", errno=ctypes.get_errno(), step="io_uring_setup")
out.close()
"#;

/// A loopback port with a listener on both 127.0.0.1 and ::1.
fn dual_listener() -> (u16, TcpListener, TcpListener) {
    for _ in 0..50 {
        let v4 = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = v4.local_addr().unwrap().port();
        if let Ok(v6) = TcpListener::bind(("::1", port)) {
            return (port, v4, v6);
        }
    }
    panic!("no loopback port free on both 127.0.0.1 and ::1");
}

/// What reached a listener: the tag each accepted connection sent, sorted.
fn drain(l: &TcpListener) -> Vec<String> {
    let mut got = relay_e2e::tags_reached(l);
    got.sort();
    got
}

/// Runs the probe with `methods` in a sandboxed shell terminal whose settings deny one
/// loopback port (and the API port), and checks every attempt's outcome and what each
/// listener received. Panics with every wrong outcome.
fn probe_ports(methods: &[&str]) {
    if relay_e2e::bwrap_only(&format!("denied ports through {methods:?}")) {
        return;
    }
    let (denied, denied4, denied6) = dual_listener();
    let (allowed, allowed4, allowed6) = dual_listener();
    let mut s = host_network(base_settings(None));
    s["session_sandbox"] = json!({"denied_loopback_ports": [denied]});
    let r = Relay::start(s);
    let api: u16 = r.api_port().expect("api port in ready.json");
    let targets = json!([
        ["denied-v4", "v4", "127.0.0.1", denied],
        ["denied-v6", "v6", "::1", denied],
        ["denied-mapped", "v6", "::ffff:127.0.0.1", denied],
        ["api-v4", "v4", "127.0.0.1", api],
        ["api-mapped", "v6", "::ffff:127.0.0.1", api],
        ["allowed-v4", "v4", "127.0.0.1", allowed],
        ["allowed-v6", "v6", "::1", allowed],
        ["allowed-mapped", "v6", "::ffff:127.0.0.1", allowed],
    ]);
    let n_targets = targets.as_array().unwrap().len();
    std::fs::write(r.project.join("probe-targets.json"), targets.to_string()).unwrap();
    std::fs::write(
        r.project.join("probe-methods.json"),
        json!(methods).to_string(),
    )
    .unwrap();
    std::fs::write(r.project.join("probe.py"), PROBE).unwrap();

    // A sandboxed shell terminal (bwrap, Landlock for the denied ports and the API port).
    let v = r.shell_terminal("exec python3 probe.py");
    let id = v["id"].as_str().unwrap();
    assert_eq!(v["sandboxed"], true, "{v}");
    let ev = r.wait_exited(id);
    let log = r.cli(&["terminal", "log", "--id", id]).stdout;
    assert_eq!(ev["exit_status"], 0, "probe failed: {ev}\n{log}");
    let lines = relay_e2e::read_jsonl(&r.project.join("probe-out.jsonl"));

    let mut wrong = Vec::new();
    let mut seen = 0;
    for line in &lines {
        let method = line["method"].as_str().unwrap_or_default();
        let target = line["target"].as_str().unwrap_or_default();
        let expected: Value = match method {
            // Landlock refuses a plain connect to a denied port; an allowed one works.
            "connect" if target.starts_with("allowed") => json!({"result": "ok"}),
            "connect" => json!({"result": "errno", "errno": libc::EACCES, "step": "connect"}),
            // The filter cannot see the port, so these are refused on every port.
            "mptcp" => json!({"result": "errno", "errno": libc::EACCES, "step": "socket"}),
            "sendto" | "sendmsg" | "sendmmsg" => {
                json!({"result": "errno", "errno": libc::EACCES, "step": "send"})
            }
            "tfo_connect" => {
                json!({"result": "errno", "errno": libc::EACCES, "step": "setsockopt"})
            }
            "io_uring_setup" => {
                json!({"result": "errno", "errno": libc::EPERM, "step": "io_uring_setup"})
            }
            _ => json!({"result": "unexpected method"}),
        };
        seen += 1;
        let got = json!({"result": line["result"], "errno": line["errno"], "step": line["step"]});
        let matches = expected
            .as_object()
            .unwrap()
            .iter()
            .all(|(k, v)| &got[k] == v);
        if !matches {
            wrong.push(format!("{method} {target}: got {got}, want {expected}"));
        }
    }
    // Each method against every target; io_uring once.
    let want_seen: usize = methods
        .iter()
        .map(|m| if *m == "io_uring_setup" { 1 } else { n_targets })
        .sum();
    assert_eq!(seen, want_seen, "probe output: {lines:?}\n{log}");

    // Nothing reached the denied listener on either address; the allowed one got exactly
    // the plain connections.
    let reached = |l: &TcpListener, name: &str, want: &[&str], wrong: &mut Vec<String>| {
        let got = drain(l);
        if got != want {
            wrong.push(format!("{name} received {got:?}, want {want:?}"));
        }
    };
    let plain = methods.contains(&"connect");
    reached(&denied4, "denied port on 127.0.0.1", &[], &mut wrong);
    reached(&denied6, "denied port on ::1", &[], &mut wrong);
    let want4: &[&str] = if plain {
        &["connect/allowed-mapped", "connect/allowed-v4"]
    } else {
        &[]
    };
    let want6: &[&str] = if plain { &["connect/allowed-v6"] } else { &[] };
    reached(&allowed4, "allowed port on 127.0.0.1", want4, &mut wrong);
    reached(&allowed6, "allowed port on ::1", want6, &mut wrong);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

// Attack 2 of issue 7, one test per way into TCP: each tries IPv4, IPv6 and a
// v4-mapped address against a denied port, relay's API port and an allowed port.

#[test]
fn a_session_cannot_reach_a_denied_port_by_a_plain_connect_and_reaches_an_allowed_one() {
    probe_ports(&["connect"]);
}

#[test]
fn a_session_cannot_reach_a_denied_port_through_an_mptcp_socket() {
    probe_ports(&["mptcp"]);
}

#[test]
fn a_session_cannot_reach_a_denied_port_through_tcp_fast_open_by_sendto() {
    probe_ports(&["sendto"]);
}

#[test]
fn a_session_cannot_reach_a_denied_port_through_tcp_fast_open_by_sendmsg() {
    probe_ports(&["sendmsg"]);
}

#[test]
fn a_session_cannot_reach_a_denied_port_through_tcp_fast_open_by_sendmmsg() {
    probe_ports(&["sendmmsg"]);
}

#[test]
fn a_session_cannot_reach_a_denied_port_through_tcp_fastopen_connect() {
    probe_ports(&["tfo_connect"]);
}

#[test]
fn a_session_cannot_reach_a_denied_port_through_io_uring() {
    probe_ports(&["io_uring_setup"]);
}

/// A sustained flood: connections to `addr`, each with a request head that never ends,
/// opened until the listener takes no more (a connect times out: its backlog is full)
/// or `n` are open; whenever the other side closes one, a new one is tried.
struct Flood {
    stop: Arc<AtomicBool>,
    open: Arc<AtomicUsize>,
    saturated: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Flood {
    fn start(addr: &str, n: usize) -> Flood {
        let addr: std::net::SocketAddr = addr.parse().expect("api address");
        let stop = Arc::new(AtomicBool::new(false));
        let open = Arc::new(AtomicUsize::new(0));
        let saturated = Arc::new(AtomicBool::new(false));
        let (stop2, open2, sat2) = (stop.clone(), open.clone(), saturated.clone());
        let thread = std::thread::spawn(move || {
            let mut conns: Vec<TcpStream> = Vec::new();
            while !stop2.load(Ordering::SeqCst) {
                while conns.len() < n {
                    match TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
                        Ok(mut s) => {
                            if s.write_all(b"POST /api/sessions HTTP/1.1\r\nX-Half: ")
                                .is_ok()
                            {
                                conns.push(s);
                            }
                        }
                        Err(_) => {
                            sat2.store(true, Ordering::SeqCst);
                            break;
                        }
                    }
                }
                if conns.len() == n {
                    sat2.store(true, Ordering::SeqCst);
                }
                open2.store(conns.len(), Ordering::SeqCst);
                // Wait (bounded, so `stop` is seen) for the daemon to answer or close one.
                let mut fds: Vec<libc::pollfd> = conns
                    .iter()
                    .map(|s| libc::pollfd {
                        fd: s.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    })
                    .collect();
                // Safety: `fds` is a live array of pollfd of the length passed.
                unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 100) };
                let closed: Vec<i32> = fds
                    .iter()
                    .filter(|p| p.revents != 0)
                    .map(|p| p.fd)
                    .collect();
                conns.retain(|s| !closed.contains(&s.as_raw_fd()));
            }
        });
        Flood {
            stop,
            open,
            saturated,
            thread: Some(thread),
        }
    }

    fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    fn saturated(&self) -> bool {
        self.saturated.load(Ordering::SeqCst)
    }

    /// Stops the flood and closes every connection.
    fn end(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_flood_of_half_sent_api_connections_does_not_take_relay_down() {
    // A daemon with 256 descriptors: the flood below holds more connections than that.
    let mut r = Relay::prepare(None, false);
    r.nofile_limit = Some(256);
    r.write_settings(&host_network(base_settings(None)));
    r.launch_daemon();
    let addr = r.ready.api.clone().expect("api address");
    let token = std::fs::read_to_string(r.config.join("api-token")).unwrap();
    let bearer = format!("Authorization: Bearer {}\r\n", token.trim());

    // A session that runs through the whole flood.
    let before = r.shell_terminal("exec sleep 600");
    let before_id = before["id"].as_str().unwrap().to_string();

    // Up to 400 held connections: more than the daemon has descriptors. The listener
    // takes what it will and the kernel's backlog (128) the rest, then connects time out.
    let flood = Flood::start(&addr, 400);
    assert!(
        relay_e2e::wait::until(relay_e2e::WAIT, || flood.saturated()),
        "the flood never filled the listener ({} open)",
        flood.open()
    );
    let held = flood.open();

    // While flooded: the owner's launches over relay.sock work, each is audited, and
    // the session from before keeps running.
    let (status, v, _) = r.api("GET", "/api/status", None);
    assert_eq!(status, 200, "{v}");
    let mut during = Vec::new();
    for i in 0..3 {
        let v = r.shell_terminal(&format!("echo during-{i}"));
        let id = v["id"].as_str().unwrap().to_string();
        assert_eq!(r.wait_exited(&id)["exit_status"], 0);
        during.push(id);
    }
    let rows = r.audit_rows();
    for id in during.iter().chain([&before_id]) {
        assert!(
            rows.iter().any(|row| row["session_id"] == id.as_str()
                && row["action"] == "session_launch"
                && row["outcome"] == "allowed"),
            "no launch row for {id}: {rows:?}"
        );
    }
    for id in &during {
        assert!(
            rows.iter()
                .any(|row| row["session_id"] == id.as_str() && row["action"] == "session_end"),
            "no end row for {id}: {rows:?}"
        );
    }
    eprintln!(
        "flood: {held} connections held, {} at the end",
        flood.open()
    );
    flood.end();
    // The daemon never ran short of descriptors: it served 32 of them at a time (an
    // eighth of its descriptors) and said so.
    let out = r.output_text();
    assert!(
        !out.contains("Too many open files") && !out.contains("urandom"),
        "the daemon ran short of descriptors:\n{out}"
    );
    assert!(
        out.contains("relay: api (tcp): 32 connections open (the limit)"),
        "no sign of the connection cap; output:\n{out}"
    );

    // After the flood: the TCP listener serves again, launches work, and the session
    // from before never ended.
    assert!(
        relay_e2e::wait::until(relay_e2e::WAIT, || relay_e2e::tcp_http(
            &addr,
            "GET",
            "/api/status",
            &bearer
        )
        .0 == 200),
        "the TCP listener did not come back"
    );
    let after = r.shell_terminal("echo after");
    assert_eq!(
        r.wait_exited(after["id"].as_str().unwrap())["exit_status"],
        0
    );
    let list = r.cli_json(&["terminal", "list"]);
    let still = list["terminals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == before_id.as_str())
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(still["state"], "running", "{list}");
    assert!(
        !r.all_events()
            .iter()
            .any(|e| e["name"] == "session.exited" && e["session_id"] == before_id.as_str()),
        "the session from before ended"
    );
    let out = r.output_text();
    assert!(
        !out.contains("Too many open files"),
        "the daemon ran short of descriptors:\n{out}"
    );
    // And it is still the same daemon: SIGTERM ends it with 0.
    let st = r.stop().expect("the daemon was running");
    assert_eq!(st.code(), Some(0), "{st:?}\n{}", r.output_text());
}

#[test]
fn an_audit_row_that_cannot_be_written_refuses_the_launch() {
    let mut s = host_network(base_settings(None));
    s["terminal_templates"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "open", "command": "/bin/sh", "sandbox": false}));
    let r = Relay::start(s);
    let audit = r.config.join("audit.jsonl");
    // A folder where the log was: no row can be written.
    let _ = std::fs::remove_file(&audit);
    std::fs::create_dir(&audit).unwrap();
    let marker = "987654";
    let out = r.cli(&[
        "terminal",
        "start",
        "--project",
        "p1",
        "--template",
        "open",
        "--extra-arg",
        "-c",
        "--extra-arg",
        &format!("exec sleep {marker}"),
    ]);
    assert_eq!(out.status, 1, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert!(
        out.stderr.contains(Code::AuditUnavailable.as_str()) && out.stderr.contains("audit.jsonl"),
        "{}",
        out.stderr
    );
    let ev = r.wait_event(|e| e["name"] == "session.launch" && e["status"] == "error");
    assert_eq!(ev["code"], Code::AuditUnavailable.as_str(), "{ev}");
    // Nothing runs: no terminal is listed, and the program it started is gone.
    let list = r.cli_json(&["terminal", "list"]);
    assert_eq!(list["terminals"], json!([]), "{list}");
    let running = || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .any(|c| c == format!("sleep\0{marker}\0").as_bytes())
    };
    assert!(
        relay_e2e::wait::until(Duration::from_secs(5), || !running()),
        "the unaudited session still runs"
    );

    // The log back: launches are audited and run again.
    std::fs::remove_dir(&audit).unwrap();
    let v = r.shell_terminal("echo audited");
    let id = v["id"].as_str().unwrap();
    r.wait_exited(id);
    assert!(
        r.audit_rows()
            .iter()
            .any(|row| row["session_id"] == id && row["outcome"] == "allowed"),
        "{:?}",
        r.audit_rows()
    );
}
