//! The screen: what is checked on the raw lines before the `sdp-types`
//! parser sees them, because the crate accepts it and callgate must not.
//!
//! Each check is named by the error text it gives:
//! - more than [`MAX_MEDIA`] `m=` lines, or more than [`MAX_ATTRIBUTES`]
//!   `a=` lines in one section (the crate has no limits);
//! - a line that is not `<lower-case letter>=<value>`, or that holds a
//!   control character other than a tab (the crate refuses only NUL and
//!   CR);
//! - a type letter RFC 8866 §5 does not define (the crate skips it; the
//!   RFC says to refuse the description), a second `v=`, or a
//!   session-level line after the first `m=` (the crate skips both);
//! - an `m=` port or port count that is not plain digits in range (the
//!   crate's integer parse takes a leading `+`), or a port count of 0.
//!
//! And two leniencies the crate lacks: spaces, tabs and CRs at the end of
//! a line are dropped (the crate keeps them in the value, where they would
//! make `a=sendrecv ` an unknown attribute), and a disabled stream written
//! without formats (`m=video 0 RTP/AVP`) is accepted.
//!
//! It also notes the line number of every `c=` and `a=` line per section,
//! so that a value the typed model refuses is reported on its own line:
//! the crate keeps each section's lines in order but not their numbers.

use std::borrow::Cow;

use super::parse::{MAX_ATTRIBUTES, MAX_MEDIA, SdpError, Why, bad};

/// A body that passed the screen.
pub(super) struct Screened<'a> {
    /// What the crate parses: the body itself, or a copy with the trailing
    /// blanks of its lines dropped (each line kept in place).
    pub text: Cow<'a, str>,
    /// Whether there is an `o=` line (before the first `m=`: the screen
    /// refuses one after it).
    pub has_origin: bool,
    /// Index 0 for the session level, then one per `m=` line.
    pub sections: Vec<SectionLines>,
}

/// The line numbers (1-based) of one section's lines.
#[derive(Debug, Default)]
pub(super) struct SectionLines {
    /// The `m=` line (0 for the session level).
    pub start: usize,
    /// Each `c=` line, in order.
    pub connections: Vec<usize>,
    /// Each `a=` line, in order.
    pub attributes: Vec<usize>,
    /// Whether this is a disabled stream written without formats, which
    /// the crate refuses and we tolerate (some user agents write it so).
    pub formatless: bool,
}

impl SectionLines {
    /// The line of the section's `i`th `c=` (its start if there is none:
    /// the crate and the screen agree on the count, so only a bug gets it).
    pub fn connection(&self, i: usize) -> usize {
        self.connections.get(i).copied().unwrap_or(self.start)
    }

    /// The line of the section's `i`th `a=`, likewise.
    pub fn attribute(&self, i: usize) -> usize {
        self.attributes.get(i).copied().unwrap_or(self.start)
    }
}

/// Screens a (size-limited, UTF-8) body.
///
/// # Errors
///
/// [`SdpError::MissingVersion`] when the first non-blank line is not `v=`,
/// [`SdpError::TooManyMedia`], [`SdpError::TooManyAttributes`], or a
/// [`SdpError::BadLine`] for the checks in the module header.
pub(super) fn screen(text: &str) -> Result<Screened<'_>, SdpError> {
    let mut screened = Screened {
        text: Cow::Borrowed(text),
        has_origin: false,
        sections: vec![SectionLines::default()],
    };
    let mut versioned = false;
    let mut trimmed = false;
    for (i, piece) in text.split('\n').enumerate() {
        let n = i + 1;
        let line = piece.trim_end_matches([' ', '\t', '\r']);
        // The crate drops the CR of a CRLF itself; anything more is ours.
        trimmed |= line.len() != piece.strip_suffix('\r').unwrap_or(piece).len();
        if line.is_empty() {
            continue;
        }
        if !versioned {
            if !line.starts_with("v=") {
                return Err(SdpError::MissingVersion);
            }
            versioned = true;
            continue;
        }
        screened.line(n, line)?;
    }
    // A CR at the very end has no LF after it for the crate to pair it with.
    let formatless = screened.sections.iter().any(|s| s.formatless);
    if trimmed || formatless || text.ends_with('\r') {
        screened.text = Cow::Owned(rewrite(text, &screened.sections));
    }
    Ok(screened)
}

