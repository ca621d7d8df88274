//! The call's decisions, sans-IO: events and `now` in, commands out.
//!
//! [`CallCore`] owns turn taking, barge-in, bot-turn bookkeeping, tool
//! policy, the watchdog's actions, the pacing of outbound audio, the final
//! marker and the one terminal transition. It never reads a clock, never
//! touches a socket and never awaits: the async shell
//! ([`crate::call::CallActor`]) feeds it [`Input`]s with the time they
//! happened, drains [`Command`]s and performs them as non-blocking sends,
//! and sleeps until [`CallCore::next_deadline`]. Tests drive it on a
//! virtual clock (`core/tests.rs`).
//!
//! States ([`Phase`]): `Live` — the conversation, itself either listening
//! or replying (a [`BotTurn`] in progress) — then `Ending` (a final prompt
//! and marker are playing; the call ends when the leg reports the marker
//! played, or at a deadline), then `Ended`. `Ended` is reached exactly
//! once; a second cause is counted and ignored, so the first cause is the
//! one recorded.

mod barge;
mod conversation;
mod drain;
mod io;
mod outage;
#[cfg(test)]
mod tests;
mod timing;
mod tool_memory;
mod tool_outcome;

pub use barge::{BargeInConfig, BargeInPolicy};
pub use timing::TurnLatency;

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use dialog_grpc::{ToolCallId, TurnId};
use media::pacer::{Paced, Pacer};
use state_store::{Speaker, Stage};
use stt_client::UtteranceAssembler;
use tracing::{debug, info, warn};

use super::bot::{BotTurn, Exit};
use super::watchdog::{Action, Clock, Watchdog};
use crate::end::{Culprit, End, EndReason};
use crate::leg::LegEvent;
use crate::metrics as m;
use crate::prompts::Prompt;
pub use io::{Command, CoreConfig, Input, Interaction, Rec};
pub use tool_outcome::ToolOutcome;

/// The call's phase. See the module documentation.
#[derive(Debug)]
pub enum Phase {
    Live,
    Ending(Ending),
    Ended(End),
}

/// A final prompt and marker are playing.
#[derive(Debug)]
pub struct Ending {
    pub mark: String,
    pub end: End,
    pub deadline: Instant,
}

/// Whether the bot is replying.
#[derive(Debug)]
enum Turn {
    Listening,
    Replying(BotTurn),
}

/// Which provider links are still open.
#[derive(Debug, Clone, Copy)]
struct Links {
    stt: bool,
    tts: bool,
    dialog: bool,
}

/// A tool call the core is waiting on.
#[derive(Debug, Clone, Copy)]
struct ToolTask {
    turn: TurnId,
    privileged: bool,
}

/// The call's decision state.
#[derive(Debug)]
pub struct CallCore {
    cfg: CoreConfig,
    phase: Phase,
    turn: Turn,
    /// How the call ends once the current reply has been generated.
    pending_exit: Option<Exit>,
    out: VecDeque<Command>,
    pacer: Pacer<String>,
    watchdog: Watchdog,
    /// Local VAD on caller audio: barge-in, and tells the watchdog when a
    /// transcript is owed.
    vad: media::vad::EnergyVad,
    /// Bot output held on the caller's voice, waiting for words.
    pause: Option<barge::Pause>,
    echo: barge::EchoRef,
    timings: timing::Timings,
    /// The VAD's voice end already used for a turn's timing (audio ms).
    timed_voice_end_ms: Option<u64>,
    assembler: UtteranceAssembler,
    links: Links,
    tools: HashMap<ToolCallId, ToolTask>,
    /// Finished tool calls, for ids a resumed dialog stream repeats.
    tool_memory: tool_memory::ToolMemory,
    /// The user turn the dialog's events must carry (0 = the greeting).
    expected_turn: TurnId,
    /// The latest turn a reply was started for (`None`: not even the
    /// greeting yet); equal to `expected_turn` when no reply is owed.
    answered_turn: Option<TurnId>,
    /// A `transfer` drain asked for a hand-over at the next turn boundary.
    drain_transfer: bool,
    next_ctx: u64,
    /// Frames of a bundled prompt queued ahead of bot audio.
    prompt_frames: u64,
    /// When to ask STT to `Finalize`: the caller stopped speaking (local
    /// VAD) and no final has come; half the STT stall, so the provider is
    /// nudged before the watchdog has to apologise.
    finalize_at: Option<Instant>,
    reply_owed_since: Option<Instant>,
    utterance_first_heard: Option<Instant>,
    last_media: Option<Instant>,
    first_audio_sent: bool,
    media_ready_at: Instant,
    max_end: Instant,
    interaction: Interaction,
    /// Terminal transitions attempted after the first (counted, ignored).
    late_ends: u32,
}

