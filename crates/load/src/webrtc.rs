//! The WebRTC caller: a browser's side of `docs/webrtc.md`, driving the
//! same sans-IO [`Caller`] as the WebSocket protocols, so a WebRTC call is
//! counted exactly like the others (greeting, replies, prompts, owed
//! silence, outcomes).
//!
//! What it is, per call: a str0m peer connection ([`peer`]: full ICE as
//! the controlling agent, one host candidate on its own UDP socket, one
//! `sendrecv` audio transceiver, Opus only), the offer POSTed to the
//! server's `/v1/webrtc` ([`signal`]), the answer applied, then — once
//! ICE and DTLS are up ([`Caller::handle_open`]) — the caller's 20 ms
//! frames of 16 kHz L16 encoded to Opus ([`codec`]) and written every
//! 20 ms at RTP time advancing 960 per frame, and every packet the server
//! sends decoded and handed to the caller frame by frame. The session URL
//! is polled every [`STATUS_POLL`] (as the bundled page does) and each
//! status handed to the caller, which ends the call on `ended`/`refused`.
//! The caller's hang-up is a `DELETE` on the session URL. A refused offer
//! (`503` and its JSON reason) is a refused call, a `401` an unauthorized
//! one, as on the other protocols.
//!
//! Queues: status polls reach the call through a channel of
//! [`STATUS_QUEUE`]; a poll that finds it full is dropped (the next one
//! says the same or more), except a final one, which waits for room. The
//! peer's events are drained after every input (str0m's invariant) and
//! handled at once. Datagrams the socket cannot take are dropped and
//! counted, as UDP would.
//!
//! What it never does: trickle, restart ICE, retry a refused offer, or
//! wait without a deadline (connecting is bounded by
//! [`crate::driver::CONNECT_TIMEOUT`], every HTTP request by
//! [`signal::REQUEST_TIMEOUT`], the call by its timeout).
//!
//! How to drive it: [`crate::driver::place_call`] with a plan whose
//! protocol is [`crate::CallProtocol::Webrtc`] and a [`Dial`] whose URL is
//! the offer endpoint (`http://host:port/v1/webrtc`) — what
//! `callgate load --protocol webrtc` does.

pub mod codec;
pub mod peer;
pub mod signal;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until, timeout_at};

use crate::caller::{CallPlan, Caller, Cue, Transmit, millis};
use crate::driver::{CONNECT_TIMEOUT, Dial, log_end};
use crate::error::LoadError;
use crate::progress::Progress;
use crate::prompts::lossy::Reference;
use crate::record::CallRecord;
use codec::Codec;
use peer::{Peer, PeerEvent, local_ip_towards};
use signal::{Polled, Signal};

/// How often the session's status is polled (`docs/webrtc.md`).
pub const STATUS_POLL: Duration = Duration::from_millis(500);
/// Status polls waiting for the call.
pub const STATUS_QUEUE: usize = 4;
/// Polls in a row that may fail before the call counts as lost (the
/// bundled page gives up after as many).
pub const MAX_POLL_FAILURES: u32 = 20;
/// Largest datagram read.
const DATAGRAM: usize = 2_048;
/// RTP clock units in a millisecond (48 kHz, RFC 7587).
const RTP_TICKS_PER_MS: u64 = 48;

/// Places one WebRTC call and returns what it recorded.
pub(crate) async fn place(
    plan: CallPlan,
    dial: &Dial,
    progress: &Arc<Progress>,
    mut cues: mpsc::Receiver<Cue>,
) -> CallRecord {
    // The caller's ear needs the prompts' Opus reference: built once per
    // process (~a quarter second of encoding), never on a runtime thread.
    let _ = tokio::task::spawn_blocking(Reference::get).await;
    let epoch = Instant::now();
    let call_timeout = plan.call_timeout;
    let mut caller = Caller::new(plan);
    progress.call_started();
    match connect(dial, epoch + CONNECT_TIMEOUT.min(call_timeout)).await {
        Ok(mut call) => {
            tracing::debug!(session = %call.session, "WebRTC connected");
            let _active = progress.connected();
            caller.handle_open(epoch.elapsed());
            call.run(&mut caller, (epoch, call_timeout), progress, &mut cues)
                .await;
        }
        Err(err) => caller.handle_connect_error(epoch.elapsed(), &err),
    }
    let record = caller.into_record(epoch.elapsed());
    log_end(&record);
    progress.call_finished(&record.outcome);
    record
}

