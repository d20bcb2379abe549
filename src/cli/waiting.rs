//! While `relay session message` waits for its turn: what Ctrl-C does, and a one-line
//! status on a terminal (docs/cli.md#ctrl-c-and-the-status-line).
//!
//! - Ctrl-C on a terminal (stdin and stderr both one) asks: `[y]` interrupts the turn
//!   (`POST /api/sessions/{id}/interrupt`), `[d]` detaches and lets it finish; a second
//!   Ctrl-C interrupts. Without a terminal (a script) Ctrl-C interrupts at once: the
//!   script asked to stop, and a turn left running would hold the session. Once the
//!   interrupt is sent, one more Ctrl-C leaves at once (exit 130).
//! - The status line (stderr a terminal, no `--stream`, no `--json`):
//!   `relay: s-… working… 12s, 3 tool calls`, redrawn in place with `\r` each second
//!   and at each tool call, cleared before the reply prints.
//!
//! SIGINT is taken by a handler that writes one byte to a pipe, not by blocking it: the
//! client's runtime threads start before this, and a signal blocked in one thread only
//! would still end the process through another.

use std::io::{IsTerminal, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::client::Client;

/// The write end of the SIGINT pipe (-1: none).
static SIGINT_PIPE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_sigint(_: libc::c_int) {
    let fd = SIGINT_PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        // Safety: write(2) is async-signal-safe; one byte from a static buffer.
        unsafe {
            libc::write(fd, b"i".as_ptr().cast(), 1);
        }
    }
}

#[derive(Default)]
struct State {
    started: Option<Instant>,
    tools: u32,
    /// The status line is on the screen.
    drawn: bool,
    done: bool,
    asking: bool,
    interrupt_sent: bool,
    /// The terminal's settings before a key was asked for.
    termios: Option<nix::sys::termios::Termios>,
}

struct Shared {
    id: String,
    config: PathBuf,
    progress: bool,
    tty: bool,
    state: Mutex<State>,
    tick: Condvar,
}

pub struct Waiting(Arc<Shared>);

impl Waiting {
    /// Takes Ctrl-C for the turn of `id`; `progress` asks for the status line (given
    /// only when stderr is a terminal).
    pub fn start(c: &Client, id: &str, progress: bool) -> Waiting {
        let shared = Arc::new(Shared {
            id: id.to_string(),
            config: c.socket.parent().map(PathBuf::from).unwrap_or_default(),
            progress,
            tty: std::io::stdin().is_terminal() && std::io::stderr().is_terminal(),
            state: Mutex::new(State {
                started: Some(Instant::now()),
                ..Default::default()
            }),
            tick: Condvar::new(),
        });
        if let Ok((r, w)) = nix::unistd::pipe() {
            SIGINT_PIPE.store(w.as_raw_fd(), Ordering::Relaxed);
            std::mem::forget(w);
            let action = nix::sys::signal::SigAction::new(
                nix::sys::signal::SigHandler::Handler(on_sigint),
                nix::sys::signal::SaFlags::SA_RESTART,
                nix::sys::signal::SigSet::empty(),
            );
            // Safety: the handler only writes to a pipe (async-signal-safe).
            let _ = unsafe { nix::sys::signal::sigaction(nix::sys::signal::SIGINT, &action) };
            let s = shared.clone();
            std::thread::spawn(move || signals(s, r));
        }
        if progress {
            let s = shared.clone();
            std::thread::spawn(move || ticker(s));
        }
        Waiting(shared)
    }

    /// A tool call was seen.
    pub fn tool(&self) {
        let mut st = self.0.lock();
        st.tools += 1;
        self.0.draw(&mut st);
    }

