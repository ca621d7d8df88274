//! Cartesia's TTS WebSocket messages: client requests parsed and validated
//! into [`Request`]s, and the server messages built as JSON text.
//!
//! Field names are Cartesia's (docs.cartesia.ai, `/tts/websocket`
//! AsyncAPI, and the official SDK's models): requests carry `model_id`,
//! `transcript`, `voice`, `output_format` `{container, encoding,
//! sample_rate}`, `context_id`, `continue`, `flush`, `add_timestamps`,
//! `add_phoneme_timestamps`, `max_buffer_delay_ms`, `language`; a cancel is
//! `{context_id, cancel: true}`. The voice may be given in any of the
//! three forms clients send: a bare id string (what the current SDK sends),
//! `{"id": …}` (the current documented object) or `{"mode": "id", "id": …}`
//! (the older one); another `mode` (embeddings) is refused. Unknown fields
//! are ignored, as the real service does. A request that fails to parse
//! still names its `context_id` in the error when it had one, so a client
//! waiting on that context hears about it.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use super::audio::{AudioFormat, PhonemeTimes, WordTimes};

/// `max_buffer_delay_ms` when a request does not give one (Cartesia's default).
pub const DEFAULT_MAX_BUFFER_DELAY_MS: u64 = 3_000;

/// Largest `max_buffer_delay_ms` Cartesia accepts.
pub const MAX_BUFFER_DELAY_MS: u64 = 5_000;

/// The `status_code` of every non-final server message (chunks, timestamps,
/// flush acknowledgements) and — as Cartesia's examples show — of `done`.
pub const STATUS_PARTIAL: u16 = 206;

/// The `Cartesia-Version` dates Cartesia documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ApiVersion {
    V2024_06_10,
    V2024_11_13,
    V2025_04_16,
    V2025_11_04,
    V2026_03_01,
    V2026_08_14,
}

impl ApiVersion {
    /// Every documented version, oldest first.
    pub const ALL: [ApiVersion; 6] = [
        ApiVersion::V2024_06_10,
        ApiVersion::V2024_11_13,
        ApiVersion::V2025_04_16,
        ApiVersion::V2025_11_04,
        ApiVersion::V2026_03_01,
        ApiVersion::V2026_08_14,
    ];

    /// The newest version (what the current official SDK sends).
    pub const LATEST: ApiVersion = ApiVersion::V2026_08_14;

    /// Parses a `YYYY-MM-DD` version; `None` for undocumented dates.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ApiVersion::V2024_06_10 => "2024-06-10",
            ApiVersion::V2024_11_13 => "2024-11-13",
            ApiVersion::V2025_04_16 => "2025-04-16",
            ApiVersion::V2025_11_04 => "2025-11-04",
            ApiVersion::V2026_03_01 => "2026-03-01",
            ApiVersion::V2026_08_14 => "2026-08-14",
        }
    }

    /// From 2026-03-01 on, errors are structured objects (`error_code`,
    /// `title`, `message`, `request_id`); before, one `error` string.
    pub fn structured_errors(self) -> bool {
        self >= ApiVersion::V2026_03_01
    }
}

/// What must stay the same across the requests of one context (Cartesia:
/// "all fields except `transcript`, `continue` and `duration`").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub model_id: String,
    pub voice_id: String,
    pub language: Option<String>,
    pub format: AudioFormat,
    pub add_timestamps: bool,
    pub add_phoneme_timestamps: bool,
}

/// A validated generation request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    /// `None`: the client let the server pick one.
    pub context_id: Option<String>,
    pub transcript: String,
    pub settings: Settings,
    /// `continue`: more transcript follows on this context.
    pub continues: bool,
    pub flush: bool,
    pub max_buffer_delay: Duration,
}

/// A validated client message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Generate(Generation),
    Cancel { context_id: String },
}

/// Why the server answers with an `error` message, and how it renders.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// Malformed or invalid request (400).
    #[error("{0}")]
    BadRequest(String),
    /// A `model_id` that names no Sonic model (400, `model_not_found`).
    #[error("Model {0:?} does not exist; use a Sonic model ID such as sonic-3.")]
    ModelNotFound(String),
    /// A voice id the account's voice library does not hold (404,
    /// `voice_not_found`).
    #[error("Voice {0:?} was not found.")]
    VoiceNotFound(String),
    /// Over the account's concurrent-context limit (429).
    #[error("You have exceeded your plan's concurrency limit.")]
    ConcurrencyLimited,
    /// An injected mid-stream failure (500).
    #[error("The generation failed. Please try again.")]
    Internal,
}

impl Failure {
    pub fn status_code(&self) -> u16 {
        match self {
            Failure::BadRequest(_) | Failure::ModelNotFound(_) => 400,
            Failure::VoiceNotFound(_) => 404,
            Failure::ConcurrencyLimited => 429,
            Failure::Internal => 500,
        }
    }

