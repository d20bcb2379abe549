//! The configuration a repository a session made or changed may keep: an allowlist of
//! inert keys, each with why it runs nothing. Every other entry — a key git has today
//! that runs a program (`core.fsmonitor`, `filter.*.clean`, `include.path`, an alias)
//! and any key a later git adds — is set aside (docs/THREAT-MODEL.md#repositories-a-session-made-or-changed).
//! A test reads `git help -c` of the git on the machine and fails when a key it lists is
//! admitted here and runs a program.

use std::path::Path;

use super::config::{boolean, Entry};

/// What a value of an admitted key must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    Any,
    /// Not a URL of git's `ext::` transport, whose address is a command git runs.
    NotExt,
    /// One of git's booleans (`branch.<name>.rebase = interactive` opens an editor).
    Boolean,
}

/// One admitted key: `section.name`, or `section.<name>.name` for any subsection.
pub struct Allowed {
    pub key: &'static str,
    pub value: Value,
    /// Why it runs nothing: read by the test that holds docs/session-host.md's table to
    /// this list.
    #[cfg_attr(not(test), allow(dead_code))]
    pub why: &'static str,
}

const fn allow(key: &'static str, value: Value, why: &'static str) -> Allowed {
    Allowed { key, value, why }
}

const FORMAT: &str = "how git reads the repository's own files";
const CHECKOUT: &str = "how git writes and compares the working tree's files";

/// The keys kept; what `git init`, `git clone`, `git submodule add` and `git remote add`
/// write is among them, so a repository made the ordinary way loses nothing.
pub const ALLOWED: &[Allowed] = &[
    allow("core.repositoryformatversion", Value::Any, FORMAT),
    allow("core.bare", Value::Any, FORMAT),
    allow("core.logallrefupdates", Value::Any, FORMAT),
    allow(
        "core.worktree",
        Value::Any,
        "where the working tree is, kept only as git writes it: a folder whose `.git` \
         file names this git folder back (a submodule's, `worktree_is_gits`)",
    ),
    allow("core.filemode", Value::Any, CHECKOUT),
    allow("core.ignorecase", Value::Any, CHECKOUT),
    allow("core.precomposeunicode", Value::Any, CHECKOUT),
    allow("core.symlinks", Value::Any, CHECKOUT),
    allow("core.autocrlf", Value::Any, CHECKOUT),
    allow("core.eol", Value::Any, CHECKOUT),
    allow("extensions.objectformat", Value::Any, FORMAT),
    allow("extensions.refstorage", Value::Any, FORMAT),
    allow("extensions.worktreeconfig", Value::Any, FORMAT),
    allow(
        "remote.<name>.url",
        Value::NotExt,
        "where fetch goes; the transport named is git's own or one on the person's PATH",
    ),
    allow(
        "remote.<name>.pushurl",
        Value::NotExt,
        "where push goes, as url",
    ),
    allow(
        "remote.<name>.fetch",
        Value::Any,
        "which refs a fetch takes",
    ),
    allow("branch.<name>.remote", Value::Any, "a branch's upstream"),
    allow("branch.<name>.merge", Value::Any, "a branch's upstream"),
    allow(
        "branch.<name>.rebase",
        Value::Boolean,
        "whether a pull rebases",
    ),
    allow("user.name", Value::Any, "a name written into commits"),
    allow("user.email", Value::Any, "an address written into commits"),
    allow("init.defaultbranch", Value::Any, "a branch name"),
    allow(
        "submodule.<name>.url",
        Value::NotExt,
        "where a submodule is fetched from, as url",
    ),
    allow(
        "submodule.<name>.active",
        Value::Any,
        "whether a submodule is used",
    ),
];

/// Whether `e` stays in the repository's configuration.
pub fn admits(e: &Entry) -> bool {
    ALLOWED
        .iter()
        .any(|a| key_matches(a.key, e) && value_fits(a.value, e.value.as_deref()))
}

