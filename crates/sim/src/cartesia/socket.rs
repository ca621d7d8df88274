//! The thin async shell around one socket's [`SocketCore`]: it moves frames
//! between the WebSocket and the core, sleeps until the core's deadline,
//! keeps the session record current and, when the socket was ended by a
//! fault, opens the simulator's down window.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ws::{Message, WebSocket};

use crate::ws_io::{close_message, linger, send, sleep_until};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::protocol::{Outbound, SocketCore, close_code};
use super::{DownWindow, LiveSocket};
use crate::stats::{SessionGuard, SessionStats};

/// Everything a socket task owns besides the socket and the core.
pub(super) struct SocketTask {
    /// Holds the socket's place in the session counts until the task ends.
    pub guard: SessionGuard,
    pub stats: Arc<SessionStats>,
    pub cancel: CancellationToken,
    pub session: u64,
    /// This socket's entry in `/stats/sessions`.
    pub record: LiveSocket,
    /// Opened for `down_after_fault` when the core ends by a fault.
    pub down: Arc<DownWindow>,
    pub down_after_fault: Option<Duration>,
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
    let span = tracing::info_span!("cartesia_sim_socket", session = task.session);
    async move {
        tracing::info!("socket open");
        let end = drive(&mut ws, &mut core, &task.cancel, &mut task.record).await;
        task.record.sync(core.audio());
        if core.faulted() {
            // The window opens before the fault is counted, so whoever
            // sees the count also sees the window.
            if let Some(window) = task.down_after_fault {
                task.down.open_until(Instant::now() + window);
            }
            task.stats.count_fault();
        }
        match end {
            End::Core(code) => tracing::info!(code, "socket closed by the simulator"),
            other => tracing::info!(end = ?other, "socket closed"),
        }
        // The core releases its contexts' concurrency slots when dropped,
        // before the session guard gives the socket back.
        drop(core);
        drop(task.guard);
    }
    .instrument(span)
    .await;
}

async fn drive(
    ws: &mut WebSocket,
    core: &mut SocketCore,
    cancel: &CancellationToken,
    record: &mut LiveSocket,
) -> End {
    loop {
        while let Some(out) = core.poll_output() {
            let msg = match out {
                Outbound::Text(text) => Message::Text(text.into()),
                Outbound::Close { code, reason } => {
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
                    // Reading once more flushes the close reply.
                    linger(ws).await;
                    return End::Client;
                }
                Some(Err(_)) | None => return End::Client,
            },
            _ = sleep_until(deadline) => core.handle_timeout(Instant::now()),
        }
    }
}
