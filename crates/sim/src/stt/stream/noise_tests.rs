//! Unit tests of noise on the sans-IO stream core: speech segments too
//! short to be words ([`MIN_WORDS_MS`]) give an empty final and use no
//! script line. Audio time only, no sockets.
//!
//! Measured (`the_detector_on_short_bursts_and_what_the_core_makes_of_them`,
//! run with `--nocapture` for the table; 300 ms endpointing, `SpeechSynth`
//! bursts after 500 ms of silence, seeds 1, 5, 7, 9, 42, 99): earshot
//! detects every burst from 80 ms on (60 ms only for some seeds at 8 kHz),
//! always as one segment, stamped longer than the burst:
//!
//! | burst | 8 kHz segment | 16 kHz segment |
//! |---|---|---|
//! | 100 ms | 112–128 ms: noise | 144–192 ms: noise |
//! | 150 ms | 176–192 ms: noise | 208–224 ms: noise |
//! | 200 ms | 224–240 ms: noise | 256–272 ms: words |
//! | 250 ms | 272–288 ms: words | 288–304 ms: words |

use media::g711;
use media::synth::SpeechSynth;

use super::fuzz_tests::encode;
use super::tests::{core, count, drain, finals, params, push_frames, results, script};
use super::*;
use crate::stt::detector::SpeechDetector;
use crate::stt::messages::ServerMessage;

/// The seeds the measurements run over.
const SEEDS: [u64; 6] = [1, 5, 7, 9, 42, 99];

/// 500 ms of silence, a `burst_ms` burst, 800 ms of silence, then (when
/// `then_ms` > 0) an utterance of `then_ms` and 800 ms of silence.
fn burst_then(rate: u32, seed: u64, burst_ms: u32, then_ms: u32) -> Vec<i16> {
    let mut s = SpeechSynth::new(rate, seed);
    let mut audio = s.silence(500);
    audio.extend(s.utterance(burst_ms));
    audio.extend(s.silence(800));
    if then_ms > 0 {
        audio.extend(s.utterance(then_ms));
        audio.extend(s.silence(800));
    }
    audio
}

/// [`params`] at `rate`: μ-law at 8 kHz (Twilio), linear16 at 16 kHz.
fn params_at(rate: u32) -> StreamParams {
    StreamParams {
        encoding: if rate == 8_000 {
            SimEncoding::Mulaw
        } else {
            SimEncoding::Linear16
        },
        sample_rate: rate,
        ..params()
    }
}

/// Feeds `audio` in 20 ms frames to a core with `p`; returns the core and
/// everything it sent.
fn run(p: StreamParams, audio: &[i16]) -> (StreamCore, Vec<Outbound>) {
    let frame = (p.sample_rate / 50) as usize * p.encoding.bytes_per_sample() as usize;
    let bytes = encode(&p, audio);
    let mut c = core(p);
    let out = push_frames(&mut c, &bytes, frame);
    (c, out)
}

fn is_noise_final(r: &ResultsMessage) -> bool {
    r.is_final && r.transcript().is_empty() && r.channel.alternatives[0].words.is_empty()
}

/// What the core made of a lone burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heard {
    /// The detector never fired: no `SpeechStarted`, no result.
    Nothing,
    /// `SpeechStarted`, then only an empty final.
    Noise,
    /// A final with the first script line.
    Words,
}

fn heard(out: &[Outbound]) -> Heard {
    let starts = count(out, |m| matches!(m, ServerMessage::SpeechStarted { .. }));
    let r = results(out);
    match (starts, r.as_slice()) {
        (0, []) => Heard::Nothing,
        (1, [f]) if is_noise_final(f) && f.speech_final => Heard::Noise,
        (1, [.., f]) if f.is_final && f.transcript() == script()[0] => Heard::Words,
        _ => panic!("neither nothing, noise nor words: {out:?}"),
    }
}

/// The detector's segment lengths for a lone burst, one per segment found.
fn segments(rate: u32, audio: &[i16]) -> Vec<u64> {
    let mut d = SpeechDetector::new(rate, 300);
    let mut start = None;
    let mut lengths = Vec::new();
    for event in audio.chunks(rate as usize / 50).flat_map(|c| d.push(c)) {
        match event {
            SpeechEvent::Start { at_ms } => start = Some(at_ms),
            SpeechEvent::End { at_ms } => lengths.extend(start.take().map(|s| at_ms - s)),
        }
    }
    lengths
}

