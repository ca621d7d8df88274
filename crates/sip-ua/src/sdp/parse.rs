//! The parser: untrusted bytes to a [`SessionDescription`], in four steps.
//!
//! 1. Our bounds: the body's size and UTF-8 ([`MAX_BODY_BYTES`]).
//! 2. Our screen of the raw lines ([`super::screen`]): what the crate does
//!    not refuse but we must (counts over [`MAX_MEDIA`] and
//!    [`MAX_ATTRIBUTES`], control characters, unknown or misplaced line
//!    types, a signed m= port), and the one leniency we add (trailing
//!    blanks are dropped).
//! 3. The `sdp-types` parser, for the grammar of every line (RFC 8866,
//!    CRLF or bare LF, any order of session-level lines, `t=` optional),
//!    its errors mapped to ours with the line they name.
//! 4. Our typed model ([`super::read`]): the fields callgate interprets,
//!    strict where a mistake would send media to the wrong place.
//!
//! It never does I/O and never builds anything larger than the bounded body.

use super::SessionDescription;

/// The largest body accepted: real offers are under 2 KiB, even with
/// dozens of codecs.
pub const MAX_BODY_BYTES: usize = 16 * 1024;
/// The most `m=` sections accepted in one description.
pub const MAX_MEDIA: usize = 64;
/// The most `a=` lines accepted in one section (session level or media).
pub const MAX_ATTRIBUTES: usize = 256;
/// The longest media type, protocol or format accepted on an `m=` line
/// (the longest registered ones are under 20 bytes). It also bounds what an
/// answer echoes back for a rejected stream.
pub const MAX_TOKEN_BYTES: usize = 32;

/// Why a body is not a session description callgate can read. The caller
/// answers `400 Bad Request`; the `Display` text names the line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SdpError {
    /// The body is over [`MAX_BODY_BYTES`].
    #[error("SDP body of {len} bytes is over the {max}-byte limit")]
    TooLarge {
        /// The body's length.
        len: usize,
        /// [`MAX_BODY_BYTES`].
        max: usize,
    },
    /// The body is not UTF-8 (callgate supports no `a=charset`).
    #[error("SDP body is not UTF-8 (at byte {at})")]
    NotUtf8 {
        /// The offset of the first byte that is not.
        at: usize,
    },
    /// The first non-blank line is not `v=`.
    #[error("SDP body does not start with a v= line")]
    MissingVersion,
    /// A line that is malformed or out of place.
    #[error("SDP line {line}: {why}")]
    BadLine {
        /// 1-based, counting blank lines.
        line: usize,
        /// What is wrong with it.
        why: &'static str,
    },
    /// There is no `o=` line before the first `m=` line.
    #[error("SDP has no o= line")]
    MissingOrigin,
    /// A media section with a non-zero port has no `c=` line, and neither
    /// has the session (RFC 4566 §5.7).
    #[error("SDP media section {media} (line {line}) has no c= line, nor has the session")]
    MissingConnection {
        /// The section's 0-based index.
        media: usize,
        /// Its `m=` line.
        line: usize,
    },
    /// More than [`MAX_MEDIA`] `m=` sections.
    #[error("SDP line {line}: more than {max} media sections")]
    TooManyMedia {
        /// The first `m=` line over the limit.
        line: usize,
        /// [`MAX_MEDIA`].
        max: usize,
    },
    /// More than [`MAX_ATTRIBUTES`] `a=` lines in one section.
    #[error("SDP line {line}: more than {max} attributes in one section")]
    TooManyAttributes {
        /// The first `a=` line over the limit.
        line: usize,
        /// [`MAX_ATTRIBUTES`].
        max: usize,
    },
}

/// What is wrong with one line, before its number is attached.
pub(super) type Why = &'static str;

/// Parses an SDP body (RFC 8866, which obsoletes RFC 4566).
///
/// # Errors
///
/// An [`SdpError`] saying what is wrong and on which line: a body over the
/// limits, not UTF-8, without `v=0` first or without `o=`, a malformed
/// line, or a used media section without a connection address.
pub fn parse(body: &[u8]) -> Result<SessionDescription, SdpError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(SdpError::TooLarge {
            len: body.len(),
            max: MAX_BODY_BYTES,
        });
    }
    let text = std::str::from_utf8(body).map_err(|e| SdpError::NotUtf8 {
        at: e.valid_up_to(),
    })?;
    let screened = super::screen::screen(text)?;
    let session = sdp_types::Session::parse(screened.text.as_bytes())
        .map_err(|e| crate_error(e, &screened.text))?;
    super::read::describe(session, &screened)
}

pub(super) fn bad(line: usize, why: Why) -> SdpError {
    SdpError::BadLine { line, why }
}

/// The crate's refusal as ours, naming the same line (both count lines from
/// 1, blank ones included, and the screen keeps every line in place).
fn crate_error(e: sdp_types::ParserError, text: &str) -> SdpError {
    use sdp_types::ParserError as P;
    #[allow(deprecated)] // matched so that a new variant fails to compile
    let (line, why) = match e {
        P::NoVersion => return SdpError::MissingVersion,
        P::NoOrigin => return SdpError::MissingOrigin,
        P::NoSessionName => (1, "no s= line"),
        P::InvalidVersion(n, _) => (n, "the SDP version is not 0"),
        P::MultipleVersions(n) => (n, "a second v= line"),
        P::MultipleOrigins(n) => (n, "a second o= line"),
        P::MultipleSessionNames(n) => (n, "a second s= line"),
        P::MultipleConnections(n) => (n, "a second c= line in one section"),
        P::MultipleSessionDescription(n) | P::MultipleMediaTitles(n) => {
            (n, "a second i= line in one section")
        }
        P::MultipleUris(n) => (n, "a second u= line"),
        P::MultipleTimeZones(n) => (n, "a second z= line"),
        P::MultipleKeys(n) => (n, "a second k= line in one section"),
        P::RepeatWithoutTime(n) => (n, "an r= line without a t= line before it"),
        P::InvalidLineFormat(n, why) => (n, why),
        P::UnexpectedLine(n, _) => (n, "an unexpected line"),
        P::InvalidFieldEncoding(n, _)
        | P::InvalidFieldFormat(n, _)
        | P::MissingField(n, _)
        | P::FieldTrailingData(n, _) => (n, malformed(text, n)),
    };
    bad(line, why)
}

/// What a line of its type must look like (for the crate's field errors,
/// which name the field in words of their own).
fn malformed(text: &str, line: usize) -> Why {
    let kind = text
        .split('\n')
        .nth(line.wrapping_sub(1))
        .and_then(|l| l.bytes().next());
    match kind {
        Some(b'o') => ORIGIN_WHY,
        Some(b'c') => CONNECTION_WHY,
        Some(b'm') => "m= needs `<media> <port>[/<count>] <proto> <format> ...`",
        Some(b'b') => "b= needs `<type>:<bandwidth>`",
        Some(b't') => "t= needs `<start time> <stop time>`",
        Some(b'r') => "r= needs `<interval> <duration> <offset> ...`",
        Some(b'z') => "z= needs `<adjustment time> <offset> ...`",
        _ => "a malformed line",
    }
}

/// The `o=` grammar, for its errors.
const ORIGIN_WHY: Why = "o= needs `<username> <sess-id> <sess-version> IN <IP4|IP6> <address>`";
/// The `c=` grammar, for its errors.
const CONNECTION_WHY: Why = "c= needs `IN <IP4|IP6> <address>`";
