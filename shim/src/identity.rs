//! The identity step: read the per-launch secret from fd 3, say Hello to the daemon's
//! bridge socket, accept only an `OK` naming this session.
//!
//! The secret proves to the daemon that this shim is the process the host launched for
//! this session. It is single use and is never written anywhere but the bridge socket:
//! no error message carries it, nor the daemon's answer.

use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::hello::{Answer, Hello};

/// Length of the secret: 32 random bytes as lowercase hex.
pub(crate) const SECRET_LEN: usize = 64;
/// Longest answer line the shim reads, newline included.
pub(crate) const MAX_ANSWER_BYTES: usize = 4096;
/// The whole Hello exchange (connect, send, answer) must fit in this.
pub(crate) const HELLO_DEADLINE: Duration = Duration::from_secs(10);

/// Why the secret or the Hello was refused. Never carries the secret or the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal(pub String);

fn refuse(why: impl Into<String>) -> Refusal {
    Refusal(why.into())
}

/// Whether `bytes` is exactly a well-formed secret: 64 lowercase hex characters, nothing
/// else (no newline).
pub(crate) fn valid_secret(bytes: &[u8]) -> bool {
    bytes.len() == SECRET_LEN && bytes.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Reads the secret from `fd` until EOF, but never more than one byte past a valid
/// secret, then closes `fd`.
pub(crate) fn read_secret(fd: RawFd) -> Result<String, Refusal> {
    crate::fds::fd_flags(fd).map_err(|e| refuse(format!("fd {fd}: {e}")))?;
    // Safety: `fd` is open (checked above) and by the fd table it is the shim's alone;
    // the File takes ownership and closes it when dropped.
    let mut file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let mut buf = [0u8; SECRET_LEN + 1];
    let mut len = 0;
    while len < buf.len() {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(refuse(format!("read fd {fd}: {e}"))),
        }
    }
    drop(file);
    let bytes = &buf[..len];
    if !valid_secret(bytes) {
        return Err(refuse(format!(
            "fd {fd}: not exactly {SECRET_LEN} lowercase hex characters ({len} bytes read)"
        )));
    }
    String::from_utf8(bytes.to_vec()).map_err(|_| refuse("not UTF-8"))
}

/// The Hello line, newline included ([`Hello::to_line`]).
pub(crate) fn hello_line(session_id: &str, secret: &str) -> String {
    Hello {
        session_id: session_id.into(),
        secret: secret.into(),
    }
    .to_line()
}

/// Accepts only an answer line (newline excluded) that is a flat JSON object with
/// `"type":"OK"`, `"name"` equal to `session_id` and a positive integer `"pid"`
/// ([`Answer::parse`]). Other members are ignored.
pub(crate) fn check_answer(line: &[u8], session_id: &str) -> Result<u32, Refusal> {
    let text = std::str::from_utf8(line).map_err(|_| refuse("answer is not UTF-8"))?;
    match Answer::parse(text).map_err(refuse)? {
        Answer::Ok { session_id: s, pid } if s == session_id => Ok(pid),
        Answer::Ok { .. } => Err(refuse("answer does not name this session")),
        Answer::Refused { .. } => Err(refuse("answer is not OK")),
    }
}

