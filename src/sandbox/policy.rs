//! The neutral sandbox spec both renderers read.
//!
//! The daemon builds one [`Spec`] per launch (see [`crate::sandbox::build_spec`]); the
//! Seatbelt and bubblewrap renderers turn it into text without touching the filesystem.
//! Paths in a spec are already resolved: each carries the spelling the person wrote and
//! the canonical one, so a renderer never has to guess which one the kernel will see.

use std::path::{Component, Path, PathBuf};

/// What a grant allows. Writing always implies reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    Read,
    ReadWrite,
}

/// What sits at a path's canonical spelling when the spec was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    Dir,
    /// Anything that is not a directory: regular files, sockets, devices, FIFOs.
    File,
    /// Nothing exists there (yet); the canonical form is the deepest existing ancestor's
    /// real path plus the missing tail.
    Missing,
}

/// One path of a spec, in both spellings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPath {
    /// As written, after `~` expansion, lexically normalized.
    pub written: PathBuf,
    /// Every symlink followed; the form the kernel (and Seatbelt) compares against.
    pub canonical: PathBuf,
    pub kind: PathKind,
}

impl ResolvedPath {
    /// A path with fixed spellings, without looking at the filesystem (tests, goldens).
    pub fn fixed(
        written: impl Into<PathBuf>,
        canonical: impl Into<PathBuf>,
        kind: PathKind,
    ) -> Self {
        ResolvedPath {
            written: written.into(),
            canonical: canonical.into(),
            kind,
        }
    }

    /// The canonical spelling, then the written one when it differs.
    pub fn spellings(&self) -> Vec<&Path> {
        let mut out = vec![self.canonical.as_path()];
        if self.written != self.canonical {
            out.push(self.written.as_path());
        }
        out
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub path: ResolvedPath,
    pub access: Access,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Network {
    /// The host's network, minus connections to these loopback TCP ports.
    Shared { denied_loopback_ports: Vec<u16> },
    /// No network at all.
    Off,
    /// A network namespace of its own, loopback only: out through relay's egress proxy
    /// alone, whose socket for this session (`socket`, in relay's config dir) is bound in
    /// at [`EGRESS_SOCKET_INSIDE`] (docs/session-host.md#the-egress-proxy). `egress` is
    /// the allowlist as written, for the explanation.
    Proxied {
        socket: PathBuf,
        egress: Vec<String>,
    },
    /// Seatbelt's form of [`Network::Proxied`] (no network namespace there): outbound
    /// TCP to relay's egress proxy for this session on loopback `port` alone, and to the
    /// listed loopback addresses' `bridges` ports; nothing else, no bind, no inbound.
    /// `port` is 0 until the launch's proxy listens (an explanation says `<port>`).
    ProxiedPort {
        port: u16,
        bridges: Vec<u16>,
        egress: Vec<String>,
    },
}

/// Where a proxied sandbox finds its egress socket.
pub const EGRESS_SOCKET_INSIDE: &str = "/run/relay/egress.sock";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// In the order given: template `read`, template `read_write`, the session
    /// directory, its temp dir.
    pub grants: Vec<Grant>,
    /// Always wins over every grant: template `deny`, the token file, the daemon's
    /// config dir, the profile itself.
    pub deny: Vec<ResolvedPath>,
    /// Read-only wherever a grant would make them writable, with their folders pinned
    /// against rename: what a token launch runs (the program, the folders of its links
    /// and of its real file). Never a grant by themselves.
    pub read_only: Vec<ResolvedPath>,
    /// Writable again inside a read-only pin, rendered after the pins: the state Claude
    /// Code writes in its own config folder, which a token launch pins read-only whole
    /// (`claude_config::STATE`). Only an entry that lies inside an effective read-only
    /// pin counts; elsewhere it changes nothing and renders nothing.
    pub state: Vec<ResolvedPath>,
    /// The daemon's sockets. Only Seatbelt needs these: under bwrap a socket that is
    /// not bound into the sandbox does not exist there.
    pub deny_unix_sockets: Vec<PathBuf>,
    pub network: Network,
    /// The directory the target starts in (bwrap `--chdir`).
    pub workdir: PathBuf,
    /// A pty session. bwrap's `--new-session` would break job control there, so it is
    /// added only for pipe sessions (the shim starts a new session either way).
    pub interactive: bool,
    /// What a denied file is covered with under bwrap: an empty file of mode 0000 that
    /// the daemon keeps in its config dir, so a read fails instead of returning nothing.
    /// `/dev/null` works too but reads as empty.
    pub file_mask: PathBuf,
}

/// Number of normal components: `/` is 0, `/home/ada` is 2.
pub(crate) fn depth(path: &Path) -> usize {
    path.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count()
}

/// Proper ancestors of an absolute path, shallowest first, without `/` itself.
pub(crate) fn proper_ancestors(path: &Path) -> Vec<&Path> {
    let mut out: Vec<&Path> = path
        .ancestors()
        .skip(1)
        .filter(|a| a.parent().is_some())
        .collect();
    out.reverse();
    out
}

/// Grants merged by canonical path (a path granted both read and read-write is
/// read-write), in first-seen order. Both renderers work from this, so a path granted
/// twice means the same thing on both backends.
pub(crate) fn merged_grants(spec: &Spec) -> Vec<MergedGrant<'_>> {
    let mut out: Vec<MergedGrant<'_>> = Vec::new();
    for grant in &spec.grants {
        match out
            .iter_mut()
            .find(|m| m.path.canonical == grant.path.canonical)
        {
            Some(existing) => existing.access = existing.access.max(grant.access),
            None => out.push(MergedGrant {
                path: &grant.path,
                access: grant.access,
            }),
        }
    }
    out
}

