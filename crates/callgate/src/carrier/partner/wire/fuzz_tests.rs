//! The invariants of the partner wire codec — the one copy, shared by the
//! cargo-fuzz target `fuzz/fuzz_targets/partner_wire.rs` and by the stable
//! smoke twin (the `#[cfg(test)]` part at the bottom of this file).
//!
//! This file is included twice:
//! - by an ordinary `mod` (`#[cfg(test)]`), as
//!   `carrier::partner::wire::fuzz_tests`, whose parent module is the codec
//!   itself;
//! - by a `path` attribute in the fuzz target, as `mod server`, whose crate
//!   root has `use callgate::carrier::partner::wire::*`.
//!
//! So everything here reaches the codec through `super::`, and the part
//! that needs the mutator (the dev-dependency `callgate_test_support`) or
//! the load tool is compiled only under `cfg(test)` (the fuzz build never
//! sees it). Entry point: [`check`].
//!
//! Invariants:
//! - `parse_text` never panics on any UTF-8 text, and its answer is the
//!   one the specification gives for the text read independently: a
//!   `start` only with a 1..=128-character `call_id`, an accepted content
//!   type and at most 32 string metadata entries within their byte limits,
//!   each field exactly as sent; `dtmf` only for one of `0-9*#A-D`;
//!   `played` with its exact name; `Unknown` a ≤ 64-byte prefix of an event
//!   that is not a known one; `message_too_large` exactly above 16 KiB;
//!   every error a documented code, closing with 1008 (the text parser
//!   never reports the frame or state errors);
//! - `check_frame` accepts exactly one 20 ms frame, else `bad_audio_frame`
//!   with close 1007;
//! - every builder's output, for any input strings, is a JSON object with
//!   exactly its documented fields holding exactly those strings (the
//!   resume token of `started` and the `superseded` notice included), and
//!   the load tool, an older client, reads a resumable `started` as a
//!   plain one.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{
    Inbound, MAX_CALL_ID_CHARS, MAX_EVENT_NAME_BYTES, MAX_METADATA_ENTRIES, MAX_METADATA_KEY_BYTES,
    MAX_METADATA_VALUE_BYTES, MAX_TEXT_BYTES, WireError, WireFormat, check_frame, clear, end,
    error, mark, parse_text, started, started_resumable, superseded, transfer,
};

const KNOWN_EVENTS: [&str; 4] = ["start", "dtmf", "played", "stop"];
const CODES: [&str; 7] = [
    "bad_start",
    "unsupported_format",
    "bad_audio_frame",
    "invalid_json",
    "unexpected_event",
    "start_timeout",
    "message_too_large",
];
const FORMATS: [WireFormat; 2] = [WireFormat::L16k16, WireFormat::Pcmu8k];

/// Every invariant on one input: `data` as text (lossily), split in two as
/// builder arguments, and its length as a binary frame.
pub fn check(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    check_text(&text);
    let mut at = data.first().map_or(0, |&b| usize::from(b)) % (text.len() + 1);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let (a, b) = text.split_at(at);
    check_builders(a, b);
    check_frames(data.len());
}

/// `parse_text` on arbitrary text agrees with the specification.
pub fn check_text(text: &str) {
    let result = parse_text(text);
    if let Err(err) = &result {
        check_error(err);
    }
    if text.len() > MAX_TEXT_BYTES {
        let over = WireError::MessageTooLarge {
            kind: "text",
            len: text.len(),
            max: MAX_TEXT_BYTES,
        };
        assert_eq!(result, Err(over));
        return;
    }
    // Read independently: an object with a string `event`, or invalid JSON.
    let msg = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(msg)) => msg,
        _ => return assert_invalid_json(&result),
    };
    let Some(Value::String(event)) = msg.get("event") else {
        return assert_invalid_json(&result);
    };
    match event.as_str() {
        "start" => check_start(&msg, &result),
        "dtmf" => {
            let digit = msg.get("digit").and_then(Value::as_str);
            match digit.filter(|d| is_dtmf(d)) {
                Some(d) => assert_eq!(result, Ok(Inbound::Dtmf(first_char(d)))),
                None => assert_bad_message(&result, "dtmf"),
            }
        }
        "played" => match msg.get("name").and_then(Value::as_str) {
            Some(name) => assert_eq!(result, Ok(Inbound::Played(name.to_string()))),
            None => assert_bad_message(&result, "played"),
        },
        "stop" => assert_eq!(result, Ok(Inbound::Stop)),
        other => {
            let Ok(Inbound::Unknown(name)) = &result else {
                panic!("unknown event {other:?} parsed as {result:?}");
            };
            assert!(name.len() <= MAX_EVENT_NAME_BYTES, "{name:?} not truncated");
            assert!(other.starts_with(name.as_str()));
            assert!(!KNOWN_EVENTS.contains(&name.as_str()));
            if other.len() <= MAX_EVENT_NAME_BYTES {
                assert_eq!(name, other);
            } else {
                // The longest prefix that fits, cut on a character boundary.
                assert!(name.len() > MAX_EVENT_NAME_BYTES - 4);
            }
        }
    }
}

