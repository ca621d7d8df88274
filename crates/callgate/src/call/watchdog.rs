//! The per-call watchdog (docs/design.md principle 5: nothing hangs silently).
//!
//! Sans-IO: the call actor tells it what happened (`reply_owed`,
//! `reply_audible`, `caller_speech_ended`, `transcript_final`, `media_seen`)
//! and polls it with `now`; it answers with the action a stall calls for.
//!
//! Clocks and policy:
//! - **reply** — a greeting or reply is owed (or a reply ran dry mid-turn)
//!   and no audio is reaching the caller. After `reply_stall` the caller hears
//!   an apology and the clock gets `retry` more; if it stalls again the call
//!   is transferred to a human.
//! - **stt** — the caller finished speaking (local VAD) and the STT provider
//!   produced no final transcript within `stt_stall`: apology (and the actor
//!   asks STT to finalize), then transfer.
//! - **media** — the carrier stopped sending frames for `media_stall` (a carrier
//!   streams continuously, even in silence): nobody is listening, so the call
//!   ends without a prompt. Off for a leg that bounds its own media
//!   ([`Watchdog::leg_bounds_media`]: WebRTC, whose ICE, DTLS and consent
//!   clocks decide, and which applies the media-stall rule itself while the
//!   peer keeps consent).

use std::time::{Duration, Instant};

/// Which clock stalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    Reply,
    Stt,
    Media,
}

/// What the actor must do about a stall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// First stall of this clock: play the apology, keep waiting.
    Apologize(Clock),
    /// Second stall: transfer the caller to a human.
    Transfer(Clock),
    /// The carrier is gone: end the call.
    End(Clock),
}

impl Action {
    /// The clock that stalled.
    pub fn clock(self) -> Clock {
        match self {
            Action::Apologize(c) | Action::Transfer(c) | Action::End(c) => c,
        }
    }

    /// The action's label in metrics and the call's timeline.
    pub fn label(self) -> &'static str {
        match self {
            Action::Apologize(_) => "apology",
            Action::Transfer(_) => "transfer",
            Action::End(_) => "end",
        }
    }
}

/// Deadlines of the watchdog.
#[derive(Debug, Clone, Copy)]
pub struct WatchdogConfig {
    pub reply_stall: Duration,
    pub stt_stall: Duration,
    pub media_stall: Duration,
    pub retry: Duration,
}

#[derive(Debug, Default, Clone, Copy)]
struct Armed {
    deadline: Option<Instant>,
    apologized: bool,
}

impl Armed {
    fn arm(&mut self, at: Instant) {
        if self.deadline.is_none() {
            self.deadline = Some(at);
        }
    }

    fn disarm(&mut self) {
        *self = Armed::default();
    }

    fn fire(&mut self, now: Instant, retry: Duration, clock: Clock) -> Option<Action> {
        self.deadline.filter(|d| *d <= now)?;
        if self.apologized {
            self.deadline = None;
            return Some(Action::Transfer(clock));
        }
        self.apologized = true;
        self.deadline = Some(now + retry);
        Some(Action::Apologize(clock))
    }
}

/// The watchdog of one call.
#[derive(Debug)]
pub struct Watchdog {
    cfg: WatchdogConfig,
    reply: Armed,
    stt: Armed,
    last_media: Instant,
    media_check: Instant,
    /// The carrier is detached (see [`Watchdog::media_suspended`]).
    media_suspended: bool,
    /// The leg bounds its own media (see [`Watchdog::leg_bounds_media`]).
    media_by_leg: bool,
    /// When the caller's current speech began (local VAD), and when STT last
    /// delivered a final: the two detectors race, so a final that arrived
    /// during the speech already covers it.
    speech_started: Option<Instant>,
    last_final: Option<Instant>,
    /// Stalls seen, for the ledger.
    pub stalls: u32,
}

impl Watchdog {
    pub fn new(cfg: WatchdogConfig, now: Instant) -> Self {
        Watchdog {
            cfg,
            reply: Armed::default(),
            stt: Armed::default(),
            last_media: now,
            media_check: now + cfg.media_stall,
            media_suspended: false,
            media_by_leg: false,
            speech_started: None,
            last_final: None,
            stalls: 0,
        }
    }

