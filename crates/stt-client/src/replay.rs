//! The audio a reconnected session must send again (sans-IO).
//!
//! When the provider socket drops mid-utterance, the words of that
//! utterance are lost with it unless the audio is sent again. [`Replay`]
//! keeps every frame sent since the last *utterance boundary* the provider
//! confirmed (a `speech_final` or `from_finalize` final, an
//! `UtteranceEnd`), plus the frames that arrive while reconnecting, each
//! stamped with its audio time. On reconnection the frames are sent first,
//! and the new socket's timestamps (which restart at zero) are shifted by
//! [`Replay::offset`] so the consumer sees one continuous audio clock.
//!
//! Bound: [`REPLAY_CAPACITY_BYTES`]. When an utterance runs longer than
//! that without a boundary, the oldest frames are dropped and counted
//! ([`Replay::dropped_frames`]); the replayed tail is then shorter than
//! the utterance, which costs its first words, never memory.

use std::collections::VecDeque;

use crate::SttEncoding;

/// 30 s of 16 kHz linear PCM (60 s of 8 kHz G.711).
pub const REPLAY_CAPACITY_BYTES: usize = 960_000;

/// While the provider has reported no speech since the last boundary, only
/// this much recent audio is kept: it may hold an onset the provider has
/// not reported yet (a provider more than this far behind loses the first
/// words of an utterance cut by a drop); older audio is silence.
pub const IDLE_TAIL_SECONDS: f64 = 2.0;

/// Frames sent since the last confirmed boundary, in order.
#[derive(Debug)]
pub(crate) struct Replay {
    frames: VecDeque<(f64, Vec<u8>)>,
    bytes: usize,
    /// Audio seconds of everything ever queued (the session's audio clock).
    clock: f64,
    bytes_per_second: f64,
    /// Audio time at which the current socket began.
    socket_start: f64,
    dropped_frames: u64,
    /// The provider reported speech (words or `SpeechStarted`) since the
    /// last boundary.
    speech: bool,
}

impl Replay {
    pub fn new(encoding: SttEncoding, sample_rate: u32) -> Self {
        let width = match encoding {
            SttEncoding::Mulaw | SttEncoding::Alaw => 1.0,
            SttEncoding::Linear16 => 2.0,
        };
        Replay {
            frames: VecDeque::new(),
            bytes: 0,
            clock: 0.0,
            bytes_per_second: f64::from(sample_rate.max(1)) * width,
            socket_start: 0.0,
            dropped_frames: 0,
            speech: false,
        }
    }

    /// Records a frame as sent (or to be sent on the next socket).
    pub fn push(&mut self, frame: &[u8]) {
        self.frames.push_back((self.clock, frame.to_vec()));
        self.bytes += frame.len();
        self.clock += frame.len() as f64 / self.bytes_per_second;
        while self.bytes > REPLAY_CAPACITY_BYTES {
            let Some((_, old)) = self.frames.pop_front() else {
                break;
            };
            self.bytes -= old.len();
            self.dropped_frames += 1;
        }
        if !self.speech {
            self.trim_before(self.clock - IDLE_TAIL_SECONDS);
        }
    }

    /// The provider reported speech: keep everything from here to the
    /// next boundary.
    pub fn heard_speech(&mut self) {
        self.speech = true;
    }

    /// Drops frames that end at or before session time `at`.
    fn trim_before(&mut self, at: f64) {
        while let Some((start, frame)) = self.frames.front() {
            let end = start + frame.len() as f64 / self.bytes_per_second;
            if end > at + 1e-9 {
                break;
            }
            self.bytes -= frame.len();
            self.frames.pop_front();
        }
    }

    /// The provider confirmed an utterance ended at `socket_time` (seconds
    /// on the current socket's clock): audio before it is settled.
    pub fn settled(&mut self, socket_time: f64) {
        self.trim_before(self.socket_start + socket_time);
        self.speech = false;
    }

    /// A new socket begins: its audio clock starts where the first frame to
    /// replay began. Returns the frames to send, in order, and keeps them
    /// (they are unsettled until the new socket confirms a boundary).
    pub fn restart(&mut self) -> Vec<Vec<u8>> {
        self.socket_start = self.frames.front().map_or(self.clock, |(t, _)| *t);
        self.frames.iter().map(|(_, f)| f.clone()).collect()
    }

    /// Seconds to add to the current socket's timestamps.
    pub fn offset(&self) -> f64 {
        self.socket_start
    }

    /// Frames dropped because an utterance outgrew the bound.
    pub fn dropped_frames(&self) -> u64 {
        self.dropped_frames
    }

    /// Audio seconds waiting to be replayed.
    pub fn pending_seconds(&self) -> f64 {
        self.bytes as f64 / self.bytes_per_second
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(n: u8) -> Vec<u8> {
        vec![n; 160] // 20 ms of 8 kHz μ-law
    }

    #[test]
    fn settled_audio_is_not_replayed_and_the_clock_continues() {
        let mut r = Replay::new(SttEncoding::Mulaw, 8_000);
        r.heard_speech();
        for n in 0..100 {
            r.push(&frame(n)); // 2 s
        }
        // The provider says an utterance ended at 1.0 s.
        r.settled(1.0);
        let again = r.restart();
        assert_eq!(again.len(), 50);
        assert_eq!(
            again[0][0], 50,
            "replay starts with the first unsettled frame"
        );
        assert!((r.offset() - 1.0).abs() < 1e-9);
        // On the new socket, 0.5 s means 1.5 s of the session's audio.
        r.settled(0.5);
        assert!((r.pending_seconds() - 0.5).abs() < 1e-9);
    }

    #[test]
    fn a_frame_straddling_the_boundary_is_kept() {
        let mut r = Replay::new(SttEncoding::Linear16, 16_000);
        r.heard_speech();
        r.push(&[0; 640]); // 20 ms
        r.push(&[1; 640]);
        r.settled(0.03);
        let again = r.restart();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0][0], 1);
    }

    #[test]
    fn the_bound_drops_the_oldest_frames_and_counts_them() {
        let mut r = Replay::new(SttEncoding::Mulaw, 8_000);
        r.heard_speech();
        let frames = REPLAY_CAPACITY_BYTES / 160 + 10;
        for n in 0..frames {
            r.push(&frame(n as u8));
        }
        assert_eq!(r.dropped_frames(), 10);
        assert_eq!(r.restart().len(), REPLAY_CAPACITY_BYTES / 160);
    }

    #[test]
    fn without_reported_speech_only_the_recent_tail_is_kept() {
        let mut r = Replay::new(SttEncoding::Mulaw, 8_000);
        for n in 0..350 {
            r.push(&frame(n as u8)); // 7 s of silence
        }
        assert!((r.pending_seconds() - IDLE_TAIL_SECONDS).abs() < 1e-9);
        // Speech reported: from now on nothing is trimmed until a boundary.
        r.heard_speech();
        for n in 0..100 {
            r.push(&frame(n as u8));
        }
        assert!((r.pending_seconds() - (IDLE_TAIL_SECONDS + 2.0)).abs() < 1e-9);
        let again = r.restart();
        assert_eq!(again.len(), 200);
        assert!((r.offset() - 5.0).abs() < 1e-9, "{}", r.offset());
    }

    #[test]
    fn with_nothing_unsettled_the_new_socket_starts_at_the_clock() {
        let mut r = Replay::new(SttEncoding::Mulaw, 8_000);
        for n in 0..10 {
            r.push(&frame(n));
        }
        r.settled(10.0);
        assert!(r.restart().is_empty());
        assert!((r.offset() - 0.2).abs() < 1e-9);
    }
}
