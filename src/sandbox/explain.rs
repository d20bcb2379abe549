//! The sandbox in words: what one [`Spec`] lets a session read and write, what it
//! denies, its network and its denied ports, under one backend.
//!
//! It is read from the same spec the renderers turn into a profile, with the same
//! helpers (`merged_grants`, `effective_read_only`) and the renderers' own baselines,
//! never from a second description of the policy: the Settings page
//! (`GET /api/sessions/{id}/sandbox`) and `relay sandbox explain` both show this
//! (docs/routes.md, docs/cli.md). A unit test checks each line against the rendered
//! SBPL and bwrap profiles.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::policy::{
    effective_read_only, effective_state, merged_grants, Access, Network, PathKind, ResolvedPath,
};
use super::seatbelt::HostPaths;
use super::{bwrap, seatbelt, Spec};
use crate::protocol::Backend;

/// One path of the explanation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Place {
    /// The canonical spelling, the one the kernel compares against.
    pub path: String,
    /// As written (after `~` expansion), when it differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written: Option<String>,
    /// `dir`, `file` or `missing` (nothing there when the spec was built).
    pub kind: String,
    /// Why it is there: the template, the session's directory, the token, …
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub why: String,
    /// How this backend enforces it, when that is worth saying.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub how: String,
}

/// The network a sandbox gets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkView {
    /// `shared` (the host's network) or `off`.
    pub mode: String,
    /// TCP ports no sandboxed process may connect to (with a shared network).
    pub denied_ports: Vec<u16>,
    /// `proxied`: the egress allowlist, as written.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<String>,
    /// How this backend enforces it.
    pub how: String,
    /// Seatbelt's `proxied`: where the session's egress proxy listens (`127.0.0.1:PORT`;
    /// `<port>` before a launch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,
}

/// What one sandbox allows. `GET /api/{sessions,terminals}/{id}/sandbox` and
/// `GET /api/sandbox/explain` answer it; `relay sandbox explain` prints it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explanation {
    /// `bwrap` or `seatbelt`; empty when not sandboxed.
    pub backend: String,
    /// False for a `"sandbox": false` template: the tool runs with your full access.
    pub sandboxed: bool,
    /// The folder the tool starts in.
    pub workdir: String,
    /// What every sandbox of this backend reads (the renderer's baseline).
    pub system: Vec<Place>,
    /// Granted read-only.
    pub read: Vec<Place>,
    /// Granted read-write.
    pub write: Vec<Place>,
    /// Read-only although a write grant holds them: what a token launch runs.
    pub read_only: Vec<Place>,
    /// Writable again inside those: Claude Code's own state in its read-only config
    /// folder (its transcripts, its prompt history).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub state: Vec<Place>,
    /// Denied, after every grant: nothing a grant says reopens them.
    pub denied: Vec<Place>,
    /// Unix sockets the sandbox cannot connect to.
    pub denied_sockets: Vec<Place>,
    pub network: NetworkView,
    /// The environment a launch starts with, by name (never a value). Absent where it
    /// was not worked out (a session read back from the ledger).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<EnvNames>,
    /// Limits worth knowing about this sandbox.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Its limits on processes and memory, and how they hold (docs/settings.md#limits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsView>,
}

/// A sandbox's limits on processes and memory, as `relay sandbox explain` shows them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitsView {
    /// 0: none.
    pub pids_max: u32,
    pub memory_max_mib: u64,
    #[serde(default)]
    pub cpu_weight: u32,
    /// `cgroup_v2`, `cgroup_v1`, `rlimit`, or `none` (`crate::limits::describe`).
    pub by: String,
    /// What does not hold, with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_in_force: Vec<String>,
}

/// The names of a launch's environment, never their values.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvNames {
    /// Every name the tool starts with, sorted.
    pub names: Vec<String>,
    /// Those whose value comes from relay's own environment (the base list, the routing
    /// names and `env_passthrough` for a sandboxed launch; everything but relay's scrub
    /// for an unsandboxed one), sorted. The others relay or the template sets.
    pub inherited: Vec<String>,
}

/// Why each path is in a spec, as the daemon knows it: matched against a place's
/// canonical or written spelling. The first label that matches wins.
pub type Labels = [(PathBuf, String)];

fn kind_name(kind: PathKind) -> &'static str {
    match kind {
        PathKind::Dir => "dir",
        PathKind::File => "file",
        PathKind::Missing => "missing",
    }
}

