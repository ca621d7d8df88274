//! The invariants of the STT provider message parser — the one copy, shared
//! by the cargo-fuzz target `fuzz/fuzz_targets/stt_client_wire.rs` and by
//! the stable smoke twin (the `#[cfg(test)]` part at the bottom of this
//! file).
//!
//! This file is included twice:
//! - by an ordinary `mod` (`#[cfg(test)]`), as `wire::fuzz_tests`, whose
//!   parent module is the parser itself;
//! - by a `path` attribute in the fuzz target, as `mod invariants`, whose
//!   crate root has `use stt_client::wire::*` and
//!   `use stt_client::{CloseReason, SttEvent, UtteranceAssembler}`.
//!
//! So the parser is reached through `super::`, the crate's root types
//! through `crate::` (both name the same items in the two builds), and the
//! part that needs the mutator (the dev-dependency `callgate_test_support`)
//! or the STT simulator is compiled only under `cfg(test)` (the fuzz build
//! never sees it). Entry point: [`check`].
//!
//! Invariants:
//! - the event kind follows the frame's `type` (anything else is a
//!   `ProviderError`, never `Closed`);
//! - every time, duration and confidence is finite;
//! - a non-JSON frame is quoted to at most [`MAX_QUOTE`] characters, an
//!   unknown type's message is bounded by [`MAX_UNKNOWN_MESSAGE`], the
//!   provider's own error text is passed on as it is;
//! - the assembler, fed whatever the parser makes, yields only non-empty,
//!   trimmed utterances and holds nothing after one or after a close.

use serde_json::Value;

use super::{MAX_QUOTE, parse_server_text};
use crate::{CloseReason, SttEvent, UtteranceAssembler};

/// Longest error message built for an unknown message type: the prefix,
/// two quotes of at most [`MAX_QUOTE`] characters, the type's `Debug` form
/// escaping a character into at most 10 (`\u{10ffff}`).
const MAX_UNKNOWN_MESSAGE: usize = 32 + MAX_QUOTE * 10 + 2 + MAX_QUOTE;

/// Every invariant on one input: `data` as text (lossily), one frame per
/// line, all fed to one assembler that is closed at the end.
pub fn check(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut assembly = Assembly::default();
    for line in text.lines() {
        assembly.push(&check_parse(line));
    }
    assembly.close();
}

/// What every parse promises, whatever the frame; returns the event.
pub fn check_parse(raw: &str) -> SttEvent {
    let event = parse_server_text(raw);
    let json = serde_json::from_str::<Value>(raw).ok();
    let ty = json.as_ref().and_then(|v| v.get("type")?.as_str());
    let finite = |xs: &[f64]| assert!(xs.iter().all(|x| x.is_finite()), "{event:?}");
    match &event {
        SttEvent::Transcript(t) => {
            assert_eq!(ty, Some("Results"));
            finite(&[t.start, t.duration, t.confidence]);
        }
        SttEvent::SpeechStarted { at } => {
            assert_eq!(ty, Some("SpeechStarted"));
            finite(&[*at]);
        }
        SttEvent::UtteranceEnd { last_word_end } => {
            assert_eq!(ty, Some("UtteranceEnd"));
            finite(&[*last_word_end]);
        }
        SttEvent::Metadata { duration, .. } => {
            assert_eq!(ty, Some("Metadata"));
            finite(&[*duration]);
        }
        SttEvent::ProviderError { message } if json.is_none() => {
            let quoted: String = raw.chars().take(MAX_QUOTE).collect();
            assert_eq!(*message, format!("non-JSON text from provider: {quoted}"));
        }
        // The provider's own error text is passed on as it is.
        SttEvent::ProviderError { .. } if ty == Some("Error") => {}
        SttEvent::ProviderError { message } => {
            let n = message.chars().count();
            let ty_len = ty.map(str::len);
            assert!(
                n <= MAX_UNKNOWN_MESSAGE,
                "{n}-char message for a {ty_len:?}-byte type"
            );
        }
        // Never `Closed`: a frame never closes the session. (A wildcard,
        // not `Closed(_)`: the fuzz target matches from outside the crate,
        // where `SttEvent` is `#[non_exhaustive]`.)
        other => panic!("a frame became {other:?}"),
    }
    event
}

