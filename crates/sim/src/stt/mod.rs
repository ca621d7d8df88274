//! A Deepgram-compatible live transcription server (`GET /v1/listen`).
//!
//! Speaks Deepgram's live-streaming protocol (docs/protocols.md §2) closely
//! enough that pointing callgate at the real service is a URL and key
//! change: query-string configuration, `Authorization: Token <key>`, HTTP
//! 400/401/429 refusals instead of a 101, `Results` / `SpeechStarted` /
//! `UtteranceEnd` / `Metadata` messages with Deepgram's key names, and the
//! `NET-0001` idle close. Speech is found by the simulator's own neural
//! voice-activity detector ([`detector`], not the energy VAD callgate
//! uses) on the decoded audio, and the n-th utterance of a stream is "heard" as the n-th line of
//! the [`crate::script`]. A segment too short to be words (under
//! [`stream::MIN_WORDS_MS`] voiced: a cough, a door, a click) is heard as
//! noise, as Deepgram does: `SpeechStarted`, then one final with an empty
//! transcript, no interim, and no script line used (counted in
//! [`SttStats::noise_segments`]).
//!
//! Layout: [`params`] validates the upgrade, [`stream`] is the sans-IO stream
//! (audio time only), [`messages`] holds the wire shapes, and a thin socket
//! task adds the wall-clock knobs (result latency, idle timeout, faults).
//!
//! Also served: `GET /stats` ([`SttStats`]: session counts, streams per
//! audio format, noise segments), `GET /stats/sessions` ([`SttSessionRecord`]s of the most
//! recent streams) and `GET`/`PUT /admin/config` ([`SttSimConfig`], applied
//! to streams opened afterwards).

pub mod detector;
pub mod messages;
pub mod params;
mod socket;
pub mod stream;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use axum::Json;
use axum::Router;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{OriginalUri, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::stats::{
    FaultScope, FormatCounts, RecentSessions, SessionGuard, SessionStats, StatsSnapshot, is_faulty,
};

use self::params::StreamParams;
use self::stream::StreamCore;

/// Run-time configuration of the STT simulator. Every field has a default,
/// so a partial TOML/JSON document is valid.
///
/// The fault knobs reproduce Deepgram's bad days; all are off by default and
/// apply to streams opened after they are set (`PUT /admin/config`, or
/// `SimConfig::stt` in a test). Audio-time faults are counted in
/// milliseconds of audio the stream has received, so they are reproducible
/// however fast the audio arrives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SttSimConfig {
    /// Concurrent streams; beyond it the upgrade gets HTTP 429.
    pub max_sessions: u64,
    /// Extra wall-clock delay before each message is sent (order is kept).
    pub result_latency_ms: u64,
    /// No audio and no `KeepAlive` for this long → close 1011 `NET-0001`.
    pub idle_timeout_ms: u64,
    /// What the caller "says": utterance n is `script::line(&script, n)`.
    pub script: Vec<String>,
    /// When set, require `Authorization: Token <key>` (else HTTP 401).
    pub api_key: Option<String>,
    /// Fault: close every stream (every faulty one, see `faulty_sessions`)
    /// with 1011 `NET-0000` this long (wall clock) after it opened.
    pub close_after_ms: Option<u64>,
    /// Fault scope: when set, the connection-level faults
    /// (`close_after_ms`, `error_then_close_ms`, `drop_at_audio_ms`) apply
    /// only to the first N streams this simulator accepted (its session
    /// numbers 1..=N), so a reconnected stream is left alone. `None`
    /// (default): every stream.
    pub faulty_sessions: Option<u64>,
    /// Fault: after a stream was ended by one of the connection-level
    /// faults, answer every upgrade with HTTP 503 (Deepgram's error body and
    /// `dg-error` header, `err_code` `SERVICE_UNAVAILABLE`) for this long, so
    /// a client's reconnect budget can be exhausted. Refusals are counted in
    /// [`SttStats::refused_while_down`]. `None` (default): no outage.
    pub down_after_fault_ms: Option<u64>,
    /// Fault: once this much audio (audio time, like
    /// `error_then_close_ms`) has arrived on a stream, close it with 1011
    /// `NET-0000` *without* an `Error` message first — Deepgram's routine
    /// close. The utterance in progress gets no final. `None` (default): off.
    pub drop_at_audio_ms: Option<u64>,
    /// Fault: once the stream's first utterance (from the detector's speech
    /// onset) has been heard for this many ms, close 1011 `NET-0000` with no
    /// `Error` — a drop that lands mid-utterance whatever the call's timing
    /// before it. Scoped by `faulty_sessions`. `None` (default): off.
    pub drop_mid_utterance_ms: Option<u64>,
    /// Fault: answer every upgrade with this HTTP status. As on Deepgram,
    /// the refusal carries the error body (`err_code`, `err_msg`,
    /// `request_id`) both as JSON and in a `dg-error` response header, and
    /// the stream id in `dg-request-id`.
    pub fail_upgrade_status: Option<u16>,
    /// With `fail_upgrade_status`: the `err_msg` of the refusal (default:
    /// "injected upgrade failure (HTTP <status>)").
    pub fail_upgrade_message: Option<String>,
    /// Fault: accept audio and keep the stream open, but never send a
    /// result (a provider that has silently stopped transcribing).
    pub stall_results: bool,
    /// Fault `stall_results_ms`: results (and `UtteranceEnd`) are held for
    /// this many ms of audio starting at `stall_results_from_ms`, then all
    /// released at once, in order (a transcriber that falls behind and
    /// catches up). Audio keeps being accepted throughout.
    pub stall_results_ms: Option<u64>,
    /// Audio time at which the `stall_results_ms` hold begins (default 0:
    /// from the first frame).
    pub stall_results_from_ms: u64,
    /// Fault `empty_finals`: the fraction (0.0–1.0) of utterances whose
    /// final comes back with an empty transcript (`is_final: true`,
    /// `speech_final` as usual, `transcript: ""`, no words) after interims
    /// that had words. Which utterances is a pure function of
    /// `fault_seed`, the session number and the utterance index, so a run
    /// is reproducible; 1.0 empties every final.
    pub empty_finals: f64,
    /// Seed of the `empty_finals` choice.
    pub fault_seed: u64,
    /// Fault `no_speech_final`: `speech_final` is never set (Deepgram's
    /// endpointing defeated by background noise); utterances end only by
    /// `UtteranceEnd`, which needs the client's `utterance_end_ms`.
    pub no_speech_final: bool,
    /// Fault `error_then_close`: after this many ms of audio, send an
    /// `Error` message (`variant: "INTERNAL_SERVER_ERROR"`) and close the
    /// stream with 1011 `NET-0000`.
    pub error_then_close_ms: Option<u64>,
}

