//! The shield: on a token launch under bubblewrap, Claude Code runs every Bash command
//! through relay's own `relay-shim --shield` (`CLAUDE_CODE_SHELL_PREFIX`), which puts
//! the command in a Landlock domain nested below Claude's, so that nothing a tool runs
//! can read Claude's memory, where the token is, signal Claude or relay's forwarder, or
//! listen on a TCP port Claude's requests go to
//! (docs/THREAT-MODEL.md#claudes-tools-cannot-reach-claude; the shim's side is
//! `shim/src/shield.rs`). The shim is the file relay opened at start, bound read-only at
//! its own path in every sandbox, its folder pinned: no session can put another program
//! in its place.
//!
//! A template's `listen_ports` are the TCP ports its tools may listen on after all
//! (`--shield-listen=PORTS`, in the same variable: a settings layer cannot replace it,
//! `claude_settings::check_files`); never one the forwarder holds.
//!
//! Where the kernel has no Landlock ABI 6 the launch still runs, unshielded, as every
//! launch did before: its audit row says `"shield": false`, its explanation says why and
//! what that leaves, and `relay doctor`'s `shield` check warns.

use std::collections::BTreeMap;
use std::path::Path;

use crate::daemon::egress::{self, Rules};
use crate::protocol::Backend;
use relay_shim::landlock::MIN_SHIELD_ABI;

/// The variable Claude Code runs each Bash command through.
pub const PREFIX_VAR: &str = "CLAUDE_CODE_SHELL_PREFIX";

/// The Landlock ABI the shield runs on for launches under `backend` here, or why it
/// cannot.
pub fn available(backend: Backend) -> Result<u32, String> {
    if backend != Backend::Bwrap || !cfg!(target_os = "linux") {
        return Err(
            "no Landlock under Seatbelt: on macOS what keeps Claude's memory from \
                    its tools is the kernel's task_for_pid rules"
                .into(),
        );
    }
    enough(relay_shim::landlock::abi_version())
}

/// The kernel's Landlock ABI, when the shield can run on it, from the kernel's answer.
fn enough(abi: std::io::Result<u32>) -> Result<u32, String> {
    match abi {
        Ok(abi) if abi >= MIN_SHIELD_ABI => Ok(abi),
        Ok(abi) => Err(format!(
            "this kernel's Landlock ABI is {abi}; the shield needs {MIN_SHIELD_ABI} (Linux 6.12)"
        )),
        Err(e) => Err(format!("Landlock is not available on this kernel ({e})")),
    }
}

/// `CLAUDE_CODE_SHELL_PREFIX` for the shim at `shim`: its path, then `--shield`, or
/// `--shield-listen=PORTS` when the tools may listen on `listen`. Claude Code quotes what
/// comes before the last ` -` as the program and passes the rest as it is, so the flag
/// must be one word starting with `-`.
fn prefix(shim: &Path, listen: &[u16]) -> Option<String> {
    let shim = shim.to_str()?;
    if listen.is_empty() {
        return Some(format!("{shim} --shield"));
    }
    let ports: Vec<String> = listen.iter().map(u16::to_string).collect();
    Some(format!("{shim} --shield-listen={}", ports.join(",")))
}

/// The loopback ports a token launch's tools must never listen on: those the
/// forwarder holds for `egress` (a proxied bwrap sandbox's rules), and the port of each
/// loopback address the launch's routing variables name (`ANTHROPIC_BASE_URL=
/// http://127.0.0.1:4000`: in a sandbox on the host's network, Claude's gateway itself),
/// from `template_env`, else relay's own environment, as the egress list takes them.
pub fn reserved_ports(
    egress: Option<&Rules>,
    template_env: &BTreeMap<String, String>,
    relay_routing: &BTreeMap<String, String>,
) -> Vec<u16> {
    reserved_with(egress, template_env, |name| {
        relay_routing.get(name).cloned()
    })
}

/// [`reserved_ports`], relay's environment read through `relay_env` (the tests' seam).
fn reserved_with(
    egress: Option<&Rules>,
    template_env: &BTreeMap<String, String>,
    relay_env: impl Fn(&str) -> Option<String>,
) -> Vec<u16> {
    let mut ports = egress.map(egress::held_ports).unwrap_or_default();
    let mut routing = BTreeMap::new();
    for name in egress::ROUTING_URL_VARS {
        let value = template_env.get(*name).cloned().or_else(|| relay_env(name));
        if let Some(v) = value {
            routing.insert(name.to_string(), v);
        }
    }
    let entries = egress::routing_entries(&routing);
    for b in Rules::parse(&entries)
        .map(|r| r.bridges())
        .unwrap_or_default()
    {
        if !ports.contains(&b.port()) {
            ports.push(b.port());
        }
    }
    ports
}

/// Whether a token launch's tools are shielded, and the explanation's note saying so.
pub struct Shielded {
    pub in_force: bool,
    pub note: String,
}

