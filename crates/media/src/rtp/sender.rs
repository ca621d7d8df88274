//! Outbound packetization: one [`RtpSender`] per outbound stream (SSRC)
//! keeps the sequence number and timestamp running across talkspurts,
//! gaps, codec changes and telephone events.
//!
//! Sans-IO: the leg hands in each 20 ms frame and gets the datagram bytes
//! appended to a buffer it owns; sending them is the leg's business.
//!
//! Rules kept (RFC 3550 5.1, RFC 3551 4.1):
//! - the sequence number goes up by one per packet, whatever the payload
//!   type, wrapping at 65535;
//! - the timestamp goes up by the samples sent (one byte per sample for
//!   G.711: [`RtpSender::audio`]) and by the samples *not* sent
//!   ([`RtpSender::skip`]), so it always tracks the audio clock;
//! - the marker is set on the first audio packet of the stream and on the
//!   first of each talkspurt the caller names;
//! - a codec change ([`RtpSender::set_payload_type`]) keeps the SSRC, the
//!   sequence and the timestamp;
//! - a telephone event ([`RtpSender::event`]) takes the next sequence
//!   number but carries the event's start timestamp, unchanged for every
//!   packet of the event (see [`super::dtmf`] for the recipe).

use super::packet::{RtpHeader, write};
use super::rtcp::SenderInfo;

/// What a sender has sent, for its RTCP sender reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SenderStats {
    /// Packets sent (audio and events).
    pub packets: u64,
    /// Payload octets sent, headers excluded (the SR's octet count).
    pub octets: u64,
    /// The RTP timestamp of the last packet sent, if any.
    pub last_timestamp: Option<u32>,
}

impl SenderStats {
    /// The sender-info section of an SR sent at wall-clock `ntp`, whose RTP
    /// time is `rtp_ts` (typically [`RtpSender::next_timestamp`]). The
    /// counts wrap to 32 bits as the field does.
    pub fn sender_info(&self, ntp: u64, rtp_ts: u32) -> SenderInfo {
        SenderInfo {
            ntp,
            rtp_ts,
            packets: self.packets as u32,
            octets: self.octets as u32,
        }
    }
}

/// One outbound RTP stream.
#[derive(Debug, Clone)]
pub struct RtpSender {
    ssrc: u32,
    payload_type: u8,
    /// Sequence number of the next packet.
    seq: u16,
    /// Timestamp of the next audio sample.
    ts: u32,
    /// Whether an audio packet went out (the first one carries the marker).
    started: bool,
    stats: SenderStats,
}

impl RtpSender {
    /// A stream from `ssrc` sending `payload_type`. The caller draws
    /// `ssrc`, `initial_seq` and `initial_ts` at random (RFC 3550 5.1).
    pub fn new(ssrc: u32, payload_type: u8, initial_seq: u16, initial_ts: u32) -> Self {
        RtpSender {
            ssrc,
            payload_type,
            seq: initial_seq,
            ts: initial_ts,
            started: false,
            stats: SenderStats::default(),
        }
    }

    /// Appends one audio packet of G.711 `payload` (one byte per sample)
    /// to `out`. The marker is set on the stream's first packet and when
    /// `talkspurt_start` (audio resumes after a silence not sent).
    pub fn audio(&mut self, payload: &[u8], talkspurt_start: bool, out: &mut Vec<u8>) {
        let samples = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        self.audio_samples(payload, samples, talkspurt_start, out);
    }

    /// [`RtpSender::audio`] for a payload lasting `samples` samples (codecs
    /// other than G.711).
    pub fn audio_samples(
        &mut self,
        payload: &[u8],
        samples: u32,
        talkspurt_start: bool,
        out: &mut Vec<u8>,
    ) {
        let marker = talkspurt_start || !self.started;
        self.send(self.payload_type, self.ts, marker, payload, out);
        self.started = true;
        self.ts = self.ts.wrapping_add(samples);
    }

    /// Advances the timestamp by `samples` without sending: a gap (silence
    /// suppressed, or the frames a telephone event occupied).
    pub fn skip(&mut self, samples: u32) {
        self.ts = self.ts.wrapping_add(samples);
    }

    /// Switches codec (a re-INVITE): same SSRC, sequence and timestamp.
    pub fn set_payload_type(&mut self, pt: u8) {
        self.payload_type = pt;
    }

    /// Appends one telephone-event packet (`payload_type` as negotiated,
    /// e.g. 101) stamped `event_ts`, the event's start. The sequence
    /// advances; the timestamp does not (skip the frames the event spans).
    pub fn event(
        &mut self,
        payload_type: u8,
        event_ts: u32,
        marker: bool,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) {
        self.send(payload_type, event_ts, marker, payload, out);
    }

