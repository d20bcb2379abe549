//! `claude` sessions: Claude Code headless in stream-json mode over stdin/stdout pipes.
//! A turn writes one user line and reads stdout lines until the `result` line.

use std::io;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::Mutex;

/// A stdout line longer than this ends the turn with an error.
const LINE_MAX: usize = 8 * 1024 * 1024;

pub struct Provider {
    io: Mutex<TurnIo>,
}

struct TurnIo {
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    turns: u64,
}

pub struct Turn {
    pub text: String,
    pub is_error: bool,
}

#[derive(Debug)]
pub enum TurnError {
    /// The agent's stdout closed before a `result` line.
    Ended,
    Io(io::Error),
    Oversized,
}

impl std::fmt::Display for TurnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TurnError::Ended => write!(f, "the session ended before answering"),
            TurnError::Io(e) => write!(f, "session pipe: {e}"),
            TurnError::Oversized => {
                write!(f, "the session wrote a line larger than {LINE_MAX} bytes")
            }
        }
    }
}

impl Provider {
    pub fn new(stdin: ChildStdin, stdout: ChildStdout) -> Self {
        Provider {
            io: Mutex::new(TurnIo {
                stdin,
                stdout: BufReader::new(stdout),
                turns: 0,
            }),
        }
    }

    /// One turn; turns of one session run one at a time.
    pub async fn message(&self, text: &str) -> Result<Turn, TurnError> {
        let mut io = self.io.lock().await;
        let line = serde_json::json!({
            "type": "user",
            "message": {"role": "user", "content": text},
        });
        let mut bytes = serde_json::to_vec(&line).map_err(|e| TurnError::Io(e.into()))?;
        bytes.push(b'\n');
        io.stdin.write_all(&bytes).await.map_err(TurnError::Io)?;
        io.stdin.flush().await.map_err(TurnError::Io)?;
        io.turns += 1;
        loop {
            let mut buf = Vec::new();
            let n = (&mut io.stdout)
                .take(LINE_MAX as u64 + 1)
                .read_until(b'\n', &mut buf)
                .await
                .map_err(TurnError::Io)?;
            if n == 0 {
                return Err(TurnError::Ended);
            }
            if n > LINE_MAX {
                return Err(TurnError::Oversized);
            }
            let Ok(v) = serde_json::from_slice::<Value>(&buf) else {
                continue;
            };
            if v.get("type").and_then(Value::as_str) == Some("result") {
                let text = v
                    .get("result")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let is_error = v.get("is_error").and_then(Value::as_bool).unwrap_or(false);
                return Ok(Turn { text, is_error });
            }
        }
    }
}

/// Drains the agent's stderr into the session's disk log so a full pipe never stalls it.
pub async fn drain_stderr(mut stderr: ChildStderr, sink: impl Fn(&[u8])) {
    let mut buf = vec![0u8; 8192];
    loop {
        match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => sink(&buf[..n]),
        }
    }
}
