//! git's configuration syntax, read as git reads it (`config.c` of git 2.47: sections,
//! `[section "sub"]` and the older `[section.sub]`, an entry on a header's line, quoted
//! values, escapes, continuation lines, comments, a UTF-8 byte order mark, CRLF), and a
//! file of a repository a session made or changed cut down to its inert entries
//! ([`super::allow`]). Pure: bytes in, bytes out.
//!
//! What is kept is written anew from what was read (a header per section, each value
//! quoted and escaped), never copied as text: where this reading and git's could differ,
//! only an entry the allowlist admits, with the value read here, can reach git. A file
//! that does not read as git's syntax is set aside whole.

use std::collections::BTreeSet;

/// One entry: `section.sub.name`, section and name in lower case as git folds them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub section: Vec<u8>,
    pub sub: Option<Vec<u8>>,
    pub name: Vec<u8>,
    /// `None`: a name alone, which git reads as `true`.
    pub value: Option<Vec<u8>>,
}

impl Entry {
    /// The key for a person to read, the subsection as `*`: `filter.*.clean`.
    pub fn shown(&self) -> String {
        let section = String::from_utf8_lossy(&self.section);
        let name = String::from_utf8_lossy(&self.name);
        match self.sub {
            Some(_) => format!("{section}.*.{name}"),
            None => format!("{section}.{name}"),
        }
    }
}

/// What becomes of one configuration file.
#[derive(Debug, PartialEq, Eq)]
pub enum Cut {
    /// Every entry is inert: the file stays as it is.
    Inert,
    /// Some entries were not: `kept` is the new file, `moved` their keys ([`Entry::shown`]).
    Trimmed {
        kept: Vec<u8>,
        moved: BTreeSet<String>,
    },
    /// Not git's syntax: the file goes whole, `kept` takes its place.
    Unreadable { kept: Vec<u8> },
}

/// Which file is cut: a repository's `config` keeps its format version when unreadable,
/// a `config.worktree` is left empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum File {
    Config,
    Worktree,
}

/// `text` cut down to the entries `keep` admits.
pub fn cut(text: &[u8], file: File, keep: impl Fn(&Entry) -> bool) -> Cut {
    let entries = match parse(text) {
        Ok(e) => e,
        Err(partial) => {
            return Cut::Unreadable {
                kept: unreadable_replacement(file, &partial),
            }
        }
    };
    let (kept, moved): (Vec<&Entry>, Vec<&Entry>) = entries.iter().partition(|e| keep(e));
    if moved.is_empty() {
        return Cut::Inert;
    }
    Cut::Trimmed {
        kept: render(kept),
        moved: moved.iter().map(|e| e.shown()).collect(),
    }
}

/// What stands in for a `config` that was no file at all (a link, a FIFO) or too large.
pub fn replacement(file: File) -> Vec<u8> {
    unreadable_replacement(file, &[])
}

/// What stands in for a file set aside whole: for `config`, the format version 0 and
/// `core.bare` as it was read before the syntax broke (git takes it from where the
/// repository is when absent).
fn unreadable_replacement(file: File, partial: &[Entry]) -> Vec<u8> {
    if file == File::Worktree {
        return Vec::new();
    }
    let mut out = b"[core]\n\trepositoryformatversion = 0\n".to_vec();
    let bare = partial
        .iter()
        .rev()
        .find(|e| e.section == b"core" && e.sub.is_none() && e.name == b"bare");
    if let Some(b) = bare.and_then(|e| boolean(e.value.as_deref())) {
        out.extend_from_slice(if b {
            b"\tbare = true\n"
        } else {
            b"\tbare = false\n"
        });
    }
    out
}

/// A git boolean: a name alone is true, an empty value false.
pub fn boolean(v: Option<&[u8]>) -> Option<bool> {
    let Some(v) = v else { return Some(true) };
    let lower = v.to_ascii_lowercase();
    match lower.as_slice() {
        b"true" | b"yes" | b"on" | b"1" => Some(true),
        b"false" | b"no" | b"off" | b"0" | b"" => Some(false),
        _ => None,
    }
}

