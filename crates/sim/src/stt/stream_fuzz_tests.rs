//! Smoke fuzz of the STT simulator's client-facing parsing: the stable twin
//! of the cargo-fuzz targets `fuzz/fuzz_targets/sim_stt_params.rs` and
//! `sim_stt_stream.rs`. Mutated query strings must be accepted only as a
//! consistent configuration or refused naming a real parameter; mutated
//! control frames mixed with arbitrary audio must drive the stream core
//! through well-formed output that ends in at most one close.

use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

use media::format::samples_to_pcm16le;
use media::g711;
use media::synth::SpeechSynth;
use sha2::{Digest, Sha256};

use super::*;
use crate::stt::SttSimRefusal;

use crate::smoke_mutator::{Mutator, Rng};

const KNOWN_PARAMS: [&str; 8] = [
    "encoding",
    "sample_rate",
    "channels",
    "interim_results",
    "endpointing",
    "utterance_end_ms",
    "vad_events",
    "model",
];

/// A query string as a map, the last value of a repeated key winning.
fn query(text: &str) -> HashMap<String, String> {
    text.split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// What validation promises, whatever the query.
fn check_params(q: &HashMap<String, String>) -> Option<StreamParams> {
    match StreamParams::from_query(q) {
        Ok(p) => {
            assert!(matches!(p.sample_rate, 8_000 | 16_000));
            assert_eq!(q.get("sample_rate"), Some(&p.sample_rate.to_string()));
            let encoding = q.get("encoding").map(String::as_str);
            let expected = match p.encoding {
                SimEncoding::Mulaw => "mulaw",
                SimEncoding::Alaw => "alaw",
                SimEncoding::Linear16 => "linear16",
            };
            assert_eq!(encoding, Some(expected));
            assert!(p.utterance_end_ms.is_none() || p.interim_results);
            let off = q.get("endpointing").map(String::as_str) == Some("false");
            assert_eq!(p.endpointing_ms.is_none(), off);
            assert!(q.get("channels").is_none_or(|c| c == "1"));
            Some(p)
        }
        Err(SttSimRefusal::BadParam { param, reason }) => {
            assert!(KNOWN_PARAMS.contains(&param), "{param}");
            let required = matches!(param, "encoding" | "sample_rate");
            assert!(q.contains_key(param) || required, "{param}: {reason}");
            None
        }
        Err(other) => panic!("validation refused with {other:?}"),
    }
}

#[test]
fn mutated_queries_are_accepted_consistently_or_refused_by_name() {
    let corpus = [
        "model=nova-3&encoding=mulaw&sample_rate=8000&channels=1&interim_results=true&endpointing=300&utterance_end_ms=1000&vad_events=true&smart_format=true",
        "encoding=linear16&sample_rate=16000",
        "encoding=alaw&sample_rate=8000&endpointing=false&interim_results=TRUE",
    ];
    let tokens = &[
        "&",
        "=",
        "mulaw",
        "alaw",
        "linear16",
        "8000",
        "16000",
        "true",
        "false",
        "TRUE",
        "4294967296",
        "-1",
        "&encoding=",
        "&sample_rate=",
        "&utterance_end_ms=",
    ];
    let mut m = Mutator::new(0x5a_a1, &corpus, tokens);
    let mut accepted = 0;
    m.run_text(4_000, |text| {
        accepted += usize::from(check_params(&query(text)).is_some());
    });
    assert!(accepted > 100, "only {accepted} mutants were valid");
}

/// What one stream has been sent and has answered so far.
#[derive(Default)]
struct Seen {
    audio: Vec<u8>,
    finals: usize,
    closed: bool,
}

/// Checks one output of the core against what it was sent.
fn check_output(core: &StreamCore, script: &[String], out: Outbound, seen: &mut Seen) {
    assert!(!seen.closed, "output after the close: {out:?}");
    let p = core.params();
    let message = match out {
        Outbound::Close { code, .. } => {
            assert!(matches!(code, CLOSE_NORMAL | CLOSE_POLICY));
            seen.closed = true;
            return;
        }
        Outbound::Message(m) => m,
    };
    match message {
        ServerMessage::Results(r) => {
            assert!(r.is_final || (p.interim_results && !r.speech_final && !r.from_finalize));
            assert!(!(r.speech_final && r.from_finalize), "{r:?}");
            assert!(r.start >= 0.0 && r.duration >= 0.0);
            let heard = core.audio_ms() as f64 / 1000.0;
            assert!(
                r.start + r.duration <= heard + 1e-9,
                "{r:?} after {heard} s"
            );
            if r.is_final {
                let line = crate::script::line(script, seen.finals);
                let words: Vec<&str> = line.split_whitespace().collect();
                assert_eq!(r.transcript(), words.join(" "));
                seen.finals += 1;
            }
        }
        ServerMessage::SpeechStarted { .. } => assert!(p.vad_events),
        ServerMessage::UtteranceEnd { .. } => assert!(p.utterance_end_ms.is_some()),
        ServerMessage::Metadata(md) => {
            let samples = seen.audio.len() as u64 / p.encoding.bytes_per_sample();
            assert_eq!(md.duration, samples as f64 / f64::from(p.sample_rate));
            let digest = Sha256::digest(&seen.audio);
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(md.sha256, hex, "the summary hashes every byte received");
        }
        ServerMessage::Error { .. } => {}
    }
}

/// One frame of audio: speech, silence, noise bytes, or (rarely) the empty
/// frame that closes the stream.
fn audio_frame(rng: &mut Rng, synth: &mut SpeechSynth, p: &StreamParams) -> Vec<u8> {
    let samples = match rng.below(4) {
        0 => synth.utterance(100 + rng.below(500) as u32),
        1 => synth.silence(100 + rng.below(500) as u32),
        2 => {
            let n = rng.below(700);
            return rng.bytes(n);
        }
        _ if rng.one_in(8) => return Vec::new(),
        _ => rng.samples(800),
    };
    match p.encoding {
        SimEncoding::Mulaw => g711::encode_ulaw(&samples),
        SimEncoding::Alaw => g711::encode_alaw(&samples),
        SimEncoding::Linear16 => samples_to_pcm16le(&samples),
    }
}

/// Feeds mutated control frames (one per line) interleaved with audio.
/// Returns how many finals the stream sent.
fn run_stream(rng: &mut Rng, controls: &str, p: StreamParams, script: Vec<String>) -> usize {
    let created = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let mut core = StreamCore::new(p.clone(), script.clone(), "req".into(), created);
    let mut synth = SpeechSynth::new(p.sample_rate, rng.next_u64());
    let mut seen = Seen::default();
    for line in controls.lines() {
        for _ in 0..rng.below(3) {
            let frame = audio_frame(rng, &mut synth, &p);
            if !core.is_closed() {
                seen.audio.extend_from_slice(&frame);
            }
            core.push_audio(&frame);
            while let Some(out) = core.poll_output() {
                check_output(&core, &script, out, &mut seen);
            }
        }
        let was_closed = core.is_closed();
        let control = core.handle_text(line);
        let is_json = serde_json::from_str::<serde_json::Value>(line).is_ok();
        if !was_closed {
            assert_eq!(control == Control::Invalid, !is_json, "{line:?}");
        }
        while let Some(out) = core.poll_output() {
            check_output(&core, &script, out, &mut seen);
        }
        assert_eq!(seen.closed, core.is_closed());
    }
    seen.finals
}

#[test]
fn mutated_control_frames_and_audio_keep_the_stream_well_formed() {
    let sessions = [
        "{\"type\":\"KeepAlive\"}\n{\"type\":\"Finalize\"}\n{\"type\":\"KeepAlive\"}\n{\"type\":\"CloseStream\"}",
        "{\"type\":\"Finalize\"}\n{\"type\":\"Warp\"}\n{}\n{\"type\":\"Finalize\"}",
        "{\"type\":\"KeepAlive\"}\n{\"type\":\"KeepAlive\"}\n{\"type\":\"KeepAlive\"}",
    ];
    let tokens = &[
        "\"type\"",
        "\"KeepAlive\"",
        "\"Finalize\"",
        "\"CloseStream\"",
        "\n",
    ];
    let mut m = Mutator::new(0x57_ea, &sessions, tokens);
    let scripts = [
        vec!["Hi, I'd like  a table.".to_owned(), "  ".to_owned()],
        vec![],
        vec!["One.".to_owned()],
    ];
    let mut finals = 0;
    for run in 0..40 {
        let controls = m.next_text();
        let rng = m.rng();
        let p = StreamParams {
            encoding: *rng.pick(&[SimEncoding::Mulaw, SimEncoding::Alaw, SimEncoding::Linear16]),
            sample_rate: *rng.pick(&[8_000, 16_000]),
            interim_results: rng.one_in(2),
            endpointing_ms: rng.pick(&[None, Some(0), Some(10), Some(300)]).to_owned(),
            utterance_end_ms: rng.pick(&[None, Some(0), Some(1_000)]).to_owned(),
            vad_events: rng.one_in(2),
            ..StreamParams::default()
        };
        let script = rng.pick(&scripts).clone();
        let mut rng = Rng::new(run);
        finals += run_stream(&mut rng, &controls, p, script);
    }
    assert!(
        finals >= 5,
        "only {finals} finals: the audio never looked like speech"
    );
}
