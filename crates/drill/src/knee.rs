//! Finding the knee: a staircase of committed calls against one instance
//! that grows until a promise breaks, repeated, and the signed receipt
//! that names the knee and the recommended `admission.max_concurrent_calls`
//! (`callgate drill --find-knee`; docs/drill.md, "Finding the knee").
//!
//! What it is: the judgement, pure — what one step observed ([`Step`]) in,
//! whether it held and why not ([`judge`]); a staircase's knee
//! ([`Staircase::knee`]); the knee across staircases and the cap it
//! recommends ([`Finding::of`]); and the receipt ([`KneeReceipt`]). The
//! conductor that dials the calls and reads the instance lives with the
//! command line, which owns the rig.
//!
//! What it never does: invent a level. A staircase whose every step held
//! found no knee, and says so (`found: false`, the knee is then "at least"
//! the top step); a step the rig could not offer honestly (its own media
//! clock fell behind) ends the staircase as a rig limit, never as the
//! instance's knee.

use std::collections::BTreeMap;
use std::path::Path;

use ed25519_dalek::SigningKey;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::error::DrillError;
use crate::sign;

/// Names the document (and its shape's revision).
pub const KIND: &str = "callgate-knee-receipt/v1";

/// What a step must keep to hold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    /// Reply latency (end of speech → first reply audio), p95 over the
    /// step's replies.
    pub reply_p95_ms: u64,
    /// The instance ceiling's bound: the media clock's p99 lateness.
    pub max_lag_ms: u64,
    /// Dead air longer than this while a reply is owed makes a caller
    /// silent (`call.reply_stall_ms` + 500 ms).
    pub silence_ms: u64,
}

/// What one step of a staircase observed: `level` calls held in
/// conversation at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub level: u32,
    pub offered: u32,
    pub admitted: u32,
    /// Refusals by reason (`instance_overloaded`, `queue_full`, …).
    pub refused: BTreeMap<String, u32>,
    /// Admitted callers owed a reply who heard more than
    /// [`Limits::silence_ms`] of dead air.
    pub silent: u32,
    /// Replies heard, and their p95 latency (`None` when none was heard).
    pub replies: u32,
    pub reply_p95_ms: Option<u64>,
    /// The highest p99 lateness of the instance's media clock its
    /// `/admin/status` reported during the step, ms.
    pub peak_lag_p99_ms: f64,
    /// The most calls the instance held at once during the step.
    pub peak_active: u64,
    /// The instance ceiling's value when it first bound (the fewest calls
    /// active in the window before it tripped), if it did.
    pub ceiling_at_trip: Option<u64>,
    /// The watchdog's stalls by culprit.
    pub stalls: BTreeMap<String, u64>,
    /// Ownership heartbeats that timed out or failed.
    pub heartbeat_failures: u64,
    /// The instance's CPU over the step, in cores.
    pub server_cores: f64,
    /// Why the load generator's own media clock fell behind, if it did.
    pub rig_behind: Option<String>,
    pub duration_s: f64,
}

/// A step's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", content = "why", rename_all = "snake_case")]
pub enum Verdict {
    /// Every promise kept.
    Held,
    /// A promise broke; each line names one.
    Broke(Vec<String>),
    /// The rig could not offer this level honestly: not the instance's knee.
    RigLimit(String),
}

/// Judges one step against `limits`.
pub fn judge(s: &Step, limits: &Limits) -> Verdict {
    if let Some(why) = &s.rig_behind {
        return Verdict::RigLimit(format!("the load generator fell behind: {why}"));
    }
    let mut broke = Vec::new();
    let refused: u32 = s.refused.values().sum();
    if refused > 0 {
        let reasons: Vec<String> = s.refused.iter().map(|(r, n)| format!("{r}×{n}")).collect();
        broke.push(format!(
            "admission: {refused} refused ({})",
            reasons.join(", ")
        ));
    }
    if s.silent > 0 {
        broke.push(format!(
            "silence: {} callers heard over {} ms of dead air",
            s.silent, limits.silence_ms
        ));
    }
    match s.reply_p95_ms {
        Some(p) if p > limits.reply_p95_ms => {
            broke.push(format!("reply: p95 {p} ms over {} ms", limits.reply_p95_ms))
        }
        None if s.admitted > 0 => broke.push("reply: no reply heard".into()),
        _ => {}
    }
    if limits.max_lag_ms > 0 && s.peak_lag_p99_ms > limits.max_lag_ms as f64 {
        broke.push(format!(
            "instance: media clock p99 {:.0} ms over {} ms",
            s.peak_lag_p99_ms, limits.max_lag_ms
        ));
    }
    let stalls: u64 = s.stalls.values().sum();
    if stalls > 0 {
        let by: Vec<String> = s.stalls.iter().map(|(c, n)| format!("{c}×{n}")).collect();
        broke.push(format!("watchdog: {stalls} stalls ({})", by.join(", ")));
    }
    if s.heartbeat_failures > 0 {
        broke.push(format!(
            "ownership: {} heartbeats lost",
            s.heartbeat_failures
        ));
    }
    if broke.is_empty() {
        Verdict::Held
    } else {
        Verdict::Broke(broke)
    }
}

