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
    /// A message over its limit: a text message longer than
    /// [`MAX_TEXT_BYTES`] (or `partner.max_message_bytes`), a binary one
    /// longer than that limit, or one the WebSocket layer refused unread.
    #[error("{kind} message of {len} bytes exceeds the {max}-byte limit")]
    MessageTooLarge {
        /// `text`, `binary` or `WebSocket` (refused before it was read whole).
        kind: &'static str,
        len: usize,
        max: usize,
    },
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
        return Err(WireError::MessageTooLarge {
            kind: "text",
            len: text.len(),
            max: MAX_TEXT_BYTES,
        });
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
mod tests;
