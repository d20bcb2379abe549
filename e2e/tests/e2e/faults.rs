//! Issue 12: relay under load and under faults. `relay sandbox` never loses a run, and
//! each fault (a host, a daemon or a shim killed, a token file rewritten under
//! launches, a settings file broken mid-run, targets that flood or never read, a full
//! disk, a host of another protocol version) leaves nothing lost and nothing behind
//! (docs/testing.md, "Faults").

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use relay_e2e::daemon::{base_settings, Relay};
use relay_e2e::{wait, WAIT};
use serde_json::{json, Value};

/// `n` runs of `relay sandbox shell -- -c SCRIPT(i)` started at once, as child
/// processes with no terminal (stdin null, stdout and stderr piped); each one's exit
/// code, stdout and stderr once they all ended.
fn sandbox_runs_at_once(
    r: &Relay,
    n: usize,
    script: impl Fn(usize) -> String,
) -> Vec<(i32, String, String)> {
    let children: Vec<Child> = (0..n)
        .map(|i| {
            let s = script(i);
            let mut cmd: Command = r.cli_command(&["sandbox", "shell", "--", "-c", &s]);
            cmd.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            cmd.spawn().expect("spawn relay sandbox")
        })
        .collect();
    // Read every child's pipes on its own thread, so none blocks on a full pipe.
    let readers: Vec<_> = children
        .into_iter()
        .map(|mut c| {
            std::thread::spawn(move || {
                use std::io::Read;
                let mut out = Vec::new();
                let mut err = Vec::new();
                let mut so = c.stdout.take().unwrap();
                let mut se = c.stderr.take().unwrap();
                let t = std::thread::spawn(move || {
                    let _ = se.read_to_end(&mut err);
                    err
                });
                let _ = so.read_to_end(&mut out);
                let err = t.join().unwrap_or_default();
                let st = wait::child_within(&mut c, WAIT * 2);
                let code = match st {
                    Some(st) => st.code().unwrap_or(-1),
                    None => {
                        let _ = c.kill();
                        -2
                    }
                };
                (
                    code,
                    String::from_utf8_lossy(&out).into_owned(),
                    String::from_utf8_lossy(&err).into_owned(),
                )
            })
        })
        .collect();
    readers.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn sixty_four_relay_sandbox_runs_at_once_each_print_their_line_and_exit_4() {
    let r = Relay::start(base_settings(None));
    let runs = sandbox_runs_at_once(&r, 64, |i| format!("echo line-{i}-end; exit 4"));
    let mut lost = Vec::new();
    for (i, (code, out, err)) in runs.iter().enumerate() {
        let want = format!("line-{i}-end");
        // A pty turns the newline into CR LF; the line is all the run prints.
        if *code != 4 || out.trim_end() != want || !err.is_empty() {
            lost.push(format!(
                "run {i}: exit {code}, stdout {out:?}, stderr {err:?}"
            ));
        }
    }
    assert!(
        lost.is_empty(),
        "{} of 64 runs lost:\n{}",
        lost.len(),
        lost.join("\n")
    );

    // A tool that exits at once, printing nothing: its status still arrives.
    let runs = sandbox_runs_at_once(&r, 64, |_| "exit 4".to_string());
    let lost: Vec<_> = runs
        .iter()
        .enumerate()
        .filter(|(_, (code, out, err))| *code != 4 || !out.is_empty() || !err.is_empty())
        .map(|(i, (code, out, err))| {
            format!("run {i}: exit {code}, stdout {out:?}, stderr {err:?}")
        })
        .collect();
    assert!(
        lost.is_empty(),
        "{} of 64 silent runs lost:\n{}",
        lost.len(),
        lost.join("\n")
    );
    // Every run was a terminal of its own, each launched and ended with status 4 (the
    // ledger learns of an exit from the host's event line, which may come after the
    // exit frame reached the run).
    let ended = || {
        let (_, list, _) = r.api("GET", "/api/terminals", None);
        list["terminals"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["state"] == "exited" && t["exit_status"] == 4)
            .count()
    };
    assert!(wait::until(WAIT, || ended() == 128), "{} ended", ended());
    let launched = r
        .audit_rows()
        .iter()
        .filter(|row| row["action"] == "session_launch" && row["outcome"] == "allowed")
        .count();
    assert_eq!(launched, 128);
    // A tool that ends before its launch is recorded still has its rows in order.
    let rows = r.audit_rows();
    for (i, row) in rows.iter().enumerate() {
        if row["action"] == "session_end" {
            assert!(
                rows[..i].iter().any(
                    |l| l["action"] == "session_launch" && l["session_id"] == row["session_id"]
                ),
                "session_end before session_launch: {row}"
            );
        }
    }
}
