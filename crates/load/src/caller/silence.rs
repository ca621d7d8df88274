//! Owed silence: where the current dead-air stretch starts, its deadline,
//! measuring it, and the phase a silent call is blamed on.

use std::time::Duration;

use super::{BotTurn, Caller, SILENCE_GRACE, Stage, TurnHeard, millis};
use crate::record::Outcome;

impl Caller {
    /// Where the current dead-air stretch starts (possibly in the future,
    /// when audio is still playing); `None` when nothing is owed.
    fn stretch_start(&self) -> Option<Duration> {
        self.owed_from.map(|o| o.max(self.playout.tail_end()))
    }

    pub(super) fn silence_deadline(&self) -> Option<Duration> {
        self.stretch_start()
            .map(|s| s + self.plan.silence_threshold + SILENCE_GRACE)
    }

    /// Measures the current stretch up to `t`.
    pub(super) fn observe(&mut self, t: Duration) -> Duration {
        let len = self
            .stretch_start()
            .map_or(Duration::ZERO, |s| t.saturating_sub(s));
        self.counters.max_owed = self.counters.max_owed.max(len);
        len
    }

    /// The current stretch ends at `t`; a too-long one makes the call silent
    /// (returns `true`, the call is then over).
    pub(super) fn end_stretch(&mut self, t: Duration) -> bool {
        if self.observe(t) > self.plan.silence_threshold {
            self.finish_silent(t);
            return true;
        }
        false
    }

    pub(super) fn finish_silent(&mut self, t: Duration) {
        let phase = self.phase_label();
        self.finish_silent_in(t, phase);
    }

    pub(super) fn finish_silent_in(&mut self, t: Duration, phase: String) {
        let len = self.observe(t);
        let reason = format!("{} ms of dead air while {phase}", millis(len));
        self.hang_up(t, Outcome::Silent { phase }, reason);
    }

    pub(super) fn phase_label(&self) -> String {
        match &self.stage {
            Stage::Dialing => "connecting".into(),
            Stage::AwaitBot { turn, heard } => {
                let turn = match turn {
                    BotTurn::Greeting => "greeting".to_string(),
                    BotTurn::Reply(n) => format!("reply_{n}"),
                };
                if *heard == TurnHeard::Own {
                    format!("{turn}_playout")
                } else {
                    turn
                }
            }
            Stage::Thinking { next, .. } => format!("thinking_{}", next + 1),
            Stage::Cued { next } => format!("awaiting_cue_{}", next + 1),
            Stage::Holding => "holding".into(),
            Stage::Speaking { utterance, .. } => format!("utterance_{}", utterance + 1),
            Stage::Terminal(term) if term.echoed => format!("{}_close", term.kind.name()),
            Stage::Terminal(term) => format!("{}_prompt", term.kind.name()),
            Stage::Done => "done".into(),
        }
    }
}
