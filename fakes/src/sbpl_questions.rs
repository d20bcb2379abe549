//! The questions a launch's policy implies, asked of a profile through the evaluator
//! ([`crate::sbpl_eval`]), and the answers the fake `sandbox-exec` records.
//!
//! Where the questions come from. The profile itself cannot be the source: a renderer
//! that forgot a deny would then also forget to ask about it. So the facts come from
//! outside the profile:
//!
//! - the **policy file** named by `$FAKE_SANDBOX_EXEC_POLICY` (JSON), written by the e2e
//!   harness from what it set up: the paths relay must deny (the token file as the
//!   settings name it, the config dir), the paths relay must keep read-only (the pinned
//!   folders of what a token launch runs), relay's sockets, the denied loopback ports,
//!   and any grant every launch of that instance has;
//! - the **launch itself**: the working directory (the session directory, always
//!   granted read-write) and `$TMPDIR` (the session's temp dir, likewise).
//!
//! From those, per launch: every spelling of every denied path (as written and as the
//! kernel resolves it) and, for a folder, every entry in it and a new name, refuse read, stat, write,
//! create, unlink, clone and link; every ancestor of every spelling refuses unlink,
//! rename and clone; every spelling of every pinned path (and, for a folder, every entry
//! and a new name) refuses write, create, unlink, rename and link, and its ancestors unlink,
//! rename and clone; `/dev/fd/5` reads; every grant (and something inside a read-write
//! one) allows its access, and its ancestors allow `stat`; relay's sockets and ports are
//! refused; a setuid or setgid file does not execute while a plain one does.
//!
//! Policy file format (every key optional):
//!
//! ```json
//! {"deny": ["/home/ada/.config/acme-ltt/token", "/home/ada/.config/relay"],
//!  "pinned": ["/home/ada/.local/bin"],
//!  "grants": [{"path": "/home/ada/project", "access": "read_write"}],
//!  "sockets": ["/home/ada/.config/relay/relay.sock"],
//!  "ports": [4100]}
//! ```

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use crate::call_log::JsonLine;
use crate::sbpl_eval::{Profile, Target};

/// The environment variable that names the policy file.
pub const POLICY_ENV: &str = "FAKE_SANDBOX_EXEC_POLICY";
/// Answers log file name under `$TMPDIR`, beside the call log.
pub const ANSWERS_LOG: &str = "fake-sandbox-exec-answers.jsonl";
/// The entry name asked about inside a denied folder or a read-write grant.
pub const PROBE_NAME: &str = "fake-sandbox-exec-probe";

/// Every write a pinned path must refuse (reading it is the grants' business); renaming
/// is asked as `file-write-unlink` on the source.
pub const PINNED_FILE_OPS: &[&str] = &[
    "file-write-data",
    "file-write-create",
    "file-write-unlink",
    "rename",
    "file-link",
];

/// Every file operation a denied path must refuse.
pub const DENIED_FILE_OPS: &[&str] = &[
    "file-read-data",
    "file-read-metadata",
    "file-write-data",
    "file-write-create",
    "file-write-unlink",
    "file-clone",
    "file-link",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    ReadWrite,
}

/// What the harness says about a launch, plus what the launch says about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    pub deny: Vec<PathBuf>,
    pub pinned: Vec<PathBuf>,
    pub grants: Vec<(PathBuf, Access)>,
    pub sockets: Vec<PathBuf>,
    pub ports: Vec<u16>,
    /// `"network": "shared"`: the launch shares the host's network, so DNS's socket and
    /// TCP out must work. Absent or `"off"`: not asked.
    pub network_shared: bool,
    /// `"network": "proxied"`: the launch reaches relay's egress proxy alone, at the port
    /// its `HTTPS_PROXY` names (taken from the launch: [`Policy::proxy_port`]).
    pub network_proxied: bool,
    /// The port of the launch's `HTTPS_PROXY` (`http://127.0.0.1:PORT`), when proxied.
    pub proxy_port: Option<u16>,
    /// `"macos": {…}`: what the launch's template opted into.
    pub macos: MacOptIns,
    /// `"home"`: the person's home folder, where Docker's and the agents' sockets are
    /// asked about (else the launch's `HOME`).
    pub home: Option<PathBuf>,
}

