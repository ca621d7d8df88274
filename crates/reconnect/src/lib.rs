//! `reconnect` — when to try a dropped provider connection again, and when
//! to stop trying.
//!
//! What it is: a sans-IO schedule. [`Backoff`] hands out the delay before
//! each reconnect attempt — exponential from [`ReconnectPolicy::initial_ms`],
//! capped at [`ReconnectPolicy::max_ms`], with "equal jitter" (half the
//! step fixed, half drawn from a seeded generator so that a thousand calls
//! dropped by the same provider blip do not reconnect in lockstep) — and
//! says `None` once the connection has been down longer than
//! [`ReconnectPolicy::budget_ms`] or [`ReconnectPolicy::max_attempts`] have
//! failed. It also keeps the tally a receipt reports ([`Tally`]): attempts,
//! successes, and which failures were capacity refusals rather than an
//! outage.
//!
//! What it never does: sleep, read a clock, open a socket or log. Time is
//! passed in; the caller performs the wait and the attempt.
//!
//! How to drive it:
//!
//! ```
//! use std::time::{Duration, Instant};
//! use reconnect::{Backoff, Failure, ReconnectPolicy};
//!
//! let policy = ReconnectPolicy::default();
//! let dropped_at = Instant::now();
//! let mut backoff = Backoff::new(policy, dropped_at, 42);
//! // Before each attempt: how long to wait (None: give up).
//! let wait = backoff.next_delay(dropped_at).expect("within budget");
//! assert!(wait <= Duration::from_millis(policy.initial_ms));
//! // The attempt failed with a 429: count it as a capacity refusal.
//! backoff.failed(Failure::Capacity);
//! assert_eq!(backoff.tally().capacity_refusals, 1);
//! ```

use std::time::{Duration, Instant};

/// How a connection that dropped mid-call is retried. All durations in ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReconnectPolicy {
    /// Delay step of the first attempt (the first wait is at most this).
    pub initial_ms: u64,
    /// Cap of the delay step.
    pub max_ms: u64,
    /// Total time the connection may stay down, measured from the drop;
    /// no attempt starts after it. 0 disables reconnecting.
    pub budget_ms: u64,
    /// Failed attempts after which reconnecting stops, whatever the budget.
    pub max_attempts: u32,
    /// Drops one connection may have over its whole life; the next one is
    /// not reconnected. Stops a provider that accepts and drops again at
    /// once from keeping a call in a reconnect loop.
    pub max_drops: u32,
}

impl Default for ReconnectPolicy {
    /// 100 ms, doubling, capped at 1 s; down for at most 4 s, 8 attempts,
    /// 10 drops per connection —
    /// under the call's reply-stall watchdog plus its apology, so a caller
    /// hears "one moment" rather than silence while the budget runs.
    fn default() -> Self {
        ReconnectPolicy {
            initial_ms: 100,
            max_ms: 1_000,
            budget_ms: 4_000,
            max_attempts: 8,
            max_drops: 10,
        }
    }
}

impl ReconnectPolicy {
    /// A policy that never reconnects.
    pub fn never() -> Self {
        ReconnectPolicy {
            budget_ms: 0,
            max_attempts: 0,
            ..ReconnectPolicy::default()
        }
    }

    /// Checks the policy is coherent.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.initial_ms == 0 && self.budget_ms > 0 {
            return Err(PolicyError("initial_ms must be > 0 when reconnecting"));
        }
        if self.max_ms < self.initial_ms {
            return Err(PolicyError("max_ms must be >= initial_ms"));
        }
        Ok(())
    }

    /// Whether this policy reconnects at all.
    pub fn enabled(&self) -> bool {
        self.budget_ms > 0 && self.max_attempts > 0
    }
}

/// A [`ReconnectPolicy`] that makes no sense.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid reconnect policy: {0}")]
pub struct PolicyError(pub &'static str);

/// Why one reconnect attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The provider answered and refused for capacity (HTTP 429, gRPC
    /// `RESOURCE_EXHAUSTED`, a concurrency error): it is up but full.
    Capacity,
    /// No answer, a refused connection, a 5xx, a timeout: it is down.
    Down,
    /// The provider refused us for good (401/403, bad request): retrying
    /// cannot help.
    Fatal,
}

impl Failure {
    /// How an attempt that failed with an error counts: a capacity
    /// refusal, else an outage when a retry may help, else fatal.
    pub fn classify(is_capacity: bool, is_retryable: bool) -> Failure {
        match (is_capacity, is_retryable) {
            (true, _) => Failure::Capacity,
            (false, true) => Failure::Down,
            (false, false) => Failure::Fatal,
        }
    }
}

