//! The write-behind queue: per-turn writes are submitted without awaiting
//! anything and land in Postgres from a few writer tasks.
//!
//! Writes are sharded by call id over `writers` writer tasks, each with its
//! own bounded queue, so one call's writes stay in order. A writer takes a
//! write (plus whatever else its queue already holds, up to `batch_max`),
//! checks a connection out with the pool's `checkout_timeout`, applies the
//! batch and returns the connection at once. On a provider error it retries
//! with capped exponential backoff until the write is `retry_window` old,
//! then drops it as lost. While it retries its queue fills, and a full queue
//! rejects new writes immediately: the submitter never waits.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::error::{StoreError, WriteRejected};
use crate::ids::CallId;
use crate::store::Store;
use crate::write::{self, Write, WriteOutcome};

/// Calls whose losses are tracked individually until their `Close` lands
/// (losses are rare: a Postgres outage). When full, further calls' losses
/// are still counted in the totals and logged, just not per call.
const LOSS_MAP_CAPACITY: usize = 65_536;

/// Knobs for [`WriteBehind::start`]. Zero values are raised to 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteBehindConfig {
    /// Writer tasks; each holds at most one pooled connection at a time,
    /// so keep it well under `StoreConfig::pool_size`.
    pub writers: usize,
    /// Per-shard queue capacity. When a shard's queue is full (Postgres
    /// slow or stalled for longer than the queue covers), `submit` rejects
    /// the write at once and counts it as lost for its call.
    pub queue_per_writer: usize,
    /// Most writes applied per checkout (only ones already queued).
    pub batch_max: usize,
    /// How long a write may keep failing (measured from its submission)
    /// before it is dropped as lost.
    pub retry_window: Duration,
    /// First retry delay; doubles per failure up to `backoff_max`.
    pub backoff_initial: Duration,
    /// Retry delay cap.
    pub backoff_max: Duration,
}

impl Default for WriteBehindConfig {
    fn default() -> Self {
        Self {
            writers: 4,
            queue_per_writer: 1_024,
            batch_max: 32,
            retry_window: Duration::from_secs(30),
            backoff_initial: Duration::from_millis(50),
            backoff_max: Duration::from_secs(2),
        }
    }
}

/// Cumulative write-behind counters.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Writes Postgres accepted.
    pub applied: u64,
    /// Writes refused because a newer owner epoch exists.
    pub fenced: u64,
    /// Writes refused because the call has no ledger row.
    pub unknown_call: u64,
    /// Writes dropped: queue full, stopped, retry window passed, refused
    /// by Postgres as invalid, or abandoned at the drain deadline.
    pub lost: u64,
    /// Failed attempts that were retried (a sign Postgres is struggling).
    pub retries: u64,
    /// Writes queued or in flight right now.
    pub backlog: usize,
}

/// What [`WriterTasks::drain`] achieved.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DrainReport {
    /// Every queued write was settled (applied, fenced or lost) in time.
    pub completed: bool,
    /// Writes still queued when the deadline passed; counted as lost.
    pub abandoned: u64,
    /// Time the drain took.
    pub elapsed: Duration,
    /// Counters at the end of the drain.
    pub stats: WriteStats,
}

/// A write waiting in a shard queue.
struct Queued {
    write: Write,
    submitted: Instant,
}

/// State shared by the handles and the writers.
#[derive(Default)]
struct Shared {
    backlog: AtomicUsize,
    applied: AtomicU64,
    fenced: AtomicU64,
    unknown_call: AtomicU64,
    lost: AtomicU64,
    retries: AtomicU64,
    /// Set when a drain begins: from then on `submit` refuses at once, even
    /// before the writers have closed their queues.
    stopping: AtomicBool,
    /// Per-call loss counts, for calls whose `Close` has not landed yet.
    lost_by_call: Mutex<HashMap<CallId, u64>>,
}

