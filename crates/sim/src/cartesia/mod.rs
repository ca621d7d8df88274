//! A Cartesia-compatible TTS WebSocket simulator (`wss://api.cartesia.ai/tts/websocket`).
//!
//! What it is: a server that speaks Cartesia's real TTS WebSocket protocol,
//! so a client that works against it works against Cartesia by changing
//! the URL and key.
//!
//! - `GET /tts/websocket` (WebSocket). The upgrade needs a documented API
//!   version (`cartesia_version` query, which wins, or the
//!   `Cartesia-Version` header; missing or unknown → HTTP 400 with
//!   Cartesia's JSON error object) and, when [`CartesiaSimConfig::api_key`]
//!   is set, that key in `X-API-Key`, `Authorization: Bearer …` or the
//!   `api_key` query (else 401). Over the socket cap → 429.
//! - Requests: generation requests (`model_id`, `transcript`, `voice` as
//!   an id string, `{id}` or `{mode:"id", id}`, `output_format`,
//!   `context_id`, `continue`, `flush`, `add_timestamps`,
//!   `add_phoneme_timestamps`, `max_buffer_delay_ms`, `language`) and
//!   `{context_id, cancel: true}`. Responses: `chunk`, `timestamps`,
//!   `phoneme_timestamps`, `flush_done`, `done`, `error` with Cartesia's
//!   field names ([`wire`]); the error shape follows the version
//!   (structured from 2026-03-01, an `error` string before) and names the
//!   request's context whenever it had one. A model that is not a Sonic
//!   model gets `model_not_found`; a voice outside the account's library
//!   ([`CartesiaSimConfig::voices`]) gets `voice_not_found`.
//! - Audio is speech-like sound whose length is proportional to the text
//!   (`chars / chars_per_second`), in the encoding and rate each context
//!   asked for, generated `realtime_factor` times faster than real time.
//! - `GET /stats` ([`CartesiaStats`]), `GET /stats/sessions`
//!   ([`CartesiaSessionRecord`]s with per-context audio, the same
//!   [`ContextAudio`] as the ElevenLabs simulator), `GET`/`PUT /admin/config`
//!   ([`CartesiaSimConfig`]; read when a socket is accepted, so a change
//!   affects new sockets).
//!
//! The protocol rules are in [`protocol`] (a sans-IO core per socket,
//! tested on a virtual clock); [`socket`] is the thin shell around it.
//!
//! What it never does: produce real speech, send compressed audio (`wav`,
//! `mp3` and other containers are refused with a 400 error), or share code
//! with callgate's TTS client.
//!
//! How to drive it: `CartesiaSim::new(cfg).serve(listener, cancel)` (or
//! through [`crate::Simulators`]), then open
//! `ws://{addr}/tts/websocket?cartesia_version=2026-08-14` and send
//! generation requests; read `/stats` to check what was delivered.

