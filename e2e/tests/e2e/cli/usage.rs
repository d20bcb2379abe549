//! A command line relay cannot run is clap's whole message and exit 2: what is wrong,
//! the usage line, a suggestion, the `--` tip; bare `relay` prints the help (on stderr,
//! exit 2, clap's convention); nothing runs and the config dir is untouched
//! (docs/cli.md#exit-codes).

use relay_e2e::daemon::Relay;

/// Runs `relay --config-dir <instance> ARGS`, which must be refused as usage: exit 2,
/// nothing on stdout, clap's closing line on stderr. Its stderr.
fn refused(r: &Relay, args: &[&str]) -> String {
    let out = r.cli(args);
    assert_eq!(out.status, 2, "relay {args:?}: {}", out.stderr);
    assert_eq!(out.stdout, "", "relay {args:?}");
    assert!(
        out.stderr
            .ends_with("For more information, try '--help'.\n"),
        "relay {args:?}: {}",
        out.stderr
    );
    out.stderr
}

fn has(stderr: &str, parts: &[&str]) {
    for p in parts {
        assert!(stderr.contains(p), "no {p:?} in:\n{stderr}");
    }
}

#[test]
fn usage_errors_print_claps_whole_message_and_exit_2() {
    // No daemon, and none needed: the command line is refused before anything runs.
    let r = Relay::prepare(None, false);
    let before: Vec<_> = std::fs::read_dir(&r.config).unwrap().flatten().collect();
    assert!(before.is_empty(), "{before:?}");

    // The missing argument by name, and the usage line.
    let e = refused(&r, &["session", "stop"]);
    has(
        &e,
        &[
            "error: the following required arguments were not provided:\n  <ID>\n",
            "\nUsage: relay session stop <ID>\n",
        ],
    );
    let e = refused(&r, &["session", "message", "--id", "s-1"]);
    has(&e, &["  <TEXT>...\n", "Usage: relay session message"]);

    // The id positional and as `--id` at once.
    let e = refused(&r, &["terminal", "stop", "t-1", "--id", "t-2"]);
    has(
        &e,
        &["error: the argument '[ID]' cannot be used with '--id <ID>'"],
    );

    // Did you mean: a verb and a flag misspelt.
    let e = refused(&r, &["sesion", "list"]);
    has(
        &e,
        &[
            "error: unrecognized subcommand 'sesion'",
            "tip: some similar subcommands exist:",
            "'session'",
            "Usage: relay [OPTIONS] <COMMAND>",
        ],
    );
    let e = refused(&r, &["terminal", "stop", "--idd", "t-1"]);
    has(
        &e,
        &[
            "error: unexpected argument '--idd' found",
            "tip: a similar argument exists: '--id'",
            "Usage: relay terminal stop --id <ID> [ID]",
        ],
    );

    // The `--` tip for a tool's own flag given before `--`.
    let e = refused(&r, &["sandbox", "shell", "-c", "echo hi"]);
    has(
        &e,
        &[
            "error: unexpected argument '-c' found",
            "tip: to pass '-c' as a value, use '-- -c'",
            "Usage: relay sandbox [OPTIONS] <TEMPLATE> [-- <ARG>...]",
        ],
    );

    // A value outside its list names the list; a bad filter says why.
    let e = refused(&r, &["completions", "tcsh"]);
    has(
        &e,
        &[
            "error: invalid value 'tcsh' for '<SHELL>'",
            "[possible values: bash, elvish, fish, powershell, zsh]",
        ],
    );
    // A permission mode Claude Code does not take is refused before a session starts
    // (issue 40: `yolo` started a Claude that died at once).
    let e = refused(
        &r,
        &[
            "session",
            "start",
            "--project",
            "p1",
            "--permission-mode",
            "yolo",
        ],
    );
    has(
        &e,
        &[
            "error: invalid value 'yolo' for '--permission-mode <P>'",
            "[possible values: acceptEdits, auto, bypassPermissions, dontAsk, manual, plan]",
        ],
    );
    let e = refused(&r, &["serve", "--log-level", "a=b=c"]);
    has(
        &e,
        &["error: invalid value 'a=b=c' for '--log-level <FILTER>': log level \"a=b=c\""],
    );

    // A verb missing after the options is refused like any other usage error.
    let e = refused(&r, &[]);
    has(
        &e,
        &["error: 'relay' requires a subcommand but one was not provided"],
    );

    // What was typed is quoted with its control bytes as visible text.
    let e = refused(&r, &["\x1b]0;title\x07"]);
    has(&e, &["unrecognized subcommand '^[]0;title^G'"]);
    assert!(!e.contains('\x1b') && !e.contains('\x07'), "{e:?}");

    // Nothing ran: not even `relay serve` touched the config dir.
    let after: Vec<_> = std::fs::read_dir(&r.config).unwrap().flatten().collect();
    assert!(after.is_empty(), "{after:?}");
}

#[test]
fn bare_relay_prints_the_help_and_help_asked_for_goes_to_stdout_with_exit_0() {
    let r = Relay::prepare(None, false);
    // Bare `relay`, not even `--config-dir`: clap's help on stderr, exit 2.
    let mut bare = std::process::Command::new(r.relay_bin());
    bare.env_clear()
        .env("HOME", &r.home)
        .env("PATH", "/usr/bin:/bin");
    let out = bare.output().expect("run relay");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty());
    has(
        &stderr,
        &[
            "Sandboxed Claude Code sessions on your own machine\n",
            "Usage: relay [OPTIONS] <COMMAND>",
            "Sessions and terminals:",
            "  session      Headless Claude Code sessions driven turn by turn",
            "--config-dir <DIR>",
        ],
    );
    assert!(!stderr.starts_with("error:"), "{stderr}");

    // Asked for, the help and the version are answers: stdout, exit 0.
    for args in [
        &["--help"][..],
        &["help", "session"],
        &["session", "stop", "--help"],
        &["--version"],
    ] {
        let out = r.cli(args);
        assert_eq!(out.status, 0, "relay {args:?}: {}", out.stderr);
        assert_eq!(out.stderr, "", "relay {args:?}");
        assert!(!out.stdout.is_empty(), "relay {args:?}");
    }
    assert!(r
        .cli(&["session", "stop", "--help"])
        .stdout
        .contains("Usage: relay session stop [OPTIONS] [ID]"));
}

/// A model that is no model's name is refused before anything starts (issue 40); Claude
/// Code 2.1.332 itself takes any `--model` and fails only at the first turn.
#[test]
fn relay_session_start_with_a_model_that_is_no_name_is_refused_before_anything_starts() {
    let r = Relay::prepare(None, false);
    for bad in ["gpt 4", "sonnet;rm", "", "x".repeat(129).as_str()] {
        let e = refused(&r, &["session", "start", "--project", "p1", "--model", bad]);
        has(
            &e,
            &[
                &format!("error: invalid value '{bad}' for '--model <M>'"),
                "a model is a name or alias such as sonnet, opus or claude-sonnet-4-5",
            ],
        );
    }
    let after: Vec<_> = std::fs::read_dir(&r.config).unwrap().flatten().collect();
    assert!(after.is_empty(), "{after:?}");
}
