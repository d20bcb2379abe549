//! Tests that change what the whole process holds (every descriptor's flags, a forked
//! forwarder and the descriptors it keeps) run alone: in a child copy of the test binary
//! that runs that one test and nothing else, so no test beside them sees the change and
//! they see no other test's.

/// Set in the child copy that runs one test alone.
const ALONE_VAR: &str = "RELAY_SHIM_TEST_ALONE";

/// Runs `body` in a child copy of this test binary that runs only `test` (its path as
/// `module_path!()` spells it, `relay_shim::…::tests::name`), and fails when the child
/// does. In that child, runs `body` itself.
pub(crate) fn alone(test: &str, body: fn()) {
    if std::env::var_os(ALONE_VAR).is_some() {
        body();
        return;
    }
    let name = test.split_once("::").map_or(test, |(_, rest)| rest);
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--test-threads=1"])
        .env(ALONE_VAR, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{name} alone: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
