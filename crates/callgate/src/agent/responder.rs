//! The agent-check TCP listener: one line per connection, then close.
//!
//! What it is: an accept loop on `[agent].listen`; every connection gets
//! [`super::reply`] for the load at that moment, written at once, then the
//! write side is shut and whatever the balancer sent (`agent-send`) is read
//! and discarded until it closes. A delivered answer records its session
//! count in `App::routing` and counts in `callgate_agent_checks_total`.
//!
//! What it never does: hold more than `[agent].max_connections` connections
//! (one more is closed unanswered, `reason="busy"`), let a connection live
//! past `[agent].timeout_ms`, or take a lock a call holds — it reads the
//! gate's snapshot and atomic counters only.
//!
//! How to drive it: [`start`] binds and spawns the loop; cancelling the token
//! stops accepting; [`Responder::stopped`] waits for the loop to end.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::app::App;
use crate::config::{AgentConfig, ms};
use crate::metrics as m;

/// Pause after a failed `accept` (out of file descriptors, say), so the
/// loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// Bytes of `agent-send` read per call while waiting for the close.
const DISCARD_BUF: usize = 256;

/// A running responder.
pub struct Responder {
    /// Where it listens (the port is known even when 0 was asked for).
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Responder {
    /// Waits (at most `limit`) for the accept loop to end after its stop
    /// token was cancelled.
    pub async fn stopped(self, limit: Duration) {
        if tokio::time::timeout(limit, self.task).await.is_err() {
            warn!("agent-check responder did not stop in time");
        }
    }
}

/// Binds `cfg.listen` and starts answering until `stop` is cancelled.
pub async fn start(
    app: Arc<App>,
    cfg: &AgentConfig,
    stop: CancellationToken,
) -> std::io::Result<Responder> {
    let listener = TcpListener::bind(cfg.listen).await?;
    let addr = listener.local_addr()?;
    let limits = Limits {
        slots: Arc::new(Semaphore::new(cfg.max_connections)),
        timeout: ms(cfg.timeout_ms),
    };
    info!(%addr, "HAProxy agent-check responder listening");
    let task = tokio::spawn(accept_loop(app, listener, limits, stop));
    Ok(Responder { addr, task })
}

#[derive(Clone)]
struct Limits {
    slots: Arc<Semaphore>,
    timeout: Duration,
}

async fn accept_loop(
    app: Arc<App>,
    listener: TcpListener,
    limits: Limits,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(e) => {
                warn!(error = %e, "agent-check accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&limits.slots).try_acquire_owned() else {
            metrics::counter!(m::AGENT_CHECK_FAILURES, "reason" => "busy").increment(1);
            drop(stream);
            continue;
        };
        let app = Arc::clone(&app);
        let timeout = limits.timeout;
        tokio::spawn(async move {
            serve(&app, stream, timeout).await;
            drop(permit);
        });
    }
}

/// One connection, bounded by `timeout` as a whole: the answer first, then
/// the wait for the balancer's close with what is left of it.
async fn serve(app: &App, mut stream: TcpStream, timeout: Duration) {
    let until = tokio::time::Instant::now() + timeout;
    let _ = stream.set_nodelay(true);
    match tokio::time::timeout_at(until, answer(app, &mut stream)).await {
        Ok(Ok(())) => {
            let _ = tokio::time::timeout_at(until, discard_until_closed(&mut stream)).await;
        }
        Ok(Err(e)) => {
            debug!(error = %e, "agent-check connection failed");
            metrics::counter!(m::AGENT_CHECK_FAILURES, "reason" => "io").increment(1);
        }
        Err(_) => {
            metrics::counter!(m::AGENT_CHECK_FAILURES, "reason" => "timeout").increment(1);
        }
    }
}

/// Writes the line and records what was reported.
async fn answer(app: &App, stream: &mut TcpStream) -> std::io::Result<()> {
    let draining = app.call.gate.is_draining();
    let reply = super::reply(draining, &crate::reconcile::pressure::view(&app.call));
    stream.write_all(reply.to_string().as_bytes()).await?;
    stream.shutdown().await?;
    app.routing
        .record(u64::from(reply.sessions), Instant::now());
    metrics::counter!(m::AGENT_CHECKS, "state" => reply.state.word()).increment(1);
    Ok(())
}

/// Reads what the balancer sent until it closes, so our close is a FIN and
/// not a reset that could discard the line before it is read. Errors here
/// come after the answer was delivered; they are not failures.
async fn discard_until_closed(stream: &mut TcpStream) {
    let mut buf = [0u8; DISCARD_BUF];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            return;
        }
    }
}
