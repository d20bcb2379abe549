//! What a turn answers, the same in both modes.
//!
//! - `!sh <command>`: runs `/bin/sh -c <command>` (stdin null, stdout and stderr into one
//!   pipe, at most [`MAX_SHELL_OUTPUT`] bytes kept) and answers `exit: <code>\n<output>`,
//!   or `exit: signal <n>\n<output>`. The shell inherits this process's descriptors as
//!   std's `Command` leaves them, so a test can probe from inside the sandbox what the
//!   agent was given (fd 5 included).
//! - `!exit <n>`: the process exits with code n at once, answering nothing.
//! - anything else: `echo: <text>`.

use std::io::{self, Read};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

/// Most bytes of a shell command's output kept in the answer; the rest is read and
/// dropped so the command is not stopped by a full pipe and its exit code stays its own.
pub const MAX_SHELL_OUTPUT: usize = 64 * 1024;

/// What a turn's text asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Turn<'a> {
    Shell(&'a str),
    Exit(i32),
    Echo(&'a str),
}

/// What to do after a turn.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    Reply(String),
    Exit(i32),
}

/// Classifies a turn's text.
pub fn classify(text: &str) -> Turn<'_> {
    if let Some(command) = text.strip_prefix("!sh ") {
        return Turn::Shell(command);
    }
    if let Some(code) = text
        .strip_prefix("!exit ")
        .and_then(|n| n.trim().parse::<i32>().ok())
    {
        return Turn::Exit(code);
    }
    Turn::Echo(text)
}

/// Answers a turn, running the shell command when there is one.
pub fn answer(text: &str) -> Answer {
    match classify(text) {
        Turn::Shell(command) => Answer::Reply(run_shell(command)),
        Turn::Exit(code) => Answer::Exit(code),
        Turn::Echo(text) => Answer::Reply(format!("echo: {text}")),
    }
}

/// Runs `/bin/sh -c command` and formats `exit: <code>\n<output>`.
pub fn run_shell(command: &str) -> String {
    match shell(command) {
        Ok((status, output)) => format!("exit: {status}\n{output}"),
        Err(err) => format!("exit: spawn error\n/bin/sh: {err}"),
    }
}

fn shell(command: &str) -> io::Result<(String, String)> {
    let (mut reader, writer) = io::pipe()?;
    let mut child = {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(command)
            .stdin(Stdio::null())
            .stdout(writer.try_clone()?)
            .stderr(writer);
        // The Command holds the write ends; dropping it at the end of this block leaves
        // the child as the only writer, so the read below ends when the child is done.
        cmd.spawn()?
    };
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(err);
            }
        };
        let room = MAX_SHELL_OUTPUT - kept.len();
        kept.extend_from_slice(&buf[..n.min(room)]);
    }
    let status = child.wait()?;
    let status = match (status.code(), status.signal()) {
        (Some(code), _) => code.to_string(),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => "unknown".to_string(),
    };
    Ok((status, String::from_utf8_lossy(&kept).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_turns() {
        assert_eq!(classify("!sh echo hi"), Turn::Shell("echo hi"));
        assert_eq!(classify("!exit 3"), Turn::Exit(3));
        assert_eq!(classify("!exit  7 "), Turn::Exit(7));
        assert_eq!(classify("!exit x"), Turn::Echo("!exit x"));
        assert_eq!(classify("!sh"), Turn::Echo("!sh"));
        assert_eq!(classify("hello"), Turn::Echo("hello"));
    }

    #[test]
    fn echo_answer() {
        assert_eq!(answer("hi there"), Answer::Reply("echo: hi there".into()));
        assert_eq!(answer("!exit 4"), Answer::Exit(4));
    }

    #[test]
    fn shell_answer_has_code_and_combined_output() {
        assert_eq!(
            run_shell("echo out; echo err >&2; exit 3"),
            "exit: 3\nout\nerr\n"
        );
    }

    #[test]
    fn shell_answer_names_the_signal() {
        assert_eq!(run_shell("kill -9 $$"), "exit: signal 9\n");
    }

    #[test]
    fn shell_stdin_is_null() {
        assert_eq!(run_shell("cat; echo done"), "exit: 0\ndone\n");
    }

    #[test]
    fn shell_output_is_capped_but_the_command_finishes() {
        let answer = run_shell("head -c 200000 /dev/zero | tr '\\0' a; exit 5");
        let (status, output) = answer.split_once('\n').unwrap();
        assert_eq!(status, "exit: 5");
        assert_eq!(output.len(), MAX_SHELL_OUTPUT);
    }
}