impl Default for SttSimConfig {
    fn default() -> Self {
        SttSimConfig {
            max_sessions: 50,
            result_latency_ms: 50,
            idle_timeout_ms: 10_000,
            script: crate::script::default_script(),
            api_key: None,
            close_after_ms: None,
            faulty_sessions: None,
            down_after_fault_ms: None,
            drop_at_audio_ms: None,
            drop_mid_utterance_ms: None,
            fail_upgrade_status: None,
            fail_upgrade_message: None,
            stall_results: false,
            stall_results_ms: None,
            stall_results_from_ms: 0,
            empty_finals: 0.0,
            fault_seed: 0,
            no_speech_final: false,
            error_then_close_ms: None,
        }
    }
}

/// Why an upgrade was answered with an HTTP error instead of a 101.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SttSimRefusal {
    /// The `fail_upgrade_status` fault knob is set.
    #[error("{}", message.clone().unwrap_or_else(|| format!("injected upgrade failure (HTTP {status})")))]
    Injected {
        status: u16,
        message: Option<String>,
    },
    /// `api_key` is configured and the request did not carry it.
    #[error("invalid credentials")]
    Unauthorized,
    /// A query parameter is missing or invalid.
    #[error("invalid query parameter `{param}`: {reason}")]
    BadParam { param: &'static str, reason: String },
    /// `max_sessions` streams are open.
    #[error("too many concurrent requests (limit {max_sessions})")]
    TooManyRequests { max_sessions: u64 },
    /// The `down_after_fault_ms` outage after a faulted stream.
    #[error("service temporarily unavailable (back in {retry_after_ms} ms)")]
    Down { retry_after_ms: u64 },
}

