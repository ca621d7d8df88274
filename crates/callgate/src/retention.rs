//! Retention: transcripts, raw events and receipts each kept for their own
//! window (`[retention]`), purged periodically in bounded batches.
//!
//! Each window counts from the call's admission. Per pass, in order:
//! transcripts and slots (personal data, open calls' included), then the
//! raw events of closed calls, then closed receipts (cascading to whatever
//! of their call is left) and admission refusals. A window of 0 keeps that
//! data forever.
//!
//! What it never does: delete a ledger row whose cleanup is still
//! `pending` (an open promise stays on the books for the reconciler and
//! the auditor), or the events of one; hold a connection across batches
//! (each batch is one short statement on a fresh checkout, see
//! `state_store::Store::purge_*`).
//!
//! How to drive it: the server spawns [`run`]; a test calls
//! [`purge_once`] with a store, a configuration and a `now`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use state_store::{Store, StoreError};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::app::App;
use crate::config::RetentionConfig;
use crate::metrics as m;

/// Shortest interval between passes, whatever the configuration says.
const MIN_INTERVAL: Duration = Duration::from_secs(60);

/// What one pass deleted, by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Purged {
    /// Turns and slots.
    pub personal_data: u64,
    pub events: u64,
    pub receipts: u64,
    pub rejections: u64,
}

/// The instant before which data of each kind goes (`None`: kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cutoffs {
    pub transcripts: Option<SystemTime>,
    pub events: Option<SystemTime>,
    pub receipts: Option<SystemTime>,
}

/// The cutoffs at `now`.
pub fn cutoffs(cfg: &RetentionConfig, now: SystemTime) -> Cutoffs {
    let before = |days: u32| {
        (days > 0).then(|| {
            now.checked_sub(Duration::from_secs(u64::from(days) * 86_400))
                .unwrap_or(SystemTime::UNIX_EPOCH)
        })
    };
    Cutoffs {
        transcripts: before(cfg.transcript_days),
        events: before(cfg.events_days),
        receipts: before(cfg.receipts_days),
    }
}

/// One pass at `now`. Stops at the first Postgres error (what was deleted
/// before it stays deleted; the next pass carries on).
///
/// # Errors
/// The store's error.
pub async fn purge_once(
    store: &Store,
    cfg: &RetentionConfig,
    now: SystemTime,
) -> Result<Purged, StoreError> {
    let cut = cutoffs(cfg, now);
    let mut p = Purged::default();
    if let Some(t) = cut.transcripts {
        p.personal_data = store.purge_personal_data(t).await?;
        count("call_turns_and_slots", p.personal_data);
    }
    if let Some(t) = cut.events {
        p.events = store.purge_events(t).await?;
        count("call_events", p.events);
    }
    if let Some(t) = cut.receipts {
        p.receipts = store.purge_receipts(t).await?;
        count("call_ledger", p.receipts);
        p.rejections = store.purge_rejections(t).await?;
        count("admission_rejections", p.rejections);
    }
    Ok(p)
}

fn count(table: &'static str, rows: u64) {
    metrics::counter!(m::RETENTION_DELETED, "table" => table).increment(rows);
}

/// Purges every `purge_interval_s` (re-read each time: a reload applies)
/// until `stop`.
pub async fn run(app: Arc<App>, stop: CancellationToken) {
    loop {
        let cfg = app.cfg().retention.clone();
        match purge_once(&app.call.store, &cfg, SystemTime::now()).await {
            Ok(p) if p == Purged::default() => {}
            Ok(p) => info!(purged = ?p, "retention pass deleted rows"),
            Err(e) => {
                metrics::counter!(m::RETENTION_FAILURES).increment(1);
                warn!(error = %e, "retention purge failed; will retry");
            }
        }
        let every = Duration::from_secs(cfg.purge_interval_s).max(MIN_INTERVAL);
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn each_window_has_its_own_cutoff_and_zero_keeps() {
        let now = SystemTime::UNIX_EPOCH + 1_000 * DAY;
        let cfg = RetentionConfig {
            transcript_days: 30,
            events_days: 90,
            receipts_days: 0,
            purge_interval_s: 60,
        };
        let c = cutoffs(&cfg, now);
        assert_eq!(c.transcripts, Some(now - 30 * DAY));
        assert_eq!(c.events, Some(now - 90 * DAY));
        assert_eq!(c.receipts, None);
    }

    #[test]
    fn the_longest_window_cuts_before_anything_stored() {
        let cfg = RetentionConfig {
            receipts_days: u32::MAX,
            ..RetentionConfig::default()
        };
        let c = cutoffs(&cfg, SystemTime::now());
        assert!(c.receipts.is_some_and(|t| t < SystemTime::UNIX_EPOCH));
    }
}
