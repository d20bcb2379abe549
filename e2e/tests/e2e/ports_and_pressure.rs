//! Denied ports hold for every way into TCP (MPTCP, TCP Fast Open, io_uring), probed
//! from inside a real bwrap session; and a flood of connections cannot take relay down.

use std::io::Read;
use std::net::TcpListener;

use relay_e2e::daemon::{base_settings, Relay};
use serde_json::{json, Value};

/// Runs every way into TCP against each target and writes one JSON line per attempt to
/// `probe-out.jsonl`: `ok`, or the errno and the step that failed. Sockets are blocking,
/// so a Fast Open send that gets through completes its connection before it returns.
const PROBE: &str = r#"
import ctypes, json, signal, socket, struct
signal.alarm(60)
libc = ctypes.CDLL(None, use_errno=True)
targets = json.load(open("probe-targets.json"))
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

for method in ["connect", "mptcp", "sendto", "sendmsg", "sendmmsg", "tfo_connect"]:
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

/// What reached a listener: the tag each accepted connection sent, in order.
fn drain(l: &TcpListener) -> Vec<String> {
    l.set_nonblocking(true).unwrap();
    let mut got = Vec::new();
    while let Ok((mut s, _)) = l.accept() {
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(relay_e2e::WAIT)).unwrap();
        let mut buf = Vec::new();
        let _ = s.read_to_end(&mut buf);
        got.push(String::from_utf8_lossy(&buf).into_owned());
    }
    got.sort();
    got
}

#[test]
fn a_session_cannot_reach_a_denied_port_through_mptcp_or_tcp_fast_open() {
    let (denied, denied4, denied6) = dual_listener();
    let (allowed, allowed4, allowed6) = dual_listener();
    let mut s = base_settings(None);
    s["session_sandbox"] = json!({"denied_loopback_ports": [denied]});
    let r = Relay::start(s);
    let api: u16 = r.ready["api"]
        .as_str()
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .expect("api port in ready.json");
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
    std::fs::write(r.project.join("probe-targets.json"), targets.to_string()).unwrap();
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
    // Six methods against eight targets, and io_uring.
    assert_eq!(seen, 6 * 8 + 1, "probe output: {lines:?}\n{log}");

    // Nothing reached the denied listener on either address; the allowed one got exactly
    // the plain connections.
    let reached = |l: &TcpListener, name: &str, want: &[&str], wrong: &mut Vec<String>| {
        let got = drain(l);
        if got != want {
            wrong.push(format!("{name} received {got:?}, want {want:?}"));
        }
    };
    reached(&denied4, "denied port on 127.0.0.1", &[], &mut wrong);
    reached(&denied6, "denied port on ::1", &[], &mut wrong);
    reached(
        &allowed4,
        "allowed port on 127.0.0.1",
        &["connect/allowed-mapped", "connect/allowed-v4"],
        &mut wrong,
    );
    reached(
        &allowed6,
        "allowed port on ::1",
        &["connect/allowed-v6"],
        &mut wrong,
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