impl SttSimRefusal {
    /// The HTTP status Deepgram answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            SttSimRefusal::Injected { status, .. } => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            }
            SttSimRefusal::Unauthorized => StatusCode::UNAUTHORIZED,
            SttSimRefusal::BadParam { .. } => StatusCode::BAD_REQUEST,
            SttSimRefusal::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            SttSimRefusal::Down { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn err_code(&self) -> &'static str {
        match self {
            SttSimRefusal::Injected { .. } => "INJECTED_FAULT",
            SttSimRefusal::Unauthorized => "INVALID_AUTH",
            SttSimRefusal::BadParam { .. } => "Bad Request",
            SttSimRefusal::TooManyRequests { .. } => "TOO_MANY_REQUESTS",
            SttSimRefusal::Down { .. } => "SERVICE_UNAVAILABLE",
        }
    }

    /// The refusal as Deepgram sends it: the JSON error body, repeated in
    /// the `dg-error` header, and the request id in `dg-request-id`.
    fn into_response(self, request_id: Uuid) -> Response {
        let body = serde_json::json!({
            "err_code": self.err_code(),
            "err_msg": self.to_string(),
            "request_id": request_id.to_string(),
        });
        let mut response = (self.status(), Json(&body)).into_response();
        let headers = response.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&body.to_string()) {
            headers.insert("dg-error", v);
        }
        if let Ok(v) = HeaderValue::from_str(&request_id.to_string()) {
            headers.insert("dg-request-id", v);
        }
        response
    }
}

/// `GET /stats` and [`SttSim::stats`]: the session counts (same keys as
/// [`StatsSnapshot`]) plus the streams accepted per audio format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SttStats {
    /// Streams open right now.
    pub open_sessions: u64,
    /// Most streams open at once since start.
    pub peak_sessions: u64,
    /// Streams accepted since start.
    pub total_sessions: u64,
    /// Upgrades refused at the cap (429).
    pub rejected_sessions: u64,
    /// Streams (or upgrades) ended by an injected fault.
    pub faulted_sessions: u64,
    /// Upgrades refused (503) during a `down_after_fault_ms` outage.
    #[serde(default)]
    pub refused_while_down: u64,
    /// Streams accepted per audio format, keyed `"<encoding>/<sample_rate>"`
    /// as asked in the query string: `"mulaw/8000"`, `"linear16/16000"`…
    #[serde(default)]
    pub formats: BTreeMap<String, u64>,
    /// Speech segments heard as noise across all streams since start:
    /// voiced for less than [`stream::MIN_WORDS_MS`], answered with an
    /// empty final and no script line (see [`stream`]).
    #[serde(default)]
    pub noise_segments: u64,
}

impl SttStats {
    fn new(sessions: StatsSnapshot, formats: BTreeMap<String, u64>, noise_segments: u64) -> Self {
        SttStats {
            open_sessions: sessions.open_sessions,
            peak_sessions: sessions.peak_sessions,
            total_sessions: sessions.total_sessions,
            rejected_sessions: sessions.rejected_sessions,
            faulted_sessions: sessions.faulted_sessions,
            refused_while_down: sessions.refused_while_down,
            formats,
            noise_segments,
        }
    }
}

/// What one accepted stream asked for and received (`GET /stats/sessions`,
/// [`SttSim::sessions`]). Kept for the last
/// [`RECENT_SESSIONS`](crate::stats::RECENT_SESSIONS) streams.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SttSessionRecord {
    /// 1-based, in acceptance order.
    pub session: u64,
    /// The stream's id: sent in the `dg-request-id` response header (the
    /// client exposes it as `SttHandle::request_id()`) and in every result.
    pub request_id: String,
    /// Path and query of the upgrade request, as received.
    pub request: String,
    /// Values of the `tag` query parameter, in order (Deepgram's request
    /// labels; a client may put its call id here to be found again).
    pub tags: Vec<String>,
    /// `"<encoding>/<sample_rate>"`, the key counted in [`SttStats::formats`].
    pub format: String,
    /// Audio bytes received.
    pub audio_bytes: u64,
    /// Audio received, in ms (whole 10 ms VAD windows).
    pub audio_ms: u64,
    /// Utterances finalized (script lines used).
    pub utterances: u64,
    /// Speech segments heard as noise (empty finals, no script line).
    #[serde(default)]
    pub noise_segments: u64,
    /// False once the stream's task has ended.
    pub open: bool,
}

