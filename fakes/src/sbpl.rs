//! Well-formedness of a Seatbelt profile (SBPL), as the fake `sandbox-exec` checks it.
//!
//! This is not an SBPL interpreter: it checks the shape a rendered profile must have so
//! that the real `sandbox-exec` on macOS would at least parse it. The first form is exactly
//! `(version 1)`; parentheses balance outside strings and comments; strings close (a
//! backslash escapes the next character); `;` starts a comment that runs to the end of the
//! line; between top-level forms there is only whitespace and comments.
//!
//! Not recognised (relay's renderer does not emit them): `#| … |#` block comments and
//! `#\(` character literals.

use std::fmt;

/// The one first form relay's profiles start with, byte for byte.
const VERSION_FORM: &[u8] = b"(version 1)";

/// Why a profile is not well-formed. Lines are 1-based.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SbplError {
    /// Nothing but whitespace and comments.
    Empty,
    /// The first form is not exactly `(version 1)`.
    FirstFormNotVersion { line: usize },
    /// A `)` with no open form.
    UnexpectedClose { line: usize },
    /// A form still open at the end; `line` is where the outermost one opened.
    UnclosedForm { line: usize },
    /// A string still open at the end; `line` is where it opened.
    UnclosedString { line: usize },
    /// Something other than whitespace or a comment between top-level forms.
    OutsideForm { line: usize },
}

impl fmt::Display for SbplError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SbplError::Empty => write!(f, "no forms: the profile must start with (version 1)"),
            SbplError::FirstFormNotVersion { line } => {
                write!(f, "line {line}: the first form must be exactly (version 1)")
            }
            SbplError::UnexpectedClose { line } => {
                write!(f, "line {line}: unbalanced ')' with no open form")
            }
            SbplError::UnclosedForm { line } => {
                write!(f, "line {line}: unbalanced '(' never closed")
            }
            SbplError::UnclosedString { line } => write!(f, "line {line}: unclosed string"),
            SbplError::OutsideForm { line } => {
                write!(f, "line {line}: content outside a top-level form")
            }
        }
    }
}

impl std::error::Error for SbplError {}

