//! The step bar on the terminal: one line, redrawn each second, with the
//! live counters an operator watches while a drill runs.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::run::Live;

const REDRAW: Duration = Duration::from_secs(1);

/// Redraws until aborted.
pub async fn draw(live: Arc<Live>, repeats: u32) {
    let mut tick = tokio::time::interval(REDRAW);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let line = line(&live, repeats);
        // Progress is cosmetic: a closed stderr must not stop the drill.
        let _ = write!(std::io::stderr(), "\r{line}\x1b[K");
    }
}

/// The line: step, callers, each instance's counters, violations so far.
pub fn line(live: &Live, repeats: u32) -> String {
    let step = live.step.lock().map(|s| s.clone()).unwrap_or_default();
    let counts = live
        .progress
        .lock()
        .ok()
        .and_then(|p| p.as_ref().map(|p| p.counts()))
        .unwrap_or_default();
    let run = live.run.load(Ordering::Relaxed);
    let mut out = format!(
        "run {run}/{repeats} step {step} | admitted {} refused {} silent {} failed {} active {}",
        counts.admitted, counts.rejected, counts.silent, counts.failed, counts.active
    );
    if let Ok(latest) = live.latest.lock() {
        for s in latest.iter() {
            let c: Vec<String> = s
                .counters
                .iter()
                .map(|(k, v)| format!("{k} {}", v.map_or("?".into(), |v| v.to_string())))
                .collect();
            let state = if s.draining { " draining" } else { "" };
            let _ = write!(out, " | {}{state}: {}", s.instance, c.join(" "));
        }
    }
    let v = live.violations.load(Ordering::Relaxed);
    let _ = write!(out, " | violations {v}");
    out
}
