//! An ElevenLabs-compatible `multi-stream-input` TTS simulator.
//!
//! Routes: `GET /v1/text-to-speech/{voice_id}/multi-stream-input` (WebSocket),
//! `GET /stats` ([`TtsStats`]: session counts, `open_contexts`, sockets per
//! `output_format`, audio generated), `GET /stats/sessions`
//! ([`TtsSessionRecord`]s of the most recent sockets, with the audio of each
//! context), `GET`/`PUT /admin/config`. Audio is speech-like sound whose length is proportional
//! to the text (`chars / chars_per_second`), generated `realtime_factor`
//! times faster than real time, in chunks of about 200 ms with per-character
//! alignment.
//!
//! Each socket is a sans-IO [`protocol::SocketCore`] driven by a thin task, so
//! the protocol logic is tested on a virtual clock. The configuration is
//! read when a socket is accepted: `PUT /admin/config` affects new sockets.

mod audio;
pub mod protocol;
mod socket;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{OriginalUri, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use audio::OutputFormat;

use crate::stats::{
    FaultScope, FormatCounts, RecentSessions, SessionGuard, SessionStats, is_faulty,
};
use protocol::{Account, AudioTally, CoreParams, SocketCore};

pub use protocol::NullAlignment;

pub use protocol::ContextAudio;

/// Largest `inactivity_timeout` a client may ask for (ElevenLabs' limit).
pub const MAX_INACTIVITY_TIMEOUT_S: u64 = 180;

/// Simulator knobs. Every field has a default, so a partial JSON/TOML
/// document is a valid configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TtsSimConfig {
    /// Concurrent sockets; beyond it the upgrade gets HTTP 429.
    pub max_sockets: u64,
    /// Simultaneous contexts per socket; one more closes the socket (1008).
    pub max_contexts_per_socket: u32,
    /// From a generation trigger to its first audio chunk.
    pub first_chunk_latency_ms: u64,
    /// Speaking rate: audio duration = text chars / this.
    pub chars_per_second: f64,
    /// Audio is generated this many times faster than real time.
    pub realtime_factor: f64,
    /// No message for this long closes the socket (1008). A client may
    /// override it with the `inactivity_timeout` query parameter (≤ 180).
    pub inactivity_timeout_s: u64,
    /// When set, the upgrade must carry this in `xi-api-key` (else 401).
    pub api_key: Option<String>,
    /// Fault: accept text, never send audio.
    pub stall_audio: bool,
    /// Fault: close every socket (every faulty one, see `faulty_sessions`)
    /// with 1011 and a reason this long after it opened — a routine
    /// server-side close, like ElevenLabs' internal errors.
    pub close_after_ms: Option<u64>,
    /// Fault scope: when set, `close_after_ms` applies only to the first N
    /// sockets this simulator accepted (its session numbers 1..=N), so a
    /// reconnected socket is left alone. `None` (default): every socket.
    pub faulty_sessions: Option<u64>,
    /// Fault: after a socket was ended by `close_after_ms`, answer every
    /// upgrade with HTTP 503 (`detail.status` `service_unavailable`) for
    /// this long, so a client's reconnect budget can be exhausted. Counted
    /// in [`TtsStats::refused_while_down`]. `None` (default): no outage.
    pub down_after_fault_ms: Option<u64>,
    /// Fault: refuse every upgrade with this HTTP status.
    pub fail_upgrade_status: Option<u16>,
    /// ElevenLabs documents that a context closed after a flush keeps
    /// flushing. `false` (default) stops a closed context at once, which is
    /// what barge-in wants; `true` models the documented behaviour, so a
    /// client must drop late audio itself.
    pub finish_flushed_on_close: bool,
    /// Fault: never answer `close_socket` (the client's close times out;
    /// the inactivity timeout still ends the socket).
    pub ignore_close_socket: bool,
    /// Fault (the provider's generation-concurrency limit, separate from
    /// `max_sockets`): generations in progress across all sockets. ElevenLabs
    /// counts concurrency per account while audio is being generated, queues
    /// requests over the limit briefly, then answers 429
    /// `too_many_concurrent_requests`. Here a generation over the cap waits
    /// `generation_queue_ms` for a slot; then the already-open socket gets
    /// `{"message": …, "error": "too_many_concurrent_requests", "code": 429}`
    /// and **closes** with 1008 (reason `too_many_concurrent_requests`) —
    /// WebSocket errors from the provider are followed by a close. `None`
    /// (default): unlimited.
    pub max_concurrent_generations: Option<u32>,
    /// How long a generation over `max_concurrent_generations` waits.
    pub generation_queue_ms: u64,
    /// Fault (quota / abuse): characters all sockets together may generate.
    /// The generation that crosses it gets `{"message": "This request
    /// exceeds your quota of …", "error": "quota_exceeded", "code": 1008}`
    /// and the socket closes with 1008 (reason `quota_exceeded`). `Some(0)`
    /// fails the first generation. `None` (default): no quota.
    pub quota_chars: Option<u64>,
    /// Fault: a context closed without ever receiving text (only its init
    /// space) never gets `isFinal`; it still stops counting against the
    /// context cap.
    pub no_final_for_empty_context: bool,
    /// Fault: audio messages carry `alignment` and/or `normalizedAlignment`
    /// as `null` (`"none"` default, `"alignment"`, `"normalized"`, `"both"`).
    pub null_alignment: NullAlignment,
    /// Per-context inactivity (ElevenLabs: contexts time out after 20 s
    /// without input; a keep-alive `{"text": "", "context_id": …}` resets
    /// one). When on, a context that gets no message for the inactivity
    /// timeout stops generating and gets its `isFinal`; the socket's own
    /// timeout applies as well. Off by default (only the socket times out).
    pub context_inactivity: bool,
}