fn check_start(msg: &serde_json::Map<String, Value>, result: &Result<Inbound, WireError>) {
    let valid = start_is_valid(msg);
    let Ok(Inbound::Start(start)) = result else {
        let Err(err) = result else {
            panic!("a start parsed as {result:?}");
        };
        assert!(
            matches!(
                err,
                WireError::BadStart { .. } | WireError::UnsupportedFormat { .. }
            ),
            "a start refused with {err:?}"
        );
        assert!(valid.is_none(), "a valid start refused with {err:?}");
        return;
    };
    let Some(format) = valid else {
        panic!("an invalid start accepted: {start:?}");
    };
    assert_eq!(start.format, format);
    let chars = start.call_id.chars().count();
    assert!((1..=MAX_CALL_ID_CHARS).contains(&chars), "{chars} chars");
    assert_eq!(
        msg.get("call_id").and_then(Value::as_str),
        Some(start.call_id.as_str())
    );
    assert!(start.metadata.len() <= MAX_METADATA_ENTRIES);
    for (k, v) in &start.metadata {
        assert!(k.len() <= MAX_METADATA_KEY_BYTES && v.len() <= MAX_METADATA_VALUE_BYTES);
    }
    let sent: BTreeMap<String, String> = match msg.get("metadata") {
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect(),
        _ => BTreeMap::new(),
    };
    assert_eq!(start.metadata, sent);
}

/// The specification's rules for `start`, written independently of the
/// parser: the format it names when every field is valid.
fn start_is_valid(msg: &serde_json::Map<String, Value>) -> Option<WireFormat> {
    let call_id = msg.get("call_id")?.as_str()?;
    if !(1..=MAX_CALL_ID_CHARS).contains(&call_id.chars().count()) {
        return None;
    }
    let metadata_ok = match msg.get("metadata") {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => {
            m.len() <= MAX_METADATA_ENTRIES
                && m.iter().all(|(k, v)| {
                    k.len() <= MAX_METADATA_KEY_BYTES
                        && v.as_str()
                            .is_some_and(|v| v.len() <= MAX_METADATA_VALUE_BYTES)
                })
        }
        Some(_) => false,
    };
    if !metadata_ok {
        return None;
    }
    // Canonical form: parts and `name=value` trimmed, ASCII lower case,
    // the μ-law alias renamed.
    let content_type = msg.get("content-type")?.as_str()?;
    let canonical = content_type
        .split(';')
        .map(|p| p.split('=').map(str::trim).collect::<Vec<_>>().join("="))
        .collect::<Vec<_>>()
        .join(";")
        .to_ascii_lowercase()
        .replacen("audio/x-mulaw;", "audio/pcmu;", 1);
    FORMATS.into_iter().find(|f| f.content_type() == canonical)
}

fn check_error(err: &WireError) {
    assert!(CODES.contains(&err.code()), "{err:?}");
    let expected_close = if err.code() == "bad_audio_frame" {
        1007
    } else {
        1008
    };
    assert_eq!(err.close_code(), expected_close, "{err:?}");
    let message = err.to_string();
    assert!(!message.is_empty());
    // The error message we would send for it is valid JSON.
    check_builders(err.code(), &message);
    assert!(
        !matches!(
            err,
            WireError::BadAudioFrame { .. }
                | WireError::UnexpectedEvent { .. }
                | WireError::StartTimeout { .. }
        ),
        "the text parser reported {err:?}"
    );
}

fn assert_invalid_json(result: &Result<Inbound, WireError>) {
    assert!(
        matches!(result, Err(WireError::InvalidJson { .. })),
        "not an object with a string event, parsed as {result:?}"
    );
}