impl Screened<'_> {
    /// One non-blank line after the `v=`.
    fn line(&mut self, n: usize, line: &str) -> Result<(), SdpError> {
        let (kind, value) = split_line(line).map_err(|why| bad(n, why))?;
        let in_media = self.sections.len() > 1;
        let why = match kind {
            b'm' => return self.media_line(n, value),
            b'a' => return self.attribute_line(n),
            b'c' => {
                self.current().connections.push(n);
                return Ok(());
            }
            b'i' | b'b' | b'k' => return Ok(()),
            b'v' => "a second v= line",
            b'o' | b's' | b'u' | b'e' | b'p' | b't' | b'r' | b'z' if in_media => {
                "a session-level line after the first m= line"
            }
            b'o' | b's' | b'u' | b'e' | b'p' | b't' | b'r' | b'z' => {
                self.has_origin |= kind == b'o';
                return Ok(());
            }
            _ => "an unknown line type (RFC 8866 §5 says to refuse the description)",
        };
        Err(bad(n, why))
    }

    fn current(&mut self) -> &mut SectionLines {
        let last = self.sections.len() - 1;
        &mut self.sections[last]
    }

    fn media_line(&mut self, n: usize, value: &str) -> Result<(), SdpError> {
        if self.sections.len() > MAX_MEDIA {
            return Err(SdpError::TooManyMedia {
                line: n,
                max: MAX_MEDIA,
            });
        }
        // The crate splits the m= line at single spaces; so does this.
        let mut fields = value.split(' ');
        let (_, port, proto, format) = (fields.next(), fields.next(), fields.next(), fields.next());
        if let Some(port) = port {
            check_port(port).map_err(|why| bad(n, why))?;
        }
        let formatless = proto.is_some() && format.is_none() && port == Some("0");
        self.sections.push(SectionLines {
            start: n,
            formatless,
            ..SectionLines::default()
        });
        Ok(())
    }

    fn attribute_line(&mut self, n: usize) -> Result<(), SdpError> {
        let section = self.current();
        if section.attributes.len() >= MAX_ATTRIBUTES {
            return Err(SdpError::TooManyAttributes {
                line: n,
                max: MAX_ATTRIBUTES,
            });
        }
        section.attributes.push(n);
        Ok(())
    }
}

/// `<letter>=<value>`, with no control characters but tabs.
fn split_line(line: &str) -> Result<(u8, &str), Why> {
    let bytes = line.as_bytes();
    if bytes.len() < 2 || !bytes[0].is_ascii_lowercase() || bytes[1] != b'=' {
        return Err("not a `<letter>=<value>` line");
    }
    if bytes.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err("a control character inside the line");
    }
    Ok((bytes[0], &line[2..]))
}

/// `<port>[/<number of ports>]`, plain digits, the count at least 1.
fn check_port(t: &str) -> Result<(), Why> {
    let (port, count) = t.split_once('/').map_or((t, None), |(p, c)| (p, Some(c)));
    if super::read::number::<u16>(port).is_none() {
        return Err("the m= port is not a number 0-65535");
    }
    match count {
        Some(c) if super::read::number::<u16>(c).is_none_or(|c| c == 0) => {
            Err("the m= port count is not a number 1-65535")
        }
        _ => Ok(()),
    }
}

/// The body with each line's trailing spaces, tabs and CRs dropped, and a
/// placeholder format ([`PLACEHOLDER`]) after each formatless disabled
/// `m=`, every line (blank ones too) in its place.
fn rewrite(text: &str, sections: &[SectionLines]) -> String {
    let mut formatless = sections.iter().filter(|s| s.formatless).map(|s| s.start);
    let mut next = formatless.next();
    let mut out = String::with_capacity(text.len() + 8);
    for (i, piece) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(piece.trim_end_matches([' ', '\t', '\r']));
        if next == Some(i + 1) {
            out.push(' ');
            out.push_str(PLACEHOLDER);
            next = formatless.next();
        }
    }
    out
}

/// What the crate is given as the format of a formatless disabled stream;
/// the typed model ignores it.
const PLACEHOLDER: &str = "-";
