//! `relay sandbox <template>`: start a sandboxed terminal of that template for the
//! project holding the current directory, and attach this terminal to it — raw mode,
//! window size, the tool's exit status. Closing this terminal (SIGHUP) ends the
//! session. With `--json` the session's output goes to stderr and stdout gets one line
//! at the end. The session's output reaches this terminal through
//! [`termout::Filter`]: its screen works, sequences that act outside it are dropped
//! ([cli.md](../../docs/cli.md#what-a-session-prints-on-your-terminal)).

use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use nix::sys::signal::{SigSet, Signal};
use nix::sys::termios::{self, SetArg, Termios};
use serde_json::{json, Value};

use super::client::Client;
use super::termout;
use super::{emit, fail};
use crate::protocol::attach::{self, frame};

fn winsize() -> Option<(u16, u16)> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // Safety: TIOCGWINSZ fills the winsize we own.
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    (rc == 0 && ws.ws_col > 0 && ws.ws_row > 0).then_some((ws.ws_col, ws.ws_row))
}

fn resize_frame() -> Option<Vec<u8>> {
    let (c, r) = winsize()?;
    let mut p = c.to_be_bytes().to_vec();
    p.extend_from_slice(&r.to_be_bytes());
    Some(frame(attach::RESIZE, &p))
}

/// Puts the terminal back as it was when dropped.
struct RawMode(Option<Termios>);

impl RawMode {
    fn enter() -> RawMode {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return RawMode(None);
        }
        let Ok(saved) = termios::tcgetattr(&stdin) else {
            return RawMode(None);
        };
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        let _ = termios::tcsetattr(&stdin, SetArg::TCSANOW, &raw);
        RawMode(Some(saved))
    }
    fn restore(&mut self) {
        if let Some(t) = self.0.take() {
            let _ = termios::tcsetattr(std::io::stdin(), SetArg::TCSANOW, &t);
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        self.restore();
    }
}

/// `HTTP/1.1 409 Conflict`: how a refused attach is named.
fn status_line(status: u16) -> String {
    let reason = hyper::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    format!("HTTP/1.1 {status} {reason}")
}

fn exit_code(v: &Value) -> u8 {
    if let Some(code) = v["exit_status"].as_i64() {
        return (code & 0xff) as u8;
    }
    if let Some(sig) = v["signal"].as_i64().or_else(|| v["exit_signal"].as_i64()) {
        return (128 + sig).clamp(0, 255) as u8;
    }
    1
}

/// Purges an ended terminal; a failure is said on stderr (the run itself went well).
fn forget(client: &Client, id: &str) {
    match client.call("POST", &format!("/api/terminals/{id}/purge"), None) {
        Ok(a) if a.status == 200 => {}
        Ok(a) => eprintln!("relay: terminal {id} kept: {}", a.error_text()),
        Err(e) => eprintln!("relay: terminal {id} kept: {e}"),
    }
}

