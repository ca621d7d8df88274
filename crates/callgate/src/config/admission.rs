//! `[admission]`: capacity, the wait queue, the instance ceiling and the
//! setups-in-flight bound.

use std::time::Duration;

use admission::InstanceConfig;
use serde::{Deserialize, Serialize};

use super::{DatabaseConfig, ms};

/// `"auto"` or a pinned number of calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MaxCalls {
    Pinned(u32),
    Auto(AutoTag),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AutoTag {
    Auto,
}

/// `"auto"` or a pinned number of setups in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MaxSetups {
    Pinned(u32),
    Auto(AutoTag),
}

/// Longest lateness window accepted: a p99 over more than a minute reacts
/// too late to protect a call.
const MAX_LAG_WINDOW_MS: u64 = 60_000;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdmissionConfig {
    /// `"auto"`: the smallest of the four ceilings minus `headroom`; or a number.
    pub max_concurrent_calls: MaxCalls,
    /// Slots kept free below the smallest ceiling when on auto.
    pub headroom: u32,
    /// Calls allowed to wait for a slot; one more is rejected at once.
    pub queue_max: usize,
    /// Longest wait for a slot before the call goes to the overflow path.
    pub queue_timeout_ms: u64,
    /// The instance ceiling: p99 lateness of the 20 ms media clock (the
    /// runtime's ticker and the calls' frame deadlines) above which the
    /// instance stops admitting. 0 turns it off. Default 60: the pacer's
    /// lead — later than that, the carrier's buffer runs dry.
    pub max_lag_ms: u64,
    /// The window that p99 is taken over.
    pub lag_window_ms: u64,
    /// Calls whose setup may be in progress at once; more wait in the
    /// queue. `"auto"`: `database.pool_size − database.writers`, so every
    /// setup's ledger write finds a free connection at once.
    pub max_setups: MaxSetups,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            max_concurrent_calls: MaxCalls::Auto(AutoTag::Auto),
            headroom: 2,
            queue_max: 100,
            queue_timeout_ms: 4_000,
            max_lag_ms: 60,
            lag_window_ms: 2_000,
            max_setups: MaxSetups::Auto(AutoTag::Auto),
        }
    }
}

impl AdmissionConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        if self.queue_timeout_ms == 0 && self.queue_max > 0 {
            return Err("admission.queue_timeout_ms must be positive when queue_max > 0".into());
        }
        if self.max_lag_ms > 0 && !(200..=MAX_LAG_WINDOW_MS).contains(&self.lag_window_ms) {
            return Err(format!(
                "admission.lag_window_ms must be between 200 and {MAX_LAG_WINDOW_MS} (got {})",
                self.lag_window_ms
            ));
        }
        if self.max_setups == MaxSetups::Pinned(0) {
            return Err("admission.max_setups must be at least 1 (or \"auto\")".into());
        }
        Ok(())
    }

    /// The instance ceiling's knobs for the gate.
    pub fn instance(&self) -> InstanceConfig {
        InstanceConfig {
            max_lag: ms(self.max_lag_ms),
            window: Duration::from_millis(self.lag_window_ms),
        }
    }

    /// The setups-in-flight bound: pinned, or the connections the pool has
    /// beyond its writers (at least one).
    pub fn max_setups(&self, db: &DatabaseConfig) -> u32 {
        match self.max_setups {
            MaxSetups::Pinned(n) => n,
            MaxSetups::Auto(_) => {
                let spare = db.pool_size.saturating_sub(db.writers).max(1);
                u32::try_from(spare).unwrap_or(u32::MAX)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_setups_are_the_pool_beyond_its_writers() {
        let db = DatabaseConfig::default();
        let adm = AdmissionConfig::default();
        assert_eq!(adm.max_setups(&db), (db.pool_size - db.writers) as u32);
        let pinned = AdmissionConfig {
            max_setups: MaxSetups::Pinned(3),
            ..AdmissionConfig::default()
        };
        assert_eq!(pinned.max_setups(&db), 3);
    }

    #[test]
    fn a_zero_bound_and_a_silly_window_are_refused_by_name() {
        let zero = AdmissionConfig {
            max_setups: MaxSetups::Pinned(0),
            ..AdmissionConfig::default()
        };
        assert!(zero.validate().unwrap_err().contains("max_setups"));
        let window = AdmissionConfig {
            lag_window_ms: 10,
            ..AdmissionConfig::default()
        };
        assert!(window.validate().unwrap_err().contains("lag_window_ms"));
        let off = AdmissionConfig {
            max_lag_ms: 0,
            lag_window_ms: 10,
            ..AdmissionConfig::default()
        };
        assert!(off.validate().is_ok());
        assert!(!off.instance().is_on());
        assert!(AdmissionConfig::default().instance().is_on());
    }
}
