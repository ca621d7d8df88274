//! The call actor: one task per admitted call, an event loop over carrier
//! audio, STT events, dialog events, TTS audio, tool results and timers.
//!
//! **Architecture invariant:** the loop never awaits the database or a
//! provider. Every send is a non-blocking enqueue (STT audio, TTS text,
//! dialog messages, write-behind writes, carrier frames); every slow thing
//! answers as an event. The only awaits are the `select!` itself and the
//! bounded teardown after the loop has ended.
//!
//! Ownership: the actor holds the admission [`Permit`] for its whole life
//! and drops it exactly once when [`CallActor::run`] returns — on hang-up,
//! error, panic (unwinding drops it) or cancellation alike.

pub mod bot;
pub mod record;
pub mod setup;
pub mod tools;
pub mod watchdog;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use admission::Permit;
use dialog_grpc::{DialogEvent, TurnId};
use media::pacer::{Paced, Pacer};
use state_store::{CleanupStatus, Speaker, Stage};
use stt_client::{SttEvent, UtteranceAssembler};
use tokio::time::Sleep;
use tracing::{Instrument, Span, debug, info, warn};
use tts_client::{ContextId, TtsEvent};

use crate::app::{App, Gauge};
use crate::carrier::{CarrierEvent, CarrierLink};
use crate::config::ms;
use crate::metrics as m;
use crate::prompts;
use bot::{BotTurn, Exit};
use record::{Recorder, millis};
use setup::Resources;
use tools::ToolRunner;
use watchdog::{Action, Clock, Watchdog, WatchdogConfig};

/// One telephony frame.
pub const FRAME_PERIOD: Duration = media::format::FRAME;

/// A far-away instant for timers that are not armed.
fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365)
}

/// Why and when a call ended.
#[derive(Debug, Clone)]
pub struct End {
    pub reason: String,
    /// When the disconnect was observed (caller's `stop`, or our close).
    pub at: Instant,
}

/// The call is on its way out: a final prompt/mark is playing.
#[derive(Debug)]
struct Ending {
    mark: String,
    reason: String,
    deadline: Instant,
}

/// Interaction counters for the ledger.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
struct Interaction {
    user_turns: u64,
    bot_turns: u64,
    interruptions: u64,
    stale_dialog_events: u64,
    stale_tts_audio_chunks: u64,
    max_reply_latency_ms: u64,
}

/// One admitted, fully set-up call.
pub struct CallActor {
    app: Arc<App>,
    permit: Permit,
    carrier: CarrierLink,
    pacer: Pacer<String>,
    pace_timer: Pin<Box<Sleep>>,
    /// One timer for the watchdog, the ending deadline and the maximum
    /// duration, re-armed only when its deadline moves.
    timer: Pin<Box<Sleep>>,
    timer_at: Instant,
    watchdog: Watchdog,
    /// Local VAD on the caller's audio: tells the watchdog when a
    /// transcript has become owed by STT.
    vad: media::vad::EnergyVad,
    /// Frames of a bundled prompt still queued ahead of bot audio; they keep
    /// the caller company but do not count as the reply.
    prompt_frames: u64,
    lead_ms: u64,
    stt: stt_client::SttHandle,
    stt_events: stt_client::SttEvents,
    stt_open: bool,
    assembler: UtteranceAssembler,
    tts: tts_client::TtsHandle,
    tts_events: tts_client::TtsEvents,
    tts_open: bool,
    next_ctx: u64,
    dialog: dialog_grpc::DialogSession,
    dialog_events: dialog_grpc::DialogEvents,
    dialog_open: bool,
    tools: ToolRunner,
    rec: Recorder,
    /// The user turn the dialog's events must carry (0 = the greeting).
    expected_turn: TurnId,
    bot: Option<BotTurn>,
    exit_after_turn: Option<Exit>,
    ending: Option<Ending>,
    /// When the caller's last utterance was final and a reply became owed.
    reply_owed_since: Option<Instant>,
    utterance_first_heard: Option<Instant>,
    last_media: Option<Instant>,
    first_audio_sent: bool,
    media_ready_at: Instant,
    max_end: Instant,
    interaction: Interaction,
    setup_ms: u64,
}

