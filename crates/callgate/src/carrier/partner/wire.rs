//! The partner WebSocket wire format (`GET /v1/partner/stream`), sans-IO:
//! parse what a partner sends, check audio frame sizes, build what callgate
//! sends. `docs/partner-protocol.md` is the specification a partner reads;
//! this module is its one implementation on the server side.
//!
//! The convention is Vonage's: one JSON text message (`start`, carrying the
//! content type) opens the session, then binary messages carry raw 16-bit
//! linear (or μ-law) audio in both directions, with a few JSON control
//! messages in between.
//!
//! What it never does: touch a socket, a clock or the session's state. Which
//! message is allowed when (`start` first and only once, the start deadline)
//! is the leg's decision; this module gives it the error values to report
//! ([`WireError::UnexpectedEvent`], [`WireError::StartTimeout`]) so that
//! every protocol error has one code and one close code, here.
//!
//! Only std, serde and serde_json (and thiserror for the error type): the
//! load tool has its own independent implementation, so a bug here cannot
//! be hidden by sharing it.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::text::prefix_within;

/// Longest text message accepted from a partner, in bytes.
pub const MAX_TEXT_BYTES: usize = 16 * 1024;
/// Longest `start.call_id`, in characters (it must have at least one).
pub const MAX_CALL_ID_CHARS: usize = 128;
/// Most entries in `start.metadata`.
pub const MAX_METADATA_ENTRIES: usize = 32;
/// Longest `start.metadata` key, in bytes.
pub const MAX_METADATA_KEY_BYTES: usize = 64;
/// Longest `start.metadata` value, in bytes.
pub const MAX_METADATA_VALUE_BYTES: usize = 512;
/// Unknown event names (and event names quoted in errors) are cut to this
/// many bytes, so a hostile name cannot grow a log line or a label.
pub const MAX_EVENT_NAME_BYTES: usize = 64;

/// WebSocket close code after a protocol error (RFC 6455 "policy violation").
pub const CLOSE_POLICY: u16 = 1008;
/// WebSocket close code after a malformed audio frame (RFC 6455 "invalid
/// frame payload data").
pub const CLOSE_BAD_DATA: u16 = 1007;

/// The audio format a partner negotiated in `start`; both directions use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireFormat {
    /// `audio/l16;rate=16000`: signed 16-bit little-endian PCM, 16 kHz, mono.
    L16k16,
    /// `audio/pcmu;rate=8000` (alias `audio/x-mulaw;rate=8000`): G.711
    /// μ-law, 8 kHz, mono.
    Pcmu8k,
}

impl WireFormat {
    /// The canonical content type (what the documentation shows).
    pub fn content_type(self) -> &'static str {
        match self {
            WireFormat::L16k16 => "audio/l16;rate=16000",
            WireFormat::Pcmu8k => "audio/pcmu;rate=8000",
        }
    }

    /// Bytes in one 20 ms frame: every binary message a partner sends.
    pub fn frame_bytes(self) -> usize {
        match self {
            WireFormat::L16k16 => 640,
            WireFormat::Pcmu8k => 160,
        }
    }

    /// Reads a content type: case-insensitive, spaces allowed around `;`
    /// and `=`, exactly one `rate` parameter and no other.
    fn from_content_type(content_type: &str) -> Option<WireFormat> {
        let mut parts = content_type.split(';').map(str::trim);
        let media_type = parts.next()?.to_ascii_lowercase();
        let (format, rate) = match media_type.as_str() {
            "audio/l16" => (WireFormat::L16k16, "16000"),
            "audio/pcmu" | "audio/x-mulaw" => (WireFormat::Pcmu8k, "8000"),
            _ => return None,
        };
        let mut rate_seen = false;
        for param in parts {
            let (name, value) = param.split_once('=')?;
            if !name.trim().eq_ignore_ascii_case("rate") || rate_seen || value.trim() != rate {
                return None;
            }
            rate_seen = true;
        }
        rate_seen.then_some(format)
    }
}

