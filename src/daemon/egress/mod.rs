//! The egress proxy: each proxied session's only way out of its private network
//! (docs/session-host.md#the-egress-proxy, docs/THREAT-MODEL.md#a-private-network).
//!
//! A proxied sandbox has a network namespace of its own with loopback alone. relay binds
//! a unix socket for that one session (`<config>/egress/<id>.sock`, in the config dir no
//! sandbox sees) into its sandbox, and `relay-shim enter` runs a forwarder inside that
//! listens on loopback ports and hands every connection to that socket: the socket is
//! the session's identity, nothing in its environment is. Here each connection is
//! checked against the session's allowlist ([`rules`]), resolved by relay, connected to
//! the address checked, and recorded (an `egress` event and audit row at its close).
//!
//! - [`rules`]: the allowlist and the address classes no name may lead to.
//! - [`proxy`]: one connection: HTTP `CONNECT`, plain HTTP, or a loopback bridge.

pub mod proxy;
pub mod rules;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;

pub use rules::Rules;

/// Connections one session may have open through the proxy at once; more are closed at
/// once (a flood slows only the session that floods).
pub const MAX_CONNECTIONS: usize = 64;

/// The socket's path inside the sandbox.
pub const INSIDE_SOCKET: &str = "/run/relay/egress.sock";

/// The variable `relay-shim enter` reads (and removes) to run the forwarder:
/// `<socket> <proxy port> [<bridge address>…]`.
pub const FORWARD_VAR: &str = relay_shim::forward::FORWARD_VAR;

/// The proxy port inside a sandbox, unless a bridge takes it.
pub const PROXY_PORT: u16 = 3128;

/// One session's proxy, while it runs.
struct Running {
    socket: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

/// What the proxy of one session knows of it.
pub struct Session {
    pub id: String,
    pub rules: Rules,
    /// At most [`MAX_CONNECTIONS`] at once.
    pub permits: Arc<Semaphore>,
}

/// Where a record of a connection goes (the daemon's events and audit log).
pub type Sink = Arc<dyn Fn(&Session, crate::wire::Egress) + Send + Sync>;

/// Every proxied session's listener.
#[derive(Default)]
pub struct Registry {
    running: Mutex<HashMap<String, Running>>,
}

impl Registry {
    /// Binds `<dir>/<id>.sock` (0600, a stale one replaced) and serves it for `id` with
    /// `rules` until [`Registry::stop`]. Refused while the id has a proxy still.
    pub fn start(
        &self,
        dir: &Path,
        id: &str,
        rules: Rules,
        sink: Sink,
    ) -> std::io::Result<PathBuf> {
        self.refuse_running(id)?;
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let socket = dir.join(format!("{id}.sock"));
        let listener = crate::http::bind_private(&socket)?;
        let task = tokio::spawn(proxy::serve(listener, session(id, rules), sink));
        self.keep(id, socket.clone(), task);
        Ok(socket)
    }

    /// A proxy `id` still has belongs to a launch of it under way or running (every end
    /// and refusal stops its own): a second launch of the id must not take it over.
    fn refuse_running(&self, id: &str) -> std::io::Result<()> {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        match running.get(id) {
            Some(r) if !r.task.is_finished() => Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{id} already has a proxy: a launch of it is under way or running"),
            )),
            _ => Ok(()),
        }
    }

    fn keep(&self, id: &str, socket: PathBuf, task: tokio::task::JoinHandle<()>) {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), Running { socket, task });
    }

    /// Seatbelt: listens on a loopback port of its own (chosen by the kernel, bound
    /// before the sandbox starts, so no session can hold it first) and serves it for
    /// `id` with `rules` until [`Registry::stop`]; the port.
    pub fn start_port(&self, id: &str, rules: Rules, sink: Sink) -> std::io::Result<u16> {
        self.refuse_running(id)?;
        let std_listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        std_listener.set_nonblocking(true)?;
        let port = std_listener.local_addr()?.port();
        let listener = tokio::net::TcpListener::from_std(std_listener)?;
        let task = tokio::spawn(proxy::serve_tcp(listener, session(id, rules), sink));
        self.keep(id, PathBuf::new(), task);
        Ok(port)
    }

    /// Stops `id`'s proxy: its listener and every connection through it.
    pub fn stop(&self, id: &str) {
        let old = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        if let Some(r) = old {
            r.task.abort();
            if !r.socket.as_os_str().is_empty() {
                let _ = std::fs::remove_file(&r.socket);
            }
        }
    }
}

