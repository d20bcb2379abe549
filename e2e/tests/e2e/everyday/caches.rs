//! Package installs keep their caches in the session's own folder: `npm install` works
//! in a token-less `relay sandbox shell` and in the Bash tool of a sandboxed Claude that
//! got the token (whose `HOME` is relay's, read-only), warm the second time, and never
//! write the person's own cache, which the person's tools read outside every sandbox
//! (docs/settings.md#caches).

use std::path::Path;
use std::process::Command;

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

/// Installs the package in a fresh folder `app-<n>` of the project, then again from its
/// lock with the cache alone (`npm ci --offline`), runs it, and says where npm's cache
/// is.
fn install(n: &str) -> String {
    format!(
        "mkdir app-{n} && cd app-{n} && echo '{{}}' > package.json && \
         npm install --no-audit --no-fund --offline ../relay-tiny-1.0.0.tgz >../npm-{n}.log 2>&1 && \
         rm -rf node_modules && \
         npm ci --no-audit --no-fund --offline >>../npm-{n}.log 2>&1 && \
         test -d \"$(npm config get cache)/_cacache\" && \
         node -e 'console.log(\"npm-\" + require(\"relay-tiny\"))' || tail -n 20 ../npm-{n}.log; \
         rm -f ../npm-{n}.log; echo \"cache=$(npm config get cache)\""
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
    let (r, api) = super::with_claude_running("toolu_npm", &install("claude"));
    tiny_package(&r.project);
    let persons = r.home.join(".npm");

    // A token-less shell in the project.
    let text = super::shell(&r, &r.project, &install("shell")).0;
    assert!(
        text.contains("npm-tiny ran"),
        "npm install failed in a shell: {text}"
    );
    let shell_cache = cache_of(&text);
    assert!(
        !shell_cache.is_empty() && !Path::new(&shell_cache).starts_with(&r.home),
        "the shell's cache is the person's: {text}"
    );
    assert!(!persons.exists(), "a shell wrote the person's npm cache");
    assert!(
        r.project.join("app-shell/node_modules/relay-tiny").is_dir(),
        "{text}"
    );

    // Claude's Bash tool, in a launch that got the token.
    let Some(api) = api else { return };
    let result = super::claudes_tool_result(&r, &api, "toolu_npm");
    let text = result["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("npm-tiny ran"),
        "npm install failed in Claude's Bash tool: {result}"
    );
    // Its cache is its own: not the person's, and not the one the shell wrote.
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
