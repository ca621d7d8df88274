//! The decision core: slots, the FIFO queue, per-partner counts and the
//! counters, with no locking and no waking of its own.
//!
//! Every method that resolves a waiter pushes the waiter's `Waker` into a
//! caller-supplied list; the caller wakes them after releasing the lock (see
//! `Shared::with` in `gate.rs`).

use std::collections::{HashMap, VecDeque};
use std::task::Waker;
use std::time::{Duration, Instant};

use crate::capacity::{Capacity, Decider};
use crate::error::{Dependency, RejectReason, Rejection};
use crate::gate::GateConfig;
use crate::instance::{InstanceCeiling, InstanceState, InstanceView};
use crate::lag::LagHistogram;
use crate::partner::{PartnerBook, PartnerId};
use crate::permit::PermitId;
use crate::snapshot::{GateSnapshot, RejectCounts};
use crate::tally::PermitTally;

/// Wakers collected under the lock, woken after it is released.
pub(crate) type Wakeups = Vec<Waker>;

/// What the gate needs back to free one slot: the partner whose count goes down
/// and the tally that records the decrement.
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) partner: Option<PartnerId>,
    pub(crate) tally: PermitTally,
    /// True until the permit says its setup is over: the slot counts
    /// against the setups-in-flight bound until then.
    pub(crate) in_setup: bool,
}

/// A slot handed out: what a [`crate::Permit`] is built from.
#[derive(Debug)]
pub(crate) struct Grant {
    pub(crate) id: PermitId,
    pub(crate) admitted_at: Instant,
    pub(crate) waited: Duration,
    pub(crate) slot: Slot,
}

/// How a queued waiter ended, kept until its ticket collects it.
#[derive(Debug)]
pub(crate) enum Resolution {
    Granted(Grant),
    Rejected(Rejection),
}

/// What `enqueue` did.
pub(crate) enum Enqueued {
    /// A slot was free and nobody was waiting: admitted on the spot.
    Admitted { grant: Grant, deadline: Instant },
    /// Joined the queue under this id.
    Queued { id: PermitId, deadline: Instant },
}

/// What a ticket finds when it looks for its outcome.
pub(crate) enum Lookup {
    Waiting,
    Resolved(Resolution),
    /// Neither queued nor resolved: the ticket's record is gone (a bug).
    Missing,
}

/// Longest wait a queue deadline is set for, whatever the config says: every wait
/// has a deadline, and this keeps `Instant` arithmetic far from overflow.
pub const MAX_QUEUE_TIMEOUT: Duration = Duration::from_secs(3600);

/// `now + timeout`, with the timeout capped at [`MAX_QUEUE_TIMEOUT`].
pub(crate) fn deadline_after(now: Instant, timeout: Duration) -> Instant {
    // Adding at most an hour cannot overflow on any real clock; if it somehow
    // did, an immediate deadline fails loudly rather than waiting forever.
    now.checked_add(timeout.min(MAX_QUEUE_TIMEOUT))
        .unwrap_or(now)
}

#[derive(Debug)]
struct Waiter {
    id: PermitId,
    partner: Option<PartnerId>,
    enqueued_at: Instant,
    deadline: Instant,
    waker: Option<Waker>,
}

#[derive(Debug)]
pub(crate) struct State {
    config: GateConfig,
    /// What the four ceilings (or the operator's pin) allow; the instance
    /// ceiling may lower the effective capacity below it.
    capacity: Capacity,
    /// The instance's own health, from lateness samples.
    instance: InstanceCeiling,
    /// Slots held. Only `grant` raises it and only `free_slot` lowers it.
    active: u32,
    /// Slots whose setup is in progress: raised by `grant`, lowered by
    /// `setup_done` or by `free_slot` for a slot still in setup.
    setting_up: u32,
    max_active: u32,
    draining: bool,
    /// Indexed by [`Dependency::index`].
    down: [bool; 4],
    /// The latest `now` any caller has shown us. `Drop` impls have no `now`; they
    /// use this instead, which is never later than the real time.
    clock: Instant,
    next_id: u64,
    /// FIFO of waiters, at most `config.queue_max` long (a full queue rejects at
    /// once with `QueueFull`). Lookups are linear: the queue is short by design.
    queue: VecDeque<Waiter>,
    /// Outcomes not yet collected by their ticket. At most one per live ticket:
    /// each entry is removed when its ticket is polled to completion, expired or
    /// dropped.
    resolved: HashMap<PermitId, Resolution>,
    /// Calls per partner in the gate: queued waiters, unclaimed grants and live
    /// permits. `join` on enqueue or immediate admission; `leave` exactly once,
    /// in `free_slot` or `waiter_left`.
    partners: PartnerBook,
    admitted_total: u64,
    released_total: u64,
    cancelled_total: u64,
    unclaimed_total: u64,
    rejected: RejectCounts,
}

