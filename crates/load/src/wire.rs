//! Twilio Media Streams JSON, written from Twilio's side of the socket.
//!
//! Outgoing messages follow Twilio's shapes exactly: counters and timestamps
//! are JSON *strings*, media payloads are base64 of raw μ-law. Incoming
//! (server → Twilio) messages are parsed leniently: unknown fields and events
//! are tolerated, but a `media`/`mark`/`clear` addressed to another stream, or
//! with an undecodable payload, is refused, because Twilio could not act on it.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize, Serializer};

use crate::error::LoadError;
use crate::ids::{AccountSid, CallIds, CallSid, StreamSid};

/// μ-law bytes in one 20 ms frame at 8 kHz.
pub const FRAME_BYTES: usize = 160;

/// A counter Twilio sends as a JSON string (`"sequenceNumber":"7"`).
#[derive(Debug, Clone, Copy)]
struct StrNum(u64);

impl Serialize for StrNum {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Envelope<B: Serialize> {
    event: &'static str,
    sequence_number: StrNum,
    stream_sid: StreamSid,
    #[serde(flatten)]
    body: B,
}

#[derive(Serialize)]
struct StartBody {
    start: StartInfo,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StartInfo {
    stream_sid: StreamSid,
    account_sid: AccountSid,
    call_sid: CallSid,
    tracks: [&'static str; 1],
    custom_parameters: serde_json::Map<String, serde_json::Value>,
    media_format: MediaFormat,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MediaFormat {
    encoding: &'static str,
    sample_rate: u32,
    channels: u32,
}

#[derive(Serialize)]
struct MarkBody<'a> {
    mark: MarkName<'a>,
}

#[derive(Serialize)]
struct MarkName<'a> {
    name: &'a str,
}

#[derive(Serialize)]
struct StopBody {
    stop: StopInfo,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StopInfo {
    account_sid: AccountSid,
    call_sid: CallSid,
}

fn to_text<B: Serialize>(event: &'static str, seq: u64, stream: StreamSid, body: B) -> String {
    let env = Envelope {
        event,
        sequence_number: StrNum(seq),
        stream_sid: stream,
        body,
    };
    // Serializing these plain structs into a String cannot fail (no maps
    // with non-string keys, no I/O); fall back to an empty object anyway.
    serde_json::to_string(&env).unwrap_or_else(|_| String::from("{}"))
}

/// `connected`: the first frame, without a sequence number.
pub fn connected() -> String {
    String::from(r#"{"event":"connected","protocol":"Call","version":"1.0.0"}"#)
}

/// `start`, which Twilio always numbers `"1"`.
pub fn start(ids: &CallIds, custom_parameters: &[(String, String)]) -> String {
    let params = custom_parameters
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    let info = StartInfo {
        stream_sid: ids.stream,
        account_sid: ids.account,
        call_sid: ids.call,
        tracks: ["inbound"],
        custom_parameters: params,
        media_format: MediaFormat {
            encoding: "audio/x-mulaw",
            sample_rate: 8_000,
            channels: 1,
        },
    };
    to_text("start", 1, ids.stream, StartBody { start: info })
}

/// One inbound `media` frame of μ-law bytes.
///
/// Written by hand, in the field order serde would use: a generator sends one
/// of these per caller every 20 ms, and none of the values can need JSON
/// escaping (decimal counters, a hex stream id, standard base64).
pub fn media(seq: u64, stream: StreamSid, chunk: u64, timestamp_ms: u64, ulaw: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(170 + ulaw.len().div_ceil(3) * 4);
    // Writing into a String cannot fail.
    let _ = write!(
        s,
        r#"{{"event":"media","sequenceNumber":"{seq}","streamSid":"{stream}","media":{{"track":"inbound","chunk":"{chunk}","timestamp":"{timestamp_ms}","payload":""#
    );
    B64.encode_string(ulaw, &mut s);
    s.push_str("\"}}");
    s
}

/// The echo of a server mark whose audio has finished playing.
pub fn mark(seq: u64, stream: StreamSid, name: &str) -> String {
    to_text(
        "mark",
        seq,
        stream,
        MarkBody {
            mark: MarkName { name },
        },
    )
}

/// `stop`: the caller hung up.
pub fn stop(seq: u64, ids: &CallIds) -> String {
    let info = StopInfo {
        account_sid: ids.account,
        call_sid: ids.call,
    };
    to_text("stop", seq, ids.stream, StopBody { stop: info })
}

/// A server → Twilio message, as Twilio would act on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerEvent {
    /// Audio to queue for playout (raw μ-law bytes).
    Media(Vec<u8>),
    /// A bookmark to echo once the audio queued before it has played.
    Mark(String),
    /// Drop all queued audio and echo pending marks.
    Clear,
    /// An event Twilio does not know; ignored.
    Unknown(String),
}

#[derive(Deserialize)]
struct Incoming {
    event: String,
    #[serde(rename = "streamSid")]
    stream_sid: Option<String>,
    media: Option<IncomingMedia>,
    mark: Option<IncomingMark>,
}

#[derive(Deserialize)]
struct IncomingMedia {
    payload: String,
}

#[derive(Deserialize)]
struct IncomingMark {
    name: String,
}

/// Parses one text frame from the server for the call on `stream`.
pub fn parse(text: &str, stream: StreamSid) -> Result<ServerEvent, LoadError> {
    let malformed = |detail: String| LoadError::Malformed { stream, detail };
    let msg: Incoming =
        serde_json::from_str(text).map_err(|e| malformed(format!("not Twilio JSON: {e}")))?;
    if !matches!(msg.event.as_str(), "media" | "mark" | "clear") {
        return Ok(ServerEvent::Unknown(msg.event));
    }
    match msg.stream_sid.as_deref() {
        Some(sid) if sid.parse::<StreamSid>() == Ok(stream) => {}
        other => {
            return Err(malformed(format!("{} for streamSid {other:?}", msg.event)));
        }
    }
    match msg.event.as_str() {
        "media" => {
            let media = msg
                .media
                .ok_or_else(|| malformed("media without `media`".into()))?;
            B64.decode(media.payload.as_bytes())
                .map(ServerEvent::Media)
                .map_err(|e| malformed(format!("media payload is not base64: {e}")))
        }
        "mark" => {
            let mark = msg
                .mark
                .ok_or_else(|| malformed("mark without `mark`".into()))?;
            Ok(ServerEvent::Mark(mark.name))
        }
        _ => Ok(ServerEvent::Clear),
    }
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn ids() -> CallIds {
        CallIds {
            account: AccountSid::from_bytes([1; 16]),
            call: CallSid::from_bytes([2; 16]),
            stream: StreamSid::from_bytes([3; 16]),
        }
    }

    fn value(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn start_matches_twilio_shape() {
        let ids = ids();
        let params = vec![("tenant".to_string(), "acme".to_string())];
        let v = value(&start(&ids, &params));
        assert_eq!(
            v,
            json!({
                "event": "start",
                "sequenceNumber": "1",
                "streamSid": ids.stream.to_string(),
                "start": {
                    "streamSid": ids.stream.to_string(),
                    "accountSid": ids.account.to_string(),
                    "callSid": ids.call.to_string(),
                    "tracks": ["inbound"],
                    "customParameters": {"tenant": "acme"},
                    "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}
                }
            })
        );
        assert_eq!(
            value(&connected()),
            json!({"event":"connected","protocol":"Call","version":"1.0.0"})
        );
    }

    #[derive(Serialize)]
    struct MediaBody {
        media: MediaInfo,
    }

    #[derive(Serialize)]
    struct MediaInfo {
        track: &'static str,
        chunk: StrNum,
        timestamp: StrNum,
        payload: String,
    }

    #[test]
    fn hand_written_media_is_byte_identical_to_serde() {
        let ids = ids();
        for (seq, chunk, ts, audio) in [
            (2, 1, 0, vec![0xFF; FRAME_BYTES]),
            (u64::MAX, 99, 123_456, (0..=255).collect::<Vec<u8>>()),
            (3, 2, 20, Vec::new()),
        ] {
            let body = MediaBody {
                media: MediaInfo {
                    track: "inbound",
                    chunk: StrNum(chunk),
                    timestamp: StrNum(ts),
                    payload: B64.encode(&audio),
                },
            };
            let by_serde = to_text("media", seq, ids.stream, body);
            assert_eq!(media(seq, ids.stream, chunk, ts, &audio), by_serde);
        }
    }

    #[test]
    fn media_uses_string_counters_and_216_char_payloads() {
        let ids = ids();
        let v = value(&media(7, ids.stream, 6, 100, &[0xFF; FRAME_BYTES]));
        assert_eq!(v["event"], "media");
        assert_eq!(v["sequenceNumber"], "7");
        assert_eq!(v["streamSid"], ids.stream.to_string());
        assert_eq!(v["media"]["track"], "inbound");
        assert_eq!(v["media"]["chunk"], "6");
        assert_eq!(v["media"]["timestamp"], "100");
        let payload = v["media"]["payload"].as_str().unwrap();
        assert_eq!(payload.len(), 216);
        assert_eq!(B64.decode(payload).unwrap(), vec![0xFF; FRAME_BYTES]);
    }

    #[test]
    fn mark_echo_and_stop_match_twilio_shape() {
        let ids = ids();
        assert_eq!(
            value(&mark(9, ids.stream, "turn-1")),
            json!({"event":"mark","sequenceNumber":"9","streamSid":ids.stream.to_string(),"mark":{"name":"turn-1"}})
        );
        assert_eq!(
            value(&stop(10, &ids)),
            json!({"event":"stop","sequenceNumber":"10","streamSid":ids.stream.to_string(),
                   "stop":{"accountSid":ids.account.to_string(),"callSid":ids.call.to_string()}})
        );
    }

    #[test]
    fn parses_server_messages_leniently_but_checks_routing() {
        let s = ids().stream;
        let media_msg =
            json!({"event":"media","streamSid":s.to_string(),"media":{"payload":"//8="},"extra":1});
        assert_eq!(
            parse(&media_msg.to_string(), s).unwrap(),
            ServerEvent::Media(vec![0xFF, 0xFF])
        );
        let mark_msg = json!({"event":"mark","streamSid":s.to_string(),"mark":{"name":"turn-2"}});
        assert_eq!(
            parse(&mark_msg.to_string(), s).unwrap(),
            ServerEvent::Mark("turn-2".into())
        );
        let clear = json!({"event":"clear","streamSid":s.to_string()});
        assert_eq!(parse(&clear.to_string(), s).unwrap(), ServerEvent::Clear);
        assert_eq!(
            parse(r#"{"event":"dance"}"#, s).unwrap(),
            ServerEvent::Unknown("dance".into())
        );

        let other = StreamSid::from_bytes([9; 16]).to_string();
        let misrouted = json!({"event":"clear","streamSid":other});
        assert!(matches!(
            parse(&misrouted.to_string(), s),
            Err(LoadError::Malformed { .. })
        ));
        assert!(parse(r#"{"event":"clear"}"#, s).is_err());
        let bad_b64 = json!({"event":"media","streamSid":s.to_string(),"media":{"payload":"!!"}});
        assert!(parse(&bad_b64.to_string(), s).is_err());
        assert!(parse("not json", s).is_err());
    }
}
