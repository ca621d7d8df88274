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

use super::error::{MAX_ATTRIBUTES, MAX_MEDIA, SdpError, Why, bad};

/// A body that passed the screen.
pub(super) struct Screened<'a> {
    /// What the crate parses: the body itself, or a copy with the trailing
    /// blanks of its lines dropped (each line kept in place).
    pub text: Cow<'a, str>,
    /// Whether there is an `o=` line (before the first `m=`: the screen
    /// refuses one after it).
    pub has_origin: bool,
    /// Index 0 for the session level, then one per `m=` line.
    sections: Vec<Section>,
    /// The line numbers (1-based) of every `c=` line, in order.
    connections: Vec<usize>,
    /// The line numbers of every `a=` line, in order.
    attributes: Vec<usize>,
}

/// Where one section's lines are.
#[derive(Debug, Clone, Copy, Default)]
struct Section {
    /// The `m=` line (0 for the session level).
    start: usize,
    /// Whether this is a disabled stream written without formats, which
    /// the crate refuses and we tolerate (some user agents write it so).
    formatless: bool,
    /// Its `c=` lines: `connections[first_connection..]`, this many.
    first_connection: usize,
    connection_count: usize,
    /// Its `a=` lines, likewise.
    first_attribute: usize,
    attribute_count: usize,
}

/// The line numbers of one section (0: the session level; `i + 1`: the
/// `i`th `m=` section).
#[derive(Clone, Copy)]
pub(super) struct SectionLines<'s> {
    section: Section,
    screened: &'s Screened<'s>,
}

impl SectionLines<'_> {
    /// The `m=` line (0 for the session level).
    pub fn start(&self) -> usize {
        self.section.start
    }

    /// Whether it is a disabled stream written without formats.
    pub fn formatless(&self) -> bool {
        self.section.formatless
    }

    /// The line of the section's `i`th `c=` (its start if there is none:
    /// the crate and the screen agree on the count, so only a bug gets it).
    pub fn connection(&self, i: usize) -> usize {
        let s = &self.section;
        let at = (i < s.connection_count).then_some(s.first_connection + i);
        at.and_then(|at| self.screened.connections.get(at).copied())
            .unwrap_or(s.start)
    }

    /// The line of the section's `i`th `a=`, likewise.
    pub fn attribute(&self, i: usize) -> usize {
        let s = &self.section;
        let at = (i < s.attribute_count).then_some(s.first_attribute + i);
        at.and_then(|at| self.screened.attributes.get(at).copied())
            .unwrap_or(s.start)
    }
}

impl<'a> Screened<'a> {
    /// Section `i`'s line numbers (an empty section past the last one).
    pub fn section(&'a self, i: usize) -> SectionLines<'a> {
        let section = self.sections.get(i).copied().unwrap_or_default();
        SectionLines {
            section,
            screened: self,
        }
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
        sections: Vec::with_capacity(4),
        connections: Vec::with_capacity(4),
        attributes: Vec::with_capacity(32),
    };
    screened.sections.push(Section::default());
    let mut versioned = false;
    let mut trimmed = false;
    for (i, piece) in lines(text).enumerate() {
        let n = i + 1;
        let line = trim_end(piece);
        // The crate drops the CR of a CRLF itself; anything more is ours.
        trimmed |= line.len() + usize::from(piece.ends_with('\r')) < piece.len();
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
                self.connections.push(n);
                self.current().connection_count += 1;
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

    fn current(&mut self) -> &mut Section {
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
        self.sections.push(Section {
            start: n,
            formatless,
            first_connection: self.connections.len(),
            connection_count: 0,
            first_attribute: self.attributes.len(),
            attribute_count: 0,
        });
        Ok(())
    }

    fn attribute_line(&mut self, n: usize) -> Result<(), SdpError> {
        let section = self.current();
        if section.attribute_count >= MAX_ATTRIBUTES {
            return Err(SdpError::TooManyAttributes {
                line: n,
                max: MAX_ATTRIBUTES,
            });
        }
        section.attribute_count += 1;
        self.attributes.push(n);
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
    if number::<u16>(port).is_none() {
        return Err("the m= port is not a number 0-65535");
    }
    match count {
        Some(c) if number::<u16>(c).is_none_or(|c| c == 0) => {
            Err("the m= port count is not a number 1-65535")
        }
        _ => Ok(()),
    }
}

/// The body with each line's trailing spaces, tabs and CRs dropped, and a
/// placeholder format ([`PLACEHOLDER`]) after each formatless disabled
/// `m=`, every line (blank ones too) in its place.
fn rewrite(text: &str, sections: &[Section]) -> String {
    let mut formatless = sections.iter().filter(|s| s.formatless).map(|s| s.start);
    let mut next = formatless.next();
    let mut out = String::with_capacity(text.len() + 8);
    for (i, piece) in lines(text).enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(trim_end(piece));
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

/// The body's lines, split at each LF (as `str::split('\n')` would, with
/// a byte loop that is cheaper on lines this short).
fn lines(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let current = rest?;
        match current.bytes().position(|b| b == b'\n') {
            Some(at) => {
                rest = Some(&current[at + 1..]);
                Some(&current[..at])
            }
            None => {
                rest = None;
                Some(current)
            }
        }
    })
}

/// The line without its trailing spaces, tabs and CRs.
fn trim_end(line: &str) -> &str {
    let kept = line
        .bytes()
        .rposition(|b| !matches!(b, b' ' | b'\t' | b'\r'))
        .map_or(0, |at| at + 1);
    &line[..kept]
}

/// A decimal number of plain digits (no sign, no spaces), in range for `T`.
pub(super) fn number<T: std::str::FromStr>(t: &str) -> Option<T> {
    if is_digits(t) { t.parse().ok() } else { None }
}

pub(super) fn is_digits(t: &str) -> bool {
    !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())
}
