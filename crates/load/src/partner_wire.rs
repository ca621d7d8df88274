//! callgate's partner WebSocket protocol (`docs/partner-protocol.md`),
//! written from the partner's side of the socket.
//!
//! Vonage's convention: one JSON `start` with the content type, then every
//! 20 ms one binary frame of raw audio; the server answers with binary
//! audio and JSON control messages (`started`, `mark`, `clear`, `transfer`,
//! `end`, `error`). This is an independent implementation from the
//! specification — it shares nothing with the server's codec, so a bug
//! there shows up here as a failed call instead of being agreed with.
//!
//! Incoming messages are parsed leniently, the way a partner would: unknown
//! fields and events are tolerated; a known event missing a field it needs
//! (a `mark` without a `name`) is refused, because a partner could not act
//! on it.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use serde_json::Value;

/// The audio format a partner call negotiates in `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, clap::ValueEnum)]
pub enum PartnerFormat {
    /// `audio/l16;rate=16000`: 16-bit signed little-endian PCM at 16 kHz.
    #[default]
    L16,
    /// `audio/pcmu;rate=8000`: G.711 μ-law at 8 kHz.
    Pcmu,
}

impl PartnerFormat {
    /// The content type sent in `start`.
    pub fn content_type(self) -> &'static str {
        match self {
            PartnerFormat::L16 => "audio/l16;rate=16000",
            PartnerFormat::Pcmu => "audio/pcmu;rate=8000",
        }
    }

    pub fn sample_rate(self) -> u32 {
        match self {
            PartnerFormat::L16 => 16_000,
            PartnerFormat::Pcmu => 8_000,
        }
    }

    pub fn bytes_per_sample(self) -> usize {
        match self {
            PartnerFormat::L16 => 2,
            PartnerFormat::Pcmu => 1,
        }
    }

    /// Bytes in one 20 ms frame (every binary message the caller sends).
    pub fn frame_bytes(self) -> usize {
        self.sample_rate() as usize / 50 * self.bytes_per_sample()
    }

    /// The command-line spelling (`l16`, `pcmu`).
    pub fn as_str(self) -> &'static str {
        match self {
            PartnerFormat::L16 => "l16",
            PartnerFormat::Pcmu => "pcmu",
        }
    }
}

impl fmt::Display for PartnerFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PartnerFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "l16" => Ok(PartnerFormat::L16),
            "pcmu" => Ok(PartnerFormat::Pcmu),
            other => Err(format!(
                "unknown partner format {other:?} (use l16 or pcmu)"
            )),
        }
    }
}

#[derive(Serialize)]
struct StartMsg<'a> {
    event: &'static str,
    call_id: &'a str,
    #[serde(rename = "content-type")]
    content_type: &'static str,
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    metadata: serde_json::Map<String, serde_json::Value>,
}

fn to_text<T: Serialize>(msg: &T) -> String {
    // Serialising structs of strings into a String cannot fail (no I/O, no
    // non-string map keys); an empty object would be refused loudly anyway.
    serde_json::to_string(msg).unwrap_or_else(|_| String::from("{}"))
}

/// `start`: the session's first message.
pub fn start(call_id: &str, format: PartnerFormat, metadata: &[(String, String)]) -> String {
    let metadata = metadata
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    to_text(&StartMsg {
        event: "start",
        call_id,
        content_type: format.content_type(),
        metadata,
    })
}

#[derive(Serialize)]
struct Named<'a> {
    event: &'static str,
    name: &'a str,
}

/// `played`: playout reached the server's mark of this name.
pub fn played(name: &str) -> String {
    to_text(&Named {
        event: "played",
        name,
    })
}

#[derive(Serialize)]
struct Digit {
    event: &'static str,
    digit: String,
}

/// `dtmf`: the caller pressed a key.
pub fn dtmf(digit: char) -> String {
    to_text(&Digit {
        event: "dtmf",
        digit: digit.to_string(),
    })
}

/// `stop`: the caller hung up.
pub fn stop() -> String {
    String::from(r#"{"event":"stop"}"#)
}

/// A server → partner control message, as a partner acts on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerMessage {
    /// The start (or a resume) was accepted; callgate's id of the call and,
    /// when the operator allows resuming, the single-use token a new
    /// connection presents to continue it (`Callgate-Resume`).
    Started {
        session_id: String,
        resume_token: Option<String>,
    },
    /// A bookmark to answer with `played` once the audio before it played.
    Mark(String),
    /// Drop the audio not yet played; its marks are never echoed.
    Clear,
    /// Hand the caller to a human; the server closes next.
    Transfer {
        target: Option<String>,
        reason: String,
    },
    /// The call is over; the server closes next.
    End { reason: String },
    /// A protocol error; the server closes next.
    Error { code: String, message: String },
    /// An event the protocol does not define; ignored.
    Unknown(String),
}

