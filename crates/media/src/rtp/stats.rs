//! RFC 3550 receiver statistics for one source: sequence validation with
//! extended sequence numbers (appendix A.1), expected/lost/fraction lost
//! (A.3) and interarrival jitter (A.8), turned into RTCP report blocks.
//!
//! Sans-IO: the leg calls [`ReceiverStats::on_packet`] with each packet's
//! sequence number, RTP timestamp and arrival `Instant`, and
//! [`ReceiverStats::report_block`] when it sends an RTCP report.
//!
//! Policies, where the RFC leaves a choice:
//! - **No probation.** A.1 holds a new source on probation for
//!   `MIN_SEQUENTIAL` packets; a SIP leg has exactly one negotiated source,
//!   so the first packet starts the count (probation would only leave it
//!   out). The rest of A.1 is kept: a jump of more than
//!   [`MAX_DROPOUT`] ahead (or more than [`MAX_MISORDER`] behind) is set
//!   aside, and the stream restarts from the next packet only if that one
//!   follows the jump (the peer restarted its sequence).
//! - **Duplicates** count as received, as the RFC says, so the cumulative
//!   loss can go negative (clamped to the 24-bit signed field). They are
//!   also recognised within [`DUP_WINDOW`] packets of the highest, so the
//!   call summary can report loss as expected minus *distinct* packets.
//! - **Jitter** uses the RFC's integer estimator (`J += |D| - J/16`, kept
//!   ×16), on packets the sequence check accepted and not on duplicates.
//!   Arrival is converted to timestamp units from the first arrival; the
//!   transit reference restarts with the sequence.
//! - **Totals across restarts**: a report block describes the current
//!   sequence epoch (as A.1 resets on restart), [`ReceiveSummary`] the
//!   whole call.

use std::time::{Duration, Instant};

use super::rtcp::ReportBlock;
use crate::transit::DeltaHistogram;

/// A.1: a jump forward by this many packets or more is not a loss burst.
pub const MAX_DROPOUT: u16 = 3_000;
/// A.1: a packet this many behind the highest or fewer is reordered.
pub const MAX_MISORDER: u16 = 100;
/// Duplicates are recognised this many packets behind the highest.
pub const DUP_WINDOW: u32 = 128;

/// Loss and jitter figures for the call summary, across sequence restarts.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ReceiveSummary {
    /// Packets the sequence check counted, duplicates included (RFC 3550).
    pub received: u64,
    /// Packets expected from the sequence numbers seen.
    pub expected: u64,
    /// Expected minus distinct packets received; never negative.
    pub lost: u64,
    /// Packets recognised as duplicates (within [`DUP_WINDOW`]).
    pub duplicates: u64,
    /// Packets set aside by the sequence check (an unconfirmed jump).
    pub ignored: u64,
    /// Times the peer restarted its sequence numbers.
    pub restarts: u32,
    /// The current interarrival jitter, in milliseconds.
    pub jitter_ms: f64,
    /// The largest jitter estimate seen, in milliseconds.
    pub max_jitter_ms: f64,
    /// The 95th percentile of the per-packet transit difference `|D|`, in
    /// milliseconds (see [`crate::transit`]); `None` before two packets.
    pub jitter_p95_ms: Option<f64>,
}

/// The per-source receiver state of RFC 3550 appendix A.
#[derive(Debug, Clone)]
pub struct ReceiverStats {
    clock_rate: u32,
    seq: Sequence,
    jitter: InterarrivalJitter,
    /// Expected and received of the epochs before the last restart.
    earlier: (u64, u64),
    duplicates: u64,
    ignored: u64,
    restarts: u32,
    /// `|D|` of every counted packet, for the percentile.
    deltas: DeltaHistogram,
}

/// Sequence state: nothing received yet, or an A.1 epoch.
#[derive(Debug, Clone)]
enum Sequence {
    Empty,
    Tracking(Epoch),
}

/// A.1 `source` fields for one run of sequence numbers.
#[derive(Debug, Clone)]
struct Epoch {
    base_seq: u16,
    max_seq: u16,
    /// Wraps of the 16-bit sequence (A.1 keeps `cycles << 16`).
    cycles: u64,
    /// The sequence number that would confirm a jump.
    bad_seq: Option<u16>,
    received: u64,
    expected_prior: u64,
    received_prior: u64,
    /// Bit `i`: the packet `i` behind the extended highest was seen.
    seen: u128,
}

/// What the sequence check made of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Counted,
    Duplicate,
    Ignored,
    Restarted,
}

