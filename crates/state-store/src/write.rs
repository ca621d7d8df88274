//! Per-call writes: what they are and the single fenced, idempotent
//! statement each one becomes.
//!
//! Every statement first locks the call's ledger row (`FOR SHARE`, or
//! `FOR UPDATE` when it updates the ledger itself) and reads its
//! `owner_epoch`; the write happens only when that equals the write's epoch.
//! The statement always returns the epoch it saw, so one round trip tells
//! applied, fenced (a newer owner exists) and unknown call apart. The lock
//! orders a write against a concurrent take-over: it either commits before
//! the new owner's epoch bump or sees the new epoch.

use std::time::SystemTime;

use tokio_postgres::types::ToSql;

use crate::conn::Conn;
use crate::error::StoreError;
use crate::ids::{CallId, CleanupStatus, OwnerEpoch, Speaker, Stage};

/// One per-call write for the write-behind (or [`crate::Store::apply`]).
/// Every variant carries the call, the writer's owner epoch (fencing) and
/// its own timestamps, so a retry or a late write is still correct.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// A finished (or interrupted) turn. Idempotent on `(call, seq)`.
    Turn {
        /// The call.
        call: CallId,
        /// Writer's owner epoch.
        epoch: OwnerEpoch,
        /// Turn number within the call.
        seq: u32,
        /// Who spoke.
        speaker: Speaker,
        /// The transcript text (personal data).
        text: String,
        /// Start of speech.
        started_at: SystemTime,
        /// End of speech (or of playback for the bot).
        ended_at: SystemTime,
        /// Barge-in cut it short.
        interrupted: bool,
        /// A bot turn's reply latency split (the receipt's `turns[]`
        /// entry for it), when its timing was complete.
        latency: Option<serde_json::Value>,
    },
    /// A filled slot; the newest `at` wins.
    Slot {
        /// The call.
        call: CallId,
        /// Writer's owner epoch.
        epoch: OwnerEpoch,
        /// Slot name.
        name: String,
        /// Slot value (personal data).
        value: String,
        /// When it was filled.
        at: SystemTime,
    },
    /// The call was escalated to a human; the first reason wins.
    Escalation {
        /// The call.
        call: CallId,
        /// Writer's owner epoch.
        epoch: OwnerEpoch,
        /// Why.
        reason: String,
        /// When.
        at: SystemTime,
    },
    /// A lifecycle timestamp on the ledger; the first write wins.
    Lifecycle {
        /// The call.
        call: CallId,
        /// Writer's owner epoch.
        epoch: OwnerEpoch,
        /// Which timestamp.
        stage: Stage,
        /// Its value.
        at: SystemTime,
    },
    /// A raw lifecycle event. Idempotent on `(call, seq)`.
    Event {
        /// The call.
        call: CallId,
        /// Writer's owner epoch.
        epoch: OwnerEpoch,
        /// Event number within the call.
        seq: u32,
        /// Short machine-readable kind, e.g. `"barge_in"`.
        kind: String,
        /// Details (no audio, no transcript).
        detail: serde_json::Value,
        /// When it happened.
        at: SystemTime,
    },
    /// The call's end: end reason, cleanup status and stats. The
    /// write-behind merges the call's `writes_lost` into `stats` (a value
    /// already recorded never decreases, so a later direct close cannot
    /// erase it).
    Close {
        /// The call.
        call: CallId,
        /// Writer's owner epoch.
        epoch: OwnerEpoch,
        /// Why the call ended, e.g. `"caller_hangup"`.
        end_reason: String,
        /// How cleanup went.
        cleanup_status: CleanupStatus,
        /// When cleanup finished.
        cleanup_completed_at: SystemTime,
        /// Counter deltas and media/interaction/delegation/recovery stats
        /// (a JSON object; merged into the ledger's `stats`).
        stats: serde_json::Value,
    },
}

impl Write {
    /// The call this write belongs to.
    #[must_use]
    pub fn call(&self) -> CallId {
        match self {
            Self::Turn { call, .. }
            | Self::Slot { call, .. }
            | Self::Escalation { call, .. }
            | Self::Lifecycle { call, .. }
            | Self::Event { call, .. }
            | Self::Close { call, .. } => *call,
        }
    }

    /// The owner epoch the writer believed current.
    #[must_use]
    pub fn epoch(&self) -> OwnerEpoch {
        match self {
            Self::Turn { epoch, .. }
            | Self::Slot { epoch, .. }
            | Self::Escalation { epoch, .. }
            | Self::Lifecycle { epoch, .. }
            | Self::Event { epoch, .. }
            | Self::Close { epoch, .. } => *epoch,
        }
    }

