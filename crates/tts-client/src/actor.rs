//! The session actor: the one task that owns the provider socket. While
//! the socket is up it selects over caller commands, provider frames and
//! its own deadline (keep-alive and closing contexts); while it is down
//! (see `outage.rs`) over caller commands and the next reconnect attempt.
//! It ends on every path with exactly one terminal reason.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use reconnect::Backoff;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;

use crate::TtsEvent;
use crate::config::TtsConfig;
use crate::context::{ContextId, CtxState, Shared};
use crate::error::CloseReason;
use crate::link::Ws;
use crate::tracker::{Action, Tracker};
use crate::wire::{Behaviour, Inbound, Vendor};

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

/// Why a step stopped the loop.
pub(crate) enum Exit {
    /// We end the session: run the closing handshake if a socket is up,
    /// then report `why`.
    Local {
        ack: Option<oneshot::Sender<CloseReason>>,
        why: CloseReason,
    },
    /// The socket is gone: reconnect if the policy and the reason allow.
    Dropped(CloseReason),
    /// The session is over, no socket is up: report this.
    Over(CloseReason),
}

pub(crate) type Step = Result<(), Exit>;

pub(crate) struct Actor {
    /// `None` while reconnecting.
    pub(crate) ws: Option<Ws>,
    pub(crate) cmds: mpsc::Receiver<Command>,
    pub(crate) events: mpsc::Sender<TtsEvent>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) tracker: Tracker,
    pub(crate) vendor: Vendor,
    pub(crate) behaviour: Behaviour,
    /// Reconnect attempts dial with this.
    pub(crate) cfg: TtsConfig,
    pub(crate) backoff: Backoff,
    /// The provider sent a capacity error on the current socket.
    pub(crate) capacity_seen: bool,
    /// While down: when the next attempt starts.
    pub(crate) retry_at: Instant,
    last_sent: Instant,
}

impl Actor {
    pub fn new(
        ws: Ws,
        cmds: mpsc::Receiver<Command>,
        events: mpsc::Sender<TtsEvent>,
        shared: Arc<Shared>,
        cfg: &TtsConfig,
    ) -> Self {
        let vendor = Vendor::new(cfg);
        let behaviour = vendor.behaviour();
        let seed = label_seed(&shared.label);
        Actor {
            ws: Some(ws),
            cmds,
            events,
            shared,
            tracker: Tracker::new(cfg.close_timeout, behaviour.close_waits_for_audio),
            vendor,
            behaviour,
            cfg: cfg.clone(),
            backoff: Backoff::connected(cfg.reconnect, seed),
            capacity_seen: false,
            retry_at: Instant::now(),
            last_sent: Instant::now(),
        }
    }

