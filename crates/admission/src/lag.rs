//! A histogram of lateness against the 20 ms media clock: how late the
//! runtime's ticker and the calls' frame deadlines fired.
//!
//! Fixed buckets, so the server can keep one as plain atomics and hand a
//! copy to the gate without allocating: 1 ms buckets up to 100 ms (the
//! region where a bound such as 25 ms is decided), then four coarse ones.

use std::time::Duration;

/// Number of buckets: 0..100 ms by the millisecond, then 100–200 ms,
/// 200–500 ms, 500–1000 ms and 1 s or more.
pub const LAG_BUCKETS: usize = 104;

/// Lower edge, in ms, of each bucket past the fine ones.
const COARSE_FROM_MS: [u64; 4] = [100, 200, 500, 1_000];

/// Counts of lateness samples per bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LagHistogram {
    counts: [u32; LAG_BUCKETS],
}

impl Default for LagHistogram {
    fn default() -> Self {
        Self {
            counts: [0; LAG_BUCKETS],
        }
    }
}

impl LagHistogram {
    /// The bucket a lateness falls in.
    #[must_use]
    pub fn bucket_of(late: Duration) -> usize {
        let ms = u64::try_from(late.as_millis()).unwrap_or(u64::MAX);
        if ms < COARSE_FROM_MS[0] {
            // ms < 100, so the cast cannot truncate.
            return ms as usize;
        }
        let coarse = COARSE_FROM_MS.iter().rposition(|&from| ms >= from);
        100 + coarse.unwrap_or(0)
    }

    /// The lateness at the lower edge of bucket `i`: every sample in it was
    /// at least this late.
    #[must_use]
    pub fn lower_edge(i: usize) -> Duration {
        let ms = match i {
            0..100 => i as u64,
            _ => COARSE_FROM_MS[(i - 100).min(COARSE_FROM_MS.len() - 1)],
        };
        Duration::from_millis(ms)
    }

    /// Builds a histogram from raw counts (the server's atomic copy).
    #[must_use]
    pub fn from_counts(counts: [u32; LAG_BUCKETS]) -> Self {
        Self { counts }
    }

    /// One sample.
    pub fn record(&mut self, late: Duration) {
        let slot = &mut self.counts[Self::bucket_of(late)];
        *slot = slot.saturating_add(1);
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &Self) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine = mine.saturating_add(*theirs);
        }
    }

    /// Samples held.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|&c| u64::from(c)).sum()
    }

    /// The `q` quantile (0 < q ≤ 1) as the lower edge of the bucket it falls
    /// in: at least a `1 - q` share of the samples were this late or later.
    /// `None` with no samples.
    #[must_use]
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        // The rank of the sample at quantile q, 1-based: ceil(q × total).
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return Some(Self::lower_edge(i));
            }
        }
        Some(Self::lower_edge(LAG_BUCKETS - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn buckets_are_one_millisecond_wide_below_100_ms_then_coarse() {
        assert_eq!(LagHistogram::bucket_of(Duration::ZERO), 0);
        assert_eq!(LagHistogram::bucket_of(Duration::from_micros(999)), 0);
        assert_eq!(LagHistogram::bucket_of(ms(25)), 25);
        assert_eq!(LagHistogram::bucket_of(ms(99)), 99);
        assert_eq!(LagHistogram::bucket_of(ms(100)), 100);
        assert_eq!(LagHistogram::bucket_of(ms(199)), 100);
        assert_eq!(LagHistogram::bucket_of(ms(200)), 101);
        assert_eq!(LagHistogram::bucket_of(ms(999)), 102);
        assert_eq!(LagHistogram::bucket_of(ms(1_000)), 103);
        assert_eq!(LagHistogram::bucket_of(Duration::MAX), 103);
        for i in 0..LAG_BUCKETS {
            assert_eq!(LagHistogram::bucket_of(LagHistogram::lower_edge(i)), i);
        }
    }

    #[test]
    fn p99_of_a_hundred_samples_is_the_worst_but_one() {
        let mut h = LagHistogram::default();
        for _ in 0..98 {
            h.record(ms(1));
        }
        h.record(ms(30));
        h.record(ms(400));
        assert_eq!(h.count(), 100);
        assert_eq!(h.quantile(0.99), Some(ms(30)));
        assert_eq!(h.quantile(1.0), Some(ms(200)));
        assert_eq!(h.quantile(0.5), Some(ms(1)));
        assert_eq!(LagHistogram::default().quantile(0.99), None);
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = LagHistogram::default();
        a.record(ms(3));
        let mut b = LagHistogram::default();
        b.record(ms(3));
        b.record(ms(50));
        a.merge(&b);
        assert_eq!(a.count(), 3);
        assert_eq!(a.quantile(1.0), Some(ms(50)));
    }
}