impl State {
    pub(crate) fn new(config: GateConfig, now: Instant) -> Self {
        Self {
            capacity: Capacity::derive(config.capacity, &config.ceilings),
            instance: InstanceCeiling::new(config.instance, now),
            config,
            active: 0,
            setting_up: 0,
            max_active: 0,
            draining: false,
            down: [false; 4],
            clock: now,
            next_id: 1,
            queue: VecDeque::new(),
            resolved: HashMap::new(),
            partners: PartnerBook::default(),
            admitted_total: 0,
            released_total: 0,
            cancelled_total: 0,
            unclaimed_total: 0,
            rejected: RejectCounts::default(),
        }
    }

    /// The effective capacity: the configured one, lowered by the instance
    /// ceiling when that binds.
    pub(crate) fn capacity(&self) -> Capacity {
        match self.instance.view().ceiling {
            Some(ceiling) if ceiling < self.capacity.calls => Capacity {
                calls: ceiling,
                decided_by: Decider::Instance,
            },
            _ => self.capacity,
        }
    }

    pub(crate) fn config(&self) -> &GateConfig {
        &self.config
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.draining
    }

    /// Advances the internal clock; earlier times than already seen are ignored.
    fn observe(&mut self, now: Instant) -> Instant {
        self.clock = self.clock.max(now);
        self.clock
    }

    fn allocate_id(&mut self) -> PermitId {
        let id = PermitId(self.next_id);
        self.next_id = self.next_id.wrapping_add(1);
        id
    }

    /// A standing refusal that applies to everyone, before capacity is considered.
    fn refusal(&self) -> Option<RejectReason> {
        if self.draining {
            return Some(RejectReason::Draining);
        }
        let down = Dependency::ALL
            .into_iter()
            .find(|dep| self.down[dep.index()])
            .map(RejectReason::DependencyDown);
        down.or_else(|| {
            (self.instance.view().state == InstanceState::Overloaded)
                .then_some(RejectReason::InstanceOverloaded)
        })
    }

    /// The instance ceiling is what stops this admission (not the four
    /// ceilings): refused at once, never queued — a queue behind a
    /// struggling instance only adds setups to it.
    fn instance_refusal(&self) -> Option<RejectReason> {
        let effective = self.capacity();
        (effective.decided_by == Decider::Instance && self.active >= effective.calls)
            .then_some(RejectReason::InstanceOverloaded)
    }

    /// The partner already has its quota (or more, after a lowering reload) in
    /// the gate. Checked after the standing refusals, before capacity.
    fn partner_refusal(&self, partner: Option<&PartnerId>) -> Option<RejectReason> {
        let partner = partner?;
        self.partners
            .at_quota(partner, &self.config.partner_quotas)
            .then_some(RejectReason::PartnerQuota)
    }

    /// A slot is free below the effective capacity, and a setup may start
    /// below the setups-in-flight bound.
    fn has_free_slot(&self) -> bool {
        let setups_free = self
            .config
            .max_setups
            .is_none_or(|max| self.setting_up < max);
        self.active < self.capacity().calls && setups_free
    }

    /// Takes a slot and records the increment on the new permit's tally.
    /// Callers check `has_free_slot` first, so `active <= capacity` holds right
    /// after every admission. The partner was counted on entry, not here.
    fn grant(
        &mut self,
        id: PermitId,
        partner: Option<PartnerId>,
        requested_at: Instant,
        now: Instant,
    ) -> Grant {
        self.active = self.active.saturating_add(1);
        self.setting_up = self.setting_up.saturating_add(1);
        self.max_active = self.max_active.max(self.active);
        self.admitted_total = self.admitted_total.saturating_add(1);
        let tally = PermitTally::default();
        tally.record_increment();
        Grant {
            id,
            admitted_at: now,
            waited: now.saturating_duration_since(requested_at),
            slot: Slot {
                partner,
                tally,
                in_setup: true,
            },
        }
    }

