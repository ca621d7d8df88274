//! The capacity decision, computed — never chosen — from the invariants,
//! the runs kept and the thresholds:
//!
//! 1. any invariant above zero → `rollback` (the configuration broke a
//!    promise; capacity is beside the point);
//! 2. no completed run, a discarded run, or a threshold missed → `hold`,
//!    naming each;
//! 3. everything passed but the evidence is narrower than the fixture's
//!    full envelope (fewer than [`FULL_REPEATS`] staircases, scaled holds,
//!    anything not tested) → `limited`, bounded by what was tested;
//! 4. otherwise `promote`.

use serde::{Deserialize, Serialize};

/// Staircases a `promote` needs.
pub const FULL_REPEATS: u32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Hold,
    Limited,
    Promote,
    Rollback,
}

/// A threshold one step missed (worst over the completed runs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Miss {
    pub step: String,
    pub name: String,
    pub observed: f64,
    pub max: f64,
}

/// What the decision is computed from.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// Invariants with their counts (all must be 0).
    pub invariants: Vec<(String, u64)>,
    pub completed_runs: u32,
    /// Runs that could not be completed, with why.
    pub discarded: Vec<(u32, String)>,
    pub misses: Vec<Miss>,
    /// `--hold-scale` (1 = the fixture's holds).
    pub hold_scale: f64,
    pub not_tested: Vec<String>,
}

/// The bounds of a `limited` decision: what was tested, no further.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bounds {
    /// The most sessions seen at once across the instances.
    pub max_concurrency: u64,
    /// The longest any session stayed on the line, seconds.
    pub longest_session_s: u64,
    /// The roles and ingresses exercised.
    pub features: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub verdict: Verdict,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub bounds: Option<Bounds>,
}

/// The decision `e` supports; `bounds` are what a `limited` is held to.
pub fn decide(e: &Evidence, bounds: Bounds) -> Decision {
    let broken: Vec<String> = e
        .invariants
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k} = {n}"))
        .collect();
    if !broken.is_empty() {
        return Decision {
            verdict: Verdict::Rollback,
            reason: format!("invariants broken: {}", broken.join(", ")),
            bounds: None,
        };
    }
    let mut held = Vec::new();
    if e.completed_runs == 0 {
        held.push("no staircase completed".to_string());
    }
    for (n, why) in &e.discarded {
        held.push(format!("run {n} discarded: {why}"));
    }
    for m in &e.misses {
        held.push(format!(
            "step {} {} = {} above its threshold {}",
            m.step,
            m.name,
            trim(m.observed),
            trim(m.max)
        ));
    }
    if !held.is_empty() {
        return Decision {
            verdict: Verdict::Hold,
            reason: held.join("; "),
            bounds: None,
        };
    }
    let mut narrower = Vec::new();
    if e.completed_runs < FULL_REPEATS {
        narrower.push(format!(
            "{} staircase(s), fewer than {FULL_REPEATS}",
            e.completed_runs
        ));
    }
    if e.hold_scale < 1.0 {
        narrower.push(format!("holds scaled to {}", e.hold_scale));
    }
    if !e.not_tested.is_empty() {
        narrower.push(format!("not tested: {}", e.not_tested.join("; ")));
    }
    if narrower.is_empty() {
        return Decision {
            verdict: Verdict::Promote,
            reason: "every threshold met and every invariant zero over the full envelope".into(),
            bounds: None,
        };
    }
    Decision {
        verdict: Verdict::Limited,
        reason: format!(
            "every threshold met and every invariant zero, within the tested envelope only: {}",
            narrower.join("; ")
        ),
        bounds: Some(bounds),
    }
}

/// A number as a person writes it: no `.0` on whole values.
pub fn trim(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds() -> Bounds {
        Bounds {
            max_concurrency: 30,
            longest_session_s: 300,
            features: vec!["quiet".into()],
        }
    }

    fn clean() -> Evidence {
        Evidence {
            invariants: vec![
                ("negative_counter".into(), 0),
                ("duplicate_owner".into(), 0),
            ],
            completed_runs: 3,
            hold_scale: 1.0,
            ..Evidence::default()
        }
    }

    #[test]
    fn the_full_envelope_clean_is_a_promote() {
        assert_eq!(decide(&clean(), bounds()).verdict, Verdict::Promote);
    }

    #[test]
    fn a_broken_invariant_is_a_rollback_whatever_else_passed() {
        let mut e = clean();
        e.invariants.push(("leaked_counter".into(), 4));
        e.misses.push(Miss {
            step: "A".into(),
            name: "reply_p95_ms".into(),
            observed: 9.0,
            max: 1.0,
        });
        let d = decide(&e, bounds());
        assert_eq!(d.verdict, Verdict::Rollback);
        assert_eq!(d.reason, "invariants broken: leaked_counter = 4");
    }

    #[test]
    fn a_missed_threshold_or_a_discarded_run_is_a_hold_that_names_it() {
        let mut e = clean();
        e.misses.push(Miss {
            step: "B".into(),
            name: "reply_p95_ms".into(),
            observed: 1234.0,
            max: 1.0,
        });
        e.discarded.push((2, "the balancer did not answer".into()));
        let d = decide(&e, bounds());
        assert_eq!(d.verdict, Verdict::Hold);
        assert!(
            d.reason
                .contains("step B reply_p95_ms = 1234 above its threshold 1"),
            "{}",
            d.reason
        );
        assert!(
            d.reason
                .contains("run 2 discarded: the balancer did not answer")
        );
    }

    #[test]
    fn narrower_evidence_is_limited_to_what_was_tested() {
        let mut e = clean();
        e.completed_runs = 1;
        e.hold_scale = 0.05;
        e.not_tested.push("SIP".into());
        let d = decide(&e, bounds());
        assert_eq!(d.verdict, Verdict::Limited);
        assert_eq!(d.bounds, Some(bounds()));
        for part in ["1 staircase(s)", "holds scaled to 0.05", "not tested: SIP"] {
            assert!(d.reason.contains(part), "{}", d.reason);
        }
    }
}
