//! `Store`: the pool plus every setup-time and read-side call. Each call
//! checks a connection out for one statement (or one short transaction) and
//! returns it at once; nothing here holds a connection across unrelated
//! awaits, and every wait is bounded by the config's deadlines.

use std::sync::Arc;
use std::time::SystemTime;

use crate::config::StoreConfig;
use crate::conn::{Conn, Pool, PoolStatus};
use crate::error::StoreError;
use crate::ids::{CallId, OwnerEpoch};
use crate::migrate;
use crate::rows::{
    CallOutcome, CallStateRow, EventRow, LEDGER_COLUMNS, LedgerRow, NewCall, OutcomeTable,
    Rejection, SlotRow, TurnRow, col, millis,
};
use crate::write::{self, Write, WriteOutcome};

/// Rows deleted per retention statement: each batch is a short statement on
/// a freshly checked-out connection, so retention never holds locks or a
/// pooled connection for long.
const PURGE_BATCH: i64 = 5_000;
/// Receipts deleted per statement: fewer, because each one cascades to
/// whatever of its call's events, turns and slots is left.
const LEDGER_PURGE_BATCH: i64 = 500;

/// Handle to callgate's Postgres state. Cheap to clone (an `Arc` inside).
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    /// The control connections, outside the call pool: ownership
    /// heartbeats, the reconciler's reads and the refusal recorder. A burst
    /// of setups or a backlog of writes can use every pooled connection;
    /// the lease must still be renewed and refusals still recorded.
    control: Pool,
    cfg: StoreConfig,
}

/// Connections in the control pool: one for the heartbeat, one for the
/// reconciler and the refusal recorder, which take turns.
pub const CONTROL_POOL_SIZE: usize = 2;

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("instance", &self.inner.cfg.instance)
            .field("pool", &self.inner.pool.status())
            .finish()
    }
}

const OPEN_CALL: &str = "WITH ins AS (
    INSERT INTO call_ledger (call_id, owner_instance, owner_epoch, ingress, carrier_call_id,
                             admitted_at, admission_wait_ms, partner_id, stats)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8,
            -- only an object merges with the closing stats (`||`)
            CASE WHEN jsonb_typeof($9::jsonb) = 'object' THEN $9::jsonb ELSE '{}'::jsonb END)
    ON CONFLICT (call_id) DO NOTHING
    RETURNING owner_epoch
), st AS (
    INSERT INTO call_state (call_id, updated_at) SELECT $1, $6 FROM ins
)
SELECT owner_epoch FROM ins";

impl Store {
    /// Builds the pool and proves it works by running one statement.
    ///
    /// # Errors
    /// `InvalidConfig` for bad knobs; `Connect`/`ConnectTimeout`/
    /// `QueryTimeout` when Postgres cannot be reached in time.
    pub async fn connect(cfg: StoreConfig) -> Result<Store, StoreError> {
        let pool = Pool::new(&cfg, cfg.pool_size)?;
        let control = Pool::new(&cfg, CONTROL_POOL_SIZE)?;
        let mut conn = pool.checkout().await?;
        conn.query("connect", "SELECT 1", &[]).await?;
        drop(conn);
        tracing::info!(instance = %cfg.instance, pool_size = cfg.pool_size, control = CONTROL_POOL_SIZE, "store connected");
        Ok(Store {
            inner: Arc::new(Inner { pool, control, cfg }),
        })
    }

    /// The config this store was built from.
    #[must_use]
    pub fn config(&self) -> &StoreConfig {
        &self.inner.cfg
    }

    pub(crate) fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The control pool (heartbeats, reconciler, refusals).
    pub(crate) fn control_pool(&self) -> &Pool {
        &self.inner.control
    }

    /// Control pool gauges.
    #[must_use]
    pub fn control_pool_status(&self) -> PoolStatus {
        self.inner.control.status()
    }

    /// Applies pending migrations; returns the names it applied (empty when
    /// the schema was current). Safe to run from several instances at once.
    ///
    /// # Errors
    /// `MigrationChanged` when an applied migration's text was edited;
    /// provider errors when Postgres fails.
    pub async fn migrate(&self) -> Result<Vec<String>, StoreError> {
        migrate::run(&self.inner.pool, migrate::MIGRATIONS).await
    }

    /// Pool gauges for health endpoints.
    #[must_use]
    pub fn pool_status(&self) -> PoolStatus {
        self.inner.pool.status()
    }

