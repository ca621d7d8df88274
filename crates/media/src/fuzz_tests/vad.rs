//! The invariants of the energy VAD on arbitrary samples and configs — the
//! one copy, shared by the cargo-fuzz target `fuzz/fuzz_targets/media_vad.rs`
//! and by the stable smoke twin (the `#[cfg(test)]` part at the bottom of
//! this file).
//!
//! This file is included twice:
//! - by an ordinary `mod` (`#[cfg(test)]`), as `fuzz_tests::vad` in the
//!   `media` crate;
//! - by a `path` attribute in the fuzz target, as `mod invariants`, whose
//!   crate root has `use media::vad`.
//!
//! So the detector is reached as `crate::vad` (the same module in both
//! builds), and the smoke twin is compiled only under `cfg(test)`. Entry
//! point: [`check`].
//!
//! Invariants: events alternate Start/End beginning with Start, their times
//! never go back and never pass the audio pushed, `is_speaking` matches the
//! last event after every chunk, the events do not depend on how the audio
//! was chunked, and the level of any audio is within -151..=0 dBFS.

use crate::vad::{EnergyVad, VadConfig, VadEvent, level_dbfs};

/// Every invariant on one input: a config byte, a chunking byte (sample
/// rate and chunk size), then little-endian i16 samples.
pub fn check(data: &[u8]) {
    let [c, chunk, rest @ ..] = data else { return };
    let cfg = VadConfig {
        threshold_dbfs: [-45.0, -70.0, 0.0, f32::NAN][usize::from(c & 3)],
        floor_margin_db: [9.0, 0.0, -10.0, 30.0][usize::from(c >> 2 & 3)],
        min_speech_ms: [0, 5, 10, 60][usize::from(c >> 4 & 3)],
        min_silence_ms: [0, 5, 10, 300][usize::from(c >> 6 & 3)],
    };
    let rate = [8_000, 16_000, 1, 0][usize::from(chunk & 3)];
    let samples: Vec<i16> = rest
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    let pieces: Vec<&[i16]> = samples.chunks(usize::from(*chunk >> 2) + 1).collect();
    check_stream(cfg, rate, &pieces);
}

/// One detector fed `pieces` in turn, checked as the events come, against
/// a second one fed the same audio at once.
pub fn check_stream(cfg: VadConfig, rate: u32, pieces: &[&[i16]]) {
    let audio = pieces.concat();
    let mut vad = EnergyVad::new(cfg, rate);
    let (mut speaking, mut last) = (false, 0);
    let mut cut = Vec::new();
    for piece in pieces {
        let events = vad.push(piece);
        check_events(&events, &vad, &mut speaking, &mut last);
        cut.extend(events);
    }
    let whole = EnergyVad::new(cfg, rate).push(&audio);
    assert_eq!(cut, whole, "{cfg:?} at {rate} Hz");
    let level = level_dbfs(&audio);
    assert!((-151.0..=0.0).contains(&level), "{level}");
}

/// The events of one push, checked against what came before.
fn check_events(events: &[VadEvent], vad: &EnergyVad, was_speaking: &mut bool, last: &mut u64) {
    for e in events {
        let (start, at) = match *e {
            VadEvent::SpeechStart { at_ms } => (true, at_ms),
            VadEvent::SpeechEnd { at_ms } => (false, at_ms),
        };
        assert_ne!(start, *was_speaking, "events alternate: {events:?}");
        assert!(at >= *last, "time went back: {events:?}");
        assert!(at <= vad.audio_ms(), "{e:?} is after the audio pushed");
        *was_speaking = start;
        *last = at;
    }
    assert_eq!(vad.is_speaking(), *was_speaking);
}

// ---- the stable smoke twin ----------------------------------------------

#[cfg(test)]
mod smoke {
    use super::super::{chunks, fuzz_input};
    use super::*;
    use callgate_test_support::Rng;

    fn random_config(rng: &mut Rng) -> VadConfig {
        VadConfig {
            threshold_dbfs: *rng.pick(&[-45.0, -70.0, 0.0, f32::NAN, f32::NEG_INFINITY]),
            floor_margin_db: *rng.pick(&[9.0, 0.0, -10.0]),
            min_speech_ms: *rng.pick(&[0, 5, 10, 60, 200]),
            min_silence_ms: *rng.pick(&[0, 5, 10, 300]),
        }
    }

    #[test]
    fn vad_events_alternate_in_time_order_however_the_audio_is_cut() {
        let mut rng = Rng::new(0x7ad);
        for _ in 0..150 {
            let cfg = random_config(&mut rng);
            let rate = *rng.pick(&[8_000, 16_000, 1, 0, 44_100]);
            let audio = rng.samples(6_000);
            check_stream(cfg, rate, &chunks(&mut rng, &audio));
        }
    }

    /// What the fuzz target runs: a config byte, a chunking byte, then
    /// samples as bytes.
    #[test]
    fn fuzz_inputs_keep_the_invariants() {
        let mut rng = Rng::new(0xfa7ad);
        for _ in 0..100 {
            check(&fuzz_input(&mut rng, 2, 3_000));
        }
        check(&[]);
        check(&[0xff]);
    }
}
