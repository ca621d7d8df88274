//! The invariants of the RTP media code on arbitrary bytes — the one copy,
//! shared by the cargo-fuzz target `fuzz/fuzz_targets/media_rtp.rs` and by
//! the stable smoke twin (the `#[cfg(test)]` part at the bottom of this
//! file).
//!
//! This file is included twice:
//! - by an ordinary `mod` (`#[cfg(test)]`), as `fuzz_tests::rtp` in the
//!   `media` crate;
//! - by a `path` attribute in the fuzz target, as `mod invariants`, whose
//!   crate root has `use media::rtp`.
//!
//! So the code under test is reached as `crate::rtp` (the same module in
//! both builds), and the smoke twin is compiled only under `cfg(test)`.
//! Entry point: [`check`], which reads one input in every way below.
//!
//! Invariants:
//! - RTP: `parse` Ok ⇒ version 2, the payload a subslice of the buffer
//!   after the fixed header, and `write` of the header and payload parses
//!   back to the same packet (byte for byte when the datagram had no
//!   padding, extension or CSRCs); each error is the one the bytes call
//!   for. `is_rtcp` ⇒ version 2 and a second byte in 192..=223.
//! - RTCP: `parse_compound` Ok ⇒ 1..=len/4 packets, one per header walked
//!   by the length fields, each of the type its header names, with as many
//!   report blocks (or BYE sources) as its count field; an SR or RR
//!   written back from what was parsed parses to the same packet. Reports
//!   we write parse back to the blocks given (loss clamped to 24 bits),
//!   SR/RR first and SDES last.
//! - Jitter buffer, fed (seq, ts, payload, arrival) and ticks decoded from
//!   the bytes: never deeper than its max depth, target within
//!   [min, max]; every push counted once in its outcome's counter
//!   (`received = queued + late + duplicates + resyncs`); ticks add up
//!   (`played` frames + `concealed` + `None` = ticks); frames are exactly
//!   one frame long and made of bytes pushed or silence; `None` only while
//!   idle or prebuffering; and with nothing stored, ticks stop returning
//!   `Some` within a bound (no concealment forever).
//! - Receiver statistics on the same packets: loss and jitter figures
//!   consistent, every restart preceded by an ignored packet, the
//!   cumulative loss within 24 bits, no loss in an empty interval.
//! - DTMF: a digit reported only on a timestamp differing from the
//!   previous packet's and the previous report's, and it is the packet's
//!   digit; an event sent by `DtmfSender`, with any of its packets lost,
//!   is reported exactly once if any packet arrived.

use std::time::{Duration, Instant};

use crate::rtp::dtmf::{self, DtmfReceiver, DtmfSender};
use crate::rtp::jitter::{JitterBuffer, JitterConfig, JitterStats, Phase, Playout, Push};
use crate::rtp::packet::{self, HEADER_LEN, RtpError};
use crate::rtp::rtcp::{self, ReportBlock, RtcpPacket, SenderInfo};
use crate::rtp::sender::RtpSender;
use crate::rtp::stats::ReceiverStats;

/// μ-law silence, the jitter buffer's default gap filler.
const SILENCE: u8 = 0xFF;

/// Every invariant on one input.
pub fn check(data: &[u8]) {
    check_rtp(data);
    check_rtcp(data);
    check_report_writing(data);
    check_media(data);
    check_dtmf_receiver(data);
    check_dtmf_round_trip(data);
}

