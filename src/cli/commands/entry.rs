//! What terminals and sessions print alike (both are `wire::Session` entries,
//! docs/routes.md#entry): the line for one entry, a list, `stop`, `purge` and `egress`,
//! and the caller's folder a `start` sends.

use serde_json::Value;

use crate::cli::client::Client;
use crate::cli::Out;
use crate::wire;

/// One entry on one line: id, state, project, template and folder, then what it has of
/// name, exit, end reason, token, account and staleness.
pub fn describe(e: &wire::Session) -> String {
    let mut s = format!(
        "{}  {}  project={}  template={}  {}",
        e.id,
        e.state.as_str(),
        e.project_id,
        e.template_id,
        e.directory.display()
    );
    if let Some(n) = &e.name {
        s.push_str(&format!("  name={n}"));
    }
    if let Some(code) = e.exit_status {
        s.push_str(&format!("  exit={code}"));
    }
    if let Some(r) = &e.exit_reason {
        s.push_str(&format!("  ended={r}"));
    }
    if let Some(fp) = &e.token_fingerprint {
        s.push_str(&format!("  token={fp}"));
    }
    if let Some(a) = &e.account {
        s.push_str(&format!("  account={a}"));
    }
    if e.stale {
        s.push_str("  stale");
    }
    s
}

/// A list: one line per entry, `(none)` for none.
fn list_text(items: &[wire::Session]) -> String {
    if items.is_empty() {
        return "(none)".into();
    }
    items.iter().map(describe).collect::<Vec<_>>().join("\n")
}

/// The entries of `GET /api/<what>` (`sessions`, `terminals`) that `keep` keeps, each as
/// its wire type and as it came.
fn entries(
    c: &Client,
    what: &str,
    keep: impl Fn(&wire::Session) -> bool,
) -> Result<Vec<(wire::Session, Value)>, String> {
    let route = format!("GET /api/{what}");
    let (v, _): (Value, _) = c.call_as("GET", &format!("/api/{what}"))?;
    let raw = v[what].as_array().cloned().unwrap_or_default();
    let mut kept = Vec::new();
    for e in raw {
        let typed: wire::Session = serde_json::from_value(e.clone())
            .map_err(|x| format!("relay's answer to {route}: {x}"))?;
        if keep(&typed) {
            kept.push((typed, e));
        }
    }
    Ok(kept)
}

/// `relay session|terminal list [--running] [--project ID]`: `what` is `sessions` or
/// `terminals`; `--json` is the answer with only the entries kept.
pub fn list(
    c: &Client,
    what: &str,
    (running, project, quiet): (bool, Option<&str>, bool),
) -> Result<Out, String> {
    let kept = entries(c, what, |e| {
        (!running || e.state == wire::EntryState::Running)
            && project.is_none_or(|p| e.project_id == p)
    })?;
    let (typed, raw): (Vec<_>, Vec<_>) = kept.into_iter().unzip();
    let text = match quiet {
        true => typed
            .iter()
            .map(|e| e.id.as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        false => list_text(&typed),
    };
    Ok(Out::new(serde_json::json!({ what: raw }), text))
}

/// `relay session|terminal prune [--project ID]`: every ended entry purged through its
/// purge route, one `purged <entry>` line each. One that cannot be purged is named in
/// the failure, with the code of the last refusal, after the others went.
pub fn prune(c: &Client, what: &str, project: Option<&str>) -> Result<Out, String> {
    let ended = entries(c, what, |e| {
        matches!(
            e.state,
            wire::EntryState::Exited | wire::EntryState::Dormant
        ) && project.is_none_or(|p| e.project_id == p)
    })?;
    let (mut json, mut text, mut failed) = (Vec::new(), Vec::new(), Vec::new());
    for (e, _) in ended {
        match purge(c, what, &e.id) {
            Ok(out) => {
                json.push(out.json);
                text.push(out.text);
            }
            Err(why) => failed.push(format!("{}: {why}", e.id)),
        }
    }
    if !failed.is_empty() {
        let went = json
            .iter()
            .filter_map(|v| v["id"].as_str())
            .collect::<Vec<_>>();
        return Err(format!(
            "purged {} ({}); could not purge {}",
            went.len(),
            went.join(", "),
            failed.join("; ")
        ));
    }
    if text.is_empty() {
        text.push(format!("no ended {what} to purge"));
    }
    Ok(Out::new(
        serde_json::json!({ "purged": json }),
        text.join("\n"),
    ))
}

/// The id a command line named (`relay terminal stop t-3f9a`): a whole id (`t-` or `s-`
/// and 12 hex digits) as it is, the daemon answering for it; anything shorter a prefix
/// of one id `GET /api/<what>` lists, so the daemon's API stays exact.
pub fn resolve(c: &Client, what: &str, given: &str) -> Result<String, String> {
    if whole_id(given) {
        return Ok(given.to_string());
    }
    let (v, _): (Value, _) = c.call_as("GET", &format!("/api/{what}"))?;
    let ids: Vec<String> = v[what]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["id"].as_str().map(String::from))
        .collect();
    pick(what.trim_end_matches('s'), given, &ids)
}

