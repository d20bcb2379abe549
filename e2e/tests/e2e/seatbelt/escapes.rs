//! The ways out of a same-uid sandbox on macOS (issue 24), one test per attack, each
//! checked on a real launch: on Linux against the answers the fake `sandbox-exec`'s
//! evaluator gave for the profile relay rendered (fakes/src/sbpl_escapes.rs); on a Mac
//! the path and socket checks are probed from inside and the rest are the probe
//! script's (docs/macos.md).
//!
//! Every Seatbelt launch of the suite is asked the same questions; these tests name
//! which answer stops which attack.

use super::launches::{assert_checks_hold, end, launch, launch_with};
use relay_e2e::seatbelt::{Check, Target};
use serde_json::json;

fn mach(name: &str) -> Target {
    Target::Mach(name.to_string())
}

fn path(p: &str) -> Target {
    Target::Path(p.into())
}

#[test]
fn seatbelt_session_cannot_open_a_bundle_it_wrote_or_docker_desktop_through_launchservices() {
    let l = launch();
    let checks = [
        Check::denied(
            "mach-lookup",
            mach("com.apple.coreservices.launchservicesd"),
        ),
        Check::denied("mach-lookup", mach("com.apple.lsd.mapdb")),
        Check::denied("mach-lookup", mach("com.apple.lsd.modifydb")),
        Check::denied("lsopen", Target::Nothing),
        Check::denied("job-creation", Target::Nothing),
        Check::denied("process-exec", path("/usr/bin/open")),
        Check::denied("process-exec", path("/bin/launchctl")),
    ];
    assert_checks_hold(&l, &checks);
    end(l);
}

#[test]
fn seatbelt_session_cannot_tell_terminal_to_do_script_with_osascript() {
    let l = launch();
    let checks = [
        Check::denied("mach-lookup", mach("com.apple.coreservices.appleevents")),
        Check::denied(
            "appleevent-send",
            Target::AppleEvent("com.apple.Terminal".into()),
        ),
        Check::denied("process-exec", path("/usr/bin/osascript")),
    ];
    assert_checks_hold(&l, &checks);
    end(l);
}

#[test]
fn seatbelt_session_cannot_defaults_write_another_apps_domain() {
    let l = launch();
    let checks = [
        Check::denied("user-preference-write", Target::Nothing),
        Check::allowed("user-preference-read", Target::Nothing),
        Check::allowed("mach-lookup", mach("com.apple.cfprefsd.agent")),
    ];
    assert_checks_hold(&l, &checks);
    end(l);
}

#[test]
fn seatbelt_session_cannot_connect_to_the_docker_socket_or_the_ssh_agent() {
    // `~` is read-write in this template, so the Docker socket under it is inside a
    // grant: the escape section closes it by name all the same.
    let l = launch();
    let home = l.r.home.clone();
    let mut checks: Vec<Check> = [
        home.join(".docker/run/docker.sock"),
        home.join(".colima/default/docker.sock"),
        "/var/run/docker.sock".into(),
        "/private/tmp/com.apple.launchd.AbCdEf0123/Listeners".into(),
    ]
    .into_iter()
    .map(|s| Check::denied("network-outbound", Target::Socket(s)))
    .collect();
    // A socket the session makes in its own project still connects; DNS's does not (the
    // network is proxied: names are the proxy's to resolve).
    checks.push(Check::allowed(
        "network-outbound",
        Target::Socket(l.r.project.join("fake-sandbox-exec-probe.sock")),
    ));
    checks.push(Check::denied(
        "network-outbound",
        Target::Socket("/private/var/run/mDNSResponder".into()),
    ));
    assert_checks_hold(&l, &checks);
    end(l);
}

#[test]
fn seatbelt_session_cannot_pbpaste_the_setup_token() {
    let l = launch();
    let checks = [
        Check::denied("mach-lookup", mach("com.apple.pasteboard.1")),
        Check::denied("process-exec", path("/usr/bin/pbpaste")),
        Check::denied("process-exec", path("/usr/bin/pbcopy")),
    ];
    assert_checks_hold(&l, &checks);
    end(l);
}

#[test]
fn seatbelt_session_cannot_security_find_generic_password_the_claude_login() {
    let l = launch();
    let checks = [
        Check::denied("mach-lookup", mach("com.apple.SecurityServer")),
        Check::denied("mach-lookup", mach("com.apple.securityd.xpc")),
        Check::denied("mach-lookup", mach("com.apple.security.agent")),
        Check::denied("process-exec", path("/usr/bin/security")),
    ];
    assert_checks_hold(&l, &checks);
    end(l);
}

#[test]
fn seatbelt_session_cannot_kill_the_daemon_the_host_or_other_sessions() {
    let l = launch();
    let checks = [
        Check::denied("signal", Target::Process("outside")),
        // Its own processes it still signals: job control, timeouts, `kill %1`.
        Check::allowed("signal", Target::Process("same-sandbox")),
        Check::allowed("signal", Target::Process("self")),
    ];
    assert_checks_hold(&l, &checks);
    end(l);
}

