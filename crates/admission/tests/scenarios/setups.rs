//! Scenario: the setups-in-flight bound — a burst waits in the gate's FIFO
//! (with its timeout) instead of in the connection pool.

use crate::common;

use admission::{Gate, GateConfig, RejectReason};
use common::{QUEUE_TIMEOUT, assert_balanced, assert_pending, ms, pinned, ready};

fn config(calls: u32, queue_max: usize, setups: u32) -> GateConfig {
    GateConfig {
        max_setups: Some(setups),
        ..pinned(calls, queue_max)
    }
}

#[test]
fn a_burst_beyond_the_bound_queues_and_starts_as_setups_finish() {
    let t0 = std::time::Instant::now();
    let gate = Gate::new(config(100, 10, 2), t0);
    let mut a = gate.enqueue(t0).unwrap();
    let mut b = gate.enqueue(t0).unwrap();
    let mut c = gate.enqueue(t0).unwrap();
    let mut d = gate.enqueue(t0).unwrap();
    let mut first = ready(&mut a).unwrap();
    let _second = ready(&mut b).unwrap();
    assert_pending(&mut c);
    assert_pending(&mut d);
    let snap = gate.snapshot();
    assert_eq!((snap.active, snap.setting_up, snap.queued), (2, 2, 2));
    // try_admit never jumps the queue, even with capacity to spare.
    assert_eq!(
        gate.try_admit(t0).unwrap_err().reason,
        RejectReason::AtCapacity
    );

    first.setup_done(t0 + ms(50));
    let third = ready(&mut c).unwrap();
    assert_eq!(third.waited(), ms(50));
    assert_pending(&mut d);
    // Idempotent: a second report frees nothing more.
    first.setup_done(t0 + ms(60));
    assert_pending(&mut d);
    assert_eq!(gate.snapshot().setting_up, 2);

    // A permit dropped during its setup frees its setup place too.
    drop(third);
    let fourth = ready(&mut d).unwrap();
    assert_eq!(gate.snapshot().setting_up, 2);
    drop(fourth);
    assert_balanced(&gate);
}

#[test]
fn a_waiter_behind_slow_setups_times_out_in_the_queue_not_in_the_pool() {
    let t0 = std::time::Instant::now();
    let gate = Gate::new(config(100, 10, 1), t0);
    let _slow = gate.try_admit(t0).unwrap();
    let ticket = gate.enqueue(t0).unwrap();
    let err = ticket.expire(t0 + QUEUE_TIMEOUT).unwrap_err();
    assert_eq!(err.reason, RejectReason::QueueTimeout);
    assert_eq!(err.waited, QUEUE_TIMEOUT);
}

#[test]
fn released_after_setup_the_slot_is_not_counted_twice() {
    let t0 = std::time::Instant::now();
    let gate = Gate::new(config(100, 10, 1), t0);
    let mut p = gate.try_admit(t0).unwrap();
    p.setup_done(t0);
    assert_eq!(gate.snapshot().setting_up, 0);
    let q = gate.try_admit(t0).unwrap();
    assert_eq!(gate.snapshot().setting_up, 1);
    p.release(t0 + ms(5));
    let snap = gate.snapshot();
    assert_eq!((snap.active, snap.setting_up), (1, 1));
    drop(q);
    assert_eq!(gate.snapshot().setting_up, 0);
    assert_balanced(&gate);
}

#[test]
fn a_drain_revokes_an_unclaimed_grant_and_its_setup_place() {
    let t0 = std::time::Instant::now();
    let gate = Gate::new(config(100, 10, 1), t0);
    let mut held = gate.try_admit(t0).unwrap();
    let mut waiting = gate.enqueue(t0).unwrap();
    held.setup_done(t0 + ms(1));
    gate.start_drain(t0 + ms(2));
    assert_eq!(
        ready(&mut waiting).unwrap_err().reason,
        RejectReason::Draining
    );
    let snap = gate.snapshot();
    assert_eq!((snap.active, snap.setting_up), (1, 0));
    drop(held);
    assert_balanced(&gate);
}