/// RTP parsing, writing and demultiplexing on the bytes as one datagram.
pub fn check_rtp(data: &[u8]) {
    if packet::is_rtcp(data) {
        assert!(data[0] >> 6 == 2 && (192..=223).contains(&data[1]));
    }
    let version = data.first().map(|b| b >> 6);
    match packet::parse(data) {
        Ok(p) => {
            assert_eq!(version, Some(2));
            let start = (p.payload.as_ptr() as usize).wrapping_sub(data.as_ptr() as usize);
            assert!(start >= HEADER_LEN && start + p.payload.len() <= data.len());
            assert!(p.header.payload_type < 128);
            let mut out = Vec::new();
            packet::write(&p.header, p.payload, &mut out);
            assert_eq!(packet::parse(&out), Ok(p));
            if data[0] & 0x3F == 0 {
                assert_eq!(out, data, "a plain datagram is written back as it was");
            }
        }
        Err(RtpError::TooShort { len }) => assert!(len == data.len() && len < HEADER_LEN),
        Err(RtpError::BadVersion(v)) => assert!(Some(v) == version && v != 2),
        Err(RtpError::CsrcOverrun) => {
            assert!(HEADER_LEN + 4 * usize::from(data[0] & 0x0F) > data.len());
        }
        Err(e) => assert!(data.len() >= HEADER_LEN && version == Some(2), "{e}"),
    }
}

/// RTCP compound parsing on the bytes as one datagram.
pub fn check_rtcp(data: &[u8]) {
    let Ok(packets) = rtcp::parse_compound(data) else {
        return;
    };
    assert!(!packets.is_empty() && packets.len() <= data.len() / 4);
    let headers = walk_headers(data);
    assert_eq!(headers.len(), packets.len());
    for (&(first, packet_type), packet) in headers.iter().zip(&packets) {
        let count = usize::from(first & 0x1F);
        let (expected_type, items) = match packet {
            RtcpPacket::SenderReport { reports, .. } => (rtcp::SR, reports.len()),
            RtcpPacket::ReceiverReport { reports, .. } => (rtcp::RR, reports.len()),
            RtcpPacket::Bye { ssrcs } => (rtcp::BYE, ssrcs.len()),
            RtcpPacket::Sdes => (rtcp::SDES, count),
            RtcpPacket::Other { packet_type } => {
                assert!(!matches!(
                    *packet_type,
                    rtcp::SR | rtcp::RR | rtcp::BYE | rtcp::SDES
                ));
                (*packet_type, count)
            }
        };
        assert_eq!((packet_type, items), (expected_type, count), "{packet:?}");
        check_rewrite(packet);
    }
}

/// `(first byte, packet type)` of each packet, by the length fields
/// (only called on a datagram `parse_compound` accepted).
fn walk_headers(data: &[u8]) -> Vec<(u8, u8)> {
    let mut at = 0;
    let mut out = Vec::new();
    while at < data.len() {
        out.push((data[at], data[at + 1]));
        at += (usize::from(u16::from_be_bytes([data[at + 2], data[at + 3]])) + 1) * 4;
    }
    out
}

/// An SR or RR written from what was parsed parses back the same.
fn check_rewrite(packet: &RtcpPacket) {
    let mut out = Vec::new();
    match packet {
        RtcpPacket::SenderReport {
            ssrc,
            ntp,
            rtp_ts,
            packets,
            octets,
            reports,
        } => {
            let info = SenderInfo {
                ntp: *ntp,
                rtp_ts: *rtp_ts,
                packets: *packets,
                octets: *octets,
            };
            rtcp::write_report(&mut out, Some(info), *ssrc, reports, "fuzz");
        }
        RtcpPacket::ReceiverReport { ssrc, reports } => {
            rtcp::write_report(&mut out, None, *ssrc, reports, "fuzz");
        }
        _ => return,
    }
    let again = rtcp::parse_compound(&out).expect("our own report parses");
    assert_eq!(&again[0], packet);
    assert_eq!(again.last(), Some(&RtcpPacket::Sdes));
}

