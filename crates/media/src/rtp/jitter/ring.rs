//! The jitter buffer's storage: a fixed ring of frame slots starting at the
//! playout point, written at timestamp offsets (a span per slot).
//!
//! Slot 0 is the frame to play next. The ring never grows: it holds
//! exactly `max_depth` frames, allocated once, and audio outside them is
//! not written (the buffer makes room first, or drops it as late).

use std::collections::VecDeque;
use std::time::Instant;

/// One frame of audio being assembled.
#[derive(Debug, Clone)]
struct Slot {
    /// The frame, silence where nothing arrived.
    data: Vec<u8>,
    /// Which samples arrived.
    have: Vec<bool>,
    /// How many samples arrived.
    filled: u32,
    /// When the first of them arrived.
    arrival: Option<Instant>,
}

impl Slot {
    fn new(frame: usize, silence: u8) -> Self {
        Slot {
            data: vec![silence; frame],
            have: vec![false; frame],
            filled: 0,
            arrival: None,
        }
    }

    fn clear(&mut self, silence: u8) {
        if self.filled > 0 {
            self.data.fill(silence);
            self.have.fill(false);
            self.filled = 0;
        }
        self.arrival = None;
    }

    /// Writes `bytes` from sample `pos` on: into an empty slot as one copy
    /// (the common case: one packet per frame), else sample by sample so
    /// that samples already there stay (the first copy wins).
    fn put_span(&mut self, pos: usize, bytes: &[u8], arrival: Instant) {
        if bytes.is_empty() {
            return;
        }
        if self.filled == 0 {
            self.data[pos..pos + bytes.len()].copy_from_slice(bytes);
            self.have[pos..pos + bytes.len()].fill(true);
            self.filled = bytes.len() as u32;
            self.arrival.get_or_insert(arrival);
            return;
        }
        for (i, b) in bytes.iter().enumerate() {
            self.put(pos + i, *b, arrival);
        }
    }

    /// Writes one sample unless one is there already (the first copy wins).
    fn put(&mut self, pos: usize, sample: u8, arrival: Instant) {
        if !self.have[pos] {
            self.data[pos] = sample;
            self.have[pos] = true;
            self.filled += 1;
            self.arrival.get_or_insert(arrival);
        }
    }
}

/// How many frames an advance passed over, by content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Passed {
    /// Frames that held some audio.
    pub(super) with_audio: u64,
    /// Frames that held none (including any beyond the ring).
    pub(super) empty: u64,
}

/// The ring of `frames` slots of `frame` samples.
#[derive(Debug, Clone)]
pub(super) struct Ring {
    frame: usize,
    silence: u8,
    slots: VecDeque<Slot>,
    /// Samples from the playout point to the end of the newest audio,
    /// kept up to date by every change (the buffer asks several times per
    /// tick).
    end: usize,
}

impl Ring {
    /// A ring of `frames` ≥ 1 slots of `frame` ≥ 1 samples.
    pub(super) fn new(frame: u32, frames: u32, silence: u8) -> Self {
        let frame = frame as usize;
        Ring {
            frame,
            silence,
            slots: (0..frames).map(|_| Slot::new(frame, silence)).collect(),
            end: 0,
        }
    }

    /// Samples the ring holds.
    pub(super) fn capacity(&self) -> i64 {
        (self.frame * self.slots.len()) as i64
    }

    /// Samples from the playout point to the end of the newest audio.
    pub(super) fn span(&self) -> u32 {
        debug_assert_eq!(self.end, self.scan_span(), "span bookkeeping");
        self.end as u32
    }

    /// [`Ring::span`] the slow way.
    fn scan_span(&self) -> usize {
        let Some(i) = self.slots.iter().rposition(|s| s.filled > 0) else {
            return 0;
        };
        let last = self.slots[i].have.iter().rposition(|h| *h).unwrap_or(0);
        i * self.frame + last + 1
    }

    /// Whether the frame to play next holds no audio.
    pub(super) fn head_is_empty(&self) -> bool {
        self.slots.front().is_none_or(|s| s.filled == 0)
    }

    /// Whether every sample of the frame to play next arrived.
    pub(super) fn head_is_complete(&self) -> bool {
        self.slots
            .front()
            .is_some_and(|s| s.filled as usize == self.frame)
    }

