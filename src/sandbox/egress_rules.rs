//! A proxied session's egress allowlist: `host[:port]` entries, `*.domain` wildcards,
//! and the address classes no name may lead to unless an entry names that address and
//! port (docs/session-host.md#the-egress-proxy). Beside it, what the list holds on the
//! sandbox's side: the loopback ports its forwarder listens on, and the routing URLs that
//! join the list.
//!
//! Pure: the proxy (`src/daemon/egress/`) resolves a name itself, then asks
//! [`Rules::address`] about every address it would connect to, so the address checked is
//! the one connected to. A launch's plan and the settings' checks read the same list.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The ports an entry without one allows.
pub const DEFAULT_PORTS: [u16; 2] = [443, 80];

/// Named lists a template may put in its `egress` (`"@registries"`).
pub const PRESETS: &[(&str, &[&str])] = &[(
    "@registries",
    &[
        "registry.npmjs.org",
        "pypi.org",
        "files.pythonhosted.org",
        "crates.io",
        "index.crates.io",
        "static.crates.io",
        "static.rust-lang.org",
        "proxy.golang.org",
        "sum.golang.org",
        "rubygems.org",
        "repo.maven.apache.org",
        "deb.debian.org",
        "github.com",
        "api.github.com",
        "codeload.github.com",
        "objects.githubusercontent.com",
        "raw.githubusercontent.com",
        "gitlab.com",
    ],
)];

/// What a name (or an address) in an entry matches.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Host {
    /// Exactly this name, lower case.
    Name(String),
    /// Any name below this domain (`*.example.com`: `a.example.com`, not `example.com`).
    Below(String),
    /// This address: the only way a loopback, private or metadata address is reached.
    Addr(IpAddr),
}

/// One allowlist entry, as written and parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub written: String,
    host: Host,
    /// `None`: [`DEFAULT_PORTS`].
    port: Option<u16>,
}

impl Entry {
    /// Parses `host`, `host:port`, `*.domain[:port]`, `1.2.3.4[:port]`, `[::1]:port`.
    pub fn parse(text: &str) -> Result<Entry, String> {
        let bad = |why: &str| format!("egress entry {text:?}: {why}");
        let t = text.trim();
        if t.is_empty() {
            return Err(bad("empty"));
        }
        let (host, port) = if let Some(rest) = t.strip_prefix('[') {
            let (addr, after) = rest.split_once(']').ok_or_else(|| bad("no closing ]"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p),
                None if after.is_empty() => None,
                None => return Err(bad("text after ]")),
            };
            (addr, port)
        } else if t.matches(':').count() > 1 {
            // A bare IPv6 address, no port.
            (t, None)
        } else {
            match t.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (t, None),
            }
        };
        let port = match port {
            Some(p) => Some(
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| bad("the port is not 1-65535"))?,
            ),
            None => None,
        };
        let host = if let Ok(ip) = host.parse::<IpAddr>() {
            Host::Addr(ip)
        } else if is_localhost(host) {
            // `localhost:4000` is `127.0.0.1:4000`, bridged the same (a client inside that
            // tries `[::1]` first is refused there at once and goes on to 127.0.0.1).
            Host::Addr(IpAddr::V4(Ipv4Addr::LOCALHOST))
        } else if let Some(domain) = host.strip_prefix("*.") {
            Host::Below(valid_name(domain).ok_or_else(|| bad("not a host name"))?)
        } else {
            Host::Name(valid_name(host).ok_or_else(|| bad("not a host name"))?)
        };
        Ok(Entry {
            written: t.to_string(),
            host,
            port,
        })
    }

    fn port_ok(&self, port: u16) -> bool {
        match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }

    /// An explicit address with its port: bridged into the sandbox when it is loopback.
    pub fn loopback_bridge(&self) -> Option<SocketAddr> {
        match (&self.host, self.port) {
            (Host::Addr(ip), Some(port)) if ip.is_loopback() => Some(SocketAddr::new(*ip, port)),
            _ => None,
        }
    }
}

/// Whether `host` is `localhost` (any case, a final dot or not): loopback by definition
/// (RFC 6761), 127.0.0.1 to the list and to the proxy, never looked up.
pub fn is_localhost(host: &str) -> bool {
    host.trim_end_matches('.').eq_ignore_ascii_case("localhost")
}

/// A lower-case DNS name of letters, digits, `-` and `.`, 1-253 characters.
fn valid_name(name: &str) -> Option<String> {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let ok = (1..=253).contains(&name.len())
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
        });
    ok.then_some(name)
}

