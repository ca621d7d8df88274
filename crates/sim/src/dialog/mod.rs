//! The dialog simulator: a gRPC server for `proto/dialog.proto` running a
//! scripted slot-filling table-booking bot ([`bot`]), plus an HTTP side with
//! `/stats`, `/admin/config` and the [`crate::tools`] backend.
//!
//! Each `Converse` stream holds a [`SessionGuard`](crate::stats::SessionGuard)
//! until its driver task has ended, on every exit path, so `/stats` shows
//! whether the *client* closed what it opened. Beyond `max_streams` the
//! stream is refused with `RESOURCE_EXHAUSTED`; HTTP/2's own stream limit is
//! set far higher so the cap is ours, not h2's.
//!
//! A stream that ends without `SessionEnd` (an injected fault, the client
//! vanishing) leaves its conversation in a bounded [`resume::ResumeStore`];
//! `SessionStart{resume: true}` for the same `call_id` continues it with no
//! greeting (see [`resume`] for what is kept and why a re-sent turn gets
//! the same reply).
//!
//! Besides the stream counts, the simulator counts what the bots were told
//! across all streams ([`DialogSim::turn_stats`], `turns` in `/stats`):
//! user turns and interrupts, so an end-to-end test can assert that a
//! barge-in the server took back (the caller only coughed) never reached
//! the bot — `interrupts` unchanged — or that N real ones did.
//!
//! Its bad days (all off by default, see [`DialogSimConfig`]): replies that
//! never come (`stall_replies`), streams cut with `UNAVAILABLE`
//! (`close_after_ms`, scoped by `faulty_sessions`) and an outage after one
//! (`down_after_fault_ms`), slow tools (`tool_delay_ms`).

pub mod bot;
pub mod resume;
mod session;
pub mod slots;

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::routing::get;
use futures_util::Stream;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status, Streaming};
use tracing::{info, warn};

use crate::stats::{FaultScope, SessionStats, StatsSnapshot};
use crate::tools::{self, ToolStats, ToolStatsSnapshot};

/// Generated `callgate.dialog.v1` server and wire types (the simulator's
/// own copy; it shares no code with callgate).
pub mod pb {
    #![allow(clippy::all, clippy::pedantic, missing_docs)]
    tonic::include_proto!("callgate.dialog.v1");
}

/// HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS per connection: far above any
/// `max_streams`, so refusals come from our cap as `RESOURCE_EXHAUSTED`
/// instead of streams queueing invisibly inside h2.
const H2_MAX_STREAMS: u32 = 10_000;

/// Events buffered per stream towards tonic. When full the driver waits,
/// which is HTTP/2 flow control reaching the bot: a client that stops
/// reading stops the reply, nothing is dropped.
const OUT_CAPACITY: usize = 32;

/// How long the servers may take to drain after cancellation before they
/// are dropped with connections still open.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Dialog simulator knobs (all defaulted; changeable at run time through
/// `PUT /admin/config`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DialogSimConfig {
    /// Concurrent `Converse` streams; beyond it `RESOURCE_EXHAUSTED`.
    pub max_streams: u64,
    /// Delay before the first word of a reply (model latency).
    pub first_delta_latency_ms: u64,
    /// Delay between words (one word per `TextDelta`).
    pub delta_interval_ms: u64,
    /// How long the bot waits for a `ToolResult` before apologising.
    pub tool_result_timeout_ms: u64,
    /// Delay of every `/tools/{name}` answer.
    pub tool_delay_ms: u64,
    /// Fault: accept user turns but never answer them (the greeting still
    /// comes, so the call gets established first).
    pub stall_replies: bool,
    /// Fault: end each stream (each faulty one, see `faulty_sessions`) with
    /// `UNAVAILABLE` this long after it opened. Its conversation is kept for
    /// a resume.
    pub close_after_ms: Option<u64>,
    /// Fault scope: when set, `close_after_ms` applies only to the first N
    /// `Converse` streams this simulator accepted (its stream numbers
    /// 1..=N), so a resumed stream is left alone. `None` (default): every
    /// stream.
    pub faulty_sessions: Option<u64>,
    /// Fault: after a stream was ended by `close_after_ms`, refuse every new
    /// `Converse` with `UNAVAILABLE` for this long, so a client's reconnect
    /// budget can be exhausted. Counted in `refused_while_down` of
    /// `/stats`. `None` (default): no outage.
    pub down_after_fault_ms: Option<u64>,
}

impl Default for DialogSimConfig {
    fn default() -> Self {
        DialogSimConfig {
            max_streams: 50,
            first_delta_latency_ms: 150,
            delta_interval_ms: 20,
            tool_result_timeout_ms: 10_000,
            tool_delay_ms: 300,
            stall_replies: false,
            close_after_ms: None,
            faulty_sessions: None,
            down_after_fault_ms: None,
        }
    }
}

