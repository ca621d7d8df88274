//! Session configuration: which provider, how to reach it, the audio
//! format, the deadlines and the mid-call reconnect policy.

use std::fmt;
use std::time::Duration;

use reconnect::ReconnectPolicy;

use crate::error::TtsError;

/// Cartesia API version sent as `Cartesia-Version`: the newest, the one
/// the official SDK (4.2) sends. Older dates still work (Cartesia keeps
/// every version's fields); errors are structured from 2026-03-01 on.
pub const DEFAULT_CARTESIA_VERSION: &str = "2026-08-14";

/// Which wire protocol a session speaks.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// ElevenLabs `multi-stream-input` (`/v1/text-to-speech/{voice}/multi-stream-input`).
    #[default]
    ElevenLabs,
    /// Cartesia `/tts/websocket`.
    Cartesia,
}

impl Provider {
    /// The model used when none is configured: ElevenLabs
    /// `eleven_flash_v2_5`, Cartesia `sonic-3` (each vendor's low-latency
    /// streaming model).
    pub fn default_model(self) -> &'static str {
        match self {
            Provider::ElevenLabs => "eleven_flash_v2_5",
            Provider::Cartesia => "sonic-3",
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Provider::ElevenLabs => "elevenlabs",
            Provider::Cartesia => "cartesia",
        })
    }
}

/// Audio formats callgate asks TTS providers for: what telephony carriers
/// play without transcoding, or linear PCM for resampling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OutputFormat {
    /// G.711 μ-law, 8 kHz (Twilio-ready).
    #[default]
    Ulaw8000,
    /// G.711 A-law, 8 kHz.
    Alaw8000,
    /// 16-bit little-endian PCM, 8 kHz.
    Pcm8000,
    /// 16-bit little-endian PCM, 16 kHz.
    Pcm16000,
}

impl OutputFormat {
    /// The ElevenLabs `output_format` query value.
    pub fn as_str(self) -> &'static str {
        match self {
            OutputFormat::Ulaw8000 => "ulaw_8000",
            OutputFormat::Alaw8000 => "alaw_8000",
            OutputFormat::Pcm8000 => "pcm_8000",
            OutputFormat::Pcm16000 => "pcm_16000",
        }
    }

    /// Samples per second.
    pub fn sample_rate(self) -> u32 {
        match self {
            OutputFormat::Pcm16000 => 16_000,
            _ => 8_000,
        }
    }

    /// Bytes per sample.
    pub fn bytes_per_sample(self) -> usize {
        match self {
            OutputFormat::Ulaw8000 | OutputFormat::Alaw8000 => 1,
            OutputFormat::Pcm8000 | OutputFormat::Pcm16000 => 2,
        }
    }

    /// Playing time of `bytes` bytes of this format.
    pub fn duration_of(self, bytes: usize) -> Duration {
        let samples = (bytes / self.bytes_per_sample()) as u64;
        Duration::from_micros(samples * 1_000_000 / u64::from(self.sample_rate()))
    }
}

impl fmt::Display for OutputFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How to reach a TTS provider. `Debug` never prints the API key.
#[derive(Clone)]
pub struct TtsConfig {
    /// Which wire protocol: ElevenLabs (default) or Cartesia.
    pub provider: Provider,
    /// Scheme and authority, e.g. `wss://api.elevenlabs.io`,
    /// `wss://api.cartesia.ai` or `ws://127.0.0.1:PORT`.
    pub base_url: String,
    /// The voice (ElevenLabs voice id, Cartesia voice UUID).
    pub voice_id: String,
    /// ElevenLabs `model_id` query value, or Cartesia `model_id` field.
    pub model_id: String,
    /// Sent as `xi-api-key` (ElevenLabs) or `Authorization: Bearer`
    /// (Cartesia) on the upgrade.
    pub api_key: Option<String>,
    /// `Cartesia-Version` header (Cartesia only).
    pub cartesia_version: String,
    pub output_format: OutputFormat,
    /// Bound on TCP + TLS + WebSocket handshake.
    pub connect_timeout: Duration,
    /// Send a keep-alive when nothing was sent for this long. Must be well
    /// under the provider's inactivity timeout (20 s by default).
    pub keepalive_interval: Duration,
    /// Bound on `close()`, and on how long a closing context may go without
    /// audio or its final message (see [`crate::TtsHandle::close_context`]).
    pub close_timeout: Duration,
    /// How a socket that drops mid-call is reconnected (see the crate
    /// docs); [`ReconnectPolicy::never`] ends the session at the first drop.
    pub reconnect: ReconnectPolicy,
}

impl TtsConfig {
    /// An ElevenLabs configuration with callgate's defaults: μ-law 8 kHz,
    /// `eleven_flash_v2_5`, 5 s connect, 10 s keep-alive, 3 s close, the
    /// default reconnect policy.
    pub fn new(base_url: impl Into<String>, voice_id: impl Into<String>) -> Self {
        TtsConfig {
            provider: Provider::ElevenLabs,
            base_url: base_url.into(),
            voice_id: voice_id.into(),
            model_id: Provider::ElevenLabs.default_model().to_owned(),
            api_key: None,
            cartesia_version: DEFAULT_CARTESIA_VERSION.to_owned(),
            output_format: OutputFormat::Ulaw8000,
            connect_timeout: Duration::from_secs(5),
            keepalive_interval: Duration::from_secs(10),
            close_timeout: Duration::from_secs(3),
            reconnect: ReconnectPolicy::default(),
        }
    }

