//! A fake of macOS's `/usr/bin/sandbox-exec` for Linux e2e tests.
//!
//! `sandbox-exec [-D NAME=VALUE]… -f PROFILE [--] CMD [ARGS…]`: refuse a profile that is not well-formed
//! SBPL ([`crate::sbpl`]) or that the evaluator does not understand ([`crate::sbpl_eval`]),
//! record what was asked (`$TMPDIR/fake-sandbox-exec.jsonl`) and a copy of the profile
//! (`$TMPDIR/fake-sandbox-exec/<sha256>.sb`, so a test can read what was enforced after
//! relay removed the original), ask the evaluator every question the launch's policy
//! implies ([`crate::sbpl_questions`]) and record the answers
//! (`$TMPDIR/fake-sandbox-exec-answers.jsonl`, one line per launch), then `execvp` the
//! command.
//!
//! It enforces nothing: the answers say what Seatbelt would decide, the tests read them. What it must not do is change the descriptor table it was given:
//! the shim's fd hygiene is tested through it, so every fd reaches the command exactly as
//! inherited (no close, dup or flag change; the files this fake opens are close-on-exec
//! and closed before the exec).

use std::ffi::{CString, OsString};
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::call_log::{self, JsonLine};
use crate::sbpl_eval::Profile;
use crate::sbpl_questions::{self, Policy};

/// Largest profile read.
pub const MAX_PROFILE_BYTES: u64 = 1024 * 1024;
/// The command line is not `-f PROFILE [--] CMD …` (sysexits `EX_USAGE`).
pub const EXIT_USAGE: i32 = 64;
/// The profile cannot be read or is not well-formed (sysexits `EX_DATAERR`).
pub const EXIT_PROFILE_REFUSED: i32 = 65;
/// `execvp` failed for a reason other than "not found" (as a shell reports it).
pub const EXIT_EXEC_FAILED: i32 = 126;
/// `execvp` found no such command (as a shell reports it).
pub const EXIT_NOT_FOUND: i32 = 127;

/// The parameter relay's shim binds to the session's own terminal (`/dev/null` when it
/// has none), which the profile reads as `(param "RELAY_TTY")`.
pub const TTY_PARAM: &str = "RELAY_TTY";

/// Call log file name under `$TMPDIR`.
pub const CALL_LOG: &str = "fake-sandbox-exec.jsonl";
/// Folder under `$TMPDIR` that holds one copy of each profile, named by its digest.
pub const PROFILE_COPIES: &str = "fake-sandbox-exec";

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub struct Invocation {
    /// `-D NAME=VALUE` pairs, in order: what `(param "NAME")` reads in the profile.
    pub params: Vec<(String, Vec<u8>)>,
    /// The profile path as given.
    pub profile: OsString,
    /// CMD and its ARGS; never empty.
    pub command: Vec<OsString>,
}

/// Parses `argv` (including argv[0]).
pub fn parse_args(argv: &[OsString]) -> Result<Invocation, String> {
    use std::os::unix::ffi::OsStrExt;
    let usage =
        || "usage: sandbox-exec [-D NAME=VALUE]... -f PROFILE [--] CMD [ARGS...]".to_string();
    let mut params = Vec::new();
    let mut argv = argv.get(1..).unwrap_or_default();
    while let [flag, pair, rest @ ..] = argv {
        if flag != "-D" {
            break;
        }
        let bytes = pair.as_bytes();
        let eq = bytes.iter().position(|&b| b == b'=').ok_or_else(usage)?;
        let name = std::str::from_utf8(&bytes[..eq]).map_err(|_| usage())?;
        params.push((name.to_string(), bytes[eq + 1..].to_vec()));
        argv = rest;
    }
    let [flag, profile, rest @ ..] = argv else {
        return Err(usage());
    };
    if flag != "-f" {
        return Err(usage());
    }
    let rest = match rest {
        [dashes, after @ ..] if dashes == "--" => after,
        _ => rest,
    };
    if rest.is_empty() {
        return Err(usage());
    }
    Ok(Invocation {
        params,
        profile: profile.clone(),
        command: rest.to_vec(),
    })
}

