//! The ledger auditor: SQL that looks for broken invariants in
//! `call_ledger`, `call_events` and `instance_events`, and the
//! `instance_events` write the drain check relies on.
//!
//! Each check is one bounded, read-only statement (the store's
//! `statement_timeout` applies, and each returns at most
//! [`MAX_PER_CHECK`] rows); all of them run in one `REPEATABLE READ READ
//! ONLY` transaction, so they judge one snapshot. Every violation names its
//! kind (a stable string, [`ViolationKind::as_str`]), the call (when there
//! is one), the owning instance and the evidence (`detail`). The checks:
//!
//! - `negative_counter` — a closed row (not a reclaimed one, see below)
//!   whose `stats.active_counter_delta`
//!   shows more decrements than increments, or a count outside {0, 1}: the
//!   permit moves the runtime counter up once and down exactly once.
//! - `leaked_counter` — any other closed row that is not exactly one
//!   increment and one decrement: 1/0 is a slot never given back, 0/0 a
//!   receipt whose permit was never counted, a missing delta a close that
//!   did not measure it.
//! - `two_live_owners` — two open rows (`cleanup_status = 'pending'`) for
//!   the same carrier call (`ingress`, `carrier_call_id`) owned by
//!   different instances: one call promised twice. (Within one row
//!   ownership is a single column moved by `take_over` under an epoch
//!   fence, and `call_events` records no ownership, so there is nothing
//!   else to compare.)
//! - `disconnected_still_open` — an open row whose disconnect was observed
//!   longer ago than [`AuditParams::disconnect_grace`]: teardown is
//!   bounded, so its work (tools, provider sessions) should be gone.
//! - `delegation_unfinished` — a closed row whose `stats.delegation` shows
//!   more tools started than completed + failed + cancelled (+ `orphaned`
//!   when present): privileged work outlived its call.
//! - `admitted_while_draining` — a row admitted after its owner's latest
//!   `draining` event with no later `started` or `undrained` before the
//!   admission. Both timestamps come from the owner's own clock.
//! - `double_terminal` — more than one terminal event for one call in
//!   `call_events`. The terminal kinds ([`TERMINAL_EVENT_KINDS`]) are the
//!   ones the call writes at its one terminal transition: `setup_failed`
//!   (ingress) and the cause of a mid-call fail-over (the call core's
//!   `drain_deadline`, `max_duration`, `<culprit>_stalled`,
//!   `<provider>_closed`). A hang-up or a second cause after the end is
//!   counted in the receipt (`late_end_causes`), never written as an event.
//! - `closed_without_end_reason` — `cleanup_status <> 'pending'` and no
//!   `end_reason`.
//! - `end_reason_while_open` — an `end_reason` on a row still pending.
//! - `open_too_long` — an open row admitted more than
//!   [`AuditParams::max_call_duration`] ago (the caller derives it from the
//!   configured maximum call duration plus the bounded ending).
//! - `reclaimed_without_receipt` — a row closed as `owner_lost` or
//!   `instance_restart` (by another instance, or by its owner's next boot:
//!   the `ownership` module) whose `stats.reclaim` is missing, names
//!   another reason, lacks who closed it, whom from, or the epochs, or
//!   names a closer other than the row's owner now. Such rows are exempt
//!   from the two counter checks: their permit died with the process that
//!   held it, so no delta was ever measured, and the receipt says so.
//!
//! What it never does: write to the ledger, repair a row, or decide on its
//! own what "too long" is (the caller passes the bounds and the clock).
//!
//! How to drive it:
//!
//! ```no_run
//! use std::time::{Duration, SystemTime};
//! use state_store::audit::{self, AuditParams, InstanceEventKind};
//!
//! # async fn demo(store: &state_store::Store) -> Result<(), state_store::StoreError> {
//! let now = SystemTime::now();
//! store.record_instance_event(InstanceEventKind::Started, now, serde_json::json!({})).await?;
//! let params = AuditParams::new(Duration::from_secs(3_630), Duration::from_secs(25), now);
//! for v in audit::run(store, params).await? {
//!     println!("{v}");
//! }
//! # Ok(()) }
//! ```

use std::fmt;
use std::time::{Duration, SystemTime};

use tokio_postgres::Row;

use crate::error::StoreError;
use crate::ids::CallId;
use crate::ownership::ReclaimReason;
use crate::rows::col;
use crate::store::Store;

/// Rows one check returns at most: an auditor facing a badly broken ledger
/// still answers in bounded time and memory; the first thousand of a kind
/// say enough.
pub const MAX_PER_CHECK: i64 = 1_000;

