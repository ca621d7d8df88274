//! The five SLO families, per step, computed from what a run observed:
//! the callers' own clocks ([`CallRecord`]), the ledger's receipts and the
//! status samples. Each observation carries its threshold (from the
//! fixture, or a fixed 0 for what must never happen) so a reader sees the
//! two side by side; one with no sample (no interrupter in the step) is
//! not reported at all rather than reported as zero.

use callgate_load::{CallRecord, Outcome};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::fixture::{Role, Thresholds};
use crate::observed::{Run, Session};

/// The five families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    Admission,
    Media,
    Interaction,
    Delegation,
    Lifecycle,
}

/// One measured value of one step, beside its pass mark.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    pub family: Family,
    /// The fixture's threshold key when it has one.
    pub name: String,
    pub value: f64,
    /// The pass mark (upper bound); `None` for a value reported only.
    pub max: Option<f64>,
    /// How many sessions (or samples) it was computed from.
    pub from: usize,
}

impl Observation {
    pub fn passes(&self) -> bool {
        self.max.is_none_or(|m| self.value <= m)
    }
}

/// Nearest-rank percentile; `None` for no values.
pub fn percentile(values: &mut [f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * values.len() as f64).ceil() as usize;
    Some(values[rank.clamp(1, values.len()) - 1])
}

fn worst(values: &[f64]) -> Option<f64> {
    values.iter().copied().max_by(f64::total_cmp)
}

/// A lifecycle stamp's offset from admission (ms) in a receipt.
pub fn stamp(receipt: &Value, stage: &str) -> Option<f64> {
    receipt["lifecycle"][stage]["offset_ms"].as_f64()
}

/// Disconnect observed → cleanup completed, from a receipt.
pub fn cleanup_ms(receipt: &Value) -> Option<f64> {
    Some(stamp(receipt, "cleanup_completed")? - stamp(receipt, "disconnect_observed")?)
}

/// Last caller media → disconnect observed: how long the server took to
/// notice a caller that vanished.
pub fn noticed_ms(receipt: &Value) -> Option<f64> {
    Some(stamp(receipt, "disconnect_observed")? - stamp(receipt, "last_media")?)
}

struct Builder {
    thresholds: Value,
    out: Vec<Observation>,
}

impl Builder {
    /// Reports `value` under `name` with the fixture's threshold of that name.
    fn add(&mut self, family: Family, name: &str, value: Option<f64>, from: usize) {
        let max = self.thresholds[name].as_f64();
        self.push(family, name, value, max, from);
    }

    /// Reports a count that must be 0.
    fn zero(&mut self, family: Family, name: &str, value: usize, from: usize) {
        self.push(family, name, Some(value as f64), Some(0.0), from);
    }

    fn info(&mut self, family: Family, name: &str, value: Option<f64>, from: usize) {
        self.push(family, name, value, None, from);
    }

    fn push(&mut self, family: Family, name: &str, value: Option<f64>, max: Option<f64>, n: usize) {
        if let Some(value) = value {
            self.out.push(Observation {
                family,
                name: name.to_string(),
                value,
                max,
                from: n,
            });
        }
    }
}

/// Every observation of step `step` (its index in the run's spans).
pub fn step_observations(
    run: &Run,
    step: usize,
    t: &Thresholds,
    tool_utterance: usize,
) -> Vec<Observation> {
    let Some(span) = run.steps.get(step) else {
        return Vec::new();
    };
    let mut b = Builder {
        thresholds: serde_json::to_value(t).unwrap_or(Value::Null),
        out: Vec::new(),
    };
    let mine: Vec<&Session> = run
        .sessions
        .iter()
        .filter(|s| s.step == span.name)
        .collect();
    admission(&mut b, run, &mine);
    media(&mut b, &mine);
    interaction(&mut b, run, step, tool_utterance);
    delegation(&mut b, &mine, tool_utterance);
    lifecycle(&mut b, run, step, &mine, t.counter_error_grace_s);
    b.out
}

fn records<'a>(s: &'a [&Session]) -> impl Iterator<Item = &'a CallRecord> {
    s.iter().filter_map(|s| s.record.as_ref())
}

