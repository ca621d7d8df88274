//! Conversations kept for a resumed stream (`SessionStart.resume`).
//!
//! Every stream writes a [`Checkpoint`] of its bot here, keyed by
//! `call_id`, at each turn boundary: the state before the reply in flight,
//! or the current state when no reply is in flight. A stream that ends with
//! `SessionEnd` removes its entry; one that ends any other way (an injected
//! fault, the client vanishing, a half-close without `SessionEnd`) leaves
//! it, and a later `SessionStart{resume: true}` for the same call continues
//! from it. Because the checkpoint of an unfinished reply is the state
//! *before* it, the user turn callgate re-sends is answered from the same
//! state as the first time, so with the same text (the bot is
//! deterministic) — a client can skip the prefix it already delivered.
//!
//! Writing at every boundary, not only when a stream ends, means a resume
//! that overtakes the old stream's teardown (the client reconnected before
//! the simulator noticed the old stream was gone) still finds the state.
//! Each entry has an owner, the number of the stream that wrote or claimed
//! it last; a stream that has been superseded (a newer stream claimed its
//! call) can no longer write or remove the entry.
//!
//! Bounded: at most [`RESUME_CAPACITY`] calls; storing one more evicts the
//! entry written longest ago (a call idle the longest, most likely long
//! over). Sans-IO: no clock, no tasks.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use super::bot::Bot;

/// Calls whose conversation is kept. Far above any stream cap; the entries
/// left behind by dropped streams are what it bounds.
pub const RESUME_CAPACITY: usize = 10_000;

/// What a resumed stream continues from.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    pub bot: Bot,
    /// The stream's tool-call counter, so a re-sent turn's tool calls get
    /// the same ids.
    pub tool_seq: u64,
    /// The newest user turn id answered (replies to DTMF carry it).
    pub latest_turn: u64,
}

#[derive(Debug)]
struct Entry {
    owner: u64,
    /// Write order: the key of this entry in `Inner::order`.
    stamp: u64,
    checkpoint: Checkpoint,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    /// Stamp → call id, oldest write first.
    order: BTreeMap<u64, String>,
    next_stamp: u64,
}

/// The shared store of one dialog simulator.
#[derive(Debug)]
pub struct ResumeStore {
    capacity: usize,
    inner: Mutex<Inner>,
}

impl Default for ResumeStore {
    fn default() -> Self {
        ResumeStore::with_capacity(RESUME_CAPACITY)
    }
}

impl ResumeStore {
    /// A store keeping at most `capacity` calls (at least one).
    pub fn with_capacity(capacity: usize) -> Self {
        ResumeStore {
            capacity: capacity.max(1),
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every update leaves the maps consistent before it can panic.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stream `owner` takes over `call_id`, returning the conversation kept
    /// for it, if any. From now on older streams of the call cannot write
    /// it; the new owner saves its own checkpoint right after.
    pub fn claim(&self, call_id: &str, owner: u64) -> Option<Checkpoint> {
        let mut inner = self.lock();
        let entry = inner.entries.get_mut(call_id)?;
        entry.owner = entry.owner.max(owner);
        Some(entry.checkpoint.clone())
    }

    /// Stream `owner` records the conversation of `call_id`, unless a newer
    /// stream has claimed the call.
    pub fn save(&self, call_id: &str, owner: u64, checkpoint: Checkpoint) {
        let mut inner = self.lock();
        if inner.entries.get(call_id).is_some_and(|e| e.owner > owner) {
            return;
        }
        inner.put(self.capacity, call_id, owner, checkpoint);
    }

    /// The call ended normally (`SessionEnd`): forget it, unless a newer
    /// stream owns it.
    pub fn remove(&self, call_id: &str, owner: u64) {
        let mut inner = self.lock();
        if inner.entries.get(call_id).is_some_and(|e| e.owner <= owner)
            && let Some(e) = inner.entries.remove(call_id)
        {
            inner.order.remove(&e.stamp);
        }
    }

    /// Calls kept right now.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether no call is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Inner {
    /// Inserts or rewrites an entry as the newest, evicting the oldest
    /// beyond `capacity`.
    fn put(&mut self, capacity: usize, call_id: &str, owner: u64, cp: Checkpoint) {
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        if let Some(old) = self.entries.insert(
            call_id.to_owned(),
            Entry {
                owner,
                stamp,
                checkpoint: cp,
            },
        ) {
            self.order.remove(&old.stamp);
        }
        self.order.insert(stamp, call_id.to_owned());
        while self.entries.len() > capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cp(tool_seq: u64) -> Checkpoint {
        Checkpoint {
            bot: Bot::new(),
            tool_seq,
            latest_turn: tool_seq,
        }
    }

    #[test]
    fn a_saved_call_is_claimed_once_and_removed_by_its_owner() {
        let store = ResumeStore::default();
        assert!(store.claim("a", 1).is_none(), "nothing kept yet");
        store.save("a", 1, cp(3));
        let kept = store.claim("a", 2).expect("kept for the resume");
        assert_eq!(kept.tool_seq, 3);
        store.save("a", 2, cp(4));
        store.remove("a", 2);
        assert!(store.is_empty());
        assert!(
            store.claim("a", 3).is_none(),
            "a finished call is forgotten"
        );
    }

    #[test]
    fn a_superseded_stream_can_neither_write_nor_remove() {
        let store = ResumeStore::default();
        store.save("a", 1, cp(1));
        let _ = store.claim("a", 2);
        store.save("a", 2, cp(2));
        store.save("a", 1, cp(9));
        store.remove("a", 1);
        assert_eq!(store.claim("a", 3).map(|c| c.tool_seq), Some(2));
    }

    #[test]
    fn beyond_the_cap_the_oldest_write_is_evicted() {
        let store = ResumeStore::with_capacity(3);
        for (i, call) in ["a", "b", "c"].into_iter().enumerate() {
            store.save(call, 1, cp(i as u64));
        }
        // Rewriting "a" makes it the newest; "b" is now the oldest.
        store.save("a", 1, cp(10));
        store.save("d", 1, cp(11));
        assert_eq!(store.len(), 3);
        assert!(store.claim("b", 2).is_none(), "evicted");
        assert_eq!(store.claim("c", 2).map(|c| c.tool_seq), Some(2));
        assert_eq!(store.claim("a", 2).map(|c| c.tool_seq), Some(10));
        assert_eq!(store.claim("d", 2).map(|c| c.tool_seq), Some(11));
        assert_eq!(RESUME_CAPACITY, ResumeStore::default().capacity);
    }
}