impl Shared {
    /// Adjusts the backlog (saturating: a writer aborted at the drain
    /// deadline may still settle a write after the backlog was zeroed).
    fn backlog_changed(&self, delta: isize) {
        let step = delta.unsigned_abs();
        let update = |n: usize| {
            Some(if delta >= 0 {
                n.saturating_add(step)
            } else {
                n.saturating_sub(step)
            })
        };
        let prev = self
            .backlog
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, update)
            .unwrap_or_else(|n| n);
        let now = update(prev).unwrap_or(prev);
        metrics::gauge!("callgate_store_write_backlog").set(now as f64);
    }

    fn lose(&self, call: CallId, reason: &'static str) {
        self.lost.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("callgate_store_writes_total", "result" => "lost").increment(1);
        metrics::counter!("callgate_store_writes_lost_total", "reason" => reason).increment(1);
        let mut map = self
            .lost_by_call
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let tracked = map.len() < LOSS_MAP_CAPACITY || map.contains_key(&call);
        let first = if tracked {
            let n = map.entry(call).or_insert(0);
            *n += 1;
            *n == 1
        } else {
            true
        };
        drop(map);
        // One warning per call; the rest are visible in the counters.
        if first {
            tracing::warn!(call_id = %call, reason, "state write lost");
        } else {
            tracing::debug!(call_id = %call, reason, "state write lost");
        }
    }

    fn lost_for(&self, call: CallId) -> u64 {
        let map = self
            .lost_by_call
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.get(&call).copied().unwrap_or(0)
    }

    fn forget(&self, call: CallId) {
        let mut map = self
            .lost_by_call
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.remove(&call);
    }

    fn stats(&self) -> WriteStats {
        WriteStats {
            applied: self.applied.load(Ordering::Relaxed),
            fenced: self.fenced.load(Ordering::Relaxed),
            unknown_call: self.unknown_call.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            backlog: self.backlog.load(Ordering::Relaxed),
        }
    }
}

/// Handle for submitting writes. Cheap to clone; never blocks.
#[derive(Clone)]
pub struct WriteBehind {
    shared: Arc<Shared>,
    senders: Arc<[mpsc::Sender<Queued>]>,
    capacity: usize,
}

impl std::fmt::Debug for WriteBehind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteBehind")
            .field("writers", &self.senders.len())
            .field("stats", &self.shared.stats())
            .finish()
    }
}

/// The running writer tasks. Drain them on shutdown; if this is dropped
/// instead, the writers still finish their backlog and stop, unobserved.
#[must_use = "drain the writers on shutdown, or queued writes may be cut off"]
pub struct WriterTasks {
    handles: Vec<JoinHandle<()>>,
    stop: watch::Sender<bool>,
    shared: Arc<Shared>,
}

impl WriteBehind {
    /// Spawns the writer tasks (needs a tokio runtime) and returns the
    /// submit handle and the tasks to drain at shutdown.
    pub fn start(store: &Store, cfg: WriteBehindConfig) -> (WriteBehind, WriterTasks) {
        let cfg = WriteBehindConfig {
            writers: cfg.writers.max(1),
            queue_per_writer: cfg.queue_per_writer.max(1),
            batch_max: cfg.batch_max.max(1),
            ..cfg
        };
        let shared = Arc::new(Shared::default());
        let (stop, stop_rx) = watch::channel(false);
        let mut senders = Vec::with_capacity(cfg.writers);
        let mut handles = Vec::with_capacity(cfg.writers);
        for shard in 0..cfg.writers {
            let (tx, rx) = mpsc::channel(cfg.queue_per_writer);
            senders.push(tx);
            let writer = Writer {
                shard,
                rx,
                stop: stop_rx.clone(),
                store: store.clone(),
                shared: Arc::clone(&shared),
                cfg: cfg.clone(),
                degraded: false,
            };
            let span = tracing::info_span!("store_writer", shard);
            handles.push(tokio::spawn(writer.run().instrument(span)));
        }
        let handle = WriteBehind {
            shared: Arc::clone(&shared),
            senders: senders.into(),
            capacity: cfg.queue_per_writer,
        };
        (
            handle,
            WriterTasks {
                handles,
                stop,
                shared,
            },
        )
    }

