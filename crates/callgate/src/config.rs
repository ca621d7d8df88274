//! Server configuration: `config/callgate.toml`, overridden by environment.
//!
//! Every key has a default and a comment in `config/callgate.toml`. Environment
//! variables override the file: `CALLGATE_<SECTION>__<KEY>` (double underscore
//! between section and key, e.g. `CALLGATE_STT__API_KEY`), plus the shortcut
//! `CALLGATE_DATABASE_URL` for `database.url`. Durations are integers with
//! their unit in the key name (`_ms`, `_s`).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use figment::Figment;
use figment::providers::{Format, Serialized, Toml};
use reconnect::ReconnectPolicy;
use serde::{Deserialize, Serialize};

mod admission;
mod agent;
mod drain;
mod env;
mod exposure;
mod faults;
mod ledger;
mod ownership;
mod receipt;
mod sip;
mod twilio_webhook;
mod webrtc;
pub use admission::{AdmissionConfig, AutoTag, MaxCalls, MaxSetups};
pub use agent::AgentConfig;
pub use drain::{DrainConfig, DrainPolicy};
pub use exposure::Exposure;
pub use faults::FaultsConfig;
pub use ledger::{LedgerConfig, PressureConfig};
pub use ownership::OwnershipConfig;
pub use receipt::{MAX_LABEL_KEY_BYTES, MAX_LABEL_VALUE_BYTES, ReceiptConfig, RetentionConfig};
pub use sip::{SipConfig, SipOverflow};
pub use twilio_webhook::TwilioWebhookConfig;
pub use webrtc::{WebrtcConfig, WebrtcOverflow};

/// The whole configuration.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub twilio: TwilioConfig,
    /// The partner WebSocket ingress (`/v1/partner/stream`).
    pub partner: PartnerIngressConfig,
    /// Partners allowed on the partner ingress, by id.
    pub partners: std::collections::BTreeMap<String, PartnerConfig>,
    pub admission: AdmissionConfig,
    pub database: DatabaseConfig,
    pub stt: SttSection,
    pub tts: TtsSection,
    pub dialog: DialogSection,
    pub tools: ToolsConfig,
    pub overflow: OverflowConfig,
    pub call: CallConfig,
    pub retention: RetentionConfig,
    /// What a receipt records about the call's origin.
    pub receipt: ReceiptConfig,
    pub log: LogConfig,
    /// The SIP/RTP ingress.
    pub sip: SipConfig,
    /// The WebRTC ingress.
    pub webrtc: WebrtcConfig,
    /// The counter reconciler (`reconcile`).
    pub ledger: LedgerConfig,
    /// Committed-pressure weights.
    pub pressure: PressureConfig,
    /// The HAProxy agent-check responder (`agent`).
    pub agent: AgentConfig,
    /// What a drain does to live calls, and when it gives up on them.
    pub drain: DrainConfig,
    /// Heartbeats and the owner lease (`ownership`).
    pub ownership: OwnershipConfig,
    /// Deliberate defects, all off (`config::faults`).
    pub faults: FaultsConfig,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// HTTP/WebSocket listener (media streams, health; metrics and admin too
    /// unless `admin_listen` is set).
    pub listen: SocketAddr,
    /// A second listener for the operator surface (`/metrics`, `/admin/*`,
    /// receipts). When set, `listen` serves only the upgrades and the
    /// probes, so a firewall or NetworkPolicy can open the two to different
    /// peers.
    pub admin_listen: Option<SocketAddr>,
    /// This instance's name: the owner recorded in the session ledger.
    pub instance: String,
    /// When set, `/admin/*` requires `Authorization: Bearer <token>` from every
    /// peer; unset, `/admin/*` answers loopback peers only.
    pub admin_token: Option<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], 8080)),
            admin_listen: None,
            instance: default_instance(),
            admin_token: None,
        }
    }
}

