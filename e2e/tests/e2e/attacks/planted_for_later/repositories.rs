//! Repositories a session makes or changes under its write grants: a nested one it
//! records in the project as a gitlink, one it inits or clones, one behind a `.git`
//! file. What their configuration and hooks would run, the person's own git must never
//! run once the session has ended — after `relay sandbox` returns, and at the next start
//! of a relay killed while the session ran — while the person's own repositories keep
//! what they set (docs/THREAT-MODEL.md#repositories-a-session-made-or-changed).
//!
//! Each planted command writes a marker in a folder no sandbox can write, so a marker
//! there was written by the person's git, outside every sandbox.

use std::path::{Path, PathBuf};
use std::process::Output;

use relay::wire::{REPOSITORY_SET_ASIDE, REPOSITORY_SET_ASIDE_EVENT};
use relay_e2e::daemon::{base_settings, Relay};
use serde_json::Value;

use super::{git, person_git, sandboxed, text};

/// A relay with the project a repository of the person's (one commit), and the marker
/// folder outside every grant.
struct Case {
    r: Relay,
    ran: PathBuf,
}

impl Case {
    fn new() -> Case {
        Self::with(|_| {})
    }

    /// [`Case::new`], with `setup` run before relay starts: what the person did in their
    /// repositories some time before any session.
    fn with(setup: impl FnOnce(&Case)) -> Case {
        let r = Relay::prepare(None, false);
        r.write_settings(&base_settings(None));
        let ran = r.root.join("ran");
        std::fs::create_dir_all(&ran).unwrap();
        git(&r.home, &r.project, &["init", "-q", "."]);
        std::fs::write(r.project.join("README"), "mine\n").unwrap();
        git(&r.home, &r.project, &["add", "README"]);
        git(&r.home, &r.project, &["commit", "-qm", "mine"]);
        let mut c = Case { r, ran };
        setup(&c);
        c.r.launch_daemon();
        c
    }

    /// `relay sandbox shell` in the project running `script`, after the lines that give
    /// the session's git a name and put the marker folder in `$M`.
    fn session(&self, script: &str) -> String {
        sandboxed(
            &self.r,
            &self.r.project,
            &format!("{}{script}", self.preamble()),
        )
    }

    fn preamble(&self) -> String {
        format!(
            "set -e\nexport M='{}' GIT_AUTHOR_NAME=s GIT_AUTHOR_EMAIL=s@example.com \
             GIT_COMMITTER_NAME=s GIT_COMMITTER_EMAIL=s@example.com\n",
            self.ran.display()
        )
    }

    /// git on the host as the person runs it, in `rel` of the project, whatever it
    /// answers (a planted command set aside can leave an alias unknown, a fetch with
    /// no transport).
    fn person(&self, rel: &str, args: &[&str]) -> Output {
        person_git(&self.r.home, &self.r.project.join(rel), args)
    }

    /// Waits until the file system's clock is well past the last change of `rel` (in
    /// the project): what a later session finds there is older than its launch, by
    /// more than the slack relay allows a clock coarser than its own.
    fn until_older(&self, rel: &str) {
        use std::os::unix::fs::MetadataExt;
        let ms =
            |m: &std::fs::Metadata| m.ctime() as i128 * 1000 + m.ctime_nsec() as i128 / 1_000_000;
        let then = ms(&std::fs::symlink_metadata(self.r.project.join(rel)).unwrap());
        let probe = self.r.root.join("clock");
        assert!(
            relay_e2e::wait::until(relay_e2e::WAIT, || {
                std::fs::write(&probe, "").unwrap();
                ms(&std::fs::metadata(&probe).unwrap()) > then + 200
            }),
            "the clock never moved"
        );
    }

    /// The markers written so far.
    fn ran(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.ran)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn assert_nothing_ran(&self, what: &str) {
        assert_eq!(self.ran(), Vec::<String>::new(), "{what}");
    }

    /// The `repository_set_aside` rows so far.
    fn rows(&self) -> Vec<Value> {
        self.r
            .audit_rows()
            .into_iter()
            .filter(|row| row["action"] == REPOSITORY_SET_ASIDE)
            .collect()
    }

    /// What the rows set aside of the git folder `rel` of the project, all of them as
    /// one: the live watch may have set aside part of it while the session ran, its end
    /// the rest. Its `keys`, `whole` and `hooks`, each sorted once; the first `folder`.
    fn set_aside(&self, rel: &str) -> Value {
        let rows = self.rows();
        let want = self.r.project.join(rel);
        let found: Vec<&Value> = rows
            .iter()
            .filter_map(|row| row["repositories"].as_array())
            .flatten()
            .filter(|e| e["repository"].as_str().map(Path::new) == Some(want.as_path()))
            .collect();
        assert!(!found.is_empty(), "no {rel} in {rows:?}");
        let union = |field: &str| {
            let mut v: Vec<String> = found
                .iter()
                .filter_map(|e| e[field].as_array())
                .flatten()
                .map(|k| k.as_str().unwrap().to_string())
                .collect();
            v.sort();
            v.dedup();
            v
        };
        let mut merged = found[0].clone();
        for field in ["keys", "whole", "hooks"] {
            let v = union(field);
            if v.is_empty() {
                merged.as_object_mut().unwrap().remove(field);
            } else {
                merged[field] = serde_json::json!(v);
            }
        }
        merged
    }

