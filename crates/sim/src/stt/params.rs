//! Query parameters of `GET /v1/listen`, validated the way Deepgram answers
//! them: a bad request is refused with HTTP 400 and a reason, never a 101.

use std::collections::HashMap;

use super::SttSimRefusal;

/// Audio encodings the simulator decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimEncoding {
    /// G.711 μ-law (`encoding=mulaw`).
    Mulaw,
    /// G.711 A-law (`encoding=alaw`).
    Alaw,
    /// Signed 16-bit little-endian PCM (`encoding=linear16`).
    Linear16,
}

impl SimEncoding {
    /// Bytes per sample on the wire.
    pub fn bytes_per_sample(self) -> u64 {
        match self {
            SimEncoding::Mulaw | SimEncoding::Alaw => 1,
            SimEncoding::Linear16 => 2,
        }
    }
}

/// The validated stream configuration of one `/v1/listen` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamParams {
    pub encoding: SimEncoding,
    /// 8000 or 16000.
    pub sample_rate: u32,
    pub interim_results: bool,
    /// Endpointing silence in ms; `None` for `endpointing=false` (finals are
    /// then never `speech_final`).
    pub endpointing_ms: Option<u32>,
    pub utterance_end_ms: Option<u32>,
    pub vad_events: bool,
    /// Echoed in `model_info.name`.
    pub model: String,
    pub language: String,
}

/// Deepgram's default endpointing silence.
pub const DEFAULT_ENDPOINTING_MS: u32 = 10;

impl Default for StreamParams {
    fn default() -> Self {
        StreamParams {
            encoding: SimEncoding::Mulaw,
            sample_rate: 8_000,
            interim_results: false,
            endpointing_ms: Some(DEFAULT_ENDPOINTING_MS),
            utterance_end_ms: None,
            vad_events: false,
            model: "general".to_owned(),
            language: "en".to_owned(),
        }
    }
}

fn bad(param: &'static str, reason: impl Into<String>) -> SttSimRefusal {
    SttSimRefusal::BadParam {
        param,
        reason: reason.into(),
    }
}

fn parse_bool(q: &HashMap<String, String>, param: &'static str) -> Result<bool, SttSimRefusal> {
    match q.get(param).map(|v| v.to_ascii_lowercase()).as_deref() {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(bad(param, format!("expected true or false, got {other:?}"))),
    }
}

fn parse_ms(param: &'static str, value: &str) -> Result<u32, SttSimRefusal> {
    value
        .parse::<u32>()
        .map_err(|_| bad(param, format!("expected milliseconds, got {value:?}")))
}

impl StreamParams {
    /// Validates the query string. Unknown parameters are ignored, as
    /// Deepgram ignores feature flags that do not change the framing.
    pub fn from_query(q: &HashMap<String, String>) -> Result<Self, SttSimRefusal> {
        let (encoding, sample_rate) = parse_format(q)?;
        if let Some(ch) = q.get("channels").filter(|c| c.as_str() != "1") {
            return Err(bad(
                "channels",
                format!("only mono is supported, got {ch:?}"),
            ));
        }
        let interim_results = parse_bool(q, "interim_results")?;
        let endpointing_ms = match q.get("endpointing").map(String::as_str) {
            None | Some("true") => Some(DEFAULT_ENDPOINTING_MS),
            Some("false") => None,
            Some(v) => Some(parse_ms("endpointing", v)?),
        };
        let utterance_end_ms = match q.get("utterance_end_ms") {
            None => None,
            Some(_) if !interim_results => {
                return Err(bad("utterance_end_ms", "requires interim_results=true"));
            }
            Some(v) => Some(parse_ms("utterance_end_ms", v)?),
        };
        let defaults = StreamParams::default();
        Ok(StreamParams {
            encoding,
            sample_rate,
            interim_results,
            endpointing_ms,
            utterance_end_ms,
            vad_events: parse_bool(q, "vad_events")?,
            model: q.get("model").cloned().unwrap_or(defaults.model),
            language: q.get("language").cloned().unwrap_or(defaults.language),
        })
    }
}

