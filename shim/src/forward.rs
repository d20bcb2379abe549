//! The forwarder of a proxied sandbox (docs/session-host.md#the-egress-proxy): run by
//! `relay-shim enter` inside the sandbox's own network namespace, before the target.
//! It listens on loopback — the proxy port the target's `HTTPS_PROXY` names, and each
//! loopback address the session's list bridges — and hands every connection to the
//! session's egress socket, with one line saying which listener took it. It decides
//! nothing: relay checks every connection at the other end of the socket.
//!
//! The listeners are bound before the target starts (no window where a tool finds the
//! port closed); the forwarder then runs in a child of its own session and process
//! group (a terminal's Ctrl-C is not for it), named `relay-forward`, holding no
//! descriptor of the target's (not its output, not fd 5).
//!
//! Its lifeline ([`LIFELINE`]): before it forks, `enter` opens one more connection to
//! the session's socket and says so, and only the forwarder keeps it (the parent's copy
//! goes at once). It is the socket's first connection, made before anything of the
//! target's runs. relay reads it to its end: an end while the sandbox still runs is the
//! forwarder's death, and relay stops the session at once (the port it held must not
//! stay free for a tool to listen on). So the forwarder does not die with the target by
//! a parent-death signal: it dies with the sandbox's pid namespace, which bwrap ends
//! only after its own outer process has exited (`--unshare-pid`, `--die-with-parent`),
//! so on an ordinary end relay sees the sandbox gone before it sees the lifeline close
//! (docs/session-host.md#the-egress-proxy).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// The variable `enter` reads (and removes from the target's environment):
/// `<socket> <proxy port> [<bridge address>…]`.
pub const FORWARD_VAR: &str = "RELAY_SHIM_FORWARD";

/// The first line of the lifeline, the socket's first connection: the forwarder holds
/// it open for as long as it lives and sends nothing more.
pub const LIFELINE: &str = "relay-egress 1 lifeline\n";

/// The forwarder's name (`comm`): what `ps` shows, and what the tests look for.
pub const NAME: &str = "relay-forward";

/// What to forward, from [`FORWARD_VAR`].
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    pub socket: PathBuf,
    pub proxy_port: u16,
    pub bridges: Vec<SocketAddr>,
}

impl Plan {
    pub fn parse(value: &str) -> Result<Plan, String> {
        let mut words = value.split(' ');
        let socket = words
            .next()
            .filter(|s| s.starts_with('/'))
            .ok_or("no socket path")?;
        let proxy_port = words
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or("no proxy port")?;
        let bridges = words
            .map(|b| {
                b.parse()
                    .map_err(|_| format!("bridge {b:?}: not an address"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Plan {
            socket: socket.into(),
            proxy_port,
            bridges,
        })
    }
}

/// One listener and the line its connections start with.
struct Listener {
    socket: TcpListener,
    line: String,
}

/// Binds every listener, opens the lifeline, then forks the forwarder. Returns in the
/// parent (which goes on to exec the target); the child never returns.
pub fn start(plan: &Plan) -> Result<(), String> {
    let mut listeners = vec![Listener {
        socket: TcpListener::bind(("127.0.0.1", plan.proxy_port))
            .map_err(|e| format!("listen on 127.0.0.1:{}: {e}", plan.proxy_port))?,
        line: "relay-egress 1 proxy\n".into(),
    }];
    for b in &plan.bridges {
        listeners.push(Listener {
            socket: TcpListener::bind(b).map_err(|e| format!("listen on {b}: {e}"))?,
            line: format!("relay-egress 1 bridge {b}\n"),
        });
    }
    let mut lifeline = UnixStream::connect(&plan.socket)
        .map_err(|e| format!("lifeline {}: {e}", plan.socket.display()))?;
    lifeline
        .write_all(LIFELINE.as_bytes())
        .map_err(|e| format!("lifeline {}: {e}", plan.socket.display()))?;
    // Safety: the shim is single-threaded here (enter runs before any thread starts), so
    // the child may go on running Rust code after fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid > 0 {
        // The parent's lifeline closes here, its listeners at exec (std sockets are
        // close-on-exec): the forwarder holds the only copies.
        return Ok(());
    }
    name_self();
    detach(&listeners, lifeline.as_raw_fd());
    let socket = plan.socket.clone();
    let mut threads = Vec::new();
    for l in listeners {
        let socket = socket.clone();
        threads.push(std::thread::spawn(move || accept_loop(l, &socket)));
    }
    for t in threads {
        let _ = t.join();
    }
    // Every listener failed: the lifeline closes with this exit, and relay stops the
    // session.
    drop(lifeline);
    // Safety: ends this child without running the parent's exit handlers twice.
    unsafe { libc::_exit(0) }
}

/// Names the calling process [`NAME`] (Linux; elsewhere there is no forwarder).
fn name_self() {
    #[cfg(target_os = "linux")]
    {
        let name = std::ffi::CString::new(NAME).unwrap_or_default();
        // Safety: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes, which
        // `name` is and which outlives the call.
        unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
    }
}

/// In the child: a session of its own, `/dev/null` on 0-2, every other descriptor but
/// the listeners and the lifeline closed (fd 5 among them).
fn detach(listeners: &[Listener], lifeline: i32) {
    let mut keep: Vec<i32> = listeners.iter().map(|l| l.socket.as_raw_fd()).collect();
    keep.push(lifeline);
    // Safety: plain syscalls on this process's own descriptors and session.
    unsafe {
        libc::setsid();
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
            libc::close(null);
        }
    }
    let open: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
                .collect()
        })
        .unwrap_or_default();
    for fd in open {
        if fd > 2 && !keep.contains(&fd) {
            // Safety: closing a descriptor this child inherited and does not use.
            unsafe { libc::close(fd) };
        }
    }
}

