//! The sandbox of one launch: the one place its grants, denies, pins and network are
//! decided from the settings, used by the launch (`launch.rs`) and by
//! `relay sandbox explain` (`explain.rs`) (docs/settings.md, "What every sandboxed
//! launch gets"; docs/THREAT-MODEL.md).

use std::path::{Path, PathBuf};

use super::facts::{Facts, Names};
use super::{exec_files, guard, toolchains};
use crate::daemon::egress::{self, Rules};
use crate::daemon::settings::{NetworkMode, Settings, Template};
use crate::daemon::{Entry, EntryState, Reach};
use crate::protocol::{Backend, SessionKind};
use crate::sandbox::resolve::expand_home;
use crate::sandbox::{self, Network, SpecInput};

/// What [`plan_sandbox`] needs to know about one launch.
pub(in crate::daemon) struct SandboxPlan<'a> {
    pub id: &'a str,
    pub kind: SessionKind,
    pub backend: Backend,
    pub template: &'a Template,
    /// The program the launch runs (`argv[0]`).
    pub program: Option<&'a str>,
    pub project_path: &'a Path,
    /// The canonical working folder, and the one asked for (links checked).
    pub directory: &'a Path,
    pub directory_asked: &'a Path,
    pub temp_dir: &'a Path,
    /// Every configured token file: each denied.
    pub token_deny: &'a [PathBuf],
    /// The launch carries the token: the program pins must hold.
    pub token_launch: bool,
    /// A token launch's home of relay's (`claude_home`), read-only inside.
    pub token_home: Option<&'a Path>,
    pub claude_path_env: &'a std::ffi::OsStr,
    /// What to do with the execution-bearing files bwrap must hold that do not exist
    /// yet: make them (a launch), leave them (a probe), or say them (`explain`).
    pub make_missing: exec_files::Make,
}

/// A launch's sandbox spec (token path denied), what it reaches, the folders some
/// session can write, the denied ports and why each path is in the spec.
pub(in crate::daemon) struct Planned {
    pub spec: sandbox::Spec,
    pub reach: Reach,
    pub writable: Vec<PathBuf>,
    pub ports: Vec<u16>,
    pub labels: Vec<(PathBuf, String)>,
    /// What the explanation says besides the paths: execution-bearing files reopened or
    /// left open, the network a template cannot have here, the macOS opt-ins.
    pub notes: Vec<String>,
    /// A proxied launch's allowlist, for its egress proxy.
    pub egress: Option<Rules>,
    /// What the launch makes before the sandbox starts.
    pub makes: Vec<exec_files::ToMake>,
    /// The person's toolchains it reads.
    pub toolchains: Vec<toolchains::Toolchain>,
}

/// What Claude Code needs with a setup token, on every proxied Claude launch
/// (docs/settings.md#network).
pub(in crate::daemon) const CLAUDE_CODE_EGRESS: &[&str] = &["api.anthropic.com"];

/// A launch's network: off, the host's, or proxied with its allowlist (the settings'
/// defaults, the template's, Claude Code's own on a Claude launch, and the host of each
/// routing URL the launch gets). A note when the template's choice cannot be had here.
fn network_of(
    f: &Facts,
    settings: &Settings,
    p: &SandboxPlan,
    ports: &[u16],
) -> Result<(Network, Option<Rules>, Option<String>), String> {
    let shared = || Network::Shared {
        denied_loopback_ports: ports.to_vec(),
    };
    if settings.session_sandbox.network_off {
        return Ok((Network::Off, None, None));
    }
    match p.template.network.unwrap_or(NetworkMode::Proxied) {
        NetworkMode::None => return Ok((Network::Off, None, None)),
        NetworkMode::Host => {
            let note = "network \"host\": the host's network, shared — not isolated: this \
                        sandbox reaches the host's loopback services and the internet directly";
            return Ok((shared(), None, Some(note.into())));
        }
        NetworkMode::Proxied => {}
    }
    let mut list = settings.session_sandbox.egress.clone();
    list.extend(p.template.egress.iter().cloned());
    if p.kind == SessionKind::Claude || p.template.id == crate::protocol::CLAUDE_CODE_TEMPLATE {
        list.extend(CLAUDE_CODE_EGRESS.iter().map(|h| h.to_string()));
    }
    // Where the launch's routing variables send Claude Code: the template's, else
    // relay's own (the host passes those on).
    let mut routing = std::collections::BTreeMap::new();
    let relay_routing = f.relay_routing();
    for name in egress::ROUTING_URL_VARS {
        if let Some(v) = p
            .template
            .env
            .get(*name)
            .or_else(|| relay_routing.get(*name))
            .cloned()
        {
            routing.insert(name.to_string(), v);
        }
    }
    list.extend(egress::routing_entries(&routing));
    let mut seen = Vec::new();
    list.retain(|e| {
        let new = !seen.contains(e);
        seen.push(e.clone());
        new
    });
    let rules = Rules::parse(&list)?;
    let id = if p.id.is_empty() { "<id>" } else { p.id };
    let network = match p.backend {
        // No network namespace: the profile lets it reach its own proxy's port (bound
        // by the launch) and the listed loopback addresses, nothing else.
        Backend::Seatbelt => {
            // A profile names a port on loopback, not an address: `127.0.0.2:5432`
            // would open the person's `127.0.0.1:5432` instead.
            let bridges = rules.bridges();
            if let Some(b) = bridges
                .iter()
                .find(|b| !matches!(b.ip().to_string().as_str(), "127.0.0.1" | "::1"))
            {
                return Err(format!(
                    "egress entry {b}: under Seatbelt a loopback entry must be 127.0.0.1 or \
                     [::1] (a profile allows a loopback port, not an address)"
                ));
            }
            Network::ProxiedPort {
                port: 0,
                bridges: bridges.iter().map(|b| b.port()).collect(),
                egress: list,
            }
        }
        Backend::Bwrap => Network::Proxied {
            socket: f.paths.egress().join(format!("{id}.sock")),
            egress: list,
        },
    };
    Ok((network, Some(rules), None))
}

/// Why each path is in a spec, in the order they were added.
#[derive(Default)]
struct Labels(Vec<(PathBuf, String)>);

impl Labels {
    fn add(&mut self, path: &Path, why: &str) {
        self.0.push((path.to_path_buf(), why.to_string()));
    }
}

