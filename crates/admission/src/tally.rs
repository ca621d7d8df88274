//! A permit's own record of the gate's counter moves, so a call's receipt can
//! state measured deltas instead of assuming them.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// How often the gate's `active` count went up and down for one permit.
///
/// A finished call shows `{ increment: 1, decrement: 1 }`. `decrement: 0` after
/// the call ended means the permit was leaked (`mem::forget`, a reference cycle)
/// and its slot is still counted as active.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CounterDelta {
    /// Times the gate counted this permit's slot as active (at the grant).
    pub increment: u32,
    /// Times the gate stopped counting it (in the exactly-once release path).
    pub decrement: u32,
}

impl CounterDelta {
    /// True when every increment was matched by a decrement.
    #[must_use]
    pub const fn is_balanced(&self) -> bool {
        self.increment == self.decrement
    }
}

#[derive(Debug, Default)]
struct Cells {
    increment: AtomicU32,
    decrement: AtomicU32,
}

/// A cheap clonable handle to one permit's counter deltas; it outlives the
/// permit, so the receipt can be written after the permit is gone. Get it with
/// [`crate::Permit::tally`].
///
/// Both cells are written by the gate, under its lock, at the very moment it
/// changes `active`; a handle only reads them.
#[derive(Clone, Default)]
pub struct PermitTally {
    cells: Arc<Cells>,
}

impl PermitTally {
    /// The deltas recorded so far.
    #[must_use]
    pub fn delta(&self) -> CounterDelta {
        CounterDelta {
            increment: self.cells.increment.load(Ordering::Acquire),
            decrement: self.cells.decrement.load(Ordering::Acquire),
        }
    }

    /// The gate raised `active` for this slot. Counted, not set, so a
    /// bookkeeping bug would show as 2 rather than hide.
    pub(crate) fn record_increment(&self) {
        self.cells.increment.fetch_add(1, Ordering::Release);
    }

    /// The gate lowered `active` for this slot.
    pub(crate) fn record_decrement(&self) {
        self.cells.decrement.fetch_add(1, Ordering::Release);
    }
}

impl fmt::Debug for PermitTally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.delta();
        f.debug_struct("PermitTally")
            .field("increment", &d.increment)
            .field("decrement", &d.decrement)
            .finish()
    }
}
