//! Terminal output keeping: an in-memory scrollback ring and a disk log that keeps the
//! head of the output plus a rolling tail, so a chatty session cannot fill the disk and
//! the log still reads after the session exited. Files are 0600 in a 0700 folder.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub const SCROLLBACK_BYTES: usize = 256 * 1024;
pub const HEAD_BYTES: u64 = 64 * 1024;
pub const TAIL_BYTES: u64 = 1024 * 1024;

/// The last [`SCROLLBACK_BYTES`] of output.
pub struct Ring {
    buf: VecDeque<u8>,
    cap: usize,
}

impl Ring {
    pub fn new(cap: usize) -> Self {
        Ring {
            buf: VecDeque::with_capacity(cap.min(64 * 1024)),
            cap,
        }
    }
    pub fn push(&mut self, data: &[u8]) {
        let data = if data.len() > self.cap {
            &data[data.len() - self.cap..]
        } else {
            data
        };
        let overflow = (self.buf.len() + data.len()).saturating_sub(self.cap);
        self.buf.drain(..overflow);
        self.buf.extend(data);
    }
    pub fn contents(&self) -> Vec<u8> {
        let (a, b) = self.buf.as_slices();
        [a, b].concat()
    }
    /// Gives back what was reserved beyond the contents (an ended terminal's ring).
    pub fn shrink(&mut self) {
        self.buf.shrink_to_fit();
    }
}

/// `<dir>/<id>.head` holds the first [`HEAD_BYTES`]; `<id>.tail` the rest, trimmed to
/// the last [`TAIL_BYTES`] whenever it grows past twice that.
pub struct DiskLog {
    head_path: PathBuf,
    tail_path: PathBuf,
    /// `None` once closed ([`DiskLog::close`]): the files stay, readable by path.
    head: Option<File>,
    tail: Option<File>,
    head_len: u64,
    tail_len: u64,
    dropped: u64,
    head_cap: u64,
    tail_cap: u64,
    /// Why the log stopped (a full disk): nothing more is written, and the log says so
    /// where it ends.
    cut: Option<String>,
    /// What the session wrote after the cut (counted from the chunk that failed).
    unwritten: u64,
}

