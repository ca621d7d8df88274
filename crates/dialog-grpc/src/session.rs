//! One open `Converse` stream: the request half ([`DialogSession`]), the
//! event half ([`DialogEvents`]) and the task that maps wire events to
//! [`DialogEvent`]s.

use std::sync::Arc;

use futures_util::Stream;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::error::DialogError;
use crate::ids::{ToolCallId, TurnId};
use crate::pb;
use crate::pb::client_message::Kind as Out;
use crate::pb::server_event::Kind as In;

/// Messages queued towards the service per session. A full queue means the
/// stream is not draining (HTTP/2 flow control): the send fails at once with
/// [`DialogError::Backpressure`] and the message is dropped; callers never
/// block.
pub(crate) const REQUEST_CAPACITY: usize = 64;

/// Events buffered towards the call actor per session. When it fills, the
/// mapping task stops reading the gRPC stream, so HTTP/2 flow control slows
/// the service down; nothing is dropped.
pub(crate) const EVENT_CAPACITY: usize = 128;

/// Something the dialog service said.
#[non_exhaustive]
#[derive(Debug)]
pub enum DialogEvent {
    /// A piece of reply text for `turn`. Concatenating a turn's deltas gives
    /// the reply text.
    TextDelta { turn: TurnId, text: String },
    /// The reply to `turn` is complete.
    TurnComplete { turn: TurnId },
    /// The service asks callgate to run a tool and send back a result.
    ToolCall {
        id: ToolCallId,
        turn: TurnId,
        name: String,
        arguments_json: String,
        /// Acts on the caller's behalf; must never outlive the call.
        privileged: bool,
    },
    /// The service learned a slot value.
    SlotUpdate { name: String, value: String },
    /// The service wants a human to take over.
    Escalate { reason: String },
    /// The service ends the call (after the current reply is played).
    EndCall { reason: String },
    /// The stream dropped mid-call (or the last attempt failed); attempt
    /// number `attempt` starts after a backoff. Requests queue meanwhile.
    /// `capacity`: the service refused for capacity, not because it is down.
    Reconnecting {
        attempt: u32,
        capacity: bool,
        error: String,
    },
    /// A new stream continues the conversation. `resent_turn`: the user
    /// turn whose reply had not completed was sent again; its reply text
    /// goes on where the old stream stopped (text already delivered is not
    /// delivered twice).
    Reconnected {
        down_for: std::time::Duration,
        resent_turn: Option<TurnId>,
    },
    /// Terminal: the stream ended normally (`Ok`) or with an error. Nothing
    /// follows it.
    Closed(Result<(), DialogError>),
}

/// The request half of a dialog stream. Methods never block: they queue on
/// a bounded channel. Dropping it half-closes the stream.
#[derive(Debug)]
pub struct DialogSession {
    pub(crate) call_id: Arc<str>,
    pub(crate) tx: mpsc::Sender<pb::ClientMessage>,
    pub(crate) tally: Arc<std::sync::Mutex<reconnect::Tally>>,
}

/// The event half of a dialog stream. Dropping it cancels the RPC.
#[derive(Debug)]
pub struct DialogEvents {
    pub(crate) rx: mpsc::Receiver<DialogEvent>,
}

impl DialogEvents {
    /// The next event; `None` after [`DialogEvent::Closed`] was delivered.
    pub async fn recv(&mut self) -> Option<DialogEvent> {
        self.rx.recv().await
    }
}