fn accept_loop(l: Listener, socket: &Path) {
    for conn in l.socket.incoming() {
        let Ok(tcp) = conn else { continue };
        let (socket, line) = (socket.to_path_buf(), l.line.clone());
        std::thread::spawn(move || pass(tcp, &socket, &line));
    }
}

/// One connection: its line, then bytes both ways until either side closes.
fn pass(tcp: TcpStream, socket: &Path, line: &str) {
    let Ok(mut unix) = UnixStream::connect(socket) else {
        return;
    };
    if unix.write_all(line.as_bytes()).is_err() {
        return;
    }
    let (Ok(mut tcp_r), Ok(mut unix_r)) = (tcp.try_clone(), unix.try_clone()) else {
        return;
    };
    let mut tcp_w = tcp;
    let up = std::thread::spawn(move || {
        let _ = copy(&mut tcp_r, &mut unix);
        let _ = unix.shutdown(Shutdown::Write);
    });
    let _ = copy(&mut unix_r, &mut tcp_w);
    let _ = tcp_w.shutdown(Shutdown::Write);
    let _ = up.join();
}

/// Copies until `from` ends (`Ok`) or either side fails.
fn copy(from: &mut impl Read, to: &mut impl Write) -> std::io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_parses_and_bad_ones_are_named() {
        let p = Plan::parse("/run/relay/egress.sock 3128 127.0.0.1:4000 [::1]:5000").unwrap();
        assert_eq!(p.socket, Path::new("/run/relay/egress.sock"));
        assert_eq!(p.proxy_port, 3128);
        assert_eq!(p.bridges.len(), 2);
        assert!(Plan::parse("relative 3128").is_err());
        assert!(Plan::parse("/s x").is_err());
        assert!(Plan::parse("/s 1 nope").unwrap_err().contains("nope"));
    }

    /// A reader that is interrupted once, then gives `data`, then `end`.
    struct Flaky {
        interrupted: bool,
        data: Option<&'static [u8]>,
        end: Option<std::io::ErrorKind>,
    }

    impl Read for Flaky {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if !self.interrupted {
                self.interrupted = true;
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            if let Some(d) = self.data.take() {
                buf[..d.len()].copy_from_slice(d);
                return Ok(d.len());
            }
            match self.end.take() {
                Some(kind) => Err(kind.into()),
                None => Ok(0),
            }
        }
    }

    #[test]
    fn a_copy_goes_on_after_an_interruption_and_stops_at_the_end_or_an_error() {
        let flaky = |end| Flaky {
            interrupted: false,
            data: Some(b"bytes"),
            end,
        };
        let mut out = Vec::new();
        copy(&mut flaky(None), &mut out).unwrap();
        assert_eq!(out, b"bytes");
        let mut out = Vec::new();
        let e = copy(
            &mut flaky(Some(std::io::ErrorKind::ConnectionReset)),
            &mut out,
        )
        .unwrap_err();
        assert_eq!(
            (e.kind(), out.as_slice()),
            (std::io::ErrorKind::ConnectionReset, &b"bytes"[..])
        );
    }

    /// The processes whose parent is this one.
    #[cfg(target_os = "linux")]
    fn children() -> Vec<i32> {
        // Safety: getpid has no preconditions.
        let me = unsafe { libc::getpid() };
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                // After the name's closing parenthesis: state, ppid, pgrp, session.
                let fields: Vec<&str> = stat
                    .rsplit_once(')')
                    .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
                fields.get(1) == Some(&me.to_string().as_str())
            })
            .collect()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_forwarder_passes_each_connection_with_its_line_and_keeps_nothing_of_the_target() {
        crate::alone::alone(
            concat!(
                module_path!(),
                "::the_forwarder_passes_each_connection_with_its_line_and_keeps_nothing_of_the_target"
            ),
            forwarder_body,
        );
    }

    /// How long the forwarder's test waits for any one thing.
    #[cfg(target_os = "linux")]
    const BOUND: std::time::Duration = std::time::Duration::from_secs(10);

    #[cfg(target_os = "linux")]
    fn forwarder_body() {
        use std::os::unix::net::UnixListener;
        let dir = std::env::temp_dir().join(format!("relay-shim-fwd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("egress.sock");
        let _ = std::fs::remove_file(&socket);
        let egress = UnixListener::bind(&socket).unwrap();
        let free = || {
            TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
        };
        let (proxy, bridge) = (free(), free());
        // A descriptor of the target's (fd 5, the drained token pipe): its write end.
        let mut pipe = [0i32; 2];
        // Safety: a two-element array for pipe2 to fill.
        let made = unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) };
        assert_eq!(made, 0);
        start(&Plan {
            socket: socket.clone(),
            proxy_port: proxy.port(),
            bridges: vec![bridge],
        })
        .unwrap();
        // Safety: the write end is this test's own.
        unsafe { libc::close(pipe[1]) };
        holds_no_copy(pipe[0]);
        let pid = the_forwarder();
        let mut lifeline = the_lifeline(&egress);
        each_listener_passes(egress, [proxy, bridge]);
        the_lifeline_lasts_as_long_as(&mut lifeline, pid);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The forwarder holds no copy of the target's pipe: its read end sees the end at
    /// once, this process's write end closed.
    #[cfg(target_os = "linux")]
    fn holds_no_copy(read_end: i32) {
        let mut poll = libc::pollfd {
            fd: read_end,
            events: libc::POLLIN,
            revents: 0,
        };
        // Safety: one pollfd, a bounded wait.
        let ready = unsafe { libc::poll(&mut poll, 1, BOUND.as_millis() as i32) };
        assert_eq!(ready, 1, "the forwarder keeps the target's descriptor");
        let mut byte = [0u8; 1];
        // Safety: reading one byte into a one-byte buffer.
        let n = unsafe { libc::read(read_end, byte.as_mut_ptr().cast(), 1) };
        assert_eq!(n, 0, "the end of the pipe");
    }

    /// The one child `start` left: a session of its own, its own name, /dev/null on
    /// 0-2. Its pid.
    #[cfg(target_os = "linux")]
    fn the_forwarder() -> i32 {
        let kids = children();
        assert_eq!(kids.len(), 1, "{kids:?}");
        let pid = kids[0];
        // Safety: getsid on a pid, no memory involved.
        assert_eq!(unsafe { libc::getsid(pid) }, pid, "not a session leader");
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
        assert_eq!(comm.trim_end(), NAME);
        for fd in 0..3 {
            let target = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).unwrap();
            assert_eq!(target, Path::new("/dev/null"), "fd {fd}");
            // Open for reading and writing, as a terminal's 0-2 are.
            let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).unwrap();
            let flags = info
                .lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .and_then(|f| i32::from_str_radix(f.trim(), 8).ok())
                .unwrap();
            assert_eq!(flags & libc::O_ACCMODE, libc::O_RDWR, "fd {fd}: {info}");
        }
        pid
    }

    /// The socket's first connection is the lifeline, made before `start` returned:
    /// there to accept at once, its line read.
    #[cfg(target_os = "linux")]
    fn the_lifeline(egress: &std::os::unix::net::UnixListener) -> UnixStream {
        egress.set_nonblocking(true).unwrap();
        let (mut lifeline, _) = egress.accept().unwrap();
        egress.set_nonblocking(false).unwrap();
        lifeline.set_nonblocking(false).unwrap();
        lifeline.set_read_timeout(Some(BOUND)).unwrap();
        let mut line = vec![0u8; LIFELINE.len()];
        lifeline.read_exact(&mut line).unwrap();
        assert_eq!(line, LIFELINE.as_bytes());
        lifeline
    }

    /// A connection to the proxy port, then one to the bridge, each reaches the socket
    /// after the line naming its listener, and the bytes go both ways.
    #[cfg(target_os = "linux")]
    fn each_listener_passes(
        egress: std::os::unix::net::UnixListener,
        [proxy, bridge]: [SocketAddr; 2],
    ) {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for conn in egress.incoming() {
                let _ = tx.send(conn.unwrap());
            }
        });
        for (at, line) in [
            (proxy, "relay-egress 1 proxy\n".to_string()),
            (bridge, format!("relay-egress 1 bridge {bridge}\n")),
        ] {
            let mut tcp = TcpStream::connect(at).unwrap();
            tcp.set_read_timeout(Some(BOUND)).unwrap();
            tcp.write_all(b"ping").unwrap();
            let mut unix = rx.recv_timeout(BOUND).expect("nothing reached the socket");
            unix.set_read_timeout(Some(BOUND)).unwrap();
            let mut got = vec![0u8; line.len() + 4];
            unix.read_exact(&mut got).unwrap();
            assert_eq!(String::from_utf8_lossy(&got), format!("{line}ping"));
            unix.write_all(b"pong").unwrap();
            drop(unix);
            let mut back = Vec::new();
            tcp.read_to_end(&mut back).unwrap();
            assert_eq!(back, b"pong");
        }
    }

    /// The lifeline stays open while the forwarder `pid` lives (this process dropped its
    /// copy in `start`), and ends when it dies.
    #[cfg(target_os = "linux")]
    fn the_lifeline_lasts_as_long_as(lifeline: &mut UnixStream, pid: i32) {
        lifeline.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        let open = lifeline.read(&mut byte).unwrap_err();
        assert_eq!(open.kind(), std::io::ErrorKind::WouldBlock, "{open}");
        lifeline.set_nonblocking(false).unwrap();
        // Safety: kill(2) and waitpid(2) on this test's own child.
        unsafe {
            assert_eq!(libc::kill(pid, libc::SIGKILL), 0);
            assert_eq!(libc::waitpid(pid, std::ptr::null_mut(), 0), pid);
        }
        assert_eq!(lifeline.read(&mut byte).unwrap(), 0, "the lifeline's end");
    }

    /// No socket to hold a lifeline on: nothing is forked, and the error names it.
    #[test]
    fn without_its_socket_the_forwarder_does_not_start() {
        let free = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = start(&Plan {
            socket: PathBuf::from("/nonexistent/relay/egress.sock"),
            proxy_port: free,
            bridges: vec![],
        })
        .unwrap_err();
        assert!(
            e.starts_with("lifeline /nonexistent/relay/egress.sock: "),
            "{e}"
        );
    }
}