fn create_0600(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

impl DiskLog {
    pub fn create(dir: &Path, id: &str) -> io::Result<Self> {
        Self::with_caps(dir, id, HEAD_BYTES, TAIL_BYTES)
    }

    pub fn with_caps(dir: &Path, id: &str, head_cap: u64, tail_cap: u64) -> io::Result<Self> {
        let head_path = dir.join(format!("{id}.head"));
        let tail_path = dir.join(format!("{id}.tail"));
        // Files of the same id are an earlier session's (a host that died, a resume):
        // the new session starts its own log.
        for p in [&head_path, &tail_path] {
            match std::fs::remove_file(p) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(DiskLog {
            head: Some(create_0600(&head_path)?),
            tail: Some(create_0600(&tail_path)?),
            head_path,
            tail_path,
            head_len: 0,
            tail_len: 0,
            dropped: 0,
            head_cap,
            tail_cap,
            cut: None,
            unwritten: 0,
        })
    }

    /// Appends `data`. The first write that fails (a full disk) cuts the log there for
    /// good: the session runs on (its scrollback ring still has the output), later
    /// output is only counted, and [`DiskLog::read_all`] ends with a note saying so.
    pub fn append(&mut self, data: &[u8]) -> io::Result<()> {
        if self.cut.is_some() || self.head.is_none() {
            self.unwritten += data.len() as u64;
            return Ok(());
        }
        let written = self.write(data);
        if let Err(e) = &written {
            let reason = match e.raw_os_error() {
                Some(code) => io::Error::from_raw_os_error(code).to_string(),
                None => e.kind().to_string(),
            };
            self.cut = Some(reason);
            self.unwritten += data.len() as u64;
        }
        written
    }

    fn write(&mut self, mut data: &[u8]) -> io::Result<()> {
        let closed = || io::Error::new(io::ErrorKind::BrokenPipe, "the log was closed");
        if self.head_len < self.head_cap {
            let room = (self.head_cap - self.head_len) as usize;
            let n = room.min(data.len());
            self.head
                .as_mut()
                .ok_or_else(closed)?
                .write_all(&data[..n])?;
            self.head_len += n as u64;
            data = &data[n..];
        }
        if data.is_empty() {
            return Ok(());
        }
        let tail = self.tail.as_mut().ok_or_else(closed)?;
        tail.seek(SeekFrom::End(0))?;
        tail.write_all(data)?;
        self.tail_len += data.len() as u64;
        if self.tail_len > 2 * self.tail_cap {
            self.trim_tail()?;
        }
        Ok(())
    }

    fn trim_tail(&mut self) -> io::Result<()> {
        let keep = self.tail_cap;
        let mut kept = vec![0u8; keep as usize];
        let Some(tail) = self.tail.as_mut() else {
            return Ok(());
        };
        tail.seek(SeekFrom::Start(self.tail_len - keep))?;
        tail.read_exact(&mut kept)?;
        tail.set_len(0)?;
        tail.seek(SeekFrom::Start(0))?;
        tail.write_all(&kept)?;
        self.dropped += self.tail_len - keep;
        self.tail_len = keep;
        Ok(())
    }

    /// Head, a marker when bytes were dropped, then the tail.
    pub fn read_all(&self) -> io::Result<Vec<u8>> {
        let mut out = std::fs::read(&self.head_path)?;
        if self.dropped > 0 {
            out.extend_from_slice(
                format!("\r\n[relay: {} bytes dropped]\r\n", self.dropped).as_bytes(),
            );
        }
        out.extend(std::fs::read(&self.tail_path)?);
        if let Some(reason) = &self.cut {
            out.extend_from_slice(
                format!(
                    "\r\n[relay: log cut here: {reason}; {} more bytes not written]\r\n",
                    self.unwritten
                )
                .as_bytes(),
            );
        }
        Ok(out)
    }

    /// Closes both files (the session has ended): the log stays readable by path.
    pub fn close(&mut self) {
        self.head = None;
        self.tail = None;
    }

    pub fn remove(&self) {
        let _ = std::fs::remove_file(&self.head_path);
        let _ = std::fs::remove_file(&self.tail_path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn ring_keeps_the_last_bytes() {
        let mut r = Ring::new(4);
        r.push(b"ab");
        r.push(b"cdef");
        assert_eq!(r.contents(), b"cdef");
        r.push(b"0123456");
        assert_eq!(r.contents(), b"3456");
    }

    #[test]
    fn disk_log_keeps_head_and_rolling_tail_in_0600_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = DiskLog::with_caps(dir.path(), "s1", 4, 3).unwrap();
        log.append(b"HEAD").unwrap();
        log.append(b"abcdefg").unwrap(); // tail 7 > 6: trimmed to "efg"
        log.append(b"hi").unwrap();
        let text = String::from_utf8(log.read_all().unwrap()).unwrap();
        assert_eq!(text, "HEAD\r\n[relay: 4 bytes dropped]\r\nefghi");
        for f in ["s1.head", "s1.tail"] {
            let mode = std::fs::metadata(dir.path().join(f))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
        log.remove();
        assert!(!dir.path().join("s1.head").exists());
    }

    #[test]
    fn a_failed_write_cuts_the_log_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = DiskLog::with_caps(dir.path(), "s1", 4, 8).unwrap();
        log.append(b"HEADtail").unwrap();
        // A tail that refuses writes (opened read-only) stands in for a full disk.
        log.tail = Some(File::open(dir.path().join("s1.tail")).unwrap());
        assert!(log.append(b"lost").is_err());
        log.append(b"more").unwrap();
        let text = String::from_utf8(log.read_all().unwrap()).unwrap();
        assert!(
            text.starts_with("HEADtail\r\n[relay: log cut here: ")
                && text.ends_with("; 8 more bytes not written]\r\n"),
            "{text:?}"
        );
    }
}
