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

/// Days since the epoch of a civil date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A point in time as a person writes it for `relay audit --since`, in ms since the
/// epoch: a duration before `now_ms` (`90s`, `30m`, `12h`, `7d`), or a UTC date and
/// time (`2026-12-04`, `2026-12-04T19:22`, `2026-12-04 19:22:48.123Z`, as `utc_ms`
/// writes it).
pub fn parse_since(text: &str, now_ms: u64) -> Result<u64, String> {
    let bad = || {
        format!(
            "--since {text:?}: expected a duration such as 90s, 30m, 12h or 7d, or a UTC \
             time such as 2026-12-04T19:22:48Z"
        )
    };
    let t = text.trim();
    if let Some(unit) = t.chars().last().filter(|c| "smhd".contains(*c)) {
        let digits = &t[..t.len() - 1];
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            let scale: u64 = match unit {
                's' => 1_000,
                'm' => 60_000,
                'h' => 3_600_000,
                _ => 86_400_000,
            };
            let back = digits
                .parse::<u64>()
                .ok()
                .and_then(|n| n.checked_mul(scale))
                .ok_or_else(bad)?;
            return Ok(now_ms.saturating_sub(back));
        }
    }
    let t = t.strip_suffix('Z').unwrap_or(t);
    let (date, time) = match t.split_once(['T', ' ']) {
        Some((d, tm)) => (d, tm),
        None => (t, "00:00"),
    };
    let num = |s: &str| -> Result<i64, String> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse::<i64>().map_err(|_| bad())
    };
    let d: Vec<&str> = date.split('-').collect();
    let [y, mo, da] = d.as_slice() else {
        return Err(bad());
    };
    let (y, mo, da) = (num(y)?, num(mo)?, num(da)?);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let parts: Vec<&str> = hms.split(':').collect();
    let (h, mi, se) = match parts.as_slice() {
        [h, m] => (num(h)?, num(m)?, 0),
        [h, m, s] => (num(h)?, num(m)?, num(s)?),
        _ => return Err(bad()),
    };
    let ms = num(&format!("{frac:0<3}")[..3])?;
    if !(1..=12).contains(&mo) || !(1..=31).contains(&da) || h > 23 || mi > 59 || se > 60 {
        return Err(bad());
    }
    let total = days_from_civil(y, mo, da) * 86_400_000 + ((h * 60 + mi) * 60 + se) * 1000 + ms;
    u64::try_from(total).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::{cut, last_line, parse_since, utc_ms};

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
    fn since_reads_a_duration_back_or_a_utc_time() {
        let now = 1_796_412_168_123;
        assert_eq!(parse_since("90s", now), Ok(now - 90_000));
        assert_eq!(parse_since("2h", now), Ok(now - 7_200_000));
        assert_eq!(parse_since("7d", now), Ok(now - 7 * 86_400_000));
        assert_eq!(
            parse_since("2026-12-04 19:22:48.123Z", 0),
            Ok(1_796_412_168_123)
        );
        assert_eq!(
            parse_since("2026-12-04T19:22:48Z", 0),
            Ok(1_796_412_168_000)
        );
        assert_eq!(parse_since("2026-12-04T19:22", 0), Ok(1_796_412_120_000));
        assert_eq!(parse_since("2000-02-29", 0), Ok(951_782_400_000));
        for t in [utc_ms(0), utc_ms(4_102_444_799_999)] {
            assert_eq!(utc_ms(parse_since(&t, 0).unwrap()), t);
        }
        for bad in [
            "",
            "m",
            "5w",
            "yesterday",
            "2026-13-01",
            "2026-12-04T25:00",
            "1969-12-31",
        ] {
            assert!(parse_since(bad, now).is_err(), "{bad}");
        }
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
