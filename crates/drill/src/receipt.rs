//! The session-capacity receipt: what was run, against what, what was
//! observed beside what was required, the invariants, what was not
//! tested, and the decision those compute. Written as YAML through serde
//! (`serde_yaml_ng`) and signed ([`crate::sign`]).
//!
//! Every number in it is measured by this drill or read from the ledger;
//! what the drill cannot measure is named under `not_tested`, never filled
//! in.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::calibrate::Calibration;
use crate::decision::{self, Bounds, Decision, Evidence, Miss};
use crate::fixture::{Fixture, Role};
use crate::observed::{Run, Session};
use crate::slo::{self, Family, Observation};

/// Names the document (and its shape's revision).
pub const KIND: &str = "callgate-session-capacity-receipt/v1";

/// Revisions of what was under test, as the caller of the drill read them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Revisions {
    /// `git describe` of the callgate that ran the drill (client side).
    pub client: String,
    /// Each instance's name with the revision it reported.
    pub servers: BTreeMap<String, String>,
    /// SHA-256 of each routing configuration file (HAProxy, Kamailio).
    pub routing: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FixtureRef {
    pub version: String,
    /// SHA-256 of the fixture file's bytes.
    pub sha256: String,
    pub seed: u64,
    pub repeats: u32,
    pub hold_scale: f64,
    pub drain_policy: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunLine {
    pub number: u32,
    pub seed: u64,
    pub started_at: String,
    pub duration_s: f64,
    pub completed: bool,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub failure: Option<String>,
    /// The instance that was drained (its name).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub drained: Option<String>,
    pub sessions: usize,
    pub max_concurrency: u64,
    /// The whole run's observations (`runs/run-N.json`).
    pub file: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Runs {
    pub completed: u32,
    /// Runs that could not be completed; they stay in the denominator.
    pub discarded: u32,
    pub list: Vec<RunLine>,
}

/// One threshold beside its worst observation (over completed runs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub step: String,
    pub family: Family,
    pub name: String,
    pub observed: f64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub threshold: Option<f64>,
    pub pass: bool,
    /// Sessions (or samples) behind it, summed over the runs.
    pub from: usize,
}

/// A worst session, its receipt copied beside this file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Worst {
    pub session_id: String,
    pub run: u32,
    pub role: Role,
    pub value_ms: f64,
    /// `sessions/<id>.json`.
    pub receipt: String,
    /// SHA-256 of that receipt's canonical JSON (sorted keys, no spaces);
    /// `drill verify` recomputes it from the file and from the ledger.
    pub receipt_sha256: String,
}

/// The whole receipt body (everything the signature covers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    pub kind: String,
    pub created_at: String,
    /// The Ed25519 public key (hex) that signs this receipt.
    pub signed_by: String,
    pub fixture: FixtureRef,
    pub revisions: Revisions,
    /// Provider labels the sessions' receipts carried (model, voice, …).
    pub providers: BTreeMap<String, String>,
    pub instances: Vec<String>,
    pub runs: Runs,
    /// The most sessions on the line at once, summed over instances.
    pub max_tested_concurrency: u64,
    pub checks: Vec<Check>,
    /// Each must be 0: counted by the auditor over the drill's sessions,
    /// and by the callers (sessions landing on a draining instance).
    pub invariants: BTreeMap<String, u64>,
    pub worst_sessions: BTreeMap<String, Worst>,
    pub not_tested: Vec<String>,
    pub pressure_calibration: Calibration,
    pub decision: Decision,
}

/// The invariant each auditor violation counts toward.
fn invariant_of(kind: &str) -> &'static str {
    match kind {
        "negative_counter" => "negative_counter",
        "two_live_owners" => "duplicate_owner",
        "delegation_unfinished" => "orphaned_privileged_work",
        "admitted_while_draining" => "admission_during_drain",
        "leaked_counter" => "leaked_counter",
        "double_terminal" => "double_terminal",
        _ => "other_audit_violations",
    }
}

/// Counts every invariant over `runs` (all of them, discarded included).
pub fn invariants(runs: &[Run]) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, u64> = [
        "negative_counter",
        "duplicate_owner",
        "orphaned_privileged_work",
        "admission_during_drain",
        "leaked_counter",
        "double_terminal",
        "other_audit_violations",
    ]
    .into_iter()
    .map(|k| (k.to_string(), 0))
    .collect();
    for run in runs {
        for v in &run.violations {
            *out.entry(invariant_of(v["kind"].as_str().unwrap_or("")).into())
                .or_default() += 1;
        }
        if let Some(d) = &run.drain {
            let landed = run
                .sessions
                .iter()
                .filter(|s| s.after_drain && s.owner.as_deref() == Some(d.instance.as_str()))
                .count() as u64;
            *out.entry("admission_during_drain".into()).or_default() += landed;
        }
    }
    out
}

/// The threshold checks: each step's observations, worst over the
/// completed runs.
pub fn checks(runs: &[Run], fixture: &Fixture) -> Vec<Check> {
    let mut out: Vec<Check> = Vec::new();
    for run in runs.iter().filter(|r| r.completed()) {
        for (i, span) in run.steps.iter().enumerate() {
            for o in
                slo::step_observations(run, i, &fixture.thresholds, fixture.roles.tool_utterance)
            {
                merge(&mut out, &span.name, &o);
            }
        }
    }
    out
}

fn merge(out: &mut Vec<Check>, step: &str, o: &Observation) {
    match out.iter_mut().find(|c| c.step == step && c.name == o.name) {
        Some(c) => {
            c.observed = c.observed.max(o.value);
            c.from += o.from;
            c.pass = c.threshold.is_none_or(|t| c.observed <= t);
        }
        None => out.push(Check {
            step: step.to_string(),
            family: o.family,
            name: o.name.clone(),
            observed: o.value,
            threshold: o.max,
            pass: o.passes(),
            from: o.from,
        }),
    }
}

