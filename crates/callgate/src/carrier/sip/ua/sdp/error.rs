//! What the SDP parser refuses and the bounds it refuses by: the one error
//! type of [`super::parse`], [`super::screen`] and [`super::read`], and the
//! limits all three check. It holds no logic beyond attaching a line number.

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

pub(super) fn bad(line: usize, why: Why) -> SdpError {
    SdpError::BadLine { line, why }
}