/// What one connection's reconnects amounted to; what a receipt reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Tally {
    /// Times the connection dropped mid-call.
    pub drops: u32,
    /// Reconnect attempts started.
    pub attempts: u32,
    /// Attempts that connected.
    pub reconnected: u32,
    /// Attempts refused for capacity.
    pub capacity_refusals: u32,
    /// Attempts that found the provider down.
    pub down_refusals: u32,
    /// Total time spent disconnected, ms (completed outages only).
    pub down_ms: u64,
}

/// The reconnect schedule of one connection over a whole call: reset at
/// each drop, tallied across all of them.
#[derive(Debug, Clone)]
pub struct Backoff {
    policy: ReconnectPolicy,
    /// When the current outage began; `None` while connected.
    down_since: Option<Instant>,
    /// Failed attempts in the current outage.
    failures: u32,
    fatal: bool,
    rng: u64,
    tally: Tally,
}

impl Backoff {
    /// A schedule for a connection that dropped at `dropped_at`. `seed`
    /// spreads the jitter (a call id hash is a good seed).
    pub fn new(policy: ReconnectPolicy, dropped_at: Instant, seed: u64) -> Self {
        let mut b = Backoff::connected(policy, seed);
        b.dropped(dropped_at);
        b
    }

    /// A schedule for a connection that is up.
    pub fn connected(policy: ReconnectPolicy, seed: u64) -> Self {
        Backoff {
            policy,
            down_since: None,
            failures: 0,
            fatal: false,
            // xorshift must not start at zero.
            rng: seed | 1,
            tally: Tally::default(),
        }
    }

    /// The connection dropped at `now`: a new outage begins.
    pub fn dropped(&mut self, now: Instant) {
        if self.down_since.is_none() {
            self.down_since = Some(now);
            self.failures = 0;
            self.tally.drops += 1;
        }
    }

    /// The delay before the next attempt, or `None` when the budget or
    /// the attempt limit is spent, a failure was fatal, or the policy never
    /// reconnects. Counts the attempt.
    pub fn next_delay(&mut self, now: Instant) -> Option<Duration> {
        let since = self.down_since?;
        if self.fatal
            || !self.policy.enabled()
            || self.failures >= self.policy.max_attempts
            || self.tally.drops > self.policy.max_drops
        {
            return None;
        }
        let step = self.step();
        let half = step / 2;
        let delay = half + self.jitter(step - half);
        let budget = Duration::from_millis(self.policy.budget_ms);
        if now.saturating_duration_since(since) + delay > budget {
            return None;
        }
        self.tally.attempts += 1;
        Some(delay)
    }

    /// The attempt failed.
    pub fn failed(&mut self, why: Failure) {
        self.failures += 1;
        match why {
            Failure::Capacity => self.tally.capacity_refusals += 1,
            Failure::Down => self.tally.down_refusals += 1,
            Failure::Fatal => self.fatal = true,
        }
    }

    /// The attempt connected at `now`: the outage is over.
    pub fn reconnected(&mut self, now: Instant) {
        if let Some(since) = self.down_since.take() {
            self.tally.reconnected += 1;
            self.tally.down_ms += now.saturating_duration_since(since).as_millis() as u64;
        }
        self.failures = 0;
    }

    /// How long the current outage has lasted; zero while connected.
    pub fn down_for(&self, now: Instant) -> Duration {
        self.down_since
            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s))
    }

    /// Whether an outage is in progress.
    pub fn is_down(&self) -> bool {
        self.down_since.is_some()
    }

    /// The counts so far.
    pub fn tally(&self) -> Tally {
        self.tally
    }

    /// The policy in force.
    pub fn policy(&self) -> ReconnectPolicy {
        self.policy
    }

    fn step(&self) -> Duration {
        let shift = self.failures.min(20);
        let ms = self.policy.initial_ms.saturating_mul(1 << shift);
        Duration::from_millis(ms.min(self.policy.max_ms))
    }

    /// A duration uniform-ish in `0..=span` (xorshift64).
    fn jitter(&mut self, span: Duration) -> Duration {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        let span_us = span.as_micros() as u64;
        if span_us == 0 {
            return Duration::ZERO;
        }
        Duration::from_micros(x % (span_us + 1))
    }
}

#[cfg(test)]
mod tests;
