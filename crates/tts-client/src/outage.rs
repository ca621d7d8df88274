//! The actor while its socket is down: classifying the drop, waiting out
//! the shared backoff schedule (`reconnect::Backoff`), dialling again, and
//! resuming the live contexts on the new socket. Caller commands keep
//! being taken throughout, so `close()` and `cancel_context` act at once.
//!
//! While down, commands are folded into the tracker instead of being sent:
//! text is appended to its context (bounded at the handle by
//! [`crate::RECONNECT_TEXT_CAPACITY`]), a close is remembered, a cancel
//! finalises its context locally at once, a flush is dropped (the resume
//! flushes every context it re-sends). The resume then sends, per live
//! context, its open, its unheard text and a flush, and its close if it
//! was closing — so nothing the caller asked for during the outage is lost
//! or reordered within a context.

use reconnect::Failure;
use tokio::time::Instant;

use crate::TtsEvent;
use crate::actor::{Actor, Command, Exit, Step};
use crate::context::CtxState;
use crate::error::{CloseReason, TtsError};
use crate::link;
use crate::resume::{drop_failure, upgrade_failure};

impl Actor {
    /// The socket ended with `reason`: start an outage, or end the session
    /// when the reason or the policy rules a reconnect out.
    pub(crate) async fn on_drop(&mut self, reason: CloseReason) -> Step {
        self.ws = None;
        let capacity_seen = std::mem::take(&mut self.capacity_seen);
        let Some(failure) = drop_failure(&reason, capacity_seen) else {
            return Err(Exit::Over(reason));
        };
        if !self.cfg.reconnect.enabled() {
            return Err(Exit::Over(reason));
        }
        let now = Instant::now();
        tracing::warn!(%reason, ?failure, "tts socket dropped mid-call: reconnecting");
        self.backoff.dropped(now.into_std());
        if failure == Failure::Capacity {
            // The provider refused us for capacity on the open socket: one
            // capacity refusal, and a longer first wait.
            self.backoff.failed(Failure::Capacity);
        }
        self.shared.set_reconnecting(true);
        self.end_unresumable().await?;
        self.schedule(now, failure, reason.to_string()).await
    }

    /// At the drop: cancelled contexts (no audio may follow, and the dead
    /// socket will never confirm) and closing contexts already heard in
    /// full get their final now.
    async fn end_unresumable(&mut self) -> Step {
        let cancelled: Vec<_> = self
            .tracker
            .ids()
            .into_iter()
            .filter(|id| self.shared.state(*id) == Some(CtxState::Cancelled))
            .collect();
        let heard = self.tracker.fully_heard_closing();
        for id in cancelled.into_iter().chain(heard) {
            self.finalise(id).await?;
        }
        Ok(())
    }

    /// Plans the next attempt after a drop or a failed attempt, telling
    /// the caller; ends the session when the schedule says stop.
    async fn schedule(&mut self, now: Instant, failure: Failure, error: String) -> Step {
        let capacity = failure == Failure::Capacity;
        let delay = self.backoff.next_delay(now.into_std());
        self.shared.set_tally(self.backoff.tally());
        let Some(delay) = delay else {
            let attempts = self.backoff.tally().attempts;
            return Err(Exit::Over(CloseReason::ReconnectFailed {
                attempts,
                capacity,
                last: error,
            }));
        };
        self.retry_at = now + delay;
        let attempt = self.backoff.tally().attempts;
        tracing::info!(attempt, ?delay, capacity, %error, "tts reconnect scheduled");
        self.emit(TtsEvent::Reconnecting {
            attempt,
            capacity,
            error,
        })
        .await
    }

    pub(crate) async fn step_down(&mut self) -> Step {
        tokio::select! {
            cmd = self.cmds.recv() => self.on_command_down(cmd).await,
            () = tokio::time::sleep_until(self.retry_at) => self.attempt().await,
        }
    }

    /// A command while no socket is up (see the module docs).
    async fn on_command_down(&mut self, cmd: Option<Command>) -> Step {
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
                self.tracker.open(id, now);
                Ok(())
            }
            Some(Command::Text(id, text)) => {
                self.tracker.sent(id, &text);
                Ok(())
            }
            Some(Command::Flush(_)) => Ok(()),
            Some(Command::Close(id)) => {
                self.tracker.mark_closing(id);
                Ok(())
            }
            Some(Command::Cancel(id)) => self.finalise(id).await,
        }
    }

    /// Dials once, still taking commands while the upgrade is under way.
    async fn attempt(&mut self) -> Step {
        let cfg = self.cfg.clone();
        let dialling = link::open(&cfg);
        tokio::pin!(dialling);
        let outcome = loop {
            tokio::select! {
                outcome = &mut dialling => break outcome,
                cmd = self.cmds.recv() => self.on_command_down(cmd).await?,
            }
        };
        match outcome {
            Ok(ws) => {
                self.ws = Some(ws);
                self.resume().await
            }
            Err(e) => self.attempt_failed(e).await,
        }
    }

    async fn attempt_failed(&mut self, e: TtsError) -> Step {
        let failure = upgrade_failure(&e);
        tracing::warn!(error = %e, ?failure, "tts reconnect attempt failed");
        self.backoff.failed(failure);
        if failure == Failure::Fatal {
            self.shared.set_tally(self.backoff.tally());
            return Err(Exit::Over(match e {
                TtsError::Rejected { status, body } => {
                    CloseReason::RefusedOnReconnect { status, body }
                }
                other => CloseReason::ReconnectFailed {
                    attempts: self.backoff.tally().attempts,
                    capacity: false,
                    last: other.to_string(),
                },
            }));
        }
        self.schedule(Instant::now(), failure, e.to_string()).await
    }

    /// The new socket is up: re-open every live context with its unheard
    /// text (and its close), then tell the caller.
    async fn resume(&mut self) -> Step {
        let now = Instant::now();
        let down_for = self.backoff.down_for(now.into_std());
        self.backoff.reconnected(now.into_std());
        self.shared.set_tally(self.backoff.tally());
        self.shared.set_reconnecting(false);
        let contexts = self.tracker.take_resume(now.into_std());
        let resumed_contexts = contexts.len();
        for ctx in contexts {
            self.send_opt(self.vendor.open(ctx.id)).await?;
            if !ctx.text.is_empty() {
                self.send(self.vendor.text(ctx.id, &ctx.text)).await?;
                self.send(self.vendor.flush(ctx.id)).await?;
            }
            if ctx.closing {
                let action = self.tracker.close(ctx.id, now.into_std());
                self.apply(action).await?;
            }
        }
        tracing::info!(?down_for, resumed_contexts, "tts reconnected");
        self.emit(TtsEvent::Reconnected {
            down_for,
            resumed_contexts,
        })
        .await
    }
}
