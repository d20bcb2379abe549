//! Session ids and secrets: random hex from the kernel's generator, the ids relay mints
//! and how to tell one.

use crate::protocol::SessionKind;

/// `bytes` random bytes as lowercase hex, from the kernel's generator (`getrandom` on
/// Linux, `getentropy` elsewhere): no descriptor is opened, so descriptor pressure
/// cannot stop relay from minting secrets. An error is the caller's to answer; the
/// daemon never exits over it once started.
pub fn random_hex(bytes: usize) -> std::io::Result<String> {
    let mut buf = vec![0u8; bytes];
    fill_random(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn fill_random(buf: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // Safety: the kernel writes at most `rest.len()` bytes into `rest`, which is a
        // live, exclusively borrowed slice.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        done += n as usize;
    }
    Ok(())
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn fill_random(buf: &mut [u8]) -> std::io::Result<()> {
    // getentropy takes at most 256 bytes per call.
    for chunk in buf.chunks_mut(256) {
        // Safety: the kernel writes exactly `chunk.len()` (≤ 256) bytes into `chunk`, a
        // live, exclusively borrowed slice.
        if unsafe { libc::getentropy(chunk.as_mut_ptr().cast(), chunk.len()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

pub fn new_id(kind: SessionKind) -> std::io::Result<String> {
    let prefix = match kind {
        SessionKind::Claude => "s",
        SessionKind::Pty => "t",
    };
    Ok(format!("{prefix}-{}", random_hex(6)?))
}

/// A session id relay minted: `s-` or `t-` and 12 lowercase hex characters.
pub fn is_relay_id(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == 14
        && matches!(b[0], b's' | b't')
        && b[1] == b'-'
        && b[2..]
            .iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relay_ids_only() {
        assert!(is_relay_id("s-0123456789ab"));
        assert!(is_relay_id("t-abcdef012345"));
        for bad in [
            "s-0123456789a",
            "x-0123456789ab",
            "s-0123456789AB",
            "s_0123456789ab",
            "../x",
        ] {
            assert!(!is_relay_id(bad), "{bad}");
        }
    }
}
