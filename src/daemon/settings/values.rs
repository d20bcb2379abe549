//! The two settings spelled their own way: `detach_keys` (keys such as `ctrl-\\,ctrl-\\`)
//! and `retain_ended` (`"7d"`, seconds, `"never"`), each read with a message that names
//! the key and the value, and written back as it reads.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `detach_keys`: a comma-separated sequence of keys, each `ctrl-<c>` (a letter or one
/// of `@ [ \ ] ^ _`) or one printable ASCII character other than a comma; `"none"` turns
/// detaching off. At most 8 keys. The default is `ctrl-\,ctrl-\` (Ctrl-\ twice).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetachKeys(Vec<u8>);

impl DetachKeys {
    pub const MAX_KEYS: usize = 8;

    pub fn default_keys() -> DetachKeys {
        DetachKeys(vec![0x1c, 0x1c])
    }

    pub(super) fn is_default(&self) -> bool {
        *self == Self::default_keys()
    }

    /// The bytes a terminal sends for the sequence; empty when detaching is off.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// From the setting's or the flag's text; the error names the key and the value.
    pub fn parse(text: &str) -> Result<DetachKeys, String> {
        let bad = |why: &str| {
            format!(
                "detach_keys {text:?}: {why} (expected keys such as ctrl-a,d or ctrl-\\,ctrl-\\, or none)"
            )
        };
        if text == "none" {
            return Ok(DetachKeys(Vec::new()));
        }
        let mut out = Vec::new();
        for key in text.split(',') {
            let lower = key.to_ascii_lowercase();
            let byte = match lower.strip_prefix("ctrl-") {
                Some(c) if c.len() == 1 => match c.as_bytes()[0] {
                    b @ b'a'..=b'z' => b - b'a' + 1,
                    b'@' => 0,
                    b @ (b'[' | b'\\' | b']' | b'^' | b'_') => b - 0x40,
                    _ => return Err(bad(&format!("no control key ctrl-{c}"))),
                },
                _ if key.len() == 1 && (0x21..0x7f).contains(&key.as_bytes()[0]) => {
                    key.as_bytes()[0]
                }
                _ => return Err(bad(&format!("{key:?} is not a key"))),
            };
            out.push(byte);
        }
        if out.len() > Self::MAX_KEYS {
            return Err(bad(&format!("more than {} keys", Self::MAX_KEYS)));
        }
        Ok(DetachKeys(out))
    }

    /// As a person reads it: `Ctrl-\ Ctrl-\`, or `none`.
    pub fn describe(&self) -> String {
        if self.0.is_empty() {
            return "none".into();
        }
        self.0
            .iter()
            .map(|b| match b {
                0..=0x1f => format!("Ctrl-{}", (b + 0x40) as char),
                _ => (*b as char).to_string(),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// As the setting spells it (what `parse` reads back).
    fn spelled(&self) -> String {
        if self.0.is_empty() {
            return "none".into();
        }
        self.0
            .iter()
            .map(|b| match b {
                0..=0x1f => format!("ctrl-{}", (b + 0x40).to_ascii_lowercase() as char),
                _ => (*b as char).to_string(),
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl Default for DetachKeys {
    fn default() -> Self {
        Self::default_keys()
    }
}

impl Serialize for DetachKeys {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.spelled())
    }
}

impl<'de> Deserialize<'de> for DetachKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        match v.as_str() {
            Some(text) => DetachKeys::parse(text).map_err(serde::de::Error::custom),
            None => Err(serde::de::Error::custom(format!(
                "detach_keys {v}: expected a string such as ctrl-\\,ctrl-\\"
            ))),
        }
    }
}

impl schemars::JsonSchema for DetachKeys {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "DetachKeys".into()
    }

    /// A string of at most [`DetachKeys::MAX_KEYS`] keys, as [`DetachKeys::parse`] reads it.
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let key = r"([cC][tT][rR][lL]-[a-zA-Z@\[\\\]^_]|[!-+\--~])";
        let max = Self::MAX_KEYS - 1;
        schemars::json_schema!({
            "type": "string",
            "pattern": format!("^(none|{key}(,{key}){{0,{max}}})$"),
            "default": Self::default_keys().spelled(),
        })
    }
}

impl schemars::JsonSchema for Retention {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Retention".into()
    }

    /// Seconds, a duration string or `never`, as [`Retention::parse`] reads it.
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": "^(never|[0-9]+[smhd]?)$"},
            ],
            "default": Self::DEFAULT,
        })
    }
}

/// `retain_ended`: seconds as a number, a string `<n>s|m|h|d` (`"7d"`, `"12h"`), or
/// `"never"`. The default is 7 days.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retention {
    Never,
    Secs(u64),
}

impl Retention {
    pub const DEFAULT: Retention = Retention::Secs(7 * 86_400);

    pub(super) fn is_default(&self) -> bool {
        *self == Self::DEFAULT
    }

