//! The crate's error type and why a session ended.

use std::time::Duration;

use crate::context::ContextId;

/// Who is at fault (see [`TtsError::source_kind`]), so the caller can
/// choose between retry, failover and fixing its own code: the TTS provider
/// or the network to it is [`ErrorSource::Provider`], a wrong use of the API
/// or a misconfiguration [`ErrorSource::Caller`], this process not keeping
/// up [`ErrorSource::Internal`].
pub use error_source::ErrorSource;

/// Everything that can go wrong in a TTS session.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TtsError {
    #[error("invalid TTS configuration: {field}: {reason}")]
    InvalidConfig { field: &'static str, reason: String },
    #[error("connecting to {url} failed: {message}")]
    Connect { url: String, message: String },
    #[error("connecting to {url} timed out after {after:?}")]
    ConnectTimeout { url: String, after: Duration },
    #[error("TTS provider refused the upgrade with HTTP {status}: {body}")]
    Rejected { status: u16, body: String },
    #[error("cannot open {context}: {open} contexts already open (max {max})")]
    TooManyContexts {
        context: ContextId,
        open: usize,
        max: usize,
    },
    #[error("{context} is already open")]
    ContextExists { context: ContextId },
    #[error("{context} is not open")]
    UnknownContext { context: ContextId },
    #[error("{context} is closing and takes no more text")]
    ContextClosing { context: ContextId },
    #[error("TTS command queue of {label} is full ({capacity} commands)")]
    Backpressure { label: String, capacity: usize },
    #[error("TTS session {label} is closed: {reason}")]
    Closed { label: String, reason: CloseReason },
    #[error("closing TTS session {label} timed out after {after:?}")]
    CloseTimeout { label: String, after: Duration },
}

impl TtsError {
    /// Whether the same request may succeed if tried again (on a new
    /// session where the session is gone).
    pub fn is_retryable(&self) -> bool {
        match self {
            TtsError::Connect { .. }
            | TtsError::ConnectTimeout { .. }
            | TtsError::Backpressure { .. } => true,
            TtsError::Rejected { status, .. } => *status == 408 || *status == 429 || *status >= 500,
            TtsError::Closed { reason, .. } => reason.is_retryable(),
            _ => false,
        }
    }

    /// Who is at fault.
    pub fn source_kind(&self) -> ErrorSource {
        match self {
            TtsError::Connect { .. }
            | TtsError::ConnectTimeout { .. }
            | TtsError::CloseTimeout { .. } => ErrorSource::Provider,
            TtsError::Rejected { status, .. } => match status {
                400..=407 | 409..=428 => ErrorSource::Caller,
                _ => ErrorSource::Provider,
            },
            TtsError::Backpressure { .. } => ErrorSource::Internal,
            TtsError::Closed { reason, .. } => reason.source_kind(),
            _ => ErrorSource::Caller,
        }
    }
}

/// Why a session ended; carried by the terminal [`crate::TtsEvent::Closed`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloseReason {
    /// We closed it (`close()` or the handle was dropped) and the provider
    /// completed the closing handshake.
    #[error("closed by the client")]
    Requested,
    /// The provider closed the socket with this code and reason text
    /// (e.g. 1008 `max_active_conversations`, 1008 `input_timeout_exceeded`).
    #[error("provider closed the socket: {code} {reason:?}")]
    ProviderClosed { code: u16, reason: String },
    /// The connection broke without a closing handshake.
    #[error("connection lost: {message}")]
    ConnectionLost { message: String },
    /// Our close was not answered within `close_timeout`.
    #[error("close not acknowledged in time")]
    CloseTimeout,
    /// A closed context got neither audio nor its final message within
    /// `close_timeout`; the session no longer agrees with the provider.
    #[error("{context} never got its final message")]
    FinalTimeout { context: ContextId },
    /// The event consumer stopped reading for longer than the event
    /// deadline; the session was closed rather than buffer without bound.
    #[error("the event consumer stopped reading")]
    ConsumerStalled,
    /// The socket dropped mid-call and the reconnect policy's budget or
    /// attempts ran out. `capacity`: the last failure was the provider
    /// refusing for capacity (429-class) rather than being down. Not worth
    /// retrying within the call: the budget was the retry.
    #[error("reconnecting failed after {attempts} attempts (capacity: {capacity}): {last}")]
    ReconnectFailed {
        attempts: u32,
        capacity: bool,
        last: String,
    },
    /// A reconnect's upgrade was refused for good (401, 403, 400…).
    #[error("the provider refused the reconnect with HTTP {status}: {body}")]
    RefusedOnReconnect { status: u16, body: String },
}

impl CloseReason {
    /// True when the session ended because the client asked it to.
    pub fn is_clean(&self) -> bool {
        matches!(self, CloseReason::Requested)
    }

    /// Whether a new session may work where this one ended.
    pub fn is_retryable(&self) -> bool {
        match self {
            // 1008 is a policy violation: the same traffic fails again.
            CloseReason::ProviderClosed { code, .. } => *code != 1008,
            CloseReason::Requested
            | CloseReason::ReconnectFailed { .. }
            | CloseReason::RefusedOnReconnect { .. } => false,
            _ => true,
        }
    }

    /// Who is at fault.
    pub fn source_kind(&self) -> ErrorSource {
        match self {
            CloseReason::ProviderClosed { code: 1008, .. }
            | CloseReason::Requested
            | CloseReason::RefusedOnReconnect { .. } => ErrorSource::Caller,
            CloseReason::ConsumerStalled => ErrorSource::Internal,
            _ => ErrorSource::Provider,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_refusals_are_retryable_provider_errors_and_auth_is_the_callers() {
        let busy = TtsError::Rejected {
            status: 429,
            body: String::new(),
        };
        assert!(busy.is_retryable());
        assert_eq!(busy.source_kind(), ErrorSource::Provider);
        let auth = TtsError::Rejected {
            status: 401,
            body: String::new(),
        };
        assert!(!auth.is_retryable());
        assert_eq!(auth.source_kind(), ErrorSource::Caller);
    }

    #[test]
    fn policy_closes_are_not_retried() {
        let policy = CloseReason::ProviderClosed {
            code: 1008,
            reason: "max_active_conversations".into(),
        };
        assert!(!policy.is_retryable());
        assert_eq!(policy.source_kind(), ErrorSource::Caller);
        let fault = CloseReason::ProviderClosed {
            code: 1011,
            reason: String::new(),
        };
        assert!(fault.is_retryable());
        assert_eq!(fault.source_kind(), ErrorSource::Provider);
    }

    #[test]
    fn a_spent_reconnect_budget_is_not_retried_by_the_call() {
        let spent = CloseReason::ReconnectFailed {
            attempts: 8,
            capacity: true,
            last: "HTTP 429".into(),
        };
        assert!(!spent.is_retryable());
        assert_eq!(spent.source_kind(), ErrorSource::Provider);
        let refused = CloseReason::RefusedOnReconnect {
            status: 401,
            body: String::new(),
        };
        assert!(!refused.is_retryable());
        assert_eq!(refused.source_kind(), ErrorSource::Caller);
    }
}
