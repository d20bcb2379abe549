//! Reading `claude_token_file`
//! ([settings.md](../docs/settings.md#claude_token_file)): opened without following a link
//! and without blocking on a FIFO, checked to be one regular file with one link and at
//! most 4096 bytes, trimmed, refused when empty or when it holds an Anthropic API key
//! (relay hands Claude Code a `claude setup-token` token, nothing else; docs/THREAT-MODEL.md,
//! "Other sign-ins"). Every error names the path and the reason, never the bytes.

use std::fmt;
use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::protocol::Secret;

pub const TOKEN_MAX_BYTES: u64 = 4096;

/// How an Anthropic API key begins (`sk-ant-api03-…`).
const API_KEY_PREFIX: &str = "sk-ant-api";
/// How a `claude setup-token` token begins.
pub const SETUP_TOKEN_PREFIX: &str = "sk-ant-oat01-";

/// Whether `token` has the shape of a `claude setup-token` token: the prefix, then
/// base64url characters. Anything else is still handed over (Claude Code decides), but
/// `relay doctor` warns.
pub fn looks_like_setup_token(token: &str) -> bool {
    token.strip_prefix(SETUP_TOKEN_PREFIX).is_some_and(|rest| {
        !rest.is_empty()
            && rest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    })
}

/// What was read, plus the identity of the file, so a later check can notice a swap.
/// `Debug` shows only the length of the token.
#[derive(Debug)]
pub struct TokenFile {
    pub token: Secret,
    pub dev: u64,
    pub ino: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenError {
    pub path: PathBuf,
    pub reason: String,
}

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "claude_token_file {}: {}",
            self.path.display(),
            self.reason
        )
    }
}

impl std::error::Error for TokenError {}

/// How often a token file caught empty or changing is read again, and the pause
/// between two reads: a file saved in place (truncated, then written) is empty for a
/// moment, and a read must never hand a launch half a token (docs/settings.md).
const REREADS: u32 = 20;
const REREAD_PAUSE: std::time::Duration = std::time::Duration::from_millis(5);

pub fn read_token_file(path: &Path) -> Result<TokenFile, TokenError> {
    read_until_whole(|| read_once(path), REREAD_PAUSE)
}

/// Reads with `once` until it gives the whole token: a first read, then at most
/// [`REREADS`] more, `pause` apart; the last read's reason when none was whole.
fn read_until_whole(
    mut once: impl FnMut() -> Result<Once, TokenError>,
    pause: std::time::Duration,
) -> Result<TokenFile, TokenError> {
    let mut tries = 0;
    loop {
        match once()? {
            Once::Whole(token) => return Ok(token),
            Once::Again(e) if tries >= REREADS => return Err(e),
            // Empty, replaced or changed while it was read: someone is saving it now.
            Once::Again(_) => {
                tries += 1;
                std::thread::sleep(pause);
            }
        }
    }
}

/// One read: the whole token, or a reason to read again (reported when the rereads run
/// out).
enum Once {
    Whole(TokenFile),
    Again(TokenError),
}

/// One read; the file was left unchanged across it when [`unchanged`] says so.
fn read_once(path: &Path) -> Result<Once, TokenError> {
    let err = |reason: String| TokenError {
        path: path.to_path_buf(),
        reason,
    };
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| err(open_refusal(&e)))?;
    let meta = file
        .metadata()
        .map_err(|e| err(format!("cannot stat: {}", plain_io(&e))))?;
    if !meta.file_type().is_file() {
        return Err(err("is not a regular file".into()));
    }
    if meta.nlink() == 0 {
        // Renamed over between the open and the stat: the new file is there to read.
        return Ok(Once::Again(err("was replaced while it was read".into())));
    }
    if meta.nlink() != 1 {
        return Err(err(format!(
            "has {} hard links (a second name could escape the sandbox deny); keep exactly one",
            meta.nlink()
        )));
    }
    if meta.len() > TOKEN_MAX_BYTES {
        return Err(err(format!("is larger than {TOKEN_MAX_BYTES} bytes")));
    }
    let mut buf = Vec::with_capacity(meta.len() as usize);
    (&file)
        .take(TOKEN_MAX_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| err(format!("cannot read: {}", plain_io(&e))))?;
    if buf.len() as u64 > TOKEN_MAX_BYTES {
        return Err(err(format!("is larger than {TOKEN_MAX_BYTES} bytes")));
    }
    let text = std::str::from_utf8(&buf).map_err(|_| err("is not UTF-8 text".into()))?;
    let trimmed = text.trim_matches(|c: char| c.is_ascii_whitespace());
    if trimmed.is_empty() {
        return Ok(Once::Again(err("is empty".into())));
    }
    let after = file
        .metadata()
        .map_err(|e| err(format!("cannot stat: {}", plain_io(&e))))?;
    if !unchanged(buf.len() as u64, Stamp::of(&meta), Stamp::of(&after)) {
        return Ok(Once::Again(err("kept changing while it was read".into())));
    }
    if let Some(why) = not_one_token(trimmed) {
        return Err(err(why));
    }
    if trimmed.starts_with(API_KEY_PREFIX) {
        // An API key would bill a console account and bypass the subscription the
        // owner set up; relay takes only what `claude setup-token` prints.
        return Err(err(
            "holds an API key; relay takes a token from claude setup-token".into(),
        ));
    }
    Ok(Once::Whole(TokenFile {
        token: Secret::new(trimmed),
        dev: meta.dev(),
        ino: meta.ino(),
    }))
}

