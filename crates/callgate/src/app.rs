//! Process-wide state shared by every call: configuration, the admission
//! gate, the store and its write-behind queue, the dialog client, counters.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use admission::{CapacitySetting, Ceilings, Gate, GateConfig};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, MaxCalls, ms};

/// Shared state. One per server; calls hold an `Arc<App>`.
pub struct App {
    cfg: RwLock<Arc<Config>>,
    /// Where `reload` reads the configuration from (None: defaults + env).
    pub config_path: Option<PathBuf>,
    pub gate: Gate,
    pub store: state_store::Store,
    pub writes: state_store::WriteBehind,
    /// Refused calls, recorded in batches.
    pub refusals: crate::refusals::RefusalLog,
    pub dialog: dialog_grpc::DialogClient,
    /// For tool calls and the overflow webhook.
    pub http: reqwest::Client,
    pub metrics: PrometheusHandle,
    /// Cancelled when the drain deadline passes: calls still running end
    /// with a goodbye prompt and reason `drain_deadline`.
    pub hard_stop: CancellationToken,
    /// Every call task, so a drain can wait for them all.
    pub calls: TaskTracker,
    pub counters: Counters,
}

/// Process counters that are not in the gate.
#[derive(Debug, Default)]
pub struct Counters {
    /// Calls in the overflow path right now (rejected or failed setup).
    pub overflowing: AtomicU64,
    /// Calls whose setup is in progress.
    pub setting_up: AtomicU64,
    /// Admitted calls whose bot is speaking right now.
    pub speaking: AtomicU64,
    /// Admitted calls with tool work running.
    pub delegating: AtomicU64,
}

impl Counters {
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// Increments a counter for as long as the guard lives.
#[must_use]
pub struct Gauge<'a>(&'a AtomicU64);

impl<'a> Gauge<'a> {
    pub fn hold(c: &'a AtomicU64) -> Self {
        c.fetch_add(1, Ordering::Relaxed);
        Gauge(c)
    }
}

impl Drop for Gauge<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl App {
    pub fn new(
        cfg: Config,
        config_path: Option<PathBuf>,
        store: state_store::Store,
        writes: state_store::WriteBehind,
        refusals: crate::refusals::RefusalLog,
        dialog: dialog_grpc::DialogClient,
        metrics: PrometheusHandle,
    ) -> anyhow::Result<App> {
        let gate = Gate::new(gate_config(&cfg), Instant::now());
        crate::ensure_tls_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()?;
        Ok(App {
            cfg: RwLock::new(Arc::new(cfg)),
            config_path,
            gate,
            store,
            writes,
            refusals,
            dialog,
            http,
            metrics,
            hard_stop: CancellationToken::new(),
            calls: TaskTracker::new(),
            counters: Counters::default(),
        })
    }

    /// The current configuration.
    pub fn cfg(&self) -> Arc<Config> {
        match self.cfg.read() {
            Ok(g) => Arc::clone(&g),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Replaces the configuration and re-derives admission capacity. Calls in
    /// progress are untouched; a lower capacity only stops new admissions.
    pub fn apply(&self, cfg: Config) {
        self.gate.set_config(gate_config(&cfg), Instant::now());
        let cfg = Arc::new(cfg);
        match self.cfg.write() {
            Ok(mut g) => *g = cfg,
            Err(poisoned) => *poisoned.into_inner() = cfg,
        }
    }

    pub fn instance(&self) -> String {
        self.cfg().server.instance.clone()
    }

    /// STT session settings for one call (μ-law 8 kHz straight from the carrier).
    pub fn stt_config(&self) -> stt_client::SttConfig {
        let c = &self.cfg().stt;
        stt_client::SttConfig {
            url: c.url.clone(),
            api_key: c.api_key.clone(),
            model: c.model.clone(),
            language: c.language.clone(),
            encoding: stt_client::SttEncoding::Mulaw,
            sample_rate: 8_000,
            interim_results: true,
            endpointing_ms: Some(c.endpointing_ms),
            utterance_end_ms: Some(c.utterance_end_ms),
            vad_events: true,
            connect_timeout: ms(c.connect_timeout_ms),
            keepalive_interval: Duration::from_secs(4),
            close_timeout: ms(c.close_timeout_ms),
        }
    }

    /// TTS socket settings for one call (μ-law 8 kHz, ready for the carrier).
    pub fn tts_config(&self) -> tts_client::TtsConfig {
        let c = &self.cfg().tts;
        tts_client::TtsConfig {
            base_url: c.base_url.clone(),
            voice_id: c.voice_id.clone(),
            model_id: c.model_id.clone(),
            api_key: c.api_key.clone(),
            output_format: tts_client::OutputFormat::Ulaw8000,
            connect_timeout: ms(c.connect_timeout_ms),
            keepalive_interval: Duration::from_secs(10),
            close_timeout: ms(c.close_timeout_ms),
        }
    }
}

/// The gate's configuration from ours: capacity from the four ceilings.
pub fn gate_config(cfg: &Config) -> GateConfig {
    let capacity = match cfg.admission.max_concurrent_calls {
        MaxCalls::Pinned(n) => CapacitySetting::Pinned(n),
        MaxCalls::Auto(_) => CapacitySetting::Auto {
            headroom: cfg.admission.headroom,
        },
    };
    GateConfig {
        capacity,
        ceilings: Ceilings {
            db_calls: Some(cfg.database.calls_ceiling()),
            stt_sessions: Some(cfg.stt.max_sessions),
            tts_sessions: Some(cfg.tts.max_sessions),
            dialog_streams: Some(cfg.dialog.max_streams),
        },
        queue_max: cfg.admission.queue_max,
        queue_timeout: ms(cfg.admission.queue_timeout_ms),
    }
}
