//! Owner liveness across instances: heartbeats, and closing the open rows
//! of an owner that is gone.
//!
//! Each instance (`server.instance`, one process = one [`BootId`]) beats in
//! `instance_heartbeats`. Two things close a `pending` `call_ledger` row that
//! its owner can no longer close, each in one bounded statement that bumps
//! the row's owner epoch (so any write the old owner still has in flight is
//! fenced, see the `write` module) and writes a cleanup receipt:
//!
//! - [`Store::reclaim_lost`]: a live instance takes every open row whose
//!   owner's latest beat is older than the lease (`end_reason =
//!   'owner_lost'`). Rows are locked `FOR UPDATE SKIP LOCKED` and re-checked
//!   under the lock, so two reclaimers racing close each row exactly once,
//!   and a close by the owner itself that commits first wins.
//!   [`Store::next_lapse`] says when the next such lease runs out, so a
//!   reclaimer can act then instead of at its next beat.
//! - [`Store::begin_boot`]: an instance starting closes the rows its name
//!   owned before (`end_reason = 'instance_restart'`) and claims the name
//!   for its new boot, in one transaction, before it admits a call.
//!
//! The receipt is `stats.reclaim`, and states only what was measured:
//! `reason`, `by_instance`/`by_boot` (who closed it), `from_instance`/
//! `from_boot` (the owner it was taken from), `from_last_beat_at` (that
//! owner's latest beat), `lease_ms` (`owner_lost` only: the lease it had
//! outlived),
//! `epoch_before`/`epoch_after` and `at`. `cleanup_status` is `failed`:
//! the owner's own teardown (leg, providers, permit) never ran — those died
//! with its process — and the closer did not release them either; the row
//! is closed so that the ledger stops counting a call nobody serves.
//! `cleanup_completed_at` and `at` are the database's `now()`. A field
//! with nothing measured behind it is absent, not null: an instance
//! restarting under a name that never beat has no `from_boot` and no
//! `from_last_beat_at`.
//!
//! What it never does: compare a lease against an instance's clock (every
//! lease comparison is the database's `now()` against a `beat_at` the same
//! clock wrote), reclaim while the reclaimer's own beat is not current
//! (a reclaimer that was itself stalled past the lease takes nothing), take
//! its own instance's rows, or reclaim rows whose owner has **no heartbeat
//! row at all**. Those come from before migration 0005 or from an instance
//! running a build without heartbeats — during a rolling upgrade such an
//! instance may be alive and serving them, and closing them would cut live
//! calls. They stay open until their owner restarts (`instance_restart`)
//! or, failing that, the auditor reports them as `open_too_long`.

use std::fmt;
use std::time::{Duration, SystemTime};

use tokio_postgres::Row;
use uuid::Uuid;

use crate::error::StoreError;
use crate::ids::{CallId, OwnerEpoch};
use crate::rows::{col, millis};
use crate::store::Store;

/// Rows one [`Store::reclaim_lost`] statement closes at most: a dead
/// instance that held thousands of calls is closed over a few ticks by
/// short statements rather than by one long one holding thousands of locks.
pub const RECLAIM_BATCH: i64 = 500;

/// One process's claim on an instance name: new at every start, so a
/// restarted instance and a process it replaced are told apart.
#[derive(Copy, Clone, Eq, PartialEq, Hash, Debug)]
pub struct BootId(pub Uuid);

impl BootId {
    /// A fresh random (v4) boot id.
    #[must_use]
    pub fn new_random() -> Self {
        Self(Uuid::new_v4())
    }
}

impl fmt::Display for BootId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Why a row was closed by someone other than its call.
#[derive(Copy, Clone, Eq, PartialEq, Hash, Debug)]
pub enum ReclaimReason {
    /// Its owner stopped beating for longer than the lease.
    OwnerLost,
    /// Its owner's name started again (a new boot).
    InstanceRestart,
}

impl ReclaimReason {
    /// The `end_reason` (and `stats.reclaim.reason`) stored, and the
    /// metric label.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::OwnerLost => "owner_lost",
            Self::InstanceRestart => "instance_restart",
        }
    }

    /// Every reason, as stored.
    pub const ALL: [ReclaimReason; 2] = [Self::OwnerLost, Self::InstanceRestart];
}

/// One row closed by [`Store::reclaim_lost`] or [`Store::begin_boot`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reclaimed {
    /// The call.
    pub call: CallId,
    /// Why it was closed.
    pub reason: ReclaimReason,
    /// The instance that owned it.
    pub from_instance: String,
    /// That owner's latest beat (database clock); `None` if it never beat.
    pub from_last_beat_at: Option<SystemTime>,
    /// The epoch the owner wrote with; fenced from now on.
    pub epoch_before: OwnerEpoch,
    /// The epoch the row holds now.
    pub epoch_after: OwnerEpoch,
}

