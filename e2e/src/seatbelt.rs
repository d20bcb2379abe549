//! Seatbelt in the suite: which `sandbox-exec` a launch uses, the policy file the fake
//! one asks its questions from, and the same checks answered two ways.
//!
//! On Linux the launcher is the fake (`fakes/src/sandbox_exec.rs`): it enforces nothing,
//! but before it runs the target it asks the SBPL evaluator every question the policy
//! file implies and records the answers next to its call log. On macOS the launcher is
//! the real `/usr/bin/sandbox-exec`, and the same checks are answered by probing from
//! inside the running session ([`probe_script`]). Either way a test lists what must hold
//! ([`Check`]) and gets back what did not ([`failed_checks`], [`failed_probes`]).

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// The policy file the fake reads, in an instance's root.
pub const POLICY_FILE: &str = "fake-sandbox-exec-policy.json";
/// The variable that names it (`relay_fakes::sbpl_questions::POLICY_ENV`).
pub const POLICY_ENV: &str = "FAKE_SANDBOX_EXEC_POLICY";
/// The fake's answers log, one line per launch, under the launch's `$TMPDIR`.
pub const ANSWERS_LOG: &str = "fake-sandbox-exec-answers.jsonl";

/// The `sandbox-exec` Seatbelt launches use: the real one on macOS, the fake elsewhere.
pub fn launcher() -> PathBuf {
    if cfg!(target_os = "macos") {
        PathBuf::from("/usr/bin/sandbox-exec")
    } else {
        crate::bin("sandbox-exec")
    }
}

/// Whether launches go through the real Seatbelt (macOS) rather than the fake.
pub fn enforced() -> bool {
    cfg!(target_os = "macos")
}

/// Writes the policy file: the paths relay must deny, those it must keep read-only, its
/// sockets and its ports, and the macOS opt-ins of the template its launches run
/// (`{}` for none; the fake's `macos`, `relay_fakes::sbpl_questions::MacOptIns`).
pub fn write_policy(
    root: &Path,
    deny: &[PathBuf],
    pinned: &[PathBuf],
    sockets: &[PathBuf],
    ports: &[u16],
    macos: &Value,
    network: &str,
) {
    // `network`: `proxied` (the default: the fake asks the launch's own proxy port to be
    // open and every other way out — DNS, other ports, hosts out there, listening —
    // closed), `shared` (DNS and TCP out open) or `off`.
    // The person's home is `<root>/home` in every instance (`Relay::prepare`); a session's
    // own HOME may be a folder relay made for Claude, so the fake is told.
    let policy = json!({"deny": deny, "pinned": pinned, "sockets": sockets, "ports": ports,
                        "network": network, "home": root.join("home"), "macos": macos});
    let path = root.join(POLICY_FILE);
    let partial = root.join(format!("{POLICY_FILE}.partial"));
    std::fs::write(&partial, policy.to_string()).expect("policy file");
    std::fs::rename(&partial, &path).expect("policy file");
}

/// Every answers line under `dir` (each launch writes under its own `$TMPDIR`).
pub fn answers_under(dir: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    crate::walk_files(dir, &mut |p| {
        if p.file_name().is_some_and(|n| n == ANSWERS_LOG) {
            out.extend(crate::read_jsonl(p));
        }
    });
    out
}

/// The `session_sandbox` of settings whose launches go through [`launcher`], and the
/// `env_passthrough` that lets the fake read its policy file: the variable reaches it
/// from `relay serve`'s environment, and a sandboxed launch inherits only what the
/// settings pass through (docs/settings.md#env_passthrough).
pub fn use_seatbelt(settings: &mut Value, launcher: &Path) {
    settings["session_sandbox"] = json!({"backend": "seatbelt", "seatbelt_launcher": launcher});
    settings["env_passthrough"] = json!([POLICY_ENV]);
}

/// Every answer the fake recorded under `dir` that contradicts its policy, one line
/// each; and every launch the fake answered without a policy file, where `dir` has one
/// (its variable did not reach the launcher, so nothing of the policy was asked).
pub fn wrong_answers(dir: &Path) -> Vec<String> {
    let has_policy = dir.join(POLICY_FILE).exists();
    answers_under(dir)
        .iter()
        .flat_map(|launch| {
            let unasked = (has_policy && launch["policy"].is_null()).then(|| {
                format!("the fake read no policy ({POLICY_ENV} did not reach it): {launch}")
            });
            launch["answers"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|a| a["ok"] != true)
                .map(|a| a.to_string())
                .chain(unasked)
        })
        .collect()
}

