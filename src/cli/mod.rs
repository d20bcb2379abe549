//! The `relay` command line. Every verb takes `--json` (one line on stdout). On
//! failure: nothing on stdout, `error: …` on stderr, or with `--json` an error object on
//! stdout ([`failure`]), exit 1 (3 not found, 4 refused, 69 relay not running); a
//! command line clap refuses is clap's whole message, exit 2 ([`not_run`]). Everything printed goes
//! through [`termout`] (no control sequence a session chose reaches the terminal) and
//! [`emit`] (a reader that went away, as `| head` does, is not an error).
//!
//! This file keeps what every verb shares: the config dir, [`Out`] and how it is
//! printed, and the dispatch. Each verb group is a file of [`commands`]. The machinery
//! beside them: [`args`] (the command tree), [`client`] (the socket), [`attach`] and
//! [`resume_hint`] (joining a terminal), [`turn`] (one turn of a session), [`termout`]
//! (output made safe) and [`unit`] (the login-service files).

mod args;
mod attach;
mod client;
mod colour;
mod commands;
mod failure;
mod resume_hint;
pub mod termout;
mod turn;
mod unit;
mod waiting;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::Value;

use args::{Json, Verb};
use client::Client;

pub(crate) fn config_dir(flag: Option<PathBuf>) -> Result<PathBuf, String> {
    if let Some(d) = flag {
        return absolute(d).and_then(|d| a_folder(d, "--config-dir"));
    }
    if let Some(d) = std::env::var_os("RELAY_CONFIG_DIR").filter(|v| !v.is_empty()) {
        return absolute(PathBuf::from(d)).and_then(|d| a_folder(d, "RELAY_CONFIG_DIR"));
    }
    crate::daemon::paths::default_config_dir().ok_or_else(|| {
        "no home directory (HOME is not set and the account has none); pass --config-dir"
            .to_string()
    })
}

/// The config dir named by `source`, unless something other than a folder is there:
/// relay keeps its settings, socket and logs in a folder (made when missing), and a
/// file named instead would only get advice to start relay on it.
fn a_folder(dir: PathBuf, source: &str) -> Result<PathBuf, String> {
    match std::fs::metadata(&dir) {
        Ok(m) if !m.is_dir() => Err(config_not_a_folder(&dir, source)),
        _ => Ok(dir),
    }
}

fn config_not_a_folder(dir: &Path, source: &str) -> String {
    format!(
        "{source} {} is a file, not a folder: relay keeps its settings.json, socket and \
         logs in a folder; name a folder (relay makes it when missing), or leave {source} \
         out for the default, {}",
        dir.display(),
        crate::daemon::paths::default_config_dir()
            .map_or("~/.config/relay".into(), |d| d.display().to_string())
    )
}

fn absolute(p: PathBuf) -> Result<PathBuf, String> {
    if p.is_absolute() {
        Ok(p)
    } else {
        current_folder().map(|c| c.join(p))
    }
}

/// The current folder, or why relay cannot use it: one deleted (or moved away) after
/// the shell entered it is said to be so, with what to do.
pub(crate) fn current_folder() -> Result<PathBuf, String> {
    std::env::current_dir().map_err(|e| current_folder_gone(&e))
}

fn current_folder_gone(e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::NotFound {
        return "the current folder no longer exists (it was deleted or moved after this \
                shell entered it): cd into a folder that exists, such as your project's, and \
                run the command again"
            .into();
    }
    format!(
        "the current folder cannot be read ({e}): cd into another folder and run the command again"
    )
}

/// What relay says when the current folder's name is not UTF-8: JSON carries folder
/// names as UTF-8, so the name would arrive mangled. `instead` is the verb's own way
/// round (`--directory`, or another folder).
pub(crate) fn folder_not_utf8(cwd: &Path, instead: &str) -> String {
    format!(
        "the current folder's name is not UTF-8 ({}), and relay names folders in UTF-8: \
         rename the folder to a UTF-8 name, or {instead}",
        cwd.to_string_lossy()
    )
}

