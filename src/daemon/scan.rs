//! `relay audit scan`: looks through every file relay keeps — the config dir (audit and
//! event logs, settings, profiles, the host's session logs) and every session temp
//! folder `$TMPDIR/relay-<id>` (Claude's config and transcripts) — for the current
//! token in its usual encodings, and reports the file, the offset and the encoding,
//! never the value. The walk follows no link and opens no FIFO or device; a name that
//! holds the token is reported with the token masked.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// One place the token was found (`wire::Finding`, its words `&'static str`).
pub type Finding = crate::wire::Finding<&'static str>;

/// A file the scan could not read (`wire::Skipped`, its words `&'static str`).
pub type Skipped = crate::wire::Skipped<&'static str>;

#[derive(Debug, Default, serde::Serialize)]
pub struct Report {
    pub files: u64,
    pub bytes: u64,
    pub findings: Vec<Finding>,
    /// Files that could not be read, with why (names masked as findings are).
    pub skipped: Vec<Skipped>,
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

/// Scans `root` (a file or a folder, never through a link), skipping the file with
/// `skip`'s `(dev, ino)` (the token file itself, should it live there).
pub fn scan_tree(
    root: &Path,
    needles: &[(&'static str, Vec<u8>)],
    skip: Option<(u64, u64)>,
    report: &mut Report,
) {
    let mut stack: Vec<(PathBuf, usize)> = vec![(root.to_path_buf(), 0)];
    while let Some((path, depth)) = stack.pop() {
        let (shown, in_name) = masked(&path, needles);
        if let Some(enc) = in_name {
            report.findings.push(Finding {
                file: shown.clone(),
                offset: None,
                encoding: enc,
            });
        }
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if skip == Some((meta.dev(), meta.ino())) {
            continue;
        }
        let t = meta.file_type();
        if t.is_dir() {
            if depth > 64 {
                continue;
            }
            let Ok(rd) = std::fs::read_dir(&path) else {
                report.skipped.push(Skipped {
                    file: shown,
                    why: "unreadable folder",
                });
                continue;
            };
            let mut children: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
            children.sort();
            for c in children.into_iter().rev() {
                stack.push((c, depth + 1));
            }
            continue;
        }
        if !t.is_file() {
            // Links, sockets, FIFOs, devices: nothing relay wrote.
            continue;
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&path);
        let file = match file {
            Ok(f)
                if f.metadata()
                    .is_ok_and(|m| m.is_file() && m.ino() == meta.ino()) =>
            {
                f
            }
            _ => {
                report.skipped.push(Skipped {
                    file: shown,
                    why: "unreadable file",
                });
                continue;
            }
        };
        match scan_reader(file, needles) {
            Ok((bytes, hits)) => {
                report.files += 1;
                report.bytes += bytes;
                for (offset, encoding) in hits {
                    report.findings.push(Finding {
                        file: shown.clone(),
                        offset: Some(offset),
                        encoding,
                    });
                }
            }
            Err(_) => report.skipped.push(Skipped {
                file: shown,
                why: "unreadable file",
            }),
        }
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
                    .is_some_and(super::purge::is_relay_id)
            })
            .map(|e| e.path())
            .collect();
        dirs.sort();
        out.extend(dirs);
    }
    out
}

/// `POST /api/audit/scan`: the current token (read as a launch reads it) looked for in
/// every root. Refused with `409 no_token` when there is no token to look for.
pub fn run(d: &super::Daemon) -> Result<(Report, String), super::error::ApiError> {
    use super::error::{ApiError, Code};
    let settings = d
        .load_settings()
        .map_err(|e| ApiError::new(Code::SettingsInvalid, e.to_string()))?;
    let path = super::settings::token_file_path(&settings.claude_token_file, &d.home)
        .map_err(|e| ApiError::new(Code::NoToken, e))?
        .ok_or_else(|| {
            ApiError::new(
                Code::NoToken,
                "claude_token_file is not set: there is no token to look for",
            )
        })?;
    let token = crate::token::read_token_file(&path)
        .map_err(|e| ApiError::new(Code::NoToken, e.to_string()))?;
    let needles = needles(token.token.expose().as_bytes());
    let fingerprint = crate::token::fingerprint(token.token.expose());
    let skip = Some((token.dev, token.ino));
    drop(token);
    let mut report = Report::default();
    for root in roots(&d.paths.config, &d.tmp_real) {
        scan_tree(&root, &needles, skip, &mut report);
    }
    Ok((report, fingerprint))
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
        scan_tree(&root, &n, None, &mut r);
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
