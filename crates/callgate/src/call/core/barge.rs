//! Barge-in: the caller's voice over the bot, decided in the call core.
//!
//! The call's own VAD confirms speech (`min_speech_ms` of voiced audio
//! above an adaptive noise floor and above the expected echo of what the
//! bot is saying) while bot audio is audible or queued. What happens then
//! is the [`BargeInPolicy`]:
//!
//! - `reversible` (default): **pause** in that same step — the pacer is
//!   held, the frames the carrier was still buffering go back to the front
//!   of its queue, the leg gets its `clear`. Then a confirmation window
//!   (`confirm_ms`) decides: words from the STT **commit** the
//!   interruption (TTS context cancelled, the dialog told what was heard,
//!   late audio dropped — [`CallCore::barge_in`]); no words by the end of
//!   the window, once the VAD hears silence again, **resume** the turn
//!   from the first frame the caller did not hear (a cough, a door, line
//!   noise). A pause never outlasts `3 × confirm_ms`: sound that goes on
//!   that long with no words is not a caller the STT can answer.
//! - `immediate`: commit at the VAD's decision (fast, and a cough stops
//!   the bot for good).
//! - `words`: only the STT's first words stop the bot (robust, slower by
//!   the provider's interim latency).
//!
//! Whatever the policy, words over an audible bot commit an interruption
//! (the VAD can miss a quiet caller under the echo reference).
//!
//! Echo: every frame sent is remembered with its level for `echo_tail_ms`
//! (the round trip through the carrier and a speakerphone); the VAD does
//! not count a window quieter than the loudest of them less
//! `echo_return_loss_db`. Bounded: one level per frame of the tail.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tracing::info;

use super::state::{Pause, Turn};
use super::{CallCore, Report};
use crate::leg::LegFormat;

/// What stops the bot when the caller speaks over it (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BargeInPolicy {
    #[default]
    Reversible,
    Immediate,
    Words,
}

/// `[call.barge_in]`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BargeInConfig {
    pub policy: BargeInPolicy,
    /// Voiced audio the VAD needs before it calls it speech (and pauses).
    /// The default, 50 ms, is an odd number of the VAD's 10 ms windows: the
    /// decision then lands at the end of the same 20 ms carrier frame
    /// whether speech began at a frame's start or halfway into it (60 ms
    /// costs a whole extra frame for half of all onsets).
    pub min_speech_ms: u32,
    /// After a pause, how long words from the STT may take to commit it.
    pub confirm_ms: u32,
    /// How much quieter than the bot its echo is assumed to come back, dB.
    pub echo_return_loss_db: f32,
    /// How long after a frame is sent its echo may still come back.
    pub echo_tail_ms: u32,
}

impl Default for BargeInConfig {
    fn default() -> Self {
        BargeInConfig {
            policy: BargeInPolicy::Reversible,
            min_speech_ms: 50,
            confirm_ms: 600,
            echo_return_loss_db: 10.0,
            echo_tail_ms: 500,
        }
    }
}

impl BargeInConfig {
    /// Limits on the values, with the reason when one is out of range.
    pub fn validate(&self) -> Result<(), String> {
        if !(20..=1_000).contains(&self.min_speech_ms) {
            return Err("call.barge_in.min_speech_ms must be 20..=1000".into());
        }
        if !(100..=5_000).contains(&self.confirm_ms) {
            return Err("call.barge_in.confirm_ms must be 100..=5000".into());
        }
        if !(0.0..=60.0).contains(&self.echo_return_loss_db) {
            return Err("call.barge_in.echo_return_loss_db must be 0..=60".into());
        }
        if self.echo_tail_ms > 2_000 {
            return Err("call.barge_in.echo_tail_ms must be at most 2000".into());
        }
        Ok(())
    }
}

/// The loudest frame sent within the echo tail: a sliding-window maximum
/// (each entry is louder than every later one), O(1) per frame.
#[derive(Debug)]
pub(super) struct EchoRef {
    sent: VecDeque<(Instant, f32)>,
    tail: Duration,
    loss_db: f32,
}

impl EchoRef {
    pub fn new(cfg: &BargeInConfig) -> Self {
        EchoRef {
            sent: VecDeque::new(),
            tail: Duration::from_millis(u64::from(cfg.echo_tail_ms)),
            loss_db: cfg.echo_return_loss_db,
        }
    }