/// Reports built from the bytes (blocks of 24 bytes, a CNAME from the
/// text) parse back to what was written.
pub fn check_report_writing(data: &[u8]) {
    let blocks: Vec<ReportBlock> = data.chunks_exact(24).take(70).map(block_from).collect();
    let sender = (data.len() % 2 == 1).then_some(SenderInfo {
        ntp: 0x0102_0304_0506_0708,
        rtp_ts: data.len() as u32,
        packets: 7,
        octets: 1_120,
    });
    let cname = String::from_utf8_lossy(&data[..data.len().min(300)]);
    let mut out = Vec::new();
    rtcp::write_report(&mut out, sender, 0xC0FFEE, &blocks, &cname);
    assert!(out.len() % 4 == 0 && packet::is_rtcp(&out));
    let packets = rtcp::parse_compound(&out).expect("our own report parses");
    assert_eq!(packets.last(), Some(&RtcpPacket::Sdes));
    let mut parsed = Vec::new();
    for (i, p) in packets[..packets.len() - 1].iter().enumerate() {
        let reports = match p {
            RtcpPacket::SenderReport { reports, .. } if i == 0 && sender.is_some() => reports,
            RtcpPacket::ReceiverReport { reports, .. } if i > 0 || sender.is_none() => reports,
            other => panic!("packet {i}: {other:?}"),
        };
        assert!(reports.len() <= rtcp::MAX_BLOCKS);
        parsed.extend_from_slice(reports);
    }
    let clamped: Vec<ReportBlock> = (blocks.iter())
        .map(|b| ReportBlock {
            cumulative_lost: b.cumulative_lost.clamp(-0x80_0000, 0x7F_FFFF),
            ..*b
        })
        .collect();
    assert_eq!(parsed, clamped);
}

fn block_from(c: &[u8]) -> ReportBlock {
    let word = |i: usize| u32::from_be_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]]);
    ReportBlock {
        ssrc: word(0),
        fraction_lost: c[4],
        cumulative_lost: word(4) as i32,
        highest_seq: word(8),
        jitter: word(12),
        last_sr: word(16),
        delay_since_last_sr: word(20),
    }
}

/// One step of a media stream decoded from the bytes.
#[derive(Debug, Clone, Copy)]
enum Op {
    Tick {
        after_ms: u64,
    },
    Push {
        seq: u16,
        ts: u32,
        len: usize,
        fill: u8,
        late_ms: u64,
    },
    Reset,
}

/// Four bytes per step: mostly small sequence and timestamp steps (a
/// plausible stream), sometimes large jumps, arbitrary payload sizes.
fn ops(data: &[u8], frame: u32) -> Vec<Op> {
    let (mut seq, mut ts) = (0u16, 0u32);
    let quanta = [frame, (frame / 2).max(1), 1, 80];
    (data.chunks_exact(4))
        .map(|c| {
            let [op, a, b, x] = [c[0], c[1], c[2], c[3]];
            if op == 0xFF {
                return Op::Reset;
            }
            if op & 1 == 0 {
                return Op::Tick {
                    after_ms: u64::from(op >> 1) % 41,
                };
            }
            let seq_step = if a >= 0xF0 {
                (i16::from(a & 15) - 8) * 300
            } else {
                i16::from(a & 7) - 2
            };
            seq = seq.wrapping_add(seq_step as u16);
            let quantum = quanta[usize::from(op >> 1 & 3)];
            let ts_step = if b >= 0xF0 {
                (b as i8 as i32) << 24
            } else {
                i32::from(b & 15) - 4
            };
            ts = ts.wrapping_add((ts_step as u32).wrapping_mul(quantum));
            let len =
                [frame as usize, usize::from(x), 0, 2 * frame as usize][usize::from(op >> 3 & 3)];
            Op::Push {
                seq,
                ts,
                len,
                fill: x,
                late_ms: u64::from(op >> 5),
            }
        })
        .collect()
}

/// A jitter-buffer config from one byte.
fn config(sel: u8) -> JitterConfig {
    let pick = |i: u8| usize::from(sel >> i & 3);
    JitterConfig {
        frame_samples: [160, 80, 1, 240][pick(0)],
        min_depth_frames: [1, 2, 3, 10][pick(2)],
        max_depth_frames: [10, 1, 3, 100][pick(4)],
        idle_after_frames: [15, 1, 3, 200][pick(6)],
    }
}

