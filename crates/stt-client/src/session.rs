//! Opening a session, and the two halves the caller holds: [`SttHandle`]
//! (send side) and [`SttEvents`] (receive side).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::timeout;
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tracing::Instrument;

use crate::actor::{Actor, Command, Shared};
use crate::event::{CloseSummary, SttEvent};
use crate::replay::Replay;
use crate::{SttConfig, SttError};

/// Audio frames queued for the socket: 100 × 20 ms = 2 s. When full, the
/// newest frame is dropped and counted ([`SttHandle::dropped_audio_frames`]):
/// the media path must never wait on STT, and a provider 2 s behind has
/// already failed the conversation.
pub const AUDIO_CAPACITY: usize = 100;
/// Events queued for the consumer (minutes of conversation). When full,
/// interim results and `SpeechStarted` are dropped (a later interim or the
/// final supersedes them); finals, `UtteranceEnd`, `Metadata`, errors and
/// `Closed` wait up to 2 s for room, then are dropped; both are counted.
pub const EVENT_CAPACITY: usize = 256;
/// Control commands queued for the actor. When full, a `finalize()` is
/// dropped (one already queued flushes the same audio).
const COMMAND_CAPACITY: usize = 8;
/// Slack on top of `close_timeout` for the actor to report back.
const CLOSE_REPLY_MARGIN: Duration = Duration::from_secs(2);

/// The send side of a session. Dropping it without [`SttHandle::close`]
/// still closes the stream (bounded by `close_timeout`).
#[derive(Debug)]
pub struct SttHandle {
    label: Arc<str>,
    request_id: Option<String>,
    audio: mpsc::Sender<Vec<u8>>,
    commands: mpsc::Sender<Command>,
    shared: Arc<Shared>,
    close_timeout: Duration,
}

/// The receive side of a session: events in provider order, ending with
/// exactly one [`SttEvent::Closed`], then `None`.
#[derive(Debug)]
pub struct SttEvents {
    rx: mpsc::Receiver<SttEvent>,
}

impl SttEvents {
    /// The next event; `None` after `Closed` has been received.
    pub async fn recv(&mut self) -> Option<SttEvent> {
        self.rx.recv().await
    }
}

/// Opens a streaming session. `label` names it in logs and errors (e.g. the
/// call id).
///
/// # Errors
/// [`SttError::InvalidConfig`] before any I/O; [`SttError::ConnectTimeout`]
/// when TCP + TLS + upgrade exceed `connect_timeout`;
/// [`SttError::Rejected`] when the provider answers with an HTTP error
/// (429 is retryable and [`SttError::is_capacity`]); [`SttError::Connect`]
/// for network and handshake failures.
pub async fn connect(cfg: &SttConfig, label: &str) -> Result<(SttHandle, SttEvents), SttError> {
    cfg.validate()?;
    let span = tracing::info_span!("stt_session", label);
    let (ws, request_id) = open(cfg).instrument(span.clone()).await?;
    let (audio_tx, audio_rx) = mpsc::channel(AUDIO_CAPACITY);
    let (cmd_tx, cmd_rx) = mpsc::channel(COMMAND_CAPACITY);
    let (event_tx, event_rx) = mpsc::channel(EVENT_CAPACITY);
    let shared = Arc::new(Shared::default());
    let actor = Actor {
        ws,
        audio: audio_rx,
        commands: cmd_rx,
        events: event_tx,
        shared: Arc::clone(&shared),
        replay: Replay::new(cfg.encoding, cfg.sample_rate),
        backoff: reconnect::Backoff::connected(cfg.reconnect, seed(label)),
        cfg: cfg.clone(),
    };
    tokio::spawn(actor.run().instrument(span));
    let handle = SttHandle {
        label: label.into(),
        request_id,
        audio: audio_tx,
        commands: cmd_tx,
        shared,
        close_timeout: cfg.close_timeout,
    };
    Ok((handle, SttEvents { rx: event_rx }))
}

/// A jitter seed from the session label, so calls dropped together spread
/// their retries.
fn seed(label: &str) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    label.hash(&mut h);
    h.finish()
}

