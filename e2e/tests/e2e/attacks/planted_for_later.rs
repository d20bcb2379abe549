//! Plants for the person's own tools: what a session writes that git, a shell, ssh or an
//! editor later runs outside every sandbox — a git hook, `core.fsmonitor` in
//! `.git/config`, a line in `~/.bashrc`, a `ProxyCommand` in `~/.ssh/config`, an
//! `.envrc`. Each is read-only in every sandbox wherever a write grant would hold it,
//! and one that does not exist yet cannot be made either; a template's
//! `writable_exceptions` reopens one (docs/session-host.md#execution-bearing-files).

use std::path::Path;
use std::process::{Command, Output, Stdio};

use relay_e2e::daemon::Relay;
use serde_json::{json, Value};

mod repositories;

fn relay_in(r: &Relay, dir: &Path, args: &[&str]) -> Output {
    let mut cmd: Command = r.cli_command(args);
    cmd.current_dir(dir).stdin(Stdio::null());
    cmd.output().expect("run relay")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `relay sandbox shell -- -c SCRIPT` in `dir`: its stdout, the run having succeeded.
fn sandboxed(r: &Relay, dir: &Path, script: &str) -> String {
    let out = relay_in(r, dir, &["sandbox", "shell", "--", "-c", script]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout)
}

/// git on the host, as the person runs it, with `home` as its home, whatever it answers.
fn person_git(home: &Path, dir: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "p")
        .env("GIT_AUTHOR_EMAIL", "p@example.com")
        .env("GIT_COMMITTER_NAME", "p")
        .env("GIT_COMMITTER_EMAIL", "p@example.com")
        .output()
        .expect("git")
}

/// [`person_git`], which must succeed.
fn git(home: &Path, dir: &Path, args: &[&str]) -> Output {
    let out = person_git(home, dir, args);
    assert!(out.status.success(), "git {args:?}: {out:?}");
    out
}

fn settings_of(r: &Relay) -> Value {
    serde_json::from_slice(&std::fs::read(r.config.join("settings.json")).unwrap()).unwrap()
}

/// Every step's `name=rc` line, so a failure shows which plant got through.
fn rcs(out: &str) -> Vec<(String, String)> {
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// Each of `steps` failed in `out`.
fn assert_refused(out: &str, steps: &[&str]) {
    let rcs = rcs(out);
    for step in steps {
        assert_ne!(rc(&rcs, step), "0", "{step} got through: {out}");
    }
}

fn rc<'a>(rcs: &'a [(String, String)], name: &str) -> &'a str {
    rcs.iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {name}= in {rcs:?}"))
}

const GIT_PLANTS: &str = r#"
printf '#!/bin/sh\ntouch "$0.ran"\n' > .git/hooks/post-checkout 2>/dev/null; echo hook=$?
chmod +x .git/hooks/post-checkout 2>/dev/null
git config core.fsmonitor 'touch fsmonitor.ran' 2>/dev/null; echo gitconfig=$?
printf '[core]\n\tfsmonitor = touch fsmonitor.ran\n' >> .git/config 2>/dev/null; echo append=$?
mv .git/hooks .git/hooks-away 2>/dev/null; echo mvhooks=$?
mv .git .git-away 2>/dev/null; echo mvgit=$?
echo 'touch envrc.ran' >> .envrc 2>/dev/null; echo envrc=$?
mkdir -p .vscode/x 2>/dev/null; echo vscode=$?
echo work > work.txt && git add work.txt && git -c user.name=s -c user.email=s@example.com commit -qm from-the-session; echo commit=$?
"#;