/// The whole fake: check, record, exec. Returns only by exiting.
pub fn run() -> ! {
    adopt_target();
    let argv: Vec<OsString> = std::env::args_os().collect();
    let invocation = match parse_args(&argv) {
        Ok(invocation) => invocation,
        Err(usage) => fail(EXIT_USAGE, &usage),
    };
    let profile_path = Path::new(&invocation.profile);
    let shown = profile_path.display();
    let profile = match read_profile(profile_path) {
        Ok(bytes) => bytes,
        Err(reason) => fail(EXIT_PROFILE_REFUSED, &format!("profile {shown}: {reason}")),
    };
    if let Err(err) = crate::sbpl::check(&profile) {
        fail(EXIT_PROFILE_REFUSED, &format!("profile {shown}: {err}"));
    }
    let evaluated = match Profile::parse_with(&profile, &invocation.params) {
        Ok(evaluated) => evaluated,
        Err(err) => fail(
            EXIT_PROFILE_REFUSED,
            &format!("profile {shown}: the evaluator cannot read it: {err}"),
        ),
    };
    if let Err(err) = record(&invocation, &profile) {
        fail(crate::EXIT_RECORD_FAILED, &err);
    }
    let tty = invocation
        .params
        .iter()
        .find(|(name, _)| name == TTY_PARAM)
        .map(|(_, v)| v.as_slice());
    if let Err(err) = record_answers(&evaluated, &call_log::sha256_hex(&profile), tty) {
        fail(crate::EXIT_RECORD_FAILED, &err);
    }
    exec(&invocation.command)
}

/// relay's shim starts the launcher with the target's environment and folder as data
/// (`relay_shim::target`), applied inside by `relay-shim enter`. This fake records and
/// asks its questions where the target will be: its `TMPDIR`, its policy variable and
/// its folder, taken from that data. (The real `sandbox-exec` needs none of them.)
fn adopt_target() {
    let Ok(target) = relay_shim::target::Target::from_process() else {
        return;
    };
    for name in ["TMPDIR", "HOME", "HTTPS_PROXY", sbpl_questions::POLICY_ENV] {
        if let Some(v) = target.var(name) {
            // Single-threaded: nothing else reads the environment meanwhile.
            std::env::set_var(name, v);
        }
    }
    if let Some(cwd) = &target.cwd {
        let _ = std::env::set_current_dir(cwd);
    }
}

/// Asks the questions of this launch ([`crate::sbpl_questions`]) and appends one line:
/// `{pid, sha256, policy, failures, answers: […]}`. A policy file that is named but
/// cannot be read is an error: a harness bug must not pass as "nothing to check".
fn record_answers(profile: &Profile, sha256: &str, tty: Option<&[u8]>) -> Result<(), String> {
    let policy_path = std::env::var_os(sbpl_questions::POLICY_ENV).filter(|p| !p.is_empty());
    let policy = match &policy_path {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("policy {}: {e}", Path::new(path).display()))?;
            Policy::from_json(&text)
                .map_err(|e| format!("policy {}: {e}", Path::new(path).display()))?
        }
        None => Policy::default(),
    };
    let mut policy = policy;
    if policy.network_proxied {
        // The port the launch was told; a proxied launch told none is a wrong answer
        // (asked as port 0, which nothing allows).
        policy.proxy_port = std::env::var("HTTPS_PROXY")
            .ok()
            .and_then(|u| u.rsplit(':').next().and_then(|p| p.parse().ok()));
    }
    let cwd = std::env::current_dir().map_err(|e| format!("working directory: {e}"))?;
    let tmp = std::env::var_os("TMPDIR")
        .filter(|t| !t.is_empty())
        .map(PathBuf::from);
    let home = policy.home.clone().or_else(|| {
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
    });
    let mut questions = sbpl_questions::questions(&policy, &cwd, tmp.as_deref());
    questions.extend(crate::sbpl_escapes::questions(
        tty,
        home.as_deref(),
        policy.network_shared,
        &policy.macos,
    ));
    let answers = sbpl_questions::answer(profile, questions)?;
    let failures = answers.iter().filter(|a| !a.ok()).count();
    let line = JsonLine::new()
        .field("pid", std::process::id())
        .field("sha256", sha256)
        .field(
            "policy",
            policy_path.map(|p| Path::new(&p).display().to_string()),
        )
        .field("failures", failures)
        .objects("answers", answers.iter().map(|a| a.to_json()).collect())
        .finish();
    let log = call_log::tmp_dir().join(sbpl_questions::ANSWERS_LOG);
    call_log::append_line(&log, &line).map_err(|err| format!("answers {}: {err}", log.display()))
}