pub(crate) async fn open(cfg: &SttConfig) -> Result<(crate::actor::Ws, Option<String>), SttError> {
    let mut request =
        cfg.request_url()
            .into_client_request()
            .map_err(|e| SttError::InvalidConfig {
                field: "url",
                reason: e.to_string(),
            })?;
    if let Some(key) = &cfg.api_key {
        let value = http::HeaderValue::from_str(&format!("Token {key}")).map_err(|_| {
            SttError::InvalidConfig {
                field: "api_key",
                reason: "not a valid header value".to_owned(),
            }
        })?;
        request
            .headers_mut()
            .insert(http::header::AUTHORIZATION, value);
    }
    if cfg.url.starts_with("wss://") {
        ensure_crypto_provider();
    }
    // Nagle off: 20 ms audio frames must not wait for each other.
    // Messages are small (160-byte frames out, JSON results in): an 8 KiB
    // read buffer instead of tungstenite's 128 KiB saves memory and the
    // zero-fill on every read, which at thousands of streams is real CPU.
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .read_buffer_size(8 * 1024);
    let connecting = tokio_tungstenite::connect_async_with_config(request, Some(config), true);
    let (ws, response) = match timeout(cfg.connect_timeout, connecting).await {
        Ok(Ok(done)) => done,
        Ok(Err(e)) => {
            let err = connect_error(&cfg.url, e);
            tracing::warn!(error = %err, "stt connect failed");
            return Err(err);
        }
        Err(_) => {
            tracing::warn!(timeout = ?cfg.connect_timeout, "stt connect timed out");
            return Err(SttError::ConnectTimeout {
                url: cfg.url.clone(),
                timeout: cfg.connect_timeout,
            });
        }
    };
    let request_id = response
        .headers()
        .get("dg-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    tracing::info!(
        request_id = request_id.as_deref().unwrap_or("-"),
        "stt session connected"
    );
    Ok((ws, request_id))
}

/// rustls needs a process-wide crypto provider; install the `ring` one
/// unless the application already chose one.
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing the race to another installer is fine: one is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn connect_error(url: &str, e: tungstenite::Error) -> SttError {
    match e {
        tungstenite::Error::Http(response) => {
            let body = response.body().as_deref().unwrap_or_default();
            // Deepgram repeats the refusal in a `dg-error` header, which
            // survives proxies that drop the body.
            let header = response
                .headers()
                .get("dg-error")
                .and_then(|v| v.to_str().ok())
                .map(str::as_bytes);
            let message = match header {
                Some(h) if body.is_empty() => rejection_message(h),
                _ => rejection_message(body),
            };
            SttError::Rejected {
                url: url.to_owned(),
                status: response.status().as_u16(),
                message,
            }
        }
        tungstenite::Error::Url(reason) => SttError::InvalidConfig {
            field: "url",
            reason: reason.to_string(),
        },
        other => SttError::Connect {
            url: url.to_owned(),
            source: Box::new(other),
        },
    }
}

/// Deepgram explains refusals as `{"err_code":…,"err_msg":…}`; fall back to
/// the start of the body.
fn rejection_message(body: &[u8]) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let field = |k: &str| {
        parsed
            .as_ref()
            .and_then(|v| v.get(k))
            .and_then(|v| v.as_str())
    };
    match (field("err_code"), field("err_msg")) {
        (Some(code), Some(msg)) => format!("{code}: {msg}"),
        (None, Some(msg)) => msg.to_owned(),
        _ => String::from_utf8_lossy(body).chars().take(200).collect(),
    }
}

