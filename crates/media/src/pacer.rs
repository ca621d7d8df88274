//! Real-time pacing of outbound audio in 20 ms frames, with in-band marks.
//!
//! Carriers queue whatever they are sent, so a server that sends a whole
//! reply at once makes barge-in slow (the carrier must be told to `clear` a
//! long buffer) and makes "what has the caller heard?" unanswerable. The
//! pacer releases frames on the audio clock, at most `lead` ahead of real
//! time, and places marks exactly after the audio queued before them.
//!
//! Sans-IO: push audio and marks in; `poll(now)` hands out what is due;
//! `next_deadline()` says when to poll again. If the sender falls behind (or
//! the queue ran dry), the pacer re-anchors on `now` instead of bursting to
//! catch up.
//!
//! Holding (a barge-in that may be taken back): [`Pacer::hold`] stops the
//! release and puts back at the front of the queue the frames already
//! released whose real-time slot has not ended — the audio the far end was
//! still buffering, which the carrier's `clear` discards — so that
//! [`Pacer::release`] plays on from what the listener last heard. The pacer
//! keeps a copy of at most `lead` + two frames of released audio for this;
//! that is the whole cost.
//!
//! Underruns ([`Pacer::underruns`]): a segment is the audio pushed between
//! two ends (a mark, [`Pacer::finish`], [`Pacer::clear`]). When the clock
//! has to restart in the middle of a segment — a frame was due more than
//! `lead` + one frame ago (what the far end can have buffered), because
//! the audio came slower than real time or the sender was not polled —
//! the listener heard a gap that nobody meant; it is counted with its
//! length (from the end of the last frame's slot to the late frame's
//! release). Lateness within that bound is absorbed and not counted;
//! silence between segments, a barge-in and a hold are not underruns.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::format::FRAME;

/// What the pacer releases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Paced<M> {
    /// One frame of audio, exactly `frame_bytes` long.
    Frame(Vec<u8>),
    /// A mark placed after all audio pushed before it.
    Mark(M),
}

/// Gaps heard in the middle of a segment (see the module documentation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Underruns {
    pub count: u32,
    /// Their summed length.
    pub total: Duration,
    pub longest: Duration,
}

/// A queued item; `opens` is set on a frame that starts a segment.
#[derive(Debug)]
struct Queued<M> {
    item: Paced<M>,
    opens: bool,
}

/// The pacer. `M` is the mark payload (a turn name, say).
#[derive(Debug)]
pub struct Pacer<M> {
    frame_bytes: usize,
    /// Playing time of one frame.
    frame: Duration,
    silence: u8,
    lead: Duration,
    queue: VecDeque<Queued<M>>,
    partial: Vec<u8>,
    /// Whether the last frame queued belongs to a segment not yet ended.
    open: bool,
    underruns: Underruns,
    anchor: Option<Instant>,
    sent_since_anchor: u32,
    queued_frames: usize,
    /// Items released since the anchor, newest last, bounded to
    /// `history_frames` frames (and the marks among them).
    history: VecDeque<Paced<M>>,
    history_frames: usize,
    history_cap: usize,
    held: bool,
}

impl<M: Clone> Pacer<M> {
    /// A pacer of 20 ms frames of `frame_bytes` bytes (see [`Pacer::with_frame`]).
    pub fn new(frame_bytes: usize, silence: u8, lead: Duration) -> Self {
        Self::with_frame(frame_bytes, FRAME, silence, lead)
    }

    /// A pacer for frames of `frame_bytes` bytes lasting `frame` each, padding with `silence`,
    /// releasing frames up to `lead` before their real-time slot.
    pub fn with_frame(frame_bytes: usize, frame: Duration, silence: u8, lead: Duration) -> Self {
        Pacer {
            frame_bytes: frame_bytes.max(1),
            frame: frame.max(Duration::from_millis(1)),
            silence,
            lead,
            queue: VecDeque::new(),
            partial: Vec::new(),
            open: false,
            underruns: Underruns::default(),
            anchor: None,
            sent_since_anchor: 0,
            queued_frames: 0,
            history: VecDeque::new(),
            history_frames: 0,
            history_cap: (lead.as_nanos() / frame.max(Duration::from_millis(1)).as_nanos())
                as usize
                + 2,
            held: false,
        }
    }