/// What a verb prints: the `--json` line and the text form, or (`terminal log --raw`)
/// bytes written exactly as they are.
struct Out {
    json: Value,
    text: String,
    raw: Option<Vec<u8>>,
}

impl Out {
    fn new(json: Value, text: String) -> Out {
        Out {
            json,
            text,
            raw: None,
        }
    }
}

/// Whether the verb was given `--json`: its failure is then its error object on stdout.
static JSON_FAILURES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `error: <msg>` on stderr (control bytes visible), or with `--json` its error object
/// on stdout ([`failure`]); exit 1, or its code's status ([`failure::exit_status`]).
/// A closed stderr is ignored.
pub(crate) fn fail(msg: impl std::fmt::Display) -> ExitCode {
    let json = JSON_FAILURES.load(std::sync::atomic::Ordering::Relaxed);
    ExitCode::from(failure::report(&msg.to_string(), json))
}

/// Writes `bytes` to stdout and answers `code`. A closed pipe (`EPIPE`: the reader
/// went away, as `relay terminal log | head` does) is not an error: the verb ends
/// quietly with the status it would have had. Any other write error is `error: …`, 1.
pub(crate) fn emit(bytes: &[u8], code: ExitCode) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => code,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => code,
        Err(e) => fail(format!("write stdout: {e}")),
    }
}

/// A text form as it is printed: control bytes visible, one final newline.
fn text_line(text: &str) -> Vec<u8> {
    let mut t = termout::visible(text.as_bytes())
        .trim_end_matches('\n')
        .to_string();
    t.push('\n');
    t.into_bytes()
}

/// A `--json` answer as it is printed: one line, C1 escaped too.
fn json_bytes(v: &Value) -> Vec<u8> {
    let mut line = termout::json_line(v);
    line.push('\n');
    line.into_bytes()
}

/// Prints what a verb answered: its `--json` line, or its raw bytes (`terminal log
/// --raw`), or its text form (nothing for an empty one). A refusal is `error: …`, exit 1.
fn print(json: bool, result: Result<Out, String>) -> ExitCode {
    let out = match result {
        Ok(out) => out,
        Err(e) => return fail(e),
    };
    let bytes = if json {
        json_bytes(&out.json)
    } else if let Some(raw) = out.raw {
        raw
    } else if out.text.is_empty() {
        Vec::new()
    } else {
        text_line(&out.text)
    };
    emit(&bytes, ExitCode::SUCCESS)
}

pub fn run() -> ExitCode {
    let (cli, json) = match args::parse() {
        Ok(c) => c,
        Err(e) => return not_run(&e),
    };
    JSON_FAILURES.store(json, std::sync::atomic::Ordering::Relaxed);
    // Without a config dir: a shell's completions need no home.
    if let Verb::Completions { shell } = cli.verb {
        return commands::completions::run(shell);
    }
    // Nor does settings.json's schema.
    if let Verb::Settings {
        verb: Some(args::SettingsVerb::Schema),
        ..
    } = cli.verb
    {
        return commands::settings::schema();
    }
    let config_flag = cli.config_dir.clone();
    let config = match config_dir(cli.config_dir) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    dispatch(cli.verb, config, config_flag.as_ref())
}

