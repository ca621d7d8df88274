//! A Deepgram-compatible live transcription server (`GET /v1/listen`).
//!
//! Speaks Deepgram's live-streaming protocol (PROTOCOLS.md §2) closely
//! enough that pointing callgate at the real service is a URL and key
//! change: query-string configuration, `Authorization: Token <key>`, HTTP
//! 400/401/429 refusals instead of a 101, `Results` / `SpeechStarted` /
//! `UtteranceEnd` / `Metadata` messages with Deepgram's key names, and the
//! `NET-0001` idle close. Speech is found by an energy VAD on the decoded
//! audio, and the n-th utterance of a stream is "heard" as the n-th line of
//! the [`crate::script`].
//!
//! Layout: [`params`] validates the upgrade, [`stream`] is the sans-IO stream
//! (audio time only), [`messages`] holds the wire shapes, and a thin socket
//! task adds the wall-clock knobs (result latency, idle timeout, faults).
//!
//! Also served: `GET /stats` ([`StatsSnapshot`]) and `GET`/`PUT
//! /admin/config` ([`SttSimConfig`], applied to streams opened afterwards).

pub mod messages;
pub mod params;
mod socket;
pub mod stream;

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use axum::Json;
use axum::Router;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::stats::{SessionGuard, SessionStats, StatsSnapshot};

use self::params::StreamParams;
use self::stream::StreamCore;

/// Run-time configuration of the STT simulator. Every field has a default,
/// so a partial TOML/JSON document is valid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Fault: close every stream with 1011 `NET-0000` after this long.
    pub close_after_ms: Option<u64>,
    /// Fault: answer every upgrade with this HTTP status.
    pub fail_upgrade_status: Option<u16>,
    /// Fault: accept audio and keep the stream open, but never send a
    /// result (a provider that has silently stopped transcribing).
    pub stall_results: bool,
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
            fail_upgrade_status: None,
            stall_results: false,
        }
    }
}

/// Why an upgrade was answered with an HTTP error instead of a 101.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SttSimRefusal {
    /// The `fail_upgrade_status` fault knob is set.
    #[error("injected upgrade failure (HTTP {status})")]
    Injected { status: u16 },
    /// `api_key` is configured and the request did not carry it.
    #[error("invalid credentials")]
    Unauthorized,
    /// A query parameter is missing or invalid.
    #[error("invalid query parameter `{param}`: {reason}")]
    BadParam { param: &'static str, reason: String },
    /// `max_sessions` streams are open.
    #[error("too many concurrent requests (limit {max_sessions})")]
    TooManyRequests { max_sessions: u64 },
}

impl SttSimRefusal {
    /// The HTTP status Deepgram answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            SttSimRefusal::Injected { status } => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            }
            SttSimRefusal::Unauthorized => StatusCode::UNAUTHORIZED,
            SttSimRefusal::BadParam { .. } => StatusCode::BAD_REQUEST,
            SttSimRefusal::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    fn err_code(&self) -> &'static str {
        match self {
            SttSimRefusal::Injected { .. } => "INJECTED_FAULT",
            SttSimRefusal::Unauthorized => "INVALID_AUTH",
            SttSimRefusal::BadParam { .. } => "Bad Request",
            SttSimRefusal::TooManyRequests { .. } => "TOO_MANY_REQUESTS",
        }
    }

    fn into_response(self, request_id: Uuid) -> Response {
        let body = serde_json::json!({
            "err_code": self.err_code(),
            "err_msg": self.to_string(),
            "request_id": request_id.to_string(),
        });
        (self.status(), Json(body)).into_response()
    }
}

/// The STT simulator. Cheap to clone; clones share config and counts.
#[derive(Debug, Clone)]
pub struct SttSim {
    /// Read once per upgrade, so a `PUT /admin/config` affects new streams only.
    cfg: Arc<RwLock<SttSimConfig>>,
    stats: Arc<SessionStats>,
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
        }
    }

    /// Current session counts.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
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
            .route("/admin/config", get(get_config).put(put_config))
            .with_state(state);
        axum::serve(listener, app)
            .with_graceful_shutdown(cancel.cancelled_owned())
            .await?;
        tracing::info!(%addr, "stt simulator stopped");
        Ok(())
    }

    /// Decides an upgrade: fault, auth, params, then the cap (last, so a bad
    /// request never takes a slot).
    fn admit(
        &self,
        cfg: &SttSimConfig,
        headers: &HeaderMap,
        query: &HashMap<String, String>,
    ) -> Result<(StreamParams, SessionGuard), SttSimRefusal> {
        if let Some(status) = cfg.fail_upgrade_status {
            self.stats.count_fault();
            return Err(SttSimRefusal::Injected { status });
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
    Query(query): Query<HashMap<String, String>>,
    ws: WebSocketUpgrade,
) -> Response {
    let cfg = app.sim.config();
    let request_id = Uuid::new_v4();
    let (params, guard) = match app.sim.admit(&cfg, &headers, &query) {
        Ok(admitted) => admitted,
        Err(refusal) => {
            tracing::info!(%request_id, status = refusal.status().as_u16(), %refusal, "stt upgrade refused");
            return refusal.into_response(request_id);
        }
    };
    let knobs = socket::Knobs {
        result_latency: Duration::from_millis(cfg.result_latency_ms),
        idle_timeout: Duration::from_millis(cfg.idle_timeout_ms),
        close_after: cfg.close_after_ms.map(Duration::from_millis),
        stall_results: cfg.stall_results,
    };
    let core = StreamCore::new(
        params,
        cfg.script,
        request_id.to_string(),
        SystemTime::now(),
    );
    let stats = Arc::clone(&app.sim.stats);
    let mut response = ws
        .read_buffer_size(8 * 1024)
        .on_upgrade(move |socket| socket::run(socket, core, knobs, app.cancel, stats, guard));
    // Deepgram names the request in this header; clients log it.
    if let Ok(v) = HeaderValue::from_str(&request_id.to_string()) {
        response.headers_mut().insert("dg-request-id", v);
    }
    response
}

async fn stats(State(app): State<AppState>) -> Json<StatsSnapshot> {
    Json(app.sim.stats())
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
        "stt simulator config replaced"
    );
    app.sim.set_config(cfg.clone());
    Json(cfg)
}

#[cfg(test)]
mod tests;
