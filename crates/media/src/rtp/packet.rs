//! RTP packets (RFC 3550 section 5.1): parsing, writing and the RTP/RTCP
//! demultiplexing rule of RFC 5761.
//!
//! The bytes are read and written by the `rtp-types` crate; this module
//! gives callgate's callers the fields they use ([`RtpHeader`], a payload
//! borrowed from the datagram) and names each refusal as the peer's fault
//! ([`RtpError`]). [`parse`] accepts version 2 only, skips the CSRC list and
//! any header extension, and strips padding after checking its count fits:
//! every length comes from the packet and is checked before use, so a
//! malformed packet is an [`RtpError`], never a panic or an out-of-bounds
//! read. [`write()`] produces the only header shape callgate sends: 12
//! bytes, no padding, no extension, no CSRCs. [`is_rtcp`] is ours: neither
//! crate demultiplexes.

use std::fmt;

use rtp_types::{RtpPacketBuilder, RtpParseError};

/// The only RTP version there is (RFC 3550).
pub const RTP_VERSION: u8 = 2;

/// Length of the fixed RTP header, the only header [`write()`] produces.
pub const HEADER_LEN: usize = 12;

/// The fields of an RTP header callgate uses. Padding, extension and CSRCs
/// are consumed by [`parse`] and never written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RtpHeader {
    /// M bit: the first packet of a talkspurt (audio) or of an event (DTMF).
    pub marker: bool,
    /// 7-bit payload type (0 = PCMU, 8 = PCMA, dynamic 96..=127).
    pub payload_type: u8,
    /// Sequence number, +1 per packet, wrapping at 65535.
    pub sequence: u16,
    /// Sampling instant of the first sample, in clock-rate units, wrapping.
    pub timestamp: u32,
    /// Synchronisation source: the sender's stream identity.
    pub ssrc: u32,
}

/// A parsed packet borrowing its payload from the datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpPacket<'a> {
    /// The header fields.
    pub header: RtpHeader,
    /// The payload, without CSRCs, extension or padding: a subslice of the
    /// buffer given to [`parse`].
    pub payload: &'a [u8],
}

/// Why [`parse`] refused a datagram. Each variant is the peer's fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RtpError {
    /// Shorter than the 12-byte fixed header.
    TooShort {
        /// Bytes in the datagram.
        len: usize,
    },
    /// The version field was not 2.
    BadVersion(u8),
    /// The CSRC count claims more identifiers than the datagram holds.
    CsrcOverrun,
    /// The header extension's length runs past the datagram.
    ExtensionOverrun,
    /// The padding count is zero or larger than what follows the header.
    BadPadding,
}

impl fmt::Display for RtpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RtpError::TooShort { len } => {
                write!(f, "RTP datagram of {len} bytes is shorter than a header")
            }
            RtpError::BadVersion(v) => write!(f, "RTP version {v}, expected 2"),
            RtpError::CsrcOverrun => f.write_str("RTP CSRC list runs past the datagram"),
            RtpError::ExtensionOverrun => {
                f.write_str("RTP header extension runs past the datagram")
            }
            RtpError::BadPadding => f.write_str("RTP padding count is invalid"),
        }
    }
}

impl std::error::Error for RtpError {}

/// Parses one RTP datagram.
///
/// # Errors
///
/// [`RtpError`] when the datagram is not version 2 or any of its lengths
/// (CSRC count, extension length, padding count) does not fit.
pub fn parse(buf: &[u8]) -> Result<RtpPacket<'_>, RtpError> {
    let p = rtp_types::RtpPacket::parse(buf).map_err(|e| refusal(buf, e))?;
    // The crate's `payload()` borrows the parsed view, not the datagram:
    // cut the same range out of `buf` so the payload outlives the view.
    let (start, padding) = (p.payload_offset(), p.padding().unwrap_or(0));
    Ok(RtpPacket {
        header: RtpHeader {
            marker: p.marker_bit(),
            payload_type: p.payload_type(),
            sequence: p.sequence_number(),
            timestamp: p.timestamp(),
            ssrc: p.ssrc(),
        },
        payload: &buf[start..buf.len() - usize::from(padding)],
    })
}

/// Our name for the crate's refusal of `buf`. The crate reports a cut-off
/// packet as the byte count it needed; the header section ending there is
/// what ran past the datagram. It checks the sections in wire order (fixed
/// header, CSRCs, extension header and words, padding), so the first
/// section whose end reaches that count is the one at fault.
fn refusal(buf: &[u8], e: RtpParseError) -> RtpError {
    let (expected, len) = match e {
        RtpParseError::UnsupportedVersion(v) => return RtpError::BadVersion(v),
        RtpParseError::PaddingInvalid(_) => return RtpError::BadPadding,
        RtpParseError::Truncated { expected, actual } => (expected, actual),
    };
    if len < HEADER_LEN {
        return RtpError::TooShort { len };
    }
    let csrc_end = HEADER_LEN + 4 * usize::from(buf[0] & 0x0F);
    if expected <= csrc_end {
        RtpError::CsrcOverrun
    } else if buf[0] & 0x10 != 0 && expected <= extension_end(buf, csrc_end) {
        RtpError::ExtensionOverrun
    } else {
        RtpError::BadPadding
    }
}

/// Where the extension starting at `at` ends (a 16-bit profile field and
/// a 16-bit length in 32-bit words, then the words), or the end of its
/// 4-byte header when that is already cut off.
fn extension_end(buf: &[u8], at: usize) -> usize {
    match buf.get(at + 2..at + 4) {
        Some(&[hi, lo]) => at + 4 + 4 * usize::from(u16::from_be_bytes([hi, lo])),
        _ => at + 4,
    }
}

