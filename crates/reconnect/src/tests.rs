#![allow(clippy::unwrap_used)]

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn policy() -> ReconnectPolicy {
    ReconnectPolicy {
        initial_ms: 100,
        max_ms: 400,
        budget_ms: 2_000,
        max_attempts: 10,
        max_drops: 3,
    }
}

#[test]
fn delays_double_up_to_the_cap_with_jitter_in_the_upper_half() {
    let t0 = Instant::now();
    let mut b = Backoff::new(policy(), t0, 7);
    let steps = [100, 200, 400, 400];
    let mut now = t0;
    for step in steps {
        let d = b.next_delay(now).unwrap();
        assert!(d >= ms(step / 2) && d <= ms(step), "{d:?} for step {step}");
        b.failed(Failure::Down);
        now += d;
    }
    assert_eq!(b.tally().attempts, 4);
    assert_eq!(b.tally().down_refusals, 4);
}

#[test]
fn no_attempt_starts_past_the_budget() {
    let t0 = Instant::now();
    let mut b = Backoff::new(policy(), t0, 7);
    // A delay that would end beyond the budget is refused.
    assert_eq!(b.next_delay(t0 + ms(1_999)), None);
    assert_eq!(b.tally().attempts, 0);
}

#[test]
fn the_attempt_limit_stops_reconnecting() {
    let t0 = Instant::now();
    let mut b = Backoff::new(
        ReconnectPolicy {
            max_attempts: 2,
            ..policy()
        },
        t0,
        1,
    );
    for _ in 0..2 {
        assert!(b.next_delay(t0).is_some());
        b.failed(Failure::Capacity);
    }
    assert_eq!(b.next_delay(t0), None);
    assert_eq!(b.tally().capacity_refusals, 2);
}

#[test]
fn a_fatal_failure_stops_at_once_and_never_disables_it() {
    let t0 = Instant::now();
    let mut b = Backoff::new(policy(), t0, 1);
    assert!(b.next_delay(t0).is_some());
    b.failed(Failure::Fatal);
    assert_eq!(b.next_delay(t0), None);
    let mut never = Backoff::new(ReconnectPolicy::never(), t0, 1);
    assert_eq!(never.next_delay(t0), None);
}

#[test]
fn reconnecting_resets_the_schedule_and_tallies_the_outage() {
    let t0 = Instant::now();
    let mut b = Backoff::new(policy(), t0, 3);
    b.next_delay(t0).unwrap();
    b.failed(Failure::Down);
    b.next_delay(t0 + ms(100)).unwrap();
    b.reconnected(t0 + ms(350));
    assert!(!b.is_down());
    assert_eq!(
        b.next_delay(t0 + ms(400)),
        None,
        "connected: nothing to wait for"
    );
    // A second drop starts again from the first step.
    b.dropped(t0 + ms(1_000));
    let d = b.next_delay(t0 + ms(1_000)).unwrap();
    assert!(d <= ms(100), "{d:?}");
    b.reconnected(t0 + ms(1_100));
    let t = b.tally();
    assert_eq!((t.drops, t.attempts, t.reconnected), (2, 3, 2));
    assert_eq!(t.down_ms, 450);
}

#[test]
fn different_seeds_spread_the_retries() {
    let t0 = Instant::now();
    let delays: std::collections::BTreeSet<Duration> = (0..50)
        .map(|seed| Backoff::new(policy(), t0, seed).next_delay(t0).unwrap())
        .collect();
    assert!(delays.len() > 10, "jitter spreads retries: {delays:?}");
}

#[test]
fn incoherent_policies_are_refused() {
    assert!(ReconnectPolicy::default().validate().is_ok());
    assert!(
        ReconnectPolicy {
            max_ms: 10,
            initial_ms: 100,
            ..policy()
        }
        .validate()
        .is_err()
    );
    assert!(ReconnectPolicy::never().validate().is_ok());
}

#[test]
fn a_connection_that_keeps_dropping_is_given_up_after_max_drops() {
    let t0 = Instant::now();
    let mut b = Backoff::connected(policy(), 5);
    for n in 0..3 {
        let at = t0 + ms(1_000 * n);
        b.dropped(at);
        assert!(b.next_delay(at).is_some(), "drop {n} is reconnected");
        b.reconnected(at + ms(50));
    }
    b.dropped(t0 + ms(5_000));
    assert_eq!(b.next_delay(t0 + ms(5_000)), None);
    assert_eq!(b.tally().drops, 4);
}

#[test]
fn failures_are_classified_capacity_first() {
    assert_eq!(Failure::classify(true, true), Failure::Capacity);
    assert_eq!(Failure::classify(true, false), Failure::Capacity);
    assert_eq!(Failure::classify(false, true), Failure::Down);
    assert_eq!(Failure::classify(false, false), Failure::Fatal);
}
