//! Committed pressure of this instance now: the gate's active calls plus the
//! extra weight of calls speaking, delegating (a tool running) and recovering
//! (a provider reconnecting or a transfer in progress), with the configured
//! `[pressure]` weights. Read-only: it never changes admission.

use std::sync::Arc;

use serde::Serialize;

use crate::app::{CallServices, Counters, OwnedGauge};
use crate::end::Provider;

/// Committed pressure and what it is made of.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PressureView {
    /// Admitted calls holding a permit.
    pub active: u32,
    /// Calls whose bot is speaking now.
    pub speaking: u32,
    /// Calls with at least one tool call running.
    pub delegating: u32,
    /// Calls with a provider reconnecting or a transfer in progress.
    pub recovering: u32,
    /// `admission::pressure` of the above, in sessions.
    pub score: f64,
    /// Admission capacity now (`u32::MAX` when unlimited).
    pub capacity: u32,
    /// `[pressure].weights_version`: which weights produced `score`.
    pub weights_version: u32,
}

/// The pressure view from the gate and the app's phase gauges.
pub fn view(app: &CallServices) -> PressureView {
    let snap = app.gate.snapshot();
    let weights = app.cfg().pressure.weights();
    let c = &app.counters;
    let count = |a| u32::try_from(Counters::get(a)).unwrap_or(u32::MAX);
    let (speaking, delegating, recovering) = (
        count(&c.speaking),
        count(&c.delegating),
        count(&c.recovering),
    );
    PressureView {
        active: snap.active,
        speaking,
        delegating,
        recovering,
        score: admission::pressure(snap.active, speaking, delegating, recovering, &weights),
        capacity: snap.capacity,
        weights_version: weights.version,
    }
}

/// One call's share of a phase gauge (`delegating`, `recovering`): the
/// [`OwnedGauge`] is created when the phase begins and dropped when it ends,
/// so the process count is the number of guards alive — never a counter
/// balanced by hand, and a call that ends or panics mid-phase gives its
/// share back by dropping.
pub struct PhaseGauge {
    /// `None`: not attached to the counters (unit tests of the owner); the phase
    /// is still tracked, nothing is counted.
    counters: Option<Arc<Counters>>,
    make: fn(Arc<Counters>) -> OwnedGauge,
    held: Option<OwnedGauge>,
    busy: bool,
}

impl PhaseGauge {
    /// The `delegating` share of one call.
    pub fn delegating(counters: Option<Arc<Counters>>) -> Self {
        Self::new(counters, OwnedGauge::delegating)
    }

    /// The `recovering` share of one call.
    pub fn recovering(counters: Option<Arc<Counters>>) -> Self {
        Self::new(counters, OwnedGauge::recovering)
    }

    fn new(counters: Option<Arc<Counters>>, make: fn(Arc<Counters>) -> OwnedGauge) -> Self {
        PhaseGauge {
            counters,
            make,
            held: None,
            busy: false,
        }
    }

    /// The phase is (still) on or off; only a change moves the gauge.
    pub fn set(&mut self, busy: bool) {
        if busy == self.busy {
            return;
        }
        self.busy = busy;
        self.held = match (&self.counters, busy) {
            (Some(c), true) => Some((self.make)(Arc::clone(c))),
            _ => None,
        };
    }

    /// Whether the phase is on.
    pub fn is_on(&self) -> bool {
        self.busy
    }
}

/// Which of one call's provider connections are reconnecting, and its
/// `recovering` share while any is or while the call is handed off.
pub struct Recovery {
    /// Reconnecting now, in `Provider` order: stt, tts, dialog.
    down: [bool; 3],
    handing_off: bool,
    gauge: PhaseGauge,
}

impl Recovery {
    pub fn new(counters: Option<Arc<Counters>>) -> Self {
        Recovery {
            down: [false; 3],
            handing_off: false,
            gauge: PhaseGauge::recovering(counters),
        }
    }

    /// A provider client reported `Reconnecting` (true) or `Reconnected`
    /// / `Closed` (false).
    pub fn provider(&mut self, provider: Provider, reconnecting: bool) {
        let i = match provider {
            Provider::Stt => 0,
            Provider::Tts => 1,
            Provider::Dialog => 2,
        };
        self.down[i] = reconnecting;
        self.update();
    }

    /// A transfer (Twilio redirect, partner `transfer`, SIP REFER) started
    /// (true) or finished (false).
    pub fn handing_off(&mut self, on: bool) {
        self.handing_off = on;
        self.update();
    }

    fn update(&mut self) {
        self.gauge
            .set(self.handing_off || self.down.iter().any(|d| *d));
    }

    pub fn is_on(&self) -> bool {
        self.gauge.is_on()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_moves_only_on_a_change() {
        let mut g = PhaseGauge::delegating(None);
        assert!(!g.is_on());
        g.set(true);
        g.set(true);
        assert!(g.is_on());
        g.set(false);
        assert!(!g.is_on());
    }

    #[test]
    fn recovery_lasts_while_any_provider_is_down_or_a_handoff_runs() {
        let mut r = Recovery::new(None);
        r.provider(Provider::Stt, true);
        r.provider(Provider::Dialog, true);
        r.provider(Provider::Stt, false);
        assert!(r.is_on(), "dialog still reconnecting");
        r.provider(Provider::Dialog, false);
        assert!(!r.is_on());
        r.handing_off(true);
        assert!(r.is_on());
        r.handing_off(false);
        assert!(!r.is_on());
    }
}
