//! The Settings page beyond the Overview, in a real headless Chromium (driven by
//! e2e/browser/live.mjs): the sessions and terminals list follows relay's events as a
//! terminal starts and stops; a session's sandbox, picked by its link, says what the
//! profile it was launched with allows, the token's folder among the denied; relay
//! doctor's checks and the last audit rows are there. The page reads only (GETs, no
//! controls), and the token is in no response it fetched and not in its DOM, in any of
//! the forms `relay audit scan` looks for. At load, in a 1280 px window, the header says
//! live within a second and the tables' identifiers are each on one line; at 390, 760
//! and 1280 px the page is never wider than the window. Screenshots are kept in
//! e2e/artifacts, their paths printed.

use relay::wire::Code;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use relay::wire::Terminals;
use relay_e2e::daemon::{base_settings, doctor_check, Relay, TOKEN_SETTING};
use relay_e2e::fake_token;
use serde_json::{json, Value};

/// Node, the driver and Chromium, or why they are missing (in CI they must be there).
fn browser() -> Option<(PathBuf, PathBuf)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("browser");
    let chromium =
        PathBuf::from(std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()));
    let node = Command::new("node").arg("--version").output().is_ok();
    let driver = dir.join("node_modules/playwright-core").exists();
    if node && driver && chromium.exists() {
        return Some((dir.join("live.mjs"), chromium));
    }
    let why = format!(
        "the live page test needs node ({node}), playwright-core ({driver}, npm ci --prefix \
         e2e/browser) and chromium at {} ({})",
        chromium.display(),
        chromium.exists()
    );
    assert!(
        std::env::var_os("CI").is_none(),
        "{why}: CI must install it"
    );
    eprintln!("skip: {why}");
    None
}

/// The token in every form relay's own scan looks for (raw, JSON, URL, base64 at each
/// alignment), absent from `hay`.
fn assert_no_token(hay: &[u8], token: &str, place: &str) {
    for (form, needle) in relay::daemon::diagnostics::scan::needles(token.as_bytes()) {
        assert!(
            !hay.windows(needle.len()).any(|w| w == needle.as_slice()),
            "the token appears ({form}) in {place}"
        );
    }
}

fn b64(s: &str) -> Vec<u8> {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let (mut out, mut acc, mut bits) = (Vec::new(), 0u32, 0);
    for v in s.bytes().filter_map(|c| A.iter().position(|a| *a == c)) {
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

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn png(path: &Path) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{}",
        path.display()
    );
    println!("screenshot: {}", path.display());
}

/// The page, as a conversation: the driver says when it shows something, the test asks
/// for the next thing to wait for.
struct Page {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
    /// The driver's first line: the page up, when it said "live", its layout.
    ready: Value,
}

impl Page {
    fn open(r: &Relay, script: &Path, chromium: &Path, session: &str, shots: &Path) -> Page {
        let link = r.cli_json(&["settings"]);
        let mut child = Command::new("node")
            .arg(script)
            .arg(link["url"].as_str().unwrap())
            .arg(session)
            .arg(shots)
            .env("CHROMIUM", chromium)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("node");
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut page = Page {
            child,
            out,
            ready: Value::Null,
        };
        page.ready = page.read();
        assert_eq!(page.ready["phase"], "ready", "{}", page.ready);
        page
    }

    fn read(&mut self) -> Value {
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        assert!(
            !line.is_empty(),
            "the browser driver ended early: {:?}",
            self.child.try_wait()
        );
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("driver line: {e}: {line}"))
    }

    fn say(&mut self, v: Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    }

    /// Waits until the page's list shows `id` in `state`.
    fn shows(&mut self, id: &str, state: &str) {
        self.say(json!({"id": id, "state": state}));
        let seen = self.read();
        assert_eq!(
            (seen["id"].as_str(), seen["state"].as_str()),
            (Some(id), Some(state))
        );
    }

    fn finish(mut self) -> Value {
        self.say(json!({"done": true}));
        let report = self.read();
        assert!(self.child.wait().unwrap().success());
        report
    }
}

