//! The crate's one error type, classified by source and retryability.

use std::time::Duration;

pub use tonic::Code as GrpcCode;

/// Who caused an error (see [`DialogError::source_kind`]): the dialog
/// service or the network to it is [`ErrorSource::Provider`], the phone
/// caller's input (invalid DTMF) [`ErrorSource::Caller`], configuration or
/// a closed session [`ErrorSource::Internal`].
pub use error_source::ErrorSource;

/// Everything that can go wrong with a dialog session.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum DialogError {
    /// The client configuration is unusable (bad endpoint, zero channels …).
    #[error("invalid dialog client configuration: {reason}")]
    InvalidConfig { reason: String },

    /// Opening the stream (connect, HTTP/2 handshake, response headers) did
    /// not finish within `open_timeout`.
    #[error("call {call_id}: opening the dialog stream took longer than {after:?}")]
    OpenTimeout { call_id: String, after: Duration },

    /// The service refused the stream. `RESOURCE_EXHAUSTED` means it is at
    /// its concurrent-stream cap (see [`DialogError::is_capacity`]).
    #[error("call {call_id}: dialog service refused the stream ({code:?}): {message}")]
    Rejected {
        call_id: String,
        code: GrpcCode,
        message: String,
    },

    /// The service could not be reached (connection refused, reset, DNS …).
    #[error("call {call_id}: dialog service unavailable: {message}")]
    Unavailable { call_id: String, message: String },

    /// The request queue of this session is full: the stream is not
    /// draining (HTTP/2 flow control is holding it back). The message was
    /// not sent.
    #[error("call {call_id}: dialog request queue full ({capacity} messages); message dropped")]
    Backpressure { call_id: String, capacity: usize },

    /// The session is closed; nothing more can be sent on it.
    #[error("call {call_id}: dialog session is closed")]
    Closed { call_id: String },

    /// The stream ended with an error status after it was opened.
    #[error("call {call_id}: dialog stream failed ({code:?}): {message}")]
    Stream {
        call_id: String,
        code: GrpcCode,
        message: String,
    },

    /// DTMF digits outside `0-9 * # A-D` (or empty).
    #[error("call {call_id}: invalid DTMF digits {digits:?}")]
    InvalidDtmf { call_id: String, digits: String },
}

impl DialogError {
    /// Whether trying again (a new stream, or the same message later) may
    /// succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            DialogError::OpenTimeout { .. }
            | DialogError::Unavailable { .. }
            | DialogError::Backpressure { .. } => true,
            DialogError::Rejected { code, .. } | DialogError::Stream { code, .. } => {
                transient(*code)
            }
            DialogError::InvalidConfig { .. }
            | DialogError::Closed { .. }
            | DialogError::InvalidDtmf { .. } => false,
        }
    }

    /// Who caused the error.
    pub fn source_kind(&self) -> ErrorSource {
        match self {
            DialogError::OpenTimeout { .. }
            | DialogError::Rejected { .. }
            | DialogError::Unavailable { .. }
            | DialogError::Backpressure { .. }
            | DialogError::Stream { .. } => ErrorSource::Provider,
            DialogError::InvalidDtmf { .. } => ErrorSource::Caller,
            DialogError::InvalidConfig { .. } | DialogError::Closed { .. } => ErrorSource::Internal,
        }
    }

    /// True when the service refused for lack of capacity (its stream cap):
    /// admission should count this against the dialog ceiling.
    pub fn is_capacity(&self) -> bool {
        matches!(
            self,
            DialogError::Rejected {
                code: GrpcCode::ResourceExhausted,
                ..
            }
        )
    }

    /// Whether an open stream that ended with this error merely dropped
    /// (the service went away, restarted, or shed the stream) so that a
    /// new stream may continue the call. Protocol and permission errors are
    /// not drops: a new stream would fail the same way.
    pub fn is_dropped(&self) -> bool {
        match self {
            DialogError::Stream { code, .. } => matches!(
                code,
                GrpcCode::Unavailable
                    | GrpcCode::Aborted
                    | GrpcCode::Unknown
                    | GrpcCode::Internal
                    | GrpcCode::Cancelled
                    | GrpcCode::ResourceExhausted
                    | GrpcCode::DeadlineExceeded
            ),
            DialogError::Unavailable { .. } => true,
            _ => false,
        }
    }

    /// The call this error belongs to, if any.
    pub fn call_id(&self) -> Option<&str> {
        match self {
            DialogError::InvalidConfig { .. } => None,
            DialogError::OpenTimeout { call_id, .. }
            | DialogError::Rejected { call_id, .. }
            | DialogError::Unavailable { call_id, .. }
            | DialogError::Backpressure { call_id, .. }
            | DialogError::Closed { call_id }
            | DialogError::Stream { call_id, .. }
            | DialogError::InvalidDtmf { call_id, .. } => Some(call_id),
        }
    }

    /// Maps the status that refused `Converse` before the stream was open.
    pub(crate) fn from_open_status(call_id: &str, status: &tonic::Status) -> Self {
        let call_id = call_id.to_owned();
        let message = status.message().to_owned();
        match status.code() {
            GrpcCode::Unavailable => DialogError::Unavailable { call_id, message },
            code => DialogError::Rejected {
                call_id,
                code,
                message,
            },
        }
    }

    /// Maps the status that ended an open stream.
    pub(crate) fn from_stream_status(call_id: &str, status: &tonic::Status) -> Self {
        DialogError::Stream {
            call_id: call_id.to_owned(),
            code: status.code(),
            message: status.message().to_owned(),
        }
    }
}

/// Codes after which a new attempt can reasonably succeed.
fn transient(code: GrpcCode) -> bool {
    matches!(
        code,
        GrpcCode::ResourceExhausted | GrpcCode::Unavailable | GrpcCode::Aborted
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_exhausted_is_retryable_provider_capacity() {
        let status = tonic::Status::resource_exhausted("at cap");
        let err = DialogError::from_open_status("c1", &status);
        assert!(err.is_retryable());
        assert!(err.is_capacity());
        assert_eq!(err.source_kind(), ErrorSource::Provider);
        assert_eq!(err.call_id(), Some("c1"));
    }

    #[test]
    fn unavailable_and_other_codes_are_classified() {
        let err = DialogError::from_open_status("c1", &tonic::Status::unavailable("down"));
        assert!(matches!(err, DialogError::Unavailable { .. }));
        assert!(err.is_retryable());
        let err = DialogError::from_open_status("c1", &tonic::Status::unimplemented("no"));
        assert!(!err.is_retryable());
        assert!(!err.is_capacity());
        let err = DialogError::InvalidDtmf {
            call_id: "c1".into(),
            digits: "x".into(),
        };
        assert_eq!(err.source_kind(), ErrorSource::Caller);
        assert!(err.to_string().contains("c1"));
    }
}