/// Event kinds written at a call's terminal transition (see the header).
/// Mirrors `callgate`'s `ingress::setup_failed` and `call::core::fail_over`.
pub const TERMINAL_EVENT_KINDS: &[&str] = &[
    "setup_failed",
    "drain_deadline",
    "max_duration",
    "dialog_stalled",
    "tool_stalled",
    "tts_stalled",
    "stt_stalled",
    "carrier_media_stalled",
    "stt_closed",
    "tts_closed",
    "dialog_closed",
];

/// What an instance declared about itself (`instance_events.kind`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum InstanceEventKind {
    /// The server started and admits calls (written before it listens).
    Started,
    /// Admission closed for a drain (written when the drain begins).
    Draining,
    /// A drain was called off and admission reopened. Nothing in callgate
    /// undrains today; the auditor honours the kind so that an undrain can
    /// be recorded without a migration.
    Undrained,
}

impl InstanceEventKind {
    /// The stored value.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceEventKind::Started => "started",
            InstanceEventKind::Draining => "draining",
            InstanceEventKind::Undrained => "undrained",
        }
    }
}

/// The kinds of violation, in the order [`run`] reports them.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ViolationKind {
    NegativeCounter,
    LeakedCounter,
    TwoLiveOwners,
    DisconnectedStillOpen,
    DelegationUnfinished,
    AdmittedWhileDraining,
    DoubleTerminal,
    ClosedWithoutEndReason,
    EndReasonWhileOpen,
    OpenTooLong,
    ReclaimedWithoutReceipt,
}

impl ViolationKind {
    /// Every kind, in report order.
    pub const ALL: [ViolationKind; 11] = [
        ViolationKind::NegativeCounter,
        ViolationKind::LeakedCounter,
        ViolationKind::TwoLiveOwners,
        ViolationKind::DisconnectedStillOpen,
        ViolationKind::DelegationUnfinished,
        ViolationKind::AdmittedWhileDraining,
        ViolationKind::DoubleTerminal,
        ViolationKind::ClosedWithoutEndReason,
        ViolationKind::EndReasonWhileOpen,
        ViolationKind::OpenTooLong,
        ViolationKind::ReclaimedWithoutReceipt,
    ];

    /// The stable name (CLI output, JSON, alerts).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            ViolationKind::NegativeCounter => "negative_counter",
            ViolationKind::LeakedCounter => "leaked_counter",
            ViolationKind::TwoLiveOwners => "two_live_owners",
            ViolationKind::DisconnectedStillOpen => "disconnected_still_open",
            ViolationKind::DelegationUnfinished => "delegation_unfinished",
            ViolationKind::AdmittedWhileDraining => "admitted_while_draining",
            ViolationKind::DoubleTerminal => "double_terminal",
            ViolationKind::ClosedWithoutEndReason => "closed_without_end_reason",
            ViolationKind::EndReasonWhileOpen => "end_reason_while_open",
            ViolationKind::OpenTooLong => "open_too_long",
            ViolationKind::ReclaimedWithoutReceipt => "reclaimed_without_receipt",
        }
    }
}

impl fmt::Display for ViolationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One broken invariant.
#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    /// Which invariant.
    pub kind: ViolationKind,
    /// The session, when the violation is about one.
    pub call_id: Option<CallId>,
    /// The instance that owns the row.
    pub instance: String,
    /// The evidence, as the check read it.
    pub detail: serde_json::Value,
}

impl Violation {
    /// `{kind, call_id, instance, detail}`.
    #[must_use]
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": self.kind.as_str(),
            "call_id": self.call_id.map(|c| c.to_string()),
            "instance": self.instance,
            "detail": self.detail,
        })
    }
}

impl fmt::Display for Violation {
    /// One line: `<kind> call=<id|-> instance=<name> <detail json>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let call = self
            .call_id
            .map_or_else(|| "-".to_owned(), |c| c.to_string());
        write!(
            f,
            "{} call={call} instance={} {}",
            self.kind, self.instance, self.detail
        )
    }
}

/// The bounds and the clock the checks judge against.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AuditParams {
    /// An open row admitted longer ago than this is `open_too_long`.
    pub max_call_duration: Duration,
    /// An open row whose disconnect was observed longer ago than this is
    /// `disconnected_still_open`.
    pub disconnect_grace: Duration,
    /// "Now" for both.
    pub now: SystemTime,
}

impl AuditParams {
    #[must_use]
    pub fn new(max_call_duration: Duration, disconnect_grace: Duration, now: SystemTime) -> Self {
        AuditParams {
            max_call_duration,
            disconnect_grace,
            now,
        }
    }