/// `encoding` and `sample_rate`, which only make sense together.
fn parse_format(q: &HashMap<String, String>) -> Result<(SimEncoding, u32), SttSimRefusal> {
    let encoding = match q.get("encoding").map(String::as_str) {
        Some("mulaw") => SimEncoding::Mulaw,
        Some("alaw") => SimEncoding::Alaw,
        Some("linear16") => SimEncoding::Linear16,
        Some(other) => return Err(bad("encoding", format!("unsupported encoding {other:?}"))),
        // Containerised audio would be sniffed by Deepgram; the simulator
        // only decodes raw audio, so it says so instead of guessing.
        None => {
            return Err(bad(
                "encoding",
                "required (raw audio only: mulaw, alaw, linear16)",
            ));
        }
    };
    let sample_rate = match q.get("sample_rate").map(String::as_str) {
        None => return Err(bad("sample_rate", "required when encoding is set")),
        Some("8000") => 8_000,
        Some("16000") => 16_000,
        Some(other) => {
            return Err(bad(
                "sample_rate",
                format!("must be 8000 or 16000, got {other:?}"),
            ));
        }
    };
    Ok((encoding, sample_rate))
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn refused_param(pairs: &[(&str, &str)]) -> &'static str {
        match StreamParams::from_query(&query(pairs)) {
            Err(SttSimRefusal::BadParam { param, .. }) => param,
            other => panic!("expected a refusal for {pairs:?}, got {other:?}"),
        }
    }

    #[test]
    fn a_twilio_style_query_is_accepted_with_unknown_params_ignored() {
        let p = StreamParams::from_query(&query(&[
            ("model", "nova-3"),
            ("encoding", "mulaw"),
            ("sample_rate", "8000"),
            ("channels", "1"),
            ("interim_results", "true"),
            ("endpointing", "300"),
            ("utterance_end_ms", "1000"),
            ("vad_events", "true"),
            ("smart_format", "true"),
        ]))
        .unwrap();
        assert_eq!(p.encoding, SimEncoding::Mulaw);
        assert_eq!(p.sample_rate, 8_000);
        assert!(p.interim_results && p.vad_events);
        assert_eq!(p.endpointing_ms, Some(300));
        assert_eq!(p.utterance_end_ms, Some(1000));
        assert_eq!(p.model, "nova-3");
    }

    #[test]
    fn defaults_follow_deepgram() {
        let p = StreamParams::from_query(&query(&[
            ("encoding", "linear16"),
            ("sample_rate", "16000"),
        ]))
        .unwrap();
        assert_eq!(p.endpointing_ms, Some(DEFAULT_ENDPOINTING_MS));
        assert!(!p.interim_results && !p.vad_events);
        let off = query(&[
            ("encoding", "alaw"),
            ("sample_rate", "8000"),
            ("endpointing", "false"),
        ]);
        assert_eq!(StreamParams::from_query(&off).unwrap().endpointing_ms, None);
    }

    #[test]
    fn bad_queries_name_the_offending_parameter() {
        assert_eq!(refused_param(&[("sample_rate", "8000")]), "encoding");
        assert_eq!(
            refused_param(&[("encoding", "opus"), ("sample_rate", "8000")]),
            "encoding"
        );
        assert_eq!(refused_param(&[("encoding", "mulaw")]), "sample_rate");
        assert_eq!(
            refused_param(&[("encoding", "mulaw"), ("sample_rate", "44100")]),
            "sample_rate"
        );
        assert_eq!(
            refused_param(&[
                ("encoding", "mulaw"),
                ("sample_rate", "8000"),
                ("channels", "2")
            ]),
            "channels"
        );
        assert_eq!(
            refused_param(&[
                ("encoding", "mulaw"),
                ("sample_rate", "8000"),
                ("utterance_end_ms", "1000")
            ]),
            "utterance_end_ms"
        );
        assert_eq!(
            refused_param(&[
                ("encoding", "mulaw"),
                ("sample_rate", "8000"),
                ("endpointing", "soon")
            ]),
            "endpointing"
        );
        assert_eq!(
            refused_param(&[
                ("encoding", "mulaw"),
                ("sample_rate", "8000"),
                ("vad_events", "yes")
            ]),
            "vad_events"
        );
    }
}
