//! The conversation half of the call core: transcripts, dialog replies,
//! TTS audio, tool calls and barge-in.

use std::time::Instant;

use dialog_grpc::{DialogEvent, TurnId};
use state_store::Speaker;
use stt_client::SttEvent;
use tracing::{debug, info, warn};
use tts_client::{ContextId, TtsEvent};

use super::ToolOutcome;
use super::outage::Outage;
use super::state::Turn;
use super::{CallCore, Command, Rec, Report, Stale, ToolTask};
use crate::call::bot::{BotTurn, Exit};
use crate::end::{End, EndReason, Provider};
use crate::prompts::Prompt;

impl CallCore {
    // ----- STT ---------------------------------------------------------------

    pub(super) fn on_stt(&mut self, ev: SttEvent, now: Instant) {
        match &ev {
            SttEvent::Closed(reason) => {
                debug!(reason = ?reason, "STT stream closed");
                return self.provider_closed(Provider::Stt, now);
            }
            SttEvent::Transcript(t) => {
                // An empty final does not answer the caller's speech: the
                // STT clock stays armed until words (or an utterance) arrive.
                if t.is_final && !t.text.trim().is_empty() {
                    self.watchdog.transcript_final(now);
                }
                if !t.text.trim().is_empty() {
                    self.utterance_first_heard.get_or_insert(now);
                    if self.bot_is_audible() {
                        self.barge_in(now);
                    }
                }
            }
            SttEvent::ProviderError { message } => {
                debug!(message = %message, "STT provider message")
            }
            SttEvent::Reconnecting {
                attempt,
                capacity,
                error,
            } => self.on_reconnecting(Provider::Stt, *attempt, *capacity, error, now),
            SttEvent::Reconnected { down_for, .. } => {
                let outage = Outage::Reconnected {
                    down_for: *down_for,
                };
                self.on_outage(Provider::Stt, outage, now);
            }
            _ => {}
        }
        if let Some(utt) = self.assembler.push(&ev) {
            self.watchdog.transcript_final(now);
            self.on_utterance(&utt.text, now);
        }
    }

    fn on_utterance(&mut self, text: &str, now: Instant) {
        if text.trim().is_empty() {
            return;
        }
        if !self.is_live() {
            // The call is ending (say the bot ended it while the caller was
            // still talking): the words are kept, but no reply is owed.
            return self.record_caller_turn(text, now);
        }
        if matches!(self.turn, Turn::Replying { .. }) {
            self.barge_in(now);
        }
        self.record_caller_turn(text, now);
        self.expected_turn = TurnId(self.expected_turn.0 + 1);
        debug!(turn = %self.expected_turn, chars = text.len(), "caller utterance final");
        if self.links.dialog {
            self.push(Command::DialogTurn(self.expected_turn, text.to_string()));
            let voice_end = self.voice_end_for_turn(now);
            self.timings.begin(self.expected_turn, voice_end, now);
        }
        self.turn = Turn::Owed {
            owed_since: Some(now),
        };
        self.watchdog.reply_owed(now);
    }

    fn record_caller_turn(&mut self, text: &str, now: Instant) {
        let started = self.utterance_first_heard.take().unwrap_or(now);
        self.record(Rec::Turn {
            speaker: Speaker::Caller,
            text: text.to_string(),
            span: (started, now),
            interrupted: false,
            latency: None,
        });
        self.interaction.user_turns += 1;
    }

    /// Whether bot audio is queued here or still playing at the leg (or
    /// held by a pause).
    pub(super) fn bot_is_audible(&self) -> bool {
        self.turn
            .reply()
            .is_some_and(|b| b.frames_sent > 0 || b.audio_bytes > 0)
    }

    /// The caller spoke over the bot: stop output in this very step
    /// (docs/design.md principle 6) — pacer cleared, the leg's queue cleared,
    /// the TTS context cancelled, the dialog told what was heard, the
    /// turn's non-privileged tools cancelled. Late audio of the cancelled
    /// context is dropped as stale.
    pub(super) fn barge_in(&mut self, now: Instant) {
        let Some(cut) = self.turn.take_reply() else {
            return;
        };
        let mut b = cut.bot;
        let heard = self.heard(&b, now);
        // A pause already sent its `clear`.
        let paused = cut.pause.is_some();
        self.pacer.clear();
        self.prompt_frames = 0;
        self.watchdog.reply_audible();
        if b.frames_sent > 0 && !paused {
            self.push(Command::Clear);
            // Measured from the VAD's onset only while that speech goes on.
            if self.vad.is_speaking() {
                self.timings.stop_emitted();
            }
        }
        if self.links.tts {
            self.push(Command::TtsCancel(b.ctx));
        }
        if self.links.dialog {
            self.push(Command::DialogInterrupt(b.turn, heard.clone()));
        }
        self.cancel_interrupted_tools(b.turn);
        self.record(Rec::Turn {
            speaker: Speaker::Bot,
            text: heard.clone(),
            span: (b.started_at, now),
            interrupted: true,
            latency: self.timings.latency_of(b.turn),
        });
        self.interaction.interruptions += 1;
        self.report(Report::BargeIn);
        info!(turn = %b.turn, heard_chars = heard.len(), "barge-in: bot output stopped");
        if let Some(exit) = b.take_exit() {
            self.start_exit(exit, now);
        }
    }