/// Appends a 12-byte header (version 2, no padding, extension or CSRCs)
/// and `payload` to `out`. Only the low 7 bits of `payload_type` are sent.
pub fn write(h: &RtpHeader, payload: &[u8], out: &mut Vec<u8>) {
    out.reserve(HEADER_LEN + payload.len());
    // Unchecked: the crate's checks (payload type below 128, at most 15
    // CSRCs, padding non-zero, extension words whole) hold by construction
    // for this header shape, and the checked call would only add a
    // `Result` that is never an error.
    RtpPacketBuilder::<&[u8], &[u8]>::new()
        .marker_bit(h.marker)
        .payload_type(h.payload_type & 0x7F)
        .sequence_number(h.sequence)
        .timestamp(h.timestamp)
        .ssrc(h.ssrc)
        .payload(payload)
        .write_into_vec_unchecked(out);
}

/// RFC 5761 section 4 demultiplexing: a version-2 datagram whose second
/// byte is in 192..=223 (RTCP packet types 192..=223, which RTP payload
/// types 64..=95 with the marker set would collide with) is RTCP.
pub fn is_rtcp(buf: &[u8]) -> bool {
    match buf {
        [first, second, ..] => first >> 6 == RTP_VERSION && (192..=223).contains(second),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> RtpHeader {
        RtpHeader {
            marker: true,
            payload_type: 8,
            sequence: 0xFFFE,
            timestamp: 0xDEAD_BEEF,
            ssrc: 0x0102_0304,
        }
    }

    #[test]
    fn a_written_packet_parses_back() {
        let mut out = Vec::new();
        write(&header(), &[1, 2, 3], &mut out);
        assert_eq!(out.len(), HEADER_LEN + 3);
        assert_eq!(&out[..2], &[0x80, 0x88]);
        let p = parse(&out).unwrap();
        assert_eq!(p.header, header());
        assert_eq!(p.payload, &[1, 2, 3]);
    }

    #[test]
    fn write_appends_and_masks_the_payload_type() {
        let mut out = vec![9];
        let h = RtpHeader {
            payload_type: 0xFF,
            marker: false,
            ..header()
        };
        write(&h, &[], &mut out);
        assert_eq!(out[0], 9);
        assert_eq!(parse(&out[1..]).unwrap().header.payload_type, 0x7F);
    }

    /// Version 2, padding, extension and 2 CSRCs, marker, PT 0.
    fn full_packet() -> Vec<u8> {
        let mut p = vec![0xB2, 0x80, 0x00, 0x07, 0, 0, 0, 160, 0, 0, 0, 5];
        p.extend([0xAA; 8]); // two CSRCs
        p.extend([0xBE, 0xDE, 0x00, 0x01, 1, 2, 3, 4]); // one extension word
        p.extend([7, 7, 7]); // payload
        p.extend([0, 0, 3]); // three bytes of padding
        p
    }

    #[test]
    fn csrcs_extension_and_padding_are_skipped() {
        let buf = full_packet();
        let p = parse(&buf).unwrap();
        assert_eq!(p.payload, &[7, 7, 7]);
        assert!(p.header.marker);
        assert_eq!(p.header.payload_type, 0);
        assert_eq!(p.header.sequence, 7);
        assert_eq!(p.header.timestamp, 160);
        assert_eq!(p.header.ssrc, 5);
    }

    #[test]
    fn every_bad_length_is_refused() {
        assert_eq!(parse(&[0x80; 11]), Err(RtpError::TooShort { len: 11 }));
        assert_eq!(parse(&[0x40; 12]), Err(RtpError::BadVersion(1)));
        let mut csrc = full_packet();
        csrc[0] = 0x8F; // 15 CSRCs, 60 bytes
        csrc.truncate(40);
        assert_eq!(parse(&csrc), Err(RtpError::CsrcOverrun));
        let mut ext = full_packet();
        ext[22] = 0x10; // 4096 extension words
        assert_eq!(parse(&ext), Err(RtpError::ExtensionOverrun));
        assert_eq!(parse(&full_packet()[..22]), Err(RtpError::ExtensionOverrun));
        let mut pad = full_packet();
        *pad.last_mut().unwrap() = 7; // more than payload + padding
        assert_eq!(parse(&pad), Err(RtpError::BadPadding));
        *pad.last_mut().unwrap() = 0;
        assert_eq!(parse(&pad), Err(RtpError::BadPadding));
        *pad.last_mut().unwrap() = 6; // exactly payload + padding
        assert_eq!(parse(&pad).unwrap().payload, &[] as &[u8]);
    }

    #[test]
    fn padding_on_a_bare_header_is_refused() {
        let mut buf = vec![0xA0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1];
        assert_eq!(parse(&buf), Err(RtpError::BadPadding));
        buf.push(1);
        assert_eq!(parse(&buf).unwrap().payload, &[] as &[u8]);
    }

    #[test]
    fn errors_say_what_was_wrong() {
        assert_eq!(
            RtpError::TooShort { len: 3 }.to_string(),
            "RTP datagram of 3 bytes is shorter than a header"
        );
        assert_eq!(
            RtpError::BadVersion(0).to_string(),
            "RTP version 0, expected 2"
        );
    }

    #[test]
    fn rtcp_is_told_apart_by_its_second_byte() {
        assert!(is_rtcp(&[0x80, 200, 0, 6]));
        assert!(is_rtcp(&[0x81, 192]));
        assert!(is_rtcp(&[0x80, 223]));
        assert!(!is_rtcp(&[0x80, 191])); // PT 63 with marker
        assert!(!is_rtcp(&[0x80, 224])); // PT 96 with marker
        assert!(!is_rtcp(&[0x80, 0x00])); // PCMU
        assert!(!is_rtcp(&[0x40, 200])); // version 1
        assert!(!is_rtcp(&[0x80]));
    }
}