fn read_profile(path: &Path) -> Result<Vec<u8>, String> {
    let file = File::open(path).map_err(|err| err.to_string())?;
    let mut bytes = Vec::new();
    file.take(MAX_PROFILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| err.to_string())?;
    if bytes.len() as u64 > MAX_PROFILE_BYTES {
        return Err(format!("larger than {MAX_PROFILE_BYTES} bytes"));
    }
    Ok(bytes)
}

/// Saves the profile copy, then appends the call-log line. The copy comes first so that a
/// test which sees the line can always open the copy it names.
fn record(invocation: &Invocation, profile: &[u8]) -> Result<(), String> {
    let tmp = call_log::tmp_dir();
    let sha256 = call_log::sha256_hex(profile);
    save_copy(&tmp.join(PROFILE_COPIES), &sha256, profile)?;

    let lossy = |s: &OsString| s.to_string_lossy().into_owned();
    let (enter, target) = split_enter(&invocation.command);
    let line = JsonLine::new()
        .field("profile", lossy(&invocation.profile))
        .field("sha256", sha256)
        .field("argv", target.iter().map(lossy).collect::<Vec<_>>())
        .field("enter", enter.iter().map(lossy).collect::<Vec<_>>())
        .field(
            "params",
            invocation
                .params
                .iter()
                .map(|(n, v)| format!("{n}={}", String::from_utf8_lossy(v)))
                .collect::<Vec<_>>(),
        )
        .field("pid", std::process::id())
        .finish();
    let log = tmp.join(CALL_LOG);
    call_log::append_line(&log, &line).map_err(|err| format!("call log {}: {err}", log.display()))
}

/// `relay-shim enter [--pty] -- TARGET…` split into the shim's part and the target's, so
/// the log's `argv` is what runs inside whichever way relay starts it.
fn split_enter(command: &[OsString]) -> (&[OsString], &[OsString]) {
    let is_shim = command
        .first()
        .and_then(|p| Path::new(p).file_name())
        .is_some_and(|n| n == "relay-shim");
    if is_shim && command.get(1).is_some_and(|a| a == "enter") {
        if let Some(i) = command.iter().position(|a| a == "--") {
            return (&command[..=i], &command[i + 1..]);
        }
    }
    (&[], command)
}

/// Writes `<dir>/<sha256>.sb` (dir 0700, file 0600) through a private temporary name and a
/// rename, so two launches of one profile never show a reader a half-written copy.
fn save_copy(dir: &Path, sha256: &str, profile: &[u8]) -> Result<(), String> {
    let shown = |path: &Path, err: io::Error| format!("profile copy {}: {err}", path.display());
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(shown(dir, err)),
    }
    let target = dir.join(format!("{sha256}.sb"));
    let partial: PathBuf = dir.join(format!(".{sha256}.sb.{}.partial", std::process::id()));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .and_then(|mut file| file.write_all(profile));
    if let Err(err) = written {
        let _ = std::fs::remove_file(&partial);
        return Err(shown(&partial, err));
    }
    std::fs::rename(&partial, &target).map_err(|err| {
        let _ = std::fs::remove_file(&partial);
        shown(&target, err)
    })
}

