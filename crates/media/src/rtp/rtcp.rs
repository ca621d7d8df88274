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
//!
//! What the `rtcp-types` crate does here: it writes every packet (SR, RR,
//! report blocks, SDES) and reads the fields of the SRs and RRs. What stays
//! ours, because the crate's checks differ from the ones above (each
//! difference is pinned by a test in `rtcp/tests.rs`):
//! - the walk over the compound and the padding check. The crate's
//!   `Compound` refuses padding on any packet but the last, and decodes
//!   every packet type it knows (SDES items, APP, feedback, XR) strictly,
//!   so one quirk in a packet callgate never reads would cost the SR beside
//!   it, and the liveness the SIP leg takes from any valid RTCP. Its
//!   per-packet parsers refuse only a zero padding count, not one larger
//!   than the packet's body.
//! - the report-block count, checked against the body without its padding
//!   (the crate counts padding as room for blocks, so padding bytes would
//!   come out as a report).
//! - the BYE source list: the crate refuses a BYE whose reason runs past
//!   the packet, a reason callgate never reads.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rtcp_types::prelude::*;
use rtcp_types::utils::parser::{
    parse_count, parse_length, parse_packet_type, parse_padding_bit, parse_version,
};
use rtcp_types::{
    ReceiverReport, ReceiverReportBuilder, ReportBlockBuilder, Sdes, SdesChunk, SdesItem,
    SenderReport,
};

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
        packets.push(parse_packet(split.packet, split.unpadded)?);
        rest = split.rest;
    }
    Ok(packets)
}

/// The first packet of a datagram, cut out by its length field.
struct Split<'a> {
    /// The whole packet, header and padding included.
    packet: &'a [u8],
    /// Its length without the padding.
    unpadded: usize,
    /// The packets after it.
    rest: &'a [u8],
}

/// Cuts the first packet off `buf`, checking its version, length and
/// padding.
fn split_packet(buf: &[u8]) -> Result<Split<'_>, RtcpError> {
    let header = buf
        .first_chunk::<4>()
        .ok_or(RtcpError::TooShort { len: buf.len() })?;
    let version = parse_version(header);
    if version != RTP_VERSION {
        return Err(RtcpError::BadVersion(version));
    }
    let packet_type = parse_packet_type(header);
    let length = parse_length(header);
    if length > buf.len() {
        return Err(RtcpError::LengthOverrun {
            packet_type,
            length,
            available: buf.len(),
        });
    }
    let (packet, rest) = buf.split_at(length);
    let mut unpadded = length;
    if parse_padding_bit(header) {
        let pad = usize::from(packet[length - 1]);
        if pad == 0 || pad > length - 4 {
            return Err(RtcpError::BadPadding { packet_type });
        }
        unpadded -= pad;
    }
    Ok(Split {
        packet,
        unpadded,
        rest,
    })
}

/// One whole packet, whose first `unpadded` bytes are not padding.
fn parse_packet(packet: &[u8], unpadded: usize) -> Result<RtcpPacket, RtcpError> {
    let packet_type = parse_packet_type(packet);
    let count = parse_count(packet);
    let overrun = RtcpError::CountOverrun { packet_type, count };
    let n = usize::from(count);
    // What the count needs after the 4-byte header, without the padding.
    let fits = |fixed: usize, item: usize| 4 + fixed + n * item <= unpadded;
    let packet = match packet_type {
        SR if fits(24, BLOCK_LEN) => {
            // Cannot fail once the walk and the count check passed; mapped
            // rather than unwrapped all the same.
            let sr = SenderReport::parse(packet).map_err(|_| overrun)?;
            RtcpPacket::SenderReport {
                ssrc: sr.ssrc(),
                ntp: sr.ntp_timestamp(),
                rtp_ts: sr.rtp_timestamp(),
                packets: sr.packet_count(),
                octets: sr.octet_count(),
                reports: sr.report_blocks().map(block_from).collect(),
            }
        }
        RR if fits(4, BLOCK_LEN) => {
            let rr = ReceiverReport::parse(packet).map_err(|_| overrun)?;
            RtcpPacket::ReceiverReport {
                ssrc: rr.ssrc(),
                reports: rr.report_blocks().map(block_from).collect(),
            }
        }
        BYE if fits(0, 4) => RtcpPacket::Bye {
            ssrcs: packet[4..4 + 4 * n]
                .chunks_exact(4)
                .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        },
        SR | RR | BYE => return Err(overrun),
        SDES => RtcpPacket::Sdes,
        _ => RtcpPacket::Other { packet_type },
    };
    Ok(packet)
}

