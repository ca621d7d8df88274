//! The STT simulator's own speech detector: earshot's neural voice-activity
//! model on 16 ms frames at 16 kHz, with hysteresis turned into utterance
//! boundaries.
//!
//! Why not `media::vad::EnergyVad`: that is the detector callgate's own
//! watchdog uses, so a simulator built on it could never disagree with the
//! server about where speech is — a class of real-world bugs the end-to-end
//! tests would then never see. earshot is a different algorithm (a small
//! network over 40 mel-band log energies of a 48 ms window, not a level
//! against a tracked noise floor), so onsets and offsets land a few tens of
//! ms differently, as they would against Deepgram.
//!
//! Input is linear samples at 8 kHz or 16 kHz; 8 kHz is upsampled 2× first
//! (`media::resample::Upsampler2x`, stateful, so chunking does not change
//! the result). All times are audio time: milliseconds of input pushed, so
//! the same audio gives the same boundaries however it was chunked.
//!
//! Boundaries: a frame is *active* when its score is at least
//! [`SPEECH_SCORE`]. Speech starts after [`MIN_SPEECH_FRAMES`] consecutive
//! active frames and is stamped at the first of them, moved back over the
//! frames just before it that already scored at least [`ONSET_SCORE`] (the
//! model's score rises over its 48 ms window, so the first frames of a word
//! score between the two). Speech ends after `min_silence_ms` of inactive
//! frames, stamped at the end of the last active frame less the model's
//! trailing window ([`TRAILING_MS`]: a frame still scores high while speech
//! that has ended is inside its window).
//!
//! Measured on `SpeechSynth` utterances (the audio the test callers send),
//! 300 ms endpointing, 4 seeds × 2 utterances × 2 rates: starts within
//! −4…+16 ms of `EnergyVad`'s and of the truth, ends 0…+60 ms later than
//! `EnergyVad`'s (`detector/tests.rs` prints the table). Where the two
//! differ most is noise: −50 dBFS white noise from 8 kHz input starts
//! "speech" at its onset for a second or two, which an energy detector
//! with a noise floor ignores.
//!
//! Short bursts (a cough, a click) are found too, as one segment stamped
//! longer than the sound: from 80 ms on always (60 ms only sometimes at
//! 8 kHz), 150 ms as 176–192 ms at 8 kHz and 208–224 ms at 16 kHz. The
//! stream decides from that length whether a segment is words or noise
//! (`stream::MIN_WORDS_MS`; `stream/noise_tests.rs` has the table).

use earshot::Detector;
use media::resample::Upsampler2x;

/// One analysis frame: 16 ms at 16 kHz.
pub const FRAME_SAMPLES: usize = 256;
/// The length of a frame in ms of audio.
pub const FRAME_MS: u64 = 16;
/// Score at or above which a frame is speech (earshot's suggested default).
pub const SPEECH_SCORE: f32 = 0.5;
/// Score at or above which a frame just before a detected start is taken
/// as the start of the word. Digital silence scores about 0.15–0.28 on the
/// simulator's test audio; the first frames of a word about 0.3–0.5.
pub const ONSET_SCORE: f32 = 0.3;
/// At most this many frames are added before a start by [`ONSET_SCORE`],
/// so steady noise before a word cannot pull its start far back.
pub const MAX_ONSET_FRAMES: u64 = 4;
/// Consecutive speech frames needed to declare speech started (64 ms,
/// close to a short syllable, so isolated high-scoring frames are not
/// speech); the start is stamped earlier anyway (see [`ONSET_SCORE`]).
pub const MIN_SPEECH_FRAMES: u32 = 4;
/// How long after speech ends a frame still scores as speech: the model
/// looks at the last 48 ms, so up to two frames after the last spoken one.
pub const TRAILING_MS: u64 = 2 * FRAME_MS;

/// A speech boundary, in ms of audio since the stream began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpeechEvent {
    /// Speech began at this audio time.
    Start { at_ms: u64 },
    /// Speech ended at this audio time (never before its start).
    End { at_ms: u64 },
}

