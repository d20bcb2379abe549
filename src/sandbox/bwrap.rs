//! The bubblewrap renderer for Linux.
//!
//! bwrap applies mounts in argument order and a later bind covers whatever an earlier
//! one put at or below its target. So: grants go parents first (a nested grant is
//! mounted over its parent and keeps its own access), and masks go after every grant
//! (no grant can re-expose a masked path).
//!
//! Only grants and denies use canonical paths: bwrap resolves a bind's source itself,
//! but its destination is created as written, and the point is to mount each tree at
//! the place the kernel will look.
//!
//! Known limit: a deny of a path that does not exist renders nothing. Masking it would
//! make bwrap create the mount point, and under a read-write bind that creates it on the
//! host, in the person's tree. A path created while the sandbox runs is therefore not
//! masked in that session; it is at the next launch.

use std::collections::HashSet;
use std::path::Path;

use super::policy::{
    depth, effective_read_only, effective_state, merged_grants, proper_ancestors, Access,
    MergedGrant, Network, PathKind, Spec,
};

/// System directories bound read-only when they exist. `/usr` is required and bound
/// with `--ro-bind`; these may be absent or links into `/usr` depending on the distro.
pub(crate) const OPTIONAL_SYSTEM_DIRS: &[&str] =
    &["/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc"];

/// The arguments for bwrap: without the binary, without `--` and the target.
///
/// Known limit: denies whose kind is [`PathKind::Missing`] render nothing (see the
/// module documentation); the launch that follows their creation masks them.
pub fn render_bwrap(spec: &Spec) -> Vec<String> {
    let mut args = Args::default();
    isolation(&mut args, spec);
    system_dirs(&mut args);
    let grants = bind_grants(&mut args, spec);
    for (folder, access) in pins(spec, &grants) {
        args.path_pair(bind_flag(access), folder);
    }
    // After the pins they lie in: Claude Code's state, writable again (and, as mount
    // points, never renamed away).
    for state in effective_state(spec) {
        args.path_pair("--bind", &state.canonical);
    }
    masks(&mut args, spec);
    if let Network::Proxied { socket, .. } = &spec.network {
        // Last, so no grant or mask covers it: the session's one way out.
        args.0.push("--bind".into());
        args.0.push(path_arg(socket));
        args.0.push(super::policy::EGRESS_SOCKET_INSIDE.into());
    }
    args.path(&["--chdir"], &spec.workdir);
    args.0
}

/// The namespaces, the capabilities and the session: what the sandbox is cut off from.
fn isolation(args: &mut Args, spec: &Spec) {
    // As root (CI) capabilities must go, or the sandbox could unmount a mask.
    args.push([
        "--die-with-parent",
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--cap-drop",
        "ALL",
    ]);
    if !spec.interactive {
        // In a pty session this would break job control; the shim starts a new
        // session either way.
        args.push(["--new-session"]);
    }
    // (`ProxiedPort` is Seatbelt's; here it gets no way out at all.)
    if matches!(
        spec.network,
        Network::Off | Network::Proxied { .. } | Network::ProxiedPort { .. }
    ) {
        // A namespace of its own: loopback alone (bwrap brings it up).
        args.push(["--unshare-net"]);
    }
    // Denied loopback ports with a shared network are Landlock rules the shim applies
    // before exec; nothing to render here.
}

/// The system directories read-only, a fresh `/dev`, `/proc` and `/tmp`.
fn system_dirs(args: &mut Args) {
    args.push(["--ro-bind", "/usr", "/usr"]);
    for dir in OPTIONAL_SYSTEM_DIRS {
        args.push(["--ro-bind-try", dir, dir]);
    }
    // A fresh /proc in the new pid namespace: without it /proc/<host pid>/root would
    // read past every mask.
    args.push(["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]);
}

fn bind_flag(access: Access) -> &'static str {
    match access {
        Access::Read => "--ro-bind",
        Access::ReadWrite => "--bind",
    }
}

/// Binds the grants, parents first, and gives them back (merged, in that order, the
/// missing ones too).
fn bind_grants<'a>(args: &mut Args, spec: &'a Spec) -> Vec<MergedGrant<'a>> {
    let mut grants = merged_grants(spec);
    // Stable: parents before children, equal depths in the order given.
    grants.sort_by_key(|g| depth(&g.path.canonical));
    for grant in &grants {
        if grant.path.kind == PathKind::Missing {
            // Nothing to bind; bwrap would fail on a missing source.
            continue;
        }
        args.path_pair(bind_flag(grant.access), &grant.path.canonical);
    }
    grants
}

