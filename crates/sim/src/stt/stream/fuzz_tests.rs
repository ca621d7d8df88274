//! The invariants of the STT simulator's stream core on arbitrary client
//! traffic — the one copy, shared by the cargo-fuzz target
//! `fuzz/fuzz_targets/sim_stt_stream.rs` and by the stable smoke twin (the
//! `#[cfg(test)]` part at the bottom of this file).
//!
//! This file is included twice:
//! - by an ordinary `mod` (`#[cfg(test)]`), as `stt::stream::fuzz_tests`,
//!   whose parent module is the stream core itself;
//! - by a `path` attribute in the fuzz target, as `mod invariants`, whose
//!   crate root has `use callgate_sim::stt::stream::*` and
//!   `use callgate_sim::{script, stt}`.
//!
//! So the core is reached through `super::`, the rest of the simulator
//! through `crate::stt` and `crate::script` (the same modules in both
//! builds), and the part that needs the mutator (the dev-dependency
//! `callgate_test_support`) is compiled only under `cfg(test)` (the fuzz
//! build never sees it). Entry point: [`check`].
//!
//! Invariants: at most one close, and nothing after it; the core says it
//! is closed exactly when it has sent its close; a text frame is `Invalid`
//! exactly when it is not JSON; finals never claim both `speech_final` and
//! `from_finalize`, interims only with interim results; a result never
//! covers audio not yet received; finals follow the script in order, save
//! that any final may instead be an empty noise final that uses no line; VAD
//! and utterance-end messages only when asked for; the summary's duration
//! is the whole samples received and its hash covers exactly the audio
//! bytes received.

use std::collections::BTreeSet;
use std::time::{Duration, UNIX_EPOCH};

use media::synth::SpeechSynth;
use sha2::{Digest, Sha256};

use super::{CLOSE_NORMAL, CLOSE_POLICY, Control, Outbound, StreamCore};
use crate::stt::messages::ServerMessage;
use crate::stt::params::{SimEncoding, StreamParams};

/// What the fuzz target's stream "hears", one final after another.
const SCRIPT: [&str; 3] = ["Hi, I'd like  a table.", "  ", "One."];

/// Every invariant on one input: a parameter byte, then segments split at
/// `\n`; a segment's first byte picks what it is (raw audio bytes, a text
/// frame, speech of the segment's length, or silence).
pub fn check(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let p = params(first);
    let mut synth = SpeechSynth::new(p.sample_rate, u64::from(first));
    let script = SCRIPT.map(str::to_owned).to_vec();
    let mut stream = Stream::new(p.clone(), script);
    for segment in rest.split(|b| *b == b'\n') {
        let Some((&kind, body)) = segment.split_first() else {
            continue;
        };
        let ms = (body.len() as u32 * 20).min(2_000);
        match kind % 4 {
            0 => stream.push_audio(body),
            1 => {
                stream.handle_text(&String::from_utf8_lossy(body));
            }
            2 => stream.push_audio(&encode(&p, &synth.utterance(ms))),
            _ => stream.push_audio(&encode(&p, &synth.silence(ms))),
        }
    }
}

