//! Energy-based voice activity detection on 10 ms windows.
//!
//! The detector tracks a noise floor (fast to fall, slow to rise) and calls a
//! window "active" when its level is above an absolute threshold, the floor
//! plus a margin, and an optional *reference* (the expected echo of audio
//! the caller is being sent, [`EnergyVad::set_reference_db`]). Speech starts
//! after `min_speech_ms` of consecutive active windows and ends after
//! `min_silence_ms` of consecutive inactive ones. Time is audio time —
//! samples pushed — so the detector gives the same answer however the audio
//! was chunked or delayed on the wire.
//!
//! Steady noise (a fan, a car, line hiss) that starts suddenly is first
//! taken for speech — its level is far above the old floor — but it is
//! *steady*: over [`STEADY_WINDOWS`] windows its level spreads less than
//! [`STEADY_SPREAD_DB`], which speech never does (syllables rise and fall;
//! measured on `SpeechSynth` at 8 and 16 kHz: speech spreads ≥ 4.6 dB over
//! any 300 ms, white noise ≤ 2.6 dB, μ-law coded or not). Then the floor
//! adopts the noise's level at once and the "speech" ends; later speech
//! over the noise must rise `floor_margin_db` above it.

/// Tuning of [`EnergyVad`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VadConfig {
    /// Windows quieter than this (dB relative to full scale) are never speech.
    pub threshold_dbfs: f32,
    /// A window must also be this many dB above the tracked noise floor.
    pub floor_margin_db: f32,
    /// Consecutive active audio needed to declare speech started.
    pub min_speech_ms: u32,
    /// Consecutive inactive audio needed to declare speech ended.
    pub min_silence_ms: u32,
}

impl Default for VadConfig {
    fn default() -> Self {
        VadConfig {
            threshold_dbfs: -45.0,
            floor_margin_db: 9.0,
            min_speech_ms: 60,
            min_silence_ms: 300,
        }
    }
}

/// A speech boundary, stamped in milliseconds of audio since the stream began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VadEvent {
    /// Speech began at this audio time (the first active window).
    SpeechStart { at_ms: u64 },
    /// Speech ended at this audio time (the end of the last active window).
    SpeechEnd { at_ms: u64 },
}

/// The detector. Feed it linear samples at the rate given to [`EnergyVad::new`].
#[derive(Debug, Clone)]
pub struct EnergyVad {
    cfg: VadConfig,
    window: usize,
    acc: Vec<i16>,
    windows_seen: u64,
    noise_floor_db: f32,
    speaking: bool,
    active_run: u32,
    inactive_run: u32,
    run_start_window: u64,
    last_active_window: u64,
    /// Levels of the last [`STEADY_WINDOWS`] windows, oldest first.
    recent: std::collections::VecDeque<f32>,
    /// Windows at or below this level are not speech (expected echo).
    reference_db: Option<f32>,
    /// Whether any window was active yet.
    any_active: bool,
    /// Times the floor adopted a steady noise's level.
    pub noise_adoptions: u32,
}

const WINDOW_MS: u32 = 10;
/// Windows over which steadiness is judged (300 ms).
pub const STEADY_WINDOWS: usize = 30;
/// Level spread (max − min, dB) under which [`STEADY_WINDOWS`] windows are
/// steady noise, not speech.
pub const STEADY_SPREAD_DB: f32 = 3.5;

impl EnergyVad {
    /// A detector for audio at `sample_rate` Hz.
    pub fn new(cfg: VadConfig, sample_rate: u32) -> Self {
        let window = (sample_rate as usize * WINDOW_MS as usize / 1000).max(1);
        EnergyVad {
            cfg,
            window,
            acc: Vec::with_capacity(window),
            windows_seen: 0,
            noise_floor_db: -70.0,
            speaking: false,
            active_run: 0,
            inactive_run: 0,
            run_start_window: 0,
            last_active_window: 0,
            recent: std::collections::VecDeque::with_capacity(STEADY_WINDOWS),
            reference_db: None,
            any_active: false,
            noise_adoptions: 0,
        }
    }

    /// Sets the level (dBFS) at or below which windows are not speech from
    /// now on — the expected echo of outbound audio — or clears it.
    pub fn set_reference_db(&mut self, level: Option<f32>) {
        self.reference_db = level;
    }

    /// The tracked noise floor, dBFS.
    pub fn noise_floor_db(&self) -> f32 {
        self.noise_floor_db
    }

    /// Audio time (ms) at which the last active window ended, if any was.
    pub fn last_voice_end_ms(&self) -> Option<u64> {
        self.any_active
            .then(|| (self.last_active_window + 1) * u64::from(WINDOW_MS))
    }

    /// Whether the detector is currently inside speech.
    pub fn is_speaking(&self) -> bool {
        self.speaking
    }