    /// Low-cardinality label for logs and metrics.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Turn { .. } => "turn",
            Self::Slot { .. } => "slot",
            Self::Escalation { .. } => "escalation",
            Self::Lifecycle { .. } => "lifecycle",
            Self::Event { .. } => "event",
            Self::Close { .. } => "close",
        }
    }
}

/// What Postgres did with a write.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Written (or already present: retries are idempotent).
    Applied,
    /// Refused: the ledger's owner epoch is `current`, not the write's.
    Fenced {
        /// The epoch the ledger holds.
        current: OwnerEpoch,
    },
    /// Refused: the call has no ledger row.
    UnknownCall,
}

/// `<lock the ledger row> <write> <return the epoch seen>` as one literal.
macro_rules! fenced {
    ($lock:literal, $write:expr) => {
        concat!(
            "WITH owner AS (SELECT owner_epoch FROM call_ledger WHERE call_id = $1::uuid ",
            $lock,
            "), w AS (",
            $write,
            ") SELECT (SELECT owner_epoch FROM owner)"
        )
    };
}

const TURN: &str = fenced!(
    "FOR SHARE",
    "INSERT INTO call_turns (call_id, seq, speaker, text, started_at, ended_at, interrupted, latency) \
     SELECT $1::uuid, $3::bigint, $4::text, $5::text, $6::timestamptz, $7::timestamptz, $8::boolean, \
     $9::jsonb \
     FROM owner WHERE owner_epoch = $2::bigint \
     ON CONFLICT (call_id, seq) DO NOTHING"
);

const SLOT: &str = fenced!(
    "FOR SHARE",
    "INSERT INTO call_slots (call_id, name, value, updated_at) \
     SELECT $1::uuid, $3::text, $4::text, $5::timestamptz \
     FROM owner WHERE owner_epoch = $2::bigint \
     ON CONFLICT (call_id, name) DO UPDATE \
     SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at \
     WHERE call_slots.updated_at <= EXCLUDED.updated_at"
);

const ESCALATION: &str = fenced!(
    "FOR SHARE",
    "UPDATE call_state SET escalated = true, \
     escalation_reason = COALESCE(escalation_reason, $3::text), \
     escalated_at = COALESCE(escalated_at, $4::timestamptz), \
     updated_at = GREATEST(updated_at, $4::timestamptz) \
     WHERE call_id = $1::uuid AND EXISTS (SELECT 1 FROM owner WHERE owner_epoch = $2::bigint)"
);

const EVENT: &str = fenced!(
    "FOR SHARE",
    "INSERT INTO call_events (call_id, seq, at, kind, detail) \
     SELECT $1::uuid, $3::bigint, $4::timestamptz, $5::text, $6::jsonb \
     FROM owner WHERE owner_epoch = $2::bigint \
     ON CONFLICT (call_id, seq) DO NOTHING"
);

const CLOSE: &str = fenced!(
    "FOR UPDATE",
    "UPDATE call_ledger SET end_reason = $3::text, cleanup_status = $4::text, \
     cleanup_completed_at = COALESCE(cleanup_completed_at, $5::timestamptz), \
     stats = stats || $6::jsonb || jsonb_build_object('writes_lost', \
       GREATEST(COALESCE((stats->>'writes_lost')::bigint, 0), $7::bigint)) \
     WHERE call_id = $1::uuid AND owner_epoch = $2::bigint"
);

/// A lifecycle stamp: `COALESCE` keeps the first value written.
macro_rules! stage {
    ($col:literal) => {
        fenced!(
            "FOR UPDATE",
            concat!(
                "UPDATE call_ledger SET ",
                $col,
                " = COALESCE(",
                $col,
                ", $3::timestamptz) WHERE call_id = $1::uuid AND owner_epoch = $2::bigint"
            )
        )
    };
}

fn stage_sql(stage: Stage) -> &'static str {
    match stage {
        Stage::MediaReady => stage!("media_ready_at"),
        Stage::FirstPlayableAudio => stage!("first_playable_audio_at"),
        Stage::LastMedia => stage!("last_media_at"),
        Stage::DisconnectObserved => stage!("disconnect_observed_at"),
    }
}

/// An owned statement parameter ($3 onwards; $1/$2 are call and epoch).
type Param = Box<dyn ToSql + Sync + Send>;

fn text(s: &str) -> Param {
    Box::new(s.to_owned())
}