/// A template's macOS opt-ins as the policy file names them:
/// `{"keychain": true, "clipboard": true, "automation": ["com.apple.Terminal"],
/// "mach": ["com.example.service"]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MacOptIns {
    pub keychain: bool,
    pub clipboard: bool,
    pub automation: Vec<String>,
    pub mach: Vec<String>,
}

impl MacOptIns {
    /// Whether an escape's Mach service is one these opt-ins open.
    pub fn opens_mach(&self, name: &str) -> bool {
        match name {
            "com.apple.SecurityServer" | "com.apple.securityd.xpc" | "com.apple.security.agent" => {
                self.keychain
            }
            "com.apple.pasteboard.1" => self.clipboard,
            "com.apple.coreservices.appleevents" => !self.automation.is_empty(),
            _ => false,
        }
    }

    /// Whether an escape's program is one these opt-ins let run.
    pub fn opens_program(&self, program: &str) -> bool {
        match program.rsplit('/').next() {
            Some("security") => self.keychain,
            Some("pbcopy" | "pbpaste") => self.clipboard,
            Some("osascript") => !self.automation.is_empty(),
            _ => false,
        }
    }

    fn from_json(v: Option<&Value>) -> Result<MacOptIns, String> {
        let Some(v) = v else {
            return Ok(MacOptIns::default());
        };
        let names = |key: &str| -> Result<Vec<String>, String> {
            v.get(key)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|n| {
                    n.as_str()
                        .map(String::from)
                        .ok_or(format!("macos.{key}: strings"))
                })
                .collect()
        };
        Ok(MacOptIns {
            keychain: v.get("keychain").and_then(Value::as_bool).unwrap_or(false),
            clipboard: v.get("clipboard").and_then(Value::as_bool).unwrap_or(false),
            automation: names("automation")?,
            mach: names("mach")?,
        })
    }
}

impl Policy {
    /// Reads the policy file format above.
    pub fn from_json(text: &str) -> Result<Policy, String> {
        let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let paths = |key: &str| -> Result<Vec<PathBuf>, String> {
            match v.get(key) {
                None => Ok(vec![]),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|i| {
                        i.as_str()
                            .map(PathBuf::from)
                            .ok_or(format!("{key}: every entry is a string"))
                    })
                    .collect(),
                Some(_) => Err(format!("{key}: an array")),
            }
        };
        let mut grants = Vec::new();
        for g in v
            .get("grants")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let path = g["path"].as_str().ok_or("grants: path is a string")?;
            let access = match g["access"].as_str() {
                Some("read") => Access::Read,
                Some("read_write") => Access::ReadWrite,
                _ => return Err("grants: access is read or read_write".into()),
            };
            grants.push((PathBuf::from(path), access));
        }
        let mut ports = Vec::new();
        for p in v
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let port = p
                .as_u64()
                .and_then(|n| u16::try_from(n).ok())
                .ok_or("ports: every entry is a port number")?;
            ports.push(port);
        }
        Ok(Policy {
            deny: paths("deny")?,
            pinned: paths("pinned")?,
            grants,
            sockets: paths("sockets")?,
            ports,
            network_shared: v.get("network").and_then(Value::as_str) == Some("shared"),
            network_proxied: match v.get("network").and_then(Value::as_str) {
                None | Some("off") | Some("shared") => false,
                Some("proxied") => true,
                Some(_) => return Err("network: shared, proxied or off".into()),
            },
            proxy_port: None,
            macos: MacOptIns::from_json(v.get("macos"))?,
            home: v.get("home").and_then(Value::as_str).map(PathBuf::from),
        })
    }
}

/// One question: may `op` be done on `target`, and what the policy needs the answer to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// Which promise this question checks: `deny`, `deny_ancestor`, `token_fd`, `grant`,
    /// `grant_ancestor`, `socket`, `port`, `setuid`.
    pub check: &'static str,
    /// The operation as recorded; `rename` is asked as `file-write-unlink` on the source.
    pub op: &'static str,
    pub target: Target,
    pub expect_allowed: bool,
}

