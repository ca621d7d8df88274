//! STT provider frames: `stt_client::wire::parse_server_text` on arbitrary
//! text, one frame per line, feeding an `UtteranceAssembler`.
//!
//! Invariants: the event kind follows the frame's `type` (anything else is
//! a `ProviderError`, never `Closed`); every time, duration and confidence
//! is finite; a non-JSON frame is quoted to at most 200 characters and an
//! unknown type's message is bounded; the assembler yields only non-empty,
//! trimmed utterances and holds nothing after one or after a close.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use stt_client::wire::parse_server_text;
use stt_client::{CloseReason, SttEvent, UtteranceAssembler};

const MAX_QUOTE: usize = 200;
const MAX_UNKNOWN_MESSAGE: usize = 32 + MAX_QUOTE * 10 + 2 + MAX_QUOTE;

fn check(raw: &str) -> SttEvent {
    let event = parse_server_text(raw);
    let json = serde_json::from_str::<Value>(raw).ok();
    let ty = json.as_ref().and_then(|v| v.get("type")?.as_str());
    let finite = |xs: &[f64]| assert!(xs.iter().all(|x| x.is_finite()));
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
        SttEvent::ProviderError { .. } if ty == Some("Error") => {}
        SttEvent::ProviderError { message } => {
            assert!(message.chars().count() <= MAX_UNKNOWN_MESSAGE);
        }
        other => panic!("a frame became {other:?}"),
    }
    event
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut assembler = UtteranceAssembler::new();
    for line in text.lines() {
        if let Some(u) = assembler.push(&check(line)) {
            assert!(!u.text.is_empty() && u.text.trim() == u.text);
            assert!(!assembler.has_pending());
        }
    }
    assembler.push(&SttEvent::Closed(CloseReason::transport("end")));
    assert!(!assembler.has_pending());
});
