//! The caller's interaction scenarios — speaking over the greeting
//! (barge-in) and a short voiced burst, a cough, into a bot turn — and what
//! each measured, on the caller's own clock.
//!
//! Sans-IO like the rest of the caller: every method takes the caller's
//! `now`. The caller core asks at each 20 ms frame whether a scenario's
//! voice starts with that frame ([`Interaction::barge_starts`],
//! [`Interaction::cough_starts`]) and reports what arrives (bot audio,
//! `clear`) and when turns and utterances end. The definitions of what is
//! measured are on [`BargeInRecord`] and [`CoughRecord`].
//!
//! What it never does: decide the script. The caller core starts the
//! utterance or the burst; this module only keeps the clock of each
//! scenario and counts.

use std::time::Duration;

use super::millis;
use crate::record::{BargeInRecord, CoughRecord};

/// A cough planned into one bot turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoughPlan {
    /// The bot turn: 0 the greeting, `n` the reply to utterance `n`.
    pub turn: usize,
    /// From the turn's first audio frame received to the burst's first frame.
    pub at: Duration,
    /// Length of the burst (`media::synth::SpeechSynth::utterance`).
    pub len_ms: u32,
}

/// Bot audio and `clear`s around the caller's voice over a turn, from the
/// onset until the window closes (the barge-in utterance ended, or the
/// coughed-into turn ended).
#[derive(Debug, Clone, Copy)]
struct Overlap {
    /// When the turn's first audio frame was received.
    turn_began: Duration,
    /// When the caller's first voiced frame was due.
    onset: Duration,
    /// The first `clear` received inside the window.
    clear: Option<Duration>,
    /// Bot audio received after the onset, before the clear.
    before_clear: Duration,
    /// Bot audio received after the clear.
    after_clear: Duration,
    /// When the first bot audio after the clear was received.
    first_after_clear: Option<Duration>,
    /// Audio and clears still count.
    open: bool,
}

impl Overlap {
    fn new(turn_began: Duration, onset: Duration) -> Overlap {
        Overlap {
            turn_began,
            onset,
            clear: None,
            before_clear: Duration::ZERO,
            after_clear: Duration::ZERO,
            first_after_clear: None,
            open: true,
        }
    }

    fn audio(&mut self, now: Duration, len: Duration) {
        if !self.open {
            return;
        }
        match self.clear {
            None => self.before_clear += len,
            Some(_) => {
                self.after_clear += len;
                self.first_after_clear.get_or_insert(now);
            }
        }
    }

    fn clear(&mut self, now: Duration) {
        if self.open && self.clear.is_none() {
            self.clear = Some(now);
        }
    }

    fn onset_to_clear_ms(&self) -> Option<u64> {
        self.clear.map(|c| millis(c.saturating_sub(self.onset)))
    }

    fn gap_ms(&self) -> Option<u64> {
        let (clear, first) = (self.clear?, self.first_after_clear?);
        Some(millis(first.saturating_sub(clear)))
    }

    fn onset_in_turn_ms(&self) -> u64 {
        millis(self.onset.saturating_sub(self.turn_began))
    }
}

/// Where a scenario stands.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Waiting for the turn's first audio frame.
    Armed,
    /// The turn's audio began at `began`; the voice starts with the first
    /// frame due at or after `due`.
    Due { began: Duration, due: Duration },
    /// The caller's voice is (or was) over the turn.
    Over(Overlap),
    /// Did not run: the turn ended before the scenario's moment.
    Missed,
}

impl Phase {
    /// The turn's first audio frame arrived at `now`.
    fn turn_began(&mut self, now: Duration, at: Duration) {
        if matches!(self, Phase::Armed) {
            *self = Phase::Due {
                began: now,
                due: now + at,
            };
        }
    }

    /// Whether the voice starts with the frame due at `t` (and if so, it is
    /// the onset).
    fn starts(&mut self, t: Duration) -> bool {
        match *self {
            Phase::Due { began, due } if t >= due => {
                *self = Phase::Over(Overlap::new(began, t));
                true
            }
            _ => false,
        }
    }

    fn overlap(&self) -> Option<&Overlap> {
        match self {
            Phase::Over(o) => Some(o),
            _ => None,
        }
    }

    fn overlap_mut(&mut self) -> Option<&mut Overlap> {
        match self {
            Phase::Over(o) => Some(o),
            _ => None,
        }
    }

    /// The turn ended: a scenario still waiting for its moment missed it;
    /// a running one stops counting.
    fn turn_ended(&mut self) {
        match self {
            Phase::Armed | Phase::Due { .. } => *self = Phase::Missed,
            Phase::Over(o) => o.open = false,
            Phase::Missed => {}
        }
    }
}

#[derive(Debug)]
struct Barge {
    at: Duration,
    phase: Phase,
}

