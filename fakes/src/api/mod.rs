//! `fakeapi`: a stand-in for the Anthropic API that relay's real-Claude tests point
//! Claude Code at (`ANTHROPIC_BASE_URL`), so a turn can run with no network and a test
//! can see which credential arrived.
//!
//! `fakeapi --script FILE --record FILE` listens on `127.0.0.1` (loopback only, a port
//! the kernel picks), prints the port as its first stdout line, and serves until its
//! stdin reaches EOF (the test holds the other end, so it never outlives the test).
//!
//! Routes: `POST /v1/messages` answers from the [`script`] (streaming when the request
//! says `"stream": true`, see [`answer`]); `POST /v1/messages/count_tokens` answers a
//! count; `HEAD`/`GET /api/hello` (Claude Code's start-up probe) answer 200; anything
//! else is an Anthropic-shaped 404. Every request, whatever its route, appends one
//! [`record`] line to the record file, written before the answer is sent.

pub mod answer;
pub mod record;
pub mod script;

use std::convert::Infallible;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

/// Largest request body read (Claude Code's requests carry the whole conversation).
const BODY_MAX: usize = 32 * 1024 * 1024;

/// Exit code for a usage error.
const EXIT_USAGE: i32 = 64;

struct State {
    script: PathBuf,
    record: PathBuf,
    cursor: Mutex<script::Cursor>,
    messages: AtomicU64,
}

fn usage(msg: &str) -> ! {
    let _ = writeln!(
        std::io::stderr(),
        "fakeapi: {msg}\nusage: fakeapi --script FILE --record FILE"
    );
    std::process::exit(EXIT_USAGE)
}

/// The whole fake. Returns only by exiting.
pub fn run() -> ! {
    let mut script = None;
    let mut record = None;
    let mut args = std::env::args_os().skip(1);
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("--script") => script = args.next().map(PathBuf::from),
            Some("--record") => record = args.next().map(PathBuf::from),
            _ => usage(&format!("unknown argument {a:?}")),
        }
    }
    let (Some(script), Some(record)) = (script, record) else {
        usage("--script and --record are required")
    };
    let state = Arc::new(State {
        script,
        record,
        cursor: Mutex::default(),
        messages: AtomicU64::new(0),
    });
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => usage(&format!("runtime: {e}")),
    };
    match rt.block_on(serve(state)) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "fakeapi: {e}");
            std::process::exit(crate::EXIT_RECORD_FAILED)
        }
    }
}

async fn serve(state: Arc<State>) -> Result<(), String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind 127.0.0.1:0: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{port}")
            .and_then(|()| out.flush())
            .map_err(|e| format!("stdout: {e}"))?;
    }
    let stdin_closed = async {
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 256];
        while let Ok(n) = stdin.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    };
    tokio::pin!(stdin_closed);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let state = state.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(handle(&state, req).await) }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
            _ = &mut stdin_closed => return Ok(()),
        }
    }
}

fn respond(status: u16, content_type: &str, body: Vec<u8>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

fn json_respond(status: u16, v: &Value) -> Response<Full<Bytes>> {
    respond(status, "application/json", v.to_string().into_bytes())
}

async fn handle(state: &State, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let method = req.method().as_str().to_string();
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let route = req.uri().path().to_string();
    let headers: Vec<(String, Vec<u8>)> = req
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_ascii_lowercase(), v.as_bytes().to_vec()))
        .collect();
    let bytes = match Limited::new(req.into_body(), BODY_MAX).collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let body: Option<Value> = serde_json::from_slice(&bytes).ok();

    let mut turn = None;
    let resp = match (method.as_str(), route.as_str()) {
        ("POST", "/v1/messages") => match &body {
            None => json_respond(
                400,
                &answer::error_body("invalid_request_error", "fakeapi: the body is not JSON"),
            ),
            Some(b) => {
                let script = std::fs::read(&state.script)
                    .map_err(|e| format!("script {}: {e}", state.script.display()))
                    .and_then(|bytes| {
                        state
                            .cursor
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .load(&bytes)
                            .map_err(|e| format!("script {}: {e}", state.script.display()))
                    });
                match script {
                    Err(e) => json_respond(
                        500,
                        &answer::error_body("api_error", &format!("fakeapi: {e}")),
                    ),
                    Ok(()) => {
                        let stream = b["stream"].as_bool().unwrap_or(false);
                        let (reply, t, delay) = {
                            let mut c = state.cursor.lock().unwrap_or_else(|p| p.into_inner());
                            let (reply, t) = c.next(stream);
                            (reply, t, c.delay(t))
                        };
                        turn = t;
                        if !delay.is_zero() {
                            tokio::time::sleep(delay).await;
                        }
                        let n = state.messages.fetch_add(1, Ordering::SeqCst) + 1;
                        let model = b["model"].as_str().unwrap_or("claude-fake");
                        if stream {
                            match answer::sse_answer(&reply, model, n) {
                                Ok(sse) => respond(200, "text/event-stream", sse.into_bytes()),
                                Err((status, v)) => json_respond(status, &v),
                            }
                        } else {
                            let (status, v) = answer::json_answer(&reply, model, n);
                            json_respond(status, &v)
                        }
                    }
                }
            }
        },
        ("POST", "/v1/messages/count_tokens") => json_respond(200, &json!({"input_tokens": 1})),
        ("HEAD" | "GET", "/api/hello") => json_respond(200, &json!({})),
        _ => json_respond(
            404,
            &answer::error_body(
                "not_found_error",
                &format!("fakeapi: no route {method} {route}"),
            ),
        ),
    };
    let conversation = (route == "/v1/messages").then_some(body.as_ref()).flatten();
    let line = record::line(
        &method,
        &path,
        &headers,
        conversation,
        resp.status().as_u16(),
        turn,
    );
    if let Err(e) = crate::call_log::append_line(&state.record, &line.to_string()) {
        let _ = writeln!(
            std::io::stderr(),
            "fakeapi: record {}: {e}",
            state.record.display()
        );
        std::process::exit(crate::EXIT_RECORD_FAILED);
    }
    resp
}
