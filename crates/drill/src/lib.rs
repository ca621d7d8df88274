//! `callgate-drill` — the committed-load drill: a staircase of sessions
//! with deliberate silence, synchronized activation and lifecycle pressure,
//! run for real against callgate instances behind a balancer, repeated,
//! ending in a signed session-capacity receipt (docs/drill.md).
//!
//! What it is: the conductor ([`run::Conductor`]) that places each step's
//! callers (the load tool's cued callers, one role each: [`Role`]; SIP legs
//! through the [`sip::SipDialer`] its caller gives, if any), finds
//! them in the ledger (`GET /v1/sessions?carrier_call_id=`), activates the
//! silent ones inside the fixture's window, drops the disconnecters,
//! drains one seeded instance, samples every instance's `/admin/status`
//! each second, hangs everybody up, waits for every receipt to close, and
//! asks the auditor (`GET /admin/audit`). From what it observed it computes
//! the five SLO families per step ([`slo`]), the invariants, the pressure
//! calibration ([`calibrate`]) and the decision ([`decision`]), and writes
//! the output folder: `receipt.yaml` (signed, [`sign`]), `runs/run-N.json`
//! (everything each run observed), `sessions/<id>.json` (the worst
//! sessions' receipts) and `fixture.toml`.
//!
//! What it never does: change an instance's configuration (the suggested
//! weights are only written down), discard a run (a failed one is kept and
//! counted), or fill in a value it did not measure (what it could not test
//! is named in `not_tested`). It is a client: the server library knows
//! nothing of it.
//!
//! How to drive it:
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use callgate_drill::{Drill, Fixture, target::{Dialing, Instance}};
//! let text = std::fs::read_to_string("drills/voice-onboarding-v1.toml")?;
//! let fixture = Fixture::from_toml(&text)?;
//! let instances = vec![
//!     Instance::new("http://127.0.0.1:9091", Some("admin-token".into()))?,
//!     Instance::new("http://127.0.0.1:9092", Some("admin-token".into()))?,
//! ];
//! let dialing = Dialing { balancer: "ws://127.0.0.1:8080".into(), twilio_token: None,
//!     partner_key: Some("key".into()), sip: None };
//! let key = callgate_drill::sign::load_key("drill.key".as_ref())?;
//! let drill = Drill { fixture, fixture_text: text, dialing, instances, hold_scale: 1.0,
//!     revisions: Default::default(), progress: true };
//! let out = drill.run("drill-out".as_ref(), &key).await?;
//! println!("{:?}: {}", out.decision.verdict, out.decision.reason);
//! callgate_drill::verify::folder("drill-out".as_ref(), None).await?;
//! # Ok(()) }
//! ```

pub mod calibrate;
pub mod decision;
mod error;
pub mod fixture;
pub mod knee;
pub mod observed;
mod progress;
pub mod receipt;
pub mod roles;
pub mod run;
pub mod sign;
pub mod sip;
pub mod slo;
pub mod target;
pub mod verify;

use std::path::Path;
use std::sync::Arc;

use ed25519_dalek::SigningKey;

pub use decision::{Decision, Verdict};
pub use error::DrillError;
pub use fixture::{Fixture, Ingress, Role};
pub use receipt::{Receipt, Revisions};

use crate::observed::Run;
use crate::receipt::{FixtureRef, RunLine, Runs, Worst};
use crate::target::{Dialing, Instance};

/// One drill: the fixture, what it is pointed at, and how it reports.
pub struct Drill {
    pub fixture: Fixture,
    /// The fixture file's bytes (hashed into the receipt, copied out).
    pub fixture_text: String,
    pub dialing: Dialing,
    pub instances: Vec<Instance>,
    /// Multiplies every step's hold (never below the fixture's `min_hold_s`).
    pub hold_scale: f64,
    /// Client and routing revisions, as the caller read them.
    pub revisions: Revisions,
    /// Draw the step bar on stderr.
    pub progress: bool,
}

impl Drill {
    /// Runs every staircase, writes `out` and signs the receipt with `key`.
    ///
    /// # Errors
    /// The fixture asks for more instances than given, an instance cannot
    /// be asked before the first run, or `out` cannot be written. Trouble
    /// during a run does not stop the drill: the run is kept as discarded.
    pub async fn run(&self, out: &Path, key: &SigningKey) -> Result<Receipt, DrillError> {
        if self.instances.len() != self.fixture.instances as usize {
            return Err(DrillError::Fixture(format!(
                "the fixture needs {} instances, {} given",
                self.fixture.instances,
                self.instances.len()
            )));
        }
        let mut revisions = self.revisions.clone();
        let mut names = Vec::new();
        for i in &self.instances {
            let s = i.status().await?;
            let name = s["instance"].as_str().unwrap_or("").to_string();
            let version = s["version"].as_str().unwrap_or("unreported").to_string();
            revisions.servers.insert(name.clone(), version);
            names.push(name);
        }
        let live = Arc::new(run::Live::default());
        let bar = self
            .progress
            .then(|| tokio::spawn(progress::draw(Arc::clone(&live), self.fixture.repeats)));
        let conductor = run::Conductor {
            fixture: &self.fixture,
            dialing: &self.dialing,
            instances: &self.instances,
            hold_scale: self.hold_scale,
            live,
        };
        let mut runs = Vec::new();
        for n in 1..=self.fixture.repeats {
            let seed = self.fixture.seed.wrapping_add(u64::from(n));
            runs.push(conductor.run(n, seed).await);
        }
        if let Some(bar) = bar {
            bar.abort();
            eprintln!();
        }
        let receipt = self.receipt(&runs, revisions, names, key);
        write_folder(out, self, &runs, &receipt, key)?;
        Ok(receipt)
    }

