//! `relay completions SHELL`: a completion script made from the command tree
//! ([`crate::cli::args`]), printed on stdout; it needs no config dir. For bash and fish
//! it also completes the ids of terminals and sessions, asked of the running relay as
//! the shell completes (`relay terminal list -q`; docs/cli.md#completion).

use std::process::ExitCode;

use crate::cli::{args, emit};

pub fn run(shell: clap_complete::Shell) -> ExitCode {
    emit(&script(shell), ExitCode::SUCCESS)
}

fn script(shell: clap_complete::Shell) -> Vec<u8> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut args::command(), "relay", &mut out);
    match shell {
        clap_complete::Shell::Bash => out.extend_from_slice(BASH_IDS.as_bytes()),
        clap_complete::Shell::Fish => out.extend_from_slice(FISH_IDS.as_bytes()),
        _ => {}
    }
    out
}

/// bash: after `terminal` or `session` and one of the verbs that take an id (or after
/// `--id`), the ids the running relay lists (of the same `--config-dir`); else clap's
/// completion.
const BASH_IDS: &str = r#"
# The ids of terminals and sessions, from the running relay.
_relay_ids() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
    local group="" verb="" i cfg=()
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in
            --config-dir) cfg=(--config-dir "${COMP_WORDS[i+1]}"); ((i++)) ;;
            --config-dir=*) cfg=("${COMP_WORDS[i]}") ;;
            terminal|session) [[ -z $group ]] && group="${COMP_WORDS[i]}" ;;
            log|stop|attach|resume|purge|egress|interrupt|message)
                [[ -n $group && -z $verb ]] && verb="${COMP_WORDS[i]}" ;;
        esac
    done
    if [[ -n $verb && ( $prev == --id || ( $cur != -* && $prev == "$verb" ) ) ]]; then
        COMPREPLY=($(compgen -W "$(relay "${cfg[@]}" "$group" list -q 2>/dev/null)" -- "$cur"))
        return 0
    fi
    _relay "$@"
}
complete -F _relay_ids -o bashdefault -o default relay
"#;

/// fish: the same ids after the same verbs.
const FISH_IDS: &str = "
# The ids of terminals and sessions, from the running relay.
complete -c relay -n '__fish_seen_subcommand_from terminal; and __fish_seen_subcommand_from log stop attach resume purge egress' -f -a '(relay terminal list -q 2>/dev/null)'
complete -c relay -n '__fish_seen_subcommand_from session; and __fish_seen_subcommand_from log stop resume purge egress interrupt message' -f -a '(relay session list -q 2>/dev/null)'
";

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