    /// Writes the samples of `payload` that land inside the ring when its
    /// first sample is `offset` samples from the playout point.
    pub(super) fn place(&mut self, offset: i64, payload: &[u8], arrival: Instant) {
        let len = payload.len() as i64;
        let from = (-offset).clamp(0, len);
        let to = (self.capacity() - offset).clamp(from, len);
        // One span per slot the payload covers.
        let mut i = from;
        while i < to {
            let at = (offset + i) as usize;
            let pos = at % self.frame;
            let n = (self.frame - pos).min((to - i) as usize);
            let span = &payload[i as usize..i as usize + n];
            self.slots[at / self.frame].put_span(pos, span, arrival);
            i += n as i64;
        }
        if to > from {
            // Every sample in from..to is there now, written or kept.
            self.end = self.end.max((offset + to) as usize);
        }
    }

    /// Takes the frame to play (if it holds any audio, with when it
    /// arrived) and moves the playout point one frame on.
    pub(super) fn take_head(&mut self) -> Option<(Vec<u8>, Instant)> {
        let mut head = self.slots.pop_front()?;
        let out = head.arrival.filter(|_| head.filled > 0).map(|at| {
            let fresh = vec![self.silence; self.frame];
            (std::mem::replace(&mut head.data, fresh), at)
        });
        head.clear(self.silence);
        self.slots.push_back(head);
        self.end = self.end.saturating_sub(self.frame);
        out
    }

    /// Moves the playout point `n` frames on, discarding what they held.
    pub(super) fn advance(&mut self, n: u64) -> Passed {
        let mut passed = Passed::default();
        let rotate = n.min(self.slots.len() as u64);
        for _ in 0..rotate {
            let Some(mut slot) = self.slots.pop_front() else {
                break;
            };
            if slot.filled > 0 {
                passed.with_audio += 1;
            }
            slot.clear(self.silence);
            self.slots.push_back(slot);
        }
        passed.empty = n - passed.with_audio;
        self.end = self.end.saturating_sub(rotate as usize * self.frame);
        passed
    }

    /// Moves the playout point `n` frames back, if the ring has room for
    /// them without losing audio.
    pub(super) fn retreat(&mut self, n: u64) -> bool {
        let room = self.capacity() - i64::from(self.span());
        if n.saturating_mul(self.frame as u64) > room as u64 {
            return false;
        }
        for _ in 0..n {
            if let Some(slot) = self.slots.pop_back() {
                self.slots.push_front(slot); // empty: it was past the span
            }
        }
        if self.end > 0 {
            self.end += n as usize * self.frame;
        }
        true
    }

    /// Empties every slot.
    pub(super) fn clear(&mut self) {
        let silence = self.silence;
        self.slots.iter_mut().for_each(|s| s.clear(silence));
        self.end = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_land_by_offset_and_the_first_copy_wins() {
        let t0 = Instant::now();
        let mut r = Ring::new(4, 3, 0xFF);
        r.place(2, &[1, 2, 3], t0);
        assert_eq!(r.span(), 5);
        r.place(4, &[9, 9], t0); // overlaps: 3 stays
        assert_eq!(r.span(), 6);
        r.place(-2, &[7, 7, 8], t0); // only the last sample is inside
        r.place(11, &[5, 6], t0); // only the first is inside
        assert_eq!(r.span(), 12);
        assert_eq!(r.take_head(), Some((vec![8, 0xFF, 1, 2], t0)));
        assert_eq!(r.take_head(), Some((vec![3, 9, 0xFF, 0xFF], t0)));
        assert_eq!(r.take_head(), Some((vec![0xFF, 0xFF, 0xFF, 5], t0)));
        assert_eq!(r.take_head(), None);
        assert_eq!(r.span(), 0);
    }

    #[test]
    fn advance_counts_what_it_passes_and_retreat_needs_room() {
        let t0 = Instant::now();
        let mut r = Ring::new(2, 3, 0);
        r.place(2, &[1], t0);
        assert!(!r.retreat(2), "only one empty frame behind the audio");
        assert!(r.retreat(1));
        assert_eq!(r.span(), 5);
        assert!(r.head_is_empty());
        let passed = r.advance(10);
        assert_eq!((passed.with_audio, passed.empty), (1, 9));
        assert_eq!(r.span(), 0);
    }
}
