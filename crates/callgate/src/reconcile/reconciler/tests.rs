//! The reconciler on a virtual clock: `t0 + s(n)`, no sleeping.

use super::*;

fn s(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn cfg() -> ReconcilerConfig {
    ReconcilerConfig {
        max_age: s(5),
        window: s(10),
    }
}

fn at(value: u64, at: Instant) -> Reading {
    Reading::Known { value, at }
}

/// Observes once a second from `from` to `to` (inclusive) with all three
/// counters read at the tick; returns every receipt due.
fn run(r: &mut Reconciler, t0: Instant, from: u64, to: u64, l: u64, rt: u64, ro: u64) -> Vec<Due> {
    let mut due = Vec::new();
    for n in from..=to {
        let now = t0 + s(n);
        due.extend(r.observe(now, at(l, now), at(rt, now), at(ro, now)).due);
    }
    due
}

#[test]
fn agreeing_counters_have_no_divergence_and_no_receipt() {
    let t0 = Instant::now();
    let mut r = Reconciler::new(cfg());
    assert!(run(&mut r, t0, 0, 60, 3, 3, 3).is_empty());
    let tick = r.observe(
        t0 + s(61),
        at(3, t0 + s(61)),
        at(3, t0 + s(61)),
        at(3, t0 + s(61)),
    );
    for d in tick.divergences {
        assert_eq!((d.sessions, d.since), (Some(0), None), "{:?}", d.direction);
    }
}

#[test]
fn each_direction_is_named_by_which_counter_is_higher() {
    let cases = [
        ((1, 3, 3), Direction::LeakedOrDelayedCleanup, 2),
        ((4, 3, 3), Direction::FalseCapacityOrLostOwnership, 1),
        ((3, 3, 1), Direction::BalancerMayOverload, 2),
        ((3, 3, 5), Direction::StrandedCapacity, 2),
    ];
    for ((l, rt, ro), want, sessions) in cases {
        let t0 = Instant::now();
        let mut r = Reconciler::new(cfg());
        let due = run(&mut r, t0, 0, 30, l, rt, ro);
        assert_eq!(due.len(), 1, "{want:?}: {due:?}");
        assert_eq!(due[0].direction, want);
        assert_eq!(due[0].sessions, sessions);
        assert_eq!(due[0].since, t0, "the episode began at the first tick");
        let tick = r.observe(
            t0 + s(31),
            at(l, t0 + s(31)),
            at(rt, t0 + s(31)),
            at(ro, t0 + s(31)),
        );
        assert_eq!(tick.divergence(want).sessions, Some(sessions));
        assert_eq!(tick.divergence(want).age(tick.at), s(31));
        for d in Direction::ALL.into_iter().filter(|d| *d != want) {
            assert_eq!(tick.divergence(d).sessions, Some(0), "{d:?} for {want:?}");
        }
    }
}

#[test]
fn a_divergence_shorter_than_the_window_writes_nothing() {
    let t0 = Instant::now();
    let mut r = Reconciler::new(cfg());
    // runtime ahead of the ledger for exactly the window: the row's open
    // lagging the admission, then landing.
    assert!(run(&mut r, t0, 0, 10, 0, 1, 1).is_empty());
    assert!(run(&mut r, t0, 11, 40, 1, 1, 1).is_empty());
}

#[test]
fn one_receipt_per_episode_and_recovery_starts_a_new_one() {
    let t0 = Instant::now();
    let mut r = Reconciler::new(cfg());
    let first = run(&mut r, t0, 0, 100, 2, 3, 3);
    assert_eq!(
        first.len(),
        1,
        "one receipt however long it lasts: {first:?}"
    );
    assert_eq!(first[0].since, t0);
    // Fired on the first tick strictly older than the window.
    let second_run = {
        let mut r = Reconciler::new(cfg());
        let mut fired = None;
        for n in 0..=20 {
            let now = t0 + s(n);
            if !r
                .observe(now, at(2, now), at(3, now), at(3, now))
                .due
                .is_empty()
            {
                fired = Some(n);
            }
        }
        fired
    };
    assert_eq!(second_run, Some(11));
    // Recovery ends the episode; the next divergence is a new one.
    assert!(run(&mut r, t0, 101, 101, 3, 3, 3).is_empty());
    let tick = r.observe(
        t0 + s(102),
        at(2, t0 + s(102)),
        at(3, t0 + s(102)),
        at(3, t0 + s(102)),
    );
    let d = tick.divergence(Direction::LeakedOrDelayedCleanup);
    assert_eq!(d.since, Some(t0 + s(102)), "a fresh episode");
    let again = run(&mut r, t0, 103, 130, 2, 3, 3);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].since, t0 + s(102));
}

