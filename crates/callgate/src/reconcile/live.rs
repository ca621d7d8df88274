//! The calls alive in this process, by id: what the reconciler compares
//! with the ledger's open rows to name the sessions a divergence affects.
//!
//! An entry is RAII ([`LiveEntry`]): the ingress takes one right after
//! admission and the call holds it until its task ends, so a call that
//! panics or is cancelled leaves the registry by dropping. It is never the
//! runtime counter itself (that is the gate's permit count): it only names
//! calls — and tells one that its record was taken by another instance
//! ([`LiveCalls::lose`]: the entry's [`LiveEntry::lost`] token is
//! cancelled; the call says goodbye and ends `owner_fenced`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use state_store::CallId;
use tokio_util::sync::CancellationToken;

type Entries = BTreeMap<CallId, CancellationToken>;

/// The registry. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct LiveCalls {
    ids: Arc<Mutex<Entries>>,
}

impl LiveCalls {
    /// Registers `id` until the returned entry drops.
    pub fn enter(&self, id: CallId) -> LiveEntry {
        let lost = CancellationToken::new();
        self.lock().insert(id, lost.clone());
        LiveEntry {
            ids: Arc::clone(&self.ids),
            id,
            lost,
        }
    }

    /// The live call ids now, in order.
    pub fn ids(&self) -> BTreeSet<CallId> {
        self.lock().keys().copied().collect()
    }

    /// Tells each of `ids` still live here that its record belongs to
    /// another instance now. Returns how many were told.
    pub fn lose(&self, ids: &[CallId]) -> usize {
        let entries = self.lock();
        ids.iter()
            .filter_map(|id| entries.get(id))
            .inspect(|t| t.cancel())
            .count()
    }

    /// The token [`LiveCalls::lose`] cancels for `id`, if it is live.
    pub fn lost(&self, id: CallId) -> Option<CancellationToken> {
        self.lock().get(&id).cloned()
    }

    fn lock(&self) -> MutexGuard<'_, Entries> {
        lock(&self.ids)
    }
}

fn lock(ids: &Mutex<Entries>) -> MutexGuard<'_, Entries> {
    // A panic while holding the lock leaves a consistent set (single ops).
    ids.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One call's place in [`LiveCalls`].
#[must_use]
#[derive(Debug)]
pub struct LiveEntry {
    ids: Arc<Mutex<Entries>>,
    id: CallId,
    lost: CancellationToken,
}

impl LiveEntry {
    /// Cancelled when another instance took this call's record.
    pub fn lost(&self) -> &CancellationToken {
        &self.lost
    }
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

    #[test]
    fn losing_a_call_cancels_only_its_token_and_only_while_it_lives() {
        let live = LiveCalls::default();
        let (a, b, gone) = (
            CallId::new_random(),
            CallId::new_random(),
            CallId::new_random(),
        );
        let ea = live.enter(a);
        let eb = live.enter(b);
        assert_eq!(live.lose(&[a, gone]), 1, "a departed call is not told");
        assert!(ea.lost().is_cancelled());
        assert!(!eb.lost().is_cancelled());
        assert!(live.lost(b).is_some_and(|t| !t.is_cancelled()));
        drop(ea);
        assert!(live.lost(a).is_none());
    }
}
