//! Process-wide state, as two handles.
//!
//! - [`CallServices`] is what a call needs, and all the call path
//!   (`carrier/*`, `ingress`, `overflow`, `call`) is given: the current
//!   configuration, the admission gate, the store and its write-behind
//!   queue, refusal records, the dialog client, the HTTP client for tools
//!   and webhooks, the drain's orders, the call task tracker, the phase
//!   counters and the registry of live calls.
//! - [`App`] is what operations need (`http`'s admin routes, `server`,
//!   `drain`, `ownership`, `reconcile`, `agent`, `retention`, `sessions`,
//!   `audit_http`): the call handle plus what only operations read — the
//!   configuration file's path, the Prometheus handle, what the balancer
//!   was last told, the reconciler's latest tick.
//!
//! The call path never holds an [`App`], so nothing in a call can reach
//! the metrics exporter, the routing report or the reconciler's state.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use admission::{CapacitySetting, Ceilings, Gate, GateConfig};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio_util::task::TaskTracker;

use crate::config::{Config, MaxCalls, ms};
use crate::leg::LegFormat;

/// What a call needs. One per server, shared by `Arc`.
pub struct CallServices {
    cfg: RwLock<Arc<Config>>,
    pub gate: Gate,
    pub store: state_store::Store,
    pub writes: state_store::WriteBehind,
    /// Refused calls, recorded in batches.
    pub refusals: crate::refusals::RefusalLog,
    pub dialog: dialog_grpc::DialogClient,
    /// For tool calls and the overflow webhook.
    pub http: reqwest::Client,
    /// The drain: its plan, and the orders every call watches.
    pub drain: crate::drain::plan::Drain,
    /// Every call task, so a drain can wait for them all.
    pub tasks: TaskTracker,
    pub counters: Arc<Counters>,
    /// The calls running here, by id, for reconciliation receipts.
    pub live: crate::reconcile::LiveCalls,
    /// Lateness against the 20 ms media clock: call timers record into it,
    /// the ticker (`lag::run`) feeds it to the gate.
    pub lag: Arc<crate::lag::LagMeter>,
}

/// What operations need: the call handle, and what only they read.
pub struct App {
    pub call: Arc<CallServices>,
    /// Where `reload` reads the configuration from (None: defaults + env).
    pub config_path: Option<PathBuf>,
    pub metrics: PrometheusHandle,
    /// What the load balancer was last told (`routing_reported_sessions`).
    pub routing: crate::reconcile::RoutingReport,
    /// The reconciler's latest tick, for `/admin/status`.
    pub reconcile: crate::reconcile::latest::Latest,
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
    /// Admitted calls with at least one tool call running.
    pub delegating: AtomicU64,
    /// Admitted calls with a provider reconnecting or a transfer in progress.
    pub recovering: AtomicU64,
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

/// A [`Gauge`] that owns its counters, for guards that live in a struct
/// (the call's `speaking` gauge).
#[must_use]
pub struct OwnedGauge {
    counters: Arc<Counters>,
    pick: fn(&Counters) -> &AtomicU64,
}

impl OwnedGauge {
    /// Counts one more call whose bot is speaking, until dropped.
    pub fn speaking(counters: Arc<Counters>) -> Self {
        Self::hold(counters, |c| &c.speaking)
    }

    /// Counts one more call with a tool running, until dropped.
    pub fn delegating(counters: Arc<Counters>) -> Self {
        Self::hold(counters, |c| &c.delegating)
    }

    /// Counts one more call reconnecting a provider or handing off, until
    /// dropped.
    pub fn recovering(counters: Arc<Counters>) -> Self {
        Self::hold(counters, |c| &c.recovering)
    }

    fn hold(counters: Arc<Counters>, pick: fn(&Counters) -> &AtomicU64) -> Self {
        pick(&counters).fetch_add(1, Ordering::Relaxed);
        OwnedGauge { counters, pick }
    }
}

impl Drop for OwnedGauge {
    fn drop(&mut self) {
        (self.pick)(&self.counters).fetch_sub(1, Ordering::Relaxed);
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
        let call = CallServices {
            cfg: RwLock::new(Arc::new(cfg)),
            gate,
            store,
            writes,
            refusals,
            dialog,
            http,
            drain: crate::drain::plan::Drain::default(),
            tasks: TaskTracker::new(),
            counters: Arc::default(),
            live: crate::reconcile::LiveCalls::default(),
            lag: Arc::default(),
        };
        Ok(App {
            call: Arc::new(call),
            config_path,
            metrics,
            routing: crate::reconcile::RoutingReport::default(),
            reconcile: crate::reconcile::latest::Latest::default(),
        })
    }

    /// The current configuration.
    pub fn cfg(&self) -> Arc<Config> {
        self.call.cfg()
    }

    pub fn instance(&self) -> String {
        self.call.instance()
    }

    /// Replaces the configuration and re-derives admission capacity (a
    /// reload). Calls in progress are untouched; a lower capacity only stops
    /// new admissions.
    pub fn apply(&self, cfg: Config) {
        let call = &self.call;
        call.gate.set_config(gate_config(&cfg), Instant::now());
        let cfg = Arc::new(cfg);
        match call.cfg.write() {
            Ok(mut g) => *g = cfg,
            Err(poisoned) => *poisoned.into_inner() = cfg,
        }
    }
}

impl CallServices {
    /// The current configuration.
    pub fn cfg(&self) -> Arc<Config> {
        match self.cfg.read() {
            Ok(g) => Arc::clone(&g),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    pub fn instance(&self) -> String {
        self.cfg().server.instance.clone()
    }
}

/// STT session settings for one call, in the leg's own format.
pub fn stt_config(cfg: &Config, format: LegFormat) -> stt_client::SttConfig {
    let c = &cfg.stt;
    let (encoding, sample_rate) = format.stt();
    stt_client::SttConfig {
        url: c.url.clone(),
        api_key: c.api_key.clone(),
        model: c.model.clone(),
        language: c.language.clone(),
        encoding,
        sample_rate,
        interim_results: true,
        endpointing_ms: Some(c.endpointing_ms),
        utterance_end_ms: Some(c.utterance_end_ms),
        vad_events: true,
        connect_timeout: ms(c.connect_timeout_ms),
        keepalive_interval: Duration::from_secs(4),
        close_timeout: ms(c.close_timeout_ms),
        reconnect: c.reconnect,
    }
}

/// TTS socket settings for one call, in the format the leg plays as is.
pub fn tts_config(cfg: &Config, format: LegFormat) -> tts_client::TtsConfig {
    let c = &cfg.tts;
    tts_client::TtsConfig {
        provider: c.provider,
        base_url: c.base_url.clone(),
        voice_id: c.voice_id.clone(),
        model_id: c
            .model_id
            .clone()
            .unwrap_or_else(|| c.provider.default_model().to_owned()),
        api_key: c.api_key.clone(),
        cartesia_version: c.cartesia_version.clone(),
        reconnect: c.reconnect,
        output_format: format.tts(),
        connect_timeout: ms(c.connect_timeout_ms),
        keepalive_interval: ms(c.keepalive_ms),
        close_timeout: ms(c.close_timeout_ms),
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
        partner_quotas: cfg
            .partners
            .iter()
            .filter_map(|(id, p)| Some((admission::PartnerId::new(id), p.max_concurrent_calls?)))
            .collect(),
        queue_max: cfg.admission.queue_max,
        queue_timeout: ms(cfg.admission.queue_timeout_ms),
        instance: cfg.admission.instance(),
        max_setups: Some(cfg.admission.max_setups(&cfg.database)),
    }
}
