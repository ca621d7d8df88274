//! The conductor of one staircase run: starts each step's callers, waits
//! until the ledger has them, activates the silent ones inside the window,
//! drops the disconnecters, drains the seeded victim, holds, hangs
//! everybody up, waits for every receipt to close, and asks the auditor.
//!
//! It never stops half-way on a caller's trouble: a refused, silent or
//! failed caller is what the run measures. Only an instance that cannot be
//! asked (or drained) makes the run a failed one — kept, and counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use callgate_load::driver::{CUE_QUEUE, Dial, place_cued_call};
use callgate_load::progress::Progress;
use callgate_load::{Auth, CallRecord, Cue};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until};

use crate::fixture::{Fixture, Ingress, Role, Step};
use crate::observed::{DrainSeen, Run, Sample, Session, StepSpan};
use crate::roles::{self, Seat};
use crate::sip::SipEnded;
use crate::target::{Dialing, Instance};

/// Longest a dialled session may take to appear in the ledger.
pub const ADMIT_WITHIN: Duration = Duration::from_secs(30);
/// How often the ledger is asked while waiting for admissions and closes.
const LOOKUP_POLL: Duration = Duration::from_millis(250);
/// How often every instance's status is sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// Longest wait for every caller to end after the hang-up (a WebSocket
/// caller closes at once; a SIP leg's planned hold ends before the
/// staircase does).
pub const CALLERS_END_WITHIN: Duration = Duration::from_secs(120);
/// Longest wait for every receipt to close after the hang-up.
pub const CLEANUP_WITHIN: Duration = Duration::from_secs(60);
/// Longest wait for a drained instance to say it is draining.
const DRAIN_SEEN_WITHIN: Duration = Duration::from_secs(5);
/// Beyond the whole staircase's holds: the callers' own hard limit.
const CALL_SLACK: Duration = Duration::from_secs(300);

/// What a run is pointed at and how long its holds are.
pub struct Conductor<'a> {
    pub fixture: &'a Fixture,
    pub dialing: &'a Dialing,
    pub instances: &'a [Instance],
    /// Multiplies every `hold_s` (never below `min_hold_s`).
    pub hold_scale: f64,
    /// Counters the terminal's step bar reads.
    pub live: Arc<Live>,
}

/// What the terminal shows while a run goes: set by the conductor.
#[derive(Default)]
pub struct Live {
    pub progress: std::sync::Mutex<Option<Arc<Progress>>>,
    pub step: std::sync::Mutex<String>,
    pub latest: std::sync::Mutex<Vec<Sample>>,
    pub violations: AtomicUsize,
    /// The run going (1-based).
    pub run: std::sync::atomic::AtomicU32,
}

struct Placed {
    session: Session,
    /// A SIP leg's has no receiver: it cannot be cued.
    cues: mpsc::Sender<Cue>,
    task: Option<JoinHandle<Ended>>,
}

/// How a placed session ended, by the kind of caller it was.
enum Ended {
    Ws(Box<CallRecord>),
    Sip(SipEnded),
}