    /// Appends audio. Whole frames are queued; a remainder waits for more
    /// audio or for a mark/`finish` to pad it.
    pub fn push_audio(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        while self.partial.len() >= self.frame_bytes {
            let rest = self.partial.split_off(self.frame_bytes);
            let frame = std::mem::replace(&mut self.partial, rest);
            self.queue_frame(frame);
        }
    }

    fn queue_frame(&mut self, frame: Vec<u8>) {
        let opens = !std::mem::replace(&mut self.open, true);
        self.queue.push_back(Queued {
            item: Paced::Frame(frame),
            opens,
        });
        self.queued_frames += 1;
    }

    /// Pads any partial frame with silence and queues it.
    pub fn finish(&mut self) {
        if !self.partial.is_empty() {
            let mut frame = std::mem::take(&mut self.partial);
            frame.resize(self.frame_bytes, self.silence);
            self.queue_frame(frame);
        }
        self.open = false;
    }

    /// Queues a mark after everything pushed so far.
    pub fn push_mark(&mut self, mark: M) {
        self.finish();
        self.queue.push_back(Queued {
            item: Paced::Mark(mark),
            opens: false,
        });
    }

    /// Drops all queued audio (barge-in). Returns the marks that were queued,
    /// in order, so the caller can settle them.
    pub fn clear(&mut self) -> Vec<M> {
        self.partial.clear();
        self.open = false;
        self.queued_frames = 0;
        self.anchor = None;
        self.forget_history();
        self.held = false;
        self.queue
            .drain(..)
            .filter_map(|q| match q.item {
                Paced::Mark(m) => Some(m),
                Paced::Frame(_) => None,
            })
            .collect()
    }

    /// Audio queued and not yet released.
    pub fn queued(&self) -> Duration {
        self.frame * self.queued_frames as u32
    }

