//! One proxied session's connections. The first is the forwarder's lifeline
//! ([`serve`]); each other starts with the forwarder's line (`relay-egress 1 proxy` or
//! `relay-egress 1 bridge <address>`), then:
//!
//! - **proxy**: HTTP/1.1 from the sandbox's tools. `CONNECT host:port` opens a tunnel
//!   (TLS stays end to end: relay never terminates it); an absolute `http://` request is
//!   sent on, its body streamed, never read or logged.
//! - **bridge**: raw bytes to one loopback address the list names with its port.
//!
//! Every name is checked against the list, resolved here, and each address it resolves to
//! checked again ([`Rules::address`]); the connection goes to the address checked. A
//! refusal answers `403` with the rule in words.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

use super::{Lost, Session, Sink};
use crate::sandbox::egress_rules::{is_localhost, Verdict};
use crate::wire::Egress;

/// The forwarder's first line, at most this long.
const PREAMBLE_MAX: usize = 128;
/// Each direction of a tunnel or bridge copies through one buffer this size: 64
/// connections of a session hold at most 8 MiB of relay's (docs/session-host.md).
const COPY_BUF: usize = 64 * 1024;
/// A name resolved and connected within this, or the connection fails.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

type Body = BoxBody<Bytes, hyper::Error>;

/// Seatbelt: accepts the session's connections on its own loopback port until the task
/// is aborted. No network namespace and no forwarder there: the tools speak HTTP to the
/// proxy directly, and the session's profile lets it connect to this port alone
/// (docs/session-host.md#the-egress-proxy).
pub async fn serve_tcp(listener: TcpListener, session: Arc<Session>, sink: Sink) {
    loop {
        let accepted = listener.accept().await.map(|(s, _)| s);
        if let Some((stream, permit)) = admit(accepted, &session).await {
            let (session, sink) = (session.clone(), sink.clone());
            tokio::spawn(async move {
                serve_http(stream, &session, &sink).await;
                drop(permit);
            });
        }
    }
}

/// Accepts the session's connections until the task is aborted.
///
/// The first is the forwarder's lifeline (`relay-egress 1 lifeline`, which
/// `relay-shim enter` opens before the target exists, so nothing in the sandbox can be
/// first, and which the forwarder alone keeps). It is read to its end, outside the cap:
/// an end while the sandbox's launcher still runs is the forwarder's death, and `lost`
/// is called. The launcher (bwrap's outer process) ends before the kernel tears the
/// sandbox's pid namespace down, the forwarder with it, so an ordinary end is never
/// taken for one (docs/session-host.md#the-egress-proxy). A first connection that says
/// anything else is no lifeline, and counts as one lost; a later one that says it is
/// one is closed as any unknown line.
pub async fn serve(listener: UnixListener, session: Arc<Session>, sink: Sink, lost: Lost) {
    let first = loop {
        match listener.accept().await {
            Ok((s, _)) => break s,
            Err(e) => {
                tracing::debug!("egress {}: accept: {e}", session.id);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let watch = lifeline(first, session.clone(), lost);
    tokio::pin!(watch);
    let mut watching = true;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a.map(|(s, _)| s),
            () = &mut watch, if watching => {
                watching = false;
                continue;
            }
        };
        if let Some((stream, permit)) = admit(accepted, &session).await {
            let (session, sink) = (session.clone(), sink.clone());
            tokio::spawn(async move {
                connection(stream, &session, &sink).await;
                drop(permit);
            });
        }
    }
}

/// One accepted connection and its permit; `None` after a failed accept (EMFILE and the
/// like: after a short wait rather than a spin) or over the cap (closed at once, so a
/// flood holds no descriptor of relay's).
async fn admit<S>(
    accepted: std::io::Result<S>,
    session: &Session,
) -> Option<(S, tokio::sync::OwnedSemaphorePermit)> {
    let stream = match accepted {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!("egress {}: accept: {e}", session.id);
            tokio::time::sleep(Duration::from_millis(50)).await;
            return None;
        }
    };
    let permit = session.permits.clone().try_acquire_owned().ok()?;
    Some((stream, permit))
}

/// The lifeline's first line, as [`preamble`] reads it.
fn lifeline_line() -> &'static str {
    relay_shim::forward::LIFELINE.trim_end_matches('\n')
}

