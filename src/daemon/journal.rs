//! The audit log and the event log: JSON lines in the config dir (0600), one write per
//! line. Events are also kept in memory with a sequence number so API clients (and the
//! tests) can wait for the next one instead of polling a file.
//!
//! Neither ever holds the token or an identity secret: rows are built from the fields
//! below only, and request-supplied strings are capped.

use std::collections::VecDeque;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::Notify;

/// Request-supplied strings longer than this are cut (on a char boundary) with `…`.
pub const STRING_CAP: usize = 256;
const EVENTS_KEPT: usize = 4096;

pub fn cap(s: &str) -> String {
    if s.len() <= STRING_CAP {
        return s.to_string();
    }
    let mut end = STRING_CAP;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn append_line(path: &PathBuf, value: &Value) {
    let Ok(mut line) = serde_json::to_vec(value) else {
        return;
    };
    line.push(b'\n');
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path);
    match file {
        Ok(mut f) => {
            if let Err(e) = f.write_all(&line) {
                eprintln!("relay: write {}: {e}", path.display());
            }
        }
        Err(e) => eprintln!("relay: open {}: {e}", path.display()),
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct AuditRow {
    pub action: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
    /// `allowed`, `denied` or `error`.
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandboxed: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_passed: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

pub struct Audit {
    path: PathBuf,
    lock: Mutex<()>,
}

impl Audit {
    pub fn new(path: PathBuf) -> Self {
        Audit {
            path,
            lock: Mutex::new(()),
        }
    }

    pub fn record(&self, row: &AuditRow) {
        let mut v = serde_json::to_value(row).unwrap_or(Value::Null);
        if let Some(obj) = v.as_object_mut() {
            for s in obj.values_mut() {
                if let Value::String(text) = s {
                    *text = cap(text);
                }
            }
            obj.insert("ts".into(), now_ms().into());
        }
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        append_line(&self.path, &v);
    }

    pub fn path(&self) -> &PathBuf {
        &self.path
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Event {
    pub name: &'static str,
    /// `ok`, `denied` or `error` for launches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

pub struct Events {
    path: PathBuf,
    inner: Mutex<(u64, VecDeque<Value>)>,
    notify: Notify,
}

impl Events {
    pub fn new(path: PathBuf) -> Self {
        Events {
            path,
            inner: Mutex::new((0, VecDeque::new())),
            notify: Notify::new(),
        }
    }

    pub fn emit(&self, ev: &Event) {
        let mut v = serde_json::to_value(ev).unwrap_or(Value::Null);
        {
            let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            inner.0 += 1;
            if let Some(obj) = v.as_object_mut() {
                for s in obj.values_mut() {
                    if let Value::String(text) = s {
                        *text = cap(text);
                    }
                }
                obj.insert("seq".into(), inner.0.into());
                obj.insert("ts".into(), now_ms().into());
            }
            append_line(&self.path, &v);
            inner.1.push_back(v);
            if inner.1.len() > EVENTS_KEPT {
                inner.1.pop_front();
            }
        }
        self.notify.notify_waiters();
    }

    pub fn last_seq(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    fn after(&self, seq: u64) -> Vec<Value> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .1
            .iter()
            .filter(|v| v["seq"].as_u64().unwrap_or(0) > seq)
            .cloned()
            .collect()
    }

    /// Events with a sequence number above `seq`, waiting up to `wait` for one.
    pub async fn wait_after(&self, seq: u64, wait: Duration) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let found = self.after(seq);
            if !found.is_empty() {
                return found;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Vec::new();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_cuts_long_strings_on_a_char_boundary() {
        assert_eq!(cap("short"), "short");
        let long = "é".repeat(300);
        let c = cap(&long);
        assert!(c.len() <= STRING_CAP + "…".len());
        assert!(c.ends_with('…'));
    }

    #[test]
    fn audit_rows_match_the_frozen_fixture_shape() {
        let fixture = include_str!("testdata/audit-line.json");
        let v: Value = serde_json::from_str(fixture).unwrap();
        for key in ["ts", "action", "outcome"] {
            assert!(v.get(key).is_some(), "{key}");
        }
        let row = AuditRow {
            action: "session_launch",
            outcome: "error",
            code: Some("sandbox_unavailable".into()),
            ..Default::default()
        };
        let mine = serde_json::to_value(&row).unwrap();
        assert_eq!(mine["action"], v["action"]);
        assert_eq!(mine["outcome"], v["outcome"]);
        assert_eq!(mine["code"], v["code"]);
    }
}