/// What a beat achieved.
#[derive(Copy, Clone, Eq, PartialEq, Debug)]
pub enum Beat {
    /// Recorded for this boot.
    Recorded,
    /// Another boot claimed this instance name since ([`Store::begin_boot`]
    /// of a second process with the same `server.instance`): this process's
    /// rows were closed as `instance_restart` and its writes are fenced.
    Superseded {
        /// The boot that holds the name now.
        by: BootId,
    },
}

/// The beat a name had before a boot claimed it.
#[derive(Copy, Clone, Eq, PartialEq, Debug)]
pub struct PreviousBoot {
    /// The process that beat under this name before.
    pub boot: BootId,
    /// Its latest beat (database clock).
    pub beat_at: SystemTime,
    /// How long before this boot's claim that was (database clock): shorter
    /// than the lease means the previous process may still be running.
    pub beat_age: Duration,
}

/// What [`Store::begin_boot`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootReport {
    /// The boot that held the name before, if any.
    pub previous: Option<PreviousBoot>,
    /// The rows the name owned before, now closed as `instance_restart`.
    pub closed: Vec<Reclaimed>,
}

/// The receipt's columns, shared by both closes (`$1` instance, `$2`
/// boot); `v` names the locked row's old values and the old owner's beat.
macro_rules! close_set {
    ($reason:literal, $lease:literal) => {
        concat!(
            "UPDATE call_ledger l SET owner_instance = $1::text, ",
            "owner_epoch = v.owner_epoch + 1, end_reason = '",
            $reason,
            "', cleanup_status = 'failed', cleanup_completed_at = now(), ",
            "stats = l.stats || jsonb_build_object('reclaim', jsonb_strip_nulls(jsonb_build_object(",
            "'reason', '",
            $reason,
            "', 'by_instance', $1::text, 'by_boot', $2::uuid, ",
            "'from_instance', v.owner_instance, 'from_boot', v.from_boot, ",
            "'from_last_beat_at', v.from_beat_at, 'lease_ms', ",
            $lease,
            ", 'epoch_before', v.owner_epoch, 'epoch_after', v.owner_epoch + 1, 'at', now()))) "
        )
    };
}

/// `call_id, from_instance, from_beat_at, epoch_before, epoch_after`.
macro_rules! close_returning {
    () => {
        "RETURNING l.call_id, v.owner_instance, v.from_beat_at, v.owner_epoch, l.owner_epoch"
    };
}

/// `$1` self instance, `$2` self boot, `$3` lease (ms), `$4` batch.
const RECLAIM_LOST: &str = concat!(
    "WITH me AS (SELECT 1 FROM instance_heartbeats ",
    "  WHERE instance = $1::text AND boot = $2::uuid ",
    "    AND beat_at >= now() - $3::bigint * interval '1 millisecond'), ",
    "v AS (SELECT l.call_id, l.owner_instance, l.owner_epoch, ",
    "         h.boot AS from_boot, h.beat_at AS from_beat_at ",
    "  FROM call_ledger l JOIN instance_heartbeats h ON h.instance = l.owner_instance ",
    "  WHERE l.cleanup_status = 'pending' AND l.owner_instance <> $1::text ",
    "    AND h.beat_at < now() - $3::bigint * interval '1 millisecond' ",
    "    AND EXISTS (SELECT 1 FROM me) ",
    "  ORDER BY l.admitted_at LIMIT $4::bigint ",
    "  FOR UPDATE OF l SKIP LOCKED) ",
    close_set!("owner_lost", "$3::bigint"),
    "FROM v WHERE l.call_id = v.call_id AND l.cleanup_status = 'pending' ",
    close_returning!()
);

/// Seconds until the earliest lease among other instances that still own
/// open rows runs out (`$1` self instance, `$2` lease ms); NULL when no
/// such instance's lease is running. Owners already past their lease are
/// left to the next reclaim; heartbeats are a handful of rows and the
/// open rows are found through `call_ledger_open_by_owner_idx`.
const NEXT_LAPSE: &str = concat!(
    "SELECT EXTRACT(EPOCH FROM ",
    "  (min(h.beat_at) + $2::bigint * interval '1 millisecond' - now()))::float8 ",
    "FROM instance_heartbeats h ",
    "WHERE h.instance <> $1::text ",
    "  AND h.beat_at >= now() - $2::bigint * interval '1 millisecond' ",
    "  AND EXISTS (SELECT 1 FROM call_ledger l ",
    "    WHERE l.owner_instance = h.instance AND l.cleanup_status = 'pending')"
);