/// The detector of one stream.
pub struct SpeechDetector {
    /// Boxed: earshot keeps about 8 KiB of state.
    model: Box<Detector>,
    /// `Some` for 8 kHz input.
    upsampler: Option<Upsampler2x>,
    /// 16 kHz samples of the frame being filled.
    frame: Vec<i16>,
    /// Frames scored so far.
    frames: u64,
    /// Consecutive frames at or above [`ONSET_SCORE`] before the current
    /// run of speech frames (capped at [`MAX_ONSET_FRAMES`]).
    onset_run: u64,
    min_silence_frames: u32,
    /// Start of the current run of speech frames, and its length.
    active_from: u64,
    active_run: u32,
    inactive_run: u32,
    /// Where the speech being tracked started, while speaking.
    speech_start_ms: Option<u64>,
    last_active_frame: u64,
}

impl std::fmt::Debug for SpeechDetector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpeechDetector")
            .field("upsampling", &self.upsampler.is_some())
            .field("frames", &self.frames)
            .field("speech_start_ms", &self.speech_start_ms)
            .finish_non_exhaustive()
    }
}

impl SpeechDetector {
    /// A detector for `sample_rate` Hz input (8 000 or 16 000; any other
    /// rate is treated as 16 000) ending speech after `min_silence_ms`.
    pub fn new(sample_rate: u32, min_silence_ms: u32) -> Self {
        SpeechDetector {
            model: Detector::default_boxed(),
            upsampler: (sample_rate == 8_000).then(Upsampler2x::default),
            frame: Vec::with_capacity(FRAME_SAMPLES),
            frames: 0,
            onset_run: 0,
            min_silence_frames: u32::try_from(u64::from(min_silence_ms).div_ceil(FRAME_MS))
                .unwrap_or(u32::MAX)
                .max(1),
            active_from: 0,
            active_run: 0,
            inactive_run: 0,
            speech_start_ms: None,
            last_active_frame: 0,
        }
    }

    /// Whether the detector is inside speech.
    pub fn is_speaking(&self) -> bool {
        self.speech_start_ms.is_some()
    }

    /// While speaking: where the speech would be stamped to end if it ended
    /// now (the `End` it will report unless more speech comes), so the
    /// voiced length of an open segment is this less its start. `None`
    /// outside speech.
    pub fn speech_end_ms(&self) -> Option<u64> {
        let start = self.speech_start_ms?;
        let end = ((self.last_active_frame + 1) * FRAME_MS).saturating_sub(TRAILING_MS);
        Some(end.max(start + FRAME_MS))
    }

    /// Pushes input samples; returns the boundaries they completed.
    pub fn push(&mut self, samples: &[i16]) -> Vec<SpeechEvent> {
        let wide;
        let samples = match self.upsampler.as_mut() {
            Some(up) => {
                wide = up.process(samples);
                &wide[..]
            }
            None => samples,
        };
        let mut events = Vec::new();
        for &s in samples {
            self.frame.push(s);
            if self.frame.len() == FRAME_SAMPLES {
                let score = self.model.predict_i16(&self.frame);
                self.frame.clear();
                events.extend(self.on_frame(score));
            }
        }
        events
    }

    fn on_frame(&mut self, score: f32) -> Option<SpeechEvent> {
        let index = self.frames;
        self.frames += 1;
        if score >= SPEECH_SCORE {
            if self.active_run == 0 {
                self.active_from = index;
            }
            self.active_run += 1;
            self.inactive_run = 0;
            self.last_active_frame = index;
        } else {
            if self.active_run > 0 || score < ONSET_SCORE {
                self.onset_run = 0;
            }
            if score >= ONSET_SCORE {
                self.onset_run = (self.onset_run + 1).min(MAX_ONSET_FRAMES);
            }
            self.active_run = 0;
            self.inactive_run += 1;
        }
        self.transition()
    }

    fn transition(&mut self) -> Option<SpeechEvent> {
        match self.speech_start_ms {
            None if self.active_run >= MIN_SPEECH_FRAMES => {
                let first = self.active_from.saturating_sub(self.onset_run);
                let at_ms = first * FRAME_MS;
                self.speech_start_ms = Some(at_ms);
                self.onset_run = 0;
                Some(SpeechEvent::Start { at_ms })
            }
            Some(_) if self.inactive_run >= self.min_silence_frames => {
                let at_ms = self.speech_end_ms()?;
                self.speech_start_ms = None;
                Some(SpeechEvent::End { at_ms })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
