//! The caller's timers and media clock: which timer fires next, firing
//! each at its own instant, and the 20 ms frames the caller's voice (an
//! utterance, a barge-in or a cough) fills.

use std::time::Duration;

use super::{BotTurn, Caller, FRAME, MAX_FRAME_LAG, Stage, Timer, TurnHeard, millis};
use crate::record::Outcome;
use crate::transport::{self, Release};

impl Caller {
    pub(super) fn next_timer(&self) -> Option<(Duration, Timer)> {
        if !self.is_live() {
            return None;
        }
        [
            (self.playout.next_mark_due(), Timer::Mark),
            (self.silence_deadline(), Timer::Silence),
            (self.leave_due(), Timer::Leave),
            (Some(self.plan.call_timeout), Timer::Deadline),
            (self.next_frame, Timer::Frame),
        ]
        .into_iter()
        .filter_map(|(t, timer)| t.map(|t| (t, timer)))
        .min()
    }

    /// Fires every timer due at or before `now`, each at its own instant, so
    /// a late wake-up still echoes marks and measures silence exactly.
    pub(super) fn advance(&mut self, now: Duration) {
        while let Some((t, timer)) = self.next_timer() {
            if t > now {
                break;
            }
            match timer {
                Timer::Mark => {
                    if let Some(mark) = self.playout.pop_due(t) {
                        self.echo(t, mark, Release::Played);
                    }
                }
                Timer::Silence => self.finish_silent(t),
                Timer::Leave => {
                    let phase = self.phase_label();
                    let reason = format!("caller gave up while {phase}");
                    self.hang_up(t, Outcome::LeftEarly { phase }, reason);
                }
                Timer::Deadline => {
                    let phase = self.phase_label();
                    let reason = format!("call_timeout after {} ms while {phase}", millis(t));
                    self.hang_up(
                        t,
                        Outcome::Failed {
                            reason: reason.clone(),
                        },
                        reason,
                    );
                }
                Timer::Frame => self.send_frame(t, now),
            }
        }
    }

    /// When a [`super::Leave`] plan hangs up: only while the reply to its
    /// utterance is still owed.
    fn leave_due(&self) -> Option<Duration> {
        let leave = self.plan.leave?;
        match self.stage {
            Stage::AwaitBot {
                turn: BotTurn::Reply(n),
                ..
            } if n == leave.after_utterance => Some(self.speech_ended_at + leave.delay),
            _ => None,
        }
    }

    fn send_frame(&mut self, due: Duration, now: Duration) {
        let lag = now.saturating_sub(due);
        self.counters.max_lag = self.counters.max_lag.max(lag);
        if lag > MAX_FRAME_LAG {
            // Jump the media clock to the latest frame slot still within the
            // allowed lag; the frames in between are never sent.
            let skip = (lag - MAX_FRAME_LAG).as_micros() / FRAME.as_micros() + 1;
            let skip = u32::try_from(skip).unwrap_or(u32::MAX);
            self.counters.frames_skipped += u64::from(skip);
            self.next_frame = Some(due + FRAME * skip);
            return;
        }
        let payload = self.next_payload(due);
        self.counters.frames_sent += 1;
        let timestamp = millis(due.saturating_sub(self.started_at + FRAME));
        let frame = self
            .wire
            .media(self.counters.frames_sent, timestamp, payload);
        self.outbox.push_back(frame);
        self.next_frame = Some(due + FRAME);
    }

    /// The caller's microphone for the frame ending at `t`, in the call's
    /// audio format.
    fn next_payload(&mut self, t: Duration) -> Vec<u8> {
        let frame_bytes = self.audio.frame_bytes();
        let mut frame = vec![transport::silence_byte(self.audio); frame_bytes];
        self.start_voice(t);
        let Stage::Speaking {
            utterance,
            audio,
            pos,
        } = &mut self.stage
        else {
            self.burst_into(&mut frame);
            return frame;
        };
        let end = (*pos + frame_bytes).min(audio.len());
        if let Some(chunk) = audio.get(*pos..end) {
            frame[..chunk.len()].copy_from_slice(chunk);
        }
        *pos = end;
        if *pos >= audio.len() {
            let reply = *utterance + 1;
            self.counters.utterances_sent += 1;
            self.speech_ended_at = t;
            self.counters.turn_audio = Duration::ZERO;
            self.ear.new_turn();
            self.interaction.speech_ended();
            self.stage = Stage::AwaitBot {
                turn: BotTurn::Reply(reply),
                heard: TurnHeard::Nothing,
            };
            self.owed_from = Some(t);
        }
        frame
    }

    /// Starts whatever the caller's voice does from the frame ending at
    /// `t`: the next utterance after thinking, the first utterance over the
    /// greeting (barge-in), or a cough into the turn playing.
    fn start_voice(&mut self, t: Duration) {
        match self.stage {
            Stage::Thinking { next, until } if t >= until => self.begin_utterance(next),
            Stage::AwaitBot {
                turn,
                heard: TurnHeard::Own,
            } => {
                if turn == BotTurn::Greeting && self.interaction.barge_starts(t) {
                    // Nothing is owed while the caller talks.
                    self.owed_from = None;
                    self.begin_utterance(0);
                } else if let Some(ms) = self.interaction.cough_starts(t, turn.index()) {
                    let audio = transport::encode(self.audio, &self.voice.utterance(ms));
                    self.burst = Some((audio, 0));
                }
            }
            _ => {}
        }
    }

    fn begin_utterance(&mut self, next: usize) {
        let ms = self.plan.turns.get(next).map_or(0, |turn| turn.speech_ms);
        let audio = transport::encode(self.audio, &self.voice.utterance(ms));
        self.burst = None;
        self.stage = Stage::Speaking {
            utterance: next,
            audio,
            pos: 0,
        };
    }

    /// Copies the next part of a cough being sent into `frame`.
    fn burst_into(&mut self, frame: &mut [u8]) {
        let Some((audio, pos)) = &mut self.burst else {
            return;
        };
        let end = (*pos + frame.len()).min(audio.len());
        if let Some(chunk) = audio.get(*pos..end) {
            frame[..chunk.len()].copy_from_slice(chunk);
        }
        *pos = end;
        if *pos >= audio.len() {
            self.burst = None;
        }
    }
}
