//! Listeners that survive descriptor pressure, for the daemon and the host.
//!
//! Anything that can connect to a listener can try to exhaust the listening process's
//! descriptors: a few processes holding ~1,800 half-sent requests on the API port once
//! left the daemon unable to write audit rows, then to read random bytes, and it exited
//! (taking the host and every session with it). So:
//!
//! - both processes raise their soft `RLIMIT_NOFILE` to the hard limit at start
//!   ([`raise_nofile`]);
//! - each listener serves at most [`connection_cap`] connections at once; at the cap it
//!   stops accepting (new connections wait in the kernel's backlog, costing no
//!   descriptor here) until one ends, and says so once a minute ([`serve`]);
//! - an accept that fails for lack of resources (`EMFILE`, `ENFILE`, `ENOBUFS`,
//!   `ENOMEM`, or anything unexpected) pauses the loop with a growing delay and logs
//!   once per pause (`tracing`, [`crate::logging`]), instead of spinning or ending it;
//! - idle connections are dropped by the HTTP servers themselves (a request head must
//!   arrive within 10 s, the first one and every next one on a kept-alive connection;
//!   a body within 10 s).
//!
//! The caps together stay well below the descriptor limit, so the files the daemon must
//! still open under a flood (profiles, the host connection, pipes) find room.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

/// The first pause after a failed accept; it doubles up to [`MAX_PAUSE`].
const MIN_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(1);
/// A full listener says so at most this often.
const FULL_NOTE_EVERY: Duration = Duration::from_secs(60);

/// One warning through `tracing` ([`crate::logging`]): the log file, and stderr as
/// `relay: …`. A leading `relay: ` or `relay-sessions: ` in the text is dropped, since
/// the stderr form adds the process's own. A broken stderr is ignored.
pub fn log(args: std::fmt::Arguments<'_>) {
    let line = args.to_string();
    tracing::warn!("{}", unprefixed(&line));
}

fn unprefixed(line: &str) -> &str {
    line.strip_prefix("relay: ")
        .or_else(|| line.strip_prefix("relay-sessions: "))
        .unwrap_or(line)
}

/// Raises the soft descriptor limit to the hard one and returns the soft limit now in
/// force. macOS refuses a soft limit above `OPEN_MAX` (10240) even when the hard limit
/// is unlimited, so that is tried next.
pub fn raise_nofile() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // Safety: getrlimit writes into the rlimit struct passed by pointer, which is live.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if lim.rlim_cur >= lim.rlim_max {
        return Ok(lim.rlim_cur);
    }
    let mut first_err = None;
    for want in [lim.rlim_max, lim.rlim_max.min(10240)] {
        if want <= lim.rlim_cur {
            continue;
        }
        let new = libc::rlimit {
            rlim_cur: want,
            rlim_max: lim.rlim_max,
        };
        // Safety: setrlimit only reads the rlimit struct passed by pointer.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &new) } == 0 {
            return Ok(want);
        }
        first_err.get_or_insert_with(io::Error::last_os_error);
    }
    Err(first_err.unwrap_or_else(|| io::Error::other("no higher limit to set")))
}

/// How many connections one listener serves at once, given the soft descriptor limit:
/// an eighth of it, at least 16 and at most 512. Three listeners in the daemon (and the
/// attach streams they hand over) then use well under half of the limit.
pub fn connection_cap(nofile: u64) -> usize {
    usize::try_from(nofile / 8)
        .unwrap_or(usize::MAX)
        .clamp(16, 512)
}

/// The soft descriptor limit in force (1024 when it cannot be read).
pub fn nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // Safety: getrlimit writes into the rlimit struct passed by pointer, which is live.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 1024;
    }
    lim.rlim_cur
}

/// A listener [`serve`] can accept from.
pub trait Accept {
    type Conn: Send + 'static;
    fn accept_one(&self) -> impl Future<Output = io::Result<Self::Conn>> + Send;
}

impl Accept for tokio::net::TcpListener {
    type Conn = tokio::net::TcpStream;
    async fn accept_one(&self) -> io::Result<Self::Conn> {
        self.accept().await.map(|(s, _)| s)
    }
}

impl Accept for tokio::net::UnixListener {
    type Conn = tokio::net::UnixStream;
    async fn accept_one(&self) -> io::Result<Self::Conn> {
        self.accept().await.map(|(s, _)| s)
    }
}

/// Errors that belong to one connection (it went away before the accept): the next
/// accept is tried at once.
fn per_connection(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNABORTED | libc::EINTR | libc::EAGAIN | libc::EPROTO | libc::EPERM)
    )
}

