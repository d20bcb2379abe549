//! Joining this terminal to a running terminal session, for `relay terminal attach` and
//! `relay sandbox`: the upgrade (`GET /api/terminals/{id}/attach`), raw mode, window
//! size, the session's output through [`termout::Filter`] (the scrollback first, so the
//! screen is not blank), the exit frame, and the detach keys, which leave the session
//! running ([cli.md](../../docs/cli.md#relay-terminal-attach)).

use std::io::{IsTerminal, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nix::sys::signal::{SigSet, Signal};
use nix::sys::termios::{self, SetArg, Termios};
use serde_json::{json, Value};

use super::client::Client;
use super::resume_hint::ResumeHint;
use super::termout;
use crate::daemon::settings::{self, DetachKeys};
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

/// This terminal's size (of stdout), when it has one.
pub fn terminal_size() -> Option<(u16, u16)> {
    winsize()
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

/// Watches keystrokes for the detach keys. A key that could begin the sequence is held
/// until the next one decides (so a single Ctrl-\ reaches the session with the key
/// after it); the sequence may arrive split across reads. Pure: unit-tested below.
pub struct DetachMatcher {
    keys: Vec<u8>,
    held: Vec<u8>,
}

impl DetachMatcher {
    /// `keys` empty: detaching is off and every byte passes at once.
    pub fn new(keys: &[u8]) -> DetachMatcher {
        DetachMatcher {
            keys: keys.to_vec(),
            held: Vec::new(),
        }
    }

    /// Feeds what was read from the keyboard: what goes to the session now is appended
    /// to `out`; `true` once the whole sequence was typed (it is not sent, nor is
    /// anything typed after it in the same read).
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> bool {
        if self.keys.is_empty() {
            out.extend_from_slice(input);
            return false;
        }
        for &b in input {
            self.held.push(b);
            // Pass on held bytes from the front until what is left could still be the
            // start of the sequence (the empty rest always can).
            while !self.keys.starts_with(&self.held) {
                out.push(self.held.remove(0));
            }
            if self.held.len() == self.keys.len() {
                self.held.clear();
                return true;
            }
        }
        false
    }
}

/// The detach keys in force: the flag's, else `settings.json`'s `detach_keys`, else
/// the default. A settings file that does not read gives the default (the daemon
/// reports the file's problem); a bad flag is an error.
pub fn detach_keys(config: &Path, flag: Option<&str>) -> Result<DetachKeys, String> {
    if let Some(text) = flag {
        return DetachKeys::parse(text).map_err(|e| format!("--detach-keys: {e}"));
    }
    Ok(settings::load(&config.join(settings::FILE_NAME))
        .map(|l| l.settings.detach_keys)
        .unwrap_or_default())
}

/// How an attach ended.
pub enum End {
    /// The session ended: its exit frame's `{"exit_status", "signal"}`.
    Exited(Value),
    /// The stream ended without an exit frame: the terminal's entry as listed (or null).
    Gone(Value),
    /// The detach keys were typed; the session runs on.
    Detached,
    /// This process got SIGHUP, SIGTERM or SIGINT (the terminal went away, or it was
    /// told to stop).
    Signal(i32),
}

pub struct Attach<'a> {
    pub client: &'a Client,
    pub id: &'a str,
    pub keys: &'a DetachKeys,
    /// The session's output to stderr (`--json`: stdout is for the one line at the end).
    pub to_stderr: bool,
    /// `?lossless=true`: the host paces the terminal to this attach (`relay sandbox`;
    /// docs/routes.md#attaching-to-a-terminal).
    pub lossless: bool,
    /// Once the exit frame is here, ask the daemon to purge the terminal when the
    /// attach is over ([`attach::FORGET`]; `relay sandbox`).
    pub forget: bool,
    /// Take Claude Code's resume hint out of the output ([`ResumeHint`]; `relay
    /// sandbox`), and set this when one was.
    pub resume_hint: Option<&'a std::cell::Cell<bool>>,
    /// The run is a Claude Code terminal (`claude-code`): one whose resume hint was
    /// taken out keeps its conversation rather than being purged ([`Attach::keeps`]).
    pub claude_run: bool,
    /// When stdin is not a terminal and ends, the program reads end-of-file
    /// ([`attach::EOF`]; `relay sandbox`, whose run owns the terminal). An attach to a
    /// terminal someone else started leaves it be.
    pub end_input: bool,
}

/// How long output that could be Claude Code's resume hint is held for the rest of its
/// line before it goes out as it came.
const HINT_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// What terminal modes a session may have left on, turned off when this terminal leaves
/// it by detaching (or when relay goes away): attributes, the alternate screen, a
/// hidden cursor, mouse and focus reporting, bracketed paste. Re-attaching replays the
/// session's own sequences.
const LEAVE_SCREEN: &[u8] =
    b"\x1b[0m\x1b[?1049l\x1b[?25h\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?1004l\x1b[?2004l";

/// The cursor to the screen's last row, then a new line: below whatever the session drew.
const BELOW_THE_SCREEN: &[u8] = b"\x1b[999B\r\n";

impl Attach<'_> {
    /// Attaches and copies both ways until the session ends, the detach keys are typed,
    /// or a signal arrives. The terminal mode is restored on every way out.
    pub fn run(&self) -> Result<End, String> {
        let (mut stream, already) = upgrade(self.client, self.id, self.lossless)?;

        let signals = block_signals();
        let stdin_is_terminal = std::io::stdin().is_terminal();
        let mut raw = RawMode::enter();

        let writer = stream.try_clone().map_err(|e| format!("attach: {e}"))?;
        let link = Link {
            writer: Arc::new(Mutex::new(writer)),
            ended: Arc::default(),
        };
        if let Some(f) = resize_frame() {
            link.send(&f);
        }
        // Keys detach only when a person types them: piped input passes whole.
        let keys = if stdin_is_terminal {
            self.keys.bytes().to_vec()
        } else {
            Vec::new()
        };
        spawn_keyboard(link.clone(), keys, self.end_input && !stdin_is_terminal);
        spawn_signals(link.clone(), signals);

        let mut out: Box<dyn Write> = if self.to_stderr {
            Box::new(std::io::stderr())
        } else {
            Box::new(std::io::stdout())
        };
        let result = match self.copy_output(&mut stream, already, &link, &mut out) {
            Ok(r) => r,
            Err(e) => {
                raw.restore();
                return Err(e);
            }
        };
        let how = link.ended.lock().unwrap_or_else(|p| p.into_inner()).take();
        // Detached, or the stream cut (relay went away): the screen is left as the session
        // drew it, its modes off, and what relay says next goes below it on a line of its
        // own rather than over the session's prompt. (A terminal that went away gets
        // nothing.)
        // So too when the tool was killed (relay stopped it): it had no chance to turn
        // its modes off itself.
        let killed = result.as_ref().is_some_and(|r| !r["signal"].is_null());
        if (killed || result.is_none())
            && !matches!(how, Some(End::Signal(_)))
            && std::io::stdout().is_terminal()
        {
            let _ = out.write_all(LEAVE_SCREEN);
            let _ = out.write_all(BELOW_THE_SCREEN);
            let _ = out.flush();
        }
        raw.restore();
        if let Some(r) = result {
            return Ok(End::Exited(r));
        }
        if let Some(how) = how {
            return Ok(how);
        }
        self.gone()
    }

    /// Whether a run this attach would purge keeps its conversation instead: Claude Code
    /// said it has one (its resume hint, `dropped`), or relay ended it for a token change
    /// (docs/cli.md#relay-sandbox). The exit frame's `result` gets the reason relay
    /// recorded (`exit_reason`) and, when kept, `kept`.
    fn keeps(&self, result: &mut Option<Value>, dropped: bool) -> bool {
        // The exit frame comes once the end is recorded, reason and all.
        let reason = ended_because(self.client, self.id);
        let keep =
            (dropped && self.claude_run) || reason.as_deref().is_some_and(keeps_conversation);
        if let Some(Value::Object(m)) = result {
            if let Some(r) = reason {
                m.insert("exit_reason".into(), Value::String(r));
            }
            if keep {
                m.insert("kept".into(), Value::Bool(true));
            }
        }
        keep
    }

    /// Copies the session's output to `out` until its exit frame, whose contents it
    /// returns (the purge asked for first, with `forget`), or until the stream ends
    /// (`None`). What came with the answer's head (`already`) is the stream's start.
    fn copy_output(
        &self,
        stream: &mut UnixStream,
        already: Vec<u8>,
        link: &Link,
        out: &mut dyn Write,
    ) -> Result<Option<Value>, String> {
        let mut buf = already;
        let mut chunk = vec![0u8; 16 * 1024];
        // One filter for the whole stream, scrollback frame first: a sequence split
        // across frames is judged whole.
        let mut filter = termout::Filter::new();
        let mut hint = self.resume_hint.map(|_| ResumeHint::default());
        let mut shown = Vec::new();
        let mut passed = Vec::new();
        // The stream's reads wait at most HINT_WAIT while a possible hint is held.
        let mut timed = false;
        // What is held of a possible hint goes out when the stream ends, or when nothing
        // more came for HINT_WAIT.
        let flush = |hint: &mut Option<ResumeHint>, out: &mut dyn Write| {
            if let Some(h) = hint {
                let mut rest = Vec::new();
                h.flush(&mut rest);
                let _ = out.write_all(&rest);
                let _ = out.flush();
            }
        };
        // The frames already here are taken before each read.
        loop {
            let frames = attach::take_frames(&mut buf).map_err(|e| format!("attach: {e}"))?;
            for (kind, payload) in frames {
                match kind {
                    attach::OUTPUT => {
                        shown.clear();
                        filter.feed(&payload, &mut shown);
                        let shown = match &mut hint {
                            Some(h) => {
                                passed.clear();
                                h.feed(&shown, &mut passed);
                                &passed
                            }
                            None => &shown,
                        };
                        // A closed output is ignored: the session runs on until it ends.
                        let _ = out.write_all(shown);
                        let _ = out.flush();
                    }
                    attach::EXIT => {
                        flush(&mut hint, out);
                        let dropped = hint.as_ref().is_some_and(|h| h.dropped);
                        if let Some(cell) = self.resume_hint {
                            cell.set(dropped);
                        }
                        let mut result = serde_json::from_slice(&payload).ok();
                        let keep = self.forget && self.keeps(&mut result, dropped);
                        if self.forget && !keep && !link.send(&frame(attach::FORGET, &[])) {
                            // The stream was shut meanwhile (the detach keys or a signal
                            // at the very end): the purge is asked for on its own.
                            purge(self.client, self.id);
                        }
                        return Ok(result);
                    }
                    _ => {}
                }
            }
            let holding = hint.as_ref().is_some_and(ResumeHint::holding);
            if holding != timed {
                let _ = stream.set_read_timeout(holding.then_some(HINT_WAIT));
                timed = holding;
            }
            let n = match stream.read(&mut chunk) {
                Err(e)
                    if holding
                        && matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                {
                    flush(&mut hint, out);
                    continue;
                }
                Ok(0) | Err(_) => {
                    flush(&mut hint, out);
                    return Ok(None);
                }
                Ok(n) => n,
            };
            buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// The stream ended without an exit frame: the terminal's state, as listed.
    fn gone(&self) -> Result<End, String> {
        let a = self
            .client
            .call("GET", "/api/terminals")
            .map_err(|e| format!("the attach to {} was cut: {e}", self.id))?;
        let list: crate::wire::Terminals = a.typed("GET /api/terminals")?;
        Ok(End::Gone(
            list.terminals
                .iter()
                .find(|e| e.id == self.id)
                .and_then(|e| serde_json::to_value(e).ok())
                .unwrap_or(Value::Null),
        ))
    }
}

/// The attach's stream as the keyboard and signal threads and the output copy share it
/// for writing, and how the attach ended when one of the threads ended it.
#[derive(Clone)]
struct Link {
    writer: Arc<Mutex<UnixStream>>,
    ended: Arc<Mutex<Option<End>>>,
}

impl Link {
    /// Writes `bytes` (a frame) to the stream: false once it is shut.
    fn send(&self, bytes: &[u8]) -> bool {
        self.writer
            .lock()
            .map(|mut w| w.write_all(bytes).is_ok())
            .unwrap_or(false)
    }

    /// The first of the keyboard and the signal thread to end the attach says how,
    /// then shuts the stream, which ends the output copy's read.
    fn finish(&self, how: End) {
        let mut slot = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(how);
        }
        if let Ok(w) = self.writer.lock() {
            let _ = w.shutdown(Shutdown::Both);
        }
    }
}

/// Blocks, in this thread and those it starts, the signals one thread then takes:
/// window changes, and the terminal going away. A command that starts a session before
/// it attaches (`relay sandbox`) blocks them first, so a signal in between waits for
/// the attach's signal thread instead of ending this process by default.
pub(crate) fn block_signals() -> SigSet {
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
    set
}

/// The keyboard thread: what is typed goes to the session as input frames until stdin
/// ends (then, with `eof`, an end-of-input frame), the stream is shut or `keys` (empty:
/// none) are typed, which detaches.
fn spawn_keyboard(link: Link, keys: Vec<u8>, eof: bool) {
    std::thread::spawn(move || {
        let mut matcher = DetachMatcher::new(&keys);
        let mut buf = [0u8; 4096];
        let mut out = Vec::new();
        let mut stdin = std::io::stdin();
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => {
                    if eof {
                        link.send(&frame(attach::EOF, &[]));
                    }
                    return;
                }
                Ok(n) => {
                    out.clear();
                    let detach = matcher.feed(&buf[..n], &mut out);
                    if !out.is_empty() && !link.send(&frame(attach::INPUT, &out)) {
                        return;
                    }
                    if detach {
                        link.finish(End::Detached);
                        return;
                    }
                }
            }
        }
    });
}

