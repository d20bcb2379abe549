//! The `relay` command tree: every verb and flag with its one-line help, and the groups
//! `relay --help` lists the verbs under ([cli.md](../../docs/cli.md)). A new verb goes
//! in [`Verb`] and in one of [`GROUPS`]; a unit test fails on a verb or flag without a
//! help line, and on a verb in no group.

use std::path::PathBuf;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "relay",
    version,
    about = "Sandboxed Claude Code sessions on your own machine"
)]
pub(super) struct Cli {
    /// The config dir (default: the platform's config dir, or $RELAY_CONFIG_DIR).
    #[arg(long, global = true, value_name = "DIR")]
    pub config_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub verb: Verb,
}

// `--json`, shared by every verb that prints an answer. (A plain comment: clap would
// take a doc comment here as the about line of every verb that flattens it.)
#[derive(Args, Clone, Copy)]
pub(super) struct Json {
    /// Print the answer as one JSON line.
    #[arg(long)]
    pub json: bool,
}

/// Which entries `list` shows: all by default.
#[derive(Args, Clone)]
pub(super) struct ListFilter {
    /// Only the running ones.
    #[arg(long)]
    pub running: bool,
    /// Only those of this project (its id, as the list shows it).
    #[arg(long, value_name = "ID")]
    pub project: Option<String>,
    /// Only the ids, one a line (for scripts, and the shells' completion of ids).
    #[arg(short, long, conflicts_with = "json")]
    pub quiet: bool,
}

/// The terminal or session a verb acts on, positional or as `--id` (for scripts), not
/// both: its id, or a unique prefix of it ([`crate::cli::commands::entry::resolve`]).
#[derive(Args, Clone)]
pub(super) struct Target {
    /// The id, or a unique prefix of it (as the list shows it; `t-` or `s-` may be left off).
    #[arg(
        value_name = "ID",
        required_unless_present = "id",
        conflicts_with = "id",
        value_parser = clap::builder::NonEmptyStringValueParser::new()
    )]
    pub target: Option<String>,
    /// The same, as a flag.
    #[arg(long, value_name = "ID", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub id: Option<String>,
}

impl Target {
    /// What was typed, in either place.
    pub fn given(self) -> String {
        self.target.or(self.id).unwrap_or_default()
    }
}

#[derive(Subcommand)]
pub(super) enum Verb {
    /// Run TEMPLATE sandboxed here, attached to this terminal.
    ///
    /// Starts a sandboxed terminal of TEMPLATE for the project holding the current
    /// directory and attaches this terminal to it; exits with the tool's exit status.
    /// `relay sandbox explain TEMPLATE` prints that sandbox instead.
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Sandbox {
        #[command(subcommand)]
        verb: Option<SandboxVerb>,
        /// The template to run (`shell`, `claude-code`, or one of settings.json).
        #[arg(required = true)]
        template: Option<String>,
        /// Extra arguments for the template's command (after `--`).
        #[arg(last = true, value_name = "ARG")]
        args: Vec<String>,
        /// Keys that detach this terminal and leave the session running, such as
        /// `ctrl-\,ctrl-\` (the default, or settings.json's `detach_keys`) or `none`.
        #[arg(long = "detach-keys", value_name = "KEYS")]
        detach_keys: Option<String>,
        #[command(flatten)]
        json: Json,
    },
    /// Interactive terminals from templates: start, list, attach, log, stop, purge.
    #[command(subcommand)]
    Terminal(TerminalVerb),
    /// Headless Claude Code sessions driven turn by turn.
    #[command(subcommand)]
    Session(SessionVerb),
    /// Run the daemon in the foreground (prints ready.json's path first).
    Serve {
        /// The log level, or `target=level` pairs (default: $RUST_LOG, else info);
        /// the log is <config>/relay.log.
        #[arg(long, value_name = "FILTER", value_parser = log_filter)]
        log_level: Option<String>,
    },
    /// Run `relay serve` at login: a systemd user unit (Linux) or a LaunchAgent (macOS).
    #[command(subcommand)]
    Service(ServiceVerb),
    /// Print the daemon's state and paths.
    Status {
        #[command(flatten)]
        json: Json,
    },
    /// Check that this machine and these settings keep the token safe.
    ///
    /// Checks the sandbox, the kernel, the config dir, the token file, and proves the
    /// token is denied to a sandboxed probe. Exits 1 when a check fails.
    Doctor {
        #[command(flatten)]
        json: Json,
    },
    /// Print the audit log; `audit scan` looks for the token in relay's files.
    Audit {
        #[command(subcommand)]
        verb: Option<AuditVerb>,
        /// The last N rows (default 1000, at most 10000), read from the end of the log.
        #[arg(long, value_name = "N")]
        tail: Option<usize>,
        /// Only rows written since TIME: a duration back (90s, 30m, 12h, 7d) or a UTC
        /// time (2026-12-04T19:22:48Z).
        #[arg(long, value_name = "TIME")]
        since: Option<String>,
        /// Keep printing rows as they are written (with --json, one row a line), until
        /// interrupted or relay stops.
        #[arg(long)]
        follow: bool,
        #[command(flatten)]
        json: Json,
    },
    /// The configured setup-token files: which project runs on which, never a token.
    #[command(subcommand)]
    Token(TokenVerb),
    /// Print a one-time link into the Settings page (needs `api.listen`).
    ///
    /// `relay settings schema` prints settings.json's JSON Schema instead.
    Settings {
        #[command(subcommand)]
        verb: Option<SettingsVerb>,
        /// Open the link in the default browser.
        #[arg(long)]
        open: bool,
        #[command(flatten)]
        json: Json,
    },
    /// Print a completion script for SHELL on stdout (`relay completions bash > …`).
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the version.
    Version {
        #[command(flatten)]
        json: Json,
    },
}

