//! The Cartesia `/tts/websocket` JSON messages (docs.cartesia.ai, "Text to
//! Speech (WebSocket)", "Contexts", "Context Flushing and Flush IDs").
//!
//! Requests: every generation request on a context repeats the same
//! `model_id`, `voice`, `output_format` and `add_timestamps` (Cartesia
//! requires all fields but `transcript`, `continue` and `duration` to stay
//! identical within a context); transcripts are concatenated verbatim.
//! `continue:true` means more text follows; a context ends with a request
//! of `continue:false` (an empty transcript is allowed). A manual flush is
//! an empty transcript with `continue:true, flush:true` (answered by
//! `flush_done`). Cancel is `{"context_id", "cancel":true}`. Word
//! timestamps are always asked for: they tell a reconnect how much of the
//! text was already heard.
//!
//! The voice goes as the current API's voice object, `{"id": …}`.
//!
//! Responses, by `type`: `chunk` (base64 `data`), `timestamps`
//! (`word_timestamps.words`), `flush_done`, `done`, `error`. Errors take
//! the structured shape of `Cartesia-Version` 2026-03-01 and later
//! (`status_code`, `error_code`, `title`, `message`, `request_id`,
//! `done:true`, `context_id` when there is one); the single `error` string
//! of older versions is read too. A 429 `status_code`, a
//! `concurrency_limited` / `rate_limited` code, or an older error naming a
//! concurrency or rate limit, is a capacity refusal. The `request_id` is
//! kept in the message: it is what Cartesia's support asks for.

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};

pub use super::Inbound;
use crate::config::{OutputFormat, TtsConfig};
use crate::context::ContextId;

/// The fields every generation request of a session repeats.
#[derive(Debug, Clone)]
pub struct Request {
    common: Value,
}

impl Request {
    pub fn new(cfg: &TtsConfig) -> Self {
        let (encoding, sample_rate) = output_format(cfg.output_format);
        Request {
            common: json!({
                "model_id": cfg.model_id,
                "voice": { "id": cfg.voice_id },
                "output_format": {
                    "container": "raw",
                    "encoding": encoding,
                    "sample_rate": sample_rate,
                },
                "add_timestamps": true,
            }),
        }
    }

    fn generation(&self, id: ContextId, transcript: &str, more: bool) -> Value {
        let mut req = self.common.clone();
        req["context_id"] = json!(id.to_string());
        req["transcript"] = json!(transcript);
        req["continue"] = json!(more);
        req
    }

    /// More text for the context; more may follow.
    pub fn text(&self, id: ContextId, text: &str) -> String {
        self.generation(id, text, true).to_string()
    }

    /// Generate everything buffered for the context now.
    pub fn flush(&self, id: ContextId) -> String {
        let mut req = self.generation(id, "", true);
        req["flush"] = json!(true);
        req.to_string()
    }

    /// No more text: the rest is generated, then `done`.
    pub fn close(&self, id: ContextId) -> String {
        self.generation(id, "", false).to_string()
    }
}

/// Stops generating for the context; audio already sent is not recalled.
pub fn cancel(id: ContextId) -> String {
    json!({ "context_id": id.to_string(), "cancel": true }).to_string()
}

/// Cartesia's `output_format` for ours: (encoding, sample rate).
pub fn output_format(format: OutputFormat) -> (&'static str, u32) {
    let encoding = match format {
        OutputFormat::Ulaw8000 => "pcm_mulaw",
        OutputFormat::Alaw8000 => "pcm_alaw",
        OutputFormat::Pcm8000 | OutputFormat::Pcm16000 => "pcm_s16le",
    };
    (encoding, format.sample_rate())
}

#[derive(Debug, Deserialize)]
struct Raw {
    #[serde(rename = "type")]
    kind: Option<String>,
    data: Option<String>,
    done: Option<bool>,
    context_id: Option<String>,
    status_code: Option<u64>,
    error: Option<Value>,
    error_code: Option<String>,
    title: Option<String>,
    message: Option<String>,
    request_id: Option<String>,
    word_timestamps: Option<RawWords>,
}

#[derive(Debug, Deserialize)]
struct RawWords {
    #[serde(default)]
    words: Vec<String>,
}

/// Parses one text frame from Cartesia.
///
/// # Errors
/// A description when the frame is not JSON or a chunk's `data` is not
/// base64.
pub fn parse(frame: &str) -> Result<Inbound, String> {
    let raw: Raw =
        serde_json::from_str(frame).map_err(|e| format!("unparseable provider message: {e}"))?;
    let context = raw.context_id.as_deref().and_then(ContextId::from_wire);
    match raw.kind.as_deref() {
        Some("chunk") => chunk(context, raw.data),
        Some("timestamps") => {
            Ok(raw
                .word_timestamps
                .map_or(Inbound::Other, |w| Inbound::Aligned {
                    context,
                    words: w
                        .words
                        .iter()
                        .filter(|word| !word.trim().is_empty())
                        .count(),
                }))
        }
        Some("done") => Ok(Inbound::Final { context }),
        Some("error") => Ok(error(context, raw)),
        _ if raw.error.is_some() => Ok(error(context, raw)),
        _ => Ok(Inbound::Other),
    }
}

fn chunk(context: Option<ContextId>, data: Option<String>) -> Result<Inbound, String> {
    let Some(data) = data.filter(|d| !d.is_empty()) else {
        return Ok(Inbound::Other);
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.as_bytes())
        .map_err(|e| format!("audio is not base64: {e}"))?;
    Ok(Inbound::Audio {
        context,
        bytes,
        aligned_chars: None,
    })
}

