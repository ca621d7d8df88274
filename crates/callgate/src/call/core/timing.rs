//! Where each turn's time goes, on monotonic timestamps.
//!
//! Per user turn: caller speech end (the VAD's last voiced window), STT
//! final, dialog request sent, first dialog token, first TTS request, first
//! TTS audio, first frame out on the leg. Events that arrive (final, token,
//! audio) are stamped with the `now` the shell gave the core; sends (the
//! dialog request, the TTS request, the frame) are stamped when the shell
//! reports it has performed the step's commands
//! ([`CallCore::performed`]), so the core's and the shell's own work in
//! that step counts as callgate's.
//!
//! callgate's own share = (final → dialog request) + (first token → TTS
//! request) + (first TTS audio → first frame out): the gaps no provider
//! accounts for. When the turn's first audio had to queue behind a bundled
//! prompt (the watchdog's apology for a late provider), that last gap is
//! the prompt playing out, reported as `prompt_wait_us`, not as callgate's. The rest is the STT's (speech end → final), the dialog's
//! (request → first token, tool calls included) and the TTS's (request →
//! first audio). A field is present only when both its ends were seen.
//!
//! What the split cannot see: an event waiting in the channel from its
//! provider client's task to the call's task is stamped when the call
//! takes it, so that wait — and the client's own parsing — is counted on
//! the provider's side. Under CPU pressure that understates callgate's
//! share; the benchmark's reply latency (measured by the callers) bounds
//! the whole.
//!
//! Bounded: the first [`MAX_TIMED_TURNS`] turns are kept for the receipt;
//! later ones are still reported ([`Report::TurnOwn`]) and counted in
//! `untimed`.

use std::time::{Duration, Instant};

use dialog_grpc::TurnId;

use super::Report;

/// Turns kept per call for the receipt.
pub const MAX_TIMED_TURNS: usize = 64;

/// One turn's split, microseconds (receipt `turns[]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct TurnLatency {
    pub turn: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stt_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dialog_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tts_us: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own_us: Option<u64>,
    /// First TTS audio → first frame, when that audio queued behind a
    /// bundled prompt still playing (then not part of `own_us`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_wait_us: Option<u64>,
    /// Speech end (or the final, when the VAD heard no voice) → first frame.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_us: Option<u64>,
}

/// Stamps of the turn in progress.
#[derive(Debug, Clone, Copy)]
struct TurnClock {
    turn: TurnId,
    speech_end: Option<Instant>,
    final_at: Instant,
    dialog_sent: Option<Instant>,
    first_token: Option<Instant>,
    tts_request: Option<Instant>,
    first_audio: Option<Instant>,
    /// The first audio queued behind a bundled prompt.
    behind_prompt: bool,
    first_frame: Option<Instant>,
}

/// Sends stamped in this step, re-stamped when the shell performed them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Unperformed {
    dialog_sent: bool,
    tts_request: bool,
    first_frame: bool,
    /// Speech onset of a `clear` emitted in this step.
    stop: Option<Instant>,
}

/// The call's turn timings.
#[derive(Debug, Default)]
pub struct Timings {
    current: Option<TurnClock>,
    pending: Unperformed,
    done: Vec<TurnLatency>,
    /// The turn filed last (timed or not), for its bot turn's record.
    last: Option<TurnLatency>,
    untimed: u64,
    /// When the caller's current speech began (VAD), for barge-in stops.
    pub(super) voice_onset: Option<Instant>,
    /// Longest onset → `clear` performed, µs.
    pub(super) max_stop_us: Option<u64>,
    /// The VAD's voice end (audio ms) already used for a turn's timing.
    voice_end_used_ms: Option<u64>,
    /// Measurements for the shell's metrics, not yet taken.
    reports: Vec<Report>,
}

fn us(d: Duration) -> u64 {
    d.as_micros() as u64
}

fn gap(from: Option<Instant>, to: Option<Instant>) -> Option<Duration> {
    Some(to?.saturating_duration_since(from?))
}