/// One staircase: its steps in order, each with its verdict. The
/// staircase stops at the first step that did not hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Staircase {
    pub number: u32,
    pub steps: Vec<(Step, Verdict)>,
}

/// Where a staircase's knee lies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaircaseKnee {
    pub number: u32,
    /// The highest level that held (0: not even the first step did).
    pub knee: u32,
    /// The level that broke, if one did.
    pub broke_at: Option<u32>,
    /// Why it broke, or why the staircase ended without breaking.
    pub why: Vec<String>,
    /// Whether a knee was found: a step broke. `false` when every step
    /// held (the knee is at least the top step) or the rig ran out first.
    pub found: bool,
}

impl Staircase {
    /// The knee: the highest level held before the first step that did not.
    pub fn knee(&self) -> StaircaseKnee {
        let mut knee = 0;
        for (step, verdict) in &self.steps {
            let (found, why) = match verdict {
                Verdict::Held => {
                    knee = knee.max(step.level);
                    continue;
                }
                Verdict::Broke(why) => (true, why.clone()),
                Verdict::RigLimit(why) => (false, vec![why.clone()]),
            };
            return StaircaseKnee {
                number: self.number,
                knee,
                broke_at: found.then_some(step.level),
                why,
                found,
            };
        }
        StaircaseKnee {
            number: self.number,
            knee,
            broke_at: None,
            why: vec!["every step held: the knee is above the top step".into()],
            found: false,
        }
    }
}

/// The knee across staircases and the cap it recommends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// The lowest knee of the staircases: the level every repeat held.
    pub knee: u32,
    /// Each staircase's knee, in order (the spread).
    pub knees: Vec<u32>,
    /// Whether every staircase found its knee (a step broke in each).
    pub found: bool,
    /// The share taken off the knee for the recommendation.
    pub margin: f64,
    /// ⌊knee × (1 − margin)⌋: the recommended
    /// `admission.max_concurrent_calls` for an instance squeezed like this
    /// one (0 when no level held: the instance could not be recommended a
    /// cap at these levels).
    pub recommended_max_concurrent_calls: u32,
    /// Where the instance ceiling first bound, per staircase that tripped
    /// it: what the throttled instance itself refused above.
    pub ceiling_at_trip: Vec<u64>,
    /// The sentence a reader takes away.
    pub summary: String,
}

impl Finding {
    /// The finding of `staircases` with `margin` (0 ≤ margin < 1).
    pub fn of(staircases: &[Staircase], margin: f64) -> Finding {
        let knees: Vec<StaircaseKnee> = staircases.iter().map(Staircase::knee).collect();
        let knee = knees.iter().map(|k| k.knee).min().unwrap_or(0);
        let found = !knees.is_empty() && knees.iter().all(|k| k.found);
        let recommended = recommend(knee, margin);
        let ceiling_at_trip = staircases
            .iter()
            .filter_map(|s| s.steps.iter().find_map(|(st, _)| st.ceiling_at_trip))
            .collect();
        let summary = match (knee, found) {
            (0, _) => "no level held: lower the first step".to_string(),
            (k, true) => format!(
                "the instance kept every promise up to {k} calls in every staircase; recommended cap {recommended} ({:.0}% margin)",
                margin * 100.0
            ),
            (k, false) => format!(
                "not every staircase broke: the knee is at least {k} calls; recommended cap {recommended} ({:.0}% margin) is a floor, not a measured knee",
                margin * 100.0
            ),
        };
        Finding {
            knee,
            knees: knees.iter().map(|k| k.knee).collect(),
            found,
            margin,
            recommended_max_concurrent_calls: recommended,
            ceiling_at_trip,
            summary,
        }
    }
}