/// Builds the spec of one sandboxed launch from the settings. Errors are
/// `sandbox_unavailable` messages.
pub(in crate::daemon) fn plan_sandbox(
    f: &Facts,
    settings: &Settings,
    p: &SandboxPlan,
) -> Result<Planned, String> {
    let Writable {
        roots: writable,
        pins: mut pin_folders,
        own: own_folders,
        tools,
        tool_pins,
        left_out,
    } = writable_and_pins(f, settings, p)?;
    let mut labels = Labels::default();
    let mut lists = spec_lists(f, p, (&pin_folders, &tools), &mut labels)?;
    for root in tool_pins {
        labels.add(
            &root,
            "a toolchain of yours: read-only wherever a session could write it",
        );
        lists.read_only.push(root.to_string_lossy().into_owned());
    }
    let ports = denied_ports(f, settings);
    let (network, egress, network_note) = network_of(f, settings, p, &ports)?;
    let mut spec = spec_of(f, p, &lists, &writable, network)?;
    let mut reach = reach_of(&spec);
    no_write_to_relays_own(&own_folders, &reach)?;
    let exec = pin_exec_files(f, p, &writable, &mut spec, &reach, &mut labels)?;
    pin_folders.retain(|f| spec.read_only.iter().any(|p| &p.canonical == f));
    reach.pins = pin_folders;
    for tp in p.token_deny {
        deny_token(f, p.backend, tp, &mut spec, &mut reach, &mut labels)?;
    }
    let mut notes = exec.notes;
    notes.extend(left_out);
    notes.extend(network_note);
    notes.extend(sandbox::explain::mac_opt_in_notes(
        &p.template.macos,
        p.backend,
    ));
    Ok(Planned {
        spec,
        reach,
        writable,
        ports,
        labels: labels.0,
        notes,
        egress,
        makes: exec.makes,
        toolchains: tools,
    })
}

/// The spec the lists resolve to (`sandbox::build_spec`), with relay's sockets denied
/// and the launch's own folders in it as the launch will make them ([`as_made`]).
fn spec_of(
    f: &Facts,
    p: &SandboxPlan,
    lists: &SpecLists,
    writable: &[PathBuf],
    network: Network,
) -> Result<sandbox::Spec, String> {
    let mut spec = sandbox::build_spec(
        &SpecInput {
            read: &lists.read,
            read_write: &lists.read_write,
            deny: &lists.deny,
            read_only: &lists.read_only,
            state: &lists.state,
            session_writable: writable,
            network,
            workdir: p.directory,
            interactive: p.kind == SessionKind::Pty,
            file_mask: f.paths.mask(),
            deny_unix_sockets: vec![f.paths.socket(), f.paths.bridge(), f.paths.host_socket()],
        },
        &f.home,
    )
    .map_err(|e| e.to_string())?;
    as_made(&mut spec, &f.names);
    Ok(spec)
}

/// relay's own folder is never a session's to write, not even unpinned: `relay` runs
/// from it at the person's next command, which no later refusal covers.
fn no_write_to_relays_own(own_folders: &[PathBuf], reach: &Reach) -> Result<(), String> {
    if let Some(f) = own_folders
        .iter()
        .find(|f| reach.read_write.iter().any(|rw| rw == *f))
    {
        return Err(format!(
            "{} holds relay's own programs, which run outside every sandbox, so no \
             session may write it; start the session in another folder, or install relay \
             outside every project (cargo install --locked --path . --root /opt/relay)",
            f.display()
        ));
    }
    Ok(())
}

/// What the person's tools run later is read-only wherever a write grant holds it
/// ([`exec_files::plan`]): its pins join the spec's read-only paths and its labels
/// `labels`, but for a pin that holds one of this launch's own read-write grants.
/// The plan, its pins and labels taken.
fn pin_exec_files(
    f: &Facts,
    p: &SandboxPlan,
    writable: &[PathBuf],
    spec: &mut sandbox::Spec,
    reach: &Reach,
    labels: &mut Labels,
) -> Result<exec_files::Pins, String> {
    let mut exec = exec_files::plan(&exec_files::Input {
        backend: p.backend,
        home: &f.home,
        grants: &spec.grants,
        temp_dir: p.temp_dir,
        directory: p.directory,
        session_writable: writable,
        path_env: &f.relay_path(),
        exceptions: &p.template.writable_exceptions,
        make: p.make_missing,
    })?;
    for pin in std::mem::take(&mut exec.pins) {
        if !spec.read_only.iter().any(|r| r.canonical == pin.canonical) {
            spec.read_only.push(pin);
        }
    }
    labels.0.extend(std::mem::take(&mut exec.labels));
    // A pin that holds one of this launch's own read-write grants (the home folder,
    // when a link to the program sits there) would make the session read-only: it is
    // left out, so this session counts as unpinned for it and a later token launch
    // says so (`pins_hold`).
    spec.read_only.retain(|pin| {
        !reach
            .read_write
            .iter()
            .any(|rw| rw.starts_with(&pin.canonical))
    });
    Ok(exec)
}

/// The launch's own folders — its temp folder, and inside it Claude's config folder,
/// its state and a token launch's home — are in the spec as the launch will make them
/// (before it does): where relay makes them, never through a link. The launch checks
/// each one once made (`launch::made::check_own`).
fn as_made(spec: &mut sandbox::Spec, names: &Names) {
    let paths = spec
        .grants
        .iter_mut()
        .map(|g| &mut g.path)
        .chain(spec.read_only.iter_mut())
        .chain(spec.state.iter_mut());
    for p in paths {
        if let Some((canonical, kind)) = own_folder(names, &p.written) {
            p.canonical = canonical;
            p.kind = kind;
        }
    }
}

/// Where relay makes `written` when it is one of a launch's own folders, and what it
/// makes there.
pub(in crate::daemon) fn own_folder(
    names: &Names,
    written: &Path,
) -> Option<(PathBuf, sandbox::PathKind)> {
    let rest = written.strip_prefix(&names.temp_dir).ok()?;
    let file = rest
        .strip_prefix("claude-config")
        .ok()
        .and_then(|name| name.to_str())
        .is_some_and(|name| {
            super::claude_state::STATE
                .iter()
                .any(|s| s.name == name && !s.folder)
        });
    let kind = if file {
        sandbox::PathKind::File
    } else {
        sandbox::PathKind::Dir
    };
    let canonical = match rest.as_os_str().is_empty() {
        true => names.temp_real.clone(),
        false => names.temp_real.join(rest),
    };
    Some((canonical, kind))
}

