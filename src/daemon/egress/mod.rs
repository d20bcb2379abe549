//! The egress proxy: each proxied session's only way out of its private network
//! (docs/session-host.md#the-egress-proxy, docs/THREAT-MODEL.md#a-private-network).
//!
//! A proxied sandbox has a network namespace of its own with loopback alone. relay binds
//! a unix socket for that one session (`<config>/egress/<id>.sock`, in the config dir no
//! sandbox sees) into its sandbox, and `relay-shim enter` runs a forwarder inside that
//! listens on loopback ports and hands every connection to that socket: the socket is
//! the session's identity, nothing in its environment is. Here each connection is
//! checked against the session's allowlist ([`Rules`]), resolved by relay, connected to
//! the address checked, and recorded (an `egress` event and audit row at its close).
//!
//! - [`Rules`] (`src/sandbox/egress_rules.rs`): the allowlist and the address classes no
//!   name may lead to, the ports the forwarder holds, the routing URLs that join the list.
//! - [`proxy`]: one connection: HTTP `CONNECT`, plain HTTP, or a loopback bridge.

pub mod proxy;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;

use crate::sandbox::egress_rules::proxy_port;
pub use crate::sandbox::egress_rules::{
    held_ports, routing_entries, Rules, PROXY_PORT, ROUTING_URL_VARS,
};

/// Connections one session may have open through the proxy at once; more are closed at
/// once (a flood slows only the session that floods).
pub const MAX_CONNECTIONS: usize = 64;

/// The socket's path inside the sandbox.
pub const INSIDE_SOCKET: &str = "/run/relay/egress.sock";

/// The variable `relay-shim enter` reads (and removes) to run the forwarder:
/// `<socket> <proxy port> [<bridge address>…]`.
pub const FORWARD_VAR: &str = relay_shim::forward::FORWARD_VAR;

/// Why a session ended when its forwarder died while its sandbox ran (its
/// `session.exited` event, `session_end` audit row and ledger entry say so).
pub const FORWARDER_DIED: &str = "forwarder_died";

/// Why a session ended when it went over its egress budget while
/// `session_sandbox.egress_over_budget` said `stop` (docs/routes.md#logs-and-their-bounds).
pub const OVER_BUDGET: &str = "egress_over_budget";

/// One session's proxy, while it runs.
struct Running {
    socket: PathBuf,
    task: tokio::task::JoinHandle<()>,
    session: Arc<Session>,
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

/// What a bwrap session's proxy calls when its forwarder died: the lifeline, the
/// socket's first connection, ended while the sandbox's launcher still ran
/// ([`proxy::serve`]).
pub type Lost = Arc<dyn Fn(&Arc<Session>) + Send + Sync>;

/// Every proxied session's listener.
#[derive(Default)]
pub struct Registry {
    running: Mutex<HashMap<String, Running>>,
}

impl Registry {
    /// Binds `<dir>/<id>.sock` (0600, a stale one replaced) and serves it for `id` with
    /// `rules` until [`Registry::stop`], calling `lost` if its forwarder dies. Refused
    /// while the id has a proxy still.
    pub fn start(
        &self,
        dir: &Path,
        id: &str,
        rules: Rules,
        sink: Sink,
        lost: Lost,
    ) -> std::io::Result<PathBuf> {
        self.refuse_running(id)?;
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let socket = dir.join(format!("{id}.sock"));
        let listener = crate::http::bind_private(&socket)?;
        let session = session(id, rules);
        let task = tokio::spawn(proxy::serve(listener, session.clone(), sink, lost));
        self.keep(id, socket.clone(), task, session);
        Ok(socket)
    }