    /// The turn is over: the status line is cleared, the terminal as it was; whether a
    /// Ctrl-C interrupted the turn.
    pub fn finish(&self) -> bool {
        let mut st = self.0.lock();
        st.done = true;
        if std::mem::take(&mut st.asking) {
            // The turn ended while the question was open: it goes unanswered.
            eprintln!();
        }
        self.0.clear(&mut st);
        restore(&mut st);
        self.0.tick.notify_all();
        st.interrupt_sent
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn draw(&self, st: &mut State) {
        if !self.progress || st.done || st.asking {
            return;
        }
        let secs = st.started.map_or(0, |s| s.elapsed().as_secs());
        let line = status_line(&self.id, secs, st.tools);
        eprint!("\r\x1b[K{line}");
        st.drawn = true;
    }

    fn clear(&self, st: &mut State) {
        if std::mem::take(&mut st.drawn) {
            eprint!("\r\x1b[K");
        }
    }

    /// Asks relay to interrupt the turn.
    fn interrupt(&self, st: &mut State) {
        st.interrupt_sent = true;
        st.asking = false;
        restore(st);
        self.clear(st);
        eprintln!("relay: interrupting the turn of {}…", self.id);
        let c = Client::new(&self.config);
        match c.call("POST", &format!("/api/sessions/{}/interrupt", self.id)) {
            Ok(a) if a.status == 200 => {}
            Ok(a) => eprintln!("relay: {}", a.error_text()),
            Err(e) => eprintln!("relay: {e}"),
        }
    }
}

/// `relay: s-… working… 12s, 3 tool calls`.
pub fn status_line(id: &str, secs: u64, tools: u32) -> String {
    let calls = crate::daemon::turns::tool_calls(tools);
    format!("relay: {id} working… {secs}s, {calls}")
}

fn restore(st: &mut State) {
    if let Some(t) = st.termios.take() {
        let _ =
            nix::sys::termios::tcsetattr(std::io::stdin(), nix::sys::termios::SetArg::TCSANOW, &t);
    }
}

/// Redraws the status line each second until the turn is over.
fn ticker(s: Arc<Shared>) {
    let mut st = s.lock();
    while !st.done {
        s.draw(&mut st);
        st = s
            .tick
            .wait_timeout(st, Duration::from_secs(1))
            .map(|(g, _)| g)
            .unwrap_or_else(|p| p.into_inner().0);
    }
}

/// Each Ctrl-C: ask (a terminal, first time), else interrupt; once sent, leave.
fn signals(s: Arc<Shared>, r: OwnedFd) {
    let mut pipe = std::fs::File::from(r);
    let mut b = [0u8; 1];
    while matches!(pipe.read(&mut b), Ok(1)) {
        let mut st = s.lock();
        if st.interrupt_sent || st.done {
            restore(&mut st);
            drop(st);
            eprintln!();
            std::process::exit(130);
        }
        if s.tty && !st.asking {
            st.asking = true;
            s.clear(&mut st);
            eprint!(
                "relay: interrupt this turn? [y] interrupt, [d] detach and let it finish \
                 (Ctrl-C again: interrupt) "
            );
            let _ = std::io::stderr().flush();
            st.termios = one_key_mode();
            let s2 = s.clone();
            std::thread::spawn(move || answer(s2));
            continue;
        }
        s.interrupt(&mut st);
    }
}

/// The terminal set to give each key as it is typed, without echo (Ctrl-C still a
/// signal); its settings before.
fn one_key_mode() -> Option<nix::sys::termios::Termios> {
    use nix::sys::termios::{tcgetattr, tcsetattr, LocalFlags, SetArg};
    let before = tcgetattr(std::io::stdin()).ok()?;
    let mut t = before.clone();
    t.local_flags.remove(LocalFlags::ICANON | LocalFlags::ECHO);
    tcsetattr(std::io::stdin(), SetArg::TCSANOW, &t).ok()?;
    Some(before)
}

/// The key typed at the question: `d` detaches (exit 0, the turn goes on), anything
/// else interrupts.
fn answer(s: Arc<Shared>) {
    let mut b = [0u8; 1];
    // Safety: fd 0 is this process's stdin, borrowed for one read and not closed.
    let mut stdin = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(0) });
    let got = stdin.read(&mut b);
    let mut st = s.lock();
    if !st.asking || st.done {
        return;
    }
    eprintln!();
    if matches!(got, Ok(1)) && b[0].eq_ignore_ascii_case(&b'd') {
        restore(&mut st);
        eprintln!(
            "relay: detached; {id} goes on with this turn, and relay session log --id {id} \
             shows its reply once it ends",
            id = s.id
        );
        std::process::exit(0);
    }
    s.interrupt(&mut st);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_counts_seconds_and_tool_calls() {
        assert_eq!(
            status_line("s-1", 12, 3),
            "relay: s-1 working… 12s, 3 tool calls"
        );
        assert_eq!(
            status_line("s-1", 0, 1),
            "relay: s-1 working… 0s, 1 tool call"
        );
    }
}