/// Dials `socket`, sends the Hello and checks the one answer line, all within
/// [`HELLO_DEADLINE`]. No retry.
pub(crate) fn say_hello(socket: &Path, session_id: &str, secret: &str) -> Result<(), Refusal> {
    let deadline = Instant::now() + HELLO_DEADLINE;
    let mut stream =
        connect(socket).map_err(|e| refuse(format!("connect {}: {e}", socket.display())))?;
    stream
        .set_write_timeout(Some(remaining(deadline)?))
        .map_err(|e| refuse(format!("send: {e}")))?;
    stream
        .write_all(hello_line(session_id, secret).as_bytes())
        .map_err(|e| refuse(format!("send: {e}")))?;
    let line = read_answer(&mut stream, deadline)?;
    let pid = check_answer(&line, session_id)?;
    // The answer must name the process that holds the bridge socket: the daemon.
    let peer = peer_pid(&stream).map_err(|e| refuse(format!("bridge peer: {e}")))?;
    if peer != pid {
        return Err(refuse("answer pid is not the bridge's process"));
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn peer_pid(stream: &UnixStream) -> io::Result<u32> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let cred = getsockopt(stream, PeerCredentials)?;
    u32::try_from(cred.pid()).map_err(|_| io::Error::other("no peer pid"))
}

#[cfg(target_os = "macos")]
fn peer_pid(stream: &UnixStream) -> io::Result<u32> {
    use nix::sys::socket::{getsockopt, sockopt::LocalPeerPid};
    let pid = getsockopt(stream, LocalPeerPid)?;
    u32::try_from(pid).map_err(|_| io::Error::other("no peer pid"))
}

/// Connects without blocking: a bridge whose backlog is full refuses at once instead of
/// holding the launch.
fn connect(socket: &Path) -> io::Result<UnixStream> {
    use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, UnixAddr};
    use std::os::fd::AsRawFd;
    // macOS has no SOCK_CLOEXEC or SOCK_NONBLOCK: the socket is made, then marked. The
    // shim is single-threaded and forks only later (the target), so nothing can fork
    // between the two calls and inherit the socket.
    let fd = socket::socket(
        AddressFamily::Unix,
        SockType::Stream,
        SockFlag::empty(),
        None,
    )?;
    crate::fds::set_cloexec(fd.as_raw_fd(), true)?;
    let stream = UnixStream::from(fd);
    stream.set_nonblocking(true)?;
    let addr = UnixAddr::new(socket)?;
    socket::connect(stream.as_raw_fd(), &addr)?;
    stream.set_nonblocking(false)?;
    Ok(stream)
}

fn remaining(deadline: Instant) -> Result<Duration, Refusal> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(refuse(format!(
            "no answer within {} s",
            HELLO_DEADLINE.as_secs()
        )));
    }
    Ok(left)
}

