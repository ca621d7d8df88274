//! Inbound timing: the 95th percentile of the per-packet transit
//! difference, for the receipt's "inbound jitter p95".
//!
//! RFC 3550 §6.4.1 defines `D(i-1, i)`: how much later (or earlier) packet
//! `i` arrived than its media timestamp says it should have, relative to
//! the packet before it. The RFC's jitter is a smoothed mean of `|D|`
//! (kept in [`crate::rtp::ReceiverStats`]); a mean hides the bursts that
//! make a caller sound choppy, so the receipt also carries a percentile of
//! `|D|` itself (what RFC 5481 calls IPDV).
//!
//! Sans-IO: a transport feeds [`TransitDelta::on_arrival`] each packet's
//! media time and arrival `Instant`; RTP, whose difference the receiver
//! statistics already compute, feeds [`DeltaHistogram::record`] directly.
//!
//! Limits: `|D|` is counted in [`BUCKET`] (0.5 ms) buckets up to
//! [`CEILING`] (256 ms); larger values land in the top bucket, so a p95 at
//! the ceiling means "at least that". The histogram is 2 KiB per call and
//! never allocates after construction.

use std::time::{Duration, Instant};

/// Width of one histogram bucket.
pub const BUCKET: Duration = Duration::from_micros(500);
/// Buckets: `BUCKETS × BUCKET` is the largest value told apart.
pub const BUCKETS: usize = 512;
/// Values at or above this share the top bucket.
pub const CEILING: Duration = Duration::from_millis(256);

/// A fixed-bucket histogram of transit differences.
#[derive(Clone)]
pub struct DeltaHistogram {
    buckets: Box<[u32; BUCKETS]>,
    count: u64,
}

impl std::fmt::Debug for DeltaHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeltaHistogram")
            .field("count", &self.count)
            .field("p95", &self.p95())
            .finish()
    }
}

impl Default for DeltaHistogram {
    fn default() -> Self {
        DeltaHistogram {
            buckets: Box::new([0; BUCKETS]),
            count: 0,
        }
    }
}

impl DeltaHistogram {
    /// Counts one `|D|`.
    pub fn record(&mut self, delta: Duration) {
        let i = (delta.as_nanos() / BUCKET.as_nanos()).min(BUCKETS as u128 - 1) as usize;
        self.buckets[i] = self.buckets[i].saturating_add(1);
        self.count += 1;
    }

    /// Values counted.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The `q` quantile (0 < q ≤ 1) as the upper edge of its bucket: the
    /// true value is at most this (and at least one bucket less). `None`
    /// before any value.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += u64::from(*n);
            if seen >= rank {
                return Some(BUCKET * (i as u32 + 1));
            }
        }
        Some(CEILING)
    }

    /// The 95th percentile (see [`DeltaHistogram::quantile`]).
    pub fn p95(&self) -> Option<Duration> {
        self.quantile(0.95)
    }
}

/// `|D|` for a transport that stamps each packet with its media time
/// (a Twilio media message's `timestamp`, in ms since the stream began).
#[derive(Debug, Clone, Default)]
pub struct TransitDelta {
    prev: Option<(Duration, Instant)>,
    hist: DeltaHistogram,
}

impl TransitDelta {
    /// Accounts one packet whose media starts at `media` and that arrived
    /// at `arrival`. A packet stamped earlier than the one before it
    /// (reordered, or a restarted clock) starts a new reference instead of
    /// counting a difference that is not the network's.
    pub fn on_arrival(&mut self, media: Duration, arrival: Instant) {
        if let Some((m0, a0)) = self.prev
            && media >= m0
        {
            let wall = arrival.saturating_duration_since(a0);
            let stamped = media - m0;
            self.hist.record(wall.abs_diff(stamped));
        }
        self.prev = Some((media, arrival));
    }

    /// What has been counted.
    pub fn histogram(&self) -> &DeltaHistogram {
        &self.hist
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn an_even_stream_has_a_p95_within_the_first_bucket() {
        let t0 = Instant::now();
        let mut t = TransitDelta::default();
        for i in 0..100u32 {
            t.on_arrival(MS * 20 * i, t0 + MS * 20 * i);
        }
        assert_eq!(t.histogram().count(), 99);
        assert_eq!(t.histogram().p95(), Some(BUCKET));
    }

    #[test]
    fn the_p95_sees_a_burst_the_mean_would_hide() {
        let t0 = Instant::now();
        let mut t = TransitDelta::default();
        // 90 packets on time, then 10 delayed by 30 ms each (and the one
        // after each comes back on time: two |D| of 30 ms per delay).
        let mut arrivals = Vec::new();
        for i in 0..100u32 {
            let late = if i % 10 == 5 { MS * 30 } else { Duration::ZERO };
            arrivals.push((MS * 20 * i, t0 + MS * 20 * i + late));
        }
        for (m, a) in arrivals {
            t.on_arrival(m, a);
        }
        let p95 = t.histogram().p95().expect("counted");
        assert!(p95 > MS * 29 && p95 <= MS * 31, "{p95:?}");
        assert_eq!(t.histogram().quantile(0.5), Some(BUCKET));
    }

    #[test]
    fn a_packet_stamped_earlier_restarts_the_reference() {
        let t0 = Instant::now();
        let mut t = TransitDelta::default();
        t.on_arrival(MS * 40, t0);
        t.on_arrival(MS * 20, t0 + MS * 20);
        assert_eq!(t.histogram().count(), 0);
        t.on_arrival(MS * 40, t0 + MS * 40);
        assert_eq!(t.histogram().count(), 1);
        assert_eq!(t.histogram().p95(), Some(BUCKET));
    }

    #[test]
    fn values_past_the_ceiling_share_the_top_bucket() {
        let mut h = DeltaHistogram::default();
        assert_eq!(h.p95(), None);
        h.record(Duration::from_secs(5));
        assert_eq!(h.p95(), Some(CEILING));
        assert_eq!(h.quantile(0.0), Some(CEILING));
    }
}
