//! A private network for every sandboxed session (docs/THREAT-MODEL.md#a-private-network):
//! a network namespace of its own with loopback alone, out only through relay's egress
//! proxy, which allows the template's list and nothing else. Each test is named after
//! the attack it closes; the sandboxes are real bwrap ones, the probes Python inside
//! them.

use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::os::unix::net::UnixListener;
use std::path::Path;

use relay_e2e::assert_absent;
use relay_e2e::daemon::{base_settings, Relay, TOKEN_SETTING};
use relay_e2e::fakeapi::FakeApi;
use serde_json::{json, Value};

use crate::clients::real_claude::claude_code;
use crate::clients::real_turns::{
    assert_every_bearer_is, fake_oauth_token, message, settings, start_session,
};

/// Waits until `path` exists (a probe's marker), within the suite's bound.
fn wait_file(path: &Path) {
    assert!(
        relay_e2e::wait::until(relay_e2e::WAIT, || path.exists()),
        "{} never came",
        path.display()
    );
}

/// A loopback HTTP server on the host that answers every request `200 reached` and
/// counts them.
fn http_server() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let h = hits.clone();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let _ = c.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-length: 8\r\nconnection: close\r\n\r\nreached\n",
            );
        }
    });
    (port, hits)
}

/// Python inside the sandbox: each probe prints `name=result`.
const DIRECT_PROBES: &str = r#"
import socket, json, sys, os
t = json.load(open("targets.json"))
def probe(name, f):
    try:
        print(name + "=" + str(f()))
    except Exception as e:
        print(name + "=refused:" + type(e).__name__)
def tcp():
    s = socket.create_connection(("127.0.0.1", t["tcp"]), timeout=3); s.sendall(b"x"); return "connected"
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"udp-probe", ("127.0.0.1", t["udp"])); return "sent"
def abstract():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect("\0" + t["abstract"]); s.sendall(b"x"); return "connected"
def raw():
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); return "opened"
def links():
    return ",".join(sorted(n for _, n in socket.if_nameindex()))
def mptcp():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262); s.settimeout(3); s.connect(("127.0.0.1", t["tcp"])); return "connected"
def fastopen():
    s = socket.socket(); s.settimeout(3)
    s.sendto(b"x", socket.MSG_FASTOPEN, ("127.0.0.1", t["tcp"])); return "sent"
def netlink():
    # RTM_GETADDR, dumped: every address of every interface this namespace has.
    import struct
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    s.settimeout(3)
    s.sendall(struct.pack("=IHHII", 24, 22, 0x301, 1, 0) + struct.pack("=BBBBI", 0, 0, 0, 0, 0))
    found = []
    while True:
        data = s.recv(65536)
        off = 0
        while off < len(data):
            length, kind = struct.unpack_from("=IH", data, off)
            if kind == 3:
                return ",".join(sorted(set(found)))
            if kind == 20:
                family = data[off + 16]
                a = off + 24
                while a < off + length:
                    alen, atype = struct.unpack_from("=HH", data, a)
                    if atype == 1:
                        raw = data[a + 4:a + alen]
                        fam = socket.AF_INET if family == socket.AF_INET else socket.AF_INET6
                        found.append(socket.inet_ntop(fam, raw))
                    a += (alen + 3) & ~3
            off += (length + 3) & ~3
def egress_bridge():
    # Past the forwarder: the egress socket itself, asked for a bridge the list does
    # not name.
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(10)
    s.connect("/run/relay/egress.sock")
    s.sendall(("relay-egress 1 bridge 127.0.0.1:%d\n" % t["tcp"]).encode() + b"x")
    try:
        data = s.recv(64)
    except socket.timeout:
        return "open"
    return "connected" if data else "refused:closed"
for n, f in [("tcp", tcp), ("udp", udp), ("abstract", abstract), ("raw", raw), ("links", links), ("mptcp", mptcp), ("fastopen", fastopen), ("netlink", netlink), ("egress_bridge", egress_bridge)]:
    probe(n, f)
