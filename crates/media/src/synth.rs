//! A synthetic, speech-like signal for callers in tests and load runs.
//!
//! Real speech recordings are personal data and heavy fixtures; what the
//! simulated STT and callgate's own VAD need is audio with the level, band and
//! rhythm of speech. This generator makes voiced sound (a gliding fundamental
//! with harmonics up to the telephone band) shaped into syllables, and clean
//! silences between utterances. Deterministic for a given seed.

use std::f32::consts::PI;

/// Harmonics in the voiced wave. The fundamental never exceeds ~200 Hz
/// (170 Hz + 8 % vibrato), so all 14 stay inside the 3.4 kHz telephone band.
const HARMONICS: usize = 14;
/// Points per period of the precomputed voiced wave.
const WAVE_POINTS: usize = 2_048;

/// One period of Σ sin(k·φ)/k, k = 1…14, computed once: a table lookup per
/// sample instead of fourteen `sin` calls keeps simulated voices cheap when
/// hundreds of calls are generated at once (the test rig shares the machine
/// with the server it measures).
fn voiced_wave(phase: f32) -> f32 {
    static WAVE: std::sync::OnceLock<Vec<f32>> = std::sync::OnceLock::new();
    let wave = WAVE.get_or_init(|| {
        (0..=WAVE_POINTS)
            .map(|i| {
                let phi = 2.0 * PI * i as f32 / WAVE_POINTS as f32;
                (1..=HARMONICS)
                    .map(|k| (phi * k as f32).sin() / k as f32)
                    .sum()
            })
            .collect()
    });
    let x = phase.rem_euclid(2.0 * PI) / (2.0 * PI) * WAVE_POINTS as f32;
    let i = (x as usize).min(WAVE_POINTS - 1);
    let frac = x - i as f32;
    wave[i] + (wave[i + 1] - wave[i]) * frac
}

/// Generator state.
#[derive(Debug, Clone)]
pub struct SpeechSynth {
    rate: f32,
    rng: u64,
    phase: f32,
}

impl SpeechSynth {
    /// A generator producing samples at `sample_rate` Hz.
    pub fn new(sample_rate: u32, seed: u64) -> Self {
        SpeechSynth {
            rate: sample_rate as f32,
            rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            phase: 0.0,
        }
    }

    fn next_unit(&mut self) -> f32 {
        // xorshift64*: small, deterministic, good enough for audio noise.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let x = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }

    /// `ms` milliseconds of speech-like sound (peak around −14 dBFS).
    pub fn utterance(&mut self, ms: u32) -> Vec<i16> {
        let n = (self.rate * ms as f32 / 1000.0) as usize;
        let base_f0 = 110.0 + 60.0 * (self.next_unit() + 1.0) / 2.0;
        let syllable_hz = 3.5 + self.next_unit().abs();
        let ramp = (self.rate * 0.02) as usize;
        (0..n)
            .map(|i| {
                let t = i as f32 / self.rate;
                let f0 = base_f0 * (1.0 + 0.08 * (2.0 * PI * 0.7 * t).sin());
                self.phase = (self.phase + 2.0 * PI * f0 / self.rate) % (2.0 * PI);
                let voiced = voiced_wave(self.phase);
                let envelope = 0.55 + 0.45 * (PI * syllable_hz * t).sin().abs();
                let edge = (i.min(n - i) as f32 / ramp as f32).min(1.0);
                let s = 6_500.0 * envelope * edge * voiced / 2.0 + 150.0 * self.next_unit();
                s.clamp(-32_000.0, 32_000.0) as i16
            })
            .collect()
    }

    /// `ms` milliseconds of digital silence.
    pub fn silence(&mut self, ms: u32) -> Vec<i16> {
        vec![0; (self.rate * ms as f32 / 1000.0) as usize]
    }

    /// `ms` milliseconds of white noise at about `dbfs` RMS.
    pub fn noise(&mut self, ms: u32, dbfs: f32) -> Vec<i16> {
        let n = (self.rate * ms as f32 / 1000.0) as usize;
        // Uniform noise in [-a, a] has RMS a/√3.
        let a = 32_768.0 * 10f32.powf(dbfs / 20.0) * 3f32.sqrt();
        (0..n).map(|_| (a * self.next_unit()) as i16).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vad::level_dbfs;

    #[test]
    fn utterances_sound_like_speech_levels() {
        let mut s = SpeechSynth::new(8_000, 1);
        let u = s.utterance(1_000);
        assert_eq!(u.len(), 8_000);
        let db = level_dbfs(&u);
        assert!((-30.0..-10.0).contains(&db), "level {db}");
        let n = s.noise(1_000, -50.0);
        assert!((level_dbfs(&n) + 50.0).abs() < 1.5);
    }

    #[test]
    fn same_seed_same_audio() {
        assert_eq!(
            SpeechSynth::new(8_000, 5).utterance(300),
            SpeechSynth::new(8_000, 5).utterance(300)
        );
    }
}
