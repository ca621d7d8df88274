//! Smoke fuzz of the audio code that sees carrier and provider bytes: the
//! stable twin of the cargo-fuzz targets `fuzz/fuzz_targets/media_g711.rs`,
//! `media_vad.rs` and `media_resample.rs`. Arbitrary bytes and samples, cut
//! into arbitrary chunks, must keep each component's structural promises.

use crate::g711;
use crate::resample::{Downsampler2x, Upsampler2x};
use crate::vad::{EnergyVad, VadConfig, VadEvent, level_dbfs};

#[path = "../../../fuzz/smoke/mutator.rs"]
mod mutator;

use mutator::Rng;

/// Cuts `input` the way `rng` says.
fn chunks<'a, T>(rng: &mut Rng, input: &'a [T]) -> Vec<&'a [T]> {
    let mut rest = input;
    rng.chunk_lengths(input.len())
        .into_iter()
        .map(|n| {
            let (head, tail) = rest.split_at(n);
            rest = tail;
            head
        })
        .collect()
}

#[test]
fn g711_decoding_is_a_fixed_point_of_encoding() {
    let mut rng = Rng::new(0x711);
    for _ in 0..300 {
        let n = rng.below(400);
        let codes = rng.bytes(n);
        for (decode, encode) in [
            (
                g711::decode_ulaw as fn(&[u8]) -> Vec<i16>,
                g711::encode_ulaw as fn(&[i16]) -> Vec<u8>,
            ),
            (g711::decode_alaw, g711::encode_alaw),
        ] {
            let linear = decode(&codes);
            assert_eq!(linear.len(), codes.len());
            assert_eq!(decode(&encode(&linear)), linear);
        }
        // Quantisation keeps order and stays within one segment step.
        let samples = rng.samples(400);
        for pair in samples.windows(2) {
            let (lo, hi) = (pair[0].min(pair[1]), pair[0].max(pair[1]));
            for (to, from) in [
                (
                    g711::linear_to_ulaw as fn(i16) -> u8,
                    g711::ulaw_to_linear as fn(u8) -> i16,
                ),
                (g711::linear_to_alaw, g711::alaw_to_linear),
            ] {
                assert!(from(to(lo)) <= from(to(hi)), "{lo} {hi}");
                let err = (i32::from(from(to(lo))) - i32::from(lo)).abs();
                assert!(err <= 1_024, "error {err} at {lo}");
            }
        }
    }
}

/// The events of one detector, checked as they come.
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
        let mut vad = EnergyVad::new(cfg, rate);
        let (mut speaking, mut last) = (false, 0);
        let mut cut = Vec::new();
        for chunk in chunks(&mut rng, &audio) {
            let events = vad.push(chunk);
            check_events(&events, &vad, &mut speaking, &mut last);
            cut.extend(events);
        }
        let whole = EnergyVad::new(cfg, rate).push(&audio);
        assert_eq!(cut, whole, "{cfg:?} at {rate} Hz");
        let level = level_dbfs(&audio);
        assert!((-151.0..=0.0).contains(&level), "{level}");
    }
}

#[test]
fn resamplers_keep_length_and_ignore_chunking() {
    let mut rng = Rng::new(0x2e5);
    // Few and short: the filter runs unoptimised in a debug build.
    for _ in 0..25 {
        let input = rng.samples(1_000);
        let mut up = Upsampler2x::default();
        let mut high = Vec::new();
        for chunk in chunks(&mut rng, &input) {
            let out = up.process(chunk);
            assert_eq!(out.len(), 2 * chunk.len());
            high.extend(out);
        }
        assert_eq!(high, Upsampler2x::default().process(&input));

        let mut down = Downsampler2x::default();
        let mut low = Vec::new();
        for chunk in chunks(&mut rng, &high) {
            low.extend(down.process(chunk));
        }
        assert_eq!(
            low.len(),
            input.len(),
            "8 kHz → 16 kHz → 8 kHz keeps the length"
        );
        let odd = &high[..high.len().saturating_sub(1)];
        assert_eq!(
            Downsampler2x::default().process(odd).len(),
            odd.len().div_ceil(2)
        );
        assert_eq!(low, Downsampler2x::default().process(&high));
    }
}
