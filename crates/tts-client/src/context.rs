//! Context ids and the table of open contexts shared by the handle, the
//! actor and the event receiver.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use reconnect::Tally;

use crate::error::{CloseReason, TtsError};

/// Text bytes (all contexts together) the handle accepts while the socket
/// is down and being reconnected: about two minutes of speech, far more
/// than a reply, so only a caller that keeps streaming into a dead
/// session reaches it. Past it `send_text` is refused with
/// [`TtsError::Backpressure`]; the text already accepted is kept and
/// re-sent on the new socket, and the caller may send again after
/// [`crate::TtsEvent::Reconnected`].
pub const RECONNECT_TEXT_CAPACITY: usize = 2_048;

/// The provider's limit of simultaneous contexts per socket. The client
/// refuses to go past it instead of provoking the provider's 1008 close.
pub const MAX_CONTEXTS: usize = 5;

/// One generation stream on a socket (one bot turn, usually).
/// On the wire it is `ctx-<n>`, for ElevenLabs and Cartesia alike (both
/// take any string as a context id).
#[derive(Copy, Clone, Eq, PartialEq, Hash, Debug, PartialOrd, Ord)]
pub struct ContextId(pub u64);

impl ContextId {
    /// Parses the wire form `ctx-<n>`, exactly as [`fmt::Display`] writes
    /// it: `ctx-+1` or `ctx-01` are not our ids, even though `u64` parses
    /// their digits.
    pub fn from_wire(s: &str) -> Option<Self> {
        let digits = s.strip_prefix("ctx-")?;
        let canonical = digits.bytes().all(|b| b.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'));
        canonical
            .then(|| digits.parse().ok().map(ContextId))
            .flatten()
    }
}

impl fmt::Display for ContextId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ctx-{}", self.0)
    }
}

/// Where a context is in its life, as the caller last asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CtxState {
    /// Takes text.
    Open,
    /// Ended gracefully: its remaining audio still arrives.
    Closing,
    /// Cancelled (barge-in): its audio is dropped from now on.
    Cancelled,
}

/// State shared by the handle, the actor and the event receiver.
///
/// A context is in the table from `open_context` until the caller has
/// received its `ContextFinal`, which covers the whole time the provider
/// counts it against its limit.
#[derive(Debug)]
pub(crate) struct Shared {
    pub label: String,
    contexts: Mutex<HashMap<ContextId, CtxState>>,
    late_audio_dropped: AtomicU64,
    /// Contexts ended locally because their final never came.
    finals_overdue: AtomicU64,
    /// Set by the actor when the session ends.
    terminal: Mutex<Option<CloseReason>>,
    /// The actor's reconnect tally, copied after every change.
    tally: Mutex<Tally>,
    /// True while the socket is down and being reconnected.
    reconnecting: AtomicBool,
    /// Text bytes accepted since the socket went down.
    held_text: AtomicUsize,
}

impl Shared {
    pub fn new(label: &str) -> Self {
        Shared {
            label: label.to_owned(),
            contexts: Mutex::new(HashMap::new()),
            late_audio_dropped: AtomicU64::new(0),
            finals_overdue: AtomicU64::new(0),
            terminal: Mutex::new(None),
            tally: Mutex::new(Tally::default()),
            reconnecting: AtomicBool::new(false),
            held_text: AtomicUsize::new(0),
        }
    }

