//! Seatbelt launches through the real daemon, host and shim, each checked against what
//! its policy promises. On Linux the launcher is the fake `sandbox-exec`, whose SBPL
//! evaluator answers every question the policy implies before the target runs
//! (fakes/src/sbpl_questions.rs); on macOS it is the real `/usr/bin/sandbox-exec` and
//! the same checks are probed from inside the session (e2e/src/seatbelt.rs).
//!
//! The template grants all of `~` read-write with the token's folder, the config dir
//! (`~/.config/relay`) and the Claude program's folder (`~/.local/bin`, pinned) inside it,
//! and the token setting names the file through a
//! symlinked folder, so the token has two spellings and every deny has a grant to beat.

use std::path::{Path, PathBuf};

use relay_e2e::daemon::{base_settings, Relay};
use relay_e2e::seatbelt::{self, Check, Target};
use relay_e2e::{assert_absent, fake_token, sha256_hex};
use serde_json::{json, Value};

pub(super) struct Launched {
    pub(super) r: Relay,
    pub(super) token: String,
    /// The token as the settings name it (through `<root>/links/home`), then as it is.
    token_spellings: Vec<PathBuf>,
    pub(super) session: String,
}

/// A daemon whose `claude-code` template reads `~/.config` and writes `~`, with the
/// token setting spelled through a link in a folder nobody can write (relay accepts a
/// deny through such a link), and one running session.
pub(super) fn launch() -> Launched {
    launch_with(|_| {})
}

