//! Scenario: cancellation, expiry and panics racing grants for partner calls — a
//! partner's count goes down exactly once, whichever way its call leaves.

use crate::common;

use std::panic::{AssertUnwindSafe, catch_unwind};

use admission::RejectReason;
use common::{
    CountingWaker, assert_balanced, assert_pending, gate_with_quotas, in_gate, load, ms, pid,
    poll_once, ready,
};

#[test]
fn cancelling_a_partner_ticket_mid_wait_frees_its_count() {
    let (gate, t0) = gate_with_quotas(1, 4, &[("a", 1)]);
    let a = pid("a");
    let held = gate.try_admit(t0).unwrap();
    let mut ticket = gate.enqueue_for(Some(&a), t0).unwrap();
    assert_pending(&mut ticket); // mid-acquire: polled once, waiting
    assert_eq!(
        gate.enqueue_for(Some(&a), t0).unwrap_err().reason,
        RejectReason::PartnerQuota
    );

    drop(ticket); // the caller hung up while waiting
    assert_eq!(in_gate(&gate, "a"), 0);
    assert_eq!(gate.snapshot().cancelled_total, 1);
    let mut again = gate.enqueue_for(Some(&a), t0 + ms(1)).unwrap();
    drop(held);
    let _permit = ready(&mut again).unwrap();
    assert_eq!(in_gate(&gate, "a"), 1);
    assert_balanced(&gate);
}

#[tokio::test]
async fn aborting_a_task_awaiting_a_partner_ticket_frees_its_count() {
    let (gate, t0) = gate_with_quotas(1, 4, &[("a", 1)]);
    let a = pid("a");
    let held = gate.try_admit(t0).unwrap();
    let ticket = gate.enqueue_for(Some(&a), t0).unwrap();
    let task = tokio::spawn(async move { ticket.await.map(|p| p.id()) });
    tokio::task::yield_now().await; // the task polls the ticket and parks
    assert_eq!(load(&gate, "a").map(|l| l.queued), Some(1));

    task.abort(); // drops the ticket future mid-wait
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(in_gate(&gate, "a"), 0);
    drop(held);
    let _next = gate.try_admit_for(Some(&a), t0 + ms(1)).unwrap();
    assert_balanced(&gate);
}

#[test]
fn dropping_a_granted_but_unclaimed_partner_ticket_frees_its_count() {
    let (gate, t0) = gate_with_quotas(1, 4, &[("a", 1), ("b", 1)]);
    let (a, b) = (pid("a"), pid("b"));
    let held = gate.try_admit(t0).unwrap();
    let mut first = gate.enqueue_for(Some(&a), t0).unwrap();
    let mut second = gate.enqueue_for(Some(&b), t0).unwrap();
    assert_pending(&mut first);
    let (counter, waker) = CountingWaker::new();
    assert!(poll_once(&mut second, &waker).is_pending());

    drop(held); // grants `first`, which never collects it
    assert_eq!(load(&gate, "a").map(|l| (l.active, l.queued)), Some((1, 0)));
    drop(first);
    assert_eq!(in_gate(&gate, "a"), 0);
    assert_eq!(counter.count(), 1, "the slot passed on to b");
    let permit = ready(&mut second).unwrap();
    assert_eq!((in_gate(&gate, "a"), in_gate(&gate, "b")), (0, 1));
    drop(permit);
    assert_eq!(in_gate(&gate, "b"), 0);
    assert_balanced(&gate);
}

#[test]
fn dropping_a_partner_ticket_granted_at_enqueue_frees_its_count() {
    let (gate, t0) = gate_with_quotas(2, 4, &[("a", 1)]);
    let ticket = gate.enqueue_for(Some(&pid("a")), t0).unwrap();
    assert!(ticket.is_granted());
    assert_eq!(in_gate(&gate, "a"), 1);
    drop(ticket);
    assert_eq!((in_gate(&gate, "a"), gate.snapshot().active), (0, 0));
}

#[test]
fn expire_racing_a_grant_keeps_the_count_with_the_permit() {
    let (gate, t0) = gate_with_quotas(1, 4, &[("a", 1)]);
    let held = gate.try_admit(t0).unwrap();
    let ticket = gate.enqueue_for(Some(&pid("a")), t0).unwrap();
    held.release(t0 + ms(3_999)); // the grant lands just before the timer fires
    let permit = ticket.expire(t0 + ms(4_000)).unwrap();
    assert_eq!(in_gate(&gate, "a"), 1, "the call is in: still counted once");
    drop(permit);
    assert_eq!(in_gate(&gate, "a"), 0);
    assert_eq!(gate.snapshot().rejected_total.queue_timeout, 0);
}

#[test]
fn a_partner_permit_dropped_during_a_panic_frees_its_count() {
    let (gate, t0) = gate_with_quotas(4, 4, &[("a", 1)]);
    let a = pid("a");
    let permit = gate.try_admit_for(Some(&a), t0).unwrap();
    let crashed = catch_unwind(AssertUnwindSafe(move || {
        let _call_actor_owns = permit;
        panic!("call actor crashed");
    }));
    assert!(crashed.is_err());
    assert_eq!(in_gate(&gate, "a"), 0);
    let _next = gate.try_admit_for(Some(&a), t0 + ms(1)).unwrap();
}

#[test]
fn partner_counts_follow_permits_released_on_other_threads() {
    let (gate, t0) = gate_with_quotas(64, 0, &[("a", 32), ("b", 32)]);
    let permits: Vec<_> = (0..64)
        .map(|i| {
            let partner = pid(if i % 2 == 0 { "a" } else { "b" });
            gate.try_admit_for(Some(&partner), t0).unwrap()
        })
        .collect();
    assert_eq!((in_gate(&gate, "a"), in_gate(&gate, "b")), (32, 32));
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(permits.len()));
    let threads: Vec<_> = permits
        .into_iter()
        .enumerate()
        .map(|(i, permit)| {
            let barrier = std::sync::Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                if i % 3 == 0 {
                    permit.release(t0 + ms(1));
                } else {
                    drop(permit);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!((in_gate(&gate, "a"), in_gate(&gate, "b")), (0, 0));
    let snap = gate.snapshot();
    assert_eq!((snap.active, snap.released_total), (0, 64));
}
