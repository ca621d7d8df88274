//! The `[faults]` section: deliberate defects, for proving that a check can
//! fail (a drill, an auditor, a dashboard). Every switch is off by default;
//! one that is on is logged at `error` when the server starts and printed
//! by `callgate serve --check`, so it cannot reach production unnoticed.

use serde::{Deserialize, Serialize};

/// Deliberate defects. Never turn one on where callers are real.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct FaultsConfig {
    /// Every ending call forgets its admission permit instead of releasing
    /// it: the slot is never given back (capacity shrinks by one per call),
    /// the receipt's `active_counter_delta` is 1/0 (the auditor's
    /// `leaked_counter`) and the runtime counter runs ahead of the ledger.
    /// Read at each call's teardown, so `/admin/reload` turns it on or off.
    pub leak_permits: bool,
}

impl FaultsConfig {
    /// The configuration keys of the switches that are on, each with what
    /// it breaks.
    pub fn active(&self) -> Vec<(&'static str, &'static str)> {
        let mut out = Vec::new();
        if self.leak_permits {
            out.push((
                "faults.leak_permits",
                "every ending call leaks its admission permit: capacity shrinks with each call and every receipt shows a leaked counter",
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_fault_is_on_by_default_and_an_active_one_is_named() {
        assert!(FaultsConfig::default().active().is_empty());
        let on = FaultsConfig { leak_permits: true };
        let keys: Vec<&str> = on.active().iter().map(|(k, _)| *k).collect();
        assert_eq!(keys, ["faults.leak_permits"]);
    }
}