/// Pins: each folder between a read-write grant and a denied path is bound onto
/// itself with the access it already has, so it becomes a mount point and the session
/// cannot rename it away (EBUSY) to plant a decoy where the daemon looks next time —
/// the config dir with its settings, or the token file. The bwrap side of SBPL's
/// ancestor unlink pins. A missing deny has no folders to pin below the existing part.
/// Parents first, so a deeper read-only pin is mounted over its folder's pin.
fn pins<'a>(spec: &'a Spec, grants: &[MergedGrant<'a>]) -> Vec<(&'a Path, Access)> {
    let bound: Vec<(&Path, Access)> = grants
        .iter()
        .filter(|g| g.path.kind != PathKind::Missing)
        .map(|g| (g.path.canonical.as_path(), g.access))
        .collect();
    // A folder that is denied itself, or lies in a denied folder, gets a mask instead.
    let masked_dirs: Vec<&Path> = spec
        .deny
        .iter()
        .filter(|d| d.kind == PathKind::Dir)
        .map(|d| d.canonical.as_path())
        .collect();
    // Paths pinned read-only (what a token launch runs) and every folder inside them.
    let read_only: Vec<&Path> = effective_read_only(spec)
        .into_iter()
        .filter(|p| p.kind != PathKind::Missing)
        .map(|p| p.canonical.as_path())
        .collect();
    let in_read_only = |folder: &Path| read_only.iter().any(|r| folder.starts_with(r));
    let mut pins: Vec<(&Path, Access)> = Vec::new();
    let protected = spec
        .deny
        .iter()
        .chain(effective_read_only(spec))
        .filter(|d| d.kind != PathKind::Missing);
    for deny in protected {
        for folder in proper_ancestors(&deny.canonical) {
            if masked_dirs.iter().any(|m| folder.starts_with(m)) {
                continue;
            }
            let writable_above = bound
                .iter()
                .any(|(g, a)| *a == Access::ReadWrite && folder.starts_with(g) && folder != *g);
            let holder = bound
                .iter()
                .filter(|(g, _)| folder.starts_with(g))
                .max_by_key(|(g, _)| depth(g));
            if let Some((g, access)) = holder {
                let new = !pins.iter().any(|(p, _)| *p == folder);
                if writable_above && *g != folder && new {
                    // A folder inside a read-only pin stays read-only.
                    let access = if in_read_only(folder) {
                        Access::Read
                    } else {
                        *access
                    };
                    pins.push((folder, access));
                }
            }
        }
    }
    // The read-only pins themselves, where a read-write grant would let a session write
    // them (elsewhere they are read-only or invisible already, and a pin never grants).
    for pinned in &read_only {
        if masked_dirs.iter().any(|m| pinned.starts_with(m)) {
            continue;
        }
        let holder = bound
            .iter()
            .filter(|(g, _)| pinned.starts_with(g))
            .max_by_key(|(g, _)| depth(g));
        if let Some((_, Access::ReadWrite)) = holder {
            pins.retain(|(p, _)| p != pinned);
            pins.push((pinned, Access::Read));
        }
    }
    // A grant below a folder bound again here would be covered by that bind (a read
    // grant in `~/.cargo` turned writable by `~/.cargo` pinned for a deny in it): it is
    // bound again after it, with its own access, read-only inside a read-only pin.
    let rebound: Vec<&Path> = pins.iter().map(|(p, _)| *p).collect();
    for (g, access) in &bound {
        let covered = rebound.iter().any(|p| g.starts_with(p) && g != p);
        if covered && !pins.iter().any(|(p, _)| p == g) {
            let access = if in_read_only(g) {
                Access::Read
            } else {
                *access
            };
            pins.push((g, access));
        }
    }
    pins.sort_by_key(|(p, _)| depth(p));
    pins
}

