//! The sandbox policy: one neutral spec, two renderers.
//!
//! - [`policy`]: the [`Spec`] the daemon builds per launch — ordered grants, a deny set
//!   that always wins, network, working directory.
//! - [`resolve`](mod@resolve): from template and settings strings to resolved paths,
//!   following symlinks by hand and refusing the links a session could have planted.
//! - [`seatbelt`]: the SBPL profile for macOS `sandbox-exec`.
//! - [`bwrap`]: the argument list for Linux bubblewrap.
//! - [`explain`]: the spec in words, per backend (the Settings page, `relay sandbox
//!   explain`).
//! - [`exec_list`]: the execution-bearing names every sandbox holds read-only, as data.
//! - [`egress_rules`]: a proxied sandbox's egress allowlist, parsed; the proxy in
//!   `src/daemon/egress/` asks it.
//!
//! Both renderers are pure: the filesystem is read once, while resolving, so what the
//! profile says is exactly what the goldens under `testdata/` show.

pub mod bwrap;
pub mod egress_rules;
pub mod exec_list;
pub mod explain;
pub mod policy;
pub mod resolve;
pub mod seatbelt;

pub use bwrap::render_bwrap;
pub use policy::{Access, Grant, Network, PathKind, ResolvedPath, Spec};
pub use resolve::{build_spec, is_user_writable, resolve, Ids, PathError, Role, SpecInput};
pub use seatbelt::{
    render_sbpl, render_sbpl_on, render_sbpl_with, sbpl_string, HostPaths, MacOptIns,
};

/// The bwrap profile file format (NUL-terminated arguments), shared with the shim that reads it.
pub use relay_shim::bwrap_profile;

/// Golden files: what a person sees in a profile, frozen byte for byte.
/// `UPDATE_GOLDEN=1 cargo test --lib sandbox` rewrites them.
#[cfg(test)]
mod golden {
    use super::*;
    use std::path::{Path, PathBuf};

    #[derive(Clone, Copy)]
    enum Os {
        Mac,
        Linux,
    }

    impl Os {
        fn home(self) -> &'static str {
            match self {
                Os::Mac => "/Users/ada",
                Os::Linux => "/home/ada",
            }
        }

        fn config_dir(self) -> String {
            match self {
                Os::Mac => "/Users/ada/Library/Application Support/relay".into(),
                Os::Linux => "/home/ada/.config/relay".into(),
            }
        }

        /// The session's temp dir, as the daemon would write it and as it resolves.
        fn temp_dir(self) -> ResolvedPath {
            match self {
                Os::Mac => ResolvedPath::fixed(
                    "/var/folders/zz/zyxvpxvq6csfxvn_n0000000000000/T/relay-s1",
                    "/private/var/folders/zz/zyxvpxvq6csfxvn_n0000000000000/T/relay-s1",
                    PathKind::Dir,
                ),
                Os::Linux => ResolvedPath::fixed("/tmp/relay-s1", "/tmp/relay-s1", PathKind::Dir),
            }
        }

