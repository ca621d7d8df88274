//! The task behind one call's dialog session: it owns the current
//! `Converse` stream, forwards the session's requests to it and its events
//! to the call, and — when the stream drops mid-call — opens a new one on
//! the [`reconnect`] schedule, resuming the conversation (`SessionStart
//! { resume: true }`) and re-sending the user turn whose reply had not
//! completed. Reply text the call already received is not delivered twice.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::Streaming;
use tracing::{info, warn};

use crate::error::{DialogError, GrpcCode};
use crate::ids::TurnId;
use crate::pb;
use crate::pb::client_message::Kind as Out;
use crate::pb::server_event::Kind as In;
use crate::session::{DialogEvent, map_event};

/// How long a request may wait for room on the stream before the stream
/// is taken for dropped: the service stopped reading (HTTP/2 flow control
/// holds the request body back), and waiting longer would also stop this
/// task reading the service's events.
pub(crate) const SEND_STALL: Duration = Duration::from_secs(5);

/// Hands `msg` to a stream within `stall`. A closed stream fails on its
/// own (its error decides), so only a stall is an error here.
async fn forward(
    tx: &mpsc::Sender<pb::ClientMessage>,
    msg: pb::ClientMessage,
    stall: Duration,
    call_id: &str,
) -> Result<(), DialogError> {
    match tokio::time::timeout(stall, tx.send(msg)).await {
        Ok(_) => Ok(()),
        Err(_) => Err(DialogError::Stream {
            call_id: call_id.to_string(),
            code: GrpcCode::Unavailable,
            message: format!("the service took no request for {stall:?}"),
        }),
    }
}

/// One open `Converse` stream.
pub(crate) struct Leg {
    pub tx: mpsc::Sender<pb::ClientMessage>,
    pub stream: Streaming<pb::ServerEvent>,
    /// Ends the request body of this stream.
    pub stop: CancellationToken,
}

/// Opens a stream for the call; `resume` asks the service to continue the
/// conversation instead of greeting.
pub(crate) type Opener = Box<dyn Fn(bool) -> BoxFuture<'static, Result<Leg, DialogError>> + Send>;

/// The reply the call is still owed, to re-request after a drop.
#[derive(Debug, Default)]
struct InFlight {
    /// The turn being answered; turn 0 is the greeting.
    turn: Option<TurnId>,
    /// The user's transcript for it (none for the greeting).
    transcript: Option<String>,
    /// Reply text already delivered for it.
    delivered: String,
    /// After a resume: delivered text the new stream will say again.
    skip: String,
}

pub(crate) struct StreamTask {
    pub call_id: Arc<str>,
    pub open: Opener,
    pub requests: mpsc::Receiver<pb::ClientMessage>,
    pub events: mpsc::Sender<DialogEvent>,
    pub backoff: reconnect::Backoff,
    pub tally: Arc<Mutex<reconnect::Tally>>,
    inflight: InFlight,
    greeted: bool,
    half_closed: bool,
}

/// How the stream loop ended.
enum Exit {
    /// Deliver this outcome as `Closed`.
    Closed(Result<(), DialogError>),
    /// The call dropped its events: nobody to tell.
    Abandoned,
}

impl StreamTask {
    pub fn new(
        call_id: Arc<str>,
        open: Opener,
        requests: mpsc::Receiver<pb::ClientMessage>,
        events: mpsc::Sender<DialogEvent>,
        backoff: reconnect::Backoff,
    ) -> Self {
        StreamTask {
            call_id,
            open,
            requests,
            events,
            backoff,
            tally: Arc::default(),
            inflight: InFlight {
                turn: Some(TurnId(0)),
                ..InFlight::default()
            },
            greeted: false,
            half_closed: false,
        }
    }

    pub async fn run(mut self, mut leg: Leg) {
        let exit = loop {
            match self.drive(&mut leg).await {
                Err(e) if self.should_reconnect(&e) => match self.reconnect(e).await {
                    Ok(next) => leg = next,
                    Err(exit) => break exit,
                },
                Err(e) => break Exit::Closed(Err(e)),
                Ok(exit) => break exit,
            }
        };
        leg.stop.cancel();
        match exit {
            Exit::Closed(end) => {
                match &end {
                    Ok(()) => info!("dialog stream closed"),
                    Err(e) => warn!(error = %e, "dialog stream failed"),
                }
                let _ = self.events.send(DialogEvent::Closed(end)).await;
            }
            Exit::Abandoned => info!("dialog events dropped; cancelling the stream"),
        }
    }

