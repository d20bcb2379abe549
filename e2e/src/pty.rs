//! A real pty for tests that drive a terminal program as a person would: the program
//! gets the slave as its controlling terminal, the test writes keystrokes to the master
//! and waits on what the program printed (a condition variable, no sleeps).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use crate::WAIT;

pub struct Pty {
    master: std::fs::File,
    seen: Arc<(Mutex<Vec<u8>>, Condvar)>,
    pub child: Child,
}

impl Pty {
    /// Runs `cmd` on a new pty of `cols`×`rows` as its controlling terminal.
    pub fn spawn(mut cmd: Command, cols: u16, rows: u16) -> Pty {
        let (mut m, mut s) = (0, 0);
        let mut ws = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // Safety: openpty writes two descriptors; the name buffer and the termios are
        // unused (NULL). Linux declares the last two pointers const, macOS mutable: a
        // mutable pointer fits both.
        let rc = unsafe {
            libc::openpty(
                &mut m,
                &mut s,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &raw mut ws,
            )
        };
        assert_eq!(rc, 0, "openpty");
        // Safety: both descriptors were just created and are owned here.
        let (master, slave) = unsafe { (OwnedFd::from_raw_fd(m), OwnedFd::from_raw_fd(s)) };
        // Safety: FD_CLOEXEC on our own master so the child does not inherit it; the
        // slave starts in raw mode, as the program under test puts it anyway, so that
        // keystrokes sent early are not echoed or rewritten before it runs.
        unsafe {
            libc::fcntl(master.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC);
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(slave.as_raw_fd(), &mut t) == 0 {
                libc::cfmakeraw(&mut t);
                libc::tcsetattr(slave.as_raw_fd(), libc::TCSANOW, &t);
            }
        }
        cmd.stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        // Safety: setsid and TIOCSCTTY between fork and exec, on the child's own fd 0.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("spawn on pty");
        let master = std::fs::File::from(master);
        let seen: Arc<(Mutex<Vec<u8>>, Condvar)> = Arc::default();
        let mut reader = master.try_clone().unwrap();
        let s2 = seen.clone();
        std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 4096];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => {
                        s2.1.notify_all();
                        return;
                    }
                    Ok(n) => {
                        s2.0.lock().unwrap().extend_from_slice(&buf[..n]);
                        s2.1.notify_all();
                    }
                }
            }
        });
        Pty {
            master,
            seen,
            child,
        }
    }

    pub fn write(&mut self, bytes: &[u8]) {
        use std::io::Write;
        self.master.write_all(bytes).unwrap();
    }

    /// Everything the program printed so far.
    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.seen.0.lock().unwrap()).into_owned()
    }

    /// Waits until the output holds `text`.
    pub fn wait_for(&self, text: &str) {
        self.wait_for_within(text, WAIT)
    }

    /// Waits until the output holds `text`, at most `limit`.
    pub fn wait_for_within(&self, text: &str, limit: std::time::Duration) {
        assert!(
            self.shows_within(text, limit),
            "{text:?} never appeared; screen:\n{}",
            self.screen()
        );
    }

    /// Whether the output holds `text` within `limit` (waited on, not polled).
    pub fn shows_within(&self, text: &str, limit: std::time::Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut seen = self.seen.0.lock().unwrap();
        loop {
            if String::from_utf8_lossy(&seen).contains(text) {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            seen = self.seen.1.wait_timeout(seen, left).unwrap().0;
        }
    }

    /// Sets the pty's window size, as a person resizing the window does: the program
    /// in the foreground gets SIGWINCH.
    pub fn resize(&self, cols: u16, rows: u16) {
        let ws = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // Safety: TIOCSWINSZ reads a winsize we own for the duration of the call.
        let rc = unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &ws) };
        assert_eq!(rc, 0, "TIOCSWINSZ");
    }
}
