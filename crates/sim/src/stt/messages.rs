//! The JSON messages the simulator sends, with Deepgram's exact key names
//! (docs/protocols.md §2.3), and the small helpers that fill them.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// A server → client text message, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type")]
pub enum ServerMessage {
    Results(ResultsMessage),
    SpeechStarted {
        channel: [u32; 1],
        timestamp: f64,
    },
    UtteranceEnd {
        channel: [u32; 2],
        last_word_end: f64,
    },
    Metadata(MetadataMessage),
    /// Deepgram's error frame: the stream may stay open after it.
    Error {
        description: String,
        message: String,
        variant: String,
    },
}

/// A transcription result (interim or final).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResultsMessage {
    pub channel_index: [u32; 2],
    pub duration: f64,
    pub start: f64,
    pub is_final: bool,
    pub speech_final: bool,
    pub from_finalize: bool,
    pub channel: Channel,
    pub metadata: ResultMetadata,
}

impl ResultsMessage {
    /// The transcript of the first (only) alternative.
    pub fn transcript(&self) -> &str {
        self.channel
            .alternatives
            .first()
            .map_or("", |a| a.transcript.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Channel {
    pub alternatives: Vec<Alternative>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alternative {
    pub transcript: String,
    pub confidence: f64,
    pub words: Vec<Word>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Word {
    pub word: String,
    pub start: f64,
    pub end: f64,
    pub confidence: f64,
    pub punctuated_word: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelInfo {
    pub name: String,
    pub version: String,
    pub arch: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResultMetadata {
    pub request_id: String,
    pub model_info: ModelInfo,
    pub model_uuid: String,
}

/// The summary sent after `CloseStream`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetadataMessage {
    pub transaction_key: String,
    pub request_id: String,
    /// Hex SHA-256 of every audio byte received.
    pub sha256: String,
    /// RFC 3339 UTC time the stream was opened.
    pub created: String,
    /// Seconds of audio received.
    pub duration: f64,
    pub channels: u32,
    pub models: Vec<String>,
    pub model_info: BTreeMap<String, ModelInfo>,
}

/// A fixed model UUID: the simulator has one "model".
pub const MODEL_UUID: &str = "5e6c6b2a-0000-4000-8000-00000000c0de";

/// Seconds from audio milliseconds, exact to the millisecond in JSON.
pub fn secs(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// The model description echoed in results, naming the requested model.
pub fn model_info(model: &str) -> ModelInfo {
    ModelInfo {
        name: model.to_owned(),
        version: "2024-01-01.0".to_owned(),
        arch: "callgate-sim".to_owned(),
    }
}

/// Splits a script line into words spread evenly over `[start_ms, end_ms]`.
/// `word` is the lower-cased token without punctuation; `punctuated_word`
/// is the token as written.
pub fn spread_words(tokens: &[&str], start_ms: u64, end_ms: u64) -> Vec<Word> {
    let n = tokens.len().max(1) as u64;
    let span = end_ms.saturating_sub(start_ms);
    tokens
        .iter()
        .enumerate()
        .map(|(i, tok)| {
            let i = i as u64;
            Word {
                word: bare_word(tok),
                start: secs(start_ms + span * i / n),
                end: secs(start_ms + span * (i + 1) / n),
                // Deterministic but not constant, so clients cannot rely on
                // a magic value.
                confidence: 0.95 + (i % 5) as f64 / 100.0,
                punctuated_word: (*tok).to_owned(),
            }
        })
        .collect()
}

/// Mean word confidence, or 0 for no words (as Deepgram reports silence).
pub fn mean_confidence(words: &[Word]) -> f64 {
    if words.is_empty() {
        return 0.0;
    }
    let sum: f64 = words.iter().map(|w| w.confidence).sum();
    (sum / words.len() as f64 * 1000.0).round() / 1000.0
}

fn bare_word(token: &str) -> String {
    token
        .trim_matches(|c: char| !c.is_alphanumeric())
        .to_lowercase()
}

/// Formats a wall-clock time as RFC 3339 UTC with milliseconds
/// (`2023-11-14T22:13:20.250Z`, the sub-millisecond part truncated), as
/// Deepgram's `created` reads; instants before 1970 print as the epoch.
pub fn rfc3339_utc(t: SystemTime) -> String {
    // A clock past jiff's range (year 9999) is broken: clamp to its end.
    let ts = jiff::Timestamp::try_from(t.max(UNIX_EPOCH)).unwrap_or(jiff::Timestamp::MAX);
    format!("{ts:.3}")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rfc3339_matches_known_instants() {
        let at = |s: u64, ms: u64| UNIX_EPOCH + Duration::from_secs(s) + Duration::from_millis(ms);
        assert_eq!(rfc3339_utc(at(0, 0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_utc(at(951_782_400, 5)), "2000-02-29T00:00:00.005Z");
        assert_eq!(
            rfc3339_utc(at(1_700_000_000, 250)),
            "2023-11-14T22:13:20.250Z"
        );
        assert_eq!(
            rfc3339_utc(at(4_107_542_399, 999)),
            "2100-02-28T23:59:59.999Z"
        );
        // Microseconds are truncated, not rounded; before 1970 is the epoch.
        let just_before = at(1, 0) - Duration::from_nanos(1);
        assert_eq!(rfc3339_utc(just_before), "1970-01-01T00:00:00.999Z");
        let early = UNIX_EPOCH - Duration::from_secs(86_400);
        assert_eq!(rfc3339_utc(early), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn tagged_messages_have_deepgram_keys() {
        let v = serde_json::to_value(ServerMessage::UtteranceEnd {
            channel: [0, 1],
            last_word_end: 2.31,
        })
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type":"UtteranceEnd","channel":[0,1],"last_word_end":2.31})
        );
        let v = serde_json::to_value(ServerMessage::SpeechStarted {
            channel: [0],
            timestamp: 1.12,
        })
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type":"SpeechStarted","channel":[0],"timestamp":1.12})
        );
    }

    #[test]
    fn words_cover_the_span_in_order() {
        let words = spread_words(&["Hi,", "I'd", "like", "tea."], 1_000, 2_000);
        assert_eq!(words.len(), 4);
        assert_eq!(words[0].start, 1.0);
        assert_eq!(words[3].end, 2.0);
        assert!(words.windows(2).all(|w| w[0].end <= w[1].start));
        assert_eq!(words[0].word, "hi");
        assert_eq!(words[1].word, "i'd");
        assert_eq!(words[3].punctuated_word, "tea.");
    }
}
