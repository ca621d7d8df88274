//! Twilio Media Streams wire format (bidirectional `<Connect><Stream>`).
//!
//! Sans-IO: [`parse`] turns one text frame from the carrier into an
//! [`Inbound`] event or a [`WireError`] saying exactly what was wrong; the
//! `*_msg` functions build our outbound frames. Only the Twilio carrier's
//! home (`crate::carrier::twilio`) knows Twilio JSON; the call actor sees
//! domain events.
//!
//! Leniency rules (docs/protocols.md §1): counters may be strings or numbers,
//! unknown events and unknown fields are ignored, `streamSid` is also
//! accepted as `stream_sid`.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Deserializer};

/// One event from the carrier.
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    Connected,
    Start(Start),
    Media(Media),
    Dtmf {
        digit: String,
    },
    Mark {
        name: String,
    },
    Stop,
    /// An event type we do not handle; ignored by the caller (counted).
    Unknown {
        event: String,
    },
}

/// The `start` event.
#[derive(Debug, Clone, PartialEq)]
pub struct Start {
    pub stream_sid: String,
    pub account_sid: String,
    pub call_sid: String,
    pub custom_parameters: BTreeMap<String, String>,
    pub media_format: MediaFormat,
}

/// `start.mediaFormat`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MediaFormat {
    pub encoding: String,
    #[serde(deserialize_with = "lenient_u64")]
    pub sample_rate: u64,
    #[serde(default = "one", deserialize_with = "lenient_u64")]
    pub channels: u64,
}

fn one() -> u64 {
    1
}

impl MediaFormat {
    /// Whether this is the only format Twilio streams: μ-law, 8 kHz, mono.
    pub fn is_twilio_mulaw(&self) -> bool {
        self.encoding.eq_ignore_ascii_case("audio/x-mulaw")
            && self.sample_rate == 8_000
            && self.channels == 1
    }
}

/// A `media` event, payload decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Media {
    pub track: Option<String>,
    pub chunk: Option<u64>,
    pub timestamp_ms: Option<u64>,
    pub payload: Vec<u8>,
}

/// Why a carrier frame was refused. Each is a protocol violation by the
/// carrier (source: caller side) and closes that one stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    #[error("invalid JSON: {0}")]
    InvalidJson(String),
    #[error("`{event}` event without its `{field}` object")]
    MissingBody { event: String, field: &'static str },
    #[error("media payload is not valid base64")]
    InvalidBase64,
    #[error("media payload of {len} bytes exceeds the {max}-byte limit")]
    PayloadTooLarge { len: usize, max: usize },
    /// A message over `twilio.max_message_bytes` (`kind` is `text`,
    /// `binary`, or `WebSocket` when refused before it was read whole).
    #[error("{kind} message of {len} bytes exceeds the {max}-byte limit")]
    MessageTooLarge {
        kind: &'static str,
        len: usize,
        max: usize,
    },
    #[error("binary frame (media streams send JSON text)")]
    BinaryFrame,
}

impl WireError {
    /// A low-cardinality label for metrics and the ledger.
    pub fn kind(&self) -> &'static str {
        match self {
            WireError::InvalidJson(_) => "invalid_json",
            WireError::MissingBody { .. } => "missing_body",
            WireError::InvalidBase64 => "invalid_base64",
            WireError::PayloadTooLarge { .. } => "payload_too_large",
            WireError::MessageTooLarge { .. } => "message_too_large",
            WireError::BinaryFrame => "binary_frame",
        }
    }
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    event: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    media: Option<MediaBody<'a>>,
    start: Option<StartBody>,
    mark: Option<NameBody>,
    dtmf: Option<DtmfBody>,
}

#[derive(Deserialize)]
struct MediaBody<'a> {
    track: Option<String>,
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    chunk: Option<u64>,
    #[serde(default, deserialize_with = "lenient_opt_u64")]
    timestamp: Option<u64>,
    #[serde(borrow)]
    payload: std::borrow::Cow<'a, str>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StartBody {
    #[serde(alias = "stream_sid")]
    stream_sid: String,
    #[serde(default)]
    account_sid: String,
    #[serde(default)]
    call_sid: String,
    #[serde(default)]
    custom_parameters: BTreeMap<String, serde_json::Value>,
    media_format: MediaFormat,
}

#[derive(Deserialize)]
struct NameBody {
    name: String,
}

#[derive(Deserialize)]
struct DtmfBody {
    digit: String,
}

/// Parses one text frame from the carrier.
pub fn parse(text: &str, max_payload: usize) -> Result<Inbound, WireError> {
    parse_with(text, max_payload, Audio::Decode)
}

/// Whether `media` payloads are decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audio {
    Decode,
    /// The audio is not used (the call is queued or being refused): only
    /// its size is checked, and `Media.payload` is left empty.
    Discard,
}