    /// Tool policy (docs/design.md principle 7): an interrupted turn's answer no
    /// longer matters, so its non-privileged tools are cancelled; privileged
    /// ones act for the caller (a booking) and run to completion so the
    /// dialog learns what really happened.
    fn cancel_interrupted_tools(&mut self, turn: TurnId) {
        let mut ids: Vec<_> = self
            .tools
            .iter()
            .filter(|(_, t)| t.turn == turn && !t.privileged)
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort_by(|a, b| a.0.cmp(&b.0));
        for id in ids {
            self.tools.remove(&id);
            self.push(Command::ToolCancel(id));
        }
    }

    // ----- dialog ------------------------------------------------------------

    pub(super) fn on_dialog(&mut self, ev: DialogEvent, now: Instant) {
        match ev {
            DialogEvent::TextDelta { turn, text } if self.accept_turn(turn, now) => {
                self.timings.first_token(turn, now);
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
                if self.repeated_tool_call(&id) {
                    return;
                }
                self.flush_speech();
                let detail = serde_json::json!({ "name": name, "privileged": privileged });
                self.event("tool_call", detail, now);
                self.tools.insert(id.clone(), ToolTask { turn, privileged });
                self.push(Command::ToolStart {
                    id,
                    turn,
                    name,
                    arguments_json,
                    privileged,
                });
            }
            DialogEvent::SlotUpdate { name, value } => {
                self.record(Rec::Slot {
                    name,
                    value,
                    at: now,
                });
            }
            DialogEvent::Escalate { reason } => {
                self.record(Rec::Escalation {
                    reason: reason.clone(),
                    at: now,
                });
                self.exit_when_quiet(Exit::Transfer(reason), now);
            }
            DialogEvent::EndCall { reason } => self.exit_when_quiet(Exit::End(reason), now),
            DialogEvent::Closed(result) => {
                debug!(result = ?result, "dialog stream closed");
                self.provider_closed(Provider::Dialog, now);
            }
            DialogEvent::Reconnecting {
                attempt,
                capacity,
                error,
            } => self.on_reconnecting(Provider::Dialog, attempt, capacity, &error, now),
            DialogEvent::Reconnected { down_for, .. } => {
                self.on_outage(Provider::Dialog, Outage::Reconnected { down_for }, now);
            }
            _ => {}
        }
    }

    /// Whether an event for `turn` belongs to the current reply; opens the
    /// reply (and its TTS context) on its first event. Stale events of
    /// superseded turns are dropped and counted.
    fn accept_turn(&mut self, turn: TurnId, now: Instant) -> bool {
        if turn != self.expected_turn || !self.is_live() {
            self.interaction.stale_dialog_events += 1;
            self.report(Report::Stale(Stale::Dialog));
            return false;
        }
        if self.turn.reply().is_some_and(|b| b.turn == turn) {
            return true;
        }
        self.next_ctx += 1;
        let ctx = ContextId(self.next_ctx);
        if self.links.tts {
            self.push(Command::TtsOpen(ctx));
        }
        let owed_since = match self.turn {
            Turn::Owed { owed_since } => owed_since,
            _ => None,
        };
        self.turn = Turn::Replying {
            bot: BotTurn::new(turn, ctx, now),
            pause: None,
            owed_since,
        };
        true
    }

    fn speak(&mut self, text: &str) {
        /// True when `text` has a `.`, `?` or `!` followed by whitespace
        /// or by the end of the delta.
        fn ends_sentence(text: &str) -> bool {
            let mut chars = text.chars().peekable();
            while let Some(c) = chars.next() {
                if matches!(c, '.' | '?' | '!') && chars.peek().is_none_or(|n| n.is_whitespace()) {
                    return true;
                }
            }
            false
        }
        let Some(b) = self.turn.reply_mut() else {
            return;
        };
        b.text.push_str(text);
        let ctx = b.ctx;
        if self.links.tts {
            self.push(Command::TtsText(ctx, text.to_string()));
            // A sentence end (`.`, `?`, `!` then whitespace or the end of
            // the delta) is flushed at once, so a short reply does not wait
            // for the provider's chunk schedule.
            if ends_sentence(text) {
                self.flush_speech();
            }
        }
    }

    /// Makes TTS generate what it has buffered (e.g. "let me check" before
    /// a tool, or a finished sentence).
    fn flush_speech(&mut self) {
        if let (Some(b), true) = (self.turn.reply(), self.links.tts) {
            let ctx = b.ctx;
            self.push(Command::TtsFlush(ctx));
        }
    }

