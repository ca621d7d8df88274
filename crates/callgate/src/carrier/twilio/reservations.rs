//! Slots the voice webhook admitted, held until their media stream arrives.
//!
//! The webhook (`POST /v1/twilio/voice`) asks the gate and, when it admits,
//! answers `<Connect><Stream>`; Twilio opens the stream about a second
//! later. The permit is held here under the call's `CallSid` so the stream
//! is admitted on it (no second decision, no race for the slot), and so a
//! caller who is refused is refused at the webhook, before any stream
//! exists. A reservation is bounded: one whose stream does not come within
//! `twilio.webhook.reservation_ms` is released (the slot returns to the
//! gate) and counted (`callgate_twilio_reservations_total{outcome="expired"}`).
//! At most one per `CallSid`: a webhook Twilio retries for the same call
//! finds its reservation instead of taking a second slot. The map holds no
//! more entries than the gate has permits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use admission::Permit;
use state_store::CallId;
use tracing::warn;

use crate::metrics as m;

struct Held {
    permit: Permit,
    call_id: CallId,
    /// Which hold this is (a later one for the same `CallSid` after an
    /// expiry must not be removed by the earlier one's timer).
    token: u64,
}

/// The webhook's reservations, by `CallSid`.
#[derive(Default)]
pub struct Reservations {
    map: Mutex<HashMap<String, Held>>,
    next: std::sync::atomic::AtomicU64,
}

impl Reservations {
    /// The call id already reserved for `call_sid`, if any.
    pub fn reserved(&self, call_sid: &str) -> Option<CallId> {
        lock(&self.map).get(call_sid).map(|h| h.call_id)
    }

    /// Holds `permit` for `call_sid`'s stream for `ttl`; then, unclaimed,
    /// it is released and counted.
    pub fn hold(self: &Arc<Self>, call_sid: &str, call_id: CallId, permit: Permit, ttl: Duration) {
        let token = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let held = Held {
            permit,
            call_id,
            token,
        };
        lock(&self.map).insert(call_sid.to_string(), held);
        let this = Arc::clone(self);
        let sid = call_sid.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(ttl).await;
            if let Some(h) = this.remove_if(&sid, token) {
                h.permit.release(Instant::now());
                metrics::counter!(m::TWILIO_RESERVATIONS, "outcome" => "expired").increment(1);
                warn!(
                    call_sid = %sid,
                    call_id = %h.call_id,
                    ttl_ms = ttl.as_millis() as u64,
                    "webhook reservation released: no media stream came for the call"
                );
            }
        });
    }

    /// The permit (and call id) reserved for `call_sid`'s stream, taken.
    pub fn claim(&self, call_sid: &str) -> Option<(Permit, CallId)> {
        let h = lock(&self.map).remove(call_sid)?;
        metrics::counter!(m::TWILIO_RESERVATIONS, "outcome" => "claimed").increment(1);
        Some((h.permit, h.call_id))
    }

    /// Reservations held now.
    pub fn len(&self) -> usize {
        lock(&self.map).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn remove_if(&self, call_sid: &str, token: u64) -> Option<Held> {
        let mut map = lock(&self.map);
        match map.get(call_sid) {
            Some(h) if h.token == token => map.remove(call_sid),
            _ => None,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use admission::{CapacitySetting, Gate, GateConfig};

    use super::*;

    fn gate(n: u32) -> Gate {
        let cfg = GateConfig {
            capacity: CapacitySetting::Pinned(n),
            queue_max: 0,
            ..GateConfig::default()
        };
        Gate::new(cfg, Instant::now())
    }

    #[tokio::test(start_paused = true)]
    async fn a_claimed_reservation_keeps_its_slot_and_an_unclaimed_one_gives_it_back() {
        let g = gate(2);
        let r = Arc::new(Reservations::default());
        let (a, b) = (CallId::new_random(), CallId::new_random());
        r.hold(
            "CA1",
            a,
            g.try_admit(Instant::now()).unwrap(),
            Duration::from_secs(10),
        );
        r.hold(
            "CA2",
            b,
            g.try_admit(Instant::now()).unwrap(),
            Duration::from_secs(10),
        );
        assert_eq!(g.snapshot().active, 2);
        assert_eq!(r.reserved("CA1"), Some(a));
        let (permit, id) = r.claim("CA1").unwrap();
        assert_eq!(id, a);
        assert!(r.claim("CA1").is_none(), "claimed once");
        tokio::time::sleep(Duration::from_secs(11)).await;
        tokio::task::yield_now().await;
        assert!(r.is_empty());
        assert_eq!(g.snapshot().active, 1, "the claimed slot is still held");
        drop(permit);
        assert_eq!(g.snapshot().active, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_timer_does_not_remove_a_later_hold_of_the_same_call() {
        let g = gate(2);
        let r = Arc::new(Reservations::default());
        let first = CallId::new_random();
        r.hold(
            "CA1",
            first,
            g.try_admit(Instant::now()).unwrap(),
            Duration::from_secs(2),
        );
        // Claimed and dropped (the stream came and went), then held again.
        drop(r.claim("CA1"));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let second = CallId::new_random();
        r.hold(
            "CA1",
            second,
            g.try_admit(Instant::now()).unwrap(),
            Duration::from_secs(5),
        );
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        tokio::task::yield_now().await;
        assert_eq!(r.reserved("CA1"), Some(second), "the first timer left it");
        assert_eq!(g.snapshot().active, 1);
    }
}