fn default_instance() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "callgate".to_string())
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TwilioConfig {
    /// When set, `X-Twilio-Signature` is required and checked on every upgrade.
    pub auth_token: Option<String>,
    /// The secret of a Twilio SharedKey, for accounts whose Webhooks Rules
    /// sign with it (`X-Twilio-Webhooks-Signature-Settings`, HMAC-SHA256).
    /// When set, signatures are required even without `auth_token`.
    pub shared_key_secret: Option<String>,
    /// The public URL Twilio connects to (`wss://…/v1/media-stream`), as signed.
    /// Needed when a proxy rewrites the host; otherwise the Host header is used.
    pub public_url: Option<String>,
    /// Largest WebSocket message accepted from the carrier, in bytes.
    pub max_message_bytes: usize,
    /// Largest decoded `media` payload accepted, in bytes (160 = one 20 ms frame).
    pub max_media_payload_bytes: usize,
    /// How long after the upgrade the `start` event must arrive.
    pub start_timeout_ms: u64,
    /// The voice webhook (`POST /v1/twilio/voice`).
    pub webhook: TwilioWebhookConfig,
}

/// Secrets are never printed: `Debug` shows only whether they are set.
impl std::fmt::Debug for TwilioConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = |s: &Option<String>| if s.is_some() { "<set>" } else { "<unset>" };
        f.debug_struct("TwilioConfig")
            .field("auth_token", &set(&self.auth_token))
            .field("shared_key_secret", &set(&self.shared_key_secret))
            .field("public_url", &self.public_url)
            .field("max_message_bytes", &self.max_message_bytes)
            .field("max_media_payload_bytes", &self.max_media_payload_bytes)
            .field("start_timeout_ms", &self.start_timeout_ms)
            .field("webhook", &self.webhook)
            .finish()
    }
}

impl Default for TwilioConfig {
    fn default() -> Self {
        TwilioConfig {
            auth_token: None,
            shared_key_secret: None,
            public_url: None,
            max_message_bytes: 64 * 1024,
            max_media_payload_bytes: 1_600,
            start_timeout_ms: 5_000,
            webhook: TwilioWebhookConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PartnerIngressConfig {
    /// How long after the upgrade the `start` message must arrive.
    pub start_timeout_ms: u64,
    /// Largest text message accepted from a partner, in bytes.
    pub max_message_bytes: usize,
    /// The `target` of a `transfer` message when the partner has none of its own.
    pub transfer_target: String,
    /// How long a call whose connection dropped waits for the partner to
    /// resume it on a new one (`docs/partner-protocol.md`); 0 disables resume.
    pub resume_window_ms: u64,
}

impl Default for PartnerIngressConfig {
    fn default() -> Self {
        PartnerIngressConfig {
            start_timeout_ms: 5_000,
            max_message_bytes: 16 * 1024,
            transfer_target: "human".to_string(),
            resume_window_ms: 15_000,
        }
    }
}

/// One partner: its key (as a SHA-256 hex digest only) and its quota.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PartnerConfig {
    /// Lower-case hex SHA-256 of the partner's API key (`sha256sum` of the key
    /// without a newline). The key itself is never stored.
    pub key_sha256: String,
    /// Concurrent calls this partner may hold (admitted plus queued); beyond
    /// it calls are refused with `partner_quota`. Unset: only the gate's capacity.
    pub max_concurrent_calls: Option<u32>,
    /// Overrides `partner.transfer_target` for this partner.
    pub transfer_target: Option<String>,
}

impl std::fmt::Debug for PartnerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartnerConfig")
            .field("key_sha256", &"<redacted>")
            .field("max_concurrent_calls", &self.max_concurrent_calls)
            .field("transfer_target", &self.transfer_target)
            .finish()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    /// libpq-style conninfo or `postgres://` URL. Env: `CALLGATE_DATABASE_URL`.
    pub url: String,
    /// Pooled connections (shared by setup writes and the write-behind writers).
    pub pool_size: usize,
    /// Calls the database tier is sized for (its admission ceiling).
    /// Default: `pool_size × calls_per_connection`.
    pub max_calls: Option<u32>,
    /// Calls one pooled connection can serve with per-turn writes (measured).
    pub calls_per_connection: u32,
    pub checkout_timeout_ms: u64,
    pub connect_timeout_ms: u64,
    pub statement_timeout_ms: u64,
    /// Bound on opening a call's state (ledger row) during setup.
    pub setup_timeout_ms: u64,
    /// Write-behind writer tasks (each with its own connection checkouts).
    pub writers: usize,
    /// Queued writes per writer before new writes are refused (and counted lost).
    pub write_queue_per_writer: usize,
    /// How long a write is retried while Postgres is unavailable before it is lost.
    pub retry_window_s: u64,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        DatabaseConfig {
            url: "host=/var/run/postgresql user=postgres dbname=callgate".to_string(),
            pool_size: 16,
            max_calls: None,
            calls_per_connection: 25,
            checkout_timeout_ms: 1_000,
            connect_timeout_ms: 2_000,
            statement_timeout_ms: 5_000,
            setup_timeout_ms: 2_000,
            writers: 4,
            write_queue_per_writer: 4_096,
            retry_window_s: 60,
        }
    }
}

