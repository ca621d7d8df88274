//! Opening the call's WebSocket the way the carrier does: Twilio signs the
//! upgrade, a partner sends its API key as a bearer token (as a WebRTC
//! caller does on its offer, [`crate::webrtc`]).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use sha1::Sha1;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::config::LoadConfig;
use crate::error::LoadError;
use crate::transport::Protocol;

/// The socket of one call.
pub type CallSocket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Longest refusal body kept in a record.
const MAX_BODY_CHARS: usize = 200;

/// Read buffer of a call's socket. tungstenite zero-fills the whole buffer
/// before every read, and its default is 128 KiB: with ~300-byte media
/// messages arriving every 20 ms per call, that memset dominated the
/// generator's CPU at a few hundred calls. Larger frames still work (the
/// buffer grows for them); this only sizes the per-read chunk.
const READ_BUFFER_BYTES: usize = 8 * 1024;

/// `X-Twilio-Signature` for a WebSocket upgrade: base64(HMAC-SHA1(token, url)),
/// with no parameters appended.
///
/// # Errors
/// Never in practice (HMAC takes keys of any length); reported as an
/// invalid `auth_token` rather than assumed.
pub fn twilio_signature(auth_token: &str, url: &str) -> Result<String, LoadError> {
    let mut mac = Hmac::<Sha1>::new_from_slice(auth_token.as_bytes()).map_err(|e| {
        LoadError::InvalidConfig {
            field: "auth_token",
            reason: e.to_string(),
        }
    })?;
    mac.update(url.as_bytes());
    Ok(B64.encode(mac.finalize().into_bytes()))
}

/// How a call authenticates its upgrade.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// No credentials.
    None,
    /// Twilio: `X-Twilio-Signature` made with this auth token.
    TwilioSignature(String),
    /// Partner: `Authorization: Bearer <key>`.
    Bearer(String),
}

impl Auth {
    /// The credentials a run's calls present.
    pub fn for_run(cfg: &LoadConfig) -> Auth {
        let secret = match cfg.protocol {
            Protocol::Twilio => cfg.auth_token.clone().map(Auth::TwilioSignature),
            Protocol::Partner | Protocol::Webrtc => cfg.partner_key.clone().map(Auth::Bearer),
        };
        secret.unwrap_or(Auth::None)
    }
}

// Secrets stay out of logs and panics.
impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Auth::None => "Auth::None",
            Auth::TwilioSignature(_) => "Auth::TwilioSignature(..)",
            Auth::Bearer(_) => "Auth::Bearer(..)",
        })
    }
}

/// Installs rustls's `ring` provider unless the process already has one:
/// `wss://` handshakes panic inside tokio-tungstenite without it.
pub fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing the race to another installer is fine: one is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Plain HTTP/1.1 upgrade, no subprotocol, optionally signed (Twilio).
///
/// # Errors
/// As [`connect_with`].
pub async fn connect(url: &str, auth_token: Option<&str>) -> Result<CallSocket, LoadError> {
    let auth = auth_token.map_or(Auth::None, |t| Auth::TwilioSignature(t.to_string()));
    connect_with(url, &auth).await
}

/// Plain HTTP/1.1 upgrade, no subprotocol, with `auth`'s header.
///
/// # Errors
/// [`LoadError::Refused`] when the server answers with an HTTP status,
/// [`LoadError::Connect`] for anything else.
pub async fn connect_with(url: &str, auth: &Auth) -> Result<CallSocket, LoadError> {
    Ok(connect_routed(url, auth, None).await?.0)
}

/// A partner call's resume: its token and the route its first upgrade's
/// response named (`Callgate-Route`), sent back so a balancer can reach
/// the instance that holds the call.
#[derive(Debug, Clone, Copy)]
pub struct Resume<'a> {
    pub token: &'a str,
    pub route: Option<&'a str>,
}

/// The upgrade as [`connect_with`] makes it — or, given `resume`, a partner
/// resume (`Callgate-Resume`, and `Callgate-Route` when known; no `start`
/// follows it: docs/partner-protocol.md, "Resuming a call"). Returns the
/// socket and the `Callgate-Route` the server's 101 named, if any.
///
/// # Errors
/// As [`connect_with`]; a refused resume is [`LoadError::Refused`] with
/// the server's reason.
pub async fn connect_routed(
    url: &str,
    auth: &Auth,
    resume: Option<Resume<'_>>,
) -> Result<(CallSocket, Option<String>), LoadError> {
    let failed = |detail: String| LoadError::Connect {
        url: url.to_string(),
        detail,
    };
    let mut request = url
        .into_client_request()
        .map_err(|e| failed(e.to_string()))?;
    let header = match auth {
        Auth::None => None,
        Auth::TwilioSignature(token) => Some(("X-Twilio-Signature", twilio_signature(token, url)?)),
        Auth::Bearer(key) => Some(("Authorization", format!("Bearer {key}"))),
    };
    if let Some((name, value)) = header {
        // The value is a secret: the error names the header, not the value.
        let value = http::HeaderValue::from_str(&value)
            .map_err(|_| failed(format!("{name} is not a valid header value")))?;
        request.headers_mut().insert(name, value);
    }
    if let Some(r) = resume {
        // The token is a secret too: never in the error.
        let value = http::HeaderValue::from_str(r.token)
            .map_err(|_| failed("the resume token is not a valid header value".into()))?;
        request.headers_mut().insert("Callgate-Resume", value);
        if let Some(route) = r.route.and_then(|v| http::HeaderValue::from_str(v).ok()) {
            request.headers_mut().insert("Callgate-Route", route);
        }
    }
    let config = WebSocketConfig::default().read_buffer_size(READ_BUFFER_BYTES);
    match tokio_tungstenite::connect_async_with_config(request, Some(config), false).await {
        Ok((socket, response)) => {
            let route = response
                .headers()
                .get("callgate-route")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            Ok((socket, route))
        }
        Err(WsError::Http(response)) => {
            let status = response.status();
            let body = response
                .body()
                .as_deref()
                .map(|b| {
                    String::from_utf8_lossy(b)
                        .trim()
                        .chars()
                        .take(MAX_BODY_CHARS)
                        .collect()
                })
                .filter(|b: &String| !b.is_empty())
                .unwrap_or_else(|| status.canonical_reason().unwrap_or("").to_string());
            Err(LoadError::Refused {
                url: url.to_string(),
                status: status.as_u16(),
                body,
            })
        }
        Err(e) => Err(failed(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_is_base64_hmac_sha1_of_the_url() {
        // RFC 2202-style reference: HMAC-SHA1("key", "The quick brown fox…")
        // = de7c9b85b8b78aa6bc8a7a36f70a90701c9db4d9.
        let sig = twilio_signature("key", "The quick brown fox jumps over the lazy dog").unwrap();
        assert_eq!(sig, "3nybhbi3iqa8ino29wqQcBydtNk=");
    }
}