/// The stream parameters a byte stands for.
pub fn params(b: u8) -> StreamParams {
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

/// `samples` in the stream's encoding.
pub fn encode(p: &StreamParams, samples: &[i16]) -> Vec<u8> {
    match p.encoding {
        SimEncoding::Mulaw => media::g711::encode_ulaw(samples),
        SimEncoding::Alaw => media::g711::encode_alaw(samples),
        SimEncoding::Linear16 => media::format::samples_to_pcm16le(samples),
    }
}

/// What one stream has been sent and has answered so far.
#[derive(Default)]
struct Seen {
    audio: Vec<u8>,
    finals: usize,
    /// The script lines the next worded final may be (a set: an empty
    /// final is a noise final or an empty line, which cannot be told apart
    /// on the wire). Indices cycle, so the set stays small.
    next_lines: BTreeSet<usize>,
    closed: bool,
}

/// A [`StreamCore`] whose every step is checked: each output as it comes,
/// and after each step, that the core is closed exactly when it has sent
/// its close.
pub struct Stream {
    core: StreamCore,
    script: Vec<String>,
    seen: Seen,
}

impl Stream {
    pub fn new(p: StreamParams, script: Vec<String>) -> Self {
        let created = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let core = StreamCore::new(p, script.clone(), "req".into(), created);
        Stream {
            core,
            script,
            seen: Seen {
                next_lines: BTreeSet::from([0]),
                ..Seen::default()
            },
        }
    }

    /// Sends one binary (audio) frame.
    pub fn push_audio(&mut self, frame: &[u8]) {
        if !self.core.is_closed() {
            self.seen.audio.extend_from_slice(frame);
        }
        self.core.push_audio(frame);
        self.drain();
    }

    /// Sends one text frame: while open, `Invalid` exactly when it is not
    /// JSON.
    pub fn handle_text(&mut self, text: &str) -> Control {
        let was_closed = self.core.is_closed();
        let control = self.core.handle_text(text);
        let is_json = serde_json::from_str::<serde_json::Value>(text).is_ok();
        if !was_closed {
            assert_eq!(control == Control::Invalid, !is_json, "{text:?}");
        }
        self.drain();
        control
    }

    fn drain(&mut self) {
        while let Some(out) = self.core.poll_output() {
            check_output(&self.core, &self.script, out, &mut self.seen);
        }
        assert_eq!(self.seen.closed, self.core.is_closed());
    }
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
                seen.next_lines = next_lines(script, &seen.next_lines, r.transcript());
                assert!(!seen.next_lines.is_empty(), "off the script: {r:?}");
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

/// Where the script may stand after a final with `transcript`, from each
/// place in `lines` it may have stood before: one line on when the
/// transcript is that line's words, the same place when it is empty (noise).
fn next_lines(script: &[String], lines: &BTreeSet<usize>, transcript: &str) -> BTreeSet<usize> {
    let cycle = script.len().max(1);
    let mut next = BTreeSet::new();
    for &i in lines {
        let words: Vec<&str> = crate::script::line(script, i).split_whitespace().collect();
        if transcript == words.join(" ") {
            next.insert((i + 1) % cycle);
        }
        if transcript.is_empty() {
            next.insert(i);
        }
    }
    next
}

// ---- the stable smoke twin ----------------------------------------------

#[cfg(test)]
mod smoke {
    //! Mutated control frames mixed with arbitrary audio must drive the
    //! stream core through well-formed output that ends in at most one
    //! close.

    use super::*;
    use callgate_test_support::{Mutator, Rng};

    /// The fuzz target's seeds.
    const SEEDS: [&[u8]; 2] = [
        include_bytes!("../../../../../fuzz/seeds/sim_stt_stream/seed-0"),
        include_bytes!("../../../../../fuzz/seeds/sim_stt_stream/seed-1"),
    ];
    const TOKENS: &[&str] = &[
        "\"type\"",
        "\"KeepAlive\"",
        "\"Finalize\"",
        "\"CloseStream\"",
        "\n",
    ];

    /// One frame of audio: speech, silence, noise bytes, or (rarely) the
    /// empty frame that closes the stream.
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
        encode(p, &samples)
    }

    /// Feeds mutated control frames (one per line) interleaved with audio.
    /// Returns how many finals the stream sent.
    fn run_stream(rng: &mut Rng, controls: &str, p: StreamParams, script: Vec<String>) -> usize {
        let mut stream = Stream::new(p.clone(), script);
        let mut synth = SpeechSynth::new(p.sample_rate, rng.next_u64());
        for line in controls.lines() {
            for _ in 0..rng.below(3) {
                stream.push_audio(&audio_frame(rng, &mut synth, &p));
            }
            stream.handle_text(line);
        }
        stream.seen.finals
    }

    #[test]
    fn mutated_control_frames_and_audio_keep_the_stream_well_formed() {
        let sessions = [
            "{\"type\":\"KeepAlive\"}\n{\"type\":\"Finalize\"}\n{\"type\":\"KeepAlive\"}\n{\"type\":\"CloseStream\"}",
            "{\"type\":\"Finalize\"}\n{\"type\":\"Warp\"}\n{}\n{\"type\":\"Finalize\"}",
            "{\"type\":\"KeepAlive\"}\n{\"type\":\"KeepAlive\"}\n{\"type\":\"KeepAlive\"}",
        ];
        let mut m = Mutator::new(0x57_ea, &sessions, TOKENS);
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
                encoding: *rng.pick(&[
                    SimEncoding::Mulaw,
                    SimEncoding::Alaw,
                    SimEncoding::Linear16,
                ]),
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

    /// What the fuzz target runs, on mutants of its own seeds: a parameter
    /// byte, then segments of raw audio, text frames, speech and silence.
    #[test]
    fn mutated_seeds_keep_the_invariants() {
        let mut m = Mutator::new(0x5eed_57ea, &SEEDS, TOKENS);
        m.run_bytes(300, check);
        check(&[]);
    }
}
