//! RTCP compound packets (RFC 3550 section 6): parsing SR, RR, SDES and
//! BYE, writing the reports callgate sends, and NTP time arithmetic.
//!
//! [`parse_compound`] walks the packets of one datagram by their length
//! fields. Every length and count is checked against the bytes actually
//! there, so a malformed datagram is an [`RtcpError`], never a panic or an
//! overrun; at most `len / 4` packets come out of `len` bytes (each packet
//! has a 4-byte header). It does not insist that the first packet be an SR
//! or RR (RFC 5506 reduced-size RTCP is legal) and accepts padding on any
//! packet as long as its count fits that packet.
//!
//! [`write_report`] always writes a valid compound packet (section 6.1):
//! an SR when we sent audio since the last report, else an RR, carrying up
//! to 31 report blocks, more RRs for any further blocks, then an SDES with
//! our CNAME.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::packet::RTP_VERSION;

/// RTCP packet type of a sender report.
pub const SR: u8 = 200;
/// RTCP packet type of a receiver report.
pub const RR: u8 = 201;
/// RTCP packet type of source descriptions.
pub const SDES: u8 = 202;
/// RTCP packet type of a goodbye.
pub const BYE: u8 = 203;

/// The 5-bit count field's maximum: report blocks per SR/RR.
pub const MAX_BLOCKS: usize = 31;
/// Bytes in one report block.
pub const BLOCK_LEN: usize = 24;
/// The longest CNAME an SDES item carries (8-bit length); longer names are
/// cut at a character boundary.
pub const MAX_CNAME: usize = 255;

/// Seconds from the NTP epoch (1900) to the Unix epoch (1970).
const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

/// One reception report (RFC 3550 section 6.4.1) about one source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReportBlock {
    /// The source this block is about.
    pub ssrc: u32,
    /// Packets lost since the previous report, as a fraction of 256.
    pub fraction_lost: u8,
    /// Packets lost since the start, 24-bit signed on the wire (negative
    /// with duplicates); [`write_report`] clamps it to that range.
    pub cumulative_lost: i32,
    /// Extended highest sequence number received (wraps << 16 | seq).
    pub highest_seq: u32,
    /// Interarrival jitter in timestamp units.
    pub jitter: u32,
    /// Middle 32 bits of the NTP time of the last SR from the source (0 if none).
    pub last_sr: u32,
    /// Delay since that SR arrived, in units of 1/65536 s (0 if none).
    pub delay_since_last_sr: u32,
}

/// The sender-info section of an SR (RFC 3550 section 6.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SenderInfo {
    /// Wall-clock time of the report, NTP format ([`ntp_from`]).
    pub ntp: u64,
    /// The RTP timestamp corresponding to `ntp` on our audio clock.
    pub rtp_ts: u32,
    /// Packets sent since the start (wrapping).
    pub packets: u32,
    /// Payload octets sent since the start (wrapping).
    pub octets: u32,
}

/// One packet of a compound RTCP datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RtcpPacket {
    /// An SR: the peer sends media, and reports on what it receives.
    SenderReport {
        /// The sender.
        ssrc: u32,
        /// Its wall clock, NTP format.
        ntp: u64,
        /// Its RTP clock at that instant.
        rtp_ts: u32,
        /// Packets it has sent.
        packets: u32,
        /// Payload octets it has sent.
        octets: u32,
        /// Its reports on the sources it receives (ours).
        reports: Vec<ReportBlock>,
    },
    /// An RR: reports from a peer that sent nothing lately.
    ReceiverReport {
        /// The reporter.
        ssrc: u32,
        /// Its reports.
        reports: Vec<ReportBlock>,
    },
    /// A goodbye from these sources.
    Bye {
        /// The sources leaving.
        ssrcs: Vec<u32>,
    },
    /// Source descriptions (CNAME and the like); not decoded.
    Sdes,
    /// Any other packet type (APP, feedback, XR), skipped by its length.
    Other {
        /// The packet type byte.
        packet_type: u8,
    },
}

/// Why [`parse_compound`] refused a datagram. Each variant is the peer's
/// fault and names the packet type involved where there is one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RtcpError {
    /// Fewer than the 4 bytes of a packet header where a packet starts
    /// (an empty datagram included).
    TooShort {
        /// Bytes left.
        len: usize,
    },
    /// The version field was not 2.
    BadVersion(u8),
    /// The length field runs past the datagram.
    LengthOverrun {
        /// The packet's type.
        packet_type: u8,
        /// The packet's declared length in bytes.
        length: usize,
        /// Bytes left in the datagram.
        available: usize,
    },
    /// The padding count is zero or larger than the packet's body.
    BadPadding {
        /// The packet's type.
        packet_type: u8,
    },
    /// The count field needs more bytes than the packet holds.
    CountOverrun {
        /// The packet's type.
        packet_type: u8,
        /// The count field.
        count: u8,
    },
}