    /// Queues a write for its call's writer. Never blocks.
    ///
    /// # Errors
    /// `QueueFull` when the shard's queue is full, `Stopped` after a drain
    /// began. Either way the write is counted as lost for its call.
    pub fn submit(&self, w: Write) -> Result<(), WriteRejected> {
        let call = w.call();
        let shard = call.shard(self.senders.len());
        let tx = match self.senders.get(shard) {
            Some(tx) if !self.shared.stopping.load(Ordering::Acquire) => tx,
            _ => {
                self.shared.lose(call, "stopped");
                return Err(WriteRejected::Stopped { call });
            }
        };
        // Count first so a fast writer's decrement can never underflow.
        self.shared.backlog_changed(1);
        let queued = Queued {
            write: w,
            submitted: Instant::now(),
        };
        match tx.try_send(queued) {
            Ok(()) => Ok(()),
            Err(err) => {
                self.shared.backlog_changed(-1);
                let (reason, rejected) = match err {
                    mpsc::error::TrySendError::Full(_) => (
                        "queue_full",
                        WriteRejected::QueueFull {
                            call,
                            shard,
                            capacity: self.capacity,
                        },
                    ),
                    mpsc::error::TrySendError::Closed(_) => {
                        ("stopped", WriteRejected::Stopped { call })
                    }
                };
                self.shared.lose(call, reason);
                Err(rejected)
            }
        }
    }

    /// Writes queued or in flight.
    #[must_use]
    pub fn backlog(&self) -> usize {
        self.shared.backlog.load(Ordering::Relaxed)
    }

    /// Writes lost for `call` so far. Once the call's `Close` lands, its
    /// count moves into the ledger's `stats.writes_lost` and this resets.
    #[must_use]
    pub fn lost_for(&self, call: CallId) -> u64 {
        self.shared.lost_for(call)
    }

    /// Cumulative counters.
    #[must_use]
    pub fn stats(&self) -> WriteStats {
        self.shared.stats()
    }
}

impl WriterTasks {
    /// Stops accepting writes, lets the writers finish their backlog, and
    /// waits at most `deadline`. Writers still busy then are aborted and
    /// their queued writes counted as lost (`abandoned`).
    pub async fn drain(self, deadline: Duration) -> DrainReport {
        let start = Instant::now();
        let end = tokio::time::Instant::now() + deadline;
        self.shared.stopping.store(true, Ordering::Release);
        let _ = self.stop.send(true);
        let mut handles = self.handles;
        let mut completed = true;
        for h in &mut handles {
            if tokio::time::timeout_at(end, h).await.is_err() {
                completed = false;
                break;
            }
        }
        let mut abandoned = 0;
        if !completed {
            for h in &handles {
                h.abort();
            }
            let left = self.shared.backlog.swap(0, Ordering::AcqRel);
            abandoned = u64::try_from(left).unwrap_or(u64::MAX);
            self.shared.lost.fetch_add(abandoned, Ordering::Relaxed);
            metrics::counter!("callgate_store_writes_lost_total", "reason" => "abandoned")
                .increment(abandoned);
            metrics::gauge!("callgate_store_write_backlog").set(0.0);
            tracing::error!(
                abandoned,
                "write-behind drain deadline passed; writes abandoned"
            );
        }
        let report = DrainReport {
            completed,
            abandoned,
            elapsed: start.elapsed(),
            stats: self.shared.stats(),
        };
        tracing::info!(?report, "write-behind drained");
        report
    }
}

/// One shard's writer task.
struct Writer {
    shard: usize,
    rx: mpsc::Receiver<Queued>,
    stop: watch::Receiver<bool>,
    store: Store,
    shared: Arc<Shared>,
    cfg: WriteBehindConfig,
    /// Failing since the last success: log the transition, not every retry.
    degraded: bool,
}