#[test]
fn settings_page_follows_sessions_live_explains_a_sandbox_and_never_holds_the_token() {
    let Some((script, chromium)) = browser() else {
        return;
    };
    let token = fake_token();
    let mut settings = relay_e2e::daemon::host_network(base_settings(Some(TOKEN_SETTING)));
    settings["session_sandbox"] = json!({"denied_loopback_ports": [5432]});
    // A tool that is not installed: its refusal is an audit row with a long note.
    settings["terminal_templates"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "missing", "command": "no-such-tool-anywhere"}));
    let r = Relay::start(settings);
    let token_path = r.write_token(&token);
    // relay doctor first: its probes are what the page shows for them.
    let doctor = r.cli(&["doctor", "--json"]);
    let doctor: Value = serde_json::from_str(&doctor.stdout).expect("doctor --json");
    let (st, s, _) = r.api(
        "POST",
        "/api/sessions",
        Some(&json!({"project": "p1", "name": "review the parser"})),
    );
    assert_eq!(st, 201, "{s}");
    let sid = s["id"].as_str().unwrap().to_string();
    assert_eq!(s["token_passed"], true);
    let (st, refused, _) = r.api(
        "POST",
        "/api/terminals",
        Some(&json!({"project": "p1", "template": "missing"})),
    );
    assert_eq!(
        (st, refused["code"].as_str()),
        (500, Some(Code::SpawnFailed.as_str())),
        "{refused}"
    );

    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("artifacts")
        .join(format!("settings-live-{}", std::process::id()));
    std::fs::create_dir_all(&shots).unwrap();
    let mut page = Page::open(&r, &script, &chromium, &sid, &shots);
    at_load_live_and_readable_at_1280(&page.ready);
    // A terminal starts and stops while the page is open: the list follows, unreloaded.
    let t = r.cli_json(&[
        "terminal",
        "start",
        "--project",
        "p1",
        "--template",
        "shell",
        "--name",
        "build",
        "--extra-arg",
        "-c",
        "--extra-arg",
        "sleep 60",
    ]);
    let tid = t["id"].as_str().unwrap().to_string();
    page.shows(&tid, "running");
    r.cli_json(&["terminal", "stop", "--id", &tid]);
    page.shows(&tid, "exited");
    let v = page.finish();
    for shot in strings(&v["shots"]) {
        png(Path::new(&shot));
    }
    fits_at_each_width(&v["widths"]);

    // The list: every column the issue names, the session's values in them.
    let headers = strings(&v["headers"]);
    for h in [
        "Name",
        "Project",
        "Template",
        "Directory",
        "State",
        "Model",
        "Token",
        "Age",
    ] {
        assert!(headers.contains(&h.to_string()), "{headers:?}");
    }
    let col = |h: &str| headers.iter().position(|x| x == h).unwrap();
    let rows: Vec<Vec<String>> = v["live"].as_array().unwrap().iter().map(strings).collect();
    let row = rows
        .iter()
        .find(|r| r[0] == sid)
        .expect("the session's row");
    assert_eq!(row[col("Name")], "review the parser");
    assert_eq!(row[col("Project")], "p1");
    assert_eq!(row[col("Template")], "claude-code");
    assert_eq!(row[col("State")], "running");
    assert_eq!(row[col("Directory")], s["directory"].as_str().unwrap());
    assert_eq!(row[col("Token")], s["token_fingerprint"].as_str().unwrap());
    assert!(row[col("Age")].ends_with('s'), "{row:?}");
    let trow = rows
        .iter()
        .find(|r| r[0] == tid)
        .expect("the terminal's row");
    assert_eq!(trow[col("State")], "exited");
    assert_eq!(trow[col("Name")], "build");

    // The sandbox, as the page shows it: the token's folder denied, the API port and
    // the settings' port denied, relay's sockets, the session's folder writable.
    let sb = &v["sandbox"];
    assert!(sb["head"].as_str().unwrap().contains("bwrap"), "{sb}");
    let token_dir = token_path.parent().unwrap().display().to_string();
    let denied = strings(&sb["denied"]);
    assert!(
        denied
            .iter()
            .any(|l| l.starts_with(&format!("{token_dir} ")) && l.contains("claude_token_file")),
        "{denied:?}"
    );
    assert!(denied
        .iter()
        .any(|l| l.starts_with(&r.config.display().to_string())));
    let write = strings(&sb["write"]);
    assert!(
        write
            .iter()
            .any(|l| l.starts_with(s["directory"].as_str().unwrap())),
        "{write:?}"
    );
    assert!(strings(&sb["sockets"])
        .iter()
        .any(|l| l.contains("relay.sock")));
    let network = sb["network"].as_str().unwrap();
    let api_port = r.api_port().unwrap().to_string();
    assert!(
        network.contains("5432") && network.contains(&api_port),
        "{network}"
    );

    // …which is the profile the session was launched with: every writable place is a
    // read-write bind and every denied place a mask in the bwrap profile on disk.
    let (_, x, _) = r.api("GET", &format!("/api/sessions/{sid}/sandbox"), None);
    assert_eq!(x["denied"].as_array().unwrap().len(), denied.len());
    let profile = std::fs::read_dir(r.config.join("profiles"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(&sid))
        .expect("the session's profile");
    let args = relay::sandbox::bwrap_profile::decode(&std::fs::read(&profile).unwrap()).unwrap();
    for w in x["write"].as_array().unwrap() {
        let p = w["path"].as_str().unwrap();
        assert!(
            args.windows(3)
                .any(|a| a[0] == "--bind" && a[1] == p && a[2] == p),
            "{p} is not a read-write bind in {args:?}"
        );
    }
    for d in x["denied"].as_array().unwrap() {
        let p = d["path"].as_str().unwrap();
        if d["how"]
            .as_str()
            .unwrap()
            .starts_with("inside a denied folder")
        {
            // Hidden with the folder: its own mask could not even be mounted.
            let folder = x["denied"].as_array().unwrap().iter().find(|f| {
                f["kind"] == "dir" && p.starts_with(f["path"].as_str().unwrap()) && f != &d
            });
            assert!(folder.is_some(), "{p}: no denied folder holds it");
            continue;
        }
        assert!(args.iter().any(|a| a == p), "{p} is not masked in {args:?}");
    }

    // relay doctor's checks, with the probes of the run above.
    let checks: Vec<Vec<String>> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(strings)
        .collect();
    for name in [
        "settings",
        "sandbox_launcher",
        "kernel",
        "config_dir",
        "token_file",
        "canary",
    ] {
        let c = checks
            .iter()
            .find(|c| c[1] == name)
            .unwrap_or_else(|| panic!("no {name} on the page: {checks:?}"));
        assert_eq!(
            c[0],
            doctor_check(&doctor, name)["status"].as_str().unwrap(),
            "{c:?}"
        );
    }
    // …and when those ran.
    let ran = v["probes_ran"].as_str().unwrap_or_default();
    assert!(ran.starts_with("The probes ran "), "{ran:?}");
    // The last audit rows, newest first: the terminal's end above its launch.
    let audit: Vec<Vec<String>> = v["audit"].as_array().unwrap().iter().map(strings).collect();
    let at = |action: &str, id: &str| audit.iter().position(|a| a[1] == action && a[3] == id);
    let (end, launch) = (at("session_end", &tid), at("session_launch", &tid));
    assert!(
        end.is_some() && launch.is_some() && end < launch,
        "{audit:?}"
    );
    assert!(at("session_launch", &sid).is_some(), "{audit:?}");

    // Read-only: no control on the page, only GETs, only to relay.
    assert_eq!(v["controls"], json!([]), "the page has controls");
    let base = format!("http://{}/", r.ready.api.as_deref().unwrap());
    let requests = v["requests"].as_array().unwrap();
    assert!(requests
        .iter()
        .any(|q| q["url"].as_str().unwrap().contains("/api/events?after=")));
    assert!(requests
        .iter()
        .any(|q| q["url"].as_str().unwrap().ends_with("/sandbox")));
    // The audit is paged, never read whole: every request asks for one page, those
    // after the first for the rows since the newest shown (at each event) or up to the
    // oldest shown ("Older rows").
    let audits: Vec<&str> = requests
        .iter()
        .map(|q| q["url"].as_str().unwrap())
        .filter(|u| u.contains("/api/audit"))
        .collect();
    assert!(audits.len() >= 3, "{audits:?}");
    assert!(audits.iter().all(|u| u.contains("tail=25")), "{audits:?}");
    assert!(
        audits[1..]
            .iter()
            .all(|u| u.contains("since=") || u.contains("until=")),
        "{audits:?}"
    );
    assert!(audits.iter().any(|u| u.contains("until=")), "{audits:?}");
    let mut seen = std::collections::BTreeSet::new();
    for a in &audit {
        assert!(seen.insert(a.clone()), "a row shown twice: {a:?}");
    }
    for q in requests {
        assert_eq!(q["method"], "GET", "{q}");
        assert!(q["url"].as_str().unwrap().starts_with(&base), "{q}");
    }
    for l in strings(&v["links"]) {
        assert!(l.starts_with('#'), "a link leaves the page: {l}");
    }

    // The token: in no response body and not in the DOM, in any form.
    let responses = v["responses"].as_array().unwrap();
    assert!(responses.len() >= 8, "{}", responses.len());
    for resp in responses {
        let body = b64(resp["body"].as_str().unwrap_or_default());
        assert_no_token(&body, &token, &format!("the response of {}", resp["url"]));
    }
    assert_no_token(v["dom"].as_str().unwrap().as_bytes(), &token, "the DOM");
    assert_no_token(v.to_string().as_bytes(), &token, "the driver's report");
    assert_no_token(&r.output(), &token, "the daemon's output");
}