impl TurnClock {
    fn latency(&self) -> TurnLatency {
        let final_at = Some(self.final_at);
        let out = gap(self.first_audio, self.first_frame);
        let (out, prompt_wait) = match self.behind_prompt {
            true => (out.map(|_| Duration::ZERO), out),
            false => (out, None),
        };
        let own = [
            gap(final_at, self.dialog_sent),
            gap(self.first_token, self.tts_request),
            out,
        ];
        let own = own.iter().copied().sum::<Option<Duration>>();
        TurnLatency {
            turn: self.turn.0,
            stt_us: gap(self.speech_end, final_at).map(us),
            dialog_us: gap(self.dialog_sent, self.first_token).map(us),
            tts_us: gap(self.tts_request, self.first_audio).map(us),
            own_us: own.map(us),
            prompt_wait_us: prompt_wait.map(us),
            total_us: gap(self.speech_end.or(final_at), self.first_frame).map(us),
        }
    }
}

impl Timings {
    /// A user turn was sent to the dialog at `now` (the final's time).
    pub fn begin(&mut self, turn: TurnId, speech_end: Option<Instant>, now: Instant) {
        self.close();
        self.current = Some(TurnClock {
            turn,
            speech_end: speech_end.filter(|e| *e <= now),
            final_at: now,
            dialog_sent: Some(now),
            first_token: None,
            tts_request: None,
            first_audio: None,
            behind_prompt: false,
            first_frame: None,
        });
        self.pending.dialog_sent = true;
    }

    fn clock(&mut self, turn: TurnId) -> Option<&mut TurnClock> {
        self.current.as_mut().filter(|c| c.turn == turn)
    }

    /// The dialog's first text for `turn`, and the TTS request it made.
    pub fn first_token(&mut self, turn: TurnId, now: Instant) {
        if let Some(c) = self.clock(turn).filter(|c| c.first_token.is_none()) {
            c.first_token = Some(now);
            c.tts_request = Some(now);
            self.pending.tts_request = true;
        }
    }

    /// The first TTS audio for `turn`; `behind_prompt` when a bundled
    /// prompt is still queued ahead of it.
    pub fn first_audio(&mut self, turn: TurnId, now: Instant, behind_prompt: bool) {
        if let Some(c) = self.clock(turn).filter(|c| c.first_audio.is_none()) {
            c.first_audio = Some(now);
            c.behind_prompt = behind_prompt;
        }
    }

    pub fn first_frame(&mut self, turn: TurnId, now: Instant) {
        if let Some(c) = self.clock(turn).filter(|c| c.first_frame.is_none()) {
            c.first_frame = Some(now);
            self.pending.first_frame = true;
        }
    }

    /// Whether the VAD's voice end `end_ms` has not yet timed a turn (and
    /// now has).
    pub fn voice_end_unused(&mut self, end_ms: u64) -> bool {
        let unused = self.voice_end_used_ms != Some(end_ms);
        self.voice_end_used_ms = Some(end_ms);
        unused
    }

    /// `turn`'s split, once its first frame went out and it was filed
    /// (the turn last filed only: a bot turn is recorded before the next
    /// turn's timing begins).
    pub fn latency_of(&self, turn: TurnId) -> Option<TurnLatency> {
        self.last.filter(|l| l.turn == turn.0)
    }

    /// Whether sends of this step wait for [`Timings::performed`].
    pub fn awaits_performed(&self) -> bool {
        self.pending != Unperformed::default()
    }