/// Parses one text frame, decoding or discarding audio.
pub fn parse_with(text: &str, max_payload: usize, audio: Audio) -> Result<Inbound, WireError> {
    let env: Envelope<'_> =
        serde_json::from_str(text).map_err(|e| WireError::InvalidJson(e.to_string()))?;
    let missing = |field| WireError::MissingBody {
        event: env.event.to_string(),
        field,
    };
    Ok(match env.event.as_ref() {
        "connected" => Inbound::Connected,
        "start" => Inbound::Start(start_from(env.start.ok_or_else(|| missing("start"))?)),
        "media" => Inbound::Media(media_from(
            env.media.ok_or_else(|| missing("media"))?,
            max_payload,
            audio,
        )?),
        "dtmf" => Inbound::Dtmf {
            digit: env.dtmf.ok_or_else(|| missing("dtmf"))?.digit,
        },
        "mark" => Inbound::Mark {
            name: env.mark.ok_or_else(|| missing("mark"))?.name,
        },
        "stop" => Inbound::Stop,
        other => Inbound::Unknown {
            event: other.chars().take(32).collect(),
        },
    })
}

fn start_from(b: StartBody) -> Start {
    let custom_parameters = b
        .custom_parameters
        .into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => (k, s),
            other => (k, other.to_string()),
        })
        .collect();
    Start {
        stream_sid: b.stream_sid,
        account_sid: b.account_sid,
        call_sid: b.call_sid,
        custom_parameters,
        media_format: b.media_format,
    }
}

fn media_from(b: MediaBody<'_>, max_payload: usize, audio: Audio) -> Result<Media, WireError> {
    // base64 expands 3 bytes to 4 characters: refuse before decoding.
    let max_chars = max_payload.div_ceil(3) * 4;
    if b.payload.len() > max_chars {
        // Rounded up so a malformed length never reports `len <= max`.
        return Err(WireError::PayloadTooLarge {
            len: b.payload.len().div_ceil(4) * 3,
            max: max_payload,
        });
    }
    let payload = match audio {
        Audio::Decode => B64
            .decode(b.payload.as_bytes())
            .map_err(|_| WireError::InvalidBase64)?,
        Audio::Discard => Vec::new(),
    };
    if payload.len() > max_payload {
        return Err(WireError::PayloadTooLarge {
            len: payload.len(),
            max: max_payload,
        });
    }
    Ok(Media {
        track: b.track,
        chunk: b.chunk,
        timestamp_ms: b.timestamp,
        payload,
    })
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Num {
    N(u64),
    S(String),
}

fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match Num::deserialize(d)? {
        Num::N(n) => Ok(n),
        Num::S(s) => s.trim().parse().map_err(serde::de::Error::custom),
    }
}

fn lenient_opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Ok(match Option::<Num>::deserialize(d)? {
        None => None,
        Some(Num::N(n)) => Some(n),
        Some(Num::S(s)) => s.trim().parse().ok(),
    })
}

/// Builds the outbound frames of one stream. The stream id comes from the
/// carrier, so it is JSON-escaped once here; media frames — fifty a second
/// per call — are then assembled without building a JSON tree.
#[derive(Debug, Clone)]
pub struct Outbound {
    /// The stream id as a JSON string literal, quotes included.
    sid: String,
}

impl Outbound {
    pub fn new(stream_sid: &str) -> Self {
        let sid = serde_json::to_string(stream_sid).unwrap_or_else(|_| "\"\"".to_string());
        Outbound { sid }
    }

