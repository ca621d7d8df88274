//! The `[ownership]` section: heartbeats and the lease after which a silent
//! instance's open calls are closed by a live one (`ownership`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ms;

/// How this instance proves it is alive and judges others
/// (`state_store::ownership`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OwnershipConfig {
    /// How often this instance beats in `instance_heartbeats` and looks for
    /// silent owners' rows.
    pub heartbeat_interval_ms: u64,
    /// An instance whose latest beat is older than this (by the database's
    /// clock) has lost its calls: a live instance closes their rows as
    /// `owner_lost`. More than twice the interval, so one late beat does
    /// not cost an instance its calls.
    pub lease_ms: u64,
    /// Bound on each heartbeat and each reclaim statement; below the
    /// interval, so one slow statement cannot run into the next tick.
    pub query_timeout_ms: u64,
}

impl Default for OwnershipConfig {
    fn default() -> Self {
        OwnershipConfig {
            heartbeat_interval_ms: 1_000,
            lease_ms: 5_000,
            query_timeout_ms: 800,
        }
    }
}

impl OwnershipConfig {
    /// The interval as a duration.
    #[must_use]
    pub fn interval(&self) -> Duration {
        ms(self.heartbeat_interval_ms)
    }

    /// The lease as a duration.
    #[must_use]
    pub fn lease(&self) -> Duration {
        ms(self.lease_ms)
    }

    /// The per-statement bound as a duration.
    #[must_use]
    pub fn query_timeout(&self) -> Duration {
        ms(self.query_timeout_ms)
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.heartbeat_interval_ms == 0 || self.query_timeout_ms == 0 {
            return Err(
                "ownership.heartbeat_interval_ms and ownership.query_timeout_ms must be positive"
                    .into(),
            );
        }
        if self.lease_ms <= 2 * self.heartbeat_interval_ms {
            return Err("ownership.lease_ms must be more than twice ownership.heartbeat_interval_ms (one late beat must not lose the instance its calls)".into());
        }
        if self.query_timeout_ms >= self.heartbeat_interval_ms {
            return Err(
                "ownership.query_timeout_ms must be below ownership.heartbeat_interval_ms".into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_bad_relations_are_explained() {
        OwnershipConfig::default().validate().unwrap();
        let short = OwnershipConfig {
            lease_ms: 2_000,
            ..OwnershipConfig::default()
        };
        assert!(short.validate().unwrap_err().contains("lease_ms"));
        let slow = OwnershipConfig {
            query_timeout_ms: 1_000,
            ..OwnershipConfig::default()
        };
        assert!(slow.validate().unwrap_err().contains("query_timeout_ms"));
        let zero = OwnershipConfig {
            heartbeat_interval_ms: 0,
            ..OwnershipConfig::default()
        };
        assert!(zero.validate().is_err());
    }
}
