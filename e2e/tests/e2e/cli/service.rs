//! relay as a login service and its helpers (docs/cli.md#relay-service,
//! docs/cli.md#relay-doctor): `relay service install | uninstall | status` in a temporary
//! home (never the real `~/.config`), the unit checked by `systemd-analyze verify`, the
//! CLI's word when relay is not running, and `relay doctor`'s `helpers` check against
//! helpers of another version or missing. (`cargo install` itself: `tests/install.rs`.)

use std::path::{Path, PathBuf};
use std::process::Command;

use relay_e2e::daemon::{base_settings, doctor_check, Relay, TOKEN_SETTING};
use relay_e2e::{assert_absent, fake_token};
use serde_json::Value;

fn unit_file(r: &Relay) -> PathBuf {
    r.home.join(".config/systemd/user/relay.service")
}

fn wants_link(r: &Relay) -> PathBuf {
    r.home
        .join(".config/systemd/user/default.target.wants/relay.service")
}

/// A `relay` command line with `--json`, its one stdout line parsed; the exit status too.
fn json_of(r: &Relay, cmd: &mut Command) -> (i32, Value) {
    let out = cmd.output().expect("run relay");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "{e}: {stdout}\nstderr: {}\ninstance: {}",
            String::from_utf8_lossy(&out.stderr),
            r.root.display()
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

/// Writes an executable script that no process of this test binary holds open for
/// writing when it runs, put in place by rename (a running binary replaced this way
/// keeps running its old file): `relay_e2e::exec_file`.
pub(crate) fn write_script(path: &Path, body: &str) {
    relay_e2e::exec_file::write_executable(path, body);
}

#[test]
fn doctor_passes_helpers_of_its_own_version_beside_relay() {
    let r = Relay::start(base_settings(None));
    let out = r.cli(&["doctor", "--json"]);
    let report: Value = serde_json::from_str(out.stdout.trim()).expect(&out.stderr);
    let helpers = doctor_check(&report, "helpers");
    assert_eq!(helpers["status"], "ok", "{helpers}");
    let bin_dir = r.relay_bin().parent().unwrap().to_path_buf();
    assert!(
        helpers["detail"]
            .as_str()
            .unwrap()
            .contains(&bin_dir.display().to_string()),
        "{helpers}"
    );
}

#[test]
fn doctor_fails_a_helper_of_another_version_and_a_missing_one_with_a_fix() {
    let mut r = Relay::prepare(None, false);
    r.write_settings(&base_settings(None));
    r.launch_daemon();
    let bin_dir = r.relay_bin().parent().unwrap().to_path_buf();
    // The host already runs from its file; the one on disk now is another build's.
    write_script(
        &bin_dir.join("relay-sessions"),
        "#!/bin/sh\necho 'relay-sessions 9.9.9 (protocol 1)'\n",
    );
    std::fs::remove_file(bin_dir.join("relay-shim")).unwrap();

    let out = r.cli(&["doctor", "--json"]);
    assert_eq!(out.status, 1, "a failed check is exit 1: {}", out.stdout);
    let report: Value = serde_json::from_str(out.stdout.trim()).expect(&out.stderr);
    assert_eq!(report["ok"], false);
    let helpers = doctor_check(&report, "helpers");
    assert_eq!(helpers["status"], "fail", "{helpers}");
    let detail = helpers["detail"].as_str().unwrap();
    let sessions = bin_dir.join("relay-sessions");
    // A file replaced since relay opened it is never run (it may be a session's).
    assert!(
        detail.contains(&format!(
            "{} is not the relay-sessions relay started with: it was replaced since",
            sessions.display()
        )),
        "{detail}"
    );
    assert!(
        detail.contains(&format!(
            "relay-shim is missing (no {})",
            bin_dir.join("relay-shim").display()
        )),
        "{detail}"
    );
    assert!(
        helpers["fix"]
            .as_str()
            .is_some_and(|f| f.contains("cargo install --locked --path .")),
        "{helpers}"
    );

    // The text form: the check's line, then its fix.
    let text = r.cli(&["doctor"]);
    assert_eq!(text.status, 1);
    let lines: Vec<&str> = text.stdout.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("fail") && l.contains(" helpers "))
        .unwrap_or_else(|| panic!("no helpers line:\n{}", text.stdout));
    assert!(
        lines[at + 1].trim_start().starts_with("fix: install relay"),
        "{}",
        text.stdout
    );
}

