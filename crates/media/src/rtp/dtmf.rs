//! RFC 4733 telephone events (DTMF over RTP): the payload, a receiver that
//! reports each digit once, and a sender that plays one digit.
//!
//! A digit travels as a run of packets sharing one RTP timestamp (the
//! event's start) with a growing duration, the last ones flagged *end*
//! and sent three times (RFC 4733 2.5.1.4). Any of them may be lost,
//! so [`DtmfReceiver`] reports a digit on the first packet it sees of an
//! event — a new timestamp — whether that is the first packet, a later
//! one or an end packet, and ignores the rest of the event, its
//! retransmitted end packets and any stale packet of an earlier event.
//!
//! Sending, with an [`RtpSender`] `rtp` and the
//! negotiated telephone-event payload type (say 101), once per 20 ms tick
//! in place of the audio frame:
//!
//! ```
//! use media::rtp::{dtmf::{DtmfSender, digit_event}, sender::RtpSender};
//!
//! let mut rtp = RtpSender::new(0x1234, 0, 1, 0);
//! let start = rtp.next_timestamp();
//! let mut dtmf = DtmfSender::new(digit_event('5').unwrap());
//! let mut datagrams = Vec::new();
//! while let Some(p) = dtmf.next_packet() {
//!     let mut out = Vec::new();
//!     rtp.event(101, start, p.marker, &p.payload, &mut out);
//!     rtp.skip(160); // the audio clock runs on during the event
//!     datagrams.push(out);
//! }
//! assert_eq!(datagrams.len(), 4 + 3); // 100 ms of event, then 3 ends
//! ```

use super::sender::RtpSender;

/// A digit lasts this long unless told otherwise: 100 ms at 8 kHz.
pub const DEFAULT_DURATION_SAMPLES: u16 = 800;
/// The volume field sent: −10 dBm0.
pub const DEFAULT_VOLUME: u8 = 10;
/// How many times the end packet is sent (RFC 4733 2.5.1.4).
pub const END_REPEATS: u8 = 3;
/// An unended event this long may continue in a new segment with a new
/// timestamp (RFC 4733 2.5.1.3); that segment is not a new digit.
pub const LONG_EVENT_SAMPLES: u16 = u16::MAX - 1_000;

/// The 4-byte telephone-event payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TelephoneEvent {
    /// The event code: 0..=9, 10 = `*`, 11 = `#`, 12..=15 = A..D.
    pub event: u8,
    /// The E bit: the event has ended.
    pub end: bool,
    /// Power level as −dBm0, 0..=63.
    pub volume: u8,
    /// Duration so far, in timestamp units.
    pub duration: u16,
}

impl TelephoneEvent {
    /// The payload bytes (the reserved bit zero, the volume cut to 6 bits).
    pub fn to_bytes(&self) -> [u8; 4] {
        let [hi, lo] = self.duration.to_be_bytes();
        [
            self.event,
            u8::from(self.end) << 7 | (self.volume & 0x3F),
            hi,
            lo,
        ]
    }
}

/// Reads a telephone-event payload; `None` if shorter than 4 bytes. Bytes
/// after the first 4 are ignored.
pub fn parse_event(payload: &[u8]) -> Option<TelephoneEvent> {
    let &[event, flags, hi, lo] = payload.first_chunk::<4>()?;
    Some(TelephoneEvent {
        event,
        end: flags & 0x80 != 0,
        volume: flags & 0x3F,
        duration: u16::from_be_bytes([hi, lo]),
    })
}

/// The DTMF digit of an event code: `0`-`9`, `*`, `#`, `A`-`D`.
pub fn event_digit(event: u8) -> Option<char> {
    const DIGITS: &[u8; 16] = b"0123456789*#ABCD";
    DIGITS.get(usize::from(event)).map(|&d| char::from(d))
}

/// The event code of a DTMF digit (`a`-`d` accepted too).
pub fn digit_event(c: char) -> Option<u8> {
    let c = c.to_ascii_uppercase();
    (0..16u8).find(|&e| event_digit(e) == Some(c))
}

/// The event being received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Current {
    ts: u32,
    event: u8,
    ended: bool,
    longest: u16,
}

/// Reports each digit of an inbound telephone-event stream once.
#[derive(Debug, Clone, Default)]
pub struct DtmfReceiver {
    current: Option<Current>,
    /// The timestamp of the last digit reported: never reported again,
    /// even if timestamps wrapped all the way round to it.
    reported: Option<u32>,
}

