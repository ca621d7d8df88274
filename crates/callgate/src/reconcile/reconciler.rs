//! The reconciler's core: compares the three session counters, tracks how
//! long each kind of divergence has lasted, and says when one has outlived
//! the window and needs a reconciliation receipt.
//!
//! Sans-IO: no clock, no database, no metrics. The caller reads the
//! counters, passes them in with the time ([`Reconciler::observe`]), and
//! acts on the [`Tick`] it gets back (publish gauges, write the receipts in
//! [`Tick::due`], and report a failed write with
//! [`Reconciler::receipt_failed`] so the next tick offers it again).
//!
//! The policy:
//! - A reading with no value, or older than `max_age`, is **unknown**: it is
//!   never compared and never reported as 0. A direction whose two counters
//!   are not both known has no value this tick, and its episode (if any)
//!   neither ends nor fires: an outage of the ledger query is not evidence
//!   that a divergence healed, nor that it persists.
//! - Each [`Direction`] is an episode from the first tick it is seen
//!   diverging until the first tick both counters are known and agree in
//!   that direction. Short episodes are normal (the ledger row opens just
//!   after admission and closes after the permit's release; the routing
//!   report lags by the agent-check interval), which is what `window` is
//!   for.
//! - An episode older than `window` (strictly) is due for exactly one receipt; only a
//!   recovery (or a failed write) lets the direction fire again.

use std::time::{Duration, Instant};

/// One counter's value and when it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    Known {
        value: u64,
        at: Instant,
    },
    /// Never read, or the read failed.
    Unknown,
}

/// The three counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    /// `ledger_open_sessions`: open `call_ledger` rows owned by this instance.
    Ledger,
    /// `runtime_active_sessions`: permits held in the admission gate.
    Runtime,
    /// `routing_reported_sessions`: what the load balancer was last told.
    Routing,
}

impl Counter {
    pub const ALL: [Counter; 3] = [Counter::Ledger, Counter::Runtime, Counter::Routing];

    /// The metric label.
    pub const fn label(self) -> &'static str {
        match self {
            Counter::Ledger => "ledger",
            Counter::Runtime => "runtime",
            Counter::Routing => "routing",
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

/// A way the counters can disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// runtime > ledger.
    LeakedOrDelayedCleanup,
    /// runtime < ledger.
    FalseCapacityOrLostOwnership,
    /// routing < runtime.
    BalancerMayOverload,
    /// routing > runtime.
    StrandedCapacity,
}

impl Direction {
    pub const ALL: [Direction; 4] = [
        Direction::LeakedOrDelayedCleanup,
        Direction::FalseCapacityOrLostOwnership,
        Direction::BalancerMayOverload,
        Direction::StrandedCapacity,
    ];

    /// The metric label and the receipt's `direction`.
    pub const fn label(self) -> &'static str {
        match self {
            Direction::LeakedOrDelayedCleanup => "leaked_or_delayed_cleanup",
            Direction::FalseCapacityOrLostOwnership => "false_capacity_or_lost_ownership",
            Direction::BalancerMayOverload => "balancer_may_overload",
            Direction::StrandedCapacity => "stranded_capacity",
        }
    }

    /// `(higher, lower)`: the divergence is `higher - lower` when positive.
    pub const fn operands(self) -> (Counter, Counter) {
        match self {
            Direction::LeakedOrDelayedCleanup => (Counter::Runtime, Counter::Ledger),
            Direction::FalseCapacityOrLostOwnership => (Counter::Ledger, Counter::Runtime),
            Direction::BalancerMayOverload => (Counter::Runtime, Counter::Routing),
            Direction::StrandedCapacity => (Counter::Routing, Counter::Runtime),
        }
    }

    /// The counter the receipt trusts: the ledger is the authoritative
    /// record of promises; the balancer's number is only a report of the
    /// runtime one.
    pub const fn source_of_truth(self) -> Counter {
        match self {
            Direction::LeakedOrDelayedCleanup | Direction::FalseCapacityOrLostOwnership => {
                Counter::Ledger
            }
            Direction::BalancerMayOverload | Direction::StrandedCapacity => Counter::Runtime,
        }
    }

    /// What most likely happened, for the receipt.
    pub const fn suspected_cause(self) -> &'static str {
        match self {
            Direction::LeakedOrDelayedCleanup => {
                "permits held with no open ledger row: a teardown that outlived its row's close, a leaked permit, or a row closed outside callgate"
            }
            Direction::FalseCapacityOrLostOwnership => {
                "open ledger rows with no permit here: a close write lost or still queued, rows left by a crashed process of this instance, or calls owned elsewhere under this instance's name"
            }
            Direction::BalancerMayOverload => {
                "the balancer was told fewer sessions than are running: agent-check answers stale, failing or not asked for"
            }
            Direction::StrandedCapacity => {
                "the balancer was told more sessions than are running: calls ended since the last agent-check answer, which is not being asked for"
            }
        }
    }

    const fn index(self) -> usize {
        self as usize
    }
}