fn receipts<'a>(s: &'a [&'a Session]) -> impl Iterator<Item = &'a Value> + 'a {
    s.iter().filter_map(|s| s.receipt.as_ref())
}

fn p95(values: Vec<f64>) -> (Option<f64>, usize) {
    let n = values.len();
    let mut v = values;
    (percentile(&mut v, 95.0), n)
}

fn admission(b: &mut Builder, run: &Run, s: &[&Session]) {
    let (v, n) = p95(records(s)
        .filter_map(|r| r.connect_ms)
        .map(|m| m as f64)
        .collect());
    b.add(Family::Admission, "join_to_accepted_p95_ms", v, n);
    let ready: Vec<f64> = receipts(s)
        .filter_map(|r| stamp(r, "media_ready"))
        .collect();
    let (v, n) = p95(ready);
    b.add(Family::Admission, "accepted_to_media_ready_p95_ms", v, n);
    let waits: Vec<f64> = receipts(s)
        .filter_map(|r| r["admission_wait_ms"].as_f64())
        .collect();
    b.info(
        Family::Admission,
        "admission_wait_max_ms",
        worst(&waits),
        waits.len(),
    );
    let refused = |o: &Outcome| matches!(o, Outcome::Rejected { .. });
    outcomes(b, (Family::Admission, "refused", "refused_max"), s, refused);
    if let Some(d) = &run.drain {
        let after: Vec<&&Session> = s.iter().filter(|x| x.after_drain).collect();
        let landed = after
            .iter()
            .filter(|x| x.owner.as_deref() == Some(d.instance.as_str()))
            .count();
        b.zero(Family::Admission, "landed_on_draining", landed, after.len());
    }
    let over = s.iter().filter(|x| over_budget(run, x)).count();
    b.zero(Family::Admission, "over_budget_assignments", over, s.len());
}

/// How many of the step's callers ended as `hit` says, against the
/// fixture's threshold `key`: `(family, name, key)`.
fn outcomes(
    b: &mut Builder,
    (family, name, key): (Family, &str, &str),
    s: &[&Session],
    hit: impl Fn(&Outcome) -> bool,
) {
    let n = records(s).filter(|r| hit(&r.outcome)).count();
    let max = b.thresholds[key].as_f64();
    b.push(family, name, Some(n as f64), max, records(s).count());
}

/// The session's owner was at or over its committed-pressure capacity in
/// its last sample before the session was dialled.
fn over_budget(run: &Run, s: &Session) -> bool {
    let Some(owner) = s.owner.as_deref() else {
        return false;
    };
    run.samples
        .iter()
        .rfind(|x| x.instance == owner && x.at_ms <= s.dialled_ms)
        .is_some_and(|x| x.pressure_capacity > 0.0 && x.pressure_score >= x.pressure_capacity)
}

fn media(b: &mut Builder, s: &[&Session]) {
    let heard: Vec<f64> = records(s)
        .filter_map(|r| r.time_to_first_audio_ms)
        .map(|m| m as f64)
        .collect();
    let (v, n) = p95(heard);
    b.add(Family::Media, "first_audio_p95_ms", v, n);
    let playable: Vec<f64> = receipts(s)
        .filter_map(|r| stamp(r, "first_playable_audio"))
        .collect();
    let (v, n) = p95(playable);
    b.info(Family::Media, "ledger_first_playable_audio_p95_ms", v, n);
    let under: Vec<f64> = receipts(s)
        .filter_map(|r| r["stats"]["media"]["outbound_underruns"].as_f64())
        .collect();
    let n = under.len();
    b.add(
        Family::Media,
        "underruns_max",
        (n > 0).then(|| under.iter().sum()),
        n,
    );
    rtp(b, s);
}

