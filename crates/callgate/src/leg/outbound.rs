//! The playout queue every leg with its own 20 ms clock shares (SIP/RTP,
//! WebRTC): audio and markers the call queued, taken one frame per tick by
//! the leg's media task, under a mutex shared with the leg (no wake-up per
//! frame queued).
//!
//! Bounded to [`OUT_MAX_MS`] of audio; past that, new audio is dropped and
//! counted (`dropped_frames`). `clear` (barge-in) drops everything queued
//! and reports every pending marker played, so the call never waits for one.

use std::collections::VecDeque;

/// Bound on audio queued for playout (the call's pacer keeps it near its
/// lead; prompts arrive in 500 ms chunks).
pub const OUT_MAX_MS: usize = 5_000;

/// Audio and marks queued for playout, shared with the leg.
#[derive(Debug, Default)]
pub struct Outbound {
    audio: VecDeque<u8>,
    /// Marks at byte offsets counted from the start of the call's audio.
    marks: VecDeque<(u64, String)>,
    /// Bytes taken for playout so far, and queued so far.
    played: u64,
    queued: u64,
    pub dropped_frames: u64,
}

impl Outbound {
    pub fn push(&mut self, audio: &[u8], frame_bytes: usize) {
        let max = OUT_MAX_MS / 20 * frame_bytes;
        if self.audio.len() + audio.len() > max {
            self.dropped_frames += audio.len().div_ceil(frame_bytes) as u64;
            return;
        }
        self.audio.extend(audio);
        self.queued += audio.len() as u64;
    }

    pub fn mark(&mut self, name: &str) {
        self.marks.push_back((self.queued, name.to_string()));
    }

    /// Drops queued audio; every pending mark is reported played (as
    /// Twilio does on `clear`), so the call never waits for one.
    pub fn clear(&mut self) -> Vec<String> {
        self.played += self.audio.len() as u64;
        self.audio.clear();
        self.marks.drain(..).map(|(_, n)| n).collect()
    }

    /// The next frame (padded with `silence`), if any audio is queued, and
    /// the marks it reaches.
    pub fn take(&mut self, frame_bytes: usize, silence: u8) -> (Option<Vec<u8>>, Vec<String>) {
        let frame = (!self.audio.is_empty()).then(|| {
            let n = frame_bytes.min(self.audio.len());
            let mut f: Vec<u8> = self.audio.drain(..n).collect();
            self.played += n as u64;
            f.resize(frame_bytes, silence);
            f
        });
        let mut reached = Vec::new();
        while self.marks.front().is_some_and(|(at, _)| *at <= self.played) {
            reached.extend(self.marks.pop_front().map(|(_, n)| n));
        }
        (frame, reached)
    }
}
