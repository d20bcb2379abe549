//! `relay completions SHELL`: a completion script made from the command tree
//! ([`crate::cli::args`]), printed on stdout; it needs no config dir.

use std::process::ExitCode;

use crate::cli::{args, emit};

pub fn run(shell: clap_complete::Shell) -> ExitCode {
    emit(&script(shell), ExitCode::SUCCESS)
}

fn script(shell: clap_complete::Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut args::command(), "relay", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script completes the nested verbs and their flags too.
    #[test]
    fn the_bash_script_completes_nested_verbs_and_flags() {
        let text = String::from_utf8(script(clap_complete::Shell::Bash)).unwrap();
        assert!(text.starts_with("_relay() {"), "{}", &text[..40]);
        for word in ["explain", "--detach-keys", "--permission-mode", "--tail"] {
            assert!(text.contains(word), "no {word}");
        }
        assert!(text.ends_with("\n"));
    }
}