enum Flow {
    Continue,
    End(End),
}

impl CallActor {
    pub fn new(
        app: Arc<App>,
        permit: Permit,
        mut carrier: CarrierLink,
        res: Resources,
        rec: Recorder,
        setup_ms: u64,
    ) -> Self {
        carrier.want_audio();
        let cfg = app.cfg();
        let now = Instant::now();
        let lead_ms = cfg.call.pacer_lead_ms;
        let tools = ToolRunner::new(
            app.http.clone(),
            cfg.tools.base_url.clone(),
            ms(cfg.tools.timeout_ms),
            cfg.tools.max_in_flight_per_call,
        );
        CallActor {
            permit,
            carrier,
            pacer: Pacer::new(
                160,
                media::g711::ULAW_SILENCE,
                Duration::from_millis(lead_ms),
            ),
            pace_timer: Box::pin(tokio::time::sleep_until(far_future().into())),
            timer: Box::pin(tokio::time::sleep_until(far_future().into())),
            timer_at: far_future(),
            watchdog: Watchdog::new(watchdog_config(&cfg), now),
            vad: media::vad::EnergyVad::new(
                media::vad::VadConfig {
                    min_silence_ms: cfg.stt.endpointing_ms.max(200),
                    ..media::vad::VadConfig::default()
                },
                8_000,
            ),
            prompt_frames: 0,
            lead_ms,
            stt: res.stt.0,
            stt_events: res.stt.1,
            stt_open: true,
            assembler: UtteranceAssembler::default(),
            tts: res.tts.0,
            tts_events: res.tts.1,
            tts_open: true,
            next_ctx: 0,
            dialog: res.dialog.0,
            dialog_events: res.dialog.1,
            dialog_open: true,
            tools,
            rec,
            expected_turn: TurnId(0),
            bot: None,
            exit_after_turn: None,
            ending: None,
            reply_owed_since: None,
            utterance_first_heard: None,
            last_media: None,
            first_audio_sent: false,
            media_ready_at: now,
            max_end: now + Duration::from_secs(cfg.call.max_duration_s),
            interaction: Interaction::default(),
            setup_ms,
            app,
        }
    }

    /// Runs the call to its end, tears everything down and writes the receipt.
    pub async fn run(mut self) {
        let span = Span::current();
        self.rec.stage(Stage::MediaReady, self.media_ready_at);
        let end = self.event_loop().instrument(span.clone()).await;
        self.teardown(end).instrument(span).await;
    }

    /// The caller left while the call was being set up: close everything
    /// that was opened and write the receipt, without playing anything.
    pub async fn end_before_start(self, reason: String, at: Instant) {
        let span = Span::current();
        self.teardown(End { reason, at }).instrument(span).await;
    }

    async fn event_loop(&mut self) -> End {
        let hard_stop = self.app.hard_stop.clone();
        // The greeting is owed from the moment media is ready.
        self.watchdog.reply_owed(self.media_ready_at);
        loop {
            self.rearm_timer();
            let flow = tokio::select! {
                ev = self.carrier.next_event() => self.on_carrier(ev),
                Some(ev) = self.stt_events.recv(), if self.stt_open => self.on_stt(ev),
                Some(ev) = self.dialog_events.recv(), if self.dialog_open => self.on_dialog(ev),
                Some(ev) = self.tts_events.recv(), if self.tts_open => self.on_tts(ev),
                outcome = self.tools.next() => self.on_tool_result(outcome),
                () = &mut self.pace_timer => Flow::Continue,
                () = &mut self.timer => self.on_timer(),
                () = hard_stop.cancelled(), if self.ending.is_none() => {
                    self.fail_over("drain_deadline", prompts::GOODBYE, "callgate-end:drain_deadline", "drain_deadline")
                }
            };
            self.pump_audio();
            if let Flow::End(end) = flow {
                return end;
            }
        }
    }

    /// The next instant the housekeeping timer must fire.
    fn next_wake(&self) -> Instant {
        match &self.ending {
            Some(e) => e.deadline,
            None => self.watchdog.next_deadline().min(self.max_end),
        }
    }