mod audio;
pub mod protocol;
mod socket;
pub mod wire;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{OriginalUri, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use crate::tts::ContextAudio;
pub use audio::{AudioFormat, Encoding};
pub use wire::ApiVersion;

use crate::stats::{RecentSessions, SessionGuard, SessionStats};
use protocol::{Account, AudioTally, CoreParams, SocketCore};

/// The voice ids the simulated account holds by default: public voices of
/// Cartesia's library that its documentation and SDK use as examples
/// (the SDK's `no_more_inputs()` falls back to the first; the API
/// reference's examples use the second).
pub const LIBRARY_VOICES: [&str; 3] = [
    "6ccbfb76-1fc6-48f7-b71d-91ac6298247b",
    "a0e99841-438c-4a64-b679-ae501e7d6091",
    "e07c00bc-4134-4eae-9ea4-1a55fb45746b",
];

/// Parallel WebSockets Cartesia allows per unit of context concurrency.
pub const SOCKETS_PER_CONTEXT: u64 = 10;

/// Simulator knobs. Every field has a default, so a partial JSON/TOML
/// document is a valid configuration; every fault is off by default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CartesiaSimConfig {
    /// Concurrent contexts across all sockets (Cartesia's TTS concurrency:
    /// Free 2, Pro 3, Startup 5, Scale 15). A generation request opening
    /// one more gets `{"type":"error","status_code":429,…}` for its
    /// context; the socket stays open. `None` (default): unlimited.
    pub max_concurrent_contexts: Option<u32>,
    /// Concurrent sockets; beyond it the upgrade gets HTTP 429. `None`
    /// (default): Cartesia's rule, [`SOCKETS_PER_CONTEXT`] ×
    /// `max_concurrent_contexts`, or unlimited when that is unset.
    pub max_sockets: Option<u64>,
    /// From the first speakable text of a generation to its first chunk.
    pub first_chunk_latency_ms: u64,
    /// Speaking rate: audio duration = transcript chars / this.
    pub chars_per_second: f64,
    /// Audio is generated this many times faster than real time.
    pub realtime_factor: f64,
    /// A context with nothing left to say expires this long after its
    /// last audio or input: the simulator sends its `done`, and a later
    /// request naming it gets a 400 error. Cartesia documents 1 s after
    /// the last audio (default `Some(1000)`); `None` never expires.
    pub context_expiry_ms: Option<u64>,
    /// No input and no audio for this long closes the socket (1000).
    /// Cartesia closes idle sockets after 5 minutes (default 300).
    pub idle_timeout_s: u64,
    /// The account's voice library: a generation request naming another
    /// voice id gets a 404 `voice_not_found` error on its context, as
    /// Cartesia refuses a voice it does not hold. Default
    /// [`LIBRARY_VOICES`]; `None` accepts any id.
    pub voices: Option<Vec<String>>,
    /// When set, the upgrade must carry this key (`X-API-Key`,
    /// `Authorization: Bearer`, or `api_key` query), else 401. Default
    /// `None`: any key, or none, is accepted.
    pub api_key: Option<String>,
    /// Fault: close each socket (1011) this long after it opened. Default
    /// `None`: off.
    pub close_after_ms: Option<u64>,
    /// Fault: `close_after_ms` applies only to the first N sockets
    /// accepted (1-based session numbers ≤ N). Default `None`: to every
    /// socket.
    pub faulty_sessions: Option<u64>,
    /// Fault: after a socket was closed by `close_after_ms`, refuse every
    /// upgrade with HTTP 503 for this long (a provider outage). Default
    /// `None`: off.
    pub down_after_fault_ms: Option<u64>,
    /// Fault: a context that has spoken this many transcript characters
    /// gets `{"type":"error","status_code":500,…}` instead of its next
    /// chunk and ends; the socket stays open. `Some(0)` fails before the
    /// first chunk. Default `None`: off.
    pub error_mid_stream_after_chars: Option<u64>,
    /// Fault: refuse every upgrade with this HTTP status. Default `None`.
    pub fail_upgrade_status: Option<u16>,
}

impl Default for CartesiaSimConfig {
    fn default() -> Self {
        CartesiaSimConfig {
            max_concurrent_contexts: None,
            max_sockets: None,
            first_chunk_latency_ms: 100,
            chars_per_second: 15.0,
            realtime_factor: 4.0,
            context_expiry_ms: Some(1_000),
            idle_timeout_s: 300,
            voices: Some(LIBRARY_VOICES.iter().map(|v| (*v).to_owned()).collect()),
            api_key: None,
            close_after_ms: None,
            faulty_sessions: None,
            down_after_fault_ms: None,
            error_mid_stream_after_chars: None,
            fail_upgrade_status: None,
        }
    }
}

impl CartesiaSimConfig {
    /// The socket cap in force (see [`CartesiaSimConfig::max_sockets`]).
    pub fn socket_cap(&self) -> u64 {
        match (self.max_sockets, self.max_concurrent_contexts) {
            (Some(n), _) => n,
            (None, Some(c)) => u64::from(c).saturating_mul(SOCKETS_PER_CONTEXT),
            (None, None) => u64::MAX,
        }
    }
}

/// `GET /stats` and [`CartesiaSim::stats`]: the session counts (same keys
/// as the ElevenLabs simulator's `TtsStats`, a session being a socket),
/// contexts, formats and the audio sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CartesiaStats {
    /// Sockets open right now.
    pub open_sessions: u64,
    /// Most sockets open at once since start.
    pub peak_sessions: u64,
    /// Sockets accepted since start.
    pub total_sessions: u64,
    /// Upgrades refused at the socket cap (429).
    pub rejected_sessions: u64,
    /// Sockets (or upgrades) ended by an injected fault, including
    /// upgrades refused during the down window.
    pub faulted_sessions: u64,
    /// Contexts active across all sockets right now (what Cartesia's
    /// concurrency limit counts).
    pub open_contexts: u64,
    /// Generation requests refused at the context cap (429 on the socket).
    pub rejected_contexts: u64,
    /// Contexts ended by expiry.
    pub expired_contexts: u64,
    /// Contexts ended by the injected mid-stream error.
    pub errored_contexts: u64,
    /// Contexts opened per output format (`"pcm_mulaw_8000"`…). Cartesia
    /// picks the format per context, so these count contexts, not sockets.
    pub output_formats: BTreeMap<String, u64>,
    /// Encoded audio bytes sent, all sockets.
    pub audio_bytes: u64,
    /// Playing time of that audio in ms, all sockets.
    pub audio_ms: u64,
}

