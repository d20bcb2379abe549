//! The Seatbelt (SBPL) renderer for macOS `sandbox-exec -D RELAY_TTY=<tty> -f <profile>`.
//!
//! The profile starts from `(deny default)`: a session gets the files its grants name,
//! the system it needs to run Claude Code, shells, git, node, python and cargo, and
//! nothing else a same-uid process could use to leave (LaunchServices, Apple Events,
//! the keychain, the clipboard, preference writes, other processes, other terminals,
//! sockets outside its grants).
//!
//! In SBPL the last matching rule wins, so the order of the sections below is the
//! mechanism, not a style: the baseline and the grants open what the session needs,
//! the file denies come after every grant, and the escape section after those, so
//! nothing a template grants can reopen a way out. A template's named macOS opt-ins
//! ([`MacOptIns`]) are the one thing rendered after the escapes.
//!
//! Every path reaches the profile through [`sbpl_string`], so no path can end a string
//! and add rules of its own.
//!
//! Where this differs from the profile upstream relay renders and checks on real Macs,
//! and why, is the parity table in docs/session-host.md ("The Seatbelt profile").

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::policy::{
    depth, effective_read_only, effective_state, merged_grants, proper_ancestors, Access,
    MergedGrant, Network, PathKind, ResolvedPath, Spec,
};

/// System trees every macOS process needs to start and run a shell or node:
/// - `/usr`, `/bin`, `/sbin`: binaries, libraries, `/usr/share` data (minus
///   [`BASELINE_CLOSED`]);
/// - `/System/Library`: frameworks, `SystemVersion.plist`, OpenSSL's config (not all of
///   `/System`: the data volume's mount points sit under `/System/Volumes`; the dyld
///   shared cache is mapped by the kernel, not read through a path);
/// - `/Library`: system-wide preferences, fonts, certificates, Claude Code's managed
///   settings, the Command Line Tools (not `~/Library`);
/// - `/private/etc`: hosts, resolver, shells (`/etc` is a link to it, and Seatbelt
///   matches resolved paths);
/// - `/private/var/db/timezone`: the target of `/etc/localtime`;
/// - `/private/var/select`: the target of `/bin/sh`'s shell selection and of
///   `developer_dir`;
/// - `/private/var/db/xcode_select_link`: where `xcode-select` points, which `git` and
///   the other `/usr/bin` developer shims read first;
/// - `/opt/homebrew`: where node and other tools live on Apple silicon.
///
/// Not here on purpose: `/Applications`, `/Users`, `/Volumes`, `/private/var/folders`
/// (per-user temp dirs; the session's own temp dir is a grant).
pub(crate) const BASELINE_READS: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/System/Library",
    "/Library",
    "/private/etc",
    "/private/var/db/timezone",
    "/private/var/select",
    "/private/var/db/xcode_select_link",
    "/opt/homebrew",
];

/// Closed again right after the baseline reads: Intel Homebrew keeps its services'
/// configuration and data here (database passwords, keys), inside `/usr`. A template
/// grant reopens them, since it comes later.
pub(crate) const BASELINE_CLOSED: &[&str] = &["/usr/local/etc", "/usr/local/var"];

/// Single files reopened inside [`BASELINE_CLOSED`]: Intel Homebrew's CA bundle (the
/// link openssl@3 ships and the file it points at) and the system-wide gitconfig, so
/// curl, python and git keep TLS and their configuration.
const BASELINE_REOPENED: &[&str] = &[
    "/usr/local/etc/openssl@3/cert.pem",
    "/usr/local/etc/ca-certificates/cert.pem",
    "/usr/local/etc/gitconfig",
];

/// The root, macOS's top-level links and the folders above the baseline, so `realpath`
/// and path walks work; metadata only, their contents stay closed.
const BASELINE_METADATA: &[&str] = &[
    "/",
    "/etc",
    "/tmp",
    "/var",
    "/System",
    "/private",
    "/private/var",
    "/private/var/db",
];

/// Facts about the Mac a profile is rendered for, found by the daemon at each launch
/// ([`HostPaths::current`]); empty on Linux and in most tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostPaths {
    /// The developer tools `xcode-select` points at (an Xcode's `Contents/Developer`),
    /// read-only, so `git` and `clang` run. The Command Line Tools need nothing: they
    /// live under `/Library`.
    pub developer_dir: Option<PathBuf>,
    /// `confstr(_CS_DARWIN_USER_TEMP_DIR)`, resolved (`/private/var/folders/…/T`). Tools
    /// stat it whatever `TMPDIR` says, and `xcrun` (behind `/usr/bin/git`) keeps its
    /// `xcrun_db` cache there; without both, git prints "couldn't get path of
    /// DARWIN_USER_TEMP_DIR". Only those are opened: the folder also holds every other
    /// session's temp dir.
    pub user_temp_dir: Option<PathBuf>,
}

impl HostPaths {
    /// This machine's: on macOS the developer dir from `$DEVELOPER_DIR` or the
    /// `xcode_select_link`, and the per-user temp dir; nothing elsewhere.
    pub fn current() -> HostPaths {
        #[cfg(target_os = "macos")]
        {
            HostPaths {
                developer_dir: developer_dir(
                    std::env::var_os("DEVELOPER_DIR").map(PathBuf::from),
                    Path::new("/private/var/db/xcode_select_link"),
                ),
                user_temp_dir: darwin_user_temp_dir(),
            }
        }
        #[cfg(not(target_os = "macos"))]
        HostPaths::default()
    }
}

/// Where the developer tools are: `$DEVELOPER_DIR` when set, else the target of
/// `select_link`; resolved, and only when it is a folder outside `/Library` (which the
/// baseline already reads).
pub fn developer_dir(env: Option<PathBuf>, select_link: &Path) -> Option<PathBuf> {
    let named = match env.filter(|p| p.is_absolute()) {
        Some(p) => p,
        None => std::fs::read_link(select_link).ok()?,
    };
    let real = std::fs::canonicalize(named).ok()?;
    (real.is_dir() && !real.starts_with("/Library")).then_some(real)
}

