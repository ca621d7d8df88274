//! Scenario: drain, hot reload and dependency health over the gate's life.

use crate::common;

use std::task::Poll;

use admission::{
    CapacitySetting, Ceilings, Decider, Dependency, ErrorSource, GateConfig, RejectReason,
};
use common::{
    CountingWaker, QUEUE_TIMEOUT, assert_balanced, assert_pending, gate, ms, pinned, poll_once,
    ready,
};

#[test]
fn drain_wakes_waiters_rejects_everything_after_and_permits_still_release() {
    let (gate, t0) = gate(1, 4);
    let held = gate.try_admit(t0).unwrap();
    let mut waiters: Vec<_> = (0..2).map(|_| gate.enqueue(t0).unwrap()).collect();
    let wakers: Vec<_> = (0..2).map(|_| CountingWaker::new()).collect();
    for (ticket, (_, waker)) in waiters.iter_mut().zip(&wakers) {
        assert!(poll_once(ticket, waker).is_pending());
    }

    gate.start_drain(t0 + ms(200));
    assert!(gate.is_draining());
    for (ticket, (counter, waker)) in waiters.iter_mut().zip(&wakers) {
        assert_eq!(counter.count(), 1);
        let Poll::Ready(Err(r)) = poll_once(ticket, waker) else {
            panic!("waiter must be rejected by the drain");
        };
        assert_eq!((r.reason, r.waited), (RejectReason::Draining, ms(200)));
        assert!(!r.is_retryable());
    }

    assert_eq!(
        gate.try_admit(t0 + ms(300)).unwrap_err().reason,
        RejectReason::Draining
    );
    assert_eq!(
        gate.enqueue(t0 + ms(300)).unwrap_err().reason,
        RejectReason::Draining
    );
    gate.start_drain(t0 + ms(400)); // idempotent
    drop(held);
    // A freed slot during drain admits nobody.
    assert_eq!(
        gate.try_admit(t0 + ms(500)).unwrap_err().reason,
        RejectReason::Draining
    );
    let snap = gate.snapshot();
    assert_eq!((snap.active, snap.queued, snap.admitted_total), (0, 0, 1));
    assert_eq!(snap.rejected_total.draining, 5);
    assert_balanced(&gate);
}

#[test]
fn ending_a_drain_reopens_admission_and_keeps_what_it_refused() {
    let (gate, t0) = gate(1, 4);
    let held = gate.try_admit(t0).unwrap();
    let mut refused = gate.enqueue(t0).unwrap();
    let (_, waker) = CountingWaker::new();
    gate.start_drain(t0 + ms(10));
    assert!(gate.end_drain(t0 + ms(20)), "the gate was draining");
    assert!(
        !gate.end_drain(t0 + ms(21)),
        "a second end finds nothing to end"
    );
    assert!(!gate.is_draining());
    // The waiter the drain woke stays refused: it already took the overflow path.
    let Poll::Ready(Err(r)) = poll_once(&mut refused, &waker) else {
        panic!("the drain's refusal stands after the drain ends");
    };
    assert_eq!(r.reason, RejectReason::Draining);
    // New arrivals are decided as before the drain, by capacity.
    assert_ne!(
        gate.try_admit(t0 + ms(30)).unwrap_err().reason,
        RejectReason::Draining,
        "full is full again, not draining"
    );
    drop(held);
    let second = gate.try_admit(t0 + ms(40)).expect("the freed slot admits");
    drop(second);
    let snap = gate.snapshot();
    assert_eq!(
        (
            snap.active,
            snap.admitted_total,
            snap.rejected_total.draining
        ),
        (0, 2, 1)
    );
    assert!(!snap.draining);
    assert_balanced(&gate);
}

#[test]
fn lowering_capacity_ends_nothing_and_blocks_admission_until_active_falls() {
    let (gate, t0) = gate(3, 4);
    let mut permits: Vec<_> = (0..3).map(|_| gate.try_admit(t0).unwrap()).collect();
    gate.set_config(pinned(1, 4), t0 + ms(10));
    let snap = gate.snapshot();
    assert_eq!(
        (snap.active, snap.capacity),
        (3, 1),
        "lowering ends no call"
    );

    let mut waiter = gate.enqueue(t0 + ms(20)).unwrap();
    assert_pending(&mut waiter);
    permits.pop();
    assert_pending(&mut waiter); // active 2 >= capacity 1
    permits.pop();
    assert_pending(&mut waiter); // active 1 >= capacity 1
    permits.pop();
    let permit = ready(&mut waiter).unwrap(); // active 0 < 1
    assert_eq!(
        gate.try_admit(t0 + ms(30)).unwrap_err().reason,
        RejectReason::AtCapacity
    );
    drop(permit);
    assert_balanced(&gate);
}

