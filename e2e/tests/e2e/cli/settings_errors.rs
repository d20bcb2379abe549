//! A `settings.json` relay cannot use is named with its place: the file, the line and
//! column, the key path, and what was expected in words, in `relay status` and in the
//! refused launch; a key relay does not know is named, with the key it resembles, at
//! the refusal it probably caused (docs/settings.md#how-it-is-read, issue 26 item 5).

use relay::wire::Code;
use relay_e2e::daemon::{base_settings, Relay};

/// One daemon, the file rewritten between rows: settings are read fresh at every
/// status and launch, so each row is what a person sees after saving that file.
#[test]
fn each_bad_settings_file_is_named_by_line_column_and_key_in_status_and_at_the_launch() {
    let r = Relay::start(base_settings(None));
    let file = r.config.join("settings.json");
    let table: &[(&str, &str)] = &[
        (
            "{\n  \"projects\": [\n    {\"id\": \"p1\", \"path\": \"~/project\", \"allowed_templates\": \"*\"}\n  ]\n}\n",
            ":3:60: projects[0].allowed_templates: expected a list of template ids, got \"*\"",
        ),
        (
            "{\"projects\": [{\"id\": \"p1\", \"path\": \"~/project\", \"allowed_templates\": [\"*\"]}],\n \"terminal_templates\": [\n  {\"id\": \"a\", \"command\": \"/bin/sh\"},\n  {\"id\": \"b\", \"command\": \"/bin/sh\"},\n  {\"id\": \"build\", \"args\": [\"-c\"]}\n ]}\n",
            ":5:3: terminal_templates[2] (\"build\"): missing \"command\"",
        ),
        (
            "{\"api\": {\"listen\": \"0.0.0.0:4850\"}}",
            ":1:20: api.listen: \"0.0.0.0:4850\" must be a loopback address",
        ),
        (
            "{\"projects\": [\n  {\"id\": \"p1\", \"path\": \"~/project\",}\n]}",
            ":2:36: not valid JSON: trailing comma",
        ),
        // Issue 40's unclear messages: each names the key, the template and what to do.
        (
            "{\"terminal_templates\": [\n  {\"id\": \"shell\", \"command\": \" \"}\n]}",
            ":2:30: terminal_templates[0].command: \" \" is blank: name the program the \"shell\" template runs, such as \"/bin/bash\" or \"claude\"",
        ),
        (
            "{\"terminal_templates\": [\n  {\"id\": \"shell\", \"command\": \"sh -c make\"}\n]}",
            ":2:30: terminal_templates[0].command: \"sh -c make\" is a program and its arguments in one string: put the program in command and each argument in args, as in \"command\": \"sh\", \"args\": [\"-c\", \"make\"]",
        ),
        (
            "{\"session_sandbox\": {\"egress\": [\"https://example.com/path\"]}}",
            ":1:33: session_sandbox.egress[0]: egress entry \"https://example.com/path\": an entry is a host (with an optional :port), not a URL: leave out the scheme \"https://\" and the path \"/path\", as in \"example.com\"",
        ),
        (
            "{\"terminal_templates\": [\n  {\"id\": \"shell\", \"command\": \"/bin/sh\", \"read\": [\"docs\"]}\n]}",
            ":2:50: terminal_templates[0].read[0]: \"docs\" in the \"shell\" template's read list must be absolute or start with ~/",
        ),
        (
            "\u{feff}{\"projects\": []}",
            ":1:1: starts with a byte-order mark (EF BB BF), which JSON does not allow: save the file as UTF-8 without a BOM (your editor's encoding setting)",
        ),
        (
            "{\n  // the projects\n  \"projects\": []\n}",
            ":2:3: not valid JSON: a // comment; JSON has no comments: delete it (what each key does is in docs/settings.md)",
        ),
    ];
    for (text, want) in table {
        std::fs::write(&file, text).unwrap();
        let want = format!("{}{want}", file.display());
        let status = r.cli(&["status"]);
        assert_eq!(status.status, 0, "{}", status.stderr);
        assert!(
            status.stdout.contains(&format!(
                "settings: INVALID, launches are refused until it is fixed\n  {want}\n"
            )),
            "{text}\n{}",
            status.stdout
        );
        assert!(
            status
                .stdout
                .contains("Claude token file: unknown until settings.json is fixed"),
            "{}",
            status.stdout
        );
        let start = r.cli(&[
            "terminal",
            "start",
            "--project",
            "p1",
            "--template",
            "shell",
        ]);
        assert_eq!(start.status, 1, "{text}: {}", start.stdout);
        assert!(
            start.stderr.contains(&want) && start.stderr.contains(Code::SettingsInvalid.as_str()),
            "{text}\n{}",
            start.stderr
        );
    }
}

#[test]
fn a_typod_key_is_named_with_the_key_it_resembles_where_the_launch_is_refused() {
    let mut s = base_settings(None);
    s["projects"][0]
        .as_object_mut()
        .unwrap()
        .remove("allowed_templates");
    s["projects"][0]["allowed_template"] = serde_json::json!(["*"]);
    let r = Relay::start(s);
    let start = r.cli(&[
        "terminal",
        "start",
        "--project",
        "p1",
        "--template",
        "shell",
    ]);
    // Refused (exit 4, docs/cli.md#exit-codes).
    assert_eq!(start.status, 4, "{}", start.stdout);
    assert!(
        start.stderr.contains(Code::TemplateNotAllowed.as_str())
            && start.stderr.contains(
                "; settings.json has unknown keys: projects[0].allowed_template at line "
            )
            && start.stderr.contains("(did you mean allowed_templates?)"),
        "{}",
        start.stderr
    );
    let status = r.cli(&["status"]);
    assert!(
        status.stdout.contains(&format!(
            "settings: {}\nsettings note: unknown keys: projects[0].allowed_template",
            r.config.join("settings.json").display()
        )),
        "{}",
        status.stdout
    );
}
