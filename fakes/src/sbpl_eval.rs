//! An evaluator for the Seatbelt profile language (SBPL), as far as relay's profiles use
//! it: given a rendered profile, is an operation on a path (a socket, a port) allowed?
//!
//! The fake `sandbox-exec` asks it the questions a launch's policy implies
//! ([`crate::sbpl_questions`]) and records the answers, so a Linux test can see what the
//! real Seatbelt would decide. It is a model: what it implements is written down here,
//! and anything outside that is refused (an unknown operation, filter or form is an
//! error, never ignored), so a profile it accepts is one whose every rule it understood.
//!
//! # The rules it implements
//!
//! Read from Apple's own profiles (`/System/Library/Sandbox/Profiles/*.sb`,
//! `/usr/share/sandbox/*.sb`), the reverse-engineered *Apple Sandbox Guide*, and the
//! profile upstream relay (barelyworkingcode/relay) renders and checks on real Macs
//! (`internal/sessions/sandbox`):
//!
//! - **The last matching rule wins.** Rules are `(allow OP… FILTER…)` and
//!   `(deny OP… FILTER…)`; for one concrete operation on one target, the decision is the
//!   action of the last rule that names a covering operation and whose filter matches.
//!   No matching rule at all is a deny. `(allow default)` / `(deny default)` are just
//!   rules whose operation covers everything, which is why they come first.
//! - **Operation families are name prefixes.** `default` covers every operation; a name
//!   ending in `*` covers every operation whose name starts with the part before the
//!   `*`. So `file-read*` covers `file-read-data`, `file-read-metadata` and
//!   `file-read-xattr`; `file-write*` covers `file-write-data`, `file-write-create`,
//!   `file-write-unlink` and the other `file-write-…` operations; `file*` covers all of
//!   those and also `file-clone` and `file-link`, which `file-write*` does **not** cover
//!   (they are operations of their own in Apple's table, and upstream measured on a Mac
//!   that a directory can be cloned where `file-write*` is denied). `network*` covers
//!   `network-outbound`; `process-exec*` covers `process-exec`.
//! - **Several filters in one rule match when any of them matches**; a rule without a
//!   filter matches every target. `(require-any …)` is the same "any" written out,
//!   `(require-all …)` needs every child, `(require-not F)` inverts one filter.
//! - **Path filters** compare bytes, case included (Seatbelt sees the path the kernel
//!   resolved, spelled as it is on disk; see `src/sandbox/resolve.rs` for how relay
//!   spells its rules): `(literal P)` is exactly `P`; `(subpath P)` is `P` itself or
//!   anything below it (`/a/b` does not match `/a/bc`); `(prefix P)` is a plain string
//!   prefix (`/a/b` does match `/a/bc`); `(regex R)` is a POSIX-style extended regular
//!   expression that matches anywhere in the path unless `^`/`$` anchor it.
//! - **What a path filter sees**: the file for `file-…` operations and `process-exec`,
//!   the socket's path for `network-outbound` to a unix socket (old Apple profiles allow
//!   sockets with `(literal …)`). `(remote unix-socket (path-literal P))` and
//!   `(… (path-regex R))` match only a unix-socket connect; `(remote ip "HOST:PORT")`
//!   (and `(remote tcp "HOST:PORT")`, which on a Mac also leaves UDP out)
//!   only a TCP connect, `HOST` being `localhost` or `*`, `PORT` a number or `*`.
//! - **`(file-mode #oNNNN)`** matches a file whose mode has every one of those bits set
//!   (`#o4000`: setuid).
//!
//! How relay's questions map onto operations (the kernel checks each of these on the
//! path named): reading a file is `file-read-data`, `stat` is `file-read-metadata`,
//! writing is `file-write-data`, creating a name is `file-write-create`, removing one
//! is `file-write-unlink`, **renaming** is `file-write-unlink` on the source (and
//! `file-write-create` on the destination), `clonefile(2)` is `file-clone`, a hard link
//! is `file-link` (relay denies it on the path itself, so it holds whether the kernel
//! checks the link's source or its new name), a unix-socket connect or a loopback
//! connect is `network-outbound`, and executing a file is `process-exec`.
//!
//! - **What else a rule can name** (the deny-default profile's questions): a Mach
//!   service by `(global-name N)` or `(global-name-prefix P)`; another process by
//!   `(target self)`, `(target same-sandbox)` (the caller and every process under the
//!   same profile) or `(target others)`; a sysctl by `(sysctl-name N)` or
//!   `(sysctl-name-prefix P)`; an IOKit user client by `(iokit-registry-entry-class C)`
//!   (or `iokit-user-client-class`); a socket domain by `(socket-domain AF_…)` for
//!   `system-socket`; a POSIX semaphore or shared-memory name by `(ipc-posix-name N)` or
//!   `(ipc-posix-name-prefix P)`; an Apple Event's receiver by `(appleevent-destination
//!   BUNDLE-ID)`; every unix-socket connect by `(remote unix-socket)`; any TCP connect by
//!   `(remote ip "*:PORT")` (`localhost:PORT` only loopback). An operation that names
//!   nothing (`lsopen`, `job-creation`, `pseudo-tty`, `user-preference-write`) is decided
//!   by rules without filters. `ipc-posix-sem` written bare covers its `-open`, `-post`…
//!   operations, as Apple's profiles use it.
//! - **`(param "NAME")`** where a string goes is the value `sandbox-exec -D NAME=VALUE`
//!   bound ([`Profile::parse_with`]); an unbound one is an error.
//! - **`(with message "…")`** after a rule's operations tags what is logged; it matches
//!   nothing and changes no decision.
//! - **`(extension "CLASS")`** never matches: the evaluator holds no sandbox extension,
//!   so an allow that needs one (a pty the session opens itself) is left to a Mac.
//!
//! Not modelled (an error if a profile uses them): `import`, `define`, `debug`, `trace`,
//! other `(with …)` modifiers, `vnode-type`, `require-entitlement`, and every filter not
//! listed above.

use std::fmt;

use regex::bytes::{Regex, RegexBuilder};

/// What the evaluator decided, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// The 1-based line of the rule that decided; `None` when no rule matched (deny).
    pub line: Option<usize>,
}

/// What an operation is applied to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A file or directory; `mode` is its `st_mode` when known (for `file-mode`).
    Path { path: Vec<u8>, mode: Option<u32> },
    /// A connect to the unix socket at this path.
    UnixSocket(Vec<u8>),
    /// A TCP connect to loopback on this port.
    Localhost(u16),
    /// A TCP connect to a host that is not loopback, on this port.
    Internet(u16),
    /// A Mach service looked up (or registered) by its global name.
    Mach(Vec<u8>),
    /// Another process, signalled or inspected, by how it relates to the caller.
    Process(Relation),
    /// A sysctl, by its dotted name (`kern.procargs2`).
    Sysctl(Vec<u8>),
    /// An IOKit user client, by its registry class (`RootDomainUserClient`).
    IoKit(Vec<u8>),
    /// A socket made in this domain (`AF_ROUTE`, `AF_SYSTEM`), for `system-socket`.
    SocketDomain(Vec<u8>),
    /// A POSIX semaphore or shared-memory object, by its name.
    PosixIpc(Vec<u8>),
    /// An Apple Event sent to the application with this bundle id.
    AppleEvent(Vec<u8>),
    /// An operation that names nothing (`lsopen`, `job-creation`, `pseudo-tty`,
    /// `user-preference-write`): only a rule without filters decides it.
    Nothing,
}

