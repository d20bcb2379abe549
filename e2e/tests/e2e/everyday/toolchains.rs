//! The person's toolchains under `~` (rustup's proxies in `~/.cargo/bin` and its
//! toolchains in `~/.rustup`; pyenv's shims and versions) run in a token-less
//! `relay sandbox shell` and in the Bash tool of a sandboxed Claude that got the token:
//! the real cargo builds a crate offline and one with a dependency from the registry
//! stand-in, and `python3` is the shim's, not the system's. The credential files a
//! grant would hold stay masked.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use relay_e2e::daemon::{base_settings, Relay, TOKEN_SETTING};
use relay_e2e::exec_file::write_executable;
use relay_e2e::registry::Registry;

use crate::clients::real_turns::fake_oauth_token;

/// relay's `PATH`, as a developer with rustup and pyenv has it.
const DEVELOPER_PATH: &str = "~/.cargo/bin:~/.pyenv/shims:~/.local/bin:\
    ~/.sdkman/candidates/java/current/bin:/usr/local/bin:/usr/bin:/bin";

/// A rustup-style proxy and toolchain, and a pyenv-style shim and version, in `home`:
/// each proxy finds its root as the real ones do (`RUSTUP_HOME`, `PYENV_ROOT`, else
/// under `HOME`).
fn developer_home(home: &Path) {
    for dir in [
        ".cargo/bin",
        ".rustup/toolchains/stable/bin",
        ".pyenv/shims",
        ".pyenv/versions/3.99.0/bin",
    ] {
        std::fs::create_dir_all(home.join(dir)).unwrap();
    }
    write_executable(
        &home.join(".cargo/bin/relaytool"),
        "#!/bin/sh\nexec \"${RUSTUP_HOME:-$HOME/.rustup}/toolchains/stable/bin/relaytool\" \"$@\"\n",
    );
    write_executable(
        &home.join(".rustup/toolchains/stable/bin/relaytool"),
        "#!/bin/sh\necho rustup toolchain ran\n",
    );
    write_executable(
        &home.join(".pyenv/shims/relaypy"),
        "#!/bin/sh\nexec \"${PYENV_ROOT:-$HOME/.pyenv}/versions/3.99.0/bin/relaypy\" \"$@\"\n",
    );
    write_executable(
        &home.join(".pyenv/versions/3.99.0/bin/relaypy"),
        "#!/bin/sh\necho pyenv python 3.99 ran\n",
    );
    // sdkman: `current` a link to the version, as `sdk default` leaves it.
    let java = home.join(".sdkman/candidates/java");
    std::fs::create_dir_all(java.join("21.0.2-tem/bin")).unwrap();
    write_executable(
        &java.join("21.0.2-tem/bin/relayjava"),
        "#!/bin/sh\necho sdkman java ran\n",
    );
    std::os::unix::fs::symlink("21.0.2-tem", java.join("current")).unwrap();
}

/// The host's own rustup toolchain laid out in `home` as rustup installs it: the
/// `rustup` binary in `~/.cargo/bin` with `cargo` and `rustc` linked to it (its
/// proxies), and the toolchain relay was built with under `~/.rustup/toolchains`, made
/// the default. The toolchain's files are hard links of the host's (a copy where the
/// two folders are on different file systems), its compiler and the host target's
/// standard library only: the real proxy then runs the real cargo and rustc, found the
/// way a developer's are, from a home the test owns. Links to the host's own `~/.rustup`
/// would not do: no sandbox reads it, and a root reached through a link is never
/// granted. None when this machine has no rustup.
fn real_rustup(home: &Path) -> Option<()> {
    let rustup = which("rustup")?;
    let run = |args: &[&str]| {
        let out = Command::new("rustc")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("rustc on the host");
        String::from_utf8(out.stdout).unwrap()
    };
    let sysroot = PathBuf::from(run(&["--print", "sysroot"]).trim());
    let host = run(&["-vV"])
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))?;
    let name = sysroot.file_name()?.to_string_lossy().into_owned();
    let bin = home.join(".cargo/bin");
    std::fs::create_dir_all(&bin).unwrap();
    link_or_copy(&rustup, &bin.join("rustup"));
    for proxy in ["cargo", "rustc"] {
        std::os::unix::fs::symlink("rustup", bin.join(proxy)).unwrap();
    }
    let toolchain = home.join(".rustup/toolchains").join(&name);
    let real = std::fs::canonicalize(&sysroot).unwrap();
    for tool in ["cargo", "rustc"] {
        link_tree(
            &real.join("bin").join(tool),
            &toolchain.join("bin").join(tool),
            &host,
        );
    }
    link_tree(&real.join("lib"), &toolchain.join("lib"), &host);
    // The folders a rustup install makes beside its toolchains (rustup checks them).
    for dir in ["downloads", "tmp", "update-hashes"] {
        std::fs::create_dir_all(home.join(".rustup").join(dir)).unwrap();
    }
    let settings =
        format!("version = \"12\"\ndefault_toolchain = \"{name}\"\nprofile = \"minimal\"\n");
    std::fs::write(home.join(".rustup/settings.toml"), settings).unwrap();
    Some(())
}