    /// The text of `file` in the folders of `relay-set-aside/` of the git folder `rel`,
    /// one after the other (the live watch and the end may each have made one).
    fn aside_file(&self, rel: &str, file: &str) -> String {
        let top = self.r.project.join(rel).join("relay-set-aside");
        let mut folders: Vec<_> = std::fs::read_dir(&top)
            .unwrap_or_else(|e| panic!("{}: {e}", top.display()))
            .map(|e| e.unwrap().path())
            .collect();
        folders.sort();
        let texts: Vec<String> = folders
            .iter()
            .filter_map(|f| std::fs::read_to_string(f.join(file)).ok())
            .collect();
        assert!(!texts.is_empty(), "no {file} in {folders:?}");
        texts.concat()
    }
}

/// Makes `vendor/lib`, a repository of one commit, then runs `plant` in it.
const NESTED: &str = "mkdir -p vendor/lib && cd vendor/lib && git init -q . \
     && echo a > a.txt && git add a.txt && git commit -qm lib\n";

fn keys(entry: &Value) -> Vec<String> {
    entry["keys"]
        .as_array()
        .map(|a| a.iter().map(|k| k.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn a_nested_repository_committed_as_a_gitlink_runs_nothing_at_the_persons_git_status() {
    let c = Case::new();
    c.session(&format!(
        "{NESTED}git config core.fsmonitor \"touch $M/fsmonitor.ran; false\"
git config filter.x.clean \"touch $M/clean.ran; cat\"
echo '*.txt filter=x' > .gitattributes
cd ../.. && git add vendor/lib 2>/dev/null
git ls-files -s vendor/lib | grep -q '^160000'
"
    ));
    // The person's `git status` in the project looks into the gitlink's repository,
    // and in the nested folder runs its own; a changed file goes through the filter.
    c.person("", &["status"]);
    c.person("vendor/lib", &["status"]);
    std::fs::write(c.r.project.join("vendor/lib/a.txt"), "b\n").unwrap();
    c.person("vendor/lib", &["diff"]);
    c.person("", &["status"]);
    c.assert_nothing_ran("the nested repository's fsmonitor or filter ran");

    let entry = c.set_aside("vendor/lib/.git");
    let moved = keys(&entry);
    for k in ["core.fsmonitor", "filter.*.clean"] {
        assert!(moved.contains(&k.to_string()), "{k}: {entry}");
    }
    let lines = c.aside_file("vendor/lib/.git", "config.txt");
    assert!(
        lines.contains("fsmonitor") && lines.contains("clean.ran"),
        "{lines}"
    );
    let config = std::fs::read_to_string(c.r.project.join("vendor/lib/.git/config")).unwrap();
    assert!(
        !config.contains("fsmonitor") && !config.contains("filter"),
        "{config}"
    );
    // The gitlink is still the project's, and the nested repository still works.
    let listed = c.person("", &["ls-files", "-s", "vendor/lib"]);
    assert!(text(&listed.stdout).starts_with("160000"), "{listed:?}");
    let log = git(
        &c.r.home,
        &c.r.project.join("vendor/lib"),
        &["log", "--format=%s"],
    );
    assert_eq!(text(&log.stdout), "lib\n");
    // One event said it too.
    let ev = c.r.wait_event(|e| e["name"] == REPOSITORY_SET_ASIDE_EVENT);
    assert_eq!(ev["session_id"], c.rows()[0]["session_id"], "{ev}");
}

#[test]
fn an_fsmonitor_in_a_repository_the_session_made_never_runs_at_the_persons_git_status() {
    let c = Case::new();
    c.session(&format!(
        "{NESTED}git config core.fsmonitor \"touch $M/fsmonitor.ran; false\"\n"
    ));
    c.person("vendor/lib", &["status"]);
    c.assert_nothing_ran("the planted fsmonitor ran");
    assert_eq!(keys(&c.set_aside("vendor/lib/.git")), ["core.fsmonitor"]);
}

#[test]
fn a_clean_filter_in_a_repository_the_session_made_never_runs_at_the_persons_git_diff() {
    let c = Case::new();
    c.session(&format!(
        "{NESTED}git config filter.x.clean \"touch $M/clean.ran; cat\"
git config filter.x.smudge \"touch $M/smudge.ran; cat\"
echo '*.txt filter=x' > .gitattributes && git add .gitattributes && git commit -qm attrs
"
    ));
    std::fs::write(c.r.project.join("vendor/lib/a.txt"), "b\n").unwrap();
    c.person("vendor/lib", &["diff"]);
    c.person("vendor/lib", &["checkout", "--", "a.txt"]);
    c.assert_nothing_ran("the planted filter ran");
    let moved = keys(&c.set_aside("vendor/lib/.git"));
    assert_eq!(moved, ["filter.*.clean", "filter.*.smudge"]);
}

#[test]
fn a_hooks_path_in_a_repository_the_session_made_never_runs_at_the_persons_commit() {
    let c = Case::new();
    c.session(&format!(
        "{NESTED}mkdir .hk && printf '#!/bin/sh\\ntouch \"%s/hookspath.ran\"\\n' \"$M\" > .hk/pre-commit
chmod +x .hk/pre-commit
git config core.hooksPath \"$PWD/.hk\"
"
    ));
    std::fs::write(c.r.project.join("vendor/lib/a.txt"), "b\n").unwrap();
    c.person("vendor/lib", &["commit", "-qam", "mine"]);
    c.assert_nothing_ran("the planted hooks folder ran");
    assert_eq!(keys(&c.set_aside("vendor/lib/.git")), ["core.hookspath"]);
}

#[test]
fn an_ssh_command_in_a_repository_the_session_made_never_runs_at_the_persons_fetch() {
    let c = Case::new();
    c.session(&format!(
        "{NESTED}git remote add origin ssh://git.invalid/lib.git
git config core.sshCommand \"touch $M/ssh.ran; false\"
"
    ));
    c.person("vendor/lib", &["fetch", "-q", "origin"]);
    c.assert_nothing_ran("the planted ssh command ran");
    assert_eq!(keys(&c.set_aside("vendor/lib/.git")), ["core.sshcommand"]);
    // The remote itself is inert and stays.
    let url = c.person("vendor/lib", &["remote", "get-url", "origin"]);
    assert_eq!(text(&url.stdout), "ssh://git.invalid/lib.git\n");
}

#[test]
fn a_textconv_in_a_repository_the_session_made_never_runs_at_the_persons_git_diff() {
    let c = Case::new();
    c.session(&format!(
        "{NESTED}git config diff.x.textconv \"touch $M/textconv.ran; cat\"
echo '*.txt diff=x' > .gitattributes && git add .gitattributes && git commit -qm attrs
"
    ));
    std::fs::write(c.r.project.join("vendor/lib/a.txt"), "b\n").unwrap();
    c.person("vendor/lib", &["diff"]);
    c.person("vendor/lib", &["log", "-p", "-1"]);
    c.assert_nothing_ran("the planted textconv ran");
    assert_eq!(keys(&c.set_aside("vendor/lib/.git")), ["diff.*.textconv"]);
}

#[test]
fn a_shell_alias_in_a_repository_the_session_made_never_runs_as_the_persons_command() {
    let c = Case::new();
    c.session(&format!(
        "{NESTED}git config alias.st \"!touch $M/alias.ran\"\n"
    ));
    c.person("vendor/lib", &["st"]);
    c.assert_nothing_ran("the planted alias ran");
    assert_eq!(keys(&c.set_aside("vendor/lib/.git")), ["alias.st"]);
}

#[test]
fn a_hook_in_a_repository_the_session_made_never_runs_at_the_persons_commit_or_checkout() {
    let c = Case::new();
    c.session(&format!(
        "{NESTED}for h in pre-commit post-checkout; do
  printf '#!/bin/sh\\ntouch \"%s/%s.ran\"\\n' \"$M\" $h > .git/hooks/$h && chmod +x .git/hooks/$h
done
"
    ));
    std::fs::write(c.r.project.join("vendor/lib/a.txt"), "b\n").unwrap();
    c.person("vendor/lib", &["commit", "-qam", "mine"]);
    c.person("vendor/lib", &["checkout", "-q", "-b", "next"]);
    c.assert_nothing_ran("a planted hook ran");
    let entry = c.set_aside("vendor/lib/.git");
    assert_eq!(
        entry["hooks"],
        serde_json::json!(["post-checkout", "pre-commit"])
    );
    let hook = c.aside_file("vendor/lib/.git", "hooks.moved/pre-commit");
    assert!(hook.contains("pre-commit.ran"), "{hook}");
    // git's own samples stay where they were.
    assert!(c
        .r
        .project
        .join("vendor/lib/.git/hooks/pre-commit.sample")
        .exists());
}

#[test]
fn a_repository_the_session_clones_into_the_project_runs_nothing_it_planted() {
    let c = Case::new();
    c.session(&format!(
        "{NESTED}cd ../.. && git clone -q vendor/lib cloned && cd cloned
git config core.fsmonitor \"touch $M/fsmonitor.ran; false\"
printf '#!/bin/sh\\ntouch \"%s/hook.ran\"\\n' \"$M\" > .git/hooks/post-checkout
chmod +x .git/hooks/post-checkout
"
    ));
    c.person("cloned", &["status"]);
    c.person("cloned", &["checkout", "-q", "-b", "next"]);
    c.assert_nothing_ran("the clone's planted fsmonitor or hook ran");
    let entry = c.set_aside("cloned/.git");
    assert_eq!(keys(&entry), ["core.fsmonitor"]);
    assert_eq!(entry["hooks"], serde_json::json!(["post-checkout"]));
    // What `git clone` wrote is inert, and stays: the clone still pulls from its origin.
    let url = c.person("cloned", &["remote", "get-url", "origin"]);
    assert!(
        text(&url.stdout).trim_end().ends_with("vendor/lib"),
        "{url:?}"
    );
    let pulled = c.person("cloned", &["pull", "-q", "origin", "HEAD"]);
    assert!(pulled.status.success(), "{pulled:?}");
}

#[test]
fn a_git_file_naming_a_git_folder_elsewhere_in_the_grants_runs_nothing_it_planted() {
    let c = Case::new();
    c.session(
        "mkdir -p .store vendor/sep
git init -q --separate-git-dir \"$PWD/.store/sep.git\" vendor/sep
cd vendor/sep && echo a > a.txt && git add a.txt && git commit -qm sep
git config core.fsmonitor \"touch $M/fsmonitor.ran; false\"
test -f .git
",
    );
    c.person("vendor/sep", &["status"]);
    c.assert_nothing_ran("the planted fsmonitor behind a .git file ran");
    assert_eq!(keys(&c.set_aside(".store/sep.git")), ["core.fsmonitor"]);
}

#[test]
fn a_repository_planted_while_relay_is_killed_runs_nothing_after_relay_starts_again() {
    let mut c = Case::new();
    // First more folders than the live watch holds (`repos::watch::MAX_WATCHES`, 4,096),
    // so the repository made after them is the end's alone: here, the next start's.
    let script = format!(
        "{}seq 1 8300 | sed 's/^/many\\/d/' | (mkdir many && xargs mkdir)
{NESTED}git config core.fsmonitor \"touch $M/fsmonitor.ran; false\"
touch \"{}/up\"
exec sleep 600
",
        c.preamble(),
        c.r.project.display()
    );
    let v = c.r.shell_terminal(&script);
    let id = v["id"].as_str().unwrap().to_string();
    assert!(
        relay_e2e::wait::until(relay_e2e::WAIT, || c.r.project.join("up").exists()),
        "the session never planted"
    );
    assert!(c.rows().is_empty(), "the live watch saw it: {:?}", c.rows());
    c.r.kill();
    c.r.launch_daemon();
    c.person("vendor/lib", &["status"]);
    c.assert_nothing_ran("the fsmonitor planted before relay was killed ran");
    let entry = c.set_aside("vendor/lib/.git");
    assert_eq!(keys(&entry), ["core.fsmonitor"]);
    assert_eq!(c.rows()[0]["session_id"], id.as_str());
}

/// While the session runs, its repositories are watched: what it plants is set aside
/// within a second of the write, before the person's `git status` while it still runs.
#[test]
fn a_repository_planted_while_the_session_runs_is_set_aside_within_a_second() {
    let c = Case::new();
    let p = c.r.project.display().to_string();
    let script = format!(
        "{}mkfifo \"{p}/go\"
{NESTED}git config core.fsmonitor \"touch $M/fsmonitor.ran; false\"
touch \"{p}/planted\"
read x < \"{p}/go\"
",
        c.preamble(),
    );
    let v = c.r.shell_terminal(&script);
    let id = v["id"].as_str().unwrap().to_string();
    let ev = c.r.wait_event(|e| e["name"] == REPOSITORY_SET_ASIDE_EVENT);
    assert_eq!(ev["session_id"], id.as_str(), "{ev}");
    // The session still runs: it waits on `go`.
    c.person("vendor/lib", &["status"]);
    c.assert_nothing_ran("the fsmonitor ran while the session ran");
    let config = std::fs::read_to_string(c.r.project.join("vendor/lib/.git/config")).unwrap();
    assert!(!config.contains("fsmonitor"), "{config}");
    let row = c.rows().remove(0);
    assert_eq!(keys(&row["repositories"][0]), ["core.fsmonitor"], "{row}");
    // The window: from the write (just before `planted`) to the row.
    let planted = std::fs::metadata(c.r.project.join("planted")).unwrap();
    let planted_ms = planted
        .modified()
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let window = row["ts"].as_i64().unwrap() - planted_ms;
    assert!(window <= 1_000, "set aside {window} ms after the write");
    eprintln!("the live watch set aside the fsmonitor {window} ms after the write");
    std::fs::write(c.r.project.join("go"), "go\n").unwrap();
    c.r.wait_event(|e| e["name"] == "session.exited" && e["session_id"] == id.as_str());
    // The end found nothing more.
    assert_eq!(c.rows().len(), 1, "{:?}", c.rows());
}

/// Every plant of the tests above, made while one session runs in a folder of its own
/// inside the person's repository: it inits there, nests `vendor/lib` with each
/// variant and records it as a gitlink, clones it, puts a git folder behind a `.git`
/// file, and moves in a repository it made in its temp folder.
fn every_plant(c: &Case) -> String {
    let p = c.r.project.join("own").display().to_string();
    format!(
        r#"{pre}mkfifo "{p}/go"
# Each plant goes on whatever the one before met: the live watch may take a hook
# between its write and its chmod.
set +e
git init -q && echo a > a.txt && git add a.txt && git commit -qm own
git config core.fsmonitor "touch $M/own-fsmonitor.ran; false"
{NESTED}git config core.fsmonitor "touch $M/fsmonitor.ran; false"
git config filter.x.clean "touch $M/clean.ran; cat"
git config diff.y.textconv "touch $M/textconv.ran; cat"
printf '*.txt filter=x\n*.md diff=y\n' > .gitattributes && echo m > b.md && git add . && git commit -qm attrs
git config alias.st "!touch $M/alias.ran"
git remote add origin ssh://git.invalid/lib.git && git config core.sshCommand "touch $M/ssh.ran; false"
mkdir .hk && printf '#!/bin/sh\ntouch "%s/hookspath.ran"\n' "$M" > .hk/pre-commit && chmod +x .hk/pre-commit
git config core.hooksPath "$PWD/.hk"
for h in pre-commit post-checkout; do
  printf '#!/bin/sh\ntouch "%s/%s.ran"\n' "$M" $h > .git/hooks/$h && chmod +x .git/hooks/$h
done
cd ../.. && git add vendor/lib 2>/dev/null && git ls-files -s vendor/lib | grep -q '^160000'
git clone -q vendor/lib cloned && git -C cloned config core.fsmonitor "touch $M/clone-fsmonitor.ran; false"
printf '#!/bin/sh\ntouch "%s/clone-hook.ran"\n' "$M" > cloned/.git/hooks/post-checkout && chmod +x cloned/.git/hooks/post-checkout
mkdir .store && git init -q --separate-git-dir "$PWD/.store/sep.git" vendor/sep
git -C vendor/sep config core.fsmonitor "touch $M/sep-fsmonitor.ran; false"
git init -q "$TMPDIR/moved" && git -C "$TMPDIR/moved" config core.fsmonitor "touch $M/moved-fsmonitor.ran; false"
mv "$TMPDIR/moved" moved
touch "{p}/planted"
read x < "{p}/go"
"#,
        pre = c.preamble(),
    )
}

/// The person's git, as the tests above run it, over every plant of [`every_plant`].
fn persons_day(c: &Case) {
    std::fs::write(c.r.project.join("own/vendor/lib/a.txt"), "b\n").unwrap();
    std::fs::write(c.r.project.join("own/vendor/lib/b.md"), "n\n").unwrap();
    c.person("own", &["status"]);
    c.person("own/vendor/lib", &["status"]);
    c.person("own/vendor/lib", &["diff"]);
    c.person("own/vendor/lib", &["st"]);
    c.person("own/vendor/lib", &["fetch", "-q", "origin"]);
    c.person("own/vendor/lib", &["commit", "-qam", "mine"]);
    c.person("own/vendor/lib", &["checkout", "-q", "-b", "next"]);
    c.person("own/cloned", &["status"]);
    c.person("own/cloned", &["checkout", "-q", "-b", "next"]);
    c.person("own/vendor/sep", &["status"]);
    c.person("own/moved", &["status"]);
}

/// What the live watch must have set aside, by git folder: the keys, and the hooks.
const EVERY_PLANT: [(&str, &[&str], &[&str]); 5] = [
    ("own/.git", &["core.fsmonitor"], &[]),
    (
        "own/vendor/lib/.git",
        &[
            "alias.st",
            "core.fsmonitor",
            "core.hookspath",
            "core.sshcommand",
            "diff.*.textconv",
            "filter.*.clean",
        ],
        &["post-checkout", "pre-commit"],
    ),
    ("own/cloned/.git", &["core.fsmonitor"], &["post-checkout"]),
    ("own/.store/sep.git", &["core.fsmonitor"], &[]),
    // Made outside the watch (the session's own temp folder) and moved in whole: no
    // event ever came from inside it.
    ("own/moved/.git", &["core.fsmonitor"], &[]),
];

/// Whether the rows so far set aside all of [`EVERY_PLANT`].
fn every_plant_set_aside(c: &Case) -> bool {
    let rows = serde_json::json!(c.rows());
    EVERY_PLANT.iter().all(|(rel, want_keys, want_hooks)| {
        let want = c.r.project.join(rel);
        let entries: Vec<&Value> = rows
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|row| row["repositories"].as_array())
            .flatten()
            .filter(|e| e["repository"].as_str().map(Path::new) == Some(want.as_path()))
            .collect();
        let has = |field: &str, name: &str| {
            entries.iter().any(|e| {
                e[field]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|k| k == name))
            })
        };
        want_keys.iter().all(|k| has("keys", k)) && want_hooks.iter().all(|h| has("hooks", h))
    })
}

