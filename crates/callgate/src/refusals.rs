//! Refused calls are recorded in batches, off every caller's path.
//!
//! A refusal is a promise refused and must be countable (a row in
//! `admission_rejections`), but under overload refusals arrive by the
//! thousand per second: one pooled connection per refusal would compete with
//! call setup for the pool — exactly the contention admission exists to
//! prevent. So the ingress enqueues (never waits) and one task writes
//! batches, each with one short-lived connection.

use std::time::Duration;

use state_store::{Rejection, Store};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// Refusals waiting to be written. At 2,000 refusals per second this is 8 s
/// of Postgres being unavailable. Overflow policy: the record is dropped and
/// counted (`callgate_refusal_records_lost_total`) — the caller is still
/// refused through the overflow path; only the row is lost.
const QUEUE: usize = 16_384;
/// Rows per statement.
const BATCH: usize = 500;
/// Bound on one batch write.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

const LOST: &str = "callgate_refusal_records_lost_total";

/// The enqueue side.
#[derive(Clone)]
pub struct RefusalLog {
    tx: mpsc::Sender<Rejection>,
}

impl RefusalLog {
    /// Starts the writer; it drains what is queued and stops after `stop`.
    /// A batch is retried (capped backoff) for `retry_window` — the window
    /// the write-behind queue keeps per-turn writes for — before its rows
    /// are counted lost, so a database that freezes for less than that
    /// loses no refusal.
    pub fn start(
        store: Store,
        stop: CancellationToken,
        retry_window: Duration,
    ) -> (RefusalLog, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let task = tokio::spawn(write_loop(store, rx, stop, retry_window));
        (RefusalLog { tx }, task)
    }

    /// Queues one refusal. Never waits.
    pub fn record(&self, r: Rejection) {
        if self.tx.try_send(r).is_err() {
            metrics::counter!(LOST).increment(1);
        }
    }
}

async fn write_loop(
    store: Store,
    mut rx: mpsc::Receiver<Rejection>,
    stop: CancellationToken,
    window: Duration,
) {
    loop {
        let first = tokio::select! {
            r = rx.recv() => r,
            () = stop.cancelled() => None,
        };
        let Some(first) = first else { break };
        let batch = gather(first, &mut rx);
        write_batch(&store, &batch, window).await;
    }
    // Stopping: write whatever is still queued.
    while let Ok(first) = rx.try_recv() {
        let batch = gather(first, &mut rx);
        write_batch(&store, &batch, window).await;
    }
}

fn gather(first: Rejection, rx: &mut mpsc::Receiver<Rejection>) -> Vec<Rejection> {
    let mut batch = vec![first];
    while batch.len() < BATCH {
        match rx.try_recv() {
            Ok(r) => batch.push(r),
            Err(_) => break,
        }
    }
    batch
}

async fn write_batch(store: &Store, batch: &[Rejection], window: Duration) {
    let give_up = tokio::time::Instant::now() + window;
    let mut backoff = Duration::from_millis(100);
    loop {
        let error = match tokio::time::timeout(WRITE_TIMEOUT, store.record_rejections(batch)).await
        {
            Ok(Ok(_)) => return,
            Ok(Err(e)) => e.to_string(),
            Err(_) => "write timed out".to_string(),
        };
        if tokio::time::Instant::now() + backoff >= give_up {
            warn!(error = %error, rows = batch.len(), window_s = window.as_secs(), "refusal records lost");
            break;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
    metrics::counter!(LOST).increment(batch.len() as u64);
}
