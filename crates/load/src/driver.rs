//! The async shell around one [`Caller`]: moves bytes, sleeps to deadlines.
//! (A WebRTC call has its own shell, [`crate::webrtc`]; [`place_call`]
//! picks it by the plan's protocol.)
//!
//! It reads the clock once per wake-up and hands the caller a `Duration`
//! since dialling; all protocol decisions are the caller's.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::time::{Instant, sleep_until, timeout};
use tokio_tungstenite::tungstenite::Message;
use tracing::Instrument;

use crate::caller::{CallPlan, Caller, Cue, Transmit, millis};
use crate::connect::{Auth, CallSocket, Resume, connect_routed};
use crate::error::LoadError;
use crate::progress::Progress;
use crate::record::{CallRecord, Outcome};
use crate::transport::CallProtocol;

/// Longest wait for the TCP connect plus the WebSocket handshake.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for a batch of frames to be accepted by the socket: longer
/// means the server stopped reading, which Twilio would notice too.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for the closing handshake after the call has ended.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Where and how to dial (WebRTC: the offer endpoint,
/// `http://host:port/v1/webrtc`).
#[derive(Debug, Clone)]
pub struct Dial {
    pub url: String,
    pub auth: Auth,
}

/// How many cues may wait for one caller. A drill sends a caller at most
/// three (speak, drop or hang up, and a final hang-up); a full queue makes
/// the sender wait, which only a stuck caller could cause.
pub const CUE_QUEUE: usize = 4;

/// Places one call and returns what it recorded. Never panics on a bad server.
pub async fn place_call(plan: CallPlan, dial: &Dial, progress: &Arc<Progress>) -> CallRecord {
    // No sender: the caller follows its script alone.
    let (_, cues) = tokio::sync::mpsc::channel(1);
    place_cued_call(plan, dial, progress, cues).await
}

/// Places one call that also takes [`Cue`]s from outside its script (a
/// drill's orchestrator). Once every sender is gone the caller runs on its
/// script (and its call timeout) alone.
pub async fn place_cued_call(
    plan: CallPlan,
    dial: &Dial,
    progress: &Arc<Progress>,
    cues: tokio::sync::mpsc::Receiver<Cue>,
) -> CallRecord {
    let span = tracing::info_span!("call", index = plan.index, call_sid = %plan.ids.call);
    if let CallProtocol::Webrtc { .. } = plan.protocol {
        return crate::webrtc::place(plan, dial, progress, cues)
            .instrument(span)
            .await;
    }
    place(plan, dial, progress, cues).instrument(span).await
}

async fn place(
    plan: CallPlan,
    dial: &Dial,
    progress: &Arc<Progress>,
    mut cues: tokio::sync::mpsc::Receiver<Cue>,
) -> CallRecord {
    let epoch = Instant::now();
    let call_timeout = plan.call_timeout;
    let mut caller = Caller::new(plan);
    progress.call_started();
    let limit = CONNECT_TIMEOUT.min(call_timeout);
    match timeout(limit, connect_routed(&dial.url, &dial.auth, None)).await {
        Ok(Ok((socket, route))) => {
            tracing::debug!("connected");
            let _active = progress.connected();
            caller.handle_open(epoch.elapsed());
            drive(
                &mut caller,
                socket,
                (dial, route),
                epoch,
                call_timeout,
                progress,
                &mut cues,
            )
            .await;
        }
        Ok(Err(err)) => caller.handle_connect_error(epoch.elapsed(), &err),
        Err(_) => {
            let err = LoadError::ConnectTimeout {
                url: dial.url.clone(),
                after_ms: millis(limit),
            };
            caller.handle_connect_error(epoch.elapsed(), &err);
        }
    }
    let record = caller.into_record(epoch.elapsed());
    log_end(&record);
    progress.call_finished(&record.outcome);
    record
}

async fn drive(
    caller: &mut Caller,
    mut socket: CallSocket,
    (dial, mut route): (&Dial, Option<String>),
    epoch: Instant,
    call_timeout: Duration,
    progress: &Progress,
    cues: &mut tokio::sync::mpsc::Receiver<Cue>,
) {
    let stream = caller.ids().stream;
    let mut admitted = false;
    let mut cued = true;
    let mut holding = None;
    loop {
        let close = match flush(caller, &mut socket).await {
            Ok(Ending::Drop) => {
                // Vanish: the TCP connection closes with no closing handshake.
                drop(socket);
                return;
            }
            Ok(Ending::Reconnect { token, after }) => {
                drop(socket);
                match resume(dial, &token, route.as_deref(), after).await {
                    Ok((s, new_route)) => {
                        tracing::debug!("resumed on a new connection");
                        socket = s;
                        route = new_route.or(route);
                        continue;
                    }
                    Err(err) => {
                        caller.handle_resume_failed(epoch.elapsed(), &err);
                        return;
                    }
                }
            }
            Ok(Ending::Close) => true,
            Ok(Ending::None) => false,
            Err(detail) => {
                let err = LoadError::Socket { stream, detail };
                caller.handle_socket_error(epoch.elapsed(), &err);
                return;
            }
        };
        if !admitted && caller.is_admitted() {
            admitted = true;
            progress.call_admitted();
        }
        progress.track_holding(&mut holding, caller.is_holding());
        if close || caller.is_done() {
            close_socket(&mut socket).await;
            return;
        }
        // A live caller always has a deadline; the fallback only guards
        // against a wait without one.
        let wake = epoch + caller.poll_timeout().unwrap_or(call_timeout);
        tokio::select! {
            msg = socket.next() => receive(caller, msg, epoch.elapsed()),
            () = sleep_until(wake) => caller.handle_timeout(epoch.elapsed()),
            cue = cues.recv(), if cued => match cue {
                Some(cue) => caller.handle_cue(epoch.elapsed(), cue),
                None => cued = false,
            },
        }
    }
}