/// Each case above, while the session still runs: the live watch sets aside every
/// plant within a second of the last write, and the person's git, run before the
/// session ends, runs none of them; nor after it ends.
#[test]
fn every_plant_in_a_repository_the_session_made_is_set_aside_while_it_runs() {
    let c = Case::new();
    std::fs::create_dir(c.r.project.join("own")).unwrap();
    let v = c.r.cli_json(&[
        "terminal",
        "start",
        "--project",
        "p1",
        "--template",
        "shell",
        "--directory",
        &c.r.project.join("own").display().to_string(),
        "--extra-arg",
        "-c",
        "--extra-arg",
        &every_plant(&c),
    ]);
    let id = v["id"].as_str().unwrap().to_string();
    assert!(
        relay_e2e::wait::until(relay_e2e::WAIT, || every_plant_set_aside(&c)),
        "not all set aside while the session ran: {:?}",
        c.rows()
    );
    // The window: from the last write (just before `planted`) to the last row.
    let planted = std::fs::metadata(c.r.project.join("own/planted")).unwrap();
    let planted_ms = planted
        .modified()
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let last = c
        .rows()
        .iter()
        .filter_map(|r| r["ts"].as_i64())
        .max()
        .unwrap();
    eprintln!(
        "the live watch set aside the last plant {} ms after it",
        last - planted_ms
    );
    assert!(
        last - planted_ms <= 1_000,
        "set aside {} ms after the write",
        last - planted_ms
    );
    // The session still runs (it waits on `go`): the person's git meets nothing.
    assert!(c.r.project.join("own/go").exists());
    persons_day(&c);
    c.assert_nothing_ran("a plant ran while the session ran");
    std::fs::write(c.r.project.join("own/go"), "go\n").unwrap();
    c.r.wait_event(|e| e["name"] == "session.exited" && e["session_id"] == id.as_str());
    persons_day(&c);
    c.assert_nothing_ran("a plant ran after the session ended");
    // The gitlink is still the session's repository's, which still works.
    let listed = c.person("own", &["ls-files", "-s", "vendor/lib"]);
    assert!(text(&listed.stdout).starts_with("160000"), "{listed:?}");
}