/// Accepts forever, at most `cap` connections served at once, each handled on its own
/// task. `name` starts every log line (`relay: api (tcp)`). Never returns.
pub async fn serve<L, H, F>(name: &str, listener: L, cap: usize, handle: H)
where
    L: Accept,
    H: Fn(L::Conn) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(cap.max(1)));
    let mut full_noted: Option<Instant> = None;
    let mut pause = MIN_PAUSE;
    let mut paused_since: Option<Instant> = None;
    loop {
        let slot = match slots.clone().try_acquire_owned() {
            Ok(s) => s,
            Err(_) => {
                if full_noted.is_none_or(|t| t.elapsed() >= FULL_NOTE_EVERY) {
                    tracing::warn!(
                        "{}: {cap} connections open (the limit); new ones wait",
                        unprefixed(name)
                    );
                    full_noted = Some(Instant::now());
                }
                match slots.clone().acquire_owned().await {
                    Ok(s) => s,
                    // The semaphore is never closed; if it were, serving would be over.
                    Err(_) => return,
                }
            }
        };
        match listener.accept_one().await {
            Ok(conn) => {
                if let Some(since) = paused_since.take() {
                    tracing::info!(
                        "{}: accepting again after {} ms",
                        unprefixed(name),
                        since.elapsed().as_millis()
                    );
                }
                pause = MIN_PAUSE;
                let fut = handle(conn);
                tokio::spawn(async move {
                    fut.await;
                    drop(slot);
                });
            }
            Err(e) if per_connection(&e) => {
                tracing::debug!("{}: accept: {e}", unprefixed(name));
            }
            Err(e) => {
                drop(slot);
                // Logged once per pause, not once per failed accept: the loop is paced.
                if paused_since.is_none() {
                    tracing::warn!("{}: accept: {e}; pausing", unprefixed(name));
                    paused_since = Some(Instant::now());
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_PAUSE);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    /// A listener whose accepts fail with `errs` first, then yield `conns` numbered
    /// connections, then wait forever (no one else connects).
    struct Fake {
        errs: Mutex<Vec<i32>>,
        conns: usize,
        calls: AtomicUsize,
        next: AtomicUsize,
    }

    impl Accept for Arc<Fake> {
        type Conn = usize;
        async fn accept_one(&self) -> io::Result<usize> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if let Some(e) = self.errs.lock().unwrap().pop() {
                return Err(io::Error::from_raw_os_error(e));
            }
            let n = self.next.fetch_add(1, Ordering::SeqCst);
            if n >= self.conns {
                std::future::pending::<()>().await;
            }
            Ok(n)
        }
    }

    fn fake(errs: Vec<i32>, conns: usize) -> Arc<Fake> {
        Arc::new(Fake {
            errs: Mutex::new(errs),
            conns,
            calls: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn emfile_pauses_the_loop_instead_of_spinning_or_ending_it() {
        let l = fake(vec![libc::EMFILE; 6], 1);
        let served = Arc::new(AtomicUsize::new(0));
        let (s2, l2) = (served.clone(), l.clone());
        let task = tokio::spawn(async move {
            serve("test", l2, 4, move |_c| {
                let s = s2.clone();
                async move {
                    s.fetch_add(1, Ordering::SeqCst);
                }
            })
            .await
        });
        let start = tokio::time::Instant::now();
        while served.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Six failures waited 50+100+200+400+800+1000 ms: the loop paused each time, and
        // it went on serving afterwards (the eighth accept waits for a connection).
        assert!(
            start.elapsed() >= Duration::from_millis(2550),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(l.calls.load(Ordering::SeqCst), 8);
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_cap_no_accept_happens_until_a_connection_ends() {
        let l = fake(vec![], 10);
        let gate = Arc::new(tokio::sync::Notify::new());
        let running = Arc::new(AtomicUsize::new(0));
        let (g2, r2, l2) = (gate.clone(), running.clone(), l.clone());
        let task = tokio::spawn(async move {
            serve("test", l2, 2, move |_c| {
                let (g, r) = (g2.clone(), r2.clone());
                async move {
                    r.fetch_add(1, Ordering::SeqCst);
                    g.notified().await;
                    r.fetch_sub(1, Ordering::SeqCst);
                }
            })
            .await
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(running.load(Ordering::SeqCst), 2);
        assert_eq!(
            l.calls.load(Ordering::SeqCst),
            2,
            "no third accept at the cap"
        );
        gate.notify_one();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            l.calls.load(Ordering::SeqCst),
            3,
            "one ended, one more accepted"
        );
        assert_eq!(running.load(Ordering::SeqCst), 2);
        task.abort();
    }

    #[test]
    fn caps_follow_the_descriptor_limit() {
        assert_eq!(connection_cap(256), 32);
        assert_eq!(connection_cap(20), 16);
        assert_eq!(connection_cap(1024), 128);
        assert_eq!(connection_cap(1 << 20), 512);
    }
}
