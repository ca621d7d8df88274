//! Mid-call reconnect: when the provider socket drops, open a new one on
//! the shared [`reconnect::Backoff`] schedule, keep taking the caller's
//! audio meanwhile, and send the unsettled audio again so the utterance in
//! progress is transcribed whole.

use std::future::Future;
use std::sync::PoisonError;

use tokio::sync::oneshot;
use tokio::time::{Instant, sleep};
use tokio_tungstenite::tungstenite::Message;

use crate::actor::{Actor, Command, Step};
use crate::event::{CloseReason, CloseSummary, SttEvent};
use crate::wire;

/// Why a reconnect did not resume the session.
pub(crate) type Ended = (CloseReason, Option<oneshot::Sender<CloseSummary>>);

/// Something the caller did while the socket was down.
enum Interrupted {
    /// `close()`: end now, answering the caller.
    Close(oneshot::Sender<CloseSummary>),
    /// The handle was dropped.
    Dropped,
}

impl Actor {
    /// Reconnects after `drop`. `Ok` once a new socket carries the replayed
    /// audio; `Err` when the budget is spent, a refusal is final, or the
    /// caller closed meanwhile.
    pub(crate) async fn reconnect(&mut self, drop: CloseReason) -> Result<(), Ended> {
        tracing::warn!(code = ?drop.code, reason = %drop.reason, kind = ?drop.kind, "stt socket dropped mid-call; reconnecting");
        self.backoff.dropped(Instant::now().into_std());
        self.record_tally();
        let mut last = drop.reason.clone();
        let mut capacity = false;
        let mut finalize = false;
        loop {
            let Some(delay) = self.backoff.next_delay(Instant::now().into_std()) else {
                return Err((self.gave_up(&drop, &last), None));
            };
            let attempt = self.backoff.tally().attempts;
            self.record_tally();
            self.deliver(SttEvent::Reconnecting {
                attempt,
                capacity,
                error: last.clone(),
            })
            .await;
            self.buffer_during(sleep(delay), &mut finalize)
                .await
                .map_err(|i| self.interrupted(i, &drop))?;
            let cfg = self.cfg.clone();
            let opened = self
                .buffer_during(crate::session::open(&cfg), &mut finalize)
                .await
                .map_err(|i| self.interrupted(i, &drop))?;
            match opened {
                Ok((ws, request_id)) => {
                    self.ws = ws;
                    match self.resume(finalize).await {
                        Ok(()) => {
                            self.resumed(request_id).await;
                            return Ok(());
                        }
                        Err(close) => last = close.reason,
                    }
                    self.backoff.failed(reconnect::Failure::Down);
                    capacity = false;
                }
                Err(e) => {
                    capacity = e.is_capacity();
                    self.backoff.failed(reconnect::Failure::classify(
                        e.is_capacity(),
                        e.is_retryable(),
                    ));
                    last = e.to_string();
                    tracing::warn!(error = %e, attempt, "stt reconnect attempt failed");
                }
            }
            self.record_tally();
        }
    }

    /// Sends the unsettled audio, then a `Finalize` asked for meanwhile.
    async fn resume(&mut self, finalize: bool) -> Result<(), CloseReason> {
        for frame in self.replay.restart() {
            if let Step::Ended(close) = self.send(Message::binary(frame)).await {
                return Err(close);
            }
        }
        if finalize && let Step::Ended(close) = self.send(Message::text(wire::FINALIZE)).await {
            return Err(close);
        }
        Ok(())
    }

    async fn resumed(&mut self, request_id: Option<String>) {
        let now = Instant::now().into_std();
        let down_for = self.backoff.down_for(now);
        self.backoff.reconnected(now);
        self.record_tally();
        tracing::info!(
            request_id = request_id.as_deref().unwrap_or("-"),
            down_ms = down_for.as_millis() as u64,
            replayed_s = self.replay.pending_seconds(),
            replay_dropped_frames = self.replay.dropped_frames(),
            "stt reconnected"
        );
        self.deliver(SttEvent::Reconnected {
            down_for,
            replayed_seconds: self.replay.pending_seconds(),
        })
        .await;
    }

    /// Runs `fut` while still taking the caller's audio (into the replay)
    /// and commands. A `Finalize` is remembered for the new socket.
    async fn buffer_during<F: Future>(
        &mut self,
        fut: F,
        finalize: &mut bool,
    ) -> Result<F::Output, Interrupted> {
        tokio::pin!(fut);
        loop {
            tokio::select! {
                out = &mut fut => return Ok(out),
                frame = self.audio.recv() => match frame {
                    Some(frame) => self.replay.push(&frame),
                    None => return Err(Interrupted::Dropped),
                },
                cmd = self.commands.recv() => match cmd {
                    Some(Command::Finalize) => *finalize = true,
                    Some(Command::Close(reply)) => return Err(Interrupted::Close(reply)),
                    None => return Err(Interrupted::Dropped),
                },
            }
        }
    }

    fn interrupted(&self, why: Interrupted, drop: &CloseReason) -> Ended {
        let reason = CloseReason {
            reason: format!("{}; closed while reconnecting", drop.reason),
            ..drop.clone()
        };
        match why {
            Interrupted::Close(reply) => (reason, Some(reply)),
            Interrupted::Dropped => (reason, None),
        }
    }

    fn gave_up(&self, drop: &CloseReason, last: &str) -> CloseReason {
        let t = self.backoff.tally();
        tracing::warn!(attempts = t.attempts, last = %last, "stt reconnect budget spent");
        CloseReason {
            reason: format!(
                "{}; reconnect gave up after {} attempts: {last}",
                drop.reason, t.attempts
            ),
            ..drop.clone()
        }
    }

    fn record_tally(&self) {
        *self
            .shared
            .reconnects
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = self.backoff.tally();
    }
}