/// Offer, answer, ICE and DTLS, by `deadline`. A session the server
/// created is deleted again if the media does not come up.
async fn connect(dial: &Dial, deadline: Instant) -> Result<Call, LoadError> {
    let url = dial.url.clone();
    let failed = |detail: String| LoadError::Connect {
        url: url.clone(),
        detail,
    };
    let timed_out = || LoadError::ConnectTimeout {
        url: url.clone(),
        after_ms: millis(CONNECT_TIMEOUT),
    };
    let signal = Signal::new(&dial.url, &dial.auth)?;
    let server = timeout_at(deadline, signal.server_addr())
        .await
        .ok()
        .flatten();
    let ip = server.map_or(std::net::Ipv4Addr::LOCALHOST.into(), local_ip_towards);
    let (peer, offer) = Peer::offer(ip).await.map_err(failed)?;
    let answered = timeout_at(deadline, signal.offer(offer))
        .await
        .map_err(|_| timed_out())??;
    let answered_at = Instant::now();
    let mut call = Call::new(signal, answered.session, peer).map_err(failed)?;
    let up = match call.peer.accept(&answered.sdp) {
        Ok(early) => timeout_at(deadline, call.until_connected(early))
            .await
            .unwrap_or_else(|_| Err(failed(call.not_up(answered_at)))),
        Err(detail) => Err(failed(detail)),
    };
    match up {
        Ok(()) => Ok(call),
        Err(err) => {
            call.hang_up().await;
            Err(err)
        }
    }
}

/// What the caller asked for after its frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    None,
    /// Hang up: `DELETE`, then close.
    Close,
    /// Vanish: no `DELETE`, no more datagrams (the server sees consent lost).
    Drop,
}

/// One connected call's media and signalling.
struct Call {
    signal: Signal,
    session: reqwest::Url,
    peer: Peer,
    socket: Arc<UdpSocket>,
    codec: Codec,
    /// Peer events produced while sending, handled after the send.
    stashed: Vec<PeerEvent>,
    /// The status said the session is over (no `DELETE` needed).
    session_over: bool,
}

impl Call {
    fn new(signal: Signal, session: reqwest::Url, peer: Peer) -> Result<Call, String> {
        let codec = Codec::new().map_err(|e| format!("Opus codec: {e}"))?;
        Ok(Call {
            signal,
            session,
            socket: peer.socket(),
            peer,
            codec,
            stashed: Vec::new(),
            session_over: false,
        })
    }

    /// Why the media did not come up in time, for the record.
    fn not_up(&self, answered_at: Instant) -> String {
        let s = self.peer.stats;
        format!(
            "ICE and DTLS not connected {} ms after the answer ({} datagrams in, {} out from {}; session {})",
            millis(answered_at.elapsed()),
            s.datagrams_in,
            s.datagrams_out,
            self.peer.local(),
            self.session.path()
        )
    }

    /// Runs ICE and DTLS until str0m says connected; media that arrives
    /// with it is kept for the caller.
    async fn until_connected(&mut self, mut events: Vec<PeerEvent>) -> Result<(), LoadError> {
        let mut buf = vec![0u8; DATAGRAM];
        loop {
            let decisive = events
                .iter()
                .position(|e| matches!(e, PeerEvent::Connected | PeerEvent::Failed(_)));
            if let Some(i) = decisive {
                let rest: Vec<PeerEvent> = events.drain(i..).collect();
                let mut rest = rest.into_iter();
                if let Some(PeerEvent::Failed(detail)) = rest.next() {
                    return Err(LoadError::Connect {
                        url: self.signal.endpoint().to_string(),
                        detail,
                    });
                }
                self.stashed.extend(rest);
                return Ok(());
            }
            let wake = Instant::from_std(self.peer.deadline());
            events = tokio::select! {
                r = self.socket.recv_from(&mut buf) => match r {
                    Ok((n, from)) => self.peer.receive(std::time::Instant::now(), from, &buf[..n]),
                    // ICMP unreachable and the like: the checks retry.
                    Err(_) => Vec::new(),
                },
                () = sleep_until(wake) => self.peer.timeout(std::time::Instant::now()),
            };
        }
    }