#[cfg(target_os = "macos")]
fn darwin_user_temp_dir() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // Safety: `buf` is writable for its whole length, which is the size passed.
    let n = unsafe {
        libc::confstr(
            libc::_CS_DARWIN_USER_TEMP_DIR,
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n == 0 || n > buf.len() {
        return None;
    }
    buf.truncate(n - 1);
    let dir = Path::new(std::ffi::OsStr::from_bytes(&buf));
    std::fs::canonicalize(dir).ok()
}

/// The tag every refusal carries in the unified log:
/// `log stream --predicate 'eventMessage CONTAINS "relay-session"'` shows what a
/// session was denied.
pub const DENY_MESSAGE: &str = "relay-session";

/// The `sandbox-exec -D` parameter the shim binds to the session's own terminal
/// (`/dev/null` for a pipe session): the one terminal the profile opens.
pub const TTY_PARAM: &str = "RELAY_TTY";

/// The Mach services a session may look up, each with what needs it. Everything else
/// is refused by `(deny default)`.
pub const MACH_SERVICES: &[(&str, &str)] = &[
    (
        "com.apple.system.opendirectoryd.libinfo",
        "users and groups (getpwuid: shells, git, node's os.userInfo)",
    ),
    (
        "com.apple.system.opendirectoryd.membership",
        "group membership checks",
    ),
    (
        "com.apple.system.notification_center",
        "notify(3): time zone and network change notices libc listens for",
    ),
    ("com.apple.logd", "os_log from system libraries"),
    ("com.apple.system.logger", "asl, older libraries' logging"),
    (
        "com.apple.bsd.dirhelper",
        "the per-user temp and cache folders (confstr, xcrun)",
    ),
    (
        "com.apple.cfprefsd.daemon",
        "preference reads (writes are refused)",
    ),
    (
        "com.apple.cfprefsd.agent",
        "preference reads (writes are refused)",
    ),
    ("com.apple.dnssd.service", "DNS through mDNSResponder"),
    (
        "com.apple.SystemConfiguration.DNSConfiguration",
        "the resolver configuration",
    ),
    (
        "com.apple.SystemConfiguration.configd",
        "proxy and reachability settings",
    ),
    ("com.apple.trustd", "TLS certificate trust"),
    ("com.apple.trustd.agent", "TLS certificate trust"),
    ("com.apple.ocspd", "TLS revocation checks"),
    (
        "com.apple.PowerManagement.control",
        "power assertions (keeping the Mac awake during a task)",
    ),
    (
        "com.apple.FSEvents",
        "file watching (node and Bun fs.watch, cargo watch)",
    ),
];

/// Sysctls a session may read by exact name: CPU, memory, OS version, limits. Not
/// `kern.procargs*` (other processes' arguments and environment) or `kern.proc.all`.
pub const SYSCTL_NAMES: &[&str] = &[
    "hw.activecpu",
    "hw.byteorder",
    "hw.cachelinesize",
    "hw.cpu64bit_capable",
    "hw.cpufamily",
    "hw.cpufrequency",
    "hw.cpusubtype",
    "hw.cputype",
    "hw.l1dcachesize",
    "hw.l1icachesize",
    "hw.l2cachesize",
    "hw.l3cachesize",
    "hw.logicalcpu",
    "hw.logicalcpu_max",
    "hw.machine",
    "hw.memsize",
    "hw.model",
    "hw.ncpu",
    "hw.nperflevels",
    "hw.packages",
    "hw.pagesize",
    "hw.physicalcpu",
    "hw.physicalcpu_max",
    "hw.tbfrequency",
    "hw.vectorunit",
    "kern.argmax",
    "kern.boottime",
    "kern.hostname",
    "kern.maxfilesperproc",
    "kern.maxproc",
    "kern.ngroups",
    "kern.osproductversion",
    "kern.osrelease",
    "kern.osrevision",
    "kern.ostype",
    "kern.osvariant_status",
    "kern.osversion",
    "kern.secure_kernel",
    "kern.usrstack64",
    "kern.version",
    "sysctl.proc_cputype",
    "sysctl.proc_translated",
    "vm.loadavg",
    "vm.pagesize",
    "vm.swapusage",
];

/// Sysctl name prefixes a session may read: CPU features and performance levels, this
/// machine's CPU, one process's own record and process group (`ps -p`), the routing
/// table (getifaddrs).
pub const SYSCTL_PREFIXES: &[&str] = &[
    "hw.optional.",
    "hw.perflevel",
    "machdep.cpu.",
    "kern.proc.pid.",
    "kern.proc.pgrp.",
    "net.routetable.",
];

/// The Mach services no template reopens, each with the escape it is. Names ending in
/// `.` or named in [`ESCAPE_MACH_PREFIXES`] match as prefixes.
const ESCAPE_MACH: &[(&str, &str)] = &[
    (
        "com.apple.coreservices.launchservicesd",
        "LaunchServices: open starts an app outside the sandbox",
    ),
    ("com.apple.coreservices.appleevents", "Apple Events"),
    ("com.apple.SecurityServer", "the keychain"),
    ("com.apple.dock.server", "the Dock, which launches apps"),
];

const ESCAPE_MACH_PREFIXES: &[(&str, &str)] = &[
    ("com.apple.lsd.", "LaunchServices' database and opener"),
    ("com.apple.pasteboard.", "the clipboard"),
    ("com.apple.securityd", "the keychain"),
    ("com.apple.security.", "the security agent and its prompts"),
    ("com.apple.windowserver", "the window server"),
    ("com.apple.tccd", "privacy consent"),
    ("com.apple.metadata.", "Spotlight"),
];

/// Operations refused outright, after every grant.
const ESCAPE_OPERATIONS: &[(&str, &str)] = &[
    ("lsopen", "open an app or document through LaunchServices"),
    (
        "appleevent-send",
        "drive another app (Terminal's do script)",
    ),
    ("job-creation", "submit a launchd job, which runs outside"),
    ("mach-register", "register a service others would look up"),
    (
        "user-preference-write",
        "cfprefsd writes another app's domain on the session's behalf",
    ),
];

/// Unix sockets refused wherever they are, even inside a read-write grant: Docker's
/// (a `docker run -v /:/h` is the whole disk), ssh-agent's and gpg-agent's (the
/// person's keys).
const ESCAPE_SOCKETS: &[&str] = &[
    r"/docker\.sock$",
    r"/\.docker/",
    r"/\.colima/",
    r"/\.orbstack/",
    r"/\.rd/",
    r"/\.lima/",
    r"/\.ssh/",
    r"/\.gnupg/",
    r"/S\.gpg-agent",
    r"agent\.sock$",
    r"/com\.apple\.launchd\.[^/]+/Listeners$",
];

/// Programs refused for a clear error; the Mach denies above them are the boundary.
const ESCAPE_PROGRAMS: &[&str] = &[
    "/usr/bin/open",
    "/usr/bin/osascript",
    "/bin/launchctl",
    "/usr/bin/security",
    "/usr/bin/pbcopy",
    "/usr/bin/pbpaste",
];

/// The Mach services `macos.keychain` reopens.
const KEYCHAIN_MACH: &[&str] = &[
    "com.apple.SecurityServer",
    "com.apple.securityd.xpc",
    "com.apple.security.agent",
];
/// The Mach services `macos.clipboard` reopens.
const CLIPBOARD_MACH: &[&str] = &["com.apple.pasteboard.1"];
/// The Mach services `macos.automation` reopens.
const AUTOMATION_MACH: &[&str] = &["com.apple.coreservices.appleevents"];

/// What a template opted into on macOS (`macos` in a terminal template, docs/settings.md):
/// each reopens one escape, after the escape section.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[schemars(deny_unknown_fields)]
pub struct MacOptIns {
    /// The keychain: `SecurityServer`, `securityd`, the security agent, `security`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keychain: bool,
    /// The clipboard: the pasteboard service, `pbcopy`, `pbpaste`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clipboard: bool,
    /// Apple Events to these bundle ids only, and `osascript`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub automation: Vec<String>,
    /// More Mach services by exact name (rendered before the escapes, so none of them
    /// reopens one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mach: Vec<String>,
}

impl MacOptIns {
    /// Whether these open nothing (the first-run templates' and every template's
    /// default).
    pub fn is_empty(&self) -> bool {
        *self == MacOptIns::default()
    }

    /// Whether `name` is a Mach service the escape section closes.
    pub fn is_escape(name: &str) -> bool {
        Self::escape_of(name).is_some()
    }

    /// The opt-in of these that reopens the escape's Mach service `name` after the
    /// escape section (`macos.keychain`, `macos.clipboard`, `macos.automation`).
    pub fn reopened_by(&self, name: &str) -> Option<&'static str> {
        [
            (self.keychain, "macos.keychain", KEYCHAIN_MACH),
            (self.clipboard, "macos.clipboard", CLIPBOARD_MACH),
            (
                !self.automation.is_empty(),
                "macos.automation",
                AUTOMATION_MACH,
            ),
        ]
        .into_iter()
        .find(|(on, _, names)| *on && names.contains(&name))
        .map(|(_, key, _)| key)
    }

    /// The escape the Mach service `name` is, when the escape section closes it.
    pub fn escape_of(name: &str) -> Option<&'static str> {
        ESCAPE_MACH
            .iter()
            .find(|(n, _)| *n == name)
            .or_else(|| {
                ESCAPE_MACH_PREFIXES
                    .iter()
                    .find(|(p, _)| name.starts_with(p))
            })
            .map(|(_, why)| *why)
    }
}