/// How the process an operation is aimed at relates to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    /// The caller itself.
    Itself,
    /// Another process under the same profile (a child, a sibling in the session).
    SameSandbox,
    /// A process outside this sandbox: the daemon, the host, another session, the
    /// person's shell.
    Outside,
}

impl Relation {
    pub fn as_str(self) -> &'static str {
        match self {
            Relation::Itself => "self",
            Relation::SameSandbox => "same-sandbox",
            Relation::Outside => "outside",
        }
    }
}

impl Target {
    pub fn path(path: impl AsRef<[u8]>) -> Target {
        Target::Path {
            path: path.as_ref().to_vec(),
            mode: None,
        }
    }

    fn path_bytes(&self) -> Option<&[u8]> {
        match self {
            Target::Path { path, .. } | Target::UnixSocket(path) => Some(path),
            _ => None,
        }
    }
}

/// A profile that could not be read or holds something the evaluator does not model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalError {
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for EvalError {}

/// Every operation name the evaluator accepts in a rule: Apple's names for the
/// operations relay's questions use, their families, and the ones real profiles commonly
/// name next to them. A name outside this list is a typo or something unmodelled; the
/// real `sandbox-exec` refuses unknown names too.
const OPERATIONS: &[&str] = &[
    "default",
    "file*",
    "file-chroot",
    "file-clone",
    "file-ioctl",
    "file-issue-extension",
    "file-link",
    "file-lock",
    "file-map-executable",
    "file-mknod",
    "file-mount",
    "file-read*",
    "file-read-data",
    "file-read-metadata",
    "file-read-xattr",
    "file-revoke",
    "file-search",
    "file-test-existence",
    "file-unmount",
    "file-write*",
    "file-write-acl",
    "file-write-create",
    "file-write-data",
    "file-write-flags",
    "file-write-mode",
    "file-write-owner",
    "file-write-setugid",
    "file-write-times",
    "file-write-unlink",
    "file-write-xattr",
    "network*",
    "network-bind",
    "network-inbound",
    "network-outbound",
    "process*",
    "process-exec*",
    "process-exec",
    "process-exec-interpreter",
    "process-fork",
    "process-info*",
    "signal",
    "sysctl*",
    "sysctl-read",
    "sysctl-write",
    "mach*",
    "mach-host*",
    "mach-lookup",
    "mach-register",
    "ipc*",
    "ipc-posix*",
    "ipc-posix-sem",
    "ipc-posix-sem-create",
    "ipc-posix-sem-open",
    "ipc-posix-sem-post",
    "ipc-posix-sem-unlink",
    "ipc-posix-sem-wait",
    "ipc-posix-shm*",
    "ipc-posix-shm-read*",
    "ipc-posix-shm-read-data",
    "ipc-posix-shm-read-metadata",
    "ipc-posix-shm-write*",
    "ipc-posix-shm-write-create",
    "ipc-posix-shm-write-data",
    "ipc-posix-shm-write-unlink",
    "iokit*",
    "iokit-open",
    "process-info-codesignature",
    "process-info-dirtycontrol",
    "process-info-listpids",
    "process-info-pidinfo",
    "process-info-pidfdinfo",
    "process-info-pidfileportinfo",
    "process-info-rusage",
    "process-info-setcontrol",
    "system-socket",
    "pseudo-tty",
    "lsopen",
    "appleevent-send",
    "job-creation",
    "user-preference*",
    "user-preference-read",
    "user-preference-write",
];

/// Operations SBPL names without a `*` that still cover the operations named
/// `<family>-…` (`ipc-posix-sem` covers `ipc-posix-sem-open`), as Apple's profiles use
/// them.
const BARE_FAMILIES: &[&str] = &["ipc-posix-sem"];