impl CallCore {
    /// A call whose media became ready at `now`: the greeting is owed.
    pub fn new(cfg: CoreConfig, now: Instant) -> Self {
        let f = cfg.format;
        let vad_cfg = media::vad::VadConfig {
            min_silence_ms: cfg.vad_min_silence_ms.max(200),
            min_speech_ms: cfg.barge_in.min_speech_ms,
            ..media::vad::VadConfig::default()
        };
        let mut core = CallCore {
            phase: Phase::Live,
            turn: Turn::Listening,
            pending_exit: None,
            out: VecDeque::new(),
            pacer: Pacer::new(f.frame_bytes(), f.silence(), cfg.lead),
            watchdog: Watchdog::new(cfg.watchdog, now),
            vad: media::vad::EnergyVad::new(vad_cfg, f.sample_rate()),
            pause: None,
            echo: barge::EchoRef::new(&cfg.barge_in),
            timings: timing::Timings::default(),
            timed_voice_end_ms: None,
            assembler: UtteranceAssembler::default(),
            links: Links {
                stt: true,
                tts: true,
                dialog: true,
            },
            tools: HashMap::new(),
            tool_memory: tool_memory::ToolMemory::default(),
            expected_turn: TurnId(0),
            answered_turn: None,
            drain_transfer: false,
            next_ctx: 0,
            prompt_frames: 0,
            finalize_at: None,
            reply_owed_since: None,
            utterance_first_heard: None,
            last_media: None,
            first_audio_sent: false,
            media_ready_at: now,
            max_end: now + cfg.max_duration,
            interaction: Interaction::default(),
            late_ends: 0,
            cfg,
        };
        core.record(Rec::Stage(Stage::MediaReady, now));
        core.watchdog.reply_owed(now);
        core
    }

    /// Handles one input that happened at `now`, then whatever time has
    /// made due (timers, outbound audio). Read the results with
    /// [`CallCore::next_command`].
    pub fn handle(&mut self, now: Instant, input: Input) {
        if matches!(self.phase, Phase::Ended(_)) {
            // A second terminal cause (a hang-up racing our own end, a
            // drain deadline after it): counted, never recorded.
            let terminal = matches!(&input, Input::Leg(ev) if ev.is_terminal())
                || matches!(input, Input::DrainDeadline | Input::OwnershipLost);
            if terminal {
                self.late_ends += 1;
            }
            return;
        }
        {
            match input {
                Input::Leg(ev) => self.on_leg(ev, now),
                Input::Stt(ev) => self.on_stt(ev, now),
                Input::Dialog(ev) => self.on_dialog(ev, now),
                Input::Tts(ev) => self.on_tts(ev, now),
                Input::Tool(outcome) => self.on_tool_result(outcome, now),
                Input::DrainDeadline => self.fail_over(
                    End::new(EndReason::DrainDeadline, now),
                    Prompt::Goodbye,
                    "callgate-end:drain_deadline".into(),
                    "drain_deadline",
                    now,
                ),
                Input::OwnershipLost => self.fail_over(
                    End::new(EndReason::OwnerFenced, now),
                    Prompt::Goodbye,
                    "callgate-end:owner_fenced".into(),
                    "owner_fenced",
                    now,
                ),
                Input::DrainTransfer => self.drain_transfer_requested(now),
                Input::DrainCancelled => self.drain_cancelled(now),
                Input::Tick => {}
            }
        }
        self.on_time(now);
        self.hand_over_if_at_boundary(now);
    }

    /// The next command to perform, in order.
    pub fn next_command(&mut self) -> Option<Command> {
        self.out.pop_front()
    }

    /// When [`CallCore::handle`] must next be called with [`Input::Tick`].
    pub fn next_deadline(&self) -> Option<Instant> {
        let pacer = self.pacer.next_deadline();
        let own = match &self.phase {
            Phase::Live => {
                let watch = self.watchdog.next_deadline().min(self.max_end);
                let pause = self.pause.map(|p| p.deadline());
                [Some(watch), self.finalize_at, pause]
                    .into_iter()
                    .flatten()
                    .min()
            }
            Phase::Ending(e) => Some(e.deadline),
            Phase::Ended(_) => return None,
        };
        [pacer, own].into_iter().flatten().min()
    }

    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// How the call ended, once it has.
    pub fn ended(&self) -> Option<&End> {
        match &self.phase {
            Phase::Ended(end) => Some(end),
            _ => None,
        }
    }