    /// Whether nothing is queued (a partial frame counts as queued).
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.partial.is_empty()
    }

    /// Releases the next item due at `now`, if any. Call until `None`.
    pub fn poll(&mut self, now: Instant) -> Option<Paced<M>> {
        if self.held {
            return None;
        }
        let front = self.queue.front()?;
        let (is_mark, opens) = (matches!(front.item, Paced::Mark(_)), front.opens);
        let item = match is_mark {
            true => self.queue.pop_front()?.item,
            false => {
                let due = self.slot(now, opens);
                if due > now + self.lead {
                    return None;
                }
                self.sent_since_anchor += 1;
                self.queued_frames -= 1;
                self.queue.pop_front()?.item
            }
        };
        self.remember(&item);
        Some(item)
    }

    /// Frames released whose real-time slot has not ended at `now` (the
    /// one playing included): still in the far end's buffer.
    pub fn in_flight(&self, now: Instant) -> u32 {
        let Some(anchor) = self.anchor.filter(|_| !self.held) else {
            return 0;
        };
        let started =
            (now.saturating_duration_since(anchor).as_nanos() / self.frame.as_nanos()) as u32;
        self.sent_since_anchor
            .saturating_sub(started)
            .min(self.history_frames as u32)
    }

    /// Stops releasing and re-queues, in order, the frames still in flight
    /// at `now` (and the marks released among or after them). Returns how
    /// many frames went back. Idempotent while held.
    pub fn hold(&mut self, now: Instant) -> u32 {
        if self.held {
            return 0;
        }
        let mut frames = self.in_flight(now);
        let rewound = frames;
        while let Some(item) = self.history.pop_back() {
            if let Paced::Frame(_) = item {
                if frames == 0 {
                    break;
                }
                frames -= 1;
                self.queued_frames += 1;
            }
            self.queue.push_front(Queued { item, opens: false });
        }
        self.forget_history();
        self.anchor = None;
        self.held = true;
        rewound
    }

    /// Resumes releasing after [`Pacer::hold`], on a new clock from the
    /// next poll.
    pub fn release(&mut self) {
        self.held = false;
        self.anchor = None;
    }

    /// Whether [`Pacer::hold`] is in force.
    pub fn is_held(&self) -> bool {
        self.held
    }

    /// Keeps a copy of a released item; in steady state the copy reuses
    /// the buffer of the frame that falls out of the history (no allocation
    /// per frame).
    fn remember(&mut self, item: &Paced<M>) {
        let mut spare = None;
        if let Paced::Frame(_) = item {
            self.history_frames += 1;
            while self.history_frames > self.history_cap {
                if let Some(Paced::Frame(old)) = self.history.pop_front() {
                    self.history_frames -= 1;
                    spare = Some(old);
                }
            }
        }
        let copy = match (item, spare) {
            (Paced::Frame(f), Some(mut buf)) => {
                buf.clear();
                buf.extend_from_slice(f);
                Paced::Frame(buf)
            }
            (item, _) => item.clone(),
        };
        self.history.push_back(copy);
    }

    fn forget_history(&mut self) {
        self.history.clear();
        self.history_frames = 0;
    }

    /// When the next frame may be released, if one is queued. Marks are
    /// always due at once and never need a deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.held {
            return None;
        }
        match self.queue.front()?.item {
            Paced::Mark(_) => self.anchor,
            Paced::Frame(_) => {
                let anchor = self.anchor?;
                let due = anchor + self.frame * self.sent_since_anchor;
                Some(due.checked_sub(self.lead).unwrap_or(due))
            }
        }
    }

    /// Gaps heard in the middle of a segment so far.
    pub fn underruns(&self) -> Underruns {
        self.underruns
    }

    /// The real-time slot of the next frame, re-anchoring when late (an
    /// underrun unless that frame `opens` a segment).
    fn slot(&mut self, now: Instant, opens: bool) -> Instant {
        if let Some(anchor) = self.anchor {
            let due = anchor + self.frame * self.sent_since_anchor;
            // Late by less than the lead plus a frame: the far end still has
            // audio buffered, so keep the clock. Later than that, the queue
            // ran dry or we stalled; start a new clock instead of bursting.
            if due + self.lead + self.frame >= now {
                return due;
            }
            if !opens {
                let gap = now - due;
                let u = &mut self.underruns;
                u.count += 1;
                u.total += gap;
                u.longest = u.longest.max(gap);
            }
        }
        // Everything released before a new clock has been played.
        self.forget_history();
        self.anchor = Some(now);
        self.sent_since_anchor = 0;
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(p: &mut Pacer<&'static str>, now: Instant) -> Vec<Paced<&'static str>> {
        std::iter::from_fn(|| p.poll(now)).collect()
    }

    #[test]
    fn releases_frames_on_the_audio_clock() {
        let t0 = Instant::now();
        let mut p = Pacer::new(160, 0xFF, Duration::from_millis(40));
        p.push_audio(&[1u8; 160 * 10]);
        p.push_mark("turn-1");
        // At t0: the frame due now and the two within the 40 ms lead.
        assert_eq!(drain(&mut p, t0).len(), 3);
        assert_eq!(p.next_deadline(), Some(t0 + Duration::from_millis(20)));
        // 100 ms later: frames up to slot 7 (140 ms) are due.
        assert_eq!(drain(&mut p, t0 + Duration::from_millis(100)).len(), 5);
        let rest = drain(&mut p, t0 + Duration::from_millis(160));
        assert_eq!(rest.len(), 3);
        assert_eq!(rest.last(), Some(&Paced::Mark("turn-1")));
        assert!(p.is_idle());
    }

    #[test]
    fn a_partial_frame_is_padded_before_a_mark() {
        let mut p = Pacer::new(4, 0xFF, Duration::ZERO);
        p.push_audio(&[1, 2, 3, 4, 5, 6]);
        p.push_mark("m");
        let t0 = Instant::now();
        let out = drain(&mut p, t0 + Duration::from_secs(1));
        // Late by far more than a frame: re-anchored, so only one frame now.
        assert_eq!(out, vec![Paced::Frame(vec![1, 2, 3, 4])]);
        let out = drain(&mut p, t0 + Duration::from_millis(1_020));
        assert_eq!(
            out,
            vec![Paced::Frame(vec![5, 6, 0xFF, 0xFF]), Paced::Mark("m")]
        );
    }

    #[test]
    fn longer_frames_are_paced_by_their_own_length() {
        let t0 = Instant::now();
        let mut p = Pacer::with_frame(800, Duration::from_millis(100), 0xFF, Duration::ZERO);
        p.push_audio(&[1u8; 800 * 3]);
        assert_eq!(p.queued(), Duration::from_millis(300));
        assert_eq!(drain(&mut p, t0).len(), 1);
        assert_eq!(p.next_deadline(), Some(t0 + Duration::from_millis(100)));
        assert_eq!(drain(&mut p, t0 + Duration::from_millis(99)).len(), 0);
        assert_eq!(drain(&mut p, t0 + Duration::from_millis(200)).len(), 2);
    }

    #[test]
    fn audio_that_comes_slower_than_real_time_is_counted_as_underruns() {
        let t0 = Instant::now();
        let mut p = Pacer::new(2, 0xFF, Duration::from_millis(40));
        p.push_audio(&[1, 1, 2, 2]);
        drain(&mut p, t0);
        // The rest of the reply arrives 200 ms later: the listener heard
        // silence from 40 ms (the end of frame 2's slot) to 200 ms.
        p.push_audio(&[3, 3]);
        assert_eq!(drain(&mut p, t0 + Duration::from_millis(200)).len(), 1);
        p.push_mark("turn-1");
        drain(&mut p, t0 + Duration::from_millis(200));
        let u = p.underruns();
        assert_eq!(u.count, 1);
        assert_eq!(u.total, Duration::from_millis(160));
        assert_eq!(u.longest, Duration::from_millis(160));
        // The next reply starts a new segment: its late start is silence
        // between turns, not an underrun.
        p.push_audio(&[4, 4]);
        drain(&mut p, t0 + Duration::from_secs(2));
        p.finish();
        p.push_audio(&[5, 5]);
        drain(&mut p, t0 + Duration::from_secs(3));
        assert_eq!(p.underruns().count, 1);
    }

    #[test]
    fn a_sender_polled_late_mid_segment_is_an_underrun_and_a_hold_is_not() {
        let t0 = Instant::now();
        let mut p = Pacer::new(2, 0xFF, Duration::ZERO);
        p.push_audio(&[1u8; 20]);
        drain(&mut p, t0);
        drain(&mut p, t0 + Duration::from_millis(20));
        // Within the lead plus a frame: the clock is kept, nothing heard.
        drain(&mut p, t0 + Duration::from_millis(55));
        assert_eq!(p.underruns().count, 0);
        // Polled 100 ms late.
        drain(&mut p, t0 + Duration::from_millis(160));
        assert_eq!(p.underruns().count, 1);
        assert_eq!(p.underruns().total, Duration::from_millis(100));
        p.hold(t0 + Duration::from_millis(160));
        p.release();
        drain(&mut p, t0 + Duration::from_secs(5));
        assert_eq!(p.underruns().count, 1);
        p.push_audio(&[1u8; 4]);
        p.clear();
        p.push_audio(&[1u8; 4]);
        drain(&mut p, t0 + Duration::from_secs(9));
        assert_eq!(p.underruns().count, 1, "a clear restarts the clock");
    }

    #[test]
    fn clear_drops_audio_and_hands_back_marks() {
        let mut p = Pacer::new(160, 0xFF, Duration::ZERO);
        p.push_audio(&[0u8; 1600]);
        p.push_mark("a");
        p.push_audio(&[0u8; 1600]);
        p.push_mark("b");
        assert_eq!(p.queued(), Duration::from_millis(400));
        assert_eq!(p.clear(), vec!["a", "b"]);
        assert!(p.is_idle());
        assert_eq!(p.poll(Instant::now()), None);
    }

    fn frame_ids(items: &[Paced<&'static str>]) -> Vec<u8> {
        items
            .iter()
            .filter_map(|p| match p {
                Paced::Frame(f) => Some(f[0]),
                Paced::Mark(_) => None,
            })
            .collect()
    }

    #[test]
    fn hold_puts_back_what_was_still_buffered_and_release_plays_on_from_there() {
        let t0 = Instant::now();
        let mut p = Pacer::new(2, 0xFF, Duration::from_millis(60));
        for i in 0..10u8 {
            p.push_audio(&[i, i]);
        }
        p.push_mark("end");
        // t0: frames 0..=3 released (slot 0 plus 60 ms of lead).
        assert_eq!(frame_ids(&drain(&mut p, t0)), vec![0, 1, 2, 3]);
        // 30 ms in, frame 1 is playing: 1, 2 and 3 are in flight.
        let now = t0 + Duration::from_millis(30);
        assert_eq!(p.in_flight(now), 3);
        assert_eq!(p.hold(now), 3);
        assert!(p.is_held());
        assert_eq!(p.poll(now + Duration::from_secs(1)), None);
        assert_eq!(p.next_deadline(), None);
        assert_eq!(p.in_flight(now), 0);
        assert_eq!(p.hold(now), 0, "idempotent");
        p.release();
        let later = t0 + Duration::from_secs(2);
        let out: Vec<_> = (0..20)
            .flat_map(|k| drain(&mut p, later + Duration::from_millis(20 * k)))
            .collect();
        assert_eq!(frame_ids(&out), vec![1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(out.last(), Some(&Paced::Mark("end")));
    }

    #[test]
    fn a_mark_released_while_its_audio_was_in_flight_goes_back_behind_it() {
        let t0 = Instant::now();
        let mut p = Pacer::new(2, 0xFF, Duration::from_millis(40));
        p.push_audio(&[1, 1, 2, 2]);
        p.push_mark("turn-1");
        assert_eq!(drain(&mut p, t0).len(), 3);
        assert_eq!(p.hold(t0 + Duration::from_millis(5)), 2);
        p.release();
        let out = drain(&mut p, t0 + Duration::from_secs(1));
        assert_eq!(frame_ids(&out), vec![1, 2]);
        assert_eq!(out.last(), Some(&Paced::Mark("turn-1")));
    }

    #[test]
    fn nothing_goes_back_once_its_slot_has_passed_or_the_clock_restarted() {
        let t0 = Instant::now();
        let mut p = Pacer::new(2, 0xFF, Duration::from_millis(40));
        p.push_audio(&[1, 1, 2, 2]);
        drain(&mut p, t0);
        assert_eq!(p.in_flight(t0 + Duration::from_millis(45)), 0);
        // A new clock (the queue ran dry): earlier frames were played.
        p.push_audio(&[3, 3]);
        drain(&mut p, t0 + Duration::from_secs(1));
        assert_eq!(p.hold(t0 + Duration::from_secs(1)), 1);
        assert_eq!(frame_ids(&drain(&mut p, t0)), Vec::<u8>::new());
        p.release();
        assert_eq!(
            frame_ids(&drain(&mut p, t0 + Duration::from_secs(2))),
            vec![3]
        );
    }
}