/// One accepted socket and the audio it was sent (`GET /stats/sessions`,
/// [`CartesiaSim::sessions`]). Kept for the last
/// [`RECENT_SESSIONS`](crate::stats::RECENT_SESSIONS) sockets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CartesiaSessionRecord {
    /// 1-based, in acceptance order.
    pub session: u64,
    /// Path and query of the upgrade request, as received.
    pub request: String,
    /// The `Cartesia-Version` in force.
    pub version: String,
    /// Chunk messages sent on this socket.
    pub chunks: u64,
    /// Encoded audio bytes sent on this socket.
    pub audio_bytes: u64,
    /// Playing time of that audio in ms.
    pub audio_ms: u64,
    /// The same per context id, for the first
    /// [`MAX_TALLIED_CONTEXTS`](protocol::MAX_TALLIED_CONTEXTS) ids.
    pub contexts: BTreeMap<String, ContextAudio>,
    /// The output format each of those contexts asked for.
    pub context_formats: BTreeMap<String, String>,
    /// False once the socket's task has ended.
    pub open: bool,
}

/// The shared side of a [`CartesiaSessionRecord`], updated by its task.
#[derive(Debug)]
struct SocketCell {
    session: u64,
    request: String,
    version: ApiVersion,
    audio: Mutex<AudioTally>,
    open: AtomicBool,
}

impl SocketCell {
    fn record(&self) -> CartesiaSessionRecord {
        let audio = self
            .audio
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        CartesiaSessionRecord {
            session: self.session,
            request: self.request.clone(),
            version: self.version.as_str().to_owned(),
            chunks: audio.total.chunks,
            audio_bytes: audio.total.audio_bytes,
            audio_ms: audio.total.audio_ms,
            contexts: audio.contexts,
            context_formats: audio.formats,
            open: self.open.load(Ordering::Acquire),
        }
    }
}

/// A socket task's handle on its record; dropping it marks the record closed.
#[derive(Debug)]
pub(crate) struct LiveSocket {
    cell: Arc<SocketCell>,
    /// Chunks and contexts already copied into the record.
    synced: (u64, usize),
}

impl LiveSocket {
    /// Copies the core's tally into the record if it changed.
    pub(crate) fn sync(&mut self, tally: &AudioTally) {
        let now = (tally.total.chunks, tally.contexts.len());
        if now == self.synced {
            return;
        }
        self.synced = now;
        self.cell
            .audio
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone_from(tally);
    }
}

impl Drop for LiveSocket {
    fn drop(&mut self) {
        self.cell.open.store(false, Ordering::Release);
    }
}

/// The outage window opened by `down_after_fault_ms`.
#[derive(Debug, Default)]
pub(crate) struct DownWindow {
    until: Mutex<Option<Instant>>,
}

impl DownWindow {
    /// Refuse upgrades until `until` (extends, never shortens, a window).
    pub(crate) fn open_until(&self, until: Instant) {
        let mut w = self.until.lock().unwrap_or_else(PoisonError::into_inner);
        if w.is_none_or(|t| t < until) {
            *w = Some(until);
        }
    }

    fn is_down(&self, now: Instant) -> bool {
        self.until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some_and(|t| now < t)
    }
}

/// The Cartesia simulator. Clones share configuration and counts.
#[derive(Debug, Clone)]
pub struct CartesiaSim {
    config: Arc<RwLock<CartesiaSimConfig>>,
    stats: Arc<SessionStats>,
    /// Account-wide usage: active contexts, formats, audio, outcomes.
    account: Arc<Account>,
    sessions: Arc<RecentSessions<SocketCell>>,
    next_session: Arc<AtomicU64>,
    down: Arc<DownWindow>,
}

impl CartesiaSim {
    /// A simulator with this configuration.
    pub fn new(cfg: CartesiaSimConfig) -> Self {
        CartesiaSim {
            config: Arc::new(RwLock::new(cfg)),
            stats: Arc::new(SessionStats::default()),
            account: Arc::new(Account::default()),
            sessions: Arc::new(RecentSessions::default()),
            next_session: Arc::new(AtomicU64::new(1)),
            down: Arc::new(DownWindow::default()),
        }
    }