impl fmt::Display for RtcpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RtcpError::TooShort { len } => {
                write!(f, "RTCP: {len} bytes left, shorter than a header")
            }
            RtcpError::BadVersion(v) => write!(f, "RTCP version {v}, expected 2"),
            RtcpError::LengthOverrun {
                packet_type,
                length,
                available,
            } => write!(
                f,
                "RTCP packet type {packet_type} claims {length} bytes, {available} left"
            ),
            RtcpError::BadPadding { packet_type } => {
                write!(
                    f,
                    "RTCP packet type {packet_type} has an invalid padding count"
                )
            }
            RtcpError::CountOverrun { packet_type, count } => write!(
                f,
                "RTCP packet type {packet_type} counts {count} items it does not hold"
            ),
        }
    }
}

impl std::error::Error for RtcpError {}

/// Parses every packet of a compound RTCP datagram, in order.
///
/// # Errors
///
/// [`RtcpError`] for an empty datagram, a version other than 2, or any
/// length, padding or count field that does not fit the bytes there.
pub fn parse_compound(buf: &[u8]) -> Result<Vec<RtcpPacket>, RtcpError> {
    if buf.is_empty() {
        return Err(RtcpError::TooShort { len: 0 });
    }
    let mut packets = Vec::new();
    let mut rest = buf;
    while !rest.is_empty() {
        let split = split_packet(rest)?;
        packets.push(parse_packet(split.first, split.packet_type, split.body)?);
        rest = split.rest;
    }
    Ok(packets)
}

/// The first packet of a datagram, cut out by its length field.
struct Split<'a> {
    /// The header's first byte: version, padding bit, count.
    first: u8,
    packet_type: u8,
    /// The packet after its header, padding removed.
    body: &'a [u8],
    /// The packets after it.
    rest: &'a [u8],
}

/// Cuts the first packet off `buf`, checking its version, length and
/// padding.
fn split_packet(buf: &[u8]) -> Result<Split<'_>, RtcpError> {
    let &[first, packet_type, hi, lo] = buf
        .first_chunk::<4>()
        .ok_or(RtcpError::TooShort { len: buf.len() })?;
    let version = first >> 6;
    if version != RTP_VERSION {
        return Err(RtcpError::BadVersion(version));
    }
    let length = (usize::from(u16::from_be_bytes([hi, lo])) + 1) * 4;
    if length > buf.len() {
        return Err(RtcpError::LengthOverrun {
            packet_type,
            length,
            available: buf.len(),
        });
    }
    let (packet, tail) = buf.split_at(length);
    let mut body = &packet[4..];
    if first & 0x20 != 0 {
        let pad = usize::from(packet[length - 1]);
        if pad == 0 || pad > body.len() {
            return Err(RtcpError::BadPadding { packet_type });
        }
        body = &body[..body.len() - pad];
    }
    Ok(Split {
        first,
        packet_type,
        body,
        rest: tail,
    })
}

/// One packet from its header's first byte, its type and its body.
fn parse_packet(first: u8, packet_type: u8, body: &[u8]) -> Result<RtcpPacket, RtcpError> {
    let count = first & 0x1F;
    let overrun = RtcpError::CountOverrun { packet_type, count };
    let n = usize::from(count);
    let packet = match packet_type {
        SR => {
            let fixed = body.get(..24).ok_or(overrun)?;
            let blocks = body.get(24..24 + n * BLOCK_LEN).ok_or(overrun)?;
            RtcpPacket::SenderReport {
                ssrc: be32(fixed, 0),
                ntp: u64::from(be32(fixed, 4)) << 32 | u64::from(be32(fixed, 8)),
                rtp_ts: be32(fixed, 12),
                packets: be32(fixed, 16),
                octets: be32(fixed, 20),
                reports: blocks.chunks_exact(BLOCK_LEN).map(parse_block).collect(),
            }
        }
        RR => {
            let fixed = body.get(..4).ok_or(overrun)?;
            let blocks = body.get(4..4 + n * BLOCK_LEN).ok_or(overrun)?;
            RtcpPacket::ReceiverReport {
                ssrc: be32(fixed, 0),
                reports: blocks.chunks_exact(BLOCK_LEN).map(parse_block).collect(),
            }
        }
        BYE => {
            let ids = body.get(..4 * n).ok_or(overrun)?;
            RtcpPacket::Bye {
                ssrcs: ids.chunks_exact(4).map(|c| be32(c, 0)).collect(),
            }
        }
        SDES => RtcpPacket::Sdes,
        _ => RtcpPacket::Other { packet_type },
    };
    Ok(packet)
}

/// A report block from exactly [`BLOCK_LEN`] bytes.
fn parse_block(b: &[u8]) -> ReportBlock {
    // 24-bit two's complement: shift into the top of an i32 and back.
    let lost = i32::from_be_bytes([b[5], b[6], b[7], 0]) >> 8;
    ReportBlock {
        ssrc: be32(b, 0),
        fraction_lost: b[4],
        cumulative_lost: lost,
        highest_seq: be32(b, 8),
        jitter: be32(b, 12),
        last_sr: be32(b, 16),
        delay_since_last_sr: be32(b, 20),
    }
}