#[derive(Subcommand)]
pub(super) enum ServiceVerb {
    /// Write and enable the service that runs `relay serve` at login and restarts it when it fails.
    Install {
        /// Print the service file instead of writing it.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        json: Json,
    },
    /// Stop and disable the service and remove its file.
    Uninstall {
        #[command(flatten)]
        json: Json,
    },
    /// Whether the service is installed, enabled and running, and where it logs.
    Status {
        #[command(flatten)]
        json: Json,
    },
}

#[derive(Subcommand)]
pub(super) enum SandboxVerb {
    /// Print the sandbox a terminal of TEMPLATE gets here, launching nothing.
    ///
    /// What it can read and write, what is denied (the token's folder among them), its
    /// network and denied ports: the launch path's own spec, in words.
    Explain {
        /// The template to explain.
        template: String,
        /// The folder it would start in (default: the current directory).
        #[arg(long, value_name = "D")]
        directory: Option<String>,
        /// Explain it for this backend instead of this platform's.
        #[arg(long, value_name = "B", value_parser = ["bwrap", "seatbelt"])]
        backend: Option<String>,
        #[command(flatten)]
        json: Json,
    },
    /// Why a sandbox refuses a path or a host, and what to change.
    ///
    /// For a PATH: whether the sandbox denies it, holds it read-only, lets it be
    /// written or read, or does not see it, which place decides that and why relay put
    /// it there. For a HOST[:PORT] (443 by default): what the egress list says. The
    /// sandbox is the one a terminal of --template gets in --directory, or a running
    /// session's (--id).
    Why {
        /// A path (absolute, relative to here, or ~/…) or a host[:port].
        what: String,
        /// The template whose sandbox to ask (default: shell).
        #[arg(long, value_name = "T", default_value = "shell", conflicts_with = "id")]
        template: String,
        /// The folder it would start in (default: the current directory).
        #[arg(long, value_name = "D", conflicts_with = "id")]
        directory: Option<String>,
        /// A running session or terminal whose sandbox to ask.
        #[arg(long, value_name = "ID")]
        id: Option<String>,
        #[command(flatten)]
        json: Json,
    },
}

#[derive(Subcommand)]
pub(super) enum TokenVerb {
    /// Every configured token file: its projects and account labels, fingerprint,
    /// mode, size, last change and the sessions running on it.
    List {
        #[command(flatten)]
        json: Json,
    },
}

#[derive(Subcommand)]
pub(super) enum AuditVerb {
    /// Look for the current token in every file relay keeps (exits 1 when found).
    ///
    /// Looks for it raw, base64, URL-encoded and JSON-escaped in every log, transcript
    /// and file relay keeps; reports file and offset, never the value.
    Scan {
        #[command(flatten)]
        json: Json,
    },
}

