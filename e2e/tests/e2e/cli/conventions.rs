//! What people expect of a command line from docker, gh, pueue, systemctl and tmux
//! (issue 40): ids given positionally or by a unique prefix, as the real CLI takes them
//! (docs/cli.md#naming-a-terminal-or-session).

use relay_e2e::daemon::{base_settings, Relay};

#[test]
fn a_person_names_terminals_by_id_prefixes_filters_the_list_and_prunes_the_ended() {
    let r = Relay::start(base_settings(None));
    let a = r.shell_terminal("exec sleep 600")["id"]
        .as_str()
        .unwrap()
        .to_string();
    let b = r.shell_terminal("echo done-$((6*7))")["id"]
        .as_str()
        .unwrap()
        .to_string();
    r.wait_exited(&b);

    // A prefix, positional, as docker takes it; the hex alone too; `--id` still works.
    let log = r.cli(&["terminal", "log", &b[..8]]);
    assert_eq!(log.status, 0, "{}", log.stderr);
    assert!(log.stdout.contains("done-42"), "{}", log.stdout);
    let hex = r.cli_json(&["terminal", "log", &b[2..8]]);
    assert_eq!(hex["id"], b.as_str());
    let flag = r.cli_json(&["terminal", "log", "--id", &b]);
    assert_eq!(flag["id"], b.as_str());

    // A prefix of both ids names them and acts on neither.
    let both = r.cli(&["terminal", "stop", "t-"]);
    assert_eq!(both.status, 1, "{}", both.stderr);
    assert_eq!(both.stdout, "");
    for part in [
        "error: t- starts the ids of 2 terminals: ",
        &a,
        &b,
        "(ambiguous_id)",
    ] {
        assert!(both.stderr.contains(part), "no {part}: {}", both.stderr);
    }
    // A prefix of none says so.
    let none = r.cli(&["terminal", "stop", "zz"]);
    assert_eq!(none.status, 3, "not found: {}", none.stderr);
    assert_eq!(
        none.stderr,
        "error: no terminal has an id starting with zz (relay terminal list shows them) \
         (not_found)\n"
    );
    let listed = r.cli_json(&["terminal", "list"]);
    assert_eq!(listed["terminals"].as_array().unwrap().len(), 2, "{listed}");

    // Lists filtered as `docker ps` and pueue filter theirs.
    let ids = |args: &[&str]| -> Vec<String> {
        r.cli_json(args)["terminals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&["terminal", "list", "--running"]), vec![a.as_str()]);
    assert_eq!(ids(&["terminal", "list", "--project", "p1"]).len(), 2);
    assert!(ids(&["terminal", "list", "--project", "p2"]).is_empty());
    let text = r.cli(&["terminal", "list", "--running"]).stdout;
    assert!(text.starts_with(&format!("{a}  running")) && text.lines().count() == 1);

    // Purging the running one is refused by relay: exit 4, not 1 or 3.
    let running = r.cli(&["terminal", "purge", &a[..8]]);
    assert_eq!(running.status, 4, "{}", running.stderr);
    assert!(
        running.stderr.ends_with("(session_running)\n"),
        "{}",
        running.stderr
    );

    // The unique prefix stops the running one.
    let stopped = r.cli_json(&["terminal", "stop", &a[..8]]);
    assert_eq!(stopped["id"], a.as_str());

    // Prune purges every ended one through the purge route, saying which went.
    r.wait_exited(&a);
    let pruned = r.cli_json(&["terminal", "prune"]);
    let mut went: Vec<&str> = pruned["purged"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    went.sort();
    let mut both = [a.as_str(), b.as_str()];
    both.sort();
    assert_eq!(went, both, "{pruned}");
    assert!(ids(&["terminal", "list"]).is_empty());
    let again = r.cli(&["terminal", "prune"]);
    assert_eq!(
        (again.status, again.stdout.as_str()),
        (0, "no ended terminals to purge\n")
    );
}

/// With no relay running, a verb says so with exit 69 (sysexits' "service
/// unavailable"), which a script tells apart from a refusal (4) and a name that is not
/// there (3); with `--json` its code is `daemon_unreachable`.
#[test]
fn a_person_runs_a_verb_while_relay_is_not_running() {
    let r = Relay::prepare(None, false);
    let out = r.cli(&["terminal", "list"]);
    assert_eq!(out.status, 69, "{}", out.stderr);
    assert!(
        out.stderr
            .starts_with("error: relay is not running (cannot connect to "),
        "{}",
        out.stderr
    );
    let json = r.cli(&["terminal", "stop", "t-3f", "--json"]);
    assert_eq!(json.status, 69, "{}", json.stderr);
    let v: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(v["error"]["code"], "daemon_unreachable", "{v}");
}

/// `relay` run as `cmd` on a real pty, to its end: everything it printed there, once
/// `last` has come (the output is read apart from the exit).
fn on_a_terminal(cmd: std::process::Command, last: &str) -> String {
    let mut pty = relay_e2e::pty::Pty::spawn(cmd, 120, 40);
    relay_e2e::wait::child_within(&mut pty.child, relay_e2e::WAIT).expect("relay ended");
    pty.wait_for(last);
    pty.screen()
}

/// `error:` red and doctor's `warn` and `fail` coloured on a terminal; the same words
/// without escape sequences in a pipe, and on a terminal with `NO_COLOR` set.
#[test]
fn a_person_sees_errors_and_doctors_warnings_in_colour_on_a_terminal_and_never_in_a_pipe() {
    let mut s = base_settings(None);
    // A Claude program that is not there: doctor warns or fails about it.
    s["claude_path"] = serde_json::json!("/nonexistent/claude");
    let r = Relay::start(s);
    let stop = ["terminal", "stop", "t-000000000000"];
    let shown = on_a_terminal(r.cli_command(&stop), "(not_found)");
    assert!(
        shown.contains("\x1b[1;31merror:\x1b[0m no terminal"),
        "{shown:?}"
    );
    let piped = r.cli(&stop);
    assert!(piped.stderr.starts_with("error: no terminal"), "{piped:?}");
    let mut plain = r.cli_command(&stop);
    plain.env("NO_COLOR", "1");
    let shown = on_a_terminal(plain, "(not_found)");
    assert!(
        shown.contains("error: no terminal") && !shown.contains("\x1b[1;31m"),
        "{shown:?}"
    );

    let shown = on_a_terminal(r.cli_command(&["doctor"]), "claude");
    assert!(
        shown.contains("\x1b[33mwarn\x1b[0m") || shown.contains("\x1b[1;31mfail\x1b[0m"),
        "{shown:?}"
    );
    let piped = r.cli(&["doctor"]);
    assert!(!piped.stdout.contains('\x1b'), "{piped:?}");
    assert!(
        piped
            .stdout
            .lines()
            .any(|l| l.starts_with("warn ") || l.starts_with("fail ")),
        "{piped:?}"
    );
}

/// bash, with `relay completions bash` sourced, completes a terminal's id after `relay
/// terminal stop` (and after `--id`), asking the running relay of the same
/// `--config-dir`; `relay terminal list -q` prints the ids alone.
#[test]
fn a_person_completes_a_terminals_id_in_bash() {
    let r = Relay::start(base_settings(None));
    let v = r.shell_terminal("exec sleep 600");
    let id = v["id"].as_str().unwrap().to_string();
    let quiet = r.cli(&["terminal", "list", "-q"]);
    assert_eq!(quiet.stdout.trim_end(), id, "{quiet:?}");
    let script = r.cli(&["completions", "bash"]).stdout;
    let file = r.root.join("relay.bash");
    std::fs::write(&file, script).unwrap();
    let cfg = r.config.display().to_string();
    let complete = |words: &str| {
        let bash = format!(
            "source '{}'; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
             _relay_ids relay; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            file.display()
        );
        let bin = r.relay_bin();
        let path = format!(
            "{}:{}",
            bin.parent().unwrap().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = std::process::Command::new("bash")
            .args(["--norc", "-c", &bash])
            .env("PATH", path)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let prefix = &id[..5];
    let got = complete(&format!(
        "relay --config-dir '{cfg}' terminal stop {prefix}"
    ));
    assert_eq!(got.trim_end(), id, "after stop");
    let got = complete(&format!("relay --config-dir '{cfg}' terminal log --id ''"));
    assert_eq!(got.trim_end(), id, "after --id");
    // Elsewhere clap's own completion: the verbs.
    let got = complete(&format!("relay --config-dir '{cfg}' terminal st"));
    assert!(got.contains("stop") && got.contains("start"), "{got}");
}
