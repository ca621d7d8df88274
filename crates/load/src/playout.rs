//! The phone's playout buffer, modelled the way Twilio plays a stream.
//!
//! Audio from the server (measured as playing time, whatever its format) queues behind whatever is still playing and drains
//! in real time; a mark is due when the audio queued before it has played;
//! `clear` drops the unplayed audio and makes every pending mark due at once.
//! Time is an argument (`Duration` since the call was dialled), so the buffer
//! is exact on a virtual clock and never needs a timer of its own.

use std::collections::VecDeque;
use std::time::Duration;

/// Marks waiting for their audio to play. When full, a further mark is
/// refused (the caller counts it as malformed and never echoes it): no real
/// server has hundreds of bookmarks in flight on one call, so this only
/// bounds memory against a runaway server.
pub const MAX_PENDING_MARKS: usize = 256;

/// Playing time of one μ-law byte at 8 kHz (a 16-bit sample at 16 kHz is
/// half of it).
pub const ULAW_BYTE: Duration = Duration::from_micros(125);

/// A mark waiting to be echoed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingMark<T> {
    pub name: String,
    /// When the audio before it has finished playing.
    pub due: Duration,
    /// What the caller wants to remember about this mark.
    pub tag: T,
}

/// Queued audio and marks of one call.
#[derive(Debug)]
pub struct Playout<T> {
    /// When the queued audio finishes; at or before `now` means nothing plays.
    tail_end: Duration,
    marks: VecDeque<PendingMark<T>>,
    /// All audio ever queued.
    queued: Duration,
    /// Audio dropped by `clear` before it played.
    cleared: Duration,
}

impl<T> Default for Playout<T> {
    fn default() -> Self {
        Playout {
            tail_end: Duration::ZERO,
            marks: VecDeque::new(),
            queued: Duration::ZERO,
            cleared: Duration::ZERO,
        }
    }
}

impl<T> Playout<T> {
    /// When the queued audio stops playing.
    pub fn tail_end(&self) -> Duration {
        self.tail_end
    }

    /// Whether audio is audible at `now`.
    pub fn is_playing(&self, now: Duration) -> bool {
        self.tail_end > now
    }

    /// Queues audio playing for `len` behind whatever is playing (the
    /// caller converts bytes to time for its audio format).
    pub fn push_audio(&mut self, now: Duration, len: Duration) {
        self.tail_end = self.tail_end.max(now) + len;
        self.queued += len;
    }

    /// Queues a mark after the audio queued so far.
    ///
    /// # Errors
    /// Gives the mark back when [`MAX_PENDING_MARKS`] are already pending.
    pub fn push_mark(&mut self, now: Duration, name: String, tag: T) -> Result<(), PendingMark<T>> {
        let mark = PendingMark {
            name,
            due: self.tail_end.max(now),
            tag,
        };
        if self.marks.len() >= MAX_PENDING_MARKS {
            return Err(mark);
        }
        self.marks.push_back(mark);
        Ok(())
    }

    /// When the next mark is due.
    pub fn next_mark_due(&self) -> Option<Duration> {
        self.marks.front().map(|m| m.due)
    }

    /// The next mark due at or before `now`.
    pub fn pop_due(&mut self, now: Duration) -> Option<PendingMark<T>> {
        if self.marks.front()?.due <= now {
            self.marks.pop_front()
        } else {
            None
        }
    }

    /// Drops unplayed audio; every pending mark becomes due at `now`.
    pub fn clear(&mut self, now: Duration) -> Vec<PendingMark<T>> {
        if self.tail_end > now {
            self.cleared += self.tail_end - now;
            self.tail_end = now;
        }
        self.marks
            .drain(..)
            .map(|mut m| {
                m.due = now;
                m
            })
            .collect()
    }

    /// Audio actually heard up to `now`.
    pub fn played(&self, now: Duration) -> Duration {
        let unplayed = self.tail_end.saturating_sub(now);
        self.queued.saturating_sub(self.cleared + unplayed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn audio_queues_behind_playing_audio_and_marks_wait_for_it() {
        let mut p = Playout::default();
        p.push_audio(MS * 100, ULAW_BYTE * 1_600); // 200 ms
        p.push_audio(MS * 150, ULAW_BYTE * 800); // queued behind: ends at 400 ms
        p.push_mark(MS * 160, "turn-1".into(), ()).unwrap();
        assert_eq!(p.tail_end(), MS * 400);
        assert_eq!(p.next_mark_due(), Some(MS * 400));
        assert!(p.pop_due(MS * 399).is_none());
        assert_eq!(p.pop_due(MS * 400).unwrap().name, "turn-1");
        assert_eq!(p.played(MS * 500), MS * 300);
    }

    #[test]
    fn a_mark_on_an_idle_buffer_is_due_at_once() {
        let mut p = Playout::default();
        p.push_audio(Duration::ZERO, ULAW_BYTE * 160);
        p.push_mark(MS * 50, "late".into(), 7).unwrap();
        let m = p.pop_due(MS * 50).unwrap();
        assert_eq!((m.due, m.tag), (MS * 50, 7));
    }

    #[test]
    fn clear_drops_unplayed_audio_and_releases_marks() {
        let mut p = Playout::default();
        p.push_audio(Duration::ZERO, ULAW_BYTE * 8_000); // 1 s
        p.push_mark(Duration::ZERO, "a".into(), ()).unwrap();
        p.push_audio(Duration::ZERO, ULAW_BYTE * 8_000);
        p.push_mark(Duration::ZERO, "b".into(), ()).unwrap();
        let released = p.clear(MS * 300);
        assert_eq!(
            released.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!(released.iter().all(|m| m.due == MS * 300));
        assert!(!p.is_playing(MS * 300));
        assert_eq!(p.played(MS * 5_000), MS * 300);
        assert_eq!(p.next_mark_due(), None);
    }

    #[test]
    fn pending_marks_are_bounded() {
        let mut p = Playout::default();
        p.push_audio(Duration::ZERO, ULAW_BYTE * 8_000);
        for i in 0..MAX_PENDING_MARKS {
            p.push_mark(Duration::ZERO, i.to_string(), ()).unwrap();
        }
        assert!(
            p.push_mark(Duration::ZERO, "one too many".into(), ())
                .is_err()
        );
    }
}