impl DtmfReceiver {
    /// A receiver that has seen no event.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accounts one telephone-event packet; the digit if this packet is
    /// the first seen of a new event. Malformed payloads and events that
    /// are not digits (flash, tones) report nothing.
    pub fn on_packet(&mut self, rtp_ts: u32, payload: &[u8]) -> Option<char> {
        let ev = parse_event(payload)?;
        match &mut self.current {
            Some(cur) if cur.ts == rtp_ts => {
                cur.ended |= ev.end;
                cur.longest = cur.longest.max(ev.duration);
                return None;
            }
            Some(cur) if (rtp_ts.wrapping_sub(cur.ts) as i32) < 0 => return None,
            _ => {}
        }
        let continues = self.current.is_some_and(|cur| {
            !cur.ended && cur.event == ev.event && cur.longest >= LONG_EVENT_SAMPLES
        });
        self.current = Some(Current {
            ts: rtp_ts,
            event: ev.event,
            ended: ev.end,
            longest: ev.duration,
        });
        if continues || self.reported == Some(rtp_ts) {
            return None;
        }
        let digit = event_digit(ev.event)?;
        self.reported = Some(rtp_ts);
        Some(digit)
    }

    /// Forgets the current event (a new SSRC: timestamps start afresh).
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

/// One packet of an outbound event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DtmfPacket {
    /// The telephone-event payload.
    pub payload: [u8; 4],
    /// Set on the event's first packet.
    pub marker: bool,
    /// Whether this is one of the end packets.
    pub end: bool,
}

/// Plays one event as packets, one per frame tick: durations growing by a
/// frame (at the same RTP timestamp, marker on the first), then the end
/// packet [`END_REPEATS`] times.
#[derive(Debug, Clone)]
pub struct DtmfSender {
    event: u8,
    volume: u8,
    duration: u16,
    frame: u16,
    /// Packets handed out so far.
    sent: u16,
}

impl DtmfSender {
    /// Event `event` for [`DEFAULT_DURATION_SAMPLES`] in 160-sample frames.
    pub fn new(event: u8) -> Self {
        Self::with_timing(event, DEFAULT_DURATION_SAMPLES, 160)
    }

    /// Event `event` lasting `duration_samples`, one packet per
    /// `frame_samples` (both at least 1).
    pub fn with_timing(event: u8, duration_samples: u16, frame_samples: u16) -> Self {
        DtmfSender {
            event,
            volume: DEFAULT_VOLUME,
            duration: duration_samples.max(1),
            frame: frame_samples.max(1),
            sent: 0,
        }
    }

    /// Packets before the end packets: one per frame of the duration, less
    /// the last frame, which the end packet reports.
    fn progress_packets(&self) -> u16 {
        self.duration.div_ceil(self.frame) - 1
    }

    /// The packet for this tick, or `None` once the event is over.
    pub fn next_packet(&mut self) -> Option<DtmfPacket> {
        let progress = self.progress_packets();
        if self.sent >= progress + u16::from(END_REPEATS) {
            return None;
        }
        let end = self.sent >= progress;
        let duration = if end {
            self.duration
        } else {
            (self.sent + 1) * self.frame
        };
        let ev = TelephoneEvent {
            event: self.event,
            end,
            volume: self.volume,
            duration,
        };
        let marker = self.sent == 0;
        self.sent += 1;
        Some(DtmfPacket {
            payload: ev.to_bytes(),
            marker,
            end,
        })
    }

    /// Whether every packet has been handed out.
    pub fn is_done(&self) -> bool {
        self.sent >= self.progress_packets() + u16::from(END_REPEATS)
    }
}