/// A partner's `start`: the session's first message.
#[derive(Debug, Clone, PartialEq)]
pub struct Start {
    /// The partner's own id of the call (1..=128 characters).
    pub call_id: String,
    pub format: WireFormat,
    /// At most [`MAX_METADATA_ENTRIES`], keys and values within their limits.
    pub metadata: BTreeMap<String, String>,
}

/// A text message from the partner, as callgate acts on it.
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    Start(Start),
    /// A DTMF digit: `0-9`, `*`, `#` or `A-D`.
    Dtmf(char),
    /// The partner's playout reached the mark of this name.
    Played(String),
    /// The caller hung up.
    Stop,
    /// An event type callgate does not know (ignored and counted); its name
    /// cut to [`MAX_EVENT_NAME_BYTES`].
    Unknown(String),
}

/// A partner protocol error. Each has a protocol code ([`WireError::code`])
/// sent in the `error` message, and the WebSocket close code that follows it
/// ([`WireError::close_code`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// A text message longer than [`MAX_TEXT_BYTES`].
    #[error("text message of {len} bytes exceeds the {MAX_TEXT_BYTES}-byte limit")]
    MessageTooLarge { len: usize },
    /// Not JSON, not an object, or no string `event`.
    #[error("invalid JSON: {detail}")]
    InvalidJson { detail: String },
    /// A known event whose fields are missing, of the wrong type or out of
    /// range (a `dtmf` digit outside `0-9*#A-D`, a `played` without a name).
    #[error("invalid `{event}` message: {detail}")]
    BadMessage { event: &'static str, detail: String },
    /// A `start` whose fields are missing, of the wrong type or too large.
    #[error("invalid start: {detail}")]
    BadStart { detail: String },
    /// A `start` with a content type callgate does not accept.
    #[error(
        "unsupported content-type {content_type:?}: use audio/l16;rate=16000 or audio/pcmu;rate=8000"
    )]
    UnsupportedFormat { content_type: String },
    /// A binary message that is not exactly one 20 ms frame.
    #[error("audio frame of {len} bytes: {expected} bytes (20 ms) required")]
    BadAudioFrame { len: usize, expected: usize },
    /// A message the session's state does not allow (audio, `dtmf`,
    /// `played` or `stop` before `start`; a second `start`). Raised by the
    /// leg, which knows the state.
    #[error("unexpected {event} message: {detail}")]
    UnexpectedEvent { event: String, detail: String },
    /// No `start` within the deadline. Raised by the leg.
    #[error("no start message within {after_ms} ms")]
    StartTimeout { after_ms: u64 },
}

impl WireError {
    /// The protocol error code of the `error` message.
    pub fn code(&self) -> &'static str {
        match self {
            WireError::MessageTooLarge { .. } => "message_too_large",
            WireError::InvalidJson { .. } | WireError::BadMessage { .. } => "invalid_json",
            WireError::BadStart { .. } => "bad_start",
            WireError::UnsupportedFormat { .. } => "unsupported_format",
            WireError::BadAudioFrame { .. } => "bad_audio_frame",
            WireError::UnexpectedEvent { .. } => "unexpected_event",
            WireError::StartTimeout { .. } => "start_timeout",
        }
    }

    /// The WebSocket close code sent after the `error` message.
    pub fn close_code(&self) -> u16 {
        match self {
            WireError::BadAudioFrame { .. } => CLOSE_BAD_DATA,
            _ => CLOSE_POLICY,
        }
    }

    /// The error for a message that arrived in the wrong state, naming it
    /// (cut to [`MAX_EVENT_NAME_BYTES`]).
    pub fn unexpected(event: &str, detail: impl Into<String>) -> WireError {
        WireError::UnexpectedEvent {
            event: prefix_within(event, MAX_EVENT_NAME_BYTES).to_string(),
            detail: detail.into(),
        }
    }
}

