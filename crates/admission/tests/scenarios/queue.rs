//! Scenario: the bounded FIFO queue — order, fairness, full queue, timeouts.

use crate::common;

use std::sync::{Arc, Mutex};
use std::task::Poll;

use admission::{ErrorSource, RejectReason};
use common::{
    CountingWaker, QUEUE_TIMEOUT, assert_balanced, assert_pending, gate, ms, poll_once, ready,
};

#[test]
fn three_waiters_are_granted_in_fifo_order_as_permits_drop() {
    let (gate, t0) = gate(1, 8);
    let holder = gate.try_admit(t0).unwrap();
    let mut tickets: Vec<_> = (0..3).map(|i| gate.enqueue(t0 + ms(i)).unwrap()).collect();
    let wakers: Vec<_> = (0..3).map(|_| CountingWaker::new()).collect();
    for (ticket, (_, waker)) in tickets.iter_mut().zip(&wakers) {
        assert!(poll_once(ticket, waker).is_pending());
    }
    assert_eq!(gate.snapshot().queued, 3);

    let mut current = holder;
    for i in 0..3 {
        current.release(t0 + ms(100 * (i as u64 + 1)));
        // Only the oldest waiter is woken and granted.
        for (j, (counter, _)) in wakers.iter().enumerate() {
            assert_eq!(
                counter.count(),
                usize::from(j <= i),
                "after release {i}, waiter {j}"
            );
        }
        let permit = ready(&mut tickets[i]).unwrap();
        assert_eq!(permit.id(), tickets[i].id());
        assert_eq!(permit.waited(), ms(100 * (i as u64 + 1)) - ms(i as u64));
        for (later, (_, waker)) in tickets.iter_mut().zip(&wakers).skip(i + 1) {
            assert!(poll_once(later, waker).is_pending());
        }
        current = permit;
    }
    drop(current);
    let snap = gate.snapshot();
    assert_eq!((snap.active, snap.queued, snap.admitted_total), (0, 0, 4));
    assert_balanced(&gate);
}

#[tokio::test]
async fn awaiting_tasks_are_served_in_enqueue_order() {
    let (gate, t0) = gate(1, 8);
    let holder = gate.try_admit(t0).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..3u32 {
        let ticket = gate.enqueue(t0).unwrap();
        let order = Arc::clone(&order);
        tasks.push(tokio::spawn(async move {
            let permit = ticket.await.unwrap();
            order.lock().unwrap().push(i);
            tokio::task::yield_now().await;
            drop(permit);
        }));
    }
    tokio::task::yield_now().await;
    assert!(
        order.lock().unwrap().is_empty(),
        "nobody is granted while the slot is held"
    );
    drop(holder);
    for task in tasks {
        tokio::time::timeout(std::time::Duration::from_secs(30), task)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
    assert_eq!(gate.snapshot().active, 0);
}

#[test]
fn try_admit_never_jumps_the_queue() {
    let (gate, t0) = gate(2, 8);
    let a = gate.try_admit(t0).unwrap();
    let b = gate.try_admit(t0).unwrap();
    let mut waiting = gate.enqueue(t0).unwrap();
    assert_pending(&mut waiting);
    drop(a); // the slot goes to the waiter, not to whoever asks next
    let rejected = gate.try_admit(t0 + ms(1)).unwrap_err();
    assert_eq!(rejected.reason, RejectReason::AtCapacity);
    assert_eq!((rejected.active, rejected.capacity), (2, 2));
    let _w = ready(&mut waiting).unwrap();
    drop(b);
    let _c = gate.try_admit(t0 + ms(2)).unwrap();
    assert_eq!(gate.snapshot().rejected_total.at_capacity, 1);
}

#[test]
fn a_free_slot_admits_at_enqueue() {
    let (gate, t0) = gate(1, 2);
    let mut ticket = gate.enqueue(t0).unwrap();
    assert!(ticket.is_granted());
    assert_eq!(ticket.deadline(), t0 + QUEUE_TIMEOUT);
    let permit = ready(&mut ticket).unwrap();
    assert_eq!(permit.waited(), ms(0));
    assert_eq!(permit.admitted_at(), t0);
    assert_eq!(gate.snapshot().active, 1);
}

#[test]
fn a_full_queue_rejects_at_once() {
    let (gate, t0) = gate(1, 2);
    let _held = gate.try_admit(t0).unwrap();
    let _w1 = gate.enqueue(t0).unwrap();
    let _w2 = gate.enqueue(t0).unwrap();
    let full = gate.enqueue(t0 + ms(5)).unwrap_err();
    assert_eq!(full.reason, RejectReason::QueueFull);
    assert_eq!(full.reason.as_str(), "queue_full");
    assert_eq!((full.waited, full.queued), (ms(0), 2));
    assert!(full.is_retryable());
    assert_eq!(full.source_kind(), ErrorSource::Internal);
    let snap = gate.snapshot();
    assert_eq!((snap.queued, snap.rejected_total.queue_full), (2, 1));
}

#[test]
fn expire_times_out_a_waiter_with_the_time_waited() {
    let (gate, t0) = gate(1, 4);
    let held = gate.try_admit(t0).unwrap();
    let ticket = gate.enqueue(t0 + ms(10)).unwrap();
    let late = gate.enqueue(t0 + ms(20)).unwrap();
    assert_eq!(ticket.deadline(), t0 + ms(10) + QUEUE_TIMEOUT);

    let timeout = ticket.expire(t0 + ms(10) + QUEUE_TIMEOUT).unwrap_err();
    assert_eq!(timeout.reason, RejectReason::QueueTimeout);
    assert_eq!(timeout.waited, QUEUE_TIMEOUT);
    assert!(
        timeout
            .to_string()
            .contains("timed out in the admission queue")
    );
    assert_eq!(gate.snapshot().queued, 1);

    // The slot that frees next goes to the remaining waiter: nothing was lost.
    drop(held);
    let permit = late.expire(t0 + ms(30)).unwrap();
    assert_eq!(permit.id().get(), 3);
    assert_eq!(gate.snapshot().rejected_total.queue_timeout, 1);
    drop(permit);
    assert_balanced(&gate);
}

#[test]
fn overdue_waiters_are_timed_out_by_the_gate_and_never_take_a_slot() {
    let (gate, t0) = gate(1, 4);
    let held = gate.try_admit(t0).unwrap();
    let mut old = gate.enqueue(t0).unwrap();
    let (counter, waker) = CountingWaker::new();
    assert!(poll_once(&mut old, &waker).is_pending());
    let mut young = gate.enqueue(t0 + ms(3_000)).unwrap();

    assert_eq!(gate.expire_due(t0 + ms(3_999)), 0);
    assert_eq!(gate.expire_due(t0 + QUEUE_TIMEOUT), 1);
    assert_eq!(counter.count(), 1, "the timed-out waiter is woken");
    let Poll::Ready(Err(rejection)) = poll_once(&mut old, &waker) else {
        panic!("expected a timeout");
    };
    assert_eq!(
        (rejection.reason, rejection.waited),
        (RejectReason::QueueTimeout, QUEUE_TIMEOUT)
    );

    held.release(t0 + ms(5_000));
    let permit = ready(&mut young).unwrap();
    assert_eq!(permit.waited(), ms(2_000));
}
