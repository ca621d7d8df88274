//! What the server sent, acted on: audio told apart into prompts and the
//! bot's own turn, marks, `clear`, the partner protocol's control messages
//! and the server going away.

use std::time::Duration;

use super::ending::{Terminal, TerminalKind, terminal_kind, terminal_outcome};
use super::{BotTurn, Caller, MarkRole, Stage, TURN_PREFIX, TurnHeard};
use crate::error::LoadError;
use crate::playout::PendingMark;
use crate::prompts::{Piece, Sound};
use crate::record::{Outcome, Prompt, ServerError, TransferMessage};
use crate::transport::{self, Heard, Release};

impl Caller {
    pub(super) fn on_heard(&mut self, now: Duration, heard: Result<Heard, LoadError>) {
        match heard {
            Ok(Heard::Audio(bytes)) => self.on_media(now, &bytes),
            Ok(Heard::Mark(name)) => self.on_mark(now, name),
            Ok(Heard::Clear) => self.on_clear(now),
            Ok(Heard::Started(session_id, token)) => self.on_started(session_id, token),
            Ok(Heard::Transfer { target, reason }) => {
                self.said.transfer.get_or_insert(TransferMessage {
                    target,
                    reason: reason.clone(),
                });
                self.enter_terminal(now, TerminalKind::Transfer, reason);
            }
            Ok(Heard::End(reason)) => {
                self.said.end.get_or_insert_with(|| reason.clone());
                self.enter_terminal(now, TerminalKind::End, reason);
            }
            Ok(Heard::Error { code, message }) => {
                tracing::debug!(%code, %message, "server reported a protocol error");
                self.said.error.get_or_insert(ServerError { code, message });
            }
            Ok(Heard::Session(status)) => self.on_session(now, status),
            Ok(Heard::Unknown(event)) => {
                tracing::debug!(%event, "ignoring unknown server event");
                self.counters.unknown_events += 1;
            }
            Err(err) => {
                tracing::debug!(%err, "ignoring malformed server message");
                self.counters.malformed_events += 1;
            }
        }
        // A mark that arrived on an idle buffer is due right now.
        self.advance(now);
    }

    /// Partner `started`: the call's id once, then again only to confirm a
    /// resume of the same session; the newest token is kept.
    fn on_started(&mut self, session_id: String, token: Option<String>) {
        match &self.said.session_id {
            None => self.said.session_id = Some(session_id),
            Some(id) if self.resuming && *id == session_id => {
                self.resuming = false;
                self.resumes += 1;
            }
            Some(_) => self.counters.malformed_events += 1,
        }
        if token.is_some() {
            self.resume_token = token;
        }
    }

    fn on_media(&mut self, now: Duration, audio: &[u8]) {
        if audio.is_empty() {
            self.counters.malformed_events += 1;
            return;
        }
        if self.ear.is_lossy() {
            self.on_stream_frame(now, audio);
            return;
        }
        let pieces = self.ear.hear(audio);
        self.audio_arrived(now, audio.len(), pieces);
    }

    /// `bytes` of bot audio arrived at `now`, heard as `pieces`.
    pub(super) fn audio_arrived(&mut self, now: Duration, bytes: usize, pieces: Vec<Piece>) {
        if !self.is_live() {
            return;
        }
        self.counters
            .first_audio
            .get_or_insert(now.saturating_sub(self.started_at));
        let len = transport::playing_time(self.audio, bytes);
        self.interaction.audio(now, len);
        // A stretch of dead air this audio ends too late is silent in the
        // phase it was owed in, but what arrived is still measured (a reply
        // at 3.4 s has its true latency).
        let too_late = (!self.playout.is_playing(now)
            && self.observe(now) > self.plan.silence_threshold)
            .then(|| self.phase_label());
        for piece in pieces {
            self.on_piece(now, piece);
        }
        self.prompt_started.get_or_insert(now);
        if let Some(phase) = too_late {
            self.finish_silent_in(now, phase);
            return;
        }
        if let Stage::Terminal(term) = &mut self.stage {
            term.audio_seen = true;
        }
        self.playout.push_audio(now, len);
    }

    /// Acts on what a stretch of the audio was.
    fn on_piece(&mut self, now: Duration, piece: Piece) {
        match piece.sound {
            Sound::Prompt(p) if piece.starts_run => self.prompt_began(now, p),
            Sound::Prompt(_) => {}
            Sound::Own => {
                let len = transport::playing_time(self.audio, piece.bytes);
                self.own_audio(now, piece.starts_run, len);
            }
        }
    }

    /// A bundled prompt began: counted as itself, never as the turn.
    fn prompt_began(&mut self, now: Duration, prompt: Prompt) {
        self.counters.prompts.add(prompt);
        let Stage::AwaitBot { turn, heard } = &mut self.stage else {
            return;
        };
        if *heard == TurnHeard::Own {
            return;
        }
        *heard = TurnHeard::Prompt;
        if prompt == Prompt::Apology && matches!(turn, BotTurn::Reply(_)) {
            let latency = now.saturating_sub(self.speech_ended_at);
            self.counters.apology_latency.push(latency);
        }
    }