    fn before_now(&self, d: Duration) -> SystemTime {
        self.now.checked_sub(d).unwrap_or(SystemTime::UNIX_EPOCH)
    }
}

/// `x` as a number when it is a JSON number, else NULL (a cast of a
/// string would abort the whole statement).
macro_rules! num {
    ($e:literal) => {
        concat!(
            "(CASE jsonb_typeof(",
            $e,
            ") WHEN 'number' THEN (",
            $e,
            ")::numeric END)"
        )
    };
}

/// Every check selects `call_id uuid NULL, owner_instance text, detail jsonb`.
const NEGATIVE_OR_LEAKED: &str = concat!(
    "SELECT call_id, owner_instance, jsonb_build_object('active_counter_delta', d), ",
    "  (",
    num!("d->'decrement'"),
    " > ",
    num!("d->'increment'"),
    "   OR ",
    num!("d->'increment'"),
    " NOT IN (0, 1) OR ",
    num!("d->'decrement'"),
    " NOT IN (0, 1)",
    "   OR ",
    num!("d->'increment'"),
    " IS NULL OR ",
    num!("d->'decrement'"),
    " IS NULL",
    "  ) AND d IS NOT NULL AS negative ",
    "FROM (SELECT call_id, owner_instance, admitted_at, stats->'active_counter_delta' AS d ",
    "      FROM call_ledger WHERE cleanup_status <> 'pending' ",
    "        AND NOT COALESCE(end_reason = ANY($2::text[]), false)) l ",
    "WHERE d IS NULL OR ",
    num!("d->'increment'"),
    " IS DISTINCT FROM 1 ",
    "   OR ",
    num!("d->'decrement'"),
    " IS DISTINCT FROM 1 ",
    "ORDER BY admitted_at LIMIT $1"
);

const TWO_LIVE_OWNERS: &str = "SELECT l.call_id, l.owner_instance, \
     jsonb_build_object('ingress', l.ingress, 'carrier_call_id', l.carrier_call_id, \
                        'owners', o.owners) \
     FROM call_ledger l JOIN ( \
       SELECT ingress, carrier_call_id, \
              jsonb_agg(jsonb_build_object('call_id', call_id, 'instance', owner_instance) \
                        ORDER BY admitted_at, call_id) AS owners \
       FROM call_ledger \
       WHERE cleanup_status = 'pending' AND carrier_call_id IS NOT NULL \
       GROUP BY ingress, carrier_call_id \
       HAVING count(DISTINCT owner_instance) > 1) o USING (ingress, carrier_call_id) \
     WHERE l.cleanup_status = 'pending' \
     ORDER BY l.ingress, l.carrier_call_id, l.admitted_at LIMIT $1";

const DISCONNECTED_STILL_OPEN: &str = "SELECT call_id, owner_instance, \
     jsonb_build_object('disconnect_observed_at', disconnect_observed_at, \
                        'admitted_at', admitted_at) \
     FROM call_ledger \
     WHERE cleanup_status = 'pending' AND disconnect_observed_at < $2 \
     ORDER BY disconnect_observed_at LIMIT $1";

const DELEGATION_UNFINISHED: &str = concat!(
    "SELECT call_id, owner_instance, d FROM ( ",
    "  SELECT call_id, owner_instance, admitted_at, stats->'delegation' AS d FROM call_ledger ",
    "  WHERE cleanup_status <> 'pending' AND jsonb_typeof(stats->'delegation') = 'object') l ",
    "WHERE COALESCE(",
    num!("d->'started'"),
    ", 0) > COALESCE(",
    num!("d->'completed'"),
    ", 0) ",
    "  + COALESCE(",
    num!("d->'failed'"),
    ", 0) + COALESCE(",
    num!("d->'cancelled'"),
    ", 0) ",
    "  + COALESCE(",
    num!("d->'orphaned'"),
    ", 0) ",
    "ORDER BY admitted_at LIMIT $1"
);

const ADMITTED_WHILE_DRAINING: &str = "SELECT l.call_id, l.owner_instance, \
     jsonb_build_object('admitted_at', l.admitted_at, 'draining_since', e.at, \
                        'draining_detail', e.detail) \
     FROM call_ledger l CROSS JOIN LATERAL ( \
       SELECT kind, at, detail FROM instance_events i \
       WHERE i.instance = l.owner_instance AND i.at <= l.admitted_at \
       ORDER BY i.at DESC, i.id DESC LIMIT 1) e \
     WHERE e.kind = 'draining' \
     ORDER BY l.admitted_at LIMIT $1";

