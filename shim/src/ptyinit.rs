//! `relay-shim pty-init -- ARGV`, the first program inside a bwrap sandbox of a pty
//! session.
//!
//! Why: with `--unshare-pid`, the process group the shim made the pty's foreground
//! group lies outside the sandbox's pid namespace. A job-control shell inside records
//! that group as "0" and fails to give the terminal back to it when it exits
//! ("Cannot set tty process group"), so the session's exit status is lost. pty-init
//! starts a process group inside the namespace, makes it the pty's foreground group
//! (allowed: same session, no capability needed) and execs the target in it.

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;

pub(crate) fn run(argv: &[OsString]) -> ! {
    // Safety: plain syscalls on our own process and descriptor 0; the signal
    // dispositions are restored before exec.
    unsafe {
        libc::setpgid(0, 0);
        if libc::isatty(0) == 1 {
            let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
            libc::tcsetpgrp(0, libc::getpgrp());
            libc::signal(libc::SIGTTOU, old);
        }
    }
    let cargs: Vec<CString> = match argv.iter().map(|a| CString::new(a.as_bytes())).collect() {
        Ok(v) => v,
        Err(_) => die("argument holds NUL", 64),
    };
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // Safety: NUL-terminated strings and a NULL-terminated array that outlive the call.
    unsafe { libc::execvp(ptrs[0], ptrs.as_ptr()) };
    let e = std::io::Error::last_os_error();
    let code = if e.raw_os_error() == Some(libc::ENOENT) {
        127
    } else {
        126
    };
    die(&format!("exec {}: {e}", argv[0].to_string_lossy()), code)
}

fn die(msg: &str, code: i32) -> ! {
    eprintln!("relay-shim: pty-init: {msg}");
    std::process::exit(code)
}
