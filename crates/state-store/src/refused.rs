//! What the carrier's side says about a call, by the carrier's own id: the
//! read side of `admission_rejections` (a refused call found by the id
//! callgate gave it or by the carrier's), and the carrier's account of a
//! call's end written beside the receipt. Refusals never enter the ledger
//! (they hold no resources and make no promise), but an operator asked
//! "why did this caller not get through?" must be able to answer it from
//! the id the caller or carrier holds.

use std::time::Duration;

use tokio_postgres::Row;

use crate::error::StoreError;
use crate::ids::CallId;
use crate::rows::{Rejection, col};
use crate::store::Store;

const COLUMNS: &str = "call_id, instance, ingress, carrier_call_id, partner_id, reason, \
    waited_ms, at";

impl Store {
    /// Records the carrier's own account of how the calls it knows as
    /// `carrier_call_id` (on `ingress`) ended, beside callgate's; returns
    /// the receipts it was written to (0: none was admitted under that id).
    /// The latest account wins.
    ///
    /// # Errors
    /// Provider errors.
    pub async fn record_carrier_end(
        &self,
        ingress: &str,
        carrier_call_id: &str,
        end: &serde_json::Value,
    ) -> Result<u64, StoreError> {
        let sql = "UPDATE call_ledger SET carrier_end = $3 \
                   WHERE carrier_call_id = $1 AND ingress = $2";
        let mut conn = self.control_pool().checkout().await?;
        conn.execute(
            "record_carrier_end",
            sql,
            &[&carrier_call_id, &ingress, end],
        )
        .await
    }

    /// The refusal recorded under `id`, if any. Refusals are written in
    /// batches off the caller's path, so one can appear up to a batch
    /// interval after the refusal itself.
    ///
    /// # Errors
    /// Provider errors.
    pub async fn rejection(&self, id: CallId) -> Result<Option<Rejection>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM admission_rejections WHERE call_id = $1");
        let mut conn = self.pool().checkout().await?;
        let rows = conn.query("rejection", &sql, &[&id.0]).await?;
        rows.first().map(Rejection::from_row).transpose()
    }

    /// The refusals recorded under the carrier's own call id, oldest
    /// first, at most `limit` of them.
    ///
    /// # Errors
    /// Provider errors.
    pub async fn rejections_by_carrier_call(
        &self,
        carrier_call_id: &str,
        limit: u32,
    ) -> Result<Vec<Rejection>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM admission_rejections WHERE carrier_call_id = $1 \
             ORDER BY at, call_id LIMIT $2"
        );
        let mut conn = self.pool().checkout().await?;
        let rows = conn
            .query(
                "rejections_by_carrier_call",
                &sql,
                &[&carrier_call_id, &i64::from(limit)],
            )
            .await?;
        rows.iter().map(Rejection::from_row).collect()
    }
}

impl Rejection {
    fn from_row(row: &Row) -> Result<Self, StoreError> {
        let op = "rejection";
        let waited_ms: i64 = col(row, 6, op)?;
        Ok(Self {
            call_id: CallId(col(row, 0, op)?),
            instance: col(row, 1, op)?,
            ingress: col(row, 2, op)?,
            carrier_call_id: col(row, 3, op)?,
            partner_id: col(row, 4, op)?,
            reason: col(row, 5, op)?,
            waited: Duration::from_millis(u64::try_from(waited_ms).unwrap_or(0)),
            at: col(row, 7, op)?,
        })
    }
}
