//! Per-partner quotas: who sent a call, how many of its calls the gate holds, and
//! the per-partner view the server exports as a gauge.

use std::collections::BTreeMap;
use std::fmt;

/// A tenant that sends calls over a partner WebSocket. Calls from the carrier
/// path have no partner (`None` at the admission entry points).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartnerId(String);

impl PartnerId {
    /// Wraps the partner's name as configured.
    #[must_use]
    pub fn new(name: impl Into<String>) -> Self {
        Self(name.into())
    }

    /// The name, for log fields and metric labels.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for PartnerId {
    fn from(name: String) -> Self {
        Self(name)
    }
}

impl From<&str> for PartnerId {
    fn from(name: &str) -> Self {
        Self(name.to_owned())
    }
}

impl fmt::Display for PartnerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One partner's share of the gate at one moment (see
/// [`crate::GateSnapshot::partners`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartnerLoad {
    /// Which partner.
    pub partner: PartnerId,
    /// Its slots held: live permits plus grants not yet claimed by their ticket.
    pub active: u32,
    /// Its waiters in the FIFO queue.
    pub queued: u32,
    /// Its `max_concurrent_calls`, `None` when it has no quota entry (unlimited:
    /// only the gate's capacity applies).
    pub quota: Option<u32>,
}

impl PartnerLoad {
    /// `active + queued`: what the quota is checked against.
    #[must_use]
    pub const fn in_gate(&self) -> u32 {
        self.active.saturating_add(self.queued)
    }
}

/// How many calls of each partner the gate holds (admitted, granted or queued).
///
/// Every partner is counted, with or without a quota, so a quota added by a
/// reload sees the calls already in the gate. An entry is removed when it
/// reaches zero, so the map never outgrows the partners actually sending calls.
#[derive(Debug, Default)]
pub(crate) struct PartnerBook {
    in_gate: BTreeMap<PartnerId, u32>,
}

impl PartnerBook {
    pub(crate) fn count(&self, partner: &PartnerId) -> u32 {
        self.in_gate.get(partner).copied().unwrap_or(0)
    }

    /// True when `partner` already has `quota` or more calls in the gate. A
    /// partner with no quota entry is never refused here.
    pub(crate) fn at_quota(&self, partner: &PartnerId, quotas: &BTreeMap<PartnerId, u32>) -> bool {
        quotas
            .get(partner)
            .is_some_and(|&quota| self.count(partner) >= quota)
    }

    /// One more call of this partner entered the gate (admitted or queued).
    pub(crate) fn join(&mut self, partner: Option<&PartnerId>) {
        if let Some(partner) = partner {
            let n = self.in_gate.entry(partner.clone()).or_insert(0);
            *n = n.saturating_add(1);
        }
    }

    /// One call of this partner left the gate (released, cancelled or rejected).
    pub(crate) fn leave(&mut self, partner: Option<&PartnerId>) {
        let Some(partner) = partner else { return };
        if let Some(n) = self.in_gate.get_mut(partner) {
            // Saturating: even a bookkeeping bug must never wrap a count around.
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.in_gate.remove(partner);
            }
        }
    }

    /// Every partner with a quota or with calls in the gate, in id order.
    /// `queued` lists the partner of each queued waiter.
    pub(crate) fn loads<'a>(
        &self,
        quotas: &BTreeMap<PartnerId, u32>,
        queued: impl Iterator<Item = &'a PartnerId>,
    ) -> Vec<PartnerLoad> {
        let mut waiting: BTreeMap<&PartnerId, u32> = BTreeMap::new();
        for partner in queued {
            *waiting.entry(partner).or_insert(0) += 1;
        }
        let mut ids: Vec<&PartnerId> = quotas.keys().chain(self.in_gate.keys()).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter()
            .map(|partner| {
                let queued = waiting.get(partner).copied().unwrap_or(0);
                PartnerLoad {
                    partner: partner.clone(),
                    active: self.count(partner).saturating_sub(queued),
                    queued,
                    quota: quotas.get(partner).copied(),
                }
            })
            .collect()
    }
}
