//! Shared helpers for the admission scenario tests: configs and manual polling.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use admission::{
    CapacitySetting, Ceilings, Gate, GateConfig, PartnerId, PartnerLoad, Permit, Rejection, Ticket,
};

pub const QUEUE_TIMEOUT: Duration = Duration::from_secs(4);

pub fn pinned(calls: u32, queue_max: usize) -> GateConfig {
    GateConfig {
        capacity: CapacitySetting::Pinned(calls),
        ceilings: Ceilings::default(),
        queue_max,
        queue_timeout: QUEUE_TIMEOUT,
        ..GateConfig::default()
    }
}

pub fn gate(calls: u32, queue_max: usize) -> (Gate, Instant) {
    let t0 = Instant::now();
    (Gate::new(pinned(calls, queue_max), t0), t0)
}

/// A gate with `calls` capacity and these partner quotas.
pub fn gate_with_quotas(calls: u32, queue_max: usize, quotas: &[(&str, u32)]) -> (Gate, Instant) {
    let t0 = Instant::now();
    (Gate::new(with_quotas(calls, queue_max, quotas), t0), t0)
}

pub fn with_quotas(calls: u32, queue_max: usize, quotas: &[(&str, u32)]) -> GateConfig {
    GateConfig {
        partner_quotas: quotas
            .iter()
            .map(|&(name, quota)| (PartnerId::new(name), quota))
            .collect(),
        ..pinned(calls, queue_max)
    }
}

pub fn pid(name: &str) -> PartnerId {
    PartnerId::new(name)
}

/// The partner's row in the snapshot, if it has one.
pub fn load(gate: &Gate, partner: &str) -> Option<PartnerLoad> {
    gate.snapshot()
        .partners
        .into_iter()
        .find(|l| l.partner.as_str() == partner)
}

/// The partner's calls in the gate (admitted, granted or queued); 0 without a row.
pub fn in_gate(gate: &Gate, partner: &str) -> u32 {
    load(gate, partner).map_or(0, |l| l.in_gate())
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A waker that counts how often it was woken.
#[derive(Default)]
pub struct CountingWaker(AtomicUsize);

impl CountingWaker {
    pub fn new() -> (Arc<Self>, Waker) {
        let counter = Arc::new(Self::default());
        let waker = Waker::from(Arc::clone(&counter));
        (counter, waker)
    }

    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

pub fn poll_once(ticket: &mut Ticket, waker: &Waker) -> Poll<Result<Permit, Rejection>> {
    Pin::new(ticket).poll(&mut Context::from_waker(waker))
}

/// Polls a ticket that must already be resolved.
pub fn ready(ticket: &mut Ticket) -> Result<Permit, Rejection> {
    match poll_once(ticket, Waker::noop()) {
        Poll::Ready(result) => result,
        Poll::Pending => panic!("ticket {} still pending", ticket.id()),
    }
}

pub fn assert_pending(ticket: &mut Ticket) {
    assert!(
        poll_once(ticket, Waker::noop()).is_pending(),
        "ticket {} should still wait",
        ticket.id()
    );
}

/// The bookkeeping identity every scenario must end with.
pub fn assert_balanced(gate: &Gate) {
    let snap = gate.snapshot();
    assert_eq!(
        snap.admitted_total - snap.released_total,
        u64::from(snap.active),
        "admitted - released must equal active: {snap:?}"
    );
}
