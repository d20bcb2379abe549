//! A repository Claude makes in its own Bash tool, in a launch that got the token, is
//! the person's to use at once: it commits under the person's git identity, nothing in
//! it is set aside, and the person's git logs, commits and reads it as their own
//! (docs/THREAT-MODEL.md#repositories-a-session-made-or-changed).

use std::path::Path;
use std::process::{Command, Output};

use relay::wire::REPOSITORY_SET_ASIDE;

const INIT: &str = "git init -q lib && cd lib && echo a > a.txt && git add a.txt \
     && git commit -qm by-claude && git checkout -qb topic && echo committed=ok";

fn persons_git(home: &Path, dir: &Path, args: &[&str]) -> Output {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    out
}

#[test]
fn a_repository_claude_inits_and_commits_in_its_bash_tool_is_the_persons_to_use_at_once() {
    let registry = relay_e2e::registry::Registry::start();
    let r = relay_e2e::daemon::Relay::prepare(None, false);
    let (r, api) = super::with_claude_running(r, &registry, "toolu_git", INIT);
    let Some(api) = api else { return };
    std::fs::write(
        r.home.join(".gitconfig"),
        "[user]\n\tname = Pat Person\n\temail = pat@example.com\n",
    )
    .unwrap();
    let result = super::claudes_tool_result(&r, &api, "toolu_git");
    assert!(
        result["text"]
            .as_str()
            .unwrap_or_default()
            .contains("committed=ok"),
        "{result}"
    );
    let lib = r.project.join("lib");
    let log = persons_git(&r.home, &lib, &["log", "--format=%an <%ae> %s"]);
    assert_eq!(
        String::from_utf8_lossy(&log.stdout),
        "Pat Person <pat@example.com> by-claude\n"
    );
    let status = persons_git(&r.home, &lib, &["status", "--porcelain"]);
    assert!(status.stdout.is_empty(), "{status:?}");
    std::fs::write(lib.join("b.txt"), "b\n").unwrap();
    persons_git(&r.home, &lib, &["add", "b.txt"]);
    persons_git(&r.home, &lib, &["commit", "-qm", "by-the-person"]);
    persons_git(&r.home, &lib, &["checkout", "-q", "-"]);
    // Nothing of it was set aside, while the session ran or since.
    assert!(!lib.join(".git/relay-set-aside").exists());
    let rows: Vec<_> = r
        .audit_rows()
        .into_iter()
        .filter(|row| row["action"] == REPOSITORY_SET_ASIDE)
        .collect();
    assert!(rows.is_empty(), "{rows:?}");
}
