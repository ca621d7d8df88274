//! TTS provider frames: `tts_client::wire::parse` on arbitrary text, and
//! `ContextId::from_wire` on the same text.
//!
//! Invariants: an `Audio` event carries exactly the base64 decoding of the
//! frame's non-empty `audio`; a context is recognised only in its exact
//! wire form (`contextId`, else `context_id`, equal to `ctx-<n>` as we
//! write it); errors say which of the two things went wrong.
#![no_main]

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use libfuzzer_sys::fuzz_target;
use tts_client::ContextId;
use tts_client::wire::{Inbound, parse};

#[derive(serde::Deserialize)]
struct Probe {
    audio: Option<String>,
    #[serde(rename = "contextId")]
    camel: Option<String>,
    #[serde(rename = "context_id")]
    snake: Option<String>,
}

fn check_context(parsed: Option<ContextId>, sent: Option<String>) {
    if let Some(id) = parsed {
        assert_eq!(Some(id.to_string()), sent);
    }
}

fuzz_target!(|data: &[u8]| {
    let frame = String::from_utf8_lossy(data);
    let probe = || serde_json::from_str::<Probe>(&frame).expect("it parsed, so it has these");
    match parse(&frame) {
        Ok(Inbound::Audio { context, bytes, .. }) => {
            let p = probe();
            assert!(!bytes.is_empty());
            assert_eq!(B64.decode(p.audio.expect("audio")).ok(), Some(bytes));
            check_context(context, p.camel.or(p.snake));
        }
        Ok(Inbound::Final { context }) => {
            let p = probe();
            check_context(context, p.camel.or(p.snake));
        }
        Ok(Inbound::Error { .. } | Inbound::Other) => {}
        Err(e) => assert!(
            e.starts_with("unparseable provider message") || e.starts_with("audio is not base64")
        ),
    }
    if let Some(id) = ContextId::from_wire(&frame) {
        assert_eq!(id.to_string(), frame);
    }
});
