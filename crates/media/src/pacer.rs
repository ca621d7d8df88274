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

/// The pacer. `M` is the mark payload (a turn name, say).
#[derive(Debug)]
pub struct Pacer<M> {
    frame_bytes: usize,
    /// Playing time of one frame.
    frame: Duration,
    silence: u8,
    lead: Duration,
    queue: VecDeque<Paced<M>>,
    partial: Vec<u8>,
    anchor: Option<Instant>,
    sent_since_anchor: u32,
    queued_frames: usize,
}

impl<M> Pacer<M> {
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
            anchor: None,
            sent_since_anchor: 0,
            queued_frames: 0,
        }
    }

    /// Appends audio. Whole frames are queued; a remainder waits for more
    /// audio or for a mark/`finish` to pad it.
    pub fn push_audio(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        while self.partial.len() >= self.frame_bytes {
            let rest = self.partial.split_off(self.frame_bytes);
            let frame = std::mem::replace(&mut self.partial, rest);
            self.queue.push_back(Paced::Frame(frame));
            self.queued_frames += 1;
        }
    }

    /// Pads any partial frame with silence and queues it.
    pub fn finish(&mut self) {
        if !self.partial.is_empty() {
            let mut frame = std::mem::take(&mut self.partial);
            frame.resize(self.frame_bytes, self.silence);
            self.queue.push_back(Paced::Frame(frame));
            self.queued_frames += 1;
        }
    }

    /// Queues a mark after everything pushed so far.
    pub fn push_mark(&mut self, mark: M) {
        self.finish();
        self.queue.push_back(Paced::Mark(mark));
    }

    /// Drops all queued audio (barge-in). Returns the marks that were queued,
    /// in order, so the caller can settle them.
    pub fn clear(&mut self) -> Vec<M> {
        self.partial.clear();
        self.queued_frames = 0;
        self.anchor = None;
        self.queue
            .drain(..)
            .filter_map(|p| match p {
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
        match self.queue.front()? {
            Paced::Mark(_) => self.queue.pop_front(),
            Paced::Frame(_) => {
                let due = self.slot(now);
                if due > now + self.lead {
                    return None;
                }
                self.sent_since_anchor += 1;
                self.queued_frames -= 1;
                self.queue.pop_front()
            }
        }
    }

    /// When the next frame may be released, if one is queued. Marks are
    /// always due at once and never need a deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        match self.queue.front()? {
            Paced::Mark(_) => self.anchor,
            Paced::Frame(_) => {
                let anchor = self.anchor?;
                let due = anchor + self.frame * self.sent_since_anchor;
                Some(due.checked_sub(self.lead).unwrap_or(due))
            }
        }
    }

    /// The real-time slot of the next frame, re-anchoring when late.
    fn slot(&mut self, now: Instant) -> Instant {
        if let Some(anchor) = self.anchor {
            let due = anchor + self.frame * self.sent_since_anchor;
            // Late by less than the lead plus a frame: the far end still has
            // audio buffered, so keep the clock. Later than that, the queue
            // ran dry or we stalled; start a new clock instead of bursting.
            if due + self.lead + self.frame >= now {
                return due;
            }
        }
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
}