    /// Records an admitted call (ledger receipt + call state) owned by this
    /// instance, and returns its owner epoch. Retrying after a timeout is
    /// safe: a call this instance already opened returns its epoch.
    ///
    /// Cancel-safe with respect to the database: the row is written in a
    /// transaction that commits only while this future is still awaited. A
    /// caller that gives up (the setup deadline) drops it before `COMMIT`
    /// is sent; the connection is discarded and Postgres rolls the insert
    /// back when the connection ends — even when the statement sat in a
    /// stalled or frozen backend and ran long after the caller left, which
    /// as a single autocommit statement left a receipt nobody would close.
    /// What remains is a caller giving up while its `COMMIT` is in flight.
    ///
    /// # Errors
    /// `CallOwned` when another instance already owns the id.
    pub async fn open_call(&self, call: NewCall) -> Result<OwnerEpoch, StoreError> {
        let op = "open_call";
        let mut conn = self.inner.pool.checkout().await?;
        conn.begin(op).await?;
        let claimed = self.claim(&mut conn, &call).await;
        if matches!(claimed, Ok(_) | Err(StoreError::CallOwned { .. })) {
            // Statements succeeded: commit (nothing was written when owned).
            conn.commit(op).await?;
        }
        // On any other error the guard discards the connection mid-transaction.
        claimed
    }

    /// Inserts the call's rows, or reads who already owns the id.
    async fn claim(&self, conn: &mut Conn, call: &NewCall) -> Result<OwnerEpoch, StoreError> {
        let op = "open_call";
        let instance = &self.inner.cfg.instance;
        let wait_ms = millis(call.admission_wait);
        let rows = conn
            .query(
                op,
                OPEN_CALL,
                &[
                    &call.call_id.0,
                    instance,
                    &OwnerEpoch::FIRST.0,
                    &call.ingress,
                    &call.carrier_call_id,
                    &call.admitted_at,
                    &wait_ms,
                    &call.partner_id,
                    &call.stats,
                ],
            )
            .await?;
        if let Some(row) = rows.first() {
            return Ok(OwnerEpoch(col(row, 0, op)?));
        }
        // The id exists already: an idempotent retry, or someone else's call.
        let sql = "SELECT owner_instance, owner_epoch FROM call_ledger WHERE call_id = $1";
        let row = conn.query_one(op, sql, &[&call.call_id.0]).await?;
        let owner: String = col(&row, 0, op)?;
        let epoch = OwnerEpoch(col(&row, 1, op)?);
        if owner == *instance {
            return Ok(epoch);
        }
        Err(StoreError::CallOwned {
            call: call.call_id,
            owner,
            epoch,
        })
    }

    /// Takes an open call over for this instance (reconnect or hand-off):
    /// bumps its owner epoch, so every write still carrying the old epoch
    /// is fenced from now on.
    ///
    /// # Errors
    /// `UnknownCall` when the call has no ledger row or is already closed.
    pub async fn take_over(&self, call: CallId) -> Result<OwnerEpoch, StoreError> {
        let op = "take_over";
        let sql = "UPDATE call_ledger SET owner_epoch = owner_epoch + 1, owner_instance = $2 \
                   WHERE call_id = $1 AND cleanup_status = 'pending' RETURNING owner_epoch";
        let mut conn = self.inner.pool.checkout().await?;
        let rows = conn
            .query(op, sql, &[&call.0, &self.inner.cfg.instance])
            .await?;
        let row = rows.first().ok_or(StoreError::UnknownCall { call })?;
        let epoch = OwnerEpoch(col(row, 0, op)?);
        tracing::info!(call_id = %call, epoch = %epoch, "took call ownership");
        Ok(epoch)
    }

    /// Records a refused call so rejections are countable. Idempotent.
    ///
    /// # Errors
    /// Provider errors when Postgres fails or is slow.
    pub async fn record_rejection(&self, r: Rejection) -> Result<(), StoreError> {
        let sql = "INSERT INTO admission_rejections \
                   (call_id, instance, ingress, carrier_call_id, reason, waited_ms, at, partner_id) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (call_id) DO NOTHING";
        let waited = millis(r.waited);
        let mut conn = self.control_pool().checkout().await?;
        conn.execute(
            "record_rejection",
            sql,
            &[
                &r.call_id.0,
                &r.instance,
                &r.ingress,
                &r.carrier_call_id,
                &r.reason,
                &waited,
                &r.at,
                &r.partner_id,
            ],
        )
        .await?;
        Ok(())
    }