    /// Session counts, contexts, formats and the audio sent.
    pub fn stats(&self) -> CartesiaStats {
        let s = self.stats.snapshot();
        let a = &self.account;
        CartesiaStats {
            open_sessions: s.open_sessions,
            peak_sessions: s.peak_sessions,
            total_sessions: s.total_sessions,
            rejected_sessions: s.rejected_sessions,
            faulted_sessions: s.faulted_sessions,
            open_contexts: u64::from(a.active_contexts()),
            rejected_contexts: a.rejected.load(Ordering::Relaxed),
            expired_contexts: a.expired.load(Ordering::Relaxed),
            errored_contexts: a.errored.load(Ordering::Relaxed),
            output_formats: a.formats.snapshot(),
            audio_bytes: a.audio_bytes.load(Ordering::Relaxed),
            audio_ms: a.audio_ms.load(Ordering::Relaxed),
        }
    }

    /// Records of the most recent sockets, oldest first.
    pub fn sessions(&self) -> Vec<CartesiaSessionRecord> {
        self.sessions.snapshot(SocketCell::record)
    }

    /// The current configuration.
    pub fn config(&self) -> CartesiaSimConfig {
        self.config
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the configuration; applies to sockets accepted from now on.
    pub fn set_config(&self, cfg: CartesiaSimConfig) {
        *self.config.write().unwrap_or_else(PoisonError::into_inner) = cfg;
    }

    /// The HTTP routes. Sockets accepted through them close (1001) when
    /// `cancel` fires.
    pub fn router(&self, cancel: CancellationToken) -> Router {
        let state = Served {
            sim: self.clone(),
            cancel,
        };
        Router::new()
            .route("/tts/websocket", get(upgrade))
            .route("/stats", get(stats))
            .route("/stats/sessions", get(sessions))
            .route("/admin/config", get(get_config).put(put_config))
            .with_state(state)
    }

    /// Serves until `cancel` fires; open sockets are then closed with 1001.
    pub async fn serve(
        self,
        listener: TcpListener,
        cancel: CancellationToken,
    ) -> anyhow::Result<()> {
        let addr = listener.local_addr()?;
        tracing::info!(%addr, "cartesia simulator listening");
        // Sockets watch the token themselves: axum's graceful shutdown does
        // not wait for upgraded connections.
        let app = self.router(cancel.clone());
        axum::serve(listener, app)
            .with_graceful_shutdown(cancel.cancelled_owned())
            .await?;
        Ok(())
    }

    /// Admission of one upgrade: faults, the down window, auth, version,
    /// then the socket cap.
    fn admit(
        &self,
        cfg: &CartesiaSimConfig,
        query: &HashMap<String, String>,
        headers: &HeaderMap,
    ) -> Result<(ApiVersion, SessionGuard), Refusal> {
        if let Some(status) = cfg.fail_upgrade_status {
            self.stats.count_fault();
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            return Err(Refusal::new(
                status,
                "injected_fault",
                "upgrade refused by fail_upgrade_status",
            ));
        }
        if self.down.is_down(Instant::now()) {
            self.stats.count_fault();
            return Err(Refusal::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "service_unavailable",
                "the service is temporarily unavailable (down_after_fault_ms)",
            ));
        }
        check_key(cfg, query, headers)?;
        let version = api_version(query, headers)?;
        let guard = self.stats.try_open(cfg.socket_cap()).ok_or_else(|| {
            Refusal::new(
                StatusCode::TOO_MANY_REQUESTS,
                "concurrency_limited",
                format!("WebSocket connection limit ({}) reached", cfg.socket_cap()),
            )
        })?;
        Ok((version, guard))
    }

    /// Numbers, records and parameterises one accepted socket.
    fn accept(
        &self,
        cfg: &CartesiaSimConfig,
        version: ApiVersion,
        request: String,
    ) -> (CoreParams, LiveSocket) {
        let session = self.next_session.fetch_add(1, Ordering::Relaxed);
        let cell = Arc::new(SocketCell {
            session,
            request,
            version,
            audio: Mutex::new(AudioTally::default()),
            open: AtomicBool::new(true),
        });
        self.sessions.push(Arc::clone(&cell));
        let faulty = cfg.faulty_sessions.is_none_or(|n| session <= n);
        let params = CoreParams {
            version,
            request_id: uuid::Uuid::new_v4().to_string(),
            first_chunk_latency: Duration::from_millis(cfg.first_chunk_latency_ms),
            chars_per_second: cfg.chars_per_second,
            realtime_factor: cfg.realtime_factor,
            context_expiry: cfg.context_expiry_ms.map(Duration::from_millis),
            idle_timeout: Duration::from_secs(cfg.idle_timeout_s.max(1)),
            close_after: cfg
                .close_after_ms
                .filter(|_| faulty)
                .map(Duration::from_millis),
            error_after_chars: cfg.error_mid_stream_after_chars,
            max_contexts: cfg.max_concurrent_contexts,
            voices: cfg.voices.as_ref().map(|v| v.as_slice().into()),
            account: Arc::clone(&self.account),
            seed: session,
        };
        let live = LiveSocket {
            cell,
            synced: (0, 0),
        };
        (params, live)
    }
}