/// Whether the rule's operation `rule_op` covers the concrete operation `op`.
pub fn covers(rule_op: &str, op: &str) -> bool {
    if rule_op == op || rule_op == "default" {
        return true;
    }
    if BARE_FAMILIES.contains(&rule_op)
        && op
            .strip_prefix(rule_op)
            .is_some_and(|rest| rest.starts_with('-'))
    {
        return true;
    }
    match rule_op.strip_suffix('*') {
        Some(family) => op.starts_with(family),
        None => false,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Allow,
    Deny,
}

#[derive(Debug)]
enum Filter {
    Literal(Vec<u8>),
    Subpath(Vec<u8>),
    Prefix(Vec<u8>),
    Regex(Regex),
    Any(Vec<Filter>),
    All(Vec<Filter>),
    Not(Box<Filter>),
    FileMode(u32),
    SocketLiteral(Vec<u8>),
    SocketRegex(Regex),
    /// `(remote ip "HOST:PORT")`: `local` when HOST is `localhost` (only loopback
    /// connects match), else `*` (every TCP connect); `None` for port `*`.
    RemoteIp {
        local: bool,
        port: Option<u16>,
    },
    /// `(remote unix-socket)` with no path: every unix-socket connect.
    AnySocket,
    GlobalName(Vec<u8>),
    GlobalNamePrefix(Vec<u8>),
    /// `(target self)`, `(target same-sandbox)` (which holds the caller too), `(target
    /// others)`.
    TargetIs(Vec<Relation>),
    SysctlName(Vec<u8>),
    SysctlNamePrefix(Vec<u8>),
    IoKitClass(Vec<u8>),
    SocketDomain(Vec<u8>),
    IpcName(Vec<u8>),
    IpcNamePrefix(Vec<u8>),
    AppleEventDestination(Vec<u8>),
    /// `(extension "CLASS")`: a sandbox extension the kernel issued to this process
    /// (such as `com.apple.sandbox.pty` for a pty it opened itself). The evaluator holds
    /// none, so this never matches: an allow that needs one is never the answer here.
    Extension,
}

impl Filter {
    fn matches(&self, target: &Target) -> bool {
        match self {
            Filter::Literal(p) => target.path_bytes() == Some(p.as_slice()),
            Filter::Subpath(p) => target.path_bytes().is_some_and(|t| in_subpath(p, t)),
            Filter::Prefix(p) => target.path_bytes().is_some_and(|t| t.starts_with(p)),
            Filter::Regex(r) => target.path_bytes().is_some_and(|t| r.is_match(t)),
            Filter::Any(children) => children.iter().any(|c| c.matches(target)),
            Filter::All(children) => children.iter().all(|c| c.matches(target)),
            Filter::Not(child) => !child.matches(target),
            Filter::FileMode(bits) => match target {
                Target::Path {
                    mode: Some(mode), ..
                } => mode & bits == *bits,
                _ => false,
            },
            Filter::SocketLiteral(p) => matches!(target, Target::UnixSocket(t) if t == p),
            Filter::SocketRegex(r) => matches!(target, Target::UnixSocket(t) if r.is_match(t)),
            Filter::RemoteIp { local, port } => match target {
                Target::Localhost(p) => port.is_none_or(|want| want == *p),
                Target::Internet(p) => !local && port.is_none_or(|want| want == *p),
                _ => false,
            },
            Filter::AnySocket => matches!(target, Target::UnixSocket(_)),
            Filter::GlobalName(n) => matches!(target, Target::Mach(t) if t == n),
            Filter::GlobalNamePrefix(n) => matches!(target, Target::Mach(t) if t.starts_with(n)),
            Filter::TargetIs(relations) => {
                matches!(target, Target::Process(r) if relations.contains(r))
            }
            Filter::SysctlName(n) => matches!(target, Target::Sysctl(t) if t == n),
            Filter::SysctlNamePrefix(n) => matches!(target, Target::Sysctl(t) if t.starts_with(n)),
            Filter::IoKitClass(n) => matches!(target, Target::IoKit(t) if t == n),
            Filter::SocketDomain(n) => matches!(target, Target::SocketDomain(t) if t == n),
            Filter::IpcName(n) => matches!(target, Target::PosixIpc(t) if t == n),
            Filter::IpcNamePrefix(n) => matches!(target, Target::PosixIpc(t) if t.starts_with(n)),
            Filter::AppleEventDestination(n) => matches!(target, Target::AppleEvent(t) if t == n),
            Filter::Extension => false,
        }
    }
}

/// `path` is `root` or lies below it, component-wise.
fn in_subpath(root: &[u8], path: &[u8]) -> bool {
    let root = match root {
        [] => return false,
        [b'/'] => return path.starts_with(b"/"),
        [rest @ .., b'/'] => rest,
        r => r,
    };
    path == root || (path.starts_with(root) && path.get(root.len()) == Some(&b'/'))
}

#[derive(Debug)]
struct Rule {
    line: usize,
    action: Action,
    ops: Vec<String>,
    /// Empty: the rule applies to every target.
    filters: Vec<Filter>,
}

/// A profile, read and checked, ready to answer questions.
#[derive(Debug)]
pub struct Profile {
    rules: Vec<Rule>,
}

impl Profile {
    /// Reads `text`. The first form must be `(version 1)`. A `(param "NAME")` in it is
    /// an error: see [`Profile::parse_with`].
    pub fn parse(text: &[u8]) -> Result<Profile, EvalError> {
        Profile::parse_with(text, &[])
    }

    /// Reads `text` with the parameters `sandbox-exec -D NAME=VALUE` binds: a
    /// `(param "NAME")` where a string goes reads as VALUE, and one not bound is an
    /// error (the real `sandbox-exec` would see `#f` where a string must be).
    pub fn parse_with(text: &[u8], params: &[(String, Vec<u8>)]) -> Result<Profile, EvalError> {
        let forms = read(text)?;
        let mut forms = forms.into_iter();
        match forms.next() {
            Some(Expr::List(items, line)) if is_version_1(&items) => {
                let _ = line;
            }
            Some(other) => return Err(err(other.line(), "the first form must be (version 1)")),
            None => return Err(err(1, "no forms")),
        }
        let mut rules = Vec::new();
        for form in forms {
            rules.push(rule(form, params)?);
        }
        Ok(Profile { rules })
    }

    /// The decision for the concrete operation `op` (no `*`, not `default`) on `target`.
    pub fn decide(&self, op: &str, target: &Target) -> Result<Decision, EvalError> {
        if op.ends_with('*') || op == "default" || !OPERATIONS.contains(&op) {
            return Err(err(0, &format!("{op:?} is not a concrete operation")));
        }
        let decided = self.rules.iter().rev().find(|rule| {
            rule.ops.iter().any(|r| covers(r, op))
                && (rule.filters.is_empty() || rule.filters.iter().any(|f| f.matches(target)))
        });
        Ok(match decided {
            Some(rule) => Decision {
                allowed: rule.action == Action::Allow,
                line: Some(rule.line),
            },
            None => Decision {
                allowed: false,
                line: None,
            },
        })
    }

    /// How many rules the profile holds (the `(version 1)` form is not one): a test
    /// compares it with how many the renderer wrote, so a path that closed its string
    /// and added a rule is seen.
    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }

    /// [`Profile::decide`], only the verdict.
    pub fn allows(&self, op: &str, target: &Target) -> Result<bool, EvalError> {
        self.decide(op, target).map(|d| d.allowed)
    }
}

fn is_version_1(items: &[Expr]) -> bool {
    matches!(items, [Expr::Atom(v, _), Expr::Int(1, _)] if v == "version")
}

fn err(line: usize, reason: &str) -> EvalError {
    EvalError {
        line,
        reason: reason.to_string(),
    }
}

fn rule(form: Expr, params: &[(String, Vec<u8>)]) -> Result<Rule, EvalError> {
    let line = form.line();
    let Expr::List(items, _) = form else {
        return Err(err(line, "content outside a form"));
    };
    let mut items = items.into_iter();
    let action = match items.next() {
        Some(Expr::Atom(a, _)) if a == "allow" => Action::Allow,
        Some(Expr::Atom(a, _)) if a == "deny" => Action::Deny,
        Some(Expr::Atom(a, _)) => {
            return Err(err(line, &format!("({a} …) is not modelled")));
        }
        _ => return Err(err(line, "a rule starts with allow or deny")),
    };
    let mut ops = Vec::new();
    let mut filters = Vec::new();
    for item in items {
        match item {
            Expr::Atom(op, l) if filters.is_empty() => {
                if !OPERATIONS.contains(&op.as_str()) {
                    return Err(err(l, &format!("unknown operation {op:?}")));
                }
                ops.push(op);
            }
            Expr::List(ref items, l) if is_modifier(items) => {
                if !matches!(items.as_slice(), [Expr::Atom(_, _), Expr::Atom(m, _), Expr::Str(_, _)] if m == "message")
                {
                    return Err(err(l, "only (with message \"…\") is modelled"));
                }
            }
            Expr::List(..) => filters.push(filter(item, params)?),
            other => {
                return Err(err(
                    other.line(),
                    "expected an operation or a filter in a rule",
                ))
            }
        }
    }
    if ops.is_empty() {
        return Err(err(line, "a rule names no operation"));
    }
    Ok(Rule {
        line,
        action,
        ops,
        filters,
    })
}

/// `(with …)`: how a decision is reported, not what it matches.
fn is_modifier(items: &[Expr]) -> bool {
    matches!(items.first(), Some(Expr::Atom(a, _)) if a == "with")
}