/// Reads the lifeline to its end (the forwarder sends nothing after its line; anything
/// is read and dropped), then calls `lost` if the launcher of the sandbox that opened
/// it, found as it was accepted, still runs.
async fn lifeline(mut stream: UnixStream, session: Arc<Session>, lost: Lost) {
    let launcher = crate::peer::peer_pid(&stream).and_then(crate::peer::launcher_of);
    if preamble(&mut stream).await.as_deref() == Some(lifeline_line()) {
        let mut buf = [0u8; 64];
        while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
    } else {
        tracing::warn!(
            "egress {}: the first connection is not the forwarder's lifeline",
            session.id
        );
    }
    if launcher.is_some_and(crate::peer::still_runs) {
        tracing::warn!(
            "egress {}: the forwarder died while its sandbox runs",
            session.id
        );
        lost(&session);
    }
}

async fn connection(mut stream: UnixStream, session: &Arc<Session>, sink: &Sink) {
    let Some(line) = preamble(&mut stream).await else {
        return;
    };
    match line.strip_prefix("relay-egress 1 ") {
        Some("proxy") => serve_http(stream, session, sink).await,
        Some(rest) => match rest.strip_prefix("bridge ").and_then(|a| a.parse().ok()) {
            Some(addr) => bridge(stream, addr, session, sink).await,
            None => tracing::debug!("egress {}: bad preamble", session.id),
        },
        None => tracing::debug!("egress {}: bad preamble", session.id),
    }
}

/// Reads the first line byte by byte, so nothing after it is taken from the stream.
async fn preamble(stream: &mut UnixStream) -> Option<String> {
    let mut line = Vec::new();
    loop {
        let b = tokio::time::timeout(CONNECT_TIMEOUT, stream.read_u8())
            .await
            .ok()?
            .ok()?;
        if b == b'\n' {
            return String::from_utf8(line).ok();
        }
        line.push(b);
        if line.len() > PREAMBLE_MAX {
            return None;
        }
    }
}

/// A record of one connection, filled in as it goes.
struct Record {
    host: String,
    port: u16,
    started: Instant,
    counts: Arc<Counts>,
}

#[derive(Default)]
struct Counts {
    sent: AtomicU64,
    received: AtomicU64,
}

impl Record {
    fn new(host: &str, port: u16) -> Record {
        Record {
            host: host.to_string(),
            port,
            started: Instant::now(),
            counts: Arc::default(),
        }
    }

    fn finish(&self, session: &Session, sink: &Sink, allowed: bool, rule: String) {
        sink(
            session,
            Egress {
                host: self.host.clone(),
                port: self.port,
                allowed,
                rule,
                sent: self.counts.sent.load(Ordering::Relaxed),
                received: self.counts.received.load(Ordering::Relaxed),
                ms: self.started.elapsed().as_millis() as u64,
                folded: 0,
            },
        );
    }
}

/// Resolves `host` and connects to the first address the rules allow. Errors are the
/// words of the answer: a refusal (`403`) or a failure (`502`).
async fn open(
    session: &Session,
    host: &str,
    port: u16,
) -> Result<(TcpStream, String), (StatusCode, String)> {
    let rule = match session.rules.host(host, port) {
        Verdict::Allowed(rule) => rule,
        Verdict::Refused(why) => return Err((StatusCode::FORBIDDEN, why)),
    };
    let mut name = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    if is_localhost(&name) {
        name = "127.0.0.1".into();
    }
    let addrs: Vec<SocketAddr> =
        match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((name, port))).await {
            Ok(Ok(a)) => a.collect(),
            Ok(Err(e)) => return Err((StatusCode::BAD_GATEWAY, format!("{host}: {e}"))),
            Err(_) => return Err((StatusCode::GATEWAY_TIMEOUT, format!("{host}: no answer"))),
        };
    let mut refused = None;
    let mut failed = None;
    for addr in addrs {
        match session.rules.address(addr) {
            Verdict::Refused(why) => refused = Some(why),
            Verdict::Allowed(_) => {
                match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                    Ok(Ok(s)) => return Ok((s, rule)),
                    Ok(Err(e)) => failed = Some(format!("{addr}: {e}")),
                    Err(_) => failed = Some(format!("{addr}: no answer")),
                }
            }
        }
    }
    if let Some(why) = failed {
        return Err((StatusCode::BAD_GATEWAY, why));
    }
    Err((
        StatusCode::FORBIDDEN,
        refused.unwrap_or_else(|| format!("{host}: no address")),
    ))
}

