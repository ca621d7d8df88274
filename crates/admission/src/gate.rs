//! The gate handle: configuration, admission calls, drain, health marks, snapshots.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::capacity::{Capacity, CapacitySetting, Ceilings};
use crate::error::{Dependency, Rejection};
use crate::instance::{InstanceConfig, InstanceView};
use crate::lag::LagHistogram;
use crate::partner::PartnerId;
use crate::permit::Permit;
use crate::snapshot::GateSnapshot;
use crate::state::{Enqueued, State, Wakeups};
use crate::ticket::Ticket;

/// Everything the gate needs to decide; hot-reloadable with [`Gate::set_config`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateConfig {
    /// Auto (from ceilings, minus headroom) or pinned.
    pub capacity: CapacitySetting,
    /// The four resource ceilings.
    pub ceilings: Ceilings,
    /// Most waiters the FIFO queue holds. When it is full, `enqueue` rejects at
    /// once with `QueueFull`; 0 means no waiting at all.
    pub queue_max: usize,
    /// How long a waiter may wait (capped at [`crate::MAX_QUEUE_TIMEOUT`]). After
    /// that it is rejected with `QueueTimeout`.
    pub queue_timeout: Duration,
    /// Each partner's `max_concurrent_calls`: a partner whose admitted plus
    /// queued calls already reach its quota is refused at once with
    /// `PartnerQuota`, even while the gate has room for others. A partner with
    /// no entry is unlimited (only the capacity applies). Empty for no quotas.
    pub partner_quotas: BTreeMap<PartnerId, u32>,
    /// The instance ceiling: lateness bound and window
    /// ([`InstanceConfig::OFF`] for none).
    pub instance: InstanceConfig,
    /// Most calls whose setup (media, ledger row, provider sockets) may be
    /// in progress at once; past it, new calls wait in the FIFO queue with
    /// its timeout. `None`: unbounded.
    pub max_setups: Option<u32>,
}

impl Default for GateConfig {
    /// Auto capacity with no ceilings and no headroom, no queue, no
    /// quotas, no instance ceiling, no setup bound.
    fn default() -> Self {
        Self {
            capacity: CapacitySetting::default(),
            ceilings: Ceilings::default(),
            queue_max: 0,
            queue_timeout: Duration::ZERO,
            partner_quotas: BTreeMap::new(),
            instance: InstanceConfig::OFF,
            max_setups: None,
        }
    }
}

/// State shared by the gate handles, permits and tickets.
///
/// One `Mutex` around everything: admissions are rare events (thousands per
/// second at the very most, against calls that last minutes), so a lock held for
/// a few hundred nanoseconds is nowhere near contention, and one lock makes the
/// invariants (FIFO order, `active <= capacity` at admission, exactly-once
/// release) easy to see and to test.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
}

impl Shared {
    /// Runs `f` under the lock, then wakes the collected wakers with the lock
    /// released: a woken task may poll at once and must not find the lock held.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut State, &mut Wakeups) -> R) -> R {
        let mut wake = Wakeups::new();
        let result = {
            let mut state = self.lock();
            f(&mut state, &mut wake)
        };
        for waker in wake {
            waker.wake();
        }
        result
    }

    /// A panic while the lock was held must not take the server down with it:
    /// the state is only mutated in short sequences with nothing that panics, so
    /// recover the guard and keep counting.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The admission gate. Cheap to clone: all clones share one state.
///
/// Methods are grouped as getters (`capacity`, `config`, `is_draining`,
/// `snapshot`), admissions (`try_admit`, `enqueue`, and their per-partner
/// `try_admit_for`, `enqueue_for`), timer input (`expire_due`) and commands
/// (`set_config`, `start_drain`, `mark_dependency`).
///
/// Every admission checks, in this order: draining, a dependency down, the
/// partner's quota, then capacity and the queue.
#[derive(Debug, Clone)]
pub struct Gate {
    shared: Arc<Shared>,
}