fn filter(expr: Expr, params: &[(String, Vec<u8>)]) -> Result<Filter, EvalError> {
    let line = expr.line();
    let Expr::List(items, _) = expr else {
        return Err(err(line, "a filter is a list"));
    };
    let mut items = items.into_iter();
    let Some(Expr::Atom(head, _)) = items.next() else {
        return Err(err(line, "a filter starts with its name"));
    };
    let args: Vec<Expr> = items.collect();
    let one_string = |args: &[Expr]| -> Result<Vec<u8>, EvalError> {
        match args {
            [Expr::Str(s, _)] => Ok(s.clone()),
            [Expr::List(items, _)] => match items.as_slice() {
                [Expr::Atom(p, _), Expr::Str(name, _)] if p == "param" => params
                    .iter()
                    .find(|(n, _)| n.as_bytes() == name.as_slice())
                    .map(|(_, v)| v.clone())
                    .ok_or_else(|| {
                        let name = String::from_utf8_lossy(name);
                        err(
                            line,
                            &format!("(param {name:?}) is not bound (-D {name}=…)"),
                        )
                    }),
                _ => Err(err(line, &format!("({head} …) takes one string"))),
            },
            _ => Err(err(line, &format!("({head} …) takes one string"))),
        }
    };
    let one_regex = |args: &[Expr]| -> Result<Regex, EvalError> {
        let pattern = match args {
            [Expr::Str(s, _)] | [Expr::RegexLit(s, _)] => s.clone(),
            _ => return Err(err(line, &format!("({head} …) takes one regex"))),
        };
        compile(&pattern).map_err(|e| err(line, &e))
    };
    let children = |args: Vec<Expr>| -> Result<Vec<Filter>, EvalError> {
        args.into_iter().map(|a| filter(a, params)).collect()
    };
    let one_atom = |args: &[Expr]| -> Result<Vec<u8>, EvalError> {
        match args {
            [Expr::Atom(a, _)] => Ok(a.as_bytes().to_vec()),
            _ => Err(err(line, &format!("({head} …) takes one name"))),
        }
    };
    Ok(match head.as_str() {
        "literal" => Filter::Literal(one_string(&args)?),
        "subpath" => Filter::Subpath(one_string(&args)?),
        "prefix" => Filter::Prefix(one_string(&args)?),
        "regex" => Filter::Regex(one_regex(&args)?),
        "require-any" => Filter::Any(children(args)?),
        "require-all" => Filter::All(children(args)?),
        "require-not" => {
            let mut c = children(args)?;
            if c.len() != 1 {
                return Err(err(line, "(require-not …) takes one filter"));
            }
            Filter::Not(Box::new(c.remove(0)))
        }
        "file-mode" => match args.as_slice() {
            [Expr::Int(bits, _)] if *bits >= 0 && *bits <= 0o7777 => Filter::FileMode(*bits as u32),
            _ => return Err(err(line, "(file-mode …) takes one mode like #o4000")),
        },
        "remote" => remote(line, args)?,
        "global-name" => Filter::GlobalName(one_string(&args)?),
        "global-name-prefix" => Filter::GlobalNamePrefix(one_string(&args)?),
        "sysctl-name" => Filter::SysctlName(one_string(&args)?),
        "sysctl-name-prefix" => Filter::SysctlNamePrefix(one_string(&args)?),
        "iokit-registry-entry-class" | "iokit-user-client-class" => {
            Filter::IoKitClass(one_string(&args)?)
        }
        "socket-domain" => Filter::SocketDomain(one_atom(&args)?),
        "ipc-posix-name" => Filter::IpcName(one_string(&args)?),
        "ipc-posix-name-prefix" => Filter::IpcNamePrefix(one_string(&args)?),
        "appleevent-destination" => Filter::AppleEventDestination(one_string(&args)?),
        "extension" => {
            one_string(&args)?;
            Filter::Extension
        }
        "target" => {
            let relations = match one_atom(&args)?.as_slice() {
                b"self" => vec![Relation::Itself],
                b"same-sandbox" => vec![Relation::Itself, Relation::SameSandbox],
                b"others" => vec![Relation::SameSandbox, Relation::Outside],
                _ => return Err(err(line, "(target …) takes self, same-sandbox or others")),
            };
            Filter::TargetIs(relations)
        }
        other => return Err(err(line, &format!("filter ({other} …) is not modelled"))),
    })
}

fn remote(line: usize, args: Vec<Expr>) -> Result<Filter, EvalError> {
    let mut args = args.into_iter();
    match (args.next(), args.next(), args.next()) {
        // `tcp` is `ip` for TCP alone; the model asks TCP connects only, so both match
        // them the same way.
        (Some(Expr::Atom(kind, _)), Some(Expr::Str(addr, _)), None)
            if kind == "ip" || kind == "tcp" =>
        {
            let addr = String::from_utf8(addr)
                .map_err(|_| err(line, "(remote ip …) address is not text"))?;
            let (host, port) = addr
                .rsplit_once(':')
                .ok_or_else(|| err(line, "(remote ip \"HOST:PORT\")"))?;
            if host != "localhost" && host != "*" {
                return Err(err(line, "(remote ip …) host must be localhost or *"));
            }
            let local = host == "localhost";
            let port = match port {
                "*" => None,
                p => Some(
                    p.parse::<u16>()
                        .map_err(|_| err(line, "(remote ip …) port must be a number or *"))?,
                ),
            };
            Ok(Filter::RemoteIp { local, port })
        }
        (Some(Expr::Atom(kind, _)), None, None) if kind == "unix-socket" => Ok(Filter::AnySocket),
        (Some(Expr::Atom(kind, _)), Some(Expr::List(items, l)), None) if kind == "unix-socket" => {
            let mut items = items.into_iter();
            match (items.next(), items.next(), items.next()) {
                (Some(Expr::Atom(f, _)), Some(Expr::Str(p, _)), None) if f == "path-literal" => {
                    Ok(Filter::SocketLiteral(p))
                }
                (Some(Expr::Atom(f, _)), Some(Expr::Str(p, _) | Expr::RegexLit(p, _)), None)
                    if f == "path-regex" =>
                {
                    Ok(Filter::SocketRegex(compile(&p).map_err(|e| err(l, &e))?))
                }
                _ => Err(err(
                    l,
                    "(remote unix-socket …) takes (path-literal P) or (path-regex R)",
                )),
            }
        }
        _ => Err(err(
            line,
            "(remote …) takes ip \"HOST:PORT\" or unix-socket (path-…)",
        )),
    }
}

/// A regex as SBPL writes it, matching bytes, searching anywhere unless anchored.
fn compile(pattern: &[u8]) -> Result<Regex, String> {
    let text = std::str::from_utf8(pattern).map_err(|_| "a regex that is not UTF-8")?;
    RegexBuilder::new(text)
        .unicode(false)
        .build()
        .map_err(|e| format!("regex {text:?}: {e}"))
}

/// One datum of the profile, with the line it starts on.
#[derive(Debug, Clone, PartialEq)]
enum Expr {
    List(Vec<Expr>, usize),
    Atom(String, usize),
    Str(Vec<u8>, usize),
    /// `#"…"`: taken raw up to the next `"`; its backslashes belong to the regex.
    RegexLit(Vec<u8>, usize),
    Int(i64, usize),
}

impl Expr {
    fn line(&self) -> usize {
        match self {
            Expr::List(_, l)
            | Expr::Atom(_, l)
            | Expr::Str(_, l)
            | Expr::RegexLit(_, l)
            | Expr::Int(_, l) => *l,
        }
    }
}

/// Reads every top-level datum. Strings take the escapes relay's renderer writes
/// (`\\ \" \n \t \xHH`); any other escape is an error.
fn read(text: &[u8]) -> Result<Vec<Expr>, EvalError> {
    let mut reader = Reader {
        text,
        at: 0,
        line: 1,
    };
    let mut out = Vec::new();
    loop {
        reader.skip_blank();
        if reader.at >= text.len() {
            return Ok(out);
        }
        out.push(reader.datum()?);
    }
}

struct Reader<'a> {
    text: &'a [u8],
    at: usize,
    line: usize,
}

