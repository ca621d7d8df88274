//! When to send `close_context` and when a closing context is overdue:
//! the session's one piece of timing logic, kept free of I/O so it is
//! tested on a made-up clock.
//!
//! Why it exists: a graceful end of turn must not lose audio, but
//! providers differ in what `close_context` does to audio still being
//! generated (ElevenLabs documents that flushed text keeps flushing; a
//! provider — or our simulator — may stop at once). So a graceful close
//! first flushes, then holds `close_context` back until the alignment of
//! the received audio covers every character sent. If the provider sends
//! no alignment, the close goes out once the context has been quiet for
//! `close_timeout`. A cancel (barge-in) sends `close_context` at once.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::context::ContextId;

/// What the actor must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Send `close_context` for this context now.
    SendClose(ContextId),
    /// The context was closed but neither audio nor its final message came
    /// within `close_timeout`.
    FinalOverdue(ContextId),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Open,
    /// Flushed; waiting for the rest of the audio before `close_context`.
    Draining,
    /// `close_context` sent; waiting for the final message.
    CloseSent,
}

#[derive(Debug)]
struct Entry {
    sent: usize,
    heard: usize,
    phase: Phase,
    last_progress: Instant,
}

#[derive(Debug)]
pub(crate) struct Tracker {
    close_timeout: Duration,
    entries: HashMap<ContextId, Entry>,
}

impl Tracker {
    pub fn new(close_timeout: Duration) -> Self {
        Tracker {
            close_timeout,
            entries: HashMap::new(),
        }
    }

    pub fn open(&mut self, id: ContextId, now: Instant) {
        let entry = Entry {
            sent: 0,
            heard: 0,
            phase: Phase::Open,
            last_progress: now,
        };
        self.entries.insert(id, entry);
    }