    fn reject(&mut self, reason: RejectReason, waited: Duration) -> Rejection {
        self.rejected.record(reason);
        Rejection {
            reason,
            waited,
            active: self.active,
            capacity: self.capacity().calls,
            queued: self.queue.len(),
        }
    }

    /// The shared front half of `try_admit` and `enqueue`: time out overdue
    /// waiters, then check in order draining, dependency down, partner quota,
    /// and admit at once if a slot is free and nobody is waiting (FIFO
    /// fairness). `Ok(None)`: the caller must wait (or `try_admit` refuses).
    fn admit_at_once(
        &mut self,
        partner: Option<&PartnerId>,
        now: Instant,
        wake: &mut Wakeups,
    ) -> Result<Option<Grant>, Rejection> {
        self.expire_due(now, wake);
        let refused = self
            .refusal()
            .or_else(|| self.partner_refusal(partner))
            .or_else(|| self.instance_refusal());
        if let Some(reason) = refused {
            return Err(self.reject(reason, Duration::ZERO));
        }
        if self.has_free_slot() && self.queue.is_empty() {
            let id = self.allocate_id();
            self.partners.join(partner);
            return Ok(Some(self.grant(id, partner.cloned(), now, now)));
        }
        Ok(None)
    }

    pub(crate) fn try_admit(
        &mut self,
        partner: Option<&PartnerId>,
        now: Instant,
        wake: &mut Wakeups,
    ) -> Result<Grant, Rejection> {
        let now = self.observe(now);
        match self.admit_at_once(partner, now, wake)? {
            Some(grant) => Ok(grant),
            None => Err(self.reject(RejectReason::AtCapacity, Duration::ZERO)),
        }
    }

    pub(crate) fn enqueue(
        &mut self,
        partner: Option<&PartnerId>,
        now: Instant,
        wake: &mut Wakeups,
    ) -> Result<Enqueued, Rejection> {
        let now = self.observe(now);
        let deadline = deadline_after(now, self.config.queue_timeout);
        if let Some(grant) = self.admit_at_once(partner, now, wake)? {
            return Ok(Enqueued::Admitted { grant, deadline });
        }
        if self.queue.len() >= self.config.queue_max {
            return Err(self.reject(RejectReason::QueueFull, Duration::ZERO));
        }
        let id = self.allocate_id();
        self.partners.join(partner);
        self.queue.push_back(Waiter {
            id,
            partner: partner.cloned(),
            enqueued_at: now,
            deadline,
            waker: None,
        });
        Ok(Enqueued::Queued { id, deadline })
    }

    /// Looks up a queued ticket's outcome; while it still waits, stores `waker`.
    pub(crate) fn poll_ticket(&mut self, id: PermitId, waker: &Waker) -> Lookup {
        if let Some(resolution) = self.resolved.remove(&id) {
            return Lookup::Resolved(resolution);
        }
        match self.queue.iter_mut().find(|w| w.id == id) {
            Some(waiter) => {
                match &mut waiter.waker {
                    Some(old) if old.will_wake(waker) => {}
                    slot => *slot = Some(waker.clone()),
                }
                Lookup::Waiting
            }
            None => Lookup::Missing,
        }
    }

    /// The server's timer fired for this ticket: take its outcome if it was
    /// resolved in the meantime, else remove it and reject with `QueueTimeout`.
    pub(crate) fn expire_ticket(&mut self, id: PermitId, now: Instant) -> Option<Resolution> {
        let now = self.observe(now);
        if let Some(resolution) = self.resolved.remove(&id) {
            return Some(resolution);
        }
        let pos = self.queue.iter().position(|w| w.id == id)?;
        let waiter = self.queue.remove(pos)?;
        self.waiter_left(&waiter);
        let waited = now.saturating_duration_since(waiter.enqueued_at);
        Some(Resolution::Rejected(
            self.reject(RejectReason::QueueTimeout, waited),
        ))
    }

    /// The ticket was dropped. A waiter leaves the queue; a grant it never claimed
    /// goes back, and the slot passes to the next waiter.
    pub(crate) fn cancel_ticket(&mut self, id: PermitId, wake: &mut Wakeups) {
        if let Some(pos) = self.queue.iter().position(|w| w.id == id) {
            if let Some(waiter) = self.queue.remove(pos) {
                self.waiter_left(&waiter);
            }
            self.cancelled_total = self.cancelled_total.saturating_add(1);
            return;
        }
        if let Some(Resolution::Granted(grant)) = self.resolved.remove(&id) {
            self.unclaimed_total = self.unclaimed_total.saturating_add(1);
            self.release_slot(&grant.slot, None, wake);
        }
    }