/// Renders the profile for no particular Mac ([`HostPaths::default`]).
pub fn render_sbpl(spec: &Spec) -> String {
    render_sbpl_on(spec, &HostPaths::default())
}

/// Renders the profile with no opt-ins.
pub fn render_sbpl_on(spec: &Spec, host: &HostPaths) -> String {
    render_sbpl_with(spec, host, &MacOptIns::default())
}

/// Renders the profile, one rule per line, each section introduced by a `;` comment.
pub fn render_sbpl_with(spec: &Spec, host: &HostPaths, opt_ins: &MacOptIns) -> String {
    let mut p = Profile::default();

    p.rule("(version 1)");
    p.section("deny by default; every refusal is logged with relay's tag");
    p.rule(format!(
        "(deny default (with message {}))",
        sbpl_string(DENY_MESSAGE)
    ));

    processes(&mut p);
    baseline(&mut p);
    host_paths(&mut p, host);
    devices(&mut p);
    services(&mut p, opt_ins);

    grants(&mut p, spec);
    denies(&mut p, spec);
    network(&mut p, spec);
    escapes(&mut p, spec);
    opt_in(&mut p, opt_ins);

    p.section("no setuid or setgid executables");
    p.rule("(deny process-exec* (file-mode #o4000))");
    p.rule("(deny process-exec* (file-mode #o2000))");

    p.text
}

/// What every read rule also allows: running and mapping what it can read.
const READ: &str = "file-read* process-exec* file-map-executable";

/// Fork; signals and inspection only among the session's own processes.
fn processes(p: &mut Profile) {
    p.section("processes: fork; exec rides on the read rules; signals and inspection stay inside this sandbox");
    p.rule("(allow process-fork)");
    p.rule("(allow signal (target same-sandbox))");
    p.rule("(allow process-info* (target same-sandbox))");
}