    fn rearm_timer(&mut self) {
        let at = self.next_wake();
        if at != self.timer_at {
            self.timer_at = at;
            self.timer.as_mut().reset(at.into());
        }
    }

    /// The housekeeping timer fired: ending deadline, maximum duration, or
    /// a watchdog clock.
    fn on_timer(&mut self) -> Flow {
        // Force a re-arm even if the next deadline equals the one that fired.
        self.timer_at = far_future();
        let now = Instant::now();
        if self.ending.as_ref().is_some_and(|e| now >= e.deadline) {
            return self.on_ending_timeout();
        }
        if self.ending.is_some() {
            return Flow::Continue;
        }
        if now >= self.max_end {
            return self.fail_over(
                "max_duration",
                prompts::GOODBYE,
                "callgate-end:max_duration",
                "max_duration",
            );
        }
        while let Some(action) = self.watchdog.poll(now) {
            if let Flow::End(end) = self.on_stall(action, now) {
                return Flow::End(end);
            }
            if self.ending.is_some() {
                break;
            }
        }
        Flow::Continue
    }

    /// Who is to blame for an owed reply that is not being heard.
    fn reply_culprit(&self) -> &'static str {
        match &self.bot {
            None => "dialog",
            Some(_) if self.tools.in_flight() > 0 => "tool",
            Some(b) if b.audio_bytes == 0 && !b.dialog_done => "dialog",
            Some(_) => "tts",
        }
    }

    fn on_stall(&mut self, action: Action, now: Instant) -> Flow {
        let (clock, what) = match action {
            Action::Apologize(c) | Action::Transfer(c) | Action::End(c) => match c {
                Clock::Reply => (c, self.reply_culprit()),
                Clock::Stt => (c, "stt"),
                Clock::Media => (c, "carrier_media"),
            },
        };
        let label = match action {
            Action::Apologize(_) => "apology",
            Action::Transfer(_) => "transfer",
            Action::End(_) => "end",
        };
        warn!(clock = ?clock, culprit = what, action = label, "watchdog: stall");
        metrics::counter!(m::STALLS, "culprit" => what, "action" => label).increment(1);
        self.rec.event(
            "stall",
            serde_json::json!({ "culprit": what, "action": label }),
            now,
        );
        match action {
            Action::Apologize(c) => {
                if c == Clock::Stt && self.stt_open {
                    let _ = self.stt.finalize();
                }
                self.play_prompt(prompts::APOLOGY);
                Flow::Continue
            }
            Action::Transfer(_) => {
                let reason = format!("stalled:{what}");
                let mark = format!("callgate-transfer:{what}_stalled");
                self.fail_over(
                    &reason,
                    prompts::TRANSFER,
                    &mark,
                    &format!("{what}_stalled"),
                )
            }
            Action::End(_) => Flow::End(End {
                reason: "carrier_media_stalled".into(),
                at: now,
            }),
        }
    }

    /// Plays a bundled prompt when nothing else is audible (if something is
    /// playing, the caller is not in silence and the prompt would only
    /// delay it).
    fn play_prompt(&mut self, prompt: &[u8]) {
        if !self.pacer.is_idle() {
            return;
        }
        self.pacer.push_audio(prompt);
        self.pacer.finish();
        self.prompt_frames += prompt.len().div_ceil(160) as u64;
    }

    // ----- carrier -------------------------------------------------------

    fn on_carrier(&mut self, ev: CarrierEvent) -> Flow {
        let now = Instant::now();
        match ev {
            CarrierEvent::Audio(bytes) => {
                self.last_media = Some(now);
                self.watchdog.media_seen(now);
                self.listen_locally(&bytes, now);
                metrics::counter!(m::MEDIA_IN).increment(1);
                if self.stt_open && !bytes.is_empty() {
                    // Never blocks: a full STT queue drops the frame (counted by the client).
                    let _ = self.stt.send_audio(bytes);
                }
                Flow::Continue
            }
            CarrierEvent::Dtmf(digit) => {
                if self.dialog_open {
                    let _ = self.dialog.dtmf(&digit);
                }
                self.rec.event("dtmf", serde_json::json!({}), now);
                Flow::Continue
            }
            CarrierEvent::MarkPlayed(name) => self.on_mark(&name, now),
            CarrierEvent::Start(_) | CarrierEvent::Ignored => Flow::Continue,
            CarrierEvent::Stop => Flow::End(End {
                reason: "caller_hangup".into(),
                at: now,
            }),
            CarrierEvent::Gone(why) => {
                info!(why = %why, "carrier socket ended without stop");
                Flow::End(End {
                    reason: "carrier_gone".into(),
                    at: now,
                })
            }
            CarrierEvent::Invalid(e) => {
                warn!(error = %e, kind = e.kind(), "closing stream: carrier protocol violation");
                metrics::counter!(m::PROTOCOL_ERRORS, "kind" => e.kind()).increment(1);
                self.rec.event(
                    "protocol_error",
                    serde_json::json!({ "kind": e.kind(), "detail": e.to_string() }),
                    now,
                );
                Flow::End(End {
                    reason: format!("protocol_error:{}", e.kind()),
                    at: now,
                })
            }
        }
    }

    /// Runs the local VAD: the end of caller speech makes a transcript owed.
    fn listen_locally(&mut self, ulaw: &[u8], now: Instant) {
        let pcm = media::g711::decode_ulaw(ulaw);
        for ev in self.vad.push(&pcm) {
            match ev {
                media::vad::VadEvent::SpeechStart { .. } => {
                    self.watchdog.caller_speech_started(now)
                }
                media::vad::VadEvent::SpeechEnd { .. } if self.ending.is_none() => {
                    self.watchdog.caller_speech_ended(now);
                }
                media::vad::VadEvent::SpeechEnd { .. } => {}
            }
        }
    }

    fn on_mark(&mut self, name: &str, now: Instant) -> Flow {
        if let Some(ending) = &self.ending
            && ending.mark == name
        {
            return Flow::End(End {
                reason: ending.reason.clone(),
                at: now,
            });
        }
        let finished = self
            .bot
            .as_ref()
            .is_some_and(|b| b.mark.as_deref() == Some(name));
        if finished && let Some(b) = self.bot.take() {
            self.rec
                .turn(Speaker::Bot, &b.text, (b.started_at, now), false);
            self.interaction.bot_turns += 1;
            self.stop_speaking(&b);
        }
        Flow::Continue
    }

    // ----- STT -----------------------------------------------------------

    fn on_stt(&mut self, ev: SttEvent) -> Flow {
        let now = Instant::now();
        if let SttEvent::Closed(reason) = &ev {
            self.stt_open = false;
            if self.ending.is_none() {
                warn!(reason = ?reason, "STT stream closed mid-call");
                return self.fail_over(
                    "provider_failed:stt",
                    prompts::TRANSFER,
                    "callgate-transfer:stt_failed",
                    "stt_closed",
                );
            }
            return Flow::Continue;
        }
        if let SttEvent::Transcript(t) = &ev {
            if t.is_final {
                self.watchdog.transcript_final(now);
            }
            if !t.text.trim().is_empty() {
                self.utterance_first_heard.get_or_insert(now);
                if self.bot_is_audible() {
                    self.barge_in(now);
                }
            }
        }
        if let SttEvent::ProviderError { message } = &ev {
            debug!(message = %message, "STT provider message");
        }
        if let Some(utt) = self.assembler.push(&ev) {
            self.on_utterance(&utt.text, now);
        }
        Flow::Continue
    }

    fn on_utterance(&mut self, text: &str, now: Instant) {
        if self.ending.is_some() || text.trim().is_empty() {
            return;
        }
        if self.bot.is_some() {
            self.barge_in(now);
        }
        let started = self.utterance_first_heard.take().unwrap_or(now);
        self.rec.turn(Speaker::Caller, text, (started, now), false);
        self.interaction.user_turns += 1;
        self.expected_turn = TurnId(self.expected_turn.0 + 1);
        debug!(turn = %self.expected_turn, chars = text.len(), "caller utterance final");
        if self.dialog_open && self.dialog.user_turn(self.expected_turn, text).is_err() {
            warn!("dialog request queue full; turn not delivered");
        }
        self.reply_owed_since = Some(now);
        self.watchdog.reply_owed(now);
    }

    /// The `speaking` gauge counts replies from their first frame until they
    /// have played, been interrupted or abandoned.
    fn stop_speaking(&self, b: &BotTurn) {
        if b.frames_sent > 0 {
            self.app.counters.speaking.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Whether bot audio is queued here or still playing at the carrier.
    fn bot_is_audible(&self) -> bool {
        self.bot
            .as_ref()
            .is_some_and(|b| b.frames_sent > 0 || b.audio_bytes > 0)
    }

    /// The caller spoke over the bot: stop output at once (DESIGN.md §6).
    fn barge_in(&mut self, now: Instant) {
        let Some(b) = self.bot.take() else { return };
        self.pacer.clear();
        self.prompt_frames = 0;
        self.watchdog.reply_audible();
        if b.frames_sent > 0 {
            self.carrier.send_clear();
        }
        self.stop_speaking(&b);
        if self.tts_open {
            let _ = self.tts.cancel_context(b.ctx);
        }
        let heard = b.heard_text(self.lead_ms).to_string();
        if self.dialog_open {
            let _ = self.dialog.interrupt(b.turn, &heard);
        }
        self.tools.cancel_interrupted(b.turn);
        self.rec
            .turn(Speaker::Bot, &heard, (b.started_at, now), true);
        self.interaction.interruptions += 1;
        metrics::counter!(m::BARGE_INS).increment(1);
        info!(turn = %b.turn, heard_chars = heard.len(), "barge-in: bot output stopped");
        if let Some(exit) = self.exit_after_turn.take() {
            self.start_exit(exit, now);
        }
    }

    // ----- dialog --------------------------------------------------------

    fn on_dialog(&mut self, ev: DialogEvent) -> Flow {
        let now = Instant::now();
        match ev {
            DialogEvent::TextDelta { turn, text } if self.accept_turn(turn, now) => {
                self.speak(&text);
            }
            DialogEvent::TurnComplete { turn } if self.accept_turn(turn, now) => {
                self.complete_turn();
            }
            DialogEvent::ToolCall {
                id,
                turn,
                name,
                arguments_json,
                privileged,
            } if self.accept_turn(turn, now) => {
                self.flush_speech();
                self.rec.event(
                    "tool_call",
                    serde_json::json!({ "name": name, "privileged": privileged }),
                    now,
                );
                if let Some(refused) = self
                    .tools
                    .start(id, turn, &name, arguments_json, privileged)
                {
                    let _ = self
                        .dialog
                        .tool_result(&refused.id, &refused.result_json, true);
                }
            }
            DialogEvent::SlotUpdate { name, value } => self.rec.slot(&name, &value, now),
            DialogEvent::Escalate { reason } => {
                self.rec.escalation(&reason, now);
                self.exit_when_quiet(Exit::Transfer(reason), now);
            }
            DialogEvent::EndCall { reason } => self.exit_when_quiet(Exit::End(reason), now),
            DialogEvent::Closed(result) => {
                self.dialog_open = false;
                if self.ending.is_none() {
                    warn!(result = ?result, "dialog stream ended mid-call");
                    return self.fail_over(
                        "provider_failed:dialog",
                        prompts::TRANSFER,
                        "callgate-transfer:dialog_failed",
                        "dialog_closed",
                    );
                }
            }
            _ => {}
        }
        Flow::Continue
    }

    /// Whether an event for `turn` belongs to the current reply; opens the
    /// reply (and its TTS context) on its first event. Stale events of
    /// superseded turns are dropped and counted.
    fn accept_turn(&mut self, turn: TurnId, now: Instant) -> bool {
        if turn != self.expected_turn || self.ending.is_some() {
            self.interaction.stale_dialog_events += 1;
            metrics::counter!(m::STALE_DROPPED, "kind" => "dialog").increment(1);
            return false;
        }
        if self.bot.as_ref().is_some_and(|b| b.turn == turn) {
            return true;
        }
        self.next_ctx += 1;
        let ctx = ContextId(self.next_ctx);
        if let Err(e) = self.tts.open_context(ctx) {
            warn!(error = %e, "could not open a TTS context");
        }
        self.bot = Some(BotTurn::new(turn, ctx, now));
        true
    }

    fn speak(&mut self, text: &str) {
        let Some(b) = self.bot.as_mut() else { return };
        b.text.push_str(text);
        if self.tts_open {
            let _ = self.tts.send_text(b.ctx, text);
        }
    }

    /// Makes TTS generate what it has buffered (e.g. "let me check" before a tool).
    fn flush_speech(&mut self) {
        if let (Some(b), true) = (self.bot.as_ref(), self.tts_open) {
            let _ = self.tts.flush(b.ctx);
        }
    }

    fn complete_turn(&mut self) {
        let Some(b) = self.bot.as_mut() else { return };
        b.dialog_done = true;
        if self.tts_open {
            let _ = self.tts.flush(b.ctx);
            let _ = self.tts.close_context(b.ctx);
        }
    }

    /// Exits after the reply being generated, or at once (the exit mark
    /// then queues behind any reply audio still playing).
    fn exit_when_quiet(&mut self, exit: Exit, now: Instant) {
        if self.bot.as_ref().is_some_and(|b| b.mark.is_none()) {
            self.exit_after_turn = Some(exit);
        } else {
            self.start_exit(exit, now);
        }
    }

    fn start_exit(&mut self, exit: Exit, now: Instant) {
        let (mark, reason) = match exit {
            Exit::Transfer(r) => (format!("callgate-transfer:{r}"), format!("transferred:{r}")),
            Exit::End(r) => (format!("callgate-end:{r}"), format!("bot_ended:{r}")),
        };
        self.begin_ending(mark, reason, now);
    }

    fn begin_ending(&mut self, mark: String, reason: String, now: Instant) {
        if self.ending.is_some() {
            return;
        }
        self.watchdog.nothing_owed();
        self.pacer.push_mark(mark.clone());
        let grace = ms(self.app.cfg().call.final_mark_grace_ms);
        // Re-armed to `grace` after the mark is actually sent (pump_audio):
        // a prompt slowed by CPU pressure must not be cut short.
        let deadline = now + self.pacer.queued() * 2 + grace;
        info!(reason = %reason, "call ending after its final prompt");
        self.ending = Some(Ending {
            mark,
            reason,
            deadline,
        });
    }

    /// Something failed mid-call: stop what is playing, play a bundled
    /// prompt, and end with `reason` once it has been heard.
    fn fail_over(&mut self, reason: &str, prompt: &[u8], mark: &str, event: &str) -> Flow {
        let now = Instant::now();
        if self.ending.is_some() {
            return Flow::Continue;
        }
        if let Some(b) = self.bot.take() {
            if b.frames_sent > 0 {
                self.carrier.send_clear();
            }
            self.stop_speaking(&b);
            self.rec.turn(
                Speaker::Bot,
                b.heard_text(self.lead_ms),
                (b.started_at, now),
                true,
            );
        }
        self.pacer.clear();
        self.prompt_frames = 0;
        self.pacer.push_audio(prompt);
        self.rec.event(event, serde_json::json!({}), now);
        self.begin_ending(mark.to_string(), reason.to_string(), now);
        Flow::Continue
    }

    fn on_ending_timeout(&mut self) -> Flow {
        let Some(e) = self.ending.take() else {
            return Flow::Continue;
        };
        warn!(mark = %e.mark, "final mark not echoed by the carrier in time; closing anyway");
        Flow::End(End {
            reason: e.reason,
            at: Instant::now(),
        })
    }

    // ----- TTS -----------------------------------------------------------

    fn on_tts(&mut self, ev: TtsEvent) -> Flow {
        match ev {
            TtsEvent::Audio { context, bytes } => match self.bot.as_mut() {
                Some(b) if b.ctx == context && self.ending.is_none() => {
                    b.audio_bytes += bytes.len();
                    self.pacer.push_audio(&bytes);
                }
                _ => {
                    self.interaction.stale_tts_audio_chunks += 1;
                    metrics::counter!(m::STALE_DROPPED, "kind" => "tts_audio").increment(1);
                }
            },
            TtsEvent::ContextFinal { context } => {
                if let Some(b) = self.bot.as_mut().filter(|b| b.ctx == context) {
                    b.tts_done = true;
                    self.finish_generation();
                }
            }
            TtsEvent::Closed(reason) => {
                self.tts_open = false;
                if self.ending.is_none() {
                    warn!(reason = ?reason, "TTS socket closed mid-call");
                    return self.fail_over(
                        "provider_failed:tts",
                        prompts::TRANSFER,
                        "callgate-transfer:tts_failed",
                        "tts_closed",
                    );
                }
            }
            TtsEvent::ProviderError { message } => {
                debug!(message = %message, "TTS provider message")
            }
            _ => {}
        }
        Flow::Continue
    }

    /// The reply is fully generated: queue its end-of-turn mark, and the
    /// exit that was waiting for it.
    fn finish_generation(&mut self) {
        let now = Instant::now();
        let Some(b) = self.bot.as_mut() else { return };
        if !b.generated() || b.mark.is_some() {
            return;
        }
        let name = format!("turn-{}", b.turn.0);
        b.mark = Some(name.clone());
        self.pacer.push_mark(name);
        if let Some(exit) = self.exit_after_turn.take() {
            self.start_exit(exit, now);
        }
    }

    // ----- tools ---------------------------------------------------------

    fn on_tool_result(&mut self, outcome: tools::ToolOutcome) -> Flow {
        let now = Instant::now();
        self.rec.event(
            "tool_result",
            serde_json::json!({ "is_error": outcome.is_error }),
            now,
        );
        if self.dialog_open {
            let _ = self
                .dialog
                .tool_result(&outcome.id, &outcome.result_json, outcome.is_error);
        }
        Flow::Continue
    }

    // ----- outbound audio --------------------------------------------------

    /// Sends every frame and mark that is due, and re-arms the pacing timer.
    fn pump_audio(&mut self) {
        let now = Instant::now();
        while let Some(item) = self.pacer.poll(now) {
            match item {
                Paced::Frame(frame) => {
                    self.carrier.send_audio(&frame);
                    self.on_frame_sent(now);
                }
                Paced::Mark(name) => {
                    self.carrier.send_mark(&name);
                    self.on_mark_sent(&name, now);
                }
            }
        }
        self.watch_underrun(now);
        let next = self.pacer.next_deadline().unwrap_or_else(far_future);
        self.pace_timer.as_mut().reset(next.into());
    }

    /// The final mark is on its way: the carrier now has `grace` to echo it.
    fn on_mark_sent(&mut self, name: &str, now: Instant) {
        let grace = ms(self.app.cfg().call.final_mark_grace_ms);
        if let Some(e) = self.ending.as_mut().filter(|e| e.mark == name) {
            e.deadline = now + grace;
        }
    }

    /// A reply that started playing and then ran dry before it was fully
    /// generated (TTS slow, a tool slow) is owed again.
    fn watch_underrun(&mut self, now: Instant) {
        let dry = self.pacer.is_idle() && self.ending.is_none();
        if dry
            && self
                .bot
                .as_ref()
                .is_some_and(|b| b.frames_sent > 0 && !b.tts_done)
        {
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
            self.rec.stage(Stage::FirstPlayableAudio, now);
            metrics::histogram!(m::FIRST_AUDIO).record((now - self.media_ready_at).as_secs_f64());
        }
        if let Some(since) = self.reply_owed_since.take() {
            let latency = now - since;
            self.interaction.max_reply_latency_ms =
                self.interaction.max_reply_latency_ms.max(millis(latency));
            metrics::histogram!(m::REPLY_LATENCY).record(latency.as_secs_f64());
        }
        if let Some(b) = self.bot.as_mut() {
            if b.frames_sent == 0 {
                self.app.counters.speaking.fetch_add(1, Ordering::Relaxed);
            }
            b.frames_sent += 1;
            self.watchdog.reply_audible();
        }
    }

    // ----- teardown --------------------------------------------------------

    async fn teardown(self, end: End) {
        let CallActor {
            app,
            permit,
            carrier,
            stt,
            tts,
            dialog,
            dialog_events,
            mut tools,
            mut rec,
            bot,
            ..
        } = self;
        let started = Instant::now();
        if let Some(t) = self.last_media {
            rec.stage(Stage::LastMedia, t);
        }
        rec.stage(Stage::DisconnectObserved, end.at);
        if let Some(b) = bot {
            if b.frames_sent > 0 {
                app.counters.speaking.fetch_sub(1, Ordering::Relaxed);
            }
            rec.turn(
                Speaker::Bot,
                b.heard_text(self.lead_ms),
                (b.started_at, end.at),
                true,
            );
        }
        tools.cancel_all();
        let cfg = app.cfg();
        let bound = ms(cfg.call.teardown_timeout_ms);
        let media = serde_json::json!({
            "frames_in": carrier.stats.frames_in.load(Ordering::Relaxed),
            "frames_out": carrier.stats.frames_out.load(Ordering::Relaxed),
            "frames_dropped": carrier.stats.frames_dropped.load(Ordering::Relaxed),
            "ignored_carrier_events": carrier.stats.ignored_events.load(Ordering::Relaxed),
            "stt_audio_dropped": stt.dropped_audio_frames(),
        });
        dialog.end(&end.reason);
        drop(dialog_events);
        let closes = tokio::join!(
            tokio::time::timeout(bound, carrier.close(1000, "")),
            tokio::time::timeout(bound, stt.close()),
            tokio::time::timeout(bound, tts.close()),
        );
        let forced = [
            closes.0.is_err(),
            !matches!(closes.1, Ok(Ok(_))),
            !matches!(closes.2, Ok(Ok(()))),
        ]
        .iter()
        .filter(|f| **f)
        .count();
        let stats = serde_json::json!({
            "active_counter_delta": { "increment": 1, "decrement": 1 },
            "admission_wait_ms": millis(permit.waited()),
            "setup_ms": self.setup_ms,
            "media": media,
            "interaction": self.interaction,
            "delegation": tools.stats,
            "recovery": { "reconnect_attempts": 0, "duplicate_live_sessions": 0 },
            "forced_closes": forced,
            "stalls": self.watchdog.stalls,
            "writes_lost": rec.lost,
        });
        let done = Instant::now();
        rec.close(&end.reason, CleanupStatus::Completed, done, stats);
        let duration = done.duration_since(permit.admitted_at());
        metrics::histogram!(m::TEARDOWN_SECONDS).record((done - started).as_secs_f64());
        metrics::histogram!(m::CALL_SECONDS).record(duration.as_secs_f64());
        metrics::counter!(m::CALLS_ENDED, "reason" => reason_label(&end.reason)).increment(1);
        info!(reason = %end.reason, duration_s = duration.as_secs_f64(), forced_closes = forced, "call_ended");
        drop(permit);
    }
}

/// The low-cardinality part of an end reason (`transferred:caller_requested_human` → `transferred`).
pub fn reason_label(reason: &str) -> String {
    match reason.split_once(':') {
        Some((head, tail))
            if head == "provider_failed" || head == "setup_failed" || head == "protocol_error" =>
        {
            format!("{head}:{tail}")
        }
        Some((head, _)) => head.to_string(),
        None => reason.to_string(),
    }
}

fn watchdog_config(cfg: &crate::config::Config) -> WatchdogConfig {
    WatchdogConfig {
        reply_stall: ms(cfg.call.reply_stall_ms),
        stt_stall: ms(cfg.call.stt_stall_ms),
        media_stall: ms(cfg.call.media_stall_ms),
        retry: ms(cfg.call.stall_retry_ms),
    }
}

/// Holds the `setting_up` gauge during setup.
pub fn setup_gauge(app: &App) -> Gauge<'_> {
    Gauge::hold(&app.counters.setting_up)
}
