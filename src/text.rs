//! Text cut to a size in bytes without splitting a character, for what relay keeps of
//! strings it did not choose (request fields in audit rows, tool results in turns).

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

#[cfg(test)]
mod tests {
    use super::cut;

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