#[test]
fn unknown_readings_are_never_zero_and_never_compared() {
    let t0 = Instant::now();
    let mut r = Reconciler::new(cfg());
    let tick = r.observe(t0, Reading::Unknown, at(4, t0), Reading::Unknown);
    assert_eq!(tick.counter(Counter::Ledger).value, None);
    assert_eq!(tick.counter(Counter::Ledger).age, None);
    assert_eq!(tick.counter(Counter::Runtime).value, Some(4));
    assert_eq!(tick.counter(Counter::Routing).value, None);
    for d in tick.divergences {
        assert_eq!(d.sessions, None, "{:?} has an unknown operand", d.direction);
    }
    // Hours of an unknown routing counter: no routing receipt, ledger ones
    // still work.
    let mut due = Vec::new();
    for n in 0..=3_600 {
        let now = t0 + s(n);
        due.extend(r.observe(now, at(4, now), at(4, now), Reading::Unknown).due);
    }
    assert!(due.is_empty(), "{due:?}");
}

#[test]
fn a_stale_reading_is_unknown_but_keeps_its_age() {
    let t0 = Instant::now();
    let mut r = Reconciler::new(cfg());
    // The ledger was last read at t0; the query has failed since.
    let fresh = r.observe(t0 + s(5), at(2, t0), at(3, t0 + s(5)), Reading::Unknown);
    assert_eq!(
        fresh.counter(Counter::Ledger).value,
        Some(2),
        "5 s is not older than max_age"
    );
    let stale = r.observe(t0 + s(6), at(2, t0), at(3, t0 + s(6)), Reading::Unknown);
    let l = stale.counter(Counter::Ledger);
    assert_eq!((l.value, l.age), (None, Some(s(6))));
    let d = stale.divergence(Direction::LeakedOrDelayedCleanup);
    assert_eq!(d.sessions, None);
    assert_eq!(
        d.since,
        Some(t0 + s(5)),
        "an unknown tick neither ends nor restarts the episode"
    );
}

#[test]
fn an_episode_spanning_an_outage_fires_only_once_it_is_seen_again() {
    let t0 = Instant::now();
    let mut r = Reconciler::new(cfg());
    assert!(run(&mut r, t0, 0, 2, 1, 3, 3).is_empty());
    // The ledger goes unknown for 30 s: no receipt on no evidence.
    for n in 3..=32 {
        let now = t0 + s(n);
        assert!(
            r.observe(now, Reading::Unknown, at(3, now), at(3, now))
                .due
                .is_empty()
        );
    }
    // Seen again, still diverging: the episode (since t0) is long past due.
    let due = run(&mut r, t0, 33, 33, 1, 3, 3);
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].since, t0);
    // Seen again agreeing instead: healed, no receipt.
    let mut r = Reconciler::new(cfg());
    assert!(run(&mut r, t0, 0, 2, 1, 3, 3).is_empty());
    let now = t0 + s(40);
    assert!(
        r.observe(now, Reading::Unknown, at(3, now), at(3, now))
            .due
            .is_empty()
    );
    assert!(run(&mut r, t0, 41, 80, 3, 3, 3).is_empty());
}

#[test]
fn a_failed_receipt_write_is_offered_again() {
    let t0 = Instant::now();
    let mut r = Reconciler::new(cfg());
    let due = run(&mut r, t0, 0, 11, 5, 3, 3);
    assert_eq!(due.len(), 1);
    r.receipt_failed(Direction::FalseCapacityOrLostOwnership);
    let retry = run(&mut r, t0, 12, 12, 5, 3, 3);
    assert_eq!(retry.len(), 1, "offered on the next tick");
    assert!(run(&mut r, t0, 13, 40, 5, 3, 3).is_empty(), "and once only");
}

#[test]
fn two_directions_diverge_at_once_with_their_own_episodes() {
    let t0 = Instant::now();
    let mut r = Reconciler::new(cfg());
    // runtime 3, ledger 1 (leaked), routing 0 (overload) from t0;
    // routing catches up with runtime at t0+5; the leak goes on.
    assert!(run(&mut r, t0, 0, 4, 1, 3, 0).is_empty());
    let due = run(&mut r, t0, 5, 20, 1, 3, 3);
    assert_eq!(due.len(), 1, "only the leak lasted: {due:?}");
    assert_eq!(due[0].direction, Direction::LeakedOrDelayedCleanup);
}
