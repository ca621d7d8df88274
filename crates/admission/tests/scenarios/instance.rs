//! Scenario: the instance ceiling — lateness samples on a virtual clock
//! lower the effective capacity, refuse with `InstanceOverloaded`, and
//! reopen with hysteresis, one step per healthy window.

use crate::common;

use std::time::{Duration, Instant};

use admission::{
    Decider, Gate, GateConfig, InstanceConfig, InstanceState, LagHistogram, Permit, RejectReason,
};
use common::{assert_balanced, assert_pending, ms, pinned, ready};

const WINDOW: Duration = Duration::from_secs(2);

fn config(calls: u32, queue_max: usize) -> GateConfig {
    GateConfig {
        instance: InstanceConfig {
            max_lag: ms(25),
            window: WINDOW,
        },
        ..pinned(calls, queue_max)
    }
}

/// Ten samples as the runtime's ticker would give them in 200 ms, all
/// `late` late.
fn slice(late: Duration) -> LagHistogram {
    let mut h = LagHistogram::default();
    for _ in 0..10 {
        h.record(late);
    }
    h
}

/// Feeds `late` every 200 ms from `from` for `span`; returns the time after.
fn feed(gate: &Gate, from: Instant, span: Duration, late: Duration) -> Instant {
    let mut t = from;
    while t < from + span {
        gate.observe_lag(&slice(late), t);
        t += ms(200);
    }
    t
}

fn admit(gate: &Gate, n: usize, at: Instant) -> Vec<Permit> {
    (0..n)
        .map(|_| gate.try_admit(at).expect("a free slot"))
        .collect()
}

#[test]
fn lag_within_the_bound_costs_no_capacity() {
    let t0 = Instant::now();
    let gate = Gate::new(config(50, 4), t0);
    let calls = admit(&gate, 30, t0);
    let t = feed(&gate, t0, ms(10_000), ms(20));
    let snap = gate.snapshot();
    assert_eq!(snap.instance.state, InstanceState::Healthy);
    assert_eq!((snap.capacity, snap.decided_by), (50, Decider::Pinned));
    assert_eq!(snap.instance.p99, Some(ms(20)));
    assert_eq!(admit(&gate, 20, t).len(), 20);
    drop(calls);
}

#[test]
fn lag_past_the_bound_refuses_new_calls_and_keeps_the_admitted_ones() {
    let t0 = Instant::now();
    let gate = Gate::new(config(50, 4), t0);
    let calls = admit(&gate, 12, t0);
    let t = feed(&gate, t0, WINDOW, ms(3));
    let late = feed(&gate, t, ms(200), ms(40));
    let snap = gate.snapshot();
    assert_eq!(snap.instance.state, InstanceState::Overloaded);
    assert_eq!(snap.instance.trips, 1);
    assert_eq!((snap.capacity, snap.decided_by), (12, Decider::Instance));
    assert_eq!(snap.configured.calls, 50);
    let refused = gate.enqueue(late).unwrap_err();
    assert_eq!(refused.reason, RejectReason::InstanceOverloaded);
    assert!(refused.is_retryable());
    assert_eq!(snap.active, 12, "admitted calls keep their slots");
    assert_eq!(gate.snapshot().rejected_total.instance_overloaded, 1);
    drop(calls);
    assert_balanced(&gate);
}

#[test]
fn a_trip_fails_queued_waiters_at_once() {
    let t0 = Instant::now();
    let gate = Gate::new(config(2, 4), t0);
    let _calls = admit(&gate, 2, t0);
    let mut waiting = gate.enqueue(t0).unwrap();
    assert_pending(&mut waiting);
    feed(&gate, t0, ms(600), ms(60));
    let err = ready(&mut waiting).unwrap_err();
    assert_eq!(err.reason, RejectReason::InstanceOverloaded);
    assert!(err.waited < ms(1_000));
}

#[test]
fn too_few_samples_decide_nothing() {
    let t0 = Instant::now();
    let gate = Gate::new(config(10, 0), t0);
    let mut h = LagHistogram::default();
    for _ in 0..(admission::MIN_SAMPLES - 1) {
        h.record(ms(500));
    }
    let view = gate.observe_lag(&h, t0);
    assert_eq!(view.state, InstanceState::Healthy);
    assert_eq!(view.p99, None);
    assert!(gate.try_admit(t0).is_ok());
}

