//! Connecting, the caller's handle and the event receiver.

use std::sync::Arc;
use std::time::Duration;

use reconnect::Tally;
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument as _;

use crate::actor::{Actor, Command};
use crate::config::TtsConfig;
use crate::context::{ContextId, CtxState, RECONNECT_TEXT_CAPACITY, Shared};
use crate::error::{CloseReason, TtsError};
use crate::link;

/// Commands waiting for the actor. Commands are small and the caller (a
/// call's event loop) must never block on them: they are `try_send`, and a
/// full queue is refused with [`TtsError::Backpressure`] — it only fills if
/// the socket or the event consumer has been stuck for a while. The actor
/// keeps draining it while reconnecting (text is then held, up to
/// [`RECONNECT_TEXT_CAPACITY`], for the new socket).
pub const COMMAND_CAPACITY: usize = 64;

/// Events waiting for the consumer. Audio chunks are ~100–250 ms each, so
/// this is several seconds of audio ahead. When full the actor waits
/// (TCP backpressure reaches the provider), for at most 10 s, after which
/// the session ends with [`CloseReason::ConsumerStalled`].
pub const EVENT_CAPACITY: usize = 64;

/// Extra time `close()` allows for commands queued before its own.
const CLOSE_MARGIN: Duration = Duration::from_secs(1);

/// What a session delivers, in order.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TtsEvent {
    /// Audio in the configured output format, decoded from base64.
    Audio { context: ContextId, bytes: Vec<u8> },
    /// The context is finished (all its audio came before this, unless it
    /// was cancelled) and no longer counts as open. Also sent when the
    /// provider never finalises a closed context: after `close_context`
    /// and a further `close_timeout` without its `isFinal`, the client ends
    /// that context itself (counted in [`TtsHandle::finals_overdue`]; any
    /// later audio for it is dropped). The session is not affected.
    ContextFinal { context: ContextId },
    /// The provider reported an error; a close usually follows.
    ProviderError { message: String },
    /// The socket dropped mid-call (or a reconnect attempt failed) and the
    /// client will dial again after the backoff: `attempt` is the number
    /// of the attempt about to be made, `capacity` whether the provider
    /// refused for capacity rather than being down, `error` what happened.
    /// Commands are still taken meanwhile (see [`TtsHandle::send_text`]).
    Reconnecting {
        attempt: u32,
        capacity: bool,
        error: String,
    },
    /// A new socket is up after `down_for`; `resumed_contexts` live
    /// contexts were re-opened on it with their unheard text.
    Reconnected {
        down_for: Duration,
        resumed_contexts: usize,
    },
    /// The session ended. Always the last event.
    Closed(CloseReason),
}

/// Opens a session: one provider socket (`cfg.provider`) and its actor
/// task. `label` names the session in logs and errors (e.g. the call id).
/// Only drops *after* this returns are reconnected: a failing first
/// connect is the caller's to retry or route around.
///
/// # Errors
/// [`TtsError::InvalidConfig`], [`TtsError::ConnectTimeout`],
/// [`TtsError::Connect`], or [`TtsError::Rejected`] with the HTTP status
/// when the provider refuses the upgrade (429: at its concurrency limit).
pub async fn connect(cfg: &TtsConfig, label: &str) -> Result<(TtsHandle, TtsEvents), TtsError> {
    let span = tracing::info_span!("tts_session", label, provider = %cfg.provider);
    let ws = link::open(cfg).instrument(span.clone()).await?;
    span.in_scope(
        || tracing::info!(voice = %cfg.voice_id, format = %cfg.output_format, "tts connected"),
    );
    let shared = Arc::new(Shared::new(label));
    let (cmd_tx, cmd_rx) = mpsc::channel(COMMAND_CAPACITY);
    let (ev_tx, ev_rx) = mpsc::channel(EVENT_CAPACITY);
    let actor = Actor::new(ws, cmd_rx, ev_tx, Arc::clone(&shared), cfg);
    tokio::spawn(actor.run().instrument(span));
    let handle = TtsHandle {
        cmds: cmd_tx,
        shared: Arc::clone(&shared),
        close_timeout: cfg.close_timeout,
    };
    let events = TtsEvents {
        rx: ev_rx,
        shared,
        done: false,
    };
    Ok((handle, events))
}

