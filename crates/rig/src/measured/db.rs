//! What the server recorded in Postgres during a run — its ledger receipts
//! (admitted calls) and its refusal rows, read by the run's time window
//! through `state_store::Store::outcomes_between` — as the bench reports it.

use serde::Serialize;
use state_store::{CallOutcome, OutcomeTable};

/// Which table a server row came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// `call_ledger`: the call was admitted (it may still have failed setup).
    Ledger,
    /// `admission_rejections`: the gate (or setup before a ledger row) said no.
    Rejection,
}

/// One call as the server recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerCall {
    pub source: Source,
    /// The Twilio `CallSid`, which the load records carry too.
    pub carrier_call_id: Option<String>,
    /// Ledger: `end_reason`; rejection: `reason`.
    pub reason: Option<String>,
    /// Ledger: `admission_wait_ms`; rejection: `waited_ms`.
    pub wait_ms: u64,
}

impl ServerCall {
    /// The refusal reason if the server refused this call: every rejection
    /// row, and ledger rows closed as `setup_failed:*` (admitted, then sent
    /// to the overflow path because a resource could not be opened).
    pub fn refusal(&self) -> Option<&str> {
        let reason = self.reason.as_deref();
        match self.source {
            Source::Rejection => Some(reason.unwrap_or("unknown")),
            Source::Ledger => reason.filter(|r| r.starts_with("setup_failed")),
        }
    }
}

impl From<CallOutcome> for ServerCall {
    fn from(o: CallOutcome) -> Self {
        ServerCall {
            source: match o.table {
                OutcomeTable::Ledger => Source::Ledger,
                OutcomeTable::Rejections => Source::Rejection,
            },
            carrier_call_id: o.carrier_call_id,
            reason: o.reason,
            wait_ms: u64::try_from(o.wait.as_millis()).unwrap_or(u64::MAX),
        }
    }
}