/// Whether `e`, in the configuration of the git folder at `git`, is not
/// `core.worktree`, or names the working tree git itself wrote there: a folder (reached
/// through no link) whose `.git` file names `git` back, as `git submodule` leaves a
/// submodule's git folder. Any other value would send the person's git to a working
/// tree of the session's choosing (its `.gitattributes`, its files).
pub fn worktree_is_gits(git: &Path, e: &Entry) -> bool {
    if !(e.section == b"core" && e.sub.is_none() && e.name == b"worktree") {
        return true;
    }
    let Some(value) = e.value.as_deref() else {
        return false;
    };
    let tree = super::find::lexical(&git.join(super::at::os(value)));
    if std::fs::canonicalize(&tree).ok().as_deref() != Some(tree.as_path()) {
        return false;
    }
    let Ok(text) = std::fs::read(tree.join(".git")) else {
        return false;
    };
    let is_file = std::fs::symlink_metadata(tree.join(".git")).is_ok_and(|m| m.is_file());
    let Some(back) = text.strip_prefix(b"gitdir: ") else {
        return false;
    };
    let back = back.trim_ascii_end();
    is_file && super::find::lexical(&tree.join(super::at::os(back))) == git
}

fn key_matches(key: &str, e: &Entry) -> bool {
    let parts: Vec<&str> = key.split('.').collect();
    match (parts.as_slice(), &e.sub) {
        ([section, name], None) => e.section == section.as_bytes() && e.name == name.as_bytes(),
        ([section, "<name>", name], Some(_)) => {
            e.section == section.as_bytes() && e.name == name.as_bytes()
        }
        _ => false,
    }
}