    /// A ticket granted at enqueue was dropped unclaimed: its permit, dropped
    /// next, releases the slot; this only counts it.
    pub(crate) fn count_unclaimed(&mut self) {
        self.unclaimed_total = self.unclaimed_total.saturating_add(1);
    }

    /// A waiter left the queue without a grant (cancelled, timed out, rejected):
    /// its partner's count goes down. Every path that removes a waiter other
    /// than `pump` calls this exactly once.
    fn waiter_left(&mut self, waiter: &Waiter) {
        self.partners.leave(waiter.partner.as_ref());
    }

    /// Frees one slot (a permit dropped, or an unclaimed grant cancelled) and
    /// hands free slots to waiters in FIFO order.
    pub(crate) fn release_slot(&mut self, slot: &Slot, now: Option<Instant>, wake: &mut Wakeups) {
        self.free_slot(slot);
        let now = match now {
            Some(now) => self.observe(now),
            None => self.clock,
        };
        self.pump(now, wake);
    }

    /// The one place `active` goes down: the slot's partner count and tally
    /// move with it, in the same locked step.
    fn free_slot(&mut self, slot: &Slot) {
        // Saturating: even a bookkeeping bug must never wrap `active` around.
        self.active = self.active.saturating_sub(1);
        if slot.in_setup {
            self.setting_up = self.setting_up.saturating_sub(1);
        }
        self.released_total = self.released_total.saturating_add(1);
        self.partners.leave(slot.partner.as_ref());
        slot.tally.record_decrement();
    }

    /// Grants queued waiters, oldest first, while slots are free and nothing
    /// refuses admission. Expired waiters are rejected first so a stale waiter
    /// never takes a slot.
    fn pump(&mut self, now: Instant, wake: &mut Wakeups) {
        self.expire_due(now, wake);
        if self.refusal().is_some() {
            return;
        }
        while self.has_free_slot() {
            let Some(waiter) = self.queue.pop_front() else {
                break;
            };
            // The waiter's partner count carries over to the grant unchanged.
            let grant = self.grant(waiter.id, waiter.partner, waiter.enqueued_at, now);
            self.resolved.insert(waiter.id, Resolution::Granted(grant));
            wake.extend(waiter.waker);
        }
    }

    /// Rejects every waiter whose deadline is at or before `now` with
    /// `QueueTimeout`. Returns how many.
    pub(crate) fn expire_due(&mut self, now: Instant, wake: &mut Wakeups) -> usize {
        let now = self.observe(now);
        let before = self.queue.len();
        if self.queue.iter().all(|w| w.deadline > now) {
            return 0;
        }
        let (due, keep): (VecDeque<Waiter>, VecDeque<Waiter>) = std::mem::take(&mut self.queue)
            .into_iter()
            .partition(|w| w.deadline <= now);
        self.queue = keep;
        for waiter in due {
            self.resolve_rejected(waiter, RejectReason::QueueTimeout, now, wake);
        }
        before - self.queue.len()
    }

    fn resolve_rejected(
        &mut self,
        waiter: Waiter,
        reason: RejectReason,
        now: Instant,
        wake: &mut Wakeups,
    ) {
        self.waiter_left(&waiter);
        let waited = now.saturating_duration_since(waiter.enqueued_at);
        let rejection = self.reject(reason, waited);
        self.resolved
            .insert(waiter.id, Resolution::Rejected(rejection));
        wake.extend(waiter.waker);
    }

    /// Rejects every queued waiter with `reason` (drain, dependency down).
    fn reject_all_queued(&mut self, reason: RejectReason, now: Instant, wake: &mut Wakeups) {
        while let Some(waiter) = self.queue.pop_front() {
            self.resolve_rejected(waiter, reason, now, wake);
        }
    }

    /// A permit's setup is over: its slot stops counting against the
    /// setups-in-flight bound, and a waiter may start its own.
    pub(crate) fn setup_done(&mut self, now: Instant, wake: &mut Wakeups) {
        let now = self.observe(now);
        self.setting_up = self.setting_up.saturating_sub(1);
        self.pump(now, wake);
    }

