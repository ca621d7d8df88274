//! Inputs to setup-time calls and the rows the read side returns.

use std::time::{Duration, SystemTime};

use tokio_postgres::Row;
use tokio_postgres::types::FromSql;

use crate::error::StoreError;
use crate::ids::{CallId, CleanupStatus, OwnerEpoch, Speaker};

/// An admitted call, as `Store::open_call` records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewCall {
    /// The call.
    pub call_id: CallId,
    /// Where it came in, e.g. `"twilio"`.
    pub ingress: String,
    /// The carrier's own id (Twilio CallSid), when there is one.
    pub carrier_call_id: Option<String>,
    /// The partner the call came in through, when there is one.
    pub partner_id: Option<String>,
    /// When the admission gate said yes.
    pub admitted_at: SystemTime,
    /// How long the call waited in the admission queue.
    pub admission_wait: Duration,
    /// The receipt fields known at admission (a JSON object: callgate
    /// writes transport, labels and provider labels), the row's first
    /// `stats`; the closing stats are merged over it.
    pub stats: serde_json::Value,
}

/// A call the admission gate refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The id the refused call would have had.
    pub call_id: CallId,
    /// The instance that refused it.
    pub instance: String,
    /// Where it came in.
    pub ingress: String,
    /// The carrier's own id, when there is one.
    pub carrier_call_id: Option<String>,
    /// The partner the call came in through, when there is one.
    pub partner_id: Option<String>,
    /// Low-cardinality reason, e.g. `"queue_timeout"`, `"draining"`.
    pub reason: String,
    /// How long it waited before being refused.
    pub waited: Duration,
    /// When it was refused.
    pub at: SystemTime,
}

/// One call's ledger receipt.
#[derive(Clone, Debug, PartialEq)]
pub struct LedgerRow {
    /// The call.
    pub call_id: CallId,
    /// Instance that owns it.
    pub owner_instance: String,
    /// Current owner epoch.
    pub owner_epoch: OwnerEpoch,
    /// Where it came in.
    pub ingress: String,
    /// The carrier's own id.
    pub carrier_call_id: Option<String>,
    /// The partner it came in through.
    pub partner_id: Option<String>,
    /// When it was admitted.
    pub admitted_at: SystemTime,
    /// Time spent in the admission queue (millisecond precision).
    pub admission_wait: Duration,
    /// Lifecycle: media ready.
    pub media_ready_at: Option<SystemTime>,
    /// Lifecycle: first playable audio.
    pub first_playable_audio_at: Option<SystemTime>,
    /// Lifecycle: last media.
    pub last_media_at: Option<SystemTime>,
    /// Lifecycle: disconnect observed.
    pub disconnect_observed_at: Option<SystemTime>,
    /// Lifecycle: cleanup completed.
    pub cleanup_completed_at: Option<SystemTime>,
    /// Why it ended.
    pub end_reason: Option<String>,
    /// Cleanup outcome.
    pub cleanup_status: CleanupStatus,
    /// Counter deltas and stats (includes `writes_lost` once closed).
    pub stats: serde_json::Value,
    /// The carrier's own account of the call's end (Twilio's status
    /// callback), beside callgate's; `None` until the carrier says.
    pub carrier_end: Option<serde_json::Value>,
}

/// One stored turn.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnRow {
    /// Turn number.
    pub seq: u32,
    /// Who spoke.
    pub speaker: Speaker,
    /// Transcript text.
    pub text: String,
    /// Start of speech.
    pub started_at: SystemTime,
    /// End of speech.
    pub ended_at: SystemTime,
    /// Cut short by barge-in.
    pub interrupted: bool,
    /// A bot turn's reply latency split, when it was complete.
    pub latency: Option<serde_json::Value>,
}

/// One stored raw lifecycle event.
#[derive(Clone, Debug, PartialEq)]
pub struct EventRow {
    /// Event number.
    pub seq: u32,
    /// When it happened.
    pub at: SystemTime,
    /// Its kind.
    pub kind: String,
    /// Its details.
    pub detail: serde_json::Value,
}

/// One stored slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotRow {
    /// Slot name.
    pub name: String,
    /// Slot value.
    pub value: String,
    /// When it was last set.
    pub updated_at: SystemTime,
}

/// A call's mutable flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallStateRow {
    /// Escalated to a human.
    pub escalated: bool,
    /// The first escalation reason.
    pub escalation_reason: Option<String>,
    /// When it was first escalated.
    pub escalated_at: Option<SystemTime>,
}

/// Where a [`CallOutcome`] was recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutcomeTable {
    /// `call_ledger`: the call was admitted (it may still have failed setup).
    Ledger,
    /// `admission_rejections`: the call was refused.
    Rejections,
}

