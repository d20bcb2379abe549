//! The one HTTP client: the daemon's calls to the host (`src/daemon/hostlink.rs`), the
//! CLI's calls to the daemon (on a current-thread runtime, [`Blocking`]) and the e2e
//! harness's. One request per connection; an answer is read whole ([`collect`]), as it
//! arrives ([`Response`]'s body), or taken over after `101` ([`upgraded`]).

use std::path::PathBuf;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{HeaderMap, Request, Response};
use hyper_util::rt::TokioIo;

/// Where a server listens.
#[derive(Clone, Debug)]
pub enum Addr {
    Unix(PathBuf),
    /// `host:port`.
    Tcp(String),
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Addr::Unix(p) => write!(f, "{}", p.display()),
            Addr::Tcp(a) => f.write_str(a),
        }
    }
}

/// Why a call got no answer.
#[derive(Debug)]
pub enum CallError {
    /// Nothing listens there (or it refused the connection).
    Connect(std::io::Error),
    /// The exchange broke (the request could not be built, sent, or its answer read).
    Http(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Connect(e) => write!(f, "{e}"),
            CallError::Http(m) => f.write_str(m),
        }
    }
}

fn http_err(e: impl std::fmt::Display) -> CallError {
    CallError::Http(e.to_string())
}

/// A request with a `host` header, `headers` and `body`.
pub fn request(
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Result<Request<Full<Bytes>>, CallError> {
    let mut b = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "relay");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Full::new(body.into())).map_err(http_err)
}

/// Sends `req` on a new connection to `addr`; the answer's body is unread. The
/// connection is driven on a task of its own, upgrades allowed.
pub async fn send(addr: &Addr, req: Request<Full<Bytes>>) -> Result<Response<Incoming>, CallError> {
    let mut sender = match addr {
        Addr::Unix(p) => {
            let s = tokio::net::UnixStream::connect(p)
                .await
                .map_err(CallError::Connect)?;
            handshake(s).await?
        }
        Addr::Tcp(a) => {
            let s = tokio::net::TcpStream::connect(a.as_str())
                .await
                .map_err(CallError::Connect)?;
            handshake(s).await?
        }
    };
    sender.send_request(req).await.map_err(http_err)
}

async fn handshake<S>(
    io: S,
) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, CallError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(http_err)?;
    tokio::spawn(conn.with_upgrades());
    Ok(sender)
}

/// An answer read whole.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    /// The head as a server wrote it (`HTTP/1.1 200 OK`, then `name: value` lines, names
    /// in lower case), for tests that look at a header.
    pub fn head(&self) -> String {
        let mut s = format!("HTTP/1.1 {}\r\n", self.status);
        for (k, v) in &self.headers {
            s.push_str(&format!(
                "{k}: {}\r\n",
                String::from_utf8_lossy(v.as_bytes())
            ));
        }
        s.push_str("\r\n");
        s
    }
}

/// Reads an answer's body to its end.
pub async fn collect(resp: Response<Incoming>) -> Result<Answer, CallError> {
    let status = resp.status().as_u16();
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.map_err(http_err)?.to_bytes();
    Ok(Answer {
        status,
        headers: parts.headers,
        body,
    })
}

/// After a `101`, the connection itself; anything else is read whole and returned.
pub async fn upgraded(
    resp: Response<Incoming>,
) -> Result<Result<hyper::upgrade::Upgraded, Answer>, CallError> {
    if resp.status().as_u16() != 101 {
        return collect(resp).await.map(Err);
    }
    hyper::upgrade::on(resp).await.map(Ok).map_err(http_err)
}

/// The same client for a synchronous caller (the CLI, the e2e harness): each call runs
/// on a current-thread runtime of its own.
pub struct Blocking {
    pub addr: Addr,
    rt: tokio::runtime::Runtime,
}

impl Blocking {
    pub fn new(addr: Addr) -> std::io::Result<Blocking> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Blocking { addr, rt })
    }

    /// One request, its answer read whole.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Result<Answer, CallError> {
        let req = request(method, path, headers, body)?;
        self.rt.block_on(async {
            let resp = send(&self.addr, req).await?;
            collect(resp).await
        })
    }

    /// [`Blocking::call`], given up after `limit`: `None` when no answer came by then.
    pub fn call_within(
        &self,
        limit: std::time::Duration,
        method: &str,
        path: &str,
    ) -> Option<Result<Answer, CallError>> {
        let req = match request(method, path, &[], Bytes::new()) {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        self.rt.block_on(async {
            let answer = async {
                let resp = send(&self.addr, req).await?;
                collect(resp).await
            };
            tokio::time::timeout(limit, answer).await.ok()
        })
    }

    /// One request whose `200` answer is a stream of lines, each handed to `on_line` as
    /// soon as it arrives (without its newline; a last line without one too). Any other
    /// answer is read whole and returned as `Err`'s `Ok`.
    pub fn call_lines(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
        mut on_line: impl FnMut(&[u8]),
    ) -> Result<Result<(), Answer>, CallError> {
        let req = request(method, path, headers, body)?;
        self.rt.block_on(async {
            let resp = send(&self.addr, req).await?;
            if resp.status().as_u16() != 200 {
                return collect(resp).await.map(Err);
            }
            let mut body = resp.into_body();
            let mut pending: Vec<u8> = Vec::new();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(http_err)?;
                let Some(data) = frame.data_ref() else {
                    continue;
                };
                pending.extend_from_slice(data);
                while let Some(pos) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=pos).collect();
                    on_line(&line[..line.len() - 1]);
                }
            }
            if !pending.is_empty() {
                on_line(&pending);
            }
            Ok(Ok(()))
        })
    }

    /// One request answered `101`: the connection as a blocking unix stream, with the
    /// bytes already read past the answer's head. Any other answer is read whole.
    pub fn upgrade(
        &self,
        path: &str,
        protocol: &str,
    ) -> Result<Result<(std::os::unix::net::UnixStream, Bytes), Answer>, CallError> {
        let req = request(
            "GET",
            path,
            &[("connection", "upgrade"), ("upgrade", protocol)],
            Bytes::new(),
        )?;
        self.rt.block_on(async {
            let resp = send(&self.addr, req).await?;
            let up = match upgraded(resp).await? {
                Ok(u) => u,
                Err(a) => return Ok(Err(a)),
            };
            let parts = up
                .downcast::<TokioIo<tokio::net::UnixStream>>()
                .map_err(|_| CallError::Http("upgrade: not a unix socket".into()))?;
            let std = parts.io.into_inner().into_std().map_err(http_err)?;
            std.set_nonblocking(false).map_err(http_err)?;
            Ok(Ok((std, parts.read_buf)))
        })
    }
}