/// Reads the config; a poisoned lock still holds a valid config (writers
/// only ever replace it whole).
pub(crate) fn read_config(cfg: &RwLock<DialogSimConfig>) -> DialogSimConfig {
    cfg.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// `GET /stats` of the dialog simulator: the session snapshot, flattened,
/// plus tool-backend and turn counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DialogStats {
    #[serde(flatten)]
    pub sessions: StatsSnapshot,
    pub tools: ToolStatsSnapshot,
    #[serde(default)]
    pub turns: TurnStatsSnapshot,
}

/// Counts of what the bots were told, across all streams since start.
/// Plain totals (never decremented), so a test reads a difference.
#[derive(Debug, Default)]
pub(crate) struct TurnStats {
    user_turns: AtomicU64,
    interrupts: AtomicU64,
}

impl TurnStats {
    /// A `UserTurn` arrived on some stream.
    pub(crate) fn count_user_turn(&self) {
        self.user_turns.fetch_add(1, Ordering::Relaxed);
    }

    /// An `Interrupt` arrived on some stream.
    pub(crate) fn count_interrupt(&self) {
        self.interrupts.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> TurnStatsSnapshot {
        TurnStatsSnapshot {
            user_turns: self.user_turns.load(Ordering::Relaxed),
            interrupts: self.interrupts.load(Ordering::Relaxed),
        }
    }
}

/// A snapshot of the turn counters ([`DialogSim::turn_stats`], `turns` in
/// `GET /stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnStatsSnapshot {
    /// `UserTurn` messages received (a re-sent turn counts again).
    pub user_turns: u64,
    /// `Interrupt` messages received, whether or not the reply they name
    /// was still being generated (a late one only tells the bot what was
    /// played).
    pub interrupts: u64,
}

/// The simulator handle; clones share config and counters.
#[derive(Debug, Clone)]
pub struct DialogSim {
    config: Arc<RwLock<DialogSimConfig>>,
    stats: Arc<SessionStats>,
    tools: Arc<ToolStats>,
    /// The outage after a faulted stream (`down_after_fault_ms`).
    scope: Arc<FaultScope>,
    /// Conversations kept for resumed streams.
    store: Arc<resume::ResumeStore>,
    /// Numbers accepted streams, from 1 (the `faulty_sessions` scope).
    next_stream: Arc<AtomicU64>,
    /// User turns and interrupts received, across streams.
    turns: Arc<TurnStats>,
}

impl DialogSim {
    /// A simulator with `cfg`; serves nothing until `serve_*` is called.
    pub fn new(cfg: DialogSimConfig) -> Self {
        DialogSim {
            config: Arc::new(RwLock::new(cfg)),
            stats: Arc::new(SessionStats::default()),
            tools: Arc::new(ToolStats::default()),
            scope: Arc::new(FaultScope::default()),
            store: Arc::new(resume::ResumeStore::default()),
            next_stream: Arc::new(AtomicU64::new(1)),
            turns: Arc::new(TurnStats::default()),
        }
    }

    /// Calls whose conversation is kept for a resume right now.
    pub fn kept_conversations(&self) -> usize {
        self.store.len()
    }

    /// Decides a new `Converse` at `now`: `UNAVAILABLE` during an outage
    /// (`down_after_fault_ms`), `RESOURCE_EXHAUSTED` at the cap, else the
    /// stream's place in the counts.
    fn admit(&self, now: std::time::Instant) -> Result<crate::stats::SessionGuard, Status> {
        if let Some(left) = self.scope.down_for(now) {
            self.stats.count_refused_while_down();
            warn!(?left, "dialog stream refused: down after a fault");
            return Err(Status::unavailable(format!(
                "dialog simulator down after a fault, back in {} ms",
                left.as_millis()
            )));
        }
        let cap = self.config().max_streams;
        self.stats.try_open(cap).ok_or_else(|| {
            warn!(cap, "dialog stream refused at cap");
            Status::resource_exhausted(format!("dialog simulator at its cap of {cap} streams"))
        })
    }

    /// The context of a stream just accepted under the cap.
    fn session_ctx(
        &self,
        guard: crate::stats::SessionGuard,
        shutdown: CancellationToken,
    ) -> session::SessionCtx {
        session::SessionCtx {
            config: Arc::clone(&self.config),
            stats: Arc::clone(&self.stats),
            scope: Arc::clone(&self.scope),
            store: Arc::clone(&self.store),
            stream_no: self.next_stream.fetch_add(1, Ordering::Relaxed),
            turns: Arc::clone(&self.turns),
            shutdown,
            guard,
        }
    }

