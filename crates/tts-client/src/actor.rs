//! The session actor: the one task that owns the provider socket. It
//! selects over caller commands, provider frames and its own deadline
//! (keep-alive and closing contexts), and ends on every path with exactly
//! one terminal reason.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::TtsEvent;
use crate::context::{ContextId, CtxState, Shared};
use crate::error::CloseReason;
use crate::tracker::{Action, Tracker};
use crate::wire::{self, Inbound};

pub(crate) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// An event the consumer leaves untaken this long means it stopped
/// reading; the session ends (`ConsumerStalled`) rather than hold the
/// provider's audio without bound.
const EVENT_SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// One frame taking longer than this to hand to the socket means the
/// connection is dead.
const WS_SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// What the handle asks the actor to do.
#[derive(Debug)]
pub(crate) enum Command {
    Open(ContextId),
    Text(ContextId, String),
    Flush(ContextId),
    Close(ContextId),
    Cancel(ContextId),
    CloseSocket(oneshot::Sender<CloseReason>),
}

/// How the main loop ended.
enum Exit {
    /// We end the session: run the closing handshake, then report `why`.
    Local {
        ack: Option<oneshot::Sender<CloseReason>>,
        why: CloseReason,
    },
    /// The socket is already gone.
    Remote(CloseReason),
}

type Step = Result<(), Exit>;

pub(crate) struct Actor {
    ws: Ws,
    cmds: mpsc::Receiver<Command>,
    events: mpsc::Sender<TtsEvent>,
    shared: Arc<Shared>,
    tracker: Tracker,
    keepalive: Duration,
    close_timeout: Duration,
    last_sent: Instant,
}

impl Actor {
    pub fn new(
        ws: Ws,
        cmds: mpsc::Receiver<Command>,
        events: mpsc::Sender<TtsEvent>,
        shared: Arc<Shared>,
        keepalive: Duration,
        close_timeout: Duration,
    ) -> Self {
        Actor {
            ws,
            cmds,
            events,
            shared,
            tracker: Tracker::new(close_timeout),
            keepalive,
            close_timeout,
            last_sent: Instant::now(),
        }
    }

    /// Runs the session to its end.
    pub async fn run(mut self) {
        let (ack, reason) = match self.main_loop().await {
            Exit::Remote(reason) => (None, reason),
            Exit::Local { ack, why } => (ack, self.close_socket(why).await),
        };
        if reason.is_clean() {
            tracing::info!("tts session closed");
        } else {
            tracing::warn!(%reason, "tts session ended");
        }
        self.shared.set_terminal(reason.clone());
        if let Some(ack) = ack {
            let _ = ack.send(reason.clone());
        }
        // Never block here: if the queue is full the receiver reports the
        // terminal reason itself once it has drained the queue.
        let _ = self.events.try_send(TtsEvent::Closed(reason));
    }

    async fn main_loop(&mut self) -> Exit {
        loop {
            let deadline = self.next_deadline();
            let step = tokio::select! {
                cmd = self.cmds.recv() => self.on_command(cmd).await,
                frame = self.ws.next() => self.on_frame(frame).await,
                () = tokio::time::sleep_until(deadline) => self.on_timeout().await,
            };
            if let Err(exit) = step {
                return exit;
            }
        }
    }

    fn next_deadline(&self) -> Instant {
        let keepalive = self.last_sent + self.keepalive;
        match self.tracker.next_deadline() {
            Some(t) => keepalive.min(Instant::from_std(t)),
            None => keepalive,
        }
    }

