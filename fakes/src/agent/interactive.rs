//! Interactive mode: `fakeagent ready`, then one answer per input line.
//!
//! Meant for a pty: the line `exit` (or EOF) ends the session with code 0, `!exit n` with
//! code n. Each answer is followed by a newline and flushed, so a test can wait for it.

use std::io::{self, BufRead, Write};

use super::reply::{self, Answer};
use super::stream_json::trim_newline;

/// The first line printed.
pub const READY: &str = "fakeagent ready";

/// Answers lines from `input` until EOF or `exit` (code 0), or `!exit n` (code n).
pub fn run<R: BufRead, W: Write>(mut input: R, out: &mut W) -> io::Result<i32> {
    writeln!(out, "{READY}")?;
    out.flush()?;
    let mut line = Vec::new();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            return Ok(0);
        }
        let text = String::from_utf8_lossy(trim_newline(&line)).into_owned();
        if text == "exit" {
            return Ok(0);
        }
        match reply::answer(&text) {
            Answer::Exit(code) => return Ok(code),
            Answer::Reply(reply) => {
                writeln!(out, "{reply}")?;
                out.flush()?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drive(input: &str) -> (i32, String) {
        let mut out = Vec::new();
        let code = run(input.as_bytes(), &mut out).unwrap();
        (code, String::from_utf8(out).unwrap())
    }

    #[test]
    fn answers_each_line_until_eof() {
        assert_eq!(
            drive("hi\r\n!sh echo x\n"),
            (0, "fakeagent ready\necho: hi\nexit: 0\nx\n\n".to_string())
        );
    }

    #[test]
    fn exit_line_ends_the_session() {
        assert_eq!(
            drive("a\nexit\nb\n"),
            (0, "fakeagent ready\necho: a\n".to_string())
        );
        assert_eq!(drive("!exit 3\nb\n"), (3, "fakeagent ready\n".to_string()));
    }
}
