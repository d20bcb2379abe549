//! The turns of `claude` sessions as the daemon follows them: which one runs now (a
//! second message is refused while it does, and `relay session interrupt` needs one),
//! what it has said so far (an interrupted turn's reply), and the turn log
//! `<config>/sessions/logs/<id>.turns` that `relay session log` shows above Claude
//! Code's stderr, so a reply nobody waited for is never lost (docs/cli.md,
//! "relay session message").

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A message is kept in the turn log up to this many bytes; a reply up to
/// [`REPLY_LOG_MAX`].
const MESSAGE_LOG_MAX: usize = 4 * 1024;
const REPLY_LOG_MAX: usize = 64 * 1024;

/// The turn running in one session.
pub struct Now {
    pub started: Instant,
    pub tools: u32,
    pub text: String,
    pub message: String,
}

#[derive(Default)]
pub struct Turns(Mutex<HashMap<String, Now>>, tokio::sync::Notify);

/// `1 tool call`, `3 tool calls`.
pub fn tool_calls(n: u32) -> String {
    match n {
        1 => "1 tool call".into(),
        n => format!("{n} tool calls"),
    }
}

impl Turns {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Now>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits, at most `limit`, until `id` runs no turn; whether it does not.
    pub async fn ended_within(&self, id: &str, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.1.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !self.running(id) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return !self.running(id);
            }
        }
    }

    /// Marks a turn of `id` as running; `Err` with how long the running one has run and
    /// its tool calls when there is one already.
    pub fn begin(&self, id: &str, message: &str) -> Result<(), (Duration, u32)> {
        let mut map = self.map();
        if let Some(n) = map.get(id) {
            return Err((n.started.elapsed(), n.tools));
        }
        map.insert(
            id.to_string(),
            Now {
                started: Instant::now(),
                tools: 0,
                text: String::new(),
                message: message.to_string(),
            },
        );
        Ok(())
    }

    pub fn running(&self, id: &str) -> bool {
        self.map().contains_key(id)
    }

    /// Text the running turn of `id` said, as it arrives.
    pub fn said(&self, id: &str, text: &str) {
        if let Some(n) = self.map().get_mut(id) {
            if n.text.len() < REPLY_LOG_MAX {
                n.text.push_str(text);
            }
        }
    }

    pub fn tool(&self, id: &str) {
        if let Some(n) = self.map().get_mut(id) {
            n.tools += 1;
        }
    }

    pub fn end(&self, id: &str) -> Option<Now> {
        let now = self.map().remove(id);
        self.1.notify_waiters();
        now
    }
}

/// The turn log's file for `id`.
pub fn log_path(logs: &Path, id: &str) -> std::path::PathBuf {
    logs.join(format!("{id}.turns"))
}

/// One ended turn as the turn log holds it: a heading saying when, how long and how it
/// ended, the message after `> `, then the reply.
pub fn entry(now: &Now, at_ms: u64, how: &str, reply: &str) -> String {
    let when = crate::text::utc_ms(at_ms);
    let secs = now.started.elapsed().as_secs();
    let message = crate::text::cut(now.message.trim_end(), MESSAGE_LOG_MAX).replace('\n', "\n> ");
    let reply = crate::text::cut(reply.trim_end(), REPLY_LOG_MAX);
    format!("── turn at {when}, {secs} s: {how}\n> {message}\n{reply}\n\n")
}

/// Appends `text` to `id`'s turn log (made `0600`); a failure is only logged: the
/// reply still reached whoever waited for it.
pub fn append(logs: &Path, id: &str, text: &str) {
    use std::os::unix::fs::OpenOptionsExt;
    let path = log_path(logs, id);
    let r = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()));
    if let Err(e) = r {
        tracing::warn!("turn log {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_turn_at_a_time_and_what_it_said_goes_with_its_end() {
        let t = Turns::default();
        t.begin("s-1", "hello").unwrap();
        let (_, tools) = t.begin("s-1", "again").unwrap_err();
        assert_eq!(tools, 0);
        t.said("s-1", "let me ");
        t.tool("s-1");
        t.said("s-1", "look");
        assert!(t.running("s-1") && !t.running("s-2"));
        let n = t.end("s-1").unwrap();
        assert_eq!(
            (n.text.as_str(), n.tools, n.message.as_str()),
            ("let me look", 1, "hello")
        );
        assert!(!t.running("s-1"));
        t.begin("s-1", "next").unwrap();
    }

    #[test]
    fn a_turn_log_entry_says_when_how_the_message_and_the_reply() {
        let t = Turns::default();
        t.begin("s-1", "two\nlines").unwrap();
        let n = t.end("s-1").unwrap();
        let e = entry(&n, 0, "interrupted (aborted_streaming)", "so far\n");
        assert_eq!(
            e,
            "── turn at 1970-01-01 00:00:00.000Z, 0 s: interrupted (aborted_streaming)\n\
             > two\n> lines\nso far\n\n"
        );
        let dir = tempfile::tempdir().unwrap();
        append(dir.path(), "s-1", &e);
        append(dir.path(), "s-1", &e);
        let got = std::fs::read_to_string(log_path(dir.path(), "s-1")).unwrap();
        assert_eq!(got, format!("{e}{e}"));
    }
}