impl DialogSession {
    /// The call this session belongs to.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// Mid-call reconnects of this session so far.
    pub fn reconnects(&self) -> reconnect::Tally {
        *self
            .tally
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// True once the stream has ended (or the events half was dropped).
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// The caller's final transcript for `turn`.
    ///
    /// # Errors
    /// [`DialogError::Backpressure`] when the queue is full,
    /// [`DialogError::Closed`] when the stream has ended.
    pub fn user_turn(&self, turn: TurnId, transcript: &str) -> Result<(), DialogError> {
        self.send(Out::UserTurn(pb::UserTurn {
            turn_id: turn.0,
            transcript: transcript.to_owned(),
        }))
    }

    /// The caller spoke over the reply to `turn`; `played_text` is what they
    /// actually heard.
    ///
    /// # Errors
    /// As [`DialogSession::user_turn`].
    pub fn interrupt(&self, turn: TurnId, played_text: &str) -> Result<(), DialogError> {
        self.send(Out::Interrupt(pb::Interrupt {
            turn_id: turn.0,
            played_text: played_text.to_owned(),
        }))
    }

    /// The result (or error, `is_error`) of tool call `id`, as JSON text.
    ///
    /// # Errors
    /// As [`DialogSession::user_turn`].
    pub fn tool_result(
        &self,
        id: &ToolCallId,
        result_json: &str,
        is_error: bool,
    ) -> Result<(), DialogError> {
        self.send(Out::ToolResult(pb::ToolResult {
            tool_call_id: id.0.clone(),
            result_json: result_json.to_owned(),
            is_error,
        }))
    }

    /// DTMF digits pressed by the caller (`0-9 * # A-D`).
    ///
    /// # Errors
    /// [`DialogError::InvalidDtmf`] for other characters or an empty string;
    /// otherwise as [`DialogSession::user_turn`].
    pub fn dtmf(&self, digits: &str) -> Result<(), DialogError> {
        let valid = |c: char| c.is_ascii_digit() || matches!(c, '*' | '#' | 'A'..='D');
        if digits.is_empty() || !digits.chars().all(valid) {
            return Err(DialogError::InvalidDtmf {
                call_id: self.call_id.to_string(),
                digits: digits.to_owned(),
            });
        }
        self.send(Out::Dtmf(pb::Dtmf {
            digits: digits.to_owned(),
        }))
    }

    /// Sends `SessionEnd` (best effort: skipped if the queue is full or the
    /// stream already ended) and half-closes the stream. The service then
    /// ends the stream and [`DialogEvents`] yields `Closed`.
    pub fn end(self, reason: &str) {
        let msg = Out::SessionEnd(pb::SessionEnd {
            reason: reason.to_owned(),
        });
        if let Err(e) = self.send(msg) {
            debug!(call_id = %self.call_id, error = %e, "SessionEnd not sent");
        }
    }

    fn send(&self, kind: Out) -> Result<(), DialogError> {
        enqueue(
            &self.tx,
            &self.call_id,
            pb::ClientMessage { kind: Some(kind) },
        )
    }
}

/// Queues one message without blocking.
pub(crate) fn enqueue(
    tx: &mpsc::Sender<pb::ClientMessage>,
    call_id: &str,
    msg: pb::ClientMessage,
) -> Result<(), DialogError> {
    tx.try_send(msg).map_err(|e| match e {
        TrySendError::Full(_) => DialogError::Backpressure {
            call_id: call_id.to_owned(),
            capacity: REQUEST_CAPACITY,
        },
        TrySendError::Closed(_) => DialogError::Closed {
            call_id: call_id.to_owned(),
        },
    })
}

/// The request body: queued messages until the session is dropped (its
/// sender closes: half-close) or `stop` fires (the event half is gone).
/// After `stop`, messages already queued are still sent, so
/// `end(reason)` followed at once by dropping the events keeps its
/// `SessionEnd`; nothing queued later is.
pub(crate) fn request_stream(
    rx: mpsc::Receiver<pb::ClientMessage>,
    stop: CancellationToken,
) -> impl Stream<Item = pb::ClientMessage> + Send + 'static {
    futures_util::stream::unfold((rx, stop, false), |(mut rx, stop, stopped)| async move {
        if stopped {
            return rx.try_recv().ok().map(|msg| (msg, (rx, stop, true)));
        }
        tokio::select! {
            biased;
            msg = rx.recv() => msg.map(|msg| (msg, (rx, stop, false))),
            () = stop.cancelled() => rx.try_recv().ok().map(|msg| (msg, (rx, stop, true))),
        }
    })
}

