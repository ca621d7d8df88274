//! The partner codec's unit tests.

use super::*;
use serde_json::json;

fn start_msg(content_type: &str) -> Value {
    json!({"event":"start","call_id":"abc-1","content-type":content_type})
}

fn parse_value(v: &Value) -> Result<Inbound, WireError> {
    parse_text(&v.to_string())
}

fn code_of(v: &Value) -> &'static str {
    parse_value(v).expect_err("must be refused").code()
}

#[test]
fn a_full_start_parses_with_its_metadata_and_unknown_fields_ignored() {
    let msg = json!({
        "event": "start",
        "call_id": "partner-call-42",
        "content-type": "audio/l16;rate=16000",
        "metadata": {"tenant": "acme", "caller": "+15550100"},
        "future_field": {"nested": [1, 2, 3]}
    });
    let Ok(Inbound::Start(start)) = parse_value(&msg) else {
        panic!("{:?}", parse_value(&msg));
    };
    assert_eq!(start.call_id, "partner-call-42");
    assert_eq!(start.format, WireFormat::L16k16);
    assert_eq!(
        start.metadata.into_iter().collect::<Vec<_>>(),
        [
            ("caller".to_string(), "+15550100".to_string()),
            ("tenant".to_string(), "acme".to_string())
        ]
    );
}

#[test]
fn metadata_is_optional_and_null_means_none() {
    for msg in [
        start_msg("audio/pcmu;rate=8000"),
        json!({"event":"start","call_id":"x","content-type":"audio/pcmu;rate=8000","metadata":null}),
        json!({"event":"start","call_id":"x","content-type":"audio/pcmu;rate=8000","metadata":{}}),
    ] {
        let Ok(Inbound::Start(start)) = parse_value(&msg) else {
            panic!("{msg}");
        };
        assert!(start.metadata.is_empty());
        assert_eq!(start.format, WireFormat::Pcmu8k);
    }
}

#[test]
fn content_types_match_case_insensitively_with_spaces() {
    let accepted = [
        ("audio/l16;rate=16000", WireFormat::L16k16),
        ("AUDIO/L16;RATE=16000", WireFormat::L16k16),
        ("audio/L16 ; rate = 16000", WireFormat::L16k16),
        ("  audio/l16;rate=16000  ", WireFormat::L16k16),
        ("audio/pcmu;rate=8000", WireFormat::Pcmu8k),
        ("Audio/PCMU; Rate=8000", WireFormat::Pcmu8k),
        ("audio/x-mulaw;rate=8000", WireFormat::Pcmu8k),
        ("audio/X-MULAW ;rate= 8000", WireFormat::Pcmu8k),
    ];
    for (ct, format) in accepted {
        match parse_value(&start_msg(ct)) {
            Ok(Inbound::Start(s)) => assert_eq!(s.format, format, "{ct}"),
            other => panic!("{ct:?}: {other:?}"),
        }
    }
    let refused = [
        "audio/l16",
        "audio/l16;rate=8000",
        "audio/l16;rate=16000;rate=16000",
        "audio/l16;rate=16000;channels=1",
        "audio/l16;rate=16000;",
        "audio/l16;rate",
        "audio/l16;rate=+16000",
        "audio/l16;rate=16000.0",
        "audio/pcmu;rate=16000",
        "audio/pcma;rate=8000",
        "audio/x-mulaw",
        "audio/l16 rate=16000",
        "audio/opus;rate=48000",
        "",
        "audio/l16;bitrate=16000",
    ];
    for ct in refused {
        let err = parse_value(&start_msg(ct)).expect_err(ct);
        assert_eq!(err.code(), "unsupported_format", "{ct:?}");
        assert_eq!(err.close_code(), 1008);
    }
}