impl Default for TtsSimConfig {
    fn default() -> Self {
        TtsSimConfig {
            max_sockets: 50,
            max_contexts_per_socket: 5,
            first_chunk_latency_ms: 150,
            chars_per_second: 15.0,
            realtime_factor: 4.0,
            inactivity_timeout_s: 20,
            api_key: None,
            stall_audio: false,
            close_after_ms: None,
            faulty_sessions: None,
            down_after_fault_ms: None,
            fail_upgrade_status: None,
            finish_flushed_on_close: false,
            ignore_close_socket: false,
            max_concurrent_generations: None,
            generation_queue_ms: 50,
            quota_chars: None,
            no_final_for_empty_context: false,
            null_alignment: NullAlignment::None,
            context_inactivity: false,
        }
    }
}

/// `GET /stats` and [`TtsSim::stats`]: the session counts (same keys as
/// [`StatsSnapshot`](crate::stats::StatsSnapshot), a session being a socket), contexts open across
/// sockets, sockets per `output_format` and the audio generated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TtsStats {
    /// Sockets open right now.
    pub open_sessions: u64,
    /// Most sockets open at once since start.
    pub peak_sessions: u64,
    /// Sockets accepted since start.
    pub total_sessions: u64,
    /// Upgrades refused at the cap (429).
    pub rejected_sessions: u64,
    /// Sockets (or upgrades) ended by an injected fault.
    pub faulted_sessions: u64,
    /// Upgrades refused (503) during a `down_after_fault_ms` outage.
    #[serde(default)]
    pub refused_while_down: u64,
    /// Contexts open across all sockets right now.
    pub open_contexts: u64,
    /// Sockets accepted per `output_format` query value as the simulator
    /// understood it (`"ulaw_8000"`, `"pcm_16000"`…; absent → `"ulaw_8000"`).
    #[serde(default)]
    pub output_formats: BTreeMap<String, u64>,
    /// Encoded audio bytes sent, all sockets.
    #[serde(default)]
    pub audio_bytes: u64,
    /// Playing time of that audio in ms, all sockets.
    #[serde(default)]
    pub audio_ms: u64,
}

/// What one accepted socket asked for and the audio it was sent
/// (`GET /stats/sessions`, [`TtsSim::sessions`]). Kept for the last
/// [`RECENT_SESSIONS`](crate::stats::RECENT_SESSIONS) sockets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TtsSessionRecord {
    /// 1-based, in acceptance order.
    pub session: u64,
    /// Path and query of the upgrade request, as received.
    pub request: String,
    pub voice_id: String,
    /// The `output_format` in force, as counted in [`TtsStats::output_formats`].
    pub output_format: String,
    /// Audio messages sent on this socket.
    pub chunks: u64,
    /// Encoded audio bytes sent on this socket.
    pub audio_bytes: u64,
    /// Playing time of that audio in ms.
    pub audio_ms: u64,
    /// The same per context id (`"ctx-1"`…), for the first
    /// [`MAX_TALLIED_CONTEXTS`](protocol::MAX_TALLIED_CONTEXTS) ids.
    pub contexts: BTreeMap<String, ContextAudio>,
    /// False once the socket's task has ended.
    pub open: bool,
}