    /// Runs one stream until it ends; `Err` is a stream failure.
    async fn drive(&mut self, leg: &mut Leg) -> Result<Exit, DialogError> {
        loop {
            tokio::select! {
                biased;
                () = self.events.closed() => return Ok(Exit::Abandoned),
                next = leg.stream.message() => match next {
                    Ok(Some(wire)) => {
                        if !self.on_wire(wire).await {
                            return Ok(Exit::Abandoned);
                        }
                    }
                    Ok(None) => return Ok(Exit::Closed(Ok(()))),
                    Err(status) => {
                        return Err(DialogError::from_stream_status(&self.call_id, &status));
                    }
                },
                msg = self.requests.recv(), if !self.half_closed => match msg {
                    Some(msg) => {
                        self.track(&msg);
                        forward(&leg.tx, msg, SEND_STALL, &self.call_id).await?;
                    }
                    None => {
                        // The session was dropped: half-close this stream.
                        self.half_closed = true;
                        leg.stop.cancel();
                    }
                },
            }
        }
    }

    fn should_reconnect(&self, e: &DialogError) -> bool {
        !self.half_closed && e.is_dropped() && self.backoff.policy().enabled()
    }

    /// Remembers what a drop would cost.
    fn track(&mut self, msg: &pb::ClientMessage) {
        match &msg.kind {
            Some(Out::UserTurn(t)) => {
                self.inflight = InFlight {
                    turn: Some(TurnId(t.turn_id)),
                    transcript: Some(t.transcript.clone()),
                    ..InFlight::default()
                };
            }
            Some(Out::Interrupt(i)) if self.inflight.turn == Some(TurnId(i.turn_id)) => {
                self.inflight = InFlight::default();
            }
            _ => {}
        }
    }

    /// Delivers one wire event, minus text already delivered before a
    /// resume. `false` when the call dropped its events.
    async fn on_wire(&mut self, wire: pb::ServerEvent) -> bool {
        let mut wire = wire;
        match &mut wire.kind {
            Some(In::TextDelta(d)) if self.inflight.turn == Some(TurnId(d.turn_id)) => {
                d.text = self.unheard(std::mem::take(&mut d.text));
                if d.text.is_empty() {
                    return true;
                }
                self.inflight.delivered.push_str(&d.text);
            }
            Some(In::TurnComplete(c)) => {
                if c.turn_id == 0 {
                    self.greeted = true;
                }
                if self.inflight.turn == Some(TurnId(c.turn_id)) {
                    self.inflight = InFlight::default();
                }
            }
            _ => {}
        }
        match map_event(wire) {
            Some(event) => self.events.send(event).await.is_ok(),
            None => true,
        }
    }

    /// The part of `text` not yet delivered, given what a resumed stream
    /// is expected to repeat.
    fn unheard(&mut self, text: String) -> String {
        let skip = &mut self.inflight.skip;
        if skip.is_empty() {
            return text;
        }
        if let Some(rest) = skip.strip_prefix(text.as_str()) {
            *skip = rest.to_owned();
            return String::new();
        }
        if let Some(rest) = text.strip_prefix(skip.as_str()) {
            let rest = rest.to_owned();
            skip.clear();
            return rest;
        }
        warn!("resumed reply differs from the part already delivered; delivering it as is");
        skip.clear();
        text
    }

    /// Opens a new stream after `drop`, or gives up with the last error.
    async fn reconnect(&mut self, drop: DialogError) -> Result<Leg, Exit> {
        warn!(error = %drop, "dialog stream dropped mid-call; reconnecting");
        self.backoff.dropped(Instant::now().into_std());
        let mut last = drop;
        loop {
            self.publish();
            let Some(delay) = self.backoff.next_delay(Instant::now().into_std()) else {
                warn!(
                    attempts = self.backoff.tally().attempts,
                    "dialog reconnect budget spent"
                );
                return Err(Exit::Closed(Err(last)));
            };
            let event = DialogEvent::Reconnecting {
                attempt: self.backoff.tally().attempts,
                capacity: last.is_capacity(),
                error: last.to_string(),
            };
            if self.events.send(event).await.is_err() {
                return Err(Exit::Abandoned);
            }
            tokio::select! {
                () = self.events.closed() => return Err(Exit::Abandoned),
                () = tokio::time::sleep(delay) => {}
            }
            let resume = self.greeted;
            match (self.open)(resume).await {
                Ok(leg) => return self.resumed(leg).await,
                Err(e) => {
                    self.backoff.failed(reconnect::Failure::classify(
                        e.is_capacity(),
                        e.is_retryable(),
                    ));
                    warn!(error = %e, "dialog reconnect attempt failed");
                    last = e;
                }
            }
        }
    }