    /// A frame of `format` audio was sent at `now`.
    pub fn sent(&mut self, now: Instant, frame: &[u8], format: LegFormat) {
        if self.tail.is_zero() {
            return;
        }
        let level = format.level_dbfs(frame);
        self.expire(now);
        while self.sent.back().is_some_and(|(_, l)| *l <= level) {
            self.sent.pop_back();
        }
        self.sent.push_back((now, level));
    }

    /// The level under which inbound audio is taken for echo, if any was sent.
    pub fn reference(&mut self, now: Instant) -> Option<f32> {
        self.expire(now);
        let (_, loudest) = self.sent.front()?;
        Some(loudest - self.loss_db)
    }

    fn expire(&mut self, now: Instant) {
        while self
            .sent
            .front()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) > self.tail)
        {
            self.sent.pop_front();
        }
    }
}

impl CallCore {
    /// The VAD confirmed speech that began at `onset`.
    pub(super) fn on_voice_onset(&mut self, onset: Instant, now: Instant) {
        self.timings.voice_onset = Some(onset);
        if !self.is_live() || !self.bot_is_audible() || self.turn.pause().is_some() {
            return;
        }
        match self.cfg.barge_in.policy {
            BargeInPolicy::Words => {}
            BargeInPolicy::Immediate => self.barge_in(now),
            BargeInPolicy::Reversible => self.pause(now),
        }
    }

    /// Stops output in this step, keeping the turn (module docs).
    fn pause(&mut self, now: Instant) {
        let Some(b) = self.turn.reply_mut() else {
            return;
        };
        let was_heard = b.frames_sent > 0;
        let rewound = u64::from(self.pacer.hold(now));
        let turn_back = rewound.min(b.frames_sent);
        b.frames_sent -= turn_back;
        self.prompt_frames += rewound - turn_back;
        if was_heard {
            self.push(super::Command::Clear);
            self.timings.stop_emitted();
        }
        let confirm = Duration::from_millis(u64::from(self.cfg.barge_in.confirm_ms));
        if let Turn::Replying { pause, .. } = &mut self.turn {
            *pause = Some(Pause {
                since: now,
                confirm_by: now + confirm,
                awaiting_silence: false,
                give_up_at: now + confirm * 3,
            });
        }
        self.interaction.barge_in_pauses += 1;
        self.report(Report::BargeInPause);
        let detail = serde_json::json!({ "rewound_frames": rewound });
        self.event("barge_in_paused", detail, now);
    }

    /// Ends a pause whose window passed without words.
    pub(super) fn check_pause(&mut self, now: Instant) {
        let Turn::Replying { pause, .. } = &mut self.turn else {
            return;
        };
        let Some(p) = pause.as_mut() else {
            return;
        };
        if now < p.confirm_by {
            return;
        }
        if self.vad.is_speaking() && now < p.give_up_at {
            p.awaiting_silence = true;
            return;
        }
        let since = p.since;
        *pause = None;
        self.pacer.release();
        // The sound was judged not to be the caller's words: no transcript
        // is owed for it.
        self.watchdog.speech_dismissed();
        if let Some(live) = self.live_mut() {
            live.finalize_at = None;
        }
        self.interaction.false_barge_ins += 1;
        self.report(Report::FalseBargeIn);
        let paused_ms = (now - since).as_millis() as u64;
        info!(paused_ms, "barge-in taken back: no words, the bot resumes");
        self.event(
            "barge_in_resumed",
            serde_json::json!({ "paused_ms": paused_ms }),
            now,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_is_the_loudest_frame_of_the_tail_less_the_return_loss() {
        let cfg = BargeInConfig::default();
        let mut echo = EchoRef::new(&cfg);
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let f = LegFormat::L16k16;
        let frame = |v: i16| media::format::samples_to_pcm16le(&[v; 320]);
        assert_eq!(echo.reference(t0), None);
        echo.sent(ms(0), &frame(8_000), f);
        echo.sent(ms(20), &frame(16_000), f);
        echo.sent(ms(40), &frame(4_000), f);
        let loud = f.level_dbfs(&frame(16_000));
        let quiet = f.level_dbfs(&frame(4_000));
        assert_eq!(echo.reference(ms(100)), Some(loud - 10.0));
        // The loud frame leaves the 500 ms tail; the later, quieter one stays.
        assert_eq!(echo.reference(ms(530)), Some(quiet - 10.0));
        assert_eq!(echo.reference(ms(600)), None);
    }
}