/// RTP, as the server measured it on each SIP leg.
fn rtp(b: &mut Builder, s: &[&Session]) {
    let rtp: Vec<&Value> = receipts(s)
        .map(|r| &r["stats"]["media"]["transport"])
        .filter(|t| t.is_object())
        .collect();
    if rtp.is_empty() {
        return;
    }
    let jitter: Vec<f64> = rtp
        .iter()
        .filter_map(|t| t["max_jitter_ms"].as_f64())
        .collect();
    b.add(
        Family::Media,
        "rtp_jitter_max_ms",
        worst(&jitter),
        jitter.len(),
    );
    let loss: Vec<f64> = rtp
        .iter()
        .filter_map(|t| {
            let expected = t["expected"].as_f64()?;
            let lost = t["lost"].as_f64()?;
            Some(if expected > 0.0 {
                100.0 * lost / expected
            } else {
                0.0
            })
        })
        .collect();
    b.add(Family::Media, "rtp_loss_max_pct", worst(&loss), loss.len());
}

/// The replies a session heard, as the caller timed them, except a tool
/// role's reply to its tool utterance: that one waits for the tool and is
/// delegation's (`tool_reply_max_ms`), not the conversation's.
pub fn conversational_replies(s: &Session, tool_utterance: usize) -> Vec<f64> {
    let own = match s.role {
        Role::ToolWaiter | Role::CancelTool => tool_utterance.checked_sub(1),
        _ => None,
    };
    s.record
        .iter()
        .flat_map(|r| r.reply_latency_ms.iter().enumerate())
        .filter(|(i, _)| Some(*i) != own)
        .map(|(_, m)| *m as f64)
        .collect()
}

/// The session's replies belong to the step it spoke in: a quiet caller
/// speaks in the step that activated it.
pub fn spoke_in(run: &Run, step: usize, s: &Session) -> bool {
    let span = &run.steps[step];
    match (s.role, s.activated_ms) {
        (Role::Quiet, Some(at)) => at >= span.started_ms && at <= span.ended_ms,
        (Role::Quiet, None) => false,
        _ => s.step == span.name,
    }
}