    /// Moves audio both ways and follows the status until the caller is done.
    async fn run(
        &mut self,
        caller: &mut Caller,
        (epoch, call_timeout): (Instant, Duration),
        progress: &Progress,
        cues: &mut mpsc::Receiver<Cue>,
    ) {
        let (mut statuses, _stop_polling) = self.start_polling();
        let (mut admitted, mut cued, mut polling) = (false, true, true);
        let mut holding = None;
        let mut buf = vec![0u8; DATAGRAM];
        let early = std::mem::take(&mut self.stashed);
        self.on_events(caller, early, epoch);
        loop {
            let ending = self.flush(caller);
            let stashed = std::mem::take(&mut self.stashed);
            self.on_events(caller, stashed, epoch);
            if !admitted && caller.is_admitted() {
                admitted = true;
                progress.call_admitted();
            }
            progress.track_holding(&mut holding, caller.is_holding());
            if ending != Ending::None || caller.is_done() {
                self.end(caller, ending).await;
                return;
            }
            let wake = (epoch + caller.poll_timeout().unwrap_or(call_timeout))
                .min(Instant::from_std(self.peer.deadline()));
            tokio::select! {
                r = self.socket.recv_from(&mut buf) => {
                    if let Ok((n, from)) = r {
                        let events = self.peer.receive(std::time::Instant::now(), from, &buf[..n]);
                        self.on_events(caller, events, epoch);
                    }
                }
                () = sleep_until(wake) => {
                    if std::time::Instant::now() >= self.peer.deadline() {
                        let events = self.peer.timeout(std::time::Instant::now());
                        self.on_events(caller, events, epoch);
                    }
                    caller.handle_timeout(epoch.elapsed());
                }
                polled = statuses.recv(), if polling => match polled {
                    Some(p) => self.on_poll(caller, p, epoch),
                    None => polling = false,
                },
                cue = cues.recv(), if cued => match cue {
                    Some(cue) => caller.handle_cue(epoch.elapsed(), cue),
                    None => cued = false,
                },
            }
        }
    }

    /// Polls the session's status in a task of its own, stopped with the
    /// guard.
    fn start_polling(&self) -> (mpsc::Receiver<Polled>, AbortOnDrop) {
        let (tx, rx) = mpsc::channel(STATUS_QUEUE);
        let poller = tokio::spawn(poll_status(self.signal.clone(), self.session.clone(), tx));
        (rx, AbortOnDrop(poller.abort_handle()))
    }

    /// The call is over: hang up unless the server already ended it or the
    /// caller vanished, then stop the peer.
    async fn end(&mut self, caller: &Caller, ending: Ending) {
        let needs_delete =
            ending == Ending::Close || (ending == Ending::None && !self.session_over);
        if needs_delete {
            self.hang_up().await;
        }
        self.peer.close();
        let s = self.peer.stats;
        tracing::debug!(
            outcome = caller.outcome().map(|o| o.label()),
            packets_in = s.packets_in,
            packets_out = s.packets_out,
            send_dropped = s.send_dropped,
            malformed = s.malformed,
            concealed = self.codec.concealed,
            late = self.codec.late,
            "WebRTC call ended"
        );
    }

    async fn hang_up(&mut self) {
        if let Err(e) = self.signal.hang_up(&self.session).await {
            tracing::debug!(error = %e, "WebRTC hang-up (DELETE) failed");
        }
        self.session_over = true;
    }