/// An [`UtteranceAssembler`] whose every step is checked: it yields whole
/// trimmed utterances and flushes everything on close.
#[derive(Default)]
pub struct Assembly(UtteranceAssembler);

impl Assembly {
    /// Feeds one parsed event.
    pub fn push(&mut self, event: &SttEvent) {
        if let Some(u) = self.0.push(event) {
            assert!(!u.text.is_empty() && u.text.trim() == u.text, "{u:?}");
            assert!(!self.0.has_pending(), "pending after {u:?}");
        }
    }

    /// The session closes: nothing may stay pending.
    pub fn close(&mut self) {
        self.0
            .push(&SttEvent::Closed(CloseReason::transport("end")));
        assert!(!self.0.has_pending(), "pending after a close");
    }
}

// ---- the stable smoke twin ----------------------------------------------

#[cfg(test)]
mod smoke {
    //! Mutated Deepgram frames must become well-formed events, and every
    //! message the simulator sends must come back as the event it
    //! describes.

    use std::time::{Duration, UNIX_EPOCH};

    use callgate_sim::stt::messages::ServerMessage;
    use callgate_sim::stt::params::StreamParams;
    use callgate_sim::stt::stream::{Outbound, StreamCore};
    use media::g711;
    use media::synth::SpeechSynth;

    use super::*;
    use callgate_test_support::{Mutator, Rng};

    const ITERATIONS: usize = 4_000;
    const TOKENS: &[&str] = &[
        "\"type\"",
        "\"Results\"",
        "\"SpeechStarted\"",
        "\"UtteranceEnd\"",
        "\"Metadata\"",
        "\"Error\"",
        "\"is_final\"",
        "\"speech_final\"",
        "\"from_finalize\"",
        "\"start\"",
        "\"duration\"",
        "\"transcript\"",
        "\"alternatives\"",
        "\"description\"",
        "\"1e308\"",
    ];
    /// The fuzz target's seeds (one frame a line).
    const SEEDS: [&str; 4] = [
        include_str!("../../../../fuzz/seeds/stt_client_wire/seed-0"),
        include_str!("../../../../fuzz/seeds/stt_client_wire/seed-1"),
        include_str!("../../../../fuzz/seeds/stt_client_wire/seed-2"),
        include_str!("../../../../fuzz/seeds/stt_client_wire/seed-3"),
    ];