/// The signal thread: a window change is sent as a resize frame; SIGHUP, SIGTERM or
/// SIGINT ends the attach.
fn spawn_signals(link: Link, set: SigSet) {
    std::thread::spawn(move || loop {
        match set.wait() {
            Ok(Signal::SIGWINCH) => {
                if let Some(f) = resize_frame() {
                    link.send(&f);
                }
            }
            Ok(sig) => {
                link.finish(End::Signal(sig as i32));
                return;
            }
            Err(_) => return,
        }
    });
}

/// Purges an ended terminal; a failure is said on stderr (the run itself went well).
/// Whether a run relay ended for `reason` keeps its conversation rather than going with
/// its attach: a token replaced, rotated or removed (`claude_token_*`) puts it to sleep.
pub(crate) fn keeps_conversation(reason: &str) -> bool {
    reason.starts_with("claude_token_")
}

/// The reason relay recorded for the end of the terminal `id`, as listed.
fn ended_because(client: &Client, id: &str) -> Option<String> {
    let (list, _) = client
        .call_as::<crate::wire::Terminals>("GET", "/api/terminals")
        .ok()?;
    list.terminals
        .into_iter()
        .find(|t| t.id == id)
        .and_then(|t| t.exit_reason)
}

pub(super) fn purge(client: &Client, id: &str) {
    match client.call("POST", &format!("/api/terminals/{id}/purge")) {
        Ok(a) if a.status == 200 => {}
        Ok(a) => eprintln!("relay: terminal {id} kept: {}", a.error_text()),
        Err(e) => eprintln!("relay: terminal {id} kept: {e}"),
    }
}