fn assert_bad_message(result: &Result<Inbound, WireError>, expected: &str) {
    match result {
        Err(err @ WireError::BadMessage { event, .. }) => {
            assert_eq!(*event, expected);
            assert_eq!(err.code(), "invalid_json");
        }
        other => panic!("a bad {expected} parsed as {other:?}"),
    }
}

fn is_dtmf(digit: &str) -> bool {
    digit.len() == 1 && "0123456789*#ABCD".contains(digit)
}

fn first_char(s: &str) -> char {
    s.chars().next().unwrap_or_default()
}

/// Every builder's output is exactly its documented object, for any strings.
pub fn check_builders(a: &str, b: &str) {
    let object = |text: String| -> BTreeMap<String, String> {
        let value: Value = serde_json::from_str(&text).expect("builders produce JSON");
        let Value::Object(fields) = value else {
            panic!("{text} is not an object");
        };
        fields
            .into_iter()
            .map(|(k, v)| (k, v.as_str().expect("string fields").to_string()))
            .collect()
    };
    let expect = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    };
    assert_eq!(
        object(started(a)),
        expect(&[("event", "started"), ("session_id", a)])
    );
    assert_eq!(
        object(started_resumable(a, b)),
        expect(&[("event", "started"), ("session_id", a), ("resume_token", b)])
    );
    assert_eq!(
        object(superseded(b)),
        expect(&[("event", "superseded"), ("reason", b)])
    );
    assert_eq!(object(mark(a)), expect(&[("event", "mark"), ("name", a)]));
    assert_eq!(object(clear()), expect(&[("event", "clear")]));
    assert_eq!(
        object(transfer(a, b)),
        expect(&[("event", "transfer"), ("target", a), ("reason", b)])
    );
    assert_eq!(object(end(b)), expect(&[("event", "end"), ("reason", b)]));
    assert_eq!(
        object(error(a, b)),
        expect(&[("event", "error"), ("code", a), ("message", b)])
    );
    // A mark we send, echoed the way the protocol says, names the mark.
    let echo = serde_json::json!({"event": "played", "name": a}).to_string();
    if echo.len() <= MAX_TEXT_BYTES {
        assert_eq!(parse_text(&echo), Ok(Inbound::Played(a.to_string())));
    }
}

/// `check_frame` accepts exactly one 20 ms frame of the format.
pub fn check_frames(len: usize) {
    for format in FORMATS {
        match check_frame(format, len) {
            Ok(()) => assert_eq!(len, format.frame_bytes()),
            Err(err) => {
                assert_ne!(len, format.frame_bytes());
                assert_eq!(
                    err,
                    WireError::BadAudioFrame {
                        len,
                        expected: format.frame_bytes()
                    }
                );
                assert_eq!((err.code(), err.close_code()), ("bad_audio_frame", 1007));
            }
        }
    }
}

// ---- the stable smoke twin ----------------------------------------------

#[cfg(test)]
mod smoke {
    use callgate_load::partner_wire as client;

    use super::*;
    use callgate_test_support::{Mutator, Rng};

    const ITERATIONS: usize = 4_000;
    const TOKENS: &[&str] = &[
        "\"event\"",
        "\"start\"",
        "\"dtmf\"",
        "\"played\"",
        "\"stop\"",
        "\"call_id\"",
        "\"content-type\"",
        "\"metadata\"",
        "\"digit\"",
        "\"name\"",
        "\"audio/l16;rate=16000\"",
        "\"AUDIO/PCMU ; RATE = 8000\"",
        "\"audio/x-mulaw;rate=8000\"",
        "\"audio/l16;rate=8000\"",
        "\"#\"",
        "\"E\"",
        "null",
        "{}",
    ];

    fn corpus() -> Vec<String> {
        vec![
            r#"{"event":"start","call_id":"abc-1","content-type":"audio/l16;rate=16000","metadata":{"tenant":"acme","lang":"en"}}"#.into(),
            r#"{"event":"start","call_id":"x","content-type":"Audio/PCMU; rate = 8000"}"#.into(),
            r#"{"event":"start","call_id":"x","content-type":"audio/x-mulaw;rate=8000","metadata":null,"extra":[1]}"#.into(),
            r#"{"event":"dtmf","digit":"5"}"#.into(),
            r#"{"event":"dtmf","digit":"D"}"#.into(),
            r#"{"event":"played","name":"turn-1"}"#.into(),
            r#"{"event":"stop"}"#.into(),
            r#"{"event":"websocket:connected","content-type":"audio/l16;rate=16000"}"#.into(),
            started("7c4e0d2a-9f1b-4c55-8a0e-3d2f6b1a9e77"),
            transfer("+15550199", "queue_full"),
        ]
    }

