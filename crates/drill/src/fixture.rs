//! The drill's fixture: what is run, how often, and what counts as passing
//! (`drills/voice-onboarding-v1.toml`). Read with [`Fixture::from_toml`],
//! which validates every value and names the first bad one.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::DrillError;

/// The most sessions one step may start.
pub const MAX_STEP_SESSIONS: u32 = 1_000;
/// The most staircases one drill may repeat.
pub const MAX_REPEATS: u32 = 20;
/// The longest hold a step may ask for (before `--hold-scale`).
pub const MAX_HOLD: Duration = Duration::from_secs(3_600);

/// A whole drill.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fixture {
    /// Names the fixture and its revision (`voice-onboarding-v1`); the
    /// receipt quotes it, so a changed fixture gets a new version.
    pub version: String,
    /// Staircases run, one after the other. Every one is kept.
    pub repeats: u32,
    /// Seeds which instance takes the disruptive events in each run, the
    /// callers' voices and the ingress of each session.
    pub seed: u64,
    /// The ingresses sessions arrive over, with relative weights.
    pub ingress: BTreeMap<Ingress, u32>,
    /// How many instances the drill must be pointed at.
    pub instances: u32,
    /// The drain policy the drained instance must be configured with
    /// (`finish` or `transfer`); a run that observes another fails.
    pub drain_policy: String,
    /// The balancer's time to notice a drain or a return: after the drain
    /// the drill waits this long before starting the sessions that must
    /// land elsewhere, and after reopening the drained instance before the
    /// next run (at least its check interval × `rise`: 2 s × 2 in
    /// `deploy/haproxy`).
    pub drain_settle_ms: u64,
    /// What each role does.
    pub roles: RoleSettings,
    /// No step holds for less than this, whatever `--hold-scale` says: the
    /// scripted roles need it to say their lines (a tool-waiter's four
    /// utterances and the slow tool take about 20 s).
    pub min_hold_s: u64,
    /// The staircase, in order.
    pub steps: Vec<Step>,
    /// What passing means.
    pub thresholds: Thresholds,
}

/// A carrier a session arrives over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ingress {
    /// Twilio Media Streams through the balancer.
    Twilio,
    /// The partner WebSocket through the balancer.
    Partner,
    /// SIP through the SIP proxy (Kamailio), when the drill has a SIP
    /// dialer ([`crate::sip::SipDialer`]). SIP legs take speaker seats
    /// only; another seat drawn for SIP, or any seat without a dialer,
    /// goes to Twilio.
    Sip,
}

impl Ingress {
    pub const fn label(self) -> &'static str {
        match self {
            Ingress::Twilio => "twilio",
            Ingress::Partner => "partner",
            Ingress::Sip => "sip",
        }
    }
}

/// What a caller does once admitted (docs/drill.md, "Roles").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Admitted, then silent (holding the line) until the step activates it.
    Quiet,
    /// Speaks its utterances at once, then holds.
    Speaker,
    /// Speaks over the bot's greeting, then holds.
    Interrupter,
    /// Asks for the slow tool and waits for the answer, then holds.
    ToolWaiter,
    /// Asks for the slow tool and hangs up while it runs.
    CancelTool,
    /// Speaks, then vanishes (no stop, no close frame) when told.
    Disconnecter,
    /// Like a disconnecter, then dials again with its resume token after
    /// `reconnect_after_ms` (always a partner leg: only partner calls resume).
    Reconnecter,
}

impl Role {
    pub const fn label(self) -> &'static str {
        match self {
            Role::Quiet => "quiet",
            Role::Speaker => "speaker",
            Role::Interrupter => "interrupter",
            Role::ToolWaiter => "tool_waiter",
            Role::CancelTool => "cancel_tool",
            Role::Disconnecter => "disconnecter",
            Role::Reconnecter => "reconnecter",
        }
    }

    /// Whether the conductor disrupts it (drops its socket).
    pub const fn drops(self) -> bool {
        matches!(self, Role::Disconnecter | Role::Reconnecter)
    }
}

/// Knobs the roles share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleSettings {
    /// Utterances a speaker says.
    pub speaker_utterances: usize,
    /// The utterance (1-based) of the dialog's script that starts the slow
    /// tool: a tool-waiter says this many, a cancel-tool caller hangs up
    /// after the last of them.
    pub tool_utterance: usize,
    /// How long after its tool utterance a cancel-tool caller hangs up.
    pub cancel_after_ms: u64,
    /// How far into the greeting's audio an interrupter starts speaking.
    pub barge_in_at_ms: u64,
    /// Length of every utterance.
    pub utterance_ms: u32,
    /// Dead air longer than this while a reply is owed makes a call silent.
    pub silence_threshold_ms: u64,
    /// How long a reconnecter stays away before it resumes (inside the
    /// server's `partner.resume_window_ms`, 15 s by default).
    pub reconnect_after_ms: u64,
}