/// Checks the API key when one is configured.
fn check_key(
    cfg: &CartesiaSimConfig,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<(), Refusal> {
    let Some(key) = &cfg.api_key else {
        return Ok(());
    };
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let given = [
        header("x-api-key"),
        header("authorization").and_then(|v| v.strip_prefix("Bearer ")),
        query.get("api_key").map(String::as_str),
    ];
    if given.contains(&Some(key.as_str())) {
        return Ok(());
    }
    Err(Refusal::new(
        StatusCode::UNAUTHORIZED,
        "invalid_api_key",
        "missing or invalid API key (X-API-Key, Authorization: Bearer, or api_key)",
    ))
}

/// The version in force: the `cartesia_version` query wins over the header.
fn api_version(
    query: &HashMap<String, String>,
    headers: &HeaderMap,
) -> Result<ApiVersion, Refusal> {
    let given = query
        .get("cartesia_version")
        .map(String::as_str)
        .or_else(|| {
            headers
                .get("cartesia-version")
                .and_then(|v| v.to_str().ok())
        });
    let Some(given) = given else {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "missing_version",
            "the Cartesia-Version header (or cartesia_version query parameter) is required",
        ));
    };
    ApiVersion::parse(given).ok_or_else(|| {
        let known: Vec<&str> = ApiVersion::ALL.iter().map(|v| v.as_str()).collect();
        Refusal::new(
            StatusCode::BAD_REQUEST,
            "invalid_version",
            format!(
                "unknown Cartesia-Version {given:?}; use one of {}",
                known.join(", ")
            ),
        )
    })
}

/// Router state: the simulator plus the shutdown signal for its sockets.
#[derive(Clone)]
struct Served {
    sim: CartesiaSim,
    cancel: CancellationToken,
}

/// Why an upgrade was refused, rendered as Cartesia's HTTP error object.
#[derive(Debug)]
struct Refusal {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl Refusal {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Refusal {
            status,
            code,
            message: message.into(),
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let title = self.status.canonical_reason().unwrap_or("Error");
        let request_id = uuid::Uuid::new_v4().to_string();
        let body = wire::http_error(self.code, title, &self.message, &request_id);
        (self.status, Json(body)).into_response()
    }
}

async fn upgrade(
    State(served): State<Served>,
    OriginalUri(uri): OriginalUri,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    let sim = &served.sim;
    let cfg = sim.config();
    let (version, guard) = match sim.admit(&cfg, &query, &headers) {
        Ok(admitted) => admitted,
        Err(refused) => {
            tracing::info!(
                status = refused.status.as_u16(),
                reason = refused.code,
                "upgrade refused"
            );
            return refused.into_response();
        }
    };
    let request = uri
        .path_and_query()
        .map_or_else(|| uri.path().to_owned(), |pq| pq.as_str().to_owned());
    let (params, record) = sim.accept(&cfg, version, request);
    let task = socket::SocketTask {
        guard,
        stats: Arc::clone(&sim.stats),
        cancel: served.cancel.child_token(),
        session: params.seed,
        record,
        down: Arc::clone(&sim.down),
        down_after_fault: cfg.down_after_fault_ms.map(Duration::from_millis),
    };
    ws.read_buffer_size(8 * 1024)
        .on_upgrade(move |websocket| async move {
            let core = SocketCore::new(params, Instant::now());
            socket::run(websocket, core, task).await;
        })
}

async fn stats(State(served): State<Served>) -> Json<CartesiaStats> {
    Json(served.sim.stats())
}

async fn sessions(State(served): State<Served>) -> Json<Vec<CartesiaSessionRecord>> {
    Json(served.sim.sessions())
}

async fn get_config(State(served): State<Served>) -> Json<CartesiaSimConfig> {
    Json(served.sim.config())
}

async fn put_config(
    State(served): State<Served>,
    Json(cfg): Json<CartesiaSimConfig>,
) -> Json<CartesiaSimConfig> {
    tracing::info!("cartesia simulator configuration replaced");
    served.sim.set_config(cfg);
    Json(served.sim.config())
}

#[cfg(test)]
mod tests;
