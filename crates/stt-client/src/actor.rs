//! The per-session actor: one task owns the WebSocket and `select!`s over
//! provider frames, control commands, the audio queue and a keep-alive
//! timer. It always ends by closing the socket — after `close()`, after the
//! handle was dropped, or when the provider went away — and its last event
//! is [`SttEvent::Closed`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, sleep_until, timeout, timeout_at};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::SttConfig;
use crate::event::{CloseReason, CloseSummary, StreamMetadata, SttEvent};
use crate::replay::Replay;
use crate::wire;

pub(crate) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Bound on writing one frame. A provider that stops reading for this long
/// is treated as gone (the audio queue has overflowed long before).
const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a must-deliver event (final, `UtteranceEnd`, `Metadata`, error,
/// `Closed`) waits for room in a full event queue before it is dropped and
/// counted. Waiting longer would stall audio behind a stuck consumer.
const EVENT_SEND_TIMEOUT: Duration = Duration::from_secs(2);
/// Bound on finishing the close handshake once a close frame was exchanged.
const CLOSE_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(1);

/// A request from the handle.
pub(crate) enum Command {
    Finalize,
    Close(oneshot::Sender<CloseSummary>),
}

/// State shared between the actor and its handle.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub dropped_audio: AtomicU64,
    pub dropped_events: AtomicU64,
    /// Set once, when the actor has ended.
    pub finished: OnceLock<CloseSummary>,
    /// The provider's summary, once seen.
    metadata: Mutex<Option<StreamMetadata>>,
    /// Mid-call reconnects so far.
    pub reconnects: Mutex<reconnect::Tally>,
}

impl Shared {
    fn summary(&self, close: CloseReason) -> CloseSummary {
        CloseSummary {
            metadata: self
                .metadata
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            close,
            dropped_audio_frames: self.dropped_audio.load(Ordering::Relaxed),
            dropped_events: self.dropped_events.load(Ordering::Relaxed),
        }
    }
}

pub(crate) struct Actor {
    pub ws: Ws,
    pub audio: mpsc::Receiver<Vec<u8>>,
    pub commands: mpsc::Receiver<Command>,
    pub events: mpsc::Sender<SttEvent>,
    pub shared: Arc<Shared>,
    /// For reopening the socket after a mid-call drop.
    pub cfg: SttConfig,
    /// Audio since the last confirmed utterance boundary.
    pub replay: Replay,
    pub backoff: reconnect::Backoff,
}

impl Actor {
    /// Runs the session to its end. Spawn inside the session's span.
    pub(crate) async fn run(mut self) {
        let (close, reply) = self.drive().await;
        match close.code {
            Some(code) => {
                tracing::info!(code, reason = %close.reason, kind = ?close.kind, "stt session closed")
            }
            None => {
                tracing::warn!(reason = %close.reason, kind = ?close.kind, "stt session ended without a close frame")
            }
        }
        let summary = self.shared.summary(close.clone());
        let _ = self.shared.finished.set(summary.clone());
        self.deliver(SttEvent::Closed(close)).await;
        if let Some(reply) = reply {
            let _ = reply.send(summary);
        }
    }

    async fn drive(&mut self) -> (CloseReason, Option<oneshot::Sender<CloseSummary>>) {
        let mut last_sent = Instant::now();
        loop {
            let keepalive_at = last_sent + self.cfg.keepalive_interval;
            // Provider frames first, so a close is seen promptly even under
            // a steady stream of audio.
            let step = tokio::select! {
                biased;
                frame = self.ws.next() => self.on_provider(frame).await,
                cmd = self.commands.recv() => match cmd {
                    Some(Command::Finalize) => self.send_after_audio(wire::FINALIZE).await,
                    Some(Command::Close(reply)) => return (self.close_stream().await, Some(reply)),
                    None => return (self.close_stream().await, None),
                },
                audio = self.audio.recv() => match audio {
                    Some(frame) => {
                        self.replay.push(&frame);
                        self.send(Message::binary(frame)).await
                    }
                    // The handle was dropped without `close()`: still close.
                    None => return (self.close_stream().await, None),
                },
                () = sleep_until(keepalive_at) => self.send(Message::text(wire::KEEPALIVE)).await,
            };
            match step {
                Step::Sent => last_sent = Instant::now(),
                Step::Received => {}
                Step::Ended(close) if close.is_drop() && self.cfg.reconnect.enabled() => {
                    match self.reconnect(close).await {
                        Ok(()) => last_sent = Instant::now(),
                        Err(ended) => return ended,
                    }
                }
                Step::Ended(close) => return (close, None),
            }
        }
    }

    /// Handles one provider frame.
    async fn on_provider(&mut self, frame: Option<Result<Message, tungstenite::Error>>) -> Step {
        match frame {
            Some(Ok(Message::Text(text))) => {
                let mut event = wire::parse_server_text(&text);
                self.settle(&event);
                shift(&mut event, self.replay.offset());
                self.observe(&event);
                self.deliver(event).await;
                Step::Received
            }
            Some(Ok(Message::Close(frame))) => {
                let close = frame.map_or_else(
                    || CloseReason::from_frame(1005, ""),
                    |f| CloseReason::from_frame(f.code.into(), &f.reason),
                );
                // Drive the stream so tungstenite's close reply is flushed.
                let _ = timeout(CLOSE_HANDSHAKE_TIMEOUT, async {
                    while self.ws.next().await.is_some() {}
                })
                .await;
                Step::Ended(close)
            }
            Some(Ok(_)) => Step::Received,
            Some(Err(e)) => Step::Ended(CloseReason::transport(e.to_string())),
            None => Step::Ended(CloseReason::transport(
                "connection ended without a close frame",
            )),
        }
    }

