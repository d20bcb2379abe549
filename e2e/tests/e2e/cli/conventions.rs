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