/// `/dev` narrowed to what every process opens, the session's own terminal (bound by
/// the shim, [`TTY_PARAM`]) and ptys the session makes itself.
fn devices(p: &mut Profile) {
    p.section("devices: the few every process opens, the session's own terminal, ptys it makes");
    p.rule(format!(
        "(allow file-read-metadata (literal {}))",
        sbpl_string("/dev")
    ));
    let literals = |names: &[&str]| {
        names
            .iter()
            .map(|n| format!("(literal {})", sbpl_string(n)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    p.rule(format!(
        "(allow file-read* file-write-data file-ioctl {})",
        literals(&[
            "/dev/null",
            "/dev/zero",
            "/dev/tty",
            "/dev/ptmx",
            "/dev/dtracehelper"
        ])
    ));
    p.rule(format!(
        "(allow file-read* {})",
        literals(&["/dev/random", "/dev/urandom"])
    ));
    p.rule(format!(
        "(allow file-read* file-write-data (subpath {}) {})",
        sbpl_string("/dev/fd"),
        literals(&["/dev/stdin", "/dev/stdout", "/dev/stderr"])
    ));
    p.rule(format!(
        "(allow file-read* file-write-data file-ioctl (literal (param {})))",
        sbpl_string(TTY_PARAM)
    ));
    p.rule("(allow pseudo-tty)");
    p.rule(format!(
        "(allow file-read* file-write-data file-ioctl (require-all (regex #\"^/dev/ttys[0-9]+$\") (extension {})))",
        sbpl_string("com.apple.sandbox.pty")
    ));
}

/// The Mach services, sysctls, IPC, IOKit class and socket domains the tools need.
fn services(p: &mut Profile, opt_ins: &MacOptIns) {
    p.section("Mach services, each with what needs it");
    for (name, why) in MACH_SERVICES {
        p.rule(format!(
            "(allow mach-lookup (global-name {})) ; {why}",
            sbpl_string(name)
        ));
    }
    p.rule("(allow mach-host*) ; host_processor_info: os.cpus() in node and libuv");
    p.rule(format!(
        "(allow file-read* (literal {})) ; the resolver file c-ares and Go read",
        sbpl_string("/private/var/run/resolv.conf")
    ));
    p.rule(format!(
        "(allow file-read-metadata (literal {}))",
        sbpl_string("/private/var/run")
    ));
    if !opt_ins.mach.is_empty() {
        p.section("Mach services the template names (macos.mach); the escapes below still win");
        for name in &opt_ins.mach {
            p.rule(format!(
                "(allow mach-lookup (global-name {}))",
                sbpl_string(name)
            ));
        }
    }
    p.section(
        "preferences read only; POSIX semaphores; the notification page and Python's shared memory",
    );
    p.rule("(allow user-preference-read)");
    p.rule("(allow ipc-posix-sem)");
    p.rule(format!(
        "(allow ipc-posix-shm-read-data ipc-posix-shm-read-metadata (ipc-posix-name {}))",
        sbpl_string("apple.shm.notification_center")
    ));
    p.rule(format!(
        "(allow ipc-posix-shm* (ipc-posix-name-prefix {}))",
        sbpl_string("/psm_")
    ));
    p.section("IOKit: power management's user client only");
    p.rule(format!(
        "(allow iokit-open (iokit-registry-entry-class {}))",
        sbpl_string("RootDomainUserClient")
    ));
    p.section("sysctls read by name, never kern.procargs* or kern.proc.all");
    for name in SYSCTL_NAMES {
        p.rule(format!(
            "(allow sysctl-read (sysctl-name {}))",
            sbpl_string(name)
        ));
    }
    for prefix in SYSCTL_PREFIXES {
        p.rule(format!(
            "(allow sysctl-read (sysctl-name-prefix {}))",
            sbpl_string(prefix)
        ));
    }
    p.section("sockets of these domains only (not AF_SYSTEM kernel controls or AF_NDRV)");
    p.rule("(allow system-socket (socket-domain AF_UNIX) (socket-domain AF_INET) (socket-domain AF_INET6) (socket-domain AF_ROUTE))");
}

/// The system reads every process needs, Homebrew's service files closed again but for
/// the few a tool reads.
fn baseline(p: &mut Profile) {
    p.section("baseline system reads");
    for dir in BASELINE_READS {
        p.rule(format!("(allow {READ} (subpath {}))", sbpl_string(dir)));
    }
    for path in BASELINE_METADATA {
        p.rule(format!(
            "(allow file-read-metadata (literal {}))",
            sbpl_string(path)
        ));
    }
    p.section(
        "Homebrew's service config and data stay closed, but for its CA bundle and gitconfig",
    );
    for dir in BASELINE_CLOSED {
        p.rule(format!(
            "(deny {READ} file-write* (subpath {}))",
            sbpl_string(dir)
        ));
    }
    for file in BASELINE_REOPENED {
        p.rule(format!("(allow {READ} (literal {}))", sbpl_string(file)));
    }
}

/// What this Mac adds ([`HostPaths`]): the developer tools, the per-user temp folder.
fn host_paths(p: &mut Profile, host: &HostPaths) {
    if let Some(dir) = &host.developer_dir {
        p.section("the developer tools xcode-select points at, so git and clang run");
        p.rule(format!("(allow {READ} (subpath {}))", sbpl_string(dir)));
        for ancestor in proper_ancestors(dir) {
            p.rule(format!(
                "(allow file-read-metadata (literal {}))",
                sbpl_string(ancestor)
            ));
        }
    }
    if let Some(dir) = &host.user_temp_dir {
        p.section("the per-user temp folder: stat for confstr(), xcrun's cache file for git");
        let ancestors = proper_ancestors(dir).into_iter().chain([dir.as_path()]);
        for path in ancestors.filter(|a| !BASELINE_METADATA.contains(&a.to_str().unwrap_or(""))) {
            p.rule(format!(
                "(allow file-read-metadata (literal {}))",
                sbpl_string(path)
            ));
        }
        if let Some(escaped) = regex_escape(dir) {
            p.rule(format!(
                "(allow file-read* file-write* (regex #\"^{escaped}/xcrun_db(-[^/]*)?$\"))"
            ));
        }
    }
}

/// The template's grants: read, then read-write, then the nested ones restated, then
/// the metadata of the folders above them.
fn grants(p: &mut Profile, spec: &Spec) {
    p.section("read grants");
    for grant in spec.grants.iter().filter(|g| g.access == Access::Read) {
        p.for_spellings(&grant.path, &format!("allow {READ}"));
    }

    p.section("read-write grants (a file with the .lock and temp siblings atomic writers use)");
    for grant in spec.grants.iter().filter(|g| g.access == Access::ReadWrite) {
        p.for_spellings(&grant.path, &format!("allow {READ} file-write*"));
    }

    p.section("nested grants keep their own access: the deepest grant wins, as with bwrap");
    for (path, access) in nested_overrides(spec) {
        match access {
            Access::Read => p.for_spellings(path, "deny file-write*"),
            Access::ReadWrite => p.for_spellings(path, &format!("allow {READ} file-write*")),
        }
    }

    p.section("metadata of every ancestor of every grant, so the grants can be reached");
    let grant_spellings = spec.grants.iter().flat_map(|g| g.path.spellings());
    for ancestor in unique_ancestors(grant_spellings) {
        p.rule(format!(
            "(allow file-read-metadata (literal {}))",
            sbpl_string(ancestor)
        ));
    }
}

/// After every grant: the denies, the read-only pins, and the folders above both (and
/// above [`BASELINE_CLOSED`]) kept from being renamed away.
fn denies(p: &mut Profile, spec: &Spec) {
    p.section("denies, after every grant: they always win");
    for denied in &spec.deny {
        for spelling in denied.spellings() {
            let s = sbpl_string(spelling);
            p.rule(format!(
                "(deny {READ} file-write* file-clone file-link (literal {s}) (subpath {s}))"
            ));
        }
    }

    let read_only = effective_read_only(spec);
    if !read_only.is_empty() {
        p.section("pinned read-only: what a token launch runs (docs/THREAT-MODEL.md)");
        // file-link too: a hard link made elsewhere would be a second, writable name
        // for a pinned file (bwrap's read-only mount refuses it with EXDEV).
        // Claude Code's state inside a pin stays writable: the pin's deny leaves it out
        // (no allow after a deny, so nothing here can reopen a denied path).
        let state = effective_state(spec);
        for pinned in &read_only {
            let inside: Vec<(&Path, PathKind)> = state
                .iter()
                .filter(|s| s.canonical.starts_with(&pinned.canonical))
                .flat_map(|s| s.spellings().into_iter().map(move |sp| (sp, s.kind)))
                .collect();
            if inside.is_empty() {
                p.for_spellings(pinned, "deny file-write* file-link");
                continue;
            }
            let except: String = inside
                .iter()
                .map(|(sp, kind)| format!(" (require-not {})", filter(sp, *kind)))
                .collect();
            for spelling in pinned.spellings() {
                p.rule(format!(
                    "(deny file-write* file-link (require-all {}{except}))",
                    filter(spelling, pinned.kind)
                ));
            }
            // The state's own names stay where relay made them.
            for (sp, _) in inside {
                p.rule(format!(
                    "(deny file-write-unlink file-clone (literal {}))",
                    sbpl_string(sp)
                ));
            }
        }
    }

    // file-clone is an operation of its own, outside file-write*; renaming is checked as
    // file-write-unlink on the source.
    p.section("ancestors of denied paths cannot be renamed, removed or cloned");
    let deny_spellings = spec
        .deny
        .iter()
        .chain(read_only.iter().copied())
        .flat_map(|d| d.spellings());
    let closed = BASELINE_CLOSED.iter().map(Path::new);
    for ancestor in unique_ancestors(deny_spellings.chain(closed)) {
        p.rule(format!(
            "(deny file-write-unlink file-clone (literal {}))",
            sbpl_string(ancestor)
        ));
    }
}

/// The network as the template has it: shared (every TCP and UDP peer but the denied
/// loopback ports; binding and accepting; DNS's socket; unix sockets inside the
/// read-write grants) or off. Issue 23 narrows `shared` to relay's proxy.
fn network(p: &mut Profile, spec: &Spec) {
    match &spec.network {
        // The namespace form is bwrap's: a spec that reached here gets no way out.
        Network::Off | Network::Proxied { .. } => {
            p.section("network: off");
            p.rule("(deny network*)");
            no_network_daemons(p);
        }
        Network::ProxiedPort { port, bridges, .. } => {
            p.section("network: proxied, out through relay's egress proxy for this session alone");
            p.rule("(deny network*)");
            // TCP alone: `ip` would also let UDP to that port out.
            for port in std::iter::once(port).chain(bridges) {
                p.rule(format!(
                    "(allow network-outbound (remote tcp \"localhost:{port}\"))"
                ));
            }
            grant_sockets(p, spec);
            no_network_daemons(p);
        }
        Network::Shared {
            denied_loopback_ports,
        } => {
            p.section("network: shared, minus denied loopback ports");
            p.rule("(allow network-outbound (remote ip \"*:*\"))");
            p.rule("(allow network-bind network-inbound)");

            p.rule(format!(
                "(allow network-outbound (remote unix-socket (path-literal {})))",
                sbpl_string("/private/var/run/mDNSResponder")
            ));
            grant_sockets(p, spec);
            for port in denied_loopback_ports {
                p.rule(format!(
                    "(deny network-outbound (remote ip \"localhost:{port}\"))"
                ));
            }
        }
    }
}

/// The system daemons that go out to the network for whoever asks over Mach, each a way
/// out of a sandbox whose network is not the host's: mDNSResponder resolves any name;
/// trustd and ocspd fetch a certificate chain's intermediates and revocation from the
/// URLs the chain names. Refused (names are relay's proxy's to resolve); a template's
/// `macos.mach` reopens one by name, as its opt-in.
pub const NETWORK_MACH: &[(&str, &str)] = &[
    ("com.apple.dnssd.service", "DNS: a lookup is a way out"),
    (
        "com.apple.trustd",
        "certificate fetches from URLs a chain names",
    ),
    (
        "com.apple.trustd.agent",
        "certificate fetches from URLs a chain names",
    ),
    (
        "com.apple.ocspd",
        "revocation fetches from URLs a chain names",
    ),
];

fn no_network_daemons(p: &mut Profile) {
    for (name, why) in NETWORK_MACH {
        p.rule(format!(
            "(deny mach-lookup (global-name {})) ; {why}",
            sbpl_string(name)
        ));
    }
}

/// Connecting to unix sockets inside the read-write grants: the session's own (the
/// escape section closes Docker's, ssh-agent's and gpg-agent's wherever they are).
fn grant_sockets(p: &mut Profile, spec: &Spec) {
    p.section("unix sockets inside the read-write grants only");
    for grant in spec.grants.iter().filter(|g| g.access == Access::ReadWrite) {
        for spelling in grant.path.spellings() {
            let filter = match grant.path.kind {
                PathKind::File => format!("(path-literal {})", sbpl_string(spelling)),
                PathKind::Dir | PathKind::Missing => match regex_escape(spelling) {
                    Some(escaped) => format!("(path-regex #\"^{escaped}/\")"),
                    // A path a regex cannot hold gets no sockets: refused.
                    None => continue,
                },
            };
            p.rule(format!(
                "(allow network-outbound (remote unix-socket {filter}))"
            ));
        }
    }
}

/// The ways out of a same-uid sandbox, refused after every grant so no template
/// reopens them; only a named opt-in ([`opt_in`], after this) does.
fn escapes(p: &mut Profile, spec: &Spec) {
    p.section("escapes, after every grant: no template reopens them (docs/THREAT-MODEL.md)");
    for (name, why) in ESCAPE_MACH {
        p.rule(format!(
            "(deny mach-lookup (global-name {})) ; {why}",
            sbpl_string(name)
        ));
    }
    for (prefix, why) in ESCAPE_MACH_PREFIXES {
        p.rule(format!(
            "(deny mach-lookup (global-name-prefix {})) ; {why}",
            sbpl_string(prefix)
        ));
    }
    for (op, why) in ESCAPE_OPERATIONS {
        p.rule(format!("(deny {op}) ; {why}"));
    }
    p.section("the daemon's sockets, by name");
    for socket in &spec.deny_unix_sockets {
        p.rule(format!(
            "(deny network-outbound (remote unix-socket (path-literal {})))",
            sbpl_string(socket)
        ));
    }
    p.section("Docker's, ssh-agent's and gpg-agent's sockets, wherever a grant holds them");
    for pattern in ESCAPE_SOCKETS {
        p.rule(format!(
            "(deny network-outbound (remote unix-socket (path-regex #\"{pattern}\")))"
        ));
    }
    p.section("the front doors of the escapes, refused for a clear error");
    for program in ESCAPE_PROGRAMS {
        p.rule(format!(
            "(deny process-exec* (literal {}))",
            sbpl_string(program)
        ));
    }
}

/// What the template opted into, each reopening one escape: the only rules after the
/// escape section but the setuid denies.
fn opt_in(p: &mut Profile, opt_ins: &MacOptIns) {
    let lookup = |p: &mut Profile, names: &[&str]| {
        for name in names {
            p.rule(format!(
                "(allow mach-lookup (global-name {}))",
                sbpl_string(name)
            ));
        }
    };
    let exec = |p: &mut Profile, programs: &[&str]| {
        for program in programs {
            p.rule(format!(
                "(allow process-exec* (literal {}))",
                sbpl_string(program)
            ));
        }
    };
    if opt_ins.keychain {
        p.section("opt-in macos.keychain: the keychain, its agent's prompts, security(1)");
        lookup(p, KEYCHAIN_MACH);
        exec(p, &["/usr/bin/security"]);
    }
    if opt_ins.clipboard {
        p.section("opt-in macos.clipboard: the pasteboard, pbcopy and pbpaste");
        lookup(p, CLIPBOARD_MACH);
        exec(p, &["/usr/bin/pbcopy", "/usr/bin/pbpaste"]);
    }
    if !opt_ins.automation.is_empty() {
        p.section("opt-in macos.automation: Apple Events to these apps only, osascript");
        lookup(p, AUTOMATION_MACH);
        for id in &opt_ins.automation {
            p.rule(format!(
                "(allow appleevent-send (appleevent-destination {}))",
                sbpl_string(id)
            ));
        }
        exec(p, &["/usr/bin/osascript"]);
    }
}

/// An SBPL (TinyScheme) string literal, quotes included. Backslash and quote are
/// escaped, newline and tab get their short escapes, every other control character
/// becomes `\xHH`. Bytes that are not UTF-8 (only possible through
/// [`ResolvedPath::fixed`]; resolution refuses them) become `\xHH` too, which TinyScheme
/// reads back as that byte.
pub fn sbpl_string(path: impl AsRef<Path>) -> String {
    use std::os::unix::ffi::OsStrExt;

    let bytes = path.as_ref().as_os_str().as_bytes();
    let mut out = String::with_capacity(bytes.len() + 2);
    out.push('"');
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                    let _ = write!(out, "\\x{:02x}", c as u32);
                }
                c => out.push(c),
            }
        }
        for byte in chunk.invalid() {
            let _ = write!(out, "\\x{byte:02x}");
        }
    }
    out.push('"');
    out
}

