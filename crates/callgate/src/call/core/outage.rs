//! Provider outages the clients ride out on their own: a dropped STT, TTS
//! or dialog connection is reconnected inside its client, and the core only
//! hears about it to report it (the shell counts it), log it and leave a
//! timeline event. The
//! caller is covered meanwhile by the watchdog's clocks (a reply that runs
//! dry plays the apology); a client that gives up ends with `Closed`,
//! which takes the ordinary provider-closed path (apology, transfer).

use std::time::{Duration, Instant};

use serde_json::json;
use tracing::{info, warn};

use super::{CallCore, Report};
use crate::end::Provider;

/// One reconnect report from a provider client.
pub(crate) enum Outage<'a> {
    /// Attempt `attempt` begins after a backoff.
    Reconnecting {
        attempt: u32,
        capacity: bool,
        error: &'a str,
    },
    /// The connection is back after `down_for`.
    Reconnected { down_for: Duration },
}

impl CallCore {
    pub(super) fn on_reconnecting(
        &mut self,
        provider: Provider,
        attempt: u32,
        capacity: bool,
        error: &str,
        now: Instant,
    ) {
        let outage = Outage::Reconnecting {
            attempt,
            capacity,
            error,
        };
        self.on_outage(provider, outage, now);
    }

    pub(super) fn on_outage(&mut self, provider: Provider, outage: Outage<'_>, now: Instant) {
        let p = provider.label();
        match outage {
            Outage::Reconnecting {
                attempt,
                capacity,
                error,
            } => {
                let why = if capacity { "capacity" } else { "down" };
                warn!(
                    provider = p,
                    attempt, why, error, "provider connection lost; reconnecting"
                );
                self.report(Report::Reconnecting { provider, capacity });
                let detail = json!({ "provider": p, "attempt": attempt, "why": why });
                self.event("provider_reconnecting", detail, now);
            }
            Outage::Reconnected { down_for } => {
                let down_ms = down_for.as_millis() as u64;
                info!(provider = p, down_ms, "provider connection restored");
                self.report(Report::Reconnected(provider));
                let detail = json!({ "provider": p, "down_ms": down_ms });
                self.event("provider_reconnected", detail, now);
            }
        }
    }
}
