//! The invariants of the carrier frame parser — the one copy, shared by the
//! cargo-fuzz target `fuzz/fuzz_targets/twilio_parse.rs` and by the stable
//! smoke twin (the `#[cfg(test)]` part at the bottom of this file).
//!
//! This file is included twice:
//! - by an ordinary `mod` (`#[cfg(test)]`), as
//!   `carrier::twilio::wire::fuzz_tests`, whose parent module is the parser
//!   itself;
//! - by a `path` attribute in the fuzz target, as `mod invariants`, whose
//!   crate root has `use callgate::carrier::twilio::wire::*`.
//!
//! So the parser is reached through `super::`, and the part that needs the
//! mutator (the dev-dependency `callgate_test_support`) or the load tool
//! is compiled only under `cfg(test)` (the fuzz build never sees it).
//! Entry point: [`check`].
//!
//! Invariants:
//! - an `Ok(Media)` payload is at most `max_payload` bytes and is exactly
//!   the base64 decoding of the frame's `media.payload`;
//! - an `Unknown` event is a prefix (≤ 32 chars) of the frame's event and
//!   never a known one;
//! - `PayloadTooLarge` reports the limit and more than it;
//! - the text parser never reports frame-level errors;
//! - `parse_with(.., Audio::Discard)` differs only by an empty payload (and
//!   no base64 check);
//! - `media_msg(sid, bytes)`, for any `sid`, parses back to exactly `bytes`
//!   with no track, chunk or timestamp, or is refused as too large (the
//!   size estimated from the base64 length, rounded up).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use super::{Audio, Inbound, WireError, media_msg, parse, parse_with};

/// Payload limits to parse each input under: none allowed, one base64
/// quantum, one 20 ms frame, the server's default.
pub const LIMITS: [usize; 4] = [0, 3, 160, 1_600];
const KNOWN_EVENTS: [&str; 6] = ["connected", "start", "media", "dtmf", "mark", "stop"];

/// The fields the invariants are checked against, read independently of
/// the parser (unknown fields ignored, as the parser does).
#[derive(serde::Deserialize)]
struct Probe {
    event: String,
    media: Option<ProbeMedia>,
}

#[derive(serde::Deserialize)]
struct ProbeMedia {
    payload: String,
}

/// Every invariant on one input: `data` as text (lossily) under each of
/// [`LIMITS`], then `data` as the payload of our own media frame (with the
/// text as its stream SID) under a limit taken from the input.
pub fn check(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for max in LIMITS {
        check_parse(&text, max);
    }
    let max = data.len() / 2 + usize::from(data.first().copied().unwrap_or(0) % 2) * data.len();
    check_own_media(&text, data, max);
}

/// What every parse promises, whatever the input.
pub fn check_parse(text: &str, max: usize) {
    let result = parse(text, max);
    let probe = || serde_json::from_str::<Probe>(text).expect("it parsed, so it has these");
    match &result {
        Ok(Inbound::Media(m)) => {
            assert!(m.payload.len() <= max, "{} > {max}", m.payload.len());
            let b64 = probe().media.expect("a media object").payload;
            assert_eq!(B64.decode(b64).as_deref(), Ok(m.payload.as_slice()));
        }
        Ok(Inbound::Unknown { event }) => {
            assert!(event.chars().count() <= 32, "{event:?} is not truncated");
            assert!(!KNOWN_EVENTS.contains(&event.as_str()), "{event:?}");
            assert!(probe().event.starts_with(event.as_str()));
        }
        Err(WireError::PayloadTooLarge { len, max: limit }) => {
            assert_eq!(*limit, max);
            assert!(
                *len > max,
                "reported {len} bytes against a {max}-byte limit"
            );
        }
        Err(e @ (WireError::MessageTooLarge { .. } | WireError::BinaryFrame)) => {
            panic!("the text parser never reports {e:?}")
        }
        _ => {}
    }
    // Discarding audio changes nothing but the payload (and the checks
    // that need it decoded).
    match (result, parse_with(text, max, Audio::Discard)) {
        (Ok(Inbound::Media(m)), Ok(Inbound::Media(d))) => {
            assert!(d.payload.is_empty());
            let kept = (m.track, m.chunk, m.timestamp_ms);
            assert_eq!(kept, (d.track, d.chunk, d.timestamp_ms));
        }
        (
            Err(WireError::InvalidBase64 | WireError::PayloadTooLarge { .. }),
            Ok(Inbound::Media(d)),
        ) => assert!(d.payload.is_empty()),
        (decoded, discarded) => assert_eq!(decoded, discarded),
    }
}

/// Our own media frame for `sid` parses back to exactly `payload` under
/// `max`, or is refused as too large.
pub fn check_own_media(sid: &str, payload: &[u8], max: usize) {
    match parse(&media_msg(sid, payload), max) {
        Ok(Inbound::Media(m)) => {
            assert!(payload.len() <= max);
            assert_eq!(m.payload, payload);
            assert_eq!((m.track, m.chunk, m.timestamp_ms), (None, None, None));
        }
        // Oversized payloads are refused before decoding, with the size
        // estimated from the base64 length (rounded up).
        Err(WireError::PayloadTooLarge { len, max: limit }) => {
            assert!(payload.len() > max && len >= payload.len() && limit == max);
        }
        other => panic!(
            "our own media frame parsed as {other:?} for {} bytes under {max}",
            payload.len()
        ),
    }
}

// ---- the stable smoke twin ----------------------------------------------

#[cfg(test)]
mod smoke {
    //! Mutated Twilio frames must parse into results that keep the parser's
    //! promises, and every frame we build must parse back into what went in
    //! — here and in the load tool that plays Twilio.

