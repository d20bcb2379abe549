//! Reading `settings.json`: the file, then its JSON, then its shape (serde), then the
//! checks (`check.rs`). Every problem names the file, the line and column of the value at
//! fault and its key path, and says what was expected in words; unknown keys are
//! reported, not fatal, each with the known key it resembles.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::check::{invalid, validate, Invalid};
use super::Settings;
use crate::jsonpath::{self, KeyPath};

pub const SETTINGS_MAX_BYTES: u64 = 1024 * 1024;

/// A settings file that cannot be used: the file, the line and column of the value at
/// fault, its key path, and the problem (`…/settings.json:4:28:
/// projects[0].allowed_templates: expected a list of template ids, got "*"`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsError {
    pub path: PathBuf,
    /// Line and column, from 1; `None` when the file could not be read at all.
    pub at: Option<(usize, usize)>,
    /// Where in the document (`terminal_templates[2] ("build")`); empty for the whole file.
    pub key: String,
    pub problem: String,
}

impl std::fmt::Display for SettingsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some((line, col)) = self.at {
            write!(f, ":{line}:{col}")?;
        }
        if !self.key.is_empty() {
            write!(f, ": {}", self.key)?;
        }
        write!(f, ": {}", self.problem)
    }
}

pub struct Loaded {
    pub settings: Settings,
    /// Unknown keys; reported, not fatal.
    pub unknown_keys: Vec<UnknownKey>,
}

/// A key relay does not know, where it is and the known key it is closest to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownKey {
    /// Its path, `projects[0].allowed_template`.
    pub key: String,
    pub at: Option<(usize, usize)>,
    /// The known key of that object it most resembles (`allowed_templates`).
    pub closest: Option<&'static str>,
}

impl std::fmt::Display for UnknownKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.key)?;
        if let Some((line, col)) = self.at {
            write!(f, " at line {line} column {col}")?;
        }
        if let Some(c) = self.closest {
            write!(f, " (did you mean {c}?)")?;
        }
        Ok(())
    }
}

/// `unknown keys: a at line 1 column 2 (did you mean b?), c at …`, for `relay status`,
/// `relay serve`'s start and a refused launch.
pub fn describe_unknown(keys: &[UnknownKey]) -> String {
    let list: Vec<String> = keys.iter().map(ToString::to_string).collect();
    format!("unknown keys: {}", list.join(", "))
}

