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

/// A bare repository of one commit (`first`, holding `a.txt`) at `at`, made on the host
/// and ready to be served as files.
fn origin(home: &std::path::Path, at: &std::path::Path) {
    let work = at.with_extension("work");
    std::fs::create_dir_all(&work).unwrap();
    persons_git(home, &work, &["init", "-q", "."]);
    std::fs::write(work.join("a.txt"), "a\n").unwrap();
    persons_git(home, &work, &["add", "a.txt"]);
    persons_git(
        home,
        &work,
        &[
            "-c",
            "user.name=p",
            "-c",
            "user.email=p@example.com",
            "commit",
            "-qm",
            "first",
        ],
    );
    persons_git(
        home,
        at.parent().unwrap(),
        &[
            "clone",
            "-q",
            "--bare",
            work.to_str().unwrap(),
            at.to_str().unwrap(),
        ],
    );
    // Served as files (git's dumb HTTP).
    persons_git(home, at, &["update-server-info"]);
    std::fs::remove_dir_all(&work).unwrap();
}

/// What `dir` holds, sorted.
fn names(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Clones `url` into the folder it runs in.
fn clone(url: &str) -> String {
    format!("git clone -q {url} . && git log --format=%s && echo cloned=ok")
}

/// `git clone URL .` in the empty folder a session starts in works as one folder down:
/// relay makes none of its folders there (a new folder is the session's, as one it
/// makes), in a shell and in Claude's Bash tool; afterwards it holds only the clone.
#[test]
fn git_clone_into_the_empty_folder_a_session_starts_in_works_in_a_shell_and_in_claudes_bash_tool() {
    let registry = relay_e2e::registry::Registry::start();
    let r = relay_e2e::daemon::Relay::prepare(None, false);
    origin(&r.home, &registry.root.join("git/origin.git"));
    let url = format!("http://127.0.0.1:{}/git/origin.git", registry.port);
    let (here, there) = (r.project.join("here"), r.project.join("there"));
    std::fs::create_dir(&here).unwrap();
    std::fs::create_dir(&there).unwrap();
    let (r, api) = super::with_claude_running(r, &registry, "toolu_clone", &clone(&url));

    let text = super::shell(&r, &here, &clone(&url)).0;
    assert!(
        text.contains("first") && text.contains("cloned=ok"),
        "{text}"
    );
    assert_eq!(names(&here), [".git", "a.txt"], "{text}");

    let Some(api) = api else { return };
    let id =
        crate::clients::real_turns::start_session(&r, &["--directory", there.to_str().unwrap()]);
    let reply = crate::clients::real_turns::message(&r, &id, "clone it here", &[]);
    assert_eq!(reply.status, 0, "{}", reply.stderr);
    let result = api
        .messages()
        .iter()
        .flat_map(|q| q["tool_results"].as_array().cloned().unwrap_or_default())
        .find(|t| t["tool_use_id"] == "toolu_clone")
        .expect("the tool call's result");
    let text = result["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("first") && text.contains("cloned=ok"),
        "{result}"
    );
    let left = names(&there);
    assert_eq!(left, [".git", "a.txt"], "{result}");
}
