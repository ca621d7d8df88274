//! Tests of the simulator's speech detector on the synthetic speech the test
//! callers send (`media::synth::SpeechSynth`), and how its boundaries
//! compare with callgate's `EnergyVad` on the same audio.

use media::synth::SpeechSynth;
use media::vad::{EnergyVad, VadConfig, VadEvent};

use super::*;

/// Silence, an utterance, silence, a second utterance, silence; returns the
/// audio and the true (start, end) of each utterance in ms.
fn two_utterances(rate: u32, seed: u64) -> (Vec<i16>, [(u64, u64); 2]) {
    let mut s = SpeechSynth::new(rate, seed);
    let mut audio = s.silence(500);
    audio.extend(s.utterance(1_500));
    audio.extend(s.silence(1_200));
    audio.extend(s.utterance(900));
    audio.extend(s.silence(1_000));
    (audio, [(500, 2_000), (3_200, 4_100)])
}

fn boundaries(events: &[SpeechEvent]) -> Vec<(u64, u64)> {
    events
        .chunks(2)
        .map(|pair| match pair {
            [
                SpeechEvent::Start { at_ms: s },
                SpeechEvent::End { at_ms: e },
            ] => (*s, *e),
            other => panic!("not a start/end pair: {other:?}"),
        })
        .collect()
}

fn detect(rate: u32, audio: &[i16], chunk: usize) -> Vec<SpeechEvent> {
    let mut d = SpeechDetector::new(rate, 300);
    let events = audio.chunks(chunk).flat_map(|c| d.push(c)).collect();
    assert!(!d.is_speaking(), "speech still open at the end");
    events
}

#[test]
fn finds_each_utterance_near_the_truth_at_both_rates() {
    for rate in [8_000, 16_000] {
        for seed in [1, 7, 42] {
            let (audio, truth) = two_utterances(rate, seed);
            let found = boundaries(&detect(rate, &audio, rate as usize / 50));
            assert_eq!(found.len(), 2, "rate {rate} seed {seed}: {found:?}");
            for ((s, e), (ts, te)) in found.iter().zip(truth) {
                assert!(
                    s.abs_diff(ts) <= 40,
                    "rate {rate} seed {seed}: start {s} vs {ts}"
                );
                assert!(
                    e.abs_diff(te) <= 60,
                    "rate {rate} seed {seed}: end {e} vs {te}"
                );
            }
        }
    }
}

/// Silence and quiet steady noise are not speech. Louder band-limited
/// noise is where the model differs from an energy detector: −50 dBFS
/// noise upsampled from 8 kHz starts "speech" at its onset for a second or
/// two (the model then adapts), while the same level at 16 kHz does not.
#[test]
fn silence_and_steady_noise_are_not_speech() {
    for (rate, dbfs) in [(8_000, -60.0), (16_000, -60.0), (16_000, -50.0)] {
        let mut s = SpeechSynth::new(rate, 3);
        let mut audio = s.silence(1_000);
        audio.extend(s.noise(3_000, dbfs));
        audio.extend(s.silence(500));
        assert_eq!(detect(rate, &audio, 160), [], "rate {rate}, {dbfs} dBFS");
    }
}

#[test]
fn the_same_audio_in_other_chunks_gives_the_same_events() {
    let (audio, _) = two_utterances(8_000, 11);
    let whole = detect(8_000, &audio, audio.len());
    assert_eq!(whole.len(), 4);
    assert_eq!(whole, detect(8_000, &audio, 123));
    assert_eq!(whole, detect(8_000, &audio, 1));
}

#[test]
fn a_short_pause_inside_speech_does_not_end_it() {
    let mut s = SpeechSynth::new(16_000, 5);
    let mut audio = s.utterance(600);
    audio.extend(s.silence(200));
    audio.extend(s.utterance(600));
    audio.extend(s.silence(600));
    let found = boundaries(&detect(16_000, &audio, 320));
    assert_eq!(found.len(), 1, "{found:?}");
    // The pause is shorter than the 300 ms endpointing; a 100 ms one splits
    // (the model's 48 ms window eats part of a pause, so 200 ms, not 120).
    let mut d = SpeechDetector::new(16_000, 100);
    let split: Vec<SpeechEvent> = audio.chunks(320).flat_map(|c| d.push(c)).collect();
    assert_eq!(boundaries(&split).len(), 2, "{split:?}");
}

/// Where `EnergyVad` (callgate's watchdog detector) puts the same
/// utterances, with the same 300 ms silence.
fn energy_boundaries(rate: u32, audio: &[i16]) -> Vec<(u64, u64)> {
    let cfg = VadConfig {
        min_silence_ms: 300,
        ..VadConfig::default()
    };
    let mut vad = EnergyVad::new(cfg, rate);
    let events: Vec<SpeechEvent> = audio
        .chunks(rate as usize / 50)
        .flat_map(|c| vad.push(c))
        .map(|e| match e {
            VadEvent::SpeechStart { at_ms } => SpeechEvent::Start { at_ms },
            VadEvent::SpeechEnd { at_ms } => SpeechEvent::End { at_ms },
        })
        .collect();
    boundaries(&events)
}

/// The two detectors agree on the utterances (same count, boundaries within
/// 80 ms of each other) without being the same detector: over the seeds,
/// at least one boundary differs. Run with `--nocapture` for the table of
/// differences (new − old, ms).
#[test]
fn boundaries_differ_from_the_energy_vad_by_tens_of_ms() {
    let mut differing = 0;
    for rate in [8_000, 16_000] {
        for seed in [1, 7, 42, 99] {
            let (audio, truth) = two_utterances(rate, seed);
            let new = boundaries(&detect(rate, &audio, rate as usize / 50));
            let old = energy_boundaries(rate, &audio);
            assert_eq!(new.len(), old.len(), "rate {rate} seed {seed}");
            for (i, ((ns, ne), (os, oe))) in new.iter().zip(&old).enumerate() {
                let (ts, te) = truth[i];
                println!(
                    "rate {rate} seed {seed} utterance {i}: truth {ts}-{te}, earshot {ns}-{ne}, \
                     energy {os}-{oe}, onset {:+} offset {:+}",
                    *ns as i64 - *os as i64,
                    *ne as i64 - *oe as i64
                );
                assert!(ns.abs_diff(*os) <= 80 && ne.abs_diff(*oe) <= 80);
                differing += usize::from(ns != os || ne != oe);
            }
        }
    }
    assert!(differing > 0, "identical boundaries: the same detector?");
}