#[derive(Default)]
struct Profile {
    text: String,
}

impl Profile {
    fn rule(&mut self, rule: impl AsRef<str>) {
        self.text.push_str(rule.as_ref());
        self.text.push('\n');
    }

    fn section(&mut self, title: &str) {
        self.text.push_str("; ");
        self.text.push_str(title);
        self.text.push('\n');
    }

    /// `(<head> <filter>)` once per spelling of `path`. A file granted read-write also
    /// gets the siblings an atomic writer makes beside it (`<file>.lock`,
    /// `<file>.tmp.*`, `<file>.backup`; Claude Code writes `~/.claude.json` that way),
    /// when its path can be written as a regex.
    fn for_spellings(&mut self, path: &ResolvedPath, head: &str) {
        for spelling in path.spellings() {
            let filter = filter(spelling, path.kind);
            self.rule(format!("({head} {filter})"));
            if path.kind == PathKind::File
                && head.starts_with("allow")
                && head.contains("file-write*")
            {
                if let Some(escaped) = regex_escape(spelling) {
                    self.rule(format!(
                        "({head} (regex #\"^{escaped}(\\.lock|\\.tmp\\.[^/]*|\\.backup)$\"))"
                    ));
                }
            }
        }
    }
}

/// `path` as the literal part of an SBPL `#"…"` regex, or `None` when it cannot be one:
/// a `"` would end the token (SBPL has no escape for it inside `#"…"`), and control
/// characters or bytes that are not UTF-8 have no spelling there.
fn regex_escape(path: &Path) -> Option<String> {
    let text = path.to_str()?;
    if text.chars().any(|c| c == '"' || c.is_control()) {
        return None;
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if "\\.+*?()[]{}^$|".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    Some(out)
}

/// Files match themselves only; directories match their whole tree. A missing path is
/// matched as a tree too, so whatever is created there later is covered either way.
fn filter(spelling: &Path, kind: PathKind) -> String {
    match kind {
        PathKind::File => format!("(literal {})", sbpl_string(spelling)),
        PathKind::Dir | PathKind::Missing => format!("(subpath {})", sbpl_string(spelling)),
    }
}

/// Proper ancestors of every path, deduplicated, in first-seen order.
fn unique_ancestors<'a>(paths: impl Iterator<Item = &'a Path>) -> Vec<&'a Path> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for path in paths {
        for ancestor in proper_ancestors(path) {
            if seen.insert(ancestor) {
                out.push(ancestor);
            }
        }
    }
    out
}

