//! Bounding untrusted text for logs, receipts and error messages.

/// The longest prefix of `s` within `max` bytes that ends on a character
/// boundary (so a cut never splits a UTF-8 sequence).
pub fn prefix_within(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_keeps_whole_characters() {
        assert_eq!(prefix_within("abc", 5), "abc");
        assert_eq!(prefix_within("abc", 2), "ab");
        // "é" is two bytes: a cut through it drops it whole.
        assert_eq!(prefix_within("aé", 2), "a");
        assert_eq!(prefix_within("aé", 3), "aé");
        assert_eq!(prefix_within("€", 0), "");
    }
}