/// The name the fake asks about inside a folder (`relay_fakes::sbpl_questions::PROBE_NAME`).
pub const PROBE_NAME: &str = "fake-sandbox-exec-probe";

/// One thing that must hold in a Seatbelt session. `file-write-create` on a path means
/// creating a new entry inside that folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// An evaluator operation, or `rename`.
    pub op: &'static str,
    pub target: Target,
    pub allowed: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Path(PathBuf),
    Socket(PathBuf),
    Port(u16),
    /// A Mach service by its global name.
    Mach(String),
    /// Another process: `self`, `same-sandbox` or `outside`.
    Process(&'static str),
    Sysctl(String),
    /// An Apple Event's receiver, by bundle id.
    AppleEvent(String),
    /// An operation that names nothing (`lsopen`, `user-preference-write`).
    Nothing,
}

impl Check {
    pub fn denied(op: &'static str, target: Target) -> Check {
        Check {
            op,
            target,
            allowed: false,
        }
    }

    pub fn allowed(op: &'static str, target: Target) -> Check {
        Check {
            op,
            target,
            allowed: true,
        }
    }

    fn matches(&self, answer: &Value) -> bool {
        if answer["op"] != self.op {
            return false;
        }
        let s = |p: &Path| Value::from(p.to_string_lossy().into_owned());
        match &self.target {
            Target::Path(p) if self.op == "file-write-create" => {
                answer.get("mode").is_none() && answer["path"] == s(&p.join(PROBE_NAME))
            }
            Target::Path(p) => answer.get("mode").is_none() && answer["path"] == s(p),
            Target::Socket(p) => answer["socket"] == s(p),
            Target::Port(port) => answer["port"] == *port,
            Target::Mach(n) => answer["mach"] == n.as_str(),
            Target::Process(r) => answer["process"] == *r,
            Target::Sysctl(n) => answer["sysctl"] == n.as_str(),
            Target::AppleEvent(id) => answer["appleevent"] == id.as_str(),
            Target::Nothing => ["path", "socket", "port", "mach", "process", "sysctl"]
                .iter()
                .all(|k| answer.get(k).is_none()),
        }
    }
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verdict = if self.allowed { "allowed" } else { "denied" };
        match &self.target {
            Target::Path(p) => write!(f, "{} {} {verdict}", self.op, p.display()),
            Target::Socket(p) => write!(f, "{} to socket {} {verdict}", self.op, p.display()),
            Target::Port(port) => write!(f, "{} to localhost:{port} {verdict}", self.op),
            Target::Mach(n) => write!(f, "{} of {n} {verdict}", self.op),
            Target::Process(r) => write!(f, "{} on a process {r} {verdict}", self.op),
            Target::Sysctl(n) => write!(f, "{} of {n} {verdict}", self.op),
            Target::AppleEvent(id) => write!(f, "{} to {id} {verdict}", self.op),
            Target::Nothing => write!(f, "{} {verdict}", self.op),
        }
    }
}

/// The checks the fake's recorded answers (one launch's line) do not confirm: answered
/// otherwise, or never asked.
pub fn failed_checks(launch: &Value, checks: &[Check]) -> Vec<String> {
    let answers = launch["answers"].as_array().cloned().unwrap_or_default();
    checks
        .iter()
        .filter_map(|c| match answers.iter().find(|a| c.matches(a)) {
            None => Some(format!("{c}: the fake never asked")),
            Some(a) if (a["answer"] == "allow") != c.allowed => {
                Some(format!("{c}: the profile says {} ({a})", a["answer"]))
            }
            Some(_) => None,
        })
        .collect()
}

