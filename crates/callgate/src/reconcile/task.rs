//! The reconciler's async shell: reads the three counters every
//! `[ledger].reconcile_interval_ms`, feeds them to the sans-IO
//! [`Reconciler`], publishes the gauges, writes the reconciliation
//! receipts it asks for, and keeps the latest tick for `/admin/status`.
//!
//! What it never does: wait on the database without a bound (the ledger
//! count and a receipt write each get `[ledger].query_timeout_ms`; a slow
//! count is an unknown reading, not a stall of the loop), or change a
//! counter or a ledger row.
//!
//! How to drive it: `server::start` spawns `run(app, background_token)`;
//! cancelling the token stops it between ticks.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;
use state_store::{CallId, NewReconciliation};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::reconciler::{Counter, Direction, Due, Reading, Reconciler, ReconcilerConfig, Tick};
use crate::app::App;
use crate::config::{LedgerConfig, ms};
use crate::metrics as m;

/// The reconciler's bounds from `[ledger]`.
pub fn reconciler_config(c: &LedgerConfig) -> ReconcilerConfig {
    ReconcilerConfig {
        max_age: ms(c.reading_max_age_ms),
        window: Duration::from_secs(c.divergence_window_s),
    }
}

/// Runs until `stop` is cancelled.
pub async fn run(app: Arc<App>, stop: CancellationToken) {
    let mut ticker = Ticker::new(&app);
    loop {
        ticker.tick(&app).await;
        let every = ms(app.cfg().ledger.reconcile_interval_ms);
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
    }
}

/// One reconciler and the last ledger reading it was given: what [`run`]
/// does each interval, callable on its own (`callgate-bench ledger` times it).
pub struct Ticker {
    reconciler: Reconciler,
    ledger: Reading,
}

impl Ticker {
    pub fn new(app: &App) -> Self {
        Ticker {
            reconciler: Reconciler::new(reconciler_config(&app.cfg().ledger)),
            ledger: Reading::Unknown,
        }
    }

    /// Reads the three counters, compares them, publishes the gauges,
    /// writes the receipts that are due and keeps the tick for status.
    pub async fn tick(&mut self, app: &App) {
        let cfg = app.cfg().ledger.clone();
        self.reconciler.set_config(reconciler_config(&cfg));
        if let Some(fresh) = read_ledger(app, ms(cfg.query_timeout_ms)).await {
            self.ledger = fresh;
        }
        let now = Instant::now();
        let runtime = Reading::Known {
            value: u64::from(app.call.gate.snapshot().active),
            at: now,
        };
        let routing = app
            .routing
            .last()
            .map_or(Reading::Unknown, |(value, at)| Reading::Known { value, at });
        let tick = self.reconciler.observe(now, self.ledger, runtime, routing);
        publish(&tick);
        for due in &tick.due {
            if !write_receipt(app, &tick, due, ms(cfg.query_timeout_ms)).await {
                self.reconciler.receipt_failed(due.direction);
            }
        }
        app.reconcile.set(tick);
    }
}

/// The ledger count, stamped with when it was asked; `None` when it failed
/// or took longer than `bound` (the previous reading then ages out).
async fn read_ledger(app: &App, bound: Duration) -> Option<Reading> {
    let asked = Instant::now();
    let instance = app.instance();
    match tokio::time::timeout(bound, app.call.store.open_ledger_sessions(&instance)).await {
        Ok(Ok(n)) => Some(Reading::Known {
            value: u64::try_from(n).unwrap_or(0),
            at: asked,
        }),
        Ok(Err(e)) => {
            warn!(error = %e, "ledger_open_sessions read failed; the counter ages toward unknown");
            None
        }
        Err(_) => {
            warn!(
                bound_ms = bound.as_millis() as u64,
                "ledger_open_sessions read timed out"
            );
            None
        }
    }
}

/// Gauges for one tick. An unknown counter keeps its last published value
/// out of sight: its `callgate_counter_known` is 0 and its value gauge is
/// not set (never a fake 0, never NaN).
fn publish(tick: &Tick) {
    for c in &tick.counters {
        let label = c.counter.label();
        metrics::gauge!(m::COUNTER_KNOWN, "counter" => label).set(if c.value.is_some() {
            1.0
        } else {
            0.0
        });
        if let Some(age) = c.age {
            metrics::gauge!(m::COUNTER_AGE, "counter" => label).set(age.as_secs_f64());
        }
        if let Some(v) = c.value {
            metrics::gauge!(value_metric(c.counter)).set(v as f64);
        }
    }
    for d in &tick.divergences {
        let Some(sessions) = d.sessions else { continue };
        let label = d.direction.label();
        metrics::gauge!(m::DIVERGENCE, "direction" => label).set(sessions as f64);
        metrics::gauge!(m::DIVERGENCE_AGE, "direction" => label).set(d.age(tick.at).as_secs_f64());
    }
}