/// The table in the module header, asserted: what the core hears for each
/// burst length is what the detector's segment length says.
#[test]
fn the_detector_on_short_bursts_and_what_the_core_makes_of_them() {
    for rate in [8_000, 16_000] {
        for burst in [60, 80, 100, 150, 200, 250, 300, 600] {
            let mut row = Vec::new();
            for seed in SEEDS {
                let audio = burst_then(rate, seed, burst, 0);
                let found = segments(rate, &audio);
                let (c, out) = run(params_at(rate), &audio);
                let got = heard(&out);
                let want = match found.as_slice() {
                    [] => Heard::Nothing,
                    [ms] if *ms < MIN_WORDS_MS => Heard::Noise,
                    [_] => Heard::Words,
                    more => panic!("rate {rate} burst {burst}: {more:?}"),
                };
                assert_eq!(
                    got, want,
                    "rate {rate} burst {burst} seed {seed}: {found:?}"
                );
                assert_eq!(c.noise_segments(), usize::from(got == Heard::Noise));
                assert_eq!(c.utterances(), usize::from(got == Heard::Words));
                row.push(format!("{found:?} {got:?}"));
            }
            println!("rate {rate} burst {burst} ms: {}", row.join(", "));
            // The claims of the header and of `MIN_WORDS_MS`'s doc.
            let all = |h: Heard| {
                SEEDS.iter().all(|&seed| {
                    let audio = burst_then(rate, seed, burst, 0);
                    heard(&run(params_at(rate), &audio).1) == h
                })
            };
            match (rate, burst) {
                (_, 100 | 150) | (8_000, 200) => assert!(all(Heard::Noise), "{rate} {burst}"),
                (16_000, 200) | (_, 250..) => assert!(all(Heard::Words), "{rate} {burst}"),
                _ => {}
            }
        }
    }
}

#[test]
fn a_150_ms_burst_gives_no_words_and_the_next_utterance_gets_line_0() {
    for rate in [8_000, 16_000] {
        for seed in SEEDS {
            let (c, out) = run(params_at(rate), &burst_then(rate, seed, 150, 1_400));
            let ctx = format!("rate {rate} seed {seed}");
            assert_eq!(
                count(&out, |m| matches!(m, ServerMessage::SpeechStarted { .. })),
                2,
                "{ctx}: Deepgram's VAD fires on noise too"
            );
            let r = results(&out);
            // The burst's only result is its final: not even an interim,
            // though its segment stays open past 400 ms awaiting the
            // 300 ms endpoint.
            let noise = r[0];
            assert!(is_noise_final(noise), "{ctx}: {noise:?}");
            assert!(noise.speech_final && !noise.from_finalize, "{ctx}");
            assert!(
                (0.45..0.55).contains(&noise.start),
                "{ctx}: {}",
                noise.start
            );
            assert!(noise.duration < 0.25, "{ctx}: {}", noise.duration);
            let f = finals(&out);
            assert_eq!(f.len(), 2, "{ctx}");
            assert_eq!(f[1].transcript(), script()[0], "{ctx}: not line 1");
            assert!(
                r[1..]
                    .iter()
                    .all(|r| script()[0].starts_with(r.transcript())),
                "{ctx}: the utterance's interims are line 0 too"
            );
            assert_eq!((c.utterances(), c.noise_segments()), (1, 1), "{ctx}");
        }
    }
}

#[test]
fn a_600_ms_utterance_still_gets_words() {
    for rate in [8_000, 16_000] {
        let (c, out) = run(params_at(rate), &burst_then(rate, 42, 600, 0));
        let r = results(&out);
        assert!(
            r.iter().any(|r| !r.is_final && !r.transcript().is_empty()),
            "rate {rate}: worded interims: {r:?}"
        );
        let f = finals(&out);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].transcript(), script()[0]);
        assert_eq!((c.utterances(), c.noise_segments()), (1, 0));
    }
}

/// With a long endpoint a cough's segment stays open for over a second;
/// interims fall due at 400 and 800 ms, and none is sent.
#[test]
fn no_interim_for_noise_however_long_its_segment_stays_open() {
    let p = StreamParams {
        endpointing_ms: Some(1_000),
        ..params()
    };
    let mut s = SpeechSynth::new(8_000, 7);
    let mut audio = s.silence(500);
    audio.extend(s.utterance(150));
    audio.extend(s.silence(1_500));
    let (c, out) = run(p, &audio);
    let r = results(&out);
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(is_noise_final(r[0]) && r[0].speech_final);
    assert_eq!(c.noise_segments(), 1);
}