/// A token launch's shield: sets [`PREFIX_VAR`] in `env` (over the template's) to the
/// shim at `shim` (its path inside the sandbox) when the shield holds under `backend`,
/// its tools allowed to listen on the template's `listen` ports but the `reserved` ones
/// ([`reserved_ports`]), which are left out and named.
pub fn apply(
    backend: Backend,
    shim: Result<&Path, &str>,
    (listen, reserved): (&[u16], &[u16]),
    env: &mut BTreeMap<String, String>,
) -> Shielded {
    let mut allowed: Vec<u16> = Vec::new();
    let mut left_out: Vec<u16> = Vec::new();
    for &p in listen {
        let to = if reserved.contains(&p) {
            &mut left_out
        } else {
            &mut allowed
        };
        if !to.contains(&p) {
            to.push(p);
        }
    }
    let value = available(backend).and_then(|abi| {
        let shim = shim.map_err(str::to_string)?;
        let value = prefix(shim, &allowed).ok_or_else(|| {
            format!(
                "relay-shim's path is not UTF-8 ({}), so Claude Code cannot be given it",
                shim.display()
            )
        })?;
        Ok((abi, value))
    });
    let words = |ports: &[u16]| {
        let p: Vec<String> = ports.iter().map(u16::to_string).collect();
        p.join(", ")
    };
    match value {
        Ok((abi, value)) => {
            env.insert(PREFIX_VAR.into(), value);
            let listening = if allowed.is_empty() {
                "listen on any TCP port".to_string()
            } else {
                format!(
                    "listen on a TCP port but the template's listen_ports ({})",
                    words(&allowed)
                )
            };
            let mut note = format!(
                "Claude's tools are shielded: every Bash command runs through relay-shim \
                 --shield ({PREFIX_VAR}) in a Landlock domain of its own (ABI {abi}), so none \
                 can read Claude's memory, signal a process outside its own command (Claude, \
                 relay's egress forwarder, a job an earlier command left running), or \
                 {listening} (docs/THREAT-MODEL.md)"
            );
            if !left_out.is_empty() {
                note.push_str(&format!(
                    "; listen_ports {} left out: Claude's traffic goes there",
                    words(&left_out)
                ));
            }
            Shielded {
                in_force: true,
                note,
            }
        }
        Err(why) => Shielded {
            in_force: false,
            note: unshielded(backend, &why, &words(listen)),
        },
    }
}