impl Question {
    fn evaluated_op(&self) -> &'static str {
        match self.op {
            "rename" => "file-write-unlink",
            op => op,
        }
    }
}

/// Every question `policy` implies for a launch in `cwd` with temp dir `tmpdir`.
pub fn questions(policy: &Policy, cwd: &Path, tmpdir: Option<&Path>) -> Vec<Question> {
    let mut out = Vec::new();
    let mut ask = |check, op, target, expect_allowed| {
        let q = Question {
            check,
            op,
            target,
            expect_allowed,
        };
        if !out.contains(&q) {
            out.push(q);
        }
    };
    let path = |p: &Path| Target::path(bytes(p));

    let denied: Vec<PathBuf> = policy.deny.iter().flat_map(|d| spellings(d)).collect();
    // Denied paths refuse everything, pinned ones every write; the folders above either
    // refuse unlink, rename and clone. Inside a folder: a name that is not there yet, and
    // every entry that is.
    let closed: [(&Vec<PathBuf>, &[&str], &'static str, &'static str); 2] = [
        (&policy.deny, DENIED_FILE_OPS, "deny", "deny_ancestor"),
        (&policy.pinned, PINNED_FILE_OPS, "pin", "pin_ancestor"),
    ];
    for (paths, ops, check, ancestor_check) in closed {
        for d in paths {
            let mut inside = vec![std::ffi::OsString::from(PROBE_NAME)];
            if let Ok(entries) = std::fs::read_dir(d) {
                inside.extend(entries.flatten().map(|e| e.file_name()));
            }
            let is_dir = std::fs::metadata(d).is_ok_and(|m| m.is_dir());
            for spelling in spellings(d) {
                for op in ops {
                    ask(check, op, path(&spelling), false);
                    if is_dir {
                        for name in &inside {
                            ask(check, op, path(&spelling.join(name)), false);
                        }
                    }
                }
                for ancestor in proper_ancestors(&spelling) {
                    for op in ["file-write-unlink", "rename", "file-clone"] {
                        ask(ancestor_check, op, path(&ancestor), false);
                    }
                }
            }
        }
    }

    ask(
        "token_fd",
        "file-read-data",
        path(Path::new("/dev/fd/5")),
        true,
    );

    let mut grants = policy.grants.clone();
    grants.push((cwd.to_path_buf(), Access::ReadWrite));
    if let Some(tmp) = tmpdir {
        grants.push((tmp.to_path_buf(), Access::ReadWrite));
    }
    let under_deny = |p: &Path| denied.iter().any(|d| p.starts_with(d));
    for (g, access) in &grants {
        for spelling in spellings(g) {
            if under_deny(&spelling) {
                continue;
            }
            for op in ["file-read-data", "file-read-metadata"] {
                ask("grant", op, path(&spelling), true);
            }
            if *access == Access::ReadWrite && (policy.network_shared || policy.network_proxied) {
                let socket = bytes(&spelling.join("fake-sandbox-exec-probe.sock"));
                ask(
                    "grant",
                    "network-outbound",
                    Target::UnixSocket(socket),
                    true,
                );
            }
            if *access == Access::ReadWrite {
                let inside = spelling.join(PROBE_NAME);
                for op in [
                    "file-read-data",
                    "file-write-create",
                    "file-write-data",
                    "file-write-unlink",
                ] {
                    ask("grant", op, path(&inside), true);
                }
            }
            for ancestor in proper_ancestors(&spelling) {
                if !under_deny(&ancestor) {
                    ask(
                        "grant_ancestor",
                        "file-read-metadata",
                        path(&ancestor),
                        true,
                    );
                }
            }
        }
    }

    for socket in &policy.sockets {
        for spelling in spellings(socket) {
            ask(
                "socket",
                "network-outbound",
                Target::UnixSocket(bytes(&spelling)),
                false,
            );
        }
    }
    for port in &policy.ports {
        ask("port", "network-outbound", Target::Localhost(*port), false);
    }
    if policy.network_proxied {
        // Its own proxy's port, and nothing else: no other loopback port, no host out
        // there, no listening.
        let own = policy.proxy_port.unwrap_or(0);
        ask("proxy", "network-outbound", Target::Localhost(own), true);
        ask(
            "proxy",
            "network-outbound",
            Target::Localhost(own.wrapping_add(1).max(1)),
            false,
        );
        ask("proxy", "network-outbound", Target::Internet(443), false);
        ask("proxy", "network-bind", Target::Localhost(3000), false);
    }

    let probe = bytes(&cwd.join(PROBE_NAME));
    for (mode, allowed) in [(0o104755, false), (0o102755, false), (0o100755, true)] {
        let target = Target::Path {
            path: probe.clone(),
            mode: Some(mode),
        };
        ask("setuid", "process-exec", target, allowed);
    }
    out
}

