//! The call's decisions, sans-IO: events and `now` in, commands and
//! reports out.
//!
//! [`CallCore`] owns turn taking, barge-in, bot-turn bookkeeping, tool
//! policy, the watchdog's actions, the pacing of outbound audio, the final
//! marker and the one terminal transition. It never reads a clock, never
//! touches a socket, never records a metric and never awaits: the async
//! shell ([`crate::call::CallActor`]) feeds it [`Input`]s with the time
//! they happened ([`CallCore::handle`]), performs its [`Command`]s
//! ([`CallCore::next_command`]) as non-blocking sends, tells it when those
//! sends were performed ([`CallCore::performed`]), turns its [`Report`]s
//! ([`CallCore::next_report`]) into metrics, and sleeps until
//! [`CallCore::next_deadline`]. Nothing the shell does calls back into the
//! core while it performs: what a command's outcome teaches the core comes
//! back as a later [`Input`]. Tests drive it on a virtual clock
//! (`core/tests.rs`).
//!
//! States (`state.rs`), each holding only what can exist in it:
//! - [`Phase`]: `Live` (the conversation; it alone holds a drain
//!   hand-over waiting for the next turn boundary and the STT nudge) →
//!   `Ending` (a final prompt and marker are playing; the call ends when
//!   the leg reports the marker played, or at a deadline) → `Ended` (the
//!   first cause, and the count of later ones). A hang-up, a lost carrier
//!   or dead media go from `Live` straight to `Ended`. `Ended` is reached
//!   exactly once (`ending.rs`); a second cause is counted and ignored.
//! - The turn: `Owed` (the greeting or the caller's latest turn has no
//!   reply yet) → `Replying` (a [`BotTurn`](crate::call::bot::BotTurn),
//!   with the barge-in pause that may hold it) → `Listening` (the reply
//!   played out or was cut). A caller utterance makes a turn `Owed` again.
//!   `Owed` and `Replying` carry the reply-latency clock until the first
//!   frame of bot audio. A reply still playing when the call starts
//!   `Ending` plays on ahead of the final prompt.
//! - A reply's [`Generation`](crate::call::bot::Generation): `Generating`
//!   (dialog and TTS not both done; an exit the dialog asked for waits
//!   here) → `Marked` (its end-of-turn marker queued; only playback
//!   remains).
//!
//! Outputs: [`CallCore::next_command`] (sends and ledger writes, in
//! order), [`CallCore::next_report`] (what was counted or measured, for
//! metrics) and [`CallCore::next_deadline`] (when to tick it). The
//! receipt's figures are read through accessors once the call has ended.

mod barge;
mod conversation;
mod drain;
mod ending;
mod io;
mod outage;
mod state;
#[cfg(test)]
mod tests;
mod timing;
mod tool_memory;
mod tool_outcome;

pub use barge::{BargeInConfig, BargeInPolicy};
pub use state::{Ended, Ending, Live, Phase};
pub use timing::TurnLatency;

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use dialog_grpc::{ToolCallId, TurnId};
use media::pacer::{Paced, Pacer};
use state_store::{Speaker, Stage};
use stt_client::UtteranceAssembler;
use tracing::{debug, info, warn};