fn text(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn why(path: &ResolvedPath, labels: &Labels) -> String {
    labels
        .iter()
        .find(|(p, _)| *p == path.canonical || *p == path.written)
        .map(|(_, w)| w.clone())
        .unwrap_or_default()
}

fn place(path: &ResolvedPath, labels: &Labels, how: impl Into<String>) -> Place {
    Place {
        path: text(&path.canonical),
        written: (path.written != path.canonical).then(|| text(&path.written)),
        kind: kind_name(path.kind).into(),
        why: why(path, labels),
        how: how.into(),
    }
}

fn system(path: impl AsRef<Path>, why: &str, how: &str) -> Place {
    Place {
        path: text(path.as_ref()),
        written: None,
        kind: "dir".into(),
        why: why.into(),
        how: how.into(),
    }
}

/// A launch's explanation as shown before any launch (`relay sandbox explain`): the
/// temp folder each launch makes is named by its pattern, and an explanation for the
/// other platform's backend says the paths are this machine's.
pub fn before_launch(
    mut e: Explanation,
    temp: &Path,
    asked: Backend,
    native: Backend,
) -> Explanation {
    let temp = text(temp);
    for p in e.write.iter_mut().filter(|p| p.path == temp) {
        p.how = "made (0700) by each launch, named after its id".into();
    }
    if asked != native {
        e.notes.push(format!(
            "explained for {} while launches here use {}: the paths are resolved on this machine",
            asked.as_str(),
            native.as_str()
        ));
    }
    e
}

/// The explanation for a launch that is not sandboxed.
pub fn unsandboxed(workdir: &Path) -> Explanation {
    Explanation {
        backend: String::new(),
        sandboxed: false,
        workdir: text(workdir),
        system: vec![],
        read: vec![],
        write: vec![],
        read_only: vec![],
        state: vec![],
        denied: vec![],
        denied_sockets: vec![],
        network: NetworkView {
            proxy: None,
            mode: "shared".into(),
            denied_ports: vec![],
            egress: vec![],
            how: "not sandboxed: the host's network, every port".into(),
        },
        environment: None,
        notes: vec![
            "not sandboxed (the template says \"sandbox\": false): the tool runs with your \
             full access and never gets the token"
                .into(),
        ],
        limits: None,
    }
}

/// Explains `spec` as `backend` renders it; `host` is the Mac the Seatbelt profile is
/// rendered for (empty elsewhere), `labels` say why each path is there.
pub fn explain(spec: &Spec, backend: Backend, host: &HostPaths, labels: &Labels) -> Explanation {
    let bwrap = backend == Backend::Bwrap;
    let mut notes = Vec::new();
    let (read, write) = granted(spec, bwrap, labels);
    let read_only = read_only(spec, bwrap, labels);
    let state = state(spec, bwrap, labels);
    let denied = denied(spec, bwrap, labels);
    if bwrap && spec.deny.iter().any(|d| d.kind == PathKind::Missing) {
        notes.push(
            "bwrap cannot mask a path that does not exist: one created while the session \
             runs is masked from the next launch on (docs/THREAT-MODEL.md)"
                .into(),
        );
    }
    let denied_sockets = denied_sockets(spec, bwrap);
    let network = network_view(&spec.network, bwrap);
    Explanation {
        backend: backend.as_str().into(),
        sandboxed: true,
        workdir: text(&spec.workdir),
        system: if bwrap {
            bwrap_system()
        } else {
            seatbelt_system(host)
        },
        read,
        write,
        read_only,
        state,
        denied,
        denied_sockets,
        network,
        environment: None,
        notes,
        limits: None,
    }
}

/// The spec's grants, merged as the renderers merge them: those read-only, then those
/// read-write. A grant of a path not there yet says what the backend does with it.
fn granted(spec: &Spec, bwrap: bool, labels: &Labels) -> (Vec<Place>, Vec<Place>) {
    let mut read = Vec::new();
    let mut write = Vec::new();
    for grant in merged_grants(spec) {
        let how = match (bwrap, grant.path.kind) {
            (true, PathKind::Missing) => "does not exist yet: not bound, so not there inside",
            (false, PathKind::Missing) => "does not exist yet: covered as a tree once it does",
            _ => "",
        };
        let p = place(grant.path, labels, how);
        match grant.access {
            Access::Read => read.push(p),
            Access::ReadWrite => write.push(p),
        }
    }
    (read, write)
}

/// What stays read-only inside a write grant ([`effective_read_only`]), and how the
/// backend holds it so.
fn read_only(spec: &Spec, bwrap: bool, labels: &Labels) -> Vec<Place> {
    effective_read_only(spec)
        .into_iter()
        .map(|p| {
            let how = if bwrap {
                "bound read-only over the write grant"
            } else {
                "writes and hard links refused"
            };
            place(p, labels, how)
        })
        .collect()
}

/// What is writable again inside a read-only folder ([`effective_state`]), and how the
/// backend allows it.
fn state(spec: &Spec, bwrap: bool, labels: &Labels) -> Vec<Place> {
    effective_state(spec)
        .into_iter()
        .map(|p| {
            let how = if bwrap {
                "bound read-write over the read-only folder"
            } else {
                "writes allowed again; it cannot be renamed or removed"
            };
            place(p, labels, how)
        })
        .collect()
}

/// The spec's denies, each path once, and how the backend denies it: bwrap covers a
/// path with an empty one of mode 0000 (one inside a denied folder is hidden with it,
/// one not there yet is not masked), Seatbelt refuses it and the renaming of its
/// folders.
fn denied(spec: &Spec, bwrap: bool, labels: &Labels) -> Vec<Place> {
    let dir_denies: Vec<&Path> = spec
        .deny
        .iter()
        .filter(|d| d.kind == PathKind::Dir)
        .map(|d| d.canonical.as_path())
        .collect();
    let mut denied: Vec<Place> = Vec::new();
    for d in &spec.deny {
        if denied.iter().any(|p| p.path == text(&d.canonical)) {
            continue;
        }
        let inside = dir_denies
            .iter()
            .any(|m| d.canonical != *m && d.canonical.starts_with(m));
        let how = match (bwrap, d.kind) {
            (true, _) if inside => "inside a denied folder, hidden with it",
            (true, PathKind::Dir) => "covered by an empty folder of mode 0000",
            (true, PathKind::File) => "covered by an empty file of mode 0000",
            (true, PathKind::Missing) => {
                "does not exist yet: not masked in this session (the next launch masks it)"
            }
            (false, PathKind::File) => "read, write, link and clone refused; its folders cannot be renamed",
            (false, _) => "read, write, link and clone refused for the whole tree; its folders cannot be renamed",
        };
        denied.push(place(d, labels, how));
    }
    denied
}

/// relay's own sockets, which the sandbox cannot connect to: bwrap leaves them out,
/// Seatbelt refuses the connect.
fn denied_sockets(spec: &Spec, bwrap: bool) -> Vec<Place> {
    spec.deny_unix_sockets
        .iter()
        .map(|s| Place {
            path: text(s),
            written: None,
            kind: "file".into(),
            why: "relay's own sockets".into(),
            how: if bwrap {
                "not bound into the sandbox, so not there".into()
            } else {
                "connecting refused".into()
            },
        })
        .collect()
}

/// What a template's macOS opt-ins (`macos`, docs/settings.md#macos) open, one note
/// each, under `backend`: the renderer's own list of what each reopens
/// ([`seatbelt::MacOptIns`]). A `mach` name the escape section closes is said to stay
/// closed. Bubblewrap has none of these services and ignores them.
pub fn mac_opt_in_notes(opt_ins: &seatbelt::MacOptIns, backend: Backend) -> Vec<String> {
    if opt_ins.is_empty() {
        return vec![];
    }
    if backend == Backend::Bwrap {
        return vec![
            "macos opt-ins are Seatbelt's: bubblewrap ignores them (none of these services \
             exists here)"
                .into(),
        ];
    }
    let mut notes = Vec::new();
    if opt_ins.keychain {
        notes.push(
            "macos.keychain opens the keychain (com.apple.SecurityServer, securityd, the \
             security agent) and security(1): this session can ask for any item you allow, \
             your Claude login and other tokens among them"
                .into(),
        );
    }
    if opt_ins.clipboard {
        notes.push(
            "macos.clipboard opens the pasteboard (com.apple.pasteboard.1), pbcopy and \
             pbpaste: this session reads whatever you copy, a token you paste included"
                .into(),
        );
    }
    if !opt_ins.automation.is_empty() {
        notes.push(format!(
            "macos.automation opens Apple Events to {} and osascript: this session can \
             drive those apps, and what they run runs outside every sandbox",
            opt_ins.automation.join(", ")
        ));
    }
    for name in &opt_ins.mach {
        let escape = seatbelt::MacOptIns::escape_of(name);
        notes.push(match (escape, opt_ins.reopened_by(name)) {
            (Some(why), Some(key)) => {
                format!("macos.mach names {name}, an escape ({why}) that {key} reopens")
            }
            (Some(why), None) => format!(
                "macos.mach names {name}, which stays closed: the escape section refuses \
                 it after every grant ({why})"
            ),
            (None, _) => format!(
                "macos.mach opens the Mach service {name}: this session can send it requests"
            ),
        });
    }
    notes
}

/// What every bwrap sandbox gets, from the renderer's own lists.
fn bwrap_system() -> Vec<Place> {
    let mut out = vec![system("/usr", "system", "read-only")];
    for dir in bwrap::OPTIONAL_SYSTEM_DIRS {
        out.push(system(dir, "system", "read-only, when it exists"));
    }
    out.push(system(
        "/dev",
        "system",
        "a minimal /dev (null, zero, tty, …)",
    ));
    out.push(system(
        "/proc",
        "system",
        "a fresh /proc: only the sandbox's own processes",
    ));
    out.push(system("/tmp", "system", "an empty folder of its own"));
    out
}

/// What every Seatbelt sandbox gets, from the renderer's own lists.
fn seatbelt_system(host: &HostPaths) -> Vec<Place> {
    let mut out: Vec<Place> = seatbelt::BASELINE_READS
        .iter()
        .map(|d| system(d, "system", "read-only"))
        .collect();
    for d in seatbelt::BASELINE_CLOSED {
        out.push(system(
            d,
            "system",
            "closed again (Homebrew's service config and data), but for its CA bundle and gitconfig",
        ));
    }
    out.push(system(
        "/dev",
        "system",
        "read-write, so /dev/fd/5 (the token pipe) and ttys open",
    ));
    if let Some(dir) = &host.developer_dir {
        out.push(system(dir, "developer tools", "read-only"));
    }
    if let Some(dir) = &host.user_temp_dir {
        out.push(system(
            dir,
            "per-user temp folder",
            "its metadata and xcrun's cache file only",
        ));
    }
    out
}

/// The environment's names as two lines, those relay or the template sets and those
/// taken from relay's environment.
fn environment_text(out: &mut String, env: &EnvNames) {
    let own: Vec<&str> = env
        .names
        .iter()
        .filter(|n| !env.inherited.contains(n))
        .map(String::as_str)
        .collect();
    let list = |names: &[&str]| {
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(" ")
        }
    };
    let inherited: Vec<&str> = env.inherited.iter().map(String::as_str).collect();
    let _ = writeln!(out, "environment (names only):");
    let _ = writeln!(out, "  set by relay or the template: {}", list(&own));
    let _ = writeln!(out, "  from relay's environment: {}", list(&inherited));
}

