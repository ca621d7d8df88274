//! The invariants of the load tool's partner-protocol parser and builders —
//! the one copy, shared by the cargo-fuzz target
//! `fuzz/fuzz_targets/partner_wire.rs` (which fuzzes both ends of the
//! partner protocol) and by the stable smoke twin at the bottom of this
//! file (`#[cfg(test)]`).
//!
//! Included twice: by an ordinary `mod` (`#[cfg(test)]`), as
//! `partner_wire::fuzz_tests`, whose parent module is the load tool's
//! `partner_wire`, and by a `path` attribute, as a module of the fuzz
//! target, whose crate root has `use callgate_load::partner_wire::*`. So
//! everything here reaches the code under test through `super::`; the
//! smoke twin's mutator is the dev-dependency `callgate_test_support`.
//! Entry point: [`check`].
//!
//! Invariants: `parse` never panics on any UTF-8 text; a known event is
//! accepted exactly when its required string fields are present, and
//! carries them exactly as sent (an absent `target` is `None`, an absent
//! `message` empty); any other event comes back as `Unknown` with its full
//! name; a message is refused only when it is not an object with a string
//! `event`, or a field of its event is missing (required ones) or not a
//! string; other fields never matter, and a repeated key takes its last
//! value. Every builder's output, for any input, is a JSON
//! object with exactly its documented fields holding exactly those values.

use serde_json::{Map, Value};

use super::{PartnerFormat, ServerMessage, dtmf, parse, played, start, stop};

const KNOWN: [&str; 6] = ["started", "mark", "clear", "transfer", "end", "error"];

/// Every invariant on one input: `data` as text, and split as builder input.
pub fn check(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    check_parse(&text);
    let mut at = data.first().map_or(0, |&b| usize::from(b)) % (text.len() + 1);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    let (a, b) = text.split_at(at);
    check_builders(a, b);
}

/// `parse` on arbitrary text agrees with the specification.
pub fn check_parse(text: &str) {
    let result = parse(text);
    let msg = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(msg)) => msg,
        _ => return assert!(result.is_err(), "{text:?} parsed as {result:?}"),
    };
    let Some(Value::String(event)) = msg.get("event") else {
        return assert!(result.is_err(), "no string event, parsed as {result:?}");
    };
    // The event's own fields: a string, or (optional ones) absent/null.
    let mistyped =
        |name: &str| !matches!(msg.get(name), None | Some(Value::Null | Value::String(_)));
    let field = |name: &str| msg.get(name).and_then(Value::as_str).map(str::to_string);
    let expected = match event.as_str() {
        "started" if mistyped("resume_token") => None,
        "started" => field("session_id").map(|session_id| ServerMessage::Started {
            session_id,
            resume_token: field("resume_token"),
        }),
        "mark" => field("name").map(ServerMessage::Mark),
        "clear" => Some(ServerMessage::Clear),
        "transfer" if mistyped("target") => None,
        "transfer" => field("reason").map(|reason| ServerMessage::Transfer {
            target: field("target"),
            reason,
        }),
        "end" => field("reason").map(|reason| ServerMessage::End { reason }),
        "error" if mistyped("message") => None,
        "error" => field("code").map(|code| ServerMessage::Error {
            code,
            message: field("message").unwrap_or_default(),
        }),
        other => {
            assert!(!KNOWN.contains(&other));
            Some(ServerMessage::Unknown(other.to_string()))
        }
    };
    match expected {
        Some(expected) => assert_eq!(result, Ok(expected), "{text:?}"),
        None => assert!(result.is_err(), "a {event} without its field: {result:?}"),
    }
}

fn object(text: &str) -> Map<String, Value> {
    match serde_json::from_str(text) {
        Ok(Value::Object(fields)) => fields,
        other => panic!("{text:?} is not a JSON object: {other:?}"),
    }
}

/// The builders' output is exactly the documented object, for any input.
pub fn check_builders(a: &str, b: &str) {
    let s = |v: &str| Value::String(v.to_string());
    for format in [PartnerFormat::L16, PartnerFormat::Pcmu] {
        let metadata = vec![(a.to_string(), b.to_string())];
        let msg = object(&start(b, format, &metadata));
        let mut expected = Map::new();
        expected.insert("event".into(), s("start"));
        expected.insert("call_id".into(), s(b));
        expected.insert("content-type".into(), s(format.content_type()));
        let mut meta = Map::new();
        meta.insert(a.to_string(), s(b));
        expected.insert("metadata".into(), Value::Object(meta));
        assert_eq!(msg, expected);
        let bare = object(&start(a, format, &[]));
        assert_eq!(bare.get("metadata"), None, "no metadata when there is none");
        assert_eq!(bare.get("call_id"), Some(&s(a)));
    }
    let played_msg = object(&played(a));
    assert_eq!(played_msg.len(), 2);
    assert_eq!(
        (&played_msg["event"], &played_msg["name"]),
        (&s("played"), &s(a))
    );
    for c in a.chars().take(8) {
        let msg = object(&dtmf(c));
        assert_eq!(msg.len(), 2);
        assert_eq!(
            (&msg["event"], &msg["digit"]),
            (&s("dtmf"), &s(&c.to_string()))
        );
    }
    assert_eq!(object(&stop()).len(), 1);
}

// ---- the stable smoke twin ----------------------------------------------

#[cfg(test)]
mod smoke {
    use super::*;
    use callgate_test_support::{Mutator, Rng};

    const ITERATIONS: usize = 4_000;
    const TOKENS: &[&str] = &[
        "\"event\"",
        "\"started\"",
        "\"mark\"",
        "\"clear\"",
        "\"transfer\"",
        "\"end\"",
        "\"error\"",
        "\"session_id\"",
        "\"name\"",
        "\"target\"",
        "\"reason\"",
        "\"code\"",
        "\"message\"",
        "null",
        "42",
    ];

    fn corpus() -> Vec<String> {
        [
            r#"{"event":"started","session_id":"7c4e0d2a-9f1b-4c55-8a0e-3d2f6b1a9e77"}"#,
            r#"{"event":"mark","name":"turn-1"}"#,
            r#"{"event":"clear"}"#,
            r#"{"event":"transfer","target":"+15550199","reason":"queue_full"}"#,
            r#"{"event":"transfer","reason":"draining"}"#,
            r#"{"event":"end","reason":"bot_ended:booking_confirmed"}"#,
            r#"{"event":"error","code":"bad_audio_frame","message":"audio frame of 3 bytes"}"#,
            r#"{"event":"resume","token":"x"}"#,
        ]
        .map(String::from)
        .to_vec()
    }

    #[test]
    fn mutated_server_messages_parse_as_the_specification_says() {
        let mut m = Mutator::new(0x9a27_10ad, &corpus(), TOKENS);
        m.run_bytes(ITERATIONS, check);
    }

    #[test]
    fn builders_hold_for_random_strings() {
        let mut rng = Rng::new(0x10ad_51a7);
        for _ in 0..1_000 {
            check_builders(&rng.text(30), &rng.text(60));
        }
    }
}