#[derive(Subcommand)]
pub(super) enum SettingsVerb {
    /// Print settings.json's JSON Schema, for an editor to check the file with.
    ///
    /// `relay settings schema > ~/.config/relay/settings.schema.json`, then
    /// `"$schema": "./settings.schema.json"` in settings.json (docs/settings.md).
    /// Needs no running relay.
    Schema,
}

#[derive(Subcommand)]
pub(super) enum TerminalVerb {
    /// Start a terminal of a template in a project (detached; `relay terminal attach` joins it).
    Start {
        /// The project, by id or name (settings.json's `projects`).
        #[arg(long, value_name = "ID-OR-NAME")]
        project: String,
        /// The template to run (settings.json's `terminal_templates`).
        #[arg(long, value_name = "T")]
        template: String,
        /// A name shown in lists.
        #[arg(long, value_name = "N")]
        name: Option<String>,
        /// The folder to start in, inside the project (default: the current folder when
        /// it is inside the project, else the project's folder).
        #[arg(long, value_name = "D")]
        directory: Option<String>,
        /// The pty's width in columns.
        #[arg(long, value_name = "C")]
        cols: Option<u16>,
        /// The pty's height in rows.
        #[arg(long, value_name = "R")]
        rows: Option<u16>,
        /// One more argument for the template's command (repeat for several).
        #[arg(long = "extra-arg", allow_hyphen_values = true, value_name = "A")]
        extra_arg: Vec<String>,
        #[command(flatten)]
        json: Json,
    },
    /// List the terminals, running and ended.
    List {
        #[command(flatten)]
        filter: ListFilter,
        #[command(flatten)]
        json: Json,
    },
    /// Purge every ended terminal (of --project only, when given).
    Prune {
        /// Only those of this project (its id, as the list shows it).
        #[arg(long, value_name = "ID")]
        project: Option<String>,
        #[command(flatten)]
        json: Json,
    },
    /// Print a terminal's output log (control bytes as visible text).
    Log {
        #[command(flatten)]
        id: Target,
        /// Write the log's bytes as the session wrote them, escape sequences included
        /// (by default they are written as visible text).
        #[arg(long, conflicts_with = "json")]
        raw: bool,
        #[command(flatten)]
        json: Json,
    },
    /// Stop a running terminal.
    Stop {
        #[command(flatten)]
        id: Target,
        #[command(flatten)]
        json: Json,
    },
    /// Join a running terminal from this terminal; Ctrl-\ Ctrl-\ detaches.
    ///
    /// Shows its recent output, then runs live in raw mode at this window's size. The
    /// detach keys (default Ctrl-\ Ctrl-\) leave it running; so does closing this
    /// terminal. Exits with the tool's status when it ends.
    Attach {
        #[command(flatten)]
        id: Target,
        /// Keys that detach, such as `ctrl-\,ctrl-\` (the default, or settings.json's
        /// `detach_keys`), `ctrl-a,d`, or `none`.
        #[arg(long = "detach-keys", value_name = "KEYS")]
        detach_keys: Option<String>,
        #[command(flatten)]
        json: Json,
    },
    /// Continue a `relay sandbox claude-code` run that was kept with its conversation
    /// (ended by a token change, or after Claude Code's own resume hint), in its
    /// sandbox, on the token as it is now, attached here as `relay sandbox` is.
    Resume {
        #[command(flatten)]
        id: Target,
        /// Keys that detach, such as `ctrl-\,ctrl-\` (the default, or settings.json's
        /// `detach_keys`), `ctrl-a,d`, or `none`.
        #[arg(long = "detach-keys", value_name = "KEYS")]
        detach_keys: Option<String>,
        #[command(flatten)]
        json: Json,
    },
    /// Remove an ended terminal: its record, logs and temp folder.
    Purge {
        #[command(flatten)]
        id: Target,
        #[command(flatten)]
        json: Json,
    },
    /// Every connection the terminal asked its egress proxy for: allowed or refused, by
    /// which rule, bytes each way.
    Egress {
        #[command(flatten)]
        id: Target,
        #[command(flatten)]
        json: Json,
    },
}

/// The permission modes Claude Code takes (`claude --help`, 2.1.332). Checked here, so
/// a mistyped mode is a usage error, not a Claude that starts and dies.
/// `--model`: the shape relay passes on to Claude Code, checked before anything
/// starts. Claude Code itself takes any name and fails only at the first turn.
fn model_name(m: &str) -> Result<String, String> {
    match crate::daemon::settings::valid_model(m) {
        true => Ok(m.to_string()),
        false => Err(
            "a model is a name or alias such as sonnet, opus or claude-sonnet-4-5: \
                      1 to 128 letters, digits and ._:/@[]-, not starting with -"
                .to_string(),
        ),
    }
}