    async fn on_command(&mut self, cmd: Option<Command>) -> Step {
        let now = Instant::now().into_std();
        match cmd {
            None => Err(Exit::Local {
                ack: None,
                why: CloseReason::Requested,
            }),
            Some(Command::CloseSocket(ack)) => Err(Exit::Local {
                ack: Some(ack),
                why: CloseReason::Requested,
            }),
            Some(Command::Open(id)) => {
                tracing::debug!(context = %id, "context open");
                self.tracker.open(id, now);
                self.send(wire::init(id)).await
            }
            Some(Command::Text(id, text)) => {
                self.tracker.sent(id, wire::voiced_chars(&text));
                self.send(wire::text(id, &text)).await
            }
            Some(Command::Flush(id)) => self.send(wire::flush(id)).await,
            Some(Command::Close(id)) => {
                tracing::debug!(context = %id, "context closing");
                self.send(wire::flush(id)).await?;
                let action = self.tracker.close(id, now);
                self.apply(action).await
            }
            Some(Command::Cancel(id)) => {
                tracing::debug!(context = %id, "context cancelled");
                let action = self.tracker.cancel(id, now);
                self.apply(action).await
            }
        }
    }

    async fn on_frame(
        &mut self,
        frame: Option<Result<Message, tokio_tungstenite::tungstenite::Error>>,
    ) -> Step {
        match frame {
            Some(Ok(Message::Text(text))) => self.on_text(text.as_str()).await,
            Some(Ok(Message::Close(frame))) => {
                // Reading on flushes tungstenite's automatic close reply.
                let _ = tokio::time::timeout(self.close_timeout, self.ws.next()).await;
                Err(Exit::Remote(provider_closed(frame)))
            }
            Some(Ok(_)) => Ok(()), // binary, ping, pong: nothing for us
            Some(Err(e)) => Err(Exit::Remote(CloseReason::ConnectionLost {
                message: e.to_string(),
            })),
            None => Err(Exit::Remote(CloseReason::ConnectionLost {
                message: "connection closed without a close frame".into(),
            })),
        }
    }

    async fn on_text(&mut self, text: &str) -> Step {
        let now = Instant::now().into_std();
        match wire::parse(text) {
            Ok(Inbound::Audio {
                context: Some(id),
                bytes,
                aligned_chars,
            }) => {
                let action = self.tracker.heard(id, aligned_chars, now);
                match self.shared.state(id) {
                    Some(CtxState::Open | CtxState::Closing) => {
                        self.emit(TtsEvent::Audio { context: id, bytes }).await?;
                    }
                    Some(CtxState::Cancelled) => self.shared.count_late_audio(),
                    None => tracing::debug!(context = %id, "audio for an unknown context dropped"),
                }
                self.apply(action).await
            }
            Ok(Inbound::Final { context: Some(id) }) => {
                self.tracker.finalised(id);
                if self.shared.state(id).is_none() {
                    tracing::debug!(context = %id, "final for an unknown context ignored");
                    return Ok(());
                }
                tracing::debug!(context = %id, "context final");
                self.emit(TtsEvent::ContextFinal { context: id }).await
            }
            Ok(Inbound::Error { message }) => {
                tracing::warn!(%message, "tts provider error");
                self.emit(TtsEvent::ProviderError { message }).await
            }
            Ok(
                Inbound::Audio { context: None, .. }
                | Inbound::Final { context: None }
                | Inbound::Other,
            ) => Ok(()),
            Err(message) => {
                tracing::warn!(%message, "tts provider sent an unreadable message");
                self.emit(TtsEvent::ProviderError { message }).await
            }
        }
    }

    async fn on_timeout(&mut self) -> Step {
        let now = Instant::now();
        if now >= self.last_sent + self.keepalive {
            // Name the live context so its own inactivity timer resets too.
            self.send(wire::keepalive(self.tracker.live_context()))
                .await?;
        }
        for action in self.tracker.on_timeout(now.into_std()) {
            self.apply(Some(action)).await?;
        }
        Ok(())
    }

