//! Shared helpers for the admission scenario tests: configs and manual polling.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use admission::{CapacitySetting, Ceilings, Gate, GateConfig, Permit, Rejection, Ticket};

pub const QUEUE_TIMEOUT: Duration = Duration::from_secs(4);

pub fn pinned(calls: u32, queue_max: usize) -> GateConfig {
    GateConfig {
        capacity: CapacitySetting::Pinned(calls),
        ceilings: Ceilings::default(),
        queue_max,
        queue_timeout: QUEUE_TIMEOUT,
    }
}

pub fn gate(calls: u32, queue_max: usize) -> (Gate, Instant) {
    let t0 = Instant::now();
    (Gate::new(pinned(calls, queue_max), t0), t0)
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