    /// Whether bot audio of a reply is reaching the caller (the `speaking` gauge).
    pub fn is_speaking(&self) -> bool {
        self.pause.is_none() && matches!(&self.turn, Turn::Replying(b) if b.frames_sent > 0)
    }

    /// The shell performed every command of the last step at `at`: sends
    /// the core stamped at the step's `now` are re-stamped (timing.rs).
    pub fn performed(&mut self, at: Instant) {
        self.timings.performed(at);
    }

    /// Each user turn's latency split (receipt `turns`), bounded.
    pub fn turn_latencies(&self) -> Vec<TurnLatency> {
        self.timings.turns()
    }

    /// User turns beyond the receipt's bound.
    pub fn untimed_turns(&self) -> u64 {
        self.timings.untimed()
    }

    /// Tool calls the core is waiting on.
    pub fn tools_in_flight(&self) -> usize {
        self.tools.len()
    }

    pub fn interaction(&self) -> Interaction {
        Interaction {
            barge_in_stop_max_us: self.timings.max_stop_us,
            ..self.interaction
        }
    }

    /// Stalls the watchdog acted on.
    pub fn stalls(&self) -> u32 {
        self.watchdog.stalls
    }

    /// Terminal transitions attempted after the call had ended.
    pub fn late_ends(&self) -> u32 {
        self.late_ends
    }

    /// When caller media last arrived.
    pub fn last_media(&self) -> Option<Instant> {
        self.last_media
    }

    /// Gaps the caller heard in the middle of a reply or prompt.
    pub fn underruns(&self) -> media::pacer::Underruns {
        self.pacer.underruns()
    }

    fn push(&mut self, c: Command) {
        self.out.push_back(c);
    }

    fn record(&mut self, r: Rec) {
        self.out.push_back(Command::Record(r));
    }

    fn event(&mut self, kind: &str, detail: serde_json::Value, at: Instant) {
        self.record(Rec::Event {
            kind: kind.to_string(),
            detail,
            at,
        });
    }

    fn is_live(&self) -> bool {
        matches!(self.phase, Phase::Live)
    }

    // ----- the leg ---------------------------------------------------------

    fn on_leg(&mut self, ev: LegEvent, now: Instant) {
        match ev {
            LegEvent::Audio(bytes) => self.on_audio(bytes, now),
            LegEvent::Dtmf(digit) => {
                if self.links.dialog {
                    self.push(Command::DialogDtmf(digit));
                }
                self.event("dtmf", serde_json::json!({}), now);
            }
            LegEvent::Played(name) => self.on_played(&name, now),
            LegEvent::Hangup => self.peer_left(End::new(EndReason::CallerHangup, now)),
            LegEvent::MediaTimeout(after) => {
                warn!(
                    after_ms = after.as_millis() as u64,
                    "no media from the carrier: hanging up"
                );
                let detail = format!("no RTP or RTCP for {} ms", after.as_millis());
                self.finish(End::new(EndReason::RtpTimeout, now).with_detail(detail));
            }
            LegEvent::Detached => {
                self.watchdog.media_suspended();
                self.event("carrier_detached", serde_json::json!({}), now);
            }
            LegEvent::Attached => {
                self.watchdog.media_resumed(now);
                self.event("carrier_attached", serde_json::json!({}), now);
            }
            LegEvent::Gone(why) => {
                info!(why = %why, "carrier leg ended without a hang-up");
                self.peer_left(End::new(EndReason::CarrierGone, now).with_detail(why));
            }
            LegEvent::Violation(v) => {
                warn!(error = %v.detail, kind = v.kind, "closing leg: carrier protocol violation");
                metrics::counter!(m::PROTOCOL_ERRORS, "kind" => v.kind).increment(1);
                let detail = serde_json::json!({ "kind": v.kind, "detail": v.detail });
                self.event("protocol_error", detail, now);
                let end = End::new(EndReason::ProtocolViolation(v.kind), now).with_detail(v.detail);
                self.peer_left(end);
            }
        }
    }

