//! A developer's ordinary tasks, each in a fresh folder of the project, in a token-less
//! `relay sandbox shell` and through the real Claude Code's Bash tool in a launch that
//! got the token: make and cc, a venv with `pip install` (from the registry stand-in on
//! loopback, reached through the sandbox's egress list), and git init, commit, branch, clone and push in a folder of the session's
//! own. After each run the folder holds only what the tools made.

use std::path::Path;
use std::process::Command;

use relay_e2e::daemon::Relay;
use relay_e2e::registry::Registry;

/// A wheel of one module, `relay_tiny`, written into `dir` by the host's Python.
fn tiny_wheel(dir: &Path) {
    let script = r#"
import sys, zipfile
w = sys.argv[1] + "/relay_tiny-1.0-py3-none-any.whl"
with zipfile.ZipFile(w, "w") as z:
    z.writestr("relay_tiny.py", "WORDS = 'pip ran'\n")
    z.writestr("relay_tiny-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: relay-tiny\nVersion: 1.0\n")
    z.writestr("relay_tiny-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: relay\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr("relay_tiny-1.0.dist-info/RECORD", "relay_tiny.py,,\nrelay_tiny-1.0.dist-info/METADATA,,\nrelay_tiny-1.0.dist-info/WHEEL,,\nrelay_tiny-1.0.dist-info/RECORD,,\n")
"#;
    let ok = Command::new("/usr/bin/python3")
        .args(["-c", script])
        .arg(dir)
        .status()
        .unwrap()
        .success();
    assert!(ok, "the wheel");
}

/// The tasks, in a fresh folder `<name>` of the project, pip installing from the simple
/// index at `index`; each prints `<task>=ok`.
fn tasks(name: &str, index: &str) -> String {
    format!(
        r#"mkdir {name} && cd {name}
export GIT_AUTHOR_NAME=dev GIT_AUTHOR_EMAIL=dev@example.com GIT_COMMITTER_NAME=dev GIT_COMMITTER_EMAIL=dev@example.com
printf 'int main(void) {{ return 0; }}\n' > hello.c
printf 'hello: hello.c\n\tcc -o hello hello.c\n' > Makefile
make -s >/dev/null 2>&1 && ./hello && echo make=ok
/usr/bin/python3 -m venv .venv >/dev/null 2>&1 && .venv/bin/pip install -q --index-url {index} relay-tiny >/dev/null 2>&1 && .venv/bin/python -c 'import relay_tiny; print("pip=" + ("ok" if relay_tiny.WORDS == "pip ran" else "no"))'
mkdir repo && cd repo && git init -q && echo one > a.txt && git add a.txt && git commit -qm one && git checkout -qb topic && git branch -q | grep -q topic && echo git=ok
cd .. && git init -q --bare remote.git && cd repo && git remote add origin ../remote.git && git push -q origin topic 2>/dev/null && cd .. && git clone -q remote.git copy 2>/dev/null && git -C copy checkout -q topic && test -f copy/a.txt && echo push=ok
rm -rf .venv hello remote.git copy repo; ls -A
"#
    )
}

const DONE: [&str; 4] = ["make=ok", "pip=ok", "git=ok", "push=ok"];

fn all_done(text: &str) -> bool {
    DONE.iter().all(|d| text.contains(d))
}

#[test]
fn make_cc_a_venv_with_pip_and_git_run_in_a_shell_and_in_claudes_bash_tool() {
    let registry = Registry::start();
    let r = Relay::prepare(None, false);
    let wheels = r.root.join("wheels");
    std::fs::create_dir_all(&wheels).unwrap();
    tiny_wheel(&wheels);
    registry.publish_wheel(
        "relay-tiny",
        &wheels.join("relay_tiny-1.0-py3-none-any.whl"),
    );
    let index = registry.simple_url();
    let (r, api) =
        super::with_claude_running(r, &registry, "toolu_tasks", &tasks("claude", &index));

    let text = super::shell(&r, &r.project, &tasks("shell", &index)).0;
    assert!(all_done(&text), "in a shell: {text}");
    let wheel = "/pypi/files/relay_tiny-1.0-py3-none-any.whl";
    assert_eq!(registry.hits(wheel), 1, "{:?}", registry.requests());
    // What the tools made, and nothing else (relay's own folders went at the end).
    let kept = ["Makefile", "hello.c"];
    assert_eq!(super::names(&r.project.join("shell")), kept, "{text}");

    let Some(api) = api else { return };
    let result = super::claudes_tool_result(&r, &api, "toolu_tasks");
    let text = result["text"].as_str().unwrap_or_default();
    assert!(all_done(text), "in Claude's Bash tool: {result}");
    // A cache of its own: the wheel was fetched again.
    assert_eq!(registry.hits(wheel), 2, "{:?}", registry.requests());
    assert_eq!(super::names(&r.project.join("claude")), kept, "{text}");
}
