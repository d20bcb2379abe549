//! The command line explains itself: `relay --help` groups the verbs, completions come
//! from the same tree, and a program missing from relay's `PATH` is a refusal that
//! names the `PATH` searched and the setting to change (docs/cli.md).

use relay_e2e::daemon::{base_settings, Relay, RelayOptions};

#[test]
fn help_groups_the_verbs_and_completions_print_for_each_shell() {
    let r = Relay::prepare(None, false);
    let out = r.cli(&["--help"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    for heading in [
        "Sessions and terminals:",
        "Daemon and administration:",
        "This program:",
    ] {
        assert!(out.stdout.contains(heading), "{}", out.stdout);
    }
    assert!(
        out.stdout
            .contains("  sandbox      Run TEMPLATE sandboxed here"),
        "{}",
        out.stdout
    );
    for shell in ["bash", "zsh", "fish"] {
        let out = r.cli(&["completions", shell]);
        assert_eq!(out.status, 0, "{shell}: {}", out.stderr);
        assert!(out.stdout.contains("terminal"), "{shell}: {}", out.stdout);
    }
    let out = r.cli(&["completions", "tcsh"]);
    assert_eq!(out.status, 1);
    assert!(out.stderr.contains("see relay --help"), "{}", out.stderr);
}

#[test]
fn claude_missing_from_relays_path_names_the_path_and_claude_path() {
    // The instance's `claude` lives in ~/.local/bin, which this PATH leaves out.
    let r = Relay::start_with(RelayOptions {
        settings: base_settings(None),
        uid: None,
        config_in_home: false,
        path: Some("/usr/bin:/bin".into()),
    });
    let out = r.cli(&["sandbox", "claude-code", "--", "--version"]);
    assert_eq!(out.status, 1, "{}", out.stderr);
    for part in [
        "claude is not on the PATH relay searched (/usr/bin:/bin)",
        "claude_path",
        "the claude-code template's command",
        "(spawn_failed)",
    ] {
        assert!(out.stderr.contains(part), "no {part:?} in {}", out.stderr);
    }
    let out = r.cli(&["session", "start", "--project", "p1"]);
    assert_eq!(out.status, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "claude is not on the PATH relay searched (/usr/bin:/bin); install Claude Code \
             there, or set claude_path in settings.json to its absolute path"
        ),
        "{}",
        out.stderr
    );
    // A template of another program names its own command.
    let mut s = base_settings(None);
    s["terminal_templates"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"id": "tool", "name": "Tool", "command": "no-such-tool"}));
    r.write_settings(&s);
    let out = r.cli(&["sandbox", "tool"]);
    assert_eq!(out.status, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "no-such-tool is not on the PATH relay searched (/usr/bin:/bin); install it there, \
             or set the tool template's command in settings.json"
        ),
        "{}",
        out.stderr
    );
}
