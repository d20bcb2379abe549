//! Seatbelt's private network (docs/macos.md, docs/session-host.md#the-egress-proxy):
//! with no network namespace on macOS, a proxied session's profile lets it connect to
//! its own egress proxy's loopback port alone, which relay binds before the sandbox
//! starts; every other way out (other loopback ports, hosts out there, DNS, listening)
//! is refused. On Linux the fake `sandbox-exec` asks those questions of the rendered
//! profile at the port the launch's `HTTPS_PROXY` names.

use std::io::{Read, Write};

use relay_e2e::seatbelt::{Check, Target};
use serde_json::Value;

use super::launches::{assert_checks_hold, end, launch};

/// `127.0.0.1:PORT` of the session's egress proxy, as its sandbox explanation says.
fn proxy_port(sandbox: &Value) -> u16 {
    let at = sandbox["network"]["proxy"]
        .as_str()
        .unwrap_or_else(|| panic!("no proxy in {sandbox}"));
    at.strip_prefix("127.0.0.1:")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{at}"))
}

#[test]
fn seatbelt_proxied_session_reaches_its_own_proxy_port_alone() {
    let l = launch();
    let (status, sandbox, _) =
        l.r.api("GET", &format!("/api/sessions/{}/sandbox", l.session), None);
    assert_eq!(status, 200, "{sandbox}");
    assert_eq!(sandbox["network"]["mode"], "proxied", "{sandbox}");
    let port = proxy_port(&sandbox);
    assert_ne!(port, 0);
    let other = if port == u16::MAX { port - 1 } else { port + 1 };
    let checks = [
        Check::allowed("network-outbound", Target::Port(port)),
        Check::denied("network-outbound", Target::Port(other)),
        Check::denied(
            "network-outbound",
            Target::Socket("/private/var/run/mDNSResponder".into()),
        ),
        Check::denied(
            "mach-lookup",
            Target::Mach("com.apple.dnssd.service".into()),
        ),
        Check::denied("mach-lookup", Target::Mach("com.apple.trustd".into())),
    ];
    assert_checks_hold(&l, &checks);

    // The port is relay's proxy for this session: a host off the list is refused by
    // rule, and the refusal is the session's egress record.
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).expect("the proxy listens");
    tcp.set_read_timeout(Some(relay_e2e::WAIT)).unwrap();
    write!(
        tcp,
        "CONNECT off-the-list.example:443 HTTP/1.1\r\nHost: off-the-list.example:443\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 512];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tcp.read(&mut buf).expect("an answer");
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&answer);
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let ev = l.r.wait_event(|e| {
        e["name"] == "egress"
            && e["session_id"] == l.session.as_str()
            && e["egress"]["host"] == "off-the-list.example"
    });
    assert_eq!(ev["egress"]["allowed"], false, "{ev}");
    drop(tcp);
    end(l);
}