/// Why a file's trimmed text is not one token, when it is not: a token is one word on
/// one line. Two lines are most often the token pasted twice; the launch is refused
/// (fail closed), never handed a header Claude Code would send broken. Says how many
/// lines or that a space is inside, never what is there.
fn not_one_token(trimmed: &str) -> Option<String> {
    let lines = trimmed.lines().filter(|l| !l.trim().is_empty()).count();
    if lines > 1 {
        return Some(format!(
            "holds {lines} lines, and a token is one (pasted twice?): keep only the one line \
             `claude setup-token` printed"
        ));
    }
    if trimmed.contains(|c: char| c.is_whitespace() || c.is_control()) {
        return Some(
            "holds a space or a control character inside, and a token is one word: keep only \
             the line `claude setup-token` printed"
                .into(),
        );
    }
    None
}

impl TokenError {
    /// The next step for a token file that is missing or empty, for the launch that
    /// needed it: where the token comes from and how to put it there, readable by the
    /// owner alone. `None` for the other reasons, which say their own.
    pub fn next_step(&self) -> Option<String> {
        let missing = self.reason == "does not exist";
        if !(missing || self.reason == "is empty") {
            return None;
        }
        let path = self.path.display();
        let make = match (missing, self.path.parent()) {
            (true, Some(dir)) => format!(
                "mkdir -p {} && install -m 600 /dev/null {path}, then ",
                dir.display()
            ),
            _ => String::new(),
        };
        Some(format!(
            "run `claude setup-token` and save the one line it prints in that file, readable \
             by you alone: {make}paste it into {path}"
        ))
    }
}

/// Why the token file could not be opened, in the person's words.
fn open_refusal(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ELOOP) => "is a symlink (point the setting at the real file)".into(),
        Some(libc::ENOENT) => "does not exist".into(),
        Some(libc::EACCES) => "permission denied".into(),
        _ => format!("cannot open: {}", plain_io(e)),
    }
}