/// The explanation as text, one path per line, for `relay sandbox explain`.
pub fn to_text(e: &Explanation) -> String {
    let mut out = String::new();
    if !e.sandboxed {
        let _ = writeln!(out, "not sandboxed  (working directory {})", e.workdir);
        if let Some(env) = &e.environment {
            environment_text(&mut out, env);
        }
        for n in &e.notes {
            let _ = writeln!(out, "note: {n}");
        }
        return out;
    }
    let _ = writeln!(
        out,
        "sandbox: {}  (working directory {})",
        e.backend, e.workdir
    );
    let section = |out: &mut String, title: &str, places: &[Place]| {
        if places.is_empty() {
            return;
        }
        let _ = writeln!(out, "{title}:");
        for p in places {
            let _ = write!(out, "  {}", p.path);
            if let Some(w) = &p.written {
                let _ = write!(out, " (written {w})");
            }
            if p.kind == "missing" {
                out.push_str(" [missing]");
            }
            if !p.why.is_empty() {
                let _ = write!(out, "  — {}", p.why);
            }
            if !p.how.is_empty() {
                let _ = write!(out, "; {}", p.how);
            }
            out.push('\n');
        }
    };
    section(&mut out, "system (every sandbox)", &e.system);
    section(&mut out, "can read", &e.read);
    section(&mut out, "can read and write", &e.write);
    section(&mut out, "kept read-only inside those", &e.read_only);
    section(&mut out, "writable again inside those", &e.state);
    section(&mut out, "denied (after every grant)", &e.denied);
    section(&mut out, "sockets denied", &e.denied_sockets);
    let ports = if e.network.denied_ports.is_empty() {
        "none".to_string()
    } else {
        e.network
            .denied_ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    if e.network.mode == "proxied" {
        let list = if e.network.egress.is_empty() {
            "nothing".to_string()
        } else {
            e.network.egress.join(", ")
        };
        let _ = writeln!(out, "network: proxied; egress: {list}  — {}", e.network.how);
    } else {
        let _ = writeln!(
            out,
            "network: {}; denied ports: {ports}  — {}",
            e.network.mode, e.network.how
        );
    }
    if let Some(env) = &e.environment {
        environment_text(&mut out, env);
    }
    if let Some(l) = &e.limits {
        limits_text(&mut out, l);
    }
    for n in &e.notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

fn limits_text(out: &mut String, l: &LimitsView) {
    let none = |n: u64, what: &str| {
        if n == 0 {
            format!("no {what} limit")
        } else {
            format!("{n} {what}")
        }
    };
    let _ = writeln!(
        out,
        "limits: {}, {}, {}  — held by {}",
        none(u64::from(l.pids_max), "processes"),
        none(l.memory_max_mib, "MiB of memory"),
        if l.cpu_weight == 0 {
            "no CPU weight".to_string()
        } else {
            format!("CPU weight {}", l.cpu_weight)
        },
        l.by
    );
    for n in &l.not_in_force {
        let _ = writeln!(out, "  not in force: {n}");
    }
}

/// The network in words, as `backend` (bwrap or not) enforces it.
pub fn network_view(network: &Network, bwrap: bool) -> NetworkView {
    match network {
        Network::Proxied { egress, .. } => NetworkView {
            mode: "proxied".into(),
            denied_ports: vec![],
            egress: egress.clone(),
            proxy: None,
            how: if egress.is_empty() {
                "a network namespace of its own, loopback only; relay's egress proxy allows \
                 nothing (the list is empty)"
                    .into()
            } else {
                "a network namespace of its own, loopback only; out through relay's egress \
                 proxy to the listed hosts alone (HTTPS_PROXY), each connection recorded; \
                 listed loopback addresses bridged in at the same address"
                    .into()
            },
        },
        Network::ProxiedPort { port, egress, .. } => {
            let at = match port {
                0 => "127.0.0.1:<port>".to_string(),
                p => format!("127.0.0.1:{p}"),
            };
            NetworkView {
                mode: "proxied".into(),
                denied_ports: vec![],
                egress: egress.clone(),
                how: format!(
                    "outbound TCP only to relay's egress proxy for this session at {at} \
                     (HTTPS_PROXY), which lets through the listed hosts alone and records each \
                     connection, and to the listed loopback addresses; no other connection, \
                     no listening, no DNS"
                ),
                proxy: Some(at),
            }
        }
        Network::Off => NetworkView {
            proxy: None,
            mode: "off".into(),
            denied_ports: vec![],
            egress: vec![],
            how: if bwrap {
                "a network namespace of its own with no interfaces (--unshare-net)".into()
            } else {
                "every network operation refused (deny network*)".into()
            },
        },
        Network::Shared {
            denied_loopback_ports,
        } => NetworkView {
            proxy: None,
            mode: "shared".into(),
            denied_ports: denied_loopback_ports.clone(),
            egress: vec![],
            how: match (bwrap, denied_loopback_ports.is_empty()) {
                (_, true) => "the host's network, every port".into(),
                (true, false) => "the host's network; Landlock refuses TCP connects to the \
                                  denied ports on every address, MPTCP and TCP Fast Open are \
                                  refused on every port"
                    .into(),
                (false, false) => {
                    "the host's network; connections to localhost on the denied ports refused"
                        .into()
                }
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::policy::Grant;
    use crate::sandbox::{render_bwrap, render_sbpl};

    #[test]
    fn before_a_launch_the_temp_folder_is_a_pattern_and_another_backend_is_noted() {
        let place = |path: &str| Place {
            path: path.into(),
            written: None,
            kind: "dir".into(),
            why: "granted".into(),
            how: "as is".into(),
        };
        let mut e = unsandboxed(Path::new("/p"));
        e.write = vec![place("/tmp/relay-<id>"), place("/p")];
        e.notes.clear();
        let temp = Path::new("/tmp/relay-<id>");
        let same = before_launch(e.clone(), temp, Backend::Bwrap, Backend::Bwrap);
        assert_eq!(
            same.write[0].how,
            "made (0700) by each launch, named after its id"
        );
        assert_eq!(same.write[1].how, "as is");
        assert!(same.notes.is_empty(), "{:?}", same.notes);
        let other = before_launch(e, temp, Backend::Seatbelt, Backend::Bwrap);
        assert_eq!(
            other.notes,
            ["explained for seatbelt while launches here use bwrap: the paths are resolved on this machine"]
        );
    }

    #[test]
    fn each_macos_opt_in_is_a_note_and_an_escapes_name_stays_closed() {
        use crate::sandbox::MacOptIns;
        let none = MacOptIns::default();
        assert!(mac_opt_in_notes(&none, Backend::Seatbelt).is_empty());
        let mut all = MacOptIns {
            keychain: true,
            clipboard: false,
            automation: vec!["com.apple.Terminal".into(), "com.apple.Music".into()],
            mach: vec![
                "com.example.service".into(),
                "com.apple.coreservices.launchservicesd".into(),
                "com.apple.pasteboard.1".into(),
            ],
        };
        let notes = mac_opt_in_notes(&all, Backend::Seatbelt);
        assert_eq!(notes.len(), 5, "{notes:#?}");
        assert!(
            notes[4].ends_with(
                "stays closed: the escape section refuses it after every grant (the clipboard)"
            ),
            "{}",
            notes[4]
        );
        all.clipboard = true;
        let notes = mac_opt_in_notes(&all, Backend::Seatbelt);
        assert_eq!(notes.len(), 6, "{notes:#?}");
        assert!(notes[0].starts_with("macos.keychain opens the keychain"));
        assert!(notes[1].starts_with("macos.clipboard opens the pasteboard"));
        assert!(notes[2].starts_with(
            "macos.automation opens Apple Events to com.apple.Terminal, com.apple.Music"
        ));
        assert_eq!(
            notes[3],
            "macos.mach opens the Mach service com.example.service: this session can send it requests"
        );
        assert!(notes[4].starts_with(
            "macos.mach names com.apple.coreservices.launchservicesd, which stays closed"
        ));
        assert_eq!(
            notes[5],
            "macos.mach names com.apple.pasteboard.1, an escape (the clipboard) that macos.clipboard reopens"
        );
        // What the notes say is what the profile does.
        let spec = spec().0;
        let sbpl = crate::sandbox::render_sbpl_with(&spec, &HostPaths::default(), &all);
        let opt_in = sbpl.split("; opt-in macos.keychain").nth(1).unwrap();
        assert!(opt_in.contains("(allow mach-lookup (global-name \"com.apple.SecurityServer\"))"));
        assert!(opt_in.contains("(allow process-exec* (literal \"/usr/bin/pbpaste\"))"));
        assert!(opt_in.contains("(appleevent-destination \"com.apple.Music\")"));
        assert!(!opt_in.contains("launchservicesd"), "{opt_in}");
        assert_eq!(mac_opt_in_notes(&all, Backend::Bwrap).len(), 1);
    }

    fn same(p: &str, kind: PathKind) -> ResolvedPath {
        ResolvedPath::fixed(p, p, kind)
    }

    /// A claude-code launch: `~` read-write with the token folder inside it, a program
    /// folder read, the session's directory and temp dir, the config dir denied, the
    /// program's folder pinned, relay's API port denied.
    fn spec() -> (Spec, Vec<(PathBuf, String)>) {
        let spec = Spec {
            grants: vec![
                Grant {
                    path: same("/opt/claude/bin", PathKind::Dir),
                    access: Access::Read,
                },
                Grant {
                    path: same("/home/ada", PathKind::Dir),
                    access: Access::ReadWrite,
                },
                Grant {
                    path: same("/home/ada/src/demo", PathKind::Dir),
                    access: Access::ReadWrite,
                },
                Grant {
                    path: ResolvedPath::fixed(
                        "/tmp/relay-s1",
                        "/private/tmp/relay-s1",
                        PathKind::Dir,
                    ),
                    access: Access::ReadWrite,
                },
                Grant {
                    path: same("/opt/claude/bin", PathKind::Dir),
                    access: Access::Read,
                },
            ],
            deny: vec![
                same("/home/ada/.config/acme-ltt", PathKind::Dir),
                same("/home/ada/.config/acme-ltt/token", PathKind::File),
                same("/home/ada/.config/relay", PathKind::Dir),
                same("/home/ada/src/demo/.env", PathKind::Missing),
            ],
            read_only: vec![
                same("/home/ada/.local/bin", PathKind::Dir),
                same("/usr/local/bin", PathKind::Dir),
            ],
            state: vec![],
            deny_unix_sockets: vec!["/home/ada/.config/relay/relay.sock".into()],
            network: Network::Shared {
                denied_loopback_ports: vec![4850, 5432],
            },
            workdir: "/home/ada/src/demo".into(),
            interactive: true,
            file_mask: "/home/ada/.config/relay/mask".into(),
        };
        let labels = vec![
            (
                PathBuf::from("/home/ada/.config/acme-ltt"),
                "claude_token_file's folder".to_string(),
            ),
            (
                PathBuf::from("/home/ada/src/demo"),
                "the session's directory".to_string(),
            ),
            (
                PathBuf::from("/tmp/relay-s1"),
                "its own temp folder".to_string(),
            ),
        ];
        (spec, labels)
    }

    fn paths(places: &[Place]) -> Vec<&str> {
        places.iter().map(|p| p.path.as_str()).collect()
    }

    #[test]
    fn grants_merged_as_the_renderers_merge_them_and_labelled() {
        let (spec, labels) = spec();
        let e = explain(&spec, Backend::Bwrap, &HostPaths::default(), &labels);
        assert_eq!(paths(&e.read), vec!["/opt/claude/bin"], "merged once");
        assert_eq!(
            paths(&e.write),
            vec!["/home/ada", "/home/ada/src/demo", "/private/tmp/relay-s1"]
        );
        assert_eq!(e.write[1].why, "the session's directory");
        // Labelled by its written spelling, shown with both.
        assert_eq!(e.write[2].why, "its own temp folder");
        assert_eq!(e.write[2].written.as_deref(), Some("/tmp/relay-s1"));
        assert_eq!(e.workdir, "/home/ada/src/demo");
    }

    #[test]
    fn the_token_folder_is_denied_and_said_to_be() {
        let (spec, labels) = spec();
        for backend in [Backend::Bwrap, Backend::Seatbelt] {
            let e = explain(&spec, backend, &HostPaths::default(), &labels);
            let token = e
                .denied
                .iter()
                .find(|p| p.path == "/home/ada/.config/acme-ltt")
                .expect("the token folder is denied");
            assert_eq!(token.why, "claude_token_file's folder");
            assert!(paths(&e.denied).contains(&"/home/ada/.config/acme-ltt/token"));
            assert!(paths(&e.denied).contains(&"/home/ada/.config/relay"));
            assert_eq!(
                paths(&e.denied_sockets),
                vec!["/home/ada/.config/relay/relay.sock"]
            );
        }
    }

    #[test]
    fn only_pins_a_write_grant_holds_are_listed_read_only() {
        let (spec, labels) = spec();
        let e = explain(&spec, Backend::Seatbelt, &HostPaths::default(), &labels);
        // /usr/local/bin lies in no write grant: the renderers leave it out too.
        assert_eq!(paths(&e.read_only), vec!["/home/ada/.local/bin"]);
    }

    #[test]
    fn network_and_ports_per_backend() {
        let (mut spec, labels) = spec();
        let b = explain(&spec, Backend::Bwrap, &HostPaths::default(), &labels);
        assert_eq!(b.network.mode, "shared");
        assert_eq!(b.network.denied_ports, vec![4850, 5432]);
        assert!(b.network.how.contains("Landlock"), "{}", b.network.how);
        let s = explain(&spec, Backend::Seatbelt, &HostPaths::default(), &labels);
        assert!(s.network.how.contains("localhost"), "{}", s.network.how);
        spec.network = Network::Off;
        let off = explain(&spec, Backend::Bwrap, &HostPaths::default(), &labels);
        assert_eq!(
            (off.network.mode.as_str(), off.network.denied_ports.len()),
            ("off", 0)
        );
    }

    #[test]
    fn a_missing_deny_is_a_note_under_bwrap_only() {
        let (spec, labels) = spec();
        let b = explain(&spec, Backend::Bwrap, &HostPaths::default(), &labels);
        let env = b.denied.iter().find(|p| p.path.ends_with(".env")).unwrap();
        assert_eq!(env.kind, "missing");
        assert!(env.how.contains("not masked"), "{}", env.how);
        assert_eq!(b.notes.len(), 1);
        let s = explain(&spec, Backend::Seatbelt, &HostPaths::default(), &labels);
        assert!(s.notes.is_empty());
    }

    #[test]
    fn the_system_baseline_is_the_renderers_own() {
        let (spec, labels) = spec();
        let b = explain(&spec, Backend::Bwrap, &HostPaths::default(), &labels);
        let args = render_bwrap(&spec);
        for p in &b.system {
            assert!(args.contains(&p.path), "{} not in the bwrap args", p.path);
        }
        let host = HostPaths {
            developer_dir: Some("/Applications/Xcode.app/Contents/Developer".into()),
            user_temp_dir: None,
        };
        let s = explain(&spec, Backend::Seatbelt, &host, &labels);
        let sbpl = seatbelt::render_sbpl_on(&spec, &host);
        for p in &s.system {
            assert!(
                sbpl.contains(&format!("\"{}\"", p.path)),
                "{} not in the profile",
                p.path
            );
        }
    }

    /// Every line of the explanation is a rule of the rendered profile: the words and
    /// the profiles come from one spec.
    #[test]
    fn every_explained_path_is_in_both_rendered_profiles() {
        let (spec, labels) = spec();
        let sbpl = render_sbpl(&spec);
        let e = explain(&spec, Backend::Seatbelt, &HostPaths::default(), &labels);
        let rule = |head: &str, p: &Place| {
            let filter = if p.kind == "file" {
                "literal"
            } else {
                "subpath"
            };
            format!("({head} ({filter} \"{}\"))", p.path)
        };
        for p in &e.read {
            let head = "allow file-read* process-exec* file-map-executable";
            assert!(sbpl.contains(&rule(head, p)), "{}", p.path);
        }
        for p in &e.write {
            assert!(
                sbpl.contains(&rule(
                    "allow file-read* process-exec* file-map-executable file-write*",
                    p
                )),
                "{}",
                p.path
            );
        }
        for p in &e.read_only {
            assert!(
                sbpl.contains(&rule("deny file-write* file-link", p)),
                "{}",
                p.path
            );
        }
        for p in &e.denied {
            let s = format!("(literal \"{0}\") (subpath \"{0}\"))", p.path);
            assert!(
                sbpl.contains(&format!(
                    "(deny file-read* process-exec* file-map-executable file-write* file-clone file-link {s}"
                )),
                "{}",
                p.path
            );
        }
        for port in &e.network.denied_ports {
            assert!(sbpl.contains(&format!("localhost:{port}")));
        }
        let args = render_bwrap(&spec);
        let b = explain(&spec, Backend::Bwrap, &HostPaths::default(), &labels);
        let pair = |flag: &str, p: &str| {
            args.windows(3)
                .any(|w| w[0] == flag && w[1] == p && w[2] == p)
        };
        for p in &b.read {
            assert!(pair("--ro-bind", &p.path), "{}", p.path);
        }
        for p in &b.write {
            assert!(pair("--bind", &p.path), "{}", p.path);
        }
        for p in &b.read_only {
            assert!(pair("--ro-bind", &p.path), "{}", p.path);
        }
        let rendered = b
            .denied
            .iter()
            .filter(|p| p.kind != "missing" && !p.how.starts_with("inside"));
        for p in rendered {
            assert!(args.contains(&p.path), "{} not masked", p.path);
        }
    }

    #[test]
    fn text_names_every_section_and_the_token_folder() {
        let (spec, labels) = spec();
        let e = explain(&spec, Backend::Bwrap, &HostPaths::default(), &labels);
        let t = to_text(&e);
        for want in [
            "sandbox: bwrap  (working directory /home/ada/src/demo)",
            "can read:\n  /opt/claude/bin\n",
            "can read and write:\n",
            "  /private/tmp/relay-s1 (written /tmp/relay-s1)  — its own temp folder\n",
            "kept read-only inside those:\n",
            "denied (after every grant):\n  /home/ada/.config/acme-ltt  — claude_token_file's folder; covered by an empty folder of mode 0000\n",
            "  /home/ada/src/demo/.env [missing]; does not exist yet",
            "network: shared; denied ports: 4850, 5432  — ",
        ] {
            assert!(t.contains(want), "{want:?} not in\n{t}");
        }
        let json = serde_json::to_string(&e).unwrap();
        let back: Explanation = serde_json::from_str(&json).unwrap();
        assert_eq!(back, e, "the wire form reads back");
        assert!(to_text(&unsandboxed(Path::new("/w"))).starts_with("not sandboxed"));
    }

    #[test]
    fn the_environment_is_named_never_valued() {
        let (spec, labels) = spec();
        let mut e = explain(&spec, Backend::Bwrap, &HostPaths::default(), &labels);
        assert!(!to_text(&e).contains("environment"));
        e.environment = Some(EnvNames {
            names: ["HOME", "PATH", "RELAY_SESSION_ID", "TMPDIR"]
                .map(String::from)
                .to_vec(),
            inherited: ["HOME", "PATH"].map(String::from).to_vec(),
        });
        let want = "environment (names only):\n  set by relay or the template: RELAY_SESSION_ID TMPDIR\n  from relay's environment: HOME PATH\n";
        assert!(to_text(&e).contains(want), "{}", to_text(&e));
        let json = serde_json::to_string(&e).unwrap();
        let back: Explanation = serde_json::from_str(&json).unwrap();
        assert_eq!(back, e);
        let mut u = unsandboxed(Path::new("/w"));
        u.environment = Some(EnvNames::default());
        assert!(to_text(&u).contains("  from relay's environment: none\n"));
    }
}