impl Writer {
    async fn run(mut self) {
        let mut stopping = false;
        loop {
            let next = if stopping {
                self.rx.recv().await
            } else {
                tokio::select! {
                    next = self.rx.recv() => next,
                    // A stop request, or `WriterTasks` dropped: refuse new
                    // writes, then finish what is queued (recv drains it).
                    _ = self.stop.changed() => {
                        stopping = true;
                        self.rx.close();
                        continue;
                    }
                }
            };
            let Some(first) = next else { break };
            let mut batch = VecDeque::from([first]);
            while batch.len() < self.cfg.batch_max {
                match self.rx.try_recv() {
                    Ok(q) => batch.push_back(q),
                    Err(_) => break,
                }
            }
            self.process(batch).await;
        }
        tracing::debug!(shard = self.shard, "store writer stopped");
    }

    /// Settles every write in `batch`, in order: applied, fenced, or lost.
    async fn process(&mut self, mut batch: VecDeque<Queued>) {
        let mut backoff = self.cfg.backoff_initial;
        while !batch.is_empty() {
            let Err(err) = self.attempt(&mut batch).await else {
                self.recovered();
                continue;
            };
            if !err.is_retryable() {
                // Postgres refused the front write itself; it will never land.
                if let Some(q) = batch.pop_front() {
                    tracing::error!(call_id = %q.write.call(), kind = q.write.kind(), error = %err, "state write refused");
                    self.settle_lost(&q, "refused");
                }
                continue;
            }
            self.expire(&mut batch, &err);
            if batch.is_empty() {
                break;
            }
            self.degrade(&err);
            self.shared.retries.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("callgate_store_write_retries_total").increment(1);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(self.cfg.backoff_max);
        }
    }

    /// One checkout: apply writes from the front until done or an error.
    async fn attempt(&mut self, batch: &mut VecDeque<Queued>) -> Result<(), StoreError> {
        let mut conn = self.store.pool().checkout().await?;
        while let Some(q) = batch.front() {
            let call = q.write.call();
            let lost = match q.write {
                Write::Close { .. } => self.shared.lost_for(call),
                _ => 0,
            };
            let outcome = write::apply(&mut conn, &q.write, lost).await?;
            if let Some(q) = batch.pop_front() {
                self.settle(&q, outcome);
            }
        }
        Ok(())
    }

    /// Drops, as lost, every write in the batch older than the retry window.
    fn expire(&self, batch: &mut VecDeque<Queued>, err: &StoreError) {
        let window = self.cfg.retry_window;
        batch.retain(|q| {
            let keep = q.submitted.elapsed() < window;
            if !keep {
                tracing::debug!(call_id = %q.write.call(), kind = q.write.kind(), error = %err, "write retry window passed");
                self.settle_lost(q, "retry_window");
            }
            keep
        });
    }

    fn settle(&self, q: &Queued, outcome: WriteOutcome) {
        let call = q.write.call();
        let result = match outcome {
            WriteOutcome::Applied => {
                self.shared.applied.fetch_add(1, Ordering::Relaxed);
                metrics::histogram!("callgate_store_write_seconds")
                    .record(q.submitted.elapsed().as_secs_f64());
                if matches!(q.write, Write::Close { .. }) {
                    self.shared.forget(call);
                }
                "applied"
            }
            WriteOutcome::Fenced { current } => {
                self.shared.fenced.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(call_id = %call, epoch = %q.write.epoch(), current = %current, kind = q.write.kind(), "stale owner write fenced");
                "fenced"
            }
            WriteOutcome::UnknownCall => {
                self.shared.unknown_call.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(call_id = %call, kind = q.write.kind(), "write for a call with no ledger row");
                "unknown_call"
            }
        };
        metrics::counter!("callgate_store_writes_total", "result" => result).increment(1);
        self.shared.backlog_changed(-1);
    }

    fn settle_lost(&self, q: &Queued, reason: &'static str) {
        self.shared.lose(q.write.call(), reason);
        self.shared.backlog_changed(-1);
    }

    fn degrade(&mut self, err: &StoreError) {
        if !self.degraded {
            self.degraded = true;
            tracing::warn!(shard = self.shard, error = %err, "state writes failing; retrying");
        }
    }

    fn recovered(&mut self) {
        if self.degraded {
            self.degraded = false;
            tracing::info!(shard = self.shard, "state writes recovered");
        }
    }
}