const PERMISSION_MODES: [&str; 6] = [
    "acceptEdits",
    "auto",
    "bypassPermissions",
    "dontAsk",
    "manual",
    "plan",
];

#[derive(Subcommand)]
pub(super) enum SessionVerb {
    /// Start a headless Claude Code session in a project.
    Start {
        /// The project, by id or name (settings.json's `projects`).
        #[arg(long, value_name = "ID-OR-NAME")]
        project: String,
        /// The folder to start in, inside the project (default: the current folder when
        /// it is inside the project, else the project's folder).
        #[arg(long, value_name = "D")]
        directory: Option<String>,
        /// A name shown in lists.
        #[arg(long, value_name = "N")]
        name: Option<String>,
        /// Claude Code's model for this session (over the template's `model`): a name
        /// or alias such as sonnet, opus or claude-sonnet-4-5.
        #[arg(long, value_name = "M", value_parser = model_name)]
        model: Option<String>,
        /// Claude Code's permission mode for this session (over the template's; default
        /// for a sandboxed session: bypassPermissions).
        #[arg(long = "permission-mode", value_name = "P", value_parser = PERMISSION_MODES)]
        permission_mode: Option<String>,
        #[command(flatten)]
        json: Json,
    },
    /// Send one message and print the reply (the turn's text).
    Message {
        /// The session's id.
        #[arg(long)]
        id: String,
        /// The message text (words are joined with spaces); `-` alone reads it from
        /// standard input.
        #[arg(required_unless_present = "file", conflicts_with = "file")]
        text: Vec<String>,
        /// Read the message from this file (`-`: standard input), as UTF-8 text.
        #[arg(long, value_name = "PATH")]
        file: Option<std::path::PathBuf>,
        /// Print the turn as it happens: text as it arrives, a line per tool call and
        /// result (with --json: one JSON event per line).
        #[arg(long)]
        stream: bool,
        #[command(flatten)]
        json: Json,
    },
    /// List the sessions, running and dormant.
    List {
        #[command(flatten)]
        filter: ListFilter,
        #[command(flatten)]
        json: Json,
    },
    /// Purge every ended (dormant) session (of --project only, when given).
    Prune {
        /// Only those of this project (its id, as the list shows it).
        #[arg(long, value_name = "ID")]
        project: Option<String>,
        #[command(flatten)]
        json: Json,
    },
    /// Stop the turn a session is running, not the session: the turn ends with its
    /// reply so far, and the session takes the next message.
    Interrupt {
        /// The session's id.
        #[arg(long)]
        id: String,
        #[command(flatten)]
        json: Json,
    },
    /// Stop a running session (it becomes dormant and can be resumed).
    Stop {
        #[command(flatten)]
        id: Target,
        #[command(flatten)]
        json: Json,
    },
    /// Print what Claude Code wrote on its stderr (its log), kept after it exits: why
    /// a session that ended at once ended.
    Log {
        #[command(flatten)]
        id: Target,
        #[command(flatten)]
        json: Json,
    },
    /// Start a dormant session again, in its own conversation.
    Resume {
        #[command(flatten)]
        id: Target,
        #[command(flatten)]
        json: Json,
    },
    /// Remove an ended (dormant) session: its record, logs and temp folder.
    ///
    /// The temp folder holds Claude's config and transcripts.
    Purge {
        #[command(flatten)]
        id: Target,
        #[command(flatten)]
        json: Json,
    },
    /// Every connection the session asked its egress proxy for: allowed or refused, by
    /// which rule, bytes each way.
    Egress {
        #[command(flatten)]
        id: Target,
        #[command(flatten)]
        json: Json,
    },
}

fn log_filter(s: &str) -> Result<String, String> {
    crate::logging::parse_level(s).map(|_| s.to_string())
}

/// The headings of `relay --help`, each with its verbs in the order shown.
pub(super) const GROUPS: &[(&str, &[&str])] = &[
    (
        "Sessions and terminals",
        &["sandbox", "terminal", "session"],
    ),
    (
        "Daemon and administration",
        &[
            "serve", "service", "status", "doctor", "audit", "token", "settings",
        ],
    ),
    ("This program", &["completions", "version", "help"]),
];

