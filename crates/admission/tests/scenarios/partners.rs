//! Scenario: per-partner quotas — refusal at once, unlimited partners, reloads,
//! and the order of checks.

use crate::common;

use admission::{Dependency, ErrorSource, PartnerLoad, RejectReason};
use common::{
    assert_balanced, assert_pending, gate_with_quotas, in_gate, load, ms, pid, ready, with_quotas,
};

#[test]
fn a_partner_at_quota_is_refused_at_once_while_others_are_admitted() {
    let (gate, t0) = gate_with_quotas(10, 4, &[("a", 2)]);
    let (a, b) = (pid("a"), pid("b"));
    let a1 = gate.try_admit_for(Some(&a), t0).unwrap();
    let mut a2 = gate.enqueue_for(Some(&a), t0).unwrap();
    assert!(a2.is_granted());
    let a2 = ready(&mut a2).unwrap();
    assert_eq!(a2.partner(), Some(&a));

    let third = gate.enqueue_for(Some(&a), t0 + ms(5)).unwrap_err();
    assert_eq!(third.reason, RejectReason::PartnerQuota);
    assert_eq!(
        (third.waited, third.active, third.capacity, third.queued),
        (ms(0), 2, 10, 0)
    );
    assert_eq!(third.reason.as_str(), "partner_quota");
    assert!(third.is_retryable());
    assert_eq!(third.source_kind(), ErrorSource::Internal);
    assert!(
        third
            .to_string()
            .contains("partner at its concurrent-call quota")
    );
    assert_eq!(
        gate.try_admit_for(Some(&a), t0).unwrap_err().reason,
        RejectReason::PartnerQuota
    );

    let b1 = gate.try_admit_for(Some(&b), t0).unwrap(); // the gate has room for others
    let _carrier = gate.try_admit(t0).unwrap();
    let snap = gate.snapshot();
    assert_eq!(snap.active, 4);
    assert_eq!(snap.rejected_total.partner_quota, 2);
    assert_eq!(snap.rejected_total.get(RejectReason::PartnerQuota), 2);
    assert_eq!(snap.rejected_total.by_label()[5], ("partner_quota", 2));
    assert_eq!(snap.rejected_total.total(), 2);
    assert_eq!(
        snap.partners,
        vec![
            PartnerLoad {
                partner: a.clone(),
                active: 2,
                queued: 0,
                quota: Some(2)
            },
            PartnerLoad {
                partner: b.clone(),
                active: 1,
                queued: 0,
                quota: None
            },
        ]
    );

    drop(a1);
    a2.release(t0 + ms(10));
    assert_eq!(in_gate(&gate, "a"), 0);
    assert_eq!(
        load(&gate, "a").unwrap().quota,
        Some(2),
        "a quota row stays, at 0"
    );
    drop(b1);
    assert_eq!(
        load(&gate, "b"),
        None,
        "an unlimited partner with no calls drops out"
    );
    let _again = gate.try_admit_for(Some(&a), t0 + ms(20)).unwrap();
    assert_balanced(&gate);
}

#[test]
fn queued_calls_count_against_the_quota() {
    let (gate, t0) = gate_with_quotas(1, 4, &[("a", 2)]);
    let a = pid("a");
    let held = gate.try_admit(t0).unwrap();
    let mut q1 = gate.enqueue_for(Some(&a), t0).unwrap();
    let mut q2 = gate.enqueue_for(Some(&a), t0).unwrap();
    assert_pending(&mut q1);
    let refused = gate.enqueue_for(Some(&a), t0).unwrap_err();
    assert_eq!(
        (refused.reason, refused.queued),
        (RejectReason::PartnerQuota, 2),
        "refused at once, not queued behind the others"
    );
    assert_eq!(load(&gate, "a").map(|l| (l.active, l.queued)), Some((0, 2)));

    held.release(t0 + ms(30)); // the slot goes to q1: its count carries over
    let p1 = ready(&mut q1).unwrap();
    assert_eq!(load(&gate, "a").map(|l| (l.active, l.queued)), Some((1, 1)));
    drop(p1);
    let p2 = ready(&mut q2).unwrap();
    assert_eq!(in_gate(&gate, "a"), 1);
    drop(p2);
    assert_eq!(in_gate(&gate, "a"), 0);
    assert_balanced(&gate);
}