/// Checks that `profile` is well-formed SBPL (see the module doc).
pub fn check(profile: &[u8]) -> Result<(), SbplError> {
    let mut line = 1;
    let mut depth = 0usize;
    // Where the current outermost form opened, for the "never closed" message.
    let mut outer_open_line = 0;
    let mut seen_form = false;
    let mut i = 0;
    while i < profile.len() {
        match profile[i] {
            b'\n' => line += 1,
            b' ' | b'\t' | b'\r' | b'\x0b' | b'\x0c' => {}
            b';' => {
                // Leave the newline itself to the main loop so it counts the line.
                while i + 1 < profile.len() && profile[i + 1] != b'\n' {
                    i += 1;
                }
            }
            b'(' => {
                if depth == 0 {
                    if !seen_form && !profile[i..].starts_with(VERSION_FORM) {
                        return Err(SbplError::FirstFormNotVersion { line });
                    }
                    seen_form = true;
                    outer_open_line = line;
                }
                depth += 1;
            }
            b')' => {
                if depth == 0 {
                    return Err(SbplError::UnexpectedClose { line });
                }
                depth -= 1;
            }
            _ if depth == 0 => return Err(SbplError::OutsideForm { line }),
            b'"' => {
                let open_line = line;
                i += 1;
                loop {
                    match profile.get(i) {
                        None => return Err(SbplError::UnclosedString { line: open_line }),
                        Some(b'"') => break,
                        Some(b'\\') => {
                            if profile.get(i + 1) == Some(&b'\n') {
                                line += 1;
                            }
                            i += 2;
                            continue;
                        }
                        Some(b'\n') => line += 1,
                        Some(_) => {}
                    }
                    i += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    if depth > 0 {
        return Err(SbplError::UnclosedForm {
            line: outer_open_line,
        });
    }
    if !seen_form {
        return Err(SbplError::Empty);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"; rendered by relay
(version 1)
(deny default)
(import "system.sb")
(allow file-read* (subpath "/usr/lib"))
(allow file-read* file-write* (subpath "/Users/me/project")) ; session directory
(deny file-read* file-write* (literal "/Users/me/.config/relay/token"))
(allow file-read-metadata (regex #"^/private/var/folders/[^/]+"))
"#;

    #[test]
    fn good_profile_is_accepted() {
        assert_eq!(check(GOOD.as_bytes()), Ok(()));
    }

    #[test]
    fn version_alone_is_accepted() {
        assert_eq!(check(b"(version 1)"), Ok(()));
    }

    #[test]
    fn leading_comments_and_blank_lines_before_version_are_accepted() {
        assert_eq!(
            check(b"\n  ; a (comment\n;; another )\n\n(version 1)\n"),
            Ok(())
        );
    }

    #[test]
    fn missing_version_is_refused() {
        assert_eq!(
            check(b"(deny default)\n(allow process-exec)\n"),
            Err(SbplError::FirstFormNotVersion { line: 1 })
        );
    }

    #[test]
    fn version_not_first_is_refused() {
        assert_eq!(
            check(b"; header\n(deny default)\n(version 1)\n"),
            Err(SbplError::FirstFormNotVersion { line: 2 })
        );
    }

    #[test]
    fn other_version_is_refused() {
        for profile in [
            "(version 2)",
            "(version 10)",
            "(version 1 2)",
            "( version 1)",
        ] {
            assert_eq!(
                check(profile.as_bytes()),
                Err(SbplError::FirstFormNotVersion { line: 1 }),
                "{profile}"
            );
        }
    }

    #[test]
    fn empty_profile_is_refused() {
        assert_eq!(check(b""), Err(SbplError::Empty));
        assert_eq!(check(b"  ; only a comment\n"), Err(SbplError::Empty));
    }

    #[test]
    fn unbalanced_open_is_refused() {
        assert_eq!(
            check(b"(version 1)\n(allow file-read*\n  (subpath \"/usr\")\n"),
            Err(SbplError::UnclosedForm { line: 2 })
        );
    }

    #[test]
    fn unbalanced_close_is_refused() {
        assert_eq!(
            check(b"(version 1)\n(deny default))\n"),
            Err(SbplError::UnexpectedClose { line: 2 })
        );
    }

    #[test]
    fn unclosed_string_is_refused() {
        assert_eq!(
            check(b"(version 1)\n(allow file-read* (literal \"/tmp/x))\n"),
            Err(SbplError::UnclosedString { line: 2 })
        );
    }

    #[test]
    fn string_ending_in_a_lone_backslash_is_unclosed() {
        assert_eq!(
            check(b"(version 1)\n(literal \"abc\\"),
            Err(SbplError::UnclosedString { line: 2 })
        );
    }

    #[test]
    fn escaped_quote_inside_string_is_accepted() {
        assert_eq!(
            check(br#"(version 1)(allow file-read* (literal "/tmp/a\"b"))"#),
            Ok(())
        );
    }

    #[test]
    fn escaped_backslash_before_closing_quote_is_accepted() {
        assert_eq!(check(br#"(version 1)(literal "C:\\")"#), Ok(()));
    }

    #[test]
    fn paren_inside_string_is_accepted() {
        assert_eq!(
            check(b"(version 1)\n(allow file-read* (literal \"/tmp/a)(b(\"))\n"),
            Ok(())
        );
    }

    #[test]
    fn semicolon_inside_string_is_not_a_comment() {
        assert_eq!(check(b"(version 1)\n(literal \"/tmp/a;b\")\n"), Ok(()));
    }

    #[test]
    fn comment_with_paren_is_accepted() {
        assert_eq!(
            check(b"(version 1)\n; deny ( everything )) here\n(deny default) ; trailing (\n"),
            Ok(())
        );
    }

    #[test]
    fn content_outside_forms_is_refused() {
        assert_eq!(
            check(b"(version 1)\nallow\n"),
            Err(SbplError::OutsideForm { line: 2 })
        );
        assert_eq!(
            check(b"(version 1) \"loose string\"\n"),
            Err(SbplError::OutsideForm { line: 1 })
        );
        assert_eq!(check(b"version 1"), Err(SbplError::OutsideForm { line: 1 }));
    }

    #[test]
    fn line_numbers_count_newlines_inside_strings() {
        assert_eq!(
            check(b"(version 1)\n(literal \"a\nb\")\n)"),
            Err(SbplError::UnexpectedClose { line: 4 })
        );
    }
}
