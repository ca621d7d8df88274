//! 2× resampling between 8 kHz and 16 kHz with a windowed-sinc low-pass.
//!
//! Both converters are stateful so that a stream cut into 20 ms frames gives
//! the same output as the whole stream at once (no clicks at frame edges).
//! The filter is a 31-tap Blackman-windowed sinc with its cut-off at 3.6 kHz,
//! enough to keep telephone-band speech and reject images/aliases.

const TAPS: usize = 31;

fn lowpass_taps() -> [f32; TAPS] {
    // Cut-off as a fraction of the 16 kHz rate.
    let fc = 3_600.0 / 16_000.0;
    let m = (TAPS - 1) as f32;
    let mut h = [0f32; TAPS];
    for (n, tap) in h.iter_mut().enumerate() {
        let x = n as f32 - m / 2.0;
        let sinc = if x == 0.0 {
            2.0 * fc
        } else {
            (2.0 * std::f32::consts::PI * fc * x).sin() / (std::f32::consts::PI * x)
        };
        let w = 0.42 - 0.5 * (2.0 * std::f32::consts::PI * n as f32 / m).cos()
            + 0.08 * (4.0 * std::f32::consts::PI * n as f32 / m).cos();
        *tap = sinc * w;
    }
    let sum: f32 = h.iter().sum();
    h.iter_mut().for_each(|t| *t /= sum);
    h
}

/// A FIR filter over the 16 kHz stream, remembering its last `TAPS - 1` inputs.
#[derive(Debug, Clone)]
struct Fir {
    taps: [f32; TAPS],
    history: Vec<f32>,
}

impl Fir {
    fn new() -> Self {
        Fir {
            taps: lowpass_taps(),
            history: vec![0.0; TAPS - 1],
        }
    }

    /// Filters `input`, appending one output per input sample.
    fn run(&mut self, input: impl Iterator<Item = f32>, mut out: impl FnMut(f32)) {
        for x in input {
            self.history.push(x);
            let window = &self.history[self.history.len() - TAPS..];
            let y: f32 = window
                .iter()
                .zip(self.taps.iter().rev())
                .map(|(a, b)| a * b)
                .sum();
            out(y);
            if self.history.len() > 4 * TAPS {
                self.history.drain(..self.history.len() - (TAPS - 1));
            }
        }
    }
}

fn to_i16(x: f32) -> i16 {
    x.round().clamp(f32::from(i16::MIN), f32::from(i16::MAX)) as i16
}

/// 8 kHz → 16 kHz.
#[derive(Debug, Clone)]
pub struct Upsampler2x {
    fir: Fir,
}

impl Default for Upsampler2x {
    fn default() -> Self {
        Upsampler2x { fir: Fir::new() }
    }
}

impl Upsampler2x {
    /// Converts a chunk; returns exactly twice as many samples.
    pub fn process(&mut self, input: &[i16]) -> Vec<i16> {
        let mut out = Vec::with_capacity(input.len() * 2);
        // Zero-stuffing halves the energy; the gain of 2 restores it.
        let stuffed = input.iter().flat_map(|&s| [f32::from(s) * 2.0, 0.0]);
        self.fir.run(stuffed, |y| out.push(to_i16(y)));
        out
    }
}

/// 16 kHz → 8 kHz.
#[derive(Debug, Clone)]
pub struct Downsampler2x {
    fir: Fir,
    /// Whether the next filtered sample is kept (keeps phase across chunks).
    keep_next: bool,
}

impl Default for Downsampler2x {
    fn default() -> Self {
        Downsampler2x {
            fir: Fir::new(),
            keep_next: true,
        }
    }
}

impl Downsampler2x {
    /// Converts a chunk; returns half as many samples (rounded by phase).
    pub fn process(&mut self, input: &[i16]) -> Vec<i16> {
        let mut out = Vec::with_capacity(input.len() / 2 + 1);
        let keep = &mut self.keep_next;
        self.fir.run(input.iter().map(|&s| f32::from(s)), |y| {
            if *keep {
                out.push(to_i16(y));
            }
            *keep = !*keep;
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(rate: f32, freq: f32, n: usize) -> Vec<i16> {
        (0..n)
            .map(|i| (8_000.0 * (2.0 * std::f32::consts::PI * freq * i as f32 / rate).sin()) as i16)
            .collect()
    }

    fn rms(x: &[i16]) -> f32 {
        (x.iter().map(|&s| f32::from(s).powi(2)).sum::<f32>() / x.len() as f32).sqrt()
    }

    #[test]
    fn a_voice_band_tone_keeps_its_level_both_ways() {
        let input = tone(8_000.0, 1_000.0, 8_000);
        let mut up = Upsampler2x::default();
        let hi: Vec<i16> = input.chunks(160).flat_map(|c| up.process(c)).collect();
        assert_eq!(hi.len(), 16_000);
        let mut down = Downsampler2x::default();
        let lo: Vec<i16> = hi.chunks(320).flat_map(|c| down.process(c)).collect();
        assert_eq!(lo.len(), 8_000);
        let (a, b, c) = (rms(&input[400..]), rms(&hi[800..]), rms(&lo[400..]));
        assert!((b / a - 1.0).abs() < 0.05, "upsampled level {b} vs {a}");
        assert!((c / a - 1.0).abs() < 0.05, "round-trip level {c} vs {a}");
    }

    #[test]
    fn an_out_of_band_tone_is_rejected_on_the_way_down() {
        let input = tone(16_000.0, 6_000.0, 16_000);
        let mut down = Downsampler2x::default();
        let lo = down.process(&input);
        assert!(
            rms(&lo[100..]) < rms(&input) * 0.05,
            "alias leaked: {}",
            rms(&lo[100..])
        );
    }

    #[test]
    fn chunking_does_not_change_the_output() {
        let input = tone(8_000.0, 440.0, 1_600);
        let whole = Upsampler2x::default().process(&input);
        let mut up = Upsampler2x::default();
        let chunked: Vec<i16> = input.chunks(37).flat_map(|c| up.process(c)).collect();
        assert_eq!(whole, chunked);
    }
}
