//! Messages a person met and could not act on (issue 40, "Unclear messages"), each
//! now naming the thing, the place and the next step, as the real CLI prints them.
//! The settings file's own messages are `settings_errors.rs`.

use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Stdio};

use relay::daemon::diagnostics::scan::needles;
use relay_e2e::daemon::{base_settings, Relay, TOKEN_SETTING};
use relay_e2e::tmpfs::Tmpfs;
use relay_e2e::{fake_token, wait, WAIT};

/// The stderr of a finished command, which must have failed with status 1.
fn refused(mut cmd: Command, what: &str) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{what}: {stderr}");
    stderr
}

/// One table: what the person did, and the sentence they now read on stderr.
#[test]
fn each_unclear_message_names_the_thing_the_place_and_the_next_step() {
    let r = Relay::start(base_settings(Some(TOKEN_SETTING)));
    let token = fake_token();
    let token_file = r.token_path();
    let run = |args: &[&str]| r.cli_command(args);

    // `--config-dir` naming a file.
    let file = r.home.join("notes.txt");
    std::fs::write(&file, "x").unwrap();
    let on_file = {
        let mut c = Command::new(r.relay_bin());
        c.arg("--config-dir").arg(&file).arg("status");
        c.env_clear()
            .env("HOME", &r.home)
            .env("PATH", "/usr/bin:/bin");
        c
    };
    let config_file = format!(
        "--config-dir {} is a file, not a folder: relay keeps its settings.json, socket and \
         logs in a folder; name a folder (relay makes it when missing), or leave \
         --config-dir out for the default, {}/.config/relay\n",
        file.display(),
        r.home.display()
    );

    // The current folder deleted under the shell.
    let gone = r.home.join("project/gone");
    std::fs::create_dir_all(&gone).unwrap();
    let mut in_gone = Command::new("/bin/sh");
    in_gone
        .arg("-c")
        .arg(r#"cd "$1" && rmdir "$1" && shift && exec "$@""#)
        .arg("sh")
        .arg(&gone)
        .arg(r.relay_bin())
        .arg("--config-dir")
        .arg(&r.config)
        .args(["sandbox", "shell", "--", "-c", "true"])
        .env_clear()
        .env("HOME", &r.home)
        .env("PATH", "/usr/bin:/bin");
    let deleted = "the current folder no longer exists (it was deleted or moved after this \
                   shell entered it): cd into a folder that exists, such as your project's, \
                   and run the command again\n";

    // A folder whose name is not UTF-8.
    let odd = r.project.join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
    std::fs::create_dir_all(&odd).unwrap();
    let mut in_odd = run(&["sandbox", "shell", "--", "-c", "true"]);
    in_odd.current_dir(&odd);
    let not_utf8 = format!(
        "the current folder's name is not UTF-8 ({}/caf\u{fffd}), and relay names folders \
         in UTF-8: rename the folder to a UTF-8 name, or run relay sandbox from a folder \
         whose name is UTF-8\n",
        r.project.display()
    );

    let table: Vec<(&str, Command, String)> = vec![
        ("--config-dir <a file>", on_file, config_file),
        ("a deleted current folder", in_gone, deleted.to_string()),
        ("a folder named in Latin-1", in_odd, not_utf8),
    ];
    for (what, cmd, want) in table {
        let stderr = refused(cmd, what);
        assert_eq!(stderr, format!("error: {want}"), "{what}");
    }

    // The token file missing: where the token comes from and how to save it.
    let dir = token_file.parent().unwrap();
    let stderr = refused(
        run(&["session", "start", "--project", "p1"]),
        "no token file",
    );
    assert!(
        stderr.contains(&format!(
            "claude_token_file {}: does not exist; run `claude setup-token` and save the one \
             line it prints in that file, readable by you alone: mkdir -p {} && install -m \
             600 /dev/null {}, then paste it into {}",
            token_file.display(),
            dir.display(),
            token_file.display(),
            token_file.display()
        )),
        "{stderr}"
    );

    // The token pasted twice: refused at launch (fail closed), the file named, never
    // its content, in any encoding, anywhere relay writes.
    r.write_token(&format!("{token}\n{token}"));
    let stderr = refused(run(&["session", "start", "--project", "p1"]), "token twice");
    assert!(
        stderr.contains(&format!(
            "claude_token_file {}: holds 2 lines, and a token is one (pasted twice?): keep \
             only the one line `claude setup-token` printed",
            token_file.display()
        )),
        "{stderr}"
    );
    r.wait_event(|e| {
        e["name"] == "session.launch"
            && e["status"] == "error"
            && e["reason"]
                .as_str()
                .is_some_and(|t| t.contains(": holds 2 lines"))
    });
    assert!(r.start_lines().is_empty(), "a Claude was started");
    let mut seen = stderr.into_bytes();
    seen.extend(std::fs::read(r.config.join("audit.jsonl")).unwrap_or_default());
    seen.extend(std::fs::read(r.config.join("events.jsonl")).unwrap_or_default());
    seen.extend(r.output());
    let hex: String = token.bytes().map(|b| format!("{b:02x}")).collect();
    let mut forms = needles(token.as_bytes());
    forms.push(("hex", hex.into_bytes()));
    for (form, n) in forms {
        assert!(
            !seen.windows(n.len()).any(|w| w == n.as_slice()),
            "the token ({form}) was written where it must not be"
        );
    }
}

/// `relay serve` on a full disk names the file it could not write, the disk, and what
/// to do (issue 40: it said `ready.json: No space left on device`).
#[test]
fn relay_serve_on_a_full_disk_names_the_file_and_the_disk_to_free() {
    // Safety: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root");
        eprintln!("skip: mounting a small tmpfs needs root");
        return;
    }
    let r = Relay::prepare(None, false);
    let Some(disk) = Tmpfs::mount(&r.config, "256k") else {
        return;
    };
    r.write_settings(&base_settings(None));
    disk.fill();
    let mut serve = r.serve_command();
    serve.stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = serve.spawn().expect("relay serve");
    let st = wait::child_within(&mut child, WAIT).expect("relay serve gave up");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(st.code(), Some(1), "{stderr}");
    let config = r.config.display();
    assert!(
        stderr.contains(&format!("error: cannot write {config}/"))
            && stderr.contains(&format!(
                "No space left on device (os error 28): the disk holding {config} is full; \
                 free some space there (`df -h {config}` shows what is left) and start relay \
                 again"
            )),
        "{stderr}"
    );
    drop(disk);
}
