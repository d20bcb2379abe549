//! The identity Hello on the daemon's bridge socket and its answer: one JSON line each
//! way, defined once for the shim (which says it, `identity.rs`), the daemon's bridge
//! (which answers it, `src/daemon/bridge.rs`) and the test stand-ins
//! (docs/session-host.md). Both are flat objects ([`crate::json`]).

use crate::json::{self, Value};

/// `{"type":"Hello","kind":"project_session","name":SESSION,"token":SECRET}`.
#[derive(Clone, PartialEq, Eq)]
pub struct Hello {
    pub session_id: String,
    /// The single-use identity secret (never shown by `Debug`).
    pub secret: String,
}

impl std::fmt::Debug for Hello {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hello")
            .field("session_id", &self.session_id)
            .field("secret", &format_args!("({} bytes)", self.secret.len()))
            .finish()
    }
}

fn member<'a>(members: &'a [(String, Value)], key: &str) -> Option<&'a Value> {
    members.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

fn text<'a>(members: &'a [(String, Value)], key: &str) -> Option<&'a str> {
    match member(members, key) {
        Some(Value::Str(s)) => Some(s),
        _ => None,
    }
}

impl Hello {
    /// The line, newline included.
    pub fn to_line(&self) -> String {
        format!(
            "{{\"type\":\"Hello\",\"kind\":\"project_session\",\"name\":{},\"token\":{}}}\n",
            json::quote(&self.session_id),
            json::quote(&self.secret)
        )
    }

    /// A Hello line (surrounding whitespace allowed); the refusal is the reason the
    /// bridge answers with.
    pub fn parse(line: &str) -> Result<Hello, &'static str> {
        let members = json::parse_flat_object(line).ok_or("not JSON")?;
        if text(&members, "type") != Some("Hello")
            || text(&members, "kind") != Some("project_session")
        {
            return Err("not a Hello");
        }
        match (text(&members, "name"), text(&members, "token")) {
            (Some(name), Some(token)) => Ok(Hello {
                session_id: name.to_string(),
                secret: token.to_string(),
            }),
            _ => Err("missing name or token"),
        }
    }
}

/// The bridge's answer: `{"type":"OK","name":SESSION,"pid":PID}` or
/// `{"type":"Refused","reason":WHY}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    Ok { session_id: String, pid: u32 },
    Refused { reason: String },
}

impl Answer {
    /// The line, newline included.
    pub fn to_line(&self) -> String {
        match self {
            Answer::Ok { session_id, pid } => format!(
                "{{\"type\":\"OK\",\"name\":{},\"pid\":{pid}}}\n",
                json::quote(session_id)
            ),
            Answer::Refused { reason } => {
                format!(
                    "{{\"type\":\"Refused\",\"reason\":{}}}\n",
                    json::quote(reason)
                )
            }
        }
    }

    /// An answer line (newline excluded). Other members are ignored; the refusal says
    /// what was wrong, never what the line held.
    pub fn parse(line: &str) -> Result<Answer, &'static str> {
        let members = json::parse_flat_object(line).ok_or("answer is not a flat JSON object")?;
        match text(&members, "type") {
            Some("OK") => {}
            Some("Refused") => {
                return Ok(Answer::Refused {
                    reason: text(&members, "reason").unwrap_or_default().to_string(),
                })
            }
            _ => return Err("answer is not OK"),
        }
        let session_id = text(&members, "name")
            .ok_or("answer does not name this session")?
            .to_string();
        match member(&members, "pid") {
            Some(Value::Int(pid)) if *pid > 0 => u32::try_from(*pid)
                .map(|pid| Answer::Ok { session_id, pid })
                .map_err(|_| "answer pid is out of range"),
            _ => Err("answer pid is not a positive integer"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hello_reads_back_as_itself_and_debug_hides_the_secret() {
        let h = Hello {
            session_id: "s\"1\\\n".into(),
            secret: "ab".repeat(32),
        };
        assert_eq!(Hello::parse(&h.to_line()), Ok(h.clone()));
        assert!(!format!("{h:?}").contains(&h.secret));
        assert_eq!(Hello::parse("nope"), Err("not JSON"));
        assert_eq!(
            Hello::parse(r#"{"type":"Hello","kind":"other","name":"s","token":"t"}"#),
            Err("not a Hello")
        );
        assert_eq!(
            Hello::parse(r#"{"type":"Hello","kind":"project_session","name":"s"}"#),
            Err("missing name or token")
        );
    }

    #[test]
    fn answers_read_back_as_themselves() {
        for a in [
            Answer::Ok {
                session_id: "s".into(),
                pid: 42,
            },
            Answer::Refused {
                reason: "unknown session or secret".into(),
            },
        ] {
            assert_eq!(Answer::parse(a.to_line().trim_end()), Ok(a.clone()));
        }
        assert_eq!(
            Answer::parse(r#"{"type":"OK","name":"s","pid":0}"#),
            Err("answer pid is not a positive integer")
        );
    }
}