/// `execvp(command[0], command)`, leaving every descriptor alone.
fn exec(command: &[OsString]) -> ! {
    let shown = command[0].to_string_lossy().into_owned();
    // An argument from the OS cannot hold a NUL byte, so this only guards the invariant.
    let args: Result<Vec<CString>, _> = command
        .iter()
        .map(|arg| CString::new(arg.clone().into_vec()))
        .collect();
    let args = match args {
        Ok(args) => args,
        Err(_) => fail(
            EXIT_EXEC_FAILED,
            &format!("execvp {shown}: argument holds a NUL byte"),
        ),
    };
    let mut pointers: Vec<*const libc::c_char> = args.iter().map(|arg| arg.as_ptr()).collect();
    pointers.push(std::ptr::null());

    // Rust's runtime ignores SIGPIPE at start-up and an ignored signal survives exec. The
    // real sandbox-exec hands the command the default disposition, and so does std's
    // Command; do the same so the command sees what it would see on macOS.
    // Safety: restoring SIG_DFL for SIGPIPE installs no handler and touches no memory.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };

    // Safety: `args` owns NUL-terminated strings that outlive the call, and `pointers` is
    // a NULL-terminated array of pointers into them, as execvp requires.
    unsafe { libc::execvp(pointers[0], pointers.as_ptr()) };
    let err = io::Error::last_os_error();
    let code = if err.raw_os_error() == Some(libc::ENOENT) {
        EXIT_NOT_FOUND
    } else {
        EXIT_EXEC_FAILED
    };
    fail(code, &format!("execvp {shown}: {err}"))
}

fn fail(code: i32, reason: &str) -> ! {
    // One line, as the real tool prints its refusals; a failed stderr write has no better
    // place to go.
    let _ = writeln!(io::stderr(), "sandbox-exec: {reason}");
    std::process::exit(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn parses_profile_and_command() {
        assert_eq!(
            parse_args(&args(&[
                "sandbox-exec",
                "-f",
                "/p.sb",
                "/bin/echo",
                "a",
                "-f"
            ])),
            Ok(Invocation {
                params: vec![],
                profile: "/p.sb".into(),
                command: args(&["/bin/echo", "a", "-f"]),
            })
        );
    }

    #[test]
    fn parameters_come_before_the_profile() {
        let inv = parse_args(&args(&[
            "sandbox-exec",
            "-D",
            "RELAY_TTY=/dev/ttys003",
            "-D",
            "X=a=b",
            "-f",
            "p",
            "cmd",
        ]))
        .unwrap();
        assert_eq!(
            inv.params,
            vec![
                ("RELAY_TTY".to_string(), b"/dev/ttys003".to_vec()),
                ("X".to_string(), b"a=b".to_vec())
            ]
        );
        assert_eq!(inv.command, args(&["cmd"]));
        assert!(parse_args(&args(&["sandbox-exec", "-D", "novalue", "-f", "p", "c"])).is_err());
    }

    #[test]
    fn double_dash_before_command_is_dropped_once() {
        assert_eq!(
            parse_args(&args(&["sandbox-exec", "-f", "p", "--", "--", "x"]))
                .unwrap()
                .command,
            args(&["--", "x"])
        );
    }

    #[test]
    fn missing_parts_are_usage_errors() {
        for argv in [
            &["sandbox-exec"][..],
            &["sandbox-exec", "-f"],
            &["sandbox-exec", "-f", "p"],
            &["sandbox-exec", "-f", "p", "--"],
            &["sandbox-exec", "-p", "(version 1)", "cmd"],
            &["sandbox-exec", "cmd"],
        ] {
            assert!(parse_args(&args(argv)).is_err(), "{argv:?}");
        }
    }

    #[test]
    fn profile_copy_is_0600_in_a_0700_dir() {
        use std::os::unix::fs::PermissionsExt;
        let base = std::env::temp_dir().join(format!("relay-fakes-copy-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        let dir = base.join(PROFILE_COPIES);
        save_copy(&dir, "abc", b"(version 1)").unwrap();
        save_copy(&dir, "abc", b"(version 1)").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("abc.sb")), 0o600);
        assert_eq!(std::fs::read(dir.join("abc.sb")).unwrap(), b"(version 1)");
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