    /// Records a batch of refused calls in one statement on one short-lived
    /// connection: under overload refusals arrive by the thousand, and one
    /// checkout per refusal would compete with call setup for the pool.
    /// Idempotent per call id.
    ///
    /// # Errors
    /// Provider errors when Postgres fails or is slow.
    pub async fn record_rejections(&self, batch: &[Rejection]) -> Result<u64, StoreError> {
        if batch.is_empty() {
            return Ok(0);
        }
        let sql = "INSERT INTO admission_rejections \
                   (call_id, instance, ingress, carrier_call_id, reason, waited_ms, at, partner_id) \
                   SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], \
                   $5::text[], $6::bigint[], $7::timestamptz[], $8::text[]) \
                   ON CONFLICT (call_id) DO NOTHING";
        let ids: Vec<uuid::Uuid> = batch.iter().map(|r| r.call_id.0).collect();
        let instances: Vec<&str> = batch.iter().map(|r| r.instance.as_str()).collect();
        let ingress: Vec<&str> = batch.iter().map(|r| r.ingress.as_str()).collect();
        let carrier: Vec<Option<&str>> =
            batch.iter().map(|r| r.carrier_call_id.as_deref()).collect();
        let reasons: Vec<&str> = batch.iter().map(|r| r.reason.as_str()).collect();
        let waited: Vec<i64> = batch.iter().map(|r| millis(r.waited)).collect();
        let at: Vec<SystemTime> = batch.iter().map(|r| r.at).collect();
        let partners: Vec<Option<&str>> = batch.iter().map(|r| r.partner_id.as_deref()).collect();
        let mut conn = self.control_pool().checkout().await?;
        conn.execute(
            "record_rejections",
            sql,
            &[
                &ids, &instances, &ingress, &carrier, &reasons, &waited, &at, &partners,
            ],
        )
        .await
    }

    /// Applies one write now, on one short-lived connection, and says what
    /// Postgres did with it. The write-behind calls this; setup and
    /// shutdown paths may call it directly when they must know the result.
    ///
    /// # Errors
    /// Provider errors (retryable per `is_retryable`). A stale epoch is not
    /// an error: it is `Ok(WriteOutcome::Fenced { .. })`.
    pub async fn apply(&self, w: &Write) -> Result<WriteOutcome, StoreError> {
        let mut conn = self.inner.pool.checkout().await?;
        write::apply(&mut conn, w, 0).await
    }