    fn on_audio(&mut self, bytes: Vec<u8>, now: Instant) {
        self.last_media = Some(now);
        self.watchdog.media_seen(now);
        self.listen_locally(&bytes, now);
        metrics::counter!(m::MEDIA_IN).increment(1);
        if self.links.stt && !bytes.is_empty() {
            self.push(Command::SttAudio(bytes));
        }
    }

    /// Runs the local VAD: speech over the bot is a barge-in; the end of
    /// caller speech makes a transcript owed.
    fn listen_locally(&mut self, audio: &[u8], now: Instant) {
        let pcm = self.cfg.format.decode(audio);
        self.vad.set_reference_db(self.echo.reference(now));
        for ev in self.vad.push(&pcm) {
            match ev {
                media::vad::VadEvent::SpeechStart { at_ms } => {
                    self.watchdog.caller_speech_started(now);
                    self.finalize_at = None;
                    let onset = self.audio_instant(at_ms, now);
                    self.on_voice_onset(onset, now);
                }
                media::vad::VadEvent::SpeechEnd { .. } if self.is_live() => {
                    self.watchdog.caller_speech_ended(now);
                    if self.watchdog.transcript_owed() {
                        self.finalize_at = Some(now + self.cfg.watchdog.stt_stall / 2);
                    }
                }
                media::vad::VadEvent::SpeechEnd { .. } => {}
            }
        }
    }

    /// The instant at which audio time `at_ms` arrived (caller audio comes
    /// in real time, so its lag behind the newest frame is wall time).
    fn audio_instant(&self, at_ms: u64, now: Instant) -> Instant {
        let behind = Duration::from_millis(self.vad.audio_ms().saturating_sub(at_ms));
        now.checked_sub(behind).unwrap_or(now)
    }

    /// When the caller's voice last ended, once per turn (timing).
    fn voice_end_for_turn(&mut self, now: Instant) -> Option<Instant> {
        let end = self.vad.last_voice_end_ms()?;
        if self.timed_voice_end_ms == Some(end) {
            return None;
        }
        self.timed_voice_end_ms = Some(end);
        Some(self.audio_instant(end, now))
    }

    /// The peer ended the call. During a final prompt the first cause (the
    /// reason the call was ending) stays the recorded one.
    fn peer_left(&mut self, end: End) {
        let at = end.at;
        if let Phase::Ending(e) = &self.phase {
            let mut first = e.end.clone();
            first.at = at;
            first.peer_left = true;
            let left = end.reason.label();
            self.event(
                "peer_left_during_final_prompt",
                serde_json::json!({ "why": left }),
                at,
            );
            self.finish(first);
        } else {
            self.finish(end);
        }
    }

    fn on_played(&mut self, name: &str, now: Instant) {
        if let Phase::Ending(e) = &self.phase
            && e.mark == name
        {
            let mut end = e.end.clone();
            end.at = now;
            // The leg says the caller heard the final prompt to its end.
            self.event(
                "final_prompt_played",
                serde_json::json!({ "mark": name }),
                now,
            );
            self.finish(end);
            return;
        }
        // While paused, the turn's mark came back from the `clear`; it is
        // queued again behind the audio that resumes.
        let finished = self.pause.is_none()
            && matches!(&self.turn, Turn::Replying(b) if b.mark.as_deref() == Some(name));
        if finished && let Turn::Replying(b) = std::mem::replace(&mut self.turn, Turn::Listening) {
            self.record(Rec::Turn {
                speaker: Speaker::Bot,
                text: b.text,
                span: (b.started_at, now),
                interrupted: false,
            });
            self.interaction.bot_turns += 1;
        }
    }

    // ----- time --------------------------------------------------------------

    fn on_time(&mut self, now: Instant) {
        match &self.phase {
            Phase::Ended(_) => return,
            Phase::Ending(e) if now >= e.deadline => {
                warn!(mark = %e.mark, "final marker not reported played in time; ending anyway");
                let mut end = e.end.clone();
                end.at = now;
                let mark = e.mark.clone();
                self.event(
                    "final_prompt_unconfirmed",
                    serde_json::json!({ "mark": mark }),
                    now,
                );
                self.finish(end);
                return;
            }
            Phase::Ending(_) => {}
            Phase::Live if now >= self.max_end => self.fail_over(
                End::new(EndReason::MaxDuration, now),
                Prompt::Goodbye,
                "callgate-end:max_duration".into(),
                "max_duration",
                now,
            ),
            Phase::Live => {
                self.check_pause(now);
                self.nudge_stt(now);
                while self.is_live()
                    && let Some(action) = self.watchdog.poll(now)
                {
                    self.on_stall(action, now);
                }
            }
        }
        self.pump(now);
    }