    #[test]
    fn mutated_messages_keep_the_codec_invariants() {
        let mut m = Mutator::new(0x9a27_4e12, &corpus(), TOKENS);
        m.run_bytes(ITERATIONS, check);
    }

    #[test]
    fn oversized_and_boundary_inputs_keep_the_invariants() {
        let stop = r#"{"event":"stop"}"#;
        for pad in [MAX_TEXT_BYTES - stop.len(), MAX_TEXT_BYTES - stop.len() + 1] {
            check_text(&format!("{stop}{}", " ".repeat(pad)));
        }
        let long_name = format!(r#"{{"event":"{}"}}"#, "€".repeat(30));
        check_text(&long_name);
        let metadata: serde_json::Map<String, Value> = (0..40)
            .map(|i| (format!("k{i}"), Value::String("v".into())))
            .collect();
        let start = serde_json::json!({"event":"start","call_id":"a","content-type":"audio/l16;rate=16000","metadata":metadata});
        check_text(&start.to_string());
        for len in [0, 159, 160, 161, 320, 639, 640, 641, 65_536] {
            check_frames(len);
        }
    }

    #[test]
    fn builders_hold_for_random_strings() {
        let mut rng = Rng::new(0x51a7);
        for _ in 0..1_000 {
            let (a, b) = (rng.text(40), rng.text(80));
            check_builders(&a, &b);
        }
    }

    /// What callgate sends reads back the same in the load tool (an
    /// independent client), and what the load tool sends parses here.
    #[test]
    fn the_load_tool_and_the_server_understand_each_other() {
        let mut rng = Rng::new(0x0c0d_ec00);
        for _ in 0..500 {
            let (a, b) = (rng.text(40), rng.text(60));
            let heard = |text: String| client::parse(&text).expect("the load tool reads it");
            assert_eq!(
                heard(started(&a)),
                client::ServerMessage::Started {
                    session_id: a.clone(),
                    resume_token: None,
                }
            );
            // The resume token: optional, kept by a client that resumes.
            assert_eq!(
                heard(started_resumable(&a, &b)),
                client::ServerMessage::Started {
                    session_id: a.clone(),
                    resume_token: Some(b.clone()),
                }
            );
            assert_eq!(heard(mark(&a)), client::ServerMessage::Mark(a.clone()));
            assert_eq!(heard(clear()), client::ServerMessage::Clear);
            assert_eq!(
                heard(transfer(&a, &b)),
                client::ServerMessage::Transfer {
                    target: Some(a.clone()),
                    reason: b.clone()
                }
            );
            assert_eq!(
                heard(end(&b)),
                client::ServerMessage::End { reason: b.clone() }
            );
            assert_eq!(
                heard(error(&a, &b)),
                client::ServerMessage::Error {
                    code: a.clone(),
                    message: b.clone()
                }
            );

            assert_eq!(
                parse_text(&client::played(&a)),
                Ok(Inbound::Played(a.clone()))
            );
            assert_eq!(parse_text(&client::stop()), Ok(Inbound::Stop));
            let digit = *rng.pick(&['0', '9', '*', '#', 'A', 'D']);
            assert_eq!(parse_text(&client::dtmf(digit)), Ok(Inbound::Dtmf(digit)));
            let metadata = vec![
                (rng.text(10), rng.text(30)),
                ("tenant".to_string(), b.clone()),
            ];
            for (format, expected) in [
                (client::PartnerFormat::L16, WireFormat::L16k16),
                (client::PartnerFormat::Pcmu, WireFormat::Pcmu8k),
            ] {
                let id = if a.is_empty() {
                    "id".to_string()
                } else {
                    a.clone()
                };
                let text = client::start(&id, format, &metadata);
                let Ok(Inbound::Start(start)) = parse_text(&text) else {
                    panic!("the load tool's start was refused: {text}");
                };
                assert_eq!((start.call_id, start.format), (id, expected));
                assert_eq!(start.metadata, metadata.iter().cloned().collect());
                assert_eq!(format.frame_bytes(), expected.frame_bytes());
                assert_eq!(check_frame(expected, format.frame_bytes()), Ok(()));
            }
        }
    }
}
