//! The invariants of the load tool's parser of server frames — the one
//! copy, shared by the cargo-fuzz target `fuzz/fuzz_targets/load_wire.rs`
//! and by the stable smoke twin (the `#[cfg(test)]` part at the bottom of
//! this file).
//!
//! This file is included twice:
//! - by an ordinary `mod` (`#[cfg(test)]`), as `wire::fuzz_tests`, whose
//!   parent module is the parser itself;
//! - by a `path` attribute in the fuzz target, as `mod invariants`, whose
//!   crate root has `use callgate_load::wire::*` and
//!   `use callgate_load::{LoadError, StreamSid}`.
//!
//! So the parser is reached through `super::`, the crate's root types
//! through `crate::` (both name the same items in the two builds), and the
//! part that needs the mutator (the dev-dependency `callgate_test_support`)
//! is compiled only under `cfg(test)` (the fuzz build never sees it).
//! Entry point: [`check`].
//!
//! Invariants: `media`/`mark`/`clear` are accepted only when `streamSid`
//! names our stream (up to hex case); media bytes are exactly the base64
//! decoding of the payload; other events come back as `Unknown` with their
//! name; every error is `Malformed` for our stream; a SID parses only when
//! it is its own display form up to hex case.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use super::{ServerEvent, parse};
use crate::{LoadError, StreamSid};

/// The fields the invariants are checked against, read independently of
/// the parser.
#[derive(serde::Deserialize)]
struct Probe {
    event: String,
    #[serde(rename = "streamSid")]
    stream_sid: Option<String>,
    media: Option<Payload>,
    mark: Option<Name>,
}

#[derive(serde::Deserialize)]
struct Payload {
    payload: String,
}

#[derive(serde::Deserialize)]
struct Name {
    name: String,
}

/// Every invariant on one input: `data` as text (lossily), as a frame for
/// the stream `MZ0303…03` and as a SID.
pub fn check(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    check_parse(&text, StreamSid::from_bytes([3; 16]));
    check_sid(&text);
}

/// What every parse promises, whatever the frame.
pub fn check_parse(text: &str, stream: StreamSid) {
    let result = parse(text, stream);
    let probe = || serde_json::from_str::<Probe>(text).expect("it parsed, so it has these");
    match &result {
        Ok(ServerEvent::Unknown(event)) => {
            assert!(!matches!(event.as_str(), "media" | "mark" | "clear"));
            assert_eq!(*event, probe().event);
        }
        Ok(routed) => {
            let p = probe();
            let sid = p.stream_sid.expect("a routed event names its stream");
            assert!(sid.eq_ignore_ascii_case(&stream.to_string()) && sid.starts_with("MZ"));
            match routed {
                ServerEvent::Media(bytes) => {
                    let payload = p.media.expect("media").payload;
                    assert_eq!(B64.decode(payload).as_ref(), Ok(bytes));
                }
                ServerEvent::Mark(name) => assert_eq!(*name, p.mark.expect("mark").name),
                ServerEvent::Clear => assert_eq!(p.event, "clear"),
                ServerEvent::Unknown(_) => unreachable!("matched above"),
            }
        }
        Err(LoadError::Malformed { stream: s, .. }) => assert_eq!(*s, stream),
        Err(other) => panic!("parse reported {other:?}"),
    }
}

/// A SID parses only from its own display form, up to hex case.
pub fn check_sid(text: &str) -> Option<StreamSid> {
    let sid = text.parse::<StreamSid>().ok()?;
    assert!(text.starts_with("MZ"), "{text:?}");
    assert!(sid.to_string().eq_ignore_ascii_case(text), "{text:?}");
    Some(sid)
}

// ---- the stable smoke twin ----------------------------------------------

#[cfg(test)]
mod smoke {
    //! Mutated server → Twilio frames must be routed only to the stream
    //! they name and decoded exactly, and SIDs must parse only in their
    //! exact shape.

    use super::super::{mark, media, start};
    use super::*;
    use crate::ids::{AccountSid, CallIds, CallSid};
    use callgate_test_support::{Mutator, Rng};

    const ITERATIONS: usize = 4_000;
    const TOKENS: &[&str] = &[
        "\"event\"",
        "\"media\"",
        "\"mark\"",
        "\"clear\"",
        "\"streamSid\"",
        "\"payload\"",
        "\"name\"",
        "\"MZ+3+3+3+3+3+3+3+3+3+3+3+3+3+3+3+3\"",
        "\"MZ03030303030303030303030303030303\"",
        "\"//8=\"",
    ];
    /// The fuzz target's seeds.
    const SEEDS: [&[u8]; 5] = [
        include_bytes!("../../../../fuzz/seeds/load_wire/seed-0"),
        include_bytes!("../../../../fuzz/seeds/load_wire/seed-1"),
        include_bytes!("../../../../fuzz/seeds/load_wire/seed-2"),
        include_bytes!("../../../../fuzz/seeds/load_wire/seed-3"),
        include_bytes!("../../../../fuzz/seeds/load_wire/seed-4"),
    ];

    fn stream() -> StreamSid {
        StreamSid::from_bytes([3; 16])
    }

    fn corpus() -> Vec<String> {
        let s = stream();
        let ids = CallIds {
            account: AccountSid::from_bytes([1; 16]),
            call: CallSid::from_bytes([2; 16]),
            stream: s,
        };
        vec![
            format!(
                r#"{{"event":"media","streamSid":"{s}","media":{{"payload":"//8="}},"extra":1}}"#
            ),
            format!(r#"{{"event":"mark","streamSid":"{s}","mark":{{"name":"turn-2"}}}}"#),
            format!(r#"{{"event":"clear","streamSid":"{s}"}}"#),
            format!(
                r#"{{"event":"clear","streamSid":"{}"}}"#,
                StreamSid::from_bytes([9; 16])
            ),
            r#"{"event":"dance"}"#.to_owned(),
            media(7, s, 6, 100, &[0xFF; 16]),
            mark(9, s, "turn-1"),
            start(&ids, &[("tenant".into(), "acme".into())]),
        ]
    }

    #[test]
    fn mutated_server_frames_are_routed_and_decoded_exactly() {
        let mut m = Mutator::new(0x10ad, &corpus(), TOKENS);
        m.run_text(ITERATIONS, |text| check_parse(text, stream()));
    }

    /// What the fuzz target runs, on mutants of its own seeds: raw bytes
    /// (not always UTF-8), as a frame and as a SID.
    #[test]
    fn mutated_seeds_keep_the_invariants() {
        let mut m = Mutator::new(0x5eed_10ad, &SEEDS, TOKENS);
        m.run_bytes(1_000, check);
    }

    #[test]
    fn sids_parse_only_in_their_exact_shape() {
        let mut rng = Rng::new(9);
        let mut bytes = [0u8; 16];
        for _ in 0..2_000 {
            bytes.iter_mut().for_each(|b| *b = rng.next_u64() as u8);
            let sid = StreamSid::from_bytes(bytes);
            let text = sid.to_string();
            assert_eq!(check_sid(&text), Some(sid));
            // Mutate one character of the text form: it either still reads
            // as the same characters (hex case) or is refused.
            let mut mutated = text.into_bytes();
            let i = rng.below(mutated.len());
            mutated[i] = *rng.pick(b"+-0aAfFgG \xC3");
            check_sid(&String::from_utf8_lossy(&mutated));
        }
        assert_eq!(check_sid("MZ+3+3+3+3+3+3+3+3+3+3+3+3+3+3+3+3"), None);
    }
}
