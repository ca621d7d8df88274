//! Carrier frames: `callgate::twilio::parse` on arbitrary text.
//!
//! Invariants: an `Ok(Media)` payload is at most `max_payload` bytes and is
//! exactly the base64 decoding of the frame's `media.payload`; an `Unknown`
//! event is a prefix (≤ 32 chars) of the frame's event and never a known
//! one; `PayloadTooLarge` reports more than the limit; the text parser never
//! reports frame-level errors; `parse_with(.., Audio::Discard)` differs
//! only by an empty payload (and no base64 check); and `media_msg(sid,
//! bytes)` parses back to exactly `bytes` (or is refused as too large).
#![no_main]

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use callgate::twilio::{Audio, Inbound, WireError, media_msg, parse, parse_with};
use libfuzzer_sys::fuzz_target;

const KNOWN_EVENTS: [&str; 6] = ["connected", "start", "media", "dtmf", "mark", "stop"];

/// The fields checked, read independently of the parser.
#[derive(serde::Deserialize)]
struct Probe {
    event: String,
    media: Option<ProbeMedia>,
}

#[derive(serde::Deserialize)]
struct ProbeMedia {
    payload: String,
}

fn check(text: &str, max: usize) {
    let probe = || serde_json::from_str::<Probe>(text).expect("it parsed, so it has these");
    let result = parse(text, max);
    check_discard(&result, parse_with(text, max, Audio::Discard));
    match result {
        Ok(Inbound::Media(m)) => {
            assert!(m.payload.len() <= max);
            let b64 = probe().media.expect("a media object").payload;
            assert_eq!(B64.decode(b64).ok(), Some(m.payload));
        }
        Ok(Inbound::Unknown { event }) => {
            assert!(event.chars().count() <= 32);
            assert!(!KNOWN_EVENTS.contains(&event.as_str()));
            assert!(probe().event.starts_with(event.as_str()));
        }
        Err(WireError::PayloadTooLarge { len, max: limit }) => {
            assert!(limit == max && len > max);
        }
        Err(e @ (WireError::MessageTooLarge | WireError::BinaryFrame)) => {
            panic!("the text parser never reports {e:?}")
        }
        _ => {}
    }
}

fn check_discard(decoded: &Result<Inbound, WireError>, discarded: Result<Inbound, WireError>) {
    match (decoded, discarded) {
        (Ok(Inbound::Media(m)), Ok(Inbound::Media(d))) => {
            assert!(d.payload.is_empty());
            assert_eq!(
                (&m.track, m.chunk, m.timestamp_ms),
                (&d.track, d.chunk, d.timestamp_ms)
            );
        }
        (
            Err(WireError::InvalidBase64 | WireError::PayloadTooLarge { .. }),
            Ok(Inbound::Media(d)),
        ) => {
            assert!(d.payload.is_empty())
        }
        (decoded, discarded) => assert_eq!(*decoded, discarded),
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for max in [0, 3, 160, 1_600] {
        check(&text, max);
    }
    let max = data.len() / 2 + usize::from(data.first().copied().unwrap_or(0) % 2) * data.len();
    match parse(&media_msg(&text, data), max) {
        Ok(Inbound::Media(m)) => assert!(data.len() <= max && m.payload == data),
        Err(WireError::PayloadTooLarge { len, max: limit }) => {
            assert!(data.len() > max && len >= data.len() && limit == max)
        }
        other => panic!("our own media frame parsed as {other:?}"),
    }
});