/// The program `name` on the test's own `PATH`, its links resolved.
fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .and_then(|p| std::fs::canonicalize(p).ok())
}

fn link_or_copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).unwrap();
    }
}

/// `from` at `to`, file by file, leaving out the standard libraries of targets other
/// than `host` (a toolchain's `lib/rustlib/<target>`).
fn link_tree(from: &Path, to: &Path, host: &str) {
    let meta = std::fs::symlink_metadata(from).unwrap();
    if meta.file_type().is_symlink() {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(std::fs::read_link(from).unwrap(), to).unwrap();
    } else if meta.is_dir() {
        let other_target = from.parent().is_some_and(|p| p.ends_with("lib/rustlib"))
            && from.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.contains('-') && n != host
            });
        if other_target {
            return;
        }
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            link_tree(&e.path(), &to.join(e.file_name()), host);
        }
    } else {
        link_or_copy(from, to);
    }
}

/// A pyenv-style version whose Python is not the system's: a virtual environment of
/// the host's `/usr/bin/python3` at `~/.pyenv/versions/3-dev`, so its `sys.prefix` is
/// its own folder, and the shim `~/.pyenv/shims/python3` that runs it.
fn pyenv_python(home: &Path) {
    let version = home.join(".pyenv/versions/3-dev");
    let ok = Command::new("/usr/bin/python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&version)
        .status()
        .unwrap()
        .success();
    assert!(ok, "a venv of /usr/bin/python3");
    write_executable(
        &home.join(".pyenv/shims/python3"),
        "#!/bin/sh\nexec \"${PYENV_ROOT:-$HOME/.pyenv}/versions/3-dev/bin/python3\" \"$@\"\n",
    );
}

/// A `.crate` of `relay-tiny` 1.0.0, a library with one constant, packed on the host
/// into `dir` with `tar` as `cargo package` would.
fn tiny_crate(dir: &Path) -> PathBuf {
    let src = dir.join("relay-tiny-1.0.0");
    std::fs::create_dir_all(src.join("src")).unwrap();
    std::fs::write(
        src.join("Cargo.toml"),
        "[package]\nname = \"relay-tiny\"\nversion = \"1.0.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(
        src.join("src/lib.rs"),
        "pub const WORDS: &str = \"registry crate ran\";\n",
    )
    .unwrap();
    let krate = dir.join("relay-tiny-1.0.0.crate");
    let ok = Command::new("tar")
        .arg("-czf")
        .arg(&krate)
        .arg("-C")
        .arg(dir)
        .arg("relay-tiny-1.0.0")
        .status()
        .unwrap()
        .success();
    assert!(ok, "tar of the crate");
    krate
}

/// The person's toolchains at work, in a fresh folder `<n>` of the project: the fake
/// ones, the shim's Python, and the real cargo, building a crate with no dependency
/// offline and one whose dependency comes from the sparse index at `index`. Each prints
/// what shows it ran.
fn work(n: &str, index: &str) -> String {
    format!(
        r#"relaytool; relaypy; relayjava
python3 -c 'import sys; print("python=" + sys.prefix)'
mkdir {n} && cd {n}
cargo new -q --vcs none solo && cd solo && cargo build -q --offline 2>&1 && ./target/debug/solo && cd ..
cargo new -q --vcs none withdep && cd withdep && mkdir .cargo && printf '[source.crates-io]\nreplace-with = "stand-in"\n[source.stand-in]\nregistry = "{index}"\n' > .cargo/config.toml && echo 'relay-tiny = "1"' >> Cargo.toml && echo 'fn main() {{ println!("{{}}", relay_tiny::WORDS); }}' > src/main.rs && cargo build -q 2>&1 && ./target/debug/withdep
"#
    )
}

/// Whether `text` shows every toolchain ran, the shim's Python being the one in `home`.
fn ran_all(text: &str, home: &Path) -> bool {
    let python = format!("python={}", home.join(".pyenv/versions/3-dev").display());
    ran_both(text)
        && text.contains("sdkman java ran")
        && text.lines().any(|l| l == python)
        && text.contains("Hello, world!")
        && text.contains("registry crate ran")
}

const BOTH: &str = "relaytool; relaypy";

fn ran_both(text: &str) -> bool {
    text.contains("rustup toolchain ran") && text.contains("pyenv python 3.99 ran")
}

#[test]
fn the_persons_toolchains_in_the_home_run_in_a_shell_and_in_claudes_bash_tool() {
    let registry = Registry::start();
    let mut r = Relay::prepare(None, false);
    r.path = Some(DEVELOPER_PATH.into());
    developer_home(&r.home);
    pyenv_python(&r.home);
    if real_rustup(&r.home).is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "no rustup: .ci/run installs it"
        );
        eprintln!("skip: no rustup on this machine");
        return;
    }
    let crates = r.root.join("crates");
    registry.publish_crate("relay-tiny", "1.0.0", &tiny_crate(&crates));
    let index = registry.cargo_index_url();
    let (r, api) = super::with_claude_running(r, &registry, "toolu_tools", &work("claude", &index));

    // A token-less shell in the project.
    let text = super::shell(&r, &r.project, &work("shell", &index)).0;
    assert!(
        ran_all(&text, &r.home),
        "a shell did not run the toolchains: {text}"
    );
    let krate = "/cargo/dl/relay-tiny/1.0.0/download";
    assert_eq!(registry.hits(krate), 1, "{:?}", registry.requests());
    only_what_cargo_made(&r.project.join("shell"));
    // explain names each root and why.
    let x = r.cli_json(&["sandbox", "explain", "shell"]);
    let read = x["read"].to_string();
    for root in [".rustup", ".pyenv", ".cargo/bin"] {
        let path = r.home.join(root).display().to_string();
        assert!(
            read.contains(&format!("\"{path}\"")),
            "{root} not in {read}"
        );
    }
    assert!(read.contains("rustup's toolchains"), "{read}");
    // Every sandbox given the roots is told where they are, a shell too (a root kept
    // outside `~/.rustup` is nowhere `HOME` says).
    let env = x["environment"].to_string();
    for var in ["RUSTUP_HOME", "PYENV_ROOT"] {
        assert!(env.contains(&format!("\"{var}\"")), "{var} not in {env}");
    }

    // Claude's Bash tool, in a launch that got the token (its HOME is relay's).
    let Some(api) = api else { return };
    let result = super::claudes_tool_result(&r, &api, "toolu_tools");
    let text = result["text"].as_str().unwrap_or_default();
    assert!(
        ran_all(text, &r.home),
        "Claude's Bash tool did not run them: {result}"
    );
    // Its cargo home is its own: the crate was fetched again.
    assert_eq!(registry.hits(krate), 2, "{:?}", registry.requests());
    only_what_cargo_made(&r.project.join("claude"));
}

