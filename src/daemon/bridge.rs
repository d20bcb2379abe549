//! The bridge socket: a shim's identity Hello binds its session to the shim's pid.
//! One line in, one line out; the secret is single use and compared in constant time.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relay_shim::hello::{Answer, Hello};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;

use super::Daemon;

const LINE_MAX: u64 = 4096;
/// The Hello must arrive, and the answer leave, within this.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// Secrets waiting for their Hello, by session id.
#[derive(Default)]
pub struct Pending(Mutex<HashMap<String, String>>);

impl Pending {
    pub fn expect(&self, session_id: &str, secret: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(session_id.into(), secret.into());
    }
    pub fn forget(&self, session_id: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session_id);
    }
    /// Takes the secret (single use) and compares it.
    fn redeem(&self, session_id: &str, secret: &str) -> bool {
        let stored = self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session_id);
        stored.is_some_and(|s| crate::http::same_secret(s.as_bytes(), secret.as_bytes()))
    }
}

/// Binds the bridge socket (start-up) and serves it on its own task: at most `cap`
/// Hellos at once, each within 10 s; an accept that fails for lack of descriptors
/// pauses (`src/listen.rs`).
pub async fn serve(daemon: Arc<Daemon>, path: &Path, cap: usize) -> std::io::Result<()> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    let me = nix::unistd::geteuid().as_raw();
    tokio::spawn(crate::listen::serve(
        "relay: bridge.sock",
        listener,
        cap,
        move |stream| {
            let daemon = daemon.clone();
            async move {
                let cred = stream.peer_cred().ok();
                if cred.map(|c| c.uid()) != Some(me) {
                    return;
                }
                let peer_pid = crate::peer::peer_pid(&stream).unwrap_or(0);
                let (read, mut write) = stream.into_split();
                let mut line = String::new();
                let mut r = BufReader::new(read.take(LINE_MAX));
                let got = tokio::time::timeout(HELLO_TIMEOUT, r.read_line(&mut line)).await;
                let answer = match got {
                    Ok(Ok(n)) if n > 0 => hello(&daemon, &line, peer_pid),
                    _ => refused("no Hello"),
                };
                let _ =
                    tokio::time::timeout(HELLO_TIMEOUT, write.write_all(answer.as_bytes())).await;
            }
        },
    ));
    Ok(())
}

fn refused(reason: &str) -> String {
    Answer::Refused {
        reason: reason.into(),
    }
    .to_line()
}

fn hello(daemon: &Daemon, line: &str, peer_pid: u32) -> String {
    let hello = match Hello::parse(line) {
        Ok(h) => h,
        Err(why) => return refused(why),
    };
    if !daemon.bridge.redeem(&hello.session_id, &hello.secret) {
        return refused("unknown session or secret");
    }
    daemon.bind_root(&hello.session_id, peer_pid);
    Answer::Ok {
        session_id: hello.session_id,
        pid: std::process::id(),
    }
    .to_line()
}