    fn error_code(&self) -> &'static str {
        match self {
            Failure::BadRequest(_) => "invalid_request",
            Failure::ModelNotFound(_) => "model_not_found",
            Failure::VoiceNotFound(_) => "voice_not_found",
            Failure::ConcurrencyLimited => "concurrency_limited",
            Failure::Internal => "internal_error",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            Failure::BadRequest(_) => "Invalid request",
            Failure::ModelNotFound(_) => "Invalid model",
            Failure::VoiceNotFound(_) => "Voice not found",
            Failure::ConcurrencyLimited => "Too many concurrent requests",
            Failure::Internal => "Internal server error",
        }
    }
}

/// A request that could not be accepted, with the context it named (if any).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub context_id: Option<String>,
    pub failure: Failure,
}

#[derive(Debug, Default, Deserialize)]
struct RawRequest {
    model_id: Option<String>,
    transcript: Option<String>,
    voice: Option<RawVoice>,
    output_format: Option<RawFormat>,
    context_id: Option<String>,
    language: Option<String>,
    #[serde(rename = "continue")]
    continues: Option<bool>,
    flush: Option<bool>,
    add_timestamps: Option<bool>,
    add_phoneme_timestamps: Option<bool>,
    max_buffer_delay_ms: Option<u64>,
    cancel: Option<bool>,
}

/// The three voice forms: `"id"`, `{"id"}`, `{"mode":"id","id"}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawVoice {
    Id(String),
    Object {
        mode: Option<String>,
        id: Option<String>,
    },
}

impl RawVoice {
    fn into_id(self) -> Result<String, String> {
        let id = match self {
            RawVoice::Id(id) => id,
            RawVoice::Object { mode, id } => {
                if mode.as_deref().is_some_and(|m| m != "id") {
                    return Err("voice.mode must be \"id\" (embeddings are not supported)".into());
                }
                id.ok_or("voice.id is required")?
            }
        };
        if id.trim().is_empty() {
            return Err("voice.id is required".into());
        }
        Ok(id)
    }
}

/// Why a request failed validation.
enum Invalid {
    Bad(String),
    Model(String),
}

impl From<String> for Invalid {
    fn from(msg: String) -> Self {
        Invalid::Bad(msg)
    }
}

impl From<&str> for Invalid {
    fn from(msg: &str) -> Self {
        Invalid::Bad(msg.to_owned())
    }
}

#[derive(Debug, Default, Deserialize)]
struct RawFormat {
    container: Option<String>,
    encoding: Option<String>,
    sample_rate: Option<u64>,
}

/// Parses and validates one client text frame.
pub fn parse(text: &str) -> Result<Request, Rejected> {
    let bad = |context_id: Option<String>, msg: String| Rejected {
        context_id,
        failure: Failure::BadRequest(msg),
    };
    let value: Value =
        serde_json::from_str(text).map_err(|e| bad(None, format!("invalid JSON request: {e}")))?;
    // Read apart from the rest, so a request whose other fields are wrong
    // still gets its error on its context.
    let context_id = value
        .get("context_id")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let raw = RawRequest::deserialize(value)
        .map_err(|e| bad(context_id.clone(), format!("invalid request: {e}")))?;
    if raw.cancel == Some(true) {
        return match raw.context_id {
            Some(context_id) => Ok(Request::Cancel { context_id }),
            None => Err(bad(None, "a cancel request needs a context_id".into())),
        };
    }
    validate(raw)
        .map(Request::Generate)
        .map_err(|invalid| Rejected {
            context_id,
            failure: match invalid {
                Invalid::Bad(msg) => Failure::BadRequest(msg),
                Invalid::Model(model) => Failure::ModelNotFound(model),
            },
        })
}

fn validate(raw: RawRequest) -> Result<Generation, Invalid> {
    let model_id = raw.model_id.ok_or("model_id is required")?;
    if !model_id.starts_with("sonic") {
        return Err(Invalid::Model(model_id));
    }
    let transcript = raw.transcript.ok_or("transcript is required")?;
    let voice_id = raw.voice.ok_or("voice is required")?.into_id()?;
    let f = raw.output_format.ok_or("output_format is required")?;
    let format = AudioFormat::parse(
        f.container
            .as_deref()
            .ok_or("output_format.container is required")?,
        f.encoding
            .as_deref()
            .ok_or("output_format.encoding is required")?,
        f.sample_rate
            .ok_or("output_format.sample_rate is required")?,
    )
    .map_err(|e| e.to_string())?;
    let delay = raw
        .max_buffer_delay_ms
        .unwrap_or(DEFAULT_MAX_BUFFER_DELAY_MS);
    if delay > MAX_BUFFER_DELAY_MS {
        return Err(
            format!("max_buffer_delay_ms must be 0..={MAX_BUFFER_DELAY_MS}, got {delay}").into(),
        );
    }
    Ok(Generation {
        context_id: raw.context_id,
        transcript,
        settings: Settings {
            model_id,
            voice_id,
            language: raw.language,
            format,
            add_timestamps: raw.add_timestamps.unwrap_or(false),
            add_phoneme_timestamps: raw.add_phoneme_timestamps.unwrap_or(false),
        },
        continues: raw.continues.unwrap_or(false),
        flush: raw.flush.unwrap_or(false),
        max_buffer_delay: Duration::from_millis(delay),
    })
}