/// `GET /api/terminals/{id}/attach` upgraded: the stream and the bytes of it that came
/// with the answer's head. A refusal names its reason (`attach refused: <message>
/// (<code>)`), or its status line when the answer has none.
fn upgrade(client: &Client, id: &str, lossless: bool) -> Result<(UnixStream, Vec<u8>), String> {
    let query = if lossless { "?lossless=true" } else { "" };
    match client.upgrade(
        &format!("/api/terminals/{id}/attach{query}"),
        attach::ATTACH_PROTOCOL,
    )? {
        Ok(s) => Ok(s),
        Err(a) if a.is_refusal() => Err(format!("attach refused: {}", a.error_text())),
        Err(a) => {
            let reason = hyper::StatusCode::from_u16(a.status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("");
            Err(format!("attach refused: HTTP/1.1 {} {reason}", a.status))
        }
    }
}

/// The command that attaches to `id` again, as printed after a detach: with the config
/// dir when one was given on the command line.
pub fn reattach_command(id: &str, config_flag: Option<&PathBuf>) -> String {
    let mut cmd = format!("relay terminal attach --id {id}");
    if let Some(dir) = config_flag {
        let d = dir.display().to_string();
        let plain = d
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:@%".contains(&b));
        if plain {
            cmd.push_str(&format!(" --config-dir {d}"));
        } else {
            cmd.push_str(&format!(" --config-dir '{}'", d.replace('\'', r"'\''")));
        }
    }
    cmd
}

/// The line printed on stderr after a detach.
pub fn detached_note(id: &str, config_flag: Option<&PathBuf>) -> String {
    format!(
        "relay: detached from {id}, which keeps running; attach again with: {}\n",
        reattach_command(id, config_flag)
    )
}

pub(crate) fn exit_code(v: &Value) -> u8 {
    if let Some(code) = v["exit_status"].as_i64() {
        return (code & 0xff) as u8;
    }
    if let Some(sig) = v["signal"].as_i64().or_else(|| v["exit_signal"].as_i64()) {
        return (128 + sig).clamp(0, 255) as u8;
    }
    1
}

/// The `--json` line of an ended run: its exit frame (`exit_status`, `signal`) or, when
/// the run ended without one, its listed entry (`exit_status`, `exit_signal`).
pub(crate) fn exit_line(id: &str, v: &Value) -> Value {
    let signal = v
        .get("signal")
        .filter(|s| !s.is_null())
        .or_else(|| v.get("exit_signal"))
        .cloned()
        .unwrap_or(Value::Null);
    json!({"id": id, "exit_status": v["exit_status"], "signal": signal})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(m: &mut DetachMatcher, reads: &[&[u8]]) -> (Vec<u8>, bool) {
        let mut out = Vec::new();
        for r in reads {
            if m.feed(r, &mut out) {
                return (out, true);
            }
        }
        (out, false)
    }

    #[test]
    fn the_default_keys_detach_whole_or_split_and_a_single_one_passes() {
        let keys = DetachKeys::default_keys();
        let k = keys.bytes();
        assert_eq!(k, b"\x1c\x1c");
        // Whole, after other keys: what came before is sent.
        assert_eq!(
            run(&mut DetachMatcher::new(k), &[b"ls\r\x1c\x1c"]),
            (b"ls\r".to_vec(), true)
        );
        // Split across two reads.
        assert_eq!(
            run(&mut DetachMatcher::new(k), &[b"\x1c", b"\x1c"]),
            (Vec::new(), true)
        );
        // A single Ctrl-\ is held, then sent with the next key.
        let mut m = DetachMatcher::new(k);
        assert_eq!(run(&mut m, &[b"\x1c"]), (Vec::new(), false));
        assert_eq!(run(&mut m, &[b"x"]), (b"\x1cx".to_vec(), false));
        // Three in a row: the first two detach, nothing is sent.
        assert_eq!(
            run(&mut DetachMatcher::new(k), &[b"\x1c\x1c\x1c"]),
            (Vec::new(), true)
        );
        // Keys after the sequence in the same read are not sent.
        assert_eq!(
            run(&mut DetachMatcher::new(k), &[b"a\x1c", b"\x1cb"]),
            (b"a".to_vec(), true)
        );
    }

    #[test]
    fn an_overlapping_sequence_is_found_after_a_false_start() {
        let keys = DetachKeys::parse("ctrl-a,ctrl-a,d").unwrap();
        assert_eq!(keys.bytes(), b"\x01\x01d");
        // Three Ctrl-A then d: the first Ctrl-A goes to the session, the rest detach.
        assert_eq!(
            run(
                &mut DetachMatcher::new(keys.bytes()),
                &[b"\x01", b"\x01\x01", b"d"]
            ),
            (b"\x01".to_vec(), true)
        );
        assert_eq!(
            run(&mut DetachMatcher::new(keys.bytes()), &[b"\x01\x01x\x01d"]),
            (b"\x01\x01x\x01d".to_vec(), false)
        );
    }

    #[test]
    fn no_keys_pass_everything_at_once() {
        let keys = DetachKeys::parse("none").unwrap();
        assert_eq!(
            run(&mut DetachMatcher::new(keys.bytes()), &[b"\x1c", b"\x1c"]),
            (b"\x1c\x1c".to_vec(), false)
        );
    }

    #[test]
    fn the_reattach_command_names_a_config_dir_given_on_the_command_line() {
        assert_eq!(
            reattach_command("t-1", None),
            "relay terminal attach --id t-1"
        );
        assert_eq!(
            reattach_command("t-1", Some(&PathBuf::from("/c/relay"))),
            "relay terminal attach --id t-1 --config-dir /c/relay"
        );
        assert_eq!(
            reattach_command("t-1", Some(&PathBuf::from("/c/it's here"))),
            r"relay terminal attach --id t-1 --config-dir '/c/it'\''s here'"
        );
    }

    #[test]
    fn an_ended_run_says_its_signal_from_the_exit_frame_or_the_listed_entry() {
        let frame = json!({"exit_status": null, "signal": 9});
        assert_eq!(exit_line("t-1", &frame)["signal"], 9);
        assert_eq!(exit_code(&frame), 137);
        let entry = json!({"id": "t-1", "exit_signal": 15, "state": "exited"});
        assert_eq!(
            exit_line("t-1", &entry),
            json!({"id": "t-1", "exit_status": null, "signal": 15})
        );
        assert_eq!(exit_code(&entry), 143);
        let status = json!({"exit_status": 4});
        assert_eq!(
            exit_line("t-1", &status),
            json!({"id": "t-1", "exit_status": 4, "signal": null})
        );
    }
}
