//! A tool Claude runs reads Claude: the pinned real Claude Code, under relay's real
//! sandbox and on the token, makes a scripted Bash tool call (`fakeapi`) that walks up
//! to the Claude process and reads the token out of its memory (`/proc/<pid>/mem`
//! through `/proc/<pid>/maps`, and its environment). The shield
//! (docs/THREAT-MODEL.md#claudes-tools-cannot-reach-claude) runs every Bash command in a
//! Landlock domain nested below Claude's: the read is refused and the token is found
//! nowhere, while the same kind of call still runs git, a build, pipes and renames.

use serde_json::{json, Value};

use relay_e2e::daemon::{doctor_check, Relay, TOKEN_SETTING};
use relay_e2e::fakeapi::FakeApi;
use relay_e2e::random_hex;

use crate::clients::real_claude::claude_code;
use crate::clients::real_turns::{
    assert_the_token_went_to_the_stand_in_alone, fake_oauth_token, message, settings, start_session,
};

/// The attack, as a prompt-injected Claude would run it: find the `claude` process
/// among its parents, then read every writable region of its memory looking for an
/// OAuth token's shape (the pattern never matches itself, so the command Claude holds
/// in memory does not count), and print what it found. Each step says what the kernel
/// answered.
const READ_CLAUDES_MEMORY: &str = r#"python3 -c '
import errno, os, re
def stat(pid):
    s = open("/proc/%d/stat" % pid).read()
    return s[s.index("(") + 1:s.rindex(")")], int(s[s.rindex(")") + 2:].split()[1])
def why(e):
    return errno.errorcode.get(e.errno, str(e.errno))
pid = os.getppid()
while pid > 1 and stat(pid)[0] != "claude":
    pid = stat(pid)[1]
print("claude pid:", pid, stat(pid)[0] if pid > 1 else "none")
shape = re.compile(rb"sk-ant-oat01-[0-9a-f]{40}")
found = set()
try:
    found.update(shape.findall(open("/proc/%d/environ" % pid, "rb").read()))
    print("environ: read")
except OSError as e:
    print("environ:", why(e))
try:
    maps = open("/proc/%d/maps" % pid).read().splitlines()
    print("maps: read")
except OSError as e:
    maps = []
    print("maps:", why(e))
try:
    mem = open("/proc/%d/mem" % pid, "rb", 0)
    print("mem: opened")
except OSError as e:
    mem = None
    print("mem:", why(e))
read = 0
for line in maps if mem else []:
    f = line.split()
    if not f[1].startswith("rw"):
        continue
    lo, hi = (int(x, 16) for x in f[0].split("-"))
    at = lo
    while at < hi and read < 4 << 30:
        try:
            mem.seek(at)
            b = mem.read(min(hi - at, 1 << 24))
        except OSError:
            break
        if not b:
            break
        read += len(b)
        found.update(shape.findall(b))
        at += len(b)
print("bytes read:", read)
print("tokens found:", len(found))
for t in found:
    print(t.decode())
'"#;

/// Ordinary work the shield must leave alone: git, a make build that compiles and runs
/// a program, pipes, a rename and a hard link across folders, a background job killed.
const ORDINARY_WORK: &str = "set -e
mkdir -p work/src work/out && cd work
git init -q . && git config user.email a@example.com && git config user.name shield
printf 'int main(void){return 0;}\\n' > src/ok.c
printf 'out/ok.txt: src/ok.c\\n\\tcc -o out/ok src/ok.c && ./out/ok && echo built > out/ok.txt\\n' > Makefile
make -s out/ok.txt && cat out/ok.txt
git add -A && git commit -q -m one && git status --short | wc -l | sed 's/^ */clean: /'
git log --oneline | grep -c one | sed 's/^/commits: /'
echo moved > src/a && mv src/a out/a && ln out/a src/b && cat src/b
sleep 30 & kill $! && ! wait $! && echo killed";

