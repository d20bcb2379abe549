//! Which config dir the real CLI picks (docs/cli.md#the-config-dir): the flag, then
//! `RELAY_CONFIG_DIR`, then the platform's dir from the `directories` crate. No daemon
//! runs: the CLI names the socket it could not reach, and that names the dir.

use std::path::Path;
use std::process::Command;

/// The CLI's error for `relay status` with this environment (and `args` before the
/// verb), from an empty folder with no daemon anywhere.
fn status_error(home: &Path, env: &[(&str, &str)], args: &[&str]) -> String {
    let mut cmd = Command::new(relay_e2e::bin("relay"));
    cmd.env_clear()
        .env("HOME", home)
        .envs(env.iter().copied())
        .args(args)
        .arg("status")
        .current_dir(home);
    let out = cmd.output().unwrap();
    // relay is not running there: 69 (docs/cli.md#exit-codes).
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    String::from_utf8(out.stderr).unwrap()
}

fn expect_socket(err: &str, dir: &Path) {
    let want = format!("cannot connect to {}: ", dir.join("relay.sock").display());
    assert!(err.contains(&want), "want {want:?} in {err:?}");
}

#[test]
fn the_config_dir_is_the_flag_then_relay_config_dir_then_the_platforms() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path();
    let platform = if cfg!(target_os = "macos") {
        home.join("Library/Application Support/relay")
    } else {
        home.join(".config/relay")
    };
    let xdg = home.join("xdg");

    expect_socket(&status_error(home, &[], &[]), &platform);
    // XDG_CONFIG_HOME counts on Linux only, and only when it is an absolute path.
    let with_xdg = status_error(home, &[("XDG_CONFIG_HOME", xdg.to_str().unwrap())], &[]);
    if cfg!(target_os = "macos") {
        expect_socket(&with_xdg, &platform);
    } else {
        expect_socket(&with_xdg, &xdg.join("relay"));
    }
    expect_socket(
        &status_error(home, &[("XDG_CONFIG_HOME", "relative/xdg")], &[]),
        &platform,
    );
    expect_socket(
        &status_error(home, &[("XDG_CONFIG_HOME", "")], &[]),
        &platform,
    );

    // RELAY_CONFIG_DIR beats the platform's dir (an empty one does not count); the flag
    // beats both.
    let env_dir = home.join("from-env");
    let both = [
        ("XDG_CONFIG_HOME", xdg.to_str().unwrap()),
        ("RELAY_CONFIG_DIR", env_dir.to_str().unwrap()),
    ];
    expect_socket(&status_error(home, &both, &[]), &env_dir);
    expect_socket(
        &status_error(home, &[("RELAY_CONFIG_DIR", "")], &[]),
        &platform,
    );
    let flag_dir = home.join("from-flag");
    expect_socket(
        &status_error(home, &both, &["--config-dir", flag_dir.to_str().unwrap()]),
        &flag_dir,
    );
}
