//! Opening one provider socket: the upgrade, bounded by `connect_timeout`,
//! with a refused upgrade reported by its HTTP status. Used by `connect`
//! and by every reconnect attempt.

use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::config::TtsConfig;
use crate::error::TtsError;
use crate::wire;

pub(crate) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Opens a socket for `cfg`.
///
/// # Errors
/// [`TtsError::InvalidConfig`], [`TtsError::ConnectTimeout`],
/// [`TtsError::Connect`], or [`TtsError::Rejected`] with the HTTP status.
pub(crate) async fn open(cfg: &TtsConfig) -> Result<Ws, TtsError> {
    let (url, request) = wire::upgrade_request(cfg)?;
    if url.starts_with("wss://") {
        // rustls needs a process-wide crypto provider; installing one that
        // is already installed is a harmless no-op error.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    // 8 KiB instead of tungstenite's 128 KiB read buffer: less memory per
    // socket and no 128 KiB zero-fill per read (audio chunks are a few KiB).
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .read_buffer_size(8 * 1024);
    let connecting = tokio_tungstenite::connect_async_with_config(request, Some(config), true);
    let limit = cfg.connect_timeout;
    match tokio::time::timeout(limit, connecting).await {
        Ok(Ok((ws, _response))) => Ok(ws),
        Ok(Err(WsError::Http(response))) => {
            let status = response.status().as_u16();
            let body = response
                .body()
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default();
            let body: String = body.chars().take(300).collect();
            tracing::warn!(status, %body, "tts upgrade refused");
            Err(TtsError::Rejected { status, body })
        }
        Ok(Err(e)) => Err(TtsError::Connect {
            url,
            message: e.to_string(),
        }),
        Err(_) => Err(TtsError::ConnectTimeout { url, after: limit }),
    }
}