/// Wire → domain. Empty or unknown oneofs are skipped (newer services may
/// send kinds this client does not know).
pub(crate) fn map_event(wire: pb::ServerEvent) -> Option<DialogEvent> {
    let Some(kind) = wire.kind else {
        debug!("skipping server event without a known kind");
        return None;
    };
    Some(match kind {
        In::TextDelta(d) => DialogEvent::TextDelta {
            turn: TurnId(d.turn_id),
            text: d.text,
        },
        In::TurnComplete(c) => DialogEvent::TurnComplete {
            turn: TurnId(c.turn_id),
        },
        In::ToolCall(t) => DialogEvent::ToolCall {
            id: ToolCallId(t.id),
            turn: TurnId(t.turn_id),
            name: t.name,
            arguments_json: t.arguments_json,
            privileged: t.privileged,
        },
        In::SlotUpdate(s) => DialogEvent::SlotUpdate {
            name: s.name,
            value: s.value,
        },
        In::Escalate(e) => DialogEvent::Escalate { reason: e.reason },
        In::EndCall(e) => DialogEvent::EndCall { reason: e.reason },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_every_kind_and_skips_empty() {
        assert!(map_event(pb::ServerEvent { kind: None }).is_none());
        let ev = map_event(pb::ServerEvent {
            kind: Some(In::ToolCall(pb::ToolCall {
                id: "t1".into(),
                turn_id: 3,
                name: "book_table".into(),
                arguments_json: "{}".into(),
                privileged: true,
            })),
        });
        match ev {
            Some(DialogEvent::ToolCall {
                id,
                turn,
                privileged,
                ..
            }) => {
                assert_eq!(id, ToolCallId("t1".into()));
                assert_eq!(turn, TurnId(3));
                assert!(privileged);
            }
            other => panic!("unexpected {other:?}"),
        }
        let ev = map_event(pb::ServerEvent {
            kind: Some(In::TurnComplete(pb::TurnComplete { turn_id: 2 })),
        });
        assert!(matches!(
            ev,
            Some(DialogEvent::TurnComplete { turn: TurnId(2) })
        ));
    }

    #[tokio::test]
    async fn full_queue_is_backpressure_and_dropped_receiver_is_closed() {
        let (tx, rx) = mpsc::channel(REQUEST_CAPACITY);
        let session = DialogSession {
            call_id: Arc::from("c9"),
            tx,
            tally: Arc::default(),
        };
        for i in 0..REQUEST_CAPACITY {
            session.user_turn(TurnId(i as u64 + 1), "hi").unwrap();
        }
        let err = session.user_turn(TurnId(99), "hi").unwrap_err();
        assert!(matches!(
            err,
            DialogError::Backpressure {
                capacity: REQUEST_CAPACITY,
                ..
            }
        ));
        assert!(err.to_string().contains("c9"));
        assert!(matches!(
            session.dtmf("12x").unwrap_err(),
            DialogError::InvalidDtmf { .. }
        ));
        drop(rx);
        assert!(session.is_closed());
        assert!(matches!(
            session.dtmf("0").unwrap_err(),
            DialogError::Closed { .. }
        ));
    }

    #[tokio::test]
    async fn request_stream_ends_on_stop_or_half_close() {
        use futures_util::StreamExt;
        let (tx, rx) = mpsc::channel(4);
        let stop = CancellationToken::new();
        let mut s = Box::pin(request_stream(rx, stop.clone()));
        tx.try_send(pb::ClientMessage { kind: None }).unwrap();
        assert!(s.next().await.is_some());
        tx.try_send(pb::ClientMessage { kind: None }).unwrap();
        stop.cancel();
        assert!(s.next().await.is_some(), "queued before stop: still sent");
        assert!(s.next().await.is_none(), "then the body ends");
        let (tx, rx) = mpsc::channel(4);
        let mut s = Box::pin(request_stream(rx, CancellationToken::new()));
        drop(tx);
        assert!(s.next().await.is_none());
    }
}