/// The person's repositories: the project's (pinned at launch) and one five levels
/// down (not), each with an fsmonitor, an alias and a hook of the person's.
const DEEP: &str = "p/q/r/s/t/deep";

fn persons_own(c: &Case) {
    std::fs::create_dir_all(c.r.project.join(DEEP)).unwrap();
    git(&c.r.home, &c.r.project.join(DEEP), &["init", "-q", "."]);
    for rel in ["", DEEP] {
        let dir = c.r.project.join(rel);
        let name = if rel.is_empty() { "top" } else { "deep" };
        let fsmonitor = format!("touch {}/{name}-fsmonitor.ran; false", c.ran.display());
        git(&c.r.home, &dir, &["config", "core.fsmonitor", &fsmonitor]);
        git(&c.r.home, &dir, &["config", "alias.st", "status"]);
        let hook = dir.join(".git/hooks/post-checkout");
        let body = format!("#!/bin/sh\ntouch {}/{name}-hook.ran\n", c.ran.display());
        std::fs::write(&hook, body).unwrap();
        let mut perm = std::fs::metadata(&hook).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
        std::fs::set_permissions(&hook, perm).unwrap();
    }
}

#[test]
fn the_persons_own_fsmonitor_and_hooks_run_unchanged_after_a_session() {
    let c = Case::with(persons_own);
    let deep = DEEP;
    let before: Vec<Vec<u8>> = ["", deep]
        .iter()
        .map(|rel| std::fs::read(c.r.project.join(rel).join(".git/config")).unwrap())
        .collect();
    // Ordinary work in both: files written, added and committed.
    c.session(&format!(
        "echo work > work.txt && git add work.txt && git commit -qm work 2>/dev/null
cd {deep} && echo deep > d.txt && git add d.txt && git commit -qm deep 2>/dev/null
"
    ));
    assert!(c.rows().is_empty(), "{:?}", c.rows());
    for (i, rel) in ["", deep].into_iter().enumerate() {
        let dir = c.r.project.join(rel);
        assert_eq!(std::fs::read(dir.join(".git/config")).unwrap(), before[i]);
        assert!(!dir.join(".git/relay-set-aside").exists());
        git(&c.r.home, &dir, &["st"]);
        git(&c.r.home, &dir, &["checkout", "-q", "-b", "next"]);
    }
    assert_eq!(
        c.ran(),
        [
            "deep-fsmonitor.ran",
            "deep-hook.ran",
            "top-fsmonitor.ran",
            "top-hook.ran"
        ]
    );
}