    fn send(
        &mut self,
        payload_type: u8,
        timestamp: u32,
        marker: bool,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) {
        let header = RtpHeader {
            marker,
            payload_type,
            sequence: self.seq,
            timestamp,
            ssrc: self.ssrc,
        };
        write(&header, payload, out);
        self.seq = self.seq.wrapping_add(1);
        self.stats.packets += 1;
        self.stats.octets += payload.len() as u64;
        self.stats.last_timestamp = Some(timestamp);
    }

    /// The sequence number the next packet will carry.
    pub fn next_sequence(&self) -> u16 {
        self.seq
    }

    /// The timestamp of the next audio sample.
    pub fn next_timestamp(&self) -> u32 {
        self.ts
    }

    /// This stream's SSRC.
    pub fn ssrc(&self) -> u32 {
        self.ssrc
    }

    /// The audio payload type now.
    pub fn payload_type(&self) -> u8 {
        self.payload_type
    }

    /// What has been sent.
    pub fn stats(&self) -> SenderStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::super::packet::{RtpPacket, parse};
    use super::*;

    fn sent(out: &[u8]) -> RtpPacket<'_> {
        parse(out).unwrap()
    }

    /// Sends one packet through `f` and returns its header.
    fn one(s: &mut RtpSender, f: impl FnOnce(&mut RtpSender, &mut Vec<u8>)) -> RtpHeader {
        let mut out = Vec::new();
        f(s, &mut out);
        sent(&out).header
    }

    #[test]
    fn sequence_timestamp_and_marker_run_on() {
        let mut s = RtpSender::new(0xABCD, 0, 65_534, u32::MAX - 159);
        let frame = [0xFFu8; 160];
        let h = one(&mut s, |s, o| s.audio(&frame, false, o));
        assert_eq!(
            (h.marker, h.sequence, h.timestamp, h.ssrc),
            (true, 65_534, u32::MAX - 159, 0xABCD)
        );
        let h = one(&mut s, |s, o| s.audio(&frame, false, o));
        assert_eq!((h.marker, h.sequence, h.timestamp), (false, 65_535, 0));
        // A gap of 5 frames, then a new talkspurt.
        s.skip(800);
        let h = one(&mut s, |s, o| s.audio(&frame, true, o));
        assert_eq!((h.marker, h.sequence, h.timestamp), (true, 0, 960));
        let st = s.stats();
        assert_eq!(
            (st.packets, st.octets, st.last_timestamp),
            (3, 480, Some(960))
        );
        assert_eq!((s.next_sequence(), s.next_timestamp()), (1, 1_120));
    }

    #[test]
    fn a_codec_change_keeps_ssrc_sequence_and_timestamp() {
        let mut s = RtpSender::new(7, 0, 100, 1_000);
        let h = one(&mut s, |s, o| s.audio(&[0xFF; 160], false, o));
        assert_eq!((h.payload_type, h.sequence, h.timestamp), (0, 100, 1_000));
        s.set_payload_type(8);
        let h = one(&mut s, |s, o| s.audio(&[0xD5; 160], false, o));
        assert_eq!(
            (h.payload_type, h.sequence, h.timestamp, h.ssrc, h.marker),
            (8, 101, 1_160, 7, false)
        );
        assert_eq!(s.payload_type(), 8);
    }

    #[test]
    fn events_take_sequence_numbers_but_keep_their_timestamp() {
        let mut s = RtpSender::new(7, 0, 10, 0);
        one(&mut s, |s, o| s.audio(&[0xFF; 160], false, o));
        let start = s.next_timestamp();
        for k in 0..3u16 {
            let h = one(&mut s, |s, o| {
                s.event(101, start, k == 0, &[5, 0, 0, 160], o)
            });
            assert_eq!(
                (h.payload_type, h.sequence, h.timestamp),
                (101, 11 + k, 160)
            );
            assert_eq!(h.marker, k == 0);
            s.skip(160);
        }
        let h = one(&mut s, |s, o| s.audio(&[0xFF; 160], false, o));
        assert_eq!(
            (h.payload_type, h.sequence, h.timestamp, h.marker),
            (0, 14, 640, false)
        );
        let info = s.stats().sender_info(42, s.next_timestamp());
        assert_eq!((info.packets, info.octets, info.rtp_ts), (5, 332, 800));
    }

    #[test]
    fn other_codecs_advance_by_their_samples() {
        let mut s = RtpSender::new(1, 9, 0, 0);
        let h = one(&mut s, |s, o| s.audio_samples(&[0; 160], 320, false, o));
        assert_eq!(h.timestamp, 0);
        assert_eq!(s.next_timestamp(), 320);
    }
}
