//! `routing_reported_sessions`: what the load balancer was last told, and when.
//!
//! Lock-free: two atomics, the sessions and the report time as nanoseconds
//! since a process-local origin (`u64::MAX` nanos: never reported). A reader
//! racing a writer may pair the new count with the old time or the reverse;
//! both are real reports at most one interval apart, which the reconciler's
//! window absorbs. It never invents a report: before the first `record`,
//! `last` is `None`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const NEVER: u64 = u64::MAX;

/// The last load report sent to the balancer.
#[derive(Debug)]
pub struct RoutingReport {
    /// The instant `at` is measured from (the report's creation).
    origin: Instant,
    sessions: AtomicU64,
    /// Nanoseconds from `origin` to the report; `NEVER` before the first.
    at_nanos: AtomicU64,
}

impl Default for RoutingReport {
    fn default() -> Self {
        Self::new(Instant::now())
    }
}

impl RoutingReport {
    /// A report that has never been sent; times before `origin` clamp to it.
    pub fn new(origin: Instant) -> Self {
        RoutingReport {
            origin,
            sessions: AtomicU64::new(0),
            at_nanos: AtomicU64::new(NEVER),
        }
    }

    /// The balancer was told `sessions` at `at`.
    pub fn record(&self, sessions: u64, at: Instant) {
        let nanos = at.saturating_duration_since(self.origin).as_nanos();
        let nanos = u64::try_from(nanos).unwrap_or(NEVER - 1).min(NEVER - 1);
        self.sessions.store(sessions, Ordering::Relaxed);
        self.at_nanos.store(nanos, Ordering::Release);
    }

    /// The last report and when it was sent; `None` before the first.
    pub fn last(&self) -> Option<(u64, Instant)> {
        let nanos = self.at_nanos.load(Ordering::Acquire);
        if nanos == NEVER {
            return None;
        }
        let sessions = self.sessions.load(Ordering::Relaxed);
        Some((sessions, self.origin + Duration::from_nanos(nanos)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_reported_is_none_then_the_last_report_wins() {
        let t0 = Instant::now();
        let r = RoutingReport::new(t0);
        assert_eq!(r.last(), None);
        r.record(3, t0 + Duration::from_millis(1_500));
        assert_eq!(r.last(), Some((3, t0 + Duration::from_millis(1_500))));
        r.record(0, t0 + Duration::from_secs(2));
        assert_eq!(r.last(), Some((0, t0 + Duration::from_secs(2))));
    }

    #[test]
    fn a_time_before_the_origin_clamps_to_it() {
        let t0 = Instant::now() + Duration::from_secs(1);
        let r = RoutingReport::new(t0);
        r.record(1, t0 - Duration::from_millis(10));
        assert_eq!(r.last(), Some((1, t0)));
    }
}