    async fn apply(&mut self, action: Option<Action>) -> Step {
        match action {
            None => Ok(()),
            Some(Action::SendClose(id)) => self.send(wire::close_context(id)).await,
            // The provider never finalised this context (e.g. ElevenLabs
            // withholding `isFinal` for a context that got no text): end
            // THAT context locally with its `ContextFinal`; the session and
            // every other context carry on. Late audio for it is dropped.
            Some(Action::FinalOverdue(id)) => {
                self.tracker.finalised(id);
                self.shared.count_final_overdue();
                if self.shared.state(id).is_none() {
                    return Ok(());
                }
                tracing::warn!(context = %id, "no final within close_timeout: context ended locally");
                self.shared.set_state(id, CtxState::Cancelled);
                self.emit(TtsEvent::ContextFinal { context: id }).await
            }
        }
    }

    async fn send(&mut self, text: String) -> Step {
        match tokio::time::timeout(WS_SEND_TIMEOUT, self.ws.send(Message::Text(text.into()))).await
        {
            Ok(Ok(())) => {
                self.last_sent = Instant::now();
                Ok(())
            }
            Ok(Err(e)) => Err(Exit::Remote(CloseReason::ConnectionLost {
                message: e.to_string(),
            })),
            Err(_) => Err(Exit::Remote(CloseReason::ConnectionLost {
                message: format!("send blocked for {WS_SEND_TIMEOUT:?}"),
            })),
        }
    }

    /// Hands an event to the consumer, waiting at most [`EVENT_SEND_TIMEOUT`].
    async fn emit(&mut self, event: TtsEvent) -> Step {
        match tokio::time::timeout(EVENT_SEND_TIMEOUT, self.events.send(event)).await {
            Ok(Ok(())) => Ok(()),
            // The receiver is gone: nobody wants this session any more.
            Ok(Err(_)) => Err(Exit::Local {
                ack: None,
                why: CloseReason::Requested,
            }),
            Err(_) => Err(Exit::Local {
                ack: None,
                why: CloseReason::ConsumerStalled,
            }),
        }
    }

    /// `close_socket`, then wait for the provider's close, all within
    /// `close_timeout`. Returns the session's terminal reason.
    async fn close_socket(&mut self, why: CloseReason) -> CloseReason {
        let limit = self.close_timeout;
        let outcome = tokio::time::timeout(limit, self.close_handshake()).await;
        match outcome {
            Ok(Ok(())) => why,
            Ok(Err(lost)) if why.is_clean() => lost,
            Err(_) => {
                // The provider did not close: close from our side, briefly.
                let _ = tokio::time::timeout(Duration::from_millis(200), self.ws.close(None)).await;
                if why.is_clean() {
                    CloseReason::CloseTimeout
                } else {
                    why
                }
            }
            Ok(Err(_)) => why,
        }
    }

    async fn close_handshake(&mut self) -> Result<(), CloseReason> {
        let lost = |e: tokio_tungstenite::tungstenite::Error| CloseReason::ConnectionLost {
            message: e.to_string(),
        };
        self.ws
            .send(Message::Text(wire::close_socket().into()))
            .await
            .map_err(lost)?;
        while let Some(frame) = self.ws.next().await {
            match frame {
                Ok(Message::Text(text)) => self.on_closing_text(text.as_str()),
                // Keep reading: the next read sends our close reply and ends.
                Ok(_) => {}
                Err(e) => return Err(lost(e)),
            }
        }
        Ok(())
    }

    /// While closing, only finals matter; the caller may not be reading,
    /// so nothing here may block.
    fn on_closing_text(&mut self, text: &str) {
        if let Ok(Inbound::Final { context: Some(id) }) = wire::parse(text) {
            self.tracker.finalised(id);
            if self.shared.state(id).is_some() {
                let _ = self.events.try_send(TtsEvent::ContextFinal { context: id });
            }
        }
    }
}

fn provider_closed(frame: Option<CloseFrame>) -> CloseReason {
    match frame {
        Some(f) => CloseReason::ProviderClosed {
            code: u16::from(f.code),
            reason: f.reason.as_str().to_owned(),
        },
        None => CloseReason::ProviderClosed {
            code: 1005,
            reason: String::new(),
        },
    }
}