/// `made` holds the two crates and, in each, only what `cargo new` and `cargo build`
/// made (and the `.cargo/config.toml` the run wrote).
fn only_what_cargo_made(made: &Path) {
    assert_eq!(super::names(made), ["solo", "withdep"]);
    assert_eq!(
        super::names(&made.join("solo")),
        ["Cargo.lock", "Cargo.toml", "src", "target"]
    );
    assert_eq!(
        super::names(&made.join("withdep")),
        [".cargo", "Cargo.lock", "Cargo.toml", "src", "target"]
    );
}

#[test]
fn a_toolchain_a_session_can_write_is_never_granted_to_another_sandbox() {
    // A second project over the whole home: its sessions can write every toolchain
    // folder in it, so no sandbox is given them.
    let mut settings = base_settings(Some(TOKEN_SETTING));
    settings["projects"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "home", "name": "home", "path": "~", "allowed_templates": ["*"], "allow_home_directory": true}));
    let mut r = Relay::prepare(None, false);
    // Without sdkman's: its `current` link lies in a folder the home session could
    // write, and a shell looked up by name through it is refused
    // (docs/settings.md#toolchains).
    r.path = Some(DEVELOPER_PATH.replace("~/.sdkman/candidates/java/current/bin:", ""));
    developer_home(&r.home);
    r.write_token(&fake_oauth_token());
    r.write_settings(&settings);
    r.launch_daemon();
    // The home session tries to plant its own program where the toolchain is: the root
    // is read-only to it, as to every sandbox that could write it.
    let plant = super::shell(
        &r,
        &r.home,
        "echo 'echo planted' > ~/.rustup/toolchains/stable/bin/relaytool; echo rc=$?",
    );
    assert!(
        plant.1.contains("rc=") && !plant.1.contains("rc=0"),
        "{}",
        plant.0
    );
    // A shell in the project is not given it: nothing planted runs, and explain says why.
    let text = super::shell(&r, &r.project, BOTH).0;
    assert!(!text.contains("planted") && !ran_both(&text), "{text}");
    let x = r.cli_json(&["sandbox", "explain", "shell"]);
    let notes = x["notes"].to_string();
    let rustup = r.home.join(".rustup").display().to_string();
    assert!(
        notes.contains(&format!("toolchain not granted: {rustup}"))
            && notes.contains("sessions can write"),
        "{notes}"
    );
    assert!(
        !x["read"].to_string().contains(&format!("\"{rustup}\"")),
        "{x}"
    );
}

