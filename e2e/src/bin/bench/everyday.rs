//! `bench everyday`: a developer's day inside relay against the host (docs/performance.md,
//! "Everyday work"). The launch of a template with the person's toolchains granted and
//! of one without (`"toolchains": false`), alternated; a warm `npm install` (the
//! package in the cache already, `--offline`) and a warm `cargo build` (the target
//! folder built, one source file touched), each timed inside one `relay sandbox` run
//! and on the host, the same commands in the same folder.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use relay_e2e::daemon::{base_settings, Relay};
use serde_json::json;

use super::{sandbox_cmd, timed, Report, Series, HEADER};

/// A rustup-style proxy folder and toolchain, and a pyenv-style one, in `home`.
fn developer_home(home: &Path) {
    for dir in [
        ".cargo/bin",
        ".rustup/toolchains/stable/bin",
        ".pyenv/shims",
        ".pyenv/versions/3.99.0/bin",
    ] {
        std::fs::create_dir_all(home.join(dir)).unwrap();
    }
}

/// The host's cargo when it is rustup's proxy: its folder and rustup's home.
fn host_rustup() -> Option<(PathBuf, PathBuf)> {
    let home = PathBuf::from(std::env::var_os("HOME")?);
    let bin = home.join(".cargo/bin");
    let rustup = std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home.join(".rustup"));
    (bin.join("cargo").exists() && rustup.is_dir()).then_some((bin, rustup))
}

/// A shell script that runs `cmd` `runs` times after `prepare`, printing each run's
/// milliseconds, one a line.
fn timing_script(prepare: &str, before_each: &str, cmd: &str, runs: usize) -> String {
    format!(
        "set -e; {prepare}; i=0; while [ $i -lt {runs} ]; do {before_each}; \
         s=$(date +%s%N); {cmd} >/dev/null 2>&1; e=$(date +%s%N); \
         echo $(( (e - s) / 1000 )); i=$((i + 1)); done"
    )
}

/// The milliseconds a timing script printed.
fn samples(name: &str, out: &[u8]) -> Series {
    let mut s = Series::new(name);
    s.samples = String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| l.trim().parse::<f64>().ok())
        .map(|us| us / 1000.0)
        .collect();
    s
}