/// The previous beat, locked so that two processes starting under one name
/// take turns (`$1` instance).
const PREVIOUS_BEAT: &str = "SELECT boot, beat_at, \
     EXTRACT(EPOCH FROM (now() - beat_at))::float8 \
     FROM instance_heartbeats WHERE instance = $1 FOR UPDATE";

/// `$1` self instance, `$2` self boot, `$3` previous boot, `$4` its beat.
const CLOSE_PREVIOUS: &str = concat!(
    "WITH v AS (SELECT call_id, owner_instance, owner_epoch, ",
    "         $3::uuid AS from_boot, $4::timestamptz AS from_beat_at ",
    "  FROM call_ledger WHERE owner_instance = $1::text AND cleanup_status = 'pending' ",
    "  FOR UPDATE) ",
    close_set!("instance_restart", "NULL::bigint"),
    "FROM v WHERE l.call_id = v.call_id ",
    close_returning!()
);

const CLAIM_NAME: &str = "INSERT INTO instance_heartbeats (instance, boot) VALUES ($1, $2) \
     ON CONFLICT (instance) DO UPDATE \
     SET boot = EXCLUDED.boot, started_at = now(), beat_at = now()";

/// Beats for this boot only: a name another boot claimed is not taken back.
/// Returns the boot holding the name after the statement.
const HEARTBEAT: &str = "WITH up AS ( \
       INSERT INTO instance_heartbeats (instance, boot) VALUES ($1, $2) \
       ON CONFLICT (instance) DO UPDATE SET beat_at = now() \
       WHERE instance_heartbeats.boot = EXCLUDED.boot RETURNING boot) \
     SELECT boot FROM up \
     UNION ALL SELECT boot FROM instance_heartbeats \
       WHERE instance = $1 AND NOT EXISTS (SELECT 1 FROM up)";

impl Store {
    /// Claims this instance's name for `boot`: closes every open row the
    /// name owned before as `instance_restart` (a receipt each, epochs
    /// bumped) and records the boot's first beat, in one transaction.
    /// Call it before admitting any call: afterwards the name's open rows
    /// are this boot's own.
    ///
    /// # Errors
    /// Provider errors (each statement bounded by the statement deadline);
    /// on any error nothing is closed and the name is not claimed.
    pub async fn begin_boot(&self, boot: BootId) -> Result<BootReport, StoreError> {
        let op = "begin_boot";
        let instance = &self.config().instance;
        let mut conn = self.control_pool().checkout().await?;
        conn.begin(op).await?;
        let prev = conn.query(op, PREVIOUS_BEAT, &[instance]).await?;
        let previous = prev.first().map(previous_boot).transpose()?;
        let (from_boot, from_beat) = match previous {
            Some(p) => (Some(p.boot.0), Some(p.beat_at)),
            None => (None, None),
        };
        let rows = conn
            .query(
                op,
                CLOSE_PREVIOUS,
                &[instance, &boot.0, &from_boot, &from_beat],
            )
            .await?;
        let closed = reclaimed(&rows, ReclaimReason::InstanceRestart)?;
        conn.execute(op, CLAIM_NAME, &[instance, &boot.0]).await?;
        conn.commit(op).await?;
        Ok(BootReport { previous, closed })
    }

    /// Records a beat for `boot` (the database's `now()`).
    ///
    /// # Errors
    /// Provider errors; a beat that did not land leaves the previous one
    /// ageing toward the lease.
    pub async fn heartbeat(&self, boot: BootId) -> Result<Beat, StoreError> {
        let op = "heartbeat";
        let mut conn = self.control_pool().checkout().await?;
        let row = conn
            .query_one(op, HEARTBEAT, &[&self.config().instance, &boot.0])
            .await?;
        let holder = BootId(col(&row, 0, op)?);
        Ok(if holder == boot {
            Beat::Recorded
        } else {
            Beat::Superseded { by: holder }
        })
    }

    /// Closes, as `owner_lost`, up to [`RECLAIM_BATCH`] open rows of other
    /// instances whose latest beat is older than `lease`, taking them over
    /// for this instance with a bumped epoch. Takes nothing while this
    /// boot's own beat is older than `lease` or another boot holds the
    /// name. One statement.
    ///
    /// # Errors
    /// Provider errors; nothing is closed by a failed statement.
    pub async fn reclaim_lost(
        &self,
        boot: BootId,
        lease: Duration,
    ) -> Result<Vec<Reclaimed>, StoreError> {
        let op = "reclaim_lost";
        let mut conn = self.control_pool().checkout().await?;
        let rows = conn
            .query(
                op,
                RECLAIM_LOST,
                &[
                    &self.config().instance,
                    &boot.0,
                    &millis(lease),
                    &RECLAIM_BATCH,
                ],
            )
            .await?;
        reclaimed(&rows, ReclaimReason::OwnerLost)
    }