/// `{"type":"chunk","data":…,"done":false,"status_code":206,"step_time":…,"context_id":…}`,
/// with `flush_id` once the context has been flushed.
pub fn chunk(context_id: &str, data_b64: &str, step_time_ms: f64, flush_id: Option<u32>) -> String {
    let mut v = json!({
        "type": "chunk",
        "data": data_b64,
        "done": false,
        "status_code": STATUS_PARTIAL,
        "step_time": step_time_ms,
        "context_id": context_id,
    });
    if let (Some(id), Some(obj)) = (flush_id, v.as_object_mut()) {
        obj.insert("flush_id".into(), Value::from(id));
    }
    v.to_string()
}

/// `{"type":"timestamps","done":false,"status_code":206,"context_id":…,"word_timestamps":{words,start,end}}`.
pub fn timestamps(context_id: &str, words: &WordTimes) -> String {
    json!({
        "type": "timestamps",
        "done": false,
        "status_code": STATUS_PARTIAL,
        "context_id": context_id,
        "word_timestamps": {
            "words": words.words,
            "start": words.start,
            "end": words.end,
        },
    })
    .to_string()
}

/// `{"type":"phoneme_timestamps","done":false,"status_code":206,"context_id":…,"phoneme_timestamps":{phonemes,start,end}}`.
pub fn phoneme_timestamps(context_id: &str, phonemes: &PhonemeTimes) -> String {
    json!({
        "type": "phoneme_timestamps",
        "done": false,
        "status_code": STATUS_PARTIAL,
        "context_id": context_id,
        "phoneme_timestamps": {
            "phonemes": phonemes.phonemes,
            "start": phonemes.start,
            "end": phonemes.end,
        },
    })
    .to_string()
}

/// `{"type":"flush_done","done":false,"flush_done":true,"flush_id":…,"status_code":206,"context_id":…}`.
pub fn flush_done(context_id: &str, flush_id: u32) -> String {
    json!({
        "type": "flush_done",
        "done": false,
        "flush_done": true,
        "flush_id": flush_id,
        "status_code": STATUS_PARTIAL,
        "context_id": context_id,
    })
    .to_string()
}

/// `{"type":"done","done":true,"status_code":206,"context_id":…}`.
pub fn done(context_id: &str) -> String {
    json!({
        "type": "done",
        "done": true,
        "status_code": STATUS_PARTIAL,
        "context_id": context_id,
    })
    .to_string()
}

/// An `error` message in the shape `version` uses: from 2026-03-01
/// `{type, done, status_code, error_code, title, message, request_id,
/// context_id?}`, before `{type, done, error, status_code, context_id?}`.
pub fn error(
    version: ApiVersion,
    request_id: &str,
    context_id: Option<&str>,
    failure: &Failure,
) -> String {
    let mut v = if version.structured_errors() {
        let request_id = match context_id {
            Some(ctx) => format!("{request_id}:{ctx}"),
            None => request_id.to_owned(),
        };
        json!({
            "type": "error",
            "done": true,
            "status_code": failure.status_code(),
            "error_code": failure.error_code(),
            "title": failure.title(),
            "message": failure.to_string(),
            "request_id": request_id,
        })
    } else {
        json!({
            "type": "error",
            "done": true,
            "error": format!("{}: {failure}", failure.title()),
            "status_code": failure.status_code(),
        })
    };
    if let (Some(ctx), Some(obj)) = (context_id, v.as_object_mut()) {
        obj.insert("context_id".into(), Value::from(ctx));
    }
    v.to_string()
}

