//! The ElevenLabs `multi-stream-input` JSON messages. Requests use
//! snake_case `context_id`; responses use camelCase `contextId` (some
//! deployments send `context_id`, so both are accepted). Errors arrive as
//! JSON on the open socket, followed by a close; a `code` of 429 or an
//! `error` of `too_many_concurrent_requests` / `rate_limit_exceeded` is a
//! capacity refusal.

use base64::Engine as _;
use serde::Deserialize;
use serde_json::json;

pub use super::Inbound;
use crate::context::ContextId;

/// Creates a context: the text must be exactly one space.
pub(crate) fn init(id: ContextId) -> String {
    json!({ "text": " ", "context_id": id.to_string() }).to_string()
}

pub(crate) fn text(id: ContextId, text: &str) -> String {
    json!({ "text": text, "context_id": id.to_string() }).to_string()
}

/// Generates everything buffered for the context now.
pub(crate) fn flush(id: ContextId) -> String {
    json!({ "text": "", "context_id": id.to_string(), "flush": true }).to_string()
}

pub(crate) fn close_context(id: ContextId) -> String {
    json!({ "context_id": id.to_string(), "close_context": true }).to_string()
}

pub(crate) fn close_socket() -> String {
    json!({ "close_socket": true }).to_string()
}

/// Keeps the socket alive and, when given, that context: ElevenLabs'
/// multi-context keep-alive is an empty text naming the context
/// (`{"text": "", "context_id": …}`); without one only the socket is kept.
/// Only name a context whose init was sent and that is not closing.
pub(crate) fn keepalive(live: Option<ContextId>) -> String {
    match live {
        Some(id) => json!({ "text": "", "context_id": id.to_string() }).to_string(),
        None => json!({ "text": "" }).to_string(),
    }
}

#[derive(Debug, Deserialize)]
struct Raw {
    audio: Option<String>,
    #[serde(rename = "contextId")]
    context_camel: Option<String>,
    #[serde(rename = "context_id")]
    context_snake: Option<String>,
    #[serde(rename = "isFinal")]
    final_camel: Option<bool>,
    #[serde(rename = "is_final")]
    final_snake: Option<bool>,
    alignment: Option<RawAlignment>,
    #[serde(rename = "normalizedAlignment")]
    normalized_alignment: Option<RawAlignment>,
    error: Option<serde_json::Value>,
    message: Option<String>,
    code: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct RawAlignment {
    #[serde(default)]
    chars: Vec<String>,
}

/// Parses one text frame from the provider.
///
/// # Errors
/// A description when the frame is not JSON or its audio is not base64.
pub fn parse(frame: &str) -> Result<Inbound, String> {
    let raw: Raw =
        serde_json::from_str(frame).map_err(|e| format!("unparseable provider message: {e}"))?;
    let context = raw
        .context_camel
        .or(raw.context_snake)
        .and_then(|c| ContextId::from_wire(&c));
    if raw.final_camel.or(raw.final_snake) == Some(true) {
        return Ok(Inbound::Final { context });
    }
    if let Some(audio) = raw.audio.filter(|a| !a.is_empty()) {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(audio.as_bytes())
            .map_err(|e| format!("audio is not base64: {e}"))?;
        // `alignment` may be null; `normalizedAlignment` then stands in.
        // With neither the tracker falls back to the audio's length.
        let aligned_chars = raw.alignment.or(raw.normalized_alignment).map(|a| {
            a.chars
                .iter()
                .flat_map(|c| c.chars())
                .filter(|c| !c.is_whitespace())
                .count()
        });
        return Ok(Inbound::Audio {
            context,
            bytes,
            aligned_chars,
        });
    }
    let capacity = is_capacity(raw.code.as_ref(), raw.error.as_ref());
    match (raw.error, raw.message) {
        (None, None) => Ok(Inbound::Other),
        (error, message) => {
            let error = error.map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned));
            let message = [error, message]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(": ");
            Ok(Inbound::Error {
                context,
                message,
                capacity,
                ends_context: false,
            })
        }
    }
}