/// The folders some session can write, after checking that no link in them redirects
/// the project folder or the session directory; and the folders of what a token launch
/// runs that lie in them (to be pinned read-only). A token launch also needs the pins
/// to have held for every session relay remembers.
fn writable_and_pins(f: &Facts, settings: &Settings, p: &SandboxPlan) -> Result<Writable, String> {
    let live_rw: Vec<PathBuf> = f
        .live
        .iter()
        .flat_map(|e| e.record.reach.read_write.iter().cloned())
        .collect();
    let writable = guard::session_writable_roots(settings, &f.home, &live_rw);
    // Links never redirect the project folder or the session directory.
    for place in [p.project_path, p.directory_asked] {
        if let Some(text) = place.to_str() {
            sandbox::resolve::resolve_in(text, &f.home, sandbox::Role::Read, &writable)
                .map_err(|e| e.to_string())?;
        }
    }
    // What a token launch runs is pinned read-only in every sandbox, so no session
    // can swap it for a program that keeps the token — from the first launch on,
    // not only once the setting is set: a program a session planted before the
    // token existed would get the token later.
    let pins: Vec<guard::ProgramPins> = guard::token_programs(settings)
        .iter()
        .map(|prog| guard::program_pins(prog, &f.home, p.claude_path_env))
        .collect();
    let own = own_pins(&f.relay_programs, &f.home);
    let mut pin_folders: Vec<PathBuf> = Vec::new();
    // Only where some session could write: elsewhere a pin changes nothing.
    for f in pins.iter().chain(&own).flat_map(|p| p.folders.iter()) {
        if writable.iter().any(|r| f.starts_with(r)) && !pin_folders.contains(f) {
            pin_folders.push(f.clone());
        }
    }
    guard::launcher_outside_sessions(&settings.launcher(&f.home), &writable)?;
    let remembered = &f.remembered;
    pins_hold(&own, &writable, remembered, "relay's own program")?;
    if p.token_launch {
        pins_hold(&pins, &writable, remembered, "the Claude program")?;
    }
    let found = toolchains::found(&f.home, &f.relay_path(), p.backend, |n| {
        f.relay_var(n).map(PathBuf::from)
    });
    // Every toolchain root is read-only wherever this launch could write it, whatever
    // its template says: another sandbox, running or later, may read it. Not among the
    // pins a token launch's `PATH` trusts: what was written there before stays.
    let tool_pins: Vec<PathBuf> = found
        .iter()
        .map(|t| t.root.clone())
        .filter(|root| writable.iter().any(|r| root.starts_with(r)))
        .collect();
    toolchains_not_under_a_reader(f, p, &found)?;
    let (tools, left_out) = toolchains_kept(found, p, (&writable, remembered));
    Ok(Writable {
        roots: writable,
        pins: pin_folders,
        own: own.into_iter().flat_map(|p| p.folders).collect(),
        tools,
        tool_pins,
        left_out,
    })
}

/// A launch whose own write grants reach a toolchain root that a running sandbox reads
/// is refused: it could change what that sandbox runs (a pin cannot hold a folder the
/// launch itself is granted to write).
fn toolchains_not_under_a_reader(
    f: &Facts,
    p: &SandboxPlan,
    found: &[toolchains::Toolchain],
) -> Result<(), String> {
    let own: Vec<PathBuf> = p
        .template
        .read_write
        .iter()
        .map(|g| expand_home(g, &f.home))
        .map(|g| std::fs::canonicalize(&g).unwrap_or(g))
        .chain(std::iter::once(p.directory.to_path_buf()))
        .collect();
    for t in found {
        // A grant above the root leaves it pinned; one at or below it cannot be.
        let Some(grant) = own.iter().find(|g| g.starts_with(&t.root)) else {
            continue;
        };
        if let Some(e) = f
            .live
            .iter()
            .find(|e| e.record.reach.grants.contains(&t.root))
        {
            return Err(format!(
                "{} is a toolchain session {} reads, and this launch could write it ({}): \
                 that would change what the session runs; stop session {} first, or leave \
                 the folder out of this template's read_write",
                t.root.display(),
                e.record.id,
                grant.display(),
                e.record.id
            ));
        }
    }
    Ok(())
}

/// The person's toolchains this launch reads, of those `toolchains::found`. A root some
/// session can write now (pinned read-only in it, but not in sessions started before),
/// or one relay remembers could write, is left out and said: what a session wrote
/// there must never run in another sandbox (docs/settings.md#toolchains).
fn toolchains_kept(
    found: Vec<toolchains::Toolchain>,
    p: &SandboxPlan,
    (writable, remembered): (&[PathBuf], &[Entry]),
) -> (Vec<toolchains::Toolchain>, Vec<String>) {
    if !p.template.toolchains {
        return (Vec::new(), Vec::new());
    }
    let (mut kept, mut left_out) = (Vec::new(), Vec::new());
    for t in found {
        // A grant of the root, above it or below it: the session could change it.
        let touches = |g: &PathBuf| t.root.starts_with(g) || g.starts_with(&t.root);
        let now = writable
            .iter()
            .find(|g| touches(g))
            .map(|g| g.display().to_string());
        let before = remembered.iter().find_map(|e| {
            let g = e.record.reach.read_write.iter().find(|g| touches(g))?;
            Some(format!(
                "session {} could write {}",
                e.record.id,
                g.display()
            ))
        });
        match now.map(|g| format!("sessions can write {g}")).or(before) {
            Some(why) => left_out.push(format!(
                "toolchain not granted: {} ({}); {why}, so what runs there may be a session's",
                t.root.display(),
                t.why
            )),
            None => kept.push(t),
        }
    }
    (kept, left_out)
}

/// relay's own programs run outside every sandbox (the helpers at every launch and
/// host start, `relay` at the person's next command): their folders are pinned like the
/// Claude program's (docs/THREAT-MODEL.md#relays-own-programs).
fn own_pins(programs: &[PathBuf], home: &Path) -> Vec<guard::ProgramPins> {
    programs
        .iter()
        .filter_map(|prog| prog.to_str())
        .map(|prog| guard::program_pins(prog, home, std::ffi::OsStr::new("")))
        .collect()
}

/// Whether every session relay remembers left relay's own folder alone: checked at
/// start, before either helper runs, and by every launch.
pub(in crate::daemon) fn own_pins_hold(home: &Path, remembered: &[Entry]) -> Result<(), String> {
    pins_hold(
        &own_pins(&guard::relay_programs(), home),
        &[],
        remembered,
        "relay's own program",
    )
}

/// What [`writable_and_pins`] found.
struct Writable {
    /// Every folder some session can write.
    roots: Vec<PathBuf>,
    /// The pinned folders that lie in them.
    pins: Vec<PathBuf>,
    /// The folders of relay's own programs, pinned or not.
    own: Vec<PathBuf>,
    /// The person's toolchains this launch reads.
    tools: Vec<toolchains::Toolchain>,
    /// The toolchain roots this launch could write, held read-only in it.
    tool_pins: Vec<PathBuf>,
    /// Why a toolchain was left out of a launch that gets the token.
    left_out: Vec<String>,
}

/// The path lists of a spec before resolution.
struct SpecLists {
    read: Vec<String>,
    read_write: Vec<String>,
    deny: Vec<String>,
    read_only: Vec<String>,
    /// Writable again inside `read_only` (Claude Code's state).
    state: Vec<String>,
}

