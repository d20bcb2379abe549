//! The JSON Schema of `settings.json`, derived from the types serde reads it with
//! (`schemars`), so an editor checks the file as it is typed: the keys of each object
//! (an unknown one flagged, as relay reports it), their types, the values of each
//! choice, the required ones, the defaults and each key's doc comment.
//!
//! It is draft-07, the draft editors check best. The repository keeps a copy,
//! `docs/settings.schema.json`, which a unit test holds equal to what the types make;
//! `relay settings schema` prints it. What the shape cannot say (`check.rs`: ids,
//! paths, egress entries) relay still checks when it reads the file.

use schemars::generate::SchemaSettings;

use super::Settings;

/// The name the schema goes by beside `settings.json` (docs/settings.md#an-editor-checks-it).
pub const SCHEMA_FILE: &str = "settings.schema.json";

/// The schema, as JSON.
pub fn schema() -> serde_json::Value {
    let schema = SchemaSettings::draft07()
        .into_generator()
        .into_root_schema_for::<Settings>();
    let mut v = schema.to_value();
    unwrap_descriptions(&mut v);
    v
}

/// Each `description` as one line: a doc comment's line breaks are where its source was
/// wrapped, not where an editor's hover should break it.
fn unwrap_descriptions(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, item) in map.iter_mut() {
                match item {
                    serde_json::Value::String(text) if k == "description" => {
                        *text = text.replace('\n', " ");
                    }
                    _ => unwrap_descriptions(item),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(unwrap_descriptions),
        _ => {}
    }
}

