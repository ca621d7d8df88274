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
//! Providers whose graceful close is an end-of-input marker (Cartesia's
//! `continue:false`) get it at once too (`close_waits_for_audio: false`).
//!
//! It also keeps, per context, the text sent and how much of it was heard,
//! so that a reconnect can re-request exactly the unheard rest
//! ([`Tracker::take_resume`], [`crate::resume::unheard`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::context::ContextId;
use crate::resume::{Heard, unheard};
use crate::wire::voiced_chars;

/// What the actor must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Send the graceful close for this context now.
    SendClose(ContextId),
    /// Send the cancel for this context now.
    SendCancel(ContextId),
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
    /// Every character of text sent (or, while reconnecting, to be sent).
    text: String,
    /// Voiced characters of `text`.
    sent: usize,
    /// Voiced characters covered by a character alignment.
    heard: usize,
    /// Words covered by word timestamps.
    heard_words: usize,
    /// Whether any alignment came (else `audio` is the only evidence).
    aligned: bool,
    /// A cancel went out: never another.
    cancelled: bool,
    /// Playing time of the audio received.
    audio: Duration,
    phase: Phase,
    last_progress: Instant,
}

impl Entry {
    fn heard(&self) -> Heard {
        if self.heard_words > 0 {
            Heard::Words(self.heard_words)
        } else if self.aligned {
            Heard::Voiced(self.heard)
        } else {
            Heard::Audio(self.audio)
        }
    }

    fn unheard(&self) -> &str {
        unheard(&self.text, self.heard())
    }
}

/// A live context to re-open on a new socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resume {
    pub id: ContextId,
    /// The text not yet heard, from the start of the word in progress.
    pub text: String,
    /// The caller had closed it: close it again once the text is sent.
    pub closing: bool,
}

#[derive(Debug)]
pub(crate) struct Tracker {
    close_timeout: Duration,
    close_waits_for_audio: bool,
    entries: HashMap<ContextId, Entry>,
}

impl Tracker {
    pub fn new(close_timeout: Duration, close_waits_for_audio: bool) -> Self {
        Tracker {
            close_timeout,
            close_waits_for_audio,
            entries: HashMap::new(),
        }
    }

    pub fn open(&mut self, id: ContextId, now: Instant) {
        let entry = Entry {
            text: String::new(),
            sent: 0,
            heard: 0,
            heard_words: 0,
            aligned: false,
            cancelled: false,
            audio: Duration::ZERO,
            phase: Phase::Open,
            last_progress: now,
        };
        self.entries.insert(id, entry);
    }

