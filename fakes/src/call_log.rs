//! Append-only JSON-lines call logs under `$TMPDIR`, and the ordered JSON objects they
//! hold.
//!
//! Several fakes may start at once against one log (parallel sessions of one test), so a
//! record is one `write(2)` of one complete line on an `O_APPEND` descriptor: lines never
//! interleave. A log that does not exist yet is created with mode 0600 at open time.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

/// `$TMPDIR`, or `/tmp` when it is unset or empty.
pub fn tmp_dir() -> PathBuf {
    match std::env::var_os("TMPDIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from("/tmp"),
    }
}

/// Appends `line` and a newline to the log at `path` in a single write.
pub fn append_line(path: &Path, line: &str) -> io::Result<()> {
    debug_assert!(!line.contains('\n'), "a call-log record is one line");
    let mut record = Vec::with_capacity(line.len() + 1);
    record.extend_from_slice(line.as_bytes());
    record.push(b'\n');
    let mut file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)?;
    loop {
        match file.write(&record) {
            Ok(n) if n == record.len() => return Ok(()),
            Ok(n) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!("short write: {n} of {} bytes", record.len()),
                ))
            }
            // Interrupted before anything was written: the line is still whole.
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        }
    }
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        // Writing to a String cannot fail.
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// A JSON object whose keys keep the order they were added in.
///
/// `serde_json` sorts object keys (the workspace does not enable `preserve_order`, and
/// enabling it here would change every crate's output), but a log read by a person is
/// easier with `type` or `pid` first.
#[derive(Debug, Default)]
pub struct JsonLine {
    text: String,
}

impl JsonLine {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `key: value`.
    pub fn field(mut self, key: &str, value: impl Into<Value>) -> Self {
        let value: Value = value.into();
        self.push_key(key);
        self.text.push_str(&value.to_string());
        self
    }

    /// Adds `key: object`, keeping the nested object's key order.
    pub fn object(mut self, key: &str, object: JsonLine) -> Self {
        self.push_key(key);
        self.text.push_str(&object.finish());
        self
    }

    /// Adds `key: [objects…]`, keeping each object's key order.
    pub fn objects(mut self, key: &str, objects: Vec<JsonLine>) -> Self {
        self.push_key(key);
        self.text.push('[');
        for (i, object) in objects.into_iter().enumerate() {
            if i > 0 {
                self.text.push(',');
            }
            self.text.push_str(&object.finish());
        }
        self.text.push(']');
        self
    }

    /// The object as one line of JSON.
    pub fn finish(self) -> String {
        format!("{{{}}}", self.text)
    }

    fn push_key(&mut self, key: &str) {
        if !self.text.is_empty() {
            self.text.push(',');
        }
        self.text.push_str(&Value::from(key).to_string());
        self.text.push(':');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_line_keeps_key_order_and_escapes() {
        let line = JsonLine::new()
            .field("type", "result")
            .field("a\"b", 1)
            .object("message", JsonLine::new().field("role", "x\ny"))
            .objects("content", vec![JsonLine::new().field("k", true)])
            .finish();
        assert_eq!(
            line,
            r#"{"type":"result","a\"b":1,"message":{"role":"x\ny"},"content":[{"k":true}]}"#
        );
        let parsed: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(parsed["message"]["role"], "x\ny");
    }

    #[test]
    fn sha256_hex_matches_known_digest() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn append_line_creates_0600_and_appends_whole_lines() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("relay-fakes-calllog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log.jsonl");
        let _ = std::fs::remove_file(&path);
        append_line(&path, "{\"n\":1}").unwrap();
        append_line(&path, "{\"n\":2}").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"n\":1}\n{\"n\":2}\n"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