#[test]
fn reopens_only_below_half_the_bound_then_steps_up_a_tenth_per_window() {
    let t0 = Instant::now();
    let gate = Gate::new(config(100, 0), t0);
    let mut calls = admit(&gate, 40, t0);
    let t = feed(&gate, t0, ms(400), ms(60));
    assert_eq!(gate.snapshot().instance.ceiling, Some(40));
    // Under the bound but above half of it: still closed.
    let t = feed(&gate, t, WINDOW * 2, ms(20));
    assert_eq!(gate.snapshot().instance.state, InstanceState::Overloaded);
    // Calls end while overloaded: the ceiling follows them down.
    calls.truncate(30);
    let t = feed(&gate, t, ms(200), ms(20));
    assert_eq!(gate.snapshot().instance.ceiling, Some(30));
    // A whole window at or under half the bound reopens at the ceiling.
    let t = feed(&gate, t, WINDOW, ms(5));
    let snap = gate.snapshot();
    assert_eq!(snap.instance.state, InstanceState::Recovering);
    assert_eq!((snap.capacity, snap.decided_by), (30, Decider::Instance));
    assert_eq!(
        gate.try_admit(t).unwrap_err().reason,
        RejectReason::InstanceOverloaded
    );
    // One more healthy window: +3 (a tenth of 30).
    let t = feed(&gate, t, WINDOW, ms(5));
    assert_eq!(gate.snapshot().capacity, 33);
    calls.extend(admit(&gate, 3, t));
    assert_eq!(
        gate.try_admit(t).unwrap_err().reason,
        RejectReason::InstanceOverloaded
    );
    // Healthy long enough: the ceiling reaches the configured 100 and goes.
    let t = feed(&gate, t, WINDOW * 20, ms(5));
    let snap = gate.snapshot();
    assert_eq!(snap.instance.state, InstanceState::Healthy);
    assert_eq!((snap.capacity, snap.decided_by), (100, Decider::Pinned));
    assert!(gate.try_admit(t).is_ok());
}

#[test]
fn lag_returning_while_recovering_trips_again_at_the_active_count() {
    let t0 = Instant::now();
    let gate = Gate::new(config(100, 0), t0);
    let mut calls = admit(&gate, 20, t0);
    let t = feed(&gate, t0, ms(400), ms(80));
    let t = feed(&gate, t, WINDOW, ms(2));
    let t = feed(&gate, t, WINDOW, ms(2));
    assert_eq!(gate.snapshot().capacity, 22);
    calls.extend(admit(&gate, 2, t));
    let t = feed(&gate, t, ms(400), ms(80));
    let snap = gate.snapshot();
    assert_eq!(snap.instance.state, InstanceState::Overloaded);
    assert_eq!(snap.instance.ceiling, Some(22));
    assert_eq!(snap.instance.trips, 2);
    assert_eq!(
        gate.enqueue(t).unwrap_err().reason,
        RejectReason::InstanceOverloaded
    );
}

#[test]
fn switched_off_the_gate_never_looks_at_lag() {
    let t0 = Instant::now();
    let gate = Gate::new(pinned(5, 0), t0);
    let t = feed(&gate, t0, ms(4_000), ms(900));
    assert_eq!(gate.snapshot().instance.state, InstanceState::Healthy);
    assert_eq!(admit(&gate, 5, t).len(), 5);
    // Switching it off by reload clears a standing trip at once.
    let on = Gate::new(config(5, 0), t0);
    let t = feed(&on, t0, ms(400), ms(900));
    assert!(on.try_admit(t).is_err());
    on.set_config(pinned(5, 0), t);
    assert!(on.try_admit(t).is_ok());
}

#[test]
fn drain_and_dependencies_are_checked_before_the_instance() {
    let t0 = Instant::now();
    let gate = Gate::new(config(5, 0), t0);
    let t = feed(&gate, t0, ms(400), ms(900));
    gate.mark_dependency(admission::Dependency::Stt, false, t);
    assert!(matches!(
        gate.try_admit(t).unwrap_err().reason,
        RejectReason::DependencyDown(_)
    ));
    gate.start_drain(t);
    assert_eq!(
        gate.try_admit(t).unwrap_err().reason,
        RejectReason::Draining
    );
}