    fn complete_turn(&mut self) {
        let Some(b) = self.turn.reply_mut() else {
            return;
        };
        b.dialog_finished();
        let ctx = b.ctx;
        if self.links.tts {
            self.push(Command::TtsFlush(ctx));
            self.push(Command::TtsClose(ctx));
        }
    }

    /// Exits after the reply being generated, or at once (the exit marker
    /// then queues behind any reply audio still playing).
    fn exit_when_quiet(&mut self, exit: Exit, now: Instant) {
        let exit = match self.turn.reply_mut() {
            Some(b) => match b.exit_after(exit) {
                Ok(()) => return,
                Err(exit) => exit,
            },
            None => exit,
        };
        self.start_exit(exit, now);
    }

    // ----- TTS ---------------------------------------------------------------

    pub(super) fn on_tts(&mut self, ev: TtsEvent, now: Instant) {
        match ev {
            TtsEvent::Audio { context, bytes } => {
                let live = self.is_live();
                match self.turn.reply_mut() {
                    Some(b) if b.ctx == context && live => {
                        b.audio_bytes += bytes.len();
                        let behind_prompt = self.prompt_frames > 0;
                        self.timings.first_audio(b.turn, now, behind_prompt);
                        self.pacer.push_audio(&bytes);
                    }
                    _ => {
                        self.interaction.stale_tts_audio_chunks += 1;
                        self.report(Report::Stale(Stale::TtsAudio));
                    }
                }
            }
            TtsEvent::ContextFinal { context } => {
                if let Some(b) = self.turn.reply_mut()
                    && b.ctx == context
                {
                    b.tts_finished();
                    self.finish_generation(now);
                }
            }
            TtsEvent::Closed(reason) => {
                debug!(reason = ?reason, "TTS socket closed");
                self.provider_closed(Provider::Tts, now);
            }
            TtsEvent::ProviderError { message } => {
                debug!(message = %message, "TTS provider message");
            }
            TtsEvent::Reconnecting {
                attempt,
                capacity,
                error,
            } => self.on_reconnecting(Provider::Tts, attempt, capacity, &error, now),
            TtsEvent::Reconnected { down_for, .. } => {
                self.on_outage(Provider::Tts, Outage::Reconnected { down_for }, now);
            }
            _ => {}
        }
    }

    /// The reply is fully generated: queue its end-of-turn marker, and the
    /// exit that was waiting for it.
    fn finish_generation(&mut self, now: Instant) {
        let Some((name, exit)) = self.turn.reply_mut().and_then(|b| b.seal()) else {
            return;
        };
        self.pacer.push_mark(name);
        if let Some(exit) = exit {
            self.start_exit(exit, now);
        }
    }

    // ----- tools -------------------------------------------------------------

    /// A tool call id this call already has (a resumed dialog stream
    /// re-sent its turn): never run twice; a finished one gets its result
    /// again.
    fn repeated_tool_call(&mut self, id: &dialog_grpc::ToolCallId) -> bool {
        if self.tools.contains_key(id) {
            debug!(tool = %id.0, "tool call repeated while it runs; not started again");
            return true;
        }
        let Some((result_json, is_error)) = self.tool_memory.result(id).cloned() else {
            return false;
        };
        debug!(tool = %id.0, "tool call repeated after it finished; its result sent again");
        if self.links.dialog {
            self.push(Command::DialogToolResult {
                id: id.clone(),
                result_json,
                is_error,
            });
        }
        true
    }

    pub(super) fn on_tool_result(&mut self, outcome: ToolOutcome, now: Instant) {
        let detail = serde_json::json!({ "is_error": outcome.is_error });
        self.event("tool_result", detail, now);
        if self.tools.remove(&outcome.id).is_some() {
            let (id, json) = (outcome.id.clone(), outcome.result_json.clone());
            self.tool_memory.finished(id, json, outcome.is_error);
        }
        if self.links.dialog {
            self.push(Command::DialogToolResult {
                id: outcome.id,
                result_json: outcome.result_json,
                is_error: outcome.is_error,
            });
        }
    }

    pub(super) fn provider_closed(&mut self, p: Provider, now: Instant) {
        let name = match p {
            Provider::Stt => {
                self.links.stt = false;
                "stt"
            }
            Provider::Tts => {
                self.links.tts = false;
                "tts"
            }
            Provider::Dialog => {
                self.links.dialog = false;
                "dialog"
            }
        };
        if self.is_live() {
            warn!(provider = name, "provider connection closed mid-call");
            self.fail_over(
                End::new(EndReason::ProviderFailed(p), now),
                Prompt::Transfer,
                format!("callgate-transfer:{name}_failed"),
                &format!("{name}_closed"),
                now,
            );
        }
    }
}