/// The statement for `w` and its parameters after call id and epoch.
fn statement(w: &Write, writes_lost: u64) -> (&'static str, Vec<Param>) {
    match w {
        Write::Turn {
            seq,
            speaker,
            text: words,
            started_at,
            ended_at,
            interrupted,
            latency,
            ..
        } => (
            TURN,
            vec![
                Box::new(i64::from(*seq)),
                text(speaker.as_str()),
                text(words),
                Box::new(*started_at),
                Box::new(*ended_at),
                Box::new(*interrupted),
                Box::new(latency.clone()),
            ],
        ),
        Write::Slot {
            name, value, at, ..
        } => (SLOT, vec![text(name), text(value), Box::new(*at)]),
        Write::Escalation { reason, at, .. } => (ESCALATION, vec![text(reason), Box::new(*at)]),
        Write::Lifecycle { stage, at, .. } => (stage_sql(*stage), vec![Box::new(*at)]),
        Write::Event {
            seq,
            kind,
            detail,
            at,
            ..
        } => (
            EVENT,
            vec![
                Box::new(i64::from(*seq)),
                Box::new(*at),
                text(kind),
                Box::new(detail.clone()),
            ],
        ),
        Write::Close {
            end_reason,
            cleanup_status,
            cleanup_completed_at,
            stats,
            ..
        } => (
            CLOSE,
            vec![
                text(end_reason),
                text(cleanup_status.as_str()),
                Box::new(*cleanup_completed_at),
                Box::new(stats.clone()),
                Box::new(i64::try_from(writes_lost).unwrap_or(i64::MAX)),
            ],
        ),
    }
}

/// Executes one write on `conn`. `writes_lost` is merged into a `Close`'s
/// stats (the call's loss count when the close is applied).
pub(crate) async fn apply(
    conn: &mut Conn,
    w: &Write,
    writes_lost: u64,
) -> Result<WriteOutcome, StoreError> {
    let op = "write";
    let call = w.call().0;
    let epoch = w.epoch().0;
    let (sql, rest) = statement(w, writes_lost);
    let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(rest.len() + 2);
    params.push(&call);
    params.push(&epoch);
    params.extend(rest.iter().map(|p| p.as_ref() as &(dyn ToSql + Sync)));
    let row = conn.query_one(op, sql, &params).await?;
    let seen: Option<i64> = row.try_get(0).map_err(|e| StoreError::decode(op, &e))?;
    Ok(match seen {
        None => WriteOutcome::UnknownCall,
        Some(current) if current == epoch => WriteOutcome::Applied,
        Some(current) => WriteOutcome::Fenced {
            current: OwnerEpoch(current),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_is_fenced_and_returns_the_seen_epoch() {
        let stages = [
            Stage::MediaReady,
            Stage::FirstPlayableAudio,
            Stage::LastMedia,
            Stage::DisconnectObserved,
        ];
        let all = [TURN, SLOT, ESCALATION, EVENT, CLOSE]
            .into_iter()
            .chain(stages.map(stage_sql));
        for sql in all {
            assert!(sql.starts_with("WITH owner AS"), "{sql}");
            assert!(sql.contains("owner_epoch = $2::bigint"), "{sql}");
            assert!(
                sql.ends_with("SELECT (SELECT owner_epoch FROM owner)"),
                "{sql}"
            );
        }
        for stage in stages {
            let col = format!("{}_at", stage.as_str());
            assert!(stage_sql(stage).contains(&format!("{col} = COALESCE({col}")));
        }
    }

    #[test]
    fn parameter_counts_match_the_statements() {
        let call = CallId::new_random();
        let epoch = OwnerEpoch::FIRST;
        let at = SystemTime::UNIX_EPOCH;
        let writes = [
            Write::Slot {
                call,
                epoch,
                name: "n".into(),
                value: "v".into(),
                at,
            },
            Write::Escalation {
                call,
                epoch,
                reason: "r".into(),
                at,
            },
            Write::Lifecycle {
                call,
                epoch,
                stage: Stage::LastMedia,
                at,
            },
            Write::Event {
                call,
                epoch,
                seq: 1,
                kind: "k".into(),
                detail: serde_json::json!({}),
                at,
            },
            Write::Close {
                call,
                epoch,
                end_reason: "e".into(),
                cleanup_status: CleanupStatus::Completed,
                cleanup_completed_at: at,
                stats: serde_json::json!({}),
            },
        ];
        for w in &writes {
            let (sql, rest) = statement(w, 0);
            let highest = rest.len() + 2;
            assert!(sql.contains(&format!("${highest}::")), "{sql}");
            assert!(!sql.contains(&format!("${}::", highest + 1)), "{sql}");
        }
    }

    #[test]
    fn accessors_report_call_epoch_and_kind() {
        let call = CallId::new_random();
        let w = Write::Lifecycle {
            call,
            epoch: OwnerEpoch(3),
            stage: Stage::LastMedia,
            at: SystemTime::UNIX_EPOCH,
        };
        assert_eq!(w.call(), call);
        assert_eq!(w.epoch(), OwnerEpoch(3));
        assert_eq!(w.kind(), "lifecycle");
    }
}