/// [`launch`], with `tweak` applied to the settings before the daemon starts.
pub(super) fn launch_with(tweak: impl FnOnce(&mut Value)) -> Launched {
    let mut r = Relay::prepare(None, true);
    let token = fake_token();
    let real = r.write_token(&token);
    let links = r.root.join("links");
    std::fs::create_dir(&links).unwrap();
    std::os::unix::fs::symlink(&r.home, links.join("home")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&links, std::fs::Permissions::from_mode(0o555)).unwrap();
    let through_link = links.join("home/.config/acme-ltt/token");

    let mut s = base_settings(Some(through_link.to_str().unwrap()));
    seatbelt::use_seatbelt(&mut s, &seatbelt::launcher());
    s["terminal_templates"][0]["read_write"] = json!(["~"]);
    std::fs::create_dir_all(r.home.join("scratch")).unwrap();
    // The project is a repository: its hooks and config are the person's git's.
    std::fs::create_dir_all(r.project.join(".git/hooks")).unwrap();
    std::fs::write(r.project.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(r.project.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    // `claude` is `~/.local/bin/claude`, in a folder the template writes: pinned.
    r.seatbelt_pins = vec![r.home.join(".local/bin")];
    // And what the person's tools run later, present or not (issue 22).
    r.seatbelt_pins.extend(
        [
            ".bashrc",
            ".profile",
            ".ssh",
            ".config/autostart",
            "Library/LaunchAgents",
        ]
        .map(|n| r.home.join(n)),
    );
    r.seatbelt_pins
        .extend([".git/config", ".git/hooks", ".vscode"].map(|n| r.project.join(n)));
    tweak(&mut s);
    r.write_settings(&s);
    r.launch_daemon();

    let (status, v, raw) = r.api("POST", "/api/sessions", Some(&json!({"project": "p1"})));
    assert_eq!(status, 201, "session start: {v}");
    assert_absent(&raw, &token, "the 201 body");
    let session = v["id"].as_str().unwrap().to_string();
    assert_eq!(r.turn(&session, "hi"), "echo: hi");
    // The launch path works: the token reached the agent on fd 5.
    let line = r.start_line(&session);
    assert_eq!(line["token_sha256"], sha256_hex(token.as_bytes()), "{line}");
    Launched {
        r,
        token,
        token_spellings: vec![through_link, real],
        session,
    }
}

/// The checks that did not hold for the session: from the fake's answers for its one
/// launch on Linux, from probes inside it on macOS.
fn failures(l: &Launched, checks: &[Check]) -> Vec<String> {
    if seatbelt::enforced() {
        let script = seatbelt::probe_script(checks, &l.r.home.join("scratch"));
        let out = l.r.turn(&l.session, &format!("!sh {script}"));
        assert_absent(out.as_bytes(), &l.token, "a probe's reply");
        return seatbelt::failed_probes(&out, checks);
    }
    let answers = seatbelt::answers_under(&l.r.tmp.join(format!("relay-{}", l.session)));
    assert_eq!(
        answers.len(),
        1,
        "one launch, one answers line: {answers:?}"
    );
    let launch = &answers[0];
    assert_eq!(
        launch["policy"],
        json!(l.r.root.join(seatbelt::POLICY_FILE)),
        "{launch}"
    );
    let mut failed = seatbelt::failed_checks(launch, checks);
    if launch["failures"] != 0 {
        failed.push(format!(
            "the fake counted {} wrong answers",
            launch["failures"]
        ));
    }
    failed
}

/// Every check held for the session ([`failures`] is empty).
pub(super) fn assert_checks_hold(l: &Launched, checks: &[Check]) {
    let failed = failures(l, checks);
    assert!(
        failed.is_empty(),
        "Seatbelt checks failed:\n{}",
        failed.join("\n")
    );
}

fn path(p: impl Into<PathBuf>) -> Target {
    Target::Path(p.into())
}

pub(super) fn end(l: Launched) {
    let Launched {
        r, token, session, ..
    } = l;
    assert_eq!(r.cli(&["session", "stop", "--id", &session]).status, 0);
    r.wait_exited(&session);
    let token_path = r.token_path();
    assert_eq!(
        std::fs::read_to_string(&token_path).unwrap().trim(),
        token,
        "the token file changed"
    );
    assert_absent(&r.output(), &token, "the daemon's output");
    for (p, bytes) in r.all_files(&[&token_path]) {
        assert_absent(&bytes, &token, &p.display().to_string());
    }
}

#[test]
fn seatbelt_session_with_home_read_write_is_refused_the_token_in_every_spelling_and_the_config_dir()
{
    let l = launch();
    let mut checks = Vec::new();
    for spelling in &l.token_spellings {
        for op in [
            "file-read-data",
            "file-read-metadata",
            "file-write-data",
            "file-write-unlink",
            "file-clone",
            "file-link",
        ] {
            checks.push(Check::denied(op, path(spelling)));
        }
    }
    let inside_config = l.r.config.join("settings.json");
    for op in ["file-read-data", "file-read-metadata", "file-write-data"] {
        checks.push(Check::denied(op, path(&inside_config)));
    }
    checks.push(Check::denied("file-write-create", path(&l.r.config)));
    checks.push(Check::denied("file-read-metadata", path(&l.r.config)));
    // What the session needs still works: the token pipe and its own folders.
    checks.push(Check::allowed("file-read-data", path("/dev/fd/5")));
    checks.push(Check::allowed("file-write-create", path(&l.r.project)));
    assert_checks_hold(&l, &checks);
    end(l);
}

#[test]
fn seatbelt_session_cannot_rename_unlink_or_clone_the_folders_above_the_token_or_config_dir() {
    let l = launch();
    let mut above: Vec<PathBuf> = Vec::new();
    for denied in l.token_spellings.iter().chain([&l.r.config]) {
        for a in denied.ancestors().skip(1).filter(|a| a.parent().is_some()) {
            if !above.iter().any(|x| x == a) {
                above.push(a.to_path_buf());
            }
        }
    }
    // ~/.config, ~ and the folders up to / for the real spelling; the link's side too.
    assert!(above.contains(&l.r.home.join(".config")));
    assert!(above.contains(&l.r.root.join("links/home")));
    let mut checks = Vec::new();
    for a in &above {
        for op in ["rename", "file-write-unlink", "file-clone"] {
            checks.push(Check::denied(op, path(a)));
        }
    }
    assert_checks_hold(&l, &checks);
    // Renaming something that is not above a denied path still works.
    let sibling = l.r.home.join("scratch");
    let moved = l.r.turn(
        &l.session,
        &format!(
            "!sh mv '{0}' '{0}.moved' && mv '{0}.moved' '{0}' && echo renamed",
            sibling.display()
        ),
    );
    assert!(moved.contains("renamed"), "{moved}");
    end(l);
}

#[test]
fn seatbelt_session_cannot_write_rename_or_link_the_pinned_claude_program() {
    // Attack 1 of issue 7 on Seatbelt: `~` is read-write, so the folder of the program a
    // token launch runs must stay read-only, and the folders above it in place.
    let l = launch();
    let bin = l.r.home.join(".local/bin");
    let program = bin.join("claude");
    let mut checks = Vec::new();
    for op in ["file-write-data", "file-write-unlink", "file-link"] {
        checks.push(Check::denied(op, path(&program)));
    }
    checks.push(Check::denied("file-write-create", path(&bin)));
    for op in ["rename", "file-write-unlink"] {
        checks.push(Check::denied(op, path(&bin)));
    }
    for op in ["rename", "file-write-unlink", "file-clone"] {
        checks.push(Check::denied(op, path(l.r.home.join(".local"))));
    }
    assert_checks_hold(&l, &checks);
    end(l);
}

#[test]
fn seatbelt_session_cannot_create_or_change_the_persons_start_up_files_git_hooks_or_ssh_config() {
    // Issue 22's plants for the person's own tools, on Seatbelt: `~` is read-write, and
    // what bash, ssh, git and the desktop run later stays read-only there, whether it
    // exists (`.git/config`) or not yet (`~/.bashrc`, `~/.ssh`), with nothing made.
    let l = launch();
    let home = &l.r.home;
    assert!(!home.join(".bashrc").exists() && !home.join(".ssh").exists());
    let mut checks = Vec::new();
    for file in [
        home.join(".bashrc"),
        home.join(".profile"),
        l.r.project.join(".git/config"),
    ] {
        for op in ["file-write-data", "file-write-unlink", "file-link"] {
            checks.push(Check::denied(op, path(&file)));
        }
    }
    // Folders not there yet cannot be made; the hooks folder takes no new hook.
    for folder in [
        home.join(".ssh"),
        home.join(".config/autostart"),
        home.join("Library/LaunchAgents"),
        l.r.project.join(".vscode"),
    ] {
        assert!(!folder.exists());
        for op in ["file-write-data", "file-link"] {
            checks.push(Check::denied(op, path(&folder)));
        }
    }
    checks.push(Check::denied(
        "file-write-create",
        path(l.r.project.join(".git/hooks")),
    ));
    // The repository's folder stays where git looks for it.
    for op in ["rename", "file-write-unlink"] {
        checks.push(Check::denied(op, path(l.r.project.join(".git"))));
    }
    // Ordinary work in the home and the project goes on.
    checks.push(Check::allowed("file-write-create", path(&l.r.project)));
    assert_checks_hold(&l, &checks);
    assert!(!home.join(".bashrc").exists(), "Seatbelt makes nothing");
    end(l);
}

#[test]
fn seatbelt_session_cannot_reach_relays_sockets_or_its_api_port() {
    let l = launch();
    let port =
        l.r.api_port()
            .expect("api.listen is set in the base settings");
    let sockets: Vec<PathBuf> = ["relay.sock", "bridge.sock", "sessions/host.sock"]
        .iter()
        .map(|s| l.r.config.join(s))
        .collect();
    for s in &sockets {
        assert!(Path::new(s).exists(), "{} is not there", s.display());
    }
    let mut checks: Vec<Check> = sockets
        .iter()
        .map(|s| Check::denied("network-outbound", Target::Socket(s.clone())))
        .collect();
    checks.push(Check::denied("network-outbound", Target::Port(port)));
    assert_checks_hold(&l, &checks);
    end(l);
}

/// The pty path: a `claude-code` terminal goes through `sandbox-exec` too, and its
/// launch is checked like every other (the harness fails the test on a wrong answer).
#[test]
fn seatbelt_terminal_launch_is_checked_like_a_session() {
    let l = launch();
    let v: Value = l.r.auth_status_terminal("claude-code");
    let id = v["id"].as_str().unwrap();
    let line = l.r.start_line(id);
    assert_eq!(
        line["token_sha256"],
        sha256_hex(l.token.as_bytes()),
        "{line}"
    );
    if !seatbelt::enforced() {
        let answers = seatbelt::answers_under(&l.r.tmp.join(format!("relay-{id}")));
        assert_eq!(answers.len(), 1, "{answers:?}");
        assert_eq!(answers[0]["failures"], 0, "{}", answers[0]);
        let asked = |check: &str| {
            answers[0]["answers"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|a| a["check"] == check)
                .count()
        };
        for check in [
            "deny",
            "deny_ancestor",
            "token_fd",
            "grant",
            "socket",
            "port",
            "setuid",
        ] {
            assert!(asked(check) > 0, "no {check} question: {}", answers[0]);
        }
    }
    end(l);
}
