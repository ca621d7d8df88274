//! The crate's one error type, classified by where the fault lies.

use std::path::PathBuf;

use crate::ids::StreamSid;

/// Who caused an error (see [`LoadError::source_kind`]), seen from the load
/// generator: the server under test is its [`ErrorSource::Provider`], the
/// load configuration or command line its [`ErrorSource::Caller`], and this
/// machine (file system, task runtime) [`ErrorSource::Internal`].
pub use error_source::ErrorSource;

/// Everything that can go wrong while placing calls or writing a report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// A configuration value is out of range.
    #[error("invalid config `{field}`: {reason}")]
    InvalidConfig { field: &'static str, reason: String },
    /// The server answered the WebSocket upgrade (WebRTC: the offer's
    /// `POST`) with an HTTP status.
    #[error("upgrade to {url} refused with HTTP {status}: {body}")]
    Refused {
        url: String,
        status: u16,
        body: String,
    },
    /// TCP connect or the WebSocket handshake failed.
    #[error("connecting to {url} failed: {detail}")]
    Connect { url: String, detail: String },
    /// The handshake did not finish in time.
    #[error("connecting to {url} timed out after {after_ms} ms")]
    ConnectTimeout { url: String, after_ms: u64 },
    /// The socket failed after the handshake.
    #[error("socket error on stream {stream}: {detail}")]
    Socket { stream: StreamSid, detail: String },
    /// The server stopped reading: a send did not complete in time.
    #[error("send on stream {stream} stalled for {after_ms} ms")]
    SendTimeout { stream: StreamSid, after_ms: u64 },
    /// A server message that Twilio could not have acted on.
    #[error("malformed message on stream {stream}: {detail}")]
    Malformed { stream: StreamSid, detail: String },
    /// The JSON report could not be written.
    #[error("writing report {path:?}: {source}")]
    WriteReport {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl LoadError {
    /// Whether trying the same thing again could succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            LoadError::Refused { status, .. } => matches!(status, 429 | 502 | 503 | 504),
            LoadError::Connect { .. }
            | LoadError::ConnectTimeout { .. }
            | LoadError::Socket { .. }
            | LoadError::SendTimeout { .. } => true,
            LoadError::InvalidConfig { .. }
            | LoadError::Malformed { .. }
            | LoadError::WriteReport { .. } => false,
        }
    }

    /// Where the fault lies.
    pub fn source_kind(&self) -> ErrorSource {
        match self {
            LoadError::InvalidConfig { .. } => ErrorSource::Caller,
            LoadError::WriteReport { .. } => ErrorSource::Internal,
            LoadError::Refused { .. }
            | LoadError::Connect { .. }
            | LoadError::ConnectTimeout { .. }
            | LoadError::Socket { .. }
            | LoadError::SendTimeout { .. }
            | LoadError::Malformed { .. } => ErrorSource::Provider,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_retryable_only_for_overload_statuses() {
        let refused = |status| LoadError::Refused {
            url: "ws://x".into(),
            status,
            body: String::new(),
        };
        assert!(refused(503).is_retryable());
        assert!(refused(429).is_retryable());
        assert!(!refused(403).is_retryable());
        assert_eq!(refused(503).source_kind(), ErrorSource::Provider);
        let bad = LoadError::InvalidConfig {
            field: "calls",
            reason: "must be > 0".into(),
        };
        assert!(!bad.is_retryable());
        assert_eq!(bad.source_kind(), ErrorSource::Caller);
    }
}