    /// Speech ended a while ago and no final came (a provider whose
    /// endpointing missed it): ask for `Finalize`, once.
    fn nudge_stt(&mut self, now: Instant) {
        let Some(at) = self.finalize_at else { return };
        if !self.watchdog.transcript_owed() {
            self.finalize_at = None;
        } else if now >= at {
            self.finalize_at = None;
            if self.links.stt {
                debug!("speech ended without a final; asking STT to finalize");
                self.push(Command::SttFinalize);
                self.event("stt_finalize_requested", serde_json::Value::Null, now);
            }
        }
    }

    /// Who is to blame for an owed reply that is not being heard.
    fn reply_culprit(&self) -> Culprit {
        match &self.turn {
            Turn::Listening => Culprit::Dialog,
            Turn::Replying(_) if !self.tools.is_empty() => Culprit::Tool,
            Turn::Replying(b) if b.audio_bytes == 0 && !b.dialog_done => Culprit::Dialog,
            Turn::Replying(_) => Culprit::Tts,
        }
    }

    fn on_stall(&mut self, action: Action, now: Instant) {
        let clock = match action {
            Action::Apologize(c) | Action::Transfer(c) | Action::End(c) => c,
        };
        let culprit = match clock {
            Clock::Reply => self.reply_culprit(),
            Clock::Stt => Culprit::Stt,
            Clock::Media => Culprit::CarrierMedia,
        };
        let label = match action {
            Action::Apologize(_) => "apology",
            Action::Transfer(_) => "transfer",
            Action::End(_) => "end",
        };
        let what = culprit.as_str();
        warn!(clock = ?clock, culprit = what, action = label, "watchdog: stall");
        metrics::counter!(m::STALLS, "culprit" => what, "action" => label).increment(1);
        let detail = serde_json::json!({ "culprit": what, "action": label });
        self.event("stall", detail, now);
        match action {
            Action::Apologize(c) => {
                if c == Clock::Stt && self.links.stt {
                    self.push(Command::SttFinalize);
                }
                self.play_prompt(Prompt::Apology);
            }
            Action::Transfer(_) => self.fail_over(
                End::new(EndReason::Stalled(culprit), now),
                Prompt::Transfer,
                format!("callgate-transfer:{what}_stalled"),
                &format!("{what}_stalled"),
                now,
            ),
            Action::End(_) => self.finish(End::new(EndReason::MediaStalled, now)),
        }
    }

    /// Plays a bundled prompt when nothing else is audible (if something is
    /// playing, the caller is not in silence and the prompt would only
    /// delay it).
    fn play_prompt(&mut self, prompt: Prompt) {
        if !self.pacer.is_idle() {
            return;
        }
        let audio = prompt.audio(self.cfg.format);
        self.pacer.push_audio(audio);
        self.pacer.finish();
        self.prompt_frames += audio.len().div_ceil(self.cfg.format.frame_bytes()) as u64;
    }

    // ----- endings -----------------------------------------------------------

    /// Something failed mid-call: stop what is playing, play a bundled
    /// prompt, and end with `end` once it has been heard.
    fn fail_over(&mut self, end: End, prompt: Prompt, mark: String, event: &str, now: Instant) {
        if !self.is_live() {
            return;
        }
        if let Turn::Replying(b) = std::mem::replace(&mut self.turn, Turn::Listening) {
            if b.frames_sent > 0 {
                self.push(Command::Clear);
            }
            if self.links.tts {
                self.push(Command::TtsCancel(b.ctx));
            }
            self.record_cut_turn(&b, now);
        }
        self.pending_exit = None;
        self.pause = None;
        self.pacer.clear();
        self.prompt_frames = 0;
        self.pacer.push_audio(prompt.audio(self.cfg.format));
        self.event(event, serde_json::json!({}), now);
        self.begin_ending(mark, end, now);
    }

    /// What the caller heard of `b` (call before the pacer is cleared).
    fn heard(&self, b: &BotTurn, now: Instant) -> String {
        let unheard = u64::from(self.pacer.in_flight(now));
        b.heard_text(unheard, self.cfg.format).to_string()
    }