    /// Milliseconds of audio pushed so far (whole windows).
    pub fn audio_ms(&self) -> u64 {
        self.windows_seen * u64::from(WINDOW_MS)
    }

    /// Pushes samples and returns the boundaries they completed.
    pub fn push(&mut self, samples: &[i16]) -> Vec<VadEvent> {
        let mut events = Vec::new();
        for &s in samples {
            self.acc.push(s);
            if self.acc.len() == self.window {
                let level = level_dbfs(&self.acc);
                self.acc.clear();
                if let Some(e) = self.on_window(level) {
                    events.push(e);
                }
            }
        }
        events
    }

    fn on_window(&mut self, level_db: f32) -> Option<VadEvent> {
        let index = self.windows_seen;
        self.windows_seen += 1;
        if self.recent.len() == STEADY_WINDOWS {
            self.recent.pop_front();
        }
        self.recent.push_back(level_db);
        let mut active = self.is_active(level_db);
        if active && self.adopt_steady_noise() {
            active = self.is_active(level_db);
        }
        self.track_floor(level_db, active);
        if active {
            if self.active_run == 0 {
                self.run_start_window = index;
            }
            self.active_run += 1;
            self.inactive_run = 0;
            self.last_active_window = index;
            self.any_active = true;
        } else {
            self.inactive_run += 1;
            self.active_run = 0;
        }
        self.transition()
    }

    fn transition(&mut self) -> Option<VadEvent> {
        let ms = |w: u64| w * u64::from(WINDOW_MS);
        // A run is at least one window even when a minimum is 0: otherwise
        // a stale run would restart speech at an earlier time.
        if !self.speaking
            && self.active_run > 0
            && self.active_run * WINDOW_MS >= self.cfg.min_speech_ms
        {
            self.speaking = true;
            return Some(VadEvent::SpeechStart {
                at_ms: ms(self.run_start_window),
            });
        }
        if self.speaking
            && self.inactive_run > 0
            && self.inactive_run * WINDOW_MS >= self.cfg.min_silence_ms
        {
            self.speaking = false;
            return Some(VadEvent::SpeechEnd {
                at_ms: ms(self.last_active_window + 1),
            });
        }
        None
    }

    fn is_active(&self, level_db: f32) -> bool {
        level_db > self.cfg.threshold_dbfs
            && level_db > self.noise_floor_db + self.cfg.floor_margin_db
            && self.reference_db.is_none_or(|r| level_db > r)
    }

    /// A full history of windows whose levels barely spread is steady
    /// noise: the floor takes its mean. Returns whether it did.
    fn adopt_steady_noise(&mut self) -> bool {
        if self.recent.len() < STEADY_WINDOWS {
            return false;
        }
        let (lo, hi) = self
            .recent
            .iter()
            .fold((f32::MAX, f32::MIN), |(lo, hi), &l| (lo.min(l), hi.max(l)));
        if hi - lo >= STEADY_SPREAD_DB {
            return false;
        }
        let mean = self.recent.iter().sum::<f32>() / self.recent.len() as f32;
        self.noise_floor_db = mean;
        self.noise_adoptions += 1;
        true
    }

    fn track_floor(&mut self, level_db: f32, active: bool) {
        if level_db < self.noise_floor_db {
            // Falls fast: a quieter window is better evidence of the floor.
            self.noise_floor_db = 0.7 * self.noise_floor_db + 0.3 * level_db;
        } else if !active && self.reference_db.is_none() {
            // Rises slowly, and only on windows not taken for speech — nor
            // explained by the reference (echo is not the room's noise).
            self.noise_floor_db = 0.98 * self.noise_floor_db + 0.02 * level_db;
        }
    }
}

/// RMS level of a window in dB relative to a full-scale square wave.
pub fn level_dbfs(samples: &[i16]) -> f32 {
    let energy: f64 = samples.iter().map(|&s| f64::from(s).powi(2)).sum();
    level_of_energy(energy, samples.len())
}

