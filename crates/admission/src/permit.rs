//! The RAII permit: holding it is holding one call slot.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::gate::Shared;
use crate::partner::PartnerId;
use crate::state::{Grant, Slot};
use crate::tally::PermitTally;

/// Identifies one admission request from enqueue to release, for logs
/// ("queued as 17 … admitted 17 … released 17"). Unique per gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PermitId(pub(crate) u64);

impl PermitId {
    /// The raw number, for structured log fields.
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One admitted call's slot. Move it into the call actor; the slot is freed when
/// it drops, on every exit path (hang-up, error, panic unwind, task
/// cancellation), exactly once, and the next queued waiter gets it.
///
/// Deliberately not `Clone`: two owners of one slot is how capacity leaks.
#[must_use = "dropping a Permit frees the call slot at once"]
pub struct Permit {
    /// `Some` until the slot is released; `take()` makes release exactly-once
    /// whether it happens in [`Permit::release`] or in `Drop`.
    gate: Option<Arc<Shared>>,
    id: PermitId,
    admitted_at: Instant,
    waited: Duration,
    /// Handed back to the gate on release: the partner's count and the tally.
    slot: Slot,
}

impl Permit {
    pub(crate) fn new(gate: Arc<Shared>, grant: Grant) -> Self {
        Self {
            gate: Some(gate),
            id: grant.id,
            admitted_at: grant.admitted_at,
            waited: grant.waited,
            slot: grant.slot,
        }
    }

    /// This admission's id.
    #[must_use]
    pub const fn id(&self) -> PermitId {
        self.id
    }

    /// When the slot was granted.
    #[must_use]
    pub const fn admitted_at(&self) -> Instant {
        self.admitted_at
    }

    /// Time spent queued before the grant (zero for an immediate admission). A
    /// waiter granted by a `Drop` is stamped with the latest time the gate had
    /// seen, which may be slightly early.
    #[must_use]
    pub const fn waited(&self) -> Duration {
        self.waited
    }

    /// The partner the call was admitted for (`None` for a carrier call).
    #[must_use]
    pub const fn partner(&self) -> Option<&PartnerId> {
        self.slot.partner.as_ref()
    }

    /// A handle to this permit's measured counter deltas, readable after the
    /// permit is gone: `{1, 1}` once released, `{1, 0}` while held or leaked.
    #[must_use]
    pub fn tally(&self) -> PermitTally {
        self.slot.tally.clone()
    }

    /// The call's setup is over (it runs, or it failed and goes to the
    /// overflow path): its slot stops counting against the gate's
    /// setups-in-flight bound, so the next queued call may start its own.
    /// Idempotent; a permit released while still in setup is taken off the
    /// bound by the release.
    pub fn setup_done(&mut self, now: Instant) {
        if !self.slot.in_setup {
            return;
        }
        self.slot.in_setup = false;
        if let Some(gate) = &self.gate {
            gate.with(|s, wake| s.setup_done(now, wake));
        }
    }

    /// Frees the slot now, telling the gate the time so the next waiter's grant is
    /// stamped exactly. Dropping the permit does the same with the gate's last
    /// known time.
    pub fn release(mut self, now: Instant) {
        self.release_once(Some(now));
    }

    /// The exactly-once release path shared by [`Permit::release`] and `Drop`:
    /// `take()` leaves `None` behind, so the second caller finds nothing to do.
    fn release_once(&mut self, now: Option<Instant>) {
        if let Some(gate) = self.gate.take() {
            let slot = &self.slot;
            gate.with(|s, wake| s.release_slot(slot, now, wake));
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.release_once(None);
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("id", &self.id)
            .field("admitted_at", &self.admitted_at)
            .field("waited", &self.waited)
            .field("partner", &self.slot.partner)
            .field("tally", &self.slot.tally)
            .field("released", &self.gate.is_none())
            .finish()
    }
}