impl Epoch {
    fn new(seq: u16) -> Self {
        Epoch {
            base_seq: seq,
            max_seq: seq,
            cycles: 0,
            bad_seq: None,
            received: 1,
            expected_prior: 0,
            received_prior: 0,
            seen: 1,
        }
    }

    fn extended_max(&self) -> u64 {
        (self.cycles << 16) + u64::from(self.max_seq)
    }

    fn expected(&self) -> u64 {
        self.extended_max() + 1 - u64::from(self.base_seq)
    }

    /// A.1 `update_seq` (without probation), recording duplicates.
    fn update(&mut self, seq: u16) -> Verdict {
        let udelta = seq.wrapping_sub(self.max_seq);
        if udelta < MAX_DROPOUT {
            if seq < self.max_seq {
                self.cycles += 1;
            }
            self.max_seq = seq;
            self.seen = self.seen.checked_shl(u32::from(udelta)).unwrap_or(0);
            self.count(0)
        } else if udelta <= u16::MAX - MAX_MISORDER + 1 {
            if self.bad_seq == Some(seq) {
                return Verdict::Restarted;
            }
            self.bad_seq = Some(seq.wrapping_add(1));
            Verdict::Ignored
        } else {
            self.count(u32::from(self.max_seq.wrapping_sub(seq)))
        }
    }

    /// Counts a packet `behind` the highest, noting whether it was seen.
    fn count(&mut self, behind: u32) -> Verdict {
        self.received += 1;
        if behind >= DUP_WINDOW {
            return Verdict::Counted;
        }
        let bit = 1u128 << behind;
        let seen = self.seen & bit != 0;
        self.seen |= bit;
        if seen {
            Verdict::Duplicate
        } else {
            Verdict::Counted
        }
    }
}

/// The RFC 3550 A.8 interarrival jitter estimator (integer form: the
/// estimate is kept ×16), shared by [`ReceiverStats`] and the jitter
/// buffer. Arrival times are converted to timestamp units from the first
/// arrival seen.
#[derive(Debug, Clone, Default)]
pub(crate) struct InterarrivalJitter {
    /// Arrival times are measured from the first one.
    epoch: Option<Instant>,
    /// The previous packet's relative transit time.
    transit: Option<u32>,
    q4: u64,
    max_q4: u64,
}

impl InterarrivalJitter {
    /// Accounts one packet stamped `rtp_ts` arriving at `arrival`, on a
    /// clock of `clock_rate` units per second.
    /// Returns `|D|` in timestamp units, when there was a packet before.
    pub(crate) fn on_arrival(
        &mut self,
        rtp_ts: u32,
        arrival: Instant,
        clock_rate: u32,
    ) -> Option<u64> {
        let epoch = *self.epoch.get_or_insert(arrival);
        let since = arrival.saturating_duration_since(epoch).as_nanos();
        // Truncating to 32 bits wraps like an RTP clock would.
        let units = (since * u128::from(clock_rate) / 1_000_000_000) as u32;
        let transit = units.wrapping_sub(rtp_ts);
        let prev = self.transit.replace(transit)?;
        let d = u64::from((transit.wrapping_sub(prev) as i32).unsigned_abs());
        self.q4 = self.q4 + d - ((self.q4 + 8) >> 4);
        self.max_q4 = self.max_q4.max(self.q4);
        Some(d)
    }

    /// Forgets the transit reference (a new timestamp base), keeping the
    /// estimate: the network did not change.
    pub(crate) fn restart(&mut self) {
        self.transit = None;
    }

    /// The estimate ×16, in timestamp units.
    pub(crate) fn q4(&self) -> u64 {
        self.q4
    }

    /// The report-block value: timestamp units.
    fn units(&self) -> u32 {
        u32::try_from(self.q4 >> 4).unwrap_or(u32::MAX)
    }
}

impl ReceiverStats {
    /// Statistics for a source whose RTP clock runs at `clock_rate` Hz
    /// (8 000 for G.711). A rate of 0 is taken as 1.
    pub fn new(clock_rate: u32) -> Self {
        ReceiverStats {
            clock_rate: clock_rate.max(1),
            seq: Sequence::Empty,
            jitter: InterarrivalJitter::default(),
            earlier: (0, 0),
            duplicates: 0,
            ignored: 0,
            restarts: 0,
            deltas: DeltaHistogram::default(),
        }
    }

