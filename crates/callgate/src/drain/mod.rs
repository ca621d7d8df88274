//! Draining: stop admitting, let calls finish or hand them over, end the
//! rest at a deadline, and say what happened.
//!
//! Sequence (docs/design.md "Drain"): [`begin`] closes the gate at once — from
//! its return on `/readyz` answers 503, the HAProxy agent says `drain`, SIP
//! OPTIONS answers 503, queued callers are woken with `draining` and take
//! their ingress's overflow path — and records `draining` in
//! `instance_events` (spawned, bounded: a drain never waits on Postgres).
//! Live calls then follow `[drain].policy`: `finish` lets them run on;
//! `transfer` sends each an [`Order::Transfer`] and the call core hands it
//! to the human path at its next turn boundary. [`run_until_done`] waits until no
//! call is left or the deadline passes; at the deadline [`Order::Deadline`]
//! makes every call still running play its goodbye and end with
//! `drain_deadline`. A second signal shortens the deadline to
//! `[drain].grace_s` ([`shorten`]); [`undrain`] cancels a drain the admin
//! API started. Nothing is dropped without a receipt.
//!
//! The decisions on time are [`Plan`]'s (sans-IO, `now` passed in); this
//! module's functions are the shell around the gate and the calls.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::app::{App, Counters};
use crate::config::DrainPolicy;

pub mod plan;

use plan::{Order, Origin, Plan, UndrainRefused};

/// How often the drain looks at the counts.
const POLL: Duration = Duration::from_millis(100);

/// Whether any call is still in progress in any phase.
pub fn calls_in_progress(app: &App) -> u64 {
    let snap = app.call.gate.snapshot();
    snap.active as u64 + snap.queued as u64 + Counters::get(&app.call.counters.overflowing)
}

/// Closes admission now and starts the policy: from its return on, the gate
/// refuses and readiness fails. Returns false (and changes nothing but a
/// signal's claim on the drain) when a drain was already under way.
pub fn begin(app: &App, origin: Origin) -> bool {
    begin_within(app, origin, Duration::from_secs(app.cfg().drain.deadline_s))
}

/// [`begin`] with a deadline other than `[drain].deadline_s` (tests, the
/// embedded rig).
pub fn begin_within(app: &App, origin: Origin, deadline: Duration) -> bool {
    let cfg = app.cfg();
    let now = Instant::now();
    let mut plan = app.call.drain.lock();
    if let Some(p) = plan.as_mut() {
        // A signal during an admin drain makes it the shutdown's drain.
        if origin == Origin::Signal {
            p.origin = Origin::Signal;
        }
        return false;
    }
    let policy = cfg.drain.policy;
    *plan = Some(Plan::new(origin, policy, now, deadline));
    app.call.gate.start_drain(now);
    drop(plan);
    if policy == DrainPolicy::Transfer {
        app.call.drain.order(Order::Transfer);
    }
    metrics::gauge!(crate::metrics::DRAINING).set(1.0);
    let in_progress = calls_in_progress(app);
    info!(
        in_progress,
        policy = policy.as_str(),
        origin = origin.as_str(),
        deadline_s = deadline.as_secs(),
        "drain started: admission closed"
    );
    // Stamped after admission closed; spawned and bounded, never awaited.
    crate::audit_http::record_draining(
        app,
        serde_json::json!({
            "in_progress": in_progress,
            "policy": policy.as_str(),
            "origin": origin.as_str(),
            "deadline_s": deadline.as_secs(),
        }),
    );
    true
}

/// A second `SIGTERM`/`SIGINT`: the deadline moves to `[drain].grace_s`
/// from now (never later). The goodbye, the receipts and the flush still
/// happen.
pub fn shorten(app: &App) {
    let grace = Duration::from_secs(app.cfg().drain.grace_s);
    let mut plan = app.call.drain.lock();
    let Some(p) = plan.as_mut() else {
        return;
    };
    if p.shorten(Instant::now(), grace) {
        warn!(
            grace_s = grace.as_secs(),
            "second signal: the drain deadline is now {} s away",
            grace.as_secs()
        );
    } else {
        info!("second signal: the drain deadline is already sooner than the grace");
    }
}