/// The read-only pins that matter for this launch: those a read-write grant would let
/// it write. A pin elsewhere is read-only or invisible to it already, and rendering it
/// could only take away write access the launch was given somewhere else.
pub(crate) fn effective_read_only(spec: &Spec) -> Vec<&ResolvedPath> {
    spec.read_only
        .iter()
        .filter(|pin| {
            spec.grants.iter().any(|g| {
                g.access == Access::ReadWrite
                    && g.path.kind != PathKind::Missing
                    && pin.canonical.starts_with(&g.path.canonical)
            })
        })
        .collect()
}

/// The state entries that lie inside an effective read-only pin and exist: the only
/// ones a renderer makes writable again.
pub(crate) fn effective_state(spec: &Spec) -> Vec<&ResolvedPath> {
    let pins = effective_read_only(spec);
    spec.state
        .iter()
        .filter(|s| s.kind != PathKind::Missing)
        .filter(|s| {
            pins.iter()
                .any(|p| s.canonical != p.canonical && s.canonical.starts_with(&p.canonical))
        })
        .collect()
}

pub(crate) struct MergedGrant<'a> {
    pub path: &'a ResolvedPath,
    pub access: Access,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_lists_canonical_then_written_when_different() {
        let same = ResolvedPath::fixed("/home/ada", "/home/ada", PathKind::Dir);
        assert_eq!(same.spellings(), vec![Path::new("/home/ada")]);
        let differ = ResolvedPath::fixed("/tmp/x", "/private/tmp/x", PathKind::Dir);
        assert_eq!(
            differ.spellings(),
            vec![Path::new("/private/tmp/x"), Path::new("/tmp/x")]
        );
    }

    #[test]
    fn depth_counts_normal_components() {
        assert_eq!(depth(Path::new("/")), 0);
        assert_eq!(depth(Path::new("/home")), 1);
        assert_eq!(depth(Path::new("/home/ada/.config")), 3);
    }

    #[test]
    fn proper_ancestors_are_shallowest_first_without_root() {
        assert_eq!(
            proper_ancestors(Path::new("/home/ada/.config/token")),
            vec![
                Path::new("/home"),
                Path::new("/home/ada"),
                Path::new("/home/ada/.config")
            ]
        );
        assert!(proper_ancestors(Path::new("/home")).is_empty());
        assert!(proper_ancestors(Path::new("/")).is_empty());
    }

    /// A pin matters only under a read-write grant that exists: elsewhere the launch
    /// cannot write it anyway, and rendering it could only narrow another grant.
    #[test]
    fn only_pins_a_read_write_grant_could_reach_are_effective() {
        let at = |s: &str, kind| ResolvedPath::fixed(s, s, kind);
        let grant = |s: &str, kind, access| Grant {
            path: at(s, kind),
            access,
        };
        let spec = Spec {
            grants: vec![
                grant("/home/ada", PathKind::Dir, Access::ReadWrite),
                grant("/opt/tools", PathKind::Dir, Access::Read),
                grant("/srv/later", PathKind::Missing, Access::ReadWrite),
            ],
            deny: vec![],
            read_only: vec![
                at("/home/ada/.local/bin/claude", PathKind::File),
                at("/opt/tools/bin", PathKind::Dir),
                at("/srv/later/bin", PathKind::Missing),
                at("/usr/bin", PathKind::Dir),
                at("/home/ada", PathKind::Dir),
                at("/home/adam/bin", PathKind::Dir),
            ],
            state: vec![
                at("/home/ada/.local/bin/claude/state", PathKind::Dir),
                at("/opt/tools/bin/state", PathKind::Dir),
                at("/home/ada/.local/bin/claude", PathKind::File),
                at("/home/ada/missing", PathKind::Missing),
                at("/home/adam/bin/x", PathKind::File),
                at("/home/ada/src", PathKind::Dir),
            ],
            deny_unix_sockets: vec![],
            network: Network::Off,
            workdir: PathBuf::from("/home/ada"),
            interactive: false,
            file_mask: "/dev/null".into(),
        };
        let effective: Vec<&Path> = effective_read_only(&spec)
            .iter()
            .map(|p| p.canonical.as_path())
            .collect();
        assert_eq!(
            effective,
            vec![
                Path::new("/home/ada/.local/bin/claude"),
                Path::new("/home/ada")
            ]
        );
        // Writable again only strictly inside an effective pin, and only when it exists.
        let state: Vec<&Path> = effective_state(&spec)
            .iter()
            .map(|p| p.canonical.as_path())
            .collect();
        assert_eq!(
            state,
            vec![
                Path::new("/home/ada/.local/bin/claude/state"),
                Path::new("/home/ada/.local/bin/claude"),
                Path::new("/home/ada/src"),
            ]
        );
    }

    #[test]
    fn merged_grants_keep_first_position_and_widest_access() {
        let p = |s: &str| ResolvedPath::fixed(s, s, PathKind::Dir);
        let spec = Spec {
            grants: vec![
                Grant {
                    path: p("/a"),
                    access: Access::Read,
                },
                Grant {
                    path: p("/b"),
                    access: Access::Read,
                },
                Grant {
                    path: p("/a"),
                    access: Access::ReadWrite,
                },
            ],
            deny: vec![],
            read_only: vec![],
            state: vec![],
            deny_unix_sockets: vec![],
            network: Network::Off,
            workdir: PathBuf::from("/a"),
            interactive: false,
            file_mask: "/dev/null".into(),
        };
        let merged: Vec<_> = merged_grants(&spec)
            .iter()
            .map(|m| (m.path.canonical.clone(), m.access))
            .collect();
        assert_eq!(
            merged,
            vec![
                (PathBuf::from("/a"), Access::ReadWrite),
                (PathBuf::from("/b"), Access::Read)
            ]
        );
    }
}
