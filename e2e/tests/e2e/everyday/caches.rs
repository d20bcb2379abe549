//! Package installs keep their caches in the session's own folder: `npm install` from a
//! registry (the stand-in on loopback, reached through the sandbox's egress list) works
//! in a token-less `relay sandbox shell` and in the Bash tool of a sandboxed Claude that
//! got the token (whose `HOME` is relay's, read-only), warm the second time, and never
//! writes the person's own cache, which the person's tools read outside every sandbox
//! (docs/settings.md#caches).

use std::path::Path;
use std::process::Command;

use relay_e2e::daemon::Relay;
use relay_e2e::registry::Registry;

/// A tiny package, packed on the host into `dir` as `relay-tiny-1.0.0.tgz`.
fn tiny_package(dir: &Path) {
    let src = dir.join("relay-tiny");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(
        src.join("package.json"),
        r#"{"name": "relay-tiny", "version": "1.0.0", "main": "index.js"}"#,
    )
    .unwrap();
    std::fs::write(src.join("index.js"), "module.exports = 'tiny ran';\n").unwrap();
    let out = Command::new("npm")
        .args(["pack", "--silent", "--pack-destination"])
        .arg(dir)
        .current_dir(&src)
        .env("npm_config_cache", dir.join(".host-npm-cache"))
        .output()
        .expect("npm on the host");
    assert!(out.status.success(), "{out:?}");
    std::fs::remove_dir_all(dir.join(".host-npm-cache")).ok();
}

/// Installs the package from the registry stand-in at `registry` in a fresh folder
/// `app-<n>-cold` of the project, then again in a fresh `app-<n>-warm`, running it each
/// time, and says where npm's cache is.
fn install(n: &str, registry: &str) -> String {
    let one = |kind: &str| {
        format!(
            "mkdir app-{n}-{kind} && cd app-{n}-{kind} && echo '{{}}' > package.json && \
             npm install --no-audit --no-fund --registry {registry} relay-tiny >../npm-{n}.log 2>&1 && \
             node -e 'console.log(\"npm-{kind}-\" + require(\"relay-tiny\"))' || tail -n 20 ../npm-{n}.log; \
             cd ..; "
        )
    };
    format!(
        "{}{}rm -f npm-{n}.log; echo \"cache=$(npm config get cache)\"",
        one("cold"),
        one("warm")
    )
}

/// The cache folder a run printed.
fn cache_of(text: &str) -> String {
    text.lines()
        .find_map(|l| l.strip_prefix("cache="))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn npm_install_works_cold_and_warm_in_a_shell_and_in_claudes_bash_tool_and_never_writes_the_persons_cache(
) {
    let registry = Registry::start();
    let r = Relay::prepare(None, false);
    let packed = r.root.join("packed");
    tiny_package(&packed);
    let tarball = registry.publish_npm("relay-tiny", "1.0.0", &packed.join("relay-tiny-1.0.0.tgz"));
    let npm = registry.npm_url();
    let (r, api) = super::with_claude_running(r, &registry, "toolu_npm", &install("claude", &npm));
    let persons = r.home.join(".npm");

    // A token-less shell in the project.
    let text = super::shell(&r, &r.project, &install("shell", &npm)).0;
    assert!(
        text.contains("npm-cold-tiny ran") && text.contains("npm-warm-tiny ran"),
        "npm install failed in a shell: {text}"
    );
    // The tarball came from the registry once: the warm install read the cache.
    assert_eq!(registry.hits(&tarball), 1, "{:?}", registry.requests());
    let shell_cache = cache_of(&text);
    assert!(
        !shell_cache.is_empty() && !Path::new(&shell_cache).starts_with(&r.home),
        "the shell's cache is the person's: {text}"
    );
    assert!(!persons.exists(), "a shell wrote the person's npm cache");
    assert_eq!(
        super::names(&r.project),
        ["app-shell-cold", "app-shell-warm"],
        "{text}"
    );
    only_what_npm_made(&r.project, "shell");

    // Claude's Bash tool, in a launch that got the token.
    let Some(api) = api else { return };
    let result = super::claudes_tool_result(&r, &api, "toolu_npm");
    let text = result["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("npm-cold-tiny ran") && text.contains("npm-warm-tiny ran"),
        "npm install failed in Claude's Bash tool: {result}"
    );
    // Once more, for a cache of its own: not the person's, and not the shell's.
    assert_eq!(registry.hits(&tarball), 2, "{:?}", registry.requests());
    only_what_npm_made(&r.project, "claude");
    let claude_cache = cache_of(text);
    assert!(
        !claude_cache.is_empty()
            && claude_cache != shell_cache
            && !Path::new(&claude_cache).starts_with(&r.home),
        "the token launch's cache: {claude_cache:?}, the shell's: {shell_cache:?}"
    );
    assert!(
        !persons.exists(),
        "a token launch wrote the person's npm cache"
    );
}

/// The two folders of run `n` in `project` hold only what npm made (and the
/// `package.json` the run wrote).
fn only_what_npm_made(project: &Path, n: &str) {
    for app in [format!("app-{n}-cold"), format!("app-{n}-warm")] {
        let made = super::names(&project.join(&app));
        assert_eq!(
            made,
            ["node_modules", "package-lock.json", "package.json"],
            "{app}"
        );
    }
}
