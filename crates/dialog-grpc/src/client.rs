//! [`DialogClient`]: shared, lazily connected channels and `open`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};
use tracing::{Instrument, Span, info, info_span, warn};

use crate::config::DialogConfig;
use crate::error::DialogError;
use crate::pb;
use crate::pb::dialog_client::DialogClient as PbClient;
use crate::session::{self, DialogEvents, DialogSession};
use crate::stream::{Leg, Opener, StreamTask};

/// A jitter seed from the call id, so calls dropped together spread their
/// retries.
fn seed(call_id: &str) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    call_id.hash(&mut h);
    h.finish()
}

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
    reconnect: reconnect::ReconnectPolicy,
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
                reconnect: cfg.reconnect,
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
        let call: Arc<str> = Arc::from(call_id);
        let metadata: Arc<HashMap<String, String>> = Arc::new(metadata.into_iter().collect());
        let leg = self
            .open_leg(Arc::clone(&call), Arc::clone(&metadata), false)
            .await?;
        let client = self.clone();
        let opener_call = Arc::clone(&call);
        let open: Opener = Box::new(move |resume| {
            let (client, call, metadata) = (
                client.clone(),
                Arc::clone(&opener_call),
                Arc::clone(&metadata),
            );
            Box::pin(async move {
                let after = client.inner.open_timeout;
                match tokio::time::timeout(
                    after,
                    client.open_leg(Arc::clone(&call), metadata, resume),
                )
                .await
                {
                    Ok(result) => result,
                    Err(_) => Err(DialogError::OpenTimeout {
                        call_id: call.to_string(),
                        after,
                    }),
                }
            })
        });
        let (tx, rx) = mpsc::channel(session::REQUEST_CAPACITY);
        let (ev_tx, ev_rx) = mpsc::channel(session::EVENT_CAPACITY);
        let backoff = reconnect::Backoff::connected(self.inner.reconnect, seed(call_id));
        let task = StreamTask::new(Arc::clone(&call), open, rx, ev_tx, backoff);
        let tally = Arc::clone(&task.tally);
        tokio::spawn(task.run(leg).instrument(Span::current()));
        Ok((
            DialogSession {
                call_id: call,
                tx,
                tally,
            },
            DialogEvents { rx: ev_rx },
        ))
    }

    /// Opens one `Converse` stream: `SessionStart` first, then whatever the
    /// call queues.
    async fn open_leg(
        &self,
        call: Arc<str>,
        metadata: Arc<HashMap<String, String>>,
        resume: bool,
    ) -> Result<Leg, DialogError> {
        let (index, channel) = self.pick_channel();
        let (tx, rx) = mpsc::channel(session::REQUEST_CAPACITY);
        let start = pb::ClientMessage {
            kind: Some(pb::client_message::Kind::SessionStart(pb::SessionStart {
                call_id: call.to_string(),
                caller_metadata: (*metadata).clone(),
                resume,
            })),
        };
        session::enqueue(&tx, &call, start)?;
        let stop = CancellationToken::new();
        let requests = session::request_stream(rx, stop.clone());
        let response = PbClient::new(channel).converse(requests).await;
        let stream = match response {
            Ok(resp) => resp.into_inner(),
            Err(status) => {
                let err = DialogError::from_open_status(&call, &status);
                warn!(code = ?status.code(), message = status.message(), resume, "dialog stream refused");
                return Err(err);
            }
        };
        info!(channel = index, resume, "dialog stream open");
        Ok(Leg { tx, stream, stop })
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