/// Parses one text message from a partner.
///
/// Unknown top-level fields are ignored, as are unknown event types
/// ([`Inbound::Unknown`]). Stateless: a second `start` parses as a `start`.
///
/// # Errors
/// [`WireError::MessageTooLarge`], [`WireError::InvalidJson`],
/// [`WireError::BadMessage`], [`WireError::BadStart`] or
/// [`WireError::UnsupportedFormat`]; never the frame or state errors.
pub fn parse_text(text: &str) -> Result<Inbound, WireError> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(WireError::MessageTooLarge { len: text.len() });
    }
    let invalid = |detail: String| WireError::InvalidJson { detail };
    let value: Value = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
    let Value::Object(msg) = value else {
        return Err(invalid(format!("expected an object, got {}", kind(&value))));
    };
    let event = match msg.get("event") {
        Some(Value::String(event)) => event.as_str(),
        Some(other) => return Err(invalid(format!("`event` is {}", kind(other)))),
        None => return Err(invalid("no `event` field".into())),
    };
    match event {
        "start" => parse_start(&msg).map(Inbound::Start),
        "dtmf" => parse_dtmf(&msg).map(Inbound::Dtmf),
        "played" => string_field(&msg, "name")
            .map(|name| Inbound::Played(name.to_string()))
            .map_err(|detail| WireError::BadMessage {
                event: "played",
                detail,
            }),
        "stop" => Ok(Inbound::Stop),
        other => Ok(Inbound::Unknown(
            prefix_within(other, MAX_EVENT_NAME_BYTES).to_string(),
        )),
    }
}

/// Checks that a binary message from a partner is exactly one 20 ms frame.
///
/// # Errors
/// [`WireError::BadAudioFrame`] for any other length.
pub fn check_frame(format: WireFormat, len: usize) -> Result<(), WireError> {
    let expected = format.frame_bytes();
    if len == expected {
        Ok(())
    } else {
        Err(WireError::BadAudioFrame { len, expected })
    }
}

fn parse_start(msg: &Map<String, Value>) -> Result<Start, WireError> {
    let bad = |detail: String| WireError::BadStart { detail };
    let call_id = string_field(msg, "call_id").map_err(bad)?;
    let chars = call_id.chars().count();
    if !(1..=MAX_CALL_ID_CHARS).contains(&chars) {
        return Err(bad(format!(
            "`call_id` has {chars} characters: 1 to {MAX_CALL_ID_CHARS} required"
        )));
    }
    let content_type = string_field(msg, "content-type").map_err(bad)?;
    let format = WireFormat::from_content_type(content_type).ok_or_else(|| {
        WireError::UnsupportedFormat {
            content_type: prefix_within(content_type, MAX_EVENT_NAME_BYTES).to_string(),
        }
    })?;
    let metadata = match msg.get("metadata") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(entries)) => parse_metadata(entries).map_err(bad)?,
        Some(other) => return Err(bad(format!("`metadata` is {}", kind(other)))),
    };
    Ok(Start {
        call_id: call_id.to_string(),
        format,
        metadata,
    })
}

fn parse_metadata(entries: &Map<String, Value>) -> Result<BTreeMap<String, String>, String> {
    if entries.len() > MAX_METADATA_ENTRIES {
        return Err(format!(
            "`metadata` has {} entries: at most {MAX_METADATA_ENTRIES} allowed",
            entries.len()
        ));
    }
    let mut out = BTreeMap::new();
    for (key, value) in entries {
        let shown = prefix_within(key, MAX_METADATA_KEY_BYTES);
        if key.len() > MAX_METADATA_KEY_BYTES {
            return Err(format!(
                "`metadata` key {shown:?}… is {} bytes: at most {MAX_METADATA_KEY_BYTES} allowed",
                key.len()
            ));
        }
        let Value::String(value) = value else {
            return Err(format!(
                "`metadata.{shown}` is {}: values must be strings",
                kind(value)
            ));
        };
        if value.len() > MAX_METADATA_VALUE_BYTES {
            return Err(format!(
                "`metadata.{shown}` is {} bytes: at most {MAX_METADATA_VALUE_BYTES} allowed",
                value.len()
            ));
        }
        out.insert(key.clone(), value.clone());
    }
    Ok(out)
}

