//! The Seatbelt (SBPL) renderer for macOS `sandbox-exec -f <profile>`.
//!
//! In SBPL the last matching rule wins, so the order of the sections below is the
//! mechanism, not a style: everything is allowed, then files are denied, then the
//! baseline and the grants re-open what the session needs, and the denies come after
//! every grant so nothing a template grants can re-open them.
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
    depth, effective_read_only, merged_grants, proper_ancestors, Access, MergedGrant, Network,
    PathKind, ResolvedPath, Spec,
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

/// Renders the profile for no particular Mac ([`HostPaths::default`]).
pub fn render_sbpl(spec: &Spec) -> String {
    render_sbpl_on(spec, &HostPaths::default())
}

/// Renders the profile, one rule per line, each section introduced by a `;` comment.
pub fn render_sbpl_on(spec: &Spec, host: &HostPaths) -> String {
    let mut p = Profile::default();

    p.rule("(version 1)");
    p.section("everything but files is allowed; files are deny-by-default");
    p.rule("(allow default)");
    p.rule("(deny file-read* file-write*)");

    baseline(&mut p);
    host_paths(&mut p, host);

    p.section("/dev read-write, so /dev/fd/5 (the token pipe) and ttys open");
    p.rule(format!(
        "(allow file-read* file-write* (subpath {}))",
        sbpl_string("/dev")
    ));

    grants(&mut p, spec);
    denies(&mut p, spec);
    network(&mut p, spec);

    p.section("no setuid or setgid executables");
    p.rule("(deny process-exec* (file-mode #o4000))");
    p.rule("(deny process-exec* (file-mode #o2000))");

    p.text
}

/// The system reads every process needs, Homebrew's service files closed again but for
/// the few a tool reads.
fn baseline(p: &mut Profile) {
    p.section("baseline system reads");
    for dir in BASELINE_READS {
        p.rule(format!("(allow file-read* (subpath {}))", sbpl_string(dir)));
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
            "(deny file-read* file-write* (subpath {}))",
            sbpl_string(dir)
        ));
    }
    for file in BASELINE_REOPENED {
        p.rule(format!(
            "(allow file-read* (literal {}))",
            sbpl_string(file)
        ));
    }
}

/// What this Mac adds ([`HostPaths`]): the developer tools, the per-user temp folder.
fn host_paths(p: &mut Profile, host: &HostPaths) {
    if let Some(dir) = &host.developer_dir {
        p.section("the developer tools xcode-select points at, so git and clang run");
        p.rule(format!("(allow file-read* (subpath {}))", sbpl_string(dir)));
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
        p.for_spellings(&grant.path, "allow file-read*");
    }

    p.section("read-write grants (a file with the .lock and temp siblings atomic writers use)");
    for grant in spec.grants.iter().filter(|g| g.access == Access::ReadWrite) {
        p.for_spellings(&grant.path, "allow file-read* file-write*");
    }

    p.section("nested grants keep their own access: the deepest grant wins, as with bwrap");
    for (path, access) in nested_overrides(spec) {
        match access {
            Access::Read => p.for_spellings(path, "deny file-write*"),
            Access::ReadWrite => p.for_spellings(path, "allow file-read* file-write*"),
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
                "(deny file-read* file-write* file-clone file-link (literal {s}) (subpath {s}))"
            ));
        }
    }

    let read_only = effective_read_only(spec);
    if !read_only.is_empty() {
        p.section("pinned read-only: what a token launch runs (docs/THREAT-MODEL.md)");
        // file-link too: a hard link made elsewhere would be a second, writable name
        // for a pinned file (bwrap's read-only mount refuses it with EXDEV).
        for pinned in &read_only {
            p.for_spellings(pinned, "deny file-write* file-link");
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

/// The daemon's sockets closed, then the network as the template has it.
fn network(p: &mut Profile, spec: &Spec) {
    p.section("the daemon's sockets");
    for socket in &spec.deny_unix_sockets {
        p.rule(format!(
            "(deny network-outbound (remote unix-socket (path-literal {})))",
            sbpl_string(socket)
        ));
    }

    match &spec.network {
        // No proxy under Seatbelt yet: a proxied spec that reached here gets none.
        Network::Off | Network::Proxied { .. } => {
            p.section("network: off");
            p.rule("(deny network*)");
        }
        Network::Shared {
            denied_loopback_ports,
        } => {
            p.section("network: shared, minus denied loopback ports");
            for port in denied_loopback_ports {
                p.rule(format!(
                    "(deny network-outbound (remote ip \"localhost:{port}\"))"
                ));
            }
        }
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
        let allows: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].starts_with("(allow"))
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
        assert!(render_sbpl(&s).contains("(allow file-read* file-write* (subpath \"/a/new\"))\n"));
    }
}
