//! Newtype IDs and the small closed vocabularies stored as text columns.

use std::fmt;
use std::str::FromStr;

use uuid::Uuid;

/// Identity of one call, stable for its whole life (ledger primary key).
#[derive(Copy, Clone, Eq, PartialEq, Hash, Debug, Ord, PartialOrd)]
pub struct CallId(pub Uuid);

impl CallId {
    /// A fresh random (v4) call id.
    #[must_use]
    pub fn new_random() -> Self {
        Self(Uuid::new_v4())
    }

    /// Write-behind shard for this call: every write of one call goes to the
    /// same shard, so a call's writes land in submission order.
    pub(crate) fn shard(self, shards: usize) -> usize {
        let shards = u128::try_from(shards.max(1)).unwrap_or(1);
        // `as` is fine: the remainder is < shards, which came from a usize.
        (self.0.as_u128() % shards) as usize
    }
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl FromStr for CallId {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s).map(Self)
    }
}

/// Ownership generation of a call. Every write carries the epoch its writer
/// believed current; Postgres refuses it when the ledger has moved on
/// (another instance took the call over), so a stale owner cannot write.
#[derive(Copy, Clone, Eq, PartialEq, Hash, Debug, Ord, PartialOrd)]
pub struct OwnerEpoch(pub i64);

impl OwnerEpoch {
    /// The epoch `open_call` gives a new call.
    pub const FIRST: OwnerEpoch = OwnerEpoch(1);
}

impl fmt::Display for OwnerEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Who spoke a turn.
#[derive(Copy, Clone, Eq, PartialEq, Hash, Debug)]
pub enum Speaker {
    /// The phone caller.
    Caller,
    /// The voice agent.
    Bot,
}

impl Speaker {
    /// The value stored in `call_turns.speaker`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Caller => "caller",
            Self::Bot => "bot",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "caller" => Some(Self::Caller),
            "bot" => Some(Self::Bot),
            _ => None,
        }
    }
}

/// A lifecycle stage with its own ledger timestamp (first write wins).
#[derive(Copy, Clone, Eq, PartialEq, Hash, Debug)]
pub enum Stage {
    /// The carrier stream is up and the first inbound media arrived.
    MediaReady,
    /// The first audio the caller could hear was sent.
    FirstPlayableAudio,
    /// The last media frame in either direction.
    LastMedia,
    /// The carrier hang-up (or socket close) was observed.
    DisconnectObserved,
}

impl Stage {
    /// Stable label for logs and metrics.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::MediaReady => "media_ready",
            Self::FirstPlayableAudio => "first_playable_audio",
            Self::LastMedia => "last_media",
            Self::DisconnectObserved => "disconnect_observed",
        }
    }
}

/// Outcome of a call's cleanup, stored in `call_ledger.cleanup_status`.
#[derive(Copy, Clone, Eq, PartialEq, Hash, Debug)]
pub enum CleanupStatus {
    /// The call is open, or its cleanup has not been recorded.
    Pending,
    /// Every per-call resource was released.
    Completed,
    /// Cleanup ran but something could not be released cleanly.
    Failed,
}

impl CleanupStatus {
    /// The value stored in `call_ledger.cleanup_status`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Completed => "completed",
            Self::Failed => "failed",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(Self::Pending),
            "completed" => Some(Self::Completed),
            "failed" => Some(Self::Failed),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_is_stable_and_in_range() {
        let id = CallId::new_random();
        for n in 1..9 {
            assert!(id.shard(n) < n);
            assert_eq!(id.shard(n), id.shard(n));
        }
        assert_eq!(id.shard(0), 0);
    }

    #[test]
    fn call_id_round_trips_through_display() {
        let id = CallId::new_random();
        assert_eq!(id.to_string().parse::<CallId>().unwrap(), id);
    }

    #[test]
    fn vocabularies_round_trip() {
        for s in [Speaker::Caller, Speaker::Bot] {
            assert_eq!(Speaker::parse(s.as_str()), Some(s));
        }
        for c in [
            CleanupStatus::Pending,
            CleanupStatus::Completed,
            CleanupStatus::Failed,
        ] {
            assert_eq!(CleanupStatus::parse(c.as_str()), Some(c));
        }
        assert_eq!(Speaker::parse("agent"), None);
    }
}