/// Our report block from the crate's view of one.
fn block_from(b: rtcp_types::ReportBlock<'_>) -> ReportBlock {
    // 24-bit two's complement: shift into the top of an i32 and back.
    let lost = ((b.cumulative_lost() << 8) as i32) >> 8;
    ReportBlock {
        ssrc: b.ssrc(),
        fraction_lost: b.fraction_lost(),
        cumulative_lost: lost,
        highest_seq: b.extended_sequence_number(),
        jitter: b.interarrival_jitter(),
        last_sr: b.last_sender_report_timestamp(),
        delay_since_last_sr: b.delay_since_last_sender_report_timestamp(),
    }
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
        Some(info) => {
            let sr = SenderReport::builder(ssrc)
                .ntp_timestamp(info.ntp)
                .rtp_timestamp(info.rtp_ts)
                .packet_count(info.packets)
                .octet_count(info.octets);
            append(
                out,
                &first
                    .iter()
                    .fold(sr, |sr, b| sr.add_report_block(block_builder(b))),
            );
        }
        None => append(out, &receiver_report(ssrc, first)),
    }
    for more in chunks {
        append(out, &receiver_report(ssrc, more));
    }
    let cname = SdesItem::builder(SdesItem::CNAME, cut(cname, MAX_CNAME));
    append(
        out,
        &Sdes::builder().add_chunk(SdesChunk::builder(ssrc).add_item(cname)),
    );
}

fn receiver_report(ssrc: u32, blocks: &[ReportBlock]) -> ReceiverReportBuilder {
    (blocks.iter()).fold(ReceiverReport::builder(ssrc), |rr, b| {
        rr.add_report_block(block_builder(b))
    })
}

/// The crate's builder for our block, the loss clamped to the 24-bit
/// signed field (two's complement in the low 24 bits, as the wire has it).
fn block_builder(b: &ReportBlock) -> ReportBlockBuilder {
    let lost = super::stats::clamp_lost(i128::from(b.cumulative_lost)) as u32 & 0x00FF_FFFF;
    rtcp_types::ReportBlock::builder(b.ssrc)
        .fraction_lost(b.fraction_lost)
        .cumulative_lost(lost)
        .extended_sequence_number(b.highest_seq)
        .interarrival_jitter(b.jitter)
        .last_sender_report_timestamp(b.last_sr)
        .delay_since_last_sender_report_timestamp(b.delay_since_last_sr)
}

/// Appends the packet `builder` writes.
///
/// # Panics
///
/// Never on what [`write_report`] builds: the crate's size checks refuse
/// more than 31 blocks or chunks, a loss wider than 24 bits, an SDES value
/// over 255 bytes and padding that is not a multiple of 4, and every one
/// of those is ruled out above (blocks in chunks of [`MAX_BLOCKS`], loss
/// clamped, CNAME cut, no padding). The fuzz target writes reports from
/// arbitrary blocks and names to keep it so.
fn append(out: &mut Vec<u8>, builder: &impl RtcpPacketWriter) {
    let len = builder
        .calculate_size()
        .expect("write_report keeps every field within the crate's limits");
    let start = out.len();
    out.resize(start + len, 0);
    builder.write_into_unchecked(&mut out[start..]);
}

/// The longest prefix of `s` of at most `max` bytes on a char boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
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
mod tests;