/// The masks, after every grant and pin: denied folders, then denied files.
fn masks(args: &mut Args, spec: &Spec) {
    // A deny inside a masked directory is already hidden by that mask, and its own
    // mount point could not be created in the read-only tmpfs: bwrap would fail.
    let dir_masks: Vec<&Path> = spec
        .deny
        .iter()
        .filter(|d| d.kind == PathKind::Dir)
        .map(|d| d.canonical.as_path())
        .collect();
    let covered = |path: &Path| dir_masks.iter().any(|m| path != *m && path.starts_with(m));
    let mut masked = HashSet::new();
    let mut masks = |kind: PathKind| {
        spec.deny
            .iter()
            .filter(move |d| d.kind == kind)
            .map(|d| d.canonical.as_path())
            .filter(|path| !covered(path))
            .filter(|path| masked.insert(*path))
            .collect::<Vec<_>>()
    };
    let dir_denies = masks(PathKind::Dir);
    let file_denies = masks(PathKind::File);
    for dir in dir_denies {
        // Mode 0000: listing the denied folder fails instead of showing it empty.
        args.path(&["--perms", "0000", "--tmpfs"], dir);
        args.path(&["--remount-ro"], dir);
    }
    // Missing denies render nothing: see the module documentation.
    for file in file_denies {
        args.0.push("--ro-bind".into());
        args.0.push(path_arg(&spec.file_mask));
        args.0.push(path_arg(file));
    }
}

#[derive(Default)]
struct Args(Vec<String>);

impl Args {
    fn push<const N: usize>(&mut self, items: [&str; N]) {
        self.0.extend(items.iter().map(|s| s.to_string()));
    }

    fn path(&mut self, flags: &[&str], path: &Path) {
        self.0.extend(flags.iter().map(|s| s.to_string()));
        self.0.push(path_arg(path));
    }

    fn path_pair(&mut self, flag: &str, path: &Path) {
        self.0.push(flag.to_string());
        self.0.push(path_arg(path));
        self.0.push(path_arg(path));
    }
}

