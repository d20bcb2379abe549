//! `relay-shim enter [--pty] -- ARGV`, the first program inside a sandbox: it gives the
//! target its environment and working folder, which reach it as data
//! ([`crate::target`]), and execs it. Outside the sandbox nothing is ever started with
//! them (the shim and the launcher get [`crate::target::TARGET_VAR`] alone and `/`).
//!
//! With `--pty` (a terminal under bwrap): with `--unshare-pid`, the process group the
//! shim made the pty's foreground group lies outside the sandbox's pid namespace. A
//! job-control shell inside records that group as "0" and fails to give the terminal
//! back to it when it exits ("Cannot set tty process group"), so the session's exit
//! status is lost. So enter first starts a process group inside the namespace and makes
//! it the pty's foreground group (allowed: same session, no capability needed).

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;

use crate::exit_codes;
use crate::target::Target;

pub(crate) fn run(pty: bool, argv: &[OsString]) -> ! {
    let mut target = match Target::from_process() {
        Ok(t) => t,
        Err(e) => die(&e, exit_codes::USAGE),
    };
    if pty {
        // Safety: plain syscalls on our own process and descriptor 0; the signal
        // disposition is restored right after.
        unsafe {
            libc::setpgid(0, 0);
            if libc::isatty(0) == 1 {
                let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
                libc::tcsetpgrp(0, libc::getpgrp());
                libc::signal(libc::SIGTTOU, old);
            }
        }
    }
    if let Some(cwd) = &target.cwd {
        if let Err(e) = std::env::set_current_dir(cwd) {
            die(
                &format!("working folder {}: {e}", cwd.display()),
                exit_codes::SETUP,
            );
        }
    }
    // A proxied sandbox: the forwarder listens before the target starts, and the
    // variable that described it is not the target's.
    if let Some(value) = target.var(crate::forward::FORWARD_VAR) {
        let plan = crate::forward::Plan::parse(&value.to_string_lossy())
            .unwrap_or_else(|e| die(&format!("forwarder: {e}"), exit_codes::SETUP));
        target
            .env
            .retain(|(k, _)| k.as_bytes() != crate::forward::FORWARD_VAR.as_bytes());
        if let Err(e) = crate::forward::start(&plan) {
            die(&format!("forwarder: {e}"), exit_codes::SETUP);
        }
    }
    let cargs: Vec<CString> = match argv.iter().map(|a| CString::new(a.as_bytes())).collect() {
        Ok(v) => v,
        Err(_) => die("argument holds NUL", exit_codes::USAGE),
    };
    let envp = target.envp();
    let mut ptrs: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let mut env_ptrs: Vec<*const libc::c_char> = envp.iter().map(|c| c.as_ptr()).collect();
    env_ptrs.push(std::ptr::null());
    // The shim resolved the target to an absolute path before the sandbox: no lookup.
    // Safety: NUL-terminated strings and NULL-terminated arrays that outlive the call.
    unsafe { libc::execve(ptrs[0], ptrs.as_ptr(), env_ptrs.as_ptr()) };
    let e = std::io::Error::last_os_error();
    let code = if e.raw_os_error() == Some(libc::ENOENT) {
        exit_codes::NOT_FOUND
    } else {
        exit_codes::NOT_EXECUTABLE
    };
    die(&format!("exec {}: {e}", argv[0].to_string_lossy()), code)
}

fn die(msg: &str, code: i32) -> ! {
    eprintln!("relay-shim: enter: {msg}");
    std::process::exit(code)
}