    /// Whether `session` is the proxy `id` runs now: not one stopped since (its session
    /// ended), nor an earlier launch's.
    pub fn serves(&self, id: &str, session: &Arc<Session>) -> bool {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running
            .get(id)
            .is_some_and(|r| Arc::ptr_eq(&r.session, session))
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

    fn keep(
        &self,
        id: &str,
        socket: PathBuf,
        task: tokio::task::JoinHandle<()>,
        session: Arc<Session>,
    ) {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                id.to_string(),
                Running {
                    socket,
                    task,
                    session,
                },
            );
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
        let session = session(id, rules);
        let task = tokio::spawn(proxy::serve_tcp(listener, session.clone(), sink));
        self.keep(id, PathBuf::new(), task, session);
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

/// Where the daemon's proxies record each connection: an `egress` event and audit row,
/// within the session's budget ([`crate::daemon::records::budget`]).
pub fn sink(d: &Arc<crate::daemon::Daemon>) -> Sink {
    let d = Arc::downgrade(d);
    Arc::new(move |session: &Session, egress: crate::wire::Egress| {
        let Some(d) = d.upgrade() else { return };
        let decision = d
            .egress_budget
            .admit(&session.id, egress, std::time::Instant::now());
        if decision.tell {
            over_budget(&d, &session.id);
        }
        for row in decision.rows {
            record(&d, &session.id, row);
        }
    })
}

/// One `egress` audit row and event.
fn record(d: &crate::daemon::Daemon, session: &str, egress: crate::wire::Egress) {
    let outcome = if egress.allowed {
        crate::wire::Outcome::Allowed
    } else {
        crate::wire::Outcome::Denied
    };
    let row = d.audit.record(&crate::daemon::records::journal::AuditRow {
        action: "egress",
        session_id: Some(session.to_string()),
        outcome,
        egress: Some(egress.clone()),
        ..Default::default()
    });
    if let Err(e) = row {
        tracing::warn!(session = %session, "audit: egress row: {e}");
    }
    d.events.emit(&crate::daemon::records::journal::Event {
        name: "egress",
        status: Some(outcome.as_str()),
        session_id: Some(session.to_string()),
        egress: Some(egress),
        ..Default::default()
    });
}

/// The session went over its budget: said once, in an `egress_budget` row and event;
/// then stopped ([`OVER_BUDGET`]) when `session_sandbox.egress_over_budget`, read now,
/// says `stop`.
fn over_budget(d: &Arc<crate::daemon::Daemon>, session: &str) {
    use crate::daemon::records::budget::{ROWS_PER_WINDOW, WINDOW};
    let stop = stops_over_budget(d);
    let then = if stop {
        "the session is stopped (session_sandbox.egress_over_budget is \"stop\")"
    } else {
        "from now on the rest of each minute is folded into one counted row per target"
    };
    let why = format!(
        "more than {ROWS_PER_WINDOW} connections in {} s: {then}",
        WINDOW.as_secs()
    );
    let row = d.audit.record(&crate::daemon::records::journal::AuditRow {
        action: "egress_budget",
        session_id: Some(session.to_string()),
        outcome: crate::wire::Outcome::Denied,
        error: Some(why.clone()),
        ..Default::default()
    });
    if let Err(e) = row {
        tracing::warn!(session = %session, "audit: egress_budget row: {e}");
    }
    d.events.emit(&crate::daemon::records::journal::Event {
        name: "egress_budget",
        session_id: Some(session.to_string()),
        reason: Some(why),
        ..Default::default()
    });
    if stop {
        let (d, id) = (d.clone(), session.to_string());
        tokio::spawn(async move { d.stop_for(&id, OVER_BUDGET).await });
    }
}

/// `session_sandbox.egress_over_budget` is `stop`, in the settings as they are now; a
/// file that does not read is the default, `tell`.
fn stops_over_budget(d: &crate::daemon::Daemon) -> bool {
    d.load_settings().is_ok_and(|s| {
        s.session_sandbox.egress_over_budget == crate::daemon::settings::OverBudget::Stop
    })
}

/// The folded rows whose window is over at `now` (the daemon's tick, every second).
pub fn flush_due(d: &crate::daemon::Daemon, now: std::time::Instant) {
    for (session, row) in d.egress_budget.due(now) {
        record(d, &session, row);
    }
}

/// The session ended: its folded rows are written, and its budget forgotten.
pub fn flush_end(d: &crate::daemon::Daemon, session: &str) {
    for row in d.egress_budget.end(session) {
        record(d, session, row);
    }
}

/// What the daemon does when a session's forwarder died: stops the session, saying why
/// ([`FORWARDER_DIED`], `Daemon::forwarder_died`).
pub fn lost(d: &Arc<crate::daemon::Daemon>) -> Lost {
    let d = Arc::downgrade(d);
    Arc::new(move |session: &Arc<Session>| {
        let Some(d) = d.upgrade() else { return };
        let session = session.clone();
        tokio::spawn(async move { d.forwarder_died(&session).await });
    })
}

/// The proxy variables of a Seatbelt launch, whose tools reach its proxy on `port`
/// directly (and each listed loopback address directly: the profile allows those ports).
pub fn launch_env_port(port: u16) -> Vec<(String, String)> {
    proxy_vars(&format!("http://127.0.0.1:{port}"))
}

/// The variables that name the proxy, in both cases.
const PROXY_VARS: [&str; 6] = [
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "ALL_PROXY",
    "https_proxy",
    "http_proxy",
    "all_proxy",
];

fn proxy_vars(url: &str) -> Vec<(String, String)> {
    let mut env = Vec::new();
    for name in PROXY_VARS {
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
    let port = proxy_port(&bridges);
    let mut forward = format!("{INSIDE_SOCKET} {port}");
    for b in &bridges {
        forward.push(' ');
        forward.push_str(&b.to_string());
    }
    let mut env = vec![(FORWARD_VAR.to_string(), forward)];
    env.extend(proxy_vars(&format!("http://127.0.0.1:{port}")));
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seatbelt_launch_reaches_its_proxy_on_its_port_and_loopback_directly() {
        let env = launch_env_port(40123);
        for name in PROXY_VARS {
            assert!(
                env.contains(&(name.to_string(), "http://127.0.0.1:40123".to_string())),
                "{name}: {env:?}"
            );
        }
        for name in ["NO_PROXY", "no_proxy"] {
            assert!(
                env.contains(&(name.to_string(), "localhost,127.0.0.1,::1".to_string())),
                "{name}: {env:?}"
            );
        }
        assert_eq!(env.len(), 8);
    }

    /// Asks a proxy for an address off every list: its `403`'s first line.
    async fn refused_through<S>(mut s: S, preamble: &[u8]) -> String
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        s.write_all(preamble).await.unwrap();
        s.write_all(b"CONNECT 10.9.9.9:22 HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut got = vec![0u8; 12];
        tokio::time::timeout(std::time::Duration::from_secs(10), s.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        String::from_utf8_lossy(&got).into_owned()
    }

    fn quiet() -> Sink {
        Arc::new(|_: &Session, _: crate::wire::Egress| {})
    }

    fn unheard() -> Lost {
        Arc::new(|_: &Arc<Session>| {})
    }

    #[tokio::test]
    async fn a_session_has_one_proxy_on_a_private_socket_until_it_is_stopped() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("egress");
        let reg = Registry::default();
        let socket = reg
            .start(&dir, "s-1", Rules::default(), quiet(), unheard())
            .unwrap();
        assert_eq!(socket, dir.join("s-1.sock"));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!((mode(&dir), mode(&socket)), (0o700, 0o600));
        // The forwarder's lifeline comes first.
        let mut lifeline = tokio::net::UnixStream::connect(&socket).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(
            &mut lifeline,
            relay_shim::forward::LIFELINE.as_bytes(),
        )
        .await
        .unwrap();
        let s = tokio::net::UnixStream::connect(&socket).await.unwrap();
        assert_eq!(
            refused_through(s, b"relay-egress 1 proxy\n").await,
            "HTTP/1.1 403"
        );
        // A second launch of the id takes nothing over, on either kind of proxy.
        let e = reg
            .start(&dir, "s-1", Rules::default(), quiet(), unheard())
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{e}");
        let e = reg
            .start_port("s-1", Rules::default(), quiet())
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "{e}");
        let first = reg.running.lock().unwrap()["s-1"].session.clone();
        assert!(reg.serves("s-1", &first));
        reg.stop("s-1");
        assert!(!socket.exists());
        // Stopped, it is no proxy of the id's, nor is it once the id starts again.
        assert!(!reg.serves("s-1", &first));
        reg.start(&dir, "s-1", Rules::default(), quiet(), unheard())
            .unwrap();
        assert!(!reg.serves("s-1", &first));
        assert!(!reg.serves("s-2", &first));
        reg.stop("s-1");
        // A proxy whose task ended (its listener failed) is no launch's any more.
        let ended = tokio::spawn(async {});
        while !ended.is_finished() {
            tokio::task::yield_now().await;
        }
        reg.keep(
            "s-2",
            PathBuf::new(),
            ended,
            session("s-2", Rules::default()),
        );
        reg.refuse_running("s-2").unwrap();
    }

    #[tokio::test]
    async fn seatbelts_proxy_listens_on_a_loopback_port_of_its_own() {
        let reg = Registry::default();
        let port = reg.start_port("s-p", Rules::default(), quiet()).unwrap();
        assert_ne!(port, 0);
        let s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        assert_eq!(refused_through(s, b"").await, "HTTP/1.1 403");
        reg.stop("s-p");
        // Stopped, the id may start again.
        reg.start_port("s-p", Rules::default(), quiet()).unwrap();
        reg.stop("s-p");
    }

    #[tokio::test]
    async fn over_its_budget_a_session_is_told_once_and_its_end_writes_the_folded_rows() {
        use crate::daemon::records::budget::ROWS_PER_WINDOW;
        let t = tempfile::tempdir().unwrap();
        let d = crate::daemon::serve::test_daemon(t.path());
        let sink = sink(&d);
        let session = session("s-b", Rules::default());
        let refused = crate::wire::Egress {
            host: "flood.example".into(),
            port: 443,
            rule: "the rule".into(),
            ..Default::default()
        };
        for _ in 0..ROWS_PER_WINDOW + 5 {
            sink(&session, refused.clone());
        }
        let rows = || -> Vec<serde_json::Value> {
            std::fs::read_to_string(d.audit.path())
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        };
        let of = |rows: &[serde_json::Value], action: &str| {
            rows.iter().filter(|r| r["action"] == action).count()
        };
        let before = rows();
        assert_eq!(of(&before, "egress"), ROWS_PER_WINDOW as usize);
        assert_eq!(of(&before, "egress_budget"), 1, "told once");
        let told = before
            .iter()
            .find(|r| r["action"] == "egress_budget")
            .unwrap();
        assert_eq!(
            (told["session_id"].as_str(), told["outcome"].as_str()),
            (Some("s-b"), Some("denied"))
        );
        assert!(told["error"].as_str().unwrap().contains("folded"), "{told}");
        let events = d.events.wait_after(0, std::time::Duration::ZERO).await;
        let said: Vec<&serde_json::Value> = events
            .iter()
            .filter(|e| e["name"] == "egress_budget")
            .collect();
        assert_eq!(said.len(), 1, "{events:?}");
        assert_eq!(said[0]["session_id"], "s-b");
        assert_eq!(said[0]["reason"], told["error"]);
        // Nothing is due within the minute; the end writes the folded row.
        let now = std::time::Instant::now();
        flush_due(&d, now);
        assert_eq!(rows().len(), before.len());
        flush_end(&d, "s-b");
        let after = rows();
        let folded = after.last().unwrap();
        assert_eq!(
            (
                folded["action"].as_str(),
                folded["egress"]["folded"].as_u64()
            ),
            (Some("egress"), Some(5)),
            "{folded}"
        );
        assert_eq!(after.len(), before.len() + 1);
        // Over again in a new window: what is folded is written at the tick after it.
        for _ in 0..ROWS_PER_WINDOW + 2 {
            sink(&session, refused.clone());
        }
        let n = rows().len();
        flush_due(&d, now + crate::daemon::records::budget::WINDOW * 2);
        let last = rows();
        assert_eq!(last.len(), n + 1);
        assert_eq!(last.last().unwrap()["egress"]["folded"], 2);
    }

    /// Issue 39: `session_sandbox.egress_over_budget` `stop`, read when the budget is
    /// exceeded, stops the session that went over, saying so in its `egress_budget` row;
    /// without it (the default, `tell`) the session goes on.
    #[tokio::test]
    async fn over_its_budget_a_session_is_stopped_when_the_settings_say_stop() {
        use crate::daemon::records::budget::ROWS_PER_WINDOW;
        use crate::daemon::session::EntryState;
        let t = tempfile::tempdir().unwrap();
        let d = crate::daemon::serve::test_daemon(t.path());
        let sink = sink(&d);
        for id in ["s-tell", "s-stop"] {
            let mut e = crate::daemon::session::every_field();
            e.record.id = id.into();
            e.record.state = EntryState::Running;
            e.stop_reason = None;
            d.ledger().insert(id.into(), e);
        }
        let refused = crate::wire::Egress {
            host: "flood.example".into(),
            port: 443,
            rule: "the rule".into(),
            ..Default::default()
        };
        let flood = |id: &str| {
            let session = session(id, Rules::default());
            for _ in 0..ROWS_PER_WINDOW + 1 {
                sink(&session, refused.clone());
            }
        };
        flood("s-tell");
        std::fs::write(
            d.paths.settings(),
            r#"{"session_sandbox": {"egress_over_budget": "stop"}}"#,
        )
        .unwrap();
        flood("s-stop");
        let stopped = |id: &str| d.entry(id).and_then(|e| e.stop_reason);
        for _ in 0..100 {
            if stopped("s-stop").is_some() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(stopped("s-stop"), Some(OVER_BUDGET));
        assert_eq!(stopped("s-tell"), None, "the default only tells");
        let told: Vec<(String, String)> = std::fs::read_to_string(d.audit.path())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|r| r["action"] == "egress_budget")
            .map(|r| (r["session_id"].to_string(), r["error"].to_string()))
            .collect();
        assert_eq!(told.len(), 2, "{told:?}");
        assert!(told[0].1.contains("folded"), "{told:?}");
        assert!(told[1].1.contains("the session is stopped"), "{told:?}");
    }

    #[tokio::test]
    async fn each_connection_is_an_egress_event_and_audit_row_of_its_session() {
        let t = tempfile::tempdir().unwrap();
        let d = crate::daemon::serve::test_daemon(t.path());
        let sink = sink(&d);
        let session = session("s-9", Rules::default());
        for allowed in [false, true] {
            let egress = crate::wire::Egress {
                host: "example.org".into(),
                port: 443,
                allowed,
                rule: "the rule".into(),
                ..Default::default()
            };
            sink(&session, egress);
        }
        let events = d.events.wait_after(0, std::time::Duration::ZERO).await;
        let egress: Vec<(String, String, String)> = events
            .iter()
            .filter(|e| e["name"] == "egress")
            .map(|e| {
                (
                    e["status"].as_str().unwrap_or("").to_string(),
                    e["session_id"].as_str().unwrap_or("").to_string(),
                    e["egress"]["host"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        let want = |status: &str| {
            (
                status.to_string(),
                "s-9".to_string(),
                "example.org".to_string(),
            )
        };
        assert_eq!(egress, vec![want("denied"), want("allowed")]);
        let rows = std::fs::read_to_string(d.audit.path()).unwrap();
        let rows: Vec<serde_json::Value> = rows
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|r: &serde_json::Value| r["action"] == "egress")
            .collect();
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(
            (rows[0]["outcome"].as_str(), rows[1]["outcome"].as_str()),
            (Some("denied"), Some("allowed"))
        );
        assert_eq!(rows[1]["egress"]["rule"], "the rule");
        assert!(rows.iter().all(|r| r["session_id"] == "s-9"), "{rows:?}");
        // The daemon gone, a late record goes nowhere.
        drop(d);
        sink(&session, crate::wire::Egress::default());
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
