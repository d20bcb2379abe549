//! A very small JSON reader and writer for the two flat shapes the shim speaks: the
//! status events it writes and the Hello answer it reads.
//!
//! Only a flat object whose values are strings, integers or `null` is accepted. Nested
//! values, booleans, fractions, exponents and duplicate keys are refused: the shim fails
//! closed on anything it was not built to understand, and a duplicate key would let two
//! readers of one answer disagree about what it says.

/// One value of a flat object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Str(String),
    Int(i64),
    Null,
}

/// Parses `text` (surrounding whitespace allowed) as one flat JSON object and returns its
/// members in the order they appear. `None` for anything else.
pub(crate) fn parse_flat_object(text: &str) -> Option<Vec<(String, Value)>> {
    let mut p = Parser {
        bytes: text.as_bytes(),
        pos: 0,
    };
    p.skip_ws();
    p.expect(b'{')?;
    let mut members: Vec<(String, Value)> = Vec::new();
    p.skip_ws();
    if p.peek() == Some(b'}') {
        p.pos += 1;
    } else {
        loop {
            p.skip_ws();
            let key = p.string()?;
            if members.iter().any(|(k, _)| *k == key) {
                return None;
            }
            p.skip_ws();
            p.expect(b':')?;
            p.skip_ws();
            let value = p.value()?;
            members.push((key, value));
            p.skip_ws();
            match p.next()? {
                b',' => continue,
                b'}' => break,
                _ => return None,
            }
        }
    }
    p.skip_ws();
    if p.pos != p.bytes.len() {
        return None;
    }
    Some(members)
}

/// `s` as a JSON string literal, quotes included.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.pos += 1;
        Some(b)
    }

    fn expect(&mut self, want: u8) -> Option<()> {
        (self.next()? == want).then_some(())
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn value(&mut self) -> Option<Value> {
        match self.peek()? {
            b'"' => self.string().map(Value::Str),
            b'-' | b'0'..=b'9' => self.integer().map(Value::Int),
            b'n' => {
                let rest = self.bytes.get(self.pos..self.pos + 4)?;
                if rest != b"null" {
                    return None;
                }
                self.pos += 4;
                Some(Value::Null)
            }
            _ => None,
        }
    }

    /// An integer in JSON's spelling: no leading zeros, no `+`, no fraction or exponent.
    fn integer(&mut self) -> Option<i64> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        let digits_start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        let digits = &self.bytes[digits_start..self.pos];
        if digits.is_empty() || (digits.len() > 1 && digits[0] == b'0') {
            return None;
        }
        if matches!(self.peek(), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        std::str::from_utf8(&self.bytes[start..self.pos])
            .ok()?
            .parse()
            .ok()
    }

    fn string(&mut self) -> Option<String> {
        self.expect(b'"')?;
        let mut out: Vec<u8> = Vec::new();
        loop {
            match self.next()? {
                b'"' => break,
                b'\\' => {
                    let c = match self.next()? {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => return None,
                    };
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                b if b < 0x20 => return None,
                b => out.push(b),
            }
        }
        String::from_utf8(out).ok()
    }

    /// The part after `\u`, including a surrogate pair's second half.
    fn unicode_escape(&mut self) -> Option<char> {
        let first = self.hex4()?;
        match first {
            0xD800..=0xDBFF => {
                self.expect(b'\\')?;
                self.expect(b'u')?;
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return None;
                }
                let code = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
                char::from_u32(code)
            }
            0xDC00..=0xDFFF => None,
            _ => char::from_u32(first),
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.bytes.get(self.pos..self.pos + 4)?;
        let text = std::str::from_utf8(digits).ok()?;
        if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        self.pos += 4;
        u32::from_str_radix(text, 16).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_flat_object_in_order() {
        let got = parse_flat_object(r#" {"type":"OK", "pid": 12, "x": null, "n":-3} "#);
        assert_eq!(
            got,
            Some(vec![
                ("type".into(), Value::Str("OK".into())),
                ("pid".into(), Value::Int(12)),
                ("x".into(), Value::Null),
                ("n".into(), Value::Int(-3)),
            ])
        );
        assert_eq!(parse_flat_object("{}"), Some(vec![]));
    }

    #[test]
    fn refuses_what_it_does_not_understand() {
        for text in [
            "",
            "{",
            "[]",
            r#"{"a":1,}"#,
            r#"{"a":1}x"#,
            r#"{"a":1}{"b":2}"#,
            r#"{"a":true}"#,
            r#"{"a":{"b":1}}"#,
            r#"{"a":[1]}"#,
            r#"{"a":1.5}"#,
            r#"{"a":1e3}"#,
            r#"{"a":01}"#,
            r#"{"a":+1}"#,
            r#"{"a":-}"#,
            r#"{"a":99999999999999999999}"#,
            r#"{"a":1,"a":2}"#,
            r#"{a:1}"#,
            r#"{"a":"x\q"}"#,
            r#"{"a":"\ud800"}"#,
            "{\"a\":\"tab\there\"}",
            r#"{"a":nul}"#,
        ] {
            assert_eq!(parse_flat_object(text), None, "{text:?}");
        }
    }

    #[test]
    fn string_escapes_round_trip() {
        let tricky = "a\"b\\c\nd\te\u{1}f\u{7f}é😀/";
        let line = format!("{{\"k\":{}}}", quote(tricky));
        assert_eq!(
            parse_flat_object(&line),
            Some(vec![("k".into(), Value::Str(tricky.into()))])
        );
        assert_eq!(
            parse_flat_object(r#"{"k":"\u00e9\ud83d\ude00\/"}"#),
            Some(vec![("k".into(), Value::Str("é😀/".into()))])
        );
    }
}

/// Property tests (docs/testing.md#fuzzing): `cargo test -p relay-shim --lib json::fuzz`.
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<String>().prop_map(Value::Str),
            any::<i64>().prop_map(Value::Int),
            Just(Value::Null),
        ]
    }

    fn render(v: &Value) -> String {
        match v {
            Value::Str(s) => quote(s),
            Value::Int(n) => n.to_string(),
            Value::Null => "null".into(),
        }
    }

    proptest! {
        /// Any text at all: an answer or a refusal, never a panic.
        #[test]
        fn any_text_is_parsed_or_refused(text in any::<String>()) {
            let _ = parse_flat_object(&text);
        }

        /// Any bytes the Hello answer could hold, read as the shim reads them.
        #[test]
        fn any_bytes_are_parsed_or_refused(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse_flat_object(&String::from_utf8_lossy(&bytes));
        }

        /// What the shim writes, it reads back exactly: every string, however odd.
        #[test]
        fn a_written_object_reads_back_member_for_member(
            members in proptest::collection::btree_map(any::<String>(), value(), 0..8),
            ws in "[ \t\r\n]{0,3}",
        ) {
            let body: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("{ws}{}{ws}:{ws}{}{ws}", quote(k), render(v)))
                .collect();
            let text = format!("{ws}{{{}}}{ws}", body.join(","));
            let parsed = parse_flat_object(&text).expect("its own output parses");
            let want: Vec<(String, Value)> = members.into_iter().collect();
            prop_assert_eq!(parsed, want);
        }

        /// A key given twice is refused, whatever the values.
        #[test]
        fn a_duplicate_key_is_refused(key in any::<String>(), a in value(), b in value()) {
            let text = format!("{{{}:{},{}:{}}}", quote(&key), render(&a), quote(&key), render(&b));
            prop_assert_eq!(parse_flat_object(&text), None);
        }
    }
}
