//! WebRTC signalling the way `docs/webrtc.md` asks a client to do it:
//! `POST` the offer (`application/sdp`, `Authorization: Bearer <key>` when
//! the run has a partner key), take the `201`'s answer and `Location`,
//! poll the session URL, `DELETE` it to hang up.
//!
//! What it is: a small client over one `reqwest::Client` per call (its
//! keep-alive connection carries the POST, every poll and the DELETE, as a
//! browser's would). Every body it reads is bounded ([`MAX_BODY`]); every
//! request has a deadline.
//!
//! What it never does: retry (a refusal is the call's outcome), follow
//! redirects, or parse more of an answer than str0m needs.
//!
//! How to drive it: [`Signal::new`] for the offer endpoint,
//! [`Signal::offer`] once, then [`Signal::status`] every 500 ms and
//! [`Signal::hang_up`] at the end.

use std::time::Duration;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, LOCATION};
use reqwest::{Client, StatusCode, Url};

use crate::connect::Auth;
use crate::error::LoadError;

/// Largest answer or status body read (an audio answer is ~1 KiB).
pub const MAX_BODY: usize = 64 * 1024;
/// Deadline of one status poll or the hang-up.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest refusal body kept in a record.
const MAX_REASON_CHARS: usize = 200;

/// The server took the offer.
#[derive(Debug, Clone)]
pub struct Answered {
    pub sdp: String,
    /// The session URL (`Location`, resolved against the POST's URL).
    pub session: Url,
}

/// What one status poll found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Polled {
    /// The status JSON, as the server sent it.
    Status(String),
    /// `404`: the server no longer knows the session.
    Gone,
    /// No answer, or not one a client can use.
    Failed(String),
}

/// One call's signalling client.
#[derive(Debug, Clone)]
pub struct Signal {
    http: Client,
    endpoint: Url,
    bearer: Option<String>,
}

impl Signal {
    /// A client for the offer endpoint `url`.
    ///
    /// # Errors
    /// [`LoadError::Connect`] for a URL that is not HTTP(S), or a client
    /// that could not be built.
    pub fn new(url: &str, auth: &Auth) -> Result<Signal, LoadError> {
        let failed = |detail: String| LoadError::Connect {
            url: url.to_string(),
            detail,
        };
        let endpoint = Url::parse(url).map_err(|e| failed(e.to_string()))?;
        if !matches!(endpoint.scheme(), "http" | "https") {
            return Err(failed("a WebRTC offer is POSTed over http(s)".into()));
        }
        crate::connect::ensure_crypto_provider();
        let http = Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| failed(format!("HTTP client: {e}")))?;
        let bearer = match auth {
            Auth::Bearer(key) => Some(format!("Bearer {key}")),
            Auth::None | Auth::TwilioSignature(_) => None,
        };
        Ok(Signal {
            http,
            endpoint,
            bearer,
        })
    }

    /// The offer endpoint.
    pub fn endpoint(&self) -> &Url {
        &self.endpoint
    }

    /// The server's address (for the route our media socket takes).
    pub async fn server_addr(&self) -> Option<std::net::SocketAddr> {
        let host = self.endpoint.host_str()?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = self.endpoint.port_or_known_default()?;
        tokio::net::lookup_host((host, port)).await.ok()?.next()
    }

    fn authorized(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.bearer {
            Some(v) => req.header(AUTHORIZATION, v),
            None => req,
        }
    }

    /// POSTs the offer.
    ///
    /// # Errors
    /// [`LoadError::Refused`] for any status but `201` (a `503` refusal's
    /// body is its JSON `reason`), [`LoadError::Connect`] when the request
    /// failed or the `201` has no usable `Location`.
    pub async fn offer(&self, sdp: String) -> Result<Answered, LoadError> {
        let url = self.endpoint.to_string();
        let failed = |detail: String| LoadError::Connect {
            url: url.clone(),
            detail,
        };
        let req = self
            .http
            .post(self.endpoint.clone())
            .header(CONTENT_TYPE, "application/sdp")
            .body(sdp);
        let resp = self
            .authorized(req)
            .send()
            .await
            .map_err(|e| failed(e.to_string()))?;
        let status = resp.status();
        let location = resp
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = read_capped(resp).await.map_err(failed)?;
        if status != StatusCode::CREATED {
            return Err(LoadError::Refused {
                url,
                status: status.as_u16(),
                body: refusal(status, &body),
            });
        }
        let location = location.ok_or_else(|| failed("201 without Location".into()))?;
        let session = self
            .endpoint
            .join(&location)
            .map_err(|e| failed(format!("Location {location:?}: {e}")))?;
        Ok(Answered { sdp: body, session })
    }

    /// One `GET` of the session's status.
    pub async fn status(&self, session: &Url) -> Polled {
        let req = self.http.get(session.clone()).timeout(REQUEST_TIMEOUT);
        let resp = match self.authorized(req).send().await {
            Ok(r) => r,
            Err(e) => return Polled::Failed(e.to_string()),
        };
        match resp.status() {
            StatusCode::OK => match read_capped(resp).await {
                Ok(body) => Polled::Status(body),
                Err(e) => Polled::Failed(e),
            },
            StatusCode::NOT_FOUND => Polled::Gone,
            other => Polled::Failed(format!("status poll answered HTTP {}", other.as_u16())),
        }
    }

    /// Hangs up: `DELETE` on the session URL.
    ///
    /// # Errors
    /// The request failed or was answered with anything but `200`/`404`.
    pub async fn hang_up(&self, session: &Url) -> Result<(), String> {
        let req = self.http.delete(session.clone()).timeout(REQUEST_TIMEOUT);
        let resp = self
            .authorized(req)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        match resp.status() {
            StatusCode::OK | StatusCode::NOT_FOUND => Ok(()),
            other => Err(format!("DELETE answered HTTP {}", other.as_u16())),
        }
    }
}

