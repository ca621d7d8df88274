//! Typed rejections: why a call was refused, with the numbers behind the decision.

use std::fmt;
use std::time::Duration;

/// One of the four per-call resources, for health marks and capacity deciders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dependency {
    /// Postgres (state and ledger).
    Db,
    /// The streaming speech-to-text provider.
    Stt,
    /// The streaming text-to-speech provider.
    Tts,
    /// The dialog/model gRPC service.
    Dialog,
}

impl Dependency {
    /// All dependencies, in the order used for tie-breaking and reporting.
    pub const ALL: [Self; 4] = [Self::Db, Self::Stt, Self::Tts, Self::Dialog];

    /// A low-cardinality label for logs and metrics.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Db => "db",
            Self::Stt => "stt",
            Self::Tts => "tts",
            Self::Dialog => "dialog",
        }
    }

    /// Position in [`Dependency::ALL`], used to index per-dependency state.
    pub(crate) const fn index(self) -> usize {
        match self {
            Self::Db => 0,
            Self::Stt => 1,
            Self::Tts => 2,
            Self::Dialog => 3,
        }
    }
}

impl fmt::Display for Dependency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who caused a rejection (see [`RejectReason::source_kind`]): a provider
/// marked down is [`ErrorSource::Provider`]; capacity, queue, partner
/// limits and drain are this instance's own decision,
/// [`ErrorSource::Internal`].
pub use error_source::ErrorSource;

/// Why an admission was refused. Every variant leads to the overflow path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectReason {
    /// `try_admit` found no free slot, or found others already queued (FIFO
    /// fairness: nobody jumps the queue).
    AtCapacity,
    /// The wait queue already holds `queue_max` waiters.
    QueueFull,
    /// The waiter's deadline passed before a slot freed up.
    QueueTimeout,
    /// The instance is draining and will admit nothing more.
    Draining,
    /// The server marked this dependency down from its health checks.
    DependencyDown(Dependency),
    /// The partner that sent the call already has its `max_concurrent_calls`
    /// admitted or queued. Refused at once, even while the gate has room for
    /// other callers.
    PartnerQuota,
    /// The instance itself is short: its lag against the 20 ms media clock
    /// is above the bound, or it holds as many calls as it held while its
    /// lag was healthy. Refused at once, never queued.
    InstanceOverloaded,
    /// A [`crate::Ticket`] was polled again after it had completed, or lost its
    /// record: a bug in the code driving the gate, never a capacity decision.
    /// Not counted in the rejection totals.
    Internal,
}

impl RejectReason {
    /// A low-cardinality label for metrics (`reason="queue_timeout"`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::AtCapacity => "at_capacity",
            Self::QueueFull => "queue_full",
            Self::QueueTimeout => "queue_timeout",
            Self::Draining => "draining",
            Self::DependencyDown(_) => "dependency_down",
            Self::PartnerQuota => "partner_quota",
            Self::InstanceOverloaded => "instance_overloaded",
            Self::Internal => "internal",
        }
    }

    /// True when a later attempt *on this instance* may succeed: capacity and
    /// queue pressure pass, dependencies recover, a partner's calls end. A
    /// draining instance never admits again (retry elsewhere), and an internal
    /// error is a bug.
    #[must_use]
    pub const fn is_retryable(self) -> bool {
        match self {
            Self::AtCapacity
            | Self::QueueFull
            | Self::QueueTimeout
            | Self::DependencyDown(_)
            | Self::PartnerQuota
            | Self::InstanceOverloaded => true,
            Self::Draining | Self::Internal => false,
        }
    }

    /// Where the cause lies: a down dependency is the provider's; everything else
    /// (a partner quota included: it is this instance's policy) is this
    /// instance's own decision.
    #[must_use]
    pub const fn source_kind(self) -> ErrorSource {
        match self {
            Self::DependencyDown(_) => ErrorSource::Provider,
            _ => ErrorSource::Internal,
        }
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AtCapacity => f.write_str("at capacity"),
            Self::QueueFull => f.write_str("admission queue full"),
            Self::QueueTimeout => f.write_str("timed out in the admission queue"),
            Self::Draining => f.write_str("instance is draining"),
            Self::DependencyDown(dep) => write!(f, "dependency {dep} is down"),
            Self::PartnerQuota => f.write_str("partner at its concurrent-call quota"),
            Self::InstanceOverloaded => {
                f.write_str("instance overloaded (its media clock runs late)")
            }
            Self::Internal => f.write_str("internal admission error (ticket reused)"),
        }
    }
}

/// A refused admission: the reason, how long the call waited, and the gate's
/// numbers at the moment of the decision (for the log line and the overflow path).
///
/// Only this crate constructs it (`#[non_exhaustive]`); read the fields freely.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "admission rejected: {reason} after waiting {} ms (active {active} of capacity {capacity}, {queued} queued)",
    waited.as_millis()
)]
#[non_exhaustive]
pub struct Rejection {
    /// Why.
    pub reason: RejectReason,
    /// Time between the request (or enqueue) and the rejection; zero for an
    /// immediate refusal.
    pub waited: Duration,
    /// Calls holding a permit when the decision was made.
    pub active: u32,
    /// Capacity when the decision was made.
    pub capacity: u32,
    /// Waiters in the queue when the decision was made.
    pub queued: usize,
}

impl Rejection {
    /// See [`RejectReason::is_retryable`].
    #[must_use]
    pub const fn is_retryable(&self) -> bool {
        self.reason.is_retryable()
    }

    /// See [`RejectReason::source_kind`].
    #[must_use]
    pub const fn source_kind(&self) -> ErrorSource {
        self.reason.source_kind()
    }
}