/// Resolution refuses paths that are not UTF-8, so the lossy branch only concerns
/// specs built by hand with [`super::ResolvedPath::fixed`].
fn path_arg(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::policy::{Grant, ResolvedPath};
    use std::path::PathBuf;

    fn res(path: &str, kind: PathKind) -> ResolvedPath {
        ResolvedPath::fixed(path, path, kind)
    }

    fn grant(path: &str, kind: PathKind, access: Access) -> Grant {
        Grant {
            path: res(path, kind),
            access,
        }
    }

    fn spec() -> Spec {
        Spec {
            grants: vec![
                grant("/home/ada/.config", PathKind::Dir, Access::Read),
                grant("/home/ada", PathKind::Dir, Access::ReadWrite),
                grant("/home/ada/src/demo", PathKind::Dir, Access::ReadWrite),
                grant("/home/ada/notes.txt", PathKind::File, Access::Read),
                grant("/home/ada/not-yet", PathKind::Missing, Access::ReadWrite),
            ],
            deny: vec![
                res("/home/ada/.config/acme-ltt/token", PathKind::File),
                res("/home/ada/.config/relay", PathKind::Dir),
                res("/home/ada/.env", PathKind::Missing),
            ],
            read_only: vec![],
            state: vec![],
            deny_unix_sockets: vec![PathBuf::from("/home/ada/.config/relay/relay.sock")],
            network: Network::Shared {
                denied_loopback_ports: vec![5432],
            },
            workdir: PathBuf::from("/home/ada/src/demo"),
            interactive: true,
            file_mask: "/dev/null".into(),
        }
    }

    /// Index of the flag of each `flag a b` / `flag a` group whose first path is `path`.
    fn flag_index(args: &[String], flag: &str, path: &str) -> Option<usize> {
        args.windows(2).position(|w| w[0] == flag && w[1] == path)
    }

    #[test]
    fn masks_come_after_every_grant() {
        let args = render_bwrap(&spec());
        let grants: Vec<usize> = (0..args.len())
            .filter(|&i| {
                (args[i] == "--bind" || args[i] == "--ro-bind") && args[i + 1].starts_with("/home")
            })
            .collect();
        let masks: Vec<usize> = (0..args.len())
            .filter(|&i| {
                (args[i] == "--tmpfs" && args[i + 1] != "/tmp")
                    || args[i] == "--remount-ro"
                    || (args[i] == "--ro-bind" && args[i + 1] == "/dev/null")
            })
            .collect();
        assert!(grants.len() >= 4, "grants and their pins: {args:?}");
        assert_eq!(masks.len(), 3, "{args:?}");
        for m in &masks {
            for g in &grants {
                assert!(m > g, "mask at {m} before grant at {g}: {args:?}");
            }
        }
    }

    #[test]
    fn file_masks_come_after_directory_masks() {
        let args = render_bwrap(&spec());
        let dir_mask = flag_index(&args, "--remount-ro", "/home/ada/.config/relay").unwrap();
        let file_mask = flag_index(&args, "/dev/null", "/home/ada/.config/acme-ltt/token").unwrap();
        assert!(file_mask > dir_mask);
    }

    #[test]
    fn grants_mount_parents_before_children() {
        let args = render_bwrap(&spec());
        let home = flag_index(&args, "--bind", "/home/ada").unwrap();
        let config = flag_index(&args, "--ro-bind", "/home/ada/.config").unwrap();
        let demo = flag_index(&args, "--bind", "/home/ada/src/demo").unwrap();
        assert!(home < config && config < demo, "{args:?}");
    }

    #[test]
    fn a_grant_below_a_folder_pinned_for_a_deny_is_bound_again_after_it() {
        // `~/.cargo` is bound onto itself for the deny in it (a mount point, never
        // renamed away); the read grant below it must stay on top, read-only.
        let mut s = spec();
        s.grants = vec![
            grant("/home/ada", PathKind::Dir, Access::ReadWrite),
            grant("/home/ada/.cargo/bin", PathKind::Dir, Access::Read),
        ];
        s.deny = vec![res("/home/ada/.cargo/credentials.toml", PathKind::File)];
        let args = render_bwrap(&s);
        let cargo = flag_index(&args, "--bind", "/home/ada/.cargo").expect("cargo pinned");
        let last_bin = (0..args.len() - 1)
            .rev()
            .find(|&i| args[i].starts_with("--") && args[i + 1] == "/home/ada/.cargo/bin")
            .unwrap();
        assert_eq!(args[last_bin], "--ro-bind", "{args:?}");
        assert!(last_bin > cargo, "the read grant is covered: {args:?}");
    }

    #[test]
    fn missing_grants_and_denies_render_nothing() {
        let args = render_bwrap(&spec());
        assert!(!args.iter().any(|a| a == "/home/ada/not-yet"));
        assert!(!args.iter().any(|a| a == "/home/ada/.env"));
    }

    #[test]
    fn denies_inside_a_masked_directory_render_no_mask_of_their_own() {
        let s = Spec {
            grants: vec![grant("/home/ada", PathKind::Dir, Access::ReadWrite)],
            deny: vec![
                res(
                    "/home/ada/.config/relay/sessions/s1/profile.sb",
                    PathKind::File,
                ),
                res("/home/ada/.config/relay/sessions", PathKind::Dir),
                res("/home/ada/.config/relay", PathKind::Dir),
                res("/home/ada/.config/relay", PathKind::Dir),
                res("/home/ada/.config/relay-other", PathKind::Dir),
            ],
            read_only: vec![],
            state: vec![],
            deny_unix_sockets: vec![],
            network: Network::Off,
            workdir: PathBuf::from("/home/ada"),
            interactive: true,
            file_mask: "/dev/null".into(),
        };
        let args = render_bwrap(&s);
        let tmpfs: Vec<&str> = args
            .windows(2)
            .filter(|w| w[0] == "--tmpfs")
            .map(|w| w[1].as_str())
            .collect();
        assert_eq!(
            tmpfs,
            [
                "/tmp",
                "/home/ada/.config/relay",
                "/home/ada/.config/relay-other"
            ]
        );
        assert!(!args.iter().any(|a| a == "/dev/null"), "{args:?}");
    }

    /// Every `flag path path` bind under `/home`, in order.
    fn home_binds(args: &[String]) -> Vec<(&str, &str)> {
        args.windows(3)
            .filter(|w| (w[0] == "--bind" || w[0] == "--ro-bind") && w[1] == w[2])
            .filter(|w| w[1].starts_with("/home"))
            .map(|w| (w[0].as_str(), w[1].as_str()))
            .collect()
    }

    /// Each folder between a read-write grant and a deny becomes a mount point, once,
    /// so the session cannot rename it away; below a read grant alone nothing is pinned
    /// (the session cannot rename what it cannot write), whatever is writable elsewhere.
    #[test]
    fn folders_a_session_could_rename_above_a_deny_are_pinned_once() {
        let mut s = Spec {
            grants: vec![grant("/home/ada", PathKind::Dir, Access::ReadWrite)],
            deny: vec![
                res("/home/ada/.config/acme/token", PathKind::File),
                res("/home/ada/.config/relay", PathKind::Dir),
            ],
            read_only: vec![],
            state: vec![],
            deny_unix_sockets: vec![],
            network: Network::Off,
            workdir: PathBuf::from("/home/ada"),
            interactive: true,
            file_mask: "/dev/null".into(),
        };
        assert_eq!(
            home_binds(&render_bwrap(&s)),
            [
                ("--bind", "/home/ada"),
                ("--bind", "/home/ada/.config"),
                ("--bind", "/home/ada/.config/acme"),
            ]
        );
        // A read-only pin (what a token launch runs) keeps the other pins and is bound
        // read-only itself, its folder pinned too.
        s.read_only = vec![res("/home/ada/.local/bin", PathKind::Dir)];
        assert_eq!(
            home_binds(&render_bwrap(&s)),
            [
                ("--bind", "/home/ada"),
                ("--bind", "/home/ada/.config"),
                ("--bind", "/home/ada/.local"),
                ("--bind", "/home/ada/.config/acme"),
                ("--ro-bind", "/home/ada/.local/bin"),
            ]
        );
        // Claude Code's state is writable again inside its pin, after it, and masks
        // still come last; state outside every pin, or missing, renders nothing.
        s.state = vec![
            res("/home/ada/.local/bin/projects", PathKind::Dir),
            res("/home/ada/.local/bin/history.jsonl", PathKind::File),
            res("/home/ada/.local/bin/gone", PathKind::Missing),
            res("/home/ada/src", PathKind::Dir),
        ];
        let args = render_bwrap(&s);
        assert_eq!(
            home_binds(&args)[4..],
            [
                ("--ro-bind", "/home/ada/.local/bin"),
                ("--bind", "/home/ada/.local/bin/projects"),
                ("--bind", "/home/ada/.local/bin/history.jsonl"),
            ]
        );
        let at = |a: &str| args.iter().position(|x| x == a).unwrap();
        assert!(at("/home/ada/.local/bin/history.jsonl") < at("--perms"));
        s.state = vec![];
        s.read_only = vec![];
        s.grants = vec![
            grant("/home/ada", PathKind::Dir, Access::Read),
            grant("/srv", PathKind::Dir, Access::ReadWrite),
        ];
        assert_eq!(home_binds(&render_bwrap(&s)), [("--ro-bind", "/home/ada")]);
    }

    #[test]
    fn new_session_only_for_pipe_sessions() {
        let mut s = spec();
        assert!(!render_bwrap(&s).iter().any(|a| a == "--new-session"));
        s.interactive = false;
        assert!(render_bwrap(&s).iter().any(|a| a == "--new-session"));
    }

    #[test]
    fn network_off_unshares_net() {
        let mut s = spec();
        assert!(!render_bwrap(&s).iter().any(|a| a == "--unshare-net"));
        s.network = Network::Off;
        assert!(render_bwrap(&s).iter().any(|a| a == "--unshare-net"));
    }

    #[test]
    fn grants_and_denies_use_the_canonical_spelling_workdir_as_given() {
        let s = Spec {
            grants: vec![Grant {
                path: ResolvedPath::fixed("/home/ada/link", "/data/real", PathKind::Dir),
                access: Access::ReadWrite,
            }],
            deny: vec![ResolvedPath::fixed(
                "/home/ada/link/token",
                "/data/real/token",
                PathKind::File,
            )],
            read_only: vec![],
            state: vec![],
            deny_unix_sockets: vec![],
            network: Network::Off,
            workdir: PathBuf::from("/home/ada/link"),
            interactive: true,
            file_mask: "/dev/null".into(),
        };
        let args = render_bwrap(&s);
        assert!(flag_index(&args, "--bind", "/data/real").is_some());
        assert!(flag_index(&args, "/dev/null", "/data/real/token").is_some());
        assert!(!args[..args.len() - 1].iter().any(|a| a.contains("link")));
        assert_eq!(args[args.len() - 2..], ["--chdir", "/home/ada/link"]);
    }

    #[test]
    fn a_path_granted_twice_is_bound_once_with_the_wider_access() {
        let s = Spec {
            grants: vec![
                grant("/srv", PathKind::Dir, Access::Read),
                grant("/srv", PathKind::Dir, Access::ReadWrite),
            ],
            deny: vec![],
            read_only: vec![],
            state: vec![],
            deny_unix_sockets: vec![],
            network: Network::Off,
            workdir: PathBuf::from("/srv"),
            interactive: true,
            file_mask: "/dev/null".into(),
        };
        let args = render_bwrap(&s);
        assert_eq!(args.iter().filter(|a| *a == "/srv").count(), 3, "{args:?}");
        assert!(flag_index(&args, "--bind", "/srv").is_some());
    }
}