impl Conductor<'_> {
    fn hold(&self, step: &Step) -> Duration {
        let scaled = Duration::from_secs_f64(step.hold_s as f64 * self.hold_scale.max(0.0));
        scaled.max(Duration::from_secs(self.fixture.min_hold_s))
    }

    fn call_timeout(&self) -> Duration {
        let holds: Duration = self.fixture.steps.iter().map(|s| self.hold(s)).sum();
        holds + ADMIT_WITHIN * (self.fixture.steps.len() as u32 + 1) + CALL_SLACK
    }

    /// Runs staircase `number` (1-based) with `seed`.
    pub async fn run(&self, number: u32, seed: u64) -> Run {
        self.live.run.store(number, Ordering::Relaxed);
        let epoch = Instant::now();
        let started_at = jiff::Timestamp::now().to_string();
        let total: u32 = self.fixture.max_concurrency();
        let progress = Progress::new(total as usize);
        *lock(&self.live.progress) = Some(Arc::clone(&progress));
        let step_now = Arc::new(AtomicUsize::new(0));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let sampler = tokio::spawn(sample_loop(
            self.instances.to_vec(),
            epoch,
            Arc::clone(&step_now),
            Arc::clone(&samples),
            Arc::clone(&self.live),
        ));
        let weights: Vec<(Ingress, u32)> =
            self.fixture.ingress.iter().map(|(i, w)| (*i, *w)).collect();
        let mut state = RunState {
            epoch,
            seed,
            // Drawn for the whole run: the fixture's proportions, seeded.
            ingresses: roles::ingresses(&weights, total as usize, seed),
            progress,
            placed: Vec::new(),
            spans: Vec::new(),
            drain: None,
            victim: None,
        };
        let failure = self.staircase(&mut state, &step_now).await.err();
        *lock(&self.live.step) = "hanging up".into();
        let cleanup = self.end_all(&mut state).await;
        sampler.abort();
        let violations = self.audit(&state).await;
        self.live
            .violations
            .fetch_add(violations.len(), Ordering::Relaxed);
        let (cleanup_converged_ms, cleanup_failure) = match cleanup {
            Ok(ms) => (Some(ms), None),
            Err(e) => (None, Some(e)),
        };
        let mut drain = state.drain.take();
        if let (Some(d), Some(v)) = (drain.as_mut(), state.victim) {
            d.undrained = self.instances[v].undrain().await.unwrap_or(false);
            // The next run must find it back in the balancer's rotation.
            sleep(Duration::from_millis(self.fixture.drain_settle_ms)).await;
        }
        let samples = std::mem::take(&mut *samples.lock().await);
        Run {
            number,
            seed,
            started_at,
            duration_ms: ms(epoch.elapsed()),
            steps: state.spans,
            sessions: state.placed.into_iter().map(|p| p.session).collect(),
            samples,
            drain,
            cleanup_converged_ms,
            violations,
            failure: failure.or(cleanup_failure),
        }
    }

    async fn staircase(&self, st: &mut RunState, step_now: &AtomicUsize) -> Result<(), String> {
        for (i, step) in self.fixture.steps.iter().enumerate() {
            step_now.store(i, Ordering::Relaxed);
            *lock(&self.live.step) = step.name.clone();
            let started_ms = ms(st.epoch.elapsed());
            let first = st.placed.len();
            for role in seats_of(step) {
                self.place(st, i, role, false);
            }
            self.admit(st, first).await?;
            let activation = match step.activate_within_s {
                Some(w) => self.activate(st, Duration::from_secs(w)).await,
                None => None,
            };
            match step.drain_then_sessions {
                None => sleep(self.hold(step)).await,
                Some(extra) => {
                    // Half the hold lets the step's callers say their lines
                    // before the disruption; the rest follows it.
                    sleep(self.hold(step) / 2).await;
                    self.disrupt(st, first);
                    self.drain(st).await?;
                    sleep(Duration::from_millis(self.fixture.drain_settle_ms)).await;
                    let after = st.placed.len();
                    for _ in 0..extra {
                        self.place(st, i, Role::Speaker, true);
                    }
                    self.admit(st, after).await?;
                    sleep(self.hold(step) / 2).await;
                }
            }
            st.spans.push(StepSpan {
                name: step.name.clone(),
                started_ms,
                ended_ms: ms(st.epoch.elapsed()),
                activation,
            });
        }
        Ok(())
    }

    fn place(&self, st: &mut RunState, step_index: usize, role: Role, after_drain: bool) {
        let step = self.fixture.steps[step_index].name.as_str();
        let index = st.placed.len();
        let drawn = st.ingresses.get(index).copied().unwrap_or(Ingress::Twilio);
        let ingress = match (role, drawn) {
            // Only partner calls resume.
            (Role::Reconnecter, _) => Ingress::Partner,
            // A SIP leg can only be a speaker, and only with a dialer.
            (Role::Speaker, Ingress::Sip) if self.dialing.sip.is_some() => Ingress::Sip,
            (_, Ingress::Sip) => Ingress::Twilio,
            (_, other) => other,
        };
        if ingress == Ingress::Sip {
            let hold = self.remaining(step_index, after_drain);
            return self.place_sip(st, step, role, after_drain, hold);
        }
        let seat = Seat {
            index,
            role,
            ingress,
        };
        let plan = roles::plan(seat, &self.fixture.roles, st.seed, self.call_timeout());
        let carrier_call_id = plan.ids.call.to_string();
        let dial = self.dial(ingress);
        let (cues, rx) = mpsc::channel(CUE_QUEUE);
        let progress = Arc::clone(&st.progress);
        let task = tokio::spawn(async move {
            Ended::Ws(Box::new(place_cued_call(plan, &dial, &progress, rx).await))
        });
        let dialled_ms = ms(st.epoch.elapsed());
        st.placed.push(Placed {
            session: Session::new(
                index,
                step,
                role,
                ingress,
                carrier_call_id,
                dialled_ms,
                after_drain,
            ),
            cues,
            task: Some(task),
        });
    }

    /// A SIP leg: its Call-ID is fresh and known, so the ledger finds it.
    fn place_sip(
        &self,
        st: &mut RunState,
        step: &str,
        role: Role,
        after_drain: bool,
        hold: Duration,
    ) {
        let Some(dialer) = self.dialing.sip.clone() else {
            return;
        };
        let index = st.placed.len();
        let call_id = format!("drill-{:016x}-{index}@callgate", st.seed);
        let (cues, _) = mpsc::channel(1);
        let call = dialer.call(call_id.clone(), hold);
        let task = tokio::spawn(async move { Ended::Sip(call.await) });
        st.placed.push(Placed {
            session: Session::new(
                index,
                step,
                role,
                Ingress::Sip,
                call_id,
                ms(st.epoch.elapsed()),
                after_drain,
            ),
            cues,
            task: Some(task),
        });
    }

    /// What is left of the staircase's planned holds from a session placed
    /// in step `i` (after its drain, when `after_drain`): how long a SIP leg
    /// holds the line, since it cannot be told to hang up.
    fn remaining(&self, i: usize, after_drain: bool) -> Duration {
        let own = self.hold(&self.fixture.steps[i]);
        let own = if after_drain { own / 2 } else { own };
        let later: Duration = self.fixture.steps[i + 1..]
            .iter()
            .map(|s| self.hold(s))
            .sum();
        own + later
    }

    fn dial(&self, ingress: Ingress) -> Dial {
        match ingress {
            Ingress::Twilio => Dial {
                url: self.dialing.twilio_url(),
                auth: self
                    .dialing
                    .twilio_token
                    .clone()
                    .map_or(Auth::None, Auth::TwilioSignature),
            },
            Ingress::Partner | Ingress::Sip => Dial {
                url: self.dialing.partner_url(),
                auth: self
                    .dialing
                    .partner_key
                    .clone()
                    .map_or(Auth::None, Auth::Bearer),
            },
        }
    }

    /// Waits until every session from `first` on is in the ledger (or its
    /// caller has ended: refused, failed). An instance that cannot be asked
    /// fails the run.
    async fn admit(&self, st: &mut RunState, first: usize) -> Result<(), String> {
        let deadline = Instant::now() + ADMIT_WITHIN;
        loop {
            let mut waiting = 0;
            for p in &mut st.placed[first..] {
                if p.session.session_id.is_some() || p.task.as_ref().is_none_or(|t| t.is_finished())
                {
                    continue;
                }
                let found = lookup_any(self.instances, &p.session.carrier_call_id).await?;
                match found {
                    Some((id, owner)) => {
                        p.session.session_id = Some(id);
                        p.session.owner = Some(owner);
                    }
                    None => waiting += 1,
                }
            }
            if waiting == 0 || Instant::now() >= deadline {
                return Ok(());
            }
            sleep(LOOKUP_POLL).await;
        }
    }

    /// Tells every quiet session not yet activated to speak, spread
    /// uniformly (seeded) over `window`; returns the first and last cue.
    async fn activate(&self, st: &mut RunState, window: Duration) -> Option<(u64, u64)> {
        let mut rng = StdRng::seed_from_u64(st.seed ^ 0xac71);
        let mut cues: Vec<(Duration, usize)> = st
            .placed
            .iter()
            .enumerate()
            .filter(|(_, p)| p.session.role == Role::Quiet && p.session.activated_ms.is_none())
            .map(|(i, _)| (window.mul_f64(rng.random::<f64>()), i))
            .collect();
        cues.sort();
        let start = Instant::now();
        let mut span: Option<(u64, u64)> = None;
        for (offset, i) in cues {
            sleep_until(start + offset).await;
            let at = ms(st.epoch.elapsed());
            // A caller that already ended cannot be activated: its record says why.
            if st.placed[i].cues.try_send(Cue::Speak).is_ok() {
                st.placed[i].session.activated_ms = Some(at);
                span = Some(span.map_or((at, at), |(a, _)| (a, at)));
            }
        }
        span
    }

    /// Drops the step's disconnecters and reconnecters (no stop, no close);
    /// the reconnecters come back with their resume tokens.
    fn disrupt(&self, st: &mut RunState, first: usize) {
        let at = ms(st.epoch.elapsed());
        let after = Duration::from_millis(self.fixture.roles.reconnect_after_ms);
        for p in &mut st.placed[first..] {
            let cue = match p.session.role {
                Role::Disconnecter => Cue::Drop,
                Role::Reconnecter => Cue::Reconnect { after },
                _ => continue,
            };
            if p.cues.try_send(cue).is_ok() {
                p.session.dropped_ms = Some(at);
            }
        }
    }

    /// Drains the seeded victim and marks the sessions it holds.
    async fn drain(&self, st: &mut RunState) -> Result<(), String> {
        let v = StdRng::seed_from_u64(st.seed ^ 0xd7a1).random_range(0..self.instances.len());
        let victim = &self.instances[v];
        let status = victim.status().await.map_err(|e| e.to_string())?;
        let name = status["instance"].as_str().unwrap_or_default().to_string();
        let at_ms = ms(st.epoch.elapsed());
        victim.drain().await.map_err(|e| e.to_string())?;
        st.victim = Some(v);
        let mut policy = None;
        let deadline = Instant::now() + DRAIN_SEEN_WITHIN;
        while policy.is_none() && Instant::now() < deadline {
            let s = victim.status().await.map_err(|e| e.to_string())?;
            policy = s["drain"]["policy"].as_str().map(str::to_owned);
            if policy.is_none() {
                sleep(LOOKUP_POLL).await;
            }
        }
        for p in &mut st.placed {
            let open = p.task.as_ref().is_some_and(|t| !t.is_finished());
            p.session.drain_victim = open && p.session.owner.as_deref() == Some(name.as_str());
        }
        let observed = policy.clone();
        st.drain = Some(DrainSeen {
            instance: name,
            at_ms,
            policy,
            undrained: false,
        });
        match observed {
            Some(p) if p == self.fixture.drain_policy => Ok(()),
            Some(p) => Err(format!(
                "the drained instance's policy is {p}, the fixture's is {}",
                self.fixture.drain_policy
            )),
            None => Err("the drained instance never showed its drain".into()),
        }
    }

    /// Hangs every caller up, collects the records, waits for every receipt
    /// to close and reads it. `Ok(ms)`: how long the closes took.
    async fn end_all(&self, st: &mut RunState) -> Result<u64, String> {
        for p in &st.placed {
            let _ = p.cues.try_send(Cue::HangUp);
        }
        let hung_up = Instant::now();
        let mut stuck = 0;
        for p in &mut st.placed {
            let Some(mut task) = p.task.take() else {
                continue;
            };
            // A caller task that panicked leaves its session unmeasured; one
            // still running at the deadline is stopped and counted.
            match tokio::time::timeout_at(hung_up + CALLERS_END_WITHIN, &mut task).await {
                Ok(Ok(Ended::Ws(r))) => p.session.record = Some(*r),
                Ok(Ok(Ended::Sip(s))) => p.session.sip = Some(s),
                Ok(Err(_)) => {}
                Err(_) => {
                    task.abort();
                    stuck += 1;
                }
            }
        }
        if stuck > 0 {
            return Err(format!(
                "{stuck} callers had not ended {} s after the hang-up",
                CALLERS_END_WITHIN.as_secs()
            ));
        }
        // Callers that ended before the lookup found them may still be in
        // the ledger (a refused upgrade is not): ask once more.
        for p in &mut st.placed {
            if p.session.session_id.is_none()
                && let Ok(Some((id, owner))) =
                    lookup_any(self.instances, &p.session.carrier_call_id).await
            {
                p.session.session_id = Some(id);
                p.session.owner = Some(owner);
            }
        }
        let deadline = hung_up + CLEANUP_WITHIN;
        loop {
            let open = self.read_receipts(st).await;
            if open == 0 {
                return Ok(ms(hung_up.elapsed()));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{open} receipts still open {} s after the hang-up",
                    CLEANUP_WITHIN.as_secs()
                ));
            }
            sleep(LOOKUP_POLL).await;
        }
    }

    /// Reads the receipt of every session whose closed receipt is not yet
    /// held; returns how many are still open (or unreadable).
    async fn read_receipts(&self, st: &mut RunState) -> usize {
        let mut open = 0;
        for p in &mut st.placed {
            let Some(id) = p.session.session_id.clone() else {
                continue;
            };
            if p.session.receipt.as_ref().is_some_and(closed) {
                continue;
            }
            match self.instances[0].receipt(&id).await {
                Ok(r) => {
                    if !closed(&r) {
                        open += 1;
                    }
                    p.session.receipt = Some(r);
                }
                Err(_) => open += 1,
            }
        }
        open
    }

    /// The auditor's violations about this run's sessions (and those about
    /// no session in particular).
    async fn audit(&self, st: &RunState) -> Vec<serde_json::Value> {
        let ours: std::collections::HashSet<&str> = st
            .placed
            .iter()
            .filter_map(|p| p.session.session_id.as_deref())
            .collect();
        match self.instances[0].audit().await {
            Ok(all) => all
                .into_iter()
                .filter(|v| v["call_id"].as_str().is_none_or(|id| ours.contains(id)))
                .collect(),
            Err(e) => {
                vec![serde_json::json!({"kind": "audit_unavailable", "detail": e.to_string()})]
            }
        }
    }
}