    /// `text` was sent for `id`.
    pub fn sent(&mut self, id: ContextId, text: &str) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.text.push_str(text);
            e.sent += voiced_chars(text);
        }
    }

    /// `audio` worth of sound arrived for `id`, its alignment covering
    /// `chars` voiced characters (`None`: no alignment).
    pub fn heard(
        &mut self,
        id: ContextId,
        chars: Option<usize>,
        audio: Duration,
        now: Instant,
    ) -> Option<Action> {
        let e = self.entries.get_mut(&id)?;
        e.heard += chars.unwrap_or(0);
        e.aligned |= chars.is_some();
        e.audio += audio;
        e.last_progress = now;
        self.maybe_close(id)
    }

    /// Word timestamps covering `words` more words arrived for `id`.
    pub fn heard_words(&mut self, id: ContextId, words: usize, now: Instant) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.heard_words += words;
            e.aligned = true;
            e.last_progress = now;
        }
    }

    /// Graceful close requested (the flush was already sent).
    pub fn close(&mut self, id: ContextId, now: Instant) -> Option<Action> {
        let e = self.entries.get_mut(&id)?;
        if e.phase != Phase::Open {
            return None;
        }
        e.phase = Phase::Draining;
        e.last_progress = now;
        if !self.close_waits_for_audio {
            e.phase = Phase::CloseSent;
            return Some(Action::SendClose(id));
        }
        self.maybe_close(id)
    }

    /// Graceful close requested while no socket is up: remembered, sent by
    /// the resume.
    pub fn mark_closing(&mut self, id: ContextId) {
        if let Some(e) = self.entries.get_mut(&id)
            && e.phase == Phase::Open
        {
            e.phase = Phase::Draining;
        }
    }

    /// Barge-in: the cancel goes out at once — once. Where the graceful
    /// close and the cancel are the same message (ElevenLabs'
    /// `close_context`), a context whose close already went out gets none.
    pub fn cancel(&mut self, id: ContextId, now: Instant) -> Option<Action> {
        let e = self.entries.get_mut(&id)?;
        if e.cancelled || (e.phase == Phase::CloseSent && self.close_waits_for_audio) {
            return None;
        }
        e.cancelled = true;
        e.phase = Phase::CloseSent;
        e.last_progress = now;
        Some(Action::SendCancel(id))
    }

    /// Contexts the caller closed whose every word was already heard: at a
    /// drop they are finished, with nothing to resume.
    pub fn fully_heard_closing(&self) -> Vec<ContextId> {
        let mut done: Vec<ContextId> = self
            .entries
            .iter()
            .filter(|(_, e)| e.phase != Phase::Open && e.unheard().is_empty())
            .map(|(id, _)| *id)
            .collect();
        done.sort();
        done
    }

    /// Every live context, with its unheard text, for a new socket. Each
    /// entry starts over as if that text had just been opened and sent
    /// at `now`; the caller re-sends it and re-closes the closing ones
    /// with [`Tracker::close`].
    pub fn take_resume(&mut self, now: Instant) -> Vec<Resume> {
        let mut out: Vec<Resume> = self
            .entries
            .iter_mut()
            .map(|(id, e)| {
                let text = e.unheard().to_owned();
                let closing = e.phase != Phase::Open;
                *e = Entry {
                    sent: voiced_chars(&text),
                    text: text.clone(),
                    heard: 0,
                    heard_words: 0,
                    aligned: false,
                    cancelled: false,
                    audio: Duration::ZERO,
                    phase: Phase::Open,
                    last_progress: now,
                };
                Resume {
                    id: *id,
                    text,
                    closing,
                }
            })
            .collect();
        out.sort_by_key(|r| r.id);
        out
    }

    /// The ids of every context tracked.
    pub fn ids(&self) -> Vec<ContextId> {
        self.entries.keys().copied().collect()
    }

    /// The context is over; false when it was not tracked (already over).
    pub fn finalised(&mut self, id: ContextId) -> bool {
        self.entries.remove(&id).is_some()
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

    /// `n` voiced characters.
    fn x(n: usize) -> String {
        "x".repeat(n)
    }

    #[test]
    fn graceful_close_waits_until_the_alignment_covers_the_text() {
        let t0 = Instant::now();
        let mut t = Tracker::new(T, true);
        t.open(A, t0);
        t.sent(A, &x(10));
        assert_eq!(
            t.heard(A, Some(4), Duration::ZERO, ms(t0, 100)),
            None,
            "still open: no close"
        );
        assert_eq!(t.close(A, ms(t0, 150)), None, "6 chars still to come");
        assert_eq!(t.heard(A, Some(4), Duration::ZERO, ms(t0, 200)), None);
        assert_eq!(
            t.heard(A, Some(2), Duration::ZERO, ms(t0, 250)),
            Some(Action::SendClose(A))
        );
        assert_eq!(
            t.heard(A, Some(1), Duration::ZERO, ms(t0, 300)),
            None,
            "close is sent once"
        );
    }

    #[test]
    fn close_with_everything_heard_is_immediate_and_cancel_never_waits() {
        let t0 = Instant::now();
        let mut t = Tracker::new(T, true);
        t.open(A, t0);
        assert_eq!(t.close(A, t0), Some(Action::SendClose(A)));
        let b = ContextId(2);
        t.open(b, t0);
        t.sent(b, &x(50));
        assert_eq!(t.cancel(b, t0), Some(Action::SendCancel(b)));
        assert_eq!(t.cancel(b, t0), None);
    }

    #[test]
    fn without_alignment_the_close_goes_out_after_a_quiet_close_timeout() {
        let t0 = Instant::now();
        let mut t = Tracker::new(T, true);
        t.open(A, t0);
        t.sent(A, &x(10));
        assert_eq!(t.next_deadline(), None, "open contexts have no deadline");
        t.close(A, t0);
        t.heard(A, None, Duration::ZERO, ms(t0, 1_000));
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
        let mut t = Tracker::new(T, true);
        assert_eq!(t.live_context(), None);
        t.open(A, t0);
        let b = ContextId(2);
        t.open(b, t0);
        assert_eq!(t.live_context(), Some(b));
        t.sent(b, &x(5));
        t.close(b, t0);
        assert_eq!(t.live_context(), Some(A), "a closing context is not named");
        t.cancel(A, t0);
        assert_eq!(t.live_context(), None);
    }

    #[test]
    fn audio_after_close_context_keeps_the_final_deadline_moving() {
        let t0 = Instant::now();
        let mut t = Tracker::new(T, true);
        t.open(A, t0);
        t.sent(A, &x(100));
        t.cancel(A, t0);
        t.heard(A, Some(10), Duration::ZERO, ms(t0, 2_500));
        assert!(t.on_timeout(ms(t0, 5_000)).is_empty());
        assert_eq!(t.on_timeout(ms(t0, 5_500)), vec![Action::FinalOverdue(A)]);
    }

    #[test]
    fn an_end_of_input_close_goes_out_at_once_and_a_cancel_may_follow_it() {
        let t0 = Instant::now();
        let mut t = Tracker::new(T, false);
        t.open(A, t0);
        t.sent(A, "Hello there. ");
        assert_eq!(t.close(A, t0), Some(Action::SendClose(A)));
        assert_eq!(t.cancel(A, t0), Some(Action::SendCancel(A)));
        assert_eq!(t.cancel(A, t0), None, "one cancel");
        let mut el = Tracker::new(T, true);
        el.open(A, t0);
        assert_eq!(el.close(A, t0), Some(Action::SendClose(A)));
        assert_eq!(el.cancel(A, t0), None, "close_context was already sent");
    }

    #[test]
    fn a_resume_re_requests_only_the_unheard_words_and_starts_over() {
        let t0 = Instant::now();
        let mut t = Tracker::new(T, true);
        let b = ContextId(2);
        t.open(A, t0);
        t.sent(A, "Your table is ");
        t.sent(A, "booked for seven. ");
        // "Yourtableisbo" heard: "booked" was in progress.
        t.heard(A, Some(13), Duration::from_millis(900), ms(t0, 100));
        t.close(A, ms(t0, 100));
        t.open(b, t0);
        t.sent(b, "Anything else? ");
        assert!(t.fully_heard_closing().is_empty());
        let resumed = t.take_resume(ms(t0, 5_000));
        assert_eq!(
            resumed,
            vec![
                Resume {
                    id: A,
                    text: "booked for seven. ".into(),
                    closing: true
                },
                Resume {
                    id: b,
                    text: "Anything else? ".into(),
                    closing: false
                },
            ]
        );
        // A starts over: open, 15 voiced chars to hear before its close.
        assert_eq!(t.next_deadline(), None);
        assert_eq!(t.close(A, ms(t0, 5_000)), None);
        assert_eq!(
            t.heard(A, Some(15), Duration::ZERO, ms(t0, 5_100)),
            Some(Action::SendClose(A))
        );
    }

    #[test]
    fn without_alignment_the_resume_estimates_from_the_audio_and_heard_closings_end() {
        let t0 = Instant::now();
        let mut t = Tracker::new(T, true);
        let b = ContextId(2);
        t.open(A, t0);
        t.sent(A, "Your table for four is booked. ");
        t.heard(A, None, Duration::from_secs(1), ms(t0, 100));
        t.open(b, t0);
        t.sent(b, "Bye. ");
        t.heard(b, Some(3), Duration::ZERO, ms(t0, 100));
        t.heard(b, Some(1), Duration::ZERO, ms(t0, 100));
        t.close(b, ms(t0, 100));
        assert_eq!(t.fully_heard_closing(), vec![b]);
        assert!(t.finalised(b));
        assert_eq!(t.ids(), vec![A]);
        let resumed = t.take_resume(ms(t0, 200));
        assert_eq!(resumed[0].text, "four is booked. ");
    }

    #[test]
    fn word_timestamps_count_whole_words() {
        let t0 = Instant::now();
        let mut t = Tracker::new(T, false);
        t.open(A, t0);
        t.sent(A, "Hello, world! I'm streaming inputs. ");
        t.heard(A, None, Duration::from_secs(9), ms(t0, 10));
        t.heard_words(A, 2, ms(t0, 20));
        assert_eq!(t.take_resume(ms(t0, 30))[0].text, "I'm streaming inputs. ");
    }
}