#[test]
fn finalize_during_noise_gives_an_empty_final_and_keeps_the_line() {
    let mut s = SpeechSynth::new(8_000, 9);
    let mut c = core(params());
    let mut audio = s.silence(300);
    audio.extend(s.utterance(150));
    audio.extend(s.silence(100));
    let mut out = push_frames(&mut c, &g711::encode_ulaw(&audio), 160);
    assert_eq!(c.handle_text(r#"{"type":"Finalize"}"#), Control::Finalize);
    out.extend(drain(&mut c));
    let f = finals(&out);
    assert_eq!(f.len(), 1, "{out:?}");
    assert!(is_noise_final(f[0]) && f[0].from_finalize && !f[0].speech_final);
    assert_eq!((c.utterances(), c.noise_segments()), (0, 1));

    // The rest of the segment (silence up to its endpoint) was answered for:
    // nothing more for it, and a second Finalize has nothing to flush.
    let out = push_frames(&mut c, &g711::encode_ulaw(&s.silence(800)), 160);
    c.handle_text(r#"{"type":"Finalize"}"#);
    assert!(
        results(&out).is_empty() && drain(&mut c).is_empty(),
        "{out:?}"
    );

    let mut next = s.utterance(1_400);
    next.extend(s.silence(800));
    let f_out = push_frames(&mut c, &g711::encode_ulaw(&next), 160);
    let f = finals(&f_out);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].transcript(), script()[0]);
    assert_eq!((c.utterances(), c.noise_segments()), (1, 1));
}

/// Speech right after a cough, inside the same detector segment: the
/// `Finalize` answers for the cough, the speech after it gets line 0.
#[test]
fn speech_after_a_finalized_cough_in_the_same_segment_gets_its_line() {
    let mut s = SpeechSynth::new(8_000, 9);
    let mut c = core(params());
    let mut audio = s.silence(300);
    audio.extend(s.utterance(150));
    audio.extend(s.silence(60));
    let mut out = push_frames(&mut c, &g711::encode_ulaw(&audio), 160);
    c.handle_text(r#"{"type":"Finalize"}"#);
    let mut rest = s.silence(60);
    rest.extend(s.utterance(1_000));
    rest.extend(s.silence(800));
    out.extend(drain(&mut c));
    out.extend(push_frames(&mut c, &g711::encode_ulaw(&rest), 160));
    assert_eq!(
        count(&out, |m| matches!(m, ServerMessage::SpeechStarted { .. })),
        1,
        "one detector segment: {out:?}"
    );
    let f = finals(&out);
    assert_eq!(f.len(), 2, "{out:?}");
    assert!(is_noise_final(f[0]) && f[0].from_finalize);
    assert_eq!(f[1].transcript(), script()[0]);
    assert!(f[1].start >= f[0].start + f[0].duration, "{f:?}");
    assert_eq!((c.utterances(), c.noise_segments()), (1, 1));
}

#[test]
fn close_stream_during_noise_sends_an_empty_speech_final_then_the_summary() {
    let mut s = SpeechSynth::new(8_000, 5);
    let mut audio = s.silence(300);
    audio.extend(s.utterance(150));
    let mut c = core(params());
    push_frames(&mut c, &g711::encode_ulaw(&audio), 160);
    c.handle_text(r#"{"type":"CloseStream"}"#);
    let out = drain(&mut c);
    let Outbound::Message(ServerMessage::Results(r)) = &out[0] else {
        panic!("{out:?}")
    };
    assert!(is_noise_final(r) && r.speech_final, "{r:?}");
    assert!(matches!(
        out[1],
        Outbound::Message(ServerMessage::Metadata(_))
    ));
    assert_eq!((c.utterances(), c.noise_segments()), (0, 1));
}

/// Noise has no last word: an `UtteranceEnd` due for the words before it
/// still comes, stamped at those words.
#[test]
fn noise_leaves_a_pending_utterance_end_alone() {
    let mut s = SpeechSynth::new(8_000, 3);
    let mut audio = s.silence(300);
    audio.extend(s.utterance(1_000));
    audio.extend(s.silence(400));
    audio.extend(s.utterance(150));
    audio.extend(s.silence(1_500));
    let (_, out) = run(params(), &audio);
    let f = finals(&out);
    assert_eq!(f.len(), 2);
    let last_word = f[0].channel.alternatives[0].words.last().unwrap().end;
    let ends: Vec<(usize, f64)> = out
        .iter()
        .enumerate()
        .filter_map(|(i, o)| match o {
            Outbound::Message(ServerMessage::UtteranceEnd { last_word_end, .. }) => {
                Some((i, *last_word_end))
            }
            _ => None,
        })
        .collect();
    assert_eq!(ends.len(), 1, "{out:?}");
    assert_eq!(ends[0].1, last_word);
}

/// The `empty_finals` fault is about utterances: noise uses no line, so
/// which utterances it empties does not change when coughs are mixed in,
/// and a worded utterance it empties still had worded interims.
#[test]
fn empty_finals_pick_the_same_utterances_with_noise_in_between() {
    let faults = StreamFaults {
        empty_finals: 0.5,
        seed: 11,
        ..StreamFaults::default()
    };
    let mut clean = SpeechSynth::new(8_000, 4);
    let mut coughing = SpeechSynth::new(8_000, 4);
    let (mut a, mut b) = (clean.silence(300), coughing.silence(300));
    for _ in 0..6 {
        a.extend(clean.utterance(900));
        a.extend(clean.silence(700));
        b.extend(coughing.utterance(900));
        b.extend(coughing.silence(700));
        b.extend(coughing.utterance(120));
        b.extend(coughing.silence(700));
    }
    let pattern = |audio: &[i16]| {
        let mut c = core(params()).with_faults(faults);
        let out = push_frames(&mut c, &g711::encode_ulaw(audio), 160);
        let worded: Vec<bool> = finals(&out)
            .iter()
            .filter(|r| r.duration >= 0.5)
            .map(|r| !r.transcript().is_empty())
            .collect();
        (worded, c.utterances(), c.noise_segments())
    };
    let (want, lines, noise) = pattern(&a);
    assert_eq!((lines, noise), (6, 0));
    assert!(want.contains(&true) && want.contains(&false), "{want:?}");
    assert_eq!(pattern(&b), (want, 6, 6));
}