/// ElevenLabs' concurrency refusals: `code` 429 (number or string), or the
/// documented error names.
fn is_capacity(code: Option<&serde_json::Value>, error: Option<&serde_json::Value>) -> bool {
    let code_429 = code.is_some_and(|c| c.as_u64() == Some(429) || c.as_str() == Some("429"));
    let named = error
        .and_then(serde_json::Value::as_str)
        .is_some_and(|e| matches!(e, "too_many_concurrent_requests" | "rate_limit_exceeded"));
    code_429 || named
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn value(s: &str) -> serde_json::Value {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn requests_use_snake_case_and_the_wire_context_id() {
        assert_eq!(
            value(&init(ContextId(3))),
            json!({"text": " ", "context_id": "ctx-3"})
        );
        assert_eq!(
            value(&flush(ContextId(3))),
            json!({"text": "", "context_id": "ctx-3", "flush": true})
        );
        assert_eq!(
            value(&close_context(ContextId(3))),
            json!({"context_id": "ctx-3", "close_context": true})
        );
        assert_eq!(value(&keepalive(None)), json!({"text": ""}));
        assert_eq!(
            value(&keepalive(Some(ContextId(4)))),
            json!({"text": "", "context_id": "ctx-4"})
        );
    }

    #[test]
    fn audio_final_and_errors_parse_in_both_spellings() {
        let audio = r#"{"audio":"AAEC","contextId":"ctx-1","isFinal":null,
            "alignment":{"chars":["H","i"," "],"charStartTimesMs":[0,60,120],"charDurationsMs":[60,60,60]},
            "normalizedAlignment":null,"newField":1}"#;
        assert_eq!(
            parse(audio).unwrap(),
            Inbound::Audio {
                context: Some(ContextId(1)),
                bytes: vec![0, 1, 2],
                aligned_chars: Some(2),
            }
        );
        assert_eq!(
            parse(r#"{"isFinal":true,"contextId":"ctx-2"}"#).unwrap(),
            Inbound::Final {
                context: Some(ContextId(2))
            }
        );
        assert_eq!(
            parse(r#"{"is_final":true,"context_id":"ctx-2","audio":null}"#).unwrap(),
            Inbound::Final {
                context: Some(ContextId(2))
            }
        );
        assert_eq!(
            parse(r#"{"message":"too many","error":"max_active_conversations","code":1008}"#)
                .unwrap(),
            Inbound::Error {
                context: None,
                message: "max_active_conversations: too many".into(),
                capacity: false,
                ends_context: false,
            }
        );
        let busy = r#"{"message":"busy","error":"too_many_concurrent_requests","code":429}"#;
        assert!(matches!(
            parse(busy).unwrap(),
            Inbound::Error { capacity: true, .. }
        ));
        assert!(matches!(
            parse(r#"{"message":"slow down","code":"429"}"#).unwrap(),
            Inbound::Error { capacity: true, .. }
        ));
        assert_eq!(parse(r#"{"flush_done":true}"#).unwrap(), Inbound::Other);
        // A null alignment falls back to normalizedAlignment, then to none.
        let norm = r#"{"audio":"AAEC","contextId":"ctx-1","alignment":null,
            "normalizedAlignment":{"chars":["a","b"],"charStartTimesMs":[0,1],"charDurationsMs":[1,1]}}"#;
        assert!(matches!(
            parse(norm).unwrap(),
            Inbound::Audio {
                aligned_chars: Some(2),
                ..
            }
        ));
        let none =
            r#"{"audio":"AAEC","contextId":"ctx-1","alignment":null,"normalizedAlignment":null}"#;
        assert!(matches!(
            parse(none).unwrap(),
            Inbound::Audio {
                aligned_chars: None,
                ..
            }
        ));
        assert!(parse("not json").is_err());
    }
}