/// The known key closest to `k`: a small edit distance, as for a typo or a missing `s`.
fn closest(k: &str, known: &[&'static str]) -> Option<&'static str> {
    known
        .iter()
        .map(|c| (edit_distance(k, c), *c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 4))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

/// The keys of each object: what `unknown_keys` reports no other key against. The
/// schema's (`schema.rs`) are the same, a unit test says.
pub(super) const TOP_KEYS: &[&str] = &[
    "$schema",
    "claude_token_file",
    "projects",
    "terminal_templates",
    "session_sandbox",
    "api",
    "claude_path",
    "claude_token_on_change",
    "retain_ended",
    "detach_keys",
    "env_passthrough",
];
pub(super) const PROJECT_KEYS: &[&str] = &[
    "id",
    "name",
    "path",
    "allowed_templates",
    "allow_home_directory",
    "claude_token_file",
    "account",
];
pub(super) const TEMPLATE_KEYS: &[&str] = &[
    "id",
    "name",
    "command",
    "args",
    "env",
    "env_passthrough",
    "sandbox",
    "read",
    "read_write",
    "deny",
    "model",
    "permission_mode",
    "allow_home_directory",
    "writable_exceptions",
    "network",
    "egress",
    "listen_ports",
    "toolchains",
    "macos",
    "limits",
];
pub(super) const MACOS_KEYS: &[&str] = &["keychain", "clipboard", "automation", "mach"];
pub(super) const SANDBOX_KEYS: &[&str] = &[
    "denied_loopback_ports",
    "backend",
    "seatbelt_launcher",
    "bwrap_launcher",
    "network_off",
    "egress",
    "limits",
    "egress_over_budget",
];
pub(super) const LIMITS_KEYS: &[&str] = &["pids_max", "memory_max_mib", "cpu_weight"];
pub(super) const API_KEYS: &[&str] = &["listen"];

type Found = (KeyPath, &'static [&'static str]);

fn unknown_in(v: &Value, known: &'static [&'static str], at: KeyPath, out: &mut Vec<Found>) {
    if let Some(obj) = v.as_object() {
        for k in obj.keys() {
            if !known.contains(&k.as_str()) {
                out.push((at.clone().key(k), known));
            }
        }
    }
}

/// The keys of `v` no settings object has, each with where it is in `text`.
pub fn unknown_keys(v: &Value, text: &[u8]) -> Vec<UnknownKey> {
    let mut out = Vec::new();
    let top = KeyPath::default();
    unknown_in(v, TOP_KEYS, top.clone(), &mut out);
    for (list, known) in [
        ("projects", PROJECT_KEYS),
        ("terminal_templates", TEMPLATE_KEYS),
    ] {
        if let Some(items) = v.get(list).and_then(Value::as_array) {
            for (i, item) in items.iter().enumerate() {
                let at = top.clone().key(list).index(i);
                unknown_in(item, known, at.clone(), &mut out);
                if list == "terminal_templates" {
                    if let Some(macos) = item.get("macos") {
                        unknown_in(macos, MACOS_KEYS, at.clone().key("macos"), &mut out);
                    }
                    if let Some(limits) = item.get("limits") {
                        unknown_in(limits, LIMITS_KEYS, at.key("limits"), &mut out);
                    }
                }
            }
        }
    }
    for (key, known) in [("session_sandbox", SANDBOX_KEYS), ("api", API_KEYS)] {
        if let Some(obj) = v.get(key) {
            unknown_in(obj, known, top.clone().key(key), &mut out);
        }
    }
    if let Some(limits) = v.get("session_sandbox").and_then(|s| s.get("limits")) {
        let at = top.clone().key("session_sandbox").key("limits");
        unknown_in(limits, LIMITS_KEYS, at, &mut out);
    }
    out.into_iter()
        .map(|(path, known)| UnknownKey {
            key: path.to_string(),
            at: jsonpath::locate(text, &path),
            closest: path.last_key().and_then(|k| closest(k, known)),
        })
        .collect()
}

/// The error for `problem` at `at`: the line and column of it in `text`, and its path
/// as a person reads it, a project or template named by its id when the path ends at it.
fn located(path: &Path, text: &[u8], value: &Value, bad: Invalid) -> SettingsError {
    let mut key = bad.at.to_string();
    if let [jsonpath::Seg::Key(list), jsonpath::Seg::Index(i)] = bad.at.0.as_slice() {
        if let Some(id) = value
            .get(list)
            .and_then(|l| l.get(*i))
            .and_then(|item| item.get("id"))
            .and_then(Value::as_str)
        {
            key.push_str(&format!(" ({id:?})"));
        }
    }
    SettingsError {
        path: path.to_path_buf(),
        at: jsonpath::locate(text, &bad.at),
        key,
        problem: bad.problem,
    }
}

/// serde's message for a value of the wrong shape, as the person who wrote the file
/// reads it: `expected a list of template ids, got "*"`, `missing "command"`.
fn humane(at: &KeyPath, msg: &str) -> String {
    if let Some(field) = msg
        .strip_prefix("missing field `")
        .and_then(|r| r.strip_suffix('`'))
    {
        return format!("missing {field:?}");
    }
    if let Some(rest) = msg.strip_prefix("unknown variant `") {
        if let Some((got, expected)) = rest.split_once("`, expected ") {
            let expected = expected.replace("one of ", "").replace('`', "\"");
            return format!("expected {expected}, got {got:?}");
        }
    }
    let shape = msg
        .strip_prefix("invalid type: ")
        .or_else(|| msg.strip_prefix("invalid value: "));
    if let Some((got, expected)) = shape.and_then(|r| r.split_once(", expected ")) {
        let field = match at.0.last() {
            Some(jsonpath::Seg::Key(k)) => Some(k.as_str()),
            _ => None,
        };
        return format!("expected {}, got {}", wanted(field, expected), seen(got));
    }
    // relay's own checks (retain_ended, detach_keys) already say what was expected,
    // after the key the path names.
    let own = at
        .last_key()
        .and_then(|k| msg.strip_prefix(k))
        .map(str::trim_start);
    own.unwrap_or(msg).to_string()
}

/// What a key holds, in words.
fn wanted(field: Option<&str>, serde_says: &str) -> String {
    let by_key = match field {
        Some("allowed_templates") => "a list of template ids",
        Some("projects") => "a list of projects",
        Some("terminal_templates") => "a list of templates",
        Some("args") => "a list of strings",
        Some("read" | "read_write" | "deny") => "a list of paths",
        Some("env_passthrough") => "a list of variable names",
        Some("writable_exceptions") => "a list of paths or names",
        Some("automation") => "a list of bundle ids",
        Some("mach") => "a list of Mach service names",
        Some("denied_loopback_ports" | "listen_ports") => "a list of port numbers",
        Some("env") => "an object of names and string values",
        Some("claude_token_on_change") => "\"stop\" or \"keep\"",
        Some("backend") => "\"auto\", \"seatbelt\" or \"bwrap\"",
        Some("egress_over_budget") => "\"tell\" or \"stop\"",
        _ => "",
    };
    if !by_key.is_empty() {
        return by_key.to_string();
    }
    match serde_says {
        "a sequence" => "a list".into(),
        "a boolean" => "true or false".into(),
        "u16" => "a port number (0 to 65535)".into(),
        "a map" => "an object".into(),
        s if s.starts_with("struct ") => "an object".into(),
        s => s.to_string(),
    }
}

/// A value serde saw, as it was written.
fn seen(serde_says: &str) -> String {
    match serde_says {
        "sequence" => "a list".into(),
        "map" => "an object".into(),
        s => {
            for word in ["boolean ", "integer ", "floating point ", "string "] {
                if let Some(v) = s.strip_prefix(word) {
                    return v.trim_matches('`').to_string();
                }
            }
            s.to_string()
        }
    }
}

/// The line and column of the first `//` or `/* */` comment outside a string, and its
/// kind, for a file that is not JSON because of it.
fn first_comment(bytes: &[u8]) -> Option<((usize, usize), &'static str)> {
    let (mut line, mut col) = (1, 1);
    let (mut in_string, mut escaped) = (false, false);
    let mut chars = std::str::from_utf8(bytes).ok()?.chars().peekable();
    while let Some(c) = chars.next() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        } else if c == '/' {
            match chars.peek() {
                Some('/') => return Some(((line, col), "//")),
                Some('*') => return Some(((line, col), "/* */")),
                _ => {}
            }
        }
        if c == '\n' {
            (line, col) = (line + 1, 1);
        } else {
            col += 1;
        }
    }
    None
}

