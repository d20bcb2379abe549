//! `fakeapi` for a test: the Anthropic API stand-in started on loopback with a script,
//! its port read from its first line, its record lines read back, stopped on drop
//! (its stdin closes, so it ends even when the test process dies).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::{bin, read_jsonl, wait, WAIT};

pub struct FakeApi {
    child: Child,
    stdin: Option<ChildStdin>,
    pub port: u16,
    pub script: PathBuf,
    pub record: PathBuf,
}

impl FakeApi {
    /// Starts `fakeapi` with `script`, its files in `dir`.
    pub fn start(dir: &Path, script: &Value) -> FakeApi {
        let script_path = dir.join("fakeapi-script.json");
        let record = dir.join("fakeapi-record.jsonl");
        std::fs::write(&script_path, serde_json::to_vec(script).unwrap()).unwrap();
        let mut child = Command::new(bin("fakeapi"))
            .arg("--script")
            .arg(&script_path)
            .arg("--record")
            .arg(&record)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start fakeapi");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(WAIT).expect("fakeapi printed no port");
        let port = line
            .trim()
            .parse()
            .expect("fakeapi's first line is its port");
        FakeApi {
            child,
            stdin,
            port,
            script: script_path,
            record,
        }
    }

    /// `http://127.0.0.1:PORT`, for `ANTHROPIC_BASE_URL`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Replaces the script (atomically); the next request starts it from its first turn.
    pub fn set_script(&self, script: &Value) {
        let tmp = self.script.with_extension("new");
        std::fs::write(&tmp, serde_json::to_vec(script).unwrap()).unwrap();
        std::fs::rename(&tmp, &self.script).unwrap();
    }

    /// Every record line so far.
    pub fn records(&self) -> Vec<Value> {
        read_jsonl(&self.record)
    }

    /// The record lines of `POST /v1/messages` requests.
    pub fn messages(&self) -> Vec<Value> {
        self.records()
            .into_iter()
            .filter(|r| {
                r["method"] == "POST"
                    && r["path"]
                        .as_str()
                        .is_some_and(|p| p == "/v1/messages" || p.starts_with("/v1/messages?"))
            })
            .collect()
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if wait::child_within(&mut self.child, Duration::from_secs(10)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