async fn serve_http<S>(stream: S, session: &Arc<Session>, sink: &Sink)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (s, k) = (session.clone(), sink.clone());
    let svc = hyper::service::service_fn(move |req| {
        let (s, k) = (s.clone(), k.clone());
        async move { Ok::<_, std::convert::Infallible>(request(req, &s, &k).await) }
    });
    if let Err(e) = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .serve_connection(TokioIo::new(stream), svc)
        .with_upgrades()
        .await
    {
        tracing::debug!("egress {}: {e}", session.id);
    }
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut r = Response::new(
        Full::new(Bytes::from(format!("relay: {body}\n")))
            .map_err(|never| match never {})
            .boxed(),
    );
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Where a request goes: the authority of a `CONNECT`, the host of an `http://` URL.
fn destination(req: &Request<Incoming>) -> Result<(String, u16), String> {
    let uri = req.uri();
    if req.method() == Method::CONNECT {
        let a = uri.authority().ok_or("CONNECT without host:port")?;
        let port = a.port_u16().ok_or("CONNECT without a port")?;
        return Ok((a.host().to_string(), port));
    }
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => return Err(format!("{other}:// through a proxy: use CONNECT")),
        None => return Err("not a proxy request (no http:// URL)".into()),
    }
    let host = uri.host().ok_or("no host")?.to_string();
    Ok((host, uri.port_u16().unwrap_or(80)))
}

async fn request(req: Request<Incoming>, session: &Arc<Session>, sink: &Sink) -> Response<Body> {
    let (host, port) = match destination(&req) {
        Ok(d) => d,
        Err(why) => return text(StatusCode::BAD_REQUEST, why),
    };
    let record = Record::new(&host, port);
    let (tcp, rule) = match open(session, &host, port).await {
        Ok(o) => o,
        Err((status, why)) => {
            record.finish(session, sink, false, why.clone());
            return text(status, why);
        }
    };
    let tcp = Counted {
        inner: tcp,
        counts: record.counts.clone(),
    };
    if req.method() == Method::CONNECT {
        let (s, k) = (session.clone(), sink.clone());
        tokio::spawn(async move {
            if let Ok(upgraded) = hyper::upgrade::on(req).await {
                let mut inside = TokioIo::new(upgraded);
                let mut outside = tcp;
                let _ = tokio::io::copy_bidirectional_with_sizes(
                    &mut inside,
                    &mut outside,
                    COPY_BUF,
                    COPY_BUF,
                )
                .await;
            }
            record.finish(&s, &k, true, rule);
        });
        return Response::new(Full::new(Bytes::new()).map_err(|n| match n {}).boxed());
    }
    forward(req, tcp, record, rule, session, sink).await
}

/// Sends a plain `http://` request on to `tcp` and streams the answer back.
async fn forward(
    mut req: Request<Incoming>,
    tcp: Counted,
    record: Record,
    rule: String,
    session: &Arc<Session>,
    sink: &Sink,
) -> Response<Body> {
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await {
        Ok(c) => c,
        Err(e) => {
            record.finish(session, sink, true, rule);
            return text(StatusCode::BAD_GATEWAY, e.to_string());
        }
    };
    let (s, k) = (session.clone(), sink.clone());
    tokio::spawn(async move {
        let _ = conn.await;
        record.finish(&s, &k, true, rule);
    });
    // Origin form for the server; the proxy's own headers stay here.
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    if let Ok(uri) = path.parse() {
        *req.uri_mut() = uri;
    }
    req.headers_mut().remove("proxy-authorization");
    req.headers_mut().remove("proxy-connection");
    match sender.send_request(req).await {
        Ok(resp) => resp.map(|b| b.boxed()),
        Err(e) => text(StatusCode::BAD_GATEWAY, e.to_string()),
    }
}

/// Raw bytes to one loopback address the list names with its port.
async fn bridge(mut stream: UnixStream, addr: SocketAddr, session: &Arc<Session>, sink: &Sink) {
    let record = Record::new(&addr.ip().to_string(), addr.port());
    let rule = match session.rules.host(&addr.ip().to_string(), addr.port()) {
        Verdict::Allowed(rule) => rule,
        Verdict::Refused(why) => {
            record.finish(session, sink, false, why);
            return;
        }
    };
    let tcp = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => {
            record.finish(session, sink, true, format!("{rule}; {addr}: {e}"));
            return;
        }
        Err(_) => {
            record.finish(session, sink, true, format!("{rule}; {addr}: no answer"));
            return;
        }
    };
    let mut tcp = Counted {
        inner: tcp,
        counts: record.counts.clone(),
    };
    let _ =
        tokio::io::copy_bidirectional_with_sizes(&mut stream, &mut tcp, COPY_BUF, COPY_BUF).await;
    record.finish(session, sink, true, rule);
}

