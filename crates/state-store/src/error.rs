//! The crate's error type, classified by source and retryability.

use std::time::Duration;

use tokio_postgres::error::SqlState;

use crate::ids::{CallId, OwnerEpoch};

/// Where the cause of an error lies (see [`StoreError::source_kind`]):
/// Postgres slow, down or refusing the work is [`ErrorSource::Provider`], an
/// invalid request from this crate's caller [`ErrorSource::Caller`], this
/// crate's own state or environment (migrations, the local cluster)
/// [`ErrorSource::Internal`].
pub use error_source::ErrorSource;

/// Everything that can go wrong in `state-store`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The configuration cannot work (bad conninfo, zero pool size, ...).
    #[error("invalid store config: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// Postgres refused or dropped a new connection.
    #[error("cannot connect to postgres: {source}")]
    Connect {
        /// The driver error.
        #[source]
        source: tokio_postgres::Error,
    },
    /// Opening a new connection took longer than `connect_timeout`.
    #[error("connecting to postgres took longer than {after:?}")]
    ConnectTimeout {
        /// The deadline that passed.
        after: Duration,
    },
    /// Every pooled connection stayed busy for `checkout_timeout`.
    #[error("no pooled connection within {waited:?} (pool size {pool_size})")]
    CheckoutTimeout {
        /// The deadline that passed.
        waited: Duration,
        /// The pool's maximum size.
        pool_size: usize,
    },
    /// The pool was closed (the store is shutting down).
    #[error("connection pool is closed")]
    PoolClosed,
    /// A statement did not answer within its client-side deadline; the
    /// connection was discarded, not returned to the pool.
    #[error("{op} did not finish within {after:?}")]
    QueryTimeout {
        /// The operation, e.g. `"open_call"`.
        op: &'static str,
        /// The deadline that passed.
        after: Duration,
    },
    /// Postgres answered with an error.
    #[error("{op} failed: {source}")]
    Db {
        /// The operation, e.g. `"open_call"`.
        op: &'static str,
        /// The driver error (SQLSTATE inside).
        #[source]
        source: tokio_postgres::Error,
    },
    /// An applied migration's SQL no longer matches the embedded text.
    #[error(
        "migration {version} ({name}) was changed after it was applied: recorded checksum {recorded}, embedded {embedded}"
    )]
    MigrationChanged {
        /// Migration version.
        version: i32,
        /// Migration name.
        name: String,
        /// sha256 recorded when it was applied.
        recorded: String,
        /// sha256 of the embedded text.
        embedded: String,
    },
    /// Postgres answered, but not in the shape this crate expects (a row
    /// count or a column type): a schema/code mismatch, not a transient.
    #[error("{op}: unexpected result: {detail}")]
    UnexpectedResult {
        /// The operation.
        op: &'static str,
        /// What did not match.
        detail: String,
    },
    /// `open_call` for a call id another instance already owns.
    #[error("call {call} is already owned by {owner} (epoch {epoch})")]
    CallOwned {
        /// The call.
        call: CallId,
        /// Its current owner instance.
        owner: String,
        /// Its current owner epoch.
        epoch: OwnerEpoch,
    },
    /// The call has no ledger row.
    #[error("call {call} has no ledger row")]
    UnknownCall {
        /// The call.
        call: CallId,
    },
    /// No PostgreSQL server binaries were found for `LocalPostgres`.
    #[error(
        "PostgreSQL server binaries not found (searched {searched}); install the `postgresql` package"
    )]
    PostgresNotInstalled {
        /// Where we looked.
        searched: String,
    },
    /// A step of starting or stopping the throwaway local cluster failed.
    #[error("local postgres: {step} failed: {detail}")]
    LocalPostgres {
        /// The step, e.g. `"initdb"`.
        step: &'static str,
        /// Exit status, stderr and the server log tail where useful.
        detail: String,
    },
}

