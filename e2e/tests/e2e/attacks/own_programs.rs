//! relay's own programs as the way out (issue 20): the helpers and `relay` itself run
//! outside every sandbox, so a session that could swap them, or plant what their loader
//! reads, would run code beside the token. Each test is named after its attack;
//! docs/THREAT-MODEL.md ("relay's own programs") has the guards, docs/testing.md which
//! guard was removed to see each fail.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use crate::attacks::in_session::every_attempt_failed;
use crate::cli::service::write_script;

use relay::wire::Code;
use relay_e2e::daemon::{base_settings, doctor_check, Relay, TOKEN_SETTING};
use relay_e2e::{fake_token, sha256_hex};
use serde_json::{json, Value};

fn host_started(r: &Relay, after: Option<&Value>) -> Value {
    r.wait_event(|e| e["name"] == "host.started" && Some(&e["pid"]) != after.map(|a| &a["pid"]))
}

fn kill_host(r: &Relay, started: &Value) -> Value {
    let pid = started["pid"].as_u64().unwrap() as libc::pid_t;
    // Safety: SIGKILL to the host process this instance started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    host_started(r, Some(started))
}

/// The suite's settings plus a project `home` at the home folder (the first-run one),
/// whose launches may run in the home folder itself and so grant all of it
/// (`allow_home_directory`): what a session under such a grant can reach of relay's
/// folder.
fn with_home_project(s: Option<&str>) -> Value {
    let mut v = base_settings(s);
    v["projects"].as_array_mut().unwrap().push(json!({
        "id": "home", "name": "home", "path": "~", "allowed_templates": ["*"],
        "allow_home_directory": true
    }));
    v
}

/// A shell terminal running `true` (in `p1` unless `body` says otherwise) is refused
/// `400 sandbox_unavailable`; its message holds every one of `needles`.
fn launch_refused(r: &Relay, mut body: Value, needles: &[&str]) {
    for (k, v) in json!({"project": "p1", "template": "shell", "extra_args": ["-c", "true"]})
        .as_object()
        .unwrap()
    {
        body.as_object_mut()
            .unwrap()
            .entry(k.clone())
            .or_insert(v.clone());
    }
    let (status, v, _) = r.api("POST", "/api/terminals", Some(&body));
    assert_eq!(
        (status, v["code"].as_str()),
        (400, Some(Code::SandboxUnavailable.as_str())),
        "{v}"
    );
    let msg = v["error"].as_str().unwrap();
    for n in needles {
        assert!(msg.contains(n), "the refusal does not name {n:?}: {msg}");
    }
}

/// A shell terminal that prints `word` runs to its end and its log shows it.
fn a_launch_works(r: &Relay, word: &str) {
    let v = r.shell_terminal(&format!("echo {word}"));
    let id = v["id"].as_str().unwrap();
    let ev = r.wait_exited(id);
    assert_eq!(ev["exit_status"], 0, "{ev}");
    let log = r.cli_json(&["terminal", "log", "--id", id]);
    assert!(log["log"].as_str().unwrap().contains(word), "{log}");
}

#[test]
fn a_helper_folder_renamed_and_refilled_never_runs_the_wrappers() {
    let mut r = Relay::prepare(None, false);
    let bin = r.root.join("opt/bin");
    r.install_in(&bin);
    r.write_settings(&base_settings(None));
    r.launch_daemon();
    let first = host_started(&r, None);

    // What a session able to write the folder's parent does: rename the folder away and
    // make a new one, with wrappers that note they ran and then run the real helper.
    let old = r.root.join("opt/bin.old");
    std::fs::rename(&bin, &old).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    let ran = r.root.join("wrapper-ran");
    for name in ["relay-sessions", "relay-shim"] {
        write_script(
            &bin.join(name),
            &format!(
                "#!/bin/sh\necho {name} >>'{}'\nexec '{}' \"$@\"\n",
                ran.display(),
                old.join(name).display()
            ),
        );
    }
    for name in ["relay", "relay-e2e-http"] {
        symlink(old.join(name), bin.join(name)).unwrap();
    }

    a_launch_works(&r, "after-the-swap");
    kill_host(&r, &first);
    a_launch_works(&r, "after-the-host-restart");
    assert!(
        !ran.exists(),
        "a wrapper ran: {}",
        std::fs::read_to_string(&ran).unwrap_or_default()
    );

    // doctor says so, and runs neither wrapper either.
    let out = r.cli(&["doctor", "--json"]);
    let report: Value = serde_json::from_str(out.stdout.trim()).expect(&out.stderr);
    let helpers = doctor_check(&report, "helpers");
    assert_eq!(helpers["status"], "fail", "{helpers}");
    let detail = helpers["detail"].as_str().unwrap();
    for name in ["relay-sessions", "relay-shim"] {
        assert!(
            detail.contains(&format!(
                "{} is not the {name} relay started with",
                bin.join(name).display()
            )),
            "{detail}"
        );
    }
    assert!(!ran.exists(), "doctor ran a wrapper");
}