fn value_fits(check: Value, v: Option<&[u8]>) -> bool {
    match check {
        Value::Any => true,
        Value::Boolean => boolean(v).is_some(),
        Value::NotExt => v.is_some_and(|v| {
            let v = v.trim_ascii_start();
            !(v.len() >= 5 && v[..5].eq_ignore_ascii_case(b"ext::"))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry for `key` as `git help -c` spells it: a `<placeholder>` is a
    /// subsection, a `*` any name.
    fn sample(key: &str, value: &str) -> Entry {
        let lower = key.to_ascii_lowercase();
        let parts: Vec<&str> = lower.split('.').collect();
        let word = |s: &str| {
            if s == "*" || s.starts_with('<') {
                "x"
            } else {
                s
            }
            .as_bytes()
            .to_vec()
        };
        let (section, sub, name) = match parts.as_slice() {
            [s, n] => (s.as_bytes().to_vec(), None, word(n)),
            [s, mid @ .., n] => (
                s.as_bytes().to_vec(),
                Some(mid.join(".").into_bytes()),
                word(n),
            ),
            _ => panic!("{key}"),
        };
        Entry {
            section,
            sub,
            name,
            value: Some(value.as_bytes().to_vec()),
        }
    }

    /// Admitted with a plain value or a boolean one.
    fn admitted(key: &str) -> bool {
        ["x", "true"].iter().any(|v| admits(&sample(key, v)))
    }

    /// What a key's name says about running a program: the words git's own names use
    /// for a command, a program, a hook, a helper, a driver, a tool, a proxy, a path it
    /// runs or includes, and the forms whose value is a command.
    fn runs_a_program(key: &str) -> bool {
        const WORDS: &[&str] = &[
            "command",
            "cmd",
            "program",
            "editor",
            "pager",
            "hook",
            "askpass",
            "fsmonitor",
            "textconv",
            "driver",
            "helper",
            "proxy",
            "filter",
            "clean",
            "smudge",
            "process",
            "browser",
            "viewer",
            "tool",
            "exec",
            "uploadpack",
            "receivepack",
            "path",
            "include",
            "insteadof",
            "smtpserver",
            "external",
            "alias.",
            "vcs",
            ".update",
        ];
        let lower = key.to_ascii_lowercase();
        WORDS.iter().any(|w| lower.contains(w))
    }

    /// The keys the issue names (docs/THREAT-MODEL.md), and the forms whose value makes
    /// them run something.
    const NAMED: &[(&str, &str)] = &[
        ("core.fsmonitor", "touch x"),
        ("core.hooksPath", "/tmp/h"),
        ("core.sshCommand", "touch x"),
        ("core.pager", "touch x"),
        ("core.editor", "touch x"),
        ("core.askPass", "touch x"),
        ("core.gitProxy", "touch x"),
        ("diff.external", "touch x"),
        ("diff.<driver>.textconv", "touch x"),
        ("diff.<driver>.command", "touch x"),
        ("filter.<driver>.clean", "touch x"),
        ("filter.<driver>.smudge", "touch x"),
        ("filter.<driver>.process", "touch x"),
        ("merge.<driver>.driver", "touch x"),
        ("credential.helper", "touch x"),
        ("include.path", "../x"),
        ("includeIf.<condition>.path", "../x"),
        ("alias.st", "!touch x"),
        ("alias.st", "status"),
        ("gpg.program", "touch x"),
        ("gpg.<format>.program", "touch x"),
        ("sequence.editor", "touch x"),
        ("uploadpack.packObjectsHook", "touch x"),
        ("remote.<name>.uploadpack", "touch x"),
        ("remote.<name>.url", "ext::sh -c touch% x"),
        ("remote.<name>.pushurl", "EXT::sh"),
        ("submodule.<name>.url", " ext::sh"),
        ("submodule.<name>.update", "!touch x"),
        ("branch.<name>.rebase", "interactive"),
        ("url.<base>.insteadOf", "ext::"),
    ];

    /// docs/session-host.md lists this very list, key, value and why, row by row.
    #[test]
    fn the_docs_list_each_admitted_key_with_why_it_runs_nothing() {
        let doc = include_str!("../../../../docs/session-host.md");
        let section = doc
            .split("### Repositories a session made or changed")
            .nth(1)
            .expect("docs/session-host.md has the section");
        let rows: Vec<&str> = section
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2)
            .collect();
        assert_eq!(rows.len(), ALLOWED.len(), "{rows:#?}");
        for (a, row) in ALLOWED.iter().zip(rows) {
            let value = match a.value {
                Value::Any => "any",
                Value::NotExt => "not an `ext::` URL",
                Value::Boolean => "a boolean",
            };
            assert_eq!(row, format!("| `{}` | {value} | {} |", a.key, a.why));
        }
    }

    #[test]
    fn every_key_the_issue_names_is_set_aside() {
        for (key, value) in NAMED {
            assert!(!admits(&sample(key, value)), "{key} = {value} is kept");
        }
    }

    #[test]
    fn what_git_init_and_clone_write_is_kept() {
        for (key, value) in [
            ("core.repositoryformatversion", "0"),
            ("core.filemode", "true"),
            ("core.bare", "false"),
            ("core.logallrefupdates", "true"),
            ("remote.<name>.url", "/home/ada/src/x"),
            ("remote.<name>.fetch", "+refs/heads/*:refs/remotes/origin/*"),
            ("branch.<name>.remote", "origin"),
            ("branch.<name>.merge", "refs/heads/main"),
            ("submodule.<name>.url", "https://example.com/x.git"),
            ("submodule.<name>.active", "true"),
            ("core.worktree", "../../../vendor/lib"),
        ] {
            assert!(admits(&sample(key, value)), "{key} = {value} is set aside");
        }
        assert!(admits(&Entry {
            value: None,
            ..sample("core.bare", "")
        }));
        // A key of an admitted name under a subsection git does not read is not kept.
        assert!(!admits(&sample("core.<x>.bare", "true")));
    }

    /// The allowlist held to the git the tests run: each admitted key is one `git help
    /// -c` lists, and no key it lists that runs a program is admitted.
    #[test]
    fn no_key_git_help_lists_that_runs_a_program_is_admitted() {
        let out = match std::process::Command::new("git")
            .args(["help", "-c"])
            .output()
        {
            Ok(o) if o.status.success() => o,
            _ => {
                eprintln!("skip: no git to list its configuration keys");
                return;
            }
        };
        let listed: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains('.') && !l.contains(' '))
            .map(str::to_string)
            .collect();
        assert!(
            listed.len() > 500,
            "git help -c listed {} keys",
            listed.len()
        );
        let bad: Vec<&String> = listed
            .iter()
            .filter(|k| admitted(k) && runs_a_program(k))
            .collect();
        assert!(bad.is_empty(), "admitted and running a program: {bad:?}");
        let normal = |k: &str| {
            let lower = k.to_ascii_lowercase();
            let parts: Vec<&str> = lower.split('.').collect();
            match parts.as_slice() {
                [s, _, n] => format!("{s}.<name>.{n}"),
                _ => lower.clone(),
            }
        };
        let known: Vec<String> = listed.iter().map(|k| normal(k)).collect();
        for a in ALLOWED {
            let listed_here = known.iter().any(|k| k == a.key);
            // `init.defaultBranch` is read from the person's own config only; git's
            // list leaves it out, and a repository's copy is inert.
            assert!(
                listed_here || a.key == "init.defaultbranch",
                "{} is not a key git lists",
                a.key
            );
            assert!(
                !runs_a_program(a.key),
                "{} reads as running a program",
                a.key
            );
        }
        // Every named key is among those git help -c knows: the names above are git's
        // own. (An alias is a name of the person's; a filter's `process` is documented
        // in gitattributes(5) alone.)
        for (key, _) in NAMED {
            let k = normal(key);
            let form = k.starts_with("alias.") || k == "filter.<name>.process";
            assert!(form || known.contains(&k), "{key} is not a key git lists");
        }
    }

    #[test]
    fn a_work_tree_is_kept_only_where_its_git_file_names_the_git_folder_back() {
        let d = tempfile::tempdir().unwrap();
        let top = d.path().canonicalize().unwrap();
        let git = top.join(".git/modules/sub");
        std::fs::create_dir_all(&git).unwrap();
        std::fs::create_dir_all(top.join("sub")).unwrap();
        std::fs::write(top.join("sub/.git"), "gitdir: ../.git/modules/sub\n").unwrap();
        std::fs::create_dir_all(top.join("other")).unwrap();
        let worktree = |v: &str| Entry {
            section: b"core".to_vec(),
            sub: None,
            name: b"worktree".to_vec(),
            value: Some(v.as_bytes().to_vec()),
        };
        // What `git submodule add` writes, relative or absolute.
        assert!(worktree_is_gits(&git, &worktree("../../../sub")));
        let absolute = top.join("sub").display().to_string();
        assert!(worktree_is_gits(&git, &worktree(&absolute)));
        // Anywhere else: a folder with no `.git`, one naming another git folder, none.
        assert!(!worktree_is_gits(&git, &worktree("../../../other")));
        std::fs::write(top.join("other/.git"), "gitdir: ../elsewhere\n").unwrap();
        assert!(!worktree_is_gits(&git, &worktree("../../../other")));
        assert!(!worktree_is_gits(&git, &worktree("/")));
        let bare = Entry {
            value: None,
            ..worktree("")
        };
        assert!(!worktree_is_gits(&git, &bare));
        // Through a link to the right folder: not as git wrote it.
        std::os::unix::fs::symlink(top.join("sub"), top.join("link")).unwrap();
        assert!(!worktree_is_gits(&git, &worktree("../../../link")));
        // Any other key is not its business.
        let other = Entry {
            name: b"bare".to_vec(),
            ..worktree("x")
        };
        assert!(worktree_is_gits(&git, &other));
    }
}
