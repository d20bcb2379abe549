//! `relay settings --open` hands the one-time link it prints to the platform's opener
//! (`xdg-open` on Linux, `open` on macOS), found on the CLI's `PATH`. A stand-in opener
//! writes its argument into a FIFO the test reads: the wait is on that write, no sleep.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

use relay_e2e::daemon::{base_settings, Relay};
use serde_json::{json, Value};

#[test]
fn settings_open_hands_the_printed_link_to_the_platform_opener() {
    let r = Relay::start(base_settings(None));
    let fifo = r.root.join("opened.fifo");
    let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // Safety: mkfifo reads the NUL-terminated path and creates a FIFO; no other memory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    // The instance's ~/.local/bin comes first on the CLI's PATH.
    let stand_in = r.home.join(".local/bin").join(opener);
    relay_e2e::exec_file::write_executable(
        &stand_in,
        format!(
            "#!/bin/sh\nprintf '%s|%s\\n' \"$#\" \"$1\" > '{}'\n",
            fifo.display()
        ),
    );

    let (tx, rx) = std::sync::mpsc::channel();
    let reader = fifo.clone();
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::read_to_string(reader));
    });

    let out = r.cli(&["settings", "--open", "--json"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    let url = v["url"].as_str().unwrap();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    let opened = rx
        .recv_timeout(relay_e2e::WAIT)
        .expect("the opener never ran")
        .unwrap();
    assert_eq!(
        opened.trim_end(),
        format!("1|{url}"),
        "{opener} got another link"
    );
}

/// An opener that fails (`xdg-open` finding no browser exits 3) is said on stderr;
/// the link is still printed and the command succeeds (issue 40: it was silent).
#[test]
fn settings_open_says_when_no_browser_opened() {
    let r = Relay::start(base_settings(None));
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    relay_e2e::exec_file::write_executable(
        &r.home.join(".local/bin").join(opener),
        "#!/bin/sh\nexit 3\n",
    );
    let out = r.cli(&["settings", "--open"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert!(
        out.stdout.starts_with("http://127.0.0.1:"),
        "{}",
        out.stdout
    );
    assert_eq!(
        out.stderr,
        format!(
            "relay: no browser opened ({opener} exited with status 3): open the link above in \
             a browser yourself\n"
        )
    );
}

#[test]
fn settings_without_a_listener_says_to_set_api_listen_and_once_set_to_restart_relay() {
    let mut settings = base_settings(None);
    settings["api"] = json!({});
    let mut r = Relay::start(settings.clone());
    let file = r.config.join("settings.json");
    let out = r.cli(&["settings", "--open"]);
    assert_eq!(
        (out.status, out.stderr),
        (
            1,
            format!(
                "error: set api.listen in {} (e.g. \"127.0.0.1:4850\"), then restart relay, to serve the Settings page ({})\n",
                file.display(),
                relay::wire::Code::NoListener.as_str()
            )
        )
    );
    settings["api"] = json!({"listen": "127.0.0.1:0"});
    r.write_settings(&settings);
    let out = r.cli(&["settings", "--open"]);
    assert_eq!(
        (out.status, out.stderr),
        (
            1,
            format!(
                "error: api.listen is set to 127.0.0.1:0 in {}, but relay reads it only when it starts: restart relay (stop it, then `relay serve`) to serve the Settings page ({})\n",
                file.display(),
                relay::wire::Code::NoListener.as_str()
            )
        )
    );
    // Restarted, it serves the page.
    r.stop();
    r.launch_daemon();
    let out = r.cli(&["settings", "--json"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert!(
        v["url"].as_str().unwrap().starts_with("http://127.0.0.1:"),
        "{v}"
    );
}