impl StoreError {
    /// Whether the same request may succeed if tried again later.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Connect { .. }
            | Self::ConnectTimeout { .. }
            | Self::CheckoutTimeout { .. }
            | Self::QueryTimeout { .. } => true,
            Self::Db { source, .. } => db_error_is_transient(source),
            Self::InvalidConfig { .. }
            | Self::PoolClosed
            | Self::MigrationChanged { .. }
            | Self::UnexpectedResult { .. }
            | Self::CallOwned { .. }
            | Self::UnknownCall { .. }
            | Self::PostgresNotInstalled { .. }
            | Self::LocalPostgres { .. } => false,
        }
    }

    /// Where the cause lies.
    #[must_use]
    pub fn source_kind(&self) -> ErrorSource {
        match self {
            Self::Connect { .. }
            | Self::ConnectTimeout { .. }
            | Self::CheckoutTimeout { .. }
            | Self::QueryTimeout { .. }
            | Self::Db { .. } => ErrorSource::Provider,
            Self::InvalidConfig { .. } | Self::CallOwned { .. } | Self::UnknownCall { .. } => {
                ErrorSource::Caller
            }
            Self::PoolClosed
            | Self::MigrationChanged { .. }
            | Self::UnexpectedResult { .. }
            | Self::PostgresNotInstalled { .. }
            | Self::LocalPostgres { .. } => ErrorSource::Internal,
        }
    }

    /// The SQLSTATE code when Postgres answered with an error.
    #[must_use]
    pub fn sql_state(&self) -> Option<&SqlState> {
        match self {
            Self::Db { source, .. } | Self::Connect { source } => source.code(),
            _ => None,
        }
    }

    pub(crate) fn db(op: &'static str, source: tokio_postgres::Error) -> Self {
        Self::Db { op, source }
    }

    /// A column that would not decode: never retryable.
    pub(crate) fn decode(op: &'static str, e: &tokio_postgres::Error) -> Self {
        Self::UnexpectedResult {
            op,
            detail: e.to_string(),
        }
    }
}

/// Connection loss, cancellation (statement_timeout), serialization and
/// deadlock failures, resource exhaustion and shutdowns can pass; constraint
/// and data errors will fail the same way every time.
fn db_error_is_transient(e: &tokio_postgres::Error) -> bool {
    let Some(code) = e.code() else {
        // No SQLSTATE: the connection broke or a driver-level I/O error.
        return true;
    };
    let class = &code.code()[..2];
    matches!(class, "08" | "40" | "53" | "57" | "58") || *code == SqlState::LOCK_NOT_AVAILABLE
}

/// Why [`crate::WriteBehind::submit`] refused a write. The write is counted
/// as lost for its call; the submitter never waits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WriteRejected {
    /// The call's shard queue is full (Postgres is slow or stalled).
    #[error(
        "write-behind queue {shard} is full ({capacity} writes); write for call {call} dropped"
    )]
    QueueFull {
        /// The call whose write was dropped.
        call: CallId,
        /// The shard whose queue is full.
        shard: usize,
        /// That queue's capacity.
        capacity: usize,
    },
    /// The writers are draining or stopped; no new writes are accepted.
    #[error("write-behind is stopped; write for call {call} dropped")]
    Stopped {
        /// The call whose write was dropped.
        call: CallId,
    },
}

impl WriteRejected {
    /// The call whose write was dropped.
    #[must_use]
    pub fn call(&self) -> CallId {
        match self {
            Self::QueueFull { call, .. } | Self::Stopped { call } => *call,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_retryable_provider_errors() {
        let e = StoreError::CheckoutTimeout {
            waited: Duration::from_millis(5),
            pool_size: 1,
        };
        assert!(e.is_retryable());
        assert_eq!(e.source_kind(), ErrorSource::Provider);
        let e = StoreError::UnknownCall {
            call: CallId::new_random(),
        };
        assert!(!e.is_retryable());
        assert_eq!(e.source_kind(), ErrorSource::Caller);
    }
}