/// One recorded answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub question: Question,
    pub allowed: bool,
    /// The 1-based profile line of the deciding rule.
    pub line: Option<usize>,
}

impl Answer {
    pub fn ok(&self) -> bool {
        self.allowed == self.question.expect_allowed
    }

    pub fn to_json(&self) -> JsonLine {
        let verdict = |a: bool| if a { "allow" } else { "deny" };
        let q = &self.question;
        let line = JsonLine::new().field("check", q.check).field("op", q.op);
        let line = match &q.target {
            Target::Path { path, mode: None } => line.field("path", lossy(path)),
            Target::Path {
                path,
                mode: Some(m),
            } => line
                .field("path", lossy(path))
                .field("mode", format!("{m:o}")),
            Target::UnixSocket(path) => line.field("socket", lossy(path)),
            Target::Localhost(port) => line.field("port", *port),
            Target::Internet(port) => line.field("internet_port", *port),
            Target::Mach(name) => line.field("mach", lossy(name)),
            Target::Process(r) => line.field("process", r.as_str()),
            Target::Sysctl(name) => line.field("sysctl", lossy(name)),
            Target::IoKit(class) => line.field("iokit", lossy(class)),
            Target::SocketDomain(d) => line.field("domain", lossy(d)),
            Target::PosixIpc(name) => line.field("ipc", lossy(name)),
            Target::AppleEvent(id) => line.field("appleevent", lossy(id)),
            Target::Nothing => line,
        };
        line.field("expect", verdict(q.expect_allowed))
            .field("answer", verdict(self.allowed))
            .field("rule_line", self.line)
            .field("ok", self.ok())
    }
}

/// Asks every question of `profile`.
pub fn answer(profile: &Profile, questions: Vec<Question>) -> Result<Vec<Answer>, String> {
    questions
        .into_iter()
        .map(|question| {
            let d = profile
                .decide(question.evaluated_op(), &question.target)
                .map_err(|e| e.to_string())?;
            Ok(Answer {
                question,
                allowed: d.allowed,
                line: d.line,
            })
        })
        .collect()
}

/// The spellings a process could present for `path`: as written (normalized), and with
/// every symlink of its existing part resolved, which is the one the kernel reports
/// (on macOS also in the letter case the volume stores). Canonical first.
pub fn spellings(path: &Path) -> Vec<PathBuf> {
    let written = normalize(path);
    let canonical = canonical(&written);
    let mut out = vec![canonical];
    if !out.contains(&written) {
        out.push(written);
    }
    out
}