/// Why an address may not be reached by name.
pub fn restricted(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => restricted_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return restricted_v4(v4);
            }
            let seg0 = v6.segments()[0];
            if v6.is_loopback() {
                Some("loopback")
            } else if v6.is_unspecified() {
                Some("unspecified")
            } else if v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
                Some("cloud metadata")
            } else if seg0 & 0xfe00 == 0xfc00 {
                Some("private (unique local)")
            } else if seg0 & 0xffc0 == 0xfe80 {
                Some("link-local")
            } else if v6.is_multicast() {
                Some("multicast")
            } else {
                None
            }
        }
    }
}

fn restricted_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let o = ip.octets();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip == Ipv4Addr::new(169, 254, 169, 254) || ip == Ipv4Addr::new(100, 100, 100, 200) {
        Some("cloud metadata")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if ip.is_private() {
        Some("private")
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        Some("CGNAT")
    } else if ip.is_unspecified() || o[0] == 0 {
        Some("unspecified")
    } else if ip.is_broadcast() || ip.is_multicast() || o[0] >= 240 {
        Some("not unicast")
    } else {
        None
    }
}

/// A session's allowlist.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rules {
    pub entries: Vec<Entry>,
}

/// A decision, with the rule that made it, in words for the `403` and the audit row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed(String),
    Refused(String),
}

impl Rules {
    /// Parses every entry, expanding presets. The first bad one is the error.
    pub fn parse(entries: &[String]) -> Result<Rules, String> {
        let mut out = Vec::new();
        for e in entries {
            if let Some((_, list)) = PRESETS.iter().find(|(name, _)| name == e) {
                for item in *list {
                    out.push(Entry::parse(item)?);
                }
            } else if e.starts_with('@') {
                let names: Vec<&str> = PRESETS.iter().map(|(n, _)| *n).collect();
                return Err(format!(
                    "egress entry {e:?}: no such preset (there is {})",
                    names.join(", ")
                ));
            } else {
                out.push(Entry::parse(e)?);
            }
        }
        Ok(Rules { entries: out })
    }

    /// Whether `host:port` is on the list by name (or by address, for an address).
    pub fn host(&self, host: &str, port: u16) -> Verdict {
        if let Ok(ip) = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            return self.address_only(ip, port);
        }
        let Some(name) = valid_name(host) else {
            return Verdict::Refused(format!("{host:?} is not a host name"));
        };
        if is_localhost(&name) {
            return self.address_only(IpAddr::V4(Ipv4Addr::LOCALHOST), port);
        }
        for e in &self.entries {
            let by_name = match &e.host {
                Host::Name(n) => *n == name,
                Host::Below(d) => name.ends_with(&format!(".{d}")),
                Host::Addr(_) => false,
            };
            if by_name && e.port_ok(port) {
                return Verdict::Allowed(format!("allowed by egress entry {:?}", e.written));
            }
        }
        Verdict::Refused(self.not_listed(&format!("{name}:{port}")))
    }

    /// Whether an address a listed name resolved to may be connected to: a public one,
    /// or one an entry names with the port.
    pub fn address(&self, addr: SocketAddr) -> Verdict {
        if self.explicit(addr) {
            return Verdict::Allowed(format!("{addr} is named in the egress list"));
        }
        match restricted(addr.ip()) {
            Some(class) => Verdict::Refused(format!(
                "{addr} is a {class} address, reached by name: relay refuses those unless an \
                 egress entry names the address and port ({addr})"
            )),
            None => Verdict::Allowed("a public address".into()),
        }
    }

    /// An address asked for directly (`CONNECT 10.0.0.1:22`): on the list as an address,
    /// and not restricted unless named with its port.
    fn address_only(&self, ip: IpAddr, port: u16) -> Verdict {
        let addr = SocketAddr::new(ip, port);
        if self.explicit(addr) {
            return Verdict::Allowed(format!("{addr} is named in the egress list"));
        }
        let listed = self
            .entries
            .iter()
            .any(|e| e.host == Host::Addr(ip) && e.port_ok(port));
        if !listed {
            return Verdict::Refused(self.not_listed(&addr.to_string()));
        }
        self.address(addr)
    }

    fn explicit(&self, addr: SocketAddr) -> bool {
        self.entries
            .iter()
            .any(|e| e.host == Host::Addr(addr.ip()) && e.port == Some(addr.port()))
    }

    fn not_listed(&self, what: &str) -> String {
        if self.entries.is_empty() {
            format!(
                "{what} is not in this session's egress list, which is empty (no network); \
                 add it to the template's \"egress\" in settings.json"
            )
        } else {
            format!(
                "{what} is not in this session's egress list; add it to the template's \
                 \"egress\" in settings.json"
            )
        }
    }

    /// The explicit loopback entries, bridged into the sandbox at the same address.
    pub fn bridges(&self) -> Vec<SocketAddr> {
        let mut out: Vec<SocketAddr> = Vec::new();
        for b in self.entries.iter().filter_map(Entry::loopback_bridge) {
            if !out.contains(&b) {
                out.push(b);
            }
        }
        out
    }
}