struct RunState {
    epoch: Instant,
    seed: u64,
    ingresses: Vec<Ingress>,
    progress: Arc<Progress>,
    placed: Vec<Placed>,
    spans: Vec<StepSpan>,
    drain: Option<DrainSeen>,
    victim: Option<usize>,
}

/// The step's sessions, role by role, in a seeded-independent order (the
/// fixture's): quiet ones first, as a quiet step would fill.
fn seats_of(step: &Step) -> Vec<Role> {
    step.sessions
        .iter()
        .flat_map(|(r, n)| std::iter::repeat_n(*r, *n as usize))
        .collect()
}

/// A receipt whose cleanup was recorded.
fn closed(r: &serde_json::Value) -> bool {
    r["cleanup_status"].as_str().is_some_and(|s| s != "pending")
}

/// The newest session the carrier id was recorded under, from the first
/// instance that answers: `(session id, owner)`.
async fn lookup_any(
    instances: &[Instance],
    carrier_call_id: &str,
) -> Result<Option<(String, String)>, String> {
    let mut last = String::new();
    for i in instances {
        match i.lookup(carrier_call_id).await {
            Ok(found) => {
                return Ok(found.last().and_then(|s| {
                    let id = s["session_id"].as_str()?.to_string();
                    Some((id, s["owner"]["instance"].as_str()?.to_string()))
                }));
            }
            Err(e) => last = e.to_string(),
        }
    }
    Err(format!("no instance answered a session lookup: {last}"))
}

async fn sample_loop(
    instances: Vec<Instance>,
    epoch: Instant,
    step: Arc<AtomicUsize>,
    out: Arc<Mutex<Vec<Sample>>>,
    live: Arc<Live>,
) {
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        let mut latest = Vec::new();
        for i in &instances {
            // An instance that does not answer leaves a gap in its samples.
            if let Ok(s) = i.status().await {
                let at = ms(epoch.elapsed());
                if let Some(sample) = Sample::from_status(at, step.load(Ordering::Relaxed), &s) {
                    latest.push(sample);
                }
            }
        }
        out.lock().await.extend(latest.iter().cloned());
        *lock(&live.latest) = latest;
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