fn canonical(path: &Path) -> PathBuf {
    let mut missing = Vec::new();
    let mut at = path.to_path_buf();
    loop {
        if let Ok(real) = std::fs::canonicalize(&at) {
            return missing.iter().rev().fold(real, |p, name| p.join(name));
        }
        match (at.file_name().map(|n| n.to_os_string()), at.parent()) {
            (Some(name), Some(parent)) => {
                missing.push(name);
                at = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// Proper ancestors, without `/`.
fn proper_ancestors(path: &Path) -> Vec<PathBuf> {
    path.ancestors()
        .skip(1)
        .filter(|a| a.parent().is_some())
        .map(Path::to_path_buf)
        .collect()
}

fn bytes(path: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str().as_bytes().to_vec()
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy::from_json(
            r#"{"deny": ["/home/ada/.config/acme-ltt/token", "/home/ada/.config/relay"],
                "pinned": ["/home/ada/.local/bin"],
                "grants": [{"path": "/home/ada/.config", "access": "read"}],
                "sockets": ["/home/ada/.config/relay/relay.sock"],
                "ports": [4100]}"#,
        )
        .unwrap()
    }

    #[test]
    fn policy_file_is_read_and_bad_ones_refused() {
        let p = policy();
        assert_eq!(p.deny.len(), 2);
        assert_eq!(
            p.grants,
            vec![(PathBuf::from("/home/ada/.config"), Access::Read)]
        );
        assert_eq!(p.ports, vec![4100]);
        assert_eq!(Policy::from_json("{}").unwrap(), Policy::default());
        for bad in [
            "[",
            r#"{"deny": "/x"}"#,
            r#"{"ports": [70000]}"#,
            r#"{"grants": [{"path": "/x", "access": "all"}]}"#,
        ] {
            assert!(Policy::from_json(bad).is_err(), "{bad}");
        }
    }

    /// A profile written by hand the way relay's renderer lays it out.
    const GOOD: &str = r#"(version 1)
(allow default)
(deny file-read* file-write*)
(allow file-read* file-write* (subpath "/dev"))
(allow file-read* (subpath "/home/ada/.config"))
(allow file-read* file-write* (subpath "/home/ada"))
(allow file-read* file-write* (subpath "/tmp/relay-s1"))
(deny file-write* (subpath "/home/ada/.config"))
(allow file-read-metadata (literal "/home") (literal "/tmp"))
(deny file-read* file-write* file-clone file-link (subpath "/home/ada/.config/acme-ltt/token") (subpath "/home/ada/.config/relay"))
(deny file-write* file-link (literal "/home/ada/.local/bin") (subpath "/home/ada/.local/bin"))
(deny file-write-unlink file-clone (literal "/home") (literal "/home/ada") (literal "/home/ada/.config") (literal "/home/ada/.config/acme-ltt") (literal "/home/ada/.local"))
(deny network-outbound (remote unix-socket (path-literal "/home/ada/.config/relay/relay.sock")))
(deny network-outbound (remote ip "localhost:4100"))
(deny process-exec* (file-mode #o4000) (file-mode #o2000))
"#;

    fn failures(profile: &str) -> Vec<String> {
        let p = Profile::parse(profile.as_bytes()).unwrap();
        let qs = questions(
            &policy(),
            Path::new("/home/ada/src"),
            Some(Path::new("/tmp/relay-s1")),
        );
        answer(&p, qs)
            .unwrap()
            .into_iter()
            .filter(|a| !a.ok())
            .map(|a| a.to_json().finish())
            .collect()
    }

    #[test]
    fn a_correct_profile_answers_every_question_as_the_policy_needs() {
        assert_eq!(failures(GOOD), Vec::<String>::new());
    }

    #[test]
    fn questions_cover_every_promise() {
        let qs = questions(&policy(), Path::new("/home/ada/src"), None);
        let has = |check: &str, op: &str, target: Target| {
            qs.iter()
                .any(|q| q.check == check && q.op == op && q.target == target)
        };
        for op in DENIED_FILE_OPS {
            assert!(has(
                "deny",
                op,
                Target::path("/home/ada/.config/acme-ltt/token")
            ));
        }
        for op in ["file-write-unlink", "rename", "file-clone"] {
            assert!(has("deny_ancestor", op, Target::path("/home/ada")));
            assert!(has("deny_ancestor", op, Target::path("/home")));
        }
        // (Names inside a pinned folder are asked when it exists: the e2e tests.)
        for op in PINNED_FILE_OPS {
            assert!(has("pin", op, Target::path("/home/ada/.local/bin")));
        }
        for op in ["file-write-unlink", "rename", "file-clone"] {
            assert!(has("pin_ancestor", op, Target::path("/home/ada/.local")));
        }
        assert!(has("token_fd", "file-read-data", Target::path("/dev/fd/5")));
        assert!(has(
            "grant",
            "file-write-create",
            Target::path("/home/ada/src/fake-sandbox-exec-probe")
        ));
        assert!(has(
            "socket",
            "network-outbound",
            Target::UnixSocket(b"/home/ada/.config/relay/relay.sock".to_vec())
        ));
        assert!(has("port", "network-outbound", Target::Localhost(4100)));
        assert_eq!(qs.iter().filter(|q| q.check == "setuid").count(), 3);
    }

    #[test]
    fn each_broken_guard_shows_up_as_a_failure() {
        let broken = |from: &str, to: &str| {
            assert!(GOOD.contains(from), "{from}");
            failures(&GOOD.replacen(from, to, 1))
        };
        // The token deny moved before the home grant.
        let deny = "(deny file-read* file-write* file-clone file-link (subpath \"/home/ada/.config/acme-ltt/token\") (subpath \"/home/ada/.config/relay\"))\n";
        let moved = GOOD.replacen(deny, "", 1).replacen(
            "(allow file-read* (subpath",
            &format!("{deny}(allow file-read* (subpath"),
            1,
        );
        let p = Profile::parse(moved.as_bytes()).unwrap();
        let f: Vec<_> = answer(&p, questions(&policy(), Path::new("/home/ada/src"), None))
            .unwrap()
            .into_iter()
            .filter(|a| !a.ok())
            .collect();
        assert!(f.iter().any(|a| a.question.check == "deny"
            && a.question.op == "file-read-data"
            && a.question.target == Target::path("/home/ada/.config/acme-ltt/token")));
        // file-clone dropped from the ancestor pins.
        let f = broken(
            "(deny file-write-unlink file-clone",
            "(deny file-write-unlink",
        );
        assert!(f
            .iter()
            .all(|l| l.contains("_ancestor\"") && l.contains("file-clone")));
        assert!(f.iter().any(|l| l.contains("\"deny_ancestor\"")), "{f:?}");
        assert!(f.iter().any(|l| l.contains("\"pin_ancestor\"")), "{f:?}");
        // The pin dropped, or its folder's parent left renamable.
        let f = broken(
            "(deny file-write* file-link (literal \"/home/ada/.local/bin\") (subpath \"/home/ada/.local/bin\"))\n",
            "",
        );
        assert!(f.iter().any(|l| l.contains("\"pin\"")), "{f:?}");
        assert!(f.iter().all(|l| l.contains("\"pin\"")), "{f:?}");
        let f = broken(" (literal \"/home/ada/.local\"))", ")");
        assert!(
            !f.is_empty() && f.iter().all(|l| l.contains("\"pin_ancestor\"")),
            "{f:?}"
        );
        // Clone and link dropped from the deny.
        let f = broken(
            "file-write* file-clone file-link (subpath",
            "file-write* (subpath",
        );
        assert!(f.iter().any(|l| l.contains("\"file-link\"")), "{f:?}");
        // The socket, the port, setuid.
        assert!(!broken(
            "(deny network-outbound (remote unix-socket",
            "(allow network-outbound (remote unix-socket"
        )
        .is_empty());
        assert!(!broken("localhost:4100", "localhost:4101").is_empty());
        assert!(!broken("(file-mode #o4000) ", "").is_empty());
        // A grant shadowed by a later deny.
        assert!(!broken(
            "(literal \"/tmp\")",
            "(literal \"/tmp\"))\n(deny file-write* (subpath \"/tmp/relay-s1\")"
        )
        .is_empty());
    }

    #[test]
    fn spellings_name_the_written_and_the_resolved_path() {
        let dir = std::env::temp_dir().join(format!("relay-fakes-spell-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("real")).unwrap();
        std::os::unix::fs::symlink(dir.join("real"), dir.join("link")).unwrap();
        let real = std::fs::canonicalize(dir.join("real")).unwrap();
        assert_eq!(
            spellings(&dir.join("link/not/yet")),
            vec![real.join("not/yet"), dir.join("link/not/yet")]
        );
        assert_eq!(spellings(&real.join("./x/../y")), vec![real.join("y")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