impl Gate {
    /// A gate with capacity derived from `cfg`, nothing active, nothing queued.
    #[must_use]
    pub fn new(cfg: GateConfig, now: Instant) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State::new(cfg, now)),
            }),
        }
    }

    /// The current capacity and its decider.
    #[must_use]
    pub fn capacity(&self) -> Capacity {
        self.shared.with(|s, _| s.capacity())
    }

    /// The configuration in force.
    #[must_use]
    pub fn config(&self) -> GateConfig {
        self.shared.with(|s, _| s.config().clone())
    }

    /// The instance ceiling's configuration alone (no clone of the rest,
    /// for readers that ask often).
    #[must_use]
    pub fn instance_config(&self) -> crate::InstanceConfig {
        self.shared.with(|s, _| s.config().instance)
    }

    /// True once [`Gate::start_drain`] was called.
    #[must_use]
    pub fn is_draining(&self) -> bool {
        self.shared.with(|s, _| s.is_draining())
    }

    /// Counters and state at this moment.
    #[must_use]
    pub fn snapshot(&self) -> GateSnapshot {
        self.shared.with(|s, _| s.snapshot())
    }

    /// Admits now if a slot is free *and nobody is queued* (no jumping the
    /// queue). A call with no partner: `try_admit_for(None, now)`.
    ///
    /// # Errors
    /// `Draining`, `DependencyDown(dep)`, or `AtCapacity` (no free slot, or
    /// waiters ahead); `waited` is zero.
    pub fn try_admit(&self, now: Instant) -> Result<Permit, Rejection> {
        self.try_admit_for(None, now)
    }

    /// [`Gate::try_admit`] for a call sent by `partner`, which counts against
    /// its quota until the permit is released.
    ///
    /// # Errors
    /// As `try_admit`, plus `PartnerQuota` (checked after the dependencies,
    /// before capacity) when the partner's quota is already used up.
    pub fn try_admit_for(
        &self,
        partner: Option<&PartnerId>,
        now: Instant,
    ) -> Result<Permit, Rejection> {
        let grant = self
            .shared
            .with(|s, wake| s.try_admit(partner, now, wake))?;
        Ok(Permit::new(Arc::clone(&self.shared), grant))
    }

    /// Admits now if possible (the ticket is then already granted), else joins
    /// the FIFO queue. Await the ticket for the outcome; call
    /// [`Ticket::expire`] when the timer for [`Ticket::deadline`] fires. A call
    /// with no partner: `enqueue_for(None, now)`.
    ///
    /// # Errors
    /// Immediately, with zero `waited`: `Draining`, `DependencyDown(dep)`, or
    /// `QueueFull` when `queue_max` waiters are already queued.
    pub fn enqueue(&self, now: Instant) -> Result<Ticket, Rejection> {
        self.enqueue_for(None, now)
    }

    /// [`Gate::enqueue`] for a call sent by `partner`. A queued call counts
    /// against the quota too; it stops counting when its ticket is dropped,
    /// expired or rejected, or when the permit it turned into is released.
    ///
    /// # Errors
    /// As `enqueue`, plus `PartnerQuota` (checked after the dependencies, before
    /// the queue) when the partner's quota is already used up.
    pub fn enqueue_for(
        &self,
        partner: Option<&PartnerId>,
        now: Instant,
    ) -> Result<Ticket, Rejection> {
        let outcome = self.shared.with(|s, wake| s.enqueue(partner, now, wake))?;
        let shared = Arc::clone(&self.shared);
        Ok(match outcome {
            Enqueued::Admitted { grant, deadline } => {
                let permit = Permit::new(Arc::clone(&shared), grant);
                Ticket::granted(shared, permit, deadline)
            }
            Enqueued::Queued { id, deadline } => Ticket::queued(shared, id, deadline),
        })
    }

    /// Rejects, with `QueueTimeout`, every waiter whose deadline is at or before
    /// `now`, and wakes them. Returns how many. For servers that run one gate
    /// timer instead of one per ticket; every other call taking `now` does this
    /// too, so a stale waiter never takes a slot.
    pub fn expire_due(&self, now: Instant) -> usize {
        self.shared.with(|s, wake| s.expire_due(now, wake))
    }

    /// Hot reload: recomputes capacity. Raising it grants queued waiters at once;
    /// lowering it below `active` ends nothing, it only stops admission until
    /// `active` falls below the new capacity. Queued waiters keep their place and
    /// deadline. A lowered partner quota likewise ends none of the partner's
    /// calls (queued ones keep waiting); it refuses new ones until the partner
    /// is below it.
    pub fn set_config(&self, cfg: GateConfig, now: Instant) {
        self.shared.with(|s, wake| s.set_config(cfg, now, wake));
    }

    /// From now on every admission is rejected with `Draining`, and every queued
    /// waiter is woken with `Draining`. A slot granted to a waiter whose ticket
    /// has not collected it yet is taken back (that ticket also gets `Draining`),
    /// so no permit appears after this call. Live permits are untouched and
    /// release normally. Idempotent; [`Gate::end_drain`] reopens admission.
    pub fn start_drain(&self, now: Instant) {
        self.shared.with(|s, wake| s.start_drain(now, wake));
    }

    /// Cancels a drain: admissions after this call are decided as before it
    /// began. What the drain refused stays refused. Returns whether the gate
    /// was draining.
    pub fn end_drain(&self, now: Instant) -> bool {
        self.shared.with(|s, _| s.end_drain(now))
    }

    /// Lateness samples against the 20 ms media clock, gathered since the
    /// last call (the server calls this a few times a second). Steps the
    /// instance ceiling: a trip refuses every queued waiter with
    /// `InstanceOverloaded` and every admission until the lag recovers.
    pub fn observe_lag(&self, lag: &LagHistogram, now: Instant) -> InstanceView {
        self.shared.with(|s, wake| s.observe_lag(lag, now, wake))
    }

    /// Records a dependency's health, from the server's health checks. While any
    /// dependency is down, admissions are rejected with `DependencyDown(dep)` (the
    /// first down in db, stt, tts, dialog order), and marking one down fails every
    /// queued waiter at once. Marking it up resumes grants to new waiters.
    pub fn mark_dependency(&self, dep: Dependency, up: bool, now: Instant) {
        self.shared
            .with(|s, wake| s.mark_dependency(dep, up, now, wake));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(calls: u32) -> GateConfig {
        GateConfig {
            capacity: CapacitySetting::Pinned(calls),
            ceilings: Ceilings::default(),
            queue_max: 4,
            queue_timeout: Duration::from_secs(2),
            ..GateConfig::default()
        }
    }

    #[test]
    fn poisoned_lock_is_recovered_and_counting_continues() {
        let t0 = Instant::now();
        let gate = Gate::new(config(2), t0);
        let held = gate.try_admit(t0).unwrap();
        let shared = Arc::clone(&gate.shared);
        let poisoned = std::thread::spawn(move || {
            let _guard = shared.state.lock().unwrap();
            panic!("poison the gate lock on purpose");
        })
        .join();
        assert!(poisoned.is_err());
        assert!(gate.shared.state.is_poisoned());

        let second = gate.try_admit(t0).unwrap();
        assert_eq!(gate.snapshot().active, 2);
        drop(held);
        drop(second);
        let snap = gate.snapshot();
        assert_eq!(snap.active, 0);
        assert_eq!(snap.admitted_total, 2);
        assert_eq!(snap.released_total, 2);
    }
}