/// Parses one text message from the server.
///
/// Only the fields of the message's own event are read (each must be a
/// string; `target` and `message` may be absent or null); anything else in
/// the object is ignored. A repeated key takes its last value.
///
/// # Errors
/// Why a partner could not act on it: not a JSON object, no string
/// `event`, or a known event without a field it needs.
pub fn parse(text: &str) -> Result<ServerMessage, String> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| format!("not partner-protocol JSON: {e}"))?;
    let Value::Object(msg) = value else {
        return Err("not a JSON object".into());
    };
    let Some(Value::String(event)) = msg.get("event") else {
        return Err("no string `event`".into());
    };
    let optional = |name: &str| match msg.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("`{event}` with a non-string `{name}`")),
    };
    let required =
        |name: &str| optional(name)?.ok_or_else(|| format!("`{event}` without `{name}`"));
    Ok(match event.as_str() {
        "started" => ServerMessage::Started {
            session_id: required("session_id")?,
            resume_token: optional("resume_token")?,
        },
        "mark" => ServerMessage::Mark(required("name")?),
        "clear" => ServerMessage::Clear,
        "transfer" => ServerMessage::Transfer {
            target: optional("target")?,
            reason: required("reason")?,
        },
        "end" => ServerMessage::End {
            reason: required("reason")?,
        },
        "error" => ServerMessage::Error {
            code: required("code")?,
            message: optional("message")?.unwrap_or_default(),
        },
        other => ServerMessage::Unknown(other.to_string()),
    })
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn value(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn start_has_the_documented_shape() {
        let meta = vec![("tenant".to_string(), "acme".to_string())];
        assert_eq!(
            value(&start("CA01", PartnerFormat::L16, &meta)),
            json!({"event":"start","call_id":"CA01","content-type":"audio/l16;rate=16000","metadata":{"tenant":"acme"}})
        );
        assert_eq!(
            value(&start("x", PartnerFormat::Pcmu, &[])),
            json!({"event":"start","call_id":"x","content-type":"audio/pcmu;rate=8000"})
        );
    }

    #[test]
    fn caller_messages_have_the_documented_shape() {
        assert_eq!(
            value(&played("turn-\"1\"")),
            json!({"event":"played","name":"turn-\"1\""})
        );
        assert_eq!(value(&dtmf('#')), json!({"event":"dtmf","digit":"#"}));
        assert_eq!(value(&stop()), json!({"event":"stop"}));
    }

    #[test]
    fn formats_know_their_frames() {
        assert_eq!(PartnerFormat::L16.frame_bytes(), 640);
        assert_eq!(PartnerFormat::Pcmu.frame_bytes(), 160);
        assert_eq!("PCMU".parse(), Ok(PartnerFormat::Pcmu));
        assert_eq!(
            PartnerFormat::L16.to_string().parse(),
            Ok(PartnerFormat::L16)
        );
        assert!("opus".parse::<PartnerFormat>().is_err());
    }

    #[test]
    fn server_messages_parse_leniently_but_need_their_fields() {
        let ok = |v: Value| parse(&v.to_string()).unwrap();
        assert_eq!(
            ok(json!({"event":"started","session_id":"u-1","resume":"x"})),
            ServerMessage::Started {
                session_id: "u-1".into(),
                resume_token: None,
            }
        );
        assert_eq!(
            ok(json!({"event":"started","session_id":"u-1","resume_token":"t"})),
            ServerMessage::Started {
                session_id: "u-1".into(),
                resume_token: Some("t".into()),
            }
        );
        assert_eq!(
            ok(json!({"event":"mark","name":"turn-1"})),
            ServerMessage::Mark("turn-1".into())
        );
        assert_eq!(ok(json!({"event":"clear"})), ServerMessage::Clear);
        assert_eq!(
            ok(json!({"event":"transfer","target":"+1555","reason":"queue_full"})),
            ServerMessage::Transfer {
                target: Some("+1555".into()),
                reason: "queue_full".into()
            }
        );
        assert_eq!(
            ok(json!({"event":"transfer","reason":"draining"})),
            ServerMessage::Transfer {
                target: None,
                reason: "draining".into()
            }
        );
        assert_eq!(
            ok(json!({"event":"end","reason":"max_duration"})),
            ServerMessage::End {
                reason: "max_duration".into()
            }
        );
        assert_eq!(
            ok(json!({"event":"error","code":"bad_start","message":"no call_id"})),
            ServerMessage::Error {
                code: "bad_start".into(),
                message: "no call_id".into()
            }
        );
        assert_eq!(
            ok(json!({"event":"dance"})),
            ServerMessage::Unknown("dance".into())
        );
        for bad in [
            json!({"event":"mark"}),
            json!({"event":"started"}),
            json!({"event":"transfer","target":"x"}),
            json!({"event":"end"}),
            json!({"event":"error"}),
            json!({"event":"mark","name":1}),
            json!({"name":"x"}),
        ] {
            assert!(parse(&bad.to_string()).is_err(), "{bad}");
        }
        assert!(parse("not json").is_err());
    }
}