/// The body, at most [`MAX_BODY`] bytes of it.
async fn read_capped(mut resp: reqwest::Response) -> Result<String, String> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(format!("response body over {MAX_BODY} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// What a refused offer's record says: the JSON `reason` of a refusal
/// (`{"error":"refused","reason":"queue_full",…}`), else the `detail` or
/// `error`, else the body, else the status's name.
fn refusal(status: StatusCode, body: &str) -> String {
    let json: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let field = |k: &str| {
        json.as_ref()
            .and_then(|j| j.get(k))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    let text = field("reason")
        .or_else(|| field("detail"))
        .or_else(|| field("error"))
        .unwrap_or_else(|| body.trim().to_string());
    let text: String = text.chars().take(MAX_REASON_CHARS).collect();
    if text.is_empty() {
        status.canonical_reason().unwrap_or("").to_string()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_reads_as_its_reason() {
        let r = r#"{"error":"refused","reason":"queue_full","retry_after_s":30}"#;
        assert_eq!(refusal(StatusCode::SERVICE_UNAVAILABLE, r), "queue_full");
        let u = r#"{"error":"unauthorized","detail":"unknown key"}"#;
        assert_eq!(refusal(StatusCode::UNAUTHORIZED, u), "unknown key");
        assert_eq!(
            refusal(StatusCode::PAYLOAD_TOO_LARGE, ""),
            "Payload Too Large"
        );
        assert_eq!(refusal(StatusCode::BAD_REQUEST, " nope "), "nope");
    }

    #[test]
    fn only_http_endpoints_are_dialled() {
        assert!(Signal::new("ws://127.0.0.1:1/v1/webrtc", &Auth::None).is_err());
        let s = Signal::new("http://127.0.0.1:1/v1/webrtc", &Auth::Bearer("k".into())).unwrap();
        assert_eq!(s.bearer.as_deref(), Some("Bearer k"));
        let joined = s.endpoint().join("/v1/webrtc/sessions/abc").unwrap();
        assert_eq!(joined.as_str(), "http://127.0.0.1:1/v1/webrtc/sessions/abc");
    }
}