/// What the ticks returned, counted by the checker.
#[derive(Debug, Default)]
struct Tally {
    played: u64,
    concealed: u64,
    none: u64,
    /// Ticks returning `Some` since a packet was last stored.
    some_since_store: u64,
}

/// The jitter buffer and the receiver statistics on one decoded stream.
pub fn check_media(data: &[u8]) {
    let [_, sel, data @ ..] = data else { return };
    let mut jb = JitterBuffer::new(config(*sel));
    let cfg = jb.config();
    let mut rx = ReceiverStats::new(8_000);
    let mut pushed = [false; 256];
    pushed[usize::from(SILENCE)] = true;
    let (t0, mut now) = (Instant::now(), Duration::ZERO);
    let mut tally = Tally::default();
    // Each resume plays a frame after at most max-depth ticks of waiting,
    // and an empty buffer idles after idle_after ticks.
    let bound =
        u64::from(cfg.idle_after_frames + cfg.max_depth_frames * (cfg.max_depth_frames + 1));
    for op in ops(data, cfg.frame_samples) {
        match op {
            Op::Push {
                seq,
                ts,
                len,
                fill,
                late_ms,
            } => {
                pushed[usize::from(fill)] = true;
                let arrival = t0 + now + Duration::from_millis(late_ms);
                let before = jb.stats();
                let verdict = jb.push(seq, ts, &vec![fill; len], arrival);
                check_counted(&before, &jb.stats(), verdict);
                if matches!(verdict, Push::Queued | Push::TooFar) {
                    tally.some_since_store = 0;
                }
                rx.on_packet(seq, ts, arrival);
            }
            Op::Tick { after_ms } => {
                now += Duration::from_millis(after_ms);
                let out = jb.tick(t0 + now);
                check_tick(&jb, out, &pushed, &mut tally);
                assert!(
                    tally.some_since_store <= bound,
                    "{tally:?} {:?}",
                    jb.stats()
                );
            }
            Op::Reset => jb.reset(),
        }
        check_gauges(&jb, &tally);
    }
    check_receiver(&mut rx, t0 + now);
}

/// A push moved exactly its outcome's counter, by one.
fn check_counted(before: &JitterStats, after: &JitterStats, verdict: Push) {
    let delta = |f: fn(&JitterStats) -> u64| f(after) - f(before);
    let moved = [
        (Push::Queued, delta(|s| s.queued)),
        (Push::Late, delta(|s| s.late)),
        (Push::Duplicate, delta(|s| s.duplicates)),
        (Push::TooFar, delta(|s| s.resyncs)),
    ];
    for (outcome, d) in moved {
        assert_eq!(d, u64::from(outcome == verdict), "{verdict:?}");
    }
    assert_eq!(after.received, before.received + 1);
}

fn check_tick(jb: &JitterBuffer, out: Option<Playout>, pushed: &[bool; 256], tally: &mut Tally) {
    let phase = jb.phase();
    match out {
        None => {
            assert!(
                matches!(phase, Phase::Idle | Phase::Prebuffering),
                "{phase:?}"
            );
            tally.none += 1;
            return;
        }
        Some(Playout::Frame(f)) => {
            assert_eq!(f.len(), jb.config().frame_samples as usize);
            assert!(
                f.iter().all(|b| pushed[usize::from(*b)]),
                "a byte never pushed"
            );
            tally.played += 1;
        }
        Some(Playout::Concealed) => tally.concealed += 1,
    }
    assert!(
        matches!(phase, Phase::Playing | Phase::Rebuffering),
        "{phase:?}"
    );
    tally.some_since_store += 1;
}