#[test]
fn a_repository_the_session_inits_and_commits_in_a_subfolder_is_the_persons_to_use_at_once() {
    let c = Case::new();
    c.session(
        "git init -q sub && cd sub && echo s > s.txt && git add s.txt && git commit -qm from-the-session
git remote add origin https://example.com/sub.git
",
    );
    assert!(c.rows().is_empty(), "{:?}", c.rows());
    assert!(!c.r.project.join("sub/.git/relay-set-aside").exists());
    let sub = c.r.project.join("sub");
    let log = git(&c.r.home, &sub, &["log", "--format=%s"]);
    assert_eq!(text(&log.stdout), "from-the-session\n");
    let status = git(&c.r.home, &sub, &["status", "--porcelain"]);
    assert_eq!(text(&status.stdout), "");
    std::fs::write(sub.join("p.txt"), "p\n").unwrap();
    git(&c.r.home, &sub, &["add", "p.txt"]);
    git(&c.r.home, &sub, &["commit", "-qm", "from-the-person"]);
    let url = git(&c.r.home, &sub, &["remote", "get-url", "origin"]);
    assert_eq!(text(&url.stdout), "https://example.com/sub.git\n");
    c.assert_nothing_ran("nothing was planted");
}

/// A folder an earlier session left short of a repository (a config with an alias,
/// folders not yet named `objects` and `refs`), which a later session completes and
/// names in a `.git` folder's `commondir`: the config is older than the later
/// session, but the folder reached through the `commondir` it wrote is its own.
#[test]
fn a_config_an_earlier_session_left_never_runs_once_a_later_one_names_it_in_a_commondir() {
    let c = Case::new();
    c.session(
        "mkdir -p store/c/o/info store/c/o/pack store/c/r/heads
printf '[alias]\\n\\tst = \"!touch %s/alias.ran\"\\n' \"$M\" > store/c/config
",
    );
    assert!(c.rows().is_empty(), "{:?}", c.rows());
    c.until_older("store/c/config");
    c.session(
        "mv store/c/o store/c/objects && mv store/c/r store/c/refs
mkdir -p w/.git
echo 'ref: refs/heads/main' > w/.git/HEAD
echo ../../store/c > w/.git/commondir
",
    );
    let out = c.person("w", &["st"]);
    c.assert_nothing_ran("the alias reached through the commondir ran");
    assert!(
        text(&out.stderr).contains("not a git command"),
        "the person's git did not read w as a repository: {out:?}"
    );
    let entry = c.set_aside("store/c");
    assert_eq!(keys(&entry), ["alias.st"], "{entry}");
}