#[test]
fn formats_name_their_canonical_content_type_and_frame_size() {
    for (format, bytes) in [(WireFormat::L16k16, 640), (WireFormat::Pcmu8k, 160)] {
        assert_eq!(format.frame_bytes(), bytes);
        assert_eq!(
            WireFormat::from_content_type(format.content_type()),
            Some(format)
        );
    }
    assert_eq!(WireFormat::L16k16.content_type(), "audio/l16;rate=16000");
    assert_eq!(WireFormat::Pcmu8k.content_type(), "audio/pcmu;rate=8000");
}

#[test]
fn call_id_must_be_one_to_128_characters() {
    let with_id =
        |id: Value| json!({"event":"start","call_id":id,"content-type":"audio/l16;rate=16000"});
    assert!(matches!(
        parse_value(&with_id(json!("a"))),
        Ok(Inbound::Start(_))
    ));
    // 128 characters of 4 bytes each: the limit is characters.
    let emoji = "\u{1F600}".repeat(128);
    match parse_value(&with_id(json!(emoji))) {
        Ok(Inbound::Start(s)) => assert_eq!(s.call_id, emoji),
        other => panic!("{other:?}"),
    }
    for bad in [
        json!(""),
        json!("x".repeat(129)),
        json!(42),
        json!(null),
        json!(["a"]),
    ] {
        assert_eq!(code_of(&with_id(bad.clone())), "bad_start", "{bad}");
    }
    let missing = json!({"event":"start","content-type":"audio/l16;rate=16000"});
    assert_eq!(code_of(&missing), "bad_start");
}

#[test]
fn content_type_must_be_a_string() {
    let missing = json!({"event":"start","call_id":"a"});
    assert_eq!(code_of(&missing), "bad_start");
    let number = json!({"event":"start","call_id":"a","content-type":16000});
    assert_eq!(code_of(&number), "bad_start");
    // The underscore spelling is not the field.
    let underscore = json!({"event":"start","call_id":"a","content_type":"audio/l16;rate=16000"});
    assert_eq!(code_of(&underscore), "bad_start");
}

#[test]
fn metadata_limits_are_enforced() {
    let with = |metadata: Value| json!({"event":"start","call_id":"a","content-type":"audio/l16;rate=16000","metadata":metadata});
    let entries = |n: usize| {
        Value::Object(
            (0..n)
                .map(|i| (format!("k{i}"), Value::String(i.to_string())))
                .collect(),
        )
    };
    assert!(
        matches!(parse_value(&with(entries(32))), Ok(Inbound::Start(s)) if s.metadata.len() == 32)
    );
    assert_eq!(code_of(&with(entries(33))), "bad_start");
    let key64 = "k".repeat(64);
    let value512 = "v".repeat(512);
    assert!(matches!(
        parse_value(&with(json!({ key64.clone(): value512.clone() }))),
        Ok(Inbound::Start(_))
    ));
    assert_eq!(code_of(&with(json!({ "k".repeat(65): "v" }))), "bad_start");
    assert_eq!(code_of(&with(json!({ "k": "v".repeat(513) }))), "bad_start");
    // Limits are bytes: 22 three-byte characters are 66 bytes.
    assert_eq!(code_of(&with(json!({ "€".repeat(22): "v" }))), "bad_start");
    for bad in [
        json!({"k": 1}),
        json!({"k": null}),
        json!({"k": {"x": "y"}}),
    ] {
        assert_eq!(code_of(&with(bad.clone())), "bad_start", "{bad}");
    }
    for bad in [json!("k=v"), json!(["k", "v"]), json!(3)] {
        assert_eq!(code_of(&with(bad.clone())), "bad_start", "{bad}");
    }
}

