//! Session accounting shared by the simulators, served as `GET /stats`.
//!
//! A session is one STT stream, one TTS socket or one dialog stream. Each
//! accepted session holds a [`SessionGuard`]; dropping it (on any exit path)
//! closes the session in the counts, so a test that reads `open_sessions == 0`
//! knows the *client* closed everything, not that the simulator forgot.
//!
//! Besides the counts, the STT and TTS simulators keep [`FormatCounts`]
//! (sessions accepted per audio format) and a [`RecentSessions`] log of
//! per-session records (what each session asked for and how much audio went
//! through it), so a test can check what one call actually negotiated.
//!
//! [`FaultScope`] is the one shape of the connection-level fault knobs that
//! every simulator shares: which sessions a fault may hit
//! (`faulty_sessions`) and the outage after one (`down_after_fault_ms`),
//! during which new sessions are refused and counted
//! ([`StatsSnapshot::refused_while_down`]).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;

/// Counters of one simulator.
#[derive(Debug, Default)]
pub struct SessionStats {
    open: AtomicU64,
    peak: AtomicU64,
    total: AtomicU64,
    rejected: AtomicU64,
    faults: AtomicU64,
    refused_while_down: AtomicU64,
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
    /// Sessions refused because the simulator was down after a fault
    /// (`down_after_fault_ms`).
    #[serde(default)]
    pub refused_while_down: u64,
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

    /// Counts a session refused during an outage (`down_after_fault_ms`).
    pub fn count_refused_while_down(&self) {
        self.refused_while_down.fetch_add(1, Ordering::Relaxed);
    }

    /// Current counts.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            open_sessions: self.open.load(Ordering::Acquire),
            peak_sessions: self.peak.load(Ordering::Relaxed),
            total_sessions: self.total.load(Ordering::Relaxed),
            rejected_sessions: self.rejected.load(Ordering::Relaxed),
            faulted_sessions: self.faults.load(Ordering::Relaxed),
            refused_while_down: self.refused_while_down.load(Ordering::Relaxed),
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

/// How many per-session records a simulator keeps. Older ones are dropped
/// (oldest first), so a long load run cannot grow the log without bound;
/// the counts in the snapshots are never dropped.
pub const RECENT_SESSIONS: usize = 1_024;

/// Sessions accepted per audio format (keys chosen by each simulator).
#[derive(Debug, Default)]
pub struct FormatCounts {
    counts: Mutex<BTreeMap<String, u64>>,
}

impl FormatCounts {
    /// Counts one accepted session of `format`.
    pub fn count(&self, format: &str) {
        // Plain counters: a panic elsewhere cannot leave them half-written.
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        match counts.get_mut(format) {
            Some(n) => *n += 1,
            None => {
                counts.insert(format.to_owned(), 1);
            }
        }
    }

    /// The counts so far.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The records of the last [`RECENT_SESSIONS`] sessions, in acceptance
/// order. Each record is shared with its session task, which updates it in
/// place (its own lock or atomics, so sessions never contend here except
/// when one opens).
#[derive(Debug)]
pub struct RecentSessions<T> {
    records: Mutex<VecDeque<Arc<T>>>,
}

impl<T> Default for RecentSessions<T> {
    fn default() -> Self {
        RecentSessions {
            records: Mutex::new(VecDeque::new()),
        }
    }
}

impl<T> RecentSessions<T> {
    /// Adds the record of a session just accepted, dropping the oldest
    /// beyond [`RECENT_SESSIONS`].
    pub fn push(&self, record: Arc<T>) {
        let mut records = self.records.lock().unwrap_or_else(PoisonError::into_inner);
        if records.len() >= RECENT_SESSIONS {
            records.pop_front();
        }
        records.push_back(record);
    }

    /// A snapshot of every kept record, oldest first.
    pub fn snapshot<R>(&self, view: impl Fn(&T) -> R) -> Vec<R> {
        // Clone the handles first so `view` never runs under the log lock.
        let records: Vec<Arc<T>> = self
            .records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect();
        records.iter().map(|r| view(r)).collect()
    }
}

/// Whether the connection-level faults apply to session number `session`
/// (1-based, in the simulator's acceptance order): every session when
/// `faulty_sessions` is unset, else only the first `faulty_sessions`.
pub fn is_faulty(faulty_sessions: Option<u64>, session: u64) -> bool {
    faulty_sessions.is_none_or(|n| session <= n)
}

/// The outage a simulator goes into after a session was ended by a fault
/// (`down_after_fault_ms`): until it is over, new sessions are refused.
/// Sans-IO: every method takes `now`.
#[derive(Debug, Default)]
pub struct FaultScope {
    /// The end of the current outage, if one was ever started; a later
    /// fault extends it, never shortens it.
    down_until: Mutex<Option<Instant>>,
}

impl FaultScope {
    /// A session was just ended by a fault at `now`: with `down_for` set,
    /// refuse new sessions until `now + down_for`.
    pub fn fault_ended_session(&self, now: Instant, down_for: Option<Duration>) {
        let Some(down_for) = down_for else {
            return;
        };
        let until = now + down_for;
        // A plain value: a panic elsewhere cannot leave it half-written.
        let mut down = self
            .down_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if down.is_none_or(|d| d < until) {
            *down = Some(until);
        }
    }

    /// How much longer the outage lasts at `now`; `None` when the simulator
    /// is up.
    pub fn down_for(&self, now: Instant) -> Option<Duration> {
        let down = *self
            .down_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        down.filter(|until| *until > now).map(|until| until - now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_hit_only_the_first_sessions_when_scoped() {
        assert!(is_faulty(None, 1) && is_faulty(None, 1_000));
        assert!(is_faulty(Some(1), 1));
        assert!(!is_faulty(Some(1), 2));
        assert!(!is_faulty(Some(0), 1), "Some(0) faults nothing");
    }

    #[test]
    fn an_outage_starts_at_the_fault_and_ends_after_its_length() {
        let scope = FaultScope::default();
        let t0 = Instant::now();
        assert_eq!(scope.down_for(t0), None, "up before any fault");
        scope.fault_ended_session(t0, None);
        assert_eq!(scope.down_for(t0), None, "no outage without a length");
        scope.fault_ended_session(t0, Some(Duration::from_millis(500)));
        assert_eq!(
            scope.down_for(t0 + Duration::from_millis(200)),
            Some(Duration::from_millis(300))
        );
        assert_eq!(scope.down_for(t0 + Duration::from_millis(500)), None);
        // A shorter outage started later never cuts a longer one short.
        scope.fault_ended_session(
            t0 + Duration::from_millis(100),
            Some(Duration::from_millis(50)),
        );
        assert!(scope.down_for(t0 + Duration::from_millis(400)).is_some());
    }

    #[test]
    fn format_counts_and_the_recent_log_are_bounded_and_ordered() {
        let f = FormatCounts::default();
        f.count("mulaw/8000");
        f.count("linear16/16000");
        f.count("mulaw/8000");
        let snap = f.snapshot();
        assert_eq!(snap.get("mulaw/8000"), Some(&2));
        assert_eq!(snap.get("linear16/16000"), Some(&1));

        let log = RecentSessions::default();
        for i in 0..RECENT_SESSIONS as u64 + 3 {
            log.push(Arc::new(i));
        }
        let kept = log.snapshot(|n| *n);
        assert_eq!(kept.len(), RECENT_SESSIONS);
        assert_eq!(kept[0], 3);
        assert_eq!(*kept.last().unwrap(), RECENT_SESSIONS as u64 + 2);
    }

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