fn parse_dtmf(msg: &Map<String, Value>) -> Result<char, WireError> {
    let bad = |detail: String| WireError::BadMessage {
        event: "dtmf",
        detail,
    };
    let digit = string_field(msg, "digit").map_err(bad)?;
    let mut chars = digit.chars();
    match (chars.next(), chars.next()) {
        (Some(c @ ('0'..='9' | '*' | '#' | 'A'..='D')), None) => Ok(c),
        _ => Err(bad(format!(
            "`digit` {:?} is not one of 0-9 * # A-D",
            prefix_within(digit, MAX_EVENT_NAME_BYTES)
        ))),
    }
}

/// A required string field, or why not.
fn string_field<'a>(msg: &'a Map<String, Value>, name: &str) -> Result<&'a str, String> {
    match msg.get(name) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(format!("`{name}` is {}: a string is required", kind(other))),
        None => Err(format!("no `{name}` field")),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

// ---- builders (callgate → partner) ------------------------------------

#[derive(Serialize)]
struct Outbound<'a> {
    event: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resume_token: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    target: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
}

impl<'a> Outbound<'a> {
    fn new(event: &'static str) -> Self {
        Outbound {
            event,
            session_id: None,
            resume_token: None,
            name: None,
            target: None,
            reason: None,
            code: None,
            message: None,
        }
    }

    fn to_text(&self) -> String {
        // Serialising a struct of strings into a String cannot fail (no
        // I/O, no map keys); `event` is a plain ASCII literal, so the
        // fallback is valid JSON too.
        serde_json::to_string(self).unwrap_or_else(|_| format!(r#"{{"event":"{}"}}"#, self.event))
    }
}

/// `started`: the start was accepted; `session_id` is callgate's call id.
pub fn started(session_id: &str) -> String {
    Outbound {
        session_id: Some(session_id),
        ..Outbound::new("started")
    }
    .to_text()
}

/// `started` on a resumable call: also the token with which a new
/// connection may take the call over (single-use; a resumed connection's
/// `started` carries the next one).
pub fn started_resumable(session_id: &str, resume_token: &str) -> String {
    Outbound {
        session_id: Some(session_id),
        resume_token: Some(resume_token),
        ..Outbound::new("started")
    }
    .to_text()
}

/// `superseded`: a new connection resumed this call; this one is closed
/// (1000) right after and must stop sending.
pub fn superseded(reason: &str) -> String {
    Outbound {
        reason: Some(reason),
        ..Outbound::new("superseded")
    }
    .to_text()
}

/// `mark`: to be echoed as `played` when the audio sent before it has played.
pub fn mark(name: &str) -> String {
    Outbound {
        name: Some(name),
        ..Outbound::new("mark")
    }
    .to_text()
}

/// `clear`: drop all audio buffered but not yet played (barge-in).
pub fn clear() -> String {
    Outbound::new("clear").to_text()
}

/// `transfer`: hand the caller to a human; close 1000 follows.
pub fn transfer(target: &str, reason: &str) -> String {
    Outbound {
        target: Some(target),
        reason: Some(reason),
        ..Outbound::new("transfer")
    }
    .to_text()
}

/// `end`: the call is over; close 1000 follows.
pub fn end(reason: &str) -> String {
    Outbound {
        reason: Some(reason),
        ..Outbound::new("end")
    }
    .to_text()
}

/// `error`: a protocol error (see [`WireError::code`]); its close follows.
pub fn error(code: &str, message: &str) -> String {
    Outbound {
        code: Some(code),
        message: Some(message),
        ..Outbound::new("error")
    }
    .to_text()
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
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
        let underscore =
            json!({"event":"start","call_id":"a","content_type":"audio/l16;rate=16000"});
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
                len: MAX_TEXT_BYTES + 1
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
                WireError::MessageTooLarge { len: 1 },
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
}