/// One step of the staircase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// `A`, `B`, `C`: how the receipt names it.
    pub name: String,
    /// What it is for, in a line.
    pub purpose: String,
    /// Sessions started, by role; all stay on the line until the drill ends.
    pub sessions: BTreeMap<Role, u32>,
    /// How long the step holds after its sessions are admitted (and after
    /// its events), before the next step starts.
    pub hold_s: u64,
    /// Every quiet session still silent, from every step so far, speaks
    /// within this window (synchronized activation).
    #[serde(default)]
    pub activate_within_s: Option<u64>,
    /// Drain one instance (chosen by the seed) half-way through the step's
    /// hold — when its disconnecters are dropped — then, after
    /// `drain_settle_ms`, start this many more sessions: none may land there.
    #[serde(default)]
    pub drain_then_sessions: Option<u32>,
}

impl Step {
    /// Sessions the step starts before any drain.
    pub fn session_count(&self) -> u32 {
        self.sessions.values().sum()
    }
}

/// The pass marks, per SLO family. Each is compared with the worst (or
/// the p95, where named) of what a step measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thresholds {
    /// admission: dial → upgrade accepted, p95.
    pub join_to_accepted_p95_ms: u64,
    /// admission: admitted → media ready (the ledger), p95.
    pub accepted_to_media_ready_p95_ms: u64,
    /// admission: sessions refused (the drill stays under capacity).
    pub refused_max: u64,
    /// media: dial → the greeting's first audio, as the caller heard it, p95.
    pub first_audio_p95_ms: u64,
    /// media: outbound underruns summed over a step's receipts.
    pub underruns_max: u64,
    /// media: the worst interarrival jitter a SIP leg's RTP showed (ledger).
    pub rtp_jitter_max_ms: f64,
    /// media: the worst share of a SIP leg's RTP packets lost, percent.
    pub rtp_loss_max_pct: f64,
    /// interaction: speech end → the reply's first audio, as heard, p95.
    pub reply_p95_ms: u64,
    /// interaction: speech onset → `clear` heard, worst interrupter.
    pub barge_in_stop_max_ms: u64,
    /// interaction: speech end → final transcript (the ledger), p95.
    pub finalization_p95_ms: u64,
    /// delegation: the slow tool's reply as the tool-waiter heard it, worst.
    pub tool_reply_max_ms: u64,
    /// lifecycle: the largest counter divergence, in sessions, among those
    /// that outlived `counter_error_grace_s` (short ones are normal: a
    /// ledger row opens just after admission).
    pub counter_error_max: u64,
    /// lifecycle: how old a divergence may grow before it counts, seconds
    /// (the reconciler's `ledger.divergence_window_s`).
    pub counter_error_grace_s: f64,
    /// lifecycle: disconnect observed → cleanup completed, worst.
    pub cleanup_max_ms: u64,
    /// lifecycle: calls a caller counted silent (owed audio that never came).
    pub silent_max: u64,
}

impl Fixture {
    /// Parses and validates a fixture.
    ///
    /// # Errors
    /// [`DrillError::Fixture`] naming the first bad key.
    pub fn from_toml(text: &str) -> Result<Fixture, DrillError> {
        let f: Fixture = toml::from_str(text).map_err(|e| DrillError::Fixture(e.to_string()))?;
        f.validate()?;
        Ok(f)
    }

    /// Every value usable, or the first that is not.
    ///
    /// # Errors
    /// [`DrillError::Fixture`].
    pub fn validate(&self) -> Result<(), DrillError> {
        let bad = |m: String| Err(DrillError::Fixture(m));
        if self.version.trim().is_empty() {
            return bad("version must name the fixture".into());
        }
        if !(1..=MAX_REPEATS).contains(&self.repeats) {
            return bad(format!("repeats must be 1..={MAX_REPEATS}"));
        }
        if self.ingress.values().all(|w| *w == 0) {
            return bad("ingress needs at least one weight above 0".into());
        }
        if self.instances < 2 {
            return bad("instances must be at least 2 (one is drained)".into());
        }
        if !matches!(self.drain_policy.as_str(), "finish" | "transfer") {
            return bad(format!(
                "drain_policy must be finish or transfer, not {:?}",
                self.drain_policy
            ));
        }
        if self.drain_settle_ms > 60_000 {
            return bad("drain_settle_ms must be at most 60000".into());
        }
        self.validate_roles()?;
        if self.steps.is_empty() {
            return bad("steps must not be empty".into());
        }
        let mut drains = 0;
        for (i, s) in self.steps.iter().enumerate() {
            let at = format!("steps[{i}] ({})", s.name);
            if s.name.trim().is_empty() {
                return bad(format!("{at}: name must not be empty"));
            }
            if !(1..=MAX_STEP_SESSIONS).contains(&s.session_count()) {
                return bad(format!("{at}: sessions must total 1..={MAX_STEP_SESSIONS}"));
            }
            if Duration::from_secs(s.hold_s) > MAX_HOLD {
                return bad(format!(
                    "{at}: hold_s must be at most {}",
                    MAX_HOLD.as_secs()
                ));
            }
            if s.activate_within_s == Some(0) {
                return bad(format!("{at}: activate_within_s must be above 0"));
            }
            if let Some(n) = s.drain_then_sessions {
                drains += 1;
                if n == 0 || n > MAX_STEP_SESSIONS {
                    return bad(format!(
                        "{at}: drain_then_sessions must be 1..={MAX_STEP_SESSIONS}"
                    ));
                }
            }
        }
        let reconnects = self
            .steps
            .iter()
            .any(|s| s.sessions.get(&Role::Reconnecter).is_some_and(|n| *n > 0));
        if reconnects && self.ingress.get(&Ingress::Partner).is_none_or(|w| *w == 0) {
            return bad(
                "reconnecter sessions resume over the partner ingress: give it a weight".into(),
            );
        }
        if drains > 1 {
            return bad("at most one step may drain an instance".into());
        }
        Ok(())
    }