/// Reads up to and including the first newline; the newline is not returned.
fn read_answer(stream: &mut UnixStream, deadline: Instant) -> Result<Vec<u8>, Refusal> {
    let mut buf = vec![0u8; MAX_ANSWER_BYTES];
    let mut len = 0;
    loop {
        if let Some(end) = buf[..len].iter().position(|&b| b == b'\n') {
            buf.truncate(end);
            return Ok(buf);
        }
        if len == buf.len() {
            return Err(refuse(format!(
                "answer longer than {MAX_ANSWER_BYTES} bytes"
            )));
        }
        stream
            .set_read_timeout(Some(remaining(deadline)?))
            .map_err(|e| refuse(format!("answer: {e}")))?;
        match stream.read(&mut buf[len..]) {
            Ok(0) => return Err(refuse("bridge closed the connection before a full answer")),
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(refuse(format!(
                    "no answer within {} s",
                    HELLO_DEADLINE.as_secs()
                )))
            }
            Err(e) => return Err(refuse(format!("answer: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::{self, Value};
    use std::os::unix::net::UnixListener;

    const SECRET: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn secret_validation() {
        assert!(valid_secret(SECRET.as_bytes()));
        assert!(valid_secret(&[b'f'; 64]));
        let refused: Vec<Vec<u8>> = vec![
            vec![],
            SECRET[..63].into(),
            format!("{SECRET}0").into(),
            format!("{SECRET}\n").into(),
            format!("{}\n", &SECRET[..63]).into(),
            SECRET.to_uppercase().into(),
            SECRET.replacen('0', "g", 1).into(),
            SECRET.replacen('0', " ", 1).into(),
            SECRET.replacen('0', "\0", 1).into(),
            [b'a'; 65].to_vec(),
        ];
        for bytes in refused {
            assert!(!valid_secret(&bytes), "{bytes:?}");
        }
    }

    fn pipe_with(bytes: &[u8]) -> RawFd {
        use std::os::fd::IntoRawFd;
        let (r, w) = nix::unistd::pipe().unwrap();
        let mut w = std::fs::File::from(w);
        w.write_all(bytes).unwrap();
        drop(w);
        r.into_raw_fd()
    }

    #[test]
    fn read_secret_from_pipe() {
        assert_eq!(read_secret(pipe_with(SECRET.as_bytes())).unwrap(), SECRET);
        assert!(read_secret(pipe_with(format!("{SECRET}\n").as_bytes())).is_err());
        assert!(read_secret(pipe_with(b"")).is_err());
        assert!(read_secret(pipe_with(&[b'a'; 1000])).is_err());
    }

    #[test]
    fn read_secret_stops_after_65_bytes() {
        // The writer never closes: a valid-length prefix plus one byte must end the read.
        use std::os::fd::IntoRawFd;
        let (r, w) = nix::unistd::pipe().unwrap();
        let mut w = std::fs::File::from(w);
        w.write_all(&[b'a'; 65]).unwrap();
        let err = read_secret(r.into_raw_fd()).unwrap_err();
        assert!(err.0.contains("65 bytes read"), "{err:?}");
        assert!(
            !err.0.contains("aaaa"),
            "the bytes must not be echoed: {err:?}"
        );
        drop(w);
    }

    #[test]
    fn hello_line_escapes_session_id() {
        let line = hello_line("s\"1\\\n", SECRET);
        assert_eq!(
            line,
            format!(
                "{{\"type\":\"Hello\",\"kind\":\"project_session\",\"name\":\"s\\\"1\\\\\\n\",\"token\":\"{SECRET}\"}}\n"
            )
        );
        let members = json::parse_flat_object(&line).unwrap();
        assert_eq!(members[2].1, Value::Str("s\"1\\\n".into()));
    }

    #[test]
    fn accepted_answers() {
        for line in [
            r#"{"type":"OK","name":"s1","pid":4242}"#,
            r#"{"pid":1,"name":"s1","type":"OK"}"#,
            r#" {"type" : "OK", "name":"s1", "pid":7, "v":1} "#,
            r#"{"type":"OK","name":"s\u0031","pid":7}"#,
        ] {
            assert!(check_answer(line.as_bytes(), "s1").is_ok(), "{line}");
        }
        assert_eq!(
            check_answer(br#"{"type":"OK","name":"s1","pid":4242}"#, "s1"),
            Ok(4242)
        );
    }

    #[test]
    fn refused_answers() {
        for line in [
            "",
            "OK",
            r#"{"type":"ok","name":"s1","pid":1}"#,
            r#"{"type":"Error","name":"s1","pid":1}"#,
            r#"{"type":"OK","name":"s2","pid":1}"#,
            r#"{"type":"OK","name":"S1","pid":1}"#,
            r#"{"type":"OK","pid":1}"#,
            r#"{"type":"OK","name":"s1"}"#,
            r#"{"type":"OK","name":"s1","pid":0}"#,
            r#"{"type":"OK","name":"s1","pid":-5}"#,
            r#"{"type":"OK","name":"s1","pid":"12"}"#,
            r#"{"type":"OK","name":"s1","pid":1.0}"#,
            r#"{"type":"OK","name":"s1","pid":99999999999}"#,
            r#"{"type":"OK","name":"s1","pid":null}"#,
            r#"{"type":"OK","name":"s1","pid":1,"x":true}"#,
            r#"{"type":"OK","name":"s1","pid":1,"x":{}}"#,
            r#"{"type":"OK","name":"s1","pid":1,"type":"OK"}"#,
            r#"{"type":"OK","name":"s2","pid":1,"name":"s1"}"#,
            r#"{"type":"OK","name":"s1","pid":1} trailing"#,
            r#"[{"type":"OK","name":"s1","pid":1}]"#,
        ] {
            assert!(check_answer(line.as_bytes(), "s1").is_err(), "{line}");
        }
        assert!(check_answer(b"{\"type\":\"OK\",\"name\":\"s1\xff\",\"pid\":1}", "s1").is_err());
    }

    /// A bridge that reads the Hello line and then does `answer` with the stream.
    fn bridge(
        answer: impl FnOnce(UnixStream, String) + Send + 'static,
    ) -> (tempdir::Dir, std::thread::JoinHandle<()>) {
        let dir = tempdir::Dir::new();
        let path = dir.path().join("bridge.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let handle = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut got = Vec::new();
            let mut byte = [0u8; 1];
            while stream.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
                got.push(byte[0]);
            }
            answer(stream, String::from_utf8(got).unwrap());
        });
        (dir, handle)
    }

    #[test]
    fn hello_exchange_ok() {
        let (dir, handle) = bridge(|mut s, hello| {
            let members = json::parse_flat_object(&hello).unwrap();
            assert_eq!(members[0], ("type".into(), Value::Str("Hello".into())));
            assert_eq!(members[3], ("token".into(), Value::Str(SECRET.into())));
            let me = std::process::id();
            s.write_all(format!("{{\"type\":\"OK\",\"name\":\"sess\",\"pid\":{me}}}\n").as_bytes())
                .unwrap();
        });
        say_hello(&dir.path().join("bridge.sock"), "sess", SECRET).unwrap();
        handle.join().unwrap();
    }

    #[test]
    fn hello_refused_when_the_answer_names_another_pid() {
        let (dir, handle) = bridge(|mut s, _| {
            s.write_all(b"{\"type\":\"OK\",\"name\":\"sess\",\"pid\":1}\n")
                .unwrap();
        });
        let err = say_hello(&dir.path().join("bridge.sock"), "sess", SECRET).unwrap_err();
        assert!(err.0.contains("not the bridge's process"), "{err:?}");
        handle.join().unwrap();
    }

    #[test]
    fn hello_refused_on_eof_oversize_and_missing_socket() {
        let (dir, handle) = bridge(|mut s, _| {
            s.write_all(b"{\"type\":\"OK\",\"name\":\"sess\",\"pid\":1}")
                .unwrap();
        });
        let err = say_hello(&dir.path().join("bridge.sock"), "sess", SECRET).unwrap_err();
        assert!(err.0.contains("before a full answer"), "{err:?}");
        handle.join().unwrap();

        let (dir, handle) = bridge(|mut s, _| {
            let _ = s.write_all(&vec![b' '; MAX_ANSWER_BYTES + 10]);
        });
        let err = say_hello(&dir.path().join("bridge.sock"), "sess", SECRET).unwrap_err();
        assert!(err.0.contains("longer than"), "{err:?}");
        handle.join().unwrap();

        let dir = tempdir::Dir::new();
        let err = say_hello(&dir.path().join("none.sock"), "sess", SECRET).unwrap_err();
        assert!(err.0.starts_with("connect "), "{err:?}");
        assert!(!err.0.contains(SECRET));
    }

    /// A throwaway directory for test sockets, removed on drop.
    mod tempdir {
        use std::path::{Path, PathBuf};
        use std::sync::atomic::{AtomicUsize, Ordering};

        pub struct Dir(PathBuf);

        impl Dir {
            pub fn new() -> Dir {
                static N: AtomicUsize = AtomicUsize::new(0);
                let path = std::env::temp_dir().join(format!(
                    "relay-shim-test-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::SeqCst)
                ));
                std::fs::create_dir_all(&path).unwrap();
                Dir(path)
            }

            pub fn path(&self) -> &Path {
                &self.0
            }
        }

        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }
}