    /// Lateness samples for the instance ceiling. A trip fails every queued
    /// waiter at once with `InstanceOverloaded`; a reopen or a step up
    /// grants waiters.
    pub(crate) fn observe_lag(
        &mut self,
        lag: &LagHistogram,
        now: Instant,
        wake: &mut Wakeups,
    ) -> InstanceView {
        let now = self.observe(now);
        let (before, after) = self
            .instance
            .observe(now, lag, self.active, self.capacity.calls);
        if after == InstanceState::Overloaded && before != InstanceState::Overloaded {
            self.reject_all_queued(RejectReason::InstanceOverloaded, now, wake);
        } else {
            self.pump(now, wake);
        }
        self.instance.view()
    }

    pub(crate) fn set_config(&mut self, config: GateConfig, now: Instant, wake: &mut Wakeups) {
        let now = self.observe(now);
        self.capacity = Capacity::derive(config.capacity, &config.ceilings);
        self.instance.set_config(config.instance, now);
        // Queued waiters keep their place and deadline even if `queue_max`,
        // `queue_timeout` or a partner quota shrank: reload ends nothing, it only
        // shapes what comes next.
        self.config = config;
        self.pump(now, wake);
    }

    pub(crate) fn start_drain(&mut self, now: Instant, wake: &mut Wakeups) {
        let now = self.observe(now);
        self.draining = true;
        self.reject_all_queued(RejectReason::Draining, now, wake);
        self.revoke_unclaimed_grants(now);
    }

    pub(crate) fn end_drain(&mut self, now: Instant) -> bool {
        self.observe(now);
        std::mem::replace(&mut self.draining, false)
    }

    /// Turns grants no ticket has collected yet into `Draining` rejections and
    /// frees their slots, so no permit comes into existence after a drain
    /// starts. Their tickets were already woken by the grant.
    fn revoke_unclaimed_grants(&mut self, now: Instant) {
        let unclaimed: Vec<PermitId> = self
            .resolved
            .iter()
            .filter_map(|(id, r)| matches!(r, Resolution::Granted(_)).then_some(*id))
            .collect();
        for id in unclaimed {
            if let Some(Resolution::Granted(grant)) = self.resolved.remove(&id) {
                self.free_slot(&grant.slot);
                let waited = grant.waited + now.saturating_duration_since(grant.admitted_at);
                let rejection = self.reject(RejectReason::Draining, waited);
                self.resolved.insert(id, Resolution::Rejected(rejection));
            }
        }
    }

    /// A down dependency fails queued waiters at once: they could not be set up
    /// anyway, and the overflow path beats waiting out the queue timeout.
    pub(crate) fn mark_dependency(
        &mut self,
        dep: Dependency,
        up: bool,
        now: Instant,
        wake: &mut Wakeups,
    ) {
        let now = self.observe(now);
        self.down[dep.index()] = !up;
        if up {
            self.pump(now, wake);
        } else {
            self.reject_all_queued(RejectReason::DependencyDown(dep), now, wake);
        }
    }

    pub(crate) fn snapshot(&self) -> GateSnapshot {
        let effective = self.capacity();
        GateSnapshot {
            capacity: effective.calls,
            decided_by: effective.decided_by,
            configured: self.capacity,
            instance: self.instance.view(),
            setting_up: self.setting_up,
            max_setups: self.config.max_setups,
            active: self.active,
            max_active: self.max_active,
            queued: self.queue.len(),
            draining: self.draining,
            dependencies_down: Dependency::ALL
                .into_iter()
                .filter(|dep| self.down[dep.index()])
                .collect(),
            admitted_total: self.admitted_total,
            released_total: self.released_total,
            cancelled_total: self.cancelled_total,
            unclaimed_total: self.unclaimed_total,
            rejected_total: self.rejected,
            partners: self.partners.loads(
                &self.config.partner_quotas,
                self.queue.iter().filter_map(|w| w.partner.as_ref()),
            ),
        }
    }

    /// A rejection for a ticket whose record vanished or that was polled after
    /// completing. Not counted: it is a bug report, not an admission decision.
    pub(crate) fn internal_rejection(&self) -> Rejection {
        Rejection {
            reason: RejectReason::Internal,
            waited: Duration::ZERO,
            active: self.active,
            capacity: self.capacity().calls,
            queued: self.queue.len(),
        }
    }
}
