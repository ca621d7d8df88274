//! Untrusted text: bounding it for logs, receipts and error messages, and
//! decoding form-encoded values (query strings, Twilio's webhooks).

/// `application/x-www-form-urlencoded` value decoding (`+` is a space);
/// `None` for a broken escape or bytes that are not UTF-8.
pub fn form_decode(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

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