/// The same, completed by a `HEAD`: a folder that becomes a git folder during a session
/// is the session's, whatever the age of its config.
#[test]
fn a_config_an_earlier_session_left_never_runs_once_a_later_one_adds_its_head() {
    let c = Case::new();
    c.session(
        "mkdir -p vendor/x/.git/o/info vendor/x/.git/o/pack vendor/x/.git/r/heads
printf '[alias]\\n\\tst = \"!touch %s/alias.ran\"\\n' \"$M\" > vendor/x/.git/config
",
    );
    assert!(c.rows().is_empty(), "{:?}", c.rows());
    c.until_older("vendor/x/.git/config");
    c.session(
        "cd vendor/x/.git && mv o objects && mv r refs
echo 'ref: refs/heads/main' > HEAD
",
    );
    let out = c.person("vendor/x", &["st"]);
    c.assert_nothing_ran("the alias of the folder made a repository ran");
    assert!(
        text(&out.stderr).contains("not a git command"),
        "the person's git did not read vendor/x as a repository: {out:?}"
    );
    assert_eq!(keys(&c.set_aside("vendor/x/.git")), ["alias.st"]);
}

/// A session that takes the modes away from the folder holding its repository
/// (`chmod 0111`: anyone may pass through, nobody may list it) to hide it from the
/// search; the person's git passes through all the same.
#[test]
fn a_repository_in_a_folder_the_session_made_unlistable_runs_nothing_it_planted() {
    let c = Case::new();
    c.session(&format!(
        "{NESTED}git config alias.st \"!touch $M/alias.ran\"
chmod 0111 .. .git
"
    ));
    c.person("vendor/lib", &["st"]);
    c.assert_nothing_ran("the alias in the hidden repository ran");
    let entry = c.set_aside("vendor/lib/.git");
    assert_eq!(keys(&entry), ["alias.st"]);
    let rows = c.rows();
    assert!(
        rows.iter().any(|row| row["error"]
            .as_str()
            .is_some_and(|e| e.contains("given back their owner's read and search"))),
        "{rows:?}"
    );
}