#[test]
fn relay_serve_without_relay_sessions_beside_it_says_which_file_and_how_to_install() {
    let r = Relay::prepare(None, false);
    let bin_dir = r.relay_bin().parent().unwrap().to_path_buf();
    std::fs::remove_file(bin_dir.join("relay-sessions")).unwrap();
    let out = r.cli_command(&["serve"]).output().expect("run relay serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr,
        format!(
            "error: {} is missing: relay runs relay-sessions and relay-shim from its own folder; install the three together (`cargo install --locked --path .`, README)\n",
            bin_dir.join("relay-sessions").display()
        )
    );
}

#[test]
fn service_install_dry_run_prints_the_unit_and_writes_nothing() {
    let r = Relay::prepare(None, false);
    let out = r.cli(&["service", "install", "--dry-run"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let relay = std::fs::canonicalize(r.relay_bin()).unwrap();
    assert!(
        out.stdout.contains(&format!(
            "ExecStart=\"{}\" --config-dir \"{}\" serve\n",
            relay.display(),
            r.config.display()
        )),
        "{}",
        out.stdout
    );
    assert!(
        !r.home.join(".config/systemd").exists(),
        "--dry-run wrote something"
    );
    // Where it would go, beside it (issue 40).
    assert_eq!(
        out.stderr,
        format!(
            "relay: --dry-run: relay would write this to {}; nothing was written\n",
            unit_file(&r).display()
        )
    );
    let (code, v) = json_of(
        &r,
        &mut r.cli_command(&["service", "install", "--dry-run", "--json"]),
    );
    assert_eq!(code, 0);
    assert_eq!(v["written"], false);
    assert_eq!(v["content"].as_str().unwrap(), out.stdout);
    assert_eq!(v["file"], unit_file(&r).display().to_string());
}

/// CI runs as root without a user bus: `systemctl --user` cannot answer, so the unit is
/// written and linked into `default.target.wants` (what `enable` does), and the CLI
/// says so. The unit names no secret: not the token, not the API bearer, not an
/// environment variable of the shell that installed it.
#[test]
fn service_install_and_uninstall_round_trip_without_a_user_manager() {
    let mut r = Relay::prepare(None, false);
    r.write_settings(&base_settings(Some(TOKEN_SETTING)));
    let token = fake_token();
    r.write_token(&token);
    r.launch_daemon();
    let bearer = std::fs::read_to_string(r.config.join("api-token")).unwrap();
    let proxy_secret = "hunter2-proxy-password";

    let mut install = r.cli_command(&["service", "install", "--json"]);
    install
        .env(
            "HTTPS_PROXY",
            format!("http://ada:{proxy_secret}@proxy.example:3128"),
        )
        .env("ANTHROPIC_API_KEY", &token)
        .env("CLAUDE_CODE_OAUTH_TOKEN", &token);
    let (code, v) = json_of(&r, &mut install);
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        (v["written"].as_bool(), v["started"].as_bool()),
        (Some(true), Some(false)),
        "{v}"
    );
    // The relay of this test runs, started by hand: the note says the service's cannot
    // start beside it, instead of telling to start one.
    let note = v["notes"][0].as_str().unwrap_or_default();
    assert!(
        note.starts_with("systemctl --user is not available here (")
            && note.contains(&format!(
                "relay already runs for this config dir (pid {}, started by hand); the \
                 service's relay cannot start while it runs (one relay per config dir)",
                r.ready.pid
            ))
            && !note.contains("Start relay now"),
        "{v}"
    );
    let unit = std::fs::read_to_string(unit_file(&r)).expect("the unit is written");
    assert_eq!(
        std::fs::read_link(wants_link(&r)).unwrap(),
        unit_file(&r),
        "enabled at login"
    );
    for (secret, what) in [
        (token.as_str(), "the token"),
        (bearer.trim(), "the API bearer"),
        (proxy_secret, "a proxy password"),
    ] {
        assert_absent(unit.as_bytes(), secret, &format!("the unit ({what})"));
    }
    let relay = std::fs::canonicalize(r.relay_bin()).unwrap();
    for line in [
        format!(
            "ExecStart=\"{}\" --config-dir \"{}\" serve",
            relay.display(),
            r.config.display()
        ),
        "Restart=on-failure".into(),
        format!(
            "StandardError=append:{}",
            r.config.join("relay.out").display()
        ),
        "WantedBy=default.target".into(),
    ] {
        assert!(unit.lines().any(|l| l == line), "no {line:?} in:\n{unit}");
    }
    let env_lines: Vec<&str> = unit
        .lines()
        .filter(|l| l.starts_with("Environment"))
        .collect();
    assert_eq!(env_lines.len(), 1, "only PATH goes in: {env_lines:?}");
    assert!(
        env_lines[0].starts_with("Environment=\"PATH="),
        "{env_lines:?}"
    );
    // The file `--dry-run` prints is the file written.
    let dry = r.cli(&["service", "install", "--dry-run"]);
    assert_eq!(dry.stdout, unit);
    verify_unit(&unit_file(&r));

    let (_, st) = json_of(&r, &mut r.cli_command(&["service", "status", "--json"]));
    assert_eq!(
        (
            &st["installed"],
            &st["current"],
            &st["enabled"],
            &st["running"]
        ),
        (
            &Value::Bool(true),
            &Value::Bool(true),
            &Value::Bool(true),
            &Value::Bool(true)
        ),
        "{st}"
    );
    assert_eq!(st["pid"], r.ready.pid);
    // The hand-started relay and the installed service collide: both status verbs say
    // so, with how to hand over.
    let pid = r.ready.pid;
    let conflict = format!(
        "the login service for this config dir is installed ({}), but this relay was \
         started by hand, so the service cannot start its own while it runs (one relay per \
         config dir); to hand over, stop this one (Ctrl-C where it runs, or `kill {pid}`), \
         then run `systemctl --user start relay.service`",
        unit_file(&r).display()
    );
    assert_eq!(
        (&st["service"], st["conflict"].as_str()),
        (&Value::Null, Some(conflict.as_str())),
        "{st}"
    );
    let text = r.cli(&["service", "status"]);
    assert!(
        text.stdout.contains(&format!(
            "\nrelay: running (pid {pid}, started by hand) for {}\nnote: {conflict}\n",
            r.config.display()
        )),
        "{}",
        text.stdout
    );
    let text = r.cli(&["status"]);
    assert!(
        text.stdout
            .contains(&format!("running (pid {pid}, started by hand)\n"))
            && text.stdout.ends_with(&format!("\nnote: {conflict}\n")),
        "{}",
        text.stdout
    );

    // relay stopped: the CLI says so, and where the installed service logs.
    r.stop();
    let down = r.cli(&["status"]);
    assert_eq!(down.status, 69, "not running: {}", down.stderr);
    assert!(
        down.stderr
            .starts_with("error: relay is not running (cannot connect to ")
            && down.stderr.contains("its login service is installed")
            && down.stderr.contains("`relay service status`")
            && down
                .stderr
                .contains(&r.config.join("relay.log").display().to_string()),
        "{}",
        down.stderr
    );

    let (code, v) = json_of(&r, &mut r.cli_command(&["service", "uninstall", "--json"]));
    assert_eq!((code, &v["removed"]), (0, &Value::Bool(true)), "{v}");
    assert!(!unit_file(&r).exists() && wants_link(&r).symlink_metadata().is_err());
    let again = r.cli(&["service", "uninstall"]);
    assert_eq!(again.status, 0);
    assert!(
        again.stdout.starts_with("not installed (no "),
        "{}",
        again.stdout
    );
    let (_, st) = json_of(&r, &mut r.cli_command(&["service", "status", "--json"]));
    assert_eq!(
        (&st["installed"], &st["running"]),
        (&Value::Bool(false), &Value::Bool(false))
    );
    let down = r.cli(&["status"]);
    assert!(
        down.stderr.contains(&format!(
            "start it with `relay --config-dir {} serve` (or at every login with `relay \
             service install`)",
            r.config.display()
        )),
        "{}",
        down.stderr
    );
}

/// `systemd-analyze verify`: the unit parses, its program exists, every key is known
/// (it warns on stderr and still exits 0 for an unknown key, so stderr must be empty).
/// Required in CI (`.ci/run` installs systemd); elsewhere a missing tool is a skip line.
fn verify_unit(unit: &Path) {
    let out = match Command::new("systemd-analyze")
        .arg("verify")
        .arg(unit)
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "systemd-analyze: {e} (CI installs systemd)"
            );
            eprintln!("skip: systemd-analyze verify ({e})");
            return;
        }
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify {}: {:?}\n{stderr}",
        unit.display(),
        out.status
    );
}

