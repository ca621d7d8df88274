//! Scenario: many tasks on a multi-threaded runtime acquire and release with
//! random cancellation and expiry; the books must balance and capacity must hold.

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use admission::{CounterDelta, Gate, PartnerId, Permit, RejectReason, Rejection, Ticket};
use common::{pid, pinned, with_quotas};
use tokio::sync::Barrier;

const CAPACITY: u32 = 4;
const TASKS: u64 = 48;
const ROUNDS: u64 = 300;
/// Only a lost wakeup could make a wait this long: the test fails instead of hanging.
const LOST_WAKEUP_LIMIT: Duration = Duration::from_secs(60);

/// xorshift64: a deterministic per-task sequence, no dependency needed.
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

async fn hold(permit: Permit, rng: &mut Rng) {
    let tally = permit.tally();
    for _ in 0..rng.next(3) {
        tokio::task::yield_now().await;
    }
    if rng.next(2) == 0 {
        permit.release(Instant::now());
    } else {
        drop(permit);
    }
    let balanced = CounterDelta {
        increment: 1,
        decrement: 1,
    };
    assert_eq!(tally.delta(), balanced);
}

/// Polls the ticket once, then cancels it or expires it (racing other tasks' grants).
async fn poll_then_give_up(mut ticket: Ticket, rng: &mut Rng) -> Option<Result<Permit, Rejection>> {
    let first = tokio::select! {
        biased;
        result = &mut ticket => Some(result),
        () = tokio::task::yield_now() => None,
    };
    match first {
        Some(result) => Some(result),
        None if rng.next(2) == 0 => None, // dropped: cancellation
        None => Some(ticket.expire(Instant::now())),
    }
}

/// Waits for the ticket until its deadline, then expires it, as the server does.
async fn wait_until_deadline(mut ticket: Ticket) -> Result<Permit, Rejection> {
    let deadline = tokio::time::Instant::from_std(ticket.deadline());
    let waited = tokio::time::timeout(LOST_WAKEUP_LIMIT, async {
        tokio::select! {
            result = &mut ticket => Some(result),
            () = tokio::time::sleep_until(deadline) => None,
        }
    })
    .await
    .expect("a waiter was never woken");
    match waited {
        Some(result) => result,
        None => ticket.expire(Instant::now()),
    }
}

async fn one_round(gate: &Gate, partner: Option<&PartnerId>, rng: &mut Rng) {
    let outcome = match rng.next(4) {
        0 => Some(gate.try_admit_for(partner, Instant::now())),
        1 => {
            drop(gate.enqueue_for(partner, Instant::now()));
            None
        }
        2 => match gate.enqueue_for(partner, Instant::now()) {
            Ok(ticket) => poll_then_give_up(ticket, rng).await,
            Err(rejection) => Some(Err(rejection)),
        },
        _ => Some(match gate.enqueue_for(partner, Instant::now()) {
            Ok(ticket) => wait_until_deadline(ticket).await,
            Err(rejection) => Err(rejection),
        }),
    };
    if let Some(Ok(permit)) = outcome {
        assert_eq!(permit.partner(), partner);
        assert_within_quotas(gate);
        hold(permit, rng).await;
    }
}

/// No partner ever has more calls in the gate than its quota (no reload here).
fn assert_within_quotas(gate: &Gate) {
    for load in gate.snapshot().partners {
        if let Some(quota) = load.quota {
            assert!(load.in_gate() <= quota, "{load:?}");
        }
    }
}

/// Task `i` calls for partner `partners[i % len]`.
fn spawn_callers(gate: &Gate, partners: &[Option<PartnerId>]) -> Vec<tokio::task::JoinHandle<()>> {
    (0..TASKS)
        .map(|i| {
            let gate = gate.clone();
            let partner = partners[i as usize % partners.len()].clone();
            tokio::spawn(async move {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (i + 1).wrapping_mul(0x2545_F491));
                for _ in 0..ROUNDS {
                    one_round(&gate, partner.as_ref(), &mut rng).await;
                }
            })
        })
        .collect()
}