const DOUBLE_TERMINAL: &str = "SELECT e.call_id, l.owner_instance, \
     jsonb_build_object('events', jsonb_agg(jsonb_build_object('seq', e.seq, 'kind', e.kind, \
                        'at', e.at) ORDER BY e.seq)) \
     FROM call_events e JOIN call_ledger l USING (call_id) \
     WHERE e.kind = ANY($2) \
     GROUP BY e.call_id, l.owner_instance HAVING count(*) > 1 \
     ORDER BY e.call_id LIMIT $1";

const CLOSED_WITHOUT_END_REASON: &str = "SELECT call_id, owner_instance, \
     jsonb_build_object('cleanup_status', cleanup_status, \
                        'cleanup_completed_at', cleanup_completed_at) \
     FROM call_ledger WHERE cleanup_status <> 'pending' AND end_reason IS NULL \
     ORDER BY admitted_at LIMIT $1";

const END_REASON_WHILE_OPEN: &str = "SELECT call_id, owner_instance, \
     jsonb_build_object('end_reason', end_reason) \
     FROM call_ledger WHERE cleanup_status = 'pending' AND end_reason IS NOT NULL \
     ORDER BY admitted_at LIMIT $1";

const OPEN_TOO_LONG: &str = "SELECT call_id, owner_instance, \
     jsonb_build_object('admitted_at', admitted_at) \
     FROM call_ledger WHERE cleanup_status = 'pending' AND admitted_at < $2 \
     ORDER BY admitted_at LIMIT $1";

/// `$2`: the reclaim reasons. The receipt's keys are the ones the
/// `ownership` module always writes (the rest are absent when unmeasured).
const RECLAIMED_WITHOUT_RECEIPT: &str = "SELECT call_id, owner_instance, \
     jsonb_build_object('end_reason', end_reason, 'reclaim', stats->'reclaim') \
     FROM call_ledger \
     WHERE end_reason = ANY($2::text[]) AND ( \
       jsonb_typeof(stats->'reclaim') IS DISTINCT FROM 'object' \
       OR stats->'reclaim'->>'reason' IS DISTINCT FROM end_reason \
       OR NOT (stats->'reclaim' ?& \
               ARRAY['by_instance', 'from_instance', 'epoch_before', 'epoch_after', 'at']) \
       OR stats->'reclaim'->>'by_instance' IS DISTINCT FROM owner_instance) \
     ORDER BY admitted_at LIMIT $1";

const OP: &str = "audit";

/// Runs every check on one snapshot of the ledger; the violations come
/// back grouped by kind in [`ViolationKind::ALL`] order.
///
/// # Errors
/// Provider errors (connection, `statement_timeout`). Nothing is judged
/// from a partial run: any failed check fails the audit.
pub async fn run(store: &Store, p: AuditParams) -> Result<Vec<Violation>, StoreError> {
    let mut conn = store.pool().checkout().await?;
    conn.begin(OP).await?;
    conn.batch(
        OP,
        "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY",
    )
    .await?;
    let limit = MAX_PER_CHECK;
    let reclaimed: Vec<&str> = ReclaimReason::ALL.iter().map(|r| r.as_str()).collect();
    let mut out = Vec::new();
    for row in conn
        .query(OP, NEGATIVE_OR_LEAKED, &[&limit, &reclaimed])
        .await?
    {
        let negative: Option<bool> = col(&row, 3, OP)?;
        let kind = if negative == Some(true) {
            ViolationKind::NegativeCounter
        } else {
            ViolationKind::LeakedCounter
        };
        out.push(violation(kind, &row)?);
    }
    let disconnect_cutoff = p.before_now(p.disconnect_grace);
    let open_cutoff = p.before_now(p.max_call_duration);
    let terminal: Vec<&str> = TERMINAL_EVENT_KINDS.to_vec();
    let checks: [(ViolationKind, &str, Option<&SystemTime>); 4] = [
        (ViolationKind::TwoLiveOwners, TWO_LIVE_OWNERS, None),
        (
            ViolationKind::DisconnectedStillOpen,
            DISCONNECTED_STILL_OPEN,
            Some(&disconnect_cutoff),
        ),
        (
            ViolationKind::DelegationUnfinished,
            DELEGATION_UNFINISHED,
            None,
        ),
        (
            ViolationKind::AdmittedWhileDraining,
            ADMITTED_WHILE_DRAINING,
            None,
        ),
    ];
    for (kind, sql, cutoff) in checks {
        let rows = match cutoff {
            Some(t) => conn.query(OP, sql, &[&limit, t]).await?,
            None => conn.query(OP, sql, &[&limit]).await?,
        };
        push_all(&mut out, kind, &rows)?;
    }
    let rows = conn
        .query(OP, DOUBLE_TERMINAL, &[&limit, &terminal])
        .await?;
    push_all(&mut out, ViolationKind::DoubleTerminal, &rows)?;
    for (kind, sql) in [
        (
            ViolationKind::ClosedWithoutEndReason,
            CLOSED_WITHOUT_END_REASON,
        ),
        (ViolationKind::EndReasonWhileOpen, END_REASON_WHILE_OPEN),
    ] {
        let rows = conn.query(OP, sql, &[&limit]).await?;
        push_all(&mut out, kind, &rows)?;
    }
    let rows = conn
        .query(OP, OPEN_TOO_LONG, &[&limit, &open_cutoff])
        .await?;
    push_all(&mut out, ViolationKind::OpenTooLong, &rows)?;
    let rows = conn
        .query(OP, RECLAIMED_WITHOUT_RECEIPT, &[&limit, &reclaimed])
        .await?;
    push_all(&mut out, ViolationKind::ReclaimedWithoutReceipt, &rows)?;
    conn.commit(OP).await?;
    // The counter query yields both of its kinds interleaved.
    out.sort_by_key(|v| v.kind);
    Ok(out)
}

