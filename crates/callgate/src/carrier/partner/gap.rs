//! The sans-IO half of a partner leg's resume: what is held while the
//! connection is detached, what is re-sent on the next one, and what the
//! receipt's `resume` object measures. No sockets, no clock: every instant
//! is passed in.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::resume::Attempts;

/// Outbound messages held while detached: 200 is 4 s of 20 ms frames, and
/// leaves room in the new connection's writer queue (`ws::OUT_QUEUE`, 256)
/// for the marks re-sent ahead of them. Overflow policy: **audio** beyond
/// it is dropped (newest first: the caller resumes where the bot was when
/// the line dropped, then skips ahead) and counted; **marks** are always
/// kept — a lost mark would leave its turn waiting forever — up to
/// [`HELD_MARKS`]; a `clear` empties the queue (nothing it removed will be
/// echoed, as the protocol promises).
pub const HELD_MESSAGES: usize = 200;
/// Marks held at most while detached (a turn places one per sentence).
pub const HELD_MARKS: usize = 32;
/// Marks remembered as sent but not yet echoed (re-sent on a new
/// connection); beyond it the oldest is forgotten.
pub const OUTSTANDING_MARKS: usize = 32;

/// One held outbound item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    Audio(Vec<u8>),
    Mark(String),
}

/// What the leg holds for the next connection while detached.
#[derive(Debug, Default)]
pub struct HeldOutput {
    items: VecDeque<Held>,
    marks: usize,
    /// Audio messages dropped because the queue was full.
    pub dropped_audio: u64,
    /// Marks dropped because [`HELD_MARKS`] were already held.
    pub dropped_marks: u64,
}

impl HeldOutput {
    pub fn audio(&mut self, audio: &[u8]) {
        if self.items.len() >= HELD_MESSAGES {
            self.dropped_audio += 1;
            return;
        }
        self.items.push_back(Held::Audio(audio.to_vec()));
    }

    pub fn mark(&mut self, name: &str) {
        if self.marks >= HELD_MARKS {
            self.dropped_marks += 1;
            return;
        }
        self.marks += 1;
        self.items.push_back(Held::Mark(name.to_string()));
    }

    pub fn clear(&mut self) {
        self.items.clear();
        self.marks = 0;
    }

    /// Everything held, in order.
    pub fn take(&mut self) -> VecDeque<Held> {
        self.marks = 0;
        std::mem::take(&mut self.items)
    }
}

/// Marks sent on the live connection and not echoed yet. On a new
/// connection they are sent again, first: the new peer's buffer is empty,
/// so it echoes them at once — the audio before them was played by the
/// old connection or lost with it.
#[derive(Debug, Default)]
pub struct Outstanding {
    marks: VecDeque<String>,
}

impl Outstanding {
    pub fn sent(&mut self, name: &str) {
        if self.marks.len() >= OUTSTANDING_MARKS {
            self.marks.pop_front();
        }
        self.marks.push_back(name.to_string());
    }

    /// The peer echoed `name`: it and every mark before it are done (marks
    /// are echoed in order).
    pub fn played(&mut self, name: &str) {
        if let Some(i) = self.marks.iter().position(|m| m == name) {
            self.marks.drain(..=i);
        }
    }

    /// A `clear` removed every mark in the peer's buffer.
    pub fn cleared(&mut self) {
        self.marks.clear();
    }

    pub fn take(&mut self) -> VecDeque<String> {
        std::mem::take(&mut self.marks)
    }
}

/// Connections of one session whose caller audio is being read right now.
/// Each is held by a [`LiveLeg`] guard; the high-water mark minus one is
/// the receipt's `duplicate_live_legs`, so a leg that attached a new socket
/// before letting go of the old would show 1 there.
#[derive(Debug, Default)]
pub struct LiveLegs {
    now: AtomicU32,
    max: AtomicU32,
}

/// One live media connection (RAII: `Drop` counts it out).
#[derive(Debug)]
pub struct LiveLeg {
    legs: Arc<LiveLegs>,
}

impl LiveLegs {
    pub fn enter(self: &Arc<Self>) -> LiveLeg {
        let now = self.now.fetch_add(1, Ordering::AcqRel) + 1;
        self.max.fetch_max(now, Ordering::AcqRel);
        LiveLeg {
            legs: Arc::clone(self),
        }
    }

    /// Most connections ever live at once, minus the one there should be.
    pub fn duplicates(&self) -> u32 {
        self.max.load(Ordering::Acquire).saturating_sub(1)
    }
}

