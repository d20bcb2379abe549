//! The questions every Seatbelt launch is asked beyond files: the ways out of a
//! same-uid sandbox that relay's deny-default profile must close, and the services
//! Claude Code, shells, git, node, python and cargo need that it must keep open
//! (issue 24).
//!
//! The list is fixed here, outside the profile, for the same reason as the file
//! questions ([`crate::sbpl_questions`]): a renderer that forgot a deny would also forget
//! to ask about it. What varies per launch comes from the launch: the session's own
//! terminal (`sandbox-exec -D RELAY_TTY=…`), the home folder (for the Docker socket
//! there), the policy file's `network` (the network questions are asked only when the
//! harness says the launch shares the network) and its `macos` opt-ins, which turn the
//! matching escapes into needs.

use std::path::Path;

use crate::sbpl_eval::{Relation, Target};
use crate::sbpl_questions::{MacOptIns, Question};

/// Mach services a session must not reach, each with the escape it is.
pub const ESCAPE_MACH: &[(&str, &str)] = &[
    (
        "com.apple.coreservices.launchservicesd",
        "open an app or bundle outside the sandbox",
    ),
    ("com.apple.lsd.mapdb", "LaunchServices' database"),
    ("com.apple.lsd.modifydb", "LaunchServices' database"),
    ("com.apple.coreservices.appleevents", "Apple Events"),
    ("com.apple.pasteboard.1", "the clipboard"),
    ("com.apple.SecurityServer", "the keychain"),
    ("com.apple.securityd.xpc", "the keychain"),
    ("com.apple.security.agent", "the security agent's prompts"),
    ("com.apple.windowserver.active", "the window server"),
    ("com.apple.tccd", "privacy consent"),
    ("com.apple.tccd.system", "privacy consent"),
    ("com.apple.metadata.mds", "Spotlight"),
];

/// The Mach services that reach the network for their caller: open only on a shared
/// network.
pub const NETWORK_MACH: &[&str] = &[
    "com.apple.dnssd.service",
    "com.apple.trustd",
    "com.apple.trustd.agent",
    "com.apple.ocspd",
];

/// Mach services a session needs.
pub const NEEDED_MACH: &[&str] = &[
    "com.apple.system.opendirectoryd.libinfo",
    "com.apple.system.opendirectoryd.membership",
    "com.apple.system.notification_center",
    "com.apple.logd",
    "com.apple.system.logger",
    "com.apple.bsd.dirhelper",
    "com.apple.cfprefsd.daemon",
    "com.apple.cfprefsd.agent",
    "com.apple.dnssd.service",
    "com.apple.SystemConfiguration.DNSConfiguration",
    "com.apple.SystemConfiguration.configd",
    "com.apple.trustd",
    "com.apple.trustd.agent",
    "com.apple.ocspd",
    "com.apple.PowerManagement.control",
    "com.apple.FSEvents",
];

/// Sysctls that must stay closed: other processes' arguments and environment, and the
/// list of every process.
pub const ESCAPE_SYSCTLS: &[&str] = &["kern.procargs2", "kern.procargs", "kern.proc.all"];

/// Sysctls tools read at start (CPU count and features, memory, OS version).
pub const NEEDED_SYSCTLS: &[&str] = &[
    "hw.ncpu",
    "hw.activecpu",
    "hw.memsize",
    "hw.pagesize",
    "hw.optional.arm.FEAT_AES",
    "hw.optional.avx2_0",
    "machdep.cpu.brand_string",
    "kern.osrelease",
    "kern.osproductversion",
    "kern.hostname",
    "kern.boottime",
    "sysctl.proc_translated",
];

/// Programs whose exec is refused for a clear error (the Mach denies are the boundary).
pub const ESCAPE_PROGRAMS: &[&str] = &[
    "/usr/bin/open",
    "/usr/bin/osascript",
    "/bin/launchctl",
    "/usr/bin/security",
    "/usr/bin/pbcopy",
    "/usr/bin/pbpaste",
];

/// The bundle id automation questions are asked about.
pub const AUTOMATION_PROBE: &str = "com.apple.Terminal";

/// A terminal that is not the session's.
pub const OTHER_TTY: &str = "/dev/ttys999";

/// The ssh-agent socket launchd makes for the person's login.
pub const SSH_AGENT_SOCKET: &str = "/private/tmp/com.apple.launchd.AbCdEf0123/Listeners";