    /// `chars` voiced characters of text were sent for `id`.
    pub fn sent(&mut self, id: ContextId, chars: usize) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.sent += chars;
        }
    }

    /// Audio arrived for `id`, its alignment covering `chars` voiced
    /// characters (`None`: no alignment).
    pub fn heard(&mut self, id: ContextId, chars: Option<usize>, now: Instant) -> Option<Action> {
        let e = self.entries.get_mut(&id)?;
        e.heard += chars.unwrap_or(0);
        e.last_progress = now;
        self.maybe_close(id)
    }

    /// Graceful close requested (the flush was already sent).
    pub fn close(&mut self, id: ContextId, now: Instant) -> Option<Action> {
        let e = self.entries.get_mut(&id)?;
        if e.phase != Phase::Open {
            return None;
        }
        e.phase = Phase::Draining;
        e.last_progress = now;
        self.maybe_close(id)
    }

    /// Barge-in: `close_context` at once.
    pub fn cancel(&mut self, id: ContextId, now: Instant) -> Option<Action> {
        let e = self.entries.get_mut(&id)?;
        if e.phase == Phase::CloseSent {
            return None;
        }
        e.phase = Phase::CloseSent;
        e.last_progress = now;
        Some(Action::SendClose(id))
    }

    /// The final message arrived.
    pub fn finalised(&mut self, id: ContextId) {
        self.entries.remove(&id);
    }

    /// The newest context still open (no `close_context` sent yet): the
    /// one a keep-alive should name.
    pub fn live_context(&self) -> Option<ContextId> {
        self.entries
            .iter()
            .filter(|(_, e)| e.phase == Phase::Open)
            .map(|(id, _)| *id)
            .max()
    }

    /// When [`Tracker::on_timeout`] has work next.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.entries
            .values()
            .filter(|e| e.phase != Phase::Open)
            .map(|e| e.last_progress + self.close_timeout)
            .min()
    }

    pub fn on_timeout(&mut self, now: Instant) -> Vec<Action> {
        let mut actions = Vec::new();
        for (id, e) in &mut self.entries {
            if e.phase == Phase::Open || e.last_progress + self.close_timeout > now {
                continue;
            }
            if e.phase == Phase::Draining {
                // No alignment (or less than we sent): stop waiting.
                e.phase = Phase::CloseSent;
                e.last_progress = now;
                actions.push(Action::SendClose(*id));
            } else {
                actions.push(Action::FinalOverdue(*id));
            }
        }
        actions
    }

    fn maybe_close(&mut self, id: ContextId) -> Option<Action> {
        let e = self.entries.get_mut(&id)?;
        if e.phase == Phase::Draining && e.heard >= e.sent {
            e.phase = Phase::CloseSent;
            return Some(Action::SendClose(id));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(3);
    const A: ContextId = ContextId(1);

    fn ms(t0: Instant, n: u64) -> Instant {
        t0 + Duration::from_millis(n)
    }

    #[test]
    fn graceful_close_waits_until_the_alignment_covers_the_text() {
        let t0 = Instant::now();
        let mut t = Tracker::new(T);
        t.open(A, t0);
        t.sent(A, 10);
        assert_eq!(
            t.heard(A, Some(4), ms(t0, 100)),
            None,
            "still open: no close"
        );
        assert_eq!(t.close(A, ms(t0, 150)), None, "6 chars still to come");
        assert_eq!(t.heard(A, Some(4), ms(t0, 200)), None);
        assert_eq!(t.heard(A, Some(2), ms(t0, 250)), Some(Action::SendClose(A)));
        assert_eq!(t.heard(A, Some(1), ms(t0, 300)), None, "close is sent once");
    }

    #[test]
    fn close_with_everything_heard_is_immediate_and_cancel_never_waits() {
        let t0 = Instant::now();
        let mut t = Tracker::new(T);
        t.open(A, t0);
        assert_eq!(t.close(A, t0), Some(Action::SendClose(A)));
        let b = ContextId(2);
        t.open(b, t0);
        t.sent(b, 50);
        assert_eq!(t.cancel(b, t0), Some(Action::SendClose(b)));
        assert_eq!(t.cancel(b, t0), None);
    }

    #[test]
    fn without_alignment_the_close_goes_out_after_a_quiet_close_timeout() {
        let t0 = Instant::now();
        let mut t = Tracker::new(T);
        t.open(A, t0);
        t.sent(A, 10);
        assert_eq!(t.next_deadline(), None, "open contexts have no deadline");
        t.close(A, t0);
        t.heard(A, None, ms(t0, 1_000));
        assert_eq!(t.next_deadline(), Some(ms(t0, 4_000)));
        assert!(t.on_timeout(ms(t0, 3_999)).is_empty());
        assert_eq!(t.on_timeout(ms(t0, 4_000)), vec![Action::SendClose(A)]);
        // Then the final message is due within another close_timeout.
        assert!(t.on_timeout(ms(t0, 6_999)).is_empty());
        assert_eq!(t.on_timeout(ms(t0, 7_000)), vec![Action::FinalOverdue(A)]);
        t.finalised(A);
        assert_eq!(t.next_deadline(), None);
    }

    #[test]
    fn the_live_context_is_the_newest_one_not_yet_closing() {
        let t0 = Instant::now();
        let mut t = Tracker::new(T);
        assert_eq!(t.live_context(), None);
        t.open(A, t0);
        let b = ContextId(2);
        t.open(b, t0);
        assert_eq!(t.live_context(), Some(b));
        t.sent(b, 5);
        t.close(b, t0);
        assert_eq!(t.live_context(), Some(A), "a closing context is not named");
        t.cancel(A, t0);
        assert_eq!(t.live_context(), None);
    }

    #[test]
    fn audio_after_close_context_keeps_the_final_deadline_moving() {
        let t0 = Instant::now();
        let mut t = Tracker::new(T);
        t.open(A, t0);
        t.sent(A, 100);
        t.cancel(A, t0);
        t.heard(A, Some(10), ms(t0, 2_500));
        assert!(t.on_timeout(ms(t0, 5_000)).is_empty());
        assert_eq!(t.on_timeout(ms(t0, 5_500)), vec![Action::FinalOverdue(A)]);
    }
}