    /// Accounts one received audio packet: its sequence number, RTP
    /// timestamp and arrival time (converted to timestamp units for the
    /// jitter estimate).
    pub fn on_packet(&mut self, seq: u16, rtp_ts: u32, arrival: Instant) {
        let d = match self.on_sequence(seq) {
            Verdict::Counted => self.jitter.on_arrival(rtp_ts, arrival, self.clock_rate),
            Verdict::Restarted => {
                self.jitter.restart();
                self.jitter.on_arrival(rtp_ts, arrival, self.clock_rate)
            }
            Verdict::Duplicate | Verdict::Ignored => None,
        };
        if let Some(units) = d {
            let nanos = u128::from(units) * 1_000_000_000 / u128::from(self.clock_rate);
            self.deltas.record(Duration::from_nanos(
                u64::try_from(nanos).unwrap_or(u64::MAX),
            ));
        }
    }

    /// Accounts a packet's sequence number only. For RFC 4733
    /// telephone-event packets: they share the audio's sequence space but
    /// repeat one timestamp for a whole event, which would read as jitter.
    pub fn on_event_packet(&mut self, seq: u16) {
        if self.on_sequence(seq) == Verdict::Restarted {
            self.jitter.restart();
        }
    }

    fn on_sequence(&mut self, seq: u16) -> Verdict {
        let verdict = match &mut self.seq {
            Sequence::Empty => {
                self.seq = Sequence::Tracking(Epoch::new(seq));
                return Verdict::Counted;
            }
            Sequence::Tracking(epoch) => epoch.update(seq),
        };
        match verdict {
            Verdict::Duplicate => self.duplicates += 1,
            Verdict::Ignored => self.ignored += 1,
            Verdict::Restarted => self.restart(seq),
            Verdict::Counted => {}
        }
        verdict
    }

    /// A.1 `init_seq` after a confirmed jump: the old epoch goes to the
    /// totals.
    fn restart(&mut self, seq: u16) {
        if let Sequence::Tracking(old) = &self.seq {
            self.earlier.0 += old.expected();
            self.earlier.1 += old.received;
        }
        self.seq = Sequence::Tracking(Epoch::new(seq));
        self.restarts += 1;
    }

    /// The report block about this source for an RTCP SR or RR sent at
    /// `now`, and the start of the next reporting interval (the fraction
    /// lost is measured since the previous call). `last_sr` is the middle
    /// 32 bits of the NTP time of the last sender report received from the
    /// source and when it arrived ([`super::rtcp::ntp_middle`]).
    pub fn report_block(
        &mut self,
        ssrc: u32,
        last_sr: Option<(u32, Instant)>,
        now: Instant,
    ) -> ReportBlock {
        let (last_sr, delay_since_last_sr) = match last_sr {
            Some((lsr, at)) => (lsr, dlsr(now.saturating_duration_since(at))),
            None => (0, 0),
        };
        let mut block = ReportBlock {
            ssrc,
            fraction_lost: 0,
            cumulative_lost: 0,
            highest_seq: 0,
            jitter: self.jitter.units(),
            last_sr,
            delay_since_last_sr,
        };
        if let Sequence::Tracking(epoch) = &mut self.seq {
            fill_loss(epoch, &mut block);
        }
        block
    }

    /// The whole call's figures so far.
    pub fn summary(&self) -> ReceiveSummary {
        let (mut expected, mut received) = self.earlier;
        if let Sequence::Tracking(epoch) = &self.seq {
            expected += epoch.expected();
            received += epoch.received;
        }
        let per_ms = f64::from(self.clock_rate) * 16.0 / 1_000.0;
        ReceiveSummary {
            received,
            expected,
            lost: expected.saturating_sub(received.saturating_sub(self.duplicates)),
            duplicates: self.duplicates,
            ignored: self.ignored,
            restarts: self.restarts,
            jitter_ms: self.jitter.q4 as f64 / per_ms,
            max_jitter_ms: self.jitter.max_q4 as f64 / per_ms,
            jitter_p95_ms: self.deltas.p95().map(|d| d.as_secs_f64() * 1_000.0),
        }
    }
}

/// A.3: cumulative and interval loss, and the extended highest sequence.
fn fill_loss(epoch: &mut Epoch, block: &mut ReportBlock) {
    let expected = epoch.expected();
    let expected_interval = expected - epoch.expected_prior;
    let received_interval = epoch.received - epoch.received_prior;
    epoch.expected_prior = expected;
    epoch.received_prior = epoch.received;
    let lost_interval = i128::from(expected_interval) - i128::from(received_interval);
    block.fraction_lost = if expected_interval == 0 || lost_interval <= 0 {
        0
    } else {
        ((lost_interval << 8) / i128::from(expected_interval)).min(255) as u8
    };
    block.cumulative_lost = clamp_lost(i128::from(expected) - i128::from(epoch.received));
    block.highest_seq = epoch.extended_max() as u32;
}