    fn record_cut_turn(&mut self, b: &BotTurn, now: Instant) {
        let heard = self.heard(b, now);
        self.record(Rec::Turn {
            speaker: Speaker::Bot,
            text: heard,
            span: (b.started_at, now),
            interrupted: true,
        });
    }

    fn start_exit(&mut self, exit: Exit, now: Instant) {
        let (mark, end) = match exit {
            Exit::Transfer(r) => (
                format!("callgate-transfer:{r}"),
                End::new(EndReason::Transferred, now).with_detail(r),
            ),
            Exit::End(r) => (
                format!("callgate-end:{r}"),
                End::new(EndReason::BotEnded, now).with_detail(r),
            ),
        };
        self.begin_ending(mark, end, now);
    }

    fn begin_ending(&mut self, mark: String, end: End, now: Instant) {
        if !self.is_live() {
            return;
        }
        self.watchdog.nothing_owed();
        self.pacer.push_mark(mark.clone());
        // Re-armed to the grace once the marker is actually sent (`pump`):
        // a prompt slowed by CPU pressure must not be cut short.
        let deadline = now + self.pacer.queued() * 2 + self.cfg.final_mark_grace;
        info!(reason = %end.ledger(), "call ending after its final prompt");
        self.phase = Phase::Ending(Ending {
            mark,
            end,
            deadline,
        });
    }

    /// The one terminal transition. Idempotent: a later cause is counted
    /// and dropped, so the first cause is the one recorded. Nothing outlives
    /// the call: every tool still running is cancelled here.
    fn finish(&mut self, end: End) {
        if let Phase::Ended(first) = &self.phase {
            self.late_ends += 1;
            info!(first = %first.ledger(), late = %end.ledger(), "call already ended; later cause ignored");
            return;
        }
        if let Turn::Replying(b) = std::mem::replace(&mut self.turn, Turn::Listening) {
            self.record_cut_turn(&b, end.at);
        }
        let mut ids: Vec<_> = self.tools.drain().map(|(id, _)| id).collect();
        ids.sort_by(|a, b| a.0.cmp(&b.0));
        for id in ids {
            self.push(Command::ToolCancel(id));
        }
        self.pending_exit = None;
        self.pause = None;
        self.watchdog.nothing_owed();
        self.pacer.clear();
        self.phase = Phase::Ended(end);
    }

    // ----- outbound audio ------------------------------------------------------

    /// Releases every frame and marker that is due.
    fn pump(&mut self, now: Instant) {
        while let Some(item) = self.pacer.poll(now) {
            match item {
                Paced::Frame(frame) => {
                    self.echo.sent(now, &frame, self.cfg.format);
                    self.push(Command::Play(frame));
                    self.on_frame_sent(now);
                }
                Paced::Mark(name) => {
                    if let Phase::Ending(e) = &mut self.phase
                        && e.mark == name
                    {
                        e.deadline = now + self.cfg.final_mark_grace;
                    }
                    self.push(Command::Mark(name));
                }
            }
        }
        self.watch_underrun(now);
    }

    /// A reply that started playing and then ran dry before it was fully
    /// generated (TTS slow, a tool slow) is owed again.
    fn watch_underrun(&mut self, now: Instant) {
        let dry = self.pacer.is_idle() && self.is_live() && self.pause.is_none();
        if dry && matches!(&self.turn, Turn::Replying(b) if b.frames_sent > 0 && !b.tts_done) {
            self.watchdog.reply_owed(now);
        }
    }

    fn on_frame_sent(&mut self, now: Instant) {
        if self.prompt_frames > 0 {
            self.prompt_frames -= 1;
            return;
        }
        if !self.first_audio_sent {
            self.first_audio_sent = true;
            self.record(Rec::Stage(Stage::FirstPlayableAudio, now));
            metrics::histogram!(m::FIRST_AUDIO).record((now - self.media_ready_at).as_secs_f64());
        }
        if let Some(since) = self.reply_owed_since.take() {
            let latency = now - since;
            self.interaction.max_reply_latency_ms = self
                .interaction
                .max_reply_latency_ms
                .max(latency.as_millis() as u64);
            metrics::histogram!(m::REPLY_LATENCY).record(latency.as_secs_f64());
        }
        if let Turn::Replying(b) = &mut self.turn {
            b.frames_sent += 1;
            self.timings.first_frame(b.turn, now);
            self.watchdog.reply_audible();
        }
    }
}