    fn corpus() -> Vec<String> {
        let long_type = format!(r#"{{"type":"{}","x":1}}"#, "W".repeat(3_000));
        let frames: &[&str] = &[
            r#"{"type":"Results","channel_index":[0,1],"start":1.0,"duration":"0.9","is_final":true,"speech_final":"true","from_finalize":false,"channel":{"alternatives":[{"transcript":"I want to book.","confidence":0.97,"words":[{"word":"i","start":1.0,"end":1.2}]}]},"metadata":{"request_id":"r"}}"#,
            r#"{"type":"Results","start":"2.5","duration":0.4,"is_final":false,"channel":{"alternatives":[{"transcript":"  book a  ","confidence":"0.5"}]}}"#,
            r#"{"type":"SpeechStarted","channel":[0],"timestamp":1.12}"#,
            r#"{"type":"UtteranceEnd","channel":[0,1],"last_word_end":"2.31"}"#,
            r#"{"type":"Metadata","transaction_key":"deprecated","request_id":"abc","duration":42.0}"#,
            r#"{"type":"Error","description":"bad thing","message":"m","err_msg":"e"}"#,
            r#"{"type":"Warp"}"#,
            "not json at all",
        ];
        frames
            .iter()
            .map(|f| f.to_string())
            .chain([long_type])
            .collect()
    }

    #[test]
    fn mutated_frames_become_well_formed_events() {
        let mut m = Mutator::new(0x57_7c11e7, &corpus(), TOKENS);
        let mut assembly = Assembly::default();
        let mut i = 0usize;
        m.run_text(ITERATIONS, |raw| {
            assembly.push(&check_parse(raw));
            i += 1;
            if i.is_multiple_of(64) {
                assembly.close();
            }
        });
    }

    /// What the fuzz target runs, on mutants of its own seeds: raw bytes
    /// (not always UTF-8), one frame a line and several lines a seed.
    #[test]
    fn mutated_seeds_keep_the_invariants() {
        let mut m = Mutator::new(0x5eed, &SEEDS, TOKENS);
        m.run_bytes(1_000, check);
    }

    #[test]
    fn long_provider_strings_are_quoted_not_copied() {
        for raw in [
            format!(r#"{{"type":"{}"}}"#, "\u{10FFFF}".repeat(10_000)),
            format!(r#"{{"type":"Warp","pad":"{}"}}"#, "x".repeat(10_000)),
            "{".repeat(10_000),
        ] {
            let SttEvent::ProviderError { message } = check_parse(&raw) else {
                panic!("not an error event")
            };
            assert!(message.chars().count() <= MAX_UNKNOWN_MESSAGE);
        }
    }

    /// Every message the simulator sends is read back as the event it means.
    fn check_mirror(sent: &ServerMessage) {
        let raw = serde_json::to_string(sent).unwrap();
        match (sent, check_parse(&raw)) {
            (ServerMessage::Results(r), SttEvent::Transcript(t)) => {
                assert_eq!(t.text, r.transcript());
                let flags = (r.is_final, r.speech_final, r.from_finalize);
                assert_eq!((t.is_final, t.speech_final, t.from_finalize), flags);
                assert_eq!((t.start, t.duration), (r.start, r.duration));
                assert_eq!(t.confidence, r.channel.alternatives[0].confidence);
            }
            (ServerMessage::SpeechStarted { timestamp, .. }, SttEvent::SpeechStarted { at }) => {
                assert_eq!(at, *timestamp);
            }
            (
                ServerMessage::UtteranceEnd { last_word_end, .. },
                SttEvent::UtteranceEnd { last_word_end: l },
            ) => {
                assert_eq!(l, *last_word_end);
            }
            (
                ServerMessage::Metadata(md),
                SttEvent::Metadata {
                    request_id,
                    duration,
                },
            ) => {
                assert_eq!(
                    (request_id.as_str(), duration),
                    (md.request_id.as_str(), md.duration)
                );
            }
            (ServerMessage::Error { description, .. }, SttEvent::ProviderError { message }) => {
                assert_eq!(message, *description);
            }
            (sent, got) => panic!("{sent:?} was read as {got:?}"),
        }
    }

    #[test]
    fn every_simulator_message_is_read_back_as_what_it_means() {
        let mut rng = Rng::new(3);
        let controls = [
            r#"{"type":"KeepAlive"}"#,
            r#"{"type":"Finalize"}"#,
            r#"{"type":"Warp"}"#,
        ];
        for run in 0..12 {
            let params = StreamParams {
                interim_results: true,
                utterance_end_ms: Some(1_000),
                vad_events: true,
                ..StreamParams::default()
            };
            let script = vec![rng.text(40), "Two words.".into()];
            let created = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
            let mut core = StreamCore::new(params, script, format!("req-{run}"), created);
            let mut synth = SpeechSynth::new(8_000, run);
            for _ in 0..4 {
                let mut audio = synth.utterance(300 + rng.below(900) as u32);
                audio.extend(synth.silence(200 + rng.below(1_500) as u32));
                let bytes = g711::encode_ulaw(&audio);
                let mut rest = bytes.as_slice();
                for n in rng.chunk_lengths(bytes.len()) {
                    let (frame, tail) = rest.split_at(n);
                    rest = tail;
                    if !frame.is_empty() {
                        core.push_audio(frame);
                    }
                }
                let control = *rng.pick(&controls);
                core.handle_text(control);
            }
            core.handle_text(r#"{"type":"CloseStream"}"#);
            let mut messages = 0;
            while let Some(out) = core.poll_output() {
                if let Outbound::Message(m) = out {
                    check_mirror(&m);
                    messages += 1;
                }
            }
            assert!(messages > 4, "run {run} produced only {messages} messages");
        }
    }

    #[test]
    fn numbers_that_are_not_finite_read_as_zero() {
        let raw = r#"{"type":"Results","start":"NaN","duration":"inf","is_final":true,
            "channel":{"alternatives":[{"transcript":"x","confidence":"-inf"}]}}"#;
        let SttEvent::Transcript(t) = check_parse(raw) else {
            panic!("not a transcript")
        };
        assert_eq!((t.start, t.duration, t.confidence), (0.0, 0.0, 0.0));
        let raw = r#"{"type":"SpeechStarted","timestamp":"1e999"}"#;
        assert_eq!(check_parse(raw), SttEvent::SpeechStarted { at: 0.0 });
    }
}