/// What the page was at load (issue 26, item 8): its header said "live" within a second
/// of the load event (not when the first long poll of /api/events came back, 25 s
/// later), and at 1280 px every identifier in its tables (ids, actions, codes, check
/// names, fingerprints) is on one line and fits its cell, with the page no wider than
/// the window — the audit table among them, a long note beside its ids.
fn at_load_live_and_readable_at_1280(ready: &Value) {
    let (live, load) = (ready["live_ms"].as_f64(), ready["load_ms"].as_f64());
    let said = ready["live_state"].as_str().unwrap_or_default();
    let (Some(live), Some(load)) = (live, load) else {
        panic!("the header never said live (it said {said:?}): {ready}");
    };
    assert!(
        live - load <= 1000.0,
        "the header said live {:.0} ms after load (at {live:.0} ms, load at {load:.0} ms)",
        live - load
    );
    println!("header live {:.0} ms after load", live - load);
    let layout = &ready["layout"];
    assert_eq!(layout["width"], 1280, "{layout}");
    assert!(
        layout["page_width"].as_u64().unwrap() <= 1280,
        "the page is wider than the window: {layout}"
    );
    let cells = layout["cells"].as_array().unwrap();
    let audit_ids = cells
        .iter()
        .filter(|c| c["table"] == "audit-rows" && c["text"].as_str().unwrap().starts_with("t-"))
        .count();
    assert!(audit_ids >= 2, "no audit row with an id: {layout}");
    for c in cells {
        assert!(
            c["lines"] == 1 && c["fits"] == true,
            "{} in #{} takes {} lines (fits its cell: {}) at 1280 px",
            c["text"],
            c["table"],
            c["lines"],
            c["fits"]
        );
    }
}

