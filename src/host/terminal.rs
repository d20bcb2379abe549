//! `pty` sessions: the pty pair, the reader that feeds the scrollback ring and the disk
//! log, input and resize.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::body::Bytes;
use nix::sys::termios;
use tokio::io::unix::AsyncFd;
use tokio::sync::{broadcast, mpsc, Notify};

use super::redact::Redactor;
use super::termlog::{DiskLog, Ring, SCROLLBACK_BYTES};
use crate::protocol::PtySize;

fn set_flag(fd: &OwnedFd, cloexec: bool, nonblock: bool) -> io::Result<()> {
    // Safety: fcntl on a descriptor we own; no memory is passed.
    unsafe {
        if cloexec && libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) < 0 {
            return Err(io::Error::last_os_error());
        }
        if nonblock {
            let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            if fl < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

fn winsize(size: PtySize) -> nix::pty::Winsize {
    nix::pty::Winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

/// How long input waits when the pty took none of it (its program is not reading)
/// before it is offered again.
const INPUT_FULL_WAIT: Duration = Duration::from_millis(20);

/// Whether every holder of the pty's slave has closed it (`POLLHUP` on the master).
fn hung_up(master: &OwnedFd) -> bool {
    let mut fds = libc::pollfd {
        fd: master.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // Safety: one pollfd we own, for the duration of the call; no wait.
    let rc = unsafe { libc::poll(&mut fds, 1, 0) };
    rc > 0 && fds.revents & libc::POLLHUP != 0
}

/// Opens a pty pair of the given size; both ends close-on-exec, the master non-blocking.
pub fn open_pty(size: PtySize) -> io::Result<(OwnedFd, OwnedFd)> {
    let ws = winsize(size);
    // openpty has no close-on-exec form on either platform: no launch forks before both
    // ends are marked (src/cloexec.rs).
    let _g = crate::cloexec::lock();
    let pair = nix::pty::openpty(Some(&ws), None)?;
    set_flag(&pair.master, true, true)?;
    set_flag(&pair.slave, true, false)?;
    Ok((pair.master, pair.slave))
}

/// How long a launch that asked to hold its output (`hold_output`, what `relay sandbox`
/// sends) waits for its first attach before the pump reads anyway.
pub const HOLD_MAX: Duration = Duration::from_secs(10);

/// Chunks a lossless attach may have queued before the pump waits for it: 64 reads of
/// at most 16 KiB.
const FOLLOW_QUEUE: usize = 64;

/// The windows attached to a terminal that have said their size, the most recent last.
/// The terminal has one size: that of the window that said its size last among those
/// still attached. When that window goes, the terminal takes the size of the one that
/// said its size before it and is still there; when the last goes, the size stays
/// (docs/session-host.md#attach). Pure: unit-tested below.
#[derive(Default)]
pub struct Windows {
    opened: u64,
    said: Vec<(u64, PtySize)>,
}

impl Windows {
    /// A new attach: its window's number.
    pub fn open(&mut self) -> u64 {
        self.opened += 1;
        self.opened
    }

    /// Window `w` says its size (at attach, at each change): the terminal takes it.
    pub fn said(&mut self, w: u64, size: PtySize) -> PtySize {
        self.said.retain(|(id, _)| *id != w);
        self.said.push((w, size));
        size
    }

    /// Window `w` has gone: the size the terminal takes now, when it changes.
    pub fn gone(&mut self, w: u64) -> Option<PtySize> {
        let before = self.said.last().map(|(_, s)| *s);
        self.said.retain(|(id, _)| *id != w);
        let now = self.said.last().map(|(_, s)| *s)?;
        (before != Some(now)).then_some(now)
    }
}

/// One attach's window on a terminal: its size frames go through it, and when it is
/// dropped (the attach has ended: the client detached or went away) the terminal takes
/// the size of the windows that remain ([`Windows`]).
pub struct Window {
    term: Arc<Terminal>,
    id: u64,
}

impl Window {
    pub fn open(term: Arc<Terminal>) -> Window {
        let id = term.windows().open();
        Window { term, id }
    }

    /// This window's size; an ended terminal has none to set.
    pub fn resize(&self, size: PtySize) {
        // The lock is held over the ioctl, so two windows resizing at once leave the
        // terminal at the size the table says.
        let mut windows = self.term.windows();
        let _ = self.term.resize(windows.said(self.id, size));
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        let mut windows = self.term.windows();
        if let Some(size) = windows.gone(self.id) {
            let _ = self.term.resize(size);
        }
    }
}

/// What an attach gets after its snapshot.
pub enum Follow {
    /// Every chunk, the pump waiting while this queue is full; `None` from it once the
    /// pump has read everything (docs/session-host.md#attach).
    Lossless(mpsc::Receiver<Bytes>),
    /// The live feed: a receiver more than 1024 chunks behind loses the oldest.
    Lossy(broadcast::Receiver<Bytes>),
}

/// The ring and the lossless attaches' queues change together under one lock, so an
/// attach sees every byte exactly once: the snapshot, then what follows it.
struct Feed {
    ring: Ring,
    followers: Vec<mpsc::Sender<Bytes>>,
    /// The pump has read everything: a new lossless attach gets a closed queue.
    done: bool,
}

pub struct Terminal {
    /// The pty master, until the terminal has ended and its output is drained: then
    /// [`Terminal::release`] closes it (an ended terminal keeps only its ring and its
    /// status, docs/session-host.md#attach).
    master: Mutex<Option<Arc<AsyncFd<OwnedFd>>>>,
    feed: Mutex<Feed>,
    /// Sent under the feed's lock too, for the same reason.
    live: broadcast::Sender<Bytes>,
    pub log: Arc<Mutex<DiskLog>>,
    /// Every byte read from the master passes through it before the ring, the live
    /// feed and the log see it (src/host/redact.rs).
    redactor: Mutex<Redactor>,
    /// The pump waits for the first attach (at most [`HOLD_MAX`]) before it reads.
    hold: bool,
    attached: Notify,
    /// The attached windows' sizes, for the terminal's one size.
    windows: Mutex<Windows>,
}

impl Terminal {
    pub fn new(
        master: OwnedFd,
        log: Arc<Mutex<DiskLog>>,
        redactor: Redactor,
        hold: bool,
    ) -> io::Result<Self> {
        // Safety: the OwnedFd is moved into the AsyncFd and stays open, on the same file
        // description, for the AsyncFd's whole life.
        let master = unsafe { AsyncFd::register(master) }.map_err(|e| e.into_parts().1)?;
        Ok(Terminal {
            master: Mutex::new(Some(Arc::new(master))),
            feed: Mutex::new(Feed {
                ring: Ring::new(SCROLLBACK_BYTES),
                followers: Vec::new(),
                done: false,
            }),
            live: broadcast::channel(1024).0,
            log,
            redactor: Mutex::new(redactor),
            hold,
            attached: Notify::new(),
            windows: Mutex::default(),
        })
    }

    fn windows(&self) -> std::sync::MutexGuard<'_, Windows> {
        self.windows.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn feed(&self) -> std::sync::MutexGuard<'_, Feed> {
        self.feed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the master until the last slave holder is gone (EIO) or an error, then
    /// passes on what the redactor held back. A held terminal first waits for its
    /// first attach: until then its target blocks once the pty's buffer is full, so
    /// `relay sandbox` gets all of a fast tool's output, not only the ring's last part.
    pub async fn pump(&self) {
        if self.hold {
            let _ = tokio::time::timeout(HOLD_MAX, self.attached.notified()).await;
        }
        self.read_all().await;
        let rest = self
            .redactor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .finish();
        self.output(&rest).await;
        let mut feed = self.feed();
        feed.done = true;
        feed.followers.clear();
    }

    /// Output that has been through the redactor: to the ring, the live feed, the log,
    /// then every lossless attach's queue, waiting while one is full (the target waits
    /// with it, as on a terminal that is not read).
    async fn output(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let bytes = Bytes::copy_from_slice(bytes);
        let followers = {
            let mut feed = self.feed();
            feed.ring.push(&bytes);
            // No subscriber is fine: nobody is attached.
            let _ = self.live.send(bytes.clone());
            feed.followers.retain(|f| !f.is_closed());
            feed.followers.clone()
        };
        // A full disk must not stop the session; the ring still has it.
        let _ = self
            .log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .append(&bytes);
        for f in &followers {
            // A closed queue is an attach that went away.
            let _ = f.send(bytes.clone()).await;
        }
    }

    /// The master while the terminal holds it.
    fn master(&self) -> io::Result<Arc<AsyncFd<OwnedFd>>> {
        self.master
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "the terminal has ended"))
    }

    /// Once the session has ended and the pump has read everything: the master and the
    /// disk log's descriptors are closed and the ring gives back what it reserved
    /// beyond its contents. The ring and the log files stay for replay and
    /// `relay terminal log` until `DELETE`.
    pub fn release(&self) {
        drop(self.master.lock().unwrap_or_else(|p| p.into_inner()).take());
        self.log.lock().unwrap_or_else(|p| p.into_inner()).close();
        self.feed().ring.shrink();
    }

    async fn read_all(&self) {
        let Ok(master) = self.master() else {
            return;
        };
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let mut guard = match master.readable().await {
                Ok(g) => g,
                Err(_) => return,
            };
            let res = guard.try_io(|inner| {
                // Safety: reading into a buffer we own, of its length.
                let n = unsafe {
                    libc::read(
                        inner.get_ref().as_raw_fd(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                    )
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match res {
                Ok(Ok(0)) => return,
                Ok(Ok(n)) => {
                    let clean = self
                        .redactor
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .feed(&buf[..n]);
                    self.output(&clean).await;
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(_)) => return, // EIO: every slave holder is gone
                Err(_would_block) => continue,
            }
        }
    }

    pub fn scrollback(&self) -> Vec<u8> {
        self.feed().ring.contents()
    }

    /// The scrollback so far and what follows it, lossless or not. The first attach
    /// ends a held terminal's wait.
    pub fn subscribe(&self, lossless: bool) -> (Vec<u8>, Follow) {
        let (snapshot, follow) = {
            let mut feed = self.feed();
            let follow = if lossless {
                let (tx, rx) = mpsc::channel(FOLLOW_QUEUE);
                if !feed.done {
                    feed.followers.push(tx);
                }
                Follow::Lossless(rx)
            } else {
                Follow::Lossy(self.live.subscribe())
            };
            (feed.ring.contents(), follow)
        };
        self.attached.notify_one();
        (snapshot, follow)
    }

    pub fn log_bytes(&self) -> io::Result<Vec<u8>> {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .read_all()
    }

    /// The input has ended: the program reads end-of-file, as from a terminal where
    /// Ctrl-D is typed. The pty's end-of-file character is written now (twice in line
    /// mode: the first ends a last line that has no newline), and again each
    /// time the terminal turns from line mode to raw or back (checked at each output):
    /// a shell's line editor turns raw before it prompts, and a Ctrl-D queued while the
    /// pty was still in line mode reaches it as a NUL, not as an end. Runs until the
    /// terminal has ended (the caller also stops it at the session's exit).
    pub async fn end_input(&self) {
        let mut live = self.live.subscribe();
        let mut sent_in: Option<bool> = None;
        loop {
            let Ok(master) = self.master() else {
                return;
            };
            let Ok(mode) = termios::tcgetattr(master.get_ref()) else {
                return;
            };
            let line_mode = mode.local_flags.contains(termios::LocalFlags::ICANON);
            if sent_in != Some(line_mode) {
                let eof = match mode.control_chars[termios::SpecialCharacterIndices::VEOF as usize]
                {
                    0 => 0x04, // disabled: Ctrl-D, what a raw-mode line editor takes as the end
                    c => c,
                };
                // In line mode twice: the first ends a last line that has no newline.
                let ends: &[u8] = if line_mode { &[eof, eof] } else { &[eof] };
                if self.write_input(ends).await.is_err() {
                    return;
                }
                sent_in = Some(line_mode);
            }
            match live.recv().await {
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    /// Writes input to the pty (what a person types). Once every holder of the slave
    /// has closed it (the program ended), the input has nowhere to go: an error, not a
    /// wait. And a pty that says it is writable and then takes nothing (its input queue
    /// full) is waited on, never retried at once: the master's readiness can come back
    /// as fast as it is cleared, and a loop on it never yields, so `abort` never
    /// reaches it; two such tasks stopped the whole host (`yes | relay sandbox …`
    /// whose tool exits without reading, issue 40).
    pub async fn write_input(&self, mut data: &[u8]) -> io::Result<()> {
        let master = self.master()?;
        while !data.is_empty() {
            let mut guard = master.writable().await?;
            match guard.try_io(|inner| {
                // Safety: writing from a slice we borrow, of its length.
                let n = unsafe {
                    libc::write(
                        inner.get_ref().as_raw_fd(),
                        data.as_ptr().cast(),
                        data.len(),
                    )
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            }) {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => {
                    if hung_up(master.get_ref()) {
                        return Err(io::Error::new(
                            io::ErrorKind::BrokenPipe,
                            "the terminal's program has closed it",
                        ));
                    }
                    tokio::time::sleep(INPUT_FULL_WAIT).await;
                }
            }
        }
        Ok(())
    }

    /// Sets the pty's size; attaches go through their [`Window`].
    fn resize(&self, size: PtySize) -> io::Result<()> {
        let ws = winsize(size);
        let master = self.master()?;
        // Safety: TIOCSWINSZ reads a Winsize we own for the duration of the call.
        let rc = unsafe { libc::ioctl(master.get_ref().as_raw_fd(), libc::TIOCSWINSZ, &ws) };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{PtySize, Windows};

    fn size(cols: u16, rows: u16) -> PtySize {
        PtySize { cols, rows }
    }

    #[test]
    fn the_size_follows_the_most_recent_window_still_attached() {
        let mut w = Windows::default();
        let (a, b, c) = (w.open(), w.open(), w.open());
        assert_eq!(w.said(a, size(100, 30)), size(100, 30));
        assert_eq!(w.said(b, size(120, 40)), size(120, 40));
        // The window in force goes: the one before it that remains.
        assert_eq!(w.gone(b), Some(size(100, 30)));
        // A window that never said its size changes nothing, coming or going.
        assert_eq!(w.gone(c), None);
        assert_eq!(w.said(c, size(90, 25)), size(90, 25));
        // A window resized again is the most recent one.
        assert_eq!(w.said(a, size(110, 35)), size(110, 35));
        // One that is not in force goes: nothing changes.
        assert_eq!(w.gone(c), None);
        // The last one goes: the size stays as it is.
        assert_eq!(w.gone(a), None);
        assert_eq!(w.gone(a), None);
    }

    #[test]
    fn a_remaining_window_of_the_same_size_changes_nothing() {
        let mut w = Windows::default();
        let (a, b) = (w.open(), w.open());
        w.said(a, size(80, 24));
        w.said(b, size(80, 24));
        assert_eq!(w.gone(b), None);
    }
}
