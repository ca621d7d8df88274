//! Draining: stop admitting, let calls finish, end the rest at a deadline.
//!
//! Sequence (DESIGN.md "Drain"): the gate starts refusing with `draining`
//! (queued callers are woken with it and take the overflow path), readiness
//! fails; calls run on until `deadline`; then the hard stop makes every call
//! still running play its goodbye prompt and end with reason
//! `drain_deadline`. Nothing is dropped without a receipt.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::app::{App, Counters};

/// How often the drain looks at the counts.
const POLL: Duration = Duration::from_millis(100);

/// Whether any call is still in progress in any phase.
pub fn calls_in_progress(app: &App) -> u64 {
    let snap = app.gate.snapshot();
    snap.active as u64 + snap.queued as u64 + Counters::get(&app.counters.overflowing)
}

/// Drains until no call is left or the deadline (plus the time the last
/// calls need to say goodbye) has passed. Returns the calls still running.
pub async fn run(app: Arc<App>, deadline: Instant) -> u64 {
    begin(&app);
    finish(app, deadline).await
}

/// Closes admission now: from its return on, the gate refuses and
/// readiness fails. Safe to call again.
pub fn begin(app: &App) {
    let first = !app.gate.is_draining();
    app.gate.start_drain(Instant::now());
    metrics::gauge!(crate::metrics::DRAINING).set(1.0);
    let in_progress = calls_in_progress(app);
    info!(in_progress, "drain started: admission closed");
    if first {
        // Stamped after admission closed; spawned and bounded, never awaited.
        crate::audit_http::record_draining(app, serde_json::json!({ "in_progress": in_progress }));
    }
}

/// After [`begin`]: lets calls finish until `deadline`, then ends the rest.
pub async fn finish(app: Arc<App>, deadline: Instant) -> u64 {
    while calls_in_progress(&app) > 0 && Instant::now() < deadline {
        tokio::time::sleep(POLL).await;
    }
    let left = calls_in_progress(&app);
    if left > 0 {
        warn!(
            calls = left,
            "drain deadline reached: ending the remaining calls"
        );
        app.hard_stop.cancel();
        let cfg = app.cfg();
        let goodbye = Duration::from_secs(8)
            + crate::config::ms(cfg.call.final_mark_grace_ms + cfg.call.teardown_timeout_ms);
        let until = Instant::now() + goodbye;
        while calls_in_progress(&app) > 0 && Instant::now() < until {
            tokio::time::sleep(POLL).await;
        }
    }
    let left = calls_in_progress(&app);
    info!(left, "drain finished");
    left
}