#[test]
fn a_partner_without_a_quota_is_limited_only_by_capacity() {
    let (gate, t0) = gate_with_quotas(3, 0, &[("a", 1)]);
    let c = pid("c");
    let held: Vec<_> = (0..3)
        .map(|_| gate.try_admit_for(Some(&c), t0).unwrap())
        .collect();
    assert_eq!(in_gate(&gate, "c"), 3);
    assert_eq!(
        gate.try_admit_for(Some(&c), t0).unwrap_err().reason,
        RejectReason::AtCapacity
    );
    assert_eq!(
        gate.enqueue_for(Some(&c), t0).unwrap_err().reason,
        RejectReason::QueueFull
    );
    drop(held);
    assert_eq!(gate.snapshot().rejected_total.partner_quota, 0);
}

#[test]
fn a_zero_quota_refuses_the_partner_in_an_empty_gate() {
    let (gate, t0) = gate_with_quotas(5, 4, &[("a", 0)]);
    let r = gate.enqueue_for(Some(&pid("a")), t0).unwrap_err();
    assert_eq!((r.reason, r.active), (RejectReason::PartnerQuota, 0));
    let _others = gate.enqueue(t0).unwrap();
}

#[test]
fn a_lowered_quota_ends_no_call_and_refuses_the_next() {
    let (gate, t0) = gate_with_quotas(10, 4, &[("a", 3)]);
    let a = pid("a");
    let mut calls: Vec<_> = (0..2)
        .map(|_| gate.try_admit_for(Some(&a), t0).unwrap())
        .collect();
    gate.set_config(with_quotas(10, 4, &[("a", 1)]), t0 + ms(10));
    let row = load(&gate, "a").unwrap();
    assert_eq!(
        (row.in_gate(), row.quota),
        (2, Some(1)),
        "both calls still run"
    );
    assert_eq!(gate.snapshot().active, 2);

    let next = gate.enqueue_for(Some(&a), t0 + ms(20)).unwrap_err();
    assert_eq!(next.reason, RejectReason::PartnerQuota);
    calls.pop();
    assert_eq!(
        gate.try_admit_for(Some(&a), t0 + ms(30))
            .unwrap_err()
            .reason,
        RejectReason::PartnerQuota,
        "1 in the gate still reaches a quota of 1"
    );
    calls.pop();
    let back = gate.try_admit_for(Some(&a), t0 + ms(40)).unwrap();

    gate.set_config(with_quotas(10, 4, &[]), t0 + ms(50)); // entry removed: unlimited
    let more: Vec<_> = (0..3)
        .map(|_| gate.try_admit_for(Some(&a), t0 + ms(60)).unwrap())
        .collect();
    assert_eq!(
        load(&gate, "a").map(|l| (l.in_gate(), l.quota)),
        Some((4, None))
    );
    drop((back, more));
    assert_balanced(&gate);
}

#[test]
fn a_lowered_quota_keeps_queued_calls_waiting() {
    let (gate, t0) = gate_with_quotas(1, 4, &[("a", 2)]);
    let a = pid("a");
    let running = gate.try_admit_for(Some(&a), t0).unwrap();
    let mut queued = gate.enqueue_for(Some(&a), t0).unwrap();
    assert_pending(&mut queued);
    gate.set_config(with_quotas(1, 4, &[("a", 1)]), t0 + ms(10));
    assert_pending(&mut queued);
    assert_eq!(gate.snapshot().queued, 1);

    running.release(t0 + ms(20));
    let granted = ready(&mut queued).unwrap();
    assert_eq!(granted.waited(), ms(20));
    assert_eq!(in_gate(&gate, "a"), 1);
}