fn host_run(dir: &Path, script: &str, env: &[(&str, &Path)]) -> Vec<u8> {
    let mut c = Command::new("/bin/sh");
    c.arg("-c")
        .arg(script)
        .current_dir(dir)
        .stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("sh on the host");
    if !out.status.success() {
        eprintln!(
            "bench everyday: on the host: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out.stdout
}

fn relay_run(r: &Relay, template: &str, dir: &Path, script: &str) -> Vec<u8> {
    let out = r
        .cli_command(&["sandbox", template, "--", "-c", script])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("relay sandbox");
    if !out.status.success() {
        eprintln!(
            "bench everyday: in relay: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out.stdout
}

/// The package the npm case installs, packed into `dir`.
fn tiny_package(dir: &Path) -> bool {
    let src = dir.join("relay-tiny");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("package.json"),
        r#"{"name": "relay-tiny", "version": "1.0.0"}"#,
    )
    .unwrap();
    Command::new("npm")
        .args(["pack", "--silent", "--pack-destination"])
        .arg(dir)
        .current_dir(&src)
        .env("npm_config_cache", dir.join(".pack-cache"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub fn everyday(runs: usize) -> Report {
    let mut r = Relay::prepare(None, false);
    developer_home(&r.home);
    r.path = Some("~/.cargo/bin:~/.pyenv/shims:/usr/local/bin:/usr/bin:/bin".into());
    let mut s = base_settings(None);
    let t = s["terminal_templates"].as_array_mut().unwrap();
    t.push(json!({"id": "true-tc", "name": "T", "command": "/bin/true"}));
    t.push(json!({"id": "true-notc", "name": "T", "command": "/bin/true", "toolchains": false}));
    let rustup = host_rustup();
    if let Some((bin, home)) = &rustup {
        t.push(json!({"id": "work", "name": "W", "command": "/bin/sh",
            "read": [bin, home],
            "env": {"RUSTUP_HOME": home, "PATH": format!("{}:/usr/bin:/bin", bin.display())}}));
    } else {
        t.push(json!({"id": "work", "name": "W", "command": "/bin/sh"}));
    }
    r.write_settings(&s);
    r.launch_daemon();

    let mut with = Series::new("toolchains");
    let mut without = Series::new("none");
    // Each pair's difference, with and without: what load moves between pairs cancels
    // within one. Which goes first alternates.
    let mut paired: Vec<f64> = Vec::new();
    for i in 0..(runs + 3) {
        let mut pair = [None, None];
        for k in [i % 2, 1 - i % 2] {
            let (series, template) = match k {
                0 => (&mut with, "true-tc"),
                _ => (&mut without, "true-notc"),
            };
            let mut c = sandbox_cmd(&r, &[template]);
            c.current_dir(&r.project);
            let (ms, ok) = timed(c);
            if i >= 3 {
                match ok {
                    true => {
                        series.samples.push(ms);
                        pair[k] = Some(ms);
                    }
                    false => series.failures += 1,
                }
            }
        }
        if let [Some(a), Some(b)] = pair {
            paired.push(a - b);
        }
    }
    paired.sort_by(f64::total_cmp);
    let at = |q: f64| paired.get(((paired.len() as f64 - 1.0) * q).round() as usize);
    let mut text = format!("launch, {runs} runs each, alternated\n{HEADER}");
    text.push_str(&with.row());
    text.push_str(&without.row());
    if let (Some(p25), Some(p50), Some(p75)) = (at(0.25), at(0.5), at(0.75)) {
        text.push_str(&format!(
            "toolchains - none, pair by pair: median {p50:.2} ms (p25 {p25:.2}, p75 {p75:.2})\n"
        ));
    }
    let mut out = json!({"case": "everyday", "launch": [with.json(), without.json()],
        "launch_paired_ms": at(0.5)});
    let n = runs.clamp(3, 20);
    let cases: [(&str, Option<(Series, Series)>); 2] = [
        ("npm install, warm", npm(&r, n)),
        (
            "cargo build, warm",
            rustup.as_ref().and_then(|_| cargo(&r, n)),
        ),
    ];
    for (what, pair) in cases {
        text.push_str(&format!("\n{what}, {n} runs each\n{HEADER}"));
        match pair {
            Some((relay, host)) => {
                text.push_str(&relay.row());
                text.push_str(&host.row());
                out[what] = json!([relay.json(), host.json()]);
            }
            None => text.push_str("unavailable on this machine\n"),
        }
    }
    Report { text, json: out }
}

fn npm(r: &Relay, n: usize) -> Option<(Series, Series)> {
    let dir = r.project.join("npm");
    std::fs::create_dir_all(&dir).ok()?;
    if !tiny_package(&dir) {
        return None;
    }
    let prepare = "mkdir -p app && cd app && echo '{}' > package.json && \
                   npm install --no-audit --no-fund --offline ../relay-tiny-1.0.0.tgz >/dev/null 2>&1";
    let script = timing_script(
        prepare,
        "rm -rf node_modules package-lock.json",
        "npm install --no-audit --no-fund --offline ../relay-tiny-1.0.0.tgz",
        n,
    );
    let inside = samples("relay", &relay_run(r, "work", &dir, &script));
    std::fs::remove_dir_all(dir.join("app")).ok()?;
    let cache = dir.join(".host-cache");
    let host = samples(
        "host",
        &host_run(&dir, &script, &[("npm_config_cache", &cache)]),
    );
    Some((inside, host))
}

fn cargo(r: &Relay, n: usize) -> Option<(Series, Series)> {
    let dir = r.project.join("crate");
    std::fs::create_dir_all(dir.join("src")).ok()?;
    std::fs::write(
        dir.join("Cargo.toml"),
        // A workspace of its own: the bench's instances may lie inside relay's.
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .ok()?;
    std::fs::write(
        dir.join("src/main.rs"),
        "fn main() { println!(\"tiny\"); }\n",
    )
    .ok()?;
    let script = timing_script(
        "cargo build --offline -q >&2",
        "touch src/main.rs",
        "cargo build --offline -q",
        n,
    );
    let inside = samples("relay", &relay_run(r, "work", &dir, &script));
    std::fs::remove_dir_all(dir.join("target")).ok()?;
    let host = samples("host", &host_run(&dir, &script, &[]));
    (!inside.samples.is_empty()).then_some((inside, host))
}