/// The proxy port inside a sandbox, unless a bridge takes it.
pub const PROXY_PORT: u16 = 3128;

/// The port the forwarder's proxy listens on beside `bridges`: [`PROXY_PORT`], or the
/// next one no bridge takes.
pub fn proxy_port(bridges: &[SocketAddr]) -> u16 {
    (PROXY_PORT..=u16::MAX)
        .find(|p| !bridges.iter().any(|b| b.port() == *p))
        .unwrap_or(PROXY_PORT)
}

/// The loopback ports a bwrap sandbox's forwarder listens on for `rules`: the proxy's
/// and each bridge's. No tool of a token launch may listen on one (a template's
/// `listen_ports` naming one is refused): whoever does takes Claude's traffic there.
pub fn held_ports(rules: &Rules) -> Vec<u16> {
    let bridges = rules.bridges();
    let mut ports = vec![proxy_port(&bridges)];
    for b in &bridges {
        if !ports.contains(&b.port()) {
            ports.push(b.port());
        }
    }
    ports
}

/// The routing variables that name where Claude Code sends its API traffic.
pub const ROUTING_URL_VARS: &[&str] = &["ANTHROPIC_BASE_URL", "CLAUDE_CODE_API_BASE_URL"];

/// The loopback addresses a launch's routing variables name (`ANTHROPIC_BASE_URL=
/// http://127.0.0.1:4000`), and the names: each joins the launch's egress list.
pub fn routing_entries(env: &std::collections::BTreeMap<String, String>) -> Vec<String> {
    let mut out = Vec::new();
    for name in ROUTING_URL_VARS {
        let Some(value) = env.get(*name) else {
            continue;
        };
        if let Some(entry) = url_entry(value) {
            if !out.contains(&entry) {
                out.push(entry);
            }
        }
    }
    out
}