    /// Sends what the caller queued; says whether it asked to end.
    fn flush(&mut self, caller: &mut Caller) -> Ending {
        while let Some(tx) = caller.poll_transmit() {
            match tx {
                Transmit::Media {
                    frame,
                    timestamp_ms,
                } => self.send_frame(&frame, timestamp_ms * RTP_TICKS_PER_MS),
                // Nothing but audio travels on WebRTC's media path.
                Transmit::Text(_) | Transmit::Binary(_) => {}
                Transmit::Close => return Ending::Close,
                // No resume on WebRTC: a reconnect cue only drops.
                Transmit::Drop | Transmit::Reconnect { .. } => return Ending::Drop,
            }
        }
        Ending::None
    }

    /// One 20 ms frame out as Opus at RTP time `rtp`: the caller's media
    /// clock, so a frame it skipped leaves a gap (as a browser's capture
    /// overrun would) and a late one keeps its place.
    fn send_frame(&mut self, frame: &[u8], rtp: u64) {
        let now = Instant::now();
        match self.codec.encode(frame) {
            Ok(packet) => {
                let events = self.peer.write(now.into_std(), rtp, packet);
                self.stashed.extend(events);
            }
            Err(e) => tracing::debug!(error = %e, "Opus encode failed; frame not sent"),
        }
    }

    /// Hands the peer's events to the caller.
    fn on_events(&mut self, caller: &mut Caller, events: Vec<PeerEvent>, epoch: Instant) {
        for e in events {
            match e {
                PeerEvent::Media { ts, data } => {
                    for frame in self.codec.decode(ts, &data) {
                        caller.handle_binary(epoch.elapsed(), &frame);
                    }
                }
                PeerEvent::Failed(detail) => {
                    let err = LoadError::Socket {
                        stream: caller.ids().stream,
                        detail,
                    };
                    caller.handle_socket_error(epoch.elapsed(), &err);
                }
                PeerEvent::IceDisconnected => tracing::debug!("WebRTC ICE disconnected"),
                PeerEvent::Connected => {}
            }
        }
    }

    fn on_poll(&mut self, caller: &mut Caller, polled: Polled, epoch: Instant) {
        let now = epoch.elapsed();
        match polled {
            Polled::Status(json) => {
                self.session_over |= is_final(&json);
                caller.handle_text(now, &json);
            }
            Polled::Gone => {
                self.session_over = true;
                caller.handle_closed(now, None, "the session URL answered 404");
            }
            Polled::Failed(detail) => {
                let err = LoadError::Socket {
                    stream: caller.ids().stream,
                    detail: format!("{MAX_POLL_FAILURES} status polls failed, the last: {detail}"),
                };
                caller.handle_socket_error(now, &err);
            }
        }
    }
}

/// Whether a status JSON says the session is over.
fn is_final(json: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .and_then(|v| v.get("state").and_then(|s| s.as_str()).map(str::to_owned))
        .is_some_and(|s| s == "ended" || s == "refused")
}

/// Polls the session every [`STATUS_POLL`] until it is over, gone, or
/// [`MAX_POLL_FAILURES`] polls in a row failed; ends when the call stops
/// listening.
async fn poll_status(signal: Signal, session: reqwest::Url, tx: mpsc::Sender<Polled>) {
    let mut failures = 0;
    loop {
        tokio::time::sleep(STATUS_POLL).await;
        match signal.status(&session).await {
            Polled::Status(json) if is_final(&json) => {
                let _ = tx.send(Polled::Status(json)).await;
                return;
            }
            Polled::Status(json) => {
                failures = 0;
                // Full: dropped, the next poll says as much.
                if let Err(mpsc::error::TrySendError::Closed(_)) = tx.try_send(Polled::Status(json))
                {
                    return;
                }
            }
            Polled::Gone => {
                let _ = tx.send(Polled::Gone).await;
                return;
            }
            Polled::Failed(detail) => {
                failures += 1;
                if failures >= MAX_POLL_FAILURES {
                    let _ = tx.send(Polled::Failed(detail)).await;
                    return;
                }
            }
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
