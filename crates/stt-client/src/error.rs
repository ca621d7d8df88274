//! The crate's one error type, classified by who is at fault and whether a
//! retry can help, so the call actor decides without matching strings.

use std::time::Duration;

use tokio_tungstenite::tungstenite;

/// Who caused an error (see [`SttError::source_kind`]): the STT provider
/// or the network to it is [`ErrorSource::Provider`], our own configuration
/// or use of the API (bad params, bad key, a closed session)
/// [`ErrorSource::Caller`], a bug or resource problem in this process
/// [`ErrorSource::Internal`].
pub use error_source::ErrorSource;

/// Errors of opening and driving an STT session. Failures *during* a stream
/// are not errors: they arrive as [`crate::SttEvent::Closed`].
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum SttError {
    /// The configuration cannot work; fix it, do not retry.
    #[error("invalid STT config field `{field}`: {reason}")]
    InvalidConfig { field: &'static str, reason: String },
    /// TCP + TLS + upgrade did not finish within `connect_timeout`.
    #[error("STT connect to {url} timed out after {timeout:?}")]
    ConnectTimeout { url: String, timeout: Duration },
    /// TCP, TLS or the WebSocket handshake failed.
    #[error("STT connect to {url} failed: {source}")]
    Connect {
        url: String,
        #[source]
        source: Box<tungstenite::Error>,
    },
    /// The provider answered the upgrade with an HTTP error (400 bad
    /// params, 401 bad key, 429 over its concurrency limit, 5xx).
    #[error("STT upgrade to {url} refused with HTTP {status}: {message}")]
    Rejected {
        url: String,
        status: u16,
        message: String,
    },
    /// The session has already ended.
    #[error("STT session {label} is closed")]
    SessionClosed { label: String },
    /// `close()` did not see the provider's close within the bound; the
    /// socket was dropped.
    #[error("STT session {label} did not close within {timeout:?}")]
    CloseTimeout { label: String, timeout: Duration },
}

impl SttError {
    /// Who caused it.
    pub fn source_kind(&self) -> ErrorSource {
        match self {
            SttError::InvalidConfig { .. } | SttError::SessionClosed { .. } => ErrorSource::Caller,
            SttError::ConnectTimeout { .. }
            | SttError::Connect { .. }
            | SttError::CloseTimeout { .. } => ErrorSource::Provider,
            SttError::Rejected { status, .. } => match status {
                408 | 429 => ErrorSource::Provider,
                400..=499 => ErrorSource::Caller,
                _ => ErrorSource::Provider,
            },
        }
    }

    /// Whether the same request may succeed if tried again (perhaps after a
    /// backoff, or on another provider).
    pub fn is_retryable(&self) -> bool {
        match self {
            SttError::ConnectTimeout { .. } | SttError::Connect { .. } => true,
            SttError::Rejected { status, .. } => matches!(status, 408 | 429 | 500..=599),
            SttError::InvalidConfig { .. }
            | SttError::SessionClosed { .. }
            | SttError::CloseTimeout { .. } => false,
        }
    }

    /// The provider is at its concurrency limit (HTTP 429): shed load or
    /// fail over rather than retry at once.
    pub fn is_capacity(&self) -> bool {
        matches!(self, SttError::Rejected { status: 429, .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(status: u16) -> SttError {
        SttError::Rejected {
            url: "ws://x".into(),
            status,
            message: String::new(),
        }
    }

    #[test]
    fn rejections_are_classified_by_status() {
        assert!(rejected(429).is_retryable() && rejected(429).is_capacity());
        assert_eq!(rejected(429).source_kind(), ErrorSource::Provider);
        assert!(!rejected(400).is_retryable());
        assert_eq!(rejected(401).source_kind(), ErrorSource::Caller);
        assert!(rejected(503).is_retryable() && !rejected(503).is_capacity());
        assert_eq!(rejected(503).source_kind(), ErrorSource::Provider);
    }
}
