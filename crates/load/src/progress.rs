//! Live run counters and the one-line progress display.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::record::Outcome;

/// How often the progress line is redrawn.
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);

/// Counters shared by all call tasks of a run.
#[derive(Debug, Default)]
pub struct Progress {
    total: usize,
    started: AtomicUsize,
    admitted: AtomicUsize,
    active: AtomicUsize,
    finished: AtomicUsize,
    rejected: AtomicUsize,
    silent: AtomicUsize,
    failed: AtomicUsize,
    holding: AtomicUsize,
}

/// What [`Progress::counts`] read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgressCounts {
    pub started: usize,
    pub admitted: usize,
    pub active: usize,
    pub finished: usize,
    pub rejected: usize,
    pub silent: usize,
    pub failed: usize,
    /// Calls whose script is done, holding the line (`CallPlan::hold`).
    pub holding: usize,
}

/// Holds one connected call in the `active` count; dropping it (on any exit
/// path of the call task) takes it out again.
#[must_use = "dropping the guard ends the call's active count at once"]
#[derive(Debug)]
pub struct ActiveGuard {
    progress: Arc<Progress>,
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.progress.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Holds one call in the `holding` count while its caller holds the line;
/// dropping it (the caller hung up, or the call ended) takes it out.
#[must_use = "dropping the guard ends the call's holding count at once"]
#[derive(Debug)]
pub struct HoldingGuard<'a> {
    progress: &'a Progress,
}

impl Drop for HoldingGuard<'_> {
    fn drop(&mut self) {
        self.progress.holding.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Progress {
    /// Counters for a run of `total` calls.
    pub fn new(total: usize) -> Arc<Progress> {
        Arc::new(Progress {
            total,
            ..Progress::default()
        })
    }

    /// A call was dialled.
    pub fn call_started(&self) {
        self.started.fetch_add(1, Ordering::Relaxed);
    }

    /// A call's WebSocket is open.
    pub fn connected(self: &Arc<Self>) -> ActiveGuard {
        self.active.fetch_add(1, Ordering::Relaxed);
        ActiveGuard {
            progress: Arc::clone(self),
        }
    }

    /// Keeps `guard` in step with whether the call holds the line now:
    /// taken when it starts, dropped when it stops.
    pub fn track_holding<'a>(&'a self, guard: &mut Option<HoldingGuard<'a>>, holding: bool) {
        if holding && guard.is_none() {
            self.holding.fetch_add(1, Ordering::Relaxed);
            *guard = Some(HoldingGuard { progress: self });
        } else if !holding {
            *guard = None;
        }
    }

    /// A call reached a normal bot turn.
    pub fn call_admitted(&self) {
        self.admitted.fetch_add(1, Ordering::Relaxed);
    }

    /// A call ended with `outcome`.
    pub fn call_finished(&self, outcome: &Outcome) {
        self.finished.fetch_add(1, Ordering::Relaxed);
        let counter = match outcome {
            Outcome::Rejected { .. } => &self.rejected,
            Outcome::Silent { .. } => &self.silent,
            Outcome::Failed { .. } | Outcome::Unauthorized { .. } => &self.failed,
            _ => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn counts(&self) -> ProgressCounts {
        let get = |c: &AtomicUsize| c.load(Ordering::Relaxed);
        ProgressCounts {
            started: get(&self.started),
            admitted: get(&self.admitted),
            active: get(&self.active),
            finished: get(&self.finished),
            rejected: get(&self.rejected),
            silent: get(&self.silent),
            failed: get(&self.failed),
            holding: get(&self.holding),
        }
    }

    /// The progress line (without `\r`).
    pub fn line(&self) -> String {
        let get = |c: &AtomicUsize| c.load(Ordering::Relaxed);
        format!(
            "started {}/{}  admitted {}  active {}  finished {}  rejected {}  silent {}  failed {}",
            get(&self.started),
            self.total,
            get(&self.admitted),
            get(&self.active),
            get(&self.finished),
            get(&self.rejected),
            get(&self.silent),
            get(&self.failed),
        )
    }

    /// Redraws the line on stderr every [`PROGRESS_INTERVAL`] until aborted.
    pub async fn display(self: Arc<Self>) {
        let mut tick = tokio::time::interval(PROGRESS_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tick.tick().await;
            self.draw(false);
        }
    }

    /// Draws the line once; `last` ends it with a newline.
    pub fn draw(&self, last: bool) {
        let end = if last { "\n" } else { "" };
        // Progress is cosmetic: a closed stderr must not stop the run.
        let _ = write!(std::io::stderr(), "\r{}\x1b[K{end}", self.line());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_follow_the_call_lifecycle() {
        let p = Progress::new(3);
        p.call_started();
        p.call_started();
        let guard = p.connected();
        p.call_admitted();
        assert!(p.line().contains("active 1"));
        drop(guard);
        p.call_finished(&Outcome::Silent {
            phase: "greeting".into(),
        });
        p.call_finished(&Outcome::Completed);
        let line = p.line();
        assert!(
            line.starts_with("started 2/3  admitted 1  active 0  finished 2"),
            "{line}"
        );
        assert!(line.contains("silent 1"), "{line}");
    }

    #[test]
    fn a_call_counts_as_holding_only_while_it_holds() {
        let p = Progress::new(1);
        let mut guard = None;
        p.track_holding(&mut guard, false);
        assert_eq!(p.counts().holding, 0);
        p.track_holding(&mut guard, true);
        p.track_holding(&mut guard, true);
        assert_eq!(p.counts().holding, 1, "counted once, however often seen");
        p.track_holding(&mut guard, false);
        assert_eq!(p.counts().holding, 0);
        p.track_holding(&mut guard, true);
        drop(guard);
        assert_eq!(p.counts().holding, 0, "an ending call leaves the count");
    }
}