fn check_gauges(jb: &JitterBuffer, tally: &Tally) {
    let (s, cfg) = (jb.stats(), jb.config());
    assert_eq!(
        s.received,
        s.queued + s.late + s.duplicates + s.resyncs,
        "{s:?}"
    );
    assert_eq!(
        (s.played, s.concealed),
        (tally.played, tally.concealed),
        "{s:?}"
    );
    assert!(s.depth_frames <= s.max_depth_frames && s.max_depth_frames <= cfg.max_depth_frames);
    assert!((cfg.min_depth_frames..=cfg.max_depth_frames).contains(&s.target_depth_frames));
    assert!(s.last_delay <= s.max_delay);
    if jb.phase() == Phase::Idle {
        assert_eq!(s.depth_frames, 0);
    }
}

fn check_receiver(rx: &mut ReceiverStats, now: Instant) {
    let sum = rx.summary();
    assert!(
        sum.duplicates <= sum.received && sum.lost <= sum.expected,
        "{sum:?}"
    );
    assert!(u64::from(sum.restarts) <= sum.ignored, "{sum:?}");
    assert!(
        sum.jitter_ms.is_finite() && sum.jitter_ms >= 0.0 && sum.max_jitter_ms >= sum.jitter_ms
    );
    let block = rx.report_block(1, Some((7, now)), now);
    assert!(
        (-0x80_0000..=0x7F_FFFF).contains(&block.cumulative_lost),
        "{block:?}"
    );
    assert_eq!((block.last_sr, block.delay_since_last_sr), (7, 0));
    let again = rx.report_block(1, None, now);
    assert_eq!(again.fraction_lost, 0, "nothing arrived in between");
    assert_eq!(
        (again.cumulative_lost, again.highest_seq),
        (block.cumulative_lost, block.highest_seq)
    );
}

/// Raw packets to a receiver: five bytes each, a timestamp step then a
/// payload.
pub fn check_dtmf_receiver(data: &[u8]) {
    let mut rx = DtmfReceiver::new();
    let (mut ts, mut previous, mut reported) = (0u32, None, None);
    for c in data.chunks_exact(5) {
        let step = 160 * u32::from(c[0] >> 2);
        ts = match c[0] & 3 {
            0 => ts,
            1 => ts.wrapping_add(step),
            2 => ts.wrapping_sub(step),
            _ => ts ^ u32::from_be_bytes([c[1], c[2], c[3], c[4]]),
        };
        if let Some(digit) = rx.on_packet(ts, &c[1..]) {
            assert_eq!(Some(digit), dtmf::event_digit(c[1]));
            assert_ne!(previous, Some(ts), "a packet of the same event");
            assert_ne!(reported, Some(ts), "reported twice");
            reported = Some(ts);
        }
        previous = Some(ts);
    }
}

/// Events played by `DtmfSender` through an `RtpSender`, any packets
/// lost: one digit per event that had a packet arrive.
pub fn check_dtmf_round_trip(data: &[u8]) {
    let [s0, s1, t0, t1, rest @ ..] = data else {
        return;
    };
    let mut rtp = RtpSender::new(
        9,
        0,
        u16::from_be_bytes([*s0, *s1]),
        u32::from(*t0) << 24 | u32::from(*t1),
    );
    let mut rx = DtmfReceiver::new();
    for pair in rest.chunks_exact(2).take(32) {
        let (event, lost) = (pair[0] & 0x1F, pair[1]);
        let frames = 1 + u16::from(pair[0] >> 5);
        let mut tx = DtmfSender::with_timing(event, 160 * frames, 160);
        let start = rtp.next_timestamp();
        let mut heard = Vec::new();
        let mut arrived = false;
        for (i, datagram) in dtmf::send_all(&mut rtp, 101, &mut tx).iter().enumerate() {
            let p = packet::parse(datagram).expect("our own packet parses");
            assert_eq!((p.header.timestamp, p.header.marker), (start, i == 0));
            if lost >> (i % 8) & 1 == 1 {
                continue;
            }
            arrived = true;
            heard.extend(rx.on_packet(p.header.timestamp, p.payload));
        }
        let expected: Vec<char> = dtmf::event_digit(event)
            .filter(|_| arrived)
            .into_iter()
            .collect();
        assert_eq!(heard, expected, "event {event}, lost mask {lost:#010b}");
        assert!(tx.is_done());
        rtp.skip(160 * u32::from(lost & 3));
    }
}