/// ⌊knee × (1 − margin)⌋.
pub fn recommend(knee: u32, margin: f64) -> u32 {
    let m = margin.clamp(0.0, 1.0);
    (f64::from(knee) * (1.0 - m)).floor() as u32
}

/// How the instance was squeezed, and what that means for the knee.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Squeeze {
    /// `quota 0.15`, `3 burners`, `pinned`.
    pub how: String,
    pub server_cpus: String,
    pub rig_cpus: String,
    /// Why the instance was squeezed, and how to read the knee.
    pub note: String,
}

/// The configuration the instance ran with, as far as the knee depends on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerUnderTest {
    pub version: String,
    /// SHA-256 of the instance's configuration (as JSON).
    pub config_sha256: String,
    pub max_lag_ms: u64,
    pub lag_window_ms: u64,
    pub reply_stall_ms: u64,
    /// The capacity its provider and database ceilings gave it.
    pub configured_capacity: u64,
}

/// How each step was offered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offer {
    /// The levels, in order.
    pub levels: Vec<u32>,
    /// Calls placed per held slot: a caller who hangs up is replaced
    /// until this many calls have used the slot.
    pub calls_per_slot: u32,
    pub utterances_per_call: u32,
    pub dial_rate_per_s: f64,
    pub carrier: String,
}

/// A staircase's line in the receipt; its steps are in `file`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StaircaseLine {
    #[serde(flatten)]
    pub knee: StaircaseKnee,
    pub steps: usize,
    pub file: String,
    /// SHA-256 of `file`'s bytes.
    pub sha256: String,
}

/// The signed knee receipt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KneeReceipt {
    pub kind: String,
    pub created_at: String,
    pub signed_by: String,
    /// `git describe` of the client that ran the staircase.
    pub client: String,
    pub server: ServerUnderTest,
    pub squeeze: Squeeze,
    pub limits: Limits,
    pub offer: Offer,
    pub staircases: Vec<StaircaseLine>,
    pub finding: Finding,
    /// What this receipt does not show.
    pub not_tested: Vec<String>,
}

impl KneeReceipt {
    /// Writes `out/staircases/staircase-N.json` for each staircase, fills
    /// in their lines (digest included), the finding and the time, then signs the
    /// receipt with `key` and writes `out/receipt.yaml`.
    ///
    /// # Errors
    /// `out` cannot be written.
    pub fn seal(
        mut self,
        out: &Path,
        staircases: &[Staircase],
        margin: f64,
        key: &SigningKey,
    ) -> Result<KneeReceipt, DrillError> {
        let io =
            |what: &str, e: &dyn std::fmt::Display| DrillError::Receipt(format!("{what}: {e}"));
        std::fs::create_dir_all(out.join("staircases")).map_err(|e| io("staircases", &e))?;
        self.staircases.clear();
        for s in staircases {
            let file = format!("staircases/staircase-{}.json", s.number);
            let bytes = serde_json::to_vec_pretty(s).map_err(|e| io(&file, &e))?;
            std::fs::write(out.join(&file), &bytes).map_err(|e| io(&file, &e))?;
            self.staircases.push(StaircaseLine {
                knee: s.knee(),
                steps: s.steps.len(),
                sha256: sign::hex(&Sha256::digest(&bytes)),
                file,
            });
        }
        self.finding = Finding::of(staircases, margin);
        self.kind = KIND.into();
        self.created_at = jiff::Timestamp::now().to_string();
        self.signed_by = sign::public_hex(key);
        let body = serde_yaml_ng::to_string(&self).map_err(|e| io("receipt.yaml", &e))?;
        std::fs::write(out.join("receipt.yaml"), sign::sign(&body, key))
            .map_err(|e| io("receipt.yaml", &e))?;
        Ok(self)
    }

    /// Checks each staircase file beside the receipt against its digest;
    /// one line per problem.
    pub fn check_files(&self, dir: &Path) -> (usize, Vec<String>) {
        let mut ok = 0;
        let mut problems = Vec::new();
        for line in &self.staircases {
            match std::fs::read(dir.join(&line.file)) {
                Ok(b) if sign::hex(&Sha256::digest(&b)) == line.sha256 => ok += 1,
                Ok(_) => problems.push(format!(
                    "{} differs from the file the receipt was signed with",
                    line.file
                )),
                Err(e) => problems.push(format!("{}: {e}", line.file)),
            }
        }
        (ok, problems)
    }
}

#[cfg(test)]
mod tests;