/// The entries, in order, each under a header of its own section.
pub fn render<'a>(entries: impl IntoIterator<Item = &'a Entry>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut current: Option<(&[u8], Option<&[u8]>)> = None;
    for e in entries {
        let here = (e.section.as_slice(), e.sub.as_deref());
        if current != Some(here) {
            out.push(b'[');
            out.extend_from_slice(&e.section);
            if let Some(sub) = &e.sub {
                out.extend_from_slice(b" \"");
                for &c in sub {
                    if c == b'"' || c == b'\\' {
                        out.push(b'\\');
                    }
                    out.push(c);
                }
                out.push(b'"');
            }
            out.extend_from_slice(b"]\n");
            current = Some(here);
        }
        out.push(b'\t');
        out.extend_from_slice(&e.name);
        if let Some(v) = &e.value {
            out.extend_from_slice(b" = \"");
            for &c in v {
                match c {
                    b'\\' => out.extend_from_slice(b"\\\\"),
                    b'"' => out.extend_from_slice(b"\\\""),
                    b'\n' => out.extend_from_slice(b"\\n"),
                    b'\t' => out.extend_from_slice(b"\\t"),
                    8 => out.extend_from_slice(b"\\b"),
                    c => out.push(c),
                }
            }
            out.push(b'"');
        }
        out.push(b'\n');
    }
    out
}

/// git's `isspace`: space, tab, newline and carriage return only.
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

fn is_key_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

/// A reader over the bytes as git's `get_next_char` reads them: CRLF is one newline, and
/// past the end every read is a newline with `eof` set.
struct Reader<'a> {
    b: &'a [u8],
    i: usize,
    eof: bool,
}

impl Reader<'_> {
    fn next(&mut self) -> u8 {
        let Some(&c) = self.b.get(self.i) else {
            self.eof = true;
            return b'\n';
        };
        self.i += 1;
        if c == b'\r' && self.b.get(self.i) == Some(&b'\n') {
            self.i += 1;
            return b'\n';
        }
        c
    }
}

/// Every entry of `text`, or, where it is not git's syntax (or holds a NUL byte, which
/// git's C strings would cut short), the entries read before that point.
pub fn parse(text: &[u8]) -> Result<Vec<Entry>, Vec<Entry>> {
    let mut entries = Vec::new();
    if text.contains(&0) {
        return Err(entries);
    }
    let body = text.strip_prefix(b"\xef\xbb\xbf").unwrap_or(text);
    let mut r = Reader {
        b: body,
        i: 0,
        eof: false,
    };
    let mut section: Option<(Vec<u8>, Option<Vec<u8>>)> = None;
    let mut comment = false;
    loop {
        let c = r.next();
        if c == b'\n' {
            if r.eof {
                return Ok(entries);
            }
            comment = false;
            continue;
        }
        if comment || is_space(c) {
            continue;
        }
        if c == b'#' || c == b';' {
            comment = true;
            continue;
        }
        if c == b'[' {
            match header(&mut r) {
                Some(s) => section = Some(s),
                None => return Err(entries),
            }
            continue;
        }
        let (Some((sec, sub)), true) = (&section, c.is_ascii_alphabetic()) else {
            return Err(entries);
        };
        let Some((name, value)) = key_and_value(&mut r, c) else {
            return Err(entries);
        };
        entries.push(Entry {
            section: sec.clone(),
            sub: sub.clone(),
            name,
            value,
        });
    }
}

/// A section header after its `[`: the section (lower case) and the subsection.
fn header(r: &mut Reader) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    let mut name = Vec::new();
    loop {
        let c = r.next();
        if r.eof {
            return None;
        }
        if c == b']' {
            break;
        }
        if is_space(c) {
            if name.is_empty() || name.contains(&b'.') {
                return None;
            }
            return Some((name, Some(quoted_subsection(r)?)));
        }
        if !is_key_char(c) && c != b'.' {
            return None;
        }
        name.push(c.to_ascii_lowercase());
    }
    // `[section.sub]`, git's older form: the whole of it folded, split at the first dot.
    match name.iter().position(|&c| c == b'.') {
        _ if name.is_empty() => None,
        None => Some((name, None)),
        Some(dot) if dot == 0 || dot + 1 == name.len() => None,
        Some(dot) => Some((name[..dot].to_vec(), Some(name[dot + 1..].to_vec()))),
    }
}

