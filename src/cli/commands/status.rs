//! `relay status`: the daemon's version, pid, who started it, its paths, the settings
//! file's state and how many sessions run (docs/cli.md#verbs).

use std::path::Path;

use super::service::{collision, started_by};
use crate::cli::client::Client;
use crate::cli::Out;
use crate::wire;

pub fn status(c: &Client, config: &Path) -> Result<Out, String> {
    let (st, v): (wire::Status, _) = c.call_as("GET", "/api/status")?;
    let note = collision(config, st.pid, st.service.as_deref());
    Ok(Out::new(v, text(&st, note.as_deref())))
}

/// The text form; `collision` is the note on a relay started by hand beside the
/// installed login service.
fn text(st: &wire::Status, collision: Option<&str>) -> String {
    let token = match (&st.paths.claude_token_file, st.settings.ok) {
        (Some(p), _) => format!("Claude token file: {p}"),
        (None, true) => "Claude token file: not set".to_string(),
        // An invalid file says nothing of the token: "not set" would send the person
        // to set what is already there.
        (None, false) => "Claude token file: unknown until settings.json is fixed".to_string(),
    };
    let settings = match (st.settings.ok, &st.settings.note) {
        (true, None) => format!("settings: {}", st.paths.settings.display()),
        (true, Some(n)) => format!(
            "settings: {}\nsettings note: {n}",
            st.paths.settings.display()
        ),
        (false, n) => format!(
            "settings: INVALID, launches are refused until it is fixed\n  {}",
            n.clone()
                .unwrap_or_else(|| st.paths.settings.display().to_string())
        ),
    };
    let mut text = format!(
        "relay {} running (pid {}, {})\nconfig: {}\n{settings}\n{token}\nsessions running: {}",
        st.version,
        st.pid,
        started_by(st.service.as_deref()),
        st.paths.config.display(),
        st.sessions_running,
    );
    if let Some(c) = collision {
        text.push_str(&format!("\nnote: {c}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn status(settings: Value, token: Value, service: Value) -> wire::Status {
        serde_json::from_value(json!({
            "version": "1.2.3", "pid": 42, "api": null, "host": null,
            "paths": {"config": "/c", "settings": "/c/settings.json", "socket": "/c/relay.sock",
                "audit": "/c/audit.jsonl", "events": "/c/events.jsonl", "claude_token_file": token},
            "settings": settings, "sessions_running": 2, "service": service,
        }))
        .unwrap()
    }

    #[test]
    fn a_relay_started_by_hand_with_good_settings_names_its_token_file() {
        let st = status(json!({"ok": true}), json!("~/.config/t"), Value::Null);
        assert_eq!(
            text(&st, None),
            "relay 1.2.3 running (pid 42, started by hand)\nconfig: /c\n\
             settings: /c/settings.json\nClaude token file: ~/.config/t\nsessions running: 2"
        );
        assert_eq!(
            text(&st, Some("the login service …")),
            format!("{}\nnote: the login service …", text(&st, None))
        );
    }

    #[test]
    fn a_settings_note_or_an_invalid_file_says_so_and_the_token_is_not_called_unset() {
        let noted = status(
            json!({"ok": true, "note": "unknown key x"}),
            Value::Null,
            json!("relay.service"),
        );
        assert_eq!(
            text(&noted, None),
            "relay 1.2.3 running (pid 42, started by its login service relay.service)\n\
             config: /c\nsettings: /c/settings.json\nsettings note: unknown key x\n\
             Claude token file: not set\nsessions running: 2"
        );
        let bad = status(
            json!({"ok": false, "note": "x:1:2: bad"}),
            Value::Null,
            Value::Null,
        );
        assert!(text(&bad, None).contains(
            "settings: INVALID, launches are refused until it is fixed\n  x:1:2: bad\n\
             Claude token file: unknown until settings.json is fixed\n"
        ));
        let bare = status(json!({"ok": false}), Value::Null, Value::Null);
        assert!(text(&bare, None).contains("fixed\n  /c/settings.json\n"));
    }
}
