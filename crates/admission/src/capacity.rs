//! Capacity from ceilings: how many calls the gate lets in, and which limit decided it.

use std::fmt;

use crate::error::Dependency;

/// The four per-call resources and how many of each the deployment can hold at once.
///
/// `None` means "no known limit" for that resource. Every admitted call holds one of
/// each for its whole life, so the smallest ceiling is the real call capacity: the
/// incident this crate exists for was a Postgres pool sized for 30 meeting 200 calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ceilings {
    /// Postgres connections available to calls (pool size minus what writers and
    /// admin need).
    pub db_calls: Option<u32>,
    /// Concurrent streaming sessions the STT provider allows this instance.
    pub stt_sessions: Option<u32>,
    /// Concurrent streaming sessions the TTS provider allows this instance.
    pub tts_sessions: Option<u32>,
    /// Concurrent gRPC streams to the dialog service.
    pub dialog_streams: Option<u32>,
}

impl Ceilings {
    /// The smallest known ceiling and the resource it belongs to.
    ///
    /// Ties go to the first in the order db, stt, tts, dialog. `None` when no
    /// ceiling is known at all. The server uses this to warn when an operator pins
    /// a capacity above what a resource can actually hold.
    #[must_use]
    pub fn smallest(&self) -> Option<(Dependency, u32)> {
        let all = [
            (Dependency::Db, self.db_calls),
            (Dependency::Stt, self.stt_sessions),
            (Dependency::Tts, self.tts_sessions),
            (Dependency::Dialog, self.dialog_streams),
        ];
        all.into_iter()
            .filter_map(|(dep, ceiling)| ceiling.map(|c| (dep, c)))
            // `min_by_key` keeps the first of equal minima: the documented tie order.
            .min_by_key(|&(_, c)| c)
    }
}

/// How the operator wants capacity decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapacitySetting {
    /// Smallest ceiling minus `headroom`, saturating at 0. **A capacity of 0 admits
    /// nothing**: every call is rejected (queued calls time out), which is the
    /// honest answer when the headroom eats the whole ceiling.
    Auto {
        /// Slots kept free below the smallest ceiling, so the gate says no before
        /// any resource does.
        headroom: u32,
    },
    /// Exactly this many calls, whatever the ceilings say.
    Pinned(u32),
}

impl Default for CapacitySetting {
    /// `Auto` with no headroom.
    fn default() -> Self {
        Self::Auto { headroom: 0 }
    }
}

/// Which limit decided the capacity (logged as "capacity 20 decided by stt").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decider {
    /// The Postgres ceiling.
    Db,
    /// The STT session ceiling.
    Stt,
    /// The TTS session ceiling.
    Tts,
    /// The dialog stream ceiling.
    Dialog,
    /// The operator pinned it.
    Pinned,
    /// The instance itself: its lag against the media clock lowered the
    /// capacity below the configured one (see [`crate::InstanceCeiling`]).
    Instance,
    /// No ceiling was configured: the gate never refuses for capacity. Almost always
    /// a misconfiguration; the server should warn.
    Unlimited,
}

impl Decider {
    /// A low-cardinality label for logs and metrics.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Db => "db",
            Self::Stt => "stt",
            Self::Tts => "tts",
            Self::Dialog => "dialog",
            Self::Pinned => "pinned",
            Self::Instance => "instance",
            Self::Unlimited => "unlimited",
        }
    }
}

impl From<Dependency> for Decider {
    fn from(dep: Dependency) -> Self {
        match dep {
            Dependency::Db => Self::Db,
            Dependency::Stt => Self::Stt,
            Dependency::Tts => Self::Tts,
            Dependency::Dialog => Self::Dialog,
        }
    }
}

impl fmt::Display for Decider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The derived call capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// How many calls may hold a permit at once. `u32::MAX` when unlimited.
    pub calls: u32,
    /// Which limit decided `calls`.
    pub decided_by: Decider,
}

impl Capacity {
    /// Derives the capacity from the setting and the ceilings.
    ///
    /// `Auto` takes the smallest ceiling (ties: db, stt, tts, dialog) minus the
    /// headroom, saturating at 0; with no ceiling at all it is `Unlimited`
    /// (`u32::MAX`, headroom ignored). `Pinned(n)` is `n`.
    #[must_use]
    pub fn derive(setting: CapacitySetting, ceilings: &Ceilings) -> Self {
        match setting {
            CapacitySetting::Pinned(calls) => Self {
                calls,
                decided_by: Decider::Pinned,
            },
            CapacitySetting::Auto { headroom } => match ceilings.smallest() {
                Some((dep, ceiling)) => Self {
                    calls: ceiling.saturating_sub(headroom),
                    decided_by: dep.into(),
                },
                None => Self {
                    calls: u32::MAX,
                    decided_by: Decider::Unlimited,
                },
            },
        }
    }

    /// True when this capacity refuses every call (headroom ate the ceiling, or
    /// the operator pinned 0).
    #[must_use]
    pub const fn admits_nothing(&self) -> bool {
        self.calls == 0
    }
}

impl fmt::Display for Capacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.decided_by == Decider::Unlimited {
            return f.write_str("capacity unlimited (no ceiling configured)");
        }
        write!(f, "capacity {} decided by {}", self.calls, self.decided_by)
    }
}