    fn validate_roles(&self) -> Result<(), DrillError> {
        let r = &self.roles;
        let bad = |m: &str| Err(DrillError::Fixture(format!("roles.{m}")));
        if !(1..=50).contains(&r.speaker_utterances) {
            return bad("speaker_utterances must be 1..=50");
        }
        if !(1..=50).contains(&r.tool_utterance) {
            return bad("tool_utterance must be 1..=50");
        }
        if !(200..=60_000).contains(&r.utterance_ms) {
            return bad("utterance_ms must be 200..=60000");
        }
        if r.silence_threshold_ms < 500 {
            return bad("silence_threshold_ms must be at least 500");
        }
        if r.reconnect_after_ms > 60_000 {
            return bad("reconnect_after_ms must be at most 60000");
        }
        if r.barge_in_at_ms > 10_000 || r.cancel_after_ms > 60_000 {
            return bad("barge_in_at_ms must be ≤ 10000 and cancel_after_ms ≤ 60000");
        }
        Ok(())
    }

    /// The most sessions on the line at once: every step's, plus the
    /// sessions started after the drain (nobody hangs up before the end,
    /// except cancel-tool callers and the dropped).
    pub fn max_concurrency(&self) -> u32 {
        self.steps
            .iter()
            .map(|s| s.session_count() + s.drain_then_sessions.unwrap_or(0))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

    use super::*;

    const SHIPPED: &str = include_str!("../../../drills/voice-onboarding-v1.toml");

    #[test]
    fn the_shipped_fixture_is_the_reports_staircase() {
        let f = Fixture::from_toml(SHIPPED).unwrap();
        assert_eq!(f.version, "voice-onboarding-v1");
        assert!(f.repeats >= 3);
        let names: Vec<&str> = f.steps.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["A", "B", "C"]);
        let a = &f.steps[0];
        assert_eq!(a.session_count(), 10);
        assert_eq!(a.sessions[&Role::Quiet], 8);
        assert_eq!(a.sessions[&Role::Speaker], 1);
        assert_eq!(a.sessions[&Role::ToolWaiter], 1);
        assert_eq!(a.hold_s, 180);
        assert_eq!(f.steps[1].session_count(), 10);
        assert_eq!(f.steps[1].activate_within_s, Some(5));
        let c = &f.steps[2];
        assert_eq!(c.session_count(), 10);
        let drops: u32 = c
            .sessions
            .iter()
            .filter(|(r, _)| r.drops())
            .map(|(_, n)| n)
            .sum();
        assert_eq!(drops, 4);
        assert_eq!(c.sessions[&Role::Reconnecter], 2);
        assert_eq!(c.sessions[&Role::CancelTool], 2);
        assert!(c.drain_then_sessions.is_some());
        assert_eq!(f.instances, 2);
    }

    #[test]
    fn a_bad_value_is_named() {
        for (from, to, says) in [
            ("repeats = 3", "repeats = 0", "repeats"),
            ("instances = 2", "instances = 1", "instances"),
            (
                "drain_policy = \"finish\"",
                "drain_policy = \"later\"",
                "drain_policy",
            ),
            (
                "tool_utterance = 4",
                "tool_utterance = 0",
                "roles.tool_utterance",
            ),
            (
                "activate_within_s = 5",
                "activate_within_s = 0",
                "steps[1] (B)",
            ),
            ("hold_s = 180", "hold_s = 999999", "steps[0] (A): hold_s"),
            ("seed = ", "sead = ", "unknown field"),
        ] {
            assert!(SHIPPED.contains(from), "{from}");
            let text = SHIPPED.replacen(from, to, 1);
            let e = Fixture::from_toml(&text).unwrap_err().to_string();
            assert!(e.contains(says), "{to}: {e}");
        }
    }
}