fn stress_gate() -> Gate {
    let mut cfg = pinned(CAPACITY, 16);
    cfg.queue_timeout = Duration::from_millis(200);
    Gate::new(cfg, Instant::now())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_acquire_release_and_cancel_keeps_the_books_balanced() {
    let gate = stress_gate();
    for task in spawn_callers(&gate, &[None]) {
        task.await.unwrap();
    }

    let snap = gate.snapshot();
    assert_eq!(snap.active, 0, "{snap:?}");
    assert_eq!(snap.queued, 0, "{snap:?}");
    assert_eq!(snap.admitted_total, snap.released_total, "{snap:?}");
    assert!(snap.max_active <= CAPACITY, "{snap:?}");
    assert_eq!(
        snap.max_active, CAPACITY,
        "the gate was actually contended: {snap:?}"
    );
    assert!(
        snap.admitted_total > 0 && snap.cancelled_total > 0,
        "{snap:?}"
    );
    // Once everything is released the full capacity is available again.
    let all: Vec<_> = (0..CAPACITY)
        .map(|_| gate.try_admit(Instant::now()).unwrap())
        .collect();
    assert!(gate.try_admit(Instant::now()).is_err());
    drop(all);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nothing_is_admitted_after_a_drain_that_lands_mid_stream() {
    let gate = stress_gate();
    // Callers run half their rounds, then the drain races their second half;
    // after both, every caller checks that it is refused.
    let halfway = Arc::new(Barrier::new(TASKS as usize + 1));
    let drained = Arc::new(Barrier::new(TASKS as usize + 1));
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let (gate, halfway, drained) = (gate.clone(), halfway.clone(), drained.clone());
            tokio::spawn(async move {
                let mut rng = Rng(0x2545_F491_4F6C_DD1D ^ (i + 1).wrapping_mul(0x9E37_79B9));
                for round in 0..ROUNDS {
                    if round == ROUNDS / 2 {
                        halfway.wait().await;
                    }
                    one_round(&gate, None, &mut rng).await;
                }
                drained.wait().await;
                let refused = gate.enqueue(Instant::now()).unwrap_err();
                assert_eq!(refused.reason, RejectReason::Draining);
            })
        })
        .collect();
    halfway.wait().await;
    gate.start_drain(Instant::now());
    let at_drain = gate.snapshot();
    assert_eq!(at_drain.queued, 0);
    drained.wait().await;
    for task in tasks {
        task.await.unwrap();
    }
    let end = gate.snapshot();
    assert_eq!(end.admitted_total, at_drain.admitted_total, "{end:?}");
    assert_eq!((end.active, end.queued), (0, 0), "{end:?}");
    assert_eq!(end.admitted_total, end.released_total, "{end:?}");
    assert!(end.rejected_total.draining >= TASKS, "{end:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partner_quotas_hold_under_random_acquire_release_and_cancel() {
    let mut cfg = with_quotas(CAPACITY, 16, &[("a", 1), ("b", 2)]);
    cfg.queue_timeout = Duration::from_millis(200);
    let gate = Gate::new(cfg, Instant::now());
    let partners = [Some(pid("a")), Some(pid("b")), Some(pid("c")), None];
    for task in spawn_callers(&gate, &partners) {
        task.await.unwrap();
    }

    let snap = gate.snapshot();
    assert_eq!((snap.active, snap.queued), (0, 0), "{snap:?}");
    assert_eq!(snap.admitted_total, snap.released_total, "{snap:?}");
    assert!(snap.max_active <= CAPACITY, "{snap:?}");
    assert!(snap.rejected_total.partner_quota > 0, "{snap:?}");
    // Only the partners with a quota keep a row, and every count is back at 0.
    let rows: Vec<_> = snap
        .partners
        .iter()
        .map(|l| (l.partner.as_str(), l.in_gate(), l.quota))
        .collect();
    assert_eq!(rows, vec![("a", 0, Some(1)), ("b", 0, Some(2))]);
    let a = pid("a");
    let _full_quota = gate.try_admit_for(Some(&a), Instant::now()).unwrap();
}