    /// Runs the session to its end.
    pub async fn run(mut self) {
        let (ack, reason) = match self.main_loop().await {
            Exit::Over(reason) | Exit::Dropped(reason) => (None, reason),
            Exit::Local { ack, why } => (ack, self.close_socket(why).await),
        };
        if reason.is_clean() {
            tracing::info!("tts session closed");
        } else {
            tracing::warn!(%reason, "tts session ended");
        }
        self.shared.set_tally(self.backoff.tally());
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
            let step = if self.ws.is_some() {
                self.step_up().await
            } else {
                self.step_down().await
            };
            let step = match step {
                Err(Exit::Dropped(reason)) => self.on_drop(reason).await,
                other => other,
            };
            if let Err(exit) = step {
                return exit;
            }
        }
    }

    async fn step_up(&mut self) -> Step {
        let deadline = self.next_deadline();
        let Some(ws) = self.ws.as_mut() else {
            return Ok(());
        };
        tokio::select! {
            cmd = self.cmds.recv() => self.on_command(cmd).await,
            frame = ws.next() => self.on_frame(frame).await,
            () = tokio::time::sleep_until(deadline) => self.on_timeout().await,
        }
    }

    fn next_deadline(&self) -> Instant {
        let keepalive = self.last_sent + self.cfg.keepalive_interval;
        match self.tracker.next_deadline() {
            Some(t) => keepalive.min(Instant::from_std(t)),
            None => keepalive,
        }
    }

    async fn on_command(&mut self, cmd: Option<Command>) -> Step {
        let now = Instant::now().into_std();
        match cmd {
            None => Err(requested(None)),
            Some(Command::CloseSocket(ack)) => Err(requested(Some(ack))),
            Some(Command::Open(id)) => {
                tracing::debug!(context = %id, "context open");
                self.tracker.open(id, now);
                self.send_opt(self.vendor.open(id)).await
            }
            Some(Command::Text(id, text)) => {
                self.tracker.sent(id, &text);
                self.send(self.vendor.text(id, &text)).await
            }
            Some(Command::Flush(id)) => self.send(self.vendor.flush(id)).await,
            Some(Command::Close(id)) => {
                tracing::debug!(context = %id, "context closing");
                if self.behaviour.close_waits_for_audio {
                    self.send(self.vendor.flush(id)).await?;
                }
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
                if let Some(ws) = self.ws.as_mut() {
                    let _ = tokio::time::timeout(self.cfg.close_timeout, ws.next()).await;
                }
                Err(Exit::Dropped(provider_closed(frame)))
            }
            Some(Ok(_)) => Ok(()), // binary, ping, pong: nothing for us
            Some(Err(e)) => Err(Exit::Dropped(CloseReason::ConnectionLost {
                message: e.to_string(),
            })),
            None => Err(Exit::Dropped(CloseReason::ConnectionLost {
                message: "connection closed without a close frame".into(),
            })),
        }
    }

    async fn on_text(&mut self, text: &str) -> Step {
        let now = Instant::now().into_std();
        match self.vendor.parse(text) {
            Ok(Inbound::Audio {
                context: Some(id),
                bytes,
                aligned_chars,
            }) => {
                let played = self.cfg.output_format.duration_of(bytes.len());
                let action = self.tracker.heard(id, aligned_chars, played, now);
                self.on_audio(id, bytes).await?;
                self.apply(action).await
            }
            Ok(Inbound::Aligned {
                context: Some(id),
                words,
            }) => {
                self.tracker.heard_words(id, words, now);
                Ok(())
            }
            Ok(Inbound::Final { context: Some(id) }) => self.finalise(id).await,
            Ok(Inbound::Error {
                context,
                message,
                capacity,
                ends_context,
            }) => {
                tracing::warn!(%message, capacity, "tts provider error");
                self.capacity_seen |= capacity;
                self.emit(TtsEvent::ProviderError { message }).await?;
                match context {
                    Some(id) if ends_context => self.finalise(id).await,
                    _ => Ok(()),
                }
            }
            Ok(
                Inbound::Audio { context: None, .. }
                | Inbound::Aligned { context: None, .. }
                | Inbound::Final { context: None }
                | Inbound::Other,
            ) => Ok(()),
            Err(message) => {
                tracing::warn!(%message, "tts provider sent an unreadable message");
                self.emit(TtsEvent::ProviderError { message }).await
            }
        }
    }

    async fn on_audio(&mut self, id: ContextId, bytes: Vec<u8>) -> Step {
        match self.shared.state(id) {
            Some(CtxState::Open | CtxState::Closing) => {
                self.emit(TtsEvent::Audio { context: id, bytes }).await
            }
            Some(CtxState::Cancelled) => {
                self.shared.count_late_audio();
                Ok(())
            }
            None => {
                tracing::debug!(context = %id, "audio for an unknown context dropped");
                Ok(())
            }
        }
    }

    /// The context is over (provider final, error or local decision):
    /// forget it and tell the caller, once.
    pub(crate) async fn finalise(&mut self, id: ContextId) -> Step {
        if !self.tracker.finalised(id) || self.shared.state(id).is_none() {
            tracing::debug!(context = %id, "final for an unknown context ignored");
            return Ok(());
        }
        tracing::debug!(context = %id, "context final");
        self.emit(TtsEvent::ContextFinal { context: id }).await
    }

    async fn on_timeout(&mut self) -> Step {
        let now = Instant::now();
        if now >= self.last_sent + self.cfg.keepalive_interval {
            // Name the live context so its own inactivity timer resets too.
            let live = self.tracker.live_context();
            self.send(self.vendor.keepalive(live)).await?;
        }
        for action in self.tracker.on_timeout(now.into_std()) {
            self.apply(Some(action)).await?;
        }
        Ok(())
    }

    pub(crate) async fn apply(&mut self, action: Option<Action>) -> Step {
        match action {
            None => Ok(()),
            Some(Action::SendClose(id)) => self.send(self.vendor.close(id)).await,
            Some(Action::SendCancel(id)) => {
                self.send(self.vendor.cancel(id)).await?;
                if self.behaviour.cancel_confirmed {
                    return Ok(());
                }
                // No final follows a Cartesia cancel: end it here.
                self.finalise(id).await
            }
            // The provider never finalised this context (e.g. ElevenLabs
            // withholding `isFinal` for a context that got no text): end
            // THAT context locally with its `ContextFinal`; the session and
            // every other context carry on. Late audio for it is dropped.
            Some(Action::FinalOverdue(id)) => {
                self.shared.count_final_overdue();
                if !self.tracker.finalised(id) || self.shared.state(id).is_none() {
                    return Ok(());
                }
                tracing::warn!(context = %id, "no final within close_timeout: context ended locally");
                self.shared.set_state(id, CtxState::Cancelled);
                self.emit(TtsEvent::ContextFinal { context: id }).await
            }
        }
    }

    pub(crate) async fn send_opt(&mut self, msg: Option<Message>) -> Step {
        match msg {
            Some(msg) => self.send(msg).await,
            None => Ok(()),
        }
    }

    pub(crate) async fn send(&mut self, msg: Message) -> Step {
        let Some(ws) = self.ws.as_mut() else {
            return Ok(()); // down: the resume re-sends what matters
        };
        match tokio::time::timeout(WS_SEND_TIMEOUT, ws.send(msg)).await {
            Ok(Ok(())) => {
                self.last_sent = Instant::now();
                Ok(())
            }
            Ok(Err(e)) => Err(Exit::Dropped(CloseReason::ConnectionLost {
                message: e.to_string(),
            })),
            Err(_) => Err(Exit::Dropped(CloseReason::ConnectionLost {
                message: format!("send blocked for {WS_SEND_TIMEOUT:?}"),
            })),
        }
    }

    /// Hands an event to the consumer, waiting at most [`EVENT_SEND_TIMEOUT`].
    pub(crate) async fn emit(&mut self, event: TtsEvent) -> Step {
        match tokio::time::timeout(EVENT_SEND_TIMEOUT, self.events.send(event)).await {
            Ok(Ok(())) => Ok(()),
            // The receiver is gone: nobody wants this session any more.
            Ok(Err(_)) => Err(requested(None)),
            Err(_) => Err(Exit::Local {
                ack: None,
                why: CloseReason::ConsumerStalled,
            }),
        }
    }

    /// The closing handshake (when a socket is up) within `close_timeout`.
    /// Returns the session's terminal reason.
    async fn close_socket(&mut self, why: CloseReason) -> CloseReason {
        if self.ws.is_none() {
            return why;
        }
        let limit = self.cfg.close_timeout;
        let outcome = tokio::time::timeout(limit, self.close_handshake()).await;
        match outcome {
            Ok(Ok(())) => why,
            Ok(Err(lost)) if why.is_clean() => lost,
            Err(_) => {
                // The provider did not close: close from our side, briefly.
                if let Some(ws) = self.ws.as_mut() {
                    let _ = tokio::time::timeout(Duration::from_millis(200), ws.close(None)).await;
                }
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
        let ask = self.vendor.close_socket();
        let Some(ws) = self.ws.as_mut() else {
            return Ok(());
        };
        match ask {
            Some(msg) => ws.send(msg).await.map_err(lost)?,
            None => ws.close(None).await.map_err(lost)?,
        }
        while let Some(frame) = ws.next().await {
            match frame {
                // While closing, only finals matter; the caller may not be
                // reading, so nothing here may block.
                Ok(Message::Text(text)) => {
                    if let Ok(Inbound::Final { context: Some(id) }) = self.vendor.parse(&text)
                        && self.tracker.finalised(id)
                        && self.shared.state(id).is_some()
                    {
                        let _ = self.events.try_send(TtsEvent::ContextFinal { context: id });
                    }
                }
                // Keep reading: the next read sends our close reply and ends.
                Ok(_) => {}
                Err(tokio_tungstenite::tungstenite::Error::ConnectionClosed) => return Ok(()),
                Err(e) => return Err(lost(e)),
            }
        }
        Ok(())
    }
}

fn requested(ack: Option<oneshot::Sender<CloseReason>>) -> Exit {
    Exit::Local {
        ack,
        why: CloseReason::Requested,
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

/// FNV-1a of the label: spreads the reconnect jitter of sessions that
/// drop together, deterministically per session.
fn label_seed(label: &str) -> u64 {
    label.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
