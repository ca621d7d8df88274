//! Scenario: each permit's measured counter deltas — balanced on every exit path,
//! visibly unbalanced when a permit leaks.

use crate::common;

use std::sync::{Arc, Barrier};

use admission::{CounterDelta, PermitTally};
use common::{assert_balanced, assert_pending, gate, ms, ready};

const UP: CounterDelta = CounterDelta {
    increment: 1,
    decrement: 0,
};
const BALANCED: CounterDelta = CounterDelta {
    increment: 1,
    decrement: 1,
};

#[test]
fn a_dropped_permit_tallies_one_up_and_one_down() {
    let (gate, t0) = gate(2, 0);
    let permit = gate.try_admit(t0).unwrap();
    let tally = permit.tally();
    assert_eq!(tally.delta(), UP, "counted as active from the grant on");
    assert!(!tally.delta().is_balanced());
    drop(permit);
    assert_eq!(tally.delta(), BALANCED);
    assert!(tally.delta().is_balanced());

    let released = gate.try_admit(t0).unwrap();
    let tally = released.tally();
    released.release(t0 + ms(1));
    assert_eq!(tally.delta(), BALANCED);
    assert_balanced(&gate);
}

#[test]
fn a_forgotten_permit_shows_no_decrement_and_keeps_its_slot() {
    let (gate, t0) = gate(1, 0);
    let permit = gate.try_admit(t0).unwrap();
    let tally = permit.tally();
    std::mem::forget(permit); // the leak the tally makes visible
    assert_eq!(tally.delta(), UP);
    let snap = gate.snapshot();
    assert_eq!(
        (snap.active, snap.admitted_total, snap.released_total),
        (1, 1, 0)
    );
    assert!(
        gate.try_admit(t0).is_err(),
        "the leaked slot is still taken"
    );
}

#[test]
fn release_then_drop_counts_the_decrement_once() {
    let (gate, t0) = gate(1, 0);
    let permit = gate.try_admit(t0).unwrap();
    let tally = permit.tally();
    let copy = tally.clone();
    // `release` frees the slot and then drops the permit: the drop must find
    // nothing left to free.
    permit.release(t0 + ms(1));
    assert_eq!((tally.delta(), copy.delta()), (BALANCED, BALANCED));
    let snap = gate.snapshot();
    assert_eq!((snap.active, snap.released_total), (0, 1));
}

#[test]
fn a_waiters_permit_tallies_its_own_grant_and_release() {
    let (gate, t0) = gate(1, 4);
    let held = gate.try_admit(t0).unwrap();
    let held_tally = held.tally();
    let mut ticket = gate.enqueue(t0).unwrap();
    assert_pending(&mut ticket);
    held.release(t0 + ms(10)); // hands the slot to the waiter under the same lock
    assert_eq!(held_tally.delta(), BALANCED);
    let permit = ready(&mut ticket).unwrap();
    let tally = permit.tally();
    assert_eq!(tally.delta(), UP);
    drop(ticket);
    drop(permit);
    assert_eq!(tally.delta(), BALANCED);
}

#[test]
fn a_tally_read_after_the_permit_was_dropped_on_another_thread_is_balanced() {
    let (gate, t0) = gate(1, 0);
    let permit = gate.try_admit(t0).unwrap();
    let tally = permit.tally();
    std::thread::spawn(move || drop(permit)).join().unwrap();
    assert_eq!(tally.delta(), BALANCED);
    assert_eq!(gate.snapshot().active, 0);
}

#[test]
fn releases_and_drops_racing_on_threads_each_count_once() {
    const CALLS: usize = 32;
    let (gate, t0) = gate(CALLS as u32, 0);
    let permits: Vec<_> = (0..CALLS).map(|_| gate.try_admit(t0).unwrap()).collect();
    let tallies: Vec<PermitTally> = permits.iter().map(|p| p.tally()).collect();
    let start = Arc::new(Barrier::new(CALLS));
    let threads: Vec<_> = permits
        .into_iter()
        .enumerate()
        .map(|(i, permit)| {
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                start.wait(); // all release at once, half explicitly, half by drop
                if i % 2 == 0 {
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
    assert!(tallies.iter().all(|t| t.delta() == BALANCED));
    let snap = gate.snapshot();
    assert_eq!((snap.active, snap.released_total), (0, CALLS as u64));
    assert_balanced(&gate);
}
