//! The one-command install (README, Install): `cargo install --locked --path .` puts every
//! binary relay needs — `relay`, `relay-sessions`, `relay-shim` — side by side, since
//! relay runs its helpers from its own folder (docs/architecture.md#binaries).
//!
//! This runs the real `cargo install` into a temporary root, `--offline`, with `--debug`
//! and this build's target dir so that it reuses what `cargo build` compiled instead of
//! building everything again in release mode (the only difference from the README's
//! command). Alone in its test binary: cargo runs test binaries one at a time, so the
//! binaries it relinks in `target/` are not read by another test meanwhile.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn cargo_install_puts_relay_and_both_helpers_side_by_side() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // This test binary is <target>/<profile>/deps/install-….
    let exe = std::env::current_exe().expect("current exe");
    let target_dir: PathBuf = exe
        .ancestors()
        .nth(3)
        .expect("the target dir above deps/")
        .to_path_buf();
    let root = tempfile::tempdir().expect("temp root");
    let out = Command::new(cargo)
        .args(["install", "--locked", "--offline", "--debug", "--path"])
        .arg(env!("CARGO_MANIFEST_DIR"))
        .arg("--root")
        .arg(root.path())
        .arg("--target-dir")
        .arg(&target_dir)
        .output()
        .expect("run cargo install");
    assert!(
        out.status.success(),
        "cargo install failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = root.path().join("bin");
    let mut names: Vec<String> = std::fs::read_dir(&bin)
        .expect("the install root's bin/")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["relay", "relay-sessions", "relay-shim"], "{bin:?}");
    for name in &names {
        let v = Command::new(bin.join(name))
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("{name} --version: {e}"));
        assert!(v.status.success(), "{name} --version: {:?}", v.status);
        let line = String::from_utf8_lossy(&v.stdout).into_owned();
        assert!(
            line.starts_with(&format!("{name} {}", env!("CARGO_PKG_VERSION"))),
            "{name} --version: {line:?}"
        );
    }
}