fn interaction(b: &mut Builder, run: &Run, step: usize, tool_index: usize) {
    let spoke: Vec<&Session> = run
        .sessions
        .iter()
        .filter(|s| spoke_in(run, step, s))
        .collect();
    let replies: Vec<f64> = spoke
        .iter()
        .flat_map(|s| conversational_replies(s, tool_index))
        .collect();
    let (v, n) = p95(replies);
    b.add(Family::Interaction, "reply_p95_ms", v, n);
    let barge: Vec<Option<f64>> = spoke
        .iter()
        .filter(|s| s.role == Role::Interrupter)
        .filter_map(|s| s.record.as_ref()?.barge_in.as_ref())
        .map(|bi| bi.onset_to_clear_ms.map(|m| m as f64))
        .collect();
    if !barge.is_empty() {
        let unstopped = barge.iter().filter(|x| x.is_none()).count();
        let stops: Vec<f64> = barge.iter().flatten().copied().collect();
        b.add(
            Family::Interaction,
            "barge_in_stop_max_ms",
            worst(&stops),
            stops.len(),
        );
        b.zero(
            Family::Interaction,
            "barge_ins_never_stopped",
            unstopped,
            barge.len(),
        );
    }
    let finals: Vec<f64> = receipts(&spoke)
        .flat_map(|r| r["stats"]["turns"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["stt_us"].as_f64())
        .map(|us| us / 1_000.0)
        .collect();
    let (v, n) = p95(finals);
    b.add(Family::Interaction, "finalization_p95_ms", v, n);
}

fn delegation(b: &mut Builder, s: &[&Session], tool_utterance: usize) {
    let waits: Vec<f64> = s
        .iter()
        .filter(|x| x.role == Role::ToolWaiter)
        .filter_map(|x| {
            let r = x.record.as_ref()?;
            let i = tool_utterance.checked_sub(1)?;
            r.reply_latency_ms.get(i).map(|m| *m as f64)
        })
        .collect();
    b.add(
        Family::Delegation,
        "tool_reply_max_ms",
        worst(&waits),
        waits.len(),
    );
    let sum = |key: &str| -> Option<f64> {
        let v: Vec<f64> = receipts(s)
            .filter_map(|r| r["stats"]["delegation"][key].as_f64())
            .collect();
        (!v.is_empty()).then(|| v.iter().sum())
    };
    let n = receipts(s).count();
    for key in [
        "started",
        "completed",
        "cancelled",
        "orphaned",
        "stale_results_dropped",
    ] {
        b.info(Family::Delegation, &format!("tools_{key}"), sum(key), n);
    }
    let cancellers: Vec<&&Session> = s.iter().filter(|x| x.role == Role::CancelTool).collect();
    if !cancellers.is_empty() {
        let not_cancelled = cancellers
            .iter()
            .filter(|x| {
                x.receipt.as_ref().is_none_or(|r| {
                    r["stats"]["delegation"]["cancelled"].as_u64().unwrap_or(0) == 0
                })
            })
            .count();
        b.zero(
            Family::Delegation,
            "tool_cancels_not_honoured",
            not_cancelled,
            cancellers.len(),
        );
    }
}

fn lifecycle(b: &mut Builder, run: &Run, step: usize, s: &[&Session], grace: f64) {
    let samples: Vec<_> = run.samples.iter().filter(|x| x.step == step).collect();
    let mut beyond = 0u64;
    let mut oldest: f64 = 0.0;
    for d in samples.iter().flat_map(|x| x.divergences.iter()) {
        let age = d.2.unwrap_or(0.0);
        oldest = oldest.max(age);
        if age > grace {
            beyond = beyond.max(d.1.unwrap_or(0));
        }
    }
    if !samples.is_empty() {
        let n = samples.len();
        b.add(
            Family::Lifecycle,
            "counter_error_max",
            Some(beyond as f64),
            n,
        );
        b.info(Family::Lifecycle, "counter_error_oldest_s", Some(oldest), n);
    }
    let cleanups: Vec<f64> = receipts(s).filter_map(cleanup_ms).collect();
    b.add(
        Family::Lifecycle,
        "cleanup_max_ms",
        worst(&cleanups),
        cleanups.len(),
    );
    let silent = |o: &Outcome| matches!(o, Outcome::Silent { .. });
    outcomes(b, (Family::Lifecycle, "silent", "silent_max"), s, silent);
    let placed = records(s).count();
    let failed = records(s)
        .filter(|r| {
            matches!(
                r.outcome,
                Outcome::Failed { .. } | Outcome::Unauthorized { .. }
            )
        })
        .count();
    b.zero(Family::Lifecycle, "failed", failed, placed);
    let sip: Vec<&&Session> = s
        .iter()
        .filter(|x| x.ingress == crate::fixture::Ingress::Sip)
        .collect();
    if !sip.is_empty() {
        let broken = sip
            .iter()
            .filter(|x| x.sip.as_ref().is_none_or(|e| !e.completed))
            .count();
        b.zero(Family::Lifecycle, "sip_calls_failed", broken, sip.len());
    }
    let admitted: Vec<&&Session> = s.iter().filter(|x| x.session_id.is_some()).collect();
    let lost: usize = admitted
        .iter()
        .map(|x| match &x.receipt {
            None => 1,
            Some(r) => r["stats"]["writes_lost"].as_u64().unwrap_or(0) as usize,
        })
        .sum();
    b.zero(Family::Lifecycle, "state_loss", lost, admitted.len());
    let back: Vec<&&Session> = s.iter().filter(|x| x.role == Role::Reconnecter).collect();
    if !back.is_empty() {
        let lost = back
            .iter()
            .filter(|x| x.record.as_ref().is_none_or(|r| r.resumes == 0))
            .count();
        b.zero(Family::Lifecycle, "resumes_failed", lost, back.len());
    }
    let drained_here = run.drain.as_ref().is_some_and(|d| {
        let span = &run.steps[step];
        d.at_ms >= span.started_ms && d.at_ms <= span.ended_ms
    });
    let victims: Vec<&Session> = run.sessions.iter().filter(|x| x.drain_victim).collect();
    if drained_here {
        let failed = victims.iter().filter(|x| !drained_well(x)).count();
        b.zero(Family::Lifecycle, "drain_failures", failed, victims.len());
    }
}

/// A session on the drained instance came through the drain: it ended as
/// its caller ended it (or by the drain policy's transfer), and its
/// cleanup completed.
fn drained_well(s: &Session) -> bool {
    let Some(r) = &s.receipt else {
        return false;
    };
    let end = r["end_reason"].as_str().unwrap_or("");
    let ok_end = !matches!(
        end,
        "drain_deadline" | "owner_lost" | "instance_restart" | ""
    );
    ok_end && r["cleanup_status"] == "completed"
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

    use super::*;
    use crate::fixture::{Fixture, Ingress};
    use crate::observed::{DrainSeen, StepSpan};
    use serde_json::json;

    fn session(index: usize, step: &str, role: Role, replies: &[u64]) -> Session {
        let mut s = Session::new(
            index,
            step,
            role,
            Ingress::Twilio,
            format!("CA{index}"),
            0,
            false,
        );
        s.session_id = Some(format!("s-{index}"));
        s.owner = Some("a".into());
        s.record = Some(CallRecord {
            outcome: Outcome::Completed,
            reply_latency_ms: replies.to_vec(),
            ..CallRecord::default()
        });
        s.receipt = Some(json!({"end_reason": "caller_hangup", "cleanup_status": "completed"}));
        s
    }

    fn run() -> Run {
        let span = |name: &str, a, b| StepSpan {
            name: name.into(),
            started_ms: a,
            ended_ms: b,
            activation: None,
        };
        let mut quiet = session(0, "A", Role::Quiet, &[700]);
        quiet.activated_ms = Some(1_500);
        let mut victim = session(3, "A", Role::Speaker, &[900]);
        victim.drain_victim = true;
        victim.receipt =
            Some(json!({"end_reason": "drain_deadline", "cleanup_status": "completed"}));
        Run {
            number: 1,
            seed: 1,
            started_at: String::new(),
            duration_ms: 2_000,
            steps: vec![span("A", 0, 1_000), span("B", 1_000, 2_000)],
            sessions: vec![
                quiet,
                session(1, "A", Role::ToolWaiter, &[500, 500, 500, 6_000]),
                session(2, "B", Role::Speaker, &[800]),
                victim,
            ],
            samples: Vec::new(),
            drain: Some(DrainSeen {
                instance: "a".into(),
                at_ms: 1_500,
                policy: Some("finish".into()),
                undrained: true,
            }),
            cleanup_converged_ms: Some(10),
            violations: Vec::new(),
            failure: None,
        }
    }

    fn value(obs: &[Observation], name: &str) -> Option<f64> {
        obs.iter().find(|o| o.name == name).map(|o| o.value)
    }

    #[test]
    fn replies_belong_to_the_step_they_were_spoken_in_and_the_tools_to_delegation() {
        let f =
            Fixture::from_toml(include_str!("../../../drills/voice-onboarding-v1.toml")).unwrap();
        let a = step_observations(&run(), 0, &f.thresholds, 4);
        let b = step_observations(&run(), 1, &f.thresholds, 4);
        // A: the tool-waiter's three ordinary replies and the victim's; the
        // tool's own reply is delegation's; the quiet caller spoke in B.
        assert_eq!(value(&a, "reply_p95_ms"), Some(900.0));
        assert_eq!(value(&a, "tool_reply_max_ms"), Some(6_000.0));
        assert_eq!(value(&b, "reply_p95_ms"), Some(800.0), "700 and 800");
        // The drain happened in B: its victims are judged there, once.
        assert_eq!(value(&a, "drain_failures"), None);
        assert_eq!(
            value(&b, "drain_failures"),
            Some(1.0),
            "ended by the drain deadline"
        );
        assert!(
            !b.iter()
                .find(|o| o.name == "drain_failures")
                .unwrap()
                .passes()
        );
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&mut v, 95.0), Some(19.0));
        assert_eq!(percentile(&mut v, 50.0), Some(10.0));
        assert_eq!(percentile(&mut [7.0], 95.0), Some(7.0));
        assert_eq!(percentile(&mut [], 95.0), None);
    }

    #[test]
    fn an_observation_passes_at_its_mark_and_fails_above() {
        let mut o = Observation {
            family: Family::Media,
            name: "first_audio_p95_ms".into(),
            value: 100.0,
            max: Some(100.0),
            from: 3,
        };
        assert!(o.passes());
        o.value = 100.5;
        assert!(!o.passes());
        o.max = None;
        assert!(o.passes(), "a value reported only never fails");
    }
}
