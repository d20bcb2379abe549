//! Why a sandbox says no, in words: for a path, which of a sandbox's places decides it
//! (denied, pinned read-only, writable, read, or not there at all) with why relay put it
//! there and what to change; for a host, the egress list's verdict. It reads one
//! [`Explanation`], the launch's own (docs/cli.md#relay-sandbox-why). Data only.

use std::path::Path;

use serde::Serialize;

use super::egress_rules::{Rules, Verdict};
use super::explain::{Explanation, Place};

/// The answer for one path or host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Answer {
    /// What was asked.
    pub asked: String,
    /// `denied`, `read-only`, `writable`, `readable`, `its-own` (the sandbox's own
    /// `/tmp`, `/dev`, `/proc`), `not-granted`; for a host, `allowed` or `refused`.
    pub access: &'static str,
    /// The place that decides it (a path), when one does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub place: Option<String>,
    /// Why relay put it there, or the egress list's words.
    pub why: String,
    /// What to change for another answer.
    pub change: String,
}

/// Each list of an explanation with what it means, in the order that wins a tie: a
/// deny holds over every grant, a pin over the write grant it lies in. The system's
/// places say theirs in `how` ([`system_access`]).
fn lists(e: &Explanation) -> [(&'static str, &[Place]); 6] {
    [
        ("denied", &e.denied),
        ("writable", &e.state),
        ("read-only", &e.read_only),
        ("writable", &e.write),
        ("readable", &e.read),
        ("system", &e.system),
    ]
}

/// A system place is read as it is on the host, or is the sandbox's own (`/tmp`, `/dev`,
/// `/proc`): the host's is not seen there.
fn system_access(p: &Place) -> &'static str {
    match p.how.starts_with("read-only") {
        true => "readable",
        false => "its-own",
    }
}

/// What the sandbox does with `path` (absolute, as the kernel sees it): the deepest
/// place that holds it decides.
pub fn path(e: &Explanation, path: &Path) -> Answer {
    let mut best: Option<(usize, &'static str, &Place)> = None;
    for (access, places) in lists(e) {
        for p in places {
            let at = Path::new(&p.path);
            if !path.starts_with(at) {
                continue;
            }
            let depth = at.components().count();
            if best.is_none_or(|(d, _, _)| depth > d) {
                best = Some((depth, access, p));
            }
        }
    }
    let asked = path.to_string_lossy().into_owned();
    let Some((_, access, place)) = best else {
        return Answer {
            asked,
            access: "not-granted",
            place: None,
            why: "no grant of this sandbox holds it: the sandbox sees nothing there".into(),
            change: "add it, or a folder above it, to the template's \"read\" (or \
                     \"read_write\") in settings.json"
                .into(),
        };
    };
    let (access, why) = match access {
        "system" => (system_access(place), place.how.clone()),
        _ => (access, place.why.clone()),
    };
    let change = match access {
        "denied" => "nothing reopens it: relay denies it after every grant".to_string(),
        "read-only" => "if the sandbox must write it, name it in the template's \
                        \"writable_exceptions\" (a path of the execution-bearing list), or \
                        run that step outside the sandbox"
            .to_string(),
        "readable" => "add it to the template's \"read_write\" to write it".to_string(),
        "its-own" => "the host's is not seen there: grant the path itself in the template's \
                      \"read\" or \"read_write\""
            .to_string(),
        _ => "nothing: it can be read and written".to_string(),
    };
    Answer {
        asked,
        access,
        place: Some(place.path.clone()),
        why,
        change,
    }
}

/// What the sandbox's network does with `host:port`.
pub fn host(e: &Explanation, host: &str, port: u16) -> Answer {
    let asked = format!("{host}:{port}");
    let net = &e.network;
    let refused = |why: String, change: &str| Answer {
        asked: asked.clone(),
        access: "refused",
        place: None,
        why,
        change: change.into(),
    };
    match net.mode.as_str() {
        "shared" => {
            return Answer {
                asked: asked.clone(),
                access: "allowed",
                place: None,
                why: "this sandbox is on the host's network (\"network\": \"host\")".into(),
                change: "nothing".into(),
            }
        }
        "off" => {
            return refused(
                "this sandbox has no network at all".into(),
                "give the template \"network\": \"proxied\" and list the host in \"egress\"",
            )
        }
        _ => {}
    }
    let rules = match Rules::parse(&net.egress) {
        Ok(r) => r,
        Err(e) => return refused(e, "fix the template's \"egress\" in settings.json"),
    };
    match rules.host(host, port) {
        Verdict::Allowed(rule) => Answer {
            asked,
            access: "allowed",
            place: None,
            why: rule,
            change: "nothing".into(),
        },
        Verdict::Refused(why) => refused(
            why,
            "add the host (host, host:port or *.domain) to the template's \"egress\" in \
             settings.json",
        ),
    }
}

/// `host[:port]`, the port 443 when none is given; `None` for what is no host.
pub fn parse_host(text: &str) -> Option<(String, u16)> {
    if text.contains('/') || text.is_empty() {
        return None;
    }
    match text.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && !h.ends_with(':') => {
            Some((h.to_string(), p.parse().ok()?))
        }
        _ => Some((text.to_string(), 443)),
    }
}