/// The caller's side of a session: contexts and text go in here; audio
/// comes out of the matching [`TtsEvents`]. Dropping it closes the socket
/// (bounded by `close_timeout`) and ends the actor.
#[derive(Debug)]
pub struct TtsHandle {
    cmds: mpsc::Sender<Command>,
    shared: Arc<Shared>,
    close_timeout: Duration,
}

impl TtsHandle {
    /// Opens context `id` (sends its initialising message).
    ///
    /// # Errors
    /// [`TtsError::TooManyContexts`] rather than ever provoking the
    /// provider's 1008; [`TtsError::ContextExists`]; plus the session
    /// errors listed on [`TtsHandle::send_text`].
    pub fn open_context(&mut self, id: ContextId) -> Result<(), TtsError> {
        self.check_live()?;
        self.shared.insert(id)?;
        self.submit(Command::Open(id)).inspect_err(|_| {
            self.shared.remove(id);
        })
    }

    /// Appends text to an open context. Providers generate at word
    /// boundaries, so end chunks with a space. Empty text is a no-op.
    /// While the session is reconnecting the text is held for the new
    /// socket, up to [`RECONNECT_TEXT_CAPACITY`] bytes in all.
    ///
    /// # Errors
    /// [`TtsError::UnknownContext`], [`TtsError::ContextClosing`],
    /// [`TtsError::Backpressure`] (command queue full, or the reconnect
    /// hold full: the held text is kept, this text is not),
    /// [`TtsError::Closed`] (the session has ended).
    pub fn send_text(&self, id: ContextId, text: &str) -> Result<(), TtsError> {
        self.require_open(id)?;
        if text.is_empty() {
            return Ok(());
        }
        if !self.shared.hold_text(text.len()) {
            return Err(TtsError::Backpressure {
                label: self.shared.label.clone(),
                capacity: RECONNECT_TEXT_CAPACITY,
            });
        }
        self.submit(Command::Text(id, text.to_owned()))
    }

    /// Asks the provider to generate everything buffered for `id` now.
    ///
    /// # Errors
    /// As [`TtsHandle::send_text`].
    pub fn flush(&self, id: ContextId) -> Result<(), TtsError> {
        self.require_open(id)?;
        self.submit(Command::Flush(id))
    }

    /// Graceful end of turn: the text sent so far is flushed, its remaining
    /// audio still arrives, then [`TtsEvent::ContextFinal`]. Closing a
    /// context that is already closing or cancelled is a no-op.
    ///
    /// # Errors
    /// [`TtsError::UnknownContext`], [`TtsError::Backpressure`],
    /// [`TtsError::Closed`].
    pub fn close_context(&mut self, id: ContextId) -> Result<(), TtsError> {
        self.check_live()?;
        match self.shared.state(id) {
            None => Err(TtsError::UnknownContext { context: id }),
            Some(CtxState::Closing | CtxState::Cancelled) => Ok(()),
            Some(prev @ CtxState::Open) => {
                self.transition(id, prev, CtxState::Closing, Command::Close(id))
            }
        }
    }

    /// Barge-in: stops the context at the provider at once and drops (and
    /// counts) any of its audio that still arrives; `ContextFinal` follows.
    /// Cancelling a context that already ended is a no-op, so a barge-in
    /// racing the end of a turn needs no special case.
    ///
    /// # Errors
    /// [`TtsError::Backpressure`], [`TtsError::Closed`].
    pub fn cancel_context(&mut self, id: ContextId) -> Result<(), TtsError> {
        self.check_live()?;
        match self.shared.state(id) {
            None | Some(CtxState::Cancelled) => Ok(()),
            Some(prev) => self.transition(id, prev, CtxState::Cancelled, Command::Cancel(id)),
        }
    }

    /// Closes the socket (`close_socket`, then the closing handshake),
    /// bounded by `close_timeout`. Closing a session that already ended
    /// succeeds.
    ///
    /// # Errors
    /// [`TtsError::CloseTimeout`] if the provider did not close in time;
    /// [`TtsError::Closed`] if the session ended otherwise while closing.
    pub async fn close(self) -> Result<(), TtsError> {
        let label = self.shared.label.clone();
        let bound = self.close_timeout + CLOSE_MARGIN;
        let (tx, rx) = oneshot::channel();
        let cmds = self.cmds.clone();
        drop(self);
        let outcome = tokio::time::timeout(bound, async move {
            cmds.send(Command::CloseSocket(tx)).await.ok()?;
            rx.await.ok()
        })
        .await;
        match outcome {
            Err(_) | Ok(Some(CloseReason::CloseTimeout)) => Err(TtsError::CloseTimeout {
                label,
                after: bound,
            }),
            Ok(None | Some(CloseReason::Requested)) => Ok(()),
            Ok(Some(reason)) => Err(TtsError::Closed { label, reason }),
        }
    }