/// The template's lists plus what every sandboxed launch gets (docs/settings.md).
fn spec_lists(
    f: &Facts,
    p: &SandboxPlan,
    (pins, tools): (&[PathBuf], &[toolchains::Toolchain]),
    labels: &mut Labels,
) -> Result<SpecLists, String> {
    let t = p.template;
    let mut read = t.read.clone();
    for r in &t.read {
        labels.add(&expand_home(r, &f.home), "the template's read");
    }
    for tool in tools {
        labels.add(
            &tool.root,
            &format!("your toolchain, read-only: {}", tool.why),
        );
        read.push(tool.root.to_string_lossy().into_owned());
    }
    if let Some(program) = p.program.map(PathBuf::from).filter(|p| p.is_absolute()) {
        for dir in program_dirs(&program) {
            labels.add(&dir, "the program's folder");
            read.push(dir.to_string_lossy().into_owned());
        }
    }
    // The shim starts every sandboxed target through `relay-shim enter` inside, which
    // gives it its environment and folder there (docs/session-host.md).
    let shim = f.shim.clone()?;
    labels.add(&shim, "relay-shim, which starts the tool inside (enter)");
    read.push(shim.to_string_lossy().into_owned());
    labels.add(p.directory, "the session's directory");
    labels.add(p.temp_dir, "its own temp folder (TMPDIR)");
    let mut read_write = t.read_write.clone();
    for rw in &t.read_write {
        labels.add(&expand_home(rw, &f.home), "the template's read_write");
    }
    read_write.push(p.directory.to_string_lossy().into_owned());
    read_write.push(p.temp_dir.to_string_lossy().into_owned());
    let mut deny = t.deny.clone();
    for dn in &t.deny {
        labels.add(&expand_home(dn, &f.home), "the template's deny");
    }
    labels.add(
        &f.paths.config,
        "relay's config dir: settings, api-token, sockets, profiles, logs",
    );
    deny.push(f.paths.config.to_string_lossy().into_owned());
    mask_credentials(f, p, (&read, &read_write), (&mut deny, labels));
    for f in pins {
        labels.add(f, "what a token launch runs (pinned)");
    }
    let mut read_only: Vec<String> = pins
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let mut state = Vec::new();
    if p.token_launch {
        // Claude Code reads its configuration from this folder at every start, and its
        // user settings again while it runs (`.config.json`'s or `settings.json`'s
        // `env.PATH` or `env.ANTHROPIC_BASE_URL` would run a planted program beside the
        // token, or take the next turn's bearer away): read-only to every process of
        // the launch, Claude Code included, but for the state it writes there
        // (docs/THREAT-MODEL.md#claudes-configuration).
        let config = p.temp_dir.join("claude-config");
        labels.add(
            &config,
            "Claude Code's config folder: its configuration, relay's and read-only",
        );
        read_only.push(config.to_string_lossy().into_owned());
        for s in super::claude_state::STATE {
            let path = config.join(s.name);
            labels.add(&path, &format!("Claude Code's state: {}", s.why));
            state.push(path.to_string_lossy().into_owned());
        }
    }
    if let Some(home) = p.token_home {
        labels.add(
            home,
            "relay's home for this launch (HOME): its git identity, no start-up files",
        );
        read_only.push(home.to_string_lossy().into_owned());
    }
    Ok(SpecLists {
        read,
        read_write,
        deny,
        read_only,
        state,
    })
}

/// The credential files a grant of this launch holds, masked
/// ([`toolchains::CREDENTIALS`]).
fn mask_credentials(
    f: &Facts,
    p: &SandboxPlan,
    (read, read_write): (&[String], &[String]),
    (deny, labels): (&mut Vec<String>, &mut Labels),
) {
    for (path, why) in credential_masks(&f.home, read, read_write, p.backend) {
        labels.add(&path, why);
        deny.push(path.to_string_lossy().into_owned());
    }
}

/// What [`mask_credentials`] masks, each with its reason: every credential file one of
/// the grants holds, as the grant is written or where it really is. bwrap masks only
/// what exists (a mount point); Seatbelt denies a path either way. A credential that
/// is a link (a dotfile manager's, `~/.npmrc` → `~/dotfiles/npmrc`) is masked where it
/// leads, when a grant holds that: the link itself is left as it is, since masking
/// through a link a session could retarget would refuse every launch.
fn credential_masks(
    home: &Path,
    read: &[String],
    read_write: &[String],
    backend: Backend,
) -> Vec<(PathBuf, &'static str)> {
    let grants: Vec<PathBuf> = read
        .iter()
        .chain(read_write)
        .map(|g| expand_home(g, home))
        .flat_map(|g| [std::fs::canonicalize(&g).ok(), Some(g)])
        .flatten()
        .collect();
    let held = |p: &Path| grants.iter().any(|g| p.starts_with(g));
    let real_home = std::fs::canonicalize(home).unwrap_or_else(|_| home.to_path_buf());
    let mut masks = Vec::new();
    const FILE: &str = "a credential file: masked wherever a grant holds it";
    const LED_TO: &str =
        "a credential file behind a link: masked where it leads, wherever a grant holds that";
    for c in toolchains::CREDENTIALS {
        let cred = home.join(c);
        let named = held(&cred) || held(&real_home.join(c));
        match cred.symlink_metadata() {
            // Where the link leads is what a grant must not hold, whatever holds the
            // link's own name (a grant of `~/dotfiles` alone, say).
            Ok(m) if m.file_type().is_symlink() => {
                if let Ok(real) = std::fs::canonicalize(&cred) {
                    if held(&real) && !masks.iter().any(|(p, _)| *p == real) {
                        masks.push((real, LED_TO));
                    }
                }
            }
            Ok(_) if named => masks.push((cred, FILE)),
            Err(_) if named && backend == Backend::Seatbelt => masks.push((cred, FILE)),
            _ => {}
        }
    }
    masks
}

/// The settings' denied loopback ports and relay's own API port, sorted.
fn denied_ports(f: &Facts, settings: &Settings) -> Vec<u16> {
    let mut ports = settings.session_sandbox.denied_loopback_ports.clone();
    if let Some(port) = f.api_port {
        ports.push(port);
    }
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// The canonical folders a spec grants, and those it grants read-write.
fn reach_of(spec: &sandbox::Spec) -> Reach {
    Reach {
        grants: spec
            .grants
            .iter()
            .map(|g| g.path.canonical.clone())
            .collect(),
        read_write: spec
            .grants
            .iter()
            .filter(|g| g.access == sandbox::Access::ReadWrite)
            .map(|g| g.path.canonical.clone())
            .collect(),
        ..Default::default()
    }
}

/// A configured token path, denied on every sandboxed launch: its own folder masked
/// whole where it can be (a token saved there later by rename stays hidden).
fn deny_token(
    f: &Facts,
    backend: Backend,
    tp: &Path,
    spec: &mut sandbox::Spec,
    reach: &mut Reach,
    labels: &mut Labels,
) -> Result<(), String> {
    let td = guard::token_deny(tp, &f.home, &reach.grants, backend == Backend::Seatbelt)?;
    for dp in &td.deny {
        let why = if dp == tp {
            "claude_token_file: the token is only ever on fd 5"
        } else {
            "claude_token_file's own folder, masked whole: the token is only ever on fd 5"
        };
        labels.add(dp, why);
        let r = sandbox::resolve(&dp.to_string_lossy(), &f.home, sandbox::Role::Deny)
            .map_err(|e| e.to_string())?;
        spec.deny.push(r);
    }
    reach.token_paths.push(tp.to_path_buf());
    if backend == Backend::Bwrap {
        if let Some(f) = td.exposed_folder {
            let id = guard::identity(&f);
            reach.token_folders.push((f, id));
        }
    }
    Ok(())
}

/// Whether the programs a token launch runs are beyond every session's reach: no
/// missing `PATH` folder before them that a session could create, and no session relay
/// remembers — running, ended (across restarts: the ledger keeps what each could
/// write) or purged since this start — that could write one of their folders because
/// it started without the pins (what it wrote there stays).
fn pins_hold(
    pins: &[guard::ProgramPins],
    writable: &[PathBuf],
    sessions: &[Entry],
    what: &str,
) -> Result<(), String> {
    for p in pins {
        let program = p
            .program
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "claude".into());
        if let Some((file, n)) = p.stray_links.first() {
            return Err(format!(
                "{what} {program}: {} has {n} names (hard links), some outside \
                 the folders relay keeps read-only, so a session could write it through \
                 another name; remove the extra links (or reinstall) and launch again",
                file.display()
            ));
        }
        if let Some(missing) = p
            .missing_path_dirs
            .iter()
            .find(|m| writable.iter().any(|r| m.starts_with(r)))
        {
            return Err(format!(
                "the PATH folder {} comes before {program} and does not exist: a sandboxed \
                 session could create it and put its own program there for the token; \
                 create it, drop it from relay's PATH, or set claude_path to the absolute path",
                missing.display()
            ));
        }
        for folder in &p.folders {
            if let Some(e) = sessions
                .iter()
                .find(|e| could_change_unpinned(folder, &e.record.reach))
            {
                let running = matches!(e.record.state, EntryState::Running | EntryState::Launching);
                return Err(format!(
                    "{what} {program}: session {} {} write {} without the pin \
                     that protects it, so what runs there may be its own; {}check the \
                     program, purge that session, then restart relay serve (it forgets \
                     purged sessions)",
                    e.record.id,
                    if running { "can" } else { "could" },
                    folder.display(),
                    if running { "stop that session, " } else { "" }
                ));
            }
        }
    }
    Ok(())
}

