//! Committed calls held open: every call of a [`LoadConfig`] speaks its
//! script, then holds the line in silence ([`CallPlan::hold`]) until the
//! conductor hangs them all up — the shape of a voice fleet's quiet hour,
//! and what `callgate-bench committed` measures the server under.
//!
//! What it is: [`crate::run`] with a [`Cue`] sender kept per call, and the
//! run's live counters ([`ProgressCounts::holding`]) readable while the
//! calls are up, so a conductor can wait until all of them hold, measure,
//! then end them.
//!
//! What it never does: end a call on its own (a holding call ends on
//! [`HeldRun::hang_up`], on the server's word, or at its `call_timeout`),
//! or wait on a caller: a cue that finds its caller's queue full is
//! dropped (only a stuck caller has a full queue; its `call_timeout` ends
//! it).
//!
//! How to drive it:
//!
//! ```no_run
//! # async fn demo() -> Result<(), callgate_load::LoadError> {
//! use callgate_load::{LoadConfig, held::HeldRun};
//!
//! let cfg = LoadConfig { calls: 100, utterances: 1, ..LoadConfig::default() };
//! let run = HeldRun::start(&cfg)?;
//! while run.counts().holding < 100 && run.counts().finished == 0 {
//!     tokio::time::sleep(std::time::Duration::from_millis(100)).await;
//! }
//! // … measure the server …
//! run.hang_up();
//! let report = run.finish().await;
//! # Ok(()) }
//! ```

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::driver::{CUE_QUEUE, Dial, place_cued_call};
use crate::progress::{Progress, ProgressCounts};
use crate::{AccountSid, Auth, Cue, LoadConfig, LoadError, LoadReport, connect};

/// A run whose calls hold the line once their script is done.
#[derive(Debug)]
pub struct HeldRun {
    started: Instant,
    progress: Arc<Progress>,
    cues: Vec<mpsc::Sender<Cue>>,
    tasks: tokio::task::JoinSet<crate::CallRecord>,
}

impl HeldRun {
    /// Dials every call of `cfg` on its arrival schedule, each planned to
    /// hold the line after its script ([`CallPlan::hold`]).
    ///
    /// # Errors
    /// `cfg` is invalid ([`LoadConfig::validate`]); nothing is dialled.
    pub fn start(cfg: &LoadConfig) -> Result<HeldRun, LoadError> {
        cfg.validate()?;
        connect::ensure_crypto_provider();
        let started = Instant::now();
        let account = AccountSid::random();
        let progress = Progress::new(cfg.calls);
        let dial = Arc::new(Dial {
            url: cfg.url.clone(),
            auth: Auth::for_run(cfg),
        });
        let mut tasks = tokio::task::JoinSet::new();
        let mut cues = Vec::with_capacity(cfg.calls);
        for index in 0..cfg.calls {
            let mut plan = cfg.plan(index, account);
            plan.hold = true;
            let (tx, rx) = mpsc::channel(CUE_QUEUE);
            cues.push(tx);
            let at = started + cfg.arrival.offset(index);
            let (dial, progress) = (Arc::clone(&dial), Arc::clone(&progress));
            tasks.spawn(async move {
                tokio::time::sleep_until(at).await;
                place_cued_call(plan, &dial, &progress, rx).await
            });
        }
        Ok(HeldRun {
            started,
            progress,
            cues,
            tasks,
        })
    }

    /// The run's counters now: `holding` calls are committed and quiet.
    pub fn counts(&self) -> ProgressCounts {
        self.progress.counts()
    }

    /// Tells every caller to hang up (a caller already gone, or stuck
    /// with a full cue queue, is skipped).
    pub fn hang_up(&self) {
        for tx in &self.cues {
            let _ = tx.try_send(Cue::HangUp);
        }
    }

    /// Waits for every call to end and reports what each caller heard. A
    /// call task that died is left out and logged (none is expected: the
    /// callers never panic on a bad server).
    pub async fn finish(mut self) -> LoadReport {
        let mut calls = Vec::with_capacity(self.cues.len());
        self.cues.clear();
        while let Some(joined) = self.tasks.join_next().await {
            match joined {
                Ok(record) => calls.push(record),
                Err(err) => tracing::error!(%err, "call task died"),
            }
        }
        calls.sort_by_key(|c| c.index);
        LoadReport::new(calls, self.started.elapsed())
    }
}