/// A TCP stream that counts the bytes each way.
struct Counted {
    inner: TcpStream,
    counts: Arc<Counts>,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = (buf.filled().len() - before) as u64;
        self.counts.received.fetch_add(n, Ordering::Relaxed);
        r
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &r {
            self.counts.sent.fetch_add(*n as u64, Ordering::Relaxed);
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::egress::{Rules, MAX_CONNECTIONS};
    use tokio::io::AsyncWriteExt;

    /// A bound on each wait below, never a pause: what is awaited comes at once.
    const BOUND: Duration = Duration::from_secs(10);

    async fn proxied(path: &std::path::Path) -> UnixStream {
        let mut s = UnixStream::connect(path).await.unwrap();
        s.write_all(b"relay-egress 1 proxy\n").await.unwrap();
        s
    }

    /// The forwarder's lifeline, made by this process (which runs: its end counts as
    /// the forwarder's death).
    fn lifeline_to(path: &std::path::Path) -> std::os::unix::net::UnixStream {
        use std::io::Write;
        let mut s = std::os::unix::net::UnixStream::connect(path).unwrap();
        s.write_all(relay_shim::forward::LIFELINE.as_bytes())
            .unwrap();
        s
    }

    /// A `lost` hook, and what it was called with: each session's id.
    fn lost_hook() -> (Lost, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let lost: Lost = Arc::new(move |s: &Arc<Session>| {
            let _ = tx.send(s.id.clone());
        });
        (lost, rx)
    }

    /// A session holds at most [`MAX_CONNECTIONS`] of relay's connections: the next one
    /// is closed at once, before anything is read from it, and once one of the held
    /// ones goes a new one is served (docs/session-host.md#the-egress-proxy).
    #[tokio::test]
    async fn a_session_holds_at_most_the_cap_and_one_more_is_closed_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let session = super::super::session("s-cap", Rules::default());
        let sink: Sink = Arc::new(|_: &Session, _: Egress| {});
        let (lost, _) = lost_hook();
        let task = tokio::spawn(serve(listener, session, sink, lost));
        // The lifeline is outside the cap.
        let _lifeline = lifeline_to(&path);
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            held.push(proxied(&path).await);
        }
        let mut over = UnixStream::connect(&path).await.unwrap();
        let mut buf = [0u8; 256];
        let n = tokio::time::timeout(BOUND, over.read(&mut buf))
            .await
            .expect("the connection over the cap was kept")
            .unwrap_or(0);
        assert_eq!(n, 0, "{}", String::from_utf8_lossy(&buf[..n]));
        // One held connection goes; its permit comes back as its task ends.
        drop(held.pop());
        let answer = tokio::time::timeout(BOUND, async {
            loop {
                let mut s = proxied(&path).await;
                let ask = b"CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n";
                if s.write_all(ask).await.is_err() {
                    continue;
                }
                // The answer's first bytes, or none: closed, the permit not back yet.
                let mut got = [0u8; 256];
                let n = s.read(&mut got).await.unwrap_or(0);
                if n > 0 {
                    return String::from_utf8_lossy(&got[..n]).into_owned();
                }
            }
        })
        .await
        .expect("no connection was served after one went");
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        task.abort();
    }
    /// A proxy for `entries` on a socket of its own, its lifeline held, and the records
    /// its sink gets.
    struct Proxy {
        _dir: tempfile::TempDir,
        path: std::path::PathBuf,
        records: tokio::sync::mpsc::UnboundedReceiver<Egress>,
        task: tokio::task::JoinHandle<()>,
        _lifeline: std::os::unix::net::UnixStream,
    }

    fn proxy(entries: &[String]) -> Proxy {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let (tx, records) = tokio::sync::mpsc::unbounded_channel();
        let sink: Sink = Arc::new(move |_: &Session, e: Egress| {
            let _ = tx.send(e);
        });
        let session = super::super::session("s-t", Rules::parse(entries).unwrap());
        let (lost, _) = lost_hook();
        let task = tokio::spawn(serve(listener, session, sink, lost));
        let _lifeline = lifeline_to(&path);
        Proxy {
            _dir: dir,
            path,
            records,
            task,
            _lifeline,
        }
    }

    impl Proxy {
        async fn record(&mut self) -> Egress {
            tokio::time::timeout(BOUND, self.records.recv())
                .await
                .expect("no record")
                .unwrap()
        }
    }

    impl Drop for Proxy {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    /// A loopback server that sends back what it reads; its port.
    async fn echo() -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        port
    }

    /// A port nothing listens on.
    fn closed_port() -> u16 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }

    /// An answer's head, up to its blank line.
    async fn head<S: AsyncRead + Unpin>(s: &mut S) -> String {
        let mut got = Vec::new();
        while !got.ends_with(b"\r\n\r\n") {
            match tokio::time::timeout(BOUND, s.read_u8()).await.unwrap() {
                Ok(b) => got.push(b),
                Err(_) => break,
            }
        }
        String::from_utf8_lossy(&got).into_owned()
    }

    /// What comes before the proxy closes the connection (a reset, when it closed
    /// with bytes of ours unread, ends it as well).
    async fn rest<S: AsyncRead + Unpin>(s: &mut S) -> String {
        let mut got = Vec::new();
        match tokio::time::timeout(BOUND, s.read_to_end(&mut got)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
            Err(_) => panic!("still open"),
        }
        String::from_utf8_lossy(&got).into_owned()
    }

    /// The body of an answer whose head was read: one read (it is short, and sent
    /// whole).
    async fn body<S: AsyncRead + Unpin>(s: &mut S) -> String {
        let mut got = vec![0u8; 1024];
        let n = tokio::time::timeout(BOUND, s.read(&mut got))
            .await
            .unwrap()
            .unwrap();
        String::from_utf8_lossy(&got[..n]).into_owned()
    }

    async fn connect(p: &Proxy, target: &str) -> (UnixStream, String) {
        let mut s = proxied(&p.path).await;
        let ask = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
        s.write_all(ask.as_bytes()).await.unwrap();
        let h = head(&mut s).await;
        (s, h)
    }

    /// Writes `bytes` and reads them back from the echo server at the far end.
    async fn round_trip<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, bytes: &[u8]) {
        s.write_all(bytes).await.unwrap();
        let mut back = vec![0u8; bytes.len()];
        tokio::time::timeout(BOUND, s.read_exact(&mut back))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(back, bytes);
    }

    #[tokio::test]
    async fn a_tunnel_to_a_listed_address_carries_bytes_and_is_recorded_at_its_close() {
        let port = echo().await;
        let mut p = proxy(&[format!("127.0.0.1:{port}")]);
        // `localhost` is 127.0.0.1, never looked up.
        for target in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
            let (mut s, h) = connect(&p, &target).await;
            assert!(h.starts_with("HTTP/1.1 200"), "{h}");
            round_trip(&mut s, b"hello").await;
            round_trip(&mut s, b"again!").await;
            drop(s);
            let r = p.record().await;
            assert_eq!(
                (r.host.as_str(), r.port, r.allowed, r.sent, r.received),
                (target.split(':').next().unwrap(), port, true, 11, 11),
                "{r:?}"
            );
            assert!(r.rule.contains("named in the egress list"), "{r:?}");
        }
    }

    #[tokio::test]
    async fn a_tunnel_off_the_list_is_refused_with_the_rule_and_recorded() {
        let port = echo().await;
        let mut p = proxy(&[]);
        let (mut s, h) = connect(&p, &format!("127.0.0.1:{port}")).await;
        assert!(h.starts_with("HTTP/1.1 403"), "{h}");
        let body = body(&mut s).await;
        assert!(
            body.starts_with("relay: ") && body.contains("egress list, which is empty"),
            "{body}"
        );
        let r = p.record().await;
        assert_eq!((r.allowed, r.sent, r.received), (false, 0, 0), "{r:?}");
        assert!(body.contains(&r.rule), "{body} {r:?}");
    }

    #[tokio::test]
    async fn a_listed_address_where_nothing_listens_is_a_bad_gateway() {
        let port = closed_port();
        let mut p = proxy(&[format!("127.0.0.1:{port}")]);
        let (_s, h) = connect(&p, &format!("127.0.0.1:{port}")).await;
        assert!(h.starts_with("HTTP/1.1 502"), "{h}");
        let r = p.record().await;
        assert!(!r.allowed && r.rule.contains("127.0.0.1"), "{r:?}");
    }

    #[tokio::test]
    async fn a_plain_http_request_goes_on_in_origin_form_without_the_proxys_headers() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        const ANSWER: &[u8] =
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let asked = head(&mut s).await;
            s.write_all(ANSWER).await.unwrap();
            asked
        });
        let mut p = proxy(&[format!("127.0.0.1:{port}")]);
        let mut s = proxied(&p.path).await;
        let ask = format!(
            "GET http://127.0.0.1:{port}/x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
             Proxy-Authorization: Basic Zm9vOmJhcg==\r\nProxy-Connection: keep-alive\r\n\r\n"
        );
        s.write_all(ask.as_bytes()).await.unwrap();
        let h = head(&mut s).await;
        assert!(h.starts_with("HTTP/1.1 200"), "{h}");
        let asked = server.await.unwrap();
        assert!(asked.starts_with("GET /x?y=1 HTTP/1.1\r\n"), "{asked}");
        let lower = asked.to_ascii_lowercase();
        assert!(
            !lower.contains("proxy-authorization") && !lower.contains("proxy-connection"),
            "{asked}"
        );
        let r = p.record().await;
        assert_eq!(
            (r.allowed, r.sent, r.received),
            (true, asked.len() as u64, ANSWER.len() as u64),
            "{r:?}"
        );
    }

    #[tokio::test]
    async fn what_is_no_proxy_request_is_a_bad_request() {
        let p = proxy(&["example.org".to_string()]);
        for (ask, why) in [
            (
                "GET https://example.org/ HTTP/1.1\r\nHost: example.org\r\n\r\n",
                "use CONNECT",
            ),
            (
                "GET /x HTTP/1.1\r\nHost: example.org\r\n\r\n",
                "not a proxy request",
            ),
            (
                "CONNECT example.org HTTP/1.1\r\nHost: example.org\r\n\r\n",
                "CONNECT without a port",
            ),
        ] {
            let mut s = proxied(&p.path).await;
            s.write_all(ask.as_bytes()).await.unwrap();
            let h = head(&mut s).await;
            assert!(h.starts_with("HTTP/1.1 400"), "{ask}: {h}");
            let body = body(&mut s).await;
            assert!(body.contains(why), "{ask}: {body}");
        }
    }

    #[tokio::test]
    async fn a_bridge_to_a_listed_address_carries_bytes_and_one_off_the_list_is_closed() {
        let port = echo().await;
        let mut p = proxy(&[format!("127.0.0.1:{port}")]);
        let mut s = UnixStream::connect(&p.path).await.unwrap();
        let line = format!("relay-egress 1 bridge 127.0.0.1:{port}\n");
        s.write_all(line.as_bytes()).await.unwrap();
        round_trip(&mut s, b"raw bytes").await;
        drop(s);
        let r = p.record().await;
        assert_eq!(
            (r.host.as_str(), r.port, r.allowed, r.sent, r.received),
            ("127.0.0.1", port, true, 9, 9),
            "{r:?}"
        );
        let other = echo().await;
        let mut s = UnixStream::connect(&p.path).await.unwrap();
        let line = format!("relay-egress 1 bridge 127.0.0.1:{other}\n");
        s.write_all(line.as_bytes()).await.unwrap();
        assert_eq!(rest(&mut s).await, "");
        let r = p.record().await;
        assert_eq!((r.port, r.allowed), (other, false), "{r:?}");
        // Listed, nothing listening: recorded with why.
        let gone = closed_port();
        let mut p = proxy(&[format!("127.0.0.1:{gone}")]);
        let mut s = UnixStream::connect(&p.path).await.unwrap();
        let line = format!("relay-egress 1 bridge 127.0.0.1:{gone}\n");
        s.write_all(line.as_bytes()).await.unwrap();
        assert_eq!(rest(&mut s).await, "");
        let r = p.record().await;
        assert!(
            r.allowed && r.rule.contains(&format!("127.0.0.1:{gone}: ")),
            "{r:?}"
        );
    }

    /// The first connection is the lifeline: outside the cap, read to its end, and its
    /// end while its launcher (here this very process) runs is the forwarder's death,
    /// reported once; the proxy goes on serving. A later one saying it is a lifeline is
    /// closed and changes nothing.
    #[tokio::test]
    async fn the_lifelines_end_while_the_sandbox_runs_is_the_forwarders_death() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let session = super::super::session("s-life", Rules::default());
        let sink: Sink = Arc::new(|_: &Session, _: Egress| {});
        let (lost, mut said) = lost_hook();
        let task = tokio::spawn(serve(listener, session, sink, lost));
        let lifeline = lifeline_to(&path);
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            held.push(proxied(&path).await);
        }
        // The last one under the cap is served though the lifeline is open.
        let mut last = held.pop().unwrap();
        let ask = b"CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n";
        last.write_all(ask).await.unwrap();
        assert!(head(&mut last).await.starts_with("HTTP/1.1 403"));
        drop((last, held));
        let mut second = UnixStream::connect(&path).await.unwrap();
        second
            .write_all(relay_shim::forward::LIFELINE.as_bytes())
            .await
            .unwrap();
        assert_eq!(rest(&mut second).await, "");
        drop(second);
        assert!(said.try_recv().is_err(), "a second lifeline counted");
        drop(lifeline);
        let id = tokio::time::timeout(BOUND, said.recv())
            .await
            .expect("the lifeline's end was not reported")
            .unwrap();
        assert_eq!(id, "s-life");
        // Still serving, and nothing more is reported.
        let mut s = proxied(&path).await;
        s.write_all(ask).await.unwrap();
        assert!(head(&mut s).await.starts_with("HTTP/1.1 403"));
        assert!(said.try_recv().is_err());
        task.abort();
    }

    /// A first connection that is not the forwarder's lifeline leaves the session
    /// without one: reported as lost at once, and closed.
    #[tokio::test]
    async fn a_first_connection_that_is_no_lifeline_is_reported_lost() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let session = super::super::session("s-none", Rules::default());
        let sink: Sink = Arc::new(|_: &Session, _: Egress| {});
        let (lost, mut said) = lost_hook();
        let task = tokio::spawn(serve(listener, session, sink, lost));
        let mut s = proxied(&path).await;
        let id = tokio::time::timeout(BOUND, said.recv())
            .await
            .expect("not reported")
            .unwrap();
        assert_eq!(id, "s-none");
        assert_eq!(rest(&mut s).await, "");
        task.abort();
    }

    /// A process of its own that holds a lifeline: it connects and says its line, closes
    /// it when `close` is dropped, and exits when `end` is. Forked: only plain syscalls
    /// in the child.
    struct Peer {
        pid: libc::pid_t,
        close: Option<OwnedFd>,
        end: Option<OwnedFd>,
    }

    use std::os::fd::{AsRawFd, OwnedFd};

    impl Peer {
        fn start(path: &std::path::Path) -> Peer {
            use std::os::unix::ffi::OsStrExt;
            // Close-on-exec (std's pipe): a sibling test's child keeps no end past its
            // exec.
            let pipe = || -> (OwnedFd, OwnedFd) {
                let (r, w) = std::io::pipe().unwrap();
                (r.into(), w.into())
            };
            let (close_r, close) = pipe();
            let (end_r, end) = pipe();
            // Safety: sockaddr_un is plain data; all zeroes is a valid value.
            let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
            addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
            for (d, b) in addr.sun_path.iter_mut().zip(path.as_os_str().as_bytes()) {
                *d = *b as libc::c_char;
            }
            let line = relay_shim::forward::LIFELINE.as_bytes();
            let (cr, er) = (close_r.as_raw_fd(), end_r.as_raw_fd());
            let (cw, ew) = (close.as_raw_fd(), end.as_raw_fd());
            // Safety: the child runs only async-signal-safe calls on data made before the
            // fork, then _exit.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0);
            if pid == 0 {
                // Safety: as above.
                unsafe {
                    let mut b = 0u8;
                    // The write ends are the test's alone: their drop is the signal.
                    libc::close(cw);
                    libc::close(ew);
                    let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
                    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
                    libc::connect(fd, std::ptr::addr_of!(addr).cast(), len);
                    libc::write(fd, line.as_ptr().cast(), line.len());
                    libc::read(cr, std::ptr::addr_of_mut!(b).cast(), 1);
                    libc::close(fd);
                    libc::read(er, std::ptr::addr_of_mut!(b).cast(), 1);
                    libc::_exit(0);
                }
            }
            Peer {
                pid,
                close: Some(close),
                end: Some(end),
            }
        }

        /// Ends it and reaps it.
        fn end(&mut self) {
            self.close.take();
            self.end.take();
            // Safety: waitpid on this test's own child.
            unsafe { libc::waitpid(self.pid, std::ptr::null_mut(), 0) };
        }
    }

    /// Polls `fut` once: whatever it does before its first wait is done.
    async fn poll_once<F: std::future::Future + Unpin>(fut: &mut F) -> bool {
        std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *fut).poll(cx).is_pending())).await
    }

    /// The launcher is found as the lifeline is accepted (here the process that made it,
    /// in this namespace): its lifeline closed while it runs is a death; closed because
    /// it ended (as a sandbox's teardown closes the forwarder's) is none.
    #[tokio::test]
    async fn a_lifeline_that_ends_with_its_launcher_is_no_death() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = UnixListener::bind(&path).unwrap();
        for launcher_ends in [true, false] {
            let (lost, mut said) = lost_hook();
            let session = super::super::session("s-peer", Rules::default());
            let mut peer = Peer::start(&path);
            let (stream, _) = listener.accept().await.unwrap();
            let mut watch = Box::pin(lifeline(stream, session, lost));
            assert!(poll_once(&mut watch).await, "the lifeline ended at once");
            if launcher_ends {
                peer.end();
            } else {
                peer.close.take();
            }
            tokio::time::timeout(BOUND, watch).await.unwrap();
            assert_eq!(
                said.try_recv().ok(),
                (!launcher_ends).then(|| "s-peer".to_string())
            );
            peer.end();
        }
    }

    #[tokio::test]
    async fn a_connection_without_the_forwarders_line_is_closed() {
        let p = proxy(&["example.org".to_string()]);
        for first in [
            "relay-egress 2 proxy\n".to_string(),
            "relay-egress 1 tunnel\n".to_string(),
            "relay-egress 1 bridge nowhere\n".to_string(),
            "GET http://example.org/ HTTP/1.1\r\n\r\n".to_string(),
            "x".repeat(PREAMBLE_MAX + 1),
        ] {
            let mut s = UnixStream::connect(&p.path).await.unwrap();
            s.write_all(first.as_bytes()).await.unwrap();
            assert_eq!(rest(&mut s).await, "", "{first}");
        }
    }

    #[tokio::test]
    async fn seatbelts_proxy_speaks_http_on_its_own_port() {
        let port = echo().await;
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = l.local_addr().unwrap();
        let (tx, mut records) = tokio::sync::mpsc::unbounded_channel();
        let sink: Sink = Arc::new(move |_: &Session, e: Egress| {
            let _ = tx.send(e);
        });
        let rules = Rules::parse(&[format!("127.0.0.1:{port}")]).unwrap();
        let task = tokio::spawn(serve_tcp(l, super::super::session("s-p", rules), sink));
        let mut s = TcpStream::connect(at).await.unwrap();
        let ask = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n");
        s.write_all(ask.as_bytes()).await.unwrap();
        assert!(head(&mut s).await.starts_with("HTTP/1.1 200"));
        round_trip(&mut s, b"abc").await;
        drop(s);
        let r = tokio::time::timeout(BOUND, records.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((r.allowed, r.sent, r.received), (true, 3, 3), "{r:?}");
        task.abort();
    }
    #[tokio::test]
    async fn a_count_is_of_the_bytes_each_read_adds() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut far = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (near, _) = l.accept().await.unwrap();
        let counts = Arc::new(Counts::default());
        let mut counted = Counted {
            inner: near,
            counts: counts.clone(),
        };
        far.write_all(b"abc").await.unwrap();
        // A buffer that holds two bytes already: three more are read, three counted.
        let mut space = [0u8; 16];
        let mut buf = ReadBuf::new(&mut space);
        buf.put_slice(b"zz");
        tokio::time::timeout(
            BOUND,
            std::future::poll_fn(|cx| match Pin::new(&mut counted).poll_read(cx, &mut buf) {
                Poll::Ready(r) if buf.filled().len() > 2 => Poll::Ready(r),
                Poll::Ready(r) => {
                    r.unwrap();
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
                Poll::Pending => Poll::Pending,
            }),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(buf.filled(), b"zzabc");
        assert_eq!(counts.received.load(Ordering::Relaxed), 3);
        counted.write_all(b"hello").await.unwrap();
        assert_eq!(counts.sent.load(Ordering::Relaxed), 5);
    }
}
