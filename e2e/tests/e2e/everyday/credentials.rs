//! The person's credential files stay unreadable in every sandbox whose grants would
//! hold them: each file of relay's list (`CREDENTIALS`, read from the code, so the list
//! and this test cannot part), in a home that both templates read whole, from a
//! token-less `relay sandbox shell` and from the real Claude Code's Bash tool in a
//! launch that got the token; one kept as a dotfile manager keeps it, behind a link,
//! where the link leads (docs/settings.md#toolchains).

use std::path::Path;

use serde_json::json;

use relay::daemon::plan::toolchains::CREDENTIALS;
use relay_e2e::daemon::{base_settings, Relay, TOKEN_SETTING};
use relay_e2e::fakeapi::FakeApi;

use crate::clients::real_claude::claude_code;
use crate::clients::real_turns::{fake_oauth_token, settings};

/// Each credential, written with a secret of its own (a folder gets one file holding
/// it): its name and the secret. `.npmrc` is a link to `~/dotfiles/npmrc`.
fn plant(home: &Path) -> Vec<(&'static str, String)> {
    CREDENTIALS
        .iter()
        .map(|name| {
            let secret = format!("secret-{}", relay_e2e::random_hex(8));
            let path = home.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let folder = name.ends_with("keyrings")
                || name.ends_with("legacy_credentials")
                || name.ends_with("private-keys-v1.d");
            if folder {
                std::fs::create_dir_all(&path).unwrap();
                std::fs::write(path.join("one"), &secret).unwrap();
            } else if *name == ".npmrc" {
                std::fs::create_dir_all(home.join("dotfiles")).unwrap();
                std::fs::write(home.join("dotfiles/npmrc"), &secret).unwrap();
                std::os::unix::fs::symlink(home.join("dotfiles/npmrc"), &path).unwrap();
            } else {
                std::fs::write(&path, &secret).unwrap();
            }
            (*name, secret)
        })
        .collect()
}

/// Reads every credential (as named, a folder's files, the dotfile behind the link)
/// and a plain file beside them.
fn read_all() -> String {
    let mut s = String::from("cat ~/plain.txt; echo; cat ~/dotfiles/npmrc 2>/dev/null; ");
    for name in CREDENTIALS {
        s.push_str(&format!("cat ~/{name} ~/{name}/* 2>/dev/null; "));
    }
    s.push_str("echo read=done");
    s
}

fn assert_none_read(text: &str, secrets: &[(&str, String)], place: &str) {
    assert!(
        text.contains("plain") && text.contains("read=done"),
        "{place}: the home is not read: {text}"
    );
    for (name, secret) in secrets {
        assert!(!text.contains(secret), "{place}: {name} was read: {text}");
    }
}

#[test]
fn every_credential_file_is_masked_in_a_shell_and_in_claudes_bash_tool_that_read_the_home() {
    let claude = claude_code();
    let mut r = Relay::prepare(None, false);
    let script = json!({"turns": [
        {"text": "Reading.", "tool_use": [
            {"id": "toolu_creds", "name": "Bash", "input": {"command": read_all(), "description": "read"}},
        ]},
        {"text": "done"},
    ]});
    let api = FakeApi::start(&r.root, &script);
    r.write_token(&fake_oauth_token());
    let mut s = match &claude {
        Some(c) => settings(c, &api, Some(TOKEN_SETTING)),
        None => base_settings(Some(TOKEN_SETTING)),
    };
    for t in s["terminal_templates"].as_array_mut().unwrap() {
        t["read"] = json!(["~"]);
    }
    r.write_settings(&s);
    let secrets = plant(&r.home);
    std::fs::write(r.home.join("plain.txt"), "plain").unwrap();
    r.launch_daemon();

    let text = super::shell(&r, &r.project, &read_all()).1;
    assert_none_read(&text, &secrets, "a shell");
    if claude.is_none() {
        return;
    }
    let result = super::claudes_tool_result(&r, &api, "toolu_creds");
    let text = result["text"].as_str().unwrap_or_default();
    assert_none_read(text, &secrets, "Claude's Bash tool");
}