#[test]
fn checks_run_draining_then_dependency_then_partner_quota_then_capacity() {
    let (gate, t0) = gate_with_quotas(1, 0, &[("a", 1)]);
    let a = pid("a");
    let _held = gate.try_admit_for(Some(&a), t0).unwrap();
    // The gate is full as well: the partner quota is checked before capacity.
    assert_eq!(
        gate.try_admit_for(Some(&a), t0).unwrap_err().reason,
        RejectReason::PartnerQuota
    );
    assert_eq!(
        gate.enqueue_for(Some(&a), t0).unwrap_err().reason,
        RejectReason::PartnerQuota,
        "before the queue too (queue_max 0)"
    );
    assert_eq!(
        gate.try_admit_for(Some(&pid("b")), t0).unwrap_err().reason,
        RejectReason::AtCapacity
    );

    gate.mark_dependency(Dependency::Dialog, false, t0 + ms(1));
    assert_eq!(
        gate.try_admit_for(Some(&a), t0 + ms(2)).unwrap_err().reason,
        RejectReason::DependencyDown(Dependency::Dialog)
    );

    gate.start_drain(t0 + ms(3));
    for refused in [
        gate.try_admit_for(Some(&a), t0 + ms(4)).unwrap_err(),
        gate.enqueue_for(Some(&a), t0 + ms(4)).unwrap_err(),
    ] {
        assert_eq!(refused.reason, RejectReason::Draining);
    }
    let counts = gate.snapshot().rejected_total;
    assert_eq!(
        (
            counts.partner_quota,
            counts.at_capacity,
            counts.dependency_down,
            counts.draining
        ),
        (2, 1, 1, 2)
    );
}

#[test]
fn queue_timeouts_free_the_partner_count() {
    let (gate, t0) = gate_with_quotas(1, 4, &[("a", 2)]);
    let a = pid("a");
    let _held = gate.try_admit(t0).unwrap();
    let by_timer = gate.enqueue_for(Some(&a), t0).unwrap();
    let mut by_gate = gate.enqueue_for(Some(&a), t0 + ms(100)).unwrap();
    assert_eq!(in_gate(&gate, "a"), 2);

    let deadline = by_timer.deadline();
    let r = by_timer.expire(deadline).unwrap_err();
    assert_eq!(r.reason, RejectReason::QueueTimeout);
    assert_eq!(in_gate(&gate, "a"), 1);

    assert_eq!(gate.expire_due(by_gate.deadline()), 1);
    assert_eq!(
        in_gate(&gate, "a"),
        0,
        "freed at the timeout, before the ticket looks"
    );
    assert_eq!(
        ready(&mut by_gate).unwrap_err().reason,
        RejectReason::QueueTimeout
    );
    assert_eq!(in_gate(&gate, "a"), 0, "and not freed a second time");
}

#[test]
fn drain_and_a_down_dependency_free_queued_partner_counts() {
    let (gate, t0) = gate_with_quotas(1, 4, &[("a", 3)]);
    let a = pid("a");
    let held = gate.try_admit(t0).unwrap();
    let mut failed = gate.enqueue_for(Some(&a), t0).unwrap();
    gate.mark_dependency(Dependency::Db, false, t0 + ms(5));
    assert_eq!(in_gate(&gate, "a"), 0);
    let r = ready(&mut failed).unwrap_err();
    assert_eq!(r.reason, RejectReason::DependencyDown(Dependency::Db));
    gate.mark_dependency(Dependency::Db, true, t0 + ms(6));

    let mut granted = gate.enqueue_for(Some(&a), t0 + ms(7)).unwrap();
    let mut drained = gate.enqueue_for(Some(&a), t0 + ms(7)).unwrap();
    assert_pending(&mut granted);
    held.release(t0 + ms(8)); // grants `granted`, not yet collected
    assert_eq!(load(&gate, "a").map(|l| (l.active, l.queued)), Some((1, 1)));

    gate.start_drain(t0 + ms(9)); // rejects the waiter and takes back the grant
    assert_eq!(in_gate(&gate, "a"), 0);
    assert_eq!(
        ready(&mut granted).unwrap_err().reason,
        RejectReason::Draining
    );
    assert_eq!(
        ready(&mut drained).unwrap_err().reason,
        RejectReason::Draining
    );
    drop((granted, drained));
    assert_eq!(in_gate(&gate, "a"), 0);
    let snap = gate.snapshot();
    assert_eq!((snap.active, snap.queued), (0, 0));
    assert_balanced(&gate);
}
