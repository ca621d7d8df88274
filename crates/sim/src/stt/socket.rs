//! The socket task of one stream: a thin wall-clock shell around the
//! sans-IO [`StreamCore`]. It owns the WebSocket, delays each outbound
//! message by the result latency (keeping order), and enforces the idle
//! timeout and the `close_after` fault. A stream ended by a fault (this
//! shell's `close_after`, or the core's audio-time faults) is counted and
//! starts the simulator's `down_after_fault` outage before its close frame
//! goes out, so a client reconnecting on the close is already refused.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use tokio::time::{Instant, sleep_until, timeout};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::messages::ServerMessage;
use super::stream::{Control, Outbound, StreamCore};
use super::{LiveSession, Progress};
use crate::stats::{FaultScope, SessionGuard, SessionStats};

/// Messages waiting out their result latency. The core emits a handful per
/// second of audio, so this fills only when a client floods audio far faster
/// than real time under a long latency; the stream is then closed with 1011
/// `NET-0000` (Deepgram's "could not keep up") instead of growing.
const MAX_QUEUED: usize = 1024;
/// Bound on writing one frame to a client that does not read.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on waiting for the client's close reply after our close frame.
const CLOSE_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// The wall-clock knobs of one stream, fixed at upgrade time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Knobs {
    pub result_latency: Duration,
    pub idle_timeout: Duration,
    pub close_after: Option<Duration>,
    /// Fault: drop every result instead of sending it.
    pub stall_results: bool,
    /// The outage started when this stream is ended by a fault.
    pub down_after_fault: Option<Duration>,
}

/// The simulator-wide counts a stream reports into.
#[derive(Debug, Clone)]
pub(super) struct Counts {
    pub stats: Arc<SessionStats>,
    pub scope: Arc<FaultScope>,
}

impl Counts {
    /// The stream is being ended by an injected fault.
    fn fault(&self, down_after_fault: Option<Duration>) {
        self.stats.count_fault();
        self.scope
            .fault_ended_session(std::time::Instant::now(), down_after_fault);
    }
}

/// How a stream ended, for the log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The core asked for this close (CloseStream, empty frame, bad text).
    Completed {
        code: u16,
    },
    /// The client closed or dropped the socket first.
    ClientGone,
    IdleTimeout,
    Fault,
    Shutdown,
    Overloaded,
    SendFailed,
}

/// Runs one accepted stream to its end. `guard` keeps the session counted
/// open until this returns, on every path; `record` is kept up to date with
/// the audio received.
pub(super) async fn run(
    socket: WebSocket,
    core: StreamCore,
    knobs: Knobs,
    cancel: CancellationToken,
    counts: Counts,
    guard: SessionGuard,
    record: LiveSession,
) {
    let span = tracing::info_span!("stt_sim_stream", request_id = %core.request_id());
    let mut stream = Stream {
        socket,
        core,
        knobs,
        queue: VecDeque::new(),
        record,
    };
    async {
        let p = stream.core.params();
        tracing::info!(encoding = ?p.encoding, sample_rate = p.sample_rate, "stt stream opened");
        let end = stream.drive(&cancel, &counts).await;
        tracing::info!(
            ?end,
            audio_ms = stream.core.audio_ms(),
            utterances = stream.core.utterances(),
            noise_segments = stream.core.noise_segments(),
            "stt stream closed"
        );
    }
    .instrument(span)
    .await;
    drop(stream);
    drop(guard);
}

struct Stream {
    socket: WebSocket,
    core: StreamCore,
    knobs: Knobs,
    /// Outbound messages with the instant each becomes due.
    queue: VecDeque<(Instant, Outbound)>,
    record: LiveSession,
}