impl DatabaseConfig {
    /// The database ceiling on concurrent calls.
    pub fn calls_ceiling(&self) -> u32 {
        self.max_calls
            .unwrap_or_else(|| (self.pool_size as u32).saturating_mul(self.calls_per_connection))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SttSection {
    /// Deepgram-compatible live endpoint (`wss://api.deepgram.com/v1/listen`).
    pub url: String,
    pub api_key: Option<String>,
    pub model: Option<String>,
    pub language: Option<String>,
    /// Concurrent streams the account allows (an admission ceiling).
    pub max_sessions: u32,
    pub endpointing_ms: u32,
    pub utterance_end_ms: u32,
    pub connect_timeout_ms: u64,
    pub close_timeout_ms: u64,
    /// Mid-call reconnect of a dropped stream (`[stt.reconnect]`:
    /// `initial_ms`, `max_ms`, `budget_ms`, `max_attempts`). Past the
    /// budget the call apologises and transfers.
    pub reconnect: ReconnectPolicy,
}

impl Default for SttSection {
    fn default() -> Self {
        SttSection {
            url: "ws://127.0.0.1:8081/v1/listen".to_string(),
            api_key: None,
            model: Some("nova-3".to_string()),
            language: Some("en".to_string()),
            max_sessions: 50,
            endpointing_ms: 300,
            utterance_end_ms: 1_000,
            connect_timeout_ms: 2_000,
            close_timeout_ms: 2_000,
            reconnect: ReconnectPolicy::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TtsSection {
    /// Which vendor's WebSocket protocol: `"elevenlabs"` (default,
    /// `multi-stream-input`) or `"cartesia"` (`/tts/websocket`). The call
    /// does not know which one it talks to.
    pub provider: tts_client::Provider,
    /// Base URL: `wss://api.elevenlabs.io`, `wss://api.cartesia.ai`, or a
    /// simulator's `ws://host:port`.
    pub base_url: String,
    /// The vendor's voice id.
    pub voice_id: String,
    /// The vendor's model id; unset: the vendor's low-latency streaming
    /// model (`eleven_flash_v2_5`, Cartesia `sonic-3`).
    pub model_id: Option<String>,
    /// `Cartesia-Version` sent to Cartesia (ignored for ElevenLabs).
    pub cartesia_version: String,
    pub api_key: Option<String>,
    /// Concurrent sockets the account allows (an admission ceiling).
    pub max_sessions: u32,
    pub connect_timeout_ms: u64,
    pub close_timeout_ms: u64,
    /// A keep-alive naming the live context is sent when nothing was sent
    /// for this long: under the provider's inactivity timeout (ElevenLabs:
    /// 20 s, per context), so a context quiet while a tool runs survives.
    pub keepalive_ms: u64,
    /// Mid-call reconnect of a dropped socket (`[tts.reconnect]`); the
    /// reply in progress resumes from the text not yet heard.
    pub reconnect: ReconnectPolicy,
}

impl Default for TtsSection {
    fn default() -> Self {
        TtsSection {
            provider: tts_client::Provider::ElevenLabs,
            base_url: "ws://127.0.0.1:8082".to_string(),
            voice_id: "21m00Tcm4TlvDq8ikWAM".to_string(),
            model_id: None,
            cartesia_version: tts_client::DEFAULT_CARTESIA_VERSION.to_string(),
            api_key: None,
            max_sessions: 50,
            connect_timeout_ms: 2_000,
            close_timeout_ms: 2_000,
            keepalive_ms: 10_000,
            reconnect: ReconnectPolicy::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DialogSection {
    /// gRPC endpoint of the dialog service (`http://host:port`).
    pub endpoint: String,
    /// Concurrent `Converse` streams the service allows (an admission ceiling).
    pub max_streams: u32,
    /// HTTP/2 connections to spread streams over.
    pub channels: usize,
    pub connect_timeout_ms: u64,
    pub open_timeout_ms: u64,
    /// Mid-call reconnect of a dropped stream (`[dialog.reconnect]`); the
    /// conversation resumes and the unanswered turn is sent again.
    pub reconnect: ReconnectPolicy,
}

impl Default for DialogSection {
    fn default() -> Self {
        DialogSection {
            endpoint: "http://127.0.0.1:8083".to_string(),
            max_streams: 50,
            channels: 4,
            connect_timeout_ms: 2_000,
            open_timeout_ms: 2_000,
            reconnect: ReconnectPolicy::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// Tool calls are `POST {base_url}/{tool name}` with the JSON arguments.
    pub base_url: String,
    pub timeout_ms: u64,
    /// Tool calls one call may have running at once; more are answered with an error.
    pub max_in_flight_per_call: usize,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            base_url: "http://127.0.0.1:8084/tools".to_string(),
            timeout_ms: 5_000,
            max_in_flight_per_call: 4,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct OverflowConfig {
    /// Optional webhook told about every overflowed call (call id, reason, waited).
    pub webhook_url: Option<String>,
    pub webhook_timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CallConfig {
    /// Hard maximum call duration; the call is ended with a goodbye prompt.
    pub max_duration_s: u64,
    /// How far ahead of real time outbound audio may be sent to the carrier.
    pub pacer_lead_ms: u64,
    /// Bound on closing the four connections at the end of a call.
    pub teardown_timeout_ms: u64,
    /// After the final mark of an ended/overflowed call, how long to wait
    /// for the carrier to echo it before closing anyway (beyond the audio).
    pub final_mark_grace_ms: u64,
    /// Watchdog: a greeting/reply owed and not audible for this long → apology.
    pub reply_stall_ms: u64,
    /// Watchdog: the caller stopped speaking and no final transcript came.
    pub stt_stall_ms: u64,
    /// Watchdog: no media frame from the carrier for this long → call ended.
    pub media_stall_ms: u64,
    /// Watchdog: after an apology, how long before the caller is transferred.
    pub stall_retry_ms: u64,
    /// What stops the bot when the caller talks over it (`[call.barge_in]`).
    pub barge_in: crate::call::core::BargeInConfig,
}

impl Default for CallConfig {
    fn default() -> Self {
        CallConfig {
            max_duration_s: 3_600,
            pacer_lead_ms: 60,
            teardown_timeout_ms: 3_000,
            final_mark_grace_ms: 2_000,
            reply_stall_ms: 2_000,
            stt_stall_ms: 2_000,
            media_stall_ms: 5_000,
            stall_retry_ms: 4_000,
            barge_in: crate::call::core::BargeInConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `text` or `json`.
    pub format: String,
    /// A `tracing` filter, e.g. `info` or `callgate=debug,info`. Env `RUST_LOG` wins.
    pub filter: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: "text".to_string(),
            filter: "info".to_string(),
        }
    }
}

/// A configuration that could not be loaded or is inconsistent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The message carries figment's (key and source included), so it is
    /// not also a `source`: `{:#}` would say it twice.
    #[error("cannot load configuration: {0}")]
    Load(Box<figment::Error>),
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl From<Box<figment::Error>> for ConfigError {
    fn from(e: Box<figment::Error>) -> Self {
        ConfigError::Load(e)
    }
}

impl Config {
    /// The store settings of `[database]` and `server.instance`.
    pub fn store_config(&self) -> state_store::StoreConfig {
        let d = &self.database;
        state_store::StoreConfig {
            conninfo: d.url.clone(),
            pool_size: d.pool_size,
            checkout_timeout: ms(d.checkout_timeout_ms),
            connect_timeout: ms(d.connect_timeout_ms),
            statement_timeout: ms(d.statement_timeout_ms),
            instance: self.server.instance.clone(),
        }
    }

    /// Loads `path` (if given), then the environment, then validates.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        // Names or values that are not Unicode cannot be configuration: skipped
        // (`std::env::vars` would panic on them).
        let vars = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
        Self::load_with_env(path, vars)
    }

    /// [`Config::load`] with `vars` (name, value) as the environment: what a
    /// process started with exactly those variables would load (a manifest
    /// test checks a pod's configuration this way).
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn load_with_env(
        path: Option<&Path>,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        if let Some(p) = path {
            if !p.exists() {
                return Err(ConfigError::Invalid(format!(
                    "{} does not exist",
                    p.display()
                )));
            }
            fig = fig.merge(Toml::file(p));
        }
        fig = env::merge(fig, vars);
        let cfg: Config = fig.extract().map_err(Box::new)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks the values that would otherwise fail late and obscurely.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_string()));
        if self.database.pool_size == 0 || self.database.writers == 0 {
            return bad("database.pool_size and database.writers must be at least 1");
        }
        if self.database.writers >= self.database.pool_size {
            return bad(
                "database.writers must be below database.pool_size (setup needs connections too)",
            );
        }
        if self.server.admin_listen == Some(self.server.listen) && self.server.listen.port() != 0 {
            return bad("server.admin_listen must differ from server.listen");
        }
        self.admission.validate().map_err(ConfigError::Invalid)?;
        if !matches!(self.log.format.as_str(), "text" | "json") {
            return bad("log.format must be \"text\" or \"json\"");
        }
        if self.twilio.max_media_payload_bytes < 160 {
            return bad("twilio.max_media_payload_bytes must hold at least one 20 ms frame (160)");
        }
        if let Some(k) = &self.twilio.shared_key_secret
            && (k.is_empty() || k.trim() != k)
        {
            return bad(
                "twilio.shared_key_secret must be the SharedKey secret exactly: not empty, no surrounding whitespace",
            );
        }
        self.twilio
            .webhook
            .validate()
            .map_err(ConfigError::Invalid)?;
        self.sip.validate().map_err(ConfigError::Invalid)?;
        self.webrtc.validate().map_err(ConfigError::Invalid)?;
        self.drain.validate().map_err(ConfigError::Invalid)?;
        self.ledger.validate().map_err(ConfigError::Invalid)?;
        self.pressure.validate().map_err(ConfigError::Invalid)?;
        self.receipt.validate().map_err(ConfigError::Invalid)?;
        self.retention.validate().map_err(ConfigError::Invalid)?;
        self.agent.validate().map_err(ConfigError::Invalid)?;
        self.ownership.validate().map_err(ConfigError::Invalid)?;
        if self.tts.keepalive_ms == 0 {
            return bad("tts.keepalive_ms must be positive");
        }
        if self.tts.provider == tts_client::Provider::Cartesia && !is_uuid(&self.tts.voice_id) {
            return Err(ConfigError::Invalid(format!(
                "tts.voice_id {:?} is not a Cartesia voice id (a UUID); with tts.provider = \"cartesia\" set the voice to one of your Cartesia voices",
                self.tts.voice_id
            )));
        }
        self.call
            .barge_in
            .validate()
            .map_err(ConfigError::Invalid)?;
        for (name, policy) in [
            ("stt", &self.stt.reconnect),
            ("tts", &self.tts.reconnect),
            ("dialog", &self.dialog.reconnect),
        ] {
            policy
                .validate()
                .map_err(|e| ConfigError::Invalid(format!("{name}.reconnect: {e}")))?;
        }
        self.validate_partners()
    }

    fn validate_partners(&self) -> Result<(), ConfigError> {
        for (id, p) in &self.partners {
            let id_ok = !id.is_empty()
                && id.len() <= 64
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            if !id_ok {
                return Err(ConfigError::Invalid(format!(
                    "partners.{id}: ids are 1-64 characters of [A-Za-z0-9_-]"
                )));
            }
            let hex_ok =
                p.key_sha256.len() == 64 && p.key_sha256.bytes().all(|b| b.is_ascii_hexdigit());
            if !hex_ok {
                return Err(ConfigError::Invalid(format!(
                    "partners.{id}.key_sha256 must be 64 hex digits (the SHA-256 of the key)"
                )));
            }
        }
        if self.partner.resume_window_ms > 120_000 {
            return Err(ConfigError::Invalid(
                "partner.resume_window_ms is at most 120000 (2 minutes)".to_string(),
            ));
        }
        if self.partner.max_message_bytes < 1_024 {
            return Err(ConfigError::Invalid(
                "partner.max_message_bytes must be at least 1024".to_string(),
            ));
        }
        Ok(())
    }
}

/// Milliseconds as a `Duration`.
pub fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// `8-4-4-4-12` hex digits: the shape of a Cartesia voice id.
fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_config_file_parses_and_matches_the_defaults_it_documents() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/callgate.toml");
        let cfg = Config::load(Some(&path)).unwrap();
        assert_eq!(
            cfg.admission.max_concurrent_calls,
            MaxCalls::Auto(AutoTag::Auto)
        );
        assert_eq!(cfg.admission.queue_timeout_ms, 4_000);
        assert_eq!(cfg.stt.max_sessions, SttSection::default().max_sessions);
    }

    #[test]
    fn a_pinned_capacity_parses_as_a_number() {
        let cfg: Config = Figment::from(Serialized::defaults(Config::default()))
            .merge(Toml::string("[admission]\nmax_concurrent_calls = 100\n"))
            .extract()
            .unwrap();
        assert_eq!(cfg.admission.max_concurrent_calls, MaxCalls::Pinned(100));
    }

    #[test]
    fn unknown_keys_are_refused() {
        let r: Result<Config, _> = Figment::from(Serialized::defaults(Config::default()))
            .merge(Toml::string("[admission]\nmax_calls = 3\n"))
            .extract();
        assert!(r.is_err());
    }

    #[test]
    fn partners_parse_and_bad_key_digests_are_explained() {
        let toml = format!(
            "[partners.acme]\nkey_sha256 = \"{}\"\nmax_concurrent_calls = 2\n",
            "ab".repeat(32)
        );
        let cfg: Config = Figment::from(Serialized::defaults(Config::default()))
            .merge(Toml::string(&toml))
            .extract()
            .unwrap();
        assert_eq!(cfg.partners["acme"].max_concurrent_calls, Some(2));
        cfg.validate().unwrap();
        let mut bad = cfg.clone();
        bad.partners.get_mut("acme").unwrap().key_sha256 = "secret".into();
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains("partners.acme.key_sha256"), "{e}");
        assert!(!format!("{:?}", cfg.partners["acme"]).contains("abab"));
    }

    #[test]
    fn inconsistent_values_are_explained() {
        let mut cfg = Config::default();
        cfg.database.writers = cfg.database.pool_size;
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.contains("database.writers"), "{e}");
    }

    #[test]
    fn cartesia_needs_a_cartesia_voice_not_the_elevenlabs_default() {
        let mut cfg = Config::default();
        cfg.tts.provider = tts_client::Provider::Cartesia;
        let e = cfg.validate().unwrap_err().to_string();
        assert!(
            e.contains("tts.voice_id") && e.contains("21m00Tcm4TlvDq8ikWAM"),
            "{e}"
        );
        cfg.tts.voice_id = "a0e99841-438c-4a64-b679-ae501e7d6091".into();
        cfg.validate().unwrap();
        assert!(!is_uuid("a0e99841-438c-4a64-b679-ae501e7d609"));
        assert!(!is_uuid("a0e99841-438c-4a64-b679-ae501e7d609g"));
    }
}