/// `core.worktree` sends the person's git to a working tree of the session's choosing:
/// here the person's own folder outside every grant, which a `git status`, `git add -A`
/// or `git clean` in the session's repository would then read or change.
#[test]
fn a_work_tree_the_session_pointed_elsewhere_is_never_the_persons_gits() {
    let c = Case::new();
    let mine = c.r.root.join("mine");
    std::fs::create_dir_all(&mine).unwrap();
    std::fs::write(mine.join("letter.txt"), "mine\n").unwrap();
    c.session(&format!(
        "{NESTED}git config core.worktree '{}'
",
        mine.display()
    ));
    let out = c.person(
        "vendor/lib",
        &["status", "--porcelain", "--untracked-files=all"],
    );
    let listed = text(&out.stdout);
    assert!(!listed.contains("letter.txt"), "{listed}");
    assert!(listed.is_empty(), "{out:?}");
    assert_eq!(keys(&c.set_aside("vendor/lib/.git")), ["core.worktree"]);
}

/// A rebase the session left stopped in the person's own repository, with an `exec`
/// line after the stop: the person's `git rebase --continue` would run it.
#[test]
fn an_exec_line_in_a_rebase_the_session_left_never_runs_at_the_persons_continue() {
    let c = Case::new();
    c.session(
        "echo s > s.txt && git add s.txt && git commit -qm s
GIT_SEQUENCE_EDITOR=\"sed -i -e '1s/^pick/edit/' -e '\\$a exec touch $M/exec.ran'\" \
 git rebase -q -i HEAD~1 >/dev/null 2>&1
test -d .git/rebase-merge
",
    );
    c.person("", &["rebase", "--continue"]);
    c.assert_nothing_ran("the exec line ran");
    let entry = c.set_aside(".git");
    assert_eq!(
        entry["whole"],
        serde_json::json!(["rebase-merge"]),
        "{entry}"
    );
    let todo = c.aside_file(".git", "rebase-merge/git-rebase-todo");
    assert!(todo.contains("exec touch"), "{todo}");
}