fn error(context: Option<ContextId>, raw: Raw) -> Inbound {
    let error = raw
        .error
        .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned));
    let capacity_code = matches!(
        raw.error_code.as_deref(),
        Some("concurrency_limited" | "rate_limited")
    );
    let parts = [raw.error_code, error, raw.title, raw.message];
    let mut message = parts.into_iter().flatten().collect::<Vec<_>>().join(": ");
    if let Some(id) = raw.request_id {
        message.push_str(&format!(" (request_id {id})"));
    }
    let lower = message.to_ascii_lowercase();
    let capacity = raw.status_code == Some(429)
        || capacity_code
        || ["concurrency", "rate limit", "rate_limit", "too many"]
            .iter()
            .any(|needle| lower.contains(needle));
    Inbound::Error {
        context,
        message,
        capacity,
        // Error frames carry `done:true`: the context they name is over.
        ends_context: context.is_some() && raw.done != Some(false),
    }
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn value(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    fn request(format: OutputFormat) -> Request {
        let mut cfg = TtsConfig::cartesia("wss://api.cartesia.ai", "voice-uuid");
        cfg.output_format = format;
        Request::new(&cfg)
    }

    #[test]
    fn requests_repeat_the_context_fields_and_differ_in_transcript_and_continue() {
        let r = request(OutputFormat::Ulaw8000);
        let common = json!({
            "model_id": "sonic-3",
            "voice": {"id": "voice-uuid"},
            "output_format": {"container": "raw", "encoding": "pcm_mulaw", "sample_rate": 8000},
            "add_timestamps": true,
            "context_id": "ctx-3",
        });
        let with = |extra: Value| {
            let mut v = common.clone();
            for (k, x) in extra.as_object().unwrap() {
                v[k] = x.clone();
            }
            v
        };
        assert_eq!(
            value(&r.text(ContextId(3), "Hello, ")),
            with(json!({"transcript": "Hello, ", "continue": true}))
        );
        assert_eq!(
            value(&r.flush(ContextId(3))),
            with(json!({"transcript": "", "continue": true, "flush": true}))
        );
        assert_eq!(
            value(&r.close(ContextId(3))),
            with(json!({"transcript": "", "continue": false}))
        );
        assert_eq!(
            value(&cancel(ContextId(3))),
            json!({"context_id": "ctx-3", "cancel": true})
        );
    }

    #[test]
    fn output_formats_map_to_cartesia_encodings() {
        assert_eq!(output_format(OutputFormat::Alaw8000), ("pcm_alaw", 8_000));
        assert_eq!(output_format(OutputFormat::Pcm8000), ("pcm_s16le", 8_000));
        assert_eq!(output_format(OutputFormat::Pcm16000), ("pcm_s16le", 16_000));
        let r = request(OutputFormat::Pcm16000);
        let v = value(&r.text(ContextId(1), "x"));
        assert_eq!(v["output_format"]["encoding"], "pcm_s16le");
        assert_eq!(v["output_format"]["sample_rate"], 16_000);
    }

    #[test]
    fn chunks_timestamps_done_and_errors_parse() {
        let chunk = r#"{"type":"chunk","data":"AAEC","done":false,"status_code":206,"step_time":12,"context_id":"ctx-1","flush_id":1}"#;
        assert_eq!(
            parse(chunk).unwrap(),
            Inbound::Audio {
                context: Some(ContextId(1)),
                bytes: vec![0, 1, 2],
                aligned_chars: None,
            }
        );
        let ts = r#"{"type":"timestamps","done":false,"context_id":"ctx-1",
            "word_timestamps":{"words":["Hello,","world"],"start":[0,0.5],"end":[0.4,0.9]}}"#;
        assert_eq!(
            parse(ts).unwrap(),
            Inbound::Aligned {
                context: Some(ContextId(1)),
                words: 2
            }
        );
        assert_eq!(
            parse(r#"{"type":"done","done":true,"status_code":206,"context_id":"ctx-2"}"#).unwrap(),
            Inbound::Final {
                context: Some(ContextId(2))
            }
        );
        let flush = r#"{"type":"flush_done","done":false,"flush_done":true,"flush_id":1,"context_id":"ctx-2"}"#;
        assert_eq!(parse(flush).unwrap(), Inbound::Other);
        let bad = r#"{"type":"error","done":true,"title":"Invalid model","message":"no such model","error_code":"model_not_found","status_code":400,"request_id":"r-1:ctx-4","context_id":"ctx-4"}"#;
        assert_eq!(
            parse(bad).unwrap(),
            Inbound::Error {
                context: Some(ContextId(4)),
                message: "model_not_found: Invalid model: no such model (request_id r-1:ctx-4)"
                    .into(),
                capacity: false,
                ends_context: true,
            }
        );
        let limited = r#"{"type":"error","done":true,"status_code":400,"error_code":"rate_limited","title":"Slow down","message":"m","request_id":"r"}"#;
        assert!(matches!(
            parse(limited).unwrap(),
            Inbound::Error { capacity: true, .. }
        ));
        let busy =
            r#"{"type":"error","done":true,"error":"concurrency limit reached","status_code":429}"#;
        assert_eq!(
            parse(busy).unwrap(),
            Inbound::Error {
                context: None,
                message: "concurrency limit reached".into(),
                capacity: true,
                ends_context: false,
            }
        );
        assert!(parse(r#"{"type":"chunk","data":"!!","context_id":"ctx-1"}"#).is_err());
        assert!(parse("not json").is_err());
    }
}