#[test]
fn dtmf_digits_are_checked() {
    for digit in "0123456789*#ABCD".chars() {
        let msg = json!({"event":"dtmf","digit":digit.to_string()});
        assert_eq!(parse_value(&msg), Ok(Inbound::Dtmf(digit)));
    }
    for bad in [
        json!("a"),
        json!("E"),
        json!("12"),
        json!(""),
        json!(" 5"),
        json!(5),
        json!(null),
    ] {
        let msg = json!({"event":"dtmf","digit":bad});
        let err = parse_value(&msg).expect_err("bad digit");
        assert_eq!(
            (err.code(), err.close_code()),
            ("invalid_json", 1008),
            "{msg}"
        );
    }
    assert_eq!(code_of(&json!({"event":"dtmf"})), "invalid_json");
}

#[test]
fn played_names_its_mark_and_stop_needs_nothing() {
    assert_eq!(
        parse_text(r#"{"event":"played","name":"turn-3","extra":true}"#),
        Ok(Inbound::Played("turn-3".into()))
    );
    assert_eq!(
        parse_text(r#"{"event":"played","name":""}"#),
        Ok(Inbound::Played(String::new()))
    );
    assert_eq!(code_of(&json!({"event":"played"})), "invalid_json");
    assert_eq!(code_of(&json!({"event":"played","name":7})), "invalid_json");
    assert_eq!(parse_text(r#"{"event":"stop"}"#), Ok(Inbound::Stop));
    assert_eq!(
        parse_text(r#"{"event":"stop","reason":"hangup"}"#),
        Ok(Inbound::Stop)
    );
}

#[test]
fn unknown_events_are_ignored_with_their_name_truncated() {
    assert_eq!(
        parse_text(r#"{"event":"ping","id":1}"#),
        Ok(Inbound::Unknown("ping".into()))
    );
    // Event names are case-sensitive.
    assert_eq!(
        parse_text(r#"{"event":"START"}"#),
        Ok(Inbound::Unknown("START".into()))
    );
    let long = "é".repeat(40); // 80 bytes
    let Ok(Inbound::Unknown(name)) = parse_value(&json!({ "event": long })) else {
        panic!("unknown event not ignored");
    };
    assert_eq!(name, "é".repeat(32));
    assert!(name.len() <= MAX_EVENT_NAME_BYTES);
}

#[test]
fn malformed_json_and_shapes_are_invalid_json() {
    for text in [
        "",
        "not json",
        "{",
        r#"{"event":"start""#,
        "[]",
        "\"start\"",
        "null",
        "42",
        "{}",
        r#"{"event":1}"#,
        r#"{"event":null}"#,
        r#"{"event":["start"]}"#,
        r#"{"Event":"stop"}"#,
    ] {
        let err = parse_text(text).expect_err(text);
        assert_eq!(
            (err.code(), err.close_code()),
            ("invalid_json", 1008),
            "{text}"
        );
    }
}

#[test]
fn text_over_16_kib_is_too_large_before_parsing() {
    let pad = " ".repeat(MAX_TEXT_BYTES - r#"{"event":"stop"}"#.len());
    let exact = format!(r#"{{"event":"stop"}}{pad}"#);
    assert_eq!(exact.len(), MAX_TEXT_BYTES);
    assert_eq!(parse_text(&exact), Ok(Inbound::Stop));
    let over = format!("{exact} ");
    assert_eq!(
        parse_text(&over),
        Err(WireError::MessageTooLarge {
            kind: "text",
            len: MAX_TEXT_BYTES + 1,
            max: MAX_TEXT_BYTES,
        })
    );
    // Even garbage is only measured.
    let err = parse_text(&"x".repeat(20_000)).expect_err("too large");
    assert_eq!((err.code(), err.close_code()), ("message_too_large", 1008));
}

#[test]
fn frames_must_be_exactly_20_ms() {
    assert_eq!(check_frame(WireFormat::L16k16, 640), Ok(()));
    assert_eq!(check_frame(WireFormat::Pcmu8k, 160), Ok(()));
    for (format, len) in [
        (WireFormat::L16k16, 0),
        (WireFormat::L16k16, 639),
        (WireFormat::L16k16, 641),
        (WireFormat::L16k16, 160),
        (WireFormat::L16k16, 1_280),
        (WireFormat::Pcmu8k, 640),
        (WireFormat::Pcmu8k, 159),
        (WireFormat::Pcmu8k, 320),
    ] {
        let err = check_frame(format, len).expect_err("wrong size");
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

#[test]
fn every_error_has_its_code_and_close_code() {
    let cases = [
        (
            WireError::MessageTooLarge {
                kind: "binary",
                len: 65_536,
                max: 16_384,
            },
            "message_too_large",
            1008,
        ),
        (
            WireError::InvalidJson { detail: "x".into() },
            "invalid_json",
            1008,
        ),
        (
            WireError::BadMessage {
                event: "dtmf",
                detail: "x".into(),
            },
            "invalid_json",
            1008,
        ),
        (
            WireError::BadStart { detail: "x".into() },
            "bad_start",
            1008,
        ),
        (
            WireError::UnsupportedFormat {
                content_type: "x".into(),
            },
            "unsupported_format",
            1008,
        ),
        (
            WireError::BadAudioFrame {
                len: 1,
                expected: 640,
            },
            "bad_audio_frame",
            1007,
        ),
        (
            WireError::unexpected("start", "a second start"),
            "unexpected_event",
            1008,
        ),
        (
            WireError::StartTimeout { after_ms: 5_000 },
            "start_timeout",
            1008,
        ),
    ];
    for (err, code, close) in cases {
        assert_eq!((err.code(), err.close_code()), (code, close), "{err:?}");
        assert!(!err.to_string().is_empty());
    }
    assert_eq!(
        WireError::StartTimeout { after_ms: 5_000 }.to_string(),
        "no start message within 5000 ms"
    );
    let WireError::UnexpectedEvent { event, .. } = WireError::unexpected(&"x".repeat(100), "")
    else {
        unreachable!()
    };
    assert_eq!(event.len(), MAX_EVENT_NAME_BYTES);
}

#[test]
fn a_second_start_is_still_a_start_here() {
    // Stateless: the leg turns it into `unexpected_event`.
    let msg = start_msg("audio/l16;rate=16000");
    assert!(matches!(parse_value(&msg), Ok(Inbound::Start(_))));
    assert!(matches!(parse_value(&msg), Ok(Inbound::Start(_))));
}

#[test]
fn builders_produce_the_documented_json() {
    let v = |s: String| serde_json::from_str::<Value>(&s).unwrap();
    assert_eq!(
        started("7c4e0d2a-9f1b-4c55-8a0e-3d2f6b1a9e77"),
        r#"{"event":"started","session_id":"7c4e0d2a-9f1b-4c55-8a0e-3d2f6b1a9e77"}"#
    );
    assert_eq!(mark("turn-1"), r#"{"event":"mark","name":"turn-1"}"#);
    assert_eq!(clear(), r#"{"event":"clear"}"#);
    assert_eq!(
        transfer("+15550199", "queue_full"),
        r#"{"event":"transfer","target":"+15550199","reason":"queue_full"}"#
    );
    assert_eq!(
        end("max_duration"),
        r#"{"event":"end","reason":"max_duration"}"#
    );
    assert_eq!(
        v(error("bad_start", "no `call_id` field")),
        json!({"event":"error","code":"bad_start","message":"no `call_id` field"})
    );
}

#[test]
fn builders_escape_any_string() {
    let nasty = "quote \" backslash \\ newline \n nul \u{0} emoji \u{1F600} </script>";
    for (text, field) in [
        (started(nasty), "session_id"),
        (mark(nasty), "name"),
        (transfer(nasty, nasty), "target"),
        (transfer(nasty, nasty), "reason"),
        (end(nasty), "reason"),
        (error(nasty, nasty), "code"),
        (error(nasty, nasty), "message"),
    ] {
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v[field], nasty, "{text}");
    }
}
