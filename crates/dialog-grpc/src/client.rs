//! [`DialogClient`]: shared, lazily connected channels and `open`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};
use tracing::{Instrument, info, info_span, warn};

use crate::config::DialogConfig;
use crate::error::DialogError;
use crate::pb;
use crate::pb::dialog_client::DialogClient as PbClient;
use crate::session::{self, DialogEvents, DialogSession};

/// HTTP/2 PING interval while streams are open: a dialog service that
/// vanished without a FIN/RST is detected within interval + timeout, and
/// every open stream then ends with an error instead of hanging.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(20);
/// How long to wait for a PING acknowledgement before closing the connection.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The dialog service client. Create one per server and clone it freely:
/// clones share the same connections.
#[derive(Clone, Debug)]
pub struct DialogClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    endpoint: Endpoint,
    /// One slot per HTTP/2 connection; filled on first use so `new` needs no
    /// runtime and an idle server opens no connections.
    channels: Vec<OnceLock<Channel>>,
    /// Round-robin cursor over `channels`.
    next: AtomicUsize,
    open_timeout: Duration,
}

impl DialogClient {
    /// Validates the configuration. Connects nothing: connections are made
    /// by the first `open` that uses them.
    ///
    /// # Errors
    /// [`DialogError::InvalidConfig`] for an unparsable endpoint, zero
    /// channels or a zero timeout.
    pub fn new(cfg: &DialogConfig) -> Result<Self, DialogError> {
        let invalid = |reason: String| DialogError::InvalidConfig { reason };
        if cfg.channels == 0 {
            return Err(invalid("channels must be at least 1".to_owned()));
        }
        if cfg.open_timeout.is_zero() || cfg.connect_timeout.is_zero() {
            return Err(invalid("timeouts must be non-zero".to_owned()));
        }
        let endpoint = Endpoint::from_shared(cfg.endpoint.clone())
            .map_err(|e| invalid(format!("endpoint {:?}: {e}", cfg.endpoint)))?
            .connect_timeout(cfg.connect_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(false);
        let channels = (0..cfg.channels).map(|_| OnceLock::new()).collect();
        Ok(DialogClient {
            inner: Arc::new(Inner {
                endpoint,
                channels,
                next: AtomicUsize::new(0),
                open_timeout: cfg.open_timeout,
            }),
        })
    }

    /// Opens one `Converse` stream for a call: sends `SessionStart` first and
    /// returns once the service has accepted the stream (response headers).
    /// The service's greeting (turn 0) then arrives on [`DialogEvents`].
    ///
    /// Dropping both halves ends the RPC; [`DialogSession::end`] ends it
    /// politely.
    ///
    /// # Errors
    /// Everything is bounded by `open_timeout` ([`DialogError::OpenTimeout`]).
    /// A refusal at the service's cap is [`DialogError::Rejected`] with
    /// `RESOURCE_EXHAUSTED` (retryable, [`DialogError::is_capacity`]); a
    /// connection failure is [`DialogError::Unavailable`].
    pub async fn open(
        &self,
        call_id: &str,
        metadata: Vec<(String, String)>,
    ) -> Result<(DialogSession, DialogEvents), DialogError> {
        let span = info_span!("dialog", call_id);
        let after = self.inner.open_timeout;
        let opening = self.open_stream(call_id, metadata).instrument(span.clone());
        match tokio::time::timeout(after, opening).await {
            Ok(result) => result,
            Err(_) => {
                span.in_scope(|| warn!(?after, "dialog stream open timed out"));
                Err(DialogError::OpenTimeout {
                    call_id: call_id.to_owned(),
                    after,
                })
            }
        }
    }

    async fn open_stream(
        &self,
        call_id: &str,
        metadata: Vec<(String, String)>,
    ) -> Result<(DialogSession, DialogEvents), DialogError> {
        let (index, channel) = self.pick_channel();
        let (tx, rx) = mpsc::channel(session::REQUEST_CAPACITY);
        let start = pb::ClientMessage {
            kind: Some(pb::client_message::Kind::SessionStart(pb::SessionStart {
                call_id: call_id.to_owned(),
                caller_metadata: metadata.into_iter().collect::<HashMap<_, _>>(),
            })),
        };
        let call: Arc<str> = Arc::from(call_id);
        session::enqueue(&tx, &call, start)?;
        let stop = CancellationToken::new();
        let requests = session::request_stream(rx, stop.clone());
        let response = PbClient::new(channel).converse(requests).await;
        let stream = match response {
            Ok(resp) => resp.into_inner(),
            Err(status) => {
                let err = DialogError::from_open_status(call_id, &status);
                warn!(code = ?status.code(), message = status.message(), "dialog stream refused");
                return Err(err);
            }
        };
        info!(channel = index, "dialog stream open");
        Ok(session::spawn(call, tx, stream, stop))
    }

    /// The next channel, round-robin, connecting its slot lazily.
    fn pick_channel(&self) -> (usize, Channel) {
        let slots = &self.inner.channels;
        let index = self.inner.next.fetch_add(1, Ordering::Relaxed) % slots.len();
        let channel = slots[index]
            .get_or_init(|| self.inner.endpoint.connect_lazy())
            .clone();
        (index, channel)
    }
}