/// The cumulative loss as the 24-bit signed field holds it.
pub(crate) fn clamp_lost(lost: i128) -> i32 {
    lost.clamp(-0x80_0000, 0x7F_FFFF) as i32
}

/// A delay in units of 1/65536 s, saturating.
fn dlsr(delay: Duration) -> u32 {
    u32::try_from(delay.as_nanos() * 65_536 / 1_000_000_000).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Packets `seqs` of 20 ms (160 samples) each, arriving on time.
    fn feed(stats: &mut ReceiverStats, t0: Instant, seqs: &[u16]) {
        for &seq in seqs {
            let k = u64::from(seq.wrapping_sub(seqs[0]));
            stats.on_packet(seq, 160 * k as u32, t0 + ms(20 * k));
        }
    }

    #[test]
    fn a_clean_stream_reports_no_loss_and_no_jitter() {
        let t0 = Instant::now();
        let mut s = ReceiverStats::new(8_000);
        feed(&mut s, t0, &[100, 101, 102, 103, 104]);
        let b = s.report_block(7, None, t0 + ms(100));
        assert_eq!(
            b,
            ReportBlock {
                ssrc: 7,
                fraction_lost: 0,
                cumulative_lost: 0,
                highest_seq: 104,
                jitter: 0,
                last_sr: 0,
                delay_since_last_sr: 0,
            }
        );
    }

    /// 100, 101, 103, 102, 105 (104 lost): expected 105 - 100 + 1 = 6,
    /// received 5, lost 1, fraction 256 × 1 / 6 = 42.
    #[test]
    fn a_lost_and_a_reordered_packet_are_reported_per_rfc_3550_a3() {
        let t0 = Instant::now();
        let mut s = ReceiverStats::new(8_000);
        feed(&mut s, t0, &[100, 101, 103, 102, 105]);
        let b = s.report_block(1, None, t0);
        assert_eq!(
            (b.fraction_lost, b.cumulative_lost, b.highest_seq),
            (42, 1, 105)
        );
        // Next interval: 106 and 107 both arrive; nothing new lost.
        s.on_packet(106, 960, t0 + ms(120));
        s.on_packet(107, 1_120, t0 + ms(140));
        let b = s.report_block(1, None, t0);
        assert_eq!(
            (b.fraction_lost, b.cumulative_lost, b.highest_seq),
            (0, 1, 107)
        );
        let sum = s.summary();
        assert_eq!((sum.received, sum.expected, sum.lost), (7, 8, 1));
    }

    #[test]
    fn the_extended_sequence_counts_wraps() {
        let t0 = Instant::now();
        let mut s = ReceiverStats::new(8_000);
        feed(&mut s, t0, &[65_534, 65_535, 0, 1]);
        let b = s.report_block(1, None, t0);
        assert_eq!(b.highest_seq, 65_536 + 1);
        assert_eq!(b.cumulative_lost, 0);
        // A reordered packet from before the wrap is not a new cycle.
        s.on_packet(65_535, 160, t0 + ms(20));
        assert_eq!(s.report_block(1, None, t0).highest_seq, 65_537);
    }

    /// Duplicates count as received, so the loss can be negative; the
    /// summary's loss counts distinct packets and never goes below zero.
    #[test]
    fn duplicates_make_the_cumulative_loss_negative() {
        let t0 = Instant::now();
        let mut s = ReceiverStats::new(8_000);
        for seq in [10, 11, 11, 12, 12] {
            s.on_packet(seq, 0, t0);
        }
        let b = s.report_block(1, None, t0);
        assert_eq!((b.cumulative_lost, b.fraction_lost), (-2, 0));
        let sum = s.summary();
        assert_eq!(
            (sum.received, sum.expected, sum.duplicates, sum.lost),
            (5, 3, 2, 0)
        );
        // One packet lost among the duplicates: cumulative -1, summary 1.
        s.on_packet(14, 0, t0);
        assert_eq!(s.report_block(1, None, t0).cumulative_lost, -1);
        assert_eq!(s.summary().lost, 1);
    }

    #[test]
    fn the_cumulative_loss_clamps_to_24_bits() {
        assert_eq!(clamp_lost(0x80_0000), 0x7F_FFFF);
        assert_eq!(clamp_lost(-0x80_0001), -0x80_0000);
        assert_eq!(clamp_lost(-5), -5);
        let t0 = Instant::now();
        let mut s = ReceiverStats::new(8_000);
        let mut seq = 0u16;
        for _ in 0..3_000 {
            s.on_packet(seq, 0, t0);
            seq = seq.wrapping_add(MAX_DROPOUT - 1);
        }
        assert_eq!(s.report_block(1, None, t0).cumulative_lost, 0x7F_FFFF);
        assert!(s.summary().lost > 0x7F_FFFF);
    }

    /// One packet 10 ms (80 units) late, then back on time: |D| = 80 twice.
    /// J = 0 + 80 - 0 = 80, then 80 + 80 - (88 >> 4) = 155 (×16): 5, 9.
    #[test]
    fn jitter_follows_the_rfc_3550_a8_estimator() {
        let t0 = Instant::now();
        let mut s = ReceiverStats::new(8_000);
        s.on_packet(1, 0, t0);
        s.on_packet(2, 160, t0 + ms(30));
        assert_eq!(s.report_block(1, None, t0).jitter, 5);
        s.on_packet(3, 320, t0 + ms(40));
        assert_eq!(s.report_block(1, None, t0).jitter, 9);
        let sum = s.summary();
        assert!((sum.jitter_ms - 155.0 / 16.0 / 8.0).abs() < 1e-9);
        assert_eq!(sum.max_jitter_ms, sum.jitter_ms);
        // On time from here on: the estimate decays, the maximum stays.
        for k in 4..60u16 {
            s.on_packet(k, 160 * u32::from(k - 1), t0 + ms(20 * u64::from(k - 1)));
        }
        assert_eq!(s.report_block(1, None, t0).jitter, 0);
        assert!(s.summary().max_jitter_ms > 1.2);
    }

    #[test]
    fn the_jitter_p95_is_the_percentile_of_each_transit_difference() {
        let t0 = Instant::now();
        let mut s = ReceiverStats::new(8_000);
        assert_eq!(s.summary().jitter_p95_ms, None);
        // 40 packets; every tenth arrives 10 ms late (two |D| of 10 ms
        // each: its own and the next one's), the rest on time.
        for k in 0..40u16 {
            let late = if k % 10 == 3 { ms(10) } else { ms(0) };
            s.on_packet(k, 160 * u32::from(k), t0 + ms(20 * u64::from(k)) + late);
        }
        let sum = s.summary();
        // 8 of 39 differences are 10 ms: the p95 is that bucket's edge.
        assert_eq!(sum.jitter_p95_ms, Some(10.5));
        assert!(
            sum.jitter_ms < 10.0,
            "the smoothed mean stays below the bursts"
        );
    }

    #[test]
    fn event_packets_count_without_touching_the_jitter() {
        let t0 = Instant::now();
        let mut s = ReceiverStats::new(8_000);
        s.on_packet(1, 0, t0);
        for seq in 2..8 {
            s.on_event_packet(seq); // one timestamp for the whole event
        }
        s.on_packet(8, 7 * 160, t0 + ms(140));
        let b = s.report_block(1, None, t0);
        assert_eq!((b.highest_seq, b.cumulative_lost, b.jitter), (8, 0, 0));
    }

    #[test]
    fn lsr_and_dlsr_come_from_the_last_sender_report() {
        let t0 = Instant::now();
        let mut s = ReceiverStats::new(8_000);
        let b = s.report_block(9, Some((0x1234_5678, t0)), t0 + ms(1_500));
        assert_eq!((b.last_sr, b.delay_since_last_sr), (0x1234_5678, 98_304));
        assert_eq!(b.highest_seq, 0, "nothing received yet");
    }

    /// A.1: a jump is set aside until the next packet confirms it.
    #[test]
    fn a_confirmed_sequence_jump_restarts_the_count() {
        let t0 = Instant::now();
        let mut s = ReceiverStats::new(8_000);
        feed(&mut s, t0, &[100, 101]);
        s.on_packet(5_000, 0, t0); // ignored
        s.on_packet(9_000, 0, t0); // ignored: does not follow 5000
        s.on_packet(9_001, 160, t0 + ms(20)); // confirms: restart
        s.on_packet(9_002, 320, t0 + ms(40));
        let b = s.report_block(1, None, t0);
        assert_eq!((b.highest_seq, b.cumulative_lost), (9_002, 0));
        let sum = s.summary();
        assert_eq!(
            (sum.received, sum.expected, sum.ignored, sum.restarts),
            (4, 4, 2, 1)
        );
    }
}