    /// The measurements made since the last call.
    pub fn take_reports(&mut self) -> std::vec::Drain<'_, Report> {
        self.reports.drain(..)
    }

    /// A `clear` for speech that began at the last voice onset was emitted.
    pub fn stop_emitted(&mut self) {
        self.pending.stop = self.voice_onset;
    }

    /// The shell performed this step's commands at `at`.
    pub fn performed(&mut self, at: Instant) {
        let p = std::mem::take(&mut self.pending);
        if let Some(onset) = p.stop {
            let stop = at.saturating_duration_since(onset);
            self.reports.push(Report::BargeInStop(stop));
            self.max_stop_us = self.max_stop_us.max(Some(us(stop)));
        }
        let Some(c) = self.current.as_mut() else {
            return;
        };
        if p.dialog_sent {
            c.dialog_sent = Some(at);
        }
        if p.tts_request {
            c.tts_request = Some(at);
        }
        if p.first_frame {
            c.first_frame = Some(at);
            self.close();
        }
    }

    /// Files the turn in progress (complete or not).
    fn close(&mut self) {
        let Some(c) = self.current.take() else {
            return;
        };
        let l = c.latency();
        self.last = Some(l);
        if let Some(own) = l.own_us {
            self.reports.push(Report::TurnOwn { us: own });
        }
        if self.done.len() < MAX_TIMED_TURNS {
            self.done.push(l);
        } else {
            self.untimed += 1;
        }
    }

    /// Every turn's split so far (the one in progress included).
    pub fn turns(&self) -> Vec<TurnLatency> {
        let mut all = self.done.clone();
        if let Some(c) = &self.current
            && all.len() < MAX_TIMED_TURNS
        {
            all.push(c.latency());
        }
        all
    }

    /// Turns beyond [`MAX_TIMED_TURNS`].
    pub fn untimed(&self) -> u64 {
        self.untimed + u64::from(self.current.is_some() && self.done.len() >= MAX_TIMED_TURNS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn own_share_is_the_three_gaps_no_provider_accounts_for() {
        let t0 = Instant::now();
        let mut t = Timings::default();
        t.begin(TurnId(1), Some(t0), t0 + ms(300));
        t.performed(t0 + ms(301));
        t.first_token(TurnId(1), t0 + ms(500));
        t.performed(t0 + ms(502));
        t.first_audio(TurnId(1), t0 + ms(700), false);
        t.first_frame(TurnId(1), t0 + ms(700));
        t.performed(t0 + ms(703));
        let l = t.turns()[0];
        assert_eq!(l.stt_us, Some(300_000));
        assert_eq!(l.dialog_us, Some(199_000));
        assert_eq!(l.tts_us, Some(198_000));
        assert_eq!(l.own_us, Some(6_000));
        assert_eq!(l.total_us, Some(703_000));
    }

    #[test]
    fn a_turn_superseded_before_it_was_heard_keeps_only_what_was_measured() {
        let t0 = Instant::now();
        let mut t = Timings::default();
        t.begin(TurnId(1), None, t0);
        t.first_token(TurnId(1), t0 + ms(100));
        t.first_audio(TurnId(2), t0 + ms(150), false); // another turn's: ignored
        t.begin(TurnId(2), None, t0 + ms(200));
        let l = t.turns()[0];
        assert_eq!(
            (l.stt_us, l.tts_us, l.own_us, l.total_us),
            (None, None, None, None)
        );
        assert_eq!(l.dialog_us, Some(100_000));
        let json = serde_json::to_value(l).unwrap_or_default();
        assert!(json.get("own_us").is_none(), "{json}");
    }

    #[test]
    fn audio_queued_behind_an_apology_waits_for_it_outside_the_own_share() {
        let t0 = Instant::now();
        let mut t = Timings::default();
        t.begin(TurnId(1), None, t0);
        t.performed(t0);
        t.first_token(TurnId(1), t0 + ms(2_500));
        t.performed(t0 + ms(2_500));
        t.first_audio(TurnId(1), t0 + ms(2_700), true);
        t.first_frame(TurnId(1), t0 + ms(5_200));
        t.performed(t0 + ms(5_200));
        let l = t.turns()[0];
        assert_eq!(l.prompt_wait_us, Some(2_500_000));
        assert_eq!(l.own_us, Some(0));
        assert_eq!(l.total_us, Some(5_200_000));
    }

    #[test]
    fn only_the_first_turns_are_kept() {
        let t0 = Instant::now();
        let mut t = Timings::default();
        for n in 0..(MAX_TIMED_TURNS as u64 + 5) {
            t.begin(TurnId(n + 1), None, t0);
        }
        assert_eq!(t.turns().len(), MAX_TIMED_TURNS);
        assert_eq!(t.untimed(), 5);
    }
}
