//! Deepgram's JSON messages, read leniently (unknown fields ignored, a
//! missing field defaulted, numbers accepted as strings) and turned into
//! [`SttEvent`]s; and the client's control messages.

use serde_json::Value;

use crate::event::{SttEvent, Transcript};

pub(crate) const KEEPALIVE: &str = r#"{"type":"KeepAlive"}"#;
pub(crate) const FINALIZE: &str = r#"{"type":"Finalize"}"#;
pub(crate) const CLOSE_STREAM: &str = r#"{"type":"CloseStream"}"#;

/// Longest provider text quoted in an error event (public for the
/// invariants the fuzz target shares with the smoke twin).
pub const MAX_QUOTE: usize = 200;

fn num(v: &Value, key: &str) -> f64 {
    match v.get(key) {
        Some(Value::Number(n)) => n.as_f64().unwrap_or(0.0),
        // "NaN" and "inf" parse as f64 but are no time or confidence.
        Some(Value::String(s)) => s
            .parse()
            .ok()
            .filter(|x: &f64| x.is_finite())
            .unwrap_or(0.0),
        _ => 0.0,
    }
}

fn flag(v: &Value, key: &str) -> bool {
    match v.get(key) {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s == "true",
        _ => false,
    }
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

fn quote(raw: &str) -> String {
    raw.chars().take(MAX_QUOTE).collect()
}

/// Parses one provider text frame. Never fails: anything unexpected
/// becomes a non-fatal [`SttEvent::ProviderError`].
pub fn parse_server_text(raw: &str) -> SttEvent {
    let Ok(v) = serde_json::from_str::<Value>(raw) else {
        return SttEvent::ProviderError {
            message: format!("non-JSON text from provider: {}", quote(raw)),
        };
    };
    match v.get("type").and_then(Value::as_str) {
        Some("Results") => SttEvent::Transcript(results(&v)),
        Some("SpeechStarted") => SttEvent::SpeechStarted {
            at: num(&v, "timestamp"),
        },
        Some("UtteranceEnd") => SttEvent::UtteranceEnd {
            last_word_end: num(&v, "last_word_end"),
        },
        Some("Metadata") => SttEvent::Metadata {
            request_id: text(&v, "request_id").unwrap_or_default(),
            duration: num(&v, "duration"),
        },
        Some("Error") => SttEvent::ProviderError {
            message: text(&v, "description")
                .or_else(|| text(&v, "message"))
                .or_else(|| text(&v, "err_msg"))
                .unwrap_or_else(|| quote(raw)),
        },
        other => SttEvent::ProviderError {
            message: format!(
                "unexpected message type {:?}: {}",
                quote(other.unwrap_or("")),
                quote(raw)
            ),
        },
    }
}

fn results(v: &Value) -> Transcript {
    let alt = v
        .pointer("/channel/alternatives/0")
        .cloned()
        .unwrap_or(Value::Null);
    Transcript {
        text: text(&alt, "transcript").unwrap_or_default(),
        is_final: flag(v, "is_final"),
        // May be absent: default false (docs/protocols.md §2.3).
        speech_final: flag(v, "speech_final"),
        from_finalize: flag(v, "from_finalize"),
        start: num(v, "start"),
        duration: num(v, "duration"),
        confidence: num(&alt, "confidence"),
    }
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_read_with_defaults() {
        let raw = r#"{"type":"Results","channel_index":[0,1],"start":1.0,"duration":"0.9","is_final":true,
            "channel":{"alternatives":[{"transcript":"I want to book.","confidence":0.97,"words":[]}]},
            "metadata":{"request_id":"r"},"extra":1}"#;
        let SttEvent::Transcript(t) = parse_server_text(raw) else {
            panic!()
        };
        assert_eq!(t.text, "I want to book.");
        assert!(t.is_final && !t.speech_final && !t.from_finalize);
        assert_eq!((t.start, t.duration, t.confidence), (1.0, 0.9, 0.97));
    }

    #[test]
    fn vad_and_summary_messages() {
        assert_eq!(
            parse_server_text(r#"{"type":"SpeechStarted","channel":[0],"timestamp":1.12}"#),
            SttEvent::SpeechStarted { at: 1.12 }
        );
        assert_eq!(
            parse_server_text(r#"{"type":"UtteranceEnd","channel":[0,1],"last_word_end":2.31}"#),
            SttEvent::UtteranceEnd {
                last_word_end: 2.31
            }
        );
        assert_eq!(
            parse_server_text(
                r#"{"type":"Metadata","transaction_key":"deprecated","request_id":"abc","duration":42.0}"#
            ),
            SttEvent::Metadata {
                request_id: "abc".into(),
                duration: 42.0
            }
        );
    }

    #[test]
    fn errors_and_unknowns_are_non_fatal_events() {
        assert_eq!(
            parse_server_text(r#"{"type":"Error","description":"bad thing"}"#),
            SttEvent::ProviderError {
                message: "bad thing".into()
            }
        );
        let SttEvent::ProviderError { message } = parse_server_text(r#"{"type":"Warp"}"#) else {
            panic!()
        };
        assert!(message.contains("Warp"));
        let SttEvent::ProviderError { message } = parse_server_text(&"x".repeat(1000)) else {
            panic!()
        };
        assert!(message.len() < 300);
    }
}