#[derive(Debug)]
struct Cough {
    plan: CoughPlan,
    phase: Phase,
    /// The turn's mark played after a clear and audio after it.
    resumed: bool,
}

/// The call's scenarios. See the module docs.
#[derive(Debug, Default)]
pub(super) struct Interaction {
    barge: Option<Barge>,
    cough: Option<Cough>,
}

impl Interaction {
    pub(super) fn new(barge_in_at: Option<Duration>, cough: Option<CoughPlan>) -> Interaction {
        Interaction {
            barge: barge_in_at.map(|at| Barge {
                at,
                phase: Phase::Armed,
            }),
            cough: cough.map(|plan| Cough {
                plan,
                phase: Phase::Armed,
                resumed: false,
            }),
        }
    }

    /// Bot turn `turn`'s own audio began at `now` (0: the greeting).
    pub(super) fn turn_began(&mut self, now: Duration, turn: usize) {
        if let Some(b) = &mut self.barge
            && turn == 0
        {
            b.phase.turn_began(now, b.at);
        }
        if let Some(c) = &mut self.cough
            && c.plan.turn == turn
        {
            c.phase.turn_began(now, c.plan.at);
        }
    }

    /// Whether the caller starts speaking over the greeting with the frame
    /// due at `t` (that frame is the onset).
    pub(super) fn barge_starts(&mut self, t: Duration) -> bool {
        self.barge.as_mut().is_some_and(|b| b.phase.starts(t))
    }

    /// The length of the burst to send from the frame due at `t`, if the
    /// cough planned into `turn` starts with it.
    pub(super) fn cough_starts(&mut self, t: Duration, turn: usize) -> Option<u32> {
        let c = self.cough.as_mut().filter(|c| c.plan.turn == turn)?;
        c.phase.starts(t).then_some(c.plan.len_ms)
    }

    /// Bot audio playing for `len` was received at `now`.
    pub(super) fn audio(&mut self, now: Duration, len: Duration) {
        for o in self.overlaps_mut() {
            o.audio(now, len);
        }
    }

    /// A `clear` was received at `now`.
    pub(super) fn clear(&mut self, now: Duration) {
        for o in self.overlaps_mut() {
            o.clear(now);
        }
    }

    /// A caller utterance ended; if it was the one spoken over the
    /// greeting, its window closes.
    pub(super) fn speech_ended(&mut self) {
        if let Some(o) = self.barge.as_mut().and_then(|b| b.phase.overlap_mut()) {
            o.open = false;
        }
    }

    /// Bot turn `turn` ended (its closing mark played, or was released by
    /// a clear the caller accepted as the end of the turn).
    pub(super) fn turn_completed(&mut self, turn: usize) {
        if let Some(b) = &mut self.barge
            && turn == 0
        {
            b.phase.turn_ended();
        }
        if let Some(c) = &mut self.cough
            && c.plan.turn == turn
        {
            if let Some(o) = c.phase.overlap() {
                c.resumed = o.open && o.clear.is_some() && o.first_after_clear.is_some();
            }
            c.phase.turn_ended();
        }
    }

    /// Whether a turn mark released by a `clear` must not end `turn`: the
    /// caller coughed into it and listens for the bot to resume.
    pub(super) fn holds_turn(&self, turn: usize) -> bool {
        self.cough
            .as_ref()
            .is_some_and(|c| c.plan.turn == turn && c.phase.overlap().is_some_and(|o| o.open))
    }

    pub(super) fn barge_record(&self) -> Option<BargeInRecord> {
        let o = self.barge.as_ref()?.phase.overlap()?;
        Some(BargeInRecord {
            into_turn_ms: o.onset_in_turn_ms(),
            onset_ms: millis(o.onset),
            onset_to_clear_ms: o.onset_to_clear_ms(),
            bot_audio_after_onset_ms: millis(o.before_clear),
            audio_after_clear_ms: o.clear.map(|_| millis(o.after_clear)),
        })
    }

    pub(super) fn cough_record(&self) -> Option<CoughRecord> {
        let c = self.cough.as_ref()?;
        let o = c.phase.overlap()?;
        Some(CoughRecord {
            turn: c.plan.turn,
            cough_ms: c.plan.len_ms,
            into_turn_ms: o.onset_in_turn_ms(),
            onset_ms: millis(o.onset),
            onset_to_clear_ms: o.onset_to_clear_ms(),
            bot_audio_after_onset_ms: millis(o.before_clear),
            gap_ms: o.gap_ms(),
            resumed: c.resumed,
        })
    }

    fn overlaps_mut(&mut self) -> impl Iterator<Item = &mut Overlap> {
        let barge = self.barge.as_mut().and_then(|b| b.phase.overlap_mut());
        let cough = self.cough.as_mut().and_then(|c| c.phase.overlap_mut());
        barge.into_iter().chain(cough)
    }
}