fn push_all(out: &mut Vec<Violation>, kind: ViolationKind, rows: &[Row]) -> Result<(), StoreError> {
    for row in rows {
        out.push(violation(kind, row)?);
    }
    Ok(())
}

fn violation(kind: ViolationKind, row: &Row) -> Result<Violation, StoreError> {
    let call: Option<uuid::Uuid> = col(row, 0, OP)?;
    let detail: Option<serde_json::Value> = col(row, 2, OP)?;
    Ok(Violation {
        kind,
        call_id: call.map(CallId),
        instance: col(row, 1, OP)?,
        detail: detail.unwrap_or(serde_json::Value::Null),
    })
}

impl Store {
    /// Records what this instance declares about itself (`started`,
    /// `draining`), stamped `at` by its own clock. One short statement;
    /// callers on a hot path spawn it with a bound rather than await it.
    ///
    /// # Errors
    /// Provider errors when Postgres fails or is slow.
    pub async fn record_instance_event(
        &self,
        kind: InstanceEventKind,
        at: SystemTime,
        detail: serde_json::Value,
    ) -> Result<(), StoreError> {
        // Idempotent: a retry after a timed-out attempt that did land
        // writes no second row for the same instant.
        let sql = "INSERT INTO instance_events (instance, at, kind, detail) \
            SELECT $1, $2, $3, $4 WHERE NOT EXISTS (SELECT 1 FROM instance_events \
            WHERE instance = $1 AND at = $2 AND kind = $3)";
        let mut conn = self.pool().checkout().await?;
        conn.execute(
            "record_instance_event",
            sql,
            &[&self.config().instance, &at, &kind.as_str(), &detail],
        )
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_have_distinct_stable_names_in_report_order() {
        let names: Vec<&str> = ViolationKind::ALL.iter().map(|k| k.as_str()).collect();
        let mut sorted = ViolationKind::ALL.to_vec();
        sorted.sort();
        assert_eq!(sorted, ViolationKind::ALL, "ALL is in Ord order");
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
        assert_eq!(ViolationKind::TwoLiveOwners.as_str(), "two_live_owners");
    }

    #[test]
    fn a_violation_renders_as_one_line_and_as_json() {
        let id = CallId::new_random();
        let v = Violation {
            kind: ViolationKind::ClosedWithoutEndReason,
            call_id: Some(id),
            instance: "cg-1".into(),
            detail: serde_json::json!({"cleanup_status": "completed"}),
        };
        assert_eq!(
            v.to_string(),
            format!(
                "closed_without_end_reason call={id} instance=cg-1 {{\"cleanup_status\":\"completed\"}}"
            )
        );
        assert_eq!(v.to_json()["call_id"], id.to_string());
        assert_eq!(v.to_json()["kind"], "closed_without_end_reason");
        let none = Violation { call_id: None, ..v };
        assert!(none.to_string().contains(" call=- "));
        assert!(none.to_json()["call_id"].is_null());
    }

    #[test]
    fn cutoffs_saturate_at_the_epoch() {
        let p = AuditParams::new(Duration::MAX, Duration::ZERO, SystemTime::UNIX_EPOCH);
        assert_eq!(p.before_now(p.max_call_duration), SystemTime::UNIX_EPOCH);
        assert_eq!(p.before_now(p.disconnect_grace), SystemTime::UNIX_EPOCH);
    }
}
