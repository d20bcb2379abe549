//! The Settings page in a real headless Chromium (Debian's, driven by playwright-core
//! from e2e/browser): in through `relay settings`'s one-time link, the Overview shows
//! the token file's path and never the token, in the DOM or in any response body.

use std::path::PathBuf;
use std::process::Command;

use relay_e2e::daemon::{base_settings, Relay, TOKEN_SETTING};
use relay_e2e::{assert_absent, fake_token};
use serde_json::{json, Value};

/// The browser and its driver, or why they are missing. In CI they must be there.
fn browser_tools() -> Option<(PathBuf, PathBuf)> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("browser/overview.mjs");
    let driver =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("browser/node_modules/playwright-core");
    let chromium =
        PathBuf::from(std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()));
    let missing: Vec<String> = [
        (&chromium, "chromium"),
        (&driver, "playwright-core (npm ci --prefix e2e/browser)"),
    ]
    .iter()
    .filter(|(p, _)| !p.exists())
    .map(|(p, what)| format!("{what} at {}", p.display()))
    .collect();
    if missing.is_empty() && Command::new("node").arg("--version").output().is_ok() {
        return Some((script, chromium));
    }
    let why = format!(
        "browser test needs {}",
        if missing.is_empty() {
            "node".into()
        } else {
            missing.join(", ")
        }
    );
    assert!(
        std::env::var_os("CI").is_none(),
        "{why}: CI must install it (.ci/run)"
    );
    eprintln!("SKIP settings page: {why}");
    None
}

fn open(r: &Relay, script: &PathBuf, chromium: &PathBuf, shot: &PathBuf) -> Value {
    open_picking(r, script, chromium, shot, None)
}