    /// Contexts open now: from `open_context` until the caller has
    /// received their `ContextFinal`. Never more than [`crate::MAX_CONTEXTS`].
    pub fn open_contexts(&self) -> usize {
        self.shared.len()
    }

    /// Audio chunks of cancelled contexts dropped so far.
    pub fn late_audio_dropped(&self) -> u64 {
        self.shared.late_audio_dropped()
    }

    /// Contexts the client ended itself because the provider sent no
    /// `isFinal` within `close_timeout` of `close_context`: each got its
    /// [`TtsEvent::ContextFinal`] and the session went on.
    pub fn finals_overdue(&self) -> u64 {
        self.shared.finals_overdue()
    }

    /// What mid-call reconnecting amounted to so far: drops, attempts,
    /// successes, capacity and outage refusals, time down. Readable at any
    /// time, also after the session ended (what a receipt reports).
    pub fn reconnects(&self) -> Tally {
        self.shared.tally()
    }

    /// True once the session has ended.
    pub fn is_closed(&self) -> bool {
        self.shared.terminal().is_some()
    }

    /// The label given to [`connect`].
    pub fn label(&self) -> &str {
        &self.shared.label
    }

    fn check_live(&self) -> Result<(), TtsError> {
        if self.shared.terminal().is_some() {
            return Err(self.shared.closed_error());
        }
        Ok(())
    }

    fn require_open(&self, id: ContextId) -> Result<(), TtsError> {
        self.check_live()?;
        match self.shared.state(id) {
            Some(CtxState::Open) => Ok(()),
            Some(_) => Err(TtsError::ContextClosing { context: id }),
            None => Err(TtsError::UnknownContext { context: id }),
        }
    }

    /// Moves `id` to `next` and queues `cmd`; undoes the move if the
    /// command cannot be queued, so the table never claims what the
    /// provider was not told.
    fn transition(
        &self,
        id: ContextId,
        prev: CtxState,
        next: CtxState,
        cmd: Command,
    ) -> Result<(), TtsError> {
        self.shared.set_state(id, next);
        self.submit(cmd).inspect_err(|_| {
            self.shared.set_state(id, prev);
        })
    }

    fn submit(&self, cmd: Command) -> Result<(), TtsError> {
        self.cmds.try_send(cmd).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => TtsError::Backpressure {
                label: self.shared.label.clone(),
                capacity: COMMAND_CAPACITY,
            },
            mpsc::error::TrySendError::Closed(_) => self.shared.closed_error(),
        })
    }
}

/// The session's events, in order; the last is always
/// [`TtsEvent::Closed`], after which `recv` returns `None`.
#[derive(Debug)]
pub struct TtsEvents {
    rx: mpsc::Receiver<TtsEvent>,
    shared: Arc<Shared>,
    done: bool,
}

impl TtsEvents {
    /// The next event. Cancel-safe (usable in `select!`). Audio of a
    /// context cancelled before it is received here is dropped and counted,
    /// so no audio of a cancelled context reaches the caller after
    /// `cancel_context` returned.
    pub async fn recv(&mut self) -> Option<TtsEvent> {
        loop {
            if self.done {
                return None;
            }
            let Some(event) = self.rx.recv().await else {
                let reason = self
                    .shared
                    .terminal()
                    .unwrap_or(CloseReason::ConnectionLost {
                        message: "session task ended".into(),
                    });
                return Some(self.finish(reason));
            };
            match event {
                TtsEvent::Audio { context, .. } if !self.shared.wants_audio(context) => {
                    self.shared.count_late_audio();
                }
                TtsEvent::ContextFinal { context } => {
                    self.shared.remove(context);
                    return Some(event);
                }
                TtsEvent::Closed(reason) => return Some(self.finish(reason)),
                other => return Some(other),
            }
        }
    }

    fn finish(&mut self, reason: CloseReason) -> TtsEvent {
        self.done = true;
        // The socket is gone, so no context is open any more.
        self.shared.clear();
        TtsEvent::Closed(reason)
    }
}