    /// A Cartesia configuration with the same defaults and model `sonic-3`.
    pub fn cartesia(base_url: impl Into<String>, voice_id: impl Into<String>) -> Self {
        TtsConfig {
            provider: Provider::Cartesia,
            model_id: Provider::Cartesia.default_model().to_owned(),
            ..TtsConfig::new(base_url, voice_id)
        }
    }

    /// The WebSocket URL this configuration connects to.
    ///
    /// # Errors
    /// [`TtsError::InvalidConfig`] when the base URL is not `ws://`/`wss://`,
    /// an id or the Cartesia version is empty, a duration is zero, or the
    /// reconnect policy is incoherent.
    pub fn endpoint(&self) -> Result<String, TtsError> {
        let base = self.base_url.trim_end_matches('/');
        if !(base.starts_with("ws://") || base.starts_with("wss://")) {
            return Err(invalid(
                "base_url",
                format!("{base:?} must start with ws:// or wss://"),
            ));
        }
        if self.voice_id.is_empty() || self.model_id.is_empty() {
            return Err(invalid("voice_id/model_id", "must not be empty".into()));
        }
        let zero = [
            ("connect_timeout", self.connect_timeout),
            ("keepalive_interval", self.keepalive_interval),
            ("close_timeout", self.close_timeout),
        ];
        if let Some((field, _)) = zero.iter().find(|(_, d)| d.is_zero()) {
            return Err(invalid(field, "must be greater than zero".into()));
        }
        self.reconnect
            .validate()
            .map_err(|e| invalid("reconnect", e.to_string()))?;
        if self.provider == Provider::Cartesia {
            if self.cartesia_version.is_empty() {
                return Err(invalid("cartesia_version", "must not be empty".into()));
            }
            return Ok(format!("{base}/tts/websocket"));
        }
        Ok(format!(
            "{base}/v1/text-to-speech/{}/multi-stream-input?model_id={}&output_format={}",
            encode(&self.voice_id),
            encode(&self.model_id),
            self.output_format.as_str(),
        ))
    }
}

impl fmt::Debug for TtsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TtsConfig")
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("voice_id", &self.voice_id)
            .field("model_id", &self.model_id)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("cartesia_version", &self.cartesia_version)
            .field("output_format", &self.output_format)
            .field("connect_timeout", &self.connect_timeout)
            .field("keepalive_interval", &self.keepalive_interval)
            .field("close_timeout", &self.close_timeout)
            .field("reconnect", &self.reconnect)
            .finish()
    }
}

fn invalid(field: &'static str, reason: String) -> TtsError {
    TtsError::InvalidConfig { field, reason }
}

/// Percent-encodes everything but RFC 3986 unreserved characters, so an id
/// can never change the shape of the URL.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_prints_the_key() {
        let mut cfg = TtsConfig::new("ws://127.0.0.1:1", "voice");
        cfg.api_key = Some("sk_secret_123".into());
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("sk_secret_123"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }

    #[test]
    fn endpoint_is_built_and_encoded() {
        let mut cfg = TtsConfig::new("wss://api.elevenlabs.io/", "v/1 x");
        cfg.output_format = OutputFormat::Pcm16000;
        assert_eq!(
            cfg.endpoint().unwrap(),
            "wss://api.elevenlabs.io/v1/text-to-speech/v%2F1%20x/multi-stream-input\
             ?model_id=eleven_flash_v2_5&output_format=pcm_16000"
        );
        let bad = TtsConfig::new("https://api.elevenlabs.io", "v");
        assert!(matches!(
            bad.endpoint(),
            Err(TtsError::InvalidConfig {
                field: "base_url",
                ..
            })
        ));
    }

    #[test]
    fn cartesia_endpoint_and_provider_names() {
        let cfg = TtsConfig::cartesia("wss://api.cartesia.ai/", "voice");
        assert_eq!(
            cfg.endpoint().unwrap(),
            "wss://api.cartesia.ai/tts/websocket"
        );
        assert_eq!(cfg.model_id, "sonic-3");
        let mut bad = cfg.clone();
        bad.cartesia_version.clear();
        assert!(matches!(
            bad.endpoint(),
            Err(TtsError::InvalidConfig {
                field: "cartesia_version",
                ..
            })
        ));
        let mut bad = cfg;
        bad.reconnect.max_ms = 1;
        assert!(matches!(
            bad.endpoint(),
            Err(TtsError::InvalidConfig {
                field: "reconnect",
                ..
            })
        ));
        let p: Provider = serde_json::from_str("\"cartesia\"").unwrap();
        assert_eq!(p, Provider::Cartesia);
        assert_eq!(
            serde_json::to_string(&Provider::ElevenLabs).unwrap(),
            "\"elevenlabs\""
        );
        assert_eq!(Provider::default(), Provider::ElevenLabs);
    }

    #[test]
    fn format_arithmetic() {
        assert_eq!(
            OutputFormat::Ulaw8000.duration_of(8_000),
            Duration::from_secs(1)
        );
        assert_eq!(
            OutputFormat::Pcm16000.duration_of(32_000),
            Duration::from_secs(1)
        );
        assert_eq!(OutputFormat::Alaw8000.to_string(), "alaw_8000");
    }
}