    /// A greeting or reply became owed (or a reply stopped mid-turn).
    pub fn reply_owed(&mut self, now: Instant) {
        self.reply.arm(now + self.cfg.reply_stall);
    }

    /// Reply audio is reaching the caller again.
    pub fn reply_audible(&mut self) {
        self.reply.disarm();
    }

    /// Nothing is owed any more (the call is ending or the turn was dropped).
    pub fn nothing_owed(&mut self) {
        self.reply.disarm();
        self.stt.disarm();
    }

    /// The caller started speaking (local VAD).
    pub fn caller_speech_started(&mut self, now: Instant) {
        self.speech_started = Some(now);
    }

    /// The caller stopped speaking; a transcript is now owed by STT, unless
    /// one already arrived while they spoke.
    pub fn caller_speech_ended(&mut self, now: Instant) {
        let covered =
            matches!((self.last_final, self.speech_started), (Some(f), Some(s)) if f >= s);
        if !covered {
            self.stt.arm(now + self.cfg.stt_stall);
        }
    }

    /// The caller's last sound was judged not to be words (a barge-in
    /// taken back): no transcript is owed for it.
    pub fn speech_dismissed(&mut self) {
        self.stt.disarm();
    }

    /// Whether the caller's last speech still waits for a transcript.
    pub fn transcript_owed(&self) -> bool {
        self.stt.deadline.is_some()
    }

    /// STT delivered a final transcript.
    pub fn transcript_final(&mut self, now: Instant) {
        self.last_final = Some(now);
        self.stt.disarm();
    }

    /// A carrier frame arrived. Cheap: only stores the time. Ends a
    /// [`Watchdog::media_suspended`] gap: the clock restarts here.
    pub fn media_seen(&mut self, now: Instant) {
        self.last_media = now;
        self.media_suspended = false;
    }

    /// The carrier's connection dropped and may be resumed (a partner
    /// leg's resume window): no frames are owed until [`Watchdog::media_seen`]
    /// or a new connection is attached ([`Watchdog::media_resumed`]). The leg
    /// itself bounds the gap and reports the carrier gone when it ends.
    pub fn media_suspended(&mut self) {
        self.media_suspended = true;
    }

    /// A new carrier connection was attached at `now`: frames are owed
    /// again, counted from here.
    pub fn media_resumed(&mut self, now: Instant) {
        self.media_seen(now);
        self.media_check = now + self.cfg.media_stall;
    }

    /// The leg ends the call itself when its peer's media stops (WebRTC:
    /// the transport's own clocks): the media clock never fires.
    pub fn leg_bounds_media(&mut self) {
        self.media_by_leg = true;
    }