/// The shared side of a [`TtsSessionRecord`], updated by its socket task.
#[derive(Debug)]
struct SocketCell {
    session: u64,
    request: String,
    voice_id: String,
    output_format: String,
    audio: Mutex<AudioTally>,
    open: AtomicBool,
}

impl SocketCell {
    fn record(&self) -> TtsSessionRecord {
        let audio = self
            .audio
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        TtsSessionRecord {
            session: self.session,
            request: self.request.clone(),
            voice_id: self.voice_id.clone(),
            output_format: self.output_format.clone(),
            chunks: audio.total.chunks,
            audio_bytes: audio.total.audio_bytes,
            audio_ms: audio.total.audio_ms,
            contexts: audio.contexts,
            open: self.open.load(Ordering::Acquire),
        }
    }
}

/// A socket task's handle on its record; dropping it (the socket ended, or
/// its upgrade never completed) marks the record closed.
#[derive(Debug)]
pub(crate) struct LiveSocket {
    cell: Arc<SocketCell>,
    /// Simulator-wide totals (`TtsStats::audio_bytes`, `audio_ms`).
    totals: Arc<AudioTotals>,
    /// Chunks already copied into the record and the totals.
    synced_chunks: u64,
}

impl LiveSocket {
    /// Copies the core's tally into the record if audio went out since the
    /// last call.
    pub(crate) fn sync(&mut self, tally: &AudioTally) {
        if tally.total.chunks == self.synced_chunks {
            return;
        }
        self.synced_chunks = tally.total.chunks;
        let mut audio = self
            .cell
            .audio
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.totals.bytes.fetch_add(
            tally.total.audio_bytes - audio.total.audio_bytes,
            Ordering::Relaxed,
        );
        self.totals.ms.fetch_add(
            tally.total.audio_ms - audio.total.audio_ms,
            Ordering::Relaxed,
        );
        audio.clone_from(tally);
    }
}

impl Drop for LiveSocket {
    fn drop(&mut self) {
        self.cell.open.store(false, Ordering::Release);
    }
}

#[derive(Debug, Default)]
struct AudioTotals {
    bytes: AtomicU64,
    ms: AtomicU64,
}

/// The TTS simulator. Clones share configuration and counts.
#[derive(Debug, Clone)]
pub struct TtsSim {
    config: Arc<RwLock<TtsSimConfig>>,
    stats: Arc<SessionStats>,
    /// Contexts open across all sockets right now.
    open_contexts: Arc<AtomicU64>,
    /// Numbers sockets for logs and synthesiser seeds.
    next_socket: Arc<AtomicU64>,
    formats: Arc<FormatCounts>,
    sessions: Arc<RecentSessions<SocketCell>>,
    next_session: Arc<AtomicU64>,
    totals: Arc<AudioTotals>,
    /// Account-wide usage: generation slots and characters (faults
    /// `max_concurrent_generations`, `quota_chars`).
    account: Arc<Account>,
    /// The outage after a faulted socket (`down_after_fault_ms`).
    scope: Arc<FaultScope>,
}

impl TtsSim {
    /// A simulator with this configuration.
    pub fn new(cfg: TtsSimConfig) -> Self {
        TtsSim {
            config: Arc::new(RwLock::new(cfg)),
            stats: Arc::new(SessionStats::default()),
            open_contexts: Arc::new(AtomicU64::new(0)),
            next_socket: Arc::new(AtomicU64::new(1)),
            formats: Arc::new(FormatCounts::default()),
            sessions: Arc::new(RecentSessions::default()),
            next_session: Arc::new(AtomicU64::new(1)),
            totals: Arc::new(AudioTotals::default()),
            account: Arc::new(Account::default()),
            scope: Arc::new(FaultScope::default()),
        }
    }