impl SttHandle {
    /// Queues one audio frame; never blocks. An empty frame is ignored (the
    /// provider would take it as a close). When the queue is full the frame
    /// is dropped and counted.
    ///
    /// # Errors
    /// [`SttError::SessionClosed`] once the session has ended.
    pub fn send_audio(&self, frame: Vec<u8>) -> Result<(), SttError> {
        if frame.is_empty() {
            return Ok(());
        }
        match self.audio.try_send(frame) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.shared.dropped_audio.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(self.closed()),
        }
    }

    /// Asks the provider to finalize the audio sent so far (results arrive
    /// with `from_finalize`); the stream stays open. Never blocks.
    ///
    /// # Errors
    /// [`SttError::SessionClosed`] once the session has ended.
    pub fn finalize(&self) -> Result<(), SttError> {
        match self.commands.try_send(Command::Finalize) {
            Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(self.closed()),
        }
    }

    /// Sends `CloseStream` after the queued audio and waits, bounded by
    /// `close_timeout`, for the provider's final results, `Metadata` and
    /// close. If the session had already ended, returns how it ended.
    ///
    /// # Errors
    /// [`SttError::CloseTimeout`] when the actor did not report in time.
    pub async fn close(self) -> Result<CloseSummary, SttError> {
        let bound = self.close_timeout + CLOSE_REPLY_MARGIN;
        let (tx, rx) = oneshot::channel();
        let asked = async {
            self.commands.send(Command::Close(tx)).await.ok()?;
            rx.await.ok()
        };
        match timeout(bound, asked).await {
            Ok(Some(summary)) => Ok(summary),
            // The actor ended before it saw the request.
            Ok(None) => self
                .shared
                .finished
                .get()
                .cloned()
                .ok_or_else(|| self.closed()),
            Err(_) => Err(SttError::CloseTimeout {
                label: self.label.to_string(),
                timeout: bound,
            }),
        }
    }

    /// Audio frames dropped because the queue was full.
    pub fn dropped_audio_frames(&self) -> u64 {
        self.shared.dropped_audio.load(Ordering::Relaxed)
    }

    /// Mid-call reconnects of this session so far (drops, attempts,
    /// successes, capacity refusals, down time).
    pub fn reconnects(&self) -> reconnect::Tally {
        *self
            .shared
            .reconnects
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Events dropped because the consumer did not keep up.
    pub fn dropped_events(&self) -> u64 {
        self.shared.dropped_events.load(Ordering::Relaxed)
    }

    /// Whether the session has ended.
    pub fn is_closed(&self) -> bool {
        self.audio.is_closed()
    }

    /// The provider's request id (`dg-request-id` header), if it sent one.
    pub fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }

    /// The label given to [`connect`].
    pub fn label(&self) -> &str {
        &self.label
    }

    fn closed(&self) -> SttError {
        SttError::SessionClosed {
            label: self.label.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejection_bodies_are_summarised() {
        let body = br#"{"err_code":"TOO_MANY_REQUESTS","err_msg":"slow down"}"#;
        assert_eq!(rejection_message(body), "TOO_MANY_REQUESTS: slow down");
        assert_eq!(rejection_message(b"plain text"), "plain text");
    }

    #[test]
    fn a_refusal_explained_only_in_dg_error_keeps_its_reason() {
        let response = http::Response::builder()
            .status(503)
            .header(
                "dg-error",
                r#"{"err_code":"SERVICE_UNAVAILABLE","err_msg":"down for maintenance"}"#,
            )
            .body(None)
            .unwrap();
        let err = connect_error("ws://x", tungstenite::Error::Http(Box::new(response)));
        match err {
            SttError::Rejected {
                status, message, ..
            } => {
                assert_eq!(status, 503);
                assert_eq!(message, "SERVICE_UNAVAILABLE: down for maintenance");
            }
            other => panic!("{other:?}"),
        }
    }

    /// A handle whose actor never runs: the queue fills and stays full.
    fn detached() -> (SttHandle, mpsc::Receiver<Vec<u8>>, mpsc::Receiver<Command>) {
        let (audio, audio_rx) = mpsc::channel(AUDIO_CAPACITY);
        let (commands, cmd_rx) = mpsc::channel(COMMAND_CAPACITY);
        let handle = SttHandle {
            label: "t".into(),
            request_id: None,
            audio,
            commands,
            shared: Arc::new(Shared::default()),
            close_timeout: Duration::from_secs(1),
        };
        (handle, audio_rx, cmd_rx)
    }

    #[test]
    fn a_full_audio_queue_drops_the_newest_frame_without_blocking() {
        let (h, mut rx, _cmd) = detached();
        for i in 0..AUDIO_CAPACITY + 5 {
            h.send_audio(vec![i as u8; 160]).unwrap();
        }
        h.send_audio(Vec::new()).unwrap();
        assert_eq!(h.dropped_audio_frames(), 5);
        // The oldest frames were kept, in order; the empty one never queued.
        assert_eq!(rx.try_recv().unwrap()[0], 0);
        let mut n = 1;
        while rx.try_recv().is_ok() {
            n += 1;
        }
        assert_eq!(n, AUDIO_CAPACITY);
    }

    #[tokio::test]
    async fn a_session_whose_actor_is_gone_reports_closed() {
        let (h, rx, cmd) = detached();
        drop((rx, cmd));
        assert!(h.is_closed());
        assert!(matches!(
            h.send_audio(vec![1]),
            Err(SttError::SessionClosed { .. })
        ));
        assert!(matches!(h.finalize(), Err(SttError::SessionClosed { .. })));
        assert!(matches!(
            h.close().await,
            Err(SttError::SessionClosed { .. })
        ));
    }
}
