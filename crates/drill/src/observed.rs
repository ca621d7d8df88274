//! What one staircase run observed, kept whole: every session (its role,
//! where it landed, the caller's own record, its ledger receipt), every
//! status sample of every instance, the drain, and the auditor's findings.
//! The SLOs and the decision are computed from this and nothing else.

use callgate_load::CallRecord;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::fixture::{Ingress, Role};

/// One session of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Session {
    pub index: usize,
    /// The step that started it (its name).
    pub step: String,
    pub role: Role,
    pub ingress: Ingress,
    /// The id the caller's carrier gave the call (its CallSid).
    pub carrier_call_id: String,
    /// Milliseconds from the run's start to dialling.
    pub dialled_ms: u64,
    /// The ledger's session id, once the lookup found it.
    pub session_id: Option<String>,
    /// The instance that owned it when found.
    pub owner: Option<String>,
    /// Started after the drain began.
    pub after_drain: bool,
    /// On the drained instance when the drain began.
    pub drain_victim: bool,
    /// When the conductor told it to speak (ms from the run's start).
    pub activated_ms: Option<u64>,
    /// When the conductor dropped its socket.
    pub dropped_ms: Option<u64>,
    /// What the caller measured (a WebSocket leg).
    pub record: Option<CallRecord>,
    /// How a SIP leg ended, as its caller saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sip: Option<crate::sip::SipEnded>,
    /// The session's receipt (`GET /v1/sessions/{id}`) after cleanup.
    pub receipt: Option<Value>,
}

impl Session {
    /// A session just dialled: nothing found or measured yet.
    pub fn new(
        index: usize,
        step: &str,
        role: Role,
        ingress: Ingress,
        carrier_call_id: String,
        dialled_ms: u64,
        after_drain: bool,
    ) -> Session {
        Session {
            index,
            step: step.to_string(),
            role,
            ingress,
            carrier_call_id,
            dialled_ms,
            session_id: None,
            owner: None,
            after_drain,
            drain_victim: false,
            activated_ms: None,
            dropped_ms: None,
            record: None,
            sip: None,
            receipt: None,
        }
    }
}

/// One instance's `/admin/status`, reduced to what the drill reads.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Sample {
    /// Milliseconds from the run's start.
    pub at_ms: u64,
    /// The step running then (its index).
    pub step: usize,
    pub instance: String,
    pub draining: bool,
    pub active: u64,
    pub queued: u64,
    pub pressure_score: f64,
    pub pressure_capacity: f64,
    pub speaking: u64,
    pub delegating: u64,
    pub recovering: u64,
    /// Each counter's value (`runtime`, `ledger`, `routing`), when known.
    pub counters: Vec<(String, Option<u64>)>,
    /// Each divergence seen: direction, sessions, age in seconds.
    pub divergences: Vec<(String, Option<u64>, Option<f64>)>,
}

impl Sample {
    /// Reads a status body; `None` when it lacks the fields every callgate
    /// status has.
    pub fn from_status(at_ms: u64, step: usize, s: &Value) -> Option<Sample> {
        let p = &s["pressure"];
        let c = &p["components"];
        let u = |v: &Value| v.as_u64().unwrap_or(0);
        let counters = s["counters"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v["value"].as_u64()))
                    .collect()
            })
            .unwrap_or_default();
        let divergences = s["divergences"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|d| {
                        let dir = d["direction"].as_str().unwrap_or("").to_string();
                        (dir, d["sessions"].as_u64(), d["age_s"].as_f64())
                    })
                    .collect()
            })
            .unwrap_or_default();
        Some(Sample {
            at_ms,
            step,
            instance: s["instance"].as_str()?.to_string(),
            draining: s["state"].as_str()? == "draining",
            active: s["active"].as_u64()?,
            queued: u(&s["queued"]),
            pressure_score: p["score"].as_f64().unwrap_or(0.0),
            pressure_capacity: p["capacity"].as_f64().unwrap_or(0.0),
            speaking: u(&c["speaking"]),
            delegating: u(&c["delegating"]),
            recovering: u(&c["recovering"]),
            counters,
            divergences,
        })
    }
}

/// The drain of one instance during a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DrainSeen {
    /// The drained instance's name.
    pub instance: String,
    /// Milliseconds from the run's start to `POST /admin/drain`.
    pub at_ms: u64,
    /// The policy its status showed once draining.
    pub policy: Option<String>,
    /// `POST /admin/undrain` reopened it after the run.
    pub undrained: bool,
}

/// One step's span within the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepSpan {
    pub name: String,
    pub started_ms: u64,
    pub ended_ms: u64,
    /// The activation's first and last `Speak` (ms from the run's start).
    pub activation: Option<(u64, u64)>,
}

/// A whole run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    /// 1-based.
    pub number: u32,
    /// This run's seed (the fixture's, mixed with the run number).
    pub seed: u64,
    /// The run's start (RFC 3339).
    pub started_at: String,
    pub duration_ms: u64,
    pub steps: Vec<StepSpan>,
    pub sessions: Vec<Session>,
    pub samples: Vec<Sample>,
    pub drain: Option<DrainSeen>,
    /// From the hang-up of every caller to the last receipt closed.
    pub cleanup_converged_ms: Option<u64>,
    /// The auditor's violations about this run's sessions.
    pub violations: Vec<Value>,
    /// Why the run could not be completed as the fixture says, if it could
    /// not (it is kept, and counts as a discarded run).
    pub failure: Option<String>,
}

impl Run {
    /// Completed: every step ran and nothing stopped the conductor.
    pub fn completed(&self) -> bool {
        self.failure.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_status_body_is_reduced_to_what_the_drill_reads() {
        let body = json!({
            "instance": "a", "state": "draining", "active": 3, "queued": 1,
            "pressure": {"score": 4.5, "capacity": 100.0,
                         "components": {"active": 3, "speaking": 1, "delegating": 1, "recovering": 0}},
            "counters": {"runtime": {"value": 3, "known": true}, "ledger": {"value": null, "known": false}},
            "divergences": [{"direction": "leaked_or_delayed_cleanup", "sessions": 1, "known": true, "age_s": 2.5}],
        });
        let s = Sample::from_status(10, 1, &body).expect("a status");
        assert!(s.draining);
        assert_eq!((s.active, s.queued, s.speaking, s.delegating), (3, 1, 1, 1));
        assert_eq!(s.pressure_score, 4.5);
        assert!(s.counters.contains(&("ledger".into(), None)));
        assert_eq!(
            s.divergences,
            [("leaked_or_delayed_cleanup".into(), Some(1), Some(2.5))]
        );
        assert_eq!(
            Sample::from_status(0, 0, &json!({"state": "serving"})),
            None
        );
    }
}
