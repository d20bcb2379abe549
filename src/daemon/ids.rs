//! Random ids and secrets.

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