/// The shared side of an [`SttSessionRecord`], updated by its stream task.
#[derive(Debug)]
struct SessionCell {
    session: u64,
    request_id: String,
    request: String,
    tags: Vec<String>,
    format: String,
    audio_bytes: AtomicU64,
    audio_ms: AtomicU64,
    utterances: AtomicU64,
    noise_segments: AtomicU64,
    open: AtomicBool,
}

impl SessionCell {
    fn record(&self) -> SttSessionRecord {
        SttSessionRecord {
            session: self.session,
            request_id: self.request_id.clone(),
            request: self.request.clone(),
            tags: self.tags.clone(),
            format: self.format.clone(),
            audio_bytes: self.audio_bytes.load(Ordering::Relaxed),
            audio_ms: self.audio_ms.load(Ordering::Relaxed),
            utterances: self.utterances.load(Ordering::Relaxed),
            noise_segments: self.noise_segments.load(Ordering::Relaxed),
            open: self.open.load(Ordering::Acquire),
        }
    }
}

/// A stream's handle on its record; dropping it (the stream ended, or its
/// upgrade never completed) marks the record closed.
#[derive(Debug)]
pub(crate) struct LiveSession {
    cell: Arc<SessionCell>,
    /// The simulator-wide [`SttStats::noise_segments`], fed with this
    /// stream's increments.
    noise_total: Arc<AtomicU64>,
}

/// What a stream reports after each client frame.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Progress {
    /// Audio bytes in this frame.
    pub audio_bytes: u64,
    /// The stream's totals so far.
    pub audio_ms: u64,
    pub utterances: u64,
    pub noise_segments: u64,
}

impl LiveSession {
    /// The session's 1-based number.
    pub(crate) fn session(&self) -> u64 {
        self.cell.session
    }

    /// Called by the stream task after each client frame.
    pub(crate) fn update(&self, p: Progress) {
        let cell = &self.cell;
        cell.audio_bytes.fetch_add(p.audio_bytes, Ordering::Relaxed);
        cell.audio_ms.store(p.audio_ms, Ordering::Relaxed);
        cell.utterances.store(p.utterances, Ordering::Relaxed);
        // Only this task writes the cell, so the swap sees its own last
        // value and the total gets each noise segment exactly once.
        let before = cell
            .noise_segments
            .swap(p.noise_segments, Ordering::Relaxed);
        self.noise_total
            .fetch_add(p.noise_segments.saturating_sub(before), Ordering::Relaxed);
    }
}

impl Drop for LiveSession {
    fn drop(&mut self) {
        self.cell.open.store(false, Ordering::Release);
    }
}

/// The key of a stream's format in [`SttStats::formats`].
pub fn format_key(params: &StreamParams) -> String {
    let encoding = match params.encoding {
        params::SimEncoding::Mulaw => "mulaw",
        params::SimEncoding::Alaw => "alaw",
        params::SimEncoding::Linear16 => "linear16",
    };
    format!("{encoding}/{}", params.sample_rate)
}

/// The STT simulator. Cheap to clone; clones share config and counts.
#[derive(Debug, Clone)]
pub struct SttSim {
    /// Read once per upgrade, so a `PUT /admin/config` affects new streams only.
    cfg: Arc<RwLock<SttSimConfig>>,
    stats: Arc<SessionStats>,
    formats: Arc<FormatCounts>,
    sessions: Arc<RecentSessions<SessionCell>>,
    next_session: Arc<AtomicU64>,
    /// The outage after a faulted stream (`down_after_fault_ms`).
    scope: Arc<FaultScope>,
    /// [`SttStats::noise_segments`]: a plain total, so it survives the
    /// per-session records being dropped from the recent log.
    noise_segments: Arc<AtomicU64>,
}

#[derive(Clone)]
struct AppState {
    sim: SttSim,
    /// Stream tasks outlive the HTTP server's graceful shutdown; they watch
    /// this to close their sockets (1001) when the simulator stops.
    cancel: CancellationToken,
}

