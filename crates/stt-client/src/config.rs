//! Session configuration and the `/v1/listen` query string it becomes.

use std::fmt;
use std::time::Duration;

use crate::SttError;

/// Raw audio encodings the client declares to the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SttEncoding {
    /// G.711 μ-law (Twilio's media-stream format).
    Mulaw,
    /// G.711 A-law.
    Alaw,
    /// Signed 16-bit little-endian PCM.
    Linear16,
}

impl SttEncoding {
    /// The `encoding` query value.
    pub fn as_param(self) -> &'static str {
        match self {
            SttEncoding::Mulaw => "mulaw",
            SttEncoding::Alaw => "alaw",
            SttEncoding::Linear16 => "linear16",
        }
    }
}

/// Everything needed to open one streaming session.
#[derive(Clone)]
pub struct SttConfig {
    /// e.g. `wss://api.deepgram.com/v1/listen` or `ws://127.0.0.1:PORT/v1/listen`.
    pub url: String,
    /// Sent as `Authorization: Token <key>`; never printed by `Debug`.
    pub api_key: Option<String>,
    pub model: Option<String>,
    pub language: Option<String>,
    pub encoding: SttEncoding,
    pub sample_rate: u32,
    pub interim_results: bool,
    /// Endpointing silence; `None` sends `endpointing=false`.
    pub endpointing_ms: Option<u32>,
    /// Word-gap detector; requires `interim_results`.
    pub utterance_end_ms: Option<u32>,
    pub vad_events: bool,
    /// Bound on TCP + TLS + WebSocket upgrade.
    pub connect_timeout: Duration,
    /// A `KeepAlive` is sent when no audio was sent for this long (the
    /// provider closes idle streams after 10 s).
    pub keepalive_interval: Duration,
    /// Bound on `CloseStream` → final results, `Metadata` and the close.
    pub close_timeout: Duration,
    /// How a socket that drops mid-call is reopened.
    pub reconnect: reconnect::ReconnectPolicy,
}

impl Default for SttConfig {
    /// Deepgram, Twilio audio (μ-law 8 kHz), phone-call endpointing.
    fn default() -> Self {
        SttConfig {
            url: "wss://api.deepgram.com/v1/listen".to_owned(),
            api_key: None,
            model: Some("nova-3".to_owned()),
            language: Some("en".to_owned()),
            encoding: SttEncoding::Mulaw,
            sample_rate: 8_000,
            interim_results: true,
            endpointing_ms: Some(300),
            utterance_end_ms: Some(1_000),
            vad_events: true,
            connect_timeout: Duration::from_secs(5),
            keepalive_interval: Duration::from_secs(4),
            close_timeout: Duration::from_secs(5),
            reconnect: reconnect::ReconnectPolicy::default(),
        }
    }
}

impl fmt::Debug for SttConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SttConfig")
            .field("url", &self.url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("language", &self.language)
            .field("encoding", &self.encoding)
            .field("sample_rate", &self.sample_rate)
            .field("interim_results", &self.interim_results)
            .field("endpointing_ms", &self.endpointing_ms)
            .field("utterance_end_ms", &self.utterance_end_ms)
            .field("vad_events", &self.vad_events)
            .field("connect_timeout", &self.connect_timeout)
            .field("keepalive_interval", &self.keepalive_interval)
            .field("close_timeout", &self.close_timeout)
            .field("reconnect", &self.reconnect)
            .finish()
    }
}

fn invalid(field: &'static str, reason: &str) -> SttError {
    SttError::InvalidConfig {
        field,
        reason: reason.to_owned(),
    }
}

impl SttConfig {
    /// Checks what the provider would otherwise refuse later, or what would
    /// make a timer spin.
    pub fn validate(&self) -> Result<(), SttError> {
        if !(self.url.starts_with("ws://") || self.url.starts_with("wss://")) {
            return Err(invalid("url", "must start with ws:// or wss://"));
        }
        if self.sample_rate == 0 {
            return Err(invalid("sample_rate", "must be positive"));
        }
        if self.utterance_end_ms.is_some() && !self.interim_results {
            return Err(invalid("utterance_end_ms", "requires interim_results"));
        }
        let zero = [
            ("connect_timeout", self.connect_timeout),
            ("keepalive_interval", self.keepalive_interval),
            ("close_timeout", self.close_timeout),
        ];
        if let Some((field, _)) = zero.iter().find(|(_, d)| d.is_zero()) {
            return Err(invalid(field, "must be positive"));
        }
        Ok(())
    }

    /// The URL with the streaming options as query parameters.
    pub fn request_url(&self) -> String {
        let mut params: Vec<(&str, String)> = vec![
            ("encoding", self.encoding.as_param().to_owned()),
            ("sample_rate", self.sample_rate.to_string()),
            ("channels", "1".to_owned()),
            ("interim_results", self.interim_results.to_string()),
            ("vad_events", self.vad_events.to_string()),
            (
                "endpointing",
                self.endpointing_ms
                    .map_or_else(|| "false".to_owned(), |ms| ms.to_string()),
            ),
        ];
        if let Some(ms) = self.utterance_end_ms {
            params.push(("utterance_end_ms", ms.to_string()));
        }
        if let Some(model) = &self.model {
            params.push(("model", model.clone()));
        }
        if let Some(language) = &self.language {
            params.push(("language", language.clone()));
        }
        let query: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{k}={}", percent_encode(v)))
            .collect();
        let sep = if self.url.contains('?') { '&' } else { '?' };
        format!("{}{sep}{}", self.url, query.join("&"))
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn percent_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_prints_the_key() {
        let cfg = SttConfig {
            api_key: Some("sekrit-123".into()),
            ..SttConfig::default()
        };
        let dbg = format!("{cfg:?}");
        assert!(!dbg.contains("sekrit"), "{dbg}");
        assert!(dbg.contains("<redacted>"));
    }

    #[test]
    fn query_carries_every_option() {
        let cfg = SttConfig {
            url: "ws://127.0.0.1:9/v1/listen".into(),
            language: Some("en US".into()),
            ..SttConfig::default()
        };
        assert_eq!(
            cfg.request_url(),
            "ws://127.0.0.1:9/v1/listen?encoding=mulaw&sample_rate=8000&channels=1&interim_results=true\
             &vad_events=true&endpointing=300&utterance_end_ms=1000&model=nova-3&language=en%20US"
        );
        let off = SttConfig {
            url: "wss://x/v1/listen?tag=a".into(),
            endpointing_ms: None,
            utterance_end_ms: None,
            model: None,
            language: None,
            ..SttConfig::default()
        };
        assert!(
            off.request_url()
                .starts_with("wss://x/v1/listen?tag=a&encoding=mulaw")
        );
        assert!(off.request_url().ends_with("&endpointing=false"));
    }

    #[test]
    fn validation_names_the_field() {
        let field = |cfg: SttConfig| match cfg.validate() {
            Err(SttError::InvalidConfig { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let base = SttConfig::default();
        assert!(base.validate().is_ok());
        assert_eq!(
            field(SttConfig {
                url: "http://x".into(),
                ..base.clone()
            }),
            "url"
        );
        assert_eq!(
            field(SttConfig {
                interim_results: false,
                ..base.clone()
            }),
            "utterance_end_ms"
        );
        assert_eq!(
            field(SttConfig {
                keepalive_interval: Duration::ZERO,
                ..base
            }),
            "keepalive_interval"
        );
    }
}