#[test]
fn a_session_cannot_plant_a_git_hook_an_fsmonitor_or_an_envrc_for_the_persons_next_git() {
    let mut r = Relay::prepare(None, false);
    r.launch_daemon();
    let demo = r.home.join("src/demo");
    std::fs::create_dir_all(&demo).unwrap();
    git(&r.home, &demo, &["init", "-q", "."]);
    std::fs::write(demo.join("a.txt"), "a\n").unwrap();
    git(&r.home, &demo, &["add", "a.txt"]);
    git(&r.home, &demo, &["commit", "-qm", "one"]);
    std::fs::write(demo.join(".envrc"), "export MINE=1\n").unwrap();
    let config_before = std::fs::read(demo.join(".git/config")).unwrap();

    let out = sandboxed(&r, &demo, GIT_PLANTS);
    assert_refused(
        &out,
        &[
            "hook",
            "gitconfig",
            "append",
            "mvhooks",
            "mvgit",
            "envrc",
            "vscode",
        ],
    );
    let rcs = rcs(&out);
    // Ordinary work goes on: a file written, added and committed.
    assert_eq!(rc(&rcs, "commit"), "0", "{out}");

    assert!(!demo.join(".git/hooks/post-checkout").exists());
    assert_eq!(
        std::fs::read(demo.join(".git/config")).unwrap(),
        config_before
    );
    assert_eq!(
        std::fs::read_to_string(demo.join(".envrc")).unwrap(),
        "export MINE=1\n"
    );
    // The person's next git runs nothing the session wrote.
    let log = git(&r.home, &demo, &["log", "--format=%s"]);
    assert_eq!(text(&log.stdout), "from-the-session\none\n");
    git(&r.home, &demo, &["status"]);
    git(&r.home, &demo, &["checkout", "-q", "-b", "next"]);
    for ran in [".git/hooks/post-checkout.ran", "fsmonitor.ran", "envrc.ran"] {
        assert!(!demo.join(ran).exists(), "{ran}");
    }

    // A template may reopen one: `.git/config`, and `relay sandbox explain` says so.
    let mut s = settings_of(&r);
    s["terminal_templates"][0]["writable_exceptions"] = json!([".git/config"]);
    r.write_settings(&s);
    let out = sandboxed(
        &r,
        &demo,
        "git config branch.next.description reopened; echo gitconfig=$?; \
         echo x > .git/hooks/post-checkout 2>/dev/null; echo hook=$?",
    );
    let rcs = self::rcs(&out);
    assert_eq!(rc(&rcs, "gitconfig"), "0", "{out}");
    assert_ne!(rc(&rcs, "hook"), "0", "{out}");
    // What the session wrote there is its own: cut to the inert keys at its end, the
    // rest set aside, not lost (docs/THREAT-MODEL.md#repositories-a-session-made-or-changed).
    let config = std::fs::read_to_string(demo.join(".git/config")).unwrap();
    assert!(!config.contains("reopened"), "{config}");
    let aside: Vec<_> = std::fs::read_dir(demo.join(".git/relay-set-aside"))
        .unwrap()
        .map(|e| e.unwrap().path().join("config.txt"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    let saved = std::fs::read_to_string(&aside[0]).unwrap();
    assert!(saved.contains("reopened"), "{saved}");
    let explained = relay_in(&r, &demo, &["sandbox", "explain", "shell"]);
    let explained = text(&explained.stdout);
    assert!(
        explained.contains("reopened by writable_exceptions (.git/config)"),
        "{explained}"
    );
    assert!(explained.contains(".git/hooks"), "{explained}");

    // An entry that names nothing relay holds is refused with what it may name.
    s["terminal_templates"][0]["writable_exceptions"] = json!(["hooks"]);
    r.write_settings(&s);
    let out = relay_in(&r, &demo, &["sandbox", "shell", "--", "-c", "true"]);
    assert_ne!(out.status.code(), Some(0));
    let err = text(&out.stderr);
    assert!(
        err.contains("writable_exceptions") && err.contains(".git/config"),
        "{err}"
    );
}

const HOME_PLANTS: &str = r#"
echo 'touch "$HOME/bashrc.ran"' >> "$HOME/.bashrc" 2>/dev/null; echo bashrc=$?
rm -f "$HOME/.bashrc" 2>/dev/null; echo rmbashrc=$?
echo 'touch "$HOME/login.ran"' > "$HOME/.bash_login" 2>/dev/null; echo bashlogin=$?
echo 'touch "$HOME/profile.ran"' >> "$HOME/.profile" 2>/dev/null; echo profile=$?
echo 'Host *' > "$HOME/.ssh/config" 2>/dev/null; echo sshconfig=$?
mv "$HOME/.ssh" "$HOME/.ssh-away" 2>/dev/null; echo mvssh=$?
mkdir -p "$HOME/.config/autostart" && echo x > "$HOME/.config/autostart/x.desktop" 2>/dev/null; echo autostart=$?
echo notes > "$HOME/notes.txt"; echo notes=$?
"#;

#[test]
fn a_session_granted_the_home_cannot_create_or_change_bashrc_profile_or_ssh_config() {
    let mut r = Relay::prepare(None, false);
    r.launch_daemon();
    std::fs::write(r.home.join(".profile"), "export FROM_PROFILE=yes\n").unwrap();
    let mut s = settings_of(&r);
    s["projects"][0]["allow_home_directory"] = json!(true);
    r.write_settings(&s);
    assert!(!r.home.join(".bashrc").exists());

    // `~/.bashrc` missing: relay makes it empty first, and the session cannot change it.
    let out = sandboxed(&r, &r.home, HOME_PLANTS);
    assert_refused(
        &out,
        &[
            "bashrc",
            "rmbashrc",
            "profile",
            "sshconfig",
            "mvssh",
            "autostart",
        ],
    );
    let rcs = rcs(&out);
    assert_eq!(rc(&rcs, "notes"), "0", "ordinary work in the home: {out}");
    assert_eq!(std::fs::read(r.home.join(".bashrc")).unwrap(), b"");
    assert_eq!(
        std::fs::read_to_string(r.home.join(".profile")).unwrap(),
        "export FROM_PROFILE=yes\n"
    );
    // `.ssh` was relay's, made empty to hold it: gone once the run's end is handled.
    assert!(!r.home.join(".ssh/config").exists());
    assert!(!r.home.join(".ssh-away").exists());
    assert_eq!(
        std::fs::read_to_string(r.home.join("notes.txt")).unwrap(),
        "notes\n"
    );
    // The `.bash_profile` relay made reads on as bash would without it: `.profile`; a
    // `.bash_login` made beside it is one bash never reads.
    let login = Command::new("bash")
        .args(["--login", "-c", "echo from-profile=$FROM_PROFILE"])
        .env_clear()
        .env("HOME", &r.home)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("bash");
    assert_eq!(text(&login.stdout), "from-profile=yes\n", "{login:?}");
    assert!(!r.home.join("login.ran").exists());

    // `~/.bashrc` present, with the person's own lines: still unchangeable.
    std::fs::write(r.home.join(".bashrc"), "# mine\n").unwrap();
    let out = sandboxed(&r, &r.home, HOME_PLANTS);
    assert_ne!(rc(&self::rcs(&out), "bashrc"), "0", "{out}");
    assert_eq!(
        std::fs::read_to_string(r.home.join(".bashrc")).unwrap(),
        "# mine\n"
    );
    for ran in ["bashrc.ran", "login.ran", "profile.ran"] {
        assert!(!r.home.join(ran).exists(), "{ran}");
    }
}

#[test]
fn a_pinned_file_the_person_replaces_stops_the_session_that_could_then_write_it() {
    // Under bwrap a read-only bind holds the file that was there: `git config` on the
    // host renames a new `.git/config` over it, which the running session could write.
    let r = Relay::start(relay_e2e::daemon::base_settings(None));
    git(&r.home, &r.project, &["init", "-q", "."]);
    let v = r.shell_terminal("touch up && exec sleep 600");
    let id = v["id"].as_str().unwrap().to_string();
    // Only once the sandbox is up: a rename while bwrap is still binding makes bwrap
    // itself fail (the session ends `exited`, status 1), which is not this test's case.
    assert!(
        relay_e2e::wait::until(relay_e2e::WAIT, || r.project.join("up").exists()),
        "the session never started"
    );
    git(
        &r.home,
        &r.project,
        &["config", "branch.main.description", "mine"],
    );
    let ev = r.wait_exited(&id);
    assert_eq!(ev["reason"], "pinned_path_replaced", "{ev}");
}

const CACHE_PLANTS: &str = r#"
mkdir -p "$HOME/.cargo/registry/src/index.crates.io-1/serde-1.0.0" 2>/dev/null && echo 'fn main(){}' > "$HOME/.cargo/registry/src/index.crates.io-1/serde-1.0.0/build.rs" 2>/dev/null; echo registry=$?
mkdir -p "$HOME/.npm/_cacache" 2>/dev/null && echo x > "$HOME/.npm/_cacache/planted" 2>/dev/null; echo npm=$?
mkdir -p "$HOME/.cache/pre-commit/repoX" 2>/dev/null && echo x > "$HOME/.cache/pre-commit/repoX/hook" 2>/dev/null; echo cache=$?
mkdir -p "$HOME/.gradle/init.d" 2>/dev/null && echo x > "$HOME/.gradle/init.d/x.gradle" 2>/dev/null; echo gradle=$?
echo notes > "$HOME/notes.txt"; echo notes=$?
echo "cargo_home=$CARGO_HOME"
"#;

#[test]
fn a_session_granted_the_home_cannot_plant_in_the_persons_package_caches() {
    let mut r = Relay::prepare(None, false);
    r.launch_daemon();
    // The person's cargo: its registry there, as after a first build.
    std::fs::create_dir_all(r.home.join(".cargo/registry/index")).unwrap();
    let mut s = settings_of(&r);
    s["projects"][0]["allow_home_directory"] = json!(true);
    r.write_settings(&s);
    let out = sandboxed(&r, &r.home, CACHE_PLANTS);
    assert_refused(&out, &["registry", "npm", "cache", "gradle"]);
    let rcs = rcs(&out);
    assert_eq!(rc(&rcs, "notes"), "0", "ordinary work in the home: {out}");
    // Its own cargo home is its session's.
    assert!(
        !rc(&rcs, "cargo_home").starts_with(&*r.home.to_string_lossy()),
        "{out}"
    );
    for planted in [
        ".cargo/registry/src",
        ".npm/_cacache",
        ".cache/pre-commit",
        ".gradle/init.d",
    ] {
        assert!(!r.home.join(planted).exists(), "{planted} was planted");
    }
}