/// A legacy `.git/remotes/<name>` file naming a URL of git's `ext::` transport (a
/// command), for a person whose git allows it.
#[test]
fn a_legacy_remotes_file_the_session_wrote_never_runs_at_the_persons_fetch() {
    let c = Case::with(|c| {
        git(
            &c.r.home,
            &c.r.project,
            &["config", "--global", "protocol.ext.allow", "always"],
        );
    });
    c.session(
        "mkdir -p .git/remotes
printf 'URL: ext::sh -c touch%% %s/ext.ran\\n' \"$M\" > .git/remotes/up
",
    );
    c.person("", &["fetch", "up"]);
    c.assert_nothing_ran("the ext:: URL ran");
    let entry = c.set_aside(".git");
    assert_eq!(entry["whole"], serde_json::json!(["remotes"]), "{entry}");
}

/// The folder a session starts in, with no repository: `git init` works there as one
/// folder down (relay makes no `.git` of its own), and the fsmonitor the session sets
/// never runs at the person's `git status` there, while the repository is the person's
/// to use at once.
#[test]
fn a_repository_the_session_inits_in_its_own_folder_works_and_its_fsmonitor_never_runs_at_the_persons_git_status(
) {
    let mut r = Relay::prepare(None, false);
    r.write_settings(&base_settings(None));
    let ran = r.root.join("ran");
    std::fs::create_dir_all(&ran).unwrap();
    r.launch_daemon();
    let out = sandboxed(
        &r,
        &r.project,
        &format!(
            "export GIT_AUTHOR_NAME=s GIT_AUTHOR_EMAIL=s@example.com GIT_COMMITTER_NAME=s GIT_COMMITTER_EMAIL=s@example.com
git init -q && echo a > a.txt && git add a.txt && git commit -qm from-the-session && git checkout -qb topic && echo init=ok
git config core.fsmonitor 'touch {ran}/fsmonitor.ran' && echo planted=ok
",
            ran = ran.display()
        ),
    );
    assert!(
        out.contains("init=ok") && out.contains("planted=ok"),
        "{out}"
    );
    let status = person_git(&r.home, &r.project, &["status", "--porcelain"]);
    let log = git(&r.home, &r.project, &["log", "--format=%s"]);
    assert_eq!(text(&log.stdout), "from-the-session\n");
    let left: Vec<_> = std::fs::read_dir(&ran).unwrap().collect();
    assert!(
        left.is_empty(),
        "the fsmonitor ran: {}",
        text(&status.stderr)
    );
    let rows: Vec<Value> = r
        .audit_rows()
        .into_iter()
        .filter(|row| row["action"] == REPOSITORY_SET_ASIDE)
        .collect();
    assert!(
        serde_json::json!(rows)
            .to_string()
            .contains("core.fsmonitor"),
        "no row names what was set aside: {rows:?}"
    );
}