/// What this drill could not exercise, named.
pub fn not_tested(runs: &[Run]) -> Vec<String> {
    let sip_ran = runs
        .iter()
        .flat_map(|r| &r.sessions)
        .any(|s| s.ingress == crate::fixture::Ingress::Sip && s.receipt.is_some());
    let mut out = Vec::new();
    if !sip_ran {
        out.push(
            "SIP calls through Kamailio: no SIP dialer was given, so no SIP leg ran".to_string(),
        );
        out.push("RTP jitter and packet loss: no RTP leg ran".into());
    }
    out.push("WebRTC: callgate has no WebRTC ingress yet".into());
    out.push("tool acknowledgement time: the ledger records no tool acknowledgement".into());
    out
}

/// Sum of active sessions over instances, per sampling tick; the most.
pub fn max_concurrency(run: &Run) -> u64 {
    let mut per_tick: BTreeMap<u64, u64> = BTreeMap::new();
    for s in &run.samples {
        *per_tick.entry(s.at_ms / 1_000).or_default() += s.active;
    }
    per_tick.values().copied().max().unwrap_or(0)
}

/// The bounds a `limited` decision is held to.
pub fn bounds(runs: &[Run], scale_concurrency: u64) -> Bounds {
    let mut features: BTreeSet<String> = BTreeSet::new();
    let mut longest = 0u64;
    for run in runs.iter().filter(|r| r.completed()) {
        for s in &run.sessions {
            features.insert(format!("role:{}", s.role.label()));
            features.insert(format!("ingress:{}", s.ingress.label()));
            if let Some(r) = &s.record {
                longest = longest.max(r.duration_ms / 1_000);
            }
        }
    }
    Bounds {
        max_concurrency: scale_concurrency,
        longest_session_s: longest,
        features: features.into_iter().collect(),
    }
}

/// The decision the receipt's evidence computes.
pub fn decide(r: &Receipt, runs: &[Run]) -> Decision {
    let misses = r
        .checks
        .iter()
        .filter(|c| !c.pass)
        .map(|c| Miss {
            step: c.step.clone(),
            name: c.name.clone(),
            observed: c.observed,
            max: c.threshold.unwrap_or(0.0),
        })
        .collect();
    let evidence = Evidence {
        invariants: r.invariants.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        completed_runs: r.runs.completed,
        discarded: runs
            .iter()
            .filter_map(|x| Some((x.number, x.failure.clone()?)))
            .collect(),
        misses,
        hold_scale: r.fixture.hold_scale,
        not_tested: r.not_tested.clone(),
    };
    decision::decide(&evidence, bounds(runs, r.max_tested_concurrency))
}

/// JSON with sorted keys and no spaces: the same bytes for the same value
/// however it was parsed.
pub fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let inner: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", Value::String((*k).clone()), canonical(&m[*k])))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// SHA-256 (hex) of a receipt's canonical JSON.
pub fn receipt_digest(v: &Value) -> String {
    use sha2::Digest as _;
    crate::sign::hex(&sha2::Sha256::digest(canonical(v).as_bytes()))
}

/// The worst session per family over completed runs: `(family, run,
/// session, value)`.
pub fn worst_sessions(runs: &[Run]) -> Vec<(&'static str, u32, &Session, f64)> {
    type Measure = fn(&Session) -> Option<f64>;
    let families: [(&'static str, Measure); 4] = [
        ("setup", |s| s.record.as_ref()?.connect_ms.map(|m| m as f64)),
        ("first_audio", |s| {
            s.record.as_ref()?.time_to_first_audio_ms.map(|m| m as f64)
        }),
        ("cleanup", |s| slo::cleanup_ms(s.receipt.as_ref()?)),
        ("recovery", |s| {
            s.dropped_ms?;
            slo::noticed_ms(s.receipt.as_ref()?)
        }),
    ];
    let mut out = Vec::new();
    for (name, measure) in families {
        let best = runs
            .iter()
            .filter(|r| r.completed())
            .flat_map(|r| r.sessions.iter().map(move |s| (r.number, s)))
            .filter(|(_, s)| s.session_id.is_some() && s.receipt.is_some())
            .filter_map(|(n, s)| Some((n, s, measure(s)?)))
            .max_by(|a, b| a.2.total_cmp(&b.2));
        if let Some((n, s, v)) = best {
            out.push((name, n, s, v));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_ignores_key_order_and_spacing() {
        let a: Value =
            serde_json::from_str(r#"{"b": [1, {"y":2,"x":"é"}], "a": null}"#).unwrap_or_default();
        let b = json!({"a": null, "b": [1, {"x": "é", "y": 2}]});
        assert_eq!(canonical(&a), canonical(&b));
        assert_eq!(canonical(&b), r#"{"a":null,"b":[1,{"x":"é","y":2}]}"#);
        assert_eq!(receipt_digest(&a), receipt_digest(&b));
        assert_ne!(receipt_digest(&a), receipt_digest(&json!({"a": 1})));
    }

    #[test]
    fn audit_kinds_count_toward_the_named_invariants() {
        assert_eq!(invariant_of("two_live_owners"), "duplicate_owner");
        assert_eq!(
            invariant_of("delegation_unfinished"),
            "orphaned_privileged_work"
        );
        assert_eq!(
            invariant_of("admitted_while_draining"),
            "admission_during_drain"
        );
        assert_eq!(invariant_of("open_too_long"), "other_audit_violations");
    }
}
