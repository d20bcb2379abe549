//! The shim's status events: one JSON line each on the status fd, read by the host.
//!
//! This is the only definition of the wire type; the host parses with [`Event::parse`].
//! A session reports, in order, `hello_ok` or `no_identity`, then `started`, then `exit`;
//! a failure ends the sequence early with `bad_secret`, `hello_refused` or
//! `spawn_failed`.

use crate::json::{self, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The identity secret on fd 3 was not exactly 64 lowercase hex characters.
    BadSecret,
    /// The daemon's bridge could not be reached or did not answer OK for this session.
    HelloRefused,
    /// The daemon accepted the Hello; `pid` is the shim's own pid (the session root).
    HelloOk { pid: u32 },
    /// Launched without `--identity`; `pid` is the shim's own pid.
    NoIdentity { pid: u32 },
    /// The target could not be started; `errno` says why.
    SpawnFailed { errno: i32 },
    /// The target runs; `pid` is the target's pid (also its process group).
    Started { pid: u32 },
    /// The target ended: an exit code, or the signal that killed it.
    Exit {
        status: Option<i32>,
        signal: Option<i32>,
    },
}

impl Event {
    /// One JSON line including the trailing '\n'.
    pub fn to_line(&self) -> String {
        fn opt(v: Option<i32>) -> String {
            v.map_or_else(|| "null".to_string(), |n| n.to_string())
        }
        let body = match *self {
            Event::BadSecret => r#"{"event":"bad_secret"}"#.to_string(),
            Event::HelloRefused => r#"{"event":"hello_refused"}"#.to_string(),
            Event::HelloOk { pid } => format!(r#"{{"event":"hello_ok","pid":{pid}}}"#),
            Event::NoIdentity { pid } => format!(r#"{{"event":"no_identity","pid":{pid}}}"#),
            Event::SpawnFailed { errno } => {
                format!(r#"{{"event":"spawn_failed","errno":{errno}}}"#)
            }
            Event::Started { pid } => format!(r#"{{"event":"started","pid":{pid}}}"#),
            Event::Exit { status, signal } => format!(
                r#"{{"event":"exit","status":{},"signal":{}}}"#,
                opt(status),
                opt(signal)
            ),
        };
        body + "\n"
    }

    /// Parses a line produced by to_line (tolerate trailing newline / whitespace; key order as produced). None for anything else.
    pub fn parse(line: &str) -> Option<Event> {
        let members = json::parse_flat_object(line)?;
        let (first, rest) = members.split_first()?;
        let name = match first {
            (key, Value::Str(name)) if key == "event" => name.as_str(),
            _ => return None,
        };
        // Exactly the keys `to_line` writes, in its order.
        let keys: Vec<&str> = rest.iter().map(|(k, _)| k.as_str()).collect();
        let int = |i: usize| match rest.get(i) {
            Some((_, Value::Int(n))) => Some(*n),
            _ => None,
        };
        let opt_i32 = |i: usize| match rest.get(i) {
            Some((_, Value::Null)) => Some(None),
            Some((_, Value::Int(n))) => i32::try_from(*n).ok().map(Some),
            _ => None,
        };
        let pid = || u32::try_from(int(0)?).ok();
        match (name, keys.as_slice()) {
            ("bad_secret", []) => Some(Event::BadSecret),
            ("hello_refused", []) => Some(Event::HelloRefused),
            ("hello_ok", ["pid"]) => Some(Event::HelloOk { pid: pid()? }),
            ("no_identity", ["pid"]) => Some(Event::NoIdentity { pid: pid()? }),
            ("started", ["pid"]) => Some(Event::Started { pid: pid()? }),
            ("spawn_failed", ["errno"]) => Some(Event::SpawnFailed {
                errno: i32::try_from(int(0)?).ok()?,
            }),
            ("exit", ["status", "signal"]) => Some(Event::Exit {
                status: opt_i32(0)?,
                signal: opt_i32(1)?,
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_encodings() {
        let cases = [
            (Event::BadSecret, r#"{"event":"bad_secret"}"#),
            (Event::HelloRefused, r#"{"event":"hello_refused"}"#),
            (
                Event::HelloOk { pid: 12 },
                r#"{"event":"hello_ok","pid":12}"#,
            ),
            (
                Event::NoIdentity { pid: 12 },
                r#"{"event":"no_identity","pid":12}"#,
            ),
            (
                Event::SpawnFailed { errno: 2 },
                r#"{"event":"spawn_failed","errno":2}"#,
            ),
            (
                Event::Started { pid: 99 },
                r#"{"event":"started","pid":99}"#,
            ),
            (
                Event::Exit {
                    status: Some(0),
                    signal: None,
                },
                r#"{"event":"exit","status":0,"signal":null}"#,
            ),
            (
                Event::Exit {
                    status: None,
                    signal: Some(15),
                },
                r#"{"event":"exit","status":null,"signal":15}"#,
            ),
        ];
        for (event, text) in cases {
            assert_eq!(event.to_line(), format!("{text}\n"));
            assert_eq!(Event::parse(text), Some(event), "{text}");
        }
    }

    #[test]
    fn round_trips_extremes() {
        let events = [
            Event::HelloOk { pid: u32::MAX },
            Event::NoIdentity { pid: 0 },
            Event::Started { pid: 1 },
            Event::SpawnFailed { errno: -1 },
            Event::SpawnFailed { errno: i32::MAX },
            Event::Exit {
                status: Some(255),
                signal: None,
            },
            Event::Exit {
                status: Some(-7),
                signal: Some(9),
            },
            Event::Exit {
                status: None,
                signal: None,
            },
        ];
        for event in events {
            let line = event.to_line();
            assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
            assert_eq!(Event::parse(&line), Some(event));
            assert_eq!(
                Event::parse(&format!("{}  \r\n", line.trim_end())),
                Some(event)
            );
        }
    }

    #[test]
    fn refuses_anything_else() {
        for text in [
            "",
            "\n",
            "garbage",
            r#"{"event":"unknown"}"#,
            r#"{"event":"bad_secret","pid":1}"#,
            r#"{"pid":12,"event":"hello_ok"}"#,
            r#"{"event":"hello_ok"}"#,
            r#"{"event":"hello_ok","pid":-1}"#,
            r#"{"event":"hello_ok","pid":4294967296}"#,
            r#"{"event":"hello_ok","pid":"12"}"#,
            r#"{"event":"started","pid":null}"#,
            r#"{"event":"spawn_failed","errno":2147483648}"#,
            r#"{"event":"exit","signal":null,"status":0}"#,
            r#"{"event":"exit","status":0}"#,
            r#"{"event":"exit","status":"0","signal":null}"#,
            r#"{"event":"exit","status":0,"signal":null,"x":1}"#,
            r#"{"event":"started","pid":99}{"event":"started","pid":99}"#,
            r#"{"event":"started","pid":99} x"#,
        ] {
            assert_eq!(Event::parse(text), None, "{text:?}");
        }
    }
}