impl Drop for LiveLeg {
    fn drop(&mut self) {
        self.legs.now.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the receipt's `resume` object reports, measured as it happens.
#[derive(Debug, Default)]
pub struct ResumeTally {
    /// Connections that dropped while resumable (each opens a gap).
    pub gaps: u64,
    /// Wall time spent detached, summed over the gaps.
    pub gap: Duration,
    /// Connections that took the call over (after a gap or superseding).
    pub resumed: u64,
    /// Of those, the ones that closed a connection still open.
    pub superseded: u64,
    /// Caller audio time that never arrived: from the last frame of the
    /// old connection to the first of the new, less one frame period.
    pub caller_audio_lost: Duration,
    /// When the last frame before a take-over arrived, until the new
    /// connection's first frame settles the loss.
    pub lost_since: Option<Instant>,
    pub attempts: Arc<Attempts>,
    pub live: Arc<LiveLegs>,
}

impl ResumeTally {
    /// A take-over at `now`; `last_frame` is when the old connection's last
    /// frame arrived (none: it never sent one).
    pub fn taken_over(&mut self, last_frame: Option<Instant>, now: Instant) {
        self.resumed += 1;
        if self.lost_since.is_none() {
            self.lost_since = Some(last_frame.unwrap_or(now));
        }
    }

    /// A gap that ended at `now` without a resume: the caller's audio from
    /// `last_frame` on never arrived.
    pub fn unresumed(&mut self, last_frame: Instant, now: Instant) {
        self.lost_since.get_or_insert(last_frame);
        self.audio_back(now);
    }

    /// The first caller frame since a take-over arrived at `at`.
    pub fn audio_back(&mut self, at: Instant) {
        if let Some(since) = self.lost_since.take() {
            let lost = at.saturating_duration_since(since);
            self.caller_audio_lost += lost.saturating_sub(media::format::FRAME);
        }
    }

    /// The receipt's `resume` object; `open_gap` is the part of a gap
    /// still open when the call ended.
    pub fn report(&self, held: &HeldOutput, open_gap: Duration) -> serde_json::Value {
        serde_json::json!({
            "attempts": self.attempts.presented.load(Ordering::Relaxed),
            "refused": self.attempts.refused.load(Ordering::Relaxed),
            "resumed": self.resumed,
            "superseded": self.superseded,
            "gaps": self.gaps,
            "gap_ms": (self.gap + open_gap).as_millis() as u64,
            "caller_audio_lost_ms": self.caller_audio_lost.as_millis() as u64,
            "held_audio_dropped": held.dropped_audio,
            "held_marks_dropped": held.dropped_marks,
            "duplicate_live_legs": self.live.duplicates(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn held_audio_is_bounded_but_marks_are_kept_in_order() {
        let mut h = HeldOutput::default();
        for _ in 0..HELD_MESSAGES {
            h.audio(&[1]);
        }
        h.audio(&[2]);
        h.mark("turn-2");
        assert_eq!(h.dropped_audio, 1);
        let items = h.take();
        assert_eq!(items.len(), HELD_MESSAGES + 1);
        assert_eq!(items.back(), Some(&Held::Mark("turn-2".into())));
        assert!(
            !items.contains(&Held::Audio(vec![2])),
            "the newest audio went"
        );
    }

    #[test]
    fn a_clear_while_detached_drops_what_was_held() {
        let mut h = HeldOutput::default();
        h.audio(&[1]);
        h.mark("turn-1");
        h.clear();
        h.mark("turn-2");
        assert_eq!(h.take(), [Held::Mark("turn-2".into())]);
    }

    #[test]
    fn marks_beyond_the_bound_are_counted_not_held() {
        let mut h = HeldOutput::default();
        for i in 0..=HELD_MARKS {
            h.mark(&format!("m{i}"));
        }
        assert_eq!(h.dropped_marks, 1);
        assert_eq!(h.take().len(), HELD_MARKS);
    }

    #[test]
    fn outstanding_marks_are_those_not_yet_echoed_or_cleared() {
        let mut o = Outstanding::default();
        o.sent("a");
        o.sent("b");
        o.sent("c");
        o.played("b");
        assert_eq!(o.take(), ["c"]);
        o.sent("d");
        o.cleared();
        assert!(o.take().is_empty());
        o.sent("e");
        o.played("unknown");
        assert_eq!(o.take(), ["e"]);
    }

    #[test]
    fn duplicate_live_legs_count_overlap_only() {
        let legs = Arc::new(LiveLegs::default());
        let first = legs.enter();
        drop(first);
        let second = legs.enter();
        assert_eq!(legs.duplicates(), 0, "one after the other");
        let third = legs.enter();
        assert_eq!(legs.duplicates(), 1, "two at once");
        drop((second, third));
        assert_eq!(legs.now.load(Ordering::Acquire), 0);
    }

    #[test]
    fn lost_caller_audio_runs_from_the_last_frame_to_the_next() {
        let t0 = Instant::now();
        let mut t = ResumeTally::default();
        t.taken_over(Some(t0), t0 + ms(500));
        t.audio_back(t0 + ms(820));
        assert_eq!(t.caller_audio_lost, ms(800));
        // A second take-over before any frame keeps the first loss's start.
        t.taken_over(Some(t0 + ms(2_000)), t0 + ms(2_100));
        t.taken_over(None, t0 + ms(2_200));
        t.audio_back(t0 + ms(2_520));
        assert_eq!(t.caller_audio_lost, ms(800) + ms(500));
        assert_eq!(t.resumed, 3);
        // A gap nobody resumed loses everything up to its end.
        t.unresumed(t0 + ms(3_000), t0 + ms(4_020));
        assert_eq!(t.caller_audio_lost, ms(800) + ms(500) + ms(1_000));
    }
}