    /// Session (socket) counts, open contexts, sockets per output format
    /// and the audio generated.
    pub fn stats(&self) -> TtsStats {
        let sessions = self.stats.snapshot();
        TtsStats {
            open_sessions: sessions.open_sessions,
            peak_sessions: sessions.peak_sessions,
            total_sessions: sessions.total_sessions,
            rejected_sessions: sessions.rejected_sessions,
            faulted_sessions: sessions.faulted_sessions,
            refused_while_down: sessions.refused_while_down,
            open_contexts: self.open_contexts(),
            output_formats: self.formats.snapshot(),
            audio_bytes: self.totals.bytes.load(Ordering::Relaxed),
            audio_ms: self.totals.ms.load(Ordering::Relaxed),
        }
    }

    /// Records of the most recent sockets, oldest first.
    pub fn sessions(&self) -> Vec<TtsSessionRecord> {
        self.sessions.snapshot(SocketCell::record)
    }

    /// Counts and records one accepted socket.
    fn record_session(&self, params: &CoreParams, request: String, voice_id: String) -> LiveSocket {
        let output_format = params.format.to_string();
        self.formats.count(&output_format);
        let cell = Arc::new(SocketCell {
            session: self.next_session.fetch_add(1, Ordering::Relaxed),
            request,
            voice_id,
            output_format,
            audio: Mutex::new(AudioTally::default()),
            open: AtomicBool::new(true),
        });
        self.sessions.push(Arc::clone(&cell));
        LiveSocket {
            cell,
            totals: Arc::clone(&self.totals),
            synced_chunks: 0,
        }
    }

    /// Contexts open across all sockets right now.
    pub fn open_contexts(&self) -> u64 {
        self.open_contexts.load(Ordering::Acquire)
    }

    /// The current configuration.
    pub fn config(&self) -> TtsSimConfig {
        self.config
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the configuration; applies to sockets accepted from now on.
    pub fn set_config(&self, cfg: TtsSimConfig) {
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
            .route(
                "/v1/text-to-speech/{voice_id}/multi-stream-input",
                get(upgrade),
            )
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
        tracing::info!(%addr, "tts simulator listening");
        // Sockets watch the token themselves: axum's graceful shutdown does
        // not wait for upgraded connections.
        let app = self.router(cancel.clone());
        axum::serve(listener, app)
            .with_graceful_shutdown(cancel.cancelled_owned())
            .await?;
        Ok(())
    }

    /// Admission of one upgrade: outage, faults, auth, parameters, then the
    /// cap. On success the socket's core parameters and its session guard.
    fn admit(
        &self,
        cfg: &TtsSimConfig,
        query: &HashMap<String, String>,
        headers: &HeaderMap,
    ) -> Result<(CoreParams, SessionGuard), Refusal> {
        if let Some(left) = self.scope.down_for(std::time::Instant::now()) {
            self.stats.count_refused_while_down();
            return Err(refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "service_unavailable",
                format!(
                    "service temporarily unavailable, retry in {} ms",
                    left.as_millis()
                ),
            ));
        }
        if let Some(status) = cfg.fail_upgrade_status {
            self.stats.count_fault();
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            return Err(refusal(
                status,
                "injected_fault",
                "upgrade refused by fail_upgrade_status",
            ));
        }
        if let Some(key) = &cfg.api_key {
            let given = headers.get("xi-api-key").and_then(|v| v.to_str().ok());
            if given != Some(key.as_str()) {
                return Err(refusal(
                    StatusCode::UNAUTHORIZED,
                    "invalid_api_key",
                    "missing or wrong xi-api-key",
                ));
            }
        }
        let params = core_params(
            cfg,
            query,
            self.next_socket.fetch_add(1, Ordering::Relaxed),
            Arc::clone(&self.account),
        )
        .map_err(|msg| refusal(StatusCode::BAD_REQUEST, "invalid_request", msg))?;
        let guard = self.stats.try_open(cfg.max_sockets).ok_or_else(|| {
            refusal(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_concurrent_requests",
                format!("concurrent socket limit ({}) reached", cfg.max_sockets),
            )
        })?;
        Ok((params, guard))
    }
}

/// Router state: the simulator plus the shutdown signal for its sockets.
#[derive(Clone)]
struct Served {
    sim: TtsSim,
    cancel: CancellationToken,
}