fn session(id: &str, rules: Rules) -> Arc<Session> {
    Arc::new(Session {
        id: id.to_string(),
        rules,
        permits: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
    })
}

/// Where the daemon's proxies record each connection: an `egress` event and audit row.
pub fn sink(d: &Arc<crate::daemon::Daemon>) -> Sink {
    let d = Arc::downgrade(d);
    Arc::new(move |session: &Session, egress: crate::wire::Egress| {
        let Some(d) = d.upgrade() else { return };
        let outcome = if egress.allowed {
            crate::wire::Outcome::Allowed
        } else {
            crate::wire::Outcome::Denied
        };
        let row = d.audit.record(&crate::daemon::records::journal::AuditRow {
            action: "egress",
            session_id: Some(session.id.clone()),
            outcome,
            egress: Some(egress.clone()),
            ..Default::default()
        });
        if let Err(e) = row {
            tracing::warn!(session = %session.id, "audit: egress row: {e}");
        }
        d.events.emit(&crate::daemon::records::journal::Event {
            name: "egress",
            status: Some(outcome.as_str()),
            session_id: Some(session.id.clone()),
            egress: Some(egress),
            ..Default::default()
        });
    })
}

/// The proxy variables of a Seatbelt launch, whose tools reach its proxy on `port`
/// directly (and each listed loopback address directly: the profile allows those ports).
pub fn launch_env_port(port: u16) -> Vec<(String, String)> {
    proxy_vars(&format!("http://127.0.0.1:{port}"))
}

fn proxy_vars(url: &str) -> Vec<(String, String)> {
    let mut env = Vec::new();
    for name in [
        "HTTPS_PROXY",
        "HTTP_PROXY",
        "ALL_PROXY",
        "https_proxy",
        "http_proxy",
        "all_proxy",
    ] {
        env.push((name.to_string(), url.to_string()));
    }
    // Loopback goes straight to the bridges (nothing else listens there); everything
    // else through the proxy.
    for name in ["NO_PROXY", "no_proxy"] {
        env.push((name.to_string(), "localhost,127.0.0.1,::1".to_string()));
    }
    env
}

/// What a proxied launch's forwarder is told, and the proxy variables its target gets.
pub fn launch_env(rules: &Rules) -> Vec<(String, String)> {
    let bridges = rules.bridges();
    let port = (PROXY_PORT..=u16::MAX)
        .find(|p| !bridges.iter().any(|b| b.port() == *p))
        .unwrap_or(PROXY_PORT);
    let mut forward = format!("{INSIDE_SOCKET} {port}");
    for b in &bridges {
        forward.push(' ');
        forward.push_str(&b.to_string());
    }
    let mut env = vec![(FORWARD_VAR.to_string(), forward)];
    env.extend(proxy_vars(&format!("http://127.0.0.1:{port}")));
    env
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
    rules::Entry::parse(&entry).ok().map(|e| e.written)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn the_proxy_port_steps_aside_for_a_bridge() {
        let rules = Rules::parse(&["127.0.0.1:3128".to_string()]).unwrap();
        let env = launch_env(&rules);
        let forward = &env.iter().find(|(k, _)| k == FORWARD_VAR).unwrap().1;
        assert_eq!(forward, "/run/relay/egress.sock 3129 127.0.0.1:3128");
        assert!(env.contains(&("HTTPS_PROXY".into(), "http://127.0.0.1:3129".into())));
    }
}