    /// From what the file says; the error names the key and the value.
    pub fn parse(v: &Value) -> Result<Retention, String> {
        let bad = || {
            format!(
                "retain_ended {v}: expected seconds, a duration such as \"7d\", \"12h\", \"30m\" \
                 or \"90s\", or \"never\""
            )
        };
        match v {
            Value::Number(n) => n.as_u64().map(Retention::Secs).ok_or_else(bad),
            Value::String(s) if s == "never" => Ok(Retention::Never),
            Value::String(s) => {
                let (digits, unit) = match s.char_indices().last() {
                    Some((i, c)) if c.is_ascii_alphabetic() => (&s[..i], c),
                    _ => (s.as_str(), 's'),
                };
                let scale = match unit {
                    's' => 1,
                    'm' => 60,
                    'h' => 3600,
                    'd' => 86_400,
                    _ => return Err(bad()),
                };
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                digits
                    .parse::<u64>()
                    .ok()
                    .and_then(|n| n.checked_mul(scale))
                    .map(Retention::Secs)
                    .ok_or_else(bad)
            }
            _ => Err(bad()),
        }
    }
}

impl Default for Retention {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl Serialize for Retention {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Retention::Never => s.serialize_str("never"),
            Retention::Secs(n) if *n > 0 && n % 86_400 == 0 => {
                s.serialize_str(&format!("{}d", n / 86_400))
            }
            Retention::Secs(n) => s.serialize_u64(*n),
        }
    }
}

impl<'de> Deserialize<'de> for Retention {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Retention::parse(&v).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::settings::{parse, seed, to_pretty, OnTokenChange};
    use std::path::Path;

    #[test]
    fn token_change_and_retention_values() {
        let p = Path::new("/cfg/settings.json");
        let l = parse(p, b"{}").unwrap();
        assert_eq!(l.settings.claude_token_on_change, OnTokenChange::Stop);
        assert_eq!(l.settings.retain_ended, Retention::Secs(7 * 86_400));
        let l = parse(
            p,
            br#"{"claude_token_on_change":"keep","retain_ended":"12h"}"#,
        )
        .unwrap();
        assert_eq!(l.settings.claude_token_on_change, OnTokenChange::Keep);
        assert_eq!(l.settings.retain_ended, Retention::Secs(12 * 3600));
        for (text, want) in [
            ("90", Retention::Secs(90)),
            ("\"90s\"", Retention::Secs(90)),
            ("\"30m\"", Retention::Secs(1800)),
            ("\"2d\"", Retention::Secs(2 * 86_400)),
            ("\"45\"", Retention::Secs(45)),
            ("0", Retention::Secs(0)),
            ("\"never\"", Retention::Never),
        ] {
            let body = format!(r#"{{"retain_ended":{text}}}"#);
            assert_eq!(
                parse(p, body.as_bytes()).unwrap().settings.retain_ended,
                want,
                "{text}"
            );
        }
        for bad in ["\"7w\"", "\"d\"", "\"-1d\"", "-5", "1.5", "true", "\"\""] {
            let body = format!(r#"{{"retain_ended":{bad}}}"#);
            let e = parse(p, body.as_bytes()).err().unwrap();
            assert_eq!(e.key, "retain_ended", "{bad}: {e}");
        }
        let e = parse(p, br#"{"claude_token_on_change":"restart"}"#)
            .err()
            .unwrap();
        assert_eq!(e.key, "claude_token_on_change", "{e}");
        // Written back: the default is left out, another value is spelled in days or seconds.
        let mut s = seed();
        assert!(!to_pretty(&s).contains("retain_ended"));
        s.retain_ended = Retention::Secs(3 * 86_400);
        assert!(to_pretty(&s).contains(r#""retain_ended": "3d""#));
    }

    #[test]
    fn detach_keys_values() {
        let p = Path::new("/cfg/settings.json");
        let l = parse(p, b"{}").unwrap();
        assert_eq!(l.settings.detach_keys.bytes(), b"\x1c\x1c");
        assert_eq!(l.settings.detach_keys.describe(), "Ctrl-\\ Ctrl-\\");
        for (text, want) in [
            ("ctrl-a,d", b"\x01d".to_vec()),
            ("CTRL-P,Ctrl-q", b"\x10\x11".to_vec()),
            (
                "ctrl-@,ctrl-[,ctrl-],ctrl-^,ctrl-_",
                b"\x00\x1b\x1d\x1e\x1f".to_vec(),
            ),
            ("none", Vec::new()),
            ("q", b"q".to_vec()),
        ] {
            let body = serde_json::to_vec(&serde_json::json!({ "detach_keys": text })).unwrap();
            let keys = parse(p, &body).unwrap().settings.detach_keys;
            assert_eq!(keys.bytes(), want.as_slice(), "{text}");
            // Written back, it reads the same.
            let again = serde_json::to_string(&keys).unwrap();
            assert_eq!(serde_json::from_str::<DetachKeys>(&again).unwrap(), keys);
        }
        for bad in [
            r#""""#,
            r#""ctrl-1""#,
            r#""ctrl-""#,
            r#""a,,b""#,
            r#""ab""#,
            r#""a,b,c,d,e,f,g,h,i""#,
            "3",
        ] {
            let body = format!(r#"{{"detach_keys":{bad}}}"#);
            let e = parse(p, body.as_bytes()).err().unwrap();
            assert_eq!(e.key, "detach_keys", "{bad}: {e}");
        }
        // The default is left out when written.
        assert!(!to_pretty(&seed()).contains("detach_keys"));
    }
}