"#;

fn results(out: &str) -> Vec<(String, String)> {
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(a, b)| (a.to_string(), b.trim().to_string()))
        .collect()
}

fn result<'a>(r: &'a [(String, String)], name: &str) -> &'a str {
    r.iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {name}= in {r:?}"))
}

#[test]
fn no_sandbox_reaches_the_hosts_loopback_tcp_udp_or_abstract_sockets_directly() {
    let r = Relay::start(base_settings(None));
    // Three services of the host, each of the person's uid.
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let name = format!("relay-e2e-x11-{}", relay_e2e::random_hex(6));
    let abstract_addr =
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    use std::os::linux::net::SocketAddrExt;
    let abstract_l = UnixListener::bind_addr(&abstract_addr).unwrap();
    abstract_l.set_nonblocking(true).unwrap();
    std::fs::write(
        r.project.join("targets.json"),
        json!({"tcp": tcp.local_addr().unwrap().port(), "udp": udp.local_addr().unwrap().port(), "abstract": name})
            .to_string(),
    )
    .unwrap();
    std::fs::write(r.project.join("probe.py"), DIRECT_PROBES).unwrap();

    let (code, out) = r.sandbox_shell("cd \"$HOME/project\" && python3 probe.py");
    assert_eq!(code, 0, "{out}");
    let res = results(&out);
    for probe in [
        "tcp",
        "abstract",
        "raw",
        "mptcp",
        "fastopen",
        "egress_bridge",
    ] {
        assert!(result(&res, probe).starts_with("refused"), "{probe}: {out}");
    }
    assert_eq!(result(&res, "links"), "lo", "only loopback inside: {out}");
    // Netlink answers, about this namespace alone: loopback's addresses, none of the
    // host's.
    let addrs = result(&res, "netlink");
    assert!(
        !addrs.is_empty() && addrs.split(',').all(|a| a == "127.0.0.1" || a == "::1"),
        "netlink inside: {out}"
    );
    // Nothing reached the host: no connection, no datagram.
    assert!(tcp.accept().is_err(), "the host's TCP service was reached");
    assert!(
        abstract_l.accept().is_err(),
        "the host's abstract socket was reached"
    );
    let mut buf = [0u8; 64];
    assert!(
        udp.recv_from(&mut buf).is_err(),
        "the host's UDP service got a datagram"
    );
}

/// A shell that opens `n` connections to the proxy port, writes `held`, and keeps
/// them until it is stopped.
const FLOOD: &str = r#"
import socket, os, time
held = []
for i in range(int(os.environ["FLOOD_N"])):
    try:
        held.append(socket.create_connection(("127.0.0.1", 3128), timeout=3))
    except Exception:
        pass
open("held", "w").write(str(len(held)))
time.sleep(600)
"#;

/// Python through the proxy: plain HTTP to the bridged entry, then each `CONNECT`
/// named in `connects.json`, printing the status line of each answer and the body.
const THROUGH_THE_PROXY: &str = r#"
import json, os, socket, urllib.request
c = json.load(open("connects.json"))
def ask(target):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    while len(body) < length:
        chunk = s.recv(4096)
        if not chunk:
            break
        body += chunk
    return head.split(b"\r\n")[0].decode() + " | " + body.decode(errors="replace").strip()
print("bridged=" + urllib.request.urlopen("http://127.0.0.1:%d/direct" % c["bridge"], timeout=10).read().decode().strip())
opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": os.environ["HTTP_PROXY"]}))
print("proxied=" + opener.open("http://127.0.0.1:%d/proxied" % c["bridge"], timeout=10).read().decode().strip())
for name, target in c["connects"]:
    print(name + "=" + ask(target))
"#;