/// A session in `~` that tries every way to put its own helper in `~/.cargo/bin`; each
/// line of `$TMPDIR/attempts` says whether one worked.
const SWAP_RELAYS_FOLDER: &str = r#"
B="$HOME/.cargo/bin" W="$TMPDIR/wrapper"
printf '#!/bin/sh\necho ran >>"$HOME/project/wrapper-ran"\nexec "$HOME/.cargo/bin.old/relay-shim" "$@"\n' >"$W"
chmod +x "$W"
try() { if sh -c "$1" 2>/dev/null; then echo "WORKED: $1"; else echo "failed: $1"; fi; }
{
try 'cp "$W" "$B/relay-shim"'
try 'cp "$W" "$B/relay-shim.new" && mv -f "$B/relay-shim.new" "$B/relay-shim"'
try 'ls "$B/relay-sessions" && rm "$B/relay-sessions"'
try 'cp "$W" "$B/relay"'
try 'mv "$B" "$HOME/.cargo/bin.old" && mkdir "$B" && cp "$W" "$B/relay-shim"'
try 'mv "$HOME/.cargo" "$HOME/.cargo.old" && mkdir -p "$B" && cp "$W" "$B/relay-shim"'
echo end
} >"$TMPDIR/attempts"
"#;

#[test]
fn a_session_cannot_swap_relays_own_folder_under_a_home_project() {
    let token = fake_token();
    let mut r = Relay::prepare(None, false);
    let cargo_bin = r.home.join(".cargo/bin");
    r.install_in(&cargo_bin);
    r.write_settings(&with_home_project(Some(TOKEN_SETTING)));
    r.launch_daemon();
    r.write_token(&token);
    let originals: Vec<Vec<u8>> = ["relay", "relay-sessions", "relay-shim"]
        .iter()
        .map(|b| std::fs::read(cargo_bin.join(b)).unwrap())
        .collect();

    let body =
        json!({"project": "home", "template": "shell", "extra_args": ["-c", SWAP_RELAYS_FOLDER]});
    let (status, v, _) = r.api("POST", "/api/terminals", Some(&body));
    assert_eq!(status, 201, "{v}");
    let id = v["id"].as_str().unwrap();
    r.wait_exited(id);
    every_attempt_failed(&r, id, Some(6));
    for (b, bytes) in ["relay", "relay-sessions", "relay-shim"]
        .iter()
        .zip(&originals)
    {
        assert_eq!(&std::fs::read(cargo_bin.join(b)).unwrap(), bytes, "{b}");
    }

    // Nor may a session start in relay's folder itself (unpinned there, it could write
    // the `relay` the person runs next).
    launch_refused(
        &r,
        json!({"project": "home", "directory": cargo_bin.display().to_string()}),
        &[&format!(
            "{} holds relay's own programs",
            cargo_bin.display()
        )],
    );

    // The token launch that follows runs relay's own shim, and the real program gets the
    // token.
    let (status, v, _) = r.api("POST", "/api/sessions", Some(&json!({"project": "p1"})));
    assert_eq!(status, 201, "{v}");
    let sid = v["id"].as_str().unwrap();
    assert_eq!(r.turn(sid, "hi"), "echo: hi");
    assert_eq!(
        r.start_line(sid)["token_sha256"],
        sha256_hex(token.as_bytes())
    );
    assert!(!r.project.join("wrapper-ran").exists());

    // doctor: relay's place is pinned, so `ok`, with a note that says where and how to
    // keep it writable.
    let out = r.cli(&["doctor", "--json"]);
    let report: Value = serde_json::from_str(out.stdout.trim()).expect(&out.stderr);
    let helpers = doctor_check(&report, "helpers");
    assert_eq!(helpers["status"], "ok", "{helpers}");
    let detail = helpers["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!(
            "{} lies in {}",
            cargo_bin.join("relay").display(),
            r.home.display()
        )) && detail.contains("pins it read-only")
            && detail.contains("outside every project"),
        "{detail}"
    );
}

/// The real file behind `libgcc_s.so.1` for relay's own binaries, from `ldd`.
fn real_libgcc(binary: &Path) -> PathBuf {
    let out = std::process::Command::new("ldd")
        .arg(binary)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("libgcc_s.so.1 =>"))
        .unwrap_or_else(|| panic!("{} does not load libgcc_s.so.1: {text}", binary.display()));
    PathBuf::from(
        line.split("=>")
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap(),
    )
}