/// The big-endian u32 at `at` (the caller checked the length).
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Appends one compound report from `ssrc` to `out`: an SR if `sender` is
/// given (we sent audio since the last report), else an RR, with the first
/// [`MAX_BLOCKS`] of `blocks`; further RRs for the rest; then an SDES
/// whose CNAME is `cname` (cut to [`MAX_CNAME`] bytes).
pub fn write_report(
    out: &mut Vec<u8>,
    sender: Option<SenderInfo>,
    ssrc: u32,
    blocks: &[ReportBlock],
    cname: &str,
) {
    let mut chunks = blocks.chunks(MAX_BLOCKS);
    let first = chunks.next().unwrap_or(&[]);
    match sender {
        Some(info) => write_sr(out, ssrc, &info, first),
        None => write_rr(out, ssrc, first),
    }
    for more in chunks {
        write_rr(out, ssrc, more);
    }
    write_sdes(out, ssrc, cname);
}

fn write_sr(out: &mut Vec<u8>, ssrc: u32, info: &SenderInfo, blocks: &[ReportBlock]) {
    write_header(out, blocks.len(), SR, 24 + BLOCK_LEN * blocks.len());
    out.extend_from_slice(&ssrc.to_be_bytes());
    out.extend_from_slice(&info.ntp.to_be_bytes());
    out.extend_from_slice(&info.rtp_ts.to_be_bytes());
    out.extend_from_slice(&info.packets.to_be_bytes());
    out.extend_from_slice(&info.octets.to_be_bytes());
    blocks.iter().for_each(|b| write_block(out, b));
}

fn write_rr(out: &mut Vec<u8>, ssrc: u32, blocks: &[ReportBlock]) {
    write_header(out, blocks.len(), RR, 4 + BLOCK_LEN * blocks.len());
    out.extend_from_slice(&ssrc.to_be_bytes());
    blocks.iter().for_each(|b| write_block(out, b));
}

/// One SDES chunk: our SSRC, a CNAME item, and the null octets that end
/// the item list and pad the chunk to 32 bits (at least one).
fn write_sdes(out: &mut Vec<u8>, ssrc: u32, cname: &str) {
    let name = cut(cname, MAX_CNAME).as_bytes();
    let items = 2 + name.len();
    let nulls = 4 - items % 4;
    write_header(out, 1, SDES, 4 + items + nulls);
    out.extend_from_slice(&ssrc.to_be_bytes());
    out.push(1); // CNAME
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.resize(out.len() + nulls, 0);
}

/// The longest prefix of `s` of at most `max` bytes on a char boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A header for a packet of `body` bytes (a multiple of 4) after the header.
fn write_header(out: &mut Vec<u8>, count: usize, packet_type: u8, body: usize) {
    out.push(RTP_VERSION << 6 | count as u8);
    out.push(packet_type);
    out.extend_from_slice(&(body as u16 / 4).to_be_bytes());
}

fn write_block(out: &mut Vec<u8>, b: &ReportBlock) {
    let lost = super::stats::clamp_lost(i128::from(b.cumulative_lost));
    out.extend_from_slice(&b.ssrc.to_be_bytes());
    out.push(b.fraction_lost);
    out.extend_from_slice(&lost.to_be_bytes()[1..]);
    out.extend_from_slice(&b.highest_seq.to_be_bytes());
    out.extend_from_slice(&b.jitter.to_be_bytes());
    out.extend_from_slice(&b.last_sr.to_be_bytes());
    out.extend_from_slice(&b.delay_since_last_sr.to_be_bytes());
}

/// A wall-clock time as a 64-bit NTP timestamp (seconds since 1900 in the
/// high word, binary fraction in the low). Times before 1970 give the
/// Unix epoch's value.
pub fn ntp_from(wall: SystemTime) -> u64 {
    let since = wall.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs().wrapping_add(NTP_UNIX_OFFSET);
    let frac = (u64::from(since.subsec_nanos()) << 32) / 1_000_000_000;
    secs << 32 | frac
}

/// The middle 32 bits of an NTP timestamp: the LSR field of a report
/// block, and the unit of round-trip arithmetic (1/65536 s).
pub fn ntp_middle(ntp: u64) -> u32 {
    (ntp >> 16) as u32
}

/// The round-trip time to the peer from its report `block` about us,
/// received at wall-clock `arrival_ntp` (RFC 3550 section 6.4.1: A − LSR −
/// DLSR). `None` when the block refers to no SR of ours or the result is
/// negative (clocks or fields inconsistent).
pub fn round_trip(block: &ReportBlock, arrival_ntp: u64) -> Option<Duration> {
    if block.last_sr == 0 {
        return None;
    }
    let rtt = ntp_middle(arrival_ntp)
        .wrapping_sub(block.last_sr)
        .wrapping_sub(block.delay_since_last_sr);
    let rtt = u64::try_from(rtt as i32).ok()?;
    Some(Duration::from_nanos(rtt * 1_000_000_000 / 65_536))
}

#[cfg(test)]
#[path = "rtcp_tests.rs"]
mod tests;