/// `host:port` of an `http(s)://` URL, the port its scheme's when none is written.
fn url_entry(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let default = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    if authority.is_empty() {
        return None;
    }
    let has_port = if authority.starts_with('[') {
        authority.contains("]:")
    } else {
        authority.contains(':')
    };
    let entry = if has_port {
        authority.to_string()
    } else {
        format!("{authority}:{default}")
    };
    Entry::parse(&entry).ok().map(|e| e.written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(entries: &[&str]) -> Rules {
        Rules::parse(&entries.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    fn allowed(v: &Verdict) -> bool {
        matches!(v, Verdict::Allowed(_))
    }

    #[test]
    fn names_ports_and_wildcards() {
        let r = rules(&["api.anthropic.com", "*.example.com:8443", "Git.Host:22"]);
        assert!(allowed(&r.host("api.anthropic.com", 443)));
        assert!(allowed(&r.host("API.anthropic.com.", 80)));
        assert!(!allowed(&r.host("api.anthropic.com", 8080)));
        assert!(!allowed(&r.host("evil-api.anthropic.com", 443)));
        assert!(allowed(&r.host("a.b.example.com", 8443)));
        assert!(
            !allowed(&r.host("example.com", 8443)),
            "a wildcard is below the domain"
        );
        assert!(!allowed(&r.host("a.example.com", 443)));
        assert!(!allowed(&r.host("xexample.com", 8443)));
        assert!(allowed(&r.host("git.host", 22)));
        let Verdict::Refused(why) = r.host("other.org", 443) else {
            panic!()
        };
        assert!(
            why.contains("other.org:443") && why.contains("\"egress\""),
            "{why}"
        );
        let Verdict::Refused(why) = rules(&[]).host("a.org", 443) else {
            panic!()
        };
        assert!(why.contains("empty"), "{why}");
    }

    #[test]
    fn restricted_addresses_are_refused_by_name_and_open_only_when_named() {
        let r = rules(&["internal.example", "127.0.0.1:4000", "[::1]:5000"]);
        for a in [
            "127.0.0.1:443",
            "10.1.2.3:443",
            "172.16.0.1:443",
            "192.168.1.1:443",
            "169.254.169.254:80",
            "100.64.0.1:443",
            "0.0.0.0:443",
            "[::1]:443",
            "[fe80::1]:443",
            "[fd12::1]:443",
            "[::ffff:10.0.0.1]:443",
            "[fd00:ec2::254]:80",
            "224.0.0.1:443",
        ] {
            let addr: SocketAddr = a.parse().unwrap();
            assert!(!allowed(&r.address(addr)), "{a}");
        }
        assert!(allowed(&r.address("93.184.216.34:443".parse().unwrap())));
        assert!(allowed(&r.address("127.0.0.1:4000".parse().unwrap())));
        assert!(allowed(&r.address("[::1]:5000".parse().unwrap())));
        assert!(!allowed(&r.address("127.0.0.1:4001".parse().unwrap())));
        let Verdict::Refused(why) = r.address("169.254.169.254:80".parse().unwrap()) else {
            panic!()
        };
        assert!(why.contains("cloud metadata"), "{why}");
        // Asked for directly: the explicit entry, nothing else.
        assert!(allowed(&r.host("127.0.0.1", 4000)));
        assert!(!allowed(&r.host("127.0.0.1", 22)));
        assert!(!allowed(&r.host("10.0.0.1", 443)));
        assert_eq!(
            r.bridges(),
            vec![
                "127.0.0.1:4000".parse().unwrap(),
                "[::1]:5000".parse().unwrap()
            ]
        );
    }

    #[test]
    fn a_public_address_entry_is_a_plain_entry() {
        let r = rules(&["93.184.216.34"]);
        assert!(allowed(&r.host("93.184.216.34", 443)));
        assert!(!allowed(&r.host("93.184.216.34", 22)));
        assert!(r.bridges().is_empty());
    }

    #[test]
    fn bad_entries_and_presets() {
        for bad in [
            "",
            "a b",
            "host:0",
            "host:99999",
            "[::1",
            "*.",
            "-a.com",
            "@nothing",
        ] {
            assert!(
                Rules::parse(&[bad.to_string()]).is_err(),
                "{bad:?} was accepted"
            );
        }
        let r = rules(&["@registries"]);
        assert!(allowed(&r.host("registry.npmjs.org", 443)));
        assert!(allowed(&r.host("github.com", 443)));
    }

    #[test]
    fn each_address_class_is_named_and_its_edges_are_public() {
        let class = |a: &str| restricted(a.parse().unwrap());
        for (a, want) in [
            ("127.0.0.1", "loopback"),
            ("169.254.169.254", "cloud metadata"),
            ("100.100.100.200", "cloud metadata"),
            ("169.254.1.1", "link-local"),
            ("10.1.2.3", "private"),
            ("100.64.0.1", "CGNAT"),
            ("100.127.255.254", "CGNAT"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("255.255.255.255", "not unicast"),
            ("224.0.0.1", "not unicast"),
            ("240.0.0.1", "not unicast"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fd00:ec2::254", "cloud metadata"),
            ("fd00:ec2::253", "private (unique local)"),
            ("fc00::1", "private (unique local)"),
            ("fe80::1", "link-local"),
            ("ff02::1", "multicast"),
            ("::ffff:100.64.0.1", "CGNAT"),
        ] {
            assert_eq!(class(a), Some(want), "{a}");
        }
        // Beside CGNAT's 100.64.0.0/10: the rest of 100/8, and 64 in another first octet.
        for a in [
            "100.0.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "1.64.0.1",
            "93.184.216.34",
            "2606:4700::1",
        ] {
            assert_eq!(class(a), None, "{a}");
        }
    }

    #[test]
    fn each_spelling_of_an_entry_parses_to_its_host_and_port() {
        let parsed = |t: &str| {
            let e = Entry::parse(t).unwrap();
            (e.host, e.port)
        };
        let ip = |a: &str| Host::Addr(a.parse().unwrap());
        assert_eq!(parsed("[::1]"), (ip("::1"), None));
        assert_eq!(parsed("[::1]:5000"), (ip("::1"), Some(5000)));
        assert_eq!(parsed("::1"), (ip("::1"), None), "a bare IPv6 address");
        assert_eq!(parsed("fe80::1:2"), (ip("fe80::1:2"), None));
        assert_eq!(parsed("10.0.0.1:22"), (ip("10.0.0.1"), Some(22)));
        assert_eq!(
            parsed("Host.Org:8080"),
            (Host::Name("host.org".into()), Some(8080))
        );
        assert_eq!(parsed("*.a.org"), (Host::Below("a.org".into()), None));
        let e = Entry::parse("[::1]x").unwrap_err();
        assert!(e.contains("text after ]"), "{e}");
        // Only an explicit loopback address with its port is bridged.
        let bridge = |t: &str| Entry::parse(t).unwrap().loopback_bridge();
        assert_eq!(
            bridge("127.0.0.1:4000"),
            Some("127.0.0.1:4000".parse().unwrap())
        );
        assert_eq!(bridge("127.0.0.1"), None);
        assert_eq!(bridge("10.0.0.1:5432"), None);
        assert_eq!(bridge("localhost"), None);
        // `localhost` is 127.0.0.1, never a name to look up.
        assert_eq!(
            bridge("LocalHost.:5432"),
            Some("127.0.0.1:5432".parse().unwrap())
        );
        let r = rules(&["localhost:5432"]);
        assert!(allowed(&r.address("127.0.0.1:5432".parse().unwrap())));
        assert!(!allowed(&r.address("127.0.0.1:5433".parse().unwrap())));
        assert!(allowed(&r.host("localhost", 5432)));
        assert!(allowed(&r.host("127.0.0.1", 5432)));
        assert!(!allowed(&r.host("localhost", 5433)));
        assert!(!allowed(&rules(&["example.com"]).host("localhost", 443)));
    }

    #[test]
    fn routing_urls_become_entries() {
        let env = std::collections::BTreeMap::from([
            (
                "ANTHROPIC_BASE_URL".to_string(),
                "http://127.0.0.1:4000/v1".to_string(),
            ),
            ("HTTPS_PROXY".to_string(), "not a url".to_string()),
        ]);
        assert_eq!(routing_entries(&env), vec!["127.0.0.1:4000".to_string()]);
        assert_eq!(
            url_entry("https://gw.example.com"),
            Some("gw.example.com:443".into())
        );
        assert_eq!(url_entry("http://[::1]:5000/x"), Some("[::1]:5000".into()));
        assert_eq!(
            url_entry("http://u:p@h.example:81"),
            Some("h.example:81".into())
        );
        assert_eq!(url_entry("ftp://h"), None);
        assert_eq!(url_entry("HTTP://h.example/x"), Some("h.example:80".into()));
        assert_eq!(url_entry("http://[::1]/x"), Some("[::1]:80".into()));
        assert_eq!(url_entry("http:///x"), None);
        // Both routing variables count, each entry once.
        let both = std::collections::BTreeMap::from([
            (
                "ANTHROPIC_BASE_URL".to_string(),
                "http://127.0.0.1:4000".to_string(),
            ),
            (
                "CLAUDE_CODE_API_BASE_URL".to_string(),
                "http://127.0.0.1:4000/v1".to_string(),
            ),
        ]);
        assert_eq!(routing_entries(&both), vec!["127.0.0.1:4000".to_string()]);
        let two = std::collections::BTreeMap::from([
            (
                "ANTHROPIC_BASE_URL".to_string(),
                "https://a.example".to_string(),
            ),
            (
                "CLAUDE_CODE_API_BASE_URL".to_string(),
                "https://b.example".to_string(),
            ),
        ]);
        assert_eq!(
            routing_entries(&two),
            vec!["a.example:443".to_string(), "b.example:443".to_string()]
        );
    }

    /// The ports no tool may listen on: the forwarder's proxy port and each bridge's,
    /// once each; hosts that are not loopback hold none.
    #[test]
    fn the_forwarder_holds_the_proxy_port_and_each_bridges() {
        let held = |list: &[&str]| {
            let list: Vec<String> = list.iter().map(|s| s.to_string()).collect();
            held_ports(&Rules::parse(&list).unwrap())
        };
        assert_eq!(held(&[]), vec![3128]);
        assert_eq!(held(&["api.anthropic.com", "example.org:8080"]), vec![3128]);
        assert_eq!(
            held(&["127.0.0.1:4000", "[::1]:4000", "127.0.0.1:5432"]),
            vec![3128, 4000, 5432]
        );
        assert_eq!(
            held(&["127.0.0.1:3128", "127.0.0.1:3129"]),
            vec![3130, 3128, 3129]
        );
    }
}