/// Bounds of the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconcilerConfig {
    /// A reading older than this is unknown.
    pub max_age: Duration,
    /// An episode older than this is due for a receipt.
    pub window: Duration,
}

/// A counter as this tick saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterState {
    pub counter: Counter,
    /// `None`: unknown (never read, failed, or older than `max_age`).
    pub value: Option<u64>,
    /// How old the last reading is; `None` when there never was one.
    pub age: Option<Duration>,
}

/// A direction as this tick saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DivergenceState {
    pub direction: Direction,
    /// Sessions diverging (0: they agree); `None` when a counter is unknown.
    pub sessions: Option<u64>,
    /// When the current episode began, if one is open.
    pub since: Option<Instant>,
}

impl DivergenceState {
    /// How long the open episode has lasted at `now` (zero when none).
    pub fn age(&self, now: Instant) -> Duration {
        self.since
            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s))
    }
}

/// An episode that outlived the window: write one receipt for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    pub direction: Direction,
    pub sessions: u64,
    pub since: Instant,
}

/// What one observation found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tick {
    pub at: Instant,
    /// In [`Counter::ALL`] order.
    pub counters: [CounterState; 3],
    /// In [`Direction::ALL`] order.
    pub divergences: [DivergenceState; 4],
    pub due: Vec<Due>,
}

impl Tick {
    pub fn counter(&self, c: Counter) -> &CounterState {
        &self.counters[c.index()]
    }

    pub fn divergence(&self, d: Direction) -> &DivergenceState {
        &self.divergences[d.index()]
    }
}

#[derive(Debug, Clone, Copy)]
struct Episode {
    since: Instant,
    receipted: bool,
}

/// Divergence episodes per direction.
#[derive(Debug)]
pub struct Reconciler {
    cfg: ReconcilerConfig,
    episodes: [Option<Episode>; 4],
}

impl Reconciler {
    pub fn new(cfg: ReconcilerConfig) -> Self {
        Reconciler {
            cfg,
            episodes: [None; 4],
        }
    }

    /// Replaces the bounds (a configuration reload); open episodes stay.
    pub fn set_config(&mut self, cfg: ReconcilerConfig) {
        self.cfg = cfg;
    }

    /// Compares the readings at `now`.
    pub fn observe(
        &mut self,
        now: Instant,
        ledger: Reading,
        runtime: Reading,
        routing: Reading,
    ) -> Tick {
        let counters = [
            self.state(Counter::Ledger, ledger, now),
            self.state(Counter::Runtime, runtime, now),
            self.state(Counter::Routing, routing, now),
        ];
        let mut due = Vec::new();
        let divergences = Direction::ALL.map(|d| {
            let (hi, lo) = d.operands();
            let pair = counters[hi.index()].value.zip(counters[lo.index()].value);
            let sessions = pair.map(|(h, l)| h.saturating_sub(l));
            if let Some(s) = sessions {
                due.extend(self.step(d, s, now));
            }
            DivergenceState {
                direction: d,
                sessions,
                since: self.episodes[d.index()].map(|e| e.since),
            }
        });
        Tick {
            at: now,
            counters,
            divergences,
            due,
        }
    }

    /// The receipt for `direction` could not be written: offer it again on
    /// the next tick (if the episode is still open then).
    pub fn receipt_failed(&mut self, direction: Direction) {
        if let Some(e) = self.episodes[direction.index()].as_mut() {
            e.receipted = false;
        }
    }

    fn state(&self, counter: Counter, reading: Reading, now: Instant) -> CounterState {
        match reading {
            Reading::Unknown => CounterState {
                counter,
                value: None,
                age: None,
            },
            Reading::Known { value, at } => {
                let age = now.saturating_duration_since(at);
                let fresh = age <= self.cfg.max_age;
                CounterState {
                    counter,
                    value: fresh.then_some(value),
                    age: Some(age),
                }
            }
        }
    }

    /// One known comparison: ends, opens or ages the episode.
    fn step(&mut self, d: Direction, sessions: u64, now: Instant) -> Option<Due> {
        let slot = &mut self.episodes[d.index()];
        if sessions == 0 {
            *slot = None;
            return None;
        }
        let e = slot.get_or_insert(Episode {
            since: now,
            receipted: false,
        });
        if e.receipted || now.saturating_duration_since(e.since) <= self.cfg.window {
            return None;
        }
        e.receipted = true;
        Some(Due {
            direction: d,
            sessions,
            since: e.since,
        })
    }
}

#[cfg(test)]
mod tests;
