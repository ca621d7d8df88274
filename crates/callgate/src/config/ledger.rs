//! The `[ledger]` and `[pressure]` sections: the counter reconciler
//! (`reconcile`) and the committed-pressure weights (`admission::pressure`).

use serde::{Deserialize, Serialize};

/// How the three session counters are compared (`reconcile`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LedgerConfig {
    /// How often the reconciler reads the three counters and compares them.
    pub reconcile_interval_ms: u64,
    /// A divergence lasting longer than this writes one reconciliation
    /// receipt. Shorter ones are normal: the ledger row opens just after
    /// admission and the routing report lags by the agent-check interval.
    pub divergence_window_s: u64,
    /// A reading older than this is reported as unknown, never as a value.
    pub reading_max_age_ms: u64,
    /// Bound on the ledger count query; a slower answer is an unknown reading.
    pub query_timeout_ms: u64,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            reconcile_interval_ms: 1_000,
            divergence_window_s: 10,
            reading_max_age_ms: 5_000,
            query_timeout_ms: 1_000,
        }
    }
}

impl LedgerConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.reconcile_interval_ms == 0 {
            return Err("ledger.reconcile_interval_ms must be positive".into());
        }
        if self.reading_max_age_ms == 0 || self.query_timeout_ms == 0 {
            return Err(
                "ledger.reading_max_age_ms and ledger.query_timeout_ms must be positive".into(),
            );
        }
        Ok(())
    }
}

/// Weights of committed pressure:
/// `active + speaking·w + delegating·w + recovering·w`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PressureConfig {
    /// Extra weight of a call whose bot is speaking.
    pub speaking: f64,
    /// Extra weight of a call with at least one tool call running.
    pub delegating: f64,
    /// Extra weight of a call with a provider reconnecting or a transfer
    /// in progress.
    pub recovering: f64,
    /// Bump whenever the weights change meaning; load reports carry it.
    pub weights_version: u32,
}

impl Default for PressureConfig {
    fn default() -> Self {
        let w = admission::PressureWeights::default();
        PressureConfig {
            speaking: w.speaking,
            delegating: w.delegating,
            recovering: w.recovering,
            weights_version: w.version,
        }
    }
}

impl PressureConfig {
    pub fn weights(&self) -> admission::PressureWeights {
        admission::PressureWeights {
            version: self.weights_version,
            speaking: self.speaking,
            delegating: self.delegating,
            recovering: self.recovering,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        let ok = |w: f64| w.is_finite() && w >= 0.0;
        if !(ok(self.speaking) && ok(self.delegating) && ok(self.recovering)) {
            return Err("pressure weights must be finite and not negative".into());
        }
        Ok(())
    }
}