impl Reader<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn bump(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        if b == b'\n' {
            self.line += 1;
        }
        Some(b)
    }

    fn skip_blank(&mut self) {
        while let Some(b) = self.peek() {
            match b {
                b' ' | b'\t' | b'\r' | b'\n' | b'\x0b' | b'\x0c' => {
                    self.bump();
                }
                b';' => {
                    while self.peek().is_some_and(|b| b != b'\n') {
                        self.bump();
                    }
                }
                _ => return,
            }
        }
    }

    fn datum(&mut self) -> Result<Expr, EvalError> {
        let line = self.line;
        match self.peek() {
            Some(b'(') => {
                self.bump();
                let mut items = Vec::new();
                loop {
                    self.skip_blank();
                    match self.peek() {
                        None => return Err(err(line, "unbalanced '(' never closed")),
                        Some(b')') => {
                            self.bump();
                            return Ok(Expr::List(items, line));
                        }
                        Some(_) => items.push(self.datum()?),
                    }
                }
            }
            Some(b')') => Err(err(line, "unbalanced ')'")),
            Some(b'"') => {
                self.bump();
                Ok(Expr::Str(self.string(line)?, line))
            }
            Some(b'#') if self.text.get(self.at + 1) == Some(&b'"') => {
                self.bump();
                self.bump();
                let mut raw = Vec::new();
                loop {
                    match self.bump() {
                        None => return Err(err(line, "unclosed regex")),
                        Some(b'"') => return Ok(Expr::RegexLit(raw, line)),
                        Some(b) => raw.push(b),
                    }
                }
            }
            Some(_) => {
                let start = self.at;
                while self
                    .peek()
                    .is_some_and(|b| !b" \t\r\n\x0b\x0c()\";".contains(&b))
                {
                    self.bump();
                }
                let word = String::from_utf8(self.text[start..self.at].to_vec())
                    .map_err(|_| err(line, "an atom that is not UTF-8"))?;
                Ok(number(&word).map_or(Expr::Atom(word, line), |n| Expr::Int(n, line)))
            }
            None => Err(err(line, "unexpected end")),
        }
    }

    fn string(&mut self, line: usize) -> Result<Vec<u8>, EvalError> {
        let mut value = Vec::new();
        loop {
            match self.bump() {
                None => return Err(err(line, "unclosed string")),
                Some(b'"') => return Ok(value),
                Some(b'\\') => match self.bump() {
                    Some(b'\\') => value.push(b'\\'),
                    Some(b'"') => value.push(b'"'),
                    Some(b'n') => value.push(b'\n'),
                    Some(b't') => value.push(b'\t'),
                    Some(b'x') => {
                        let hex = self.text.get(self.at..self.at + 2).unwrap_or_default();
                        let v = std::str::from_utf8(hex)
                            .ok()
                            .and_then(|h| u8::from_str_radix(h, 16).ok())
                            .ok_or_else(|| err(self.line, "bad \\x escape"))?;
                        self.at += 2;
                        value.push(v);
                    }
                    other => {
                        return Err(err(
                            self.line,
                            &format!("unknown escape \\{}", other.map_or('?', char::from)),
                        ))
                    }
                },
                Some(b) => value.push(b),
            }
        }
    }
}

