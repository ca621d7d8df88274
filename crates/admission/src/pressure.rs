//! Committed pressure: load as the work this instance has promised, not CPU.

/// Weights for the extra load of calls in demanding phases. Versioned so a load
/// report can say which formula produced its number.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PressureWeights {
    /// Bumped whenever the formula or the defaults change meaning.
    pub version: u32,
    /// Extra weight of a call whose bot is speaking (TTS streaming, pacing).
    pub speaking: f64,
    /// Extra weight of a call with background work (tool calls) running.
    pub delegating: f64,
    /// Extra weight of a call reconnecting or handing off (two connections alive).
    pub recovering: f64,
}

impl Default for PressureWeights {
    /// Version 1: speaking 0.5, delegating 0.5, recovering 1.0.
    fn default() -> Self {
        Self {
            version: 1,
            speaking: 0.5,
            delegating: 0.5,
            recovering: 1.0,
        }
    }
}

/// `active + w_s·speaking + w_d·delegating + w_r·recovering`.
///
/// `speaking`, `delegating` and `recovering` are subsets of `active`, counted
/// again with their extra weight.
#[must_use]
pub fn pressure(
    active: u32,
    speaking: u32,
    delegating: u32,
    recovering: u32,
    weights: &PressureWeights,
) -> f64 {
    f64::from(active)
        + weights.speaking * f64::from(speaking)
        + weights.delegating * f64::from(delegating)
        + weights.recovering * f64::from(recovering)
}

/// `pressure / capacity`, clamped to `0..=1`, for load-balancer weights.
///
/// A capacity of 0 admits nothing, so it reports full (1.0). A non-finite
/// pressure (NaN weights) also reports full: when in doubt, send calls elsewhere.
#[must_use]
pub fn utilization(pressure: f64, capacity: u32) -> f64 {
    if capacity == 0 || pressure.is_nan() {
        return 1.0;
    }
    (pressure / f64::from(capacity)).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pressure_weighs_phases_on_top_of_active() {
        let w = PressureWeights::default();
        assert_eq!(w.version, 1);
        assert!((pressure(10, 4, 2, 1, &w) - 14.0).abs() < 1e-9);
        assert!((pressure(0, 0, 0, 0, &w)).abs() < 1e-9);
        let custom = PressureWeights {
            version: 2,
            speaking: 1.0,
            delegating: 0.0,
            recovering: 2.0,
        };
        assert!((pressure(3, 3, 3, 1, &custom) - 8.0).abs() < 1e-9);
    }

    #[test]
    fn utilization_is_clamped_and_zero_capacity_is_full() {
        assert!((utilization(5.0, 20) - 0.25).abs() < 1e-9);
        assert!((utilization(30.0, 20) - 1.0).abs() < 1e-9);
        assert!((utilization(-1.0, 20)).abs() < 1e-9);
        assert!((utilization(0.0, 0) - 1.0).abs() < 1e-9);
        assert!((utilization(f64::NAN, 20) - 1.0).abs() < 1e-9);
        assert!((utilization(f64::INFINITY, 20) - 1.0).abs() < 1e-9);
    }
}