    pub fn tally(&self) -> Tally {
        *self.tally.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn set_tally(&self, tally: Tally) {
        *self.tally.lock().unwrap_or_else(PoisonError::into_inner) = tally;
    }

    /// The socket went down (`true`) or is up again (`false`); either way
    /// the held-text count starts from zero.
    pub fn set_reconnecting(&self, down: bool) {
        self.held_text.store(0, Ordering::Relaxed);
        self.reconnecting.store(down, Ordering::Relaxed);
    }

    /// Accounts `bytes` of text while reconnecting; false when that would
    /// pass [`RECONNECT_TEXT_CAPACITY`] (nothing is accounted then). Always
    /// true while the socket is up.
    pub fn hold_text(&self, bytes: usize) -> bool {
        if !self.reconnecting.load(Ordering::Relaxed) {
            return true;
        }
        self.held_text
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                (held + bytes <= RECONNECT_TEXT_CAPACITY).then_some(held + bytes)
            })
            .is_ok()
    }

    fn table(&self) -> MutexGuard<'_, HashMap<ContextId, CtxState>> {
        // The table holds plain data; a panic elsewhere cannot leave it
        // half-updated, so a poisoned lock is still usable.
        self.contexts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a context, refusing duplicates and the sixth.
    pub fn insert(&self, id: ContextId) -> Result<(), TtsError> {
        let mut t = self.table();
        if t.contains_key(&id) {
            return Err(TtsError::ContextExists { context: id });
        }
        if t.len() >= MAX_CONTEXTS {
            return Err(TtsError::TooManyContexts {
                context: id,
                open: t.len(),
                max: MAX_CONTEXTS,
            });
        }
        t.insert(id, CtxState::Open);
        Ok(())
    }

    pub fn state(&self, id: ContextId) -> Option<CtxState> {
        self.table().get(&id).copied()
    }

    /// Sets the state of a known context; returns the previous one.
    pub fn set_state(&self, id: ContextId, state: CtxState) -> Option<CtxState> {
        self.table()
            .get_mut(&id)
            .map(|s| std::mem::replace(s, state))
    }

    pub fn remove(&self, id: ContextId) -> Option<CtxState> {
        self.table().remove(&id)
    }

    pub fn len(&self) -> usize {
        self.table().len()
    }

    pub fn clear(&self) {
        self.table().clear();
    }

    /// Whether audio for `id` should reach the caller.
    pub fn wants_audio(&self, id: ContextId) -> bool {
        matches!(self.state(id), Some(CtxState::Open | CtxState::Closing))
    }

    pub fn count_late_audio(&self) {
        self.late_audio_dropped.fetch_add(1, Ordering::Relaxed);
    }

    pub fn count_final_overdue(&self) {
        self.finals_overdue.fetch_add(1, Ordering::Relaxed);
    }

    pub fn finals_overdue(&self) -> u64 {
        self.finals_overdue.load(Ordering::Relaxed)
    }

    pub fn late_audio_dropped(&self) -> u64 {
        self.late_audio_dropped.load(Ordering::Relaxed)
    }

    pub fn set_terminal(&self, reason: CloseReason) {
        let mut t = self.terminal.lock().unwrap_or_else(PoisonError::into_inner);
        t.get_or_insert(reason);
    }

    pub fn terminal(&self) -> Option<CloseReason> {
        self.terminal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The error for a call on a session that has ended.
    pub fn closed_error(&self) -> TtsError {
        TtsError::Closed {
            label: self.label.clone(),
            reason: self.terminal().unwrap_or(CloseReason::ConnectionLost {
                message: "session task ended".into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_form_round_trips() {
        assert_eq!(ContextId(17).to_string(), "ctx-17");
        assert_eq!(ContextId::from_wire("ctx-17"), Some(ContextId(17)));
        assert_eq!(ContextId::from_wire("turn-17"), None);
    }

    #[test]
    fn table_refuses_duplicates_and_the_sixth_context() {
        let s = Shared::new("t");
        for i in 0..5 {
            s.insert(ContextId(i)).unwrap();
        }
        assert_eq!(
            s.insert(ContextId(0)),
            Err(TtsError::ContextExists {
                context: ContextId(0)
            })
        );
        assert!(matches!(
            s.insert(ContextId(9)),
            Err(TtsError::TooManyContexts {
                open: 5,
                max: 5,
                ..
            })
        ));
        s.set_state(ContextId(1), CtxState::Cancelled);
        assert!(!s.wants_audio(ContextId(1)));
        assert!(s.wants_audio(ContextId(2)));
        s.remove(ContextId(1));
        s.insert(ContextId(9)).unwrap();
    }

    #[test]
    fn text_is_held_up_to_the_bound_only_while_reconnecting() {
        let s = Shared::new("t");
        assert!(
            s.hold_text(RECONNECT_TEXT_CAPACITY * 10),
            "up: no bound here"
        );
        s.set_reconnecting(true);
        assert!(s.hold_text(RECONNECT_TEXT_CAPACITY - 10));
        assert!(!s.hold_text(11), "past the bound");
        assert!(s.hold_text(10), "a refusal accounts nothing");
        assert!(!s.hold_text(1));
        s.set_reconnecting(false);
        assert!(s.hold_text(RECONNECT_TEXT_CAPACITY * 10));
        s.set_reconnecting(true);
        assert!(
            s.hold_text(RECONNECT_TEXT_CAPACITY),
            "a new outage starts at zero"
        );
    }
}