/// A `/bin/sh` script that tries each check from inside a session and prints
/// `probe <index> <exit status>` per check (0: the operation went through). Only
/// operations a shell can try without harm are probed: reading, `stat`, appending,
/// creating inside a folder, a hard link and an APFS clone (`cp -c`) into `scratch`,
/// renaming there and back, and connecting (`nc`). Unlink and clone of a folder are
/// left to the evaluator; `skip` marks them.
pub fn probe_script(checks: &[Check], scratch: &Path) -> String {
    let q = |p: &Path| format!("'{}'", p.to_string_lossy().replace('\'', r"'\''"));
    let mut script = String::new();
    for (i, c) in checks.iter().enumerate() {
        let line = match (&c.target, c.op) {
            (Target::Path(p), "file-read-data") => format!("cat -- {} >/dev/null 2>&1", q(p)),
            (Target::Path(p), "file-read-metadata") => {
                format!("stat -- {} >/dev/null 2>&1", q(p))
            }
            (Target::Path(p), "file-write-data") => format!(
                "if [ -d {0} ]; then : > {0}/probe-{i}; else : >> {0}; fi 2>/dev/null",
                q(p)
            ),
            (Target::Path(p), "file-write-create") => {
                format!(": > {}/probe-new-{i} 2>/dev/null", q(p))
            }
            (Target::Path(p), "file-link") => format!(
                "ln -- {} {} 2>/dev/null",
                q(p),
                q(&scratch.join(format!("link-{i}")))
            ),
            (Target::Path(p), "file-clone") => format!(
                "[ -f {0} ] && cp -c -- {0} {1} 2>/dev/null",
                q(p),
                q(&scratch.join(format!("clone-{i}")))
            ),
            (Target::Path(p), "rename") => {
                let moved = PathBuf::from(format!("{}.probe-{i}", p.display()));
                format!(
                    "mv -- {0} {1} 2>/dev/null && mv -- {1} {0}",
                    q(p),
                    q(&moved)
                )
            }
            (Target::Socket(p), _) => format!("nc -U {} </dev/null >/dev/null 2>&1", q(p)),
            (Target::Port(port), _) => format!("nc -z 127.0.0.1 {port} >/dev/null 2>&1"),
            _ => {
                script.push_str(&format!("echo probe {i} skip\n"));
                continue;
            }
        };
        script.push_str(&format!("{line}\necho probe {i} $?\n"));
    }
    script
}

/// The checks a probe run contradicts, from its output (see [`probe_script`]).
pub fn failed_probes(output: &str, checks: &[Check]) -> Vec<String> {
    checks
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let prefix = format!("probe {i} ");
            let result = output
                .lines()
                .find_map(|l| l.strip_prefix(&prefix).map(str::trim));
            match result {
                None => Some(format!("{c}: no probe result")),
                Some("skip") => None,
                Some(rc) if (rc == "0") != c.allowed => Some(format!("{c}: the probe exited {rc}")),
                Some(_) => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_match_answers_by_op_and_target() {
        let launch = json!({"answers": [
            {"op": "file-read-data", "path": "/t", "answer": "deny", "ok": true},
            {"op": "file-link", "path": "/t", "answer": "allow", "ok": false},
            {"op": "network-outbound", "port": 4100, "answer": "deny", "ok": true},
        ]});
        let checks = [
            Check::denied("file-read-data", Target::Path("/t".into())),
            Check::denied("file-link", Target::Path("/t".into())),
            Check::denied("file-clone", Target::Path("/t".into())),
            Check::denied("network-outbound", Target::Port(4100)),
        ];
        let failed = failed_checks(&launch, &checks);
        assert_eq!(failed.len(), 2, "{failed:?}");
        assert!(failed[0].starts_with("file-link /t denied: the profile says"));
        assert!(failed[1].contains("never asked"));
    }

    #[test]
    fn probe_output_is_read_per_check() {
        let checks = [
            Check::denied("file-read-data", Target::Path("/a'b".into())),
            Check::allowed("file-read-data", Target::Path("/c".into())),
            Check::denied("file-write-unlink", Target::Path("/d".into())),
        ];
        let script = probe_script(&checks, Path::new("/s"));
        assert!(script.contains(r"cat -- '/a'\''b'"), "{script}");
        assert!(script.contains("echo probe 2 skip"), "{script}");
        assert_eq!(
            failed_probes("probe 0 1\nprobe 1 0\nprobe 2 skip\n", &checks),
            Vec::<String>::new()
        );
        let failed = failed_probes("probe 0 0\nprobe 2 skip\n", &checks);
        assert_eq!(failed.len(), 2, "{failed:?}");
    }
}