/// Socket parameters from the configuration and the query string.
fn core_params(
    cfg: &TtsSimConfig,
    query: &HashMap<String, String>,
    socket_no: u64,
    account: Arc<Account>,
) -> Result<CoreParams, String> {
    let format = match query.get("output_format") {
        None => OutputFormat::default(),
        Some(f) => OutputFormat::parse(f).ok_or_else(|| {
            format!("unsupported output_format {f:?}: use ulaw_8000, alaw_8000 or pcm_<rate>")
        })?,
    };
    let inactivity_s = match query.get("inactivity_timeout") {
        None => cfg.inactivity_timeout_s,
        Some(v) => v
            .parse::<u64>()
            .ok()
            .filter(|s| (1..=MAX_INACTIVITY_TIMEOUT_S).contains(s))
            .ok_or_else(|| {
                format!(
                    "inactivity_timeout must be 1..={MAX_INACTIVITY_TIMEOUT_S} seconds, got {v:?}"
                )
            })?,
    };
    Ok(CoreParams {
        format,
        max_contexts: cfg.max_contexts_per_socket as usize,
        first_chunk_latency: Duration::from_millis(cfg.first_chunk_latency_ms),
        chars_per_second: cfg.chars_per_second,
        realtime_factor: cfg.realtime_factor,
        inactivity_timeout: Duration::from_secs(inactivity_s.max(1)),
        stall_audio: cfg.stall_audio,
        close_after: cfg.close_after_ms.map(Duration::from_millis),
        finish_flushed_on_close: cfg.finish_flushed_on_close,
        ignore_close_socket: cfg.ignore_close_socket,
        seed: socket_no,
        max_concurrent_generations: cfg.max_concurrent_generations,
        generation_queue: Duration::from_millis(cfg.generation_queue_ms),
        quota_chars: cfg.quota_chars,
        no_final_for_empty_context: cfg.no_final_for_empty_context,
        null_alignment: cfg.null_alignment,
        context_inactivity: cfg.context_inactivity,
        account,
    })
}

/// An HTTP refusal with an ElevenLabs-style `detail` body.
fn refusal(status: StatusCode, code: &'static str, message: impl Into<String>) -> Refusal {
    Refusal {
        status,
        code,
        message: message.into(),
    }
}

/// Why an upgrade was refused, rendered as an HTTP error (never a 101).
#[derive(Debug)]
struct Refusal {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body =
            serde_json::json!({ "detail": { "status": self.code, "message": self.message } });
        (self.status, Json(body)).into_response()
    }
}

async fn upgrade(
    State(served): State<Served>,
    Path(voice_id): Path<String>,
    OriginalUri(uri): OriginalUri,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    let cfg = served.sim.config();
    let (mut params, guard) = match served.sim.admit(&cfg, &query, &headers) {
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
    let record = served
        .sim
        .record_session(&params, request, voice_id.clone());
    if !is_faulty(cfg.faulty_sessions, record.cell.session) {
        params.close_after = None;
    }
    let task = socket::SocketTask {
        guard,
        stats: Arc::clone(&served.sim.stats),
        outage: socket::Outage {
            scope: Arc::clone(&served.sim.scope),
            down_for: cfg.down_after_fault_ms.map(Duration::from_millis),
        },
        open_contexts: Arc::clone(&served.sim.open_contexts),
        cancel: served.cancel.child_token(),
        socket_no: params.seed,
        voice_id,
        record,
    };
    ws.read_buffer_size(8 * 1024)
        .on_upgrade(move |websocket| async move {
            let core = SocketCore::new(params, std::time::Instant::now());
            socket::run(websocket, core, task).await;
        })
}

async fn stats(State(served): State<Served>) -> Json<TtsStats> {
    Json(served.sim.stats())
}

async fn sessions(State(served): State<Served>) -> Json<Vec<TtsSessionRecord>> {
    Json(served.sim.sessions())
}

async fn get_config(State(served): State<Served>) -> Json<TtsSimConfig> {
    Json(served.sim.config())
}

async fn put_config(
    State(served): State<Served>,
    Json(cfg): Json<TtsSimConfig>,
) -> Json<TtsSimConfig> {
    tracing::info!("tts simulator configuration replaced");
    served.sim.set_config(cfg);
    Json(served.sim.config())
}

#[cfg(test)]
mod tests;