impl SttSim {
    /// A simulator with `cfg`; nothing listens until [`SttSim::serve`].
    pub fn new(cfg: SttSimConfig) -> Self {
        SttSim {
            cfg: Arc::new(RwLock::new(cfg)),
            stats: Arc::new(SessionStats::default()),
            formats: Arc::new(FormatCounts::default()),
            sessions: Arc::new(RecentSessions::default()),
            next_session: Arc::new(AtomicU64::new(1)),
            scope: Arc::new(FaultScope::default()),
            noise_segments: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Current session counts, streams per format and noise segments.
    pub fn stats(&self) -> SttStats {
        SttStats::new(
            self.stats.snapshot(),
            self.formats.snapshot(),
            self.noise_segments.load(Ordering::Relaxed),
        )
    }

    /// Records of the most recent streams, oldest first.
    pub fn sessions(&self) -> Vec<SttSessionRecord> {
        self.sessions.snapshot(SessionCell::record)
    }

    /// Counts and records one accepted stream.
    fn record_session(
        &self,
        params: &StreamParams,
        request_id: String,
        request: String,
        tags: Vec<String>,
    ) -> LiveSession {
        let format = format_key(params);
        self.formats.count(&format);
        let cell = Arc::new(SessionCell {
            session: self.next_session.fetch_add(1, Ordering::Relaxed),
            request_id,
            request,
            tags,
            format,
            audio_bytes: AtomicU64::new(0),
            audio_ms: AtomicU64::new(0),
            utterances: AtomicU64::new(0),
            noise_segments: AtomicU64::new(0),
            open: AtomicBool::new(true),
        });
        self.sessions.push(Arc::clone(&cell));
        LiveSession {
            cell,
            noise_total: Arc::clone(&self.noise_segments),
        }
    }

    /// The current configuration.
    pub fn config(&self) -> SttSimConfig {
        // A poisoned lock only means a writer panicked mid-assignment of a
        // plain value; the data is still a whole config.
        self.cfg
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replaces the configuration; applies to streams opened afterwards.
    pub fn set_config(&self, cfg: SttSimConfig) {
        *self.cfg.write().unwrap_or_else(PoisonError::into_inner) = cfg;
    }

    /// Serves the routes on `listener` until `cancel` fires; open streams
    /// are then closed with 1001.
    pub async fn serve(
        self,
        listener: TcpListener,
        cancel: CancellationToken,
    ) -> anyhow::Result<()> {
        let addr = listener.local_addr()?;
        tracing::info!(%addr, "stt simulator listening");
        let state = AppState {
            sim: self,
            cancel: cancel.clone(),
        };
        let app = Router::new()
            .route("/v1/listen", get(listen))
            .route("/stats", get(stats))
            .route("/stats/sessions", get(sessions))
            .route("/admin/config", get(get_config).put(put_config))
            .with_state(state);
        axum::serve(listener, app)
            .with_graceful_shutdown(cancel.cancelled_owned())
            .await?;
        tracing::info!(%addr, "stt simulator stopped");
        Ok(())
    }

    /// Decides an upgrade: outage, fault, auth, params, then the cap (last,
    /// so a bad request never takes a slot).
    fn admit(
        &self,
        cfg: &SttSimConfig,
        headers: &HeaderMap,
        query: &HashMap<String, String>,
    ) -> Result<(StreamParams, SessionGuard), SttSimRefusal> {
        if let Some(left) = self.scope.down_for(std::time::Instant::now()) {
            self.stats.count_refused_while_down();
            return Err(SttSimRefusal::Down {
                retry_after_ms: u64::try_from(left.as_millis()).unwrap_or(u64::MAX),
            });
        }
        if let Some(status) = cfg.fail_upgrade_status {
            self.stats.count_fault();
            return Err(SttSimRefusal::Injected {
                status,
                message: cfg.fail_upgrade_message.clone(),
            });
        }
        if let Some(key) = &cfg.api_key {
            let expected = format!("Token {key}");
            let given = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok());
            if given != Some(expected.as_str()) {
                return Err(SttSimRefusal::Unauthorized);
            }
        }
        let params = StreamParams::from_query(query)?;
        let guard =
            self.stats
                .try_open(cfg.max_sessions)
                .ok_or(SttSimRefusal::TooManyRequests {
                    max_sessions: cfg.max_sessions,
                })?;
        Ok((params, guard))
    }
}

async fn listen(
    State(app): State<AppState>,
    headers: HeaderMap,
    OriginalUri(uri): OriginalUri,
    Query(pairs): Query<Vec<(String, String)>>,
    ws: WebSocketUpgrade,
) -> Response {
    let cfg = app.sim.config();
    let request_id = Uuid::new_v4();
    let tags: Vec<String> = pairs
        .iter()
        .filter(|(k, _)| k == "tag")
        .map(|(_, v)| v.clone())
        .collect();
    // A repeated parameter other than `tag`: the last one counts.
    let query: HashMap<String, String> = pairs.into_iter().collect();
    let (params, guard) = match app.sim.admit(&cfg, &headers, &query) {
        Ok(admitted) => admitted,
        Err(refusal) => {
            tracing::info!(%request_id, status = refusal.status().as_u16(), %refusal, "stt upgrade refused");
            return refusal.into_response(request_id);
        }
    };
    let request = uri
        .path_and_query()
        .map_or_else(|| uri.path().to_owned(), |pq| pq.as_str().to_owned());
    let record = app
        .sim
        .record_session(&params, request_id.to_string(), request, tags);
    // The connection-level faults hit only the sessions in scope.
    let faulty = is_faulty(cfg.faulty_sessions, record.session());
    let knobs = socket::Knobs {
        result_latency: Duration::from_millis(cfg.result_latency_ms),
        idle_timeout: Duration::from_millis(cfg.idle_timeout_ms),
        close_after: cfg
            .close_after_ms
            .filter(|_| faulty)
            .map(Duration::from_millis),
        stall_results: cfg.stall_results,
        down_after_fault: cfg.down_after_fault_ms.map(Duration::from_millis),
    };
    let faults = stream::StreamFaults {
        empty_finals: cfg.empty_finals,
        // Each session draws its own utterances, reproducibly.
        seed: cfg.fault_seed ^ record.session().wrapping_mul(0x9e37_79b9_7f4a_7c15),
        no_speech_final: cfg.no_speech_final,
        error_after_ms: cfg.error_then_close_ms.filter(|_| faulty),
        drop_after_ms: cfg.drop_at_audio_ms.filter(|_| faulty),
        drop_in_speech_ms: cfg.drop_mid_utterance_ms.filter(|_| faulty),
        stall_ms: cfg.stall_results_ms,
        stall_from_ms: cfg.stall_results_from_ms,
    };
    let core = StreamCore::new(
        params,
        cfg.script,
        request_id.to_string(),
        SystemTime::now(),
    )
    .with_faults(faults);
    let counts = socket::Counts {
        stats: Arc::clone(&app.sim.stats),
        scope: Arc::clone(&app.sim.scope),
    };
    let mut response = ws.read_buffer_size(8 * 1024).on_upgrade(move |socket| {
        socket::run(socket, core, knobs, app.cancel, counts, guard, record)
    });
    // Deepgram names the request in this header; clients log it.
    if let Ok(v) = HeaderValue::from_str(&request_id.to_string()) {
        response.headers_mut().insert("dg-request-id", v);
    }
    response
}

async fn stats(State(app): State<AppState>) -> Json<SttStats> {
    Json(app.sim.stats())
}

async fn sessions(State(app): State<AppState>) -> Json<Vec<SttSessionRecord>> {
    Json(app.sim.sessions())
}

async fn get_config(State(app): State<AppState>) -> Json<SttSimConfig> {
    Json(app.sim.config())
}

async fn put_config(
    State(app): State<AppState>,
    Json(cfg): Json<SttSimConfig>,
) -> Json<SttSimConfig> {
    tracing::info!(
        max_sessions = cfg.max_sessions,
        result_latency_ms = cfg.result_latency_ms,
        idle_timeout_ms = cfg.idle_timeout_ms,
        close_after_ms = ?cfg.close_after_ms,
        fail_upgrade_status = ?cfg.fail_upgrade_status,
        stall_results = cfg.stall_results,
        stall_results_ms = ?cfg.stall_results_ms,
        empty_finals = cfg.empty_finals,
        no_speech_final = cfg.no_speech_final,
        error_then_close_ms = ?cfg.error_then_close_ms,
        drop_at_audio_ms = ?cfg.drop_at_audio_ms,
        faulty_sessions = ?cfg.faulty_sessions,
        down_after_fault_ms = ?cfg.down_after_fault_ms,
        "stt simulator config replaced"
    );
    app.sim.set_config(cfg.clone());
    Json(cfg)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fault_tests;
