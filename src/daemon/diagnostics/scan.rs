//! `relay audit scan`: looks through every file relay keeps — the config dir (audit and
//! event logs, settings, profiles, the host's session logs) and every session temp
//! folder `$TMPDIR/relay-<id>` (Claude's config and transcripts) — for the current
//! token in its usual encodings, and reports the file, the offset and the encoding,
//! never the value. The walk (`crate::tree::walk`) follows no link, opens no FIFO or
//! device, and is bounded in depth and entries; what it could not read is reported,
//! never passed over. A name that holds the token is reported with the token masked.

use std::ffi::CStr;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;

use crate::tree::{Kind, Limits, Place, Unread, Visitor};

/// One place the token was found (`wire::Finding`, its words `&'static str`).
pub type Finding = crate::wire::Finding<&'static str>;

/// A file the scan could not read (`wire::Skipped`, its words `&'static str`).
pub type Skipped = crate::wire::Skipped<&'static str>;

#[derive(Debug, Default, serde::Serialize)]
pub struct Report {
    pub files: u64,
    pub bytes: u64,
    pub findings: Vec<Finding>,
    /// What could not be read, with why (names masked as findings are), at most
    /// [`MAX_SKIPPED`].
    pub skipped: Vec<Skipped>,
    /// Places not read past the first [`MAX_SKIPPED`].
    pub skipped_more: u64,
}

impl Report {
    /// Whether everything was read: a scan that could not read something cannot say
    /// the token is nowhere.
    pub fn complete(&self) -> bool {
        self.skipped.is_empty() && self.skipped_more == 0
    }
}

/// Needles shorter than this are not searched for (a one-byte token would match
/// everywhere); a real token is far longer.
const MIN_NEEDLE: usize = 8;
const MASK: &str = "[token]";

/// The token as it would look written out in the forms a log or a transcript uses:
/// raw, JSON-escaped, URL-encoded (upper- and lower-case hex), and base64 (standard and
/// URL-safe) at each of the three byte alignments it can start at inside a longer
/// encoded text. Duplicates (a token with nothing to escape) are dropped.
pub fn needles(token: &[u8]) -> Vec<(&'static str, Vec<u8>)> {
    let mut out: Vec<(&'static str, Vec<u8>)> = Vec::new();
    let mut add = |name: &'static str, n: Vec<u8>| {
        if n.len() >= MIN_NEEDLE && !out.iter().any(|(_, m)| *m == n) {
            out.push((name, n));
        }
    };
    add("raw", token.to_vec());
    let text = String::from_utf8_lossy(token);
    if let Ok(j) = serde_json::to_string(&text) {
        add("json", j.as_bytes()[1..j.len() - 1].to_vec());
        add("json", j[1..j.len() - 1].replace('/', "\\/").into_bytes());
    }
    add("url", percent(token, true));
    add("url", percent(token, false));
    for (name, alphabet) in [("base64", STD), ("base64url", URL_SAFE)] {
        for align in 0..3 {
            add(name, base64_aligned(token, align, alphabet));
        }
    }
    out
}

const STD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL_SAFE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn percent(b: &[u8], upper: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len() * 3);
    for &c in b {
        if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') {
            out.push(c);
        } else if upper {
            out.extend(format!("%{c:02X}").bytes());
        } else {
            out.extend(format!("%{c:02x}").bytes());
        }
    }
    out
}

fn base64(b: &[u8], alphabet: &[u8; 64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len().div_ceil(3) * 4);
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &c)| n | (c as u32) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(alphabet[(n >> (18 - 6 * i) & 63) as usize]);
        }
    }
    out
}

/// The base64 characters that depend on the token's bytes only, when it starts `align`
/// bytes into a 3-byte group: whatever comes before and after, these characters appear.
fn base64_aligned(token: &[u8], align: usize, alphabet: &[u8; 64]) -> Vec<u8> {
    let mut padded = vec![0u8; align];
    padded.extend_from_slice(token);
    let enc = base64(&padded, alphabet);
    // Character i covers bits [6i, 6i + 6); the token's bits are [8a, 8(a + n)).
    let first = (8 * align).div_ceil(6);
    let end = (8 * (align + token.len())) / 6;
    if first >= end {
        return Vec::new();
    }
    enc[first..end.min(enc.len())].to_vec()
}

