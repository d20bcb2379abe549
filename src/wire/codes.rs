//! The daemon API's refusal codes: one [`Code`] per kind, its HTTP status and its audit
//! outcome in one table ([docs/routes.md](../../docs/routes.md#codes) lists the same
//! codes; a test below holds the two together). Wire vocabulary, used by the daemon, the
//! CLI and the e2e harness alike; the daemon's answer built from a code is
//! `daemon::error::ApiError`.

use serde::{Deserialize, Serialize};

/// An audit row's `outcome`; for a refusal, also its `session.launch` event's `status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    #[default]
    Allowed,
    /// An authorization refusal: the request was understood and is not allowed.
    Denied,
    /// Anything else: a problem with the setup, the host, or the request's content.
    Error,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::Error => "error",
        }
    }
}

/// Defines [`Code`] from one table: variant, wire spelling, HTTP status, audit outcome.
macro_rules! codes {
    ($($(#[$doc:meta])* $variant:ident => $name:literal, $status:literal, $outcome:ident;)*) => {
        /// A refusal code of the daemon's API (docs/routes.md#codes).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum Code {
            $($(#[$doc])* #[serde(rename = $name)] $variant,)*
        }

        impl Code {
            /// Every code, in the table's order.
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];

            /// The one mapping: wire spelling, HTTP status, audit outcome.
            const fn spec(self) -> (&'static str, u16, Outcome) {
                match self {
                    $(Code::$variant => ($name, $status, Outcome::$outcome),)*
                }
            }
        }
    };
}

codes! {
    InvalidRequest => "invalid_request", 400, Denied;
    PayloadTooLarge => "payload_too_large", 413, Error;
    RequestTimeout => "request_timeout", 408, Error;
    ProjectRequired => "project_required", 400, Denied;
    UnknownProject => "unknown_project", 404, Denied;
    InvalidDirectory => "invalid_directory", 400, Error;
    DirectoryOutsideProject => "directory_outside_project", 403, Denied;
    /// A sandboxed launch in the home folder itself, `/`, or a folder above the home
    /// folder, without `allow_home_directory`.
    HomeDirectory => "home_directory", 403, Denied;
    TemplateRequired => "template_required", 400, Denied;
    UnknownTemplate => "unknown_template", 404, Denied;
    TemplateNotAllowed => "template_not_allowed", 403, Denied;
    SandboxUnavailable => "sandbox_unavailable", 400, Error;
    SettingsInvalid => "settings_invalid", 500, Error;
    NoListener => "no_listener", 409, Error;
    InsideSession => "inside_session", 403, Denied;
    SessionExists => "session_exists", 409, Error;
    SpawnFailed => "spawn_failed", 500, Error;
    IdentityRefused => "identity_refused", 502, Error;
    HostUnavailable => "host_unavailable", 503, Error;
    AuditUnavailable => "audit_unavailable", 500, Error;
    Internal => "internal", 500, Error;
    SessionNotRunning => "session_not_running", 409, Error;
    SessionRunning => "session_running", 409, Denied;
    PurgeFailed => "purge_failed", 500, Error;
    NoToken => "no_token", 409, Error;
    SessionExited => "session_exited", 409, Error;
    /// A message to a session that is still answering the one before.
    TurnRunning => "turn_running", 409, Denied;
    /// An interrupt of a session that runs no turn.
    NoTurn => "no_turn", 409, Error;
    NotFound => "not_found", 404, Denied;
    MethodNotAllowed => "method_not_allowed", 405, Error;
    /// Any other refusal passed through from the host, with the host's status.
    HostError => "host_error", 502, Error;
}

impl Code {
    pub const fn as_str(self) -> &'static str {
        self.spec().0
    }
    /// The HTTP status (a `host_error` answer carries the host's own instead).
    pub fn status(self) -> u16 {
        self.spec().1
    }
    pub fn outcome(self) -> Outcome {
        self.spec().2
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::HostCode;

    /// The rows of the code table in docs/routes.md: (code, status column, outcome).
    fn doc_rows() -> Vec<(String, String, String)> {
        let doc = include_str!("../../docs/routes.md");
        let table = doc
            .split("### Codes")
            .nth(1)
            .expect("docs/routes.md has a Codes section");
        table
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2)
            .map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                let unquote = |s: &str| s.trim_matches('`').to_string();
                (unquote(cells[1]), cells[2].to_string(), unquote(cells[3]))
            })
            .collect()
    }

    #[test]
    fn codes_are_spelled_once_and_serialize_as_spelled() {
        for (i, a) in Code::ALL.iter().enumerate() {
            assert!(
                Code::ALL[i + 1..].iter().all(|b| b.as_str() != a.as_str()),
                "{a} twice"
            );
            assert_eq!(serde_json::to_value(a).unwrap(), a.as_str());
            let back: Code = serde_json::from_value(a.as_str().into()).unwrap();
            assert_eq!(back, *a);
        }
    }

    #[test]
    fn every_code_is_in_the_routes_table_with_its_status_and_outcome_and_no_other() {
        let rows = doc_rows();
        for code in Code::ALL {
            let Some((_, status, outcome)) = rows.iter().find(|r| r.0 == code.as_str()) else {
                panic!("{code} is missing from docs/routes.md#codes");
            };
            if *code == Code::HostError {
                assert!(status.starts_with("the host's status"), "{status}");
            } else {
                assert_eq!(status, &code.status().to_string(), "{code}");
            }
            assert_eq!(outcome, code.outcome().as_str(), "{code}");
        }
        for (name, _, _) in &rows {
            assert!(
                Code::ALL.iter().any(|c| c.as_str() == name),
                "docs/routes.md lists {name}, which no Code has"
            );
        }
        assert_eq!(rows.len(), Code::ALL.len(), "a code listed twice");
    }

    /// No code is spelled as a string outside the two enums (this file and
    /// `HostCode::spec`): a code written by hand elsewhere could drift from the table.
    #[test]
    fn no_code_is_spelled_outside_the_enums() {
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    out.push(p);
                }
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        // relay's own sources, the shim and the fakes, and the tests: a test names a code
        // through the enum too, so a renamed code is one edit and the suite follows it.
        for dir in [
            "src",
            "shim/src",
            "shim/tests",
            "fakes/src",
            "e2e/src",
            "e2e/tests",
        ] {
            walk(&root.join(dir), &mut files);
        }
        let spelled: Vec<String> = Code::ALL
            .iter()
            .map(|c| c.as_str())
            .chain(HostCode::ALL.iter().map(|c| c.as_str()))
            .map(|c| format!("\"{c}\""))
            .collect();
        let mut found = Vec::new();
        for f in files.iter().filter(|f| !f.ends_with("src/wire/codes.rs")) {
            let text = std::fs::read_to_string(f).unwrap();
            for (n, line) in text.lines().enumerate() {
                // The host's table, host event lines (`"event":"session_exited"`), and
                // the shim's own status events (its `spawn_failed` is an event name).
                let allowed = (f.ends_with("src/protocol.rs")
                    && line.trim_start().starts_with("HostCode::"))
                    || line.contains("\"event\":")
                    || line.contains("[\"event\"] ==")
                    || f.ends_with("shim/src/status.rs");
                if !allowed && spelled.iter().any(|c| line.contains(c.as_str())) {
                    found.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
                }
            }
        }
        assert!(
            found.is_empty(),
            "codes spelled by hand:\n{}",
            found.join("\n")
        );
    }
}