    /// Re-sends the owed turn on the new stream and reports the reconnect.
    async fn resumed(&mut self, leg: Leg) -> Result<Leg, Exit> {
        let now = Instant::now().into_std();
        let down_for = self.backoff.down_for(now);
        self.backoff.reconnected(now);
        self.publish();
        let inflight = &mut self.inflight;
        inflight.skip = inflight.delivered.clone();
        let resent = match (inflight.turn, &inflight.transcript) {
            (Some(turn), Some(text)) => {
                let msg = pb::ClientMessage {
                    kind: Some(Out::UserTurn(pb::UserTurn {
                        turn_id: turn.0,
                        transcript: text.clone(),
                    })),
                };
                // A fresh stream holds only its `SessionStart`: room at once.
                let _ = leg.tx.try_send(msg);
                Some(turn)
            }
            _ => None,
        };
        info!(down_ms = down_for.as_millis() as u64, resent = ?resent, "dialog reconnected");
        let event = DialogEvent::Reconnected {
            down_for,
            resent_turn: resent,
        };
        match self.events.send(event).await {
            Ok(()) => Ok(leg),
            Err(_) => Err(Exit::Abandoned),
        }
    }

    fn publish(&self) {
        *self.tally.lock().unwrap_or_else(PoisonError::into_inner) = self.backoff.tally();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> StreamTask {
        let (_tx, rx) = mpsc::channel(1);
        let (ev, _ev_rx) = mpsc::channel(1);
        let open: Opener = Box::new(|_| Box::pin(async { unreachable!("not opened") }));
        let backoff = reconnect::Backoff::connected(reconnect::ReconnectPolicy::default(), 1);
        StreamTask::new(Arc::from("c1"), open, rx, ev, backoff)
    }

    #[test]
    fn a_resumed_reply_skips_exactly_what_was_delivered() {
        let mut t = task();
        t.inflight.skip = "Good news, a table".into();
        assert_eq!(t.unheard("Good news, ".into()), "");
        assert_eq!(t.unheard("a table for four".into()), " for four");
        assert_eq!(t.unheard(" is free.".into()), " is free.");
    }

    #[test]
    fn a_resumed_reply_that_differs_is_delivered_whole() {
        let mut t = task();
        t.inflight.skip = "Good news".into();
        assert_eq!(t.unheard("Sorry, ".into()), "Sorry, ");
        assert!(t.inflight.skip.is_empty());
    }

    #[tokio::test]
    async fn a_stream_that_takes_no_request_is_a_drop_not_a_wait() {
        let (tx, unread) = mpsc::channel(1);
        let msg = || pb::ClientMessage {
            kind: Some(Out::UserTurn(pb::UserTurn {
                turn_id: 1,
                transcript: "a table".into(),
            })),
        };
        let stall = Duration::from_millis(50);
        forward(&tx, msg(), stall, "c1").await.unwrap();
        let err = forward(&tx, msg(), stall, "c1").await.unwrap_err();
        assert!(err.is_dropped(), "{err}");
        assert!(err.to_string().contains("took no request"), "{err}");
        // A closed stream is not this function's error.
        drop(unread);
        forward(&tx, msg(), stall, "c1").await.unwrap();
    }

    #[test]
    fn an_interrupted_turn_is_not_re_requested() {
        let mut t = task();
        let turn = |id, text: &str| pb::ClientMessage {
            kind: Some(Out::UserTurn(pb::UserTurn {
                turn_id: id,
                transcript: text.into(),
            })),
        };
        t.track(&turn(1, "a table for four"));
        assert_eq!(t.inflight.turn, Some(TurnId(1)));
        t.track(&pb::ClientMessage {
            kind: Some(Out::Interrupt(pb::Interrupt {
                turn_id: 1,
                played_text: String::new(),
            })),
        });
        assert_eq!(t.inflight.turn, None);
    }
}
