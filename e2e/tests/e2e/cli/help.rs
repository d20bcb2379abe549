//! The command line explains itself: `relay --help` groups the verbs, completions come
//! from the same tree, `relay settings schema` prints settings.json's schema, and a program missing from relay's `PATH` is a refusal that
//! names the `PATH` searched and the setting to change (docs/cli.md).

use relay::wire::Code;
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
    assert_eq!(out.status, 2);
    assert!(
        out.stderr
            .contains("error: invalid value 'tcsh' for '<SHELL>'"),
        "{}",
        out.stderr
    );
    // settings.json's schema needs no running relay either: the repository's copy.
    let out = r.cli(&["settings", "schema"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let kept = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/settings.schema.json");
    assert_eq!(out.stdout, std::fs::read_to_string(kept).unwrap());
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
        // Every Claude launch runs the one Claude program (docs/settings.md).
        "install Claude Code there, or set claude_path in settings.json to its absolute path",
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

#[test]
fn start_without_a_directory_runs_here_inside_the_project_else_in_the_projects_folder() {
    let r = Relay::start(base_settings(None));
    let sub = r.project.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let start_in = |dir: &std::path::Path| {
        let mut cmd = r.cli_command(&[
            "terminal",
            "start",
            "--project",
            "p1",
            "--template",
            "shell",
            "--json",
            "--extra-arg=-c",
            "--extra-arg=sleep 30",
        ]);
        let out = cmd.current_dir(dir).output().expect("run relay");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
        let id = v["id"].as_str().expect("an id").to_string();
        r.cli(&["terminal", "stop", "--id", &id]);
        std::path::PathBuf::from(v["directory"].as_str().expect("a directory"))
    };
    let real = |p: &std::path::Path| std::fs::canonicalize(p).unwrap();
    assert_eq!(start_in(&sub), real(&sub));
    // Outside every project: the project's own folder, not a refusal.
    assert_eq!(start_in(std::path::Path::new("/")), real(&r.project));
    // An explicit folder outside the project is still refused.
    let out = r.cli(&[
        "terminal",
        "start",
        "--project",
        "p1",
        "--template",
        "shell",
        "--directory",
        "/",
    ]);
    assert_eq!(out.status, 4, "refused: {}", out.stdout);
    assert!(
        out.stderr.contains(Code::DirectoryOutsideProject.as_str()),
        "{}",
        out.stderr
    );
}