/// With a user manager, install asks it to enable and start the unit, and uninstall to
/// stop and disable it. The manager is a stand-in `systemctl` first on `PATH` that
/// records its arguments (CI has no user manager to run the real one against).
#[test]
fn service_install_enables_and_starts_through_the_user_manager() {
    let mut r = Relay::prepare(None, false);
    let calls = r.root.join("systemctl.calls");
    write_script(
        &r.home.join(".local/bin/systemctl"),
        &format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\ncase \"$2\" in is-enabled) echo enabled;; is-active) echo active;; esac\n",
            calls.display()
        ),
    );
    let (code, v) = json_of(&r, &mut r.cli_command(&["service", "install", "--json"]));
    assert_eq!(code, 0, "{v}");
    assert_eq!(
        (&v["started"], &v["notes"]),
        (&Value::Bool(true), &serde_json::json!([])),
        "{v}"
    );
    assert!(unit_file(&r).exists());
    // Enabling is the manager's job here: relay made no link of its own.
    assert!(wants_link(&r).symlink_metadata().is_err());
    let (_, st) = json_of(&r, &mut r.cli_command(&["service", "status", "--json"]));
    assert_eq!(
        (&st["enabled"], &st["active"]),
        (&Value::Bool(true), &Value::from("active")),
        "{st}"
    );
    let (code, v) = json_of(&r, &mut r.cli_command(&["service", "uninstall", "--json"]));
    assert_eq!((code, &v["removed"]), (0, &Value::Bool(true)), "{v}");
    assert!(!unit_file(&r).exists());
    let recorded = std::fs::read_to_string(&calls).unwrap();
    assert_eq!(
        recorded.lines().collect::<Vec<_>>(),
        [
            "--user show-environment",
            "--user daemon-reload",
            "--user enable --now relay.service",
            "--user show-environment",
            "--user is-enabled relay.service",
            "--user is-active relay.service",
            "--user show-environment",
            "--user disable --now relay.service",
            "--user daemon-reload",
        ],
        "{recorded}"
    );

    // A relay started by hand on the config dir: install only enables, since the
    // service's relay could not start beside it, and says how to hand over.
    r.write_settings(&base_settings(None));
    r.launch_daemon();
    std::fs::remove_file(&calls).unwrap();
    let (code, v) = json_of(&r, &mut r.cli_command(&["service", "install", "--json"]));
    assert_eq!(code, 0, "{v}");
    let pid = r.ready.pid;
    assert_eq!(
        (&v["started"], &v["notes"]),
        (
            &Value::Bool(false),
            &serde_json::json!([format!(
                "relay already runs for this config dir (pid {pid}, started by hand), so the \
                 service was enabled, not started (one relay per config dir): stop that relay \
                 (Ctrl-C where it runs, or `kill {pid}`), then `systemctl --user start \
                 relay.service`"
            )])
        ),
        "{v}"
    );
    let recorded = std::fs::read_to_string(&calls).unwrap();
    assert_eq!(
        recorded.lines().collect::<Vec<_>>(),
        [
            "--user show-environment",
            "--user daemon-reload",
            "--user enable relay.service",
        ],
        "{recorded}"
    );
}
