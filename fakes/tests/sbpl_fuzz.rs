//! Property tests of relay's SBPL rendering against this crate's evaluator
//! (docs/testing.md#fuzzing): `cargo test -p relay-fakes --test sbpl_fuzz`.
//!
//! A profile is rendered with grant, deny and socket paths holding any bytes at all
//! (quotes, backslashes, newlines, parentheses, semicolons, `#"`, control and non-UTF-8
//! bytes), read back by the evaluator, and checked: it parses, it holds exactly the
//! rules the renderer wrote (one per line), and it decides as the spec says. No path can
//! end its string literal or add a rule.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use proptest::prelude::*;
use relay::sandbox::{
    render_sbpl_on, Access, Grant, HostPaths, Network, PathKind, ResolvedPath, Spec,
};
use relay_fakes::sbpl_eval::{Profile, Target};

/// One path component: any bytes but `/` and NUL, weighted towards the ones that could
/// break out of a literal.
fn component() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        3 => prop::sample::select(b"\"\\\n\t\r()#;| ^$.*+?[]{}\x01\x1b\x7f".to_vec()),
        2 => any::<u8>().prop_filter("no / or NUL", |b| *b != b'/' && *b != 0),
    ];
    proptest::collection::vec(byte, 1..24)
}

fn path(prefix: &str, adversarial: &[u8]) -> PathBuf {
    let mut bytes = format!("/home/ada/{prefix}").into_bytes();
    bytes.extend_from_slice(adversarial);
    PathBuf::from(OsString::from_vec(bytes))
}

fn same(path: PathBuf, kind: PathKind) -> ResolvedPath {
    ResolvedPath::fixed(path.clone(), path, kind)
}

fn allows(p: &Profile, op: &str, target: Target) -> bool {
    p.allows(op, &target).expect("a concrete operation")
}

proptest! {
    #[test]
    fn no_path_can_end_its_string_or_add_a_rule(
        granted in component(),
        denied in component(),
        socket in component(),
        read in component(),
    ) {
        let file = path("g-", &granted);
        let gone = path("d-", &denied);
        let sock = path("s-", &socket);
        let readable = path("r-", &read);
        let spec = Spec {
            grants: vec![
                Grant { path: same(readable.clone(), PathKind::Dir), access: Access::Read },
                Grant { path: same(file.clone(), PathKind::File), access: Access::ReadWrite },
                Grant { path: same("/home/ada/src/demo".into(), PathKind::Dir), access: Access::ReadWrite },
            ],
            deny: vec![
                same("/home/ada/.config/relay".into(), PathKind::Dir),
                same(gone.clone(), PathKind::Dir),
            ],
            read_only: vec![],
            state: vec![],
            deny_unix_sockets: vec![sock.clone()],
            network: Network::Shared { denied_loopback_ports: vec![4850] },
            workdir: "/home/ada/src/demo".into(),
            interactive: true,
            file_mask: "/dev/null".into(),
        };
        let text = render_sbpl_on(&spec, &HostPaths::default());
        let tty = vec![("RELAY_TTY".to_string(), b"/dev/ttys003".to_vec())];
        let profile = Profile::parse_with(text.as_bytes(), &tty)
            .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        // Every rule the renderer wrote is one line starting with `(`; the evaluator
        // read exactly those.
        let written = text.lines().filter(|l| l.starts_with('(')).count() - 1;
        prop_assert_eq!(profile.rule_count(), written, "{}", text);

        let bytes = |p: &PathBuf| p.as_os_str().as_bytes().to_vec();
        let under = |p: &PathBuf, rest: &str| {
            let mut b = bytes(p);
            b.extend_from_slice(rest.as_bytes());
            b
        };
        // The grants hold, on exactly their paths.
        prop_assert!(allows(&profile, "file-write-data", Target::path(bytes(&file))));
        prop_assert!(allows(&profile, "file-read-data", Target::path(under(&readable, "/x"))));
        prop_assert!(!allows(&profile, "file-write-data", Target::path(under(&readable, "/x"))));
        prop_assert!(!allows(&profile, "file-write-data", Target::path(under(&file, "x"))));
        prop_assert!(!allows(&profile, "file-write-data", Target::path("/home/ada/outside")));
        // The atomic writer's siblings: exactly when the path could be a regex.
        let regex_ok = file.to_str().is_some_and(|t| !t.chars().any(|c| c == '"' || c.is_control()));
        prop_assert_eq!(
            allows(&profile, "file-write-data", Target::path(under(&file, ".lock"))),
            regex_ok
        );
        // The denies hold after every grant.
        prop_assert!(!allows(&profile, "file-read-data", Target::path(bytes(&gone))));
        prop_assert!(!allows(&profile, "file-read-data", Target::path(under(&gone, "/x"))));
        prop_assert!(!allows(&profile, "file-read-data", Target::path("/home/ada/.config/relay/settings.json")));
        prop_assert!(!allows(&profile, "network-outbound", Target::UnixSocket(bytes(&sock))));
        prop_assert!(!allows(&profile, "network-outbound", Target::Localhost(4850)));
    }
}