/// The HTTP error body of a refused upgrade (Cartesia's HTTP error object).
pub fn http_error(error_code: &str, title: &str, message: &str, request_id: &str) -> Value {
    json!({
        "error_code": error_code,
        "title": title,
        "message": message,
        "request_id": request_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cartesia::audio::Encoding;

    fn request(extra: Value) -> String {
        let mut v = json!({
            "model_id": "sonic-3",
            "transcript": "Hello, ",
            "voice": {"mode": "id", "id": "a0e99841-438c-4a64-b679-ae501e7d6091"},
            "output_format": {"container": "raw", "encoding": "pcm_mulaw", "sample_rate": 8000},
            "context_id": "turn-1",
        });
        for (k, val) in extra.as_object().unwrap() {
            v[k] = val.clone();
        }
        v.to_string()
    }

    #[test]
    fn a_documented_request_parses_with_its_defaults() {
        let Request::Generate(g) = parse(&request(json!({"continue": true}))).unwrap() else {
            panic!("a generation");
        };
        assert_eq!(g.context_id.as_deref(), Some("turn-1"));
        assert_eq!(g.transcript, "Hello, ");
        assert!(g.continues && !g.flush && !g.settings.add_timestamps);
        assert_eq!(g.settings.format.encoding, Encoding::PcmMulaw);
        assert_eq!(g.max_buffer_delay, Duration::from_millis(3_000));
        assert_eq!(
            parse(r#"{"context_id":"turn-1","cancel":true}"#).unwrap(),
            Request::Cancel {
                context_id: "turn-1".into()
            }
        );
    }

    #[test]
    fn invalid_requests_are_rejected_with_their_context() {
        for (extra, needle) in [
            (
                json!({"voice": {"mode": "embedding", "id": "x"}}),
                "voice.mode",
            ),
            (json!({"voice": {"mode": "id"}}), "voice.id is required"),
            (json!({"voice": ""}), "voice.id is required"),
            // A field of the wrong type fails the whole request, but the
            // error still names the context.
            (json!({"voice": 7}), "invalid request"),
            (json!({"continue": "yes"}), "invalid request"),
            (
                json!({"output_format": {"container": "mp3"}}),
                "encoding is required",
            ),
            (
                json!({"output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 12_000}}),
                "sample_rate 12000",
            ),
            (json!({"max_buffer_delay_ms": 9_000}), "max_buffer_delay_ms"),
            (json!({"transcript": null}), "transcript is required"),
        ] {
            let rejected = parse(&request(extra.clone())).unwrap_err();
            assert_eq!(rejected.context_id.as_deref(), Some("turn-1"), "{extra}");
            assert_eq!(rejected.failure.status_code(), 400);
            assert!(
                rejected.failure.to_string().contains(needle),
                "{extra}: {rejected:?}"
            );
        }
        let model = parse(&request(json!({"model_id": "eleven_flash_v2_5"}))).unwrap_err();
        assert_eq!(model.context_id.as_deref(), Some("turn-1"));
        assert_eq!(
            model.failure,
            Failure::ModelNotFound("eleven_flash_v2_5".into())
        );
        assert_eq!(model.failure.error_code(), "model_not_found");
        let bad_json = parse("{nope").unwrap_err();
        assert_eq!(
            (bad_json.context_id, bad_json.failure.status_code()),
            (None, 400)
        );
    }

    #[test]
    fn the_voice_may_be_an_id_an_id_object_or_a_mode_object() {
        for voice in [
            json!("6ccbfb76-1fc6-48f7-b71d-91ac6298247b"),
            json!({"id": "6ccbfb76-1fc6-48f7-b71d-91ac6298247b"}),
            json!({"mode": "id", "id": "6ccbfb76-1fc6-48f7-b71d-91ac6298247b", "extra": 1}),
        ] {
            let Request::Generate(g) = parse(&request(json!({"voice": voice.clone()}))).unwrap()
            else {
                panic!("a generation");
            };
            assert_eq!(
                g.settings.voice_id, "6ccbfb76-1fc6-48f7-b71d-91ac6298247b",
                "{voice}"
            );
        }
    }

    #[test]
    fn errors_take_the_shape_of_their_version() {
        let old: Value = serde_json::from_str(&error(
            ApiVersion::V2025_04_16,
            "req",
            Some("c"),
            &Failure::ConcurrencyLimited,
        ))
        .unwrap();
        assert_eq!(old["type"], "error");
        assert_eq!(old["done"], true);
        assert_eq!(old["status_code"], 429);
        assert_eq!(old["context_id"], "c");
        assert!(old["error"].as_str().unwrap().contains("concurrency limit"));
        assert!(old.get("error_code").is_none());

        let new: Value = serde_json::from_str(&error(
            ApiVersion::V2026_03_01,
            "req",
            None,
            &Failure::ConcurrencyLimited,
        ))
        .unwrap();
        assert_eq!(new["error_code"], "concurrency_limited");
        assert_eq!(new["title"], "Too many concurrent requests");
        assert_eq!(new["request_id"], "req");
        assert!(new.get("context_id").is_none() && new.get("error").is_none());
        assert_eq!(
            ApiVersion::parse("2024-11-13"),
            Some(ApiVersion::V2024_11_13)
        );
        assert_eq!(ApiVersion::parse("2023-01-01"), None);
    }
}