/// `"sub"]` after the section's name and its spaces, on one line.
fn quoted_subsection(r: &mut Reader) -> Option<Vec<u8>> {
    let mut c = r.next();
    while is_space(c) {
        if c == b'\n' {
            return None;
        }
        c = r.next();
    }
    if c != b'"' {
        return None;
    }
    let mut sub = Vec::new();
    loop {
        let mut c = r.next();
        if c == b'\n' {
            return None;
        }
        if c == b'"' {
            break;
        }
        if c == b'\\' {
            c = r.next();
            if c == b'\n' {
                return None;
            }
        }
        sub.push(c);
    }
    (r.next() == b']').then_some(sub)
}

/// An entry's name (its first letter `first` already read) and its value.
fn key_and_value(r: &mut Reader, first: u8) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    let mut name = vec![first.to_ascii_lowercase()];
    let mut c;
    loop {
        c = r.next();
        if r.eof || !is_key_char(c) {
            break;
        }
        name.push(c.to_ascii_lowercase());
    }
    while c == b' ' || c == b'\t' {
        c = r.next();
    }
    if c == b'\n' {
        return Some((name, None));
    }
    if c != b'=' {
        return None;
    }
    Some((name, Some(value(r)?)))
}

/// A value after its `=`, to the end of its (continued) line, as git's `parse_value`.
fn value(r: &mut Reader) -> Option<Vec<u8>> {
    let mut v = Vec::new();
    let (mut quote, mut comment) = (false, false);
    let mut trim: Option<usize> = None;
    loop {
        let mut c = r.next();
        if c == b'\n' {
            if quote {
                return None;
            }
            if let Some(t) = trim {
                v.truncate(t);
            }
            return Some(v);
        }
        if comment {
            continue;
        }
        if is_space(c) && !quote {
            trim.get_or_insert(v.len());
            if !v.is_empty() {
                v.push(c);
            }
            continue;
        }
        if !quote && (c == b';' || c == b'#') {
            comment = true;
            continue;
        }
        trim = None;
        if c == b'\\' {
            c = match r.next() {
                b'\n' => continue,
                b't' => b'\t',
                b'b' => 8,
                b'n' => b'\n',
                b'\\' => b'\\',
                b'"' => b'"',
                _ => return None,
            };
            v.push(c);
            continue;
        }
        if c == b'"' {
            quote = !quote;
            continue;
        }
        v.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(section: &str, sub: Option<&str>, name: &str, value: Option<&str>) -> Entry {
        Entry {
            section: section.into(),
            sub: sub.map(Into::into),
            name: name.into(),
            value: value.map(Into::into),
        }
    }

    #[test]
    fn every_form_of_gits_syntax_reads_as_git_reads_it() {
        let text = b"\xef\xbb\xbf# a comment\n\
            [core]\r\n\trepositoryformatversion = 0\n\tbare\n\
            [core] fsmonitor = touch x ; after\n\
            [remote \"or\\\"ig\\\\in\"]\n\turl = \"a b\"  # c\n\
            [Filter.X]\n\tClean = \"touch y\"; cat\n\
            [alias]\n\tst = !sh -c \\\n  'touch z'\n\
            [user]\n\tname =   Ada   Lovelace   \n\temail=a\\tb\\\\c\\\"\n";
        let got = parse(text).unwrap();
        assert_eq!(
            got,
            vec![
                e("core", None, "repositoryformatversion", Some("0")),
                e("core", None, "bare", None),
                e("core", None, "fsmonitor", Some("touch x")),
                e("remote", Some("or\"ig\\in"), "url", Some("a b")),
                e("filter", Some("x"), "clean", Some("touch y")),
                e("alias", None, "st", Some("!sh -c   'touch z'")),
                e("user", None, "name", Some("Ada   Lovelace")),
                e("user", None, "email", Some("a\tb\\c\"")),
            ]
        );
    }

    #[test]
    fn what_is_not_gits_syntax_is_unreadable_with_what_came_before() {
        for bad in [
            &b"[core]\n\tbare = true\n\tfsmonitor = \"unterminated\n"[..],
            b"[core]\n\tbare = true\n\tx = a\\qb\n",
            b"[core\n\tbare = true\n",
            b"[core \"sub\n\"]\n",
            b"[core \"sub\"x]\n",
            b"[]\n",
            b"[.x]\n",
            // git reads this one as `a.b.c`; here it is set aside whole, which is safe.
            b"[a.b \"c\"]\n",
            b"key = outside-a-section\n",
            b"[core]\n\t1st = no\n",
            b"[core]\n\tbare # no equals\n",
            b"[core]\n\tbare = true\n\tfsmonitor = a\0b\n",
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let partial = parse(b"[core]\n\tbare = true\n\tfsmonitor = \"x\n").unwrap_err();
        assert_eq!(partial, vec![e("core", None, "bare", Some("true"))]);
    }

    #[test]
    fn a_cut_keeps_what_is_admitted_rewritten_and_reads_back_the_same() {
        let text = b"[core]\n\tbare = false\n\tfsmonitor = touch x\n[remote \"o\\\"r\"]\n\
            \turl = \" \\tx#;\\n\\b\"\n\tuploadpack = evil\n[include]\n\tpath = ../x\n";
        let keep = |e: &Entry| {
            e.name != b"fsmonitor" && e.name != b"uploadpack" && e.section != b"include"
        };
        let Cut::Trimmed { kept, moved } = cut(text, File::Config, keep) else {
            panic!("not cut")
        };
        assert_eq!(
            moved.into_iter().collect::<Vec<_>>(),
            ["core.fsmonitor", "include.path", "remote.*.uploadpack"]
        );
        let back = parse(&kept).unwrap();
        assert_eq!(
            back,
            vec![
                e("core", None, "bare", Some("false")),
                e("remote", Some("o\"r"), "url", Some(" \tx#;\n\u{8}")),
            ]
        );
        assert_eq!(cut(&kept, File::Config, keep), Cut::Inert);
    }

    #[test]
    fn an_unreadable_file_is_replaced_by_its_format_version_and_bareness_alone() {
        let keep_all = |_: &Entry| true;
        assert_eq!(
            cut(
                b"[core]\n\tbare = yes\n\tfsmonitor = \"x\n",
                File::Config,
                keep_all
            ),
            Cut::Unreadable {
                kept: b"[core]\n\trepositoryformatversion = 0\n\tbare = true\n".to_vec()
            }
        );
        assert_eq!(
            cut(b"garbage", File::Config, keep_all),
            Cut::Unreadable {
                kept: b"[core]\n\trepositoryformatversion = 0\n".to_vec()
            }
        );
        assert_eq!(
            cut(b"garbage", File::Worktree, keep_all),
            Cut::Unreadable { kept: Vec::new() }
        );
    }

    proptest::proptest! {
        /// Whatever entries are rendered read back as themselves: a kept value reaches
        /// git as it was read here.
        #[test]
        fn rendered_entries_read_back_as_themselves(
            entries in proptest::collection::vec(
                (
                    "[a-z][a-z0-9-]{0,6}",
                    proptest::option::of(proptest::collection::vec(1u8..=255, 0..8)),
                    "[a-z][a-z0-9-]{0,6}",
                    proptest::option::of(proptest::collection::vec(1u8..=255, 0..12)),
                ),
                0..6,
            )
        ) {
            let entries: Vec<Entry> = entries
                .into_iter()
                .map(|(section, sub, name, value)| Entry {
                    section: section.into_bytes(),
                    sub: sub.map(|s| s.into_iter().filter(|&c| c != b'\n').collect()),
                    name: name.into_bytes(),
                    value,
                })
                .collect();
            let text = render(&entries);
            proptest::prop_assert_eq!(parse(&text), Ok(entries));
        }
    }
}