#[test]
fn raising_capacity_grants_waiters_at_once() {
    let (gate, t0) = gate(1, 4);
    let _held = gate.try_admit(t0).unwrap();
    let mut a = gate.enqueue(t0).unwrap();
    let mut b = gate.enqueue(t0).unwrap();
    let mut c = gate.enqueue(t0).unwrap();
    let (counter, waker) = CountingWaker::new();
    assert!(poll_once(&mut a, &waker).is_pending());

    let raised = GateConfig {
        capacity: CapacitySetting::Auto { headroom: 1 },
        ceilings: Ceilings {
            tts_sessions: Some(4),
            ..Ceilings::default()
        },
        ..pinned(0, 4)
    };
    gate.set_config(raised.clone(), t0 + ms(100));
    assert_eq!(gate.capacity().decided_by, Decider::Tts);
    assert_eq!(gate.config(), raised);
    assert_eq!(counter.count(), 1);
    let pa = ready(&mut a).unwrap();
    let pb = ready(&mut b).unwrap();
    assert_eq!(pa.waited(), ms(100));
    assert!(pa.id() < pb.id());
    assert_pending(&mut c);
    let snap = gate.snapshot();
    assert_eq!((snap.active, snap.queued, snap.max_active), (3, 1, 3));
}

#[test]
fn a_down_dependency_rejects_admissions_and_fails_waiters_fast() {
    let (gate, t0) = gate(1, 4);
    let held = gate.try_admit(t0).unwrap();
    let mut waiter = gate.enqueue(t0).unwrap();
    assert_pending(&mut waiter);

    gate.mark_dependency(Dependency::Tts, false, t0 + ms(40));
    gate.mark_dependency(Dependency::Stt, false, t0 + ms(40));
    let r = ready(&mut waiter).unwrap_err();
    assert_eq!(r.reason, RejectReason::DependencyDown(Dependency::Tts));
    assert_eq!(r.waited, ms(40));
    assert_eq!(r.reason.as_str(), "dependency_down");
    assert_eq!(r.source_kind(), ErrorSource::Provider);
    assert!(r.is_retryable());

    drop(held);
    let first_down = gate.try_admit(t0 + ms(50)).unwrap_err();
    assert_eq!(
        first_down.reason,
        RejectReason::DependencyDown(Dependency::Stt)
    );
    assert!(first_down.to_string().contains("dependency stt is down"));
    assert_eq!(
        gate.snapshot().dependencies_down,
        vec![Dependency::Stt, Dependency::Tts]
    );

    gate.mark_dependency(Dependency::Stt, true, t0 + ms(60));
    gate.mark_dependency(Dependency::Tts, true, t0 + ms(60));
    let _back = gate.try_admit(t0 + ms(70)).unwrap();
    let snap = gate.snapshot();
    assert!(snap.dependencies_down.is_empty());
    assert_eq!(snap.rejected_total.dependency_down, 2);
}

#[test]
fn every_wait_has_a_deadline_even_with_a_huge_timeout() {
    let (gate, t0) = gate(1, 4);
    gate.set_config(
        GateConfig {
            queue_timeout: std::time::Duration::MAX,
            ..pinned(1, 4)
        },
        t0,
    );
    let _held = gate.try_admit(t0).unwrap();
    let ticket = gate.enqueue(t0).unwrap();
    assert_eq!(ticket.deadline(), t0 + admission::MAX_QUEUE_TIMEOUT);
    assert!(QUEUE_TIMEOUT < admission::MAX_QUEUE_TIMEOUT);
}

#[test]
fn drain_takes_back_grants_no_ticket_has_collected() {
    let (gate, t0) = gate(1, 4);
    let held = gate.try_admit(t0).unwrap();
    let mut granted = gate.enqueue(t0).unwrap();
    assert_pending(&mut granted);
    held.release(t0 + ms(100)); // grants `granted`, which has not polled yet
    assert_eq!(gate.snapshot().active, 1);

    gate.start_drain(t0 + ms(150));
    let r = ready(&mut granted).unwrap_err();
    assert_eq!((r.reason, r.waited), (RejectReason::Draining, ms(150)));
    let snap = gate.snapshot();
    assert_eq!(
        (snap.active, snap.admitted_total, snap.released_total),
        (0, 2, 2)
    );
}