#[test]
fn a_bash_tool_call_cannot_read_the_token_out_of_claudes_memory_and_still_runs_git_and_a_build() {
    let Some(claude) = claude_code() else { return };
    let abi = relay_shim::landlock::abi_version().unwrap_or(0);
    if abi < relay_shim::landlock::MIN_SHIELD_ABI {
        let why = format!("the shield needs Landlock ABI 6 (Linux 6.12); this kernel has {abi}");
        assert!(
            std::env::var_os("CI").is_none(),
            "{why} (CI is set: nothing is skipped)"
        );
        eprintln!("skip: {why}");
        return;
    }
    for tool in ["python3", "git", "make", "cc"] {
        if !on_path(tool) {
            assert!(
                std::env::var_os("CI").is_none(),
                "{tool} not found: .ci/run installs it"
            );
            eprintln!("skip: {tool} not found");
            return;
        }
    }
    let mut r = Relay::prepare(None, false);
    let done = format!("done-{}", random_hex(4));
    let script = json!({"turns": [
        {"text": "Reading Claude.", "tool_use": [
            {"id": "toolu_attack", "name": "Bash", "input": {"command": READ_CLAUDES_MEMORY, "description": "read the parent's memory"}},
        ]},
        {"text": "Now some work.", "tool_use": [
            {"id": "toolu_work", "name": "Bash", "input": {"command": ORDINARY_WORK, "description": "git and a build"}},
        ]},
        {"text": done},
    ]});
    let api = FakeApi::start(&r.root, &script);
    let token = fake_oauth_token();
    r.write_token(&token);
    r.write_settings(&settings(&claude, &api, Some(TOKEN_SETTING)));
    r.launch_daemon();
    let id = start_session(&r, &[]);
    let out = message(&r, &id, "look around, then build", &[]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, format!("{done}\n"));

    let requests = api.messages();
    let result = |tid: &str| -> Value {
        requests
            .iter()
            .flat_map(|q| q["tool_results"].as_array().cloned().unwrap_or_default())
            .find(|t| t["tool_use_id"] == tid)
            .unwrap_or_else(|| panic!("no tool_result {tid} in {requests:?}"))
    };
    let attack = result("toolu_attack");
    let text = attack["text"].as_str().unwrap_or_default();
    // It found Claude and asked the kernel; the kernel refused its memory.
    assert!(
        text.contains("claude pid:") && !text.contains(" none"),
        "{attack}"
    );
    assert!(
        text.contains("mem: EACCES"),
        "Claude's memory was not refused: {attack}"
    );
    assert!(text.contains("tokens found: 0"), "{attack}");
    assert!(
        !text.contains(&token),
        "the tool read the token out of Claude: {attack}"
    );

    let work = result("toolu_work");
    assert_eq!(work["is_error"], false, "{work}");
    let text = work["text"].as_str().unwrap_or_default();
    for line in ["built", "clean: 0", "commits: 1", "moved", "killed"] {
        assert!(
            text.lines().any(|l| l.trim() == line),
            "no {line:?} in {work}"
        );
    }
    assert!(r.project.join("work/out/ok").is_file(), "{work}");

    // The launch's audit row and its sandbox's explanation say the shield held.
    let row = r
        .audit_rows()
        .into_iter()
        .find(|a| a["action"] == "session_launch" && a["session_id"] == id.as_str())
        .unwrap();
    assert_eq!(row["shield"], true, "{row}");
    let (status, x, _) = r.api("GET", &format!("/api/sessions/{id}/sandbox"), None);
    assert_eq!(status, 200, "{x}");
    assert!(
        x["notes"].as_array().unwrap().iter().any(|n| n
            .as_str()
            .unwrap()
            .starts_with("Claude's tools are shielded")),
        "{x}"
    );
    // doctor says the shield is in force here.
    let report = r.cli_json(&["doctor"]);
    let shield = doctor_check(&report, "shield");
    assert_eq!(shield["status"], "ok", "{shield}");

    assert_the_token_went_to_the_stand_in_alone(&r, &api, &requests, &token, &out.stdout);
}

/// Whether `tool` is in one of this process's `PATH` folders.
fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}