    fn receipt(
        &self,
        runs: &[Run],
        revisions: Revisions,
        instances: Vec<String>,
        key: &SigningKey,
    ) -> Receipt {
        let completed = runs.iter().filter(|r| r.completed()).count() as u32;
        let list = runs.iter().map(run_line).collect();
        let max_tested_concurrency = runs
            .iter()
            .filter(|r| r.completed())
            .map(receipt::max_concurrency)
            .max()
            .unwrap_or(0);
        let points = calibrate::points(runs, self.fixture.roles.tool_utterance);
        let reply_mark = self.fixture.thresholds.reply_p95_ms as f64;
        let mut r = Receipt {
            kind: receipt::KIND.into(),
            created_at: jiff::Timestamp::now().to_string(),
            signed_by: sign::public_hex(key),
            fixture: FixtureRef {
                version: self.fixture.version.clone(),
                sha256: sha256_hex(self.fixture_text.as_bytes()),
                seed: self.fixture.seed,
                repeats: self.fixture.repeats,
                hold_scale: self.hold_scale,
                drain_policy: self.fixture.drain_policy.clone(),
            },
            revisions,
            providers: providers(runs),
            instances,
            runs: Runs {
                completed,
                discarded: runs.len() as u32 - completed,
                list,
            },
            max_tested_concurrency,
            checks: receipt::checks(runs, &self.fixture),
            invariants: receipt::invariants(runs),
            worst_sessions: worst(runs),
            not_tested: receipt::not_tested(runs),
            pressure_calibration: calibrate::calibrate(&points, reply_mark),
            decision: Decision {
                verdict: Verdict::Hold,
                reason: String::new(),
                bounds: None,
            },
        };
        r.decision = receipt::decide(&r, runs);
        r
    }
}

fn run_line(r: &Run) -> RunLine {
    RunLine {
        number: r.number,
        seed: r.seed,
        started_at: r.started_at.clone(),
        duration_s: r.duration_ms as f64 / 1_000.0,
        completed: r.completed(),
        failure: r.failure.clone(),
        drained: r.drain.as_ref().map(|d| d.instance.clone()),
        sessions: r.sessions.len(),
        max_concurrency: receipt::max_concurrency(r),
        file: format!("runs/run-{}.json", r.number),
    }
}

/// The provider labels the sessions' receipts carried (the first of each).
fn providers(runs: &[Run]) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    for s in runs.iter().flat_map(|r| &r.sessions) {
        if let Some(m) = s.receipt.as_ref().and_then(|r| r["providers"].as_object()) {
            for (k, v) in m {
                if let Some(v) = v.as_str() {
                    out.entry(k.clone()).or_insert_with(|| v.to_string());
                }
            }
        }
    }
    out
}

fn worst(runs: &[Run]) -> std::collections::BTreeMap<String, Worst> {
    let mut out = std::collections::BTreeMap::new();
    for (family, run, s, value) in receipt::worst_sessions(runs) {
        let (Some(id), Some(r)) = (&s.session_id, &s.receipt) else {
            continue;
        };
        out.insert(
            family.to_string(),
            Worst {
                session_id: id.clone(),
                run,
                role: s.role,
                value_ms: value,
                receipt: format!("sessions/{id}.json"),
                receipt_sha256: receipt::receipt_digest(r),
            },
        );
    }
    out
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sign::hex(&sha2::Sha256::digest(bytes))
}

/// Writes the output folder; the receipt last, signed.
fn write_folder(
    out: &Path,
    drill: &Drill,
    runs: &[Run],
    receipt: &Receipt,
    key: &SigningKey,
) -> Result<(), DrillError> {
    let io = |what: &str, e: &dyn std::fmt::Display| DrillError::Receipt(format!("{what}: {e}"));
    for dir in ["runs", "sessions"] {
        std::fs::create_dir_all(out.join(dir)).map_err(|e| io(dir, &e))?;
    }
    std::fs::write(out.join("fixture.toml"), &drill.fixture_text)
        .map_err(|e| io("fixture.toml", &e))?;
    for run in runs {
        let path = out.join(format!("runs/run-{}.json", run.number));
        let text = serde_json::to_string_pretty(&strip_events(run)).map_err(|e| io("run", &e))?;
        std::fs::write(&path, text).map_err(|e| io(&path.display().to_string(), &e))?;
    }
    for w in receipt.worst_sessions.values() {
        let Some(r) = runs
            .iter()
            .flat_map(|r| &r.sessions)
            .find(|s| s.session_id.as_deref() == Some(w.session_id.as_str()))
            .and_then(|s| s.receipt.as_ref())
        else {
            continue;
        };
        let text = serde_json::to_string_pretty(r).map_err(|e| io("session", &e))?;
        std::fs::write(out.join(&w.receipt), text).map_err(|e| io(&w.receipt, &e))?;
    }
    let body = serde_yaml_ng::to_string(receipt).map_err(|e| io("receipt.yaml", &e))?;
    let signed = sign::sign(&body, key);
    std::fs::write(out.join("receipt.yaml"), signed).map_err(|e| io("receipt.yaml", &e))
}

/// The run as written to `runs/run-N.json`: each receipt without its raw
/// events (the worst sessions' whole receipts are in `sessions/`).
fn strip_events(run: &Run) -> Run {
    let mut r = run.clone();
    for s in &mut r.sessions {
        if let Some(obj) = s.receipt.as_mut().and_then(|v| v.as_object_mut()) {
            obj.remove("events");
            obj.remove("events_page");
        }
    }
    r
}
