//! Scenario: cancellation, expiry and panics racing grants — capacity is never lost.

use crate::common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::task::Waker;

use admission::RejectReason;
use common::{
    CountingWaker, QUEUE_TIMEOUT, assert_balanced, assert_pending, gate, ms, poll_once, ready,
};

#[test]
fn dropping_a_granted_but_unpolled_ticket_passes_the_slot_on() {
    let (gate, t0) = gate(1, 4);
    let held = gate.try_admit(t0).unwrap();
    let mut first = gate.enqueue(t0).unwrap();
    let mut second = gate.enqueue(t0).unwrap();
    assert_pending(&mut first);
    let (counter, waker) = CountingWaker::new();
    assert!(poll_once(&mut second, &waker).is_pending());

    drop(held); // grants `first`, which is never polled again
    assert_eq!(gate.snapshot().active, 1);
    assert_eq!(counter.count(), 0);
    drop(first); // the caller hung up while waiting

    assert_eq!(counter.count(), 1, "the next waiter is woken");
    let permit = ready(&mut second).unwrap();
    let snap = gate.snapshot();
    assert_eq!(
        (snap.active, snap.admitted_total, snap.released_total),
        (1, 3, 2)
    );
    assert_eq!(
        (snap.unclaimed_total, snap.cancelled_total),
        (1, 0),
        "the dropped grant is counted as unclaimed, not as a cancelled wait"
    );
    drop(permit);
    assert_eq!(gate.snapshot().active, 0);
    assert_balanced(&gate);
}

#[test]
fn dropping_a_ticket_granted_at_enqueue_frees_the_slot() {
    let (gate, t0) = gate(1, 4);
    let ticket = gate.enqueue(t0).unwrap();
    assert!(ticket.is_granted());
    assert_eq!(gate.snapshot().active, 1);
    drop(ticket);
    let snap = gate.snapshot();
    assert_eq!((snap.active, snap.unclaimed_total), (0, 1));
    let _again = gate.try_admit(t0).unwrap();
    assert_balanced(&gate);
}

#[test]
fn cancelling_a_waiting_ticket_leaves_the_queue() {
    let (gate, t0) = gate(1, 1);
    let held = gate.try_admit(t0).unwrap();
    let ticket = gate.enqueue(t0).unwrap();
    assert_eq!(
        gate.enqueue(t0).unwrap_err().reason,
        RejectReason::QueueFull
    );
    drop(ticket);
    let snap = gate.snapshot();
    assert_eq!(
        (snap.queued, snap.cancelled_total, snap.unclaimed_total),
        (0, 1, 0)
    );
    let mut next = gate.enqueue(t0).unwrap(); // the place is free again
    drop(held);
    let _permit = ready(&mut next).unwrap();
    assert_balanced(&gate);
}

#[test]
fn expire_racing_a_grant_returns_the_permit() {
    let (gate, t0) = gate(1, 4);
    let held = gate.try_admit(t0).unwrap();
    let ticket = gate.enqueue(t0).unwrap();
    held.release(t0 + ms(3_999)); // the grant lands just before the timer fires
    let permit = ticket.expire(t0 + QUEUE_TIMEOUT).unwrap();
    assert_eq!(permit.waited(), ms(3_999));
    let snap = gate.snapshot();
    assert_eq!((snap.active, snap.rejected_total.queue_timeout), (1, 0));
}

#[test]
fn expire_after_a_drain_reports_the_drain() {
    let (gate, t0) = gate(1, 4);
    let _held = gate.try_admit(t0).unwrap();
    let ticket = gate.enqueue(t0).unwrap();
    gate.start_drain(t0 + ms(50));
    let rejection = ticket.expire(t0 + QUEUE_TIMEOUT).unwrap_err();
    assert_eq!(
        (rejection.reason, rejection.waited),
        (RejectReason::Draining, ms(50))
    );
}

#[test]
fn a_permit_dropped_during_a_panic_frees_its_slot() {
    let (gate, t0) = gate(1, 4);
    let permit = gate.try_admit(t0).unwrap();
    let mut waiter = gate.enqueue(t0).unwrap();
    assert_pending(&mut waiter);

    let crashed = catch_unwind(AssertUnwindSafe(move || {
        let _call_actor_owns = permit;
        panic!("call actor crashed");
    }));
    assert!(crashed.is_err());
    let granted = ready(&mut waiter).unwrap();
    assert_eq!(gate.snapshot().active, 1);
    drop(granted);
    let snap = gate.snapshot();
    assert_eq!((snap.active, snap.released_total), (0, 2));
}

#[test]
fn a_permit_releases_exactly_once() {
    let (gate, t0) = gate(2, 0);
    let a = gate.try_admit(t0).unwrap();
    let b = gate.try_admit(t0).unwrap();
    assert_ne!(a.id(), b.id());
    a.release(t0 + ms(1)); // explicit release, then the value is gone: no second release
    assert_eq!(gate.snapshot().released_total, 1);
    assert_eq!(gate.snapshot().active, 1);
    drop(b);
    let snap = gate.snapshot();
    assert_eq!((snap.active, snap.released_total), (0, 2));
}

#[test]
fn polling_a_finished_ticket_fails_loudly_instead_of_hanging() {
    let (gate, t0) = gate(1, 4);
    let mut ticket = gate.enqueue(t0).unwrap();
    let _permit = ready(&mut ticket).unwrap();
    let again = poll_once(&mut ticket, Waker::noop());
    let std::task::Poll::Ready(Err(rejection)) = again else {
        panic!("a reused ticket must resolve with an error");
    };
    assert_eq!(rejection.reason, RejectReason::Internal);
    assert!(!rejection.is_retryable());
    assert_eq!(
        gate.snapshot().rejected_total.total(),
        0,
        "a bug is not a decision"
    );
    assert_eq!(gate.snapshot().active, 1);
}
