//! `relay token list`: one block per configured token file — its projects and account
//! labels, fingerprint, mode, size, last change and the sessions running on it, never
//! a token (docs/cli.md#relay-token-list).

use std::process::ExitCode;

use crate::cli::args::{Json, TokenVerb};
use crate::cli::client::Client;
use crate::cli::{print, Out};
use crate::wire;

pub fn run(c: &Client, v: TokenVerb) -> ExitCode {
    match v {
        TokenVerb::List {
            json: Json { json },
        } => print(json, list(c)),
    }
}

fn list(c: &Client) -> Result<Out, String> {
    let (t, v): (wire::Tokens, _) = c.call_as("GET", "/api/tokens")?;
    Ok(Out::new(v, text(&t)))
}

fn text(t: &wire::Tokens) -> String {
    if t.tokens.is_empty() {
        return "no token file is configured (set claude_token_file in settings.json)".into();
    }
    t.tokens.iter().map(block).collect::<Vec<_>>().join("\n")
}

/// A head line (the path and what is known of the file), then one indented line each.
fn block(f: &wire::TokenFile) -> String {
    let mut head = vec![f.path.display().to_string()];
    head.extend(f.fingerprint.as_ref().map(|fp| format!("token={fp}")));
    head.extend(f.mode.as_ref().map(|m| format!("mode={m}")));
    head.extend(f.size.map(|n| format!("{n} bytes")));
    head.extend(
        f.changed_ms
            .map(|ms| format!("changed {}", crate::text::utc_ms(ms))),
    );
    let mut lines = vec![head.join("  ")];
    lines.push(format!("  set by: {}", f.keys.join(", ")));
    let projects: Vec<String> = f
        .projects
        .iter()
        .map(|p| match &p.account {
            Some(a) => format!("{} (account {a})", p.id),
            None => p.id.clone(),
        })
        .collect();
    lines.push(format!(
        "  projects: {}",
        if projects.is_empty() {
            "none (every project names its own)".to_string()
        } else {
            projects.join(", ")
        }
    ));
    if let Some(p) = &f.problem {
        lines.push(format!("  problem: {p}"));
    }
    if !f.sessions.is_empty() {
        lines.push(format!("  running on it: {}", f.sessions.join(", ")));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_file_is_a_block_with_what_is_known_of_it() {
        let t: wire::Tokens = serde_json::from_value(json!({"tokens": [
            {"path": "/home/ada/.config/t", "keys": ["claude_token_file"],
             "projects": [{"id": "p", "account": "work"}, {"id": "q"}],
             "fingerprint": "sha256:ab12", "mode": "0600", "size": 108,
             "changed_ms": 1_700_000_000_000u64, "sessions": ["s-1", "t-2"]},
            {"path": "/x/gone", "keys": ["projects[1].claude_token_file"], "projects": [],
             "problem": "no such file", "sessions": []},
        ]}))
        .unwrap();
        assert_eq!(
            text(&t),
            "/home/ada/.config/t  token=sha256:ab12  mode=0600  108 bytes  changed 2023-11-14 22:13:20.000Z\n\
             \x20 set by: claude_token_file\n\
             \x20 projects: p (account work), q\n\
             \x20 running on it: s-1, t-2\n\
             /x/gone\n\
             \x20 set by: projects[1].claude_token_file\n\
             \x20 projects: none (every project names its own)\n\
             \x20 problem: no such file"
        );
    }

    #[test]
    fn no_file_says_which_setting_names_one() {
        assert_eq!(
            text(&wire::Tokens::default()),
            "no token file is configured (set claude_token_file in settings.json)"
        );
    }
}
