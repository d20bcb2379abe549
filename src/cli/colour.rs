//! Colour for the words a person scans for: `error:`, and doctor's `fail` and `warn`.
//! Only on a terminal, and never with `NO_COLOR` set to anything (no-color.org): a pipe,
//! a file and `--json` get the same words without escape sequences
//! (docs/cli.md#output-contract).

use std::ffi::OsString;

const RED: &str = "\x1b[1;31m";
const YELLOW: &str = "\x1b[33m";
const RESET: &str = "\x1b[0m";

/// Whether a stream gets colour: it is a terminal and `NO_COLOR` is unset or empty.
pub fn wanted(is_terminal: bool, no_color: Option<OsString>) -> bool {
    is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// [`wanted`] for stderr, or stdout, as this process has them.
pub fn on_stderr() -> bool {
    use std::io::IsTerminal;
    wanted(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR"),
    )
}

pub fn on_stdout() -> bool {
    use std::io::IsTerminal;
    wanted(
        std::io::stdout().is_terminal(),
        std::env::var_os("NO_COLOR"),
    )
}

/// `error:`, red when `on`.
pub fn error_word(on: bool) -> String {
    paint("error:", RED, on)
}

/// Doctor's report with each line's leading `fail` red and `warn` yellow when `on`; the
/// rest of each line as it was.
pub fn doctor_report(text: &str, on: bool) -> String {
    if !on {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let painted = [("fail ", RED), ("warn ", YELLOW)]
            .iter()
            .find_map(|(word, colour)| {
                let rest = line.strip_prefix(word)?;
                Some(format!("{} {rest}", paint(word.trim_end(), colour, true)))
            });
        out.push_str(painted.as_deref().unwrap_or(line));
    }
    out
}

fn paint(word: &str, colour: &str, on: bool) -> String {
    if on {
        format!("{colour}{word}{RESET}")
    } else {
        word.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_is_for_a_terminal_without_no_color() {
        assert!(wanted(true, None));
        assert!(wanted(true, Some(OsString::new())));
        assert!(!wanted(true, Some("1".into())));
        assert!(!wanted(false, None));
    }

    #[test]
    fn only_the_status_words_at_a_lines_start_are_painted() {
        let text = "ok    sandbox          bwrap\nfail  token_file       mode 0644\n                       fix: chmod 600 t\nwarn  limits           fail warn\n";
        assert_eq!(doctor_report(text, false), text);
        let painted = doctor_report(text, true);
        assert_eq!(
            painted,
            "ok    sandbox          bwrap\n\x1b[1;31mfail\x1b[0m  token_file       mode 0644\n                       fix: chmod 600 t\n\x1b[33mwarn\x1b[0m  limits           fail warn\n"
        );
        assert_eq!(error_word(true), "\x1b[1;31merror:\x1b[0m");
        assert_eq!(error_word(false), "error:");
    }
}