/// How one call ended as its instance recorded it: its ledger receipt or
/// its refusal row, reduced to what a run report compares with its callers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallOutcome {
    /// The table the row came from.
    pub table: OutcomeTable,
    /// The carrier's own id (Twilio CallSid), when there is one.
    pub carrier_call_id: Option<String>,
    /// Ledger: `end_reason` (none while the call is open); rejection: `reason`.
    pub reason: Option<String>,
    /// Ledger: time in the admission queue; rejection: time waited before
    /// the refusal (millisecond precision).
    pub wait: Duration,
}

impl CallOutcome {
    pub(crate) fn from_row(table: OutcomeTable, row: &Row) -> Result<Self, StoreError> {
        let op = "outcomes_between";
        let wait: i64 = col(row, 2, op)?;
        Ok(CallOutcome {
            table,
            carrier_call_id: col(row, 0, op)?,
            reason: col(row, 1, op)?,
            wait: Duration::from_millis(u64::try_from(wait).unwrap_or(0)),
        })
    }
}

/// Reads column `idx`, mapping a type mismatch to a non-retryable error.
pub(crate) fn col<'a, T: FromSql<'a>>(
    row: &'a Row,
    idx: usize,
    op: &'static str,
) -> Result<T, StoreError> {
    row.try_get(idx).map_err(|e| StoreError::decode(op, &e))
}

fn seq(row: &Row, idx: usize, op: &'static str) -> Result<u32, StoreError> {
    let raw: i64 = col(row, idx, op)?;
    u32::try_from(raw).map_err(|_| StoreError::UnexpectedResult {
        op,
        detail: format!("seq {raw} out of range"),
    })
}

/// Milliseconds for a bigint column, saturating (a wait never nears it).
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

pub(crate) const LEDGER_COLUMNS: &str = "call_id, owner_instance, owner_epoch, ingress, \
    carrier_call_id, admitted_at, admission_wait_ms, media_ready_at, first_playable_audio_at, \
    last_media_at, disconnect_observed_at, cleanup_completed_at, end_reason, cleanup_status, stats, \
    partner_id, carrier_end";

impl LedgerRow {
    pub(crate) fn from_row(row: &Row) -> Result<Self, StoreError> {
        let op = "ledger";
        let status: String = col(row, 13, op)?;
        let wait_ms: i64 = col(row, 6, op)?;
        Ok(Self {
            call_id: CallId(col(row, 0, op)?),
            owner_instance: col(row, 1, op)?,
            owner_epoch: OwnerEpoch(col(row, 2, op)?),
            ingress: col(row, 3, op)?,
            carrier_call_id: col(row, 4, op)?,
            partner_id: col(row, 15, op)?,
            admitted_at: col(row, 5, op)?,
            admission_wait: Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0)),
            media_ready_at: col(row, 7, op)?,
            first_playable_audio_at: col(row, 8, op)?,
            last_media_at: col(row, 9, op)?,
            disconnect_observed_at: col(row, 10, op)?,
            cleanup_completed_at: col(row, 11, op)?,
            end_reason: col(row, 12, op)?,
            cleanup_status: CleanupStatus::parse(&status).ok_or_else(|| {
                StoreError::UnexpectedResult {
                    op,
                    detail: format!("cleanup_status {status:?}"),
                }
            })?,
            stats: col(row, 14, op)?,
            carrier_end: col(row, 16, op)?,
        })
    }
}

impl TurnRow {
    pub(crate) fn from_row(row: &Row) -> Result<Self, StoreError> {
        let op = "turns";
        let speaker: String = col(row, 1, op)?;
        Ok(Self {
            seq: seq(row, 0, op)?,
            speaker: Speaker::parse(&speaker).ok_or_else(|| StoreError::UnexpectedResult {
                op,
                detail: format!("speaker {speaker:?}"),
            })?,
            text: col(row, 2, op)?,
            started_at: col(row, 3, op)?,
            ended_at: col(row, 4, op)?,
            interrupted: col(row, 5, op)?,
            latency: col(row, 6, op)?,
        })
    }
}

impl EventRow {
    pub(crate) fn from_row(row: &Row) -> Result<Self, StoreError> {
        let op = "events";
        Ok(Self {
            seq: seq(row, 0, op)?,
            at: col(row, 1, op)?,
            kind: col(row, 2, op)?,
            detail: col(row, 3, op)?,
        })
    }
}

impl SlotRow {
    pub(crate) fn from_row(row: &Row) -> Result<Self, StoreError> {
        let op = "slots";
        Ok(Self {
            name: col(row, 0, op)?,
            value: col(row, 1, op)?,
            updated_at: col(row, 2, op)?,
        })
    }
}

impl CallStateRow {
    pub(crate) fn from_row(row: &Row) -> Result<Self, StoreError> {
        let op = "call_state";
        Ok(Self {
            escalated: col(row, 0, op)?,
            escalation_reason: col(row, 1, op)?,
            escalated_at: col(row, 2, op)?,
        })
    }
}