type Incoming = Option<Result<Message, tokio_tungstenite::tungstenite::Error>>;

fn receive(caller: &mut Caller, msg: Incoming, now: Duration) {
    match msg {
        Some(Ok(Message::Text(text))) => caller.handle_text(now, text.as_str()),
        Some(Ok(Message::Binary(bytes))) => caller.handle_binary(now, &bytes),
        Some(Ok(Message::Close(frame))) => {
            let (code, reason) = frame.map_or((None, String::new()), |f| {
                (Some(u16::from(f.code)), f.reason.as_str().to_string())
            });
            caller.handle_closed(now, code, &reason);
        }
        // Pings are answered by tungstenite itself.
        Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
        Some(Err(e)) => {
            let stream = caller.ids().stream;
            let err = LoadError::Socket {
                stream,
                detail: e.to_string(),
            };
            caller.handle_socket_error(now, &err);
        }
        None => caller.handle_closed(now, None, "connection ended without a close frame"),
    }
}

/// After `after`, a new connection presenting `token` and the call's route
/// (bounded like a dial).
async fn resume(
    dial: &Dial,
    token: &str,
    route: Option<&str>,
    after: Duration,
) -> Result<(CallSocket, Option<String>), LoadError> {
    tokio::time::sleep(after).await;
    let how = Resume { token, route };
    match timeout(
        CONNECT_TIMEOUT,
        connect_routed(&dial.url, &dial.auth, Some(how)),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => Err(LoadError::ConnectTimeout {
            url: dial.url.clone(),
            after_ms: millis(CONNECT_TIMEOUT),
        }),
    }
}

/// What the caller asked for after its frames.
enum Ending {
    None,
    Close,
    Drop,
    Reconnect { token: String, after: Duration },
}

/// Sends everything the caller queued, and says whether it asked to close
/// or to drop the connection.
async fn flush(caller: &mut Caller, socket: &mut CallSocket) -> Result<Ending, String> {
    let mut frames = Vec::new();
    let mut close = Ending::None;
    while let Some(tx) = caller.poll_transmit() {
        match tx {
            Transmit::Text(text) => frames.push(Message::text(text)),
            Transmit::Binary(bytes) | Transmit::Media { frame: bytes, .. } => {
                frames.push(Message::binary(bytes))
            }
            Transmit::Close => {
                close = Ending::Close;
                break;
            }
            Transmit::Drop => return Ok(Ending::Drop),
            Transmit::Reconnect { token, after } => {
                // What was queued before it still goes on the old socket.
                close = Ending::Reconnect { token, after };
                break;
            }
        }
    }
    if frames.is_empty() {
        return Ok(close);
    }
    let send = async {
        for frame in frames {
            socket.feed(frame).await?;
        }
        socket.flush().await
    };
    match timeout(SEND_TIMEOUT, send).await {
        Ok(Ok(())) => Ok(close),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("send stalled for {} ms", millis(SEND_TIMEOUT))),
    }
}

/// Closes with 1000 and waits briefly for the server's side of the handshake.
async fn close_socket(socket: &mut CallSocket) {
    let handshake = async {
        // Errors here mean the socket is already gone, which is the goal.
        let _ = socket.close(None).await;
        while let Some(Ok(_)) = socket.next().await {}
    };
    let _ = timeout(CLOSE_TIMEOUT, handshake).await;
}

pub(crate) fn log_end(record: &CallRecord) {
    let outcome = record.outcome.label();
    match &record.outcome {
        Outcome::Failed { reason } => tracing::warn!(outcome, %reason, "call failed"),
        Outcome::Silent { phase } => {
            tracing::warn!(outcome, %phase, end = %record.end_reason, "call went silent")
        }
        Outcome::Rejected { how, reason, .. } => {
            tracing::info!(outcome, %how, %reason, "call rejected")
        }
        Outcome::Unauthorized { status, reason } => {
            tracing::warn!(outcome, status, %reason, "upgrade unauthorized")
        }
        _ => tracing::info!(outcome, duration_ms = record.duration_ms, "call ended"),
    }
}
