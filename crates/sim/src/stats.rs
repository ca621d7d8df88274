//! Session accounting shared by the simulators, served as `GET /stats`.
//!
//! A session is one STT stream, one TTS socket or one dialog stream. Each
//! accepted session holds a [`SessionGuard`]; dropping it (on any exit path)
//! closes the session in the counts, so a test that reads `open_sessions == 0`
//! knows the *client* closed everything, not that the simulator forgot.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Counters of one simulator.
#[derive(Debug, Default)]
pub struct SessionStats {
    open: AtomicU64,
    peak: AtomicU64,
    total: AtomicU64,
    rejected: AtomicU64,
    faults: AtomicU64,
}

/// A snapshot, as served by `GET /stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct StatsSnapshot {
    /// Sessions open right now.
    pub open_sessions: u64,
    /// Most sessions open at once since start.
    pub peak_sessions: u64,
    /// Sessions accepted since start.
    pub total_sessions: u64,
    /// Sessions refused at the cap (429 / RESOURCE_EXHAUSTED).
    pub rejected_sessions: u64,
    /// Sessions ended by an injected fault.
    pub faulted_sessions: u64,
}

impl SessionStats {
    /// Tries to open a session under `cap`. `None` means refused (and counted).
    pub fn try_open(self: &Arc<Self>, cap: u64) -> Option<SessionGuard> {
        let mut cur = self.open.load(Ordering::Acquire);
        loop {
            if cur >= cap {
                self.rejected.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            match self
                .open
                .compare_exchange(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(actual) => cur = actual,
            }
        }
        self.total.fetch_add(1, Ordering::Relaxed);
        self.peak.fetch_max(cur + 1, Ordering::Relaxed);
        Some(SessionGuard {
            stats: Arc::clone(self),
        })
    }

    /// Counts a session ended by an injected fault.
    pub fn count_fault(&self) {
        self.faults.fetch_add(1, Ordering::Relaxed);
    }

    /// Current counts.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            open_sessions: self.open.load(Ordering::Acquire),
            peak_sessions: self.peak.load(Ordering::Relaxed),
            total_sessions: self.total.load(Ordering::Relaxed),
            rejected_sessions: self.rejected.load(Ordering::Relaxed),
            faulted_sessions: self.faults.load(Ordering::Relaxed),
        }
    }
}

/// Holds one open session; dropping it closes the session in the counts.
#[must_use = "dropping the guard closes the session at once"]
#[derive(Debug)]
pub struct SessionGuard {
    stats: Arc<SessionStats>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.stats.open.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_refuses_and_guards_release() {
        let s = Arc::new(SessionStats::default());
        let a = s.try_open(2).unwrap();
        let b = s.try_open(2).unwrap();
        assert!(s.try_open(2).is_none());
        drop(a);
        let c = s.try_open(2).unwrap();
        drop((b, c));
        let snap = s.snapshot();
        assert_eq!(snap.open_sessions, 0);
        assert_eq!(snap.peak_sessions, 2);
        assert_eq!(snap.total_sessions, 3);
        assert_eq!(snap.rejected_sessions, 1);
    }
}