/// The schema as the repository keeps it: pretty-printed, with a final newline.
pub fn schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&schema()).unwrap_or_else(|_| "{}".into());
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::Value;

    use super::*;
    use crate::daemon::settings::{parse, seed, to_pretty};

    /// `docs/settings.schema.json` is what the types make. After a change to them, write
    /// it anew with `RELAY_BLESS=1 cargo test --lib settings::schema` (or `relay settings
    /// schema > docs/settings.schema.json`) and commit it.
    #[test]
    fn the_committed_schema_is_the_one_the_types_make() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/settings.schema.json");
        let made = schema_text();
        if std::env::var_os("RELAY_BLESS").is_some() {
            std::fs::write(&path, &made).unwrap();
        }
        let kept = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            kept == made,
            "{} is not the schema the settings types make: write it anew with \
             `RELAY_BLESS=1 cargo test --lib settings::schema` and commit it",
            path.display()
        );
    }

    /// The repository's example, the first-run settings and the frozen fixture fit the
    /// schema; files relay refuses or reports do not.
    #[test]
    fn the_example_and_the_first_run_settings_fit_the_schema() {
        let s = schema();
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let example = std::fs::read_to_string(root.join("settings.example.json")).unwrap();
        let fixture = include_str!("../testdata/settings-no-token.json");
        let mut with_schema = seed();
        with_schema.schema = Some(format!("./{SCHEMA_FILE}"));
        for (name, text) in [
            ("settings.example.json", example),
            ("first-run", to_pretty(&seed())),
            ("first-run with $schema", to_pretty(&with_schema)),
            ("settings-no-token.json", fixture.to_string()),
        ] {
            let v: Value = serde_json::from_str(&text).unwrap();
            let mut problems = Vec::new();
            fits(&s, &s, &v, name, &mut problems);
            assert!(problems.is_empty(), "{problems:?}");
            // And relay reads it without an unknown key.
            let loaded = parse(Path::new("/c/settings.json"), text.as_bytes()).unwrap();
            assert!(loaded.unknown_keys.is_empty(), "{name}");
        }
        for bad in [
            r#"{"colour": 1}"#,
            r#"{"projects": [{"id": "h", "path": "~", "allowed_template": ["*"]}]}"#,
            r#"{"projects": [{"id": "h"}]}"#,
            r#"{"projects": [{"id": "h", "path": "~", "claude_token_file": null}]}"#,
            r#"{"terminal_templates": [{"id": "t", "command": "x", "sandbox": "no"}]}"#,
            r#"{"terminal_templates": [{"id": "t", "command": "x", "network": "wifi"}]}"#,
            r#"{"terminal_templates": [{"id": "t", "command": "x", "macos": {"camera": true}}]}"#,
            r#"{"terminal_templates": [{"id": "t", "command": "x", "listen_ports": [70000]}]}"#,
            r#"{"session_sandbox": {"limits": {"cpu_weight": 20000}}}"#,
            r#"{"session_sandbox": {"backend": "docker"}}"#,
            r#"{"session_sandbox": {"egress_over_budget": "kill"}}"#,
            r#"{"claude_token_on_change": "restart"}"#,
            r#"{"retain_ended": -5}"#,
            r#"{"api": {"listen": 4850}}"#,
        ] {
            let v: Value = serde_json::from_str(bad).unwrap();
            let mut problems = Vec::new();
            fits(&s, &s, &v, "", &mut problems);
            assert!(!problems.is_empty(), "the schema takes {bad}");
        }
    }

    /// The schema knows the keys relay knows: each object's properties are the keys
    /// `load.rs` reports no other key against, so a key added to a type but not there
    /// (or there but not on a type) is caught.
    #[test]
    fn the_schema_knows_the_keys_relay_knows() {
        let s = schema();
        let defs = &s["definitions"];
        let keys = |v: &Value| -> Vec<String> {
            let mut k: Vec<String> = v["properties"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
            k.sort();
            k
        };
        let sorted = |l: &[&str]| -> Vec<String> {
            let mut k: Vec<String> = l.iter().map(|k| k.to_string()).collect();
            k.sort();
            k
        };
        use crate::daemon::settings::load::*;
        assert_eq!(keys(&s), sorted(TOP_KEYS));
        assert_eq!(keys(&defs["Project"]), sorted(PROJECT_KEYS));
        assert_eq!(keys(&defs["Template"]), sorted(TEMPLATE_KEYS));
        assert_eq!(keys(&defs["MacOptIns"]), sorted(MACOS_KEYS));
        assert_eq!(keys(&defs["SessionSandbox"]), sorted(SANDBOX_KEYS));
        assert_eq!(keys(&defs["Limits"]), sorted(LIMITS_KEYS));
        assert_eq!(keys(&defs["Api"]), sorted(API_KEYS));
    }

    /// The part of JSON Schema draft-07 the derived schema uses: `$ref`, `type`,
    /// `properties`, `required`, `additionalProperties`, `items`, `enum`, `const`,
    /// `anyOf`, `oneOf`, `allOf`, `minimum`, `maximum`. (`pattern` and `format` are
    /// left to the editor: relay's own checks test those values.) Each value that
    /// does not fit is pushed to `out` with where it is.
    fn fits(root: &Value, schema: &Value, v: &Value, at: &str, out: &mut Vec<String>) {
        let Some(sch) = schema.as_object() else {
            return;
        };
        if let Some(r) = sch.get("$ref").and_then(Value::as_str) {
            let name = r.trim_start_matches("#/definitions/");
            return fits(root, &root["definitions"][name], v, at, out);
        }
        if let Some(why) = unfit_value(schema, v) {
            return out.push(format!("{at}: {v} {why}"));
        }
        for all in sch
            .get("allOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            fits(root, all, v, at, out);
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(alts) = sch.get(key).and_then(Value::as_array) {
                let fitting = alts
                    .iter()
                    .filter(|alt| {
                        let mut p = Vec::new();
                        fits(root, alt, v, at, &mut p);
                        p.is_empty()
                    })
                    .count();
                if fitting == 0 || (key == "oneOf" && fitting > 1) {
                    out.push(format!("{at}: {v} fits {fitting} of its {key}"));
                }
            }
        }
        if let Some(obj) = v.as_object() {
            fits_object(root, schema, obj, at, out);
        }
        if let (Some(items), Some(each)) = (v.as_array(), sch.get("items")) {
            for (i, item) in items.iter().enumerate() {
                fits(root, each, item, &format!("{at}[{i}]"), out);
            }
        }
    }

    /// What `type`, `enum`, `const`, `minimum` and `maximum` say against `v`.
    fn unfit_value(sch: &Value, v: &Value) -> Option<String> {
        if let Some(t) = sch.get("type") {
            let types: Vec<&str> = match t {
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                t => t.as_str().into_iter().collect(),
            };
            let is = |t: &&str| match *t {
                "object" => v.is_object(),
                "array" => v.is_array(),
                "string" => v.is_string(),
                "boolean" => v.is_boolean(),
                "integer" => v.is_i64() || v.is_u64(),
                "number" => v.is_number(),
                "null" => v.is_null(),
                _ => false,
            };
            if !types.iter().any(is) {
                return Some(format!("is not {types:?}"));
            }
        }
        if let Some(e) = sch.get("enum").and_then(Value::as_array) {
            if !e.contains(v) {
                return Some(format!("is not one of {e:?}"));
            }
        }
        if sch.get("const").is_some_and(|c| c != v) {
            return Some("is not the const".into());
        }
        let n = v.as_f64()?;
        if sch
            .get("minimum")
            .and_then(Value::as_f64)
            .is_some_and(|m| n < m)
        {
            return Some("is below the minimum".into());
        }
        if sch
            .get("maximum")
            .and_then(Value::as_f64)
            .is_some_and(|m| n > m)
        {
            return Some("is above the maximum".into());
        }
        None
    }

    /// `required`, `properties` and `additionalProperties` against an object.
    fn fits_object(
        root: &Value,
        sch: &Value,
        obj: &serde_json::Map<String, Value>,
        at: &str,
        out: &mut Vec<String>,
    ) {
        for req in sch
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if !obj.contains_key(req.as_str().unwrap_or_default()) {
                out.push(format!("{at}: missing {req}"));
            }
        }
        for (k, item) in obj {
            let here = format!("{at}.{k}");
            match (sch["properties"].get(k), sch.get("additionalProperties")) {
                (Some(p), _) => fits(root, p, item, &here, out),
                (None, Some(Value::Bool(false))) => out.push(format!("{at}: unknown key {k}")),
                (None, Some(extra)) => fits(root, extra, item, &here, out),
                (None, None) => {}
            }
        }
    }
}
