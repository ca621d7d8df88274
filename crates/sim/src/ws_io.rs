//! Socket plumbing shared by the simulators whose sockets are axum
//! WebSockets driven by a sans-IO core (the ElevenLabs and Cartesia TTS
//! simulators): bounded sends, the closing handshake, and sleeping until a
//! core's optional deadline. No protocol knowledge.

use std::time::{Duration, Instant};

use axum::extract::ws::{CloseFrame, Message, WebSocket};

/// A send that takes longer than this means the client stopped reading;
/// the socket is dropped rather than holding the task forever.
pub(crate) const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// After our close frame, how long we wait for the client's close reply so
/// the closing handshake completes cleanly.
pub(crate) const CLOSE_LINGER: Duration = Duration::from_secs(1);

/// Sleeps until `deadline`, or forever when there is none.
pub(crate) async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(tokio::time::Instant::from_std(t)).await,
        None => std::future::pending().await,
    }
}

/// Sends one message within [`SEND_TIMEOUT`]; false if it failed.
pub(crate) async fn send(ws: &mut WebSocket, msg: Message) -> bool {
    matches!(
        tokio::time::timeout(SEND_TIMEOUT, ws.send(msg)).await,
        Ok(Ok(()))
    )
}

/// Reads until the peer's close (or EOF), at most [`CLOSE_LINGER`].
pub(crate) async fn linger(ws: &mut WebSocket) {
    let drain = async {
        while let Some(Ok(msg)) = ws.recv().await {
            if matches!(msg, Message::Close(_)) {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(CLOSE_LINGER, drain).await;
}

pub(crate) fn close_message(code: u16, reason: &str) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: reason.into(),
    }))
}