/// The answer in words: one line, then what to change.
pub fn to_text(a: &Answer) -> String {
    let at = match &a.place {
        Some(p) if p != &a.asked => format!(" (as {p} is)"),
        _ => String::new(),
    };
    format!(
        "{}: {}{at}: {}\nto change it: {}\n",
        a.asked, a.access, a.why, a.change
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::explain::NetworkView;

    fn place(path: &str, why: &str) -> Place {
        Place {
            path: path.into(),
            written: None,
            kind: "dir".into(),
            why: why.into(),
            how: String::new(),
        }
    }

    fn sandbox(mode: &str, egress: &[&str]) -> Explanation {
        let mut e = crate::sandbox::explain::unsandboxed(Path::new("/p"));
        e.system = vec![
            Place {
                how: "read-only".into(),
                ..place("/usr", "system")
            },
            Place {
                how: "an empty folder of its own".into(),
                ..place("/tmp", "system")
            },
        ];
        e.read = vec![place("/home/ada/.rustup", "rustup's toolchains")];
        e.write = vec![place("/home/ada/p", "the project")];
        e.read_only = vec![place("/home/ada/p/.git/hooks", "git, at commit")];
        e.denied = vec![place("/home/ada/.cargo/credentials.toml", "a credential")];
        e.network = NetworkView {
            mode: mode.into(),
            denied_ports: vec![],
            egress: egress.iter().map(|s| s.to_string()).collect(),
            how: String::new(),
            proxy: None,
        };
        e
    }

    #[test]
    fn the_deepest_place_decides_a_path_and_a_deny_wins_a_tie() {
        let e = sandbox("proxied", &[]);
        let ask = |p: &str| path(&e, Path::new(p));
        let hook = ask("/home/ada/p/.git/hooks/pre-commit");
        assert_eq!(hook.access, "read-only");
        assert_eq!(hook.place.as_deref(), Some("/home/ada/p/.git/hooks"));
        assert_eq!(hook.why, "git, at commit");
        assert!(hook.change.contains("writable_exceptions"), "{hook:?}");
        assert_eq!(ask("/home/ada/p/src/main.rs").access, "writable");
        assert_eq!(ask("/home/ada/.rustup/toolchains").access, "readable");
        assert_eq!(ask("/usr/bin/git").access, "readable");
        let tmp = ask("/tmp/x");
        assert_eq!(
            (tmp.access, tmp.why.as_str()),
            ("its-own", "an empty folder of its own")
        );
        assert_eq!(ask("/home/ada/.cargo/credentials.toml").access, "denied");
        let none = ask("/home/ada/.ssh/id_ed25519");
        assert_eq!((none.access, none.place), ("not-granted", None));
        // A sibling that starts with the same letters is not inside.
        assert_eq!(ask("/home/ada/project2").access, "not-granted");
        let mut tie = sandbox("proxied", &[]);
        tie.denied.push(place("/home/ada/p", "masked"));
        assert_eq!(path(&tie, Path::new("/home/ada/p/x")).access, "denied");
    }

    #[test]
    fn a_host_is_what_the_egress_list_says() {
        let e = sandbox("proxied", &["registry.npmjs.org", "*.pypi.org"]);
        assert_eq!(host(&e, "registry.npmjs.org", 443).access, "allowed");
        assert_eq!(host(&e, "files.pypi.org", 443).access, "allowed");
        let no = host(&e, "example.com", 443);
        assert_eq!(no.access, "refused");
        assert!(no.why.contains("egress list"), "{no:?}");
        assert!(no.change.contains("\"egress\""), "{no:?}");
        assert_eq!(
            host(&sandbox("shared", &[]), "example.com", 80).access,
            "allowed"
        );
        assert_eq!(
            host(&sandbox("off", &[]), "example.com", 80).access,
            "refused"
        );
    }

    #[test]
    fn a_host_is_told_from_a_path() {
        assert_eq!(parse_host("example.com"), Some(("example.com".into(), 443)));
        assert_eq!(
            parse_host("example.com:80"),
            Some(("example.com".into(), 80))
        );
        assert_eq!(parse_host("[::1]:8080"), Some(("[::1]".into(), 8080)));
        assert_eq!(parse_host("/etc/passwd"), None);
        assert_eq!(parse_host("example.com:x"), None);
        assert_eq!(parse_host(""), None);
    }

    #[test]
    fn the_text_names_the_place_when_it_is_above_the_path() {
        let e = sandbox("proxied", &[]);
        let text = to_text(&path(&e, Path::new("/home/ada/p/.git/hooks/x")));
        assert!(text.starts_with(
            "/home/ada/p/.git/hooks/x: read-only (as /home/ada/p/.git/hooks is): git, at commit\n"
        ));
        assert!(text.contains("to change it: "));
    }
}