    use callgate_load::{AccountSid, CallIds, CallSid, StreamSid, wire as carrier};

    use super::super::{clear_msg, mark_msg};
    use super::*;
    use crate::carrier::twilio::signature::{sign, signature_is_valid};
    use callgate_test_support::{Mutator, Rng};

    const ITERATIONS: usize = 3_000;
    const TOKENS: &[&str] = &[
        "\"event\"",
        "\"media\"",
        "\"start\"",
        "\"mark\"",
        "\"dtmf\"",
        "\"stop\"",
        "\"payload\"",
        "\"streamSid\"",
        "\"stream_sid\"",
        "\"mediaFormat\"",
        "\"sampleRate\"",
        "\"channels\"",
        "\"chunk\"",
        "\"timestamp\"",
        "\"customParameters\"",
        "\"//8=\"",
        "\"AAECAw==\"",
    ];
    /// The fuzz target's seeds.
    const SEEDS: [&[u8]; 6] = [
        include_bytes!("../../../../../../fuzz/seeds/twilio_parse/seed-0"),
        include_bytes!("../../../../../../fuzz/seeds/twilio_parse/seed-1"),
        include_bytes!("../../../../../../fuzz/seeds/twilio_parse/seed-2"),
        include_bytes!("../../../../../../fuzz/seeds/twilio_parse/seed-3"),
        include_bytes!("../../../../../../fuzz/seeds/twilio_parse/seed-4"),
        include_bytes!("../../../../../../fuzz/seeds/twilio_parse/seed-5"),
    ];

    fn ids() -> CallIds {
        CallIds {
            account: AccountSid::from_bytes([1; 16]),
            call: CallSid::from_bytes([2; 16]),
            stream: StreamSid::from_bytes([3; 16]),
        }
    }

    fn corpus() -> Vec<String> {
        let ids = ids();
        vec![
            carrier::connected(),
            carrier::start(&ids, &[("tenant".into(), "acme".into())]),
            carrier::media(2, ids.stream, 1, 20, &[0xFF; 160]),
            carrier::mark(3, ids.stream, "turn-1"),
            carrier::stop(4, &ids),
            r#"{"event":"dtmf","streamSid":"MZ1","dtmf":{"track":"inbound_track","digit":"5"}}"#.into(),
            r#"{"event":"media","media":{"chunk":7,"timestamp":140,"payload":"//8="}}"#.into(),
            r#"{"event":"start","start":{"stream_sid":"MZ1","customParameters":{"n":3},"mediaFormat":{"encoding":"audio/x-mulaw","sampleRate":"8000"}}}"#.into(),
            media_msg("MZ1", &[1, 2, 3, 4]),
            mark_msg("MZ1", "m"),
            clear_msg("MZ1"),
        ]
    }

    #[test]
    fn mutated_frames_keep_the_parse_invariants() {
        let mut m = Mutator::new(0x0077_1710, &corpus(), TOKENS);
        m.run_text(ITERATIONS, |text| {
            for max in LIMITS {
                check_parse(text, max);
            }
        });
    }

    /// What the fuzz target runs, on mutants of its own seeds: raw bytes
    /// (not always UTF-8), also as the payload of our own media frame.
    #[test]
    fn mutated_seeds_keep_the_invariants() {
        let mut m = Mutator::new(0x5eed_7711, &SEEDS, TOKENS);
        m.run_bytes(1_000, check);
        check(&[]);
    }

    #[test]
    fn frames_we_build_parse_back_here_and_in_the_load_tool() {
        let mut rng = Rng::new(42);
        let stream = ids().stream;
        for _ in 0..500 {
            let len = rng.below(400);
            let payload = rng.bytes(len);
            let max = rng.below(400);
            let sid = rng.text(40);
            check_own_media(&sid, &payload, max);
            let name = rng.text(20);
            assert_eq!(
                parse(&mark_msg(&sid, &name), max),
                Ok(Inbound::Mark { name: name.clone() })
            );
            assert_eq!(
                parse(&clear_msg(&sid), max),
                Ok(Inbound::Unknown {
                    event: "clear".into()
                })
            );

            let ours = stream.to_string();
            let heard = carrier::parse(&media_msg(&ours, &payload), stream);
            assert_eq!(
                heard.ok(),
                Some(carrier::ServerEvent::Media(payload.clone()))
            );
            let heard = carrier::parse(&mark_msg(&ours, &name), stream);
            assert_eq!(heard.ok(), Some(carrier::ServerEvent::Mark(name)));

            let (chunk, ts) = (rng.next_u64(), rng.next_u64());
            let Ok(Inbound::Media(m)) = parse(&carrier::media(9, stream, chunk, ts, &payload), 400)
            else {
                panic!("the load tool's media frame did not parse")
            };
            assert_eq!((m.chunk, m.timestamp_ms), (Some(chunk), Some(ts)));
            assert_eq!((m.track.as_deref(), m.payload), (Some("inbound"), payload));
        }
    }

    #[test]
    fn signatures_we_make_validate_and_a_changed_one_does_not() {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut rng = Rng::new(7);
        for _ in 0..300 {
            let (token, url) = (rng.text(30), format!("wss://{}", rng.text(60)));
            let sig = sign(&token, &url);
            assert!(signature_is_valid(&token, &url, &sig));
            // HMAC-SHA1 is 20 bytes: 27 significant characters and one `=`.
            let mut forged = sig.into_bytes();
            let i = rng.below(27);
            let replacement = *rng.pick(ALPHABET);
            if forged[i] == replacement {
                continue;
            }
            forged[i] = replacement;
            let forged = String::from_utf8(forged).unwrap();
            assert!(!signature_is_valid(&token, &url, &forged), "{forged}");
        }
    }
}