/// Grants whose own access must be restated after the read and read-write sections,
/// shallowest first, so that for every file the deepest grant holding it decides — the
/// result bwrap gets from mounting parents before children.
///
/// Before this section a file may be written when any grant holding it is read-write.
/// A grant is restated when that (or an earlier restatement of an enclosing grant)
/// disagrees with its own access: a read grant inside a read-write one becomes
/// `deny file-write*`; a read-write grant inside such a restated read grant is
/// re-opened. Grants are compared by canonical path, merged like bwrap merges them.
fn nested_overrides(spec: &Spec) -> Vec<(&ResolvedPath, Access)> {
    let mut grants = merged_grants(spec);
    grants.sort_by_key(|g| depth(&g.path.canonical));

    let mut restated: Vec<bool> = Vec::with_capacity(grants.len());
    let mut out = Vec::new();
    for (i, grant) in grants.iter().enumerate() {
        let enclosing: Vec<usize> = (0..i).filter(|&j| encloses(&grants[j], grant)).collect();
        let before = match enclosing.iter().rev().find(|&&j| restated[j]) {
            Some(&j) => grants[j].access,
            None => enclosing
                .iter()
                .map(|&j| grants[j].access)
                .chain([grant.access])
                .max()
                .unwrap_or(grant.access),
        };
        let restate = before != grant.access;
        restated.push(restate);
        if restate {
            out.push((grant.path, grant.access));
        }
    }
    out
}