/// The command tree with the grouped verb list in place of clap's flat one.
pub(super) fn command() -> clap::Command {
    let mut cmd = Cli::command();
    // Built first, so clap's own `help` verb is there to be listed.
    cmd.build();
    let verbs: Vec<(String, String)> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| {
            let about = s.get_about().map(|a| a.to_string()).unwrap_or_default();
            (s.get_name().to_string(), about)
        })
        .collect();
    let width = verbs.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let mut listed = Vec::new();
    let mut text = String::new();
    let mut section = |heading: &str, names: &mut dyn Iterator<Item = &(String, String)>| {
        let lines: Vec<String> = names
            .map(|(n, about)| format!("  {n:<width$}  {about}"))
            .collect();
        if !lines.is_empty() {
            text.push_str(&format!("{heading}:\n{}\n\n", lines.join("\n")));
        }
    };
    for (heading, names) in GROUPS {
        let mut it = names
            .iter()
            .filter_map(|n| verbs.iter().find(|(v, _)| v == n));
        section(heading, &mut it);
        listed.extend(names.iter().map(|n| n.to_string()));
    }
    // A verb no group names still shows (the unit test below fails on it).
    let mut rest = verbs.iter().filter(|(n, _)| !listed.contains(n));
    section("Other", &mut rest);
    cmd = cmd.help_template(format!(
        "{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{text}Options:\n{{options}}{{after-help}}"
    ));
    cmd
}

/// Parses the process's arguments with [`command`]'s tree: the command line, and
/// whether its verb was given `--json`.
pub(super) fn parse() -> Result<(Cli, bool), clap::Error> {
    let matches = command().try_get_matches()?;
    let mut verb = &matches;
    while let Some((_, sub)) = verb.subcommand() {
        verb = sub;
    }
    let json = matches!(verb.try_get_one::<bool>("json"), Ok(Some(true)));
    Ok((Cli::from_arg_matches(&matches)?, json))
}

/// Whether a command line clap refused holds `--json` before any `--`: its usage error
/// is then an error object on stdout.
pub(super) fn json_asked() -> bool {
    std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every verb (at every depth) and every argument has a help line.
    #[test]
    fn every_verb_and_flag_has_a_help_line() {
        let cmd = command();
        let mut missing = Vec::new();
        walk(&cmd, "relay", &mut missing);
        assert!(missing.is_empty(), "no help line for: {missing:?}");
    }

    fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            // clap's own --help and --version carry clap's text.
            if arg.is_hide_set() || id == "help" || id == "version" {
                continue;
            }
            if arg
                .get_help()
                .is_none_or(|h| h.to_string().trim().is_empty())
            {
                missing.push(format!("{path} {id}"));
            }
        }
        for sub in cmd.get_subcommands() {
            let name = format!("{path} {}", sub.get_name());
            if sub
                .get_about()
                .is_none_or(|h| h.to_string().trim().is_empty())
            {
                missing.push(name.clone());
            }
            walk(sub, &name, missing);
        }
    }

    /// `relay --help` names every verb under exactly one heading, with its help line.
    #[test]
    fn every_verb_is_in_one_group_of_the_help() {
        let cmd = command();
        for sub in cmd.get_subcommands() {
            let name = sub.get_name();
            let n = GROUPS
                .iter()
                .filter(|(_, names)| names.contains(&name))
                .count();
            assert_eq!(n, 1, "{name} is in {n} groups of GROUPS");
        }
        for (heading, names) in GROUPS {
            for n in *names {
                assert!(
                    cmd.find_subcommand(n).is_some(),
                    "{heading} names {n}, which is no verb"
                );
            }
        }
        let help = command().render_help().to_string();
        assert!(!help.contains("Other:"), "{help}");
        for (heading, _) in GROUPS {
            assert!(help.contains(&format!("{heading}:\n")), "{help}");
        }
        assert!(
            help.contains("  sandbox      Run TEMPLATE sandboxed here"),
            "{help}"
        );
    }

    /// The completion scripts come from the same tree: they name the verbs.
    #[test]
    fn completions_name_the_verbs() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut command(), "relay", &mut out);
            let text = String::from_utf8(out).unwrap();
            for verb in ["sandbox", "terminal", "session", "doctor", "completions"] {
                assert!(text.contains(verb), "{shell}: no {verb}");
            }
        }
    }
}
