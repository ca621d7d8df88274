//! The STT simulator's stream core on arbitrary client traffic. The input
//! is a parameter byte then segments split at `\n`; a segment's first byte
//! picks what it is: raw audio bytes, a text (control) frame, speech of
//! the segment's length, or silence.
//!
//! Invariants: at most one close, and nothing after it; a text frame is
//! `Invalid` exactly when it is not JSON; finals never claim both
//! `speech_final` and `from_finalize`, interims only with interim results;
//! a result never covers audio not yet received; finals follow the script
//! in order; VAD and utterance-end messages only when asked for; the
//! summary hashes exactly the audio bytes received.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use callgate_sim::stt::messages::ServerMessage;
use callgate_sim::stt::params::{SimEncoding, StreamParams};
use callgate_sim::stt::stream::{CLOSE_NORMAL, CLOSE_POLICY, Control, Outbound, StreamCore};
use libfuzzer_sys::fuzz_target;
use media::synth::SpeechSynth;
use sha2::{Digest, Sha256};

struct Seen {
    audio: Vec<u8>,
    finals: usize,
    closed: bool,
}

fn params(b: u8) -> StreamParams {
    StreamParams {
        encoding: [SimEncoding::Mulaw, SimEncoding::Alaw, SimEncoding::Linear16]
            [usize::from(b % 3)],
        sample_rate: if b & 0x04 == 0 { 8_000 } else { 16_000 },
        interim_results: b & 0x08 != 0,
        endpointing_ms: [None, Some(0), Some(10), Some(300)][usize::from(b >> 4 & 3)],
        utterance_end_ms: (b & 0x40 != 0).then_some(1_000),
        vad_events: b & 0x80 != 0,
        ..StreamParams::default()
    }
}

fn check(core: &StreamCore, script: &[String], out: Outbound, seen: &mut Seen) {
    assert!(!seen.closed, "output after the close");
    let p = core.params();
    let message = match out {
        Outbound::Close { code, .. } => {
            assert!(code == CLOSE_NORMAL || code == CLOSE_POLICY);
            seen.closed = true;
            return;
        }
        Outbound::Message(m) => m,
    };
    match message {
        ServerMessage::Results(r) => {
            assert!(r.is_final || (p.interim_results && !r.speech_final && !r.from_finalize));
            assert!(!(r.speech_final && r.from_finalize));
            assert!(r.start >= 0.0 && r.duration >= 0.0);
            assert!(r.start + r.duration <= core.audio_ms() as f64 / 1000.0 + 1e-9);
            if r.is_final {
                let line = callgate_sim::script::line(script, seen.finals);
                assert_eq!(
                    r.transcript(),
                    line.split_whitespace().collect::<Vec<_>>().join(" ")
                );
                seen.finals += 1;
            }
        }
        ServerMessage::SpeechStarted { .. } => assert!(p.vad_events),
        ServerMessage::UtteranceEnd { .. } => assert!(p.utterance_end_ms.is_some()),
        ServerMessage::Metadata(md) => {
            let hex: String = Sha256::digest(&seen.audio)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(md.sha256, hex);
        }
        ServerMessage::Error { .. } => {}
    }
}

fn encode(p: &StreamParams, samples: &[i16]) -> Vec<u8> {
    match p.encoding {
        SimEncoding::Mulaw => media::g711::encode_ulaw(samples),
        SimEncoding::Alaw => media::g711::encode_alaw(samples),
        SimEncoding::Linear16 => media::format::samples_to_pcm16le(samples),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let p = params(first);
    let script = vec![
        "Hi, I'd like  a table.".to_owned(),
        "  ".to_owned(),
        "One.".to_owned(),
    ];
    let created = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let mut core = StreamCore::new(p.clone(), script.clone(), "req".into(), created);
    let mut synth = SpeechSynth::new(p.sample_rate, u64::from(first));
    let mut seen = Seen {
        audio: Vec::new(),
        finals: 0,
        closed: false,
    };
    for segment in rest.split(|b| *b == b'\n') {
        let Some((&kind, body)) = segment.split_first() else {
            continue;
        };
        let ms = (body.len() as u32 * 20).min(2_000);
        let was_closed = core.is_closed();
        match kind % 4 {
            1 => {
                let text = String::from_utf8_lossy(body);
                let control = core.handle_text(&text);
                let is_json = serde_json::from_str::<serde_json::Value>(&text).is_ok();
                assert!(was_closed || (control == Control::Invalid) != is_json);
            }
            k => {
                let audio = match k {
                    0 => body.to_vec(),
                    2 => encode(&p, &synth.utterance(ms)),
                    _ => encode(&p, &synth.silence(ms)),
                };
                if !was_closed {
                    seen.audio.extend_from_slice(&audio);
                }
                core.push_audio(&audio);
            }
        }
        while let Some(out) = core.poll_output() {
            check(&core, &script, out, &mut seen);
        }
        assert_eq!(seen.closed, core.is_closed());
    }
});