/// [`open`], then the session `pick` picked: its sandbox panel's connections too.
fn open_picking(
    r: &Relay,
    script: &PathBuf,
    chromium: &PathBuf,
    shot: &PathBuf,
    pick: Option<&str>,
) -> Value {
    let link = r.cli_json(&["settings"]);
    let url = link["url"].as_str().unwrap();
    let out = Command::new("node")
        .arg(script)
        .arg(url)
        .arg(shot)
        .args(pick)
        .env("CHROMIUM", chromium)
        .output()
        .expect("node");
    assert!(
        out.status.success(),
        "browser: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "browser output: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn settings_page_overview_shows_the_token_file_path_and_never_the_token() {
    let Some((script, chromium)) = browser_tools() else {
        return;
    };
    let token = fake_token();
    let mut settings = base_settings(Some(TOKEN_SETTING));
    settings["projects"][0]["account"] = json!("personal");
    let r = Relay::start(settings);
    let path = r.write_token(&token);
    // Something live to list: a session that holds the token on fd 5.
    let (st, s, _) = r.api("POST", "/api/sessions", Some(&json!({"project": "p1"})));
    assert_eq!(st, 201, "{s}");
    let artifacts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("settings-overview.png");
    let v = open(&r, &script, &chromium, &shot);
    assert_eq!(v["ready"], "1", "{v}");
    let lines: Vec<&str> = v["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l.as_str())
        .collect();
    assert!(
        lines.contains(&format!("Claude token file: {TOKEN_SETTING}").as_str()),
        "{lines:?}"
    );
    assert!(lines.iter().any(|l| l.starts_with("relay ")), "{lines:?}");
    assert!(
        lines.contains(&format!("Config dir: {}", r.config.display()).as_str()),
        "{lines:?}"
    );
    let live = v["live"].as_array().unwrap();
    assert!(
        live.iter()
            .any(|row| row[0] == s["id"] && row[5] == "running"),
        "{live:?}"
    );
    // Which account it runs on, beside the token's fingerprint (issue 25).
    let fingerprint = &relay_e2e::sha256_hex(token.as_bytes())[..12];
    assert!(
        live.iter()
            .any(|row| row[0] == s["id"] && row[8] == format!("{fingerprint} · personal")),
        "{live:?}"
    );
    assert_absent(v["dom"].as_str().unwrap().as_bytes(), &token, "the DOM");
    let responses = v["responses"].as_array().unwrap();
    assert!(responses.len() >= 5, "{responses:?}");
    use std::io::Read;
    for resp in responses {
        let body = decode_b64(resp["body"].as_str().unwrap_or_default());
        assert_absent(&body, &token, &format!("the response of {}", resp["url"]));
    }
    let mut png = [0u8; 8];
    std::fs::File::open(&shot)
        .unwrap()
        .read_exact(&mut png)
        .unwrap();
    assert_eq!(
        &png,
        b"\x89PNG\r\n\x1a\n",
        "screenshot kept at {}",
        shot.display()
    );
    assert_absent(&r.output(), &token, "the daemon's output");
    assert!(path.exists());
}

#[test]
fn settings_page_says_nothing_about_a_token_when_the_setting_is_empty_and_needs_a_login() {
    let Some((script, chromium)) = browser_tools() else {
        return;
    };
    let r = Relay::start(base_settings(None));
    let shot = std::env::temp_dir().join(format!("relay-overview-{}.png", std::process::id()));
    let v = open(&r, &script, &chromium, &shot);
    let _ = std::fs::remove_file(&shot);
    let lines: Vec<&str> = v["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l.as_str())
        .collect();
    assert!(
        !lines.iter().any(|l| l.to_lowercase().contains("token")),
        "{lines:?}"
    );
    assert!(!v["dom"]
        .as_str()
        .unwrap()
        .to_lowercase()
        .contains("token file"));
    // Without the cookie or the bearer the page is not served; a used link does not work twice.
    let addr = r.ready.api.clone().unwrap();
    let req = |method: &str, path: &str, cookie: Option<&str>| {
        let c = cookie
            .map(|c| format!("Cookie: {c}\r\n"))
            .unwrap_or_default();
        let (status, raw) = relay_e2e::tcp_http(&addr, method, path, &c);
        let head = String::from_utf8_lossy(&raw).to_string();
        let set_cookie = head
            .lines()
            .find_map(|l| {
                l.strip_prefix("set-cookie: ")
                    .or_else(|| l.strip_prefix("Set-Cookie: "))
            })
            .map(|v| v.split(';').next().unwrap().to_string());
        (status, set_cookie)
    };
    assert_eq!(req("GET", "/", None).0, 401);
    assert_eq!(req("GET", "/api/status", None).0, 401);
    let used = v["final_url"].as_str().unwrap();
    assert!(used.ends_with('/'), "{used}");
    let link = r.cli_json(&["settings"]);
    let url = link["url"].as_str().unwrap();
    let path_q = &url[url.find("/login").unwrap()..];
    let (st, cookie) = req("GET", path_q, None);
    assert_eq!(st, 303);
    assert_eq!(req("GET", path_q, None).0, 403, "a login link works once");
    let cookie = cookie.expect("a session cookie");
    assert_eq!(req("GET", "/api/status", Some(&cookie)).0, 200);
    // The cookie only reads: no launch, no stop, no typing into a terminal.
    let t = r.shell_terminal("sleep 60");
    let tid = t["id"].as_str().unwrap();
    assert_eq!(req("POST", "/api/terminals", Some(&cookie)).0, 401);
    assert_eq!(
        req("DELETE", &format!("/api/terminals/{tid}"), Some(&cookie)).0,
        401
    );
    assert_eq!(
        req(
            "GET",
            &format!("/api/terminals/{tid}/attach"),
            Some(&cookie)
        )
        .0,
        401
    );
}

fn decode_b64(s: &str) -> Vec<u8> {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes().filter(|c| *c != b'=') {
        let Some(v) = A.iter().position(|a| *a == c) else {
            continue;
        };
        acc = (acc << 6) | v as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

/// Issue 23 item 6: a picked session's connections through its egress proxy, each with
/// its verdict and rule, on the page, above its lists of places; the audit's egress
/// row shows the host.
#[test]
fn settings_page_shows_a_picked_sessions_connections_through_its_proxy() {
    let Some((script, chromium)) = browser_tools() else {
        return;
    };
    let r = Relay::start(base_settings(None));
    // A proxied shell asks its proxy for a host off its list, and waits.
    let ask = "import socket; s = socket.create_connection(('127.0.0.1', 3128)); \
               s.sendall(b'CONNECT off-the-list.example:443 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n'); \
               print(s.recv(64).split(b' ')[1].decode(), flush=True)";
    let script_text = format!("python3 -c \"{ask}\"; exec sleep 600");
    let t = r.shell_terminal(&script_text);
    let id = t["id"].as_str().unwrap().to_string();
    r.wait_event(|e| {
        e["name"] == "egress"
            && e["session_id"] == id.as_str()
            && e["egress"]["host"] == "off-the-list.example"
    });
    let shot = std::env::temp_dir().join(format!("relay-egress-{}.png", std::process::id()));
    let v = open_picking(&r, &script, &chromium, &shot, Some(&id));
    let _ = std::fs::remove_file(&shot);
    let rows = v["egress"].as_array().unwrap_or_else(|| panic!("{v}"));
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0][1], "off-the-list.example:443", "{rows:?}");
    assert_eq!(rows[0][2], "refused", "{rows:?}");
    assert!(
        rows[0][6]
            .as_str()
            .unwrap()
            .contains("off-the-list.example"),
        "{rows:?}"
    );
    // Issue 40 item 6: near the top of the panel, above the lists of places; and the
    // audit's row of that connection names its host.
    assert_eq!(
        v["egress_first"], true,
        "the connections are below the places"
    );
    let audit = v["audit"].as_array().unwrap();
    let row = audit
        .iter()
        .find(|a| a[1] == "egress" && a[3] == id.as_str())
        .unwrap_or_else(|| panic!("no egress row of {id}: {audit:?}"));
    assert_eq!(row[2], "denied", "{row:?}");
    assert!(
        row[7]
            .as_str()
            .unwrap()
            .starts_with("off-the-list.example:443 — "),
        "{row:?}"
    );
}
