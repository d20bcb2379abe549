//! Text cut to a size in bytes without splitting a character, for what relay keeps of
//! strings it did not choose (request fields in audit rows, tool results in turns); and
//! a time in words, for the text form of `relay audit`; the last line of a log, for a
//! message saying why a program ended.

/// `s` whole when it is at most `max` bytes; else its longest prefix of at most `max`
/// bytes that ends on a character boundary, followed by `…`.
pub fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The last line of `log` that says something, as one plain line of at most 300
/// characters: its escape sequences and control characters left out. For a message
/// saying why Claude Code ended, in its own words (its stderr, redacted as the host
/// wrote it).
pub fn last_line(log: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(log);
    text.lines()
        .map(plain)
        .rfind(|l| !l.is_empty())
        .map(|l| l.chars().take(300).collect())
}

/// `line` without escape sequences (a CSI sequence, `ESC [ … letter`, goes whole) and
/// control characters, trimmed.
fn plain(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.next_if_eq(&'[').is_some() {
                while chars.next().is_some_and(|c| !c.is_ascii_alphabetic()) {}
            }
        } else if !c.is_control() {
            out.push(c);
        }
    }
    out.trim().to_string()
}

/// `ms` since the epoch as UTC to the millisecond: `2026-12-04 19:22:48.123Z`.
pub fn utc_ms(ms: u64) -> String {
    let (days, rem) = ((ms / 86_400_000) as i64, ms % 86_400_000);
    // Days to a civil date (Howard Hinnant's `civil_from_days`).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::{cut, last_line, utc_ms};

    #[test]
    fn the_last_line_of_a_log_is_its_last_words_plain_and_short() {
        let log = b"starting\r\n\x1b[31merror:\x1b[0m option '--permission-mode <mode>' argument 'yolo' is invalid\x07\r\n\r\n  \n";
        assert_eq!(
            last_line(log).as_deref(),
            Some("error: option '--permission-mode <mode>' argument 'yolo' is invalid")
        );
        assert_eq!(last_line(b"\n \r\n"), None);
        assert_eq!(last_line(&[b'x'; 1000]).unwrap().len(), 300);
    }

    #[test]
    fn a_time_reads_as_utc_to_the_millisecond() {
        assert_eq!(utc_ms(0), "1970-01-01 00:00:00.000Z");
        assert_eq!(utc_ms(951_782_400_000), "2000-02-29 00:00:00.000Z");
        assert_eq!(utc_ms(1_796_412_168_123), "2026-12-04 19:22:48.123Z");
        assert_eq!(utc_ms(4_102_444_799_999), "2099-12-31 23:59:59.999Z");
    }

    #[test]
    fn a_cut_keeps_short_text_and_never_splits_a_character() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "abc…");
        // "é" is two bytes: a cut inside it steps back before it.
        assert_eq!(cut("aé", 2), "a…");
        assert_eq!(cut("aé", 3), "aé");
        assert_eq!(cut("€€", 4), "€…");
        assert_eq!(cut("", 0), "");
        assert_eq!(cut("x", 0), "…");
    }
}