pub fn run(config: &Path, template: &str, args: &[String], json_out: bool) -> ExitCode {
    let client = Client::new(config);
    let cwd = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => return fail(format!("current directory: {e}")),
    };
    let size = winsize();
    let body = json!({
        "template": template,
        "directory": cwd,
        "project_from_directory": true,
        "extra_args": args,
        "cols": size.map(|s| s.0),
        "rows": size.map(|s| s.1),
    });
    let started = match client.call("POST", "/api/terminals", Some(&body)) {
        Ok(a) if a.status == 201 => a.json(),
        Ok(a) => return fail(a.error_text()),
        Err(e) => return fail(e),
    };
    let Some(id) = started["id"].as_str().map(str::to_string) else {
        return fail("relay answered without a terminal id");
    };

    let (stream, already) = match client.upgrade(
        &format!("/api/terminals/{id}/attach"),
        attach::ATTACH_PROTOCOL,
    ) {
        Ok(Ok(s)) => s,
        Ok(Err(a)) => return fail(format!("attach refused: {}", status_line(a.status))),
        Err(e) => return fail(format!("attach: {e}")),
    };

    // Signals are taken by one thread: window changes, and the terminal going away.
    let mut set = SigSet::empty();
    for s in [
        Signal::SIGWINCH,
        Signal::SIGHUP,
        Signal::SIGTERM,
        Signal::SIGINT,
    ] {
        set.add(s);
    }
    let _ = set.thread_block();
    let mut raw = RawMode::enter();

    let writer = match stream.try_clone() {
        Ok(w) => Arc::new(Mutex::new(w)),
        Err(e) => return fail(format!("attach: {e}")),
    };
    let send = {
        let writer = writer.clone();
        move |bytes: &[u8]| {
            writer
                .lock()
                .map(|mut w| w.write_all(bytes).is_ok())
                .unwrap_or(false)
        }
    };
    if let Some(f) = resize_frame() {
        send(&f);
    }
    {
        let send = send.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            let mut stdin = std::io::stdin();
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if !send(&frame(attach::INPUT, &buf[..n])) {
                            return;
                        }
                    }
                }
            }
        });
    }
    {
        let send = send.clone();
        let config = config.to_path_buf();
        let id = id.clone();
        let saved = raw.0.clone();
        std::thread::spawn(move || loop {
            match set.wait() {
                Ok(Signal::SIGWINCH) => {
                    if let Some(f) = resize_frame() {
                        send(&f);
                    }
                }
                Ok(sig) => {
                    // The terminal is gone (or we were told to stop): end the session.
                    let _ =
                        Client::new(&config).call("DELETE", &format!("/api/terminals/{id}"), None);
                    if let Some(t) = &saved {
                        let _ = termios::tcsetattr(std::io::stdin(), SetArg::TCSANOW, t);
                    }
                    std::process::exit(128 + sig as i32);
                }
                Err(_) => return,
            }
        });
    }

    let mut out: Box<dyn Write> = if json_out {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    };
    // What came with the answer's head is already the stream.
    let mut buf = already;
    let mut chunk = vec![0u8; 16 * 1024];
    let mut result: Option<Value> = None;
    // One filter for the whole stream, scrollback frame first: a sequence split across
    // frames is judged whole.
    let mut filter = termout::Filter::new();
    let mut shown = Vec::new();
    let mut stream = stream;
    // The frames already here are taken before each read.
    'read: loop {
        let frames = match attach::take_frames(&mut buf) {
            Ok(f) => f,
            Err(e) => {
                raw.restore();
                return fail(format!("attach: {e}"));
            }
        };
        for (kind, payload) in frames {
            match kind {
                attach::OUTPUT => {
                    shown.clear();
                    filter.feed(&payload, &mut shown);
                    // A closed output is ignored: the session runs on until it ends.
                    let _ = out.write_all(&shown);
                    let _ = out.flush();
                }
                attach::EXIT => {
                    result = serde_json::from_slice(&payload).ok();
                    break 'read;
                }
                _ => {}
            }
        }
        let n = match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
    }
    raw.restore();
    let result = match result {
        Some(r) => {
            // The run is printed: the terminal has nothing more to give, so it goes
            // (its record, logs and temp folder; docs/cli.md#relay-sandbox).
            forget(&client, &id);
            r
        }
        // The stream ended without an exit frame: ask for the terminal's state.
        None => match client.call("GET", "/api/terminals", None) {
            Ok(a) => a.json()["terminals"]
                .as_array()
                .and_then(|t| t.iter().find(|e| e["id"] == id.as_str()).cloned())
                .unwrap_or(Value::Null),
            Err(e) => return fail(e),
        },
    };
    let code = ExitCode::from(exit_code(&result));
    if json_out {
        let line =
            json!({"id": id, "exit_status": result["exit_status"], "signal": result["signal"]});
        return emit(format!("{line}\n").as_bytes(), code);
    }
    code
}