/// Each verb to its group's file in [`commands`].
fn dispatch(verb: Verb, config: PathBuf, config_flag: Option<&PathBuf>) -> ExitCode {
    use commands::*;
    let c = || Client::new(&config);
    match verb {
        Verb::Serve { log_level } => serve::run(config, log_level),
        // Answered in `run`, without a config dir.
        Verb::Completions { .. } => ExitCode::SUCCESS,
        Verb::Sandbox {
            verb: Some(verb), ..
        } => sandbox::verb(&c(), verb),
        Verb::Sandbox {
            template,
            args,
            detach_keys,
            json: Json { json },
            ..
        } => sandbox::run(
            &config,
            sandbox::Options {
                template: &template.unwrap_or_default(),
                args: &args,
                detach_keys: detach_keys.as_deref(),
                json_out: json,
                config_flag,
            },
        ),
        Verb::Terminal(v) => terminal::run(&config, v, config_flag),
        Verb::Session(v) => session::run(&c(), v),
        Verb::Service(v) => service::run(&config, v),
        Verb::Status {
            json: Json { json },
        } => print(json, status::status(&c(), &config)),
        Verb::Doctor {
            json: Json { json },
        } => doctor::run(&c(), json),
        Verb::Audit {
            verb,
            tail,
            since,
            follow,
            json,
        } => audit::run(
            &c(),
            verb,
            audit::Log {
                tail,
                since,
                follow,
            },
            json,
        ),
        Verb::Token(v) => token::run(&c(), v),
        Verb::Settings {
            open,
            json: Json { json },
            ..
        } => print(json, settings::link(&c(), open)),
        Verb::Version {
            json: Json { json },
        } => print(json, Ok(version::out())),
    }
}

/// A command line clap answered itself: `--help`, `help` and `--version` on stdout,
/// exit 0; anything else — a usage error, or bare `relay`, which gets the help — clap's
/// whole message on stderr (what is wrong, the usage line, a suggestion, the `--` tip),
/// exit 2, clap's convention for usage (docs/cli.md#exit-codes). The message quotes
/// what was typed, so its control bytes are shown as text, as every `error:` line's are.
fn not_run(e: &clap::Error) -> ExitCode {
    let text = e.render().to_string();
    if e.exit_code() == 0 {
        return emit(text.as_bytes(), ExitCode::SUCCESS);
    }
    if args::json_asked() {
        let message = text.trim_end().trim_start_matches("error: ").to_string();
        let line = failure::json_line(&failure::Failure {
            code: "usage",
            message,
        });
        return emit(line.as_bytes(), ExitCode::from(USAGE));
    }
    let _ = std::io::stderr().write_all(termout::visible(text.as_bytes()).as_bytes());
    ExitCode::from(USAGE)
}

/// The exit status of a command line relay did not run (clap's `USAGE_CODE`).
const USAGE: u8 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 40: `--config-dir <a file>` used to get advice to start relay on the file.
    #[test]
    fn a_config_dir_that_is_a_file_is_named_with_what_to_name_instead() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("settings.json");
        std::fs::write(&file, "{}").unwrap();
        let e = a_folder(file.clone(), "--config-dir").unwrap_err();
        assert!(
            e.starts_with(&format!(
                "--config-dir {} is a file, not a folder: relay keeps its settings.json, \
                 socket and logs in a folder; name a folder (relay makes it when missing), \
                 or leave --config-dir out for the default, ",
                file.display()
            )),
            "{e}"
        );
        let env = a_folder(file, "RELAY_CONFIG_DIR").unwrap_err();
        assert!(env.starts_with("RELAY_CONFIG_DIR /"), "{env}");
        // A folder, or nothing yet: taken as it is.
        assert_eq!(
            a_folder(d.path().into(), "--config-dir"),
            Ok(d.path().into())
        );
        let new = d.path().join("new");
        assert_eq!(a_folder(new.clone(), "--config-dir"), Ok(new));
    }

    #[test]
    fn a_deleted_current_folder_is_named_as_such_and_a_folder_name_in_other_bytes_too() {
        let gone = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(
            current_folder_gone(&gone),
            "the current folder no longer exists (it was deleted or moved after this shell \
             entered it): cd into a folder that exists, such as your project's, and run the \
             command again"
        );
        use std::os::unix::ffi::OsStrExt;
        let odd = Path::new(std::ffi::OsStr::from_bytes(b"/home/ada/caf\xe9"));
        assert_eq!(
            folder_not_utf8(odd, "run relay sandbox from a folder whose name is UTF-8"),
            "the current folder's name is not UTF-8 (/home/ada/caf\u{fffd}), and relay names \
             folders in UTF-8: rename the folder to a UTF-8 name, or run relay sandbox from \
             a folder whose name is UTF-8"
        );
    }
}