/// `path` as text with every needle in it masked, and the first needle found.
fn masked(path: &Path, needles: &[(&'static str, Vec<u8>)]) -> (String, Option<&'static str>) {
    let mut text = path.to_string_lossy().into_owned();
    let mut hit = None;
    for (name, n) in needles {
        let n = String::from_utf8_lossy(n);
        if text.contains(n.as_ref()) {
            text = text.replace(n.as_ref(), MASK);
            hit.get_or_insert(*name);
        }
    }
    (text, hit)
}

fn find_all<'a>(hay: &'a [u8], needle: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    let first = needle[0];
    (0..hay.len().saturating_sub(needle.len() - 1))
        .filter(move |&i| hay[i] == first && hay[i..i + needle.len()] == needle[..])
}

/// Scans one open regular file in chunks, keeping the longest needle's length less one
/// byte between chunks so a copy split across two reads is found once.
fn scan_reader(
    mut r: impl Read,
    needles: &[(&'static str, Vec<u8>)],
) -> std::io::Result<(u64, Vec<(u64, &'static str)>)> {
    let keep = needles.iter().map(|(_, n)| n.len()).max().unwrap_or(1) - 1;
    let mut buf: Vec<u8> = Vec::new();
    let mut base: u64 = 0; // file offset of buf[0]
    let mut carried = 0usize; // bytes at the front of buf already searched
    let mut total = 0u64;
    let mut hits = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match r.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        total += n as u64;
        buf.extend_from_slice(&chunk[..n]);
        for (name, needle) in needles {
            for at in find_all(&buf, needle) {
                // Found before when it lies wholly in the part searched last time.
                if at + needle.len() > carried {
                    hits.push((base + at as u64, *name));
                }
            }
        }
        let drop = buf.len().saturating_sub(keep);
        buf.drain(..drop);
        base += drop as u64;
        carried = buf.len();
    }
    hits.sort();
    Ok((total, hits))
}

/// Most bytes read of one file, and of one scan: a session can make a file of any size
/// (`truncate -s 100T`, holes read as zeros), and the scan must end. What lies past a
/// bound is listed as not read.
#[derive(Clone, Copy, Debug)]
pub struct ByteLimits {
    pub file: u64,
    pub scan: u64,
}

impl ByteLimits {
    /// 1 GiB a file (far above any transcript or log relay keeps), 16 GiB a scan.
    pub const SCAN: ByteLimits = ByteLimits {
        file: 1 << 30,
        scan: 16 << 30,
    };
}

/// Most places the report lists as not read; the rest are only counted
/// (`skipped_more`), so a tree of unreadable files cannot grow the answer without end.
pub const MAX_SKIPPED: usize = 1000;

/// Longest path shown whole; a deeper one is shown as its top, the level and its last
/// name.
const SHOWN_MAX: usize = 4096;

/// Scans the folder `root` (never through a link) with the bounded walk of
/// `crate::tree`, skipping the files with `skip`'s `(dev, ino)` (the token files themselves,
/// should it live there). What it could not read — a folder too deep, one past the
/// walk's entry count, an unreadable folder or file — is in `report.skipped`.
pub fn scan_tree(
    root: &Path,
    needles: &[(&'static str, Vec<u8>)],
    skip: &[(u64, u64)],
    report: &mut Report,
) {
    scan_tree_within(root, needles, skip, report, ByteLimits::SCAN);
}

/// [`scan_tree`] with the byte limits given.
fn scan_tree_within(
    root: &Path,
    needles: &[(&'static str, Vec<u8>)],
    skip: &[(u64, u64)],
    report: &mut Report,
    bytes: ByteLimits,
) {
    let root_text = root.to_string_lossy().into_owned();
    let (shown, in_name) = masked(root, needles);
    if let Some(enc) = in_name {
        report.findings.push(Finding {
            file: shown,
            offset: None,
            encoding: enc,
        });
    }
    let mut w = Walker {
        root: root_text.as_bytes(),
        needles,
        longest: needles.iter().map(|(_, n)| n.len()).max().unwrap_or(1),
        skip,
        report,
        bytes,
    };
    crate::tree::walk(root, Limits::SESSION, &mut w);
}

/// The scan's side of a walk over one root.
struct Walker<'a> {
    root: &'a [u8],
    needles: &'a [(&'static str, Vec<u8>)],
    longest: usize,
    skip: &'a [(u64, u64)],
    report: &'a mut Report,
    bytes: ByteLimits,
}

impl Walker<'_> {
    /// The needle whose copy ends in `name` (the entry of the folder `rel` below the
    /// root), looked for in the path's last bytes only (a copy wholly above `name` was
    /// found at the folder where it ends), so a long path costs no more than a short.
    fn in_name(&self, rel: &[u8], name: &[u8]) -> Option<&'static str> {
        let parts: [&[u8]; 4] = [
            self.root,
            b"/",
            rel,
            if rel.is_empty() { b"" } else { b"/" },
        ];
        let keep = self.longest.saturating_sub(1);
        let mut window: Vec<u8> = Vec::with_capacity(keep + name.len());
        let mut need = keep;
        for part in parts.iter().rev() {
            let take = need.min(part.len());
            window.splice(0..0, part[part.len() - take..].iter().copied());
            need -= take;
        }
        let before = window.len();
        window.extend_from_slice(name);
        self.needles.iter().find_map(|(enc, n)| {
            find_all(&window, n)
                .any(|at| at + n.len() > before)
                .then_some(*enc)
        })
    }

    /// The entry `name` of the folder `rel` (`depth` levels down itself) as the report
    /// shows it: the whole path with every copy of the token masked, or, past
    /// [`SHOWN_MAX`], the root, the level and the last name (masked whole when a copy
    /// reaches into it).
    fn shown(&self, rel: &[u8], name: &[u8], depth: usize) -> String {
        let text = |b: &[u8]| masked(Path::new(std::ffi::OsStr::from_bytes(b)), self.needles).0;
        if self.root.len() + rel.len() + name.len() + 2 <= SHOWN_MAX {
            let mut full: Vec<u8> = self.root.to_vec();
            for part in [rel, name] {
                if !part.is_empty() {
                    full.push(b'/');
                    full.extend_from_slice(part);
                }
            }
            return text(&full);
        }
        let last = match self.in_name(rel, name) {
            Some(_) => MASK.to_string(),
            None => text(name),
        };
        format!("{}/…/{last} ({depth} levels down)", text(self.root))
    }

    /// Lists the entry `name` of the folder `rel` as not read, or counts it once the
    /// list is full.
    fn skipped(&mut self, rel: &[u8], name: &[u8], depth: usize, why: &'static str) {
        if self.report.skipped.len() < MAX_SKIPPED {
            let file = self.shown(rel, name, depth);
            self.report.skipped.push(Skipped { file, why });
        } else {
            self.report.skipped_more += 1;
        }
    }
}

impl Visitor for Walker<'_> {
    fn entry(&mut self, dir: RawFd, name: &CStr, kind: Kind, at: Place<'_>) {
        let bytes = name.to_bytes();
        if let Some(encoding) = self.in_name(at.rel, bytes) {
            self.report.findings.push(Finding {
                file: self.shown(at.rel, bytes, at.depth + 1),
                offset: None,
                encoding,
            });
        }
        if kind != Kind::File {
            // Folders are walked; links, sockets, FIFOs, devices: nothing relay wrote.
            return;
        }
        // Opened as itself (a link swapped in is not followed, a FIFO does not block)
        // and read only when it is still a regular file.
        let file = openat(
            Some(dir),
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        // Safety: `fd` was just returned by openat(2) and is owned by nobody else.
        .map(|fd| std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) }));
        let meta = file.as_ref().ok().and_then(|f| f.metadata().ok());
        let (file, meta) = match (file, meta) {
            (Ok(f), Some(m)) if m.is_file() => (f, m),
            _ => return self.skipped(at.rel, bytes, at.depth + 1, "unreadable file"),
        };
        if self.skip.contains(&(meta.dev(), meta.ino())) {
            return;
        }
        if self.report.bytes >= self.bytes.scan {
            return self.skipped(at.rel, bytes, at.depth + 1, "past the scan's byte limit");
        }
        let limit = self.bytes.file.min(self.bytes.scan - self.report.bytes);
        match scan_reader(file.take(limit), self.needles) {
            Ok((read, hits)) => {
                self.report.files += 1;
                self.report.bytes += read;
                if read == limit && meta.len() > limit {
                    let why = if limit < self.bytes.file {
                        "read only in part: the scan's byte limit"
                    } else {
                        "read only in part: too large"
                    };
                    self.skipped(at.rel, bytes, at.depth + 1, why);
                }
                if hits.is_empty() {
                    return;
                }
                let shown = self.shown(at.rel, bytes, at.depth + 1);
                for (offset, encoding) in hits {
                    self.report.findings.push(Finding {
                        file: shown.clone(),
                        offset: Some(offset),
                        encoding,
                    });
                }
            }
            Err(_) => self.skipped(at.rel, bytes, at.depth + 1, "unreadable file"),
        }
    }

    fn unread(&mut self, at: Place<'_>, why: Unread) {
        let (rel, name) = match at.rel.iter().rposition(|&b| b == b'/') {
            Some(i) => (&at.rel[..i], &at.rel[i + 1..]),
            None => (&b""[..], at.rel),
        };
        self.skipped(
            rel,
            name,
            at.depth,
            match why {
                Unread::TooDeep => "too deep",
                Unread::TooMany => "too many entries",
                Unread::Unreadable(_) => "unreadable folder",
                Unread::Link => "a link, not followed",
                Unread::Moved => "moved while read",
            },
        );
    }
}