#[test]
fn a_session_that_could_write_a_toolchain_a_running_sandbox_reads_is_refused() {
    let mut r = Relay::prepare(None, false);
    r.path = Some(DEVELOPER_PATH.into());
    developer_home(&r.home);
    r.write_settings(&base_settings(None));
    r.launch_daemon();
    // A shell in the project is given the toolchain, and waits.
    let fifo = r.project.join("go");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let reader = r.template_terminal("shell", "read x < go; relaytool");
    let reader = reader["id"].as_str().unwrap().to_string();
    // Then the person adds a template that writes `~/.rustup` (for `rustup update`), and
    // a session of it tries to put its own program where the waiting shell will look.
    let mut settings = base_settings(None);
    settings["terminal_templates"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "rustup-rw", "name": "rustup", "command": "/bin/sh", "read_write": ["~/.rustup"]}));
    r.write_settings(&settings);
    let (status, refused, _) = r.api(
        "POST",
        "/api/terminals",
        Some(
            &json!({"project": "p1", "template": "rustup-rw", "extra_args": ["-c",
            "echo 'echo planted' > ~/.rustup/toolchains/stable/bin/relaytool"]}),
        ),
    );
    assert_eq!(
        (status, refused["code"].as_str()),
        (400, Some(relay::wire::Code::SandboxUnavailable.as_str())),
        "{refused}"
    );
    let why = refused["error"].as_str().unwrap();
    assert!(why.contains(&reader) && why.contains(".rustup"), "{why}");
    std::fs::write(&fifo, "go\n").unwrap();
    r.wait_exited(&reader);
    let (_, _, log) = r.api("GET", &format!("/api/terminals/{reader}/log"), None);
    let log = String::from_utf8_lossy(&log).into_owned();
    assert!(
        log.contains("rustup toolchain ran") && !log.contains("planted"),
        "{log}"
    );
}