impl Stream {
    async fn drive(&mut self, cancel: &CancellationToken, counts: &Counts) -> End {
        let started = Instant::now();
        let mut idle_at = started + self.knobs.idle_timeout;
        let fault_at = self.knobs.close_after.map(|d| started + d);
        loop {
            let due = self.queue.front().map(|(at, _)| *at);
            tokio::select! {
                biased;
                () = cancel.cancelled() => return self.close_now(1001, "", End::Shutdown).await,
                () = sleep_until_opt(fault_at) => {
                    counts.fault(self.knobs.down_after_fault);
                    return self.close_now(1011, "NET-0000", End::Fault).await;
                }
                () = sleep_until(idle_at), if !self.core.is_closed() => {
                    return self.close_now(1011, "NET-0001", End::IdleTimeout).await;
                }
                () = sleep_until_opt(due) => {
                    if let Some(end) = self.flush_due(counts).await {
                        return end;
                    }
                }
                msg = self.socket.recv() => match self.on_frame(msg) {
                    Some(true) => idle_at = Instant::now() + self.knobs.idle_timeout,
                    Some(false) => {}
                    None => return End::ClientGone,
                },
            }
            if self.queue.len() > MAX_QUEUED {
                return self.close_now(1011, "NET-0000", End::Overloaded).await;
            }
        }
    }

    /// Feeds one client frame to the core. `Some(true)` when it counts as
    /// activity for the idle timer (audio or `KeepAlive`); `None` when the
    /// client is gone.
    fn on_frame(&mut self, msg: Option<Result<Message, axum::Error>>) -> Option<bool> {
        let mut audio_bytes = 0;
        let activity = match msg? {
            Ok(Message::Binary(audio)) => {
                if !self.core.is_closed() {
                    audio_bytes = audio.len() as u64;
                }
                self.core.push_audio(&audio);
                !audio.is_empty()
            }
            Ok(Message::Text(text)) => self.core.handle_text(&text) == Control::KeepAlive,
            Ok(Message::Ping(_) | Message::Pong(_)) => false,
            Ok(Message::Close(_)) | Err(_) => return None,
        };
        self.record.update(Progress {
            audio_bytes,
            audio_ms: self.core.audio_ms(),
            utterances: self.core.utterances() as u64,
            noise_segments: self.core.noise_segments() as u64,
        });
        let due = Instant::now() + self.knobs.result_latency;
        while let Some(out) = self.core.poll_output() {
            self.queue.push_back((due, out));
        }
        Some(activity)
    }

    /// Sends every message that is due. `Some` when the stream has ended.
    async fn flush_due(&mut self, counts: &Counts) -> Option<End> {
        let now = Instant::now();
        while self.queue.front().is_some_and(|(at, _)| *at <= now) {
            let (_, out) = self.queue.pop_front()?;
            match out {
                Outbound::Message(_) if self.knobs.stall_results => {}
                Outbound::Message(m) => {
                    if !self.send_json(&m).await {
                        return Some(End::SendFailed);
                    }
                }
                Outbound::Close { code, reason } if self.core.faulted() => {
                    counts.fault(self.knobs.down_after_fault);
                    return Some(self.close_now(code, reason, End::Fault).await);
                }
                Outbound::Close { code, reason } => {
                    return Some(self.close_now(code, reason, End::Completed { code }).await);
                }
            }
        }
        None
    }

    async fn send_json(&mut self, message: &ServerMessage) -> bool {
        let text = match serde_json::to_string(message) {
            Ok(t) => t,
            Err(error) => {
                tracing::error!(%error, "cannot serialize a message");
                return false;
            }
        };
        matches!(
            timeout(SEND_TIMEOUT, self.socket.send(Message::Text(text.into()))).await,
            Ok(Ok(()))
        )
    }

    /// Sends a close frame (dropping anything still queued) and waits,
    /// bounded, for the client's reply so the TCP close is orderly.
    async fn close_now(&mut self, code: u16, reason: &'static str, end: End) -> End {
        if !self.queue.is_empty() {
            tracing::debug!(
                dropped = self.queue.len(),
                "queued messages dropped by the close"
            );
            self.queue.clear();
        }
        let frame = CloseFrame {
            code,
            reason: Utf8Bytes::from_static(reason),
        };
        let sent = timeout(SEND_TIMEOUT, self.socket.send(Message::Close(Some(frame)))).await;
        if matches!(sent, Ok(Ok(()))) {
            let _ = timeout(CLOSE_HANDSHAKE_TIMEOUT, async {
                while let Some(Ok(m)) = self.socket.recv().await {
                    if matches!(m, Message::Close(_)) {
                        break;
                    }
                }
            })
            .await;
        }
        end
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}