        /// A `/tmp` path in both spellings (only macOS has the `/private` link).
        fn tmp(self, rest: &str) -> (String, String) {
            match self {
                Os::Mac => (format!("/tmp/{rest}"), format!("/private/tmp/{rest}")),
                Os::Linux => (format!("/tmp/{rest}"), format!("/tmp/{rest}")),
            }
        }
    }

    fn same(path: impl Into<PathBuf>, kind: PathKind) -> ResolvedPath {
        let path = path.into();
        ResolvedPath::fixed(path.clone(), path, kind)
    }

    fn grant(path: ResolvedPath, access: Access) -> Grant {
        Grant { path, access }
    }

    fn session_dir(os: Os) -> PathBuf {
        Path::new(os.home()).join("src/demo")
    }

    fn base(os: Os, grants: Vec<Grant>, deny: Vec<ResolvedPath>) -> Spec {
        Spec {
            grants,
            deny,
            read_only: vec![],
            state: vec![],
            deny_unix_sockets: vec![],
            network: Network::Shared {
                denied_loopback_ports: vec![],
            },
            workdir: session_dir(os),
            interactive: true,
            file_mask: "/dev/null".into(),
        }
    }

    /// The `claude-code` template granting `~` read-write with the token inside it,
    /// `~/.config` read, plus the session dir and its temp dir; the daemon's denies.
    fn home_rw_token_inside(os: Os) -> Spec {
        let home = Path::new(os.home());
        let config = os.config_dir();
        let mut spec = base(
            os,
            vec![
                grant(same(home.join(".config"), PathKind::Dir), Access::Read),
                grant(same(home, PathKind::Dir), Access::ReadWrite),
                grant(same(session_dir(os), PathKind::Dir), Access::ReadWrite),
                grant(os.temp_dir(), Access::ReadWrite),
            ],
            vec![
                same(home.join(".config/acme-ltt/token"), PathKind::File),
                same(&config, PathKind::Dir),
                same(format!("{config}/sessions/s1/profile.sb"), PathKind::File),
            ],
        );
        spec.deny_unix_sockets = vec![
            PathBuf::from(format!("{config}/relay.sock")),
            PathBuf::from(format!("{config}/sessions/host.sock")),
        ];
        spec
    }

    /// A template deny of a directory inside the session dir; a pipe session.
    fn deny_directory(os: Os) -> Spec {
        let mut spec = base(
            os,
            vec![grant(
                same(session_dir(os), PathKind::Dir),
                Access::ReadWrite,
            )],
            vec![same(session_dir(os).join("secrets"), PathKind::Dir)],
        );
        spec.interactive = false;
        spec
    }

    /// A deny of a path that does not exist (yet): SBPL denies it, bwrap cannot.
    fn deny_missing(os: Os) -> Spec {
        base(
            os,
            vec![grant(
                same(session_dir(os), PathKind::Dir),
                Access::ReadWrite,
            )],
            vec![
                same(session_dir(os).join(".env"), PathKind::Missing),
                same(session_dir(os).join(".env.local"), PathKind::File),
            ],
        )
    }

    /// Paths that need escaping, including one written to break out of its string.
    fn escaping(os: Os) -> Spec {
        let home = Path::new(os.home());
        let (written, canonical) = os.tmp(r#"a") (allow file-read* (subpath "/"#);
        let mut spec = base(
            os,
            vec![
                grant(same(home.join("we\"ird dir"), PathKind::Dir), Access::Read),
                grant(
                    same(home.join(r"back\slash"), PathKind::Dir),
                    Access::ReadWrite,
                ),
            ],
            vec![
                same(home.join("new\nline"), PathKind::File),
                same(home.join("tab\there\u{1}ctl"), PathKind::Dir),
                ResolvedPath::fixed(written, canonical, PathKind::Dir),
            ],
        );
        spec.deny_unix_sockets = vec![home.join("sock\"et")];
        spec
    }

    fn network_off(os: Os) -> Spec {
        let mut spec = base(
            os,
            vec![grant(
                same(session_dir(os), PathKind::Dir),
                Access::ReadWrite,
            )],
            vec![],
        );
        spec.network = Network::Off;
        spec.interactive = false;
        spec
    }

    /// The default network: bwrap's namespace with the session's proxy socket bound in,
    /// Seatbelt's one proxy port and a routing gateway's loopback port.
    fn network_proxied(os: Os) -> Spec {
        let mut spec = network_off(os);
        let egress = vec![
            "api.anthropic.com".to_string(),
            "127.0.0.1:4000".to_string(),
        ];
        spec.network = match os {
            Os::Mac => Network::ProxiedPort {
                port: 49152,
                bridges: vec![4000],
                egress,
            },
            _ => Network::Proxied {
                socket: "/home/ada/.config/relay/egress/s-0123456789ab.sock".into(),
                egress,
            },
        };
        spec
    }

    fn network_shared_ports(os: Os) -> Spec {
        let mut spec = base(
            os,
            vec![grant(
                same(session_dir(os), PathKind::Dir),
                Access::ReadWrite,
            )],
            vec![],
        );
        spec.network = Network::Shared {
            denied_loopback_ports: vec![5432, 8080],
        };
        spec
    }

    /// macOS's `/tmp` is a link to `/private/tmp`: SBPL names both, bwrap the real one.
    fn tmp_spellings(_os: Os) -> Spec {
        let os = Os::Mac;
        let (written, canonical) = os.tmp("x");
        let mut spec = base(
            os,
            vec![grant(
                ResolvedPath::fixed(&written, &canonical, PathKind::Dir),
                Access::ReadWrite,
            )],
            vec![ResolvedPath::fixed(
                format!("{written}/token"),
                format!("{canonical}/token"),
                PathKind::File,
            )],
        );
        spec.workdir = PathBuf::from(written);
        spec
    }

    /// Files granted read-write get their atomic-write siblings (where the path can be a
    /// regex); a read-only file does not.
    fn read_write_file(os: Os) -> Spec {
        let home = Path::new(os.home());
        base(
            os,
            vec![
                grant(same(home.join(".gitconfig"), PathKind::File), Access::Read),
                grant(
                    same(home.join(".claude.json"), PathKind::File),
                    Access::ReadWrite,
                ),
                grant(
                    same(home.join("we\"ird.json"), PathKind::File),
                    Access::ReadWrite,
                ),
                grant(same(session_dir(os), PathKind::Dir), Access::ReadWrite),
            ],
            vec![],
        )
    }

    type Case = (&'static str, fn(Os) -> Spec);

    const CASES: &[Case] = &[
        ("home_rw_token_inside", home_rw_token_inside),
        ("deny_directory", deny_directory),
        ("deny_missing", deny_missing),
        ("escaping", escaping),
        ("network_off", network_off),
        ("network_proxied", network_proxied),
        ("network_shared_ports", network_shared_ports),
        ("tmp_spellings", tmp_spellings),
        ("read_write_file", read_write_file),
    ];

    /// One argument per line. `\` is doubled, newline and tab read `\n` and `\t`, other
    /// control characters `\xHH`, so every argument stays on its line, visibly.
    fn bwrap_golden(args: &[String]) -> String {
        let mut out = String::new();
        for arg in args {
            for c in arg.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\t' => out.push_str("\\t"),
                    c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                        out.push_str(&format!("\\x{:02x}", c as u32))
                    }
                    c => out.push(c),
                }
            }
            out.push('\n');
        }
        out
    }

    fn check(name: &str, actual: &str) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/sandbox/testdata")
            .join(name);
        if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, actual).unwrap();
            return;
        }
        let expected = std::fs::read(&path).unwrap_or_else(|err| {
            panic!(
                "{}: {err} (UPDATE_GOLDEN=1 cargo test --lib sandbox writes it)",
                path.display()
            )
        });
        assert!(
            expected == actual.as_bytes(),
            "{name} differs from its golden file (UPDATE_GOLDEN=1 rewrites it)\n\
             --- golden\n{}\n--- rendered\n{actual}",
            String::from_utf8_lossy(&expected)
        );
    }

    /// The Mac the goldens are rendered for: Xcode installed, the usual temp folder.
    fn mac_host() -> HostPaths {
        HostPaths {
            developer_dir: Some("/Applications/Xcode.app/Contents/Developer".into()),
            user_temp_dir: Some("/private/var/folders/zz/zyxvpxvq6csfxvn_n0000000000000/T".into()),
        }
    }

    #[test]
    fn sbpl_goldens() {
        for (name, case) in CASES {
            let profile = render_sbpl_on(&case(Os::Mac), &mac_host());
            seatbelt::tests::tokenize(&profile).unwrap_or_else(|e| panic!("{name}: {e}"));
            check(&format!("{name}.sbpl"), &profile);
        }
    }

    /// A template's macOS opt-ins: the keychain, Apple Events to Terminal, and two named
    /// Mach services, one of them an escape's (which stays closed).
    #[test]
    fn sbpl_golden_with_opt_ins() {
        let opt_ins = MacOptIns {
            keychain: true,
            clipboard: false,
            automation: vec!["com.apple.Terminal".into()],
            mach: vec![
                "com.apple.coreservices.launchservicesd".into(),
                "com.example.helper".into(),
            ],
        };
        let profile = render_sbpl_with(&network_shared_ports(Os::Mac), &mac_host(), &opt_ins);
        seatbelt::tests::tokenize(&profile).unwrap();
        check("macos_opt_ins.sbpl", &profile);
    }

    #[test]
    fn bwrap_goldens() {
        for (name, case) in CASES {
            check(
                &format!("{name}.bwrap"),
                &bwrap_golden(&render_bwrap(&case(Os::Linux))),
            );
        }
    }

    #[test]
    fn golden_token_case_denies_the_token_after_every_allow() {
        let profile = render_sbpl(&home_rw_token_inside(Os::Mac));
        let lines: Vec<&str> = profile.lines().collect();
        // The last allow that can open a file: the socket and opt-in allows name none.
        let last_allow = lines
            .iter()
            .rposition(|l| l.starts_with("(allow") && l.contains("file-"))
            .unwrap();
        let token_denies: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].starts_with("(deny") && lines[i].contains("acme-ltt/token"))
            .collect();
        assert!(!token_denies.is_empty());
        assert!(token_denies.iter().all(|&i| i > last_allow), "{profile}");
    }
}