    /// The bot's own audio: the greeting or the reply owed, if one is.
    fn own_audio(&mut self, now: Duration, starts_run: bool, len: Duration) {
        let Stage::AwaitBot { turn, heard } = &mut self.stage else {
            if starts_run {
                self.counters.prompts.unknown = self.counters.prompts.unknown.saturating_add(1);
            }
            return;
        };
        if *heard != TurnHeard::Own {
            *heard = TurnHeard::Own;
            self.interaction.turn_began(now, turn.index());
            match turn {
                BotTurn::Reply(_) => {
                    let latency = now.saturating_sub(self.speech_ended_at);
                    self.counters.reply_latency.push(latency);
                    self.counters.replies_heard += 1;
                }
                BotTurn::Greeting => {
                    self.counters.greeting = Some(now.saturating_sub(self.started_at));
                }
            }
        }
        self.counters.turn_audio += len;
    }

    fn on_mark(&mut self, now: Duration, name: String) {
        let role = if name.starts_with(TURN_PREFIX) {
            self.admitted = true;
            match self.stage {
                Stage::AwaitBot {
                    heard: TurnHeard::Own,
                    ..
                } => MarkRole::TurnEnd,
                _ => MarkRole::Plain,
            }
        } else if let Some((kind, reason)) = terminal_kind(&name) {
            self.enter_terminal(now, kind, reason.to_string());
            MarkRole::Terminal
        } else {
            MarkRole::Plain
        };
        if self.playout.push_mark(now, name, role).is_err() {
            self.counters.malformed_events += 1;
        }
    }

    fn on_clear(&mut self, now: Duration) {
        self.interaction.clear(now);
        self.prompt_started = None;
        self.ear.clear();
        for mark in self.playout.clear(now) {
            if !self.is_live() {
                break;
            }
            self.echo(now, mark, Release::Cleared);
        }
    }

    pub(super) fn enter_terminal(&mut self, now: Duration, kind: TerminalKind, reason: String) {
        let audio_seen = match self.stage {
            Stage::AwaitBot { heard, .. } => {
                heard != TurnHeard::Nothing || self.playout.is_playing(now)
            }
            Stage::Terminal(_) => return, // the first terminal mark decides
            _ => self.playout.is_playing(now),
        };
        if self.owed_from.is_none() {
            self.owed_from = Some(now);
        }
        tracing::debug!(kind = kind.name(), %reason, "terminal mark or message received");
        let heard_from = self.prompt_started.filter(|_| audio_seen).unwrap_or(now);
        self.stage = Stage::Terminal(Terminal {
            kind,
            reason,
            heard_from,
            audio_seen,
            echoed: false,
            via_status: false,
        });
    }

    /// A mark left the playout buffer: echo it if the protocol does, and
    /// act on what it means (the same for every protocol).
    pub(super) fn echo(&mut self, t: Duration, mark: PendingMark<MarkRole>, why: Release) {
        if let Some(echo) = self.wire.echo(&mark.name, why) {
            self.outbox.push_back(echo);
            self.counters.marks_echoed += 1;
        }
        match (mark.tag, &mut self.stage) {
            (
                MarkRole::TurnEnd,
                Stage::AwaitBot {
                    turn,
                    heard: TurnHeard::Own,
                },
            ) => {
                let turn = *turn;
                // After a cough the bot should resume, not end its turn:
                // a mark the clear released is not the turn's end.
                let held = why == Release::Cleared && self.interaction.holds_turn(turn.index());
                if !held {
                    self.turn_completed(t, turn);
                }
            }
            (MarkRole::Terminal, Stage::Terminal(term)) => term.echoed = true,
            _ => {}
        }
    }

    pub(super) fn turn_completed(&mut self, t: Duration, turn: BotTurn) {
        self.interaction.turn_completed(turn.index());
        self.prompt_started = None;
        self.ear.new_turn();
        if self.end_stretch(t) {
            return;
        }
        self.owed_from = None;
        let heard = std::mem::take(&mut self.counters.turn_audio);
        let done = match turn {
            BotTurn::Greeting => {
                self.counters.greeting_audio = Some(heard);
                0
            }
            BotTurn::Reply(n) => {
                self.counters.reply_audio.push(heard);
                n
            }
        };
        match self.plan.turns.get(done) {
            Some(next) if next.cued && std::mem::take(&mut self.speak_early) => {
                self.speak_cued(t, done);
            }
            Some(next) if next.cued => self.stage = Stage::Cued { next: done },
            Some(next) => {
                self.stage = Stage::Thinking {
                    next: done,
                    until: t + next.think,
                }
            }
            None if self.plan.hold => self.stage = Stage::Holding,
            None => {
                let reason = format!("caller hung up after {done} answered utterances");
                self.hang_up(t, Outcome::Completed, reason);
            }
        }
    }

    pub(super) fn server_gone(&mut self, now: Duration, why: String) {
        self.advance(now);
        if !self.is_live() {
            return;
        }
        let overflow_heard = self.ear.heard_since_clear(Prompt::Overflow);
        let outcome = match &self.stage {
            Stage::Terminal(term) => terminal_outcome(term, overflow_heard),
            _ => Outcome::Failed {
                reason: format!("{why} while {}", self.phase_label()),
            },
        };
        self.finish(now, outcome, why);
    }
}