    /// The earliest instant at which `poll` may have something to say.
    pub fn next_deadline(&self) -> Instant {
        [
            self.reply.deadline,
            self.stt.deadline,
            (!self.media_by_leg).then_some(self.media_check),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(self.media_check)
    }

    /// The action due at `now`, if any. Call until `None`.
    pub fn poll(&mut self, now: Instant) -> Option<Action> {
        if self.media_suspended || self.media_by_leg {
            self.media_check = self.media_check.max(now + self.cfg.media_stall);
        } else if now >= self.media_check {
            if now.duration_since(self.last_media) >= self.cfg.media_stall {
                self.media_check = now + self.cfg.media_stall;
                self.stalls += 1;
                return Some(Action::End(Clock::Media));
            }
            self.media_check = self.last_media + self.cfg.media_stall;
        }
        let retry = self.cfg.retry;
        let action = self
            .reply
            .fire(now, retry, Clock::Reply)
            .or_else(|| self.stt.fire(now, retry, Clock::Stt));
        if action.is_some() {
            self.stalls += 1;
        }
        action
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> WatchdogConfig {
        WatchdogConfig {
            reply_stall: Duration::from_secs(2),
            stt_stall: Duration::from_secs(2),
            media_stall: Duration::from_secs(5),
            retry: Duration::from_secs(4),
        }
    }

    fn s(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_leg_that_bounds_its_own_media_is_never_ended_by_the_media_clock() {
        let t0 = Instant::now();
        let mut w = Watchdog::new(cfg(), t0);
        w.leg_bounds_media();
        w.media_seen(t0 + s(100));
        assert_eq!(w.poll(t0 + s(60_000)), None);
        // Only the clocks that are armed set the next deadline.
        w.reply_owed(t0 + s(60_000));
        assert_eq!(w.next_deadline(), t0 + s(62_000));
        assert_eq!(w.stalls, 0);
    }

    #[test]
    fn an_owed_reply_gets_an_apology_then_a_transfer() {
        let t0 = Instant::now();
        let mut w = Watchdog::new(cfg(), t0);
        w.reply_owed(t0);
        w.media_seen(t0 + s(1_900));
        assert_eq!(w.next_deadline(), t0 + s(2_000));
        assert_eq!(w.poll(t0 + s(1_999)), None);
        assert_eq!(w.poll(t0 + s(2_000)), Some(Action::Apologize(Clock::Reply)));
        w.media_seen(t0 + s(5_900));
        assert_eq!(w.poll(t0 + s(5_999)), None);
        assert_eq!(w.poll(t0 + s(6_000)), Some(Action::Transfer(Clock::Reply)));
        assert_eq!(w.stalls, 2);
    }

    #[test]
    fn audio_disarms_and_a_later_stall_starts_afresh() {
        let t0 = Instant::now();
        let mut w = Watchdog::new(cfg(), t0);
        w.reply_owed(t0);
        assert_eq!(w.poll(t0 + s(2_000)), Some(Action::Apologize(Clock::Reply)));
        w.reply_audible();
        w.reply_owed(t0 + s(3_000));
        w.media_seen(t0 + s(4_900));
        assert_eq!(
            w.poll(t0 + s(5_000)),
            Some(Action::Apologize(Clock::Reply)),
            "a new stall apologises first"
        );
    }

    #[test]
    fn rearming_an_armed_clock_keeps_the_first_deadline() {
        let t0 = Instant::now();
        let mut w = Watchdog::new(cfg(), t0);
        w.reply_owed(t0);
        w.reply_owed(t0 + s(1_500));
        assert_eq!(w.next_deadline(), t0 + s(2_000));
    }

    #[test]
    fn a_missing_transcript_is_an_stt_stall() {
        let t0 = Instant::now();
        let mut w = Watchdog::new(cfg(), t0);
        w.caller_speech_started(t0);
        w.caller_speech_ended(t0 + s(1_000));
        w.media_seen(t0 + s(2_999));
        assert_eq!(w.poll(t0 + s(2_999)), None);
        assert_eq!(w.poll(t0 + s(3_000)), Some(Action::Apologize(Clock::Stt)));
        w.transcript_final(t0 + s(3_100));
        w.media_seen(t0 + s(8_000));
        assert_eq!(w.poll(t0 + s(9_000)), None);
    }

    #[test]
    fn a_final_that_beats_the_local_vad_covers_the_speech() {
        let t0 = Instant::now();
        let mut w = Watchdog::new(cfg(), t0);
        w.caller_speech_started(t0);
        w.transcript_final(t0 + s(1_000));
        w.caller_speech_ended(t0 + s(1_050));
        assert_eq!(
            w.next_deadline(),
            t0 + s(5_000),
            "only the media check is armed"
        );
    }

    #[test]
    fn media_silence_from_the_carrier_ends_the_call() {
        let t0 = Instant::now();
        let mut w = Watchdog::new(cfg(), t0);
        w.media_seen(t0 + s(3_000));
        // First check at 5 s: media was seen 2 s ago, so the check moves to 8 s.
        assert_eq!(w.poll(t0 + s(5_000)), None);
        assert_eq!(w.next_deadline(), t0 + s(8_000));
        assert_eq!(w.poll(t0 + s(8_000)), Some(Action::End(Clock::Media)));
    }

    #[test]
    fn a_detached_carrier_owes_no_media_until_it_is_attached_again() {
        let t0 = Instant::now();
        let mut w = Watchdog::new(cfg(), t0);
        w.media_seen(t0 + s(1_000));
        w.media_suspended();
        // Far past the 5 s stall: nothing fires, and the next check is
        // never in the past (no busy loop while detached).
        assert_eq!(w.poll(t0 + s(12_000)), None);
        assert!(w.next_deadline() > t0 + s(12_000));
        w.media_resumed(t0 + s(14_000));
        assert_eq!(w.poll(t0 + s(18_999)), None);
        assert_eq!(w.poll(t0 + s(19_000)), Some(Action::End(Clock::Media)));
        assert_eq!(w.stalls, 1);
    }
}
