//! The energy VAD on arbitrary samples: a config byte, a chunking byte,
//! then little-endian i16 samples.
//!
//! Invariants: events alternate Start/End beginning with Start, their times
//! never go back and never pass the audio pushed, `is_speaking` matches the
//! last event, and the events do not depend on how the audio was chunked.
#![no_main]

use libfuzzer_sys::fuzz_target;
use media::vad::{EnergyVad, VadConfig, VadEvent, level_dbfs};

fuzz_target!(|data: &[u8]| {
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
    let mut vad = EnergyVad::new(cfg, rate);
    let (mut speaking, mut last, mut cut) = (false, 0, Vec::new());
    for piece in samples.chunks(usize::from(*chunk >> 2) + 1) {
        for e in vad.push(piece) {
            let (start, at) = match e {
                VadEvent::SpeechStart { at_ms } => (true, at_ms),
                VadEvent::SpeechEnd { at_ms } => (false, at_ms),
            };
            assert!(start != speaking && at >= last && at <= vad.audio_ms());
            (speaking, last) = (start, at);
            cut.push(e);
        }
        assert_eq!(vad.is_speaking(), speaking);
    }
    assert_eq!(cut, EnergyVad::new(cfg, rate).push(&samples));
    assert!((-151.0..=0.0).contains(&level_dbfs(&samples)));
});