    /// Retention: deletes turns and slots of calls admitted before
    /// `older_than`, open calls' included (personal data goes on time even
    /// from a row whose cleanup never landed); ledger receipts, events and
    /// call state stay. Returns the number of rows deleted.
    ///
    /// # Errors
    /// Provider errors; rows deleted by earlier batches stay deleted.
    pub async fn purge_personal_data(&self, older_than: SystemTime) -> Result<u64, StoreError> {
        const TURNS: &str = "DELETE FROM call_turns t USING (
            SELECT t2.call_id, t2.seq FROM call_turns t2 JOIN call_ledger l USING (call_id)
            WHERE l.admitted_at < $1 LIMIT $2) d
            WHERE t.call_id = d.call_id AND t.seq = d.seq";
        const SLOTS: &str = "DELETE FROM call_slots s USING (
            SELECT s2.call_id, s2.name FROM call_slots s2 JOIN call_ledger l USING (call_id)
            WHERE l.admitted_at < $1 LIMIT $2) d
            WHERE s.call_id = d.call_id AND s.name = d.name";
        let turns = self.purge_batches(TURNS, older_than, PURGE_BATCH).await?;
        let slots = self.purge_batches(SLOTS, older_than, PURGE_BATCH).await?;
        tracing::info!(rows = turns + slots, "purged personal data");
        Ok(turns + slots)
    }

    /// Retention: deletes the raw events (`call_events`) of closed calls
    /// admitted before `older_than`. An open call keeps every event: it is
    /// the evidence an audit of a leaked row needs.
    ///
    /// # Errors
    /// Provider errors; rows deleted by earlier batches stay deleted.
    pub async fn purge_events(&self, older_than: SystemTime) -> Result<u64, StoreError> {
        const EVENTS: &str = "DELETE FROM call_events e USING (
            SELECT e2.call_id, e2.seq FROM call_events e2 JOIN call_ledger l USING (call_id)
            WHERE l.admitted_at < $1 AND l.cleanup_status <> 'pending' LIMIT $2) d
            WHERE e.call_id = d.call_id AND e.seq = d.seq";
        self.purge_batches(EVENTS, older_than, PURGE_BATCH).await
    }

    /// Retention: deletes closed receipts (`call_ledger` rows) of calls
    /// admitted before `older_than`, and with them (`ON DELETE CASCADE`)
    /// whatever of their events, turns, slots and state is left. A row
    /// whose cleanup is `pending` is never deleted, however old.
    ///
    /// # Errors
    /// Provider errors; rows deleted by earlier batches stay deleted.
    pub async fn purge_receipts(&self, older_than: SystemTime) -> Result<u64, StoreError> {
        const LEDGER: &str = "DELETE FROM call_ledger WHERE cleanup_status <> 'pending'             AND call_id IN (SELECT call_id FROM call_ledger             WHERE admitted_at < $1 AND cleanup_status <> 'pending' LIMIT $2)";
        self.purge_batches(LEDGER, older_than, LEDGER_PURGE_BATCH)
            .await
    }

    /// Retention: deletes admission refusals recorded before `older_than`.
    ///
    /// # Errors
    /// Provider errors; rows deleted by earlier batches stay deleted.
    pub async fn purge_rejections(&self, older_than: SystemTime) -> Result<u64, StoreError> {
        const REFUSALS: &str = "DELETE FROM admission_rejections WHERE call_id IN             (SELECT call_id FROM admission_rejections WHERE at < $1 LIMIT $2)";
        self.purge_batches(REFUSALS, older_than, PURGE_BATCH).await
    }

    /// Runs `sql` (a `DELETE` of at most `$2` rows older than `$1`) until a
    /// batch deletes fewer than `batch`, each on a fresh checkout.
    async fn purge_batches(
        &self,
        sql: &str,
        older_than: SystemTime,
        batch: i64,
    ) -> Result<u64, StoreError> {
        let mut total = 0;
        loop {
            let mut conn = self.inner.pool.checkout().await?;
            let n = conn.execute("purge", sql, &[&older_than, &batch]).await?;
            total += n;
            if n < batch.unsigned_abs() {
                return Ok(total);
            }
        }
    }

    /// The call's ledger receipt.
    ///
    /// # Errors
    /// Provider errors.
    pub async fn ledger(&self, id: CallId) -> Result<Option<LedgerRow>, StoreError> {
        let sql = format!("SELECT {LEDGER_COLUMNS} FROM call_ledger WHERE call_id = $1");
        let mut conn = self.inner.pool.checkout().await?;
        let rows = conn.query("ledger", &sql, &[&id.0]).await?;
        rows.first().map(LedgerRow::from_row).transpose()
    }

    /// The ledger rows recorded under the carrier's own call id (a Twilio
    /// CallSid, a SIP Call-ID, a partner's call id), oldest admission first,
    /// at most `limit` of them: one id may be recorded more than once (two
    /// ingresses, or a carrier that reuses ids).
    ///
    /// # Errors
    /// Provider errors.
    pub async fn ledger_by_carrier_call(
        &self,
        carrier_call_id: &str,
        limit: u32,
    ) -> Result<Vec<LedgerRow>, StoreError> {
        let sql = format!(
            "SELECT {LEDGER_COLUMNS} FROM call_ledger WHERE carrier_call_id = $1 \
             ORDER BY admitted_at, call_id LIMIT $2"
        );
        let mut conn = self.inner.pool.checkout().await?;
        let rows = conn
            .query(
                "ledger_by_carrier_call",
                &sql,
                &[&carrier_call_id, &i64::from(limit)],
            )
            .await?;
        rows.iter().map(LedgerRow::from_row).collect()
    }

    /// The call's turns in order.
    ///
    /// # Errors
    /// Provider errors.
    pub async fn turns(&self, id: CallId) -> Result<Vec<TurnRow>, StoreError> {
        self.turns_page(id, None, u32::MAX).await
    }

    /// The call's turns after seq `after` (all when `None`), in order, at
    /// most `limit` of them.
    ///
    /// # Errors
    /// Provider errors.
    pub async fn turns_page(
        &self,
        id: CallId,
        after: Option<u32>,
        limit: u32,
    ) -> Result<Vec<TurnRow>, StoreError> {
        let sql = "SELECT seq, speaker, text, started_at, ended_at, interrupted, latency \
                   FROM call_turns WHERE call_id = $1 AND seq > $2 ORDER BY seq LIMIT $3";
        let after = after.map_or(-1, i64::from);
        let mut conn = self.inner.pool.checkout().await?;
        let rows = conn
            .query("turns", sql, &[&id.0, &after, &i64::from(limit)])
            .await?;
        rows.iter().map(TurnRow::from_row).collect()
    }

    /// The call's raw events in order.
    ///
    /// # Errors
    /// Provider errors.
    pub async fn events(&self, id: CallId) -> Result<Vec<EventRow>, StoreError> {
        let sql = "SELECT seq, at, kind, detail FROM call_events WHERE call_id = $1 ORDER BY seq";
        let mut conn = self.inner.pool.checkout().await?;
        let rows = conn.query("events", sql, &[&id.0]).await?;
        rows.iter().map(EventRow::from_row).collect()
    }

    /// At most `limit` of the call's events with `seq` above `after` (all
    /// of them from the start: `None`), in order — a page of
    /// [`Store::events`].
    ///
    /// # Errors
    /// Provider errors.
    pub async fn events_page(
        &self,
        id: CallId,
        after: Option<u32>,
        limit: u32,
    ) -> Result<Vec<EventRow>, StoreError> {
        let sql = "SELECT seq, at, kind, detail FROM call_events \
                   WHERE call_id = $1 AND seq > $2 ORDER BY seq LIMIT $3";
        let after = after.map_or(-1, i64::from);
        let mut conn = self.inner.pool.checkout().await?;
        let rows = conn
            .query("events_page", sql, &[&id.0, &after, &i64::from(limit)])
            .await?;
        rows.iter().map(EventRow::from_row).collect()
    }

    /// The call's slots by name.
    ///
    /// # Errors
    /// Provider errors.
    pub async fn slots(&self, id: CallId) -> Result<Vec<SlotRow>, StoreError> {
        let sql = "SELECT name, value, updated_at FROM call_slots WHERE call_id = $1 ORDER BY name";
        let mut conn = self.inner.pool.checkout().await?;
        let rows = conn.query("slots", sql, &[&id.0]).await?;
        rows.iter().map(SlotRow::from_row).collect()
    }

    /// The call's mutable flags.
    ///
    /// # Errors
    /// Provider errors.
    pub async fn call_state(&self, id: CallId) -> Result<Option<CallStateRow>, StoreError> {
        let sql = "SELECT escalated, escalation_reason, escalated_at \
                   FROM call_state WHERE call_id = $1";
        let mut conn = self.inner.pool.checkout().await?;
        let rows = conn.query("call_state", sql, &[&id.0]).await?;
        rows.first().map(CallStateRow::from_row).transpose()
    }

    /// `ledger_open_sessions`: calls owned by `instance` whose cleanup has
    /// not been recorded.
    ///
    /// # Errors
    /// Provider errors.
    pub async fn open_ledger_sessions(&self, instance: &str) -> Result<i64, StoreError> {
        let sql = "SELECT count(*) FROM call_ledger \
                   WHERE owner_instance = $1 AND cleanup_status = 'pending'";
        let mut conn = self.inner.pool.checkout().await?;
        let row = conn
            .query_one("open_ledger_sessions", sql, &[&instance])
            .await?;
        col(&row, 0, "open_ledger_sessions")
    }

    /// Refused calls recorded for `instance` since `since`.
    ///
    /// # Errors
    /// Provider errors.
    pub async fn rejections_since(
        &self,
        instance: &str,
        since: SystemTime,
    ) -> Result<i64, StoreError> {
        let sql = "SELECT count(*) FROM admission_rejections WHERE instance = $1 AND at >= $2";
        let mut conn = self.inner.pool.checkout().await?;
        let row = conn
            .query_one("rejections_since", sql, &[&instance, &since])
            .await?;
        col(&row, 0, "rejections_since")
    }

    /// How every call of `instance` admitted or refused within `[from, to]`
    /// ended: its ledger receipts (by `admitted_at`), then its refusals (by
    /// `at`). One connection, two statements.
    ///
    /// # Errors
    /// Provider errors.
    pub async fn outcomes_between(
        &self,
        instance: &str,
        from: SystemTime,
        to: SystemTime,
    ) -> Result<Vec<CallOutcome>, StoreError> {
        let op = "outcomes_between";
        let ledger = "SELECT carrier_call_id, end_reason, admission_wait_ms FROM call_ledger \
                      WHERE owner_instance = $1 AND admitted_at BETWEEN $2 AND $3";
        let refused = "SELECT carrier_call_id, reason, waited_ms FROM admission_rejections \
                       WHERE instance = $1 AND at BETWEEN $2 AND $3";
        let mut conn = self.inner.pool.checkout().await?;
        let mut out = Vec::new();
        for (table, sql) in [
            (OutcomeTable::Ledger, ledger),
            (OutcomeTable::Rejections, refused),
        ] {
            let rows = conn.query(op, sql, &[&instance, &from, &to]).await?;
            for row in &rows {
                out.push(CallOutcome::from_row(table, row)?);
            }
        }
        Ok(out)
    }
}