/// Whether a session that reached `reach` could change the pinned `folder` without the
/// pin. Only a read-write grant of the folder itself or of a folder above it can: it
/// replaces the folder's entries, or renames the folder away and puts another in its
/// place. A grant below the folder writes inside that grant and nowhere else, so it
/// leaves the folder as it is (every session's temp folder lies below `/`, which is
/// pinned wherever `/bin` is a link). The session's own pin of the folder, or of a
/// folder above it, kept the folder read-only.
fn could_change_unpinned(folder: &Path, reach: &Reach) -> bool {
    reach.read_write.iter().any(|r| folder.starts_with(r))
        && !reach.pins.iter().any(|pin| folder.starts_with(pin))
}

/// The names a launch's environment will have (never values), from the host's own
/// recipe (`crate::host::env::build`) given relay's environment, which the host
/// inherits, and the request's `env` (`launch::relay_env`): what `relay sandbox
/// explain` and the Settings page show. `allowlist` is the launch's `env_passthrough`
/// when it is sandboxed.
pub(in crate::daemon) fn env_names(
    f: &Facts,
    request_env: &std::collections::BTreeMap<String, String>,
    allowlist: Option<&[String]>,
    token_launch: bool,
    pty: bool,
) -> sandbox::explain::EnvNames {
    let bridge = f.paths.bridge();
    let built = crate::host::env::build(crate::host::env::EnvInput {
        base: f.relay_env.to_vec(),
        template: request_env,
        host_names: crate::host::env::host_names("<id>", Some(&bridge)),
        token_launch,
        allowlist,
        pty,
    });
    sandbox::explain::EnvNames {
        names: built
            .vars
            .keys()
            .map(|k| k.to_string_lossy().into_owned())
            .collect(),
        inherited: built.inherited,
    }
}

