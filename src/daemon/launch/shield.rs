//! The shield: on a token launch under bubblewrap, Claude Code runs every Bash command
//! through relay's own `relay-shim --shield` (`CLAUDE_CODE_SHELL_PREFIX`), which puts
//! the command in a Landlock domain nested below Claude's, so that nothing a tool runs
//! can read Claude's memory, where the token is (docs/THREAT-MODEL.md#claudes-tools-cannot-read-claude;
//! the shim's side is `shim/src/shield.rs`). The shim is the file relay opened at start,
//! bound read-only at its own path in every sandbox, its folder pinned: no session can
//! put another program in its place.
//!
//! Where the kernel has no Landlock ABI 6 the launch still runs, unshielded, as every
//! launch did before: its audit row says `"shield": false`, its explanation says why,
//! and `relay doctor`'s `shield` check warns.

use std::collections::BTreeMap;
use std::path::Path;

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

/// `CLAUDE_CODE_SHELL_PREFIX` for the shim at `shim`: its path, then `--shield`.
/// Claude Code quotes what comes before the last ` -` as the program and passes the rest
/// as it is, so the flag must be one word starting with `-`.
fn prefix(shim: &Path) -> Option<String> {
    shim.to_str().map(|s| format!("{s} --shield"))
}

/// Whether a token launch's tools are shielded, and the explanation's note saying so.
pub struct Shielded {
    pub in_force: bool,
    pub note: String,
}

/// A token launch's shield: sets [`PREFIX_VAR`] in `env` (over the template's) to the
/// shim at `shim` (its path inside the sandbox) when the shield holds under `backend`.
pub fn apply(
    backend: Backend,
    shim: Result<&Path, &str>,
    env: &mut BTreeMap<String, String>,
) -> Shielded {
    let value = available(backend).and_then(|abi| {
        let shim = shim.map_err(str::to_string)?;
        let value = prefix(shim).ok_or_else(|| {
            format!(
                "relay-shim's path is not UTF-8 ({}), so Claude Code cannot be given it",
                shim.display()
            )
        })?;
        Ok((abi, value))
    });
    match value {
        Ok((abi, value)) => {
            env.insert(PREFIX_VAR.into(), value);
            Shielded {
                in_force: true,
                note: format!(
                    "Claude's tools are shielded: every Bash command runs through relay-shim \
                     --shield ({PREFIX_VAR}) in a Landlock domain of its own (ABI {abi}), so \
                     none can read Claude's memory (docs/THREAT-MODEL.md)"
                ),
            }
        }
        Err(why) => Shielded {
            in_force: false,
            note: format!(
                "Claude's tools are not shielded: {why}; a Bash command can read Claude's \
                 memory, the token with it (docs/THREAT-MODEL.md)"
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_is_the_shims_path_then_one_flag() {
        let mut env = BTreeMap::from([(PREFIX_VAR.to_string(), "/the/templates".to_string())]);
        let shim = Path::new("/opt/relay -x/bin/relay-shim");
        let s = apply(Backend::Bwrap, Ok(shim), &mut env);
        // Under bwrap the shield is the kernel's Landlock, from ABI 6 on.
        let kernel = relay_shim::landlock::abi_version()
            .ok()
            .filter(|abi| *abi >= MIN_SHIELD_ABI);
        assert_eq!(available(Backend::Bwrap).ok(), kernel);
        match available(Backend::Bwrap) {
            Ok(abi) => {
                assert!(s.in_force, "{}", s.note);
                assert!(s.note.contains(&format!("ABI {abi}")), "{}", s.note);
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
        let s = apply(Backend::Seatbelt, Ok(shim), &mut env);
        assert!(!s.in_force && env.is_empty(), "{}", s.note);
        assert!(s.note.contains("task_for_pid"), "{}", s.note);
        let s = apply(Backend::Bwrap, Err("no shim"), &mut env);
        assert!(!s.in_force && env.is_empty(), "{}", s.note);
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