    fn observe(&self, event: &SttEvent) {
        match event {
            SttEvent::Metadata {
                request_id,
                duration,
            } => {
                *self
                    .shared
                    .metadata
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(StreamMetadata {
                    request_id: request_id.clone(),
                    duration: *duration,
                });
            }
            SttEvent::ProviderError { message } => tracing::warn!(%message, "stt provider error"),
            SttEvent::Transcript(t) if t.is_final => {
                tracing::debug!(
                    start = t.start,
                    duration = t.duration,
                    speech_final = t.speech_final,
                    "stt final"
                );
            }
            _ => {}
        }
    }

    /// Audio up to a boundary the provider confirmed will not be replayed.
    fn settle(&mut self, event: &SttEvent) {
        match event {
            SttEvent::Transcript(t) if t.is_final && (t.speech_final || t.from_finalize) => {
                self.replay.settled(t.start + t.duration);
            }
            SttEvent::UtteranceEnd { last_word_end } => self.replay.settled(*last_word_end),
            SttEvent::SpeechStarted { .. } => self.replay.heard_speech(),
            SttEvent::Transcript(t) if !t.text.trim().is_empty() => self.replay.heard_speech(),
            _ => {}
        }
    }

    /// Queues an event for the consumer under the policy of
    /// [`crate::EVENT_CAPACITY`]: interim results and `SpeechStarted` are
    /// dropped when the queue is full; everything else waits, bounded.
    pub(crate) async fn deliver(&self, event: SttEvent) {
        let droppable = matches!(
            &event,
            SttEvent::Transcript(t) if !t.is_final
        ) || matches!(event, SttEvent::SpeechStarted { .. });
        let result = if droppable {
            self.events.try_send(event).map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => true,
                mpsc::error::TrySendError::Closed(_) => false,
            })
        } else {
            self.events
                .send_timeout(event, EVENT_SEND_TIMEOUT)
                .await
                .map_err(|e| match e {
                    mpsc::error::SendTimeoutError::Timeout(_) => true,
                    mpsc::error::SendTimeoutError::Closed(_) => false,
                })
        };
        // A closed queue means nobody listens any more: not a drop.
        if result == Err(true) {
            let n = self.shared.dropped_events.fetch_add(1, Ordering::Relaxed) + 1;
            if !droppable {
                tracing::warn!(
                    dropped_events = n,
                    "stt event consumer is stuck; event dropped"
                );
            }
        }
    }

    pub(crate) async fn send(&mut self, msg: Message) -> Step {
        match timeout(SEND_TIMEOUT, self.ws.send(msg)).await {
            Ok(Ok(())) => Step::Sent,
            Ok(Err(e)) => Step::Ended(CloseReason::transport(e.to_string())),
            Err(_) => Step::Ended(CloseReason::transport(
                "send timed out: provider is not reading",
            )),
        }
    }

    /// Sends audio already queued before a control message, so the control
    /// message applies to everything the caller sent before it.
    pub(crate) async fn send_after_audio(&mut self, control: &'static str) -> Step {
        while let Ok(frame) = self.audio.try_recv() {
            self.replay.push(&frame);
            if let Step::Ended(close) = self.send(Message::binary(frame)).await {
                return Step::Ended(close);
            }
        }
        self.send(Message::text(control)).await
    }

    /// `CloseStream`, then read (finals and `Metadata` still flow to the
    /// consumer) until the provider closes, all within `close_timeout`.
    async fn close_stream(&mut self) -> CloseReason {
        let deadline = Instant::now() + self.cfg.close_timeout;
        let sent = timeout_at(deadline, self.send_after_audio(wire::CLOSE_STREAM)).await;
        match sent {
            Ok(Step::Ended(close)) => return close,
            Err(_) => return self.abandon().await,
            Ok(_) => {}
        }
        loop {
            match timeout_at(deadline, self.ws.next()).await {
                Err(_) => return self.abandon().await,
                Ok(frame) => {
                    if let Step::Ended(close) = self.on_provider(frame).await {
                        return close;
                    }
                }
            }
        }
    }

    /// The provider did not close in time: send our own close frame (bounded)
    /// and give up on the socket.
    async fn abandon(&mut self) -> CloseReason {
        let frame = CloseFrame {
            code: CloseCode::Normal,
            reason: "close timeout".into(),
        };
        let _ = timeout(CLOSE_HANDSHAKE_TIMEOUT, self.ws.close(Some(frame))).await;
        CloseReason::close_timeout()
    }
}

/// Moves a result from the current socket's audio clock to the session's
/// (a reconnected socket's clock starts at the first replayed frame).
fn shift(event: &mut SttEvent, offset: f64) {
    if offset == 0.0 {
        return;
    }
    match event {
        SttEvent::Transcript(t) => t.start += offset,
        SttEvent::SpeechStarted { at } => *at += offset,
        SttEvent::UtteranceEnd { last_word_end } => *last_word_end += offset,
        _ => {}
    }
}

pub(crate) enum Step {
    Sent,
    Received,
    Ended(CloseReason),
}
