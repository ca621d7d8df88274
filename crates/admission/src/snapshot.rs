//! Point-in-time view of the gate for metrics, health answers and tests.

use crate::capacity::{Capacity, Decider};
use crate::error::{Dependency, RejectReason};
use crate::instance::InstanceView;
use crate::partner::PartnerLoad;

/// Rejections counted per reason since the gate was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RejectCounts {
    /// [`RejectReason::AtCapacity`].
    pub at_capacity: u64,
    /// [`RejectReason::QueueFull`].
    pub queue_full: u64,
    /// [`RejectReason::QueueTimeout`].
    pub queue_timeout: u64,
    /// [`RejectReason::Draining`].
    pub draining: u64,
    /// [`RejectReason::DependencyDown`], all dependencies together (the label
    /// stays low-cardinality).
    pub dependency_down: u64,
    /// [`RejectReason::PartnerQuota`], all partners together (per-partner load
    /// is in [`GateSnapshot::partners`]).
    pub partner_quota: u64,
    /// [`RejectReason::InstanceOverloaded`].
    pub instance_overloaded: u64,
}

impl RejectCounts {
    /// Adds one rejection. `Internal` is a bug report, not a decision, and is not
    /// counted.
    pub(crate) fn record(&mut self, reason: RejectReason) {
        let slot = match reason {
            RejectReason::AtCapacity => &mut self.at_capacity,
            RejectReason::QueueFull => &mut self.queue_full,
            RejectReason::QueueTimeout => &mut self.queue_timeout,
            RejectReason::Draining => &mut self.draining,
            RejectReason::DependencyDown(_) => &mut self.dependency_down,
            RejectReason::PartnerQuota => &mut self.partner_quota,
            RejectReason::InstanceOverloaded => &mut self.instance_overloaded,
            RejectReason::Internal => return,
        };
        *slot = slot.saturating_add(1);
    }

    /// The count for one reason.
    #[must_use]
    pub fn get(&self, reason: RejectReason) -> u64 {
        match reason {
            RejectReason::AtCapacity => self.at_capacity,
            RejectReason::QueueFull => self.queue_full,
            RejectReason::QueueTimeout => self.queue_timeout,
            RejectReason::Draining => self.draining,
            RejectReason::DependencyDown(_) => self.dependency_down,
            RejectReason::PartnerQuota => self.partner_quota,
            RejectReason::InstanceOverloaded => self.instance_overloaded,
            RejectReason::Internal => 0,
        }
    }

    /// `(label, count)` pairs, labels as in [`RejectReason::as_str`], for a
    /// `*_rejected_total{reason=..}` counter family.
    #[must_use]
    pub fn by_label(&self) -> [(&'static str, u64); 7] {
        [
            ("at_capacity", self.at_capacity),
            ("queue_full", self.queue_full),
            ("queue_timeout", self.queue_timeout),
            ("draining", self.draining),
            ("dependency_down", self.dependency_down),
            ("partner_quota", self.partner_quota),
            ("instance_overloaded", self.instance_overloaded),
        ]
    }

    /// All rejections together.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.by_label().iter().map(|&(_, n)| n).sum()
    }
}

/// The gate's state and counters at one moment.
///
/// `admitted_total - released_total == active` always holds (a grant that its
/// ticket never claimed counts as admitted and then released).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateSnapshot {
    /// Effective capacity in calls (`u32::MAX` when unlimited): the
    /// configured one, or the instance ceiling when that is lower.
    pub capacity: u32,
    /// Which limit decided it ([`Decider::Instance`] when the instance
    /// ceiling binds).
    pub decided_by: Decider,
    /// What the four ceilings (or the operator's pin) allow.
    pub configured: Capacity,
    /// The instance ceiling's state, ceiling and measured p99 lateness.
    pub instance: InstanceView,
    /// Slots whose setup is still in progress.
    pub setting_up: u32,
    /// The setups-in-flight bound (`None`: unbounded).
    pub max_setups: Option<u32>,
    /// Slots held: live permits plus grants not yet claimed by their ticket.
    pub active: u32,
    /// Highest `active` ever seen (for the "never exceeded capacity" check).
    pub max_active: u32,
    /// Waiters in the FIFO queue.
    pub queued: usize,
    /// True once `start_drain` was called.
    pub draining: bool,
    /// Dependencies currently marked down, in [`Dependency::ALL`] order.
    pub dependencies_down: Vec<Dependency>,
    /// Slots ever handed out (immediately or to a waiter).
    pub admitted_total: u64,
    /// Slots ever freed.
    pub released_total: u64,
    /// Waiters that gave up (ticket dropped) while still queued.
    pub cancelled_total: u64,
    /// Grants whose ticket was dropped before it was claimed (the caller
    /// left as its slot came free): counted in `admitted_total` and
    /// `released_total` at once, never a call. Admissions that became
    /// calls are `admitted_total - unclaimed_total`.
    pub unclaimed_total: u64,
    /// Rejections per reason.
    pub rejected_total: RejectCounts,
    /// Every partner with a quota entry or with calls in the gate, in id order:
    /// its active and queued calls and its quota, for a per-partner gauge. A
    /// partner with no quota drops out once it has no calls left (export 0).
    pub partners: Vec<PartnerLoad>,
}