#[test]
fn the_egress_proxy_reaches_the_list_refuses_the_rest_by_rule_and_a_flood_slows_only_its_session() {
    let (port, hits) = http_server();
    let (named_port, named_hits) = http_server();
    let (local_port, local_hits) = http_server();
    let mut s = base_settings(None);
    for t in s["terminal_templates"].as_array_mut().unwrap() {
        if t["id"] == "shell" {
            // An explicit loopback entry (bridged), `localhost` with its port (the same,
            // by its reserved name), and names listed as names that the host's resolver
            // turns into a loopback, a cloud-metadata and a private address (numeric
            // shorthands: `127.1` is 127.0.0.1, `169.254.43518` is 169.254.169.254,
            // `10.1` is 10.0.0.1, on every libc).
            t["egress"] = json!([
                format!("127.0.0.1:{port}"),
                format!("localhost:{local_port}"),
                format!("127.1:{named_port}"),
                "169.254.43518:80",
                "10.1:443",
            ]);
        }
    }
    let r = Relay::start(s);
    std::fs::write(r.project.join("proxy.py"), THROUGH_THE_PROXY).unwrap();
    std::fs::write(r.project.join("flood.py"), FLOOD).unwrap();
    let connects = json!({"bridge": port, "connects": [
        ["listed", format!("127.0.0.1:{port}")],
        ["unlisted", "example.org:443"],
        ["by_name", format!("127.1:{named_port}")],
        ["localhost", format!("localhost:{local_port}")],
        ["metadata_by_name", "169.254.43518:80"],
        ["private_by_name", "10.1:443"],
        ["metadata", "169.254.169.254:80"],
        ["private", "10.0.0.1:443"],
        ["unlisted_shorthand", format!("2130706433:{port}")],
    ]});
    std::fs::write(r.project.join("connects.json"), connects.to_string()).unwrap();

    // One session floods the proxy and holds what it got.
    let flood = r.shell_terminal("cd \"$HOME/project\" && FLOOD_N=300 python3 flood.py");
    let flood_id = flood["id"].as_str().unwrap().to_string();
    wait_file(&r.project.join("held"));

    // Another one, meanwhile, gets through to the list and is refused the rest.
    let (code, out) = r.sandbox_shell("cd \"$HOME/project\" && python3 proxy.py");
    assert_eq!(code, 0, "{out}");
    let res = results(&out);
    assert_eq!(result(&res, "bridged"), "reached", "{out}");
    assert_eq!(result(&res, "proxied"), "reached", "{out}");
    assert!(result(&res, "listed").starts_with("HTTP/1.1 200"), "{out}");
    let unlisted = result(&res, "unlisted");
    assert!(
        unlisted.starts_with("HTTP/1.1 403")
            && unlisted.contains("not in this session's egress list"),
        "{out}"
    );
    // Listed by name, resolved to a restricted address: refused, naming the class.
    for (name, class) in [
        ("by_name", "a loopback address, reached by name"),
        (
            "metadata_by_name",
            "a cloud metadata address, reached by name",
        ),
        ("private_by_name", "a private address, reached by name"),
    ] {
        let got = result(&res, name);
        assert!(
            got.starts_with("HTTP/1.1 403") && got.contains(class),
            "{name}: {out}"
        );
    }
    for refused in ["metadata", "private", "unlisted_shorthand"] {
        assert!(
            result(&res, refused).starts_with("HTTP/1.1 403")
                && result(&res, refused).contains("not in this session's egress list"),
            "{refused}: {out}"
        );
    }
    assert!(
        result(&res, "localhost").starts_with("HTTP/1.1 200"),
        "{out}"
    );
    assert_eq!(named_hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(local_hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(hits.load(std::sync::atomic::Ordering::SeqCst) >= 3);

    // Each decision is an audit row and an event, naming the rule.
    let rows: Vec<Value> = r
        .audit_rows()
        .into_iter()
        .filter(|row| row["action"] == "egress")
        .collect();
    let refused: Vec<&Value> = rows.iter().filter(|r| r["outcome"] == "denied").collect();
    assert!(
        refused.iter().any(|r| r["egress"]["host"] == "example.org"
            && r["egress"]["rule"].as_str().unwrap().contains("egress")),
        "{rows:?}"
    );
    assert!(
        rows.iter().any(|r| r["outcome"] == "allowed"
            && r["egress"]["port"] == port
            && r["egress"]["received"].as_u64().unwrap() > 0),
        "{rows:?}"
    );
    assert_eq!(r.cli(&["terminal", "stop", "--id", &flood_id]).status, 0);
    r.wait_exited(&flood_id);
}

#[test]
fn a_routing_port_squatted_by_a_tokenless_session_never_gets_the_bearer() {
    let Some(claude) = claude_code() else { return };
    // The person routes Claude through a local gateway that is not running now.
    let gateway = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = gateway.local_addr().unwrap().port();
    drop(gateway);
    let script = json!([{"text": "unused"}]);
    let mut r = Relay::prepare(None, false);
    let api = FakeApi::start(&r.root, &script);
    let token = fake_oauth_token();
    r.write_token(&token);
    let mut s = settings(&claude, &api, Some(TOKEN_SETTING));
    s["terminal_templates"][0]["env"]["ANTHROPIC_BASE_URL"] =
        json!(format!("http://127.0.0.1:{port}"));
    r.write_settings(&s);
    r.launch_daemon();

    // A token-less session listens on that port and keeps whatever comes.
    let squat = format!(
        "cd \"$HOME/project\" && python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((\"127.0.0.1\", {port})); s.listen(8)
open(\"listening\", \"w\").write(\"yes\")
s.settimeout(120)
while True:
    c, _ = s.accept()
    open(\"got\", \"ab\").write(c.recv(65536))
'"
    );
    let squatter = r.shell_terminal(&squat);
    let squatter_id = squatter["id"].as_str().unwrap().to_string();
    wait_file(&r.project.join("listening"));

    // The token launch's first request goes to the host's port, where nobody listens.
    let id = start_session(&r, &[]);
    let out = message(&r, &id, "hello", &[]);
    assert_ne!(out.status, 0, "the turn reached something: {}", out.stdout);
    assert_eq!(r.cli(&["terminal", "stop", "--id", &squatter_id]).status, 0);
    r.wait_exited(&squatter_id);
    let got = std::fs::read(r.project.join("got")).unwrap_or_default();
    assert!(
        got.is_empty(),
        "the squatter got: {}",
        String::from_utf8_lossy(&got)
    );
    assert_absent(&r.output(), &token, "relay's output");
    for (p, bytes) in r.all_files(&[&r.token_path()]) {
        assert_absent(&bytes, &token, &p.display().to_string());
    }
}

#[test]
fn a_real_claude_turn_reaches_the_stand_in_over_its_bridge_and_is_recorded() {
    let Some(claude) = claude_code() else { return };
    let script = json!([{"text": "over the bridge"}]);
    let mut r = Relay::prepare(None, false);
    let api = FakeApi::start(&r.root, &script);
    let token = fake_oauth_token();
    r.write_token(&token);
    // Routed by `localhost`, as LiteLLM's and claude-code-router's guides write it: the
    // reserved name is 127.0.0.1, bridged the same.
    let mut s = settings(&claude, &api, Some(TOKEN_SETTING));
    s["terminal_templates"][0]["env"]["ANTHROPIC_BASE_URL"] =
        json!(format!("http://localhost:{}", api.port));
    r.write_settings(&s);
    r.launch_daemon();
    let id = start_session(&r, &[]);
    let out = message(&r, &id, "hi", &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert!(out.stdout.contains("over the bridge"), "{}", out.stdout);
    // The stand-in saw the fd-5 bearer; the audit saw the connection, not the bearer.
    assert_every_bearer_is(&api, &api.messages(), &token);
    // A connection is recorded at its close: the session's end closes it.
    assert_eq!(r.cli(&["session", "stop", "--id", &id]).status, 0);
    r.wait_exited(&id);
    r.wait_event(|e| e["name"] == "egress" && e["session_id"] == id.as_str());
    let rows = r.audit_rows();
    assert!(
        rows.iter().any(|row| row["action"] == "egress"
            && row["session_id"] == id.as_str()
            && row["outcome"] == "allowed"
            && row["egress"]["port"] == api.port
            && row["egress"]["sent"].as_u64().unwrap() > 0),
        "{rows:?}"
    );
    for row in &rows {
        assert_absent(row.to_string().as_bytes(), &token, "an audit row");
    }
    // The session's own view of them.
    let listed = r.cli_json(&["session", "egress", "--id", &id]);
    let mine = listed["rows"].as_array().unwrap();
    assert!(
        !mine.is_empty() && mine.iter().all(|row| row["session_id"] == id.as_str()),
        "{listed}"
    );
    let text = r.cli(&["session", "egress", "--id", &id]);
    assert!(
        text.stdout
            .contains(&format!("allowed  127.0.0.1:{}", api.port)),
        "{}",
        text.stdout
    );
}

/// `ANTHROPIC_BASE_URL` at a host off the list. A routing variable puts its own host on
/// the list, so the way there is a URL the person wrote one way and Claude Code asks for
/// another: `https://10.1:P` (a gateway by the IPv4 shorthand) puts the name `10.1:P` on
/// the list, and Claude Code's URL parser asks the proxy for a tunnel to `10.0.0.1:P`,
/// which is not on it. (Over plain `http://` the launch is refused before it starts:
/// `token::contract::a_token_launch_routed_over_cleartext_http_to_a_remote_host_is_refused`.)
/// The turn fails at the proxy, whose reason and how to allow it are in the egress
/// row; no connection leaves relay's proxy (no allowed egress row), so no listener
/// anywhere gets the bearer, which reaches nothing but relay's own proxy (it logs no
/// header).
#[test]
fn anthropic_base_url_at_a_host_off_the_list_fails_the_turn_clearly_and_no_listener_gets_the_bearer(
) {
    let Some(claude) = claude_code() else { return };
    let mut r = Relay::prepare(None, false);
    let api = FakeApi::start(&r.root, &json!([{"text": "unused"}]));
    let token = fake_oauth_token();
    r.write_token(&token);
    let mut s = settings(&claude, &api, Some(TOKEN_SETTING));
    s["terminal_templates"][0]["env"]["ANTHROPIC_BASE_URL"] = json!("https://10.1:4000");
    r.write_settings(&s);
    r.launch_daemon();

    let id = start_session(&r, &[]);
    let out = message(&r, &id, "hello", &[]);
    assert_ne!(out.status, 0, "the turn reached something: {}", out.stdout);
    for want in ["error: the turn failed", "the proxy refused the tunnel"] {
        assert!(out.stderr.contains(want), "{want:?} not in: {}", out.stderr);
    }
    assert_eq!(r.cli(&["session", "stop", "--id", &id]).status, 0);
    r.wait_exited(&id);
    let rows: Vec<Value> = r
        .audit_rows()
        .into_iter()
        .filter(|row| row["action"] == "egress" && row["session_id"] == id.as_str())
        .collect();
    assert!(
        rows.iter().any(|row| row["outcome"] == "denied"
            && row["egress"]["host"] == "10.0.0.1"
            && row["egress"]["port"] == 4000
            && row["egress"]["rule"]
                == "10.0.0.1:4000 is not in this session's egress list; add it to the \
                    template's \"egress\" in settings.json"),
        "{rows:?}"
    );
    assert!(
        rows.iter().all(|row| row["outcome"] == "denied"),
        "a connection left the proxy: {rows:?}"
    );
    assert!(api.records().is_empty(), "{:?}", api.records());
    assert_absent(&r.output(), &token, "relay's output");
    for (p, bytes) in r.all_files(&[&r.token_path()]) {
        assert_absent(&bytes, &token, &p.display().to_string());
    }
}