/// What tells a file changed under a read: its size, modification and change times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(m: &std::fs::Metadata) -> Stamp {
        Stamp {
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// The file was left unchanged across a read of `read` bytes: every byte of it was read
/// and it has the same stamp before and after.
fn unchanged(read: u64, before: Stamp, after: Stamp) -> bool {
    read == before.len && after == before
}

/// The token's fingerprint: the first 12 hex characters of its SHA-256. It tells which
/// token a session runs on (the ledger, lists, audit rows) without being the token.
pub fn fingerprint(token: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(token.as_bytes())
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An io::Error's reason without any payload (io errors never carry file content, but
/// keep the wording short and stable).
pub(crate) fn plain_io(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => std::io::Error::from_raw_os_error(code).to_string(),
        None => e.kind().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const TOKEN: &str = "acme-fake-token-0123456789abcdef0123456789abcdef";

    fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        p
    }

    fn reason(r: Result<TokenFile, TokenError>) -> String {
        let e = r.expect_err("refused");
        let text = e.to_string();
        assert!(!text.contains(TOKEN), "error holds the token: {text}");
        assert!(text.starts_with("claude_token_file /"), "{text}");
        e.reason
    }

    fn whole() -> Once {
        Once::Whole(TokenFile {
            token: Secret::new(TOKEN),
            dev: 1,
            ino: 2,
        })
    }

    fn again(n: u32) -> Once {
        Once::Again(TokenError {
            path: PathBuf::from("/t"),
            reason: format!("again {n}"),
        })
    }

    #[test]
    fn a_file_caught_mid_save_is_read_again_up_to_the_bound_and_then_refused() {
        // Threat: a launch handed nothing (or half a token) because the person saved the
        // file at that moment, or a reader that never gives up on a file always changing.
        for whole_at in [1, 2, REREADS + 1] {
            let mut reads = 0;
            let r = read_until_whole(
                || {
                    reads += 1;
                    Ok(if reads == whole_at {
                        whole()
                    } else {
                        again(reads)
                    })
                },
                std::time::Duration::ZERO,
            );
            assert_eq!(r.unwrap().token.expose(), TOKEN, "whole at read {whole_at}");
            assert_eq!(reads, whole_at);
        }
        let mut reads = 0;
        let e = read_until_whole(
            || {
                reads += 1;
                Ok(again(reads))
            },
            std::time::Duration::ZERO,
        )
        .expect_err("never whole");
        assert_eq!(reads, REREADS + 1);
        assert_eq!(e.reason, format!("again {}", REREADS + 1));
        // A refusal is not read again.
        let mut reads = 0;
        let e = read_until_whole(
            || {
                reads += 1;
                Err(TokenError {
                    path: PathBuf::from("/t"),
                    reason: "refused".into(),
                })
            },
            std::time::Duration::ZERO,
        )
        .expect_err("refused");
        assert_eq!((reads, e.reason.as_str()), (1, "refused"));
    }

    #[test]
    fn each_open_failure_is_said_in_words() {
        let said = |errno| open_refusal(&std::io::Error::from_raw_os_error(errno));
        assert_eq!(
            said(libc::ELOOP),
            "is a symlink (point the setting at the real file)"
        );
        assert_eq!(said(libc::ENOENT), "does not exist");
        // Root opens a mode-0000 file all the same: the words are checked here.
        assert_eq!(said(libc::EACCES), "permission denied");
        assert_eq!(
            said(libc::EIO),
            format!(
                "cannot open: {}",
                std::io::Error::from_raw_os_error(libc::EIO)
            )
        );
    }

    #[test]
    fn a_read_counts_as_unchanged_only_when_every_byte_and_every_stamp_agree() {
        let s = Stamp {
            len: 10,
            mtime: (5, 6),
            ctime: (7, 8),
        };
        assert!(unchanged(10, s, s));
        assert!(!unchanged(9, s, s), "a short read");
        for after in [
            Stamp { len: 11, ..s },
            Stamp { mtime: (5, 7), ..s },
            Stamp { mtime: (4, 6), ..s },
            Stamp { ctime: (7, 9), ..s },
            Stamp { ctime: (6, 8), ..s },
        ] {
            assert!(!unchanged(10, s, after), "{after:?}");
            assert!(!unchanged(11, after, s), "{after:?}");
        }
    }

    #[test]
    fn reads_and_trims() {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), "t", &format!("{TOKEN}\n"));
        assert_eq!(read_token_file(&p).unwrap().token.expose(), TOKEN);
    }

    /// Threat: a token pasted twice handed over as one broken header (issue 40): the
    /// launch fails closed, and the refusal names the path and the line count, never
    /// the token or any encoding of it.
    #[test]
    fn a_token_pasted_twice_or_with_a_space_inside_is_refused_without_its_content() {
        let d = tempfile::tempdir().unwrap();
        // The token raw, JSON-escaped, percent-encoded, in base64 (both alphabets, each
        // alignment) and in hex.
        let mut encodings = crate::daemon::diagnostics::scan::needles(TOKEN.as_bytes());
        let hex: String = TOKEN.bytes().map(|b| format!("{b:02x}")).collect();
        encodings.push(("hex", hex.into_bytes()));
        for (body, want) in [
            (
                format!("{TOKEN}\n{TOKEN}\n"),
                "holds 2 lines, and a token is one (pasted twice?)",
            ),
            (format!("{TOKEN}\r\n\r\n{TOKEN}"), "holds 2 lines"),
            (
                format!("{TOKEN} {TOKEN}"),
                "holds a space or a control character inside",
            ),
        ] {
            let p = write(d.path(), "t", &body);
            let e = read_token_file(&p).expect_err("refused");
            let text = format!("{e}; {:?}", e.next_step());
            assert!(text.contains(want), "{text}");
            assert!(text.starts_with(&format!("claude_token_file {}: ", p.display())));
            for (form, enc) in &encodings {
                let enc = String::from_utf8_lossy(enc);
                assert!(!text.contains(enc.as_ref()), "{form}: {text}");
            }
        }
    }

    #[test]
    fn a_missing_or_empty_token_file_gets_where_the_token_comes_from_and_how_to_save_it() {
        let d = tempfile::tempdir().unwrap();
        let missing = d.path().join("acme/token");
        let e = read_token_file(&missing).expect_err("refused");
        assert_eq!(
            e.next_step().unwrap(),
            format!(
                "run `claude setup-token` and save the one line it prints in that file, \
                 readable by you alone: mkdir -p {0}/acme && install -m 600 /dev/null \
                 {0}/acme/token, then paste it into {0}/acme/token",
                d.path().display()
            )
        );
        let empty = write(d.path(), "empty", "\n");
        let e = read_token_file(&empty).expect_err("refused");
        assert_eq!(e.reason, "is empty");
        assert_eq!(
            e.next_step().unwrap(),
            format!(
                "run `claude setup-token` and save the one line it prints in that file, \
                 readable by you alone: paste it into {}",
                empty.display()
            )
        );
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&empty, &link).unwrap();
        assert_eq!(
            read_token_file(&link).expect_err("a link").next_step(),
            None
        );
    }

    #[test]
    fn the_fingerprint_is_twelve_hex_of_the_sha256() {
        // sha256("abc") = ba7816bf8f01cfea414140de5dae2223…
        assert_eq!(fingerprint("abc"), "ba7816bf8f01");
        assert_eq!(fingerprint(TOKEN).len(), 12);
        assert!(!TOKEN.contains(&fingerprint(TOKEN)));
    }

    #[test]
    fn a_file_of_exactly_the_cap_is_read_whole() {
        let d = tempfile::tempdir().unwrap();
        let full = "t".repeat(TOKEN_MAX_BYTES as usize);
        let p = write(d.path(), "full", &full);
        assert_eq!(read_token_file(&p).unwrap().token.expose(), full);
    }

    #[test]
    fn refusals_name_the_path_never_the_content() {
        let d = tempfile::tempdir().unwrap();
        assert!(reason(read_token_file(&d.path().join("missing"))).contains("does not exist"));
        let p = write(d.path(), "empty", " \n\t");
        assert!(reason(read_token_file(&p)).contains("empty"));
        let p = write(d.path(), "big", &"x".repeat(4097));
        assert!(reason(read_token_file(&p)).contains("larger"));
        let real = write(d.path(), "real", TOKEN);
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(reason(read_token_file(&link)).contains("symlink"));
        std::fs::hard_link(&real, d.path().join("second")).unwrap();
        assert!(reason(read_token_file(&real)).contains("hard links"));
        assert!(reason(read_token_file(d.path())).contains("regular file"));
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(reason(read_token_file(&fifo)).contains("regular file"));
    }

    #[test]
    fn an_api_key_is_refused_with_the_path_and_never_the_key() {
        let d = tempfile::tempdir().unwrap();
        let key = "sk-ant-api03-AbCdEf0123456789_-xyz";
        let p = write(d.path(), "key", &format!("  {key}\n"));
        let e = read_token_file(&p).expect_err("an API key is refused");
        assert_eq!(
            e.to_string(),
            format!(
                "claude_token_file {}: holds an API key; relay takes a token from claude setup-token",
                p.display()
            )
        );
        assert!(!e.to_string().contains("AbCdEf"), "{e}");
        // Anything else is handed over; only its shape is judged (by `relay doctor`).
        for other in [TOKEN, "sk-ant-oat01-AbC_d-9", "sk-ant-ort01-x", "sk-ant-ap"] {
            let p = write(d.path(), "other", other);
            assert_eq!(read_token_file(&p).unwrap().token.expose(), other);
        }
    }

    #[test]
    fn only_a_setup_token_has_the_setup_token_shape() {
        assert!(looks_like_setup_token("sk-ant-oat01-AbC_d-9"));
        for other in [
            TOKEN,
            "sk-ant-oat01-",
            "sk-ant-oat01-abc def",
            "sk-ant-oat01-abc=",
            "sk-ant-ort01-abc",
            "sk-ant-api03-abc",
            "SK-ANT-OAT01-abc",
        ] {
            assert!(!looks_like_setup_token(other), "{other}");
        }
    }
}