/// Reads and parses the file. A missing file is reported as such (the caller seeds it
/// on first run).
pub fn load(path: &Path) -> Result<Loaded, SettingsError> {
    let err = |problem: String| SettingsError {
        path: path.to_path_buf(),
        at: None,
        key: String::new(),
        problem,
    };
    let meta = std::fs::metadata(path).map_err(|e| err(format!("cannot read: {e}")))?;
    if meta.len() > SETTINGS_MAX_BYTES {
        return Err(err(format!("larger than {SETTINGS_MAX_BYTES} bytes")));
    }
    let bytes = std::fs::read(path).map_err(|e| err(format!("cannot read: {e}")))?;
    parse(path, &bytes)
}

pub fn parse(path: &Path, bytes: &[u8]) -> Result<Loaded, SettingsError> {
    let whole = |at: Option<(usize, usize)>, problem: String| SettingsError {
        path: path.to_path_buf(),
        at,
        key: String::new(),
        problem,
    };
    if bytes.starts_with(b"\xEF\xBB\xBF") {
        return Err(whole(
            Some((1, 1)),
            "starts with a byte-order mark (EF BB BF), which JSON does not allow: save the \
             file as UTF-8 without a BOM (your editor's encoding setting)"
                .into(),
        ));
    }
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        if let Some((at, kind)) = first_comment(bytes) {
            return whole(
                Some(at),
                format!(
                    "not valid JSON: a {kind} comment; JSON has no comments: delete it \
                     (what each key does is in docs/settings.md)"
                ),
            );
        }
        // serde_json's message ends with where; the place is said first instead.
        let text = e.to_string();
        let what = text.split(" at line ").next().unwrap_or(&text);
        // serde_json says column 0 at the end of an empty line (an empty file): the
        // first column is 1 here.
        whole(
            Some((e.line(), e.column().max(1))),
            format!("not valid JSON: {what}"),
        )
    })?;
    if !value.is_object() {
        return Err(whole(
            Some((1, 1)),
            "the top level must be a JSON object".into(),
        ));
    }
    let unknown = unknown_keys(&value, bytes);
    let settings: Settings = serde_path_to_error::deserialize(&value).map_err(|e| {
        let at = KeyPath(
            e.path()
                .iter()
                .filter_map(|s| match s {
                    serde_path_to_error::Segment::Seq { index } => {
                        Some(jsonpath::Seg::Index(*index))
                    }
                    serde_path_to_error::Segment::Map { key } => {
                        Some(jsonpath::Seg::Key(key.clone()))
                    }
                    _ => None,
                })
                .collect(),
        );
        let problem = humane(&at, &e.inner().to_string());
        located(path, bytes, &value, invalid(at, problem))
    })?;
    validate(&settings).map_err(|bad| located(path, bytes, &value, bad))?;
    Ok(Loaded {
        settings,
        unknown_keys: unknown,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_file_parses_without_unknown_keys() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("settings.example.json");
        let loaded = load(&path).expect("settings.example.json parses");
        assert!(loaded.unknown_keys.is_empty(), "{:?}", loaded.unknown_keys);
        assert_eq!(
            loaded.settings.claude_token_file,
            "~/.config/claude-ltt/token"
        );
    }

    #[test]
    fn malformed_and_unknown_keys() {
        let p = Path::new("/cfg/settings.json");
        let e = parse(p, b"{\"projects\": [").err().unwrap();
        assert!(
            e.to_string()
                .starts_with("/cfg/settings.json:1:14: not valid JSON: "),
            "{e}"
        );
        let e = parse(p, br#"{"projects":[{"id":"a","path":"rel"}]}"#)
            .err()
            .unwrap();
        assert!(e.problem.contains("must be absolute"), "{e}");
        let l = parse(
            p,
            br#"{"colour":"red","api":{"listen":"127.0.0.1:0","tls":1}}"#,
        )
        .unwrap();
        let keys: Vec<&str> = l.unknown_keys.iter().map(|u| u.key.as_str()).collect();
        assert_eq!(keys, ["colour", "api.tls"]);
        let e = parse(p, br#"{"api":{"listen":"0.0.0.0:80"}}"#)
            .err()
            .unwrap();
        assert!(e.problem.contains("loopback"), "{e}");
    }

    /// Every error names the file, the line and column, and the key path, and says what
    /// was expected in words (issue 26 item 5).
    #[test]
    fn every_error_names_the_file_the_line_the_column_and_the_key() {
        let table: &[(&str, &str)] = &[
            (
                "",
                "/cfg/settings.json:1:1: not valid JSON: EOF while parsing a value",
            ),
            (
                "{\n  \"projects\": [\n    {\"id\": \"h\", \"path\": \"~\", \"allowed_templates\": \"*\"}\n  ]\n}",
                r#"/cfg/settings.json:3:51: projects[0].allowed_templates: expected a list of template ids, got "*""#,
            ),
            (
                r#"{"terminal_templates": [{"id": "a", "command": "x"}, {"id": "b", "command": "x"},
 {"id": "build", "args": []}]}"#,
                r#"/cfg/settings.json:2:2: terminal_templates[2] ("build"): missing "command""#,
            ),
            (
                r#"{"projects": [{"id": "h", "path": "relative"}]}"#,
                r#"/cfg/settings.json:1:35: projects[0].path: "relative" must be absolute or start with ~/"#,
            ),
            (
                r#"{"projects": [{"id": "h", "path": "~"}, {"id": "h", "path": "/p"}]}"#,
                r#"/cfg/settings.json:1:48: projects[1].id: "h" is projects[0]'s id too"#,
            ),
            (
                r#"{"terminal_templates": [{"id": "t", "command": "x", "args": ["a", 3]}]}"#,
                "/cfg/settings.json:1:67: terminal_templates[0].args[1]: expected a string, got 3",
            ),
            (
                r#"{"terminal_templates": [{"id": "t", "command": "x", "sandbox": "no"}]}"#,
                r#"/cfg/settings.json:1:64: terminal_templates[0].sandbox: expected true or false, got "no""#,
            ),
            (
                r#"{"session_sandbox": {"denied_loopback_ports": [80, 70000]}}"#,
                "/cfg/settings.json:1:52: session_sandbox.denied_loopback_ports[1]: expected a port number (0 to 65535), got 70000",
            ),
            (
                r#"{"session_sandbox": {"egress_over_budget": "kill"}}"#,
                r#"/cfg/settings.json:1:44: session_sandbox.egress_over_budget: expected "tell" or "stop", got "kill""#,
            ),
            (
                r#"{"claude_token_on_change": "restart"}"#,
                r#"/cfg/settings.json:1:28: claude_token_on_change: expected "stop" or "keep", got "restart""#,
            ),
            (
                r#"{"retain_ended": "7w"}"#,
                r#"/cfg/settings.json:1:18: retain_ended: "7w": expected seconds, a duration such as "7d", "12h", "30m" or "90s", or "never""#,
            ),
            (
                r#"{"env_passthrough": ["OK", "A=B"]}"#,
                r#"/cfg/settings.json:1:28: env_passthrough[1]: "A=B" is not a variable name or a prefix ending in * (such as AWS_*)"#,
            ),
            (
                r#"{"session_sandbox": {"limits": {"cpu_weight": 20000}}}"#,
                "/cfg/settings.json:1:47: session_sandbox.limits.cpu_weight: 20000 is not a CPU weight (1 to 10000, or 0 for none)",
            ),
            (
                r#"{"terminal_templates": [{"id": "t", "command": "x", "limits": {"cpu_weight": 10001}}]}"#,
                "/cfg/settings.json:1:78: terminal_templates[0].limits.cpu_weight: 10001 is not a CPU weight (1 to 10000, or 0 for none)",
            ),
            (
                r#"{"api": {"listen": "0.0.0.0:80"}}"#,
                r#"/cfg/settings.json:1:20: api.listen: "0.0.0.0:80" must be a loopback address"#,
            ),
            (
                r#"{"projects": {"id": "h"}}"#,
                "/cfg/settings.json:1:14: projects: expected a list of projects, got an object",
            ),
            ("[1]", "/cfg/settings.json:1:1: the top level must be a JSON object"),
            (
                "{\n  \"projects\": [,]\n}",
                "/cfg/settings.json:2:16: not valid JSON: expected value",
            ),
        ];
        assert_each_refused_as_said(table);
    }

    /// Each file of `table` is refused with exactly its message.
    fn assert_each_refused_as_said(table: &[(&str, &str)]) {
        let p = Path::new("/cfg/settings.json");
        let wrong: Vec<String> = table
            .iter()
            .filter_map(|(file, want)| {
                let got = parse(p, file.as_bytes()).err().unwrap().to_string();
                (got != *want).then(|| format!("{file}\n  got  {got}\n  want {want}"))
            })
            .collect();
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    /// Issue 40's unclear messages: a blank command, a command with its arguments, an
    /// egress entry written as a URL, a relative read path, a byte-order mark, a
    /// comment. Each names the key (and the template) and what to write instead.
    #[test]
    fn each_unclear_settings_message_names_the_key_and_what_to_write_instead() {
        assert_each_refused_as_said(&[
            (
                r#"{"terminal_templates": [{"id": "t", "command": "   "}]}"#,
                r#"/cfg/settings.json:1:48: terminal_templates[0].command: "   " is blank: name the program the "t" template runs, such as "/bin/bash" or "claude""#,
            ),
            (
                r#"{"terminal_templates": [{"id": "t", "command": "sh -c 'make test'"}]}"#,
                r#"/cfg/settings.json:1:48: terminal_templates[0].command: "sh -c 'make test'" is a program and its arguments in one string: put the program in command and each argument in args, as in "command": "sh", "args": ["-c", "'make", "test'"]"#,
            ),
            (
                r#"{"terminal_templates": [{"id": "t", "command": "x", "egress": ["https://example.com/path"]}]}"#,
                r#"/cfg/settings.json:1:64: terminal_templates[0].egress[0]: egress entry "https://example.com/path": an entry is a host (with an optional :port), not a URL: leave out the scheme "https://" and the path "/path", as in "example.com""#,
            ),
            (
                r#"{"session_sandbox": {"egress": ["http://localhost:4000"]}}"#,
                r#"/cfg/settings.json:1:33: session_sandbox.egress[0]: egress entry "http://localhost:4000": an entry is a host (with an optional :port), not a URL: leave out the scheme "http://", as in "localhost:4000""#,
            ),
            (
                r#"{"terminal_templates": [{"id": "t", "command": "x", "read": ["~/.config", "src"]}]}"#,
                r#"/cfg/settings.json:1:75: terminal_templates[0].read[1]: "src" in the "t" template's read list must be absolute or start with ~/"#,
            ),
            (
                "\u{feff}{}",
                "/cfg/settings.json:1:1: starts with a byte-order mark (EF BB BF), which JSON does not allow: save the file as UTF-8 without a BOM (your editor's encoding setting)",
            ),
            (
                "{\n  // my projects\n  \"projects\": []\n}",
                "/cfg/settings.json:2:3: not valid JSON: a // comment; JSON has no comments: delete it (what each key does is in docs/settings.md)",
            ),
            (
                "{\"a\": \"http://x\" /* note */}",
                "/cfg/settings.json:1:18: not valid JSON: a /* */ comment; JSON has no comments: delete it (what each key does is in docs/settings.md)",
            ),
        ]);
    }

    #[test]
    fn an_unknown_key_names_where_it_is_and_the_key_it_resembles() {
        let p = Path::new("/cfg/settings.json");
        let file = "{\n  \"projects\": [{\"id\": \"h\", \"path\": \"~\",\n    \"allowed_template\": [\"*\"]}],\n  \"colour\": 1\n}";
        let l = parse(p, file.as_bytes()).unwrap();
        assert_eq!(
            describe_unknown(&l.unknown_keys),
            "unknown keys: colour at line 4 column 13, projects[0].allowed_template at line 3 \
             column 25 (did you mean allowed_templates?)"
        );
    }
}

/// Property tests (docs/testing.md#fuzzing): `cargo test -p relay --lib settings::load::fuzz`.
#[cfg(test)]
mod fuzz {
    use super::*;
    use crate::daemon::settings::to_pretty;
    use proptest::prelude::*;

    /// A key: one `settings.json` knows, or any other.
    fn key() -> impl Strategy<Value = String> {
        let known: Vec<&'static str> = TOP_KEYS
            .iter()
            .chain(PROJECT_KEYS)
            .chain(TEMPLATE_KEYS)
            .chain(SANDBOX_KEYS)
            .chain(API_KEYS)
            .copied()
            .collect();
        prop_oneof![
            3 => prop::sample::select(known).prop_map(String::from),
            1 => any::<String>(),
        ]
    }

    /// Any JSON value, its objects keyed mostly with real settings keys, so the
    /// generated files reach past the first type check.
    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            prop::sample::select(vec![
                "~",
                "~/p",
                "/abs",
                "",
                "*",
                "claude-code",
                "127.0.0.1:0",
                "bwrap",
                "auto"
            ])
            .prop_map(Value::from),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map(key(), inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Any bytes: settings or a problem that names the file, never a panic.
        #[test]
        fn any_bytes_are_read_or_refused_naming_the_file(
            bytes in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            if let Err(e) = parse(Path::new("/c/settings.json"), &bytes) {
                prop_assert!(e.to_string().starts_with("/c/settings.json:"));
            }
        }

        /// Any JSON: read or refused; what is read writes out as a file that reads back
        /// the same (the Settings page and the first-run seed write settings this way).
        #[test]
        fn any_json_is_read_or_refused_and_what_is_read_round_trips(v in json()) {
            let bytes = serde_json::to_vec(&v).unwrap();
            if let Ok(loaded) = parse(Path::new("/c/settings.json"), &bytes) {
                let text = to_pretty(&loaded.settings);
                let again = parse(Path::new("/c/settings.json"), text.as_bytes())
                    .expect("written settings read back");
                prop_assert_eq!(&again.settings, &loaded.settings);
                prop_assert!(again.unknown_keys.is_empty());
            }
        }
    }
}