/// Cancels a drain started by `POST /admin/drain` before its deadline.
/// `undrained` is recorded in `instance_events` *before* admission reopens
/// (awaited, bounded), so no admission can precede its own declaration.
/// Calls already handing over go on; the others stay.
///
/// # Errors
/// Not draining, a signal's drain, a deadline already passed, or the
/// declaration not written.
pub async fn undrain(app: &App) -> Result<(), UndrainRefused> {
    let plan = app.call.drain.plan().ok_or(UndrainRefused::NotDraining)?;
    if let Some(why) = plan.undrain_refusal() {
        return Err(why);
    }
    let waited = Instant::now().saturating_duration_since(plan.started);
    crate::audit_http::record_undrained(
        app,
        serde_json::json!({ "drained_ms": waited.as_millis() as u64 }),
    )
    .await
    .map_err(UndrainRefused::NotRecorded)?;
    let mut current = app.call.drain.lock();
    // Re-checked under the lock: a signal or the deadline may have come
    // while the declaration was written (then the row is harmless: the
    // next admission is still refused, which is what it says).
    if let Some(why) = current.as_ref().and_then(Plan::undrain_refusal) {
        return Err(why);
    }
    *current = None;
    app.call.gate.end_drain(Instant::now());
    drop(current);
    app.call.drain.order(Order::Serve);
    metrics::gauge!(crate::metrics::DRAINING).set(0.0);
    warn!(
        drained_ms = waited.as_millis() as u64,
        "drain cancelled: admitting again"
    );
    Ok(())
}

/// How a drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// No call is left in progress.
    Done,
    /// Calls were still in progress after the deadline and their goodbye.
    Left(u64),
    /// `POST /admin/undrain` cancelled it.
    Cancelled,
}

/// After [`begin`]: waits until no call is left, or the deadline passes —
/// then orders every remaining call to say goodbye and end, and waits for
/// their goodbyes, bounded by the time a goodbye and a teardown take. Any
/// number of these may run for one drain (the admin API's and the
/// shutdown's); the order is given once.
pub async fn run_until_done(app: Arc<App>) -> Outcome {
    let bound = goodbye_bound(&app);
    loop {
        let Some(plan) = app.call.drain.plan() else {
            info!("drain cancelled");
            return Outcome::Cancelled;
        };
        let left = calls_in_progress(&app);
        if left == 0 {
            info!("drain finished: no call left");
            return Outcome::Done;
        }
        let now = Instant::now();
        if now >= plan.deadline {
            if expire(&app, now) {
                warn!(
                    calls = left,
                    "drain deadline reached: ending the remaining calls with a goodbye"
                );
                app.call.drain.order(Order::Deadline);
            }
            if now >= plan.deadline + bound {
                warn!(calls = left, "drain finished with calls still in progress");
                return Outcome::Left(left);
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Marks the deadline passed under the lock; true once, when it is due.
fn expire(app: &App, now: Instant) -> bool {
    app.call
        .drain
        .lock()
        .as_mut()
        .is_some_and(|p| p.expire(now))
}

/// How long the calls told "deadline" get to say goodbye and tear down.
fn goodbye_bound(app: &App) -> Duration {
    let cfg = app.cfg();
    Duration::from_secs(8)
        + crate::config::ms(cfg.call.final_mark_grace_ms + cfg.call.teardown_timeout_ms)
}

/// The drain as `/admin/status` shows it.
pub fn status(app: &App, now: Instant) -> serde_json::Value {
    match app.call.drain.plan() {
        None => serde_json::Value::Null,
        Some(p) => serde_json::json!({
            "policy": p.policy.as_str(),
            "origin": p.origin.as_str(),
            "elapsed_ms": now.saturating_duration_since(p.started).as_millis() as u64,
            "deadline_in_ms": p.deadline.saturating_duration_since(now).as_millis() as u64,
            "deadline_passed": p.expired,
            "in_progress": calls_in_progress(app),
        }),
    }
}