    /// How long until the lease of another instance that still owns open
    /// rows runs out (the earliest such), by the database's clock; `None`
    /// when no other owner of open rows is within its lease. A reclaim
    /// ([`Store::reclaim_lost`]) run that long from now finds that owner's
    /// rows, unless it beat meanwhile. One statement.
    ///
    /// # Errors
    /// Provider errors.
    pub async fn next_lapse(&self, lease: Duration) -> Result<Option<Duration>, StoreError> {
        let op = "next_lapse";
        let mut conn = self.control_pool().checkout().await?;
        let row = conn
            .query_one(op, NEXT_LAPSE, &[&self.config().instance, &millis(lease)])
            .await?;
        let secs: Option<f64> = col(&row, 0, op)?;
        // Never negative: owners past their lease are not selected.
        Ok(secs.map(|s| Duration::try_from_secs_f64(s).unwrap_or(Duration::ZERO)))
    }

    /// Which of `calls` (running in this process) have a ledger row whose
    /// owner is no longer this instance: another one closed them while this
    /// boot's beats were not landing. A call with no row yet (still being
    /// set up) is not among them. One statement, by primary key.
    ///
    /// # Errors
    /// Provider errors.
    pub async fn owned_elsewhere(&self, calls: &[CallId]) -> Result<Vec<CallId>, StoreError> {
        let op = "owned_elsewhere";
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<Uuid> = calls.iter().map(|c| c.0).collect();
        let mut conn = self.control_pool().checkout().await?;
        let rows = conn
            .query(
                op,
                "SELECT call_id FROM call_ledger WHERE call_id = ANY($1) AND owner_instance <> $2",
                &[&ids, &self.config().instance],
            )
            .await?;
        rows.iter().map(|r| Ok(CallId(col(r, 0, op)?))).collect()
    }
}

fn previous_boot(row: &Row) -> Result<PreviousBoot, StoreError> {
    let op = "begin_boot";
    let age: f64 = col(row, 2, op)?;
    Ok(PreviousBoot {
        boot: BootId(col(row, 0, op)?),
        beat_at: col(row, 1, op)?,
        // A beat "in the future" (clock stepped back) is no age at all.
        beat_age: Duration::try_from_secs_f64(age).unwrap_or(Duration::ZERO),
    })
}

fn reclaimed(rows: &[Row], reason: ReclaimReason) -> Result<Vec<Reclaimed>, StoreError> {
    let op = "reclaim";
    rows.iter()
        .map(|row| {
            Ok(Reclaimed {
                call: CallId(col(row, 0, op)?),
                reason,
                from_instance: col(row, 1, op)?,
                from_last_beat_at: col(row, 2, op)?,
                epoch_before: OwnerEpoch(col(row, 3, op)?),
                epoch_after: OwnerEpoch(col(row, 4, op)?),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_closes_write_the_same_receipt_shape_with_their_own_reason() {
        for (sql, reason) in [
            (RECLAIM_LOST, ReclaimReason::OwnerLost),
            (CLOSE_PREVIOUS, ReclaimReason::InstanceRestart),
        ] {
            let r = reason.as_str();
            assert!(sql.contains(&format!("end_reason = '{r}'")), "{sql}");
            assert!(sql.contains(&format!("'reason', '{r}'")), "{sql}");
            for key in [
                "by_instance",
                "by_boot",
                "from_instance",
                "from_boot",
                "from_last_beat_at",
                "lease_ms",
                "epoch_before",
                "epoch_after",
            ] {
                assert!(sql.contains(&format!("'{key}'")), "{key} in {sql}");
            }
            assert!(sql.contains("owner_epoch = v.owner_epoch + 1"), "{sql}");
        }
        assert!(RECLAIM_LOST.contains("SKIP LOCKED"));
        assert!(RECLAIM_LOST.contains("EXISTS (SELECT 1 FROM me)"));
    }

    #[test]
    fn reasons_have_stable_distinct_names() {
        assert_eq!(ReclaimReason::OwnerLost.as_str(), "owner_lost");
        assert_eq!(ReclaimReason::InstanceRestart.as_str(), "instance_restart");
        let id = BootId::new_random();
        assert_eq!(id.to_string(), id.0.to_string());
    }
}