    /// `media` frame carrying μ-law audio to play.
    pub fn media(&self, payload: &[u8]) -> String {
        let mut s = String::with_capacity(60 + self.sid.len() + payload.len().div_ceil(3) * 4);
        s.push_str(r#"{"event":"media","streamSid":"#);
        s.push_str(&self.sid);
        s.push_str(r#","media":{"payload":""#);
        B64.encode_string(payload, &mut s);
        s.push_str("\"}}");
        s
    }

    /// `mark` frame: echoed by the carrier once the audio before it has played.
    pub fn mark(&self, name: &str) -> String {
        let name = serde_json::to_string(name).unwrap_or_else(|_| "\"\"".to_string());
        format!(
            r#"{{"event":"mark","streamSid":{},"mark":{{"name":{name}}}}}"#,
            self.sid
        )
    }

    /// `clear` frame: drop all audio buffered at the carrier (barge-in).
    pub fn clear(&self) -> String {
        format!(r#"{{"event":"clear","streamSid":{}}}"#, self.sid)
    }
}

/// `media` frame carrying μ-law audio to play.
pub fn media_msg(stream_sid: &str, payload: &[u8]) -> String {
    Outbound::new(stream_sid).media(payload)
}

/// `mark` frame: echoed by the carrier once the audio before it has played.
pub fn mark_msg(stream_sid: &str, name: &str) -> String {
    Outbound::new(stream_sid).mark(name)
}

/// `clear` frame: drop all audio buffered at the carrier (barge-in).
pub fn clear_msg(stream_sid: &str) -> String {
    Outbound::new(stream_sid).clear()
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;

    const START: &str = r#"{"event":"start","sequenceNumber":"1","streamSid":"MZ1","start":{"streamSid":"MZ1","accountSid":"AC1","callSid":"CA1","tracks":["inbound"],"customParameters":{"tenant":"acme","n":3},"mediaFormat":{"encoding":"audio/x-mulaw","sampleRate":8000,"channels":1}}}"#;

    #[test]
    fn parses_the_documented_sequence() {
        assert_eq!(
            parse(
                r#"{"event":"connected","protocol":"Call","version":"1.0.0"}"#,
                160
            ),
            Ok(Inbound::Connected)
        );
        let Ok(Inbound::Start(s)) = parse(START, 160) else {
            panic!()
        };
        assert_eq!((s.stream_sid.as_str(), s.call_sid.as_str()), ("MZ1", "CA1"));
        assert_eq!(s.custom_parameters["tenant"], "acme");
        assert_eq!(s.custom_parameters["n"], "3");
        assert!(s.media_format.is_twilio_mulaw());
        let media = format!(
            r#"{{"event":"media","sequenceNumber":"2","streamSid":"MZ1","media":{{"track":"inbound","chunk":"1","timestamp":"5","payload":"{}"}}}}"#,
            B64.encode([0xFFu8; 160])
        );
        let Ok(Inbound::Media(m)) = parse(&media, 160) else {
            panic!()
        };
        assert_eq!(
            (m.chunk, m.timestamp_ms, m.payload.len()),
            (Some(1), Some(5), 160)
        );
        assert_eq!(
            parse(
                r#"{"event":"mark","sequenceNumber":"9","streamSid":"MZ1","mark":{"name":"turn-1"}}"#,
                160
            ),
            Ok(Inbound::Mark {
                name: "turn-1".into()
            })
        );
        assert_eq!(
            parse(
                r#"{"event":"dtmf","streamSid":"MZ1","dtmf":{"track":"inbound_track","digit":"5"}}"#,
                160
            ),
            Ok(Inbound::Dtmf { digit: "5".into() })
        );
        assert_eq!(
            parse(
                r#"{"event":"stop","stop":{"accountSid":"AC1","callSid":"CA1"}}"#,
                160
            ),
            Ok(Inbound::Stop)
        );
    }

    #[test]
    fn numbers_may_be_numbers_and_unknown_events_are_kept_apart() {
        let m = r#"{"event":"media","media":{"chunk":7,"timestamp":140,"payload":""}}"#;
        let Ok(Inbound::Media(m)) = parse(m, 160) else {
            panic!()
        };
        assert_eq!((m.chunk, m.timestamp_ms), (Some(7), Some(140)));
        assert_eq!(
            parse(r#"{"event":"hologram","x":1}"#, 160),
            Ok(Inbound::Unknown {
                event: "hologram".into()
            })
        );
    }

    #[test]
    fn bad_frames_say_what_is_wrong() {
        assert!(matches!(
            parse("{nope", 160),
            Err(WireError::InvalidJson(_))
        ));
        assert!(matches!(
            parse(r#"{"media":{}}"#, 160),
            Err(WireError::InvalidJson(_))
        ));
        assert!(matches!(
            parse(r#"{"event":"media"}"#, 160),
            Err(WireError::MissingBody { field: "media", .. })
        ));
        assert_eq!(
            parse(r#"{"event":"media","media":{"payload":"!!!!"}}"#, 160),
            Err(WireError::InvalidBase64)
        );
        let big = format!(
            r#"{{"event":"media","media":{{"payload":"{}"}}}}"#,
            B64.encode([0u8; 2_000])
        );
        assert!(matches!(
            parse(&big, 1_600),
            Err(WireError::PayloadTooLarge { .. })
        ));
    }

    #[test]
    fn outbound_frames_have_twilios_shape() {
        let v: serde_json::Value = serde_json::from_str(&media_msg("MZ1", &[0xFF; 160])).unwrap();
        assert_eq!(v["event"], "media");
        assert_eq!(v["streamSid"], "MZ1");
        assert_eq!(v["media"]["payload"].as_str().unwrap().len(), 216);
        let v: serde_json::Value = serde_json::from_str(&mark_msg("MZ1", "turn-3")).unwrap();
        assert_eq!(v["mark"]["name"], "turn-3");
        let v: serde_json::Value = serde_json::from_str(&clear_msg("MZ1")).unwrap();
        assert_eq!(v["event"], "clear");
        let odd = "MZ\"quoted\\";
        let v: serde_json::Value = serde_json::from_str(&media_msg(odd, &[1, 2, 3])).unwrap();
        assert_eq!(v["streamSid"], odd, "carrier-supplied ids are escaped");
        let v: serde_json::Value = serde_json::from_str(&mark_msg(odd, "a\"b")).unwrap();
        assert_eq!(v["mark"]["name"], "a\"b");
    }
}