/// Whether `outer` holds `inner` (strictly; merged grants have distinct paths).
fn encloses(outer: &MergedGrant<'_>, inner: &MergedGrant<'_>) -> bool {
    outer.path.kind != PathKind::File
        && inner.path.canonical != outer.path.canonical
        && inner.path.canonical.starts_with(&outer.path.canonical)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::sandbox::policy::Grant;
    use std::path::PathBuf;

    /// The parts of SBPL a profile uses: parens, strings with escapes, atoms, comments.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) enum Token {
        Open,
        Close,
        Str(Vec<u8>),
        /// `#"…"`: raw up to the next `"`, its backslashes belong to the regex.
        Regex(String),
        Atom(String),
    }

    /// A deliberately strict reader of the subset above: an unknown escape, a raw
    /// control character inside a string, an unterminated string or an unbalanced paren
    /// is an error.
    pub(crate) fn tokenize(text: &str) -> Result<Vec<Token>, String> {
        let bytes = text.as_bytes();
        let mut tokens = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b' ' | b'\n' | b'\t' => i += 1,
                b';' => {
                    while i < bytes.len() && bytes[i] != b'\n' {
                        i += 1;
                    }
                }
                b'(' => {
                    tokens.push(Token::Open);
                    i += 1;
                }
                b')' => {
                    tokens.push(Token::Close);
                    i += 1;
                }
                b'"' => {
                    i += 1;
                    let mut value = Vec::new();
                    loop {
                        let Some(&b) = bytes.get(i) else {
                            return Err("unterminated string".into());
                        };
                        i += 1;
                        match b {
                            b'"' => break,
                            b'\\' => {
                                let Some(&e) = bytes.get(i) else {
                                    return Err("dangling backslash".into());
                                };
                                i += 1;
                                match e {
                                    b'\\' => value.push(b'\\'),
                                    b'"' => value.push(b'"'),
                                    b'n' => value.push(b'\n'),
                                    b't' => value.push(b'\t'),
                                    b'x' => {
                                        let hex = text.get(i..i + 2).ok_or("short \\x escape")?;
                                        let v = u8::from_str_radix(hex, 16)
                                            .map_err(|_| format!("bad \\x escape {hex:?}"))?;
                                        value.push(v);
                                        i += 2;
                                    }
                                    other => {
                                        return Err(format!("unknown escape \\{}", other as char))
                                    }
                                }
                            }
                            b if b < 0x20 || b == 0x7f => {
                                return Err(format!("raw control byte {b:#04x} in a string"))
                            }
                            b => value.push(b),
                        }
                    }
                    tokens.push(Token::Str(value));
                }
                b'#' if bytes.get(i + 1) == Some(&b'"') => {
                    let end = text[i + 2..].find('"').ok_or("unterminated regex")?;
                    tokens.push(Token::Regex(text[i + 2..i + 2 + end].to_string()));
                    i += end + 3;
                }
                _ => {
                    let start = i;
                    while i < bytes.len() && !b" \n\t()\";".contains(&bytes[i]) {
                        i += 1;
                    }
                    tokens.push(Token::Atom(text[start..i].to_string()));
                }
            }
        }
        let mut level = 0i32;
        for token in &tokens {
            match token {
                Token::Open => level += 1,
                Token::Close => {
                    level -= 1;
                    if level < 0 {
                        return Err("unbalanced )".into());
                    }
                }
                _ => {}
            }
        }
        if level != 0 {
            return Err("unbalanced (".into());
        }
        Ok(tokens)
    }

    /// The head atom (`allow`, `deny`, `version`) of every top-level form.
    fn top_level_heads(tokens: &[Token]) -> Vec<String> {
        let mut heads = Vec::new();
        let mut level = 0;
        for (i, token) in tokens.iter().enumerate() {
            match token {
                Token::Open => {
                    if level == 0 {
                        match tokens.get(i + 1) {
                            Some(Token::Atom(a)) => heads.push(a.clone()),
                            other => heads.push(format!("{other:?}")),
                        }
                    }
                    level += 1;
                }
                Token::Close => level -= 1,
                _ => {}
            }
        }
        heads
    }

    fn dir(path: &str) -> ResolvedPath {
        ResolvedPath::fixed(path, path, PathKind::Dir)
    }

    fn file(path: &str) -> ResolvedPath {
        ResolvedPath::fixed(path, path, PathKind::File)
    }

    fn grant(path: ResolvedPath, access: Access) -> Grant {
        Grant { path, access }
    }

    fn spec(grants: Vec<Grant>, deny: Vec<ResolvedPath>) -> Spec {
        Spec {
            grants,
            deny,
            read_only: vec![],
            state: vec![],
            deny_unix_sockets: vec![],
            network: Network::Shared {
                denied_loopback_ports: vec![],
            },
            workdir: PathBuf::from("/"),
            interactive: true,
            file_mask: "/dev/null".into(),
        }
    }

    #[test]
    fn escape_covers_quotes_backslashes_and_controls() {
        assert_eq!(sbpl_string("/plain/path"), r#""/plain/path""#);
        assert_eq!(sbpl_string(r#"/a"b"#), r#""/a\"b""#);
        assert_eq!(sbpl_string(r"/a\b"), r#""/a\\b""#);
        assert_eq!(sbpl_string("/a\nb\tc"), r#""/a\nb\tc""#);
        assert_eq!(
            sbpl_string("/a\rb\x01c\x7fd\x1b"),
            r#""/a\x0db\x01c\x7fd\x1b""#
        );
        assert_eq!(sbpl_string("/caf\u{e9}"), "\"/caf\u{e9}\"");
    }

    #[test]
    fn escape_writes_non_utf8_bytes_as_hex() {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        let path = Path::new(OsStr::from_bytes(b"/a\xffb"));
        assert_eq!(sbpl_string(path), r#""/a\xffb""#);
    }

    #[test]
    fn adversarial_paths_cannot_break_out_of_their_strings() {
        let evil = [
            r#"/tmp/a") (allow file-read* (subpath "/"#,
            r#"/tmp/b\") (allow file-read* (subpath \"/"#,
            "/tmp/c\\",
            "/tmp/d\n(allow file-read* (subpath \"/\"))\n",
            "/tmp/e\\\"\\\\\"",
            "/tmp/f\t\r\x00\x7f;(allow default)",
            "/tmp/g\u{2028}\u{85}",
        ];
        let deny: Vec<ResolvedPath> = evil
            .iter()
            .map(|p| ResolvedPath::fixed(*p, format!("/private{p}"), PathKind::Dir))
            .collect();
        let grants = evil.iter().map(|p| grant(file(p), Access::Read)).collect();
        let mut s = spec(grants, deny);
        s.deny_unix_sockets = evil.iter().map(PathBuf::from).collect();
        let profile = render_sbpl(&s);

        // Every line is a comment or exactly one complete form.
        for line in profile.lines() {
            if !line.starts_with(';') {
                let tokens = tokenize(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
                assert_eq!(top_level_heads(&tokens).len(), 1, "{line:?}");
            }
        }

        // `allow` and `deny` appear only as the head of a top-level form: a path that
        // escaped its string would bring its own `(allow …` one level down.
        let tokens = tokenize(&profile).unwrap();
        let mut level = 0;
        for (i, token) in tokens.iter().enumerate() {
            match token {
                Token::Open => level += 1,
                Token::Close => level -= 1,
                Token::Atom(a) if a == "allow" || a == "deny" => {
                    assert!(level == 1 && tokens[i - 1] == Token::Open, "injected {a}")
                }
                _ => {}
            }
        }

        let strings: HashSet<Vec<u8>> = tokens
            .iter()
            .filter_map(|t| match t {
                Token::Str(s) => Some(s.clone()),
                _ => None,
            })
            .collect();
        for p in evil {
            assert!(strings.contains(p.as_bytes()), "{p:?} did not round-trip");
            let private = format!("/private{p}");
            assert!(strings.contains(private.as_bytes()), "{private:?}");
        }
    }

    #[test]
    fn a_proxied_profile_reaches_its_proxy_port_and_listed_loopback_ports_alone() {
        let mut s = spec(vec![grant(dir("/Users/ada/p"), Access::ReadWrite)], vec![]);
        s.network = Network::ProxiedPort {
            port: 49152,
            bridges: vec![4000],
            egress: vec!["api.anthropic.com".into()],
        };
        let profile = render_sbpl(&s);
        let network: Vec<&str> = profile
            .lines()
            .filter(|l| l.contains("network"))
            .filter(|l| !l.starts_with(';'))
            .collect();
        // Everything off, then the two ports, then the grant's own sockets; the escape
        // section's denies come after and only deny.
        let off = network
            .iter()
            .position(|l| *l == "(deny network*)")
            .expect("network off first");
        let allows: Vec<&&str> = network
            .iter()
            .filter(|l| l.starts_with("(allow network"))
            .collect();
        assert_eq!(
            allows,
            vec![
                &"(allow network-outbound (remote tcp \"localhost:49152\"))",
                &"(allow network-outbound (remote tcp \"localhost:4000\"))",
                &"(allow network-outbound (remote unix-socket (path-regex #\"^/Users/ada/p/\")))",
            ],
            "{profile}"
        );
        assert!(
            network.iter().position(|l| l.starts_with("(allow network")) > Some(off),
            "{profile}"
        );
        // No bind, no inbound, no DNS, no other host.
        for absent in [
            "network-bind",
            "network-inbound",
            "/private/var/run/mDNSResponder",
            "\"*:",
        ] {
            assert!(!profile.contains(absent), "{absent} in {profile}");
        }
        let dns = |head: &str| {
            let lines: Vec<&str> = profile.lines().collect();
            lines
                .iter()
                .rposition(|l| l.starts_with(head) && l.contains("com.apple.dnssd.service"))
        };
        assert!(
            dns("(deny mach-lookup") > dns("(allow mach-lookup"),
            "{profile}"
        );
    }

    #[test]
    fn token_denies_come_after_every_allow() {
        let token = file("/Users/ada/.config/acme-ltt/token");
        let s = spec(
            vec![
                grant(dir("/Users/ada/.config"), Access::Read),
                grant(dir("/Users/ada"), Access::ReadWrite),
            ],
            vec![token],
        );
        let profile = render_sbpl(&s);
        let lines: Vec<&str> = profile.lines().collect();
        // Every allow that can open a file (the network's socket allows name no file).
        let allows: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].starts_with("(allow") && lines[i].contains("file-"))
            .collect();
        let token_denies: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].starts_with("(deny") && lines[i].contains("acme-ltt/token"))
            .collect();
        assert!(!allows.is_empty());
        assert!(!token_denies.is_empty());
        let last_allow = *allows.iter().max().unwrap();
        for i in token_denies {
            assert!(
                i > last_allow,
                "deny at line {i} before allow at {last_allow}"
            );
        }
    }

    #[test]
    fn claude_codes_state_is_writable_again_inside_its_pin_and_a_deny_there_still_wins() {
        let mut s = spec(vec![grant(dir("/home/ada"), Access::ReadWrite)], vec![]);
        s.read_only = vec![dir("/home/ada/cfg"), dir("/home/ada/bin")];
        s.deny = vec![dir("/home/ada/cfg/projects/secret")];
        s.state = vec![
            dir("/home/ada/cfg/projects"),
            ResolvedPath::fixed(
                "/home/ada/cfg/history.jsonl",
                "/home/ada/cfg/history.jsonl",
                PathKind::File,
            ),
            dir("/srv/elsewhere"),
        ];
        let sbpl = render_sbpl(&s);
        assert!(
            sbpl.contains(
                "(deny file-write* file-link (require-all (subpath \"/home/ada/cfg\") \
                 (require-not (subpath \"/home/ada/cfg/projects\")) \
                 (require-not (literal \"/home/ada/cfg/history.jsonl\"))))\n"
            ),
            "{sbpl}"
        );
        // A pin with no state in it is denied whole, as before.
        assert!(sbpl.contains("(deny file-write* file-link (subpath \"/home/ada/bin\"))\n"));
        for name in ["/home/ada/cfg/projects", "/home/ada/cfg/history.jsonl"] {
            assert!(
                sbpl.contains(&format!(
                    "(deny file-write-unlink file-clone (literal \"{name}\"))\n"
                )),
                "{sbpl}"
            );
        }
        // Nothing is allowed after the denies: the deny inside the state still wins.
        let deny = sbpl
            .find("(literal \"/home/ada/cfg/projects/secret\")")
            .unwrap();
        assert!(
            !sbpl[deny..]
                .lines()
                .any(|l| l.starts_with("(allow ") && l.contains("file-")),
            "{sbpl}"
        );
        assert!(!sbpl.contains("/srv/elsewhere"), "{sbpl}");
        let a = crate::sandbox::policy::effective_state(&s);
        assert_eq!(a.len(), 2);
    }

    #[test]
    fn read_grant_inside_read_write_grant_stays_read_only() {
        let s = spec(
            vec![
                grant(dir("/home/ada/.config"), Access::Read),
                grant(dir("/home/ada"), Access::ReadWrite),
            ],
            vec![],
        );
        let overrides: Vec<_> = nested_overrides(&s)
            .into_iter()
            .map(|(p, a)| (p.canonical.clone(), a))
            .collect();
        assert_eq!(
            overrides,
            vec![(PathBuf::from("/home/ada/.config"), Access::Read)]
        );
        assert!(render_sbpl(&s).contains("(deny file-write* (subpath \"/home/ada/.config\"))\n"));
    }

    #[test]
    fn deepest_grant_wins_through_three_levels() {
        // rw /a, read /a/b, rw /a/b/c, read /a/b/c/d: every level flips.
        let s = spec(
            vec![
                grant(dir("/a/b"), Access::Read),
                grant(dir("/a/b/c/d"), Access::Read),
                grant(dir("/a"), Access::ReadWrite),
                grant(dir("/a/b/c"), Access::ReadWrite),
            ],
            vec![],
        );
        let overrides: Vec<_> = nested_overrides(&s)
            .into_iter()
            .map(|(p, a)| (p.canonical.clone(), a))
            .collect();
        assert_eq!(
            overrides,
            vec![
                (PathBuf::from("/a/b"), Access::Read),
                (PathBuf::from("/a/b/c"), Access::ReadWrite),
                (PathBuf::from("/a/b/c/d"), Access::Read),
            ]
        );
    }

    #[test]
    fn no_overrides_when_nesting_agrees() {
        let s = spec(
            vec![
                grant(dir("/a"), Access::Read),
                grant(dir("/a/b"), Access::ReadWrite),
                grant(dir("/c"), Access::ReadWrite),
                grant(dir("/c/d"), Access::ReadWrite),
                grant(dir("/x"), Access::Read),
                grant(dir("/x"), Access::ReadWrite),
            ],
            vec![],
        );
        assert!(nested_overrides(&s).is_empty());
    }

    #[test]
    fn a_file_grant_encloses_nothing() {
        let s = spec(
            vec![
                grant(file("/a/f"), Access::ReadWrite),
                grant(dir("/a/f/x"), Access::Read),
            ],
            vec![],
        );
        assert!(nested_overrides(&s).is_empty());
    }

    /// An escape's Mach service is reopened only by the opt-in that names it, and only
    /// when that opt-in is on (for automation: when it lists a bundle id).
    #[test]
    fn only_an_opt_in_that_is_on_reopens_its_escape() {
        let events = AUTOMATION_MACH[0];
        let pasteboard = CLIPBOARD_MACH[0];
        let none = MacOptIns::default();
        assert_eq!(none.reopened_by(events), None);
        assert_eq!(none.reopened_by(pasteboard), None);
        let automation = MacOptIns {
            automation: vec!["com.apple.Terminal".into()],
            ..MacOptIns::default()
        };
        assert_eq!(automation.reopened_by(events), Some("macos.automation"));
        assert_eq!(automation.reopened_by(pasteboard), None);
        let clipboard = MacOptIns {
            clipboard: true,
            ..MacOptIns::default()
        };
        assert_eq!(clipboard.reopened_by(pasteboard), Some("macos.clipboard"));
        assert_eq!(clipboard.reopened_by(events), None);
    }

    #[test]
    fn developer_dir_follows_the_select_link_or_the_variable() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let dev = root.join("Xcode.app/Contents/Developer");
        std::fs::create_dir_all(&dev).unwrap();
        let link = root.join("xcode_select_link");
        std::os::unix::fs::symlink(&dev, &link).unwrap();
        assert_eq!(developer_dir(None, &link), Some(dev.clone()));
        let beta = root.join("Xcode-beta.app/Contents/Developer");
        std::fs::create_dir_all(&beta).unwrap();
        assert_eq!(developer_dir(Some(beta.clone()), &link), Some(beta));
        // A relative variable is ignored; a missing link or folder gives nothing.
        assert_eq!(developer_dir(Some("rel".into()), &link), Some(dev));
        assert_eq!(developer_dir(None, &root.join("absent")), None);
        std::fs::remove_dir_all(root.join("Xcode.app")).unwrap();
        assert_eq!(developer_dir(None, &link), None);
        // The Command Line Tools live under /Library, which the baseline reads.
        assert_eq!(developer_dir(Some("/Library".into()), &link), None);
        // Only a folder is the developer tools: a file named there is nothing.
        let file = root.join("Developer");
        std::fs::write(&file, b"").unwrap();
        assert_eq!(developer_dir(Some(file), &link), None);
    }

    #[test]
    fn regex_escape_refuses_what_a_regex_token_cannot_hold() {
        assert_eq!(
            regex_escape(Path::new("/a.b/c+d(e)")).as_deref(),
            Some(r"/a\.b/c\+d\(e\)")
        );
        assert_eq!(regex_escape(Path::new("/a\"b")), None);
        assert_eq!(regex_escape(Path::new("/a\nb")), None);
    }

    #[test]
    fn missing_grants_match_as_trees() {
        let s = spec(
            vec![grant(
                ResolvedPath::fixed("/a/new", "/a/new", PathKind::Missing),
                Access::ReadWrite,
            )],
            vec![],
        );
        assert!(render_sbpl(&s).contains(
            "(allow file-read* process-exec* file-map-executable file-write* (subpath \"/a/new\"))\n"
        ));
    }
}