/// The level of `samples` samples whose squares sum to `energy`, as
/// [`level_dbfs`] computes it.
pub fn level_of_energy(energy: f64, samples: usize) -> f32 {
    if samples == 0 {
        return -120.0;
    }
    let rms = (energy / samples as f64).sqrt();
    (20.0 * (rms.max(1e-3) / 32_768.0).log10()) as f32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::SpeechSynth;

    #[test]
    fn finds_one_utterance_with_boundaries_near_the_truth() {
        let mut synth = SpeechSynth::new(8_000, 7);
        let mut audio = synth.silence(500);
        audio.extend(synth.utterance(1_200));
        audio.extend(synth.silence(800));
        let mut vad = EnergyVad::new(VadConfig::default(), 8_000);
        let events: Vec<VadEvent> = audio.chunks(160).flat_map(|c| vad.push(c)).collect();
        assert_eq!(events.len(), 2, "{events:?}");
        let VadEvent::SpeechStart { at_ms: start } = events[0] else {
            panic!("{events:?}")
        };
        let VadEvent::SpeechEnd { at_ms: end } = events[1] else {
            panic!("{events:?}")
        };
        assert!((480..=560).contains(&start), "start {start}");
        assert!((1_640..=1_720).contains(&end), "end {end}");
    }

    #[test]
    fn steady_noise_is_not_speech() {
        let mut synth = SpeechSynth::new(8_000, 3);
        let noise = synth.noise(3_000, -50.0);
        let mut vad = EnergyVad::new(VadConfig::default(), 8_000);
        assert!(vad.push(&noise).is_empty());
    }

    #[test]
    fn the_same_audio_in_other_chunks_gives_the_same_events() {
        let mut synth = SpeechSynth::new(16_000, 11);
        let mut audio = synth.utterance(700);
        audio.extend(synth.silence(600));
        audio.extend(synth.utterance(900));
        audio.extend(synth.silence(600));
        let mut a = EnergyVad::new(VadConfig::default(), 16_000);
        let mut b = EnergyVad::new(VadConfig::default(), 16_000);
        let ea = a.push(&audio);
        let eb: Vec<VadEvent> = audio.chunks(123).flat_map(|c| b.push(c)).collect();
        assert_eq!(ea, eb);
        assert_eq!(ea.len(), 4);
    }

    fn events(vad: &mut EnergyVad, audio: &[i16], chunk: usize) -> Vec<VadEvent> {
        audio.chunks(chunk).flat_map(|c| vad.push(c)).collect()
    }

    #[test]
    fn loud_steady_noise_from_the_start_ends_quickly_and_speech_over_it_is_found() {
        for rate in [8_000u32, 16_000] {
            let mut synth = SpeechSynth::new(rate, 5);
            let mut audio = synth.noise(3_000, -32.0);
            let mut vad = EnergyVad::new(VadConfig::default(), rate);
            let ev = events(&mut vad, &audio, 160);
            // Taken for speech at its onset, adopted as the floor within
            // STEADY_WINDOWS, then silent for good.
            assert_eq!(ev.len(), 2, "{ev:?}");
            assert!(
                matches!(ev[1], VadEvent::SpeechEnd { at_ms } if at_ms <= 400),
                "{ev:?}"
            );
            assert!(!vad.is_speaking());
            // Speech 12+ dB above the noise is still speech.
            let mut voice = synth.utterance(1_000);
            let noise = synth.noise(1_000, -32.0);
            for (v, n) in voice.iter_mut().zip(&noise) {
                *v = v.saturating_add(*n);
            }
            audio = voice;
            audio.extend(synth.noise(800, -32.0));
            let ev = events(&mut vad, &audio, 160);
            assert_eq!(ev.len(), 2, "rate {rate}: {ev:?}");
            assert!(
                matches!(ev[0], VadEvent::SpeechStart { at_ms } if (3_000..3_100).contains(&at_ms)),
                "{ev:?}"
            );
        }
    }

    #[test]
    fn long_speech_is_never_taken_for_steady_noise() {
        for seed in 1..6 {
            let mut synth = SpeechSynth::new(8_000, seed);
            let mut audio = synth.silence(300);
            audio.extend(synth.utterance(4_000));
            audio.extend(synth.silence(600));
            let mut vad = EnergyVad::new(VadConfig::default(), 8_000);
            let ev = events(&mut vad, &audio, 160);
            assert_eq!(ev.len(), 2, "seed {seed}: {ev:?}");
            assert_eq!(vad.noise_adoptions, 0);
        }
    }

    #[test]
    fn windows_under_the_reference_are_not_speech_and_louder_ones_are() {
        let mut synth = SpeechSynth::new(8_000, 9);
        let speech = synth.utterance(800);
        let level = level_dbfs(&speech);
        // The same sound 14 dB down (an echo) under a reference 10 dB down.
        let echo: Vec<i16> = speech
            .iter()
            .map(|&s| (f32::from(s) * 0.2) as i16)
            .collect();
        let mut vad = EnergyVad::new(VadConfig::default(), 8_000);
        vad.set_reference_db(Some(level - 10.0));
        assert!(events(&mut vad, &echo, 160).is_empty());
        let ev = events(&mut vad, &speech, 160);
        assert!(
            matches!(ev.first(), Some(VadEvent::SpeechStart { .. })),
            "{ev:?}"
        );
        assert_eq!(vad.last_voice_end_ms().map(|ms| ms > 800), Some(true));
    }
}