// ---- the stable smoke twin ----------------------------------------------

#[cfg(test)]
mod smoke {
    use super::*;
    use callgate_test_support::{Mutator, Rng};

    /// The fuzz target's seeds: RTP (plain; CSRCs, extension and padding;
    /// a telephone event) and RTCP (SR + SDES; RR + BYE).
    const SEEDS: [&[u8]; 5] = [
        include_bytes!("../../../../fuzz/seeds/media_rtp/seed-0"),
        include_bytes!("../../../../fuzz/seeds/media_rtp/seed-1"),
        include_bytes!("../../../../fuzz/seeds/media_rtp/seed-2"),
        include_bytes!("../../../../fuzz/seeds/media_rtp/seed-3"),
        include_bytes!("../../../../fuzz/seeds/media_rtp/seed-4"),
    ];
    /// Bytes that steer the parsers: versions, padding/extension bits,
    /// RTCP types, zero and full lengths.
    const TOKENS: &[&str] = &[
        "\u{0}\u{0}",
        "\u{7f}\u{7f}\u{7f}\u{7f}",
        "\u{1}\u{0}\u{0}\u{0}",
        "\u{0}\u{1}",
    ];

    #[test]
    fn the_seeds_are_valid() {
        for seed in &SEEDS[..3] {
            assert!(packet::parse(seed).is_ok() && !packet::is_rtcp(seed));
        }
        for seed in &SEEDS[3..] {
            assert!(packet::is_rtcp(seed));
            assert!(rtcp::parse_compound(seed).unwrap().len() >= 2);
        }
    }

    #[test]
    fn mutated_seeds_keep_the_invariants() {
        let mut m = Mutator::new(0x5eed_0e7b, &SEEDS, TOKENS);
        m.run_bytes(3_000, check);
        check(&[]);
        check(&[0x80]);
    }

    /// Random bytes as media streams and DTMF: the step decoders make
    /// plausible streams of most of them.
    #[test]
    fn random_streams_keep_the_invariants() {
        let mut rng = Rng::new(0x000e_7b1e);
        for _ in 0..300 {
            let n = rng.below(2_000);
            let data = rng.bytes(n);
            check_media(&data);
            check_dtmf_receiver(&data);
            check_dtmf_round_trip(&data);
        }
    }

    /// A clean stream decoded from the op bytes plays every frame.
    #[test]
    fn a_clean_decoded_stream_is_played_whole() {
        // Push (op 0x01: one-frame quantum, frame payload; seq +1, ts +1
        // frame), then tick 20 ms (op 0x28), a hundred times.
        let data: Vec<u8> = [0u8, 0]
            .into_iter()
            .chain([0x01, 3, 5, b'a', 0x28, 0, 0, 0].repeat(100))
            .collect();
        check_media(&data);
        let mut jb = JitterBuffer::new(config(0));
        let t0 = Instant::now();
        let mut played = 0;
        for (k, op) in ops(&data[2..], 160).into_iter().enumerate() {
            match op {
                Op::Push {
                    seq, ts, len, fill, ..
                } => {
                    let at = t0 + Duration::from_millis(10 * k as u64);
                    assert_eq!(jb.push(seq, ts, &vec![fill; len], at), Push::Queued);
                }
                Op::Tick { .. } => {
                    let out = jb.tick(t0 + Duration::from_millis(10 * k as u64));
                    played += usize::from(matches!(out, Some(Playout::Frame(_))));
                }
                Op::Reset => unreachable!(),
            }
        }
        assert_eq!(played, 100);
    }
}