/// At 390, 760 and 1280 px, the sandbox shown (issue 40, item 6): the page is never
/// wider than the window (its tables scroll in their own boxes, long paths break) and
/// no navigation link is cut off.
fn fits_at_each_width(widths: &Value) {
    let widths = widths.as_array().expect("the page at each width");
    assert_eq!(widths.len(), 3, "{widths:?}");
    for w in widths {
        let (width, page) = (
            w["width"].as_u64().unwrap(),
            w["page_width"].as_u64().unwrap(),
        );
        assert!(
            page <= width,
            "at {width} px the page is {page} px wide: it scrolls sideways ({w})"
        );
        assert_eq!(
            w["nav_cut"],
            json!([]),
            "at {width} px the navigation is cut: {w}"
        );
        println!("at {width} px the page is {page} px wide");
    }
}

#[test]
fn a_sessions_sandbox_answers_only_for_its_kind_and_an_unsandboxed_terminal_says_so_and_doctors_probes_outlive_a_restart(
) {
    let mut settings = base_settings(None);
    settings["terminal_templates"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "bare", "command": "/bin/sh", "sandbox": false}));
    let mut r = Relay::start(settings);
    let t = r.shell_terminal("sleep 60");
    let tid = t["id"].as_str().unwrap();
    let (st, x, _) = r.api("GET", &format!("/api/terminals/{tid}/sandbox"), None);
    assert_eq!(st, 200, "{x}");
    assert_eq!(
        (x["sandboxed"].as_bool(), x["backend"].as_str()),
        (Some(true), Some("bwrap"))
    );
    let (st, x, _) = r.api("GET", &format!("/api/sessions/{tid}/sandbox"), None);
    assert_eq!(
        (st, x["code"].as_str()),
        (404, Some(Code::NotFound.as_str())),
        "{x}"
    );
    let (st, _, _) = r.api("POST", &format!("/api/terminals/{tid}/sandbox"), None);
    assert_eq!(st, 405);
    let bare = r.cli_json(&[
        "terminal",
        "start",
        "--project",
        "p1",
        "--template",
        "bare",
        "--extra-arg",
        "-c",
        "--extra-arg",
        "sleep 60",
    ]);
    let bid = bare["id"].as_str().unwrap();
    let (_, x, _) = r.api("GET", &format!("/api/terminals/{bid}/sandbox"), None);
    assert_eq!(x["sandboxed"], false, "{x}");
    assert_eq!(x["denied"], json!([]));
    for id in [tid, bid] {
        r.cli_json(&["terminal", "stop", "--id", id]);
    }
    // The page reads the doctor's checks without launching a probe.
    let before = r
        .cli_typed::<Terminals>(&["terminal", "list"])
        .terminals
        .len();
    let (st, d, _) = r.api("GET", "/api/doctor", None);
    assert_eq!(st, 200, "{d}");
    assert_eq!(doctor_check(&d, "canary")["status"], "skip", "{d}");
    assert_eq!(d["probes_ran_ms"], Value::Null);
    let after = r
        .cli_typed::<Terminals>(&["terminal", "list"])
        .terminals
        .len();
    assert_eq!(before, after, "GET /api/doctor launched something");

    // `relay doctor`'s probes are kept: after a restart the page still reads them, with
    // when they ran (issue 40, item 6), from a file of relay's alone.
    let doctor: Value = r.cli_json(&["doctor"]);
    let (_, d, _) = r.api("GET", "/api/doctor", None);
    let ran = d["probes_ran_ms"].as_u64().expect("the probes' time");
    let probes = |d: &Value| ["canary", "claude_auth"].map(|name| doctor_check(d, name).clone());
    assert_eq!(probes(&d), probes(&doctor), "{d}");
    r.stop();
    r.launch_daemon();
    let (st, again, _) = r.api("GET", "/api/doctor", None);
    assert_eq!(st, 200, "{again}");
    assert_eq!(again["probes_ran_ms"], ran, "{again}");
    assert_eq!(
        probes(&again),
        probes(&doctor),
        "not kept across the restart: {again}"
    );
    let kept = std::fs::metadata(r.config.join("doctor-probes.json")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(kept.permissions().mode() & 0o777, 0o600);
}