/// The note of a token launch whose tools are not shielded for `why`: what is not in
/// force under `backend`, and that the template's listen ports (`listen`, in words)
/// change nothing.
fn unshielded(backend: Backend, why: &str, listen: &str) -> String {
    let leaves = if backend == Backend::Bwrap {
        "a Bash command can read Claude's memory, the token with it, signal Claude and \
         relay's egress forwarder, and listen on any port, the one Claude's requests go to \
         included; a forwarder that dies still stops its session"
    } else {
        "a Bash command can still signal Claude (a denial of service, not a read) and \
         listen where its network allows; relay holds its proxy port itself"
    };
    let mut note =
        format!("Claude's tools are not shielded: {why}; {leaves} (docs/THREAT-MODEL.md)");
    if !listen.is_empty() {
        note.push_str(&format!("; listen_ports ({listen}) changes nothing here"));
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_is_the_shims_path_then_one_flag() {
        let mut env = BTreeMap::from([(PREFIX_VAR.to_string(), "/the/templates".to_string())]);
        let shim = Path::new("/opt/relay -x/bin/relay-shim");
        let s = apply(Backend::Bwrap, Ok(shim), (&[], &[]), &mut env);
        // Under bwrap the shield is the kernel's Landlock, from ABI 6 on.
        let kernel = relay_shim::landlock::abi_version()
            .ok()
            .filter(|abi| *abi >= MIN_SHIELD_ABI);
        assert_eq!(available(Backend::Bwrap).ok(), kernel);
        match available(Backend::Bwrap) {
            Ok(abi) => {
                assert!(s.in_force, "{}", s.note);
                assert!(s.note.contains(&format!("ABI {abi}")), "{}", s.note);
                assert!(s.note.contains("listen on any TCP port"), "{}", s.note);
                // Claude Code splits at the last ` -`: the path before it, the flag after.
                let v = &env[PREFIX_VAR];
                let at = v.rfind(" -").unwrap();
                assert_eq!(
                    (&v[..at], &v[at + 1..]),
                    (shim.to_str().unwrap(), "--shield")
                );
            }
            Err(why) => {
                assert!(!s.in_force);
                assert!(s.note.contains(&why), "{}", s.note);
                assert_eq!(env[PREFIX_VAR], "/the/templates");
            }
        }
        let mut env = BTreeMap::new();
        let s = apply(Backend::Seatbelt, Ok(shim), (&[], &[]), &mut env);
        assert!(!s.in_force && env.is_empty(), "{}", s.note);
        assert!(s.note.contains("task_for_pid"), "{}", s.note);
        assert!(s.note.contains("signal Claude"), "{}", s.note);
        assert!(!s.note.contains("listen_ports"), "{}", s.note);
        assert!(
            s.note.contains("relay holds its proxy port itself"),
            "{}",
            s.note
        );
        let s = apply(Backend::Bwrap, Err("no shim"), (&[], &[]), &mut env);
        assert!(!s.in_force && env.is_empty(), "{}", s.note);
        assert_eq!(
            s.note,
            "Claude's tools are not shielded: no shim; a Bash command can read Claude's \
             memory, the token with it, signal Claude and relay's egress forwarder, and \
             listen on any port, the one Claude's requests go to included; a forwarder that \
             dies still stops its session (docs/THREAT-MODEL.md)"
        );
        // Not in force, a template's ports change nothing, and the note says so.
        let s = apply(Backend::Seatbelt, Ok(shim), (&[3000], &[]), &mut env);
        assert!(
            s.note
                .ends_with("; listen_ports (3000) changes nothing here"),
            "{}",
            s.note
        );
    }

    #[test]
    fn the_listen_ports_ride_the_prefix_but_the_reserved_ones() {
        let shim = Path::new("/opt/relay/bin/relay-shim");
        assert_eq!(
            prefix(shim, &[]).unwrap(),
            "/opt/relay/bin/relay-shim --shield"
        );
        assert_eq!(
            prefix(shim, &[3000, 0]).unwrap(),
            "/opt/relay/bin/relay-shim --shield-listen=3000,0"
        );
        if available(Backend::Bwrap).is_err() {
            return;
        }
        let mut env = BTreeMap::new();
        let s = apply(
            Backend::Bwrap,
            Ok(shim),
            (&[3000, 4000, 5173, 3000, 4000], &[3128, 4000]),
            &mut env,
        );
        assert!(s.in_force, "{}", s.note);
        assert_eq!(
            env[PREFIX_VAR],
            "/opt/relay/bin/relay-shim --shield-listen=3000,5173"
        );
        assert!(
            s.note
                .contains("listen on a TCP port but the template's listen_ports (3000, 5173)"),
            "{}",
            s.note
        );
        assert!(
            s.note
                .ends_with("; listen_ports 4000 left out: Claude's traffic goes there"),
            "{}",
            s.note
        );
        // Every one reserved: none at all.
        let s = apply(Backend::Bwrap, Ok(shim), (&[4000], &[4000]), &mut env);
        assert_eq!(env[PREFIX_VAR], "/opt/relay/bin/relay-shim --shield");
        assert!(s.note.contains("listen on any TCP port"), "{}", s.note);
    }

    #[test]
    fn the_reserved_ports_are_the_forwarders_and_the_gateways() {
        let rules = Rules::parse(&["127.0.0.1:5432".to_string()]).unwrap();
        let env = BTreeMap::from([(
            "ANTHROPIC_BASE_URL".to_string(),
            "http://127.0.0.1:4000/v1".to_string(),
        )]);
        let none = |_: &str| None;
        assert_eq!(
            reserved_with(Some(&rules), &env, none),
            vec![3128, 5432, 4000]
        );
        // No forwarder (the host's network): the gateway's port alone.
        assert_eq!(reserved_with(None, &env, none), vec![4000]);
        // A gateway that is no loopback address holds no port here.
        let remote = BTreeMap::from([(
            "CLAUDE_CODE_API_BASE_URL".to_string(),
            "https://gw.example.com".to_string(),
        )]);
        assert_eq!(reserved_with(None, &remote, none), Vec::<u16>::new());
        // Each port once.
        let same = Rules::parse(&["127.0.0.1:4000".to_string()]).unwrap();
        assert_eq!(reserved_with(Some(&same), &env, none), vec![3128, 4000]);
        // relay's own routing variable counts where the template sets none.
        let relays = |name: &str| {
            (name == "CLAUDE_CODE_API_BASE_URL").then(|| "http://[::1]:8082".to_string())
        };
        assert_eq!(reserved_with(None, &env, relays), vec![4000, 8082]);
        let over = BTreeMap::from([
            (
                "ANTHROPIC_BASE_URL".to_string(),
                "http://127.0.0.1:4000".to_string(),
            ),
            (
                "CLAUDE_CODE_API_BASE_URL".to_string(),
                "http://127.0.0.1:4001".to_string(),
            ),
        ]);
        assert_eq!(reserved_with(None, &over, relays), vec![4000, 4001]);
        // The one relay reads: the template's two variables set, relay's own is not read.
        assert_eq!(
            reserved_ports(Some(&rules), &over, &BTreeMap::new()),
            vec![3128, 5432, 4000, 4001]
        );
    }

    #[test]
    fn the_shield_needs_landlock_abi_6() {
        assert_eq!(enough(Ok(MIN_SHIELD_ABI)), Ok(MIN_SHIELD_ABI));
        assert_eq!(enough(Ok(MIN_SHIELD_ABI + 1)), Ok(MIN_SHIELD_ABI + 1));
        let e = enough(Ok(MIN_SHIELD_ABI - 1)).unwrap_err();
        assert!(e.contains(&format!("ABI is {}", MIN_SHIELD_ABI - 1)), "{e}");
        let e = enough(Err(std::io::ErrorKind::Unsupported.into())).unwrap_err();
        assert!(e.contains("not available"), "{e}");
    }
}