/// The folder of the program, of each link on the way to its real file (a link to a
/// link: `~/.local/bin/claude` → `versions/current` → the binary), and of the real
/// file: a sandboxed launch can only run what it can read, every hop included.
fn program_dirs(program: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut add = |dir: &Path| {
        if !out.iter().any(|d| d == dir) {
            out.push(dir.to_path_buf());
        }
    };
    // The program, then each link it names in turn (a file link's own folder; a link
    // among the folders above, such as `/bin` → `usr/bin`, is the sandbox's to lay out
    // and grants nothing here), at most as many as the kernel follows.
    let mut hop = program.to_path_buf();
    for _ in 0..40 {
        let Some(dir) = hop.parent().map(Path::to_path_buf) else {
            break;
        };
        // As the link names it (without `..`), and where that really is.
        if !dir
            .components()
            .any(|c| c == std::path::Component::ParentDir)
        {
            add(&dir);
        }
        if let Ok(real) = std::fs::canonicalize(&dir) {
            add(&real);
        }
        // The real file's folder is the last hop's, found where that really is.
        match std::fs::read_link(&hop) {
            Ok(target) => hop = dir.join(target),
            Err(_) => break,
        }
    }
    // System folders are in the baseline already; granting `/usr/bin` again is harmless.
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::records::ledger::test_record;

    /// An ended terminal relay remembers, with these read-write grants and pins.
    fn session(id: &str, read_write: &[&str], pins: &[&str]) -> Entry {
        let mut record = test_record(id, SessionKind::Pty, EntryState::Exited);
        record.reach = Reach {
            read_write: read_write.iter().map(PathBuf::from).collect(),
            pins: pins.iter().map(PathBuf::from).collect(),
            ..Default::default()
        };
        record.into_entry(3).0
    }

    /// The pins of a program whose only pinned folder is `folder`.
    fn pinned(folder: &str) -> Vec<guard::ProgramPins> {
        vec![guard::ProgramPins {
            program: Some(PathBuf::from("/home/ada/.local/bin/claude")),
            folders: vec![PathBuf::from(folder)],
            ..Default::default()
        }]
    }

    #[test]
    fn a_credential_a_grant_holds_is_masked_and_one_behind_a_link_where_it_leads() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        let home = root.join("home");
        for dir in ["home/.ssh", "home/dotfiles", "home/.aws", "elsewhere"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        std::fs::write(home.join(".ssh/id_ed25519"), "key").unwrap();
        std::fs::write(home.join("dotfiles/npmrc"), "//r/:_authToken=x").unwrap();
        std::os::unix::fs::symlink(home.join("dotfiles/npmrc"), home.join(".npmrc")).unwrap();
        std::fs::write(root.join("elsewhere/credentials"), "aws").unwrap();
        std::os::unix::fs::symlink(
            root.join("elsewhere/credentials"),
            home.join(".aws/credentials"),
        )
        .unwrap();
        let masks = |read: &[&str], backend| {
            let read: Vec<String> = read.iter().map(|s| s.to_string()).collect();
            let mut v: Vec<PathBuf> = credential_masks(&home, &read, &[], backend)
                .into_iter()
                .map(|(p, _)| p)
                .collect();
            v.sort();
            v
        };
        // The home read whole: the key where it is, the npmrc where its link leads (the
        // link left as it is), and not the AWS file, which no grant holds.
        assert_eq!(
            masks(&["~"], Backend::Bwrap),
            [home.join(".ssh/id_ed25519"), home.join("dotfiles/npmrc")]
        );
        // A grant of the dotfiles alone: the npmrc where the link leads all the same.
        assert_eq!(
            masks(&["~/dotfiles"], Backend::Bwrap),
            [home.join("dotfiles/npmrc")]
        );
        // One that holds neither the key nor a link's end masks nothing.
        assert_eq!(masks(&["~/.aws"], Backend::Bwrap), Vec::<PathBuf>::new());
        // A grant of `elsewhere` too: the AWS file where its link leads.
        let both = masks(
            &["~", &root.join("elsewhere").to_string_lossy()],
            Backend::Bwrap,
        );
        assert!(
            both.contains(&root.join("elsewhere/credentials")),
            "{both:?}"
        );
        // Seatbelt denies what is not there as well.
        let seatbelt = masks(&["~"], Backend::Seatbelt);
        assert!(
            seatbelt.contains(&home.join(".kube/config")),
            "{seatbelt:?}"
        );
        assert!(!masks(&["~"], Backend::Bwrap).contains(&home.join(".kube/config")));
    }

    #[test]
    fn a_program_reached_through_a_link_to_a_link_gets_every_hops_folder() {
        let d = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(d.path()).unwrap();
        for dir in ["bin", "versions", "real"] {
            std::fs::create_dir(root.join(dir)).unwrap();
        }
        std::fs::write(root.join("real/claude"), "#!/bin/sh\n").unwrap();
        std::os::unix::fs::symlink(root.join("real/claude"), root.join("versions/current"))
            .unwrap();
        std::os::unix::fs::symlink(root.join("versions/current"), root.join("bin/claude")).unwrap();
        let dirs = program_dirs(&root.join("bin/claude"));
        for want in ["bin", "versions", "real"] {
            assert!(dirs.contains(&root.join(want)), "{want}: {dirs:?}");
        }
        assert_eq!(dirs.len(), 3, "{dirs:?}");
        // Named through a folder link, with a relative hop: the folder as written and
        // where it is; a hop's folder written with `..` only where it really is.
        std::os::unix::fs::symlink(root.join("bin"), root.join("lbin")).unwrap();
        std::fs::remove_file(root.join("bin/claude")).unwrap();
        std::os::unix::fs::symlink("../versions/current", root.join("bin/claude")).unwrap();
        let dirs = program_dirs(&root.join("lbin/claude"));
        let want: Vec<PathBuf> = ["lbin", "bin", "versions", "real"]
            .iter()
            .map(|d| root.join(d))
            .collect();
        assert_eq!(dirs, want);
    }

    #[test]
    fn a_grant_of_the_pinned_folder_or_above_it_refuses_and_one_below_it_does_not() {
        let folder = "/home/ada/.local/bin";
        let refused = |rw: &str| {
            let e = session("t-000000000001", &[rw], &[]);
            let msg = pins_hold(&pinned(folder), &[], &[e], "the Claude program").unwrap_err();
            assert!(
                msg.contains("t-000000000001") && msg.contains(folder),
                "{rw}: {msg}"
            );
        };
        // The folder itself: its entries can be replaced.
        refused(folder);
        // A folder above it: it can be renamed away and another put in its place.
        refused("/home/ada/.local");
        refused("/home/ada");
        refused("/");
        let held = |rw: &str, pins: &[&str]| {
            let e = session("t-000000000002", &[rw], pins);
            assert_eq!(
                pins_hold(&pinned(folder), &[], &[e], "the Claude program"),
                Ok(()),
                "{rw} {pins:?}"
            );
        };
        // Below it: the grant writes inside itself, never the folder's own entries.
        held("/home/ada/.local/bin/sub", &[]);
        // Beside it, or elsewhere.
        held("/home/ada/.local/binaries", &[]);
        held("/home/ada/project", &[]);
        // With the pin (of the folder, or of a folder above it) the folder stayed
        // read-only whatever the grant.
        held("/home/ada", &[folder]);
        held("/home/ada", &["/home/ada/.local"]);
    }

    #[test]
    fn every_sessions_temp_folder_below_a_pinned_root_leaves_token_launches_alone() {
        // `/bin` a link to `/usr/bin` and a `#!/bin/sh` program: `/` holds the link and
        // is pinned. Every session writes only below it.
        let pins = pinned("/");
        let sessions = [
            session("t-000000000003", &["/tmp/relay-t-000000000003"], &[]),
            session(
                "t-000000000004",
                &["/home/ada/project", "/tmp/relay-t-000000000004"],
                &[],
            ),
        ];
        assert_eq!(
            pins_hold(&pins, &[], &sessions, "the Claude program"),
            Ok(())
        );
        // A session granted `/` itself could rename `/bin` away.
        let root = session("t-000000000005", &["/"], &[]);
        assert!(pins_hold(&pins, &[], &[root], "the Claude program").is_err());
    }

    /// The facts of a machine of its own whose home holds `proj`, with one sandboxed
    /// `shell` template granting nothing more: a literal, no daemon.
    struct World {
        _dir: tempfile::TempDir,
        f: Facts,
        template: Template,
        temp: PathBuf,
    }

    impl World {
        fn new() -> World {
            let dir = tempfile::tempdir().unwrap();
            let root = std::fs::canonicalize(dir.path()).unwrap();
            for sub in ["config", "home/proj", "tmp/relay-s-1", "helpers"] {
                std::fs::create_dir_all(root.join(sub)).unwrap();
            }
            let shim = root.join("helpers/relay-shim");
            std::fs::write(&shim, "relay-shim").unwrap();
            let tmp = root.join("tmp");
            let f = Facts {
                home: root.join("home"),
                paths: crate::daemon::paths::Paths {
                    config: root.join("config"),
                },
                relay_env: vec![("PATH".into(), "/usr/bin:/bin".into())],
                api_port: None,
                shim: Ok(shim),
                relay_programs: guard::relay_programs(),
                live: vec![],
                remembered: vec![],
                caller_inside_session: false,
                prior: None,
                host_paths: Default::default(),
                names: Names::new(&tmp, &tmp, "s-1", "home-t"),
                limits: crate::limits::Prepared::None("a test".into()),
            };
            let mut template = Template::new("shell", "shell", "/bin/sh");
            template.sandbox = true;
            // Read from the template, not from the test's own environment.
            template.env.insert(
                "ANTHROPIC_BASE_URL".into(),
                "https://api.anthropic.com".into(),
            );
            let temp = tmp.join("relay-s-1");
            World {
                _dir: dir,
                f,
                template,
                temp,
            }
        }

        fn settings(&self) -> Settings {
            let mut s = Settings {
                projects: vec![crate::daemon::settings::Project {
                    id: "p".into(),
                    name: "P".into(),
                    path: "~/proj".into(),
                    allowed_templates: vec!["*".into()],
                    allow_home_directory: false,
                    claude_token_file: None,
                    account: None,
                }],
                terminal_templates: vec![self.template.clone()],
                ..Default::default()
            };
            s.session_sandbox.denied_loopback_ports = vec![8080, 22, 8080];
            s
        }

        fn plan<'a>(
            &'a self,
            kind: SessionKind,
            backend: Backend,
            dir: &'a Path,
        ) -> SandboxPlan<'a> {
            SandboxPlan {
                id: "s-1",
                kind,
                backend,
                template: &self.template,
                program: Some("/bin/sh"),
                project_path: dir,
                directory: dir,
                directory_asked: dir,
                temp_dir: &self.temp,
                token_deny: &[],
                token_launch: false,
                token_home: None,
                claude_path_env: std::ffi::OsStr::new(""),
                make_missing: exec_files::Make::Leave,
            }
        }

        fn proj(&self) -> PathBuf {
            self.f.home.join("proj")
        }

        fn temp(&self) -> PathBuf {
            self.temp.clone()
        }
    }

    fn list(network: &Network) -> Vec<String> {
        match network {
            Network::Proxied { egress, .. } | Network::ProxiedPort { egress, .. } => egress.clone(),
            other => panic!("not proxied: {other:?}"),
        }
    }

    #[test]
    fn claude_code_s_own_host_joins_the_list_of_a_claude_launch_alone_and_each_entry_once() {
        let mut w = World::new();
        w.template.egress = vec!["a.org".into(), "b.org:8443".into(), "a.org".into()];
        let s = w.settings();
        let proj = w.proj();
        let net = |w: &World, kind, id: &str| {
            let mut t = w.template.clone();
            t.id = id.into();
            let mut p = w.plan(kind, Backend::Bwrap, &proj);
            p.template = &t;
            list(&network_of(&w.f, &s, &p, &[]).unwrap().0)
        };
        // The routing variable's host (the same as Claude Code's own) counts once.
        assert_eq!(
            net(&w, SessionKind::Pty, "shell"),
            vec!["a.org", "b.org:8443", "api.anthropic.com:443"]
        );
        assert_eq!(
            net(&w, SessionKind::Claude, "shell"),
            vec![
                "a.org",
                "b.org:8443",
                "api.anthropic.com",
                "api.anthropic.com:443"
            ]
        );
        assert_eq!(
            net(&w, SessionKind::Pty, crate::protocol::CLAUDE_CODE_TEMPLATE),
            vec![
                "a.org",
                "b.org:8443",
                "api.anthropic.com",
                "api.anthropic.com:443"
            ]
        );
        let p = w.plan(SessionKind::Pty, Backend::Bwrap, &proj);
        let Network::Proxied { socket, .. } = network_of(&w.f, &s, &p, &[]).unwrap().0 else {
            panic!()
        };
        assert_eq!(socket, w.f.paths.egress().join("s-1.sock"));
    }

    #[test]
    fn under_seatbelt_a_loopback_entry_must_be_127_0_0_1_or_the_v6_loopback() {
        let mut w = World::new();
        let proj = w.proj();
        w.template.egress = vec!["127.0.0.1:5432".into(), "[::1]:6379".into()];
        let s = w.settings();
        let p = w.plan(SessionKind::Pty, Backend::Seatbelt, &proj);
        let Network::ProxiedPort { bridges, .. } = network_of(&w.f, &s, &p, &[]).unwrap().0 else {
            panic!()
        };
        assert_eq!(bridges, vec![5432, 6379]);
        w.template.egress = vec!["127.0.0.2:5432".into()];
        let p = w.plan(SessionKind::Pty, Backend::Seatbelt, &proj);
        let e = network_of(&w.f, &s, &p, &[]).unwrap_err();
        assert!(
            e.contains("127.0.0.2:5432") && e.contains("must be 127.0.0.1"),
            "{e}"
        );
        // bwrap bridges any loopback address into the sandbox's own loopback.
        let p = w.plan(SessionKind::Pty, Backend::Bwrap, &proj);
        assert!(network_of(&w.f, &s, &p, &[]).is_ok());
    }

    #[test]
    fn a_plan_grants_the_directory_and_temp_folder_labels_each_path_and_denies_the_ports_once() {
        let w = World::new();
        let (proj, temp) = (w.proj(), w.temp());
        let s = w.settings();
        let p = w.plan(SessionKind::Pty, Backend::Bwrap, &proj);
        let planned = plan_sandbox(&w.f, &s, &p).unwrap();
        assert!(planned.spec.interactive);
        assert_eq!(planned.ports, vec![22, 8080]);
        assert_eq!(planned.reach.read_write, vec![proj.clone(), temp.clone()]);
        assert_eq!(
            planned.reach.grants,
            planned
                .spec
                .grants
                .iter()
                .map(|g| g.path.canonical.clone())
                .collect::<Vec<_>>()
        );
        assert!(
            planned.reach.grants.contains(&PathBuf::from("/bin"))
                || planned.reach.grants.contains(&PathBuf::from("/usr/bin"))
        );
        for (path, why) in [
            (&proj, "the session's directory"),
            (&temp, "its own temp folder (TMPDIR)"),
            (
                &w.f.paths.config,
                "relay's config dir: settings, api-token, sockets, profiles, logs",
            ),
        ] {
            assert!(
                planned.labels.iter().any(|(p, w)| p == path && w == why),
                "{path:?} {why}: {:?}",
                planned.labels
            );
        }
        let p = w.plan(SessionKind::Claude, Backend::Bwrap, &proj);
        assert!(!plan_sandbox(&w.f, &s, &p).unwrap().spec.interactive);
    }

    #[test]
    fn a_token_launch_pins_claudes_config_folder_whole_but_for_its_state() {
        let w = World::new();
        let (proj, temp) = (w.proj(), w.temp());
        let cfg = temp.join("claude-config");
        crate::daemon::launch::claude_config::seed(&cfg, &proj).unwrap();
        let s = w.settings();
        let mut p = w.plan(SessionKind::Claude, Backend::Bwrap, &proj);
        let planned = plan_sandbox(&w.f, &s, &p).unwrap();
        assert!(!planned.spec.read_only.iter().any(|r| r.canonical == cfg));
        assert!(planned.spec.state.is_empty());
        p.token_launch = true;
        let planned = plan_sandbox(&w.f, &s, &p).unwrap();
        assert!(planned.spec.read_only.iter().any(|r| r.canonical == cfg));
        let state: Vec<PathBuf> = planned
            .spec
            .state
            .iter()
            .map(|r| r.canonical.clone())
            .collect();
        let want: Vec<PathBuf> = super::super::claude_state::STATE
            .iter()
            .map(|s| cfg.join(s.name))
            .collect();
        assert_eq!(state, want);
        assert!(planned.labels.iter().any(|(path, why)| path == &cfg
            && why == "Claude Code's config folder: its configuration, relay's and read-only"));
        assert!(planned
            .labels
            .iter()
            .any(|(path, why)| *path == cfg.join("projects")
                && why.starts_with("Claude Code's state: its transcripts")));
        // Both render: the folder read-only, each state name writable again after it.
        let args = crate::sandbox::render_bwrap(&planned.spec);
        let bound = |flag: &str, path: &Path| {
            args.windows(3)
                .position(|w| w[0] == flag && Path::new(&w[1]) == path && w[1] == w[2])
        };
        let folder = bound("--ro-bind", &cfg).expect("the folder read-only");
        let projects = bound("--bind", &cfg.join("projects")).expect("projects writable");
        assert!(folder < projects);
    }

    #[test]
    fn a_repositorys_hooks_and_config_are_pinned_and_held_once_made() {
        let w = World::new();
        let proj = w.proj();
        std::fs::create_dir_all(proj.join(".git/hooks")).unwrap();
        std::fs::write(proj.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(proj.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        let s = w.settings();
        let planned =
            plan_sandbox(&w.f, &s, &w.plan(SessionKind::Pty, Backend::Bwrap, &proj)).unwrap();
        let read_only: Vec<PathBuf> = planned
            .spec
            .read_only
            .iter()
            .map(|r| r.canonical.clone())
            .collect();
        // The launch (bwrap alone) holds each once made.
        let held = crate::daemon::launch::made::held(&planned.spec);
        for pinned in [proj.join(".git/hooks"), proj.join(".git/config")] {
            assert_eq!(
                read_only.iter().filter(|r| **r == pinned).count(),
                1,
                "{pinned:?} in {read_only:?}"
            );
            assert!(
                held.iter().any(|(p, id)| *p == pinned && id.is_some()),
                "{pinned:?} not held: {held:?}"
            );
        }
    }

    #[test]
    fn a_program_folder_some_session_can_write_is_pinned_and_one_outside_every_grant_is_not() {
        let mut w = World::new();
        let proj = w.proj();
        let outside = w.f.home.parent().unwrap().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::create_dir_all(proj.join("bin")).unwrap();
        std::fs::write(outside.join("claude"), "\x7fELF").unwrap();
        std::fs::set_permissions(
            outside.join("claude"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        std::os::unix::fs::symlink(outside.join("claude"), proj.join("bin/claude")).unwrap();
        w.template.command = "/bin/sh".into();
        let mut s = w.settings();
        s.claude_path = proj.join("bin/claude").to_string_lossy().into_owned();
        let work = w.f.home.join("work");
        std::fs::create_dir_all(&work).unwrap();
        let planned =
            plan_sandbox(&w.f, &s, &w.plan(SessionKind::Pty, Backend::Bwrap, &work)).unwrap();
        assert_eq!(planned.reach.pins, vec![proj.join("bin")]);
        // A session inside that folder: the pin would hold its own read-write grant, so
        // it is left out, and the folder is not counted as pinned either.
        let inside = proj.join("bin/work");
        std::fs::create_dir_all(&inside).unwrap();
        // Not empty: an empty start folder's names are the session's own.
        std::fs::write(inside.join("notes"), "").unwrap();
        let planned =
            plan_sandbox(&w.f, &s, &w.plan(SessionKind::Pty, Backend::Bwrap, &inside)).unwrap();
        assert!(!planned.spec.read_only.is_empty());
        assert_eq!(planned.reach.pins, Vec::<PathBuf>::new());
    }

    #[test]
    fn a_session_in_relays_own_folder_is_refused_and_one_that_wrote_it_unpinned_stops_the_helpers()
    {
        let w = World::new();
        let own = std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .to_path_buf();
        let s = w.settings();
        let e = plan_sandbox(&w.f, &s, &w.plan(SessionKind::Pty, Backend::Bwrap, &own))
            .err()
            .expect("relay's own folder refused");
        assert!(e.contains("holds relay's own programs"), "{e}");

        assert_eq!(own_pins_hold(&w.f.home, &[]), Ok(()));
        let wrote = session("s-wrote", &[own.to_str().unwrap()], &[]);
        let e = own_pins_hold(&w.f.home, &[wrote]).unwrap_err();
        assert!(
            e.contains("relay's own program") && e.contains("s-wrote"),
            "{e}"
        );
    }

    #[test]
    fn each_token_file_is_denied_with_its_own_folder_and_a_reached_folder_is_held_under_bwrap() {
        let w = World::new();
        let proj = w.proj();
        let folder = w.f.home.join(".config/claude-ltt");
        std::fs::create_dir_all(&folder).unwrap();
        let token = folder.join("token");
        std::fs::write(&token, "t").unwrap();
        let s = w.settings();
        let deny = [token.clone()];
        for (backend, dir) in [
            (Backend::Bwrap, w.f.home.clone()),
            (Backend::Seatbelt, w.f.home.clone()),
            (Backend::Bwrap, proj.clone()),
        ] {
            let mut p = w.plan(SessionKind::Pty, backend, &dir);
            p.token_deny = &deny;
            let mut t = w.template.clone();
            t.allow_home_directory = true;
            p.template = &t;
            let planned = plan_sandbox(&w.f, &s, &p).unwrap();
            let denied: Vec<PathBuf> = planned
                .spec
                .deny
                .iter()
                .map(|r| r.canonical.clone())
                .collect();
            assert!(
                denied.contains(&token) && denied.contains(&folder),
                "{denied:?}"
            );
            assert_eq!(planned.reach.token_paths, vec![token.clone()]);
            for (path, why) in [
                (&token, "claude_token_file: the token is only ever on fd 5"),
                (
                    &folder,
                    "claude_token_file's own folder, masked whole: the token is only ever on fd 5",
                ),
            ] {
                assert!(
                    planned.labels.iter().any(|(p, w)| p == path && w == why),
                    "{path:?}: {:?}",
                    planned.labels
                );
            }
            let reached = dir == w.f.home && backend == Backend::Bwrap;
            assert_eq!(
                planned
                    .reach
                    .token_folders
                    .iter()
                    .map(|(f, _)| f.clone())
                    .collect::<Vec<_>>(),
                if reached {
                    vec![folder.clone()]
                } else {
                    vec![]
                },
                "{backend:?} {dir:?}"
            );
        }
    }
    #[test]
    fn a_token_folder_holding_folders_that_a_grant_reaches_is_refused_under_bwrap_alone() {
        let w = World::new();
        let folder = w.f.home.join(".config/claude-ltt");
        std::fs::create_dir_all(folder.join("inner")).unwrap();
        let token = folder.join("token");
        std::fs::write(&token, "t").unwrap();
        let s = w.settings();
        let deny = [token.clone()];
        let mut t = w.template.clone();
        t.allow_home_directory = true;
        let home = w.f.home.clone();
        let planned = |backend| {
            let mut p = w.plan(SessionKind::Pty, backend, &home);
            p.token_deny = &deny;
            p.template = &t;
            plan_sandbox(&w.f, &s, &p).map(|planned| planned.reach.token_paths)
        };
        let e = planned(Backend::Bwrap).expect_err("refused under bwrap");
        assert!(e.contains("folder of its own"), "{e}");
        assert_eq!(planned(Backend::Seatbelt).unwrap(), vec![token]);
    }

    #[test]
    fn the_environment_explained_names_the_templates_variables() {
        let w = World::new();
        let env =
            std::collections::BTreeMap::from([("RELAY_TEST_NAME".to_string(), "v".to_string())]);
        let names = env_names(&w.f, &env, Some(&[]), false, true);
        assert!(
            names.names.contains(&"RELAY_TEST_NAME".to_string()),
            "{names:?}"
        );
        assert!(!names.inherited.contains(&"RELAY_TEST_NAME".to_string()));
    }
}