/// `#o755`, `#x1ff`, `#b101`, or decimal digits.
fn number(word: &str) -> Option<i64> {
    let (digits, radix) = match word.as_bytes() {
        [b'#', b'o', ..] => (&word[2..], 8),
        [b'#', b'x', ..] => (&word[2..], 16),
        [b'#', b'b', ..] => (&word[2..], 2),
        _ if !word.is_empty() && word.bytes().all(|b| b.is_ascii_digit()) => (word, 10),
        _ => return None,
    };
    i64::from_str_radix(digits, radix).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn profile(body: &str) -> Profile {
        Profile::parse(format!("(version 1)\n{body}").as_bytes())
            .unwrap_or_else(|e| panic!("{e}\n{body}"))
    }

    /// The parameter the shim binds, as for a pty session on `/dev/ttys003`.
    fn tty() -> Vec<(String, Vec<u8>)> {
        vec![("RELAY_TTY".to_string(), b"/dev/ttys003".to_vec())]
    }

    fn parse_golden(text: &[u8]) -> Profile {
        Profile::parse_with(text, &tty()).unwrap()
    }

    fn allows(p: &Profile, op: &str, path: &str) -> bool {
        p.allows(op, &Target::path(path)).unwrap()
    }

    const FILE_OPS: &[&str] = &[
        "file-read-data",
        "file-read-metadata",
        "file-write-data",
        "file-write-create",
        "file-write-unlink",
        "file-clone",
        "file-link",
    ];

    #[test]
    fn no_rule_is_a_deny_and_default_covers_everything() {
        let empty = profile("");
        for op in FILE_OPS.iter().chain(&["network-outbound", "process-exec"]) {
            assert!(!allows(&empty, op, "/x"), "{op}");
        }
        let open = profile("(allow default)");
        for op in FILE_OPS.iter().chain(&["network-outbound", "process-exec"]) {
            assert!(allows(&open, op, "/x"), "{op}");
        }
        assert!(open
            .allows("network-outbound", &Target::Localhost(80))
            .unwrap());
        let closed = profile("(deny default)");
        assert!(!allows(&closed, "file-read-data", "/x"));
    }

    #[test]
    fn last_matching_rule_wins_in_both_directions() {
        let p = profile(
            "(allow default)\n\
             (deny file-read* (subpath \"/home/ada\"))\n\
             (allow file-read* (subpath \"/home/ada/src\"))\n\
             (deny file-read-data (literal \"/home/ada/src/token\"))",
        );
        assert!(allows(&p, "file-read-data", "/etc/hosts"));
        assert!(!allows(&p, "file-read-data", "/home/ada/notes"));
        assert!(allows(&p, "file-read-data", "/home/ada/src/main.rs"));
        assert!(!allows(&p, "file-read-data", "/home/ada/src/token"));
        // The last rule names only file-read-data: metadata is still the earlier allow.
        assert!(allows(&p, "file-read-metadata", "/home/ada/src/token"));
        let d = p
            .decide("file-read-data", &Target::path("/home/ada/src/token"))
            .unwrap();
        assert_eq!(d.line, Some(5));

        // The same rules in the other order: the deny comes first and loses.
        let reversed = profile(
            "(allow default)\n\
             (deny file-read-data (literal \"/home/ada/src/token\"))\n\
             (allow file-read* (subpath \"/home/ada/src\"))",
        );
        assert!(allows(&reversed, "file-read-data", "/home/ada/src/token"));
    }

    #[test]
    fn operation_families() {
        let read = profile("(deny default)\n(allow file-read*)");
        for op in ["file-read-data", "file-read-metadata", "file-read-xattr"] {
            assert!(allows(&read, op, "/x"), "file-read* covers {op}");
        }
        for op in ["file-write-data", "file-clone", "file-link"] {
            assert!(!allows(&read, op, "/x"), "file-read* does not cover {op}");
        }

        let write = profile("(allow default)\n(deny file-write*)");
        for op in [
            "file-write-data",
            "file-write-create",
            "file-write-unlink",
            "file-write-mode",
        ] {
            assert!(!allows(&write, op, "/x"), "file-write* covers {op}");
        }
        // Clone and link are operations of their own: file-write* leaves them open.
        for op in [
            "file-clone",
            "file-link",
            "file-read-data",
            "file-read-metadata",
        ] {
            assert!(allows(&write, op, "/x"), "file-write* does not cover {op}");
        }

        let file = profile("(allow default)\n(deny file*)");
        for op in FILE_OPS {
            assert!(!allows(&file, op, "/x"), "file* covers {op}");
        }
        assert!(allows(&file, "process-exec", "/x"));
        assert!(file
            .allows("network-outbound", &Target::Localhost(1))
            .unwrap());

        let net = profile("(allow default)\n(deny network*)");
        assert!(!net
            .allows("network-outbound", &Target::Localhost(1))
            .unwrap());
        assert!(allows(&net, "file-read-data", "/x"));

        let exec = profile("(allow default)\n(deny process-exec*)");
        assert!(!allows(&exec, "process-exec", "/bin/sh"));
        assert!(allows(&exec, "file-read-data", "/bin/sh"));
    }

    #[test]
    fn one_rule_may_name_several_operations() {
        let p = profile("(deny default)\n(allow file-read-metadata file-clone (literal \"/a\"))");
        assert!(allows(&p, "file-read-metadata", "/a"));
        assert!(allows(&p, "file-clone", "/a"));
        assert!(!allows(&p, "file-read-data", "/a"));
    }

    #[test]
    fn literal_matches_the_path_only() {
        let p = profile("(allow default)\n(deny file-read* (literal \"/home/ada/.config\"))");
        assert!(!allows(&p, "file-read-data", "/home/ada/.config"));
        // Looks like it matches, does not: a child, a sibling with the same start, a
        // trailing slash, other letter case.
        for near in [
            "/home/ada/.config/token",
            "/home/ada/.configx",
            "/home/ada/.config/",
            "/home/ada/.Config",
            "/home/ada",
        ] {
            assert!(allows(&p, "file-read-data", near), "{near}");
        }
    }

    #[test]
    fn subpath_matches_the_path_and_below_by_component() {
        let p = profile("(allow default)\n(deny file-read* (subpath \"/home/ada/.config\"))");
        for inside in [
            "/home/ada/.config",
            "/home/ada/.config/token",
            "/home/ada/.config/a/b/c",
        ] {
            assert!(!allows(&p, "file-read-data", inside), "{inside}");
        }
        for outside in [
            "/home/ada/.configx",
            "/home/ada/.config-old/token",
            "/home/ada",
            "/home/ADA/.config",
            "/other/home/ada/.config",
        ] {
            assert!(allows(&p, "file-read-data", outside), "{outside}");
        }
        let slash = profile("(allow default)\n(deny file-read* (subpath \"/a/\"))");
        assert!(!allows(&slash, "file-read-data", "/a/b"));
        assert!(allows(&slash, "file-read-data", "/ab"));
        let root = profile("(allow default)\n(deny file-read* (subpath \"/\"))");
        assert!(!allows(&root, "file-read-data", "/anything"));
    }

    #[test]
    fn prefix_is_a_plain_string_prefix() {
        let p = profile("(allow default)\n(deny file-read* (prefix \"/home/ada/.config\"))");
        for hit in [
            "/home/ada/.config",
            "/home/ada/.configx",
            "/home/ada/.config-old/token",
        ] {
            assert!(!allows(&p, "file-read-data", hit), "{hit}");
        }
        for miss in ["/home/ada/.confi", "/home/ada", "/x/home/ada/.config"] {
            assert!(allows(&p, "file-read-data", miss), "{miss}");
        }
    }

    #[test]
    fn regex_searches_unless_anchored() {
        let loose = profile("(allow default)\n(deny file-read* (regex #\"\\.env$\"))");
        assert!(!allows(&loose, "file-read-data", "/src/.env"));
        assert!(!allows(&loose, "file-read-data", "/a/b.env"));
        assert!(allows(&loose, "file-read-data", "/src/.env.local"));

        let anchored = profile(
            "(allow default)\n(deny file-read* (regex #\"^/home/ada/\\.claude\\.json(\\.lock|\\.tmp\\.[^/]*)?$\"))",
        );
        for hit in [
            "/home/ada/.claude.json",
            "/home/ada/.claude.json.lock",
            "/home/ada/.claude.json.tmp.123.456",
        ] {
            assert!(!allows(&anchored, "file-read-data", hit), "{hit}");
        }
        for miss in [
            // `^` pins the start, `$` the end, `\.` is a dot only, `[^/]*` stays in the folder.
            "/x/home/ada/.claude.json",
            "/home/ada/.claude.json.bak",
            "/home/ada/.claudeXjson",
            "/home/ada/.claude.json.tmp.1/escape",
        ] {
            assert!(allows(&anchored, "file-read-data", miss), "{miss}");
        }

        // A regex in a plain string goes through string escapes first.
        let plain = profile("(allow default)\n(deny file-read* (regex \"^/a\\\\.b$\"))");
        assert!(!allows(&plain, "file-read-data", "/a.b"));
        assert!(allows(&plain, "file-read-data", "/aXb"));
    }

    #[test]
    fn require_any_all_and_not() {
        let p = profile(
            "(allow default)\n\
             (deny file-read* (require-all (subpath \"/home\") (require-not (subpath \"/home/ada/src\"))))\n\
             (deny file-write* (require-any (literal \"/a\") (literal \"/b\")))",
        );
        assert!(!allows(&p, "file-read-data", "/home/ada/notes"));
        assert!(allows(&p, "file-read-data", "/home/ada/src/x"));
        assert!(allows(&p, "file-read-data", "/etc/hosts"));
        assert!(!allows(&p, "file-write-data", "/a"));
        assert!(!allows(&p, "file-write-data", "/b"));
        assert!(allows(&p, "file-write-data", "/c"));

        // A require-not that wraps the wrong thing opens what it seems to close.
        let wrong = profile(
            "(allow default)\n(deny file-read* (require-not (literal \"/home/ada/token\")))",
        );
        assert!(allows(&wrong, "file-read-data", "/home/ada/token"));
        assert!(!allows(&wrong, "file-read-data", "/home/ada/other"));
    }

    #[test]
    fn several_filters_in_one_rule_are_any() {
        let p = profile("(allow default)\n(deny file-read* (literal \"/a\") (subpath \"/b\"))");
        assert!(!allows(&p, "file-read-data", "/a"));
        assert!(!allows(&p, "file-read-data", "/b/c"));
        assert!(allows(&p, "file-read-data", "/c"));
    }

    #[test]
    fn sockets_ports_and_setuid() {
        let p = profile(
            "(allow default)\n\
             (deny network-outbound (remote unix-socket (path-literal \"/run/relay.sock\")))\n\
             (deny network-outbound (remote unix-socket (path-regex #\"^/run/relay/\")))\n\
             (deny network-outbound (remote ip \"localhost:4100\"))\n\
             (deny process-exec* (file-mode #o4000))",
        );
        let out = |t: Target| p.allows("network-outbound", &t).unwrap();
        assert!(!out(Target::UnixSocket(b"/run/relay.sock".to_vec())));
        assert!(!out(Target::UnixSocket(b"/run/relay/host.sock".to_vec())));
        assert!(out(Target::UnixSocket(b"/run/relay.sock2".to_vec())));
        assert!(!out(Target::Localhost(4100)));
        assert!(out(Target::Localhost(4101)));
        // A socket filter does not match a file operation on the same path.
        assert!(allows(&p, "file-read-data", "/run/relay.sock"));

        let exec = |mode| {
            p.allows(
                "process-exec",
                &Target::Path {
                    path: b"/bin/x".to_vec(),
                    mode: Some(mode),
                },
            )
            .unwrap()
        };
        assert!(!exec(0o104755));
        assert!(exec(0o100755));
        assert!(exec(0o102755), "#o4000 does not cover setgid");

        let any_port = profile("(allow default)\n(deny network-outbound (remote ip \"*:*\"))");
        assert!(!any_port
            .allows("network-outbound", &Target::Localhost(1))
            .unwrap());
        // A literal on a socket path governs the connect (as old Apple profiles use it).
        let lit = profile("(allow default)\n(deny network-outbound (literal \"/run/s\"))");
        assert!(!lit
            .allows("network-outbound", &Target::UnixSocket(b"/run/s".to_vec()))
            .unwrap());
    }

    #[test]
    fn mach_names_match_exactly_or_by_prefix() {
        let p = profile(
            "(deny default)\n\
             (allow mach-lookup (global-name \"com.apple.trustd\"))\n\
             (allow mach-lookup (global-name-prefix \"com.apple.cfprefsd.\"))\n\
             (deny mach-lookup (global-name-prefix \"com.apple.lsd.\"))",
        );
        let look = |n: &str| p.allows("mach-lookup", &Target::Mach(n.into())).unwrap();
        assert!(look("com.apple.trustd"));
        assert!(!look("com.apple.trustd.agent"), "a name is not a prefix");
        assert!(look("com.apple.cfprefsd.agent"));
        assert!(!look("com.apple.lsd.mapdb"));
        assert!(
            !look("com.apple.coreservices.launchservicesd"),
            "no rule: denied"
        );
        // A Mach filter never matches a file, nor a file filter a service.
        assert!(!allows(&p, "file-read-data", "com.apple.trustd"));
        assert!(!p
            .allows("mach-register", &Target::Mach(b"com.apple.trustd".to_vec()))
            .unwrap());
    }

    #[test]
    fn process_relations_self_same_sandbox_and_outside() {
        let p = profile(
            "(deny default)\n\
             (allow signal (target same-sandbox))\n\
             (allow process-info* (target self))",
        );
        let ask = |op: &str, r| p.allows(op, &Target::Process(r)).unwrap();
        assert!(
            ask("signal", Relation::Itself),
            "same-sandbox holds the caller"
        );
        assert!(ask("signal", Relation::SameSandbox));
        assert!(!ask("signal", Relation::Outside));
        assert!(ask("process-info-pidinfo", Relation::Itself));
        assert!(!ask("process-info-pidinfo", Relation::SameSandbox));
        let others = profile("(allow default)\n(deny signal (target others))");
        assert!(others
            .allows("signal", &Target::Process(Relation::Itself))
            .unwrap());
        assert!(!others
            .allows("signal", &Target::Process(Relation::Outside))
            .unwrap());
    }

    #[test]
    fn sysctls_iokit_domains_and_ipc_names() {
        let p = profile(
            "(deny default)\n\
             (allow sysctl-read (sysctl-name \"hw.ncpu\") (sysctl-name-prefix \"kern.proc.pid.\"))\n\
             (allow iokit-open (iokit-registry-entry-class \"RootDomainUserClient\"))\n\
             (allow system-socket (socket-domain AF_ROUTE))\n\
             (allow ipc-posix-sem)\n\
             (allow ipc-posix-shm-read* (ipc-posix-name \"apple.shm.notification_center\"))\n\
             (allow ipc-posix-shm* (ipc-posix-name-prefix \"/psm_\"))",
        );
        let ok = |op: &str, t: Target| p.allows(op, &t).unwrap();
        let b = |s: &str| s.as_bytes().to_vec();
        assert!(ok("sysctl-read", Target::Sysctl(b("hw.ncpu"))));
        assert!(ok("sysctl-read", Target::Sysctl(b("kern.proc.pid.42"))));
        assert!(!ok("sysctl-read", Target::Sysctl(b("kern.procargs2"))));
        assert!(!ok("sysctl-read", Target::Sysctl(b("kern.proc.all"))));
        assert!(!ok("sysctl-write", Target::Sysctl(b("hw.ncpu"))));
        assert!(ok("iokit-open", Target::IoKit(b("RootDomainUserClient"))));
        assert!(!ok("iokit-open", Target::IoKit(b("IOHIDSystem"))));
        assert!(ok("system-socket", Target::SocketDomain(b("AF_ROUTE"))));
        assert!(!ok("system-socket", Target::SocketDomain(b("AF_SYSTEM"))));
        // `ipc-posix-sem` written bare covers its operations, whatever the name.
        for op in [
            "ipc-posix-sem-open",
            "ipc-posix-sem-create",
            "ipc-posix-sem-post",
        ] {
            assert!(ok(op, Target::PosixIpc(b("/mp-1"))), "{op}");
        }
        let note = || Target::PosixIpc(b("apple.shm.notification_center"));
        assert!(ok("ipc-posix-shm-read-data", note()));
        assert!(!ok("ipc-posix-shm-write-data", note()));
        assert!(ok(
            "ipc-posix-shm-write-create",
            Target::PosixIpc(b("/psm_ab"))
        ));
        assert!(!ok(
            "ipc-posix-shm-read-data",
            Target::PosixIpc(b("/other"))
        ));
    }

    #[test]
    fn operations_without_a_target_and_apple_event_receivers() {
        let p = profile(
            "(deny default)\n\
             (allow user-preference-read)\n\
             (allow appleevent-send (appleevent-destination \"com.apple.Terminal\"))\n\
             (deny lsopen)",
        );
        assert!(p.allows("user-preference-read", &Target::Nothing).unwrap());
        assert!(!p.allows("user-preference-write", &Target::Nothing).unwrap());
        assert!(!p.allows("lsopen", &Target::Nothing).unwrap());
        let ae = |id: &str| {
            p.allows("appleevent-send", &Target::AppleEvent(id.into()))
                .unwrap()
        };
        assert!(ae("com.apple.Terminal"));
        assert!(!ae("com.apple.systemevents"));
        // A rule with a filter never decides an operation that names nothing.
        let f = profile("(allow default)\n(deny job-creation (global-name \"x\"))");
        assert!(f.allows("job-creation", &Target::Nothing).unwrap());
    }

    #[test]
    fn unix_sockets_any_and_tcp_anywhere_or_loopback() {
        let p = profile(
            "(deny default)\n\
             (allow network-outbound (remote ip \"*:*\"))\n\
             (allow network-outbound (remote unix-socket (path-regex #\"^/home/ada/src/\")))\n\
             (deny network-outbound (remote ip \"localhost:4100\"))\n\
             (deny network-outbound (remote unix-socket (path-regex #\"/docker\\.sock$\")))",
        );
        let out = |t: Target| p.allows("network-outbound", &t).unwrap();
        assert!(out(Target::Internet(443)));
        assert!(out(Target::Localhost(80)), "* holds loopback too");
        assert!(!out(Target::Localhost(4100)));
        assert!(out(Target::UnixSocket(b"/home/ada/src/app.sock".to_vec())));
        assert!(!out(Target::UnixSocket(
            b"/home/ada/src/docker.sock".to_vec()
        )));
        assert!(!out(Target::UnixSocket(b"/home/ada/other.sock".to_vec())));
        let local = profile("(deny default)\n(allow network-outbound (remote ip \"localhost:*\"))");
        assert!(!local
            .allows("network-outbound", &Target::Internet(443))
            .unwrap());
        let any = profile("(allow default)\n(deny network-outbound (remote unix-socket))");
        assert!(!any
            .allows("network-outbound", &Target::UnixSocket(b"/x".to_vec()))
            .unwrap());
        assert!(any
            .allows("network-outbound", &Target::Localhost(1))
            .unwrap());
    }

    #[test]
    fn params_messages_and_extensions() {
        let text = "(version 1)\n\
             (deny default (with message \"relay-session\"))\n\
             (allow file-read* file-ioctl (literal (param \"RELAY_TTY\")))\n\
             (allow file-read* (require-all (regex #\"^/dev/ttys\") (extension \"com.apple.sandbox.pty\")))";
        let tty = vec![("RELAY_TTY".to_string(), b"/dev/ttys003".to_vec())];
        let p = Profile::parse_with(text.as_bytes(), &tty).unwrap();
        // The message tags the rule; it still matches everything.
        assert_eq!(p.rule_count(), 3);
        assert!(allows(&p, "file-ioctl", "/dev/ttys003"));
        assert!(allows(&p, "file-read-data", "/dev/ttys003"));
        // No extension is held here: another terminal stays closed.
        assert!(!allows(&p, "file-read-data", "/dev/ttys004"));
        let unbound = Profile::parse(text.as_bytes()).unwrap_err();
        assert!(unbound.reason.contains("not bound"), "{unbound}");
        assert_eq!(unbound.line, 3);
        let bad = Profile::parse(b"(version 1)\n(deny default (with no-report))").unwrap_err();
        assert!(bad.reason.contains("with message"), "{bad}");
    }

    #[test]
    fn string_escapes_round_trip() {
        let p = profile("(allow default)\n(deny file-read* (literal \"/a\\\"b\\\\c\\nd\\x01e\"))");
        assert!(!allows(&p, "file-read-data", "/a\"b\\c\nd\x01e"));
        assert!(allows(&p, "file-read-data", "/a\"b\\c\nd"));
    }

    /// relay's own goldens (src/sandbox/testdata), read by the evaluator: every one is
    /// understood, and the token case answers as the renderer's comments promise.
    #[test]
    fn relay_goldens_answer_as_their_comments_say() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../src/sandbox/testdata");
        let mut read = 0;
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            if entry.path().extension().is_some_and(|e| e == "sbpl") {
                let text = std::fs::read(entry.path()).unwrap();
                Profile::parse_with(&text, &tty())
                    .unwrap_or_else(|e| panic!("{:?}: {e}", entry.path()));
                read += 1;
            }
        }
        assert!(read >= 8, "only {read} goldens");

        let golden = |name: &str| parse_golden(&std::fs::read(dir.join(name)).unwrap());
        let p = golden("home_rw_token_inside.sbpl");
        let t = "/private/var/folders/zz/zyxvpxvq6csfxvn_n0000000000000/T";
        for (op, path, want) in [
            ("file-read-data", "/Users/ada/.config/acme-ltt/token", false),
            (
                "file-read-metadata",
                "/Users/ada/.config/acme-ltt/token",
                false,
            ),
            ("file-link", "/Users/ada/.config/acme-ltt/token", false),
            ("file-clone", "/Users/ada/.config/acme-ltt/token", false),
            (
                "file-read-data",
                "/Users/ada/Library/Application Support/relay/settings.json",
                false,
            ),
            ("file-write-unlink", "/Users/ada/.config", false),
            ("file-clone", "/Users/ada", false),
            ("file-write-unlink", "/usr/local", false),
            ("file-read-data", "/Users/ada/notes.txt", true),
            ("file-write-create", "/Users/ada/new.txt", true),
            ("file-write-unlink", "/Users/ada/notes.txt", true),
            ("file-read-data", "/Users/ada/.config/gh/hosts.yml", true),
            ("file-write-data", "/Users/ada/.config/gh/hosts.yml", false),
            ("file-read-data", "/usr/bin/git", true),
            ("file-write-data", "/usr/bin/git", false),
            ("file-read-data", "/usr/local/etc/redis.conf", false),
            (
                "file-read-data",
                "/usr/local/var/postgres/pg_hba.conf",
                false,
            ),
            ("file-read-data", "/usr/local/etc/gitconfig", true),
            (
                "file-read-data",
                "/System/Library/CoreServices/SystemVersion.plist",
                true,
            ),
            ("file-read-data", "/System/Volumes/Data/Users/ada/x", false),
            (
                "file-read-data",
                "/Applications/Xcode.app/Contents/Developer/usr/bin/git",
                true,
            ),
            ("file-read-data", "/Applications/Other.app/x", false),
            ("file-read-metadata", t, true),
            ("file-write-create", &format!("{t}/xcrun_db-Ab12"), true),
            ("file-write-data", &format!("{t}/xcrun_db"), true),
            (
                "file-read-data",
                &format!("{t}/relay-s2/claude-config/x"),
                false,
            ),
            (
                "file-write-create",
                &format!("{t}/xcrun_db-x/nested"),
                false,
            ),
            ("file-read-data", "/dev/fd/5", true),
        ] {
            assert_eq!(allows(&p, op, path), want, "{op} {path}");
        }
        let sock =
            Target::UnixSocket(b"/Users/ada/Library/Application Support/relay/relay.sock".to_vec());
        assert!(!p.allows("network-outbound", &sock).unwrap());

        let p = golden("read_write_file.sbpl");
        for (op, path, want) in [
            ("file-write-data", "/Users/ada/.claude.json", true),
            ("file-write-create", "/Users/ada/.claude.json.lock", true),
            (
                "file-write-create",
                "/Users/ada/.claude.json.tmp.4242.1700000000",
                true,
            ),
            ("file-write-create", "/Users/ada/.claude.json.backup", true),
            ("file-write-create", "/Users/ada/.claude.jsonx", false),
            (
                "file-write-create",
                "/Users/ada/.claude.json.tmp.1/x",
                false,
            ),
            ("file-write-data", "/Users/ada/.gitconfig", false),
            ("file-write-create", "/Users/ada/.gitconfig.lock", false),
        ] {
            assert_eq!(allows(&p, op, path), want, "{op} {path}");
        }
    }

    #[test]
    fn unmodelled_or_malformed_profiles_are_refused() {
        for (body, reason) in [
            ("(import \"system.sb\")", "not modelled"),
            ("(allow file-read* (vnode-type SOCKET))", "not modelled"),
            ("(allow file-wirte*)", "unknown operation"),
            ("(allow (literal \"/a\"))", "no operation"),
            ("(allow file-read* (literal \"/a\" \"/b\"))", "one string"),
            ("(allow file-read* (literal \"/a\\q\"))", "unknown escape"),
            ("(allow file-read* (require-not))", "one filter"),
            (
                "(allow network-outbound (remote ip \"10.0.0.1:80\"))",
                "host",
            ),
            ("(allow file-read* (regex #\"(\"))", "regex"),
            ("(allow file-read*", "never closed"),
        ] {
            let e = Profile::parse(format!("(version 1)\n{body}").as_bytes()).unwrap_err();
            assert!(e.reason.contains(reason), "{body}: {e}");
            assert_eq!(e.line, 2, "{body}: {e}");
        }
        assert!(Profile::parse(b"(version 2)\n(allow default)").is_err());
        assert!(Profile::parse(b"(allow default)").is_err());
        let p = profile("(allow default)");
        assert!(p.decide("file-read*", &Target::path("/a")).is_err());
        assert!(p.decide("default", &Target::path("/a")).is_err());
    }
}