#[test]
fn seatbelt_session_cannot_read_other_processes_arguments_or_open_other_terminals() {
    let l = launch();
    let checks = [
        Check::denied("process-info-pidinfo", Target::Process("outside")),
        Check::denied("sysctl-read", Target::Sysctl("kern.procargs2".into())),
        Check::denied("sysctl-read", Target::Sysctl("kern.proc.all".into())),
        Check::denied("file-read-data", path("/dev/ttys999")),
        Check::denied("file-write-data", path("/dev/ttys999")),
        Check::denied("file-read-data", path("/dev/disk0")),
        Check::allowed("process-info-pidinfo", Target::Process("same-sandbox")),
    ];
    assert_checks_hold(&l, &checks);
    end(l);
}

#[test]
fn seatbelt_session_keeps_what_claude_code_shells_git_node_and_python_need() {
    let l = launch();
    let mut checks: Vec<Check> = [
        "com.apple.system.opendirectoryd.libinfo",
        "com.apple.system.notification_center",
        "com.apple.bsd.dirhelper",
        "com.apple.SystemConfiguration.DNSConfiguration",
        "com.apple.PowerManagement.control",
    ]
    .iter()
    .map(|n| Check::allowed("mach-lookup", mach(n)))
    .collect();
    // DNS and the certificate fetchers are not among them: on the default network,
    // proxied, each would go out for the session (seatbelt/network.rs).
    for name in [
        "com.apple.dnssd.service",
        "com.apple.trustd.agent",
        "com.apple.ocspd",
    ] {
        checks.push(Check::denied("mach-lookup", mach(name)));
    }
    for name in ["hw.ncpu", "hw.memsize", "kern.osproductversion"] {
        checks.push(Check::allowed("sysctl-read", Target::Sysctl(name.into())));
    }
    for dev in ["/dev/null", "/dev/tty"] {
        checks.push(Check::allowed("file-write-data", path(dev)));
    }
    checks.push(Check::allowed("file-read-data", path("/dev/urandom")));
    checks.push(Check::allowed("process-exec", path("/usr/bin/git")));
    checks.push(Check::allowed(
        "file-map-executable",
        path("/usr/lib/libSystem.B.dylib"),
    ));
    checks.push(Check::allowed("process-fork", Target::Nothing));
    checks.push(Check::allowed("pseudo-tty", Target::Nothing));
    assert_checks_hold(&l, &checks);
    end(l);
}

#[test]
fn seatbelt_template_naming_launchservicesd_in_macos_mach_leaves_it_closed_and_opens_what_it_names()
{
    // The `claude-code` template (the one sessions run) names an escape's service and an
    // ordinary one in `macos.mach`, and opts into the clipboard: the profile relay renders
    // for the launch carries them (the fake reads the same opt-ins from its policy).
    let l = launch_with(|s| {
        s["terminal_templates"][0]["macos"] = json!({
            "clipboard": true,
            "mach": ["com.apple.coreservices.launchservicesd", "com.example.service"],
        });
    });
    let checks = [
        // Named, and still closed: the escape section comes after it.
        Check::denied(
            "mach-lookup",
            mach("com.apple.coreservices.launchservicesd"),
        ),
        Check::denied("lsopen", Target::Nothing),
        Check::denied("process-exec", path("/usr/bin/open")),
        // What it names that is no escape opens; what it opts into opens, and no more.
        Check::allowed("mach-lookup", mach("com.example.service")),
        Check::allowed("mach-lookup", mach("com.apple.pasteboard.1")),
        Check::allowed("process-exec", path("/usr/bin/pbpaste")),
        Check::denied("mach-lookup", mach("com.apple.SecurityServer")),
        Check::denied("mach-lookup", mach("com.apple.coreservices.appleevents")),
    ];
    assert_checks_hold(&l, &checks);
    // `relay sandbox explain` says what each opens, and that the escape stays closed.
    let dir = l.r.project.to_string_lossy().into_owned();
    let x = l.r.cli_json(&[
        "sandbox",
        "explain",
        "claude-code",
        "--directory",
        &dir,
        "--backend",
        "seatbelt",
    ]);
    let notes: Vec<String> = x["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect();
    for said in [
        "macos.clipboard opens the pasteboard",
        "macos.mach names com.apple.coreservices.launchservicesd, which stays closed",
        "macos.mach opens the Mach service com.example.service",
    ] {
        assert!(
            notes.iter().any(|n| n.starts_with(said)),
            "{said}: {notes:#?}"
        );
    }
    // And `relay doctor` (its checks that launch nothing) names the template.
    let (status, page, _) = l.r.api("GET", "/api/doctor", None);
    assert_eq!(status, 200, "{page}");
    let check = page["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "macos_opt_ins")
        .unwrap_or_else(|| panic!("no macos_opt_ins check: {page}"))
        .clone();
    assert_eq!(check["status"], "warn", "{check}");
    let detail = check["detail"].as_str().unwrap();
    assert!(
        detail.contains("claude-code opens the clipboard, the Mach service com.example.service")
            && detail
                .ends_with("stays closed: claude-code: com.apple.coreservices.launchservicesd"),
        "{detail}"
    );
    end(l);
}
