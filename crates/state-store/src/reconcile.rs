//! Reconciliation receipts: what the counter reconciler (callgate's
//! `reconcile`) writes when `ledger_open_sessions`,
//! `runtime_active_sessions` and `routing_reported_sessions` disagree for
//! longer than its window, and the reads that name the sessions affected
//! (open rows with no live call, live calls with no open row).
//!
//! What it never does: decide whether counters diverge (the caller does,
//! on its own clock), or change `call_ledger` — a receipt records a
//! correction, it does not perform one.
//!
//! How to drive it: `store.record_reconciliation(&NewReconciliation { .. })`
//! once per episode; `store.reconciliation_receipts(instance)` reads them
//! back (tests, operators).

use std::time::SystemTime;

use tokio_postgres::Row;
use uuid::Uuid;

use crate::error::StoreError;
use crate::ids::CallId;
use crate::rows::col;
use crate::store::Store;

/// Open rows named per receipt at most: a receipt is evidence, not a dump
/// of the ledger; `sessions` still carries the full divergence.
pub const MAX_AFFECTED_CALLS: i64 = 1_000;

/// One reconciliation receipt to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewReconciliation {
    /// The instance whose counters diverged.
    pub instance: String,
    /// `leaked_or_delayed_cleanup`, `false_capacity_or_lost_ownership`,
    /// `balancer_may_overload` or `stranded_capacity`.
    pub direction: String,
    /// The counter trusted: `ledger`, `runtime` or `routing`.
    pub source_of_truth: String,
    /// The divergence, in sessions (positive).
    pub sessions: i64,
    /// The three readings when the receipt was written (`None`: unknown).
    pub ledger_open: Option<i64>,
    pub runtime_active: Option<i64>,
    pub routing_reported: Option<i64>,
    /// The calls on the wrong side, where they can be named.
    pub affected_calls: Vec<CallId>,
    /// What was done (`"none: reported"` when nothing was).
    pub correction: String,
    pub suspected_cause: String,
    /// When the episode began (wall clock).
    pub diverged_since: SystemTime,
    /// When the receipt was written (wall clock).
    pub recorded_at: SystemTime,
}

/// A stored reconciliation receipt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconciliationRow {
    pub id: i64,
    pub receipt: NewReconciliation,
}

const INSERT: &str = "INSERT INTO reconciliation_receipts
    (instance, direction, source_of_truth, sessions, ledger_open, runtime_active,
     routing_reported, affected_calls, correction, suspected_cause, diverged_since, recorded_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
    RETURNING id";

const SELECT: &str = "SELECT id, instance, direction, source_of_truth, sessions, ledger_open,
    runtime_active, routing_reported, affected_calls, correction, suspected_cause,
    diverged_since, recorded_at
    FROM reconciliation_receipts WHERE instance = $1 ORDER BY id";

impl Store {
    /// Writes one reconciliation receipt; returns its id.
    ///
    /// # Errors
    /// `UnexpectedResult` for a non-positive `sessions` (the table refuses
    /// it too); provider errors.
    pub async fn record_reconciliation(&self, r: &NewReconciliation) -> Result<i64, StoreError> {
        let op = "record_reconciliation";
        if r.sessions <= 0 {
            return Err(StoreError::UnexpectedResult {
                op,
                detail: format!("a receipt needs a divergence, got {} sessions", r.sessions),
            });
        }
        let calls: Vec<Uuid> = r.affected_calls.iter().map(|c| c.0).collect();
        let mut conn = self.control_pool().checkout().await?;
        let row = conn
            .query_one(
                op,
                INSERT,
                &[
                    &r.instance,
                    &r.direction,
                    &r.source_of_truth,
                    &r.sessions,
                    &r.ledger_open,
                    &r.runtime_active,
                    &r.routing_reported,
                    &calls,
                    &r.correction,
                    &r.suspected_cause,
                    &r.diverged_since,
                    &r.recorded_at,
                ],
            )
            .await?;
        col(&row, 0, op)
    }

    /// Every reconciliation receipt of `instance`, oldest first.
    ///
    /// # Errors
    /// Provider errors.
    pub async fn reconciliation_receipts(
        &self,
        instance: &str,
    ) -> Result<Vec<ReconciliationRow>, StoreError> {
        let op = "reconciliation_receipts";
        let mut conn = self.control_pool().checkout().await?;
        let rows = conn.query(op, SELECT, &[&instance]).await?;
        rows.iter().map(from_row).collect()
    }

    /// Open ledger rows (`cleanup_status = 'pending'`) of `instance` whose
    /// call is not in `live`: promises with no call behind them here. At
    /// most [`MAX_AFFECTED_CALLS`], in id order.
    ///
    /// # Errors
    /// Provider errors.
    pub async fn open_rows_not_in(
        &self,
        instance: &str,
        live: &[CallId],
    ) -> Result<Vec<CallId>, StoreError> {
        let sql = "SELECT call_id FROM call_ledger \
                   WHERE owner_instance = $1 AND cleanup_status = 'pending' \
                   AND NOT (call_id = ANY($2::uuid[])) \
                   ORDER BY call_id LIMIT $3";
        self.call_ids("open_rows_not_in", sql, instance, live).await
    }

    /// The calls in `live` with no open ledger row owned by `instance`:
    /// calls running here that the ledger does not count. At most
    /// [`MAX_AFFECTED_CALLS`], in id order.
    ///
    /// # Errors
    /// Provider errors.
    pub async fn calls_without_open_row(
        &self,
        instance: &str,
        live: &[CallId],
    ) -> Result<Vec<CallId>, StoreError> {
        let sql = "SELECT l.id FROM unnest($2::uuid[]) AS l(id) \
                   WHERE NOT EXISTS (SELECT 1 FROM call_ledger c \
                       WHERE c.call_id = l.id AND c.owner_instance = $1 \
                       AND c.cleanup_status = 'pending') \
                   ORDER BY l.id LIMIT $3";
        self.call_ids("calls_without_open_row", sql, instance, live)
            .await
    }

    async fn call_ids(
        &self,
        op: &'static str,
        sql: &str,
        instance: &str,
        live: &[CallId],
    ) -> Result<Vec<CallId>, StoreError> {
        let live: Vec<Uuid> = live.iter().map(|c| c.0).collect();
        let mut conn = self.control_pool().checkout().await?;
        let rows = conn
            .query(op, sql, &[&instance, &live, &MAX_AFFECTED_CALLS])
            .await?;
        rows.iter()
            .map(|row| col::<Uuid>(row, 0, op).map(CallId))
            .collect()
    }
}

fn from_row(row: &Row) -> Result<ReconciliationRow, StoreError> {
    let op = "reconciliation_receipts";
    let calls: Vec<Uuid> = col(row, 8, op)?;
    Ok(ReconciliationRow {
        id: col(row, 0, op)?,
        receipt: NewReconciliation {
            instance: col(row, 1, op)?,
            direction: col(row, 2, op)?,
            source_of_truth: col(row, 3, op)?,
            sessions: col(row, 4, op)?,
            ledger_open: col(row, 5, op)?,
            runtime_active: col(row, 6, op)?,
            routing_reported: col(row, 7, op)?,
            affected_calls: calls.into_iter().map(CallId).collect(),
            correction: col(row, 9, op)?,
            suspected_cause: col(row, 10, op)?,
            diverged_since: col(row, 11, op)?,
            recorded_at: col(row, 12, op)?,
        },
    })
}