/// Every place relay keeps files: the config dir, and each `relay-<id>` folder in the
/// daemon's temp folder.
pub fn roots(config: &Path, tmp: &Path) -> Vec<PathBuf> {
    let mut out = vec![config.to_path_buf()];
    if let Ok(rd) = std::fs::read_dir(tmp) {
        let mut dirs: Vec<PathBuf> = rd
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_prefix("relay-"))
                    .is_some_and(crate::daemon::ids::is_relay_id)
            })
            .map(|e| e.path())
            .collect();
        dirs.sort();
        out.extend(dirs);
    }
    out
}

/// `POST /api/audit/scan`: every configured token (each read as a launch reads it,
/// and its secret part alone) looked for in every root. Refused with `409 no_token`
/// when there is no token to look for; the fingerprints of those looked for, joined
/// with `, `.
pub fn run(d: &crate::daemon::Daemon) -> Result<(Report, String), crate::daemon::error::ApiError> {
    use crate::daemon::error::ApiError;
    use crate::wire::Code;
    let settings = d
        .load_settings()
        .map_err(|e| ApiError::new(Code::SettingsInvalid, e.to_string()))?;
    let configured = crate::daemon::settings::configured_tokens(&settings, &d.home)
        .map_err(|e| ApiError::new(Code::NoToken, e))?;
    if configured.is_empty() {
        return Err(ApiError::new(
            Code::NoToken,
            "claude_token_file is not set: there is no token to look for",
        ));
    }
    let (mut all, mut fingerprints, mut skip, mut unread) = (vec![], vec![], vec![], None);
    for t in &configured {
        match crate::token::read_token_file(&t.path) {
            Ok(token) => {
                let text = token.token.expose();
                all.extend(needles(text.as_bytes()));
                if let Some(body) = crate::host::redact::secret_part(text) {
                    all.extend(needles(body.as_bytes()));
                }
                fingerprints.push(crate::token::fingerprint(text));
                skip.push((token.dev, token.ino));
            }
            Err(e) => unread = Some(e.to_string()),
        }
    }
    if fingerprints.is_empty() {
        return Err(ApiError::new(Code::NoToken, unread.unwrap_or_default()));
    }
    let mut needles: Vec<(&'static str, Vec<u8>)> = Vec::new();
    for n in all {
        if !needles.iter().any(|(_, m)| *m == n.1) {
            needles.push(n);
        }
    }
    let mut report = Report::default();
    for root in roots(&d.paths.config, &d.tmp_real) {
        scan_tree(&root, &needles, &skip, &mut report);
    }
    Ok((report, fingerprints.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &[u8] = b"sk-ant-oat01-Zx9/+q=?&\"token\\0123456789";

    fn std_b64(b: &[u8]) -> Vec<u8> {
        base64(b, STD)
    }

    #[test]
    fn base64_matches_the_known_answers() {
        assert_eq!(std_b64(b""), b"");
        assert_eq!(std_b64(b"f"), b"Zg");
        assert_eq!(std_b64(b"fo"), b"Zm8");
        assert_eq!(std_b64(b"foo"), b"Zm9v");
        assert_eq!(std_b64(b"foobar"), b"Zm9vYmFy");
    }

    #[test]
    fn the_token_is_found_in_each_encoding_at_every_offset_and_split() {
        let n = needles(TOKEN);
        let names: Vec<&str> = n.iter().map(|(k, _)| *k).collect();
        for want in ["raw", "json", "url", "base64", "base64url"] {
            assert!(names.contains(&want), "{want}: {names:?}");
        }
        let json = serde_json::to_string(&String::from_utf8_lossy(TOKEN)).unwrap();
        let mut texts: Vec<(&str, Vec<u8>)> = vec![
            ("raw", TOKEN.to_vec()),
            ("json", format!("{{\"t\":{json}}}").into_bytes()),
            ("url", percent(TOKEN, true)),
        ];
        for lead in 0..3 {
            let mut b = vec![b'x'; lead];
            b.extend_from_slice(TOKEN);
            b.extend_from_slice(b"tail");
            texts.push(("base64", std_b64(&b)));
        }
        for (want, body) in texts {
            for prefix in [0usize, 1, 70_000] {
                let mut file = vec![b'.'; prefix];
                file.extend_from_slice(&body);
                file.extend_from_slice(b"\nend");
                // Read a few bytes at a time too, so copies straddle reads.
                for step in [3usize, 64 * 1024] {
                    let r = Chunked {
                        data: &file,
                        at: 0,
                        step,
                    };
                    let (total, hits) = scan_reader(r, &n).unwrap();
                    assert_eq!(total, file.len() as u64);
                    assert!(
                        hits.iter().any(|(_, e)| *e == want),
                        "{want} at {prefix} by {step}: {hits:?}"
                    );
                    let mut seen = hits.clone();
                    seen.dedup();
                    assert_eq!(seen, hits, "a copy reported twice");
                    assert!(hits.iter().all(|(o, _)| *o >= prefix as u64));
                }
            }
        }
        let (_, hits) = scan_reader(&b"nothing to see here"[..], &n).unwrap();
        assert!(hits.is_empty());
    }

    #[test]
    fn the_offset_is_where_the_copy_starts() {
        let n = needles(b"acme-fake-token-0123456789abcdef");
        let mut file = b"0123456789".to_vec();
        file.extend_from_slice(b"acme-fake-token-0123456789abcdef");
        let (_, hits) = scan_reader(&file[..], &n).unwrap();
        assert_eq!(hits, vec![(10, "raw")]);
    }

    #[test]
    fn names_are_masked_and_links_fifos_are_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let token = b"acme-fake-token-0123456789abcdef";
        let n = needles(token);
        let outside = d.path().join("outside");
        std::fs::write(&outside, token).unwrap();
        let root = d.path().join("root");
        std::fs::create_dir(&root).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        nix::unistd::mkfifo(
            &root.join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        std::fs::write(root.join("acme-fake-token-0123456789abcdef.txt"), "x").unwrap();
        let mut r = Report::default();
        scan_tree(&root, &n, &[], &mut r);
        assert_eq!(r.findings.len(), 1, "{:?}", r.findings);
        assert!(
            r.findings[0].file.ends_with("[token].txt"),
            "{:?}",
            r.findings
        );
        assert_eq!(r.findings[0].offset, None);
        let shown = serde_json::to_string(&r).unwrap();
        assert!(!shown.contains("acme-fake-token"), "{shown}");
    }

    /// A scratch folder, on a tmpfs where there is one (ext4 is slow over thousands of
    /// nested folders), canonical.
    fn scratch() -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        let real = std::fs::canonicalize(d.path()).unwrap();
        (d, real)
    }

    #[test]
    fn a_file_past_the_byte_limits_is_read_in_part_and_listed() {
        let (_d, base) = scratch();
        let token = b"acme-fake-token-0123456789abcdef";
        let n = needles(token);
        // A sparse file far larger than it takes (a session's `truncate -s`), the token
        // in its first bytes: read up to the file's limit, and said so.
        let root = base.join("relay-t-000000000005");
        std::fs::create_dir(&root).unwrap();
        let big = std::fs::File::create(root.join("big")).unwrap();
        std::os::unix::fs::FileExt::write_at(&big, token, 0).unwrap();
        big.set_len(1 << 40).unwrap();
        let mut r = Report::default();
        let limits = ByteLimits {
            file: 4096,
            scan: 1 << 20,
        };
        scan_tree_within(&root, &n, &[], &mut r, limits);
        assert_eq!(r.bytes, 4096);
        assert_eq!(r.findings.len(), 1, "{:?}", r.findings);
        let why: Vec<&str> = r.skipped.iter().map(|s| s.why).collect();
        assert_eq!(why, ["read only in part: too large"], "{:?}", r.skipped);
        assert!(!r.complete());

        // Two small files and room for one: the other is listed, not read.
        let root = base.join("relay-t-000000000006");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("one"), token).unwrap();
        std::fs::write(root.join("two"), token).unwrap();
        let mut r = Report::default();
        let limits = ByteLimits {
            file: 4096,
            scan: token.len() as u64,
        };
        scan_tree_within(&root, &n, &[], &mut r, limits);
        assert_eq!(r.bytes, token.len() as u64);
        assert_eq!(r.findings.len(), 1, "{:?}", r.findings);
        let why: Vec<&str> = r.skipped.iter().map(|s| s.why).collect();
        assert_eq!(why, ["past the scan's byte limit"], "{:?}", r.skipped);
    }

    #[test]
    fn a_folder_too_deep_is_reported_not_passed_over() {
        let (_d, base) = scratch();
        let token = b"acme-fake-token-0123456789abcdef";
        let n = needles(token);
        let root = base.join("relay-t-000000000004");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("shallow.txt"), "nothing").unwrap();
        crate::tree::nest(&root.join("deep"), crate::tree::MAX_DEPTH + 5);
        let mut r = Report::default();
        scan_tree(&root, &n, &[], &mut r);
        assert_eq!(r.files, 1);
        assert!(r.findings.is_empty(), "{:?}", r.findings);
        assert!(!r.complete());
        assert_eq!(
            r.skipped,
            vec![Skipped {
                file: format!(
                    "{}/…/d ({} levels down)",
                    root.display(),
                    crate::tree::MAX_DEPTH + 1
                ),
                why: "too deep",
            }]
        );
        crate::tree::remove(&root, Limits::NONE).unwrap();
    }

    #[test]
    fn a_token_across_folder_names_is_found_once_where_it_ends() {
        let (_d, base) = scratch();
        let token = b"sk-ant-oat01-split/0123456789abcdef";
        let n = needles(token);
        let root = base.join("root");
        let inner = root.join("x-sk-ant-oat01-split/0123456789abcdef-y");
        std::fs::create_dir_all(&inner).unwrap();
        std::fs::write(inner.join("below"), "nothing").unwrap();
        let mut r = Report::default();
        scan_tree(&root, &n, &[], &mut r);
        assert_eq!(r.findings.len(), 1, "{:?}", r.findings);
        assert_eq!(
            r.findings[0].file,
            format!("{}/x-[token]-y", root.display())
        );
        assert_eq!(
            (r.findings[0].offset, r.findings[0].encoding),
            (None, "raw")
        );
        assert!(r.complete());
    }

    #[test]
    fn the_list_of_places_not_read_is_capped_and_the_rest_counted() {
        let n = needles(b"acme-fake-token-0123456789abcdef");
        let mut r = Report::default();
        let mut w = Walker {
            root: b"/r",
            needles: &n,
            longest: 32,
            skip: &[],
            report: &mut r,
            bytes: ByteLimits::SCAN,
        };
        for i in 0..MAX_SKIPPED + 7 {
            w.skipped(b"", format!("f{i}").as_bytes(), 1, "unreadable file");
        }
        assert_eq!(r.skipped.len(), MAX_SKIPPED);
        assert_eq!(r.skipped[0].file, "/r/f0");
        assert_eq!(r.skipped_more, 7);
        assert!(!r.complete());
    }

    struct Chunked<'a> {
        data: &'a [u8],
        at: usize,
        step: usize,
    }

    impl Read for Chunked<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }
}
