//! Small helpers for showing values read from files to people.

/// The first `n` characters of `s` (all of it when shorter). Never panics:
/// ids and keys read from disk may be short, empty or not ASCII.
pub fn prefix(s: &str, n: usize) -> &str {
    s.char_indices().nth(n).map_or(s, |(i, _)| &s[..i])
}

#[cfg(test)]
mod tests {
    use super::prefix;

    #[test]
    fn prefix_is_safe_on_short_and_multibyte_text() {
        assert_eq!(prefix("0123456789abcdef", 12), "0123456789ab");
        assert_eq!(prefix("abc", 12), "abc");
        assert_eq!(prefix("", 12), "");
        assert_eq!(prefix("ééé", 2), "éé");
        assert_eq!(prefix("aé", 1), "a");
    }
}
