//! The parser: untrusted bytes to a [`SessionDescription`], in four steps.
//!
//! 1. Our bounds: the body's size and UTF-8 ([`MAX_BODY_BYTES`]).
//! 2. Our screen of the raw lines ([`super::screen`]): what the crate does
//!    not refuse but we must (counts over [`MAX_MEDIA`](super::MAX_MEDIA) and
//!    [`MAX_ATTRIBUTES`](super::MAX_ATTRIBUTES), control characters, unknown or misplaced line
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
use super::error::{MAX_BODY_BYTES, SdpError, Why, bad};

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
