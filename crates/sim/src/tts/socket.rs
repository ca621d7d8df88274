//! The thin async shell around one socket's [`SocketCore`]: it moves frames
//! between the WebSocket and the core, sleeps until the core's deadline, and
//! keeps the session and context counts right on every exit path. A socket
//! closed by the `close_after` fault starts the simulator's outage
//! (`down_after_fault_ms`) before its close frame goes out.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::extract::ws::{Message, WebSocket};

use crate::ws_io::{close_message, linger, send, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::LiveSocket;
use super::protocol::{Outbound, SocketCore, close_code};
use crate::stats::{FaultScope, SessionGuard, SessionStats};

/// Everything a socket task owns besides the socket and the core.
pub(super) struct SocketTask {
    /// Holds the socket's place in the session counts until the task ends.
    pub guard: SessionGuard,
    pub stats: Arc<SessionStats>,
    /// The outage this socket starts if a fault ends it.
    pub outage: Outage,
    /// Open contexts across all sockets (the `/stats` gauge).
    pub open_contexts: Arc<AtomicU64>,
    pub cancel: CancellationToken,
    pub socket_no: u64,
    pub voice_id: String,
    /// This socket's entry in `/stats/sessions`.
    pub record: LiveSocket,
}

/// The simulator's outage after a fault, and how long this socket's fault
/// makes it last (`down_after_fault_ms`).
pub(super) struct Outage {
    pub scope: Arc<FaultScope>,
    pub down_for: Option<Duration>,
}

impl Outage {
    fn begin(&self) {
        self.scope
            .fault_ended_session(Instant::now(), self.down_for);
    }
}

/// Why a socket task ended (for the log line).
#[derive(Debug)]
enum End {
    /// The core closed the socket with this code.
    Core(u16),
    /// The client sent a close frame or vanished.
    Client,
    /// The simulator is shutting down.
    Shutdown,
    /// A send failed or timed out.
    SendFailed,
}

/// Runs one accepted socket to completion.
pub(super) async fn run(mut ws: WebSocket, mut core: SocketCore, mut task: SocketTask) {
    let span =
        tracing::info_span!("tts_sim_socket", socket = task.socket_no, voice = %task.voice_id);
    async move {
        tracing::info!("socket open");
        let mut gauge = ContextGauge::new(Arc::clone(&task.open_contexts));
        let end = drive(
            &mut ws,
            &mut core,
            &task.cancel,
            &mut gauge,
            &mut task.record,
            &task.outage,
        )
        .await;
        task.record.sync(core.audio());
        if core.faulted() {
            task.stats.count_fault();
        }
        match end {
            End::Core(code) => tracing::info!(code, "socket closed by the simulator"),
            other => tracing::info!(end = ?other, "socket closed"),
        }
        drop(gauge);
        drop(task.guard);
    }
    .instrument(span)
    .await;
}

async fn drive(
    ws: &mut WebSocket,
    core: &mut SocketCore,
    cancel: &CancellationToken,
    gauge: &mut ContextGauge,
    record: &mut LiveSocket,
    outage: &Outage,
) -> End {
    loop {
        while let Some(out) = core.poll_output() {
            let msg = match out {
                Outbound::Text(text) => Message::Text(text.into()),
                Outbound::Close { code, reason } => {
                    gauge.set(0);
                    if core.faulted() {
                        outage.begin();
                    }
                    if send(ws, close_message(code, &reason)).await {
                        linger(ws).await;
                    }
                    return End::Core(code);
                }
            };
            if !send(ws, msg).await {
                return End::SendFailed;
            }
        }
        gauge.set(core.open_contexts() as u64);
        record.sync(core.audio());
        let deadline = core.next_deadline();
        tokio::select! {
            _ = cancel.cancelled() => {
                if send(ws, close_message(close_code::GOING_AWAY, "simulator shutting down")).await {
                    linger(ws).await;
                }
                return End::Shutdown;
            }
            msg = ws.recv() => match msg {
                Some(Ok(Message::Text(text))) => core.handle_text(Instant::now(), text.as_str()),
                Some(Ok(Message::Binary(_))) => core.handle_binary(Instant::now()),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                Some(Ok(Message::Close(_))) => {
                    // Reading once more flushes tungstenite's close reply.
                    linger(ws).await;
                    return End::Client;
                }
                Some(Err(_)) | None => return End::Client,
            },
            _ = sleep_until(deadline) => core.handle_timeout(Instant::now()),
        }
    }
}

/// This socket's share of the global open-context gauge; gives it back on
/// drop so a task that ends any way leaves the gauge right.
struct ContextGauge {
    total: Arc<AtomicU64>,
    mine: u64,
}

impl ContextGauge {
    fn new(total: Arc<AtomicU64>) -> Self {
        ContextGauge { total, mine: 0 }
    }

    fn set(&mut self, n: u64) {
        if n > self.mine {
            self.total.fetch_add(n - self.mine, Ordering::AcqRel);
        } else {
            self.total.fetch_sub(self.mine - n, Ordering::AcqRel);
        }
        self.mine = n;
    }
}

impl Drop for ContextGauge {
    fn drop(&mut self) {
        self.set(0);
    }
}
