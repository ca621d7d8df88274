//! The calls alive in this process, by id: what the reconciler compares
//! with the ledger's open rows to name the sessions a divergence affects.
//!
//! An entry is RAII ([`LiveEntry`]): the ingress takes one right after
//! admission and the call holds it until its task ends, so a call that
//! panics or is cancelled leaves the registry by dropping. It is never the
//! runtime counter itself (that is the gate's permit count): it only names
//! calls.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};

use state_store::CallId;

/// The registry. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct LiveCalls {
    ids: Arc<Mutex<BTreeSet<CallId>>>,
}

impl LiveCalls {
    /// Registers `id` until the returned entry drops.
    pub fn enter(&self, id: CallId) -> LiveEntry {
        self.lock().insert(id);
        LiveEntry {
            ids: Arc::clone(&self.ids),
            id,
        }
    }

    /// The live call ids now, in order.
    pub fn ids(&self) -> BTreeSet<CallId> {
        self.lock().clone()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeSet<CallId>> {
        lock(&self.ids)
    }
}

fn lock(ids: &Mutex<BTreeSet<CallId>>) -> MutexGuard<'_, BTreeSet<CallId>> {
    // A panic while holding the lock leaves a consistent set (single ops).
    ids.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One call's place in [`LiveCalls`].
#[must_use]
#[derive(Debug)]
pub struct LiveEntry {
    ids: Arc<Mutex<BTreeSet<CallId>>>,
    id: CallId,
}

impl Drop for LiveEntry {
    fn drop(&mut self) {
        lock(&self.ids).remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_lives_as_long_as_its_guard() {
        let live = LiveCalls::default();
        let (a, b) = (CallId::new_random(), CallId::new_random());
        let ea = live.enter(a);
        let eb = live.enter(b);
        assert_eq!(live.ids().len(), 2);
        drop(ea);
        assert_eq!(live.ids().into_iter().collect::<Vec<_>>(), vec![b]);
        drop(eb);
        assert!(live.ids().is_empty());
    }
}