/// A library whose constructor appends the loading program to `marker` (a file outside
/// every sandbox's grants, so only a load outside one leaves a line), and that stands
/// in for the real `libgcc_s.so.1` (an ELF filter of it), as an attacker's would.
fn build_plant(binary: &Path, out: &Path, marker: &Path) {
    let src = out.with_extension("c");
    std::fs::write(
        &src,
        format!(
            r#"#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {{
  char exe[512]; ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n < 0) n = 0;
  exe[n++] = '\n';
  int fd = open("{}", O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {{ write(fd, exe, n); close(fd); }}
}}
"#,
            marker.display()
        ),
    )
    .unwrap();
    let filter = format!("-Wl,-F,{}", real_libgcc(binary).display());
    let st = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(out)
        .arg(&src)
        .arg(filter)
        .status()
        .expect("cc");
    assert!(st.success(), "cc failed");
}

#[test]
fn a_library_planted_in_the_project_never_loads_outside_the_sandbox() {
    let mut r = Relay::prepare(None, false);
    let marker = r.root.join("loaded-outside");
    let plant = r.project.join(".plant");
    std::fs::create_dir_all(&plant).unwrap();
    let shim = r.relay_bin().with_file_name("relay-shim");
    build_plant(&shim, &plant.join("evil.so"), &marker);

    // The plant works: relay's shim started by hand from the project with an empty
    // LD_LIBRARY_PATH entry loads it.
    std::fs::copy(plant.join("evil.so"), r.project.join("libgcc_s.so.1")).unwrap();
    let st = std::process::Command::new(&shim)
        .arg("--version")
        .env("LD_LIBRARY_PATH", ":/nonexistent")
        .current_dir(&r.project)
        .output()
        .unwrap();
    assert!(st.status.success());
    let control = std::fs::read_to_string(&marker).expect("the plant did not load by hand");
    assert!(control.contains("relay-shim"), "{control}");
    std::fs::remove_file(&marker).unwrap();
    std::fs::remove_file(r.project.join("libgcc_s.so.1")).unwrap();

    // relay serve from a shell with both: an empty LD_LIBRARY_PATH entry (the common
    // `$LD_LIBRARY_PATH:/opt/x/lib` with the variable unset) and LD_PRELOAD naming a
    // file in the project that does not exist yet.
    r.serve_env = vec![
        ("LD_LIBRARY_PATH".into(), ":/opt/x/lib".into()),
        (
            "LD_PRELOAD".into(),
            r.project.join("libplant.so").display().to_string(),
        ),
    ];
    r.write_settings(&base_settings(None));
    r.launch_daemon();
    let first = host_started(&r, None);

    // A session plants both in its project.
    let v = r.shell_terminal(
        "cp .plant/evil.so libgcc_s.so.1 && cp .plant/evil.so libplant.so && echo planted",
    );
    let id = v["id"].as_str().unwrap();
    assert_eq!(r.wait_exited(id)["exit_status"], 0);
    assert!(r.project.join("libgcc_s.so.1").exists());

    // The next launches, and the next host, start clean.
    a_launch_works(&r, "after-the-plant");
    kill_host(&r, &first);
    a_launch_works(&r, "after-the-host-restart");
    let loaded = std::fs::read_to_string(&marker).unwrap_or_default();
    assert!(loaded.is_empty(), "loaded outside the sandbox by: {loaded}");
}

#[test]
fn a_session_remembered_from_before_relay_moved_into_the_home_refuses_every_launch() {
    // relay first runs from a folder no session can write, beside a project over `~`.
    let mut r = Relay::prepare(None, false);
    r.write_settings(&with_home_project(None));
    r.launch_daemon();
    let body = json!({"project": "home", "template": "shell", "extra_args": ["-c", "true"]});
    let (status, v, _) = r.api("POST", "/api/terminals", Some(&body));
    assert_eq!(status, 201, "{v}");
    let early = v["id"].as_str().unwrap().to_string();
    r.wait_exited(&early);

    // Then it is reinstalled in `~/.cargo/bin`: that session could have written there
    // without the pin, and what it left would run outside every sandbox.
    r.stop();
    let cargo_bin = r.home.join(".cargo/bin");
    r.install_in(&cargo_bin);
    r.launch_daemon();
    let refused = |r: &Relay| {
        launch_refused(
            r,
            json!({}),
            &[
                "relay's own program",
                early.as_str(),
                &format!("could write {}", cargo_bin.display()),
                "purge that session",
            ],
        )
    };
    refused(&r);
    // A restart alone forgets nothing.
    r.stop();
    r.launch_daemon();
    refused(&r);
    // Purged, and relay restarted: launches work again.
    r.cli_json(&["terminal", "purge", "--id", &early]);
    r.stop();
    r.launch_daemon();
    a_launch_works(&r, "after-the-purge");
}