/// Every question the deny-default profile answers beyond files, for a launch whose own
/// terminal is `tty` (`/dev/null` for a pipe session) and whose home is `home`.
pub fn questions(
    tty: Option<&[u8]>,
    home: Option<&Path>,
    network_shared: bool,
    opt_ins: &MacOptIns,
) -> Vec<Question> {
    let mut out = Vec::new();
    let mut ask = |check: &'static str, op: &'static str, target: Target, allowed: bool| {
        out.push(Question {
            check,
            op,
            target,
            expect_allowed: allowed,
        })
    };
    let s = |t: &str| t.as_bytes().to_vec();
    let path = |p: &str| Target::path(p);

    for (name, _) in ESCAPE_MACH {
        let opened = opt_ins.opens_mach(name);
        let check = if opened { "opt_in" } else { "escape" };
        ask(check, "mach-lookup", Target::Mach(s(name)), opened);
    }
    // A template naming an escape's service (`macos.mach`) does not reopen it: that
    // one is asked above as an escape, still to be denied.
    let escape = |n: &str| ESCAPE_MACH.iter().any(|(e, _)| *e == n);
    let extra = opt_ins
        .mach
        .iter()
        .map(String::as_str)
        .filter(|n| !escape(n));
    let named: Vec<&str> = extra.collect();
    for name in NEEDED_MACH.iter().copied() {
        // DNS and the certificate fetchers only with the host's network (each goes out
        // for whoever asks, a way out of any other), or when the template names one.
        let open = network_shared || !NETWORK_MACH.contains(&name) || named.contains(&name);
        ask("needed", "mach-lookup", Target::Mach(s(name)), open);
    }
    for name in named {
        ask("needed", "mach-lookup", Target::Mach(s(name)), true);
    }
    ask(
        "escape",
        "mach-register",
        Target::Mach(s("com.example.planted")),
        false,
    );
    for op in ["lsopen", "job-creation", "user-preference-write"] {
        ask("escape", op, Target::Nothing, false);
    }
    let automation = opt_ins.automation.iter().any(|a| a == AUTOMATION_PROBE);
    ask(
        if automation { "opt_in" } else { "escape" },
        "appleevent-send",
        Target::AppleEvent(s(AUTOMATION_PROBE)),
        automation,
    );
    ask(
        "escape",
        "appleevent-send",
        Target::AppleEvent(s("com.apple.systemevents")),
        opt_ins
            .automation
            .iter()
            .any(|a| a == "com.apple.systemevents"),
    );
    ask("needed", "user-preference-read", Target::Nothing, true);

    for op in ["signal", "process-info-pidinfo", "process-info-setcontrol"] {
        ask("escape", op, Target::Process(Relation::Outside), false);
        ask("needed", op, Target::Process(Relation::SameSandbox), true);
        ask("needed", op, Target::Process(Relation::Itself), true);
    }
    ask("needed", "process-fork", Target::Nothing, true);

    for name in ESCAPE_SYSCTLS {
        ask("escape", "sysctl-read", Target::Sysctl(s(name)), false);
    }
    for name in NEEDED_SYSCTLS {
        ask("needed", "sysctl-read", Target::Sysctl(s(name)), true);
    }
    ask(
        "escape",
        "sysctl-write",
        Target::Sysctl(s("kern.hostname")),
        false,
    );
    ask(
        "needed",
        "iokit-open",
        Target::IoKit(s("RootDomainUserClient")),
        true,
    );
    ask(
        "escape",
        "iokit-open",
        Target::IoKit(s("IOHIDSystem")),
        false,
    );
    ask(
        "needed",
        "system-socket",
        Target::SocketDomain(s("AF_ROUTE")),
        true,
    );
    ask(
        "escape",
        "system-socket",
        Target::SocketDomain(s("AF_SYSTEM")),
        false,
    );
    for op in [
        "ipc-posix-sem-open",
        "ipc-posix-sem-create",
        "ipc-posix-sem-post",
    ] {
        ask("needed", op, Target::PosixIpc(s("/mp-a1b2c3")), true);
    }
    ask(
        "needed",
        "ipc-posix-shm-read-data",
        Target::PosixIpc(s("apple.shm.notification_center")),
        true,
    );
    ask(
        "escape",
        "ipc-posix-shm-write-data",
        Target::PosixIpc(s("apple.shm.notification_center")),
        false,
    );
    ask(
        "escape",
        "ipc-posix-shm-read-data",
        Target::PosixIpc(s("com.example.other-app")),
        false,
    );

    // /dev: only the listed devices and the session's own terminal.
    for dev in ["/dev/null", "/dev/zero"] {
        for op in ["file-read-data", "file-write-data"] {
            ask("needed", op, path(dev), true);
        }
    }
    for dev in [
        "/dev/random",
        "/dev/urandom",
        "/dev/fd/0",
        "/dev/dtracehelper",
    ] {
        ask("needed", "file-read-data", path(dev), true);
    }
    for op in ["file-read-data", "file-write-data", "file-ioctl"] {
        ask("needed", op, path("/dev/tty"), true);
        ask("needed", op, path("/dev/ptmx"), true);
    }
    ask("needed", "pseudo-tty", Target::Nothing, true);
    if let Some(tty) = tty.filter(|t| *t != b"/dev/null") {
        for op in ["file-read-data", "file-write-data", "file-ioctl"] {
            ask("tty", op, Target::path(tty), true);
        }
    }
    if tty != Some(OTHER_TTY.as_bytes()) {
        for op in ["file-read-data", "file-write-data"] {
            ask("escape", op, path(OTHER_TTY), false);
        }
    }
    for dev in ["/dev/disk0", "/dev/rdisk0", "/dev/bpf0", "/dev/kmem"] {
        ask("escape", "file-read-data", path(dev), false);
    }

    // Programs: exec and map from the system, the escapes' front doors refused.
    for program in ["/bin/sh", "/usr/bin/git", "/usr/bin/env"] {
        ask("needed", "process-exec", path(program), true);
    }
    ask(
        "needed",
        "file-map-executable",
        path("/usr/lib/libSystem.B.dylib"),
        true,
    );
    for program in ESCAPE_PROGRAMS {
        let opened = opt_ins.opens_program(program);
        let check = if opened { "opt_in" } else { "escape" };
        ask(check, "process-exec", path(program), opened);
    }

    // Sockets: DNS's stays open, Docker's and ssh-agent's are closed wherever they are.
    ask(
        "needed",
        "network-outbound",
        Target::UnixSocket(s("/private/var/run/mDNSResponder")),
        network_shared,
    );
    let mut closed = vec![
        "/var/run/docker.sock".to_string(),
        "/private/var/run/docker.sock".to_string(),
        SSH_AGENT_SOCKET.to_string(),
    ];
    if let Some(home) = home {
        for rest in [
            ".docker/run/docker.sock",
            ".colima/default/docker.sock",
            ".orbstack/run/docker.sock",
            ".rd/docker.sock",
            ".gnupg/S.gpg-agent",
            ".ssh/agent.sock",
        ] {
            closed.push(home.join(rest).display().to_string());
        }
    }
    for socket in closed {
        ask(
            "escape",
            "network-outbound",
            Target::UnixSocket(socket.into_bytes()),
            false,
        );
    }
    if network_shared {
        ask(
            "needed",
            "file-read-data",
            path("/private/var/run/resolv.conf"),
            true,
        );
        ask("needed", "network-outbound", Target::Internet(443), true);
        ask("needed", "network-bind", Target::Localhost(3000), true);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sbpl_eval::Profile;
    use crate::sbpl_questions::answer;

    fn golden(name: &str) -> String {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../src/sandbox/testdata");
        std::fs::read_to_string(dir.join(name)).unwrap()
    }

    fn wrong(text: &str, network_shared: bool) -> Vec<String> {
        let tty = vec![("RELAY_TTY".to_string(), b"/dev/ttys003".to_vec())];
        let p = Profile::parse_with(text.as_bytes(), &tty).unwrap();
        let qs = questions(
            Some(b"/dev/ttys003"),
            Some(Path::new("/Users/ada")),
            network_shared,
            &MacOptIns::default(),
        );
        answer(&p, qs)
            .unwrap()
            .into_iter()
            .filter(|a| !a.ok())
            .map(|a| a.to_json().finish())
            .collect()
    }

    #[test]
    fn every_golden_closes_each_escape_and_keeps_each_need() {
        for name in [
            "home_rw_token_inside.sbpl",
            "deny_directory.sbpl",
            "deny_missing.sbpl",
            "escaping.sbpl",
            "network_shared_ports.sbpl",
            "tmp_spellings.sbpl",
            "read_write_file.sbpl",
        ] {
            assert_eq!(wrong(&golden(name), true), Vec::<String>::new(), "{name}");
        }
        assert_eq!(
            wrong(&golden("network_off.sbpl"), false),
            Vec::<String>::new()
        );
    }

    #[test]
    fn dropping_an_escape_deny_or_a_need_is_a_wrong_answer() {
        let text = golden("home_rw_token_inside.sbpl");
        let broken = |line: &str| {
            let start = text.find(line).unwrap_or_else(|| panic!("{line}"));
            let end = start + text[start..].find('\n').unwrap() + 1;
            let mut t = text.clone();
            t.replace_range(start..end, "");
            wrong(&t, true)
        };
        // The start flipped to `(allow default)`: what only the default closes opens.
        let flipped = wrong(&text.replacen("(deny default", "(allow default", 1), true);
        for leak in ["kern.procargs2", "\"outside\"", "/dev/ttys999", "AF_SYSTEM"] {
            assert!(
                flipped.iter().any(|l| l.contains(leak)),
                "{leak}: {flipped:?}"
            );
        }
        let f = broken("(allow mach-lookup (global-name \"com.apple.trustd\"))");
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].contains("\"needed\""), "{f:?}");
        let f = broken("(allow signal (target same-sandbox))");
        assert!(f.iter().all(|l| l.contains("\"signal\"")), "{f:?}");
        // Docker's socket in a read-write home: closed by two patterns; drop both.
        let mut t = text.clone();
        for line in [
            "(deny network-outbound (remote unix-socket (path-regex #\"/docker\\.sock$\")))\n",
            "(deny network-outbound (remote unix-socket (path-regex #\"/\\.docker/\")))\n",
        ] {
            assert!(t.contains(line), "{line}");
            t = t.replacen(line, "", 1);
        }
        let f = wrong(&t, true);
        assert!(
            f.iter().any(|l| l.contains(".docker/run/docker.sock")),
            "{f:?}"
        );
        let f = broken("(deny process-exec* (literal \"/usr/bin/osascript\"))");
        assert!(f.iter().any(|l| l.contains("/usr/bin/osascript")), "{f:?}");
    }

    #[test]
    fn a_template_naming_launchservicesd_does_not_reopen_it() {
        let text = golden("macos_opt_ins.sbpl");
        let opt = MacOptIns {
            keychain: true,
            clipboard: false,
            automation: vec![AUTOMATION_PROBE.to_string()],
            mach: vec![
                "com.apple.coreservices.launchservicesd".to_string(),
                "com.example.helper".to_string(),
            ],
        };
        let wrong = |text: &str| {
            let tty = vec![("RELAY_TTY".to_string(), b"/dev/null".to_vec())];
            let p = Profile::parse_with(text.as_bytes(), &tty).unwrap();
            answer(&p, questions(None, None, true, &opt))
                .unwrap()
                .into_iter()
                .filter(|a| !a.ok())
                .map(|a| a.to_json().finish())
                .collect::<Vec<_>>()
        };
        assert_eq!(wrong(&text), Vec::<String>::new());
        let guard = "(deny mach-lookup (global-name \"com.apple.coreservices.launchservicesd\"))";
        let start = text.find(guard).unwrap();
        let end = start + text[start..].find('\n').unwrap() + 1;
        let mut broken = text.clone();
        broken.replace_range(start..end, "");
        let f = wrong(&broken);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].contains("\"escape\"") && f[0].contains("launchservicesd"),
            "{f:?}"
        );
    }

    #[test]
    fn opt_ins_turn_their_escapes_into_needs() {
        let opt = MacOptIns {
            keychain: true,
            automation: vec![AUTOMATION_PROBE.to_string()],
            ..MacOptIns::default()
        };
        let qs = questions(None, None, false, &opt);
        let expect = |op: &str, target: Target| {
            qs.iter()
                .find(|q| q.op == op && q.target == target)
                .map(|q| (q.check, q.expect_allowed))
        };
        let mach = |n: &str| Target::Mach(n.as_bytes().to_vec());
        assert_eq!(
            expect("mach-lookup", mach("com.apple.SecurityServer")),
            Some(("opt_in", true))
        );
        assert_eq!(
            expect("mach-lookup", mach("com.apple.pasteboard.1")),
            Some(("escape", false))
        );
        assert_eq!(
            expect(
                "appleevent-send",
                Target::AppleEvent(b"com.apple.Terminal".to_vec())
            ),
            Some(("opt_in", true))
        );
        assert_eq!(
            expect(
                "appleevent-send",
                Target::AppleEvent(b"com.apple.systemevents".to_vec())
            ),
            Some(("escape", false))
        );
        assert_eq!(
            expect("process-exec", Target::path("/usr/bin/security")),
            Some(("opt_in", true))
        );
    }
}