use super::watchdog::{Action, Clock, Watchdog};
use crate::end::{Culprit, End, EndReason};
use crate::leg::LegEvent;
use crate::prompts::Prompt;
pub use io::{Command, CoreConfig, Input, Interaction, Rec, Report, Stale};
use state::Turn;
pub use tool_outcome::ToolOutcome;

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
    out: VecDeque<Command>,
    reports: VecDeque<Report>,
    pacer: Pacer<String>,
    watchdog: Watchdog,
    /// Local VAD on caller audio: barge-in, and tells the watchdog when a
    /// transcript is owed.
    vad: media::vad::EnergyVad,
    echo: barge::EchoRef,
    timings: timing::Timings,
    assembler: UtteranceAssembler,
    links: Links,
    tools: HashMap<ToolCallId, ToolTask>,
    /// Finished tool calls, for ids a resumed dialog stream repeats.
    tool_memory: tool_memory::ToolMemory,
    /// The user turn the dialog's events must carry (0 = the greeting).
    expected_turn: TurnId,
    next_ctx: u64,
    /// Frames of a bundled prompt queued ahead of bot audio.
    prompt_frames: u64,
    /// When the words of the caller's current utterance were first heard.
    utterance_first_heard: Option<Instant>,
    last_media: Option<Instant>,
    /// When media became ready, until the first frame of bot audio is sent.
    first_audio_due: Option<Instant>,
    max_end: Instant,
    interaction: Interaction,
    /// The instance's own lag was beyond its bound at the last step (the
    /// shell says so before each step): a stall then is the instance's.
    instance_lagging: bool,
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
            phase: Phase::Live(Live::default()),
            turn: Turn::Owed { owed_since: None },
            out: VecDeque::new(),
            reports: VecDeque::new(),
            pacer: Pacer::new(f.frame_bytes(), f.silence(), cfg.lead),
            watchdog: Watchdog::new(cfg.watchdog, now),
            vad: media::vad::EnergyVad::new(vad_cfg, f.sample_rate()),
            echo: barge::EchoRef::new(&cfg.barge_in),
            timings: timing::Timings::default(),
            assembler: UtteranceAssembler::default(),
            links: Links {
                stt: true,
                tts: true,
                dialog: true,
            },
            tools: HashMap::new(),
            tool_memory: tool_memory::ToolMemory::default(),
            expected_turn: TurnId(0),
            next_ctx: 0,
            prompt_frames: 0,
            utterance_first_heard: None,
            last_media: None,
            first_audio_due: Some(now),
            max_end: now + cfg.max_duration,
            interaction: Interaction::default(),
            cfg,
            instance_lagging: false,
        };
        core.record(Rec::Stage(Stage::MediaReady, now));
        core.watchdog.reply_owed(now);
        core
    }

    /// Handles one input that happened at `now`, then whatever time has
    /// made due (timers, outbound audio). Read the results with
    /// [`CallCore::next_command`] and [`CallCore::next_report`].
    pub fn handle(&mut self, now: Instant, input: Input) {
        if let Phase::Ended(ended) = &mut self.phase {
            // A second terminal cause (a hang-up racing our own end, a
            // drain deadline after it): counted, never recorded.
            if input.is_terminal() {
                ended.late_ends += 1;
            }
            return;
        }
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
        self.on_time(now);
        self.hand_over_if_at_boundary(now);
        self.reports.extend(self.timings.take_reports());
    }

    /// The next command to perform, in order.
    pub fn next_command(&mut self) -> Option<Command> {
        self.out.pop_front()
    }

    /// The next thing counted or measured, for the shell's metrics.
    pub fn next_report(&mut self) -> Option<Report> {
        self.reports.pop_front()
    }

    /// When [`CallCore::handle`] must next be called with [`Input::Tick`].
    pub fn next_deadline(&self) -> Option<Instant> {
        let pacer = self.pacer.next_deadline();
        let own = match &self.phase {
            Phase::Live(live) => {
                let watch = self.watchdog.next_deadline().min(self.max_end);
                let pause = self.turn.pause().map(|p| p.deadline());
                [Some(watch), live.finalize_at, pause]
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
            Phase::Ended(ended) => Some(&ended.end),
            _ => None,
        }
    }

    /// Whether bot audio of a reply is reaching the caller (the `speaking` gauge).
    pub fn is_speaking(&self) -> bool {
        matches!(&self.turn, Turn::Replying { bot, pause: None, .. } if bot.frames_sent > 0)
    }

    /// Whether the last step emitted sends the core stamps with the time
    /// they were performed (turn timing, barge-in stops): then the shell
    /// calls [`CallCore::performed`] once it has performed them.
    pub fn awaits_performed(&self) -> bool {
        self.timings.awaits_performed()
    }

    /// The shell performed every command of the last step at `at`: sends
    /// the core stamped at the step's `now` are re-stamped (timing.rs).
    pub fn performed(&mut self, at: Instant) {
        self.timings.performed(at);
        self.reports.extend(self.timings.take_reports());
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
        match &self.phase {
            Phase::Ended(ended) => ended.late_ends,
            _ => 0,
        }
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

    fn report(&mut self, r: Report) {
        self.reports.push_back(r);
    }

    fn is_live(&self) -> bool {
        matches!(self.phase, Phase::Live(_))
    }

    fn live_mut(&mut self) -> Option<&mut Live> {
        match &mut self.phase {
            Phase::Live(live) => Some(live),
            _ => None,
        }
    }

    // ----- the leg ---------------------------------------------------------

    fn on_leg(&mut self, ev: LegEvent, now: Instant) {
        match ev {
            LegEvent::Audio(bytes) => self.on_audio(bytes, now),
            LegEvent::Dtmf(digit) => {
                if self.links.dialog {
                    self.push(Command::DialogDtmf(digit));
                }
                self.interaction.dtmf_digits += 1;
                let detail = serde_json::json!({ "digit": digit.to_string() });
                self.event("dtmf", detail, now);
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
            LegEvent::TransportLost(loss, detail) => {
                warn!(why = loss.as_str(), detail = %detail, "the caller's media transport was lost");
                self.peer_left(End::new(loss.end(), now).with_detail(detail));
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
                self.report(Report::ProtocolError(v.kind));
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
        self.report(Report::MediaIn);
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
                    if let Some(live) = self.live_mut() {
                        live.finalize_at = None;
                    }
                    let onset = self.audio_instant(at_ms, now);
                    self.on_voice_onset(onset, now);
                }
                media::vad::VadEvent::SpeechEnd { .. } if self.is_live() => {
                    self.watchdog.caller_speech_ended(now);
                    let at = now + self.cfg.watchdog.stt_stall / 2;
                    if self.watchdog.transcript_owed()
                        && let Some(live) = self.live_mut()
                    {
                        live.finalize_at = Some(at);
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
        self.timings
            .voice_end_unused(end)
            .then(|| self.audio_instant(end, now))
    }

    fn on_played(&mut self, name: &str, now: Instant) {
        if self.final_mark_played(name, now) {
            return;
        }
        // While paused, the turn's mark came back from the `clear`; it is
        // queued again behind the audio that resumes.
        let finished = matches!(&self.turn,
            Turn::Replying { bot, pause: None, .. } if bot.mark() == Some(name));
        if finished && let Some(cut) = self.turn.take_reply() {
            self.record(Rec::Turn {
                speaker: Speaker::Bot,
                latency: self.timings.latency_of(cut.bot.turn),
                text: cut.bot.text,
                span: (cut.bot.started_at, now),
                interrupted: false,
            });
            self.interaction.bot_turns += 1;
        }
    }

    // ----- time --------------------------------------------------------------

    fn on_time(&mut self, now: Instant) {
        match &self.phase {
            Phase::Ended(_) => return,
            Phase::Ending(e) if now >= e.deadline => return self.final_mark_overdue(now),
            Phase::Ending(_) => {}
            Phase::Live(_) if now >= self.max_end => self.fail_over(
                End::new(EndReason::MaxDuration, now),
                Prompt::Goodbye,
                "callgate-end:max_duration".into(),
                "max_duration",
                now,
            ),
            Phase::Live(_) => {
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
        let owed = self.watchdog.transcript_owed();
        let Some(live) = self.live_mut() else { return };
        let Some(at) = live.finalize_at else { return };
        if !owed {
            live.finalize_at = None;
        } else if now >= at {
            live.finalize_at = None;
            if self.links.stt {
                debug!("speech ended without a final; asking STT to finalize");
                self.push(Command::SttFinalize);
                self.event("stt_finalize_requested", serde_json::Value::Null, now);
            }
        }
    }

    /// The leg bounds its own media (`Leg::bounds_its_own_media`): the
    /// watchdog's media clock stays off for this call.
    pub fn leg_bounds_media(&mut self) {
        self.watchdog.leg_bounds_media();
    }

    /// The shell's word on the instance's own lag (`lag::LagMeter`), given
    /// before each step; it steps nothing by itself.
    pub fn note_instance_lag(&mut self, over_bound: bool) {
        self.instance_lagging = over_bound;
    }

    /// Who is to blame for a stall on `clock`: the instance itself when its
    /// own lag is beyond the bound (the provider that happened to be
    /// awaited is not at fault for a runtime that could not run the call),
    /// else the party the clock waits on.
    fn culprit(&self, clock: Clock) -> Culprit {
        if self.instance_lagging {
            return Culprit::Instance;
        }
        match clock {
            Clock::Reply => self.reply_culprit(),
            Clock::Stt => Culprit::Stt,
            Clock::Media => Culprit::CarrierMedia,
        }
    }

    /// Who is to blame for an owed reply that is not being heard.
    fn reply_culprit(&self) -> Culprit {
        match &self.turn {
            Turn::Owed { .. } | Turn::Listening => Culprit::Dialog,
            Turn::Replying { .. } if !self.tools.is_empty() => Culprit::Tool,
            Turn::Replying { bot, .. } if bot.audio_bytes == 0 && !bot.dialog_done() => {
                Culprit::Dialog
            }
            Turn::Replying { .. } => Culprit::Tts,
        }
    }

    fn on_stall(&mut self, action: Action, now: Instant) {
        let clock = action.clock();
        let culprit = self.culprit(clock);
        let label = action.label();
        let what = culprit.as_str();
        warn!(clock = ?clock, culprit = what, action = label, "watchdog: stall");
        self.report(Report::Stall { culprit, action });
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
        let dry = self.pacer.is_idle() && self.is_live();
        if dry
            && matches!(&self.turn,
                Turn::Replying { bot, pause: None, .. } if bot.frames_sent > 0 && !bot.tts_done())
        {
            self.watchdog.reply_owed(now);
        }
    }

    fn on_frame_sent(&mut self, now: Instant) {
        if self.prompt_frames > 0 {
            self.prompt_frames -= 1;
            return;
        }
        if let Some(ready) = self.first_audio_due.take() {
            self.record(Rec::Stage(Stage::FirstPlayableAudio, now));
            self.report(Report::FirstAudio(now - ready));
        }
        if let Some(since) = self.turn.stop_reply_clock() {
            let latency = now - since;
            self.interaction.max_reply_latency_ms = self
                .interaction
                .max_reply_latency_ms
                .max(latency.as_millis() as u64);
            self.report(Report::ReplyLatency(latency));
        }
        if let Some(b) = self.turn.reply_mut() {
            b.frames_sent += 1;
            self.timings.first_frame(b.turn, now);
            self.watchdog.reply_audible();
        }
    }
}
