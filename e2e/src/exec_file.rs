//! Programs a test makes and then runs, made so that no process of the test binary ever
//! holds one open for writing (docs/testing.md#programs-a-test-makes).
//!
//! Linux refuses to run a file that any process holds open for writing (`ETXTBSY`,
//! "Text file busy"). A file the test process writes itself (`std::fs::copy`,
//! `std::fs::write`) is open for writing there while it is written, and a sibling test
//! thread that forks meanwhile hands its child a copy of that descriptor, held until
//! the child's own exec. An exec of the new file in that window fails, whoever runs it:
//! the test, relay or the host. Close-on-exec does not help (the window ends at the
//! exec), and neither does a rename (the inode stays the one held).
//!
//! So the bytes are written by a child process, `cp`, which the test waits for: its
//! descriptor lives in its own table only, and is gone when it exits. The copy is made
//! beside the destination under a temporary name and renamed over it, so a program
//! running at the destination is replaced, never written into.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::random_hex;

/// `dst` becomes a copy of the program `src`, with its permission bits.
pub fn copy_executable(src: &Path, dst: &Path) {
    let mode = std::fs::metadata(src)
        .unwrap_or_else(|e| panic!("{}: {e}", src.display()))
        .permissions()
        .mode();
    copy_into_place(src, dst, mode);
}

/// `dst` becomes an executable file (0755) holding `body`: a script, most often. The
/// bytes go to a file beside it first, which is never run, and `cp` makes the program.
pub fn write_executable(dst: &Path, body: impl AsRef<[u8]>) {
    let source = beside(dst, "src");
    std::fs::write(&source, body).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
    copy_into_place(&source, dst, 0o755);
    std::fs::remove_file(&source).unwrap();
}

/// A name beside `dst` for a step of its making.
fn beside(dst: &Path, what: &str) -> PathBuf {
    let name = dst.file_name().expect("a file name").to_string_lossy();
    dst.with_file_name(format!(".{name}.{}.{what}", random_hex(6)))
}

/// `cp src` to a name beside `dst`, its mode set, then renamed over `dst`.
fn copy_into_place(src: &Path, dst: &Path, mode: u32) {
    let part = beside(dst, "part");
    let out = Command::new("cp")
        .arg("--")
        .arg(src)
        .arg(&part)
        .stdin(Stdio::null())
        .output()
        .expect("run cp");
    assert!(
        out.status.success(),
        "cp {} {}: {}",
        src.display(),
        part.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    // chmod and rename go by path: no descriptor of the file is opened here.
    std::fs::set_permissions(&part, std::fs::Permissions::from_mode(mode)).unwrap();
    std::fs::rename(&part, dst)
        .unwrap_or_else(|e| panic!("{} -> {}: {e}", part.display(), dst.display()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// The race the module closes, as the suite meets it: threads forking all the
    /// time while this one makes programs and runs each at once. With `std::fs::copy`
    /// in `copy_into_place` instead of `cp`, 7 to 13 of these 300 runs failed with
    /// `ETXTBSY` on a two-core machine (docs/testing.md#programs-a-test-makes); with
    /// `cp`, none may.
    #[test]
    fn a_program_just_made_runs_while_other_threads_fork() {
        let dir = tempfile::tempdir().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let forkers: Vec<_> = (0..4)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let _ = Command::new("true").status();
                    }
                })
            })
            .collect();
        let mut busy = Vec::new();
        for i in 0..150 {
            let copy = dir.path().join(format!("copy-{i}"));
            copy_executable(Path::new("/bin/sh"), &copy);
            let script = dir.path().join(format!("script-{i}"));
            write_executable(&script, "#!/bin/sh\nexit 3\n");
            for (program, args) in [(&copy, &["-c", "exit 3"][..]), (&script, &[][..])] {
                match Command::new(program).args(args).status() {
                    Ok(s) => assert_eq!(s.code(), Some(3), "{}", program.display()),
                    Err(e) => busy.push(format!("{}: {e}", program.display())),
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        for f in forkers {
            f.join().unwrap();
        }
        assert!(busy.is_empty(), "{} runs failed: {busy:?}", busy.len());
        // Nothing left beside them: each made file is the program itself.
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        names.sort();
        assert_eq!(names, Vec::<String>::new());
    }

    #[test]
    fn a_program_is_replaced_by_rename_and_keeps_or_gets_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::write(&src, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o750)).unwrap();
        let dst = dir.path().join("dst");
        std::fs::write(&dst, "old").unwrap();
        let held = std::fs::File::open(&dst).unwrap();
        copy_executable(&src, &dst);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&dst), 0o750);
        assert_eq!(std::fs::read_to_string(&dst).unwrap(), "#!/bin/sh\n");
        // The old file was replaced, not written: what held it still reads it.
        let mut old = String::new();
        std::io::Read::read_to_string(&mut &held, &mut old).unwrap();
        assert_eq!(old, "old");
        write_executable(&dst, "#!/bin/sh\necho hi\n");
        assert_eq!(mode(&dst), 0o755);
        assert_eq!(
            std::fs::read_to_string(&dst).unwrap(),
            "#!/bin/sh\necho hi\n"
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }
}