    /// Stream counts.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// Tool backend counts.
    pub fn tool_stats(&self) -> ToolStatsSnapshot {
        self.tools.snapshot()
    }

    /// User turns and interrupts received so far, across all streams.
    pub fn turn_stats(&self) -> TurnStatsSnapshot {
        self.turns.snapshot()
    }

    /// `Interrupt` messages received so far, across all streams: the same
    /// as `turn_stats().interrupts`.
    pub fn interrupts(&self) -> u64 {
        self.turn_stats().interrupts
    }

    /// The current configuration.
    pub fn config(&self) -> DialogSimConfig {
        read_config(&self.config)
    }

    /// Replaces the configuration; new streams and turns see it at once.
    pub fn set_config(&self, cfg: DialogSimConfig) {
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = cfg;
    }

    /// Serves `callgate.dialog.v1.Dialog` on `listener` until `cancel`.
    ///
    /// # Errors
    /// A transport error of the server.
    pub async fn serve_grpc(
        self,
        listener: TcpListener,
        cancel: CancellationToken,
    ) -> anyhow::Result<()> {
        let addr = listener.local_addr()?;
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        let service = pb::dialog_server::DialogServer::new(DialogService {
            sim: self,
            shutdown: cancel.child_token(),
        });
        info!(%addr, "dialog gRPC simulator listening");
        let server = Server::builder()
            .max_concurrent_streams(H2_MAX_STREAMS)
            .add_service(service)
            .serve_with_incoming_shutdown(incoming, cancel.clone().cancelled_owned());
        bounded_shutdown(server, &cancel, "dialog gRPC").await
    }

    /// Serves `GET /stats`, `GET`/`PUT /admin/config` and
    /// `POST /tools/{name}` on `listener` until `cancel`.
    ///
    /// # Errors
    /// An I/O error of the listener.
    pub async fn serve_http(
        self,
        listener: TcpListener,
        cancel: CancellationToken,
    ) -> anyhow::Result<()> {
        let addr = listener.local_addr()?;
        let backend = tools::ToolsBackend::new(Arc::clone(&self.tools), Arc::clone(&self.config));
        let app = axum::Router::new()
            .route("/stats", get(get_stats))
            .route("/admin/config", get(get_config).put(put_config))
            .with_state(self)
            .merge(tools::router(backend));
        info!(%addr, "dialog HTTP simulator listening");
        let server =
            axum::serve(listener, app).with_graceful_shutdown(cancel.clone().cancelled_owned());
        bounded_shutdown(
            async { server.await.map_err(anyhow::Error::from) },
            &cancel,
            "dialog HTTP",
        )
        .await
    }
}

/// Runs `server` until it returns, but at most `SHUTDOWN_GRACE` after
/// `cancel`: a client holding a connection open cannot hang shutdown.
async fn bounded_shutdown<F, E>(
    server: F,
    cancel: &CancellationToken,
    what: &str,
) -> anyhow::Result<()>
where
    F: Future<Output = Result<(), E>>,
    E: Into<anyhow::Error>,
{
    let grace = async {
        cancel.cancelled().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        result = server => result.map_err(Into::into),
        () = grace => {
            warn!(server = what, "did not drain within {SHUTDOWN_GRACE:?}; dropping connections");
            Ok(())
        }
    }
}

async fn get_stats(State(sim): State<DialogSim>) -> Json<DialogStats> {
    Json(DialogStats {
        sessions: sim.stats(),
        tools: sim.tool_stats(),
        turns: sim.turn_stats(),
    })
}

async fn get_config(State(sim): State<DialogSim>) -> Json<DialogSimConfig> {
    Json(sim.config())
}

async fn put_config(
    State(sim): State<DialogSim>,
    Json(cfg): Json<DialogSimConfig>,
) -> Json<DialogSimConfig> {
    info!(?cfg, "dialog simulator config replaced");
    sim.set_config(cfg.clone());
    Json(cfg)
}

/// The tonic service: admits streams under the cap and spawns a driver.
struct DialogService {
    sim: DialogSim,
    shutdown: CancellationToken,
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::ServerEvent, Status>> + Send>>;

#[tonic::async_trait]
impl pb::dialog_server::Dialog for DialogService {
    type ConverseStream = EventStream;

    async fn converse(
        &self,
        request: Request<Streaming<pb::ClientMessage>>,
    ) -> Result<Response<EventStream>, Status> {
        let guard = self.sim.admit(std::time::Instant::now())?;
        let (tx, rx) = mpsc::channel(OUT_CAPACITY);
        let ctx = self.sim.session_ctx(guard, self.shutdown.clone());
        tokio::spawn(session::run(request.into_inner(), tx, ctx));
        let events =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|ev| (ev, rx)) },
            );
        Ok(Response::new(Box::pin(events)))
    }
}

#[cfg(test)]
mod tests;