/// Run by a session in `~` while relay still runs from elsewhere: once relay is
/// installed in `~/.cargo/bin`, it puts a wrapper in place of `relay-sessions` that
/// notes it ran and then runs a copy of the real one.
const PLANT_AFTER_THE_INSTALL: &str = r#"
B="$HOME/.cargo/bin"
while [ ! -x "$B/relay-sessions" ]; do sleep 0.05; done
cp "$B/relay-sessions" "$HOME/.real-sessions"
printf '#!/bin/sh\necho "$*" >>"%s/wrapper-ran"\nexec "%s/.real-sessions" "$@"\n' "$HOME" "$HOME" >"$B/relay-sessions.new"
chmod +x "$B/relay-sessions.new"
mv -f "$B/relay-sessions.new" "$B/relay-sessions"
echo planted >"$TMPDIR/planted"
"#;

#[test]
fn a_helper_planted_before_relay_restarts_from_its_new_folder_never_runs() {
    let mut r = Relay::prepare(None, false);
    r.write_settings(&with_home_project(None));
    r.launch_daemon();
    let body = json!({"project": "home", "template": "shell", "extra_args": ["-c", PLANT_AFTER_THE_INSTALL]});
    let (status, v, _) = r.api("POST", "/api/terminals", Some(&body));
    assert_eq!(status, 201, "{v}");
    let planter = v["id"].as_str().unwrap().to_string();

    // `cargo install` into `~/.cargo/bin` while that relay still runs; the session
    // plants its wrapper; then relay is restarted from its new folder.
    let cargo_bin = r.home.join(".cargo/bin");
    r.install_in(&cargo_bin);
    let planted = r.tmp.join(format!("relay-{planter}/planted"));
    assert!(
        relay_e2e::wait::until(relay_e2e::WAIT, || planted.exists()),
        "the session never planted"
    );
    r.stop();
    r.launch_daemon();
    let ran = r.home.join("wrapper-ran");

    // Neither helper ran, not even for --version; launches and doctor say why.
    launch_refused(&r, json!({}), &["relay's own program", &planter]);
    let out = r.cli(&["doctor", "--json"]);
    let report: Value = serde_json::from_str(out.stdout.trim()).expect(&out.stderr);
    let helpers = doctor_check(&report, "helpers");
    assert_eq!(helpers["status"], "fail", "{helpers}");
    assert!(
        helpers["detail"]
            .as_str()
            .unwrap()
            .contains("relay runs neither helper"),
        "{helpers}"
    );
    assert!(
        !ran.exists(),
        "the planted helper ran: {}",
        std::fs::read_to_string(&ran).unwrap_or_default()
    );

    // The way out the refusal names: purge the session (relay still answers), put
    // relay's own files back, restart.
    r.cli_json(&["terminal", "purge", "--id", &planter]);
    r.install_in(&cargo_bin);
    r.stop();
    r.launch_daemon();
    a_launch_works(&r, "after-the-reinstall");
    assert!(!ran.exists(), "the planted helper ran");
}

#[test]
fn a_sandbox_launcher_in_a_session_writable_folder_is_refused_and_never_run() {
    // A launcher the settings point into a project (where any session could replace
    // it): a wrapper that notes it ran, then runs the real bwrap.
    let mut r = Relay::prepare(None, false);
    let tools = r.project.join(".tools");
    std::fs::create_dir_all(&tools).unwrap();
    let ran = r.root.join("launcher-ran");
    write_script(
        &tools.join("bwrap"),
        &format!(
            "#!/bin/sh\necho ran >>'{}'\nexec /usr/bin/bwrap \"$@\"\n",
            ran.display()
        ),
    );
    let mut s = base_settings(None);
    s["session_sandbox"] = json!({"bwrap_launcher": "~/project/.tools/bwrap"});
    r.write_settings(&s);
    r.launch_daemon();

    launch_refused(
        &r,
        json!({}),
        &[&format!(
            "the sandbox launcher {} lies in {}",
            tools.join("bwrap").display(),
            r.project.display()
        )],
    );
    let out = r.cli(&["doctor", "--json"]);
    let report: Value = serde_json::from_str(out.stdout.trim()).expect(&out.stderr);
    let launcher = doctor_check(&report, "sandbox_launcher");
    assert_eq!(launcher["status"], "fail", "{launcher}");
    assert!(!ran.exists(), "the launcher in the project ran");
}

#[test]
fn an_upgrade_in_place_refuses_launches_asking_for_a_restart() {
    let mut r = Relay::prepare(None, false);
    let bin = r.root.join("opt/bin");
    r.install_in(&bin);
    r.write_settings(&base_settings(None));
    r.launch_daemon();
    a_launch_works(&r, "before-the-upgrade");
    // `cargo install` again while relay runs: each file replaced by rename.
    r.install_in(&bin);
    launch_refused(&r, json!({}), &["restart relay serve"]);
    r.stop();
    r.launch_daemon();
    a_launch_works(&r, "after-the-restart");
}