const fn value_metric(c: Counter) -> &'static str {
    match c {
        Counter::Ledger => m::LEDGER_OPEN,
        Counter::Runtime => m::RUNTIME_ACTIVE,
        Counter::Routing => m::ROUTING_REPORTED,
    }
}

/// Writes one receipt (bounded); false when it must be offered again.
async fn write_receipt(app: &App, tick: &Tick, due: &Due, bound: Duration) -> bool {
    let instance = app.instance();
    let affected = affected_calls(app, &instance, due.direction, bound).await;
    let elapsed = tick.at.saturating_duration_since(due.since);
    let now_wall = SystemTime::now();
    let value = |c: Counter| tick.counter(c).value.and_then(|v| i64::try_from(v).ok());
    let receipt = NewReconciliation {
        instance,
        direction: due.direction.label().to_owned(),
        source_of_truth: due.direction.source_of_truth().label().to_owned(),
        sessions: i64::try_from(due.sessions).unwrap_or(i64::MAX),
        ledger_open: value(Counter::Ledger),
        runtime_active: value(Counter::Runtime),
        routing_reported: value(Counter::Routing),
        affected_calls: affected,
        correction: "none: reported".to_owned(),
        suspected_cause: due.direction.suspected_cause().to_owned(),
        diverged_since: now_wall.checked_sub(elapsed).unwrap_or(now_wall),
        recorded_at: now_wall,
    };
    let label = due.direction.label();
    match tokio::time::timeout(bound, app.call.store.record_reconciliation(&receipt)).await {
        Ok(Ok(id)) => {
            warn!(
                id,
                direction = label,
                sessions = due.sessions,
                lasted_s = elapsed.as_secs(),
                affected = receipt.affected_calls.len(),
                "counters diverged past the window: reconciliation receipt written"
            );
            metrics::counter!(m::RECONCILIATIONS, "direction" => label).increment(1);
            app.reconcile.receipt(json!({
                "id": id, "direction": label, "sessions": due.sessions,
                "lasted_s": elapsed.as_secs_f64(), "correction": receipt.correction,
                "affected_calls": receipt.affected_calls.iter().map(ToString::to_string).collect::<Vec<_>>(),
            }));
            true
        }
        Ok(Err(e)) => {
            warn!(error = %e, direction = label, "reconciliation receipt not written; retrying next tick");
            metrics::counter!(m::RECONCILIATION_FAILURES).increment(1);
            false
        }
        Err(_) => {
            warn!(
                direction = label,
                "reconciliation receipt write timed out; retrying next tick"
            );
            metrics::counter!(m::RECONCILIATION_FAILURES).increment(1);
            false
        }
    }
}

/// The sessions on the wrong side of a ledger/runtime divergence: live
/// calls with no open row (runtime > ledger) or open rows with no live call
/// (runtime < ledger). Empty for routing divergences, which name no calls,
/// and when the ledger cannot be read in time (logged).
async fn affected_calls(app: &App, instance: &str, d: Direction, bound: Duration) -> Vec<CallId> {
    let live: Vec<CallId> = app.call.live.ids().into_iter().collect();
    let read = async {
        match d {
            Direction::LeakedOrDelayedCleanup => {
                app.call.store.calls_without_open_row(instance, &live).await
            }
            Direction::FalseCapacityOrLostOwnership => {
                app.call.store.open_rows_not_in(instance, &live).await
            }
            Direction::BalancerMayOverload | Direction::StrandedCapacity => Ok(Vec::new()),
        }
    };
    match tokio::time::timeout(bound, read).await {
        Ok(Ok(ids)) => ids,
        Ok(Err(e)) => {
            info!(error = %e, "ledger unreadable; the receipt names no calls");
            Vec::new()
        }
        Err(_) => {
            info!("ledger read timed out; the receipt names no calls");
            Vec::new()
        }
    }
}