/// Whether `s` has the form of a whole id: `t-` or `s-`, then 12 hex digits.
fn whole_id(s: &str) -> bool {
    let hex = s.strip_prefix("t-").or_else(|| s.strip_prefix("s-"));
    hex.is_some_and(|h| h.len() == 12 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The one id of `ids` that `given` starts (with or without its `t-`/`s-`), or why
/// none is: no match is `not_found`, several are `ambiguous_id`, each naming the ids.
fn pick(kind: &str, given: &str, ids: &[String]) -> Result<String, String> {
    if let Some(exact) = ids.iter().find(|id| *id == given) {
        return Ok(exact.clone());
    }
    let hits: Vec<&String> = ids
        .iter()
        .filter(|id| id.starts_with(given) || id.get(2..).is_some_and(|h| h.starts_with(given)))
        .collect();
    match hits.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(format!(
            "no {kind} has an id starting with {given} (relay {kind} list shows them) (not_found)"
        )),
        many => Err(format!(
            "{given} starts the ids of {} {kind}s: {}; type more of the id (ambiguous_id)",
            many.len(),
            many.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// An answer that is one entry, printed as `<verb> <entry>`.
pub fn one(verb: &str, r: Result<(wire::Session, Value), String>) -> Result<Out, String> {
    r.map(|(e, json)| Out::new(json, format!("{verb} {}", describe(&e))))
}

/// `relay session|terminal stop`.
pub fn stop(c: &Client, what: &str, id: &str) -> Result<Out, String> {
    one("stopped", c.call_as("DELETE", &format!("/api/{what}/{id}")))
}

/// `relay session|terminal purge`.
pub fn purge(c: &Client, what: &str, id: &str) -> Result<Out, String> {
    c.call_as("POST", &format!("/api/{what}/{id}/purge"))
        .map(|(p, v): (wire::Purged, _)| Out::new(v, format!("purged {}", describe(&p.entry))))
}

/// `relay session|terminal egress`.
pub fn egress(c: &Client, what: &str, id: &str) -> Result<Out, String> {
    c.call_as("GET", &format!("/api/{what}/{id}/egress"))
        .map(|(a, v): (wire::AuditRows, _)| Out::new(v, egress_text(&a)))
}

/// One line per connection: `allowed`/`refused`, where, bytes and time, and the rule.
fn egress_text(a: &wire::AuditRows) -> String {
    let lines: Vec<String> = a
        .rows
        .iter()
        .filter_map(|r| {
            let g = r.egress.as_ref()?;
            let verdict = if g.allowed { "allowed" } else { "refused" };
            Some(format!(
                "{verdict}{}  {}  {} B out, {} B in, {} ms  {}",
                times(g),
                g.target(),
                g.sent,
                g.received,
                g.ms,
                g.rule
            ))
        })
        .collect();
    if lines.is_empty() {
        return "no connections".to_string();
    }
    lines.join("\n")
}

/// ` ×N` for a folded row, which stands for N connections (over the session's budget).
pub fn times(g: &wire::Egress) -> String {
    match g.folded {
        0 => String::new(),
        n => format!(" ×{n}"),
    }
}

/// The caller's folder for a start without `--directory`, as the API's `cwd`. A name
/// that is not UTF-8 cannot travel in JSON: refused, never sent mangled (the daemon
/// would not find it and start in the project's folder instead).
pub fn here(directory: Option<&str>) -> Result<Option<String>, String> {
    let Ok(cwd) = std::env::current_dir() else {
        return Ok(None);
    };
    match cwd.to_str() {
        Some(s) => Ok(Some(s.to_string())),
        None if directory.is_some_and(|d| !d.is_empty()) => Ok(None),
        None => Err(crate::cli::folder_not_utf8(
            &cwd,
            "pass --directory with a folder whose name is UTF-8",
        )),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A session entry as the daemon answers it, with `more` fields over the required.
    pub(crate) fn entry(more: Value) -> Value {
        let mut v = json!({
            "id": "s-0123456789ab", "kind": "claude", "template_id": "claude-code",
            "project_id": "p", "directory": "/home/ada/p", "state": "running",
            "created_ms": 1, "sandboxed": true, "token_passed": true,
        });
        for (k, x) in more.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    }

    pub(crate) fn session(more: Value) -> wire::Session {
        serde_json::from_value(entry(more)).unwrap()
    }

    #[test]
    fn an_entry_is_one_line_with_what_it_has() {
        assert_eq!(
            describe(&session(json!({}))),
            "s-0123456789ab  running  project=p  template=claude-code  /home/ada/p"
        );
        let ended = session(json!({
            "state": "exited", "name": "n", "exit_status": 3, "exit_reason": "exited",
            "token_fingerprint": "sha256:ab12", "account": "work", "stale": true,
        }));
        assert_eq!(
            describe(&ended),
            "s-0123456789ab  exited  project=p  template=claude-code  /home/ada/p  name=n  exit=3  ended=exited  token=sha256:ab12  account=work  stale"
        );
    }

    #[test]
    fn a_list_is_a_line_per_entry_or_none() {
        assert_eq!(list_text(&[]), "(none)");
        let two = [
            session(json!({})),
            session(json!({"id": "s-2", "state": "dormant"})),
        ];
        assert_eq!(
            list_text(&two),
            "s-0123456789ab  running  project=p  template=claude-code  /home/ada/p\n\
             s-2  dormant  project=p  template=claude-code  /home/ada/p"
        );
        let out = one("stopped", Ok((two[1].clone(), json!({"id": "s-2"})))).unwrap();
        assert_eq!(
            out.text,
            "stopped s-2  dormant  project=p  template=claude-code  /home/ada/p"
        );
        assert_eq!(out.json, json!({"id": "s-2"}));
        assert_eq!(one("stopped", Err("no".into())).err().unwrap(), "no");
    }

    #[test]
    fn an_id_is_a_whole_one_or_a_unique_prefix_with_or_without_its_kind() {
        assert!(whole_id("t-0123456789ab") && whole_id("s-abcdefABCDEF"));
        assert!(!whole_id("t-0123") && !whole_id("x-0123456789ab") && !whole_id("t-0123456789ag"));
        let ids = ["t-3f9a00000001", "t-3f9b00000002", "t-1200000000ff"].map(String::from);
        assert_eq!(pick("terminal", "t-3f9a", &ids).unwrap(), "t-3f9a00000001");
        assert_eq!(pick("terminal", "12", &ids).unwrap(), "t-1200000000ff");
        assert_eq!(
            pick("terminal", "t-3f", &ids).unwrap_err(),
            "t-3f starts the ids of 2 terminals: t-3f9a00000001, t-3f9b00000002; type more \
             of the id (ambiguous_id)"
        );
        assert_eq!(
            pick("session", "s-9", &[]).unwrap_err(),
            "no session has an id starting with s-9 (relay session list shows them) (not_found)"
        );
        // An id that is whole and listed is itself, though it starts no other.
        assert_eq!(
            pick("terminal", "t-1200000000ff", &ids).unwrap(),
            "t-1200000000ff"
        );
    }

    /// An audit row of a connection, as `GET /api/…/egress` answers it.
    pub(crate) fn egress_row(egress: Value) -> Value {
        json!({"ts": 1_700_000_000_000u64, "action": "egress", "outcome": "allowed", "egress": egress})
    }

    #[test]
    fn egress_is_a_line_per_connection_folded_ones_counted() {
        let rows: wire::AuditRows = serde_json::from_value(json!({"rows": [
            egress_row(json!({"host": "api.anthropic.com", "port": 443, "allowed": true,
                "rule": "allow api.anthropic.com", "sent": 10, "received": 20, "ms": 5})),
            egress_row(json!({"host": "::1", "port": 22, "allowed": false,
                "rule": "deny loopback", "sent": 0, "received": 0, "ms": 0, "folded": 7})),
            {"ts": 1, "action": "session.start", "outcome": "allowed"},
        ]}))
        .unwrap();
        assert_eq!(
            egress_text(&rows),
            "allowed  api.anthropic.com:443  10 B out, 20 B in, 5 ms  allow api.anthropic.com\n\
             refused ×7  [::1]:22  0 B out, 0 B in, 0 ms  deny loopback"
        );
        assert_eq!(egress_text(&wire::AuditRows::default()), "no connections");
    }
}