/// Sends a whole event through `rtp` at its next timestamp, one datagram
/// per frame, skipping the audio clock a frame per packet; for tests and
/// tools that do not pace.
pub fn send_all(rtp: &mut RtpSender, payload_type: u8, dtmf: &mut DtmfSender) -> Vec<Vec<u8>> {
    let start = rtp.next_timestamp();
    let frame = u32::from(dtmf.frame);
    std::iter::from_fn(|| dtmf.next_packet())
        .map(|p| {
            let mut out = Vec::new();
            rtp.event(payload_type, start, p.marker, &p.payload, &mut out);
            rtp.skip(frame);
            out
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::packet::parse;
    use super::*;

    #[test]
    fn digits_and_events_map_both_ways() {
        let all: String = (0..16).filter_map(event_digit).collect();
        assert_eq!(all, "0123456789*#ABCD");
        assert_eq!(event_digit(16), None);
        for (i, c) in all.chars().enumerate() {
            assert_eq!(digit_event(c), Some(i as u8));
        }
        assert_eq!(digit_event('d'), Some(15));
        assert_eq!(digit_event('E'), None);
    }

    #[test]
    fn the_payload_round_trips() {
        let ev = TelephoneEvent {
            event: 11,
            end: true,
            volume: 10,
            duration: 800,
        };
        assert_eq!(ev.to_bytes(), [11, 0x8A, 0x03, 0x20]);
        assert_eq!(parse_event(&ev.to_bytes()), Some(ev));
        assert_eq!(parse_event(&[1, 2, 3]), None);
        // The reserved bit is ignored.
        assert_eq!(
            parse_event(&[1, 0x40, 0, 0]).map(|e| (e.end, e.volume)),
            Some((false, 0))
        );
    }

    #[test]
    fn a_digit_is_sent_as_growing_packets_then_three_ends() {
        let mut d = DtmfSender::new(5);
        let packets: Vec<_> = std::iter::from_fn(|| d.next_packet()).collect();
        assert!(d.is_done());
        let events: Vec<_> = packets
            .iter()
            .map(|p| parse_event(&p.payload).unwrap())
            .collect();
        let durations: Vec<u16> = events.iter().map(|e| e.duration).collect();
        assert_eq!(durations, [160, 320, 480, 640, 800, 800, 800]);
        let ends: Vec<bool> = events.iter().map(|e| e.end).collect();
        assert_eq!(ends, [false, false, false, false, true, true, true]);
        let markers: Vec<bool> = packets.iter().map(|p| p.marker).collect();
        assert_eq!(markers, [true, false, false, false, false, false, false]);
        assert!(
            events
                .iter()
                .all(|e| e.event == 5 && e.volume == DEFAULT_VOLUME)
        );
        // Shorter than a frame: only the end packets, the first marked.
        let mut short = DtmfSender::with_timing(1, 100, 160);
        let p: Vec<_> = std::iter::from_fn(|| short.next_packet()).collect();
        assert_eq!(p.len(), 3);
        assert!(p[0].marker && p.iter().all(|p| p.end));
    }

    fn wire(ts: u32, event: u8, duration: u16, end: bool) -> (u32, [u8; 4]) {
        (
            ts,
            TelephoneEvent {
                event,
                end,
                volume: 10,
                duration,
            }
            .to_bytes(),
        )
    }

    fn receive(rx: &mut DtmfReceiver, packets: &[(u32, [u8; 4])]) -> String {
        packets
            .iter()
            .filter_map(|(ts, p)| rx.on_packet(*ts, p))
            .collect()
    }

    #[test]
    fn each_digit_is_reported_once_despite_retransmitted_ends() {
        let mut rtp = RtpSender::new(1, 0, 0, 1_000);
        let mut rx = DtmfReceiver::new();
        let mut digits = String::new();
        for c in ['1', '1', '#'] {
            let mut tx = DtmfSender::new(digit_event(c).unwrap());
            for datagram in send_all(&mut rtp, 101, &mut tx) {
                let p = parse(&datagram).unwrap();
                digits.extend(rx.on_packet(p.header.timestamp, p.payload));
            }
        }
        assert_eq!(digits, "11#", "a repeated digit has a new timestamp");
    }

    #[test]
    fn a_digit_whose_first_packets_were_lost_is_reported_on_what_arrives() {
        let mut rx = DtmfReceiver::new();
        let later = [wire(160, 3, 480, false), wire(160, 3, 800, true)];
        assert_eq!(receive(&mut rx, &later), "3");
        let only_ends = [wire(960, 4, 800, true), wire(960, 4, 800, true)];
        assert_eq!(receive(&mut rx, &only_ends), "4");
    }

    #[test]
    fn stale_packets_and_non_digits_report_nothing() {
        let mut rx = DtmfReceiver::new();
        let packets = [
            wire(1_000, 7, 160, false),
            wire(2_000, 8, 160, false),
            wire(1_000, 7, 800, true),   // the first event's late end
            wire(3_000, 16, 160, false), // flash
        ];
        assert_eq!(receive(&mut rx, &packets), "78");
        assert_eq!(rx.on_packet(4_000, &[1, 2]), None);
        rx.reset();
        assert_eq!(receive(&mut rx, &[wire(5, 9, 160, false)]), "9");
    }

    #[test]
    fn a_long_event_continuing_in_a_new_segment_is_one_digit() {
        let mut rx = DtmfReceiver::new();
        let packets = [
            wire(0, 2, 1_600, false),
            wire(0, 2, u16::MAX, false),
            wire(65_535, 2, 160, false), // the next segment
            wire(65_535, 2, 800, true),
            wire(70_000, 2, 160, false), // a new press of the same key
        ];
        assert_eq!(receive(&mut rx, &packets), "22");
    }
}
