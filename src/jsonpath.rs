//! Where a key path points in a JSON document, as a person finds it: the line and column
//! of the value (`settings.json`'s errors name the place, docs/settings.md#how-it-is-read).
//! serde reads the document into values and forgets where each came from; this walks
//! the text again, once, for the one path an error names.

use std::fmt;

/// One step of a key path: an object's key or a list's index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// A key path, shown as `projects[0].allowed_templates`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyPath(pub Vec<Seg>);

impl KeyPath {
    pub fn key(mut self, k: &str) -> KeyPath {
        self.0.push(Seg::Key(k.into()));
        self
    }

    pub fn index(mut self, i: usize) -> KeyPath {
        self.0.push(Seg::Index(i));
        self
    }

    /// The last key in the path (`allowed_templates` in `projects[0].allowed_templates`,
    /// `args` in `terminal_templates[1].args[2]`).
    pub fn last_key(&self) -> Option<&str> {
        self.0.iter().rev().find_map(|s| match s {
            Seg::Key(k) => Some(k.as_str()),
            Seg::Index(_) => None,
        })
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            match s {
                Seg::Key(k) if i == 0 => write!(f, "{k}")?,
                Seg::Key(k) => write!(f, ".{k}")?,
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// The line and column (both from 1, the column in characters) of the value at `path`
/// in `text`, or of the deepest part of the path the text has (a missing key points at
/// its object). `None` when `text` is not a JSON document.
pub fn locate(text: &[u8], path: &KeyPath) -> Option<(usize, usize)> {
    let mut s = Scan { b: text, i: 0 };
    s.ws();
    let mut at = s.i;
    for seg in &path.0 {
        match s.step(seg) {
            Some(p) => {
                at = p;
                s.i = p;
            }
            None => break,
        }
    }
    (at <= text.len()).then(|| line_col(text, at))
}

/// The line and column of byte `at`.
pub fn line_col(text: &[u8], at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
    let start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    let col = 1 + String::from_utf8_lossy(&before[start..]).chars().count();
    (line, col)
}

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scan<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// Past a string whose opening quote is at `i`.
    fn string(&mut self) -> Option<()> {
        self.i += 1;
        loop {
            match self.peek()? {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    return Some(());
                }
                _ => self.i += 1,
            }
        }
    }

    /// Past one value of any kind.
    fn value(&mut self) -> Option<()> {
        self.ws();
        match self.peek()? {
            b'"' => self.string(),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
            }
            _ => {
                while !matches!(
                    self.peek(),
                    None | Some(b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r')
                ) {
                    self.i += 1;
                }
                Some(())
            }
        }
    }

    /// From the value at `i`, where `seg` of it starts (the last of a key given twice,
    /// as serde keeps).
    fn step(&mut self, seg: &Seg) -> Option<usize> {
        match seg {
            Seg::Key(want) => {
                self.eat(b'{')?;
                let mut found = None;
                loop {
                    self.ws();
                    if self.peek()? == b'}' {
                        return found;
                    }
                    let start = self.i;
                    self.string()?;
                    let key: String = serde_json::from_slice(&self.b[start..self.i]).ok()?;
                    self.eat(b':')?;
                    self.ws();
                    if key == *want {
                        found = Some(self.i);
                    }
                    self.value()?;
                    if self.eat(b',').is_none() {
                        return found;
                    }
                }
            }
            Seg::Index(n) => {
                self.eat(b'[')?;
                for _ in 0..*n {
                    self.value()?;
                    self.eat(b',')?;
                }
                self.ws();
                (self.peek()? != b']').then_some(self.i)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"{
  "projects": [
    {"id": "a", "path": "~"},
    { "id": "b",
      "allowed_templates": "*" }
  ],
  "api": {"listen": "x", "listen": "y"},
  "n\u00e9": {"k": [1, [2, {"z": "]"}], 3]}
}"#;

    fn at(path: KeyPath) -> Option<(usize, usize)> {
        locate(DOC.as_bytes(), &path)
    }

    #[test]
    fn a_path_points_at_its_value() {
        let p = KeyPath::default().key("projects");
        assert_eq!(at(p.clone()), Some((2, 15)));
        assert_eq!(at(p.clone().index(0)), Some((3, 5)));
        assert_eq!(
            at(p.clone().index(1).key("allowed_templates")),
            Some((5, 28))
        );
        // A key given twice: the last, which is the one serde keeps.
        assert_eq!(
            at(KeyPath::default().key("api").key("listen")),
            Some((7, 36))
        );
        // An escaped key, brackets inside strings and nested lists skipped.
        assert_eq!(
            at(KeyPath::default().key("né").key("k").index(2)),
            Some((8, 41))
        );
    }

    #[test]
    fn a_missing_part_points_at_what_holds_it() {
        let p = KeyPath::default().key("projects").index(0);
        assert_eq!(at(p.clone().key("command")), Some((3, 5)));
        assert_eq!(
            at(KeyPath::default().key("projects").index(7)),
            Some((2, 15))
        );
        assert_eq!(at(KeyPath::default().key("nothing")), Some((1, 1)));
    }

    #[test]
    fn paths_read_as_people_write_them() {
        let p = KeyPath::default()
            .key("terminal_templates")
            .index(2)
            .key("args")
            .index(0);
        assert_eq!(p.to_string(), "terminal_templates[2].args[0]");
        assert_eq!(p.last_key(), Some("args"));
        assert_eq!(line_col(b"ab\ncd", 4), (2, 2));
    }
}
