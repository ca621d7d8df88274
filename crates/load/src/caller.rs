//! The sans-IO caller: the carrier's side of one call, as a state machine.
//!
//! Inputs are the connection result, server frames, the server's close
//! and the passing of time; outputs are frames to send ([`Caller::poll_transmit`])
//! and the next instant it needs to be woken ([`Caller::poll_timeout`]). It
//! owns the 20 ms media clock, the playout buffer, mark echoes, the script
//! and the owed-silence accounting. It never reads a clock: every `now` is the
//! time since the call was dialled, so tests run it on a virtual clock.
//!
//! The behaviour is the same for every protocol ([`CallProtocol`]): only
//! the framing differs, and that lives in [`crate::transport`]. The one
//! protocol difference the core sees is whether a mark dropped by `clear`
//! is echoed (Twilio: yes, at once; partner: never) — what the mark means
//! to the script does not change.
//!
//! Polling order for a driver: feed one input (or `handle_timeout`), then drain
//! `poll_transmit` until `None`, then stop if [`Caller::is_done`], else sleep
//! until `poll_timeout`.
//!
//! What is heard is classified by its sound ([`crate::prompts::Ear`]): a
//! bundled prompt (hold, apology, transfer, goodbye, overflow) is counted
//! as that prompt and never answers an utterance; only the bot's own audio
//! is the greeting or a reply, and only it lets a `turn-` mark end the turn.
//! Audio of any kind fills owed silence — an apology is not dead air.
//!
//! Interaction scenarios ([`interaction`]): with `barge_in_at` the first
//! utterance starts that long after the greeting's first own audio frame,
//! over the greeting (nothing is owed while the caller talks); with a
//! `cough` a short voiced burst goes out that long into one bot turn and
//! the caller keeps listening — a turn mark the server's `clear` released
//! then does not end that turn, only one that plays does.
//!
//! Owed silence: while the caller waits for the greeting, for a reply, for a
//! bot turn's closing mark, or for the close after a terminal mark, every
//! stretch in which nothing plays is measured. A stretch longer than the
//! silence threshold makes the call [`Outcome::Silent`]; the caller waits at
//! most [`SILENCE_GRACE`] past the threshold to see how long it really was.

use std::collections::VecDeque;
use std::time::Duration;

use media::format::AudioFormat;
use media::synth::SpeechSynth;

use crate::error::LoadError;
use crate::ids::CallIds;
use crate::playout::{PendingMark, Playout};
use crate::prompts::{Ear, Piece, Sound};
use crate::record::{CallRecord, Outcome, Prompt, PromptsHeard, ServerError, TransferMessage};
use crate::transport::{self, CallProtocol, Heard, Release, Wire};

use ending::{Terminal, TerminalKind, terminal_kind, terminal_outcome};
pub use interaction::CoughPlan;
use interaction::Interaction;

mod ending;
mod interaction;

#[cfg(test)]
mod tests;

/// One media frame.
pub const FRAME: Duration = Duration::from_millis(20);

/// How long past the silence threshold a silent call is still watched, so
/// the record says how long the dead air really lasted (a reply at 3.4 s
/// reads differently from no reply at all).
pub const SILENCE_GRACE: Duration = Duration::from_secs(1);

/// How late the media clock may run before frames are skipped instead of
/// sent in a burst. Past this the load generator is overloaded; skipped
/// frames are counted so a report can say so.
pub const MAX_FRAME_LAG: Duration = Duration::from_millis(200);

/// A mark that ends a bot turn (the server's convention).
const TURN_PREFIX: &str = "turn-";

/// What one call will do, drawn before it is dialled.
#[derive(Debug, Clone)]
pub struct CallPlan {
    pub index: usize,
    pub ids: CallIds,
    pub custom_parameters: Vec<(String, String)>,
    /// One entry per utterance, in order.
    pub turns: Vec<TurnPlan>,
    pub silence_threshold: Duration,
    /// Hard limit from dialling to the end of the call.
    pub call_timeout: Duration,
    /// Seed of the caller's synthetic voice.
    pub voice_seed: u64,
    /// The protocol spoken, with its audio format.
    pub protocol: CallProtocol,
    /// Barge-in: speak the first utterance this long after the greeting's
    /// first audio frame was received, over the greeting, instead of after
    /// its closing mark.
    pub barge_in_at: Option<Duration>,
    /// A short voiced burst into one bot turn, after which the caller keeps
    /// listening.
    pub cough: Option<CoughPlan>,
}

/// One caller turn: a pause after the bot finished, then speech.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnPlan {
    pub think: Duration,
    pub speech_ms: u32,
}

/// A frame for the driver to put on the socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transmit {
    /// A JSON text frame.
    Text(String),
    /// A binary frame (partner protocol audio).
    Binary(Vec<u8>),
    /// Close the socket (after sending everything before it).
    Close,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BotTurn {
    Greeting,
    /// The reply to utterance `n` (1-based).
    Reply(usize),
}

impl BotTurn {
    /// 0 for the greeting, `n` for the reply to utterance `n`.
    fn index(self) -> usize {
        match self {
            BotTurn::Greeting => 0,
            BotTurn::Reply(n) => n,
        }
    }
}

/// What has arrived of the bot turn being waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TurnHeard {
    Nothing,
    /// Only bundled prompts (hold audio, an apology): still owed.
    Prompt,
    /// The turn's own audio began.
    Own,
}

/// What an echoed mark means to the script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MarkRole {
    Plain,
    /// Ends the bot turn being waited for.
    TurnEnd,
    /// Ends an overflow/transfer/end prompt.
    Terminal,
}

#[derive(Debug)]
enum Stage {
    Dialing,
    /// A bot turn is owed; `heard` says what of it has arrived.
    AwaitBot {
        turn: BotTurn,
        heard: TurnHeard,
    },
    /// Pausing before utterance `next` (0-based).
    Thinking {
        next: usize,
        until: Duration,
    },
    Speaking {
        utterance: usize,
        audio: Vec<u8>,
        pos: usize,
    },
    /// A terminal mark arrived; the prompt plays, then the server must close.
    Terminal(Terminal),
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    // Declaration order breaks ties: a mark due at the same instant as the
    // silence deadline is echoed first.
    Mark,
    Silence,
    Deadline,
    Frame,
}

#[derive(Debug, Default)]
struct Counters {
    connect: Option<Duration>,
    first_audio: Option<Duration>,
    reply_latency: Vec<Duration>,
    max_owed: Duration,
    utterances_sent: usize,
    replies_heard: usize,
    greeting: Option<Duration>,
    apology_latency: Vec<Duration>,
    prompts: PromptsHeard,
    marks_echoed: u64,
    unknown_events: u64,
    malformed_events: u64,
    frames_sent: u64,
    frames_skipped: u64,
    max_lag: Duration,
    /// The turn's own audio (no bundled prompt) received since the current
    /// bot turn began.
    turn_audio: Duration,
    greeting_audio: Option<Duration>,
    reply_audio: Vec<Duration>,
    close_code: Option<u16>,
}

/// What the server said about the session in the partner protocol's
/// control messages (Twilio has none of these).
#[derive(Debug, Default)]
struct ServerSaid {
    session_id: Option<String>,
    transfer: Option<TransferMessage>,
    end: Option<String>,
    error: Option<ServerError>,
}

#[derive(Debug)]
struct Finish {
    outcome: Outcome,
    end_reason: String,
    at: Duration,
}

/// The carrier's side of one call. See the module docs for the polling order.
#[derive(Debug)]
pub struct Caller {
    plan: CallPlan,
    /// The framing of the call's protocol.
    wire: Wire,
    /// The audio format of both directions.
    audio: AudioFormat,
    voice: SpeechSynth,
    /// Tells bundled prompts from the bot's own audio.
    ear: Ear,
    stage: Stage,
    playout: Playout<MarkRole>,
    /// Frames for the driver. Bounded in practice: one `advance` emits at
    /// most `MAX_FRAME_LAG / FRAME` media frames plus one echo per pending
    /// mark (itself bounded), and the driver drains it after every input.
    outbox: VecDeque<Transmit>,
    started_at: Duration,
    next_frame: Option<Duration>,
    /// Start of the current owed stage; `None` when nothing is owed.
    owed_from: Option<Duration>,
    /// When the bot audio since the last `clear` or finished turn began:
    /// the moment a caller could first hear what is playing now (e.g. the
    /// overflow prompt after hold music was cleared). Gaps inside it do not
    /// restart it.
    prompt_started: Option<Duration>,
    speech_ended_at: Duration,
    admitted: bool,
    counters: Counters,
    said: ServerSaid,
    finish: Option<Finish>,
    /// The barge-in and cough scenarios and what they measured.
    interaction: Interaction,
    /// A cough being sent (the call's audio format) and how much of it has
    /// gone; only while the caller is not speaking an utterance.
    burst: Option<(Vec<u8>, usize)>,
}

impl Caller {
    /// A caller about to dial; its clock's zero is the moment of dialling.
    pub fn new(plan: CallPlan) -> Caller {
        let audio = plan.protocol.audio();
        Caller {
            interaction: Interaction::new(plan.barge_in_at, plan.cough),
            burst: None,
            wire: Wire::new(plan.protocol, plan.ids),
            audio,
            voice: SpeechSynth::new(audio.sample_rate, plan.voice_seed),
            ear: Ear::new(audio),
            plan,
            stage: Stage::Dialing,
            playout: Playout::default(),
            outbox: VecDeque::new(),
            started_at: Duration::ZERO,
            next_frame: None,
            owed_from: None,
            prompt_started: None,
            speech_ended_at: Duration::ZERO,
            admitted: false,
            counters: Counters::default(),
            said: ServerSaid::default(),
            finish: None,
        }
    }

    // ---- getters -------------------------------------------------------

    /// The call is over; after the outbox is drained the socket can close.
    pub fn is_done(&self) -> bool {
        matches!(self.stage, Stage::Done)
    }

    /// The server has started a normal bot turn (a `turn-` mark arrived).
    pub fn is_admitted(&self) -> bool {
        self.admitted
    }

    /// How the call ended, once it has.
    pub fn outcome(&self) -> Option<&Outcome> {
        self.finish.as_ref().map(|f| &f.outcome)
    }

    /// The call's identities.
    pub fn ids(&self) -> CallIds {
        self.plan.ids
    }

    // ---- inputs --------------------------------------------------------

    /// The WebSocket upgrade succeeded: open the session (Twilio:
    /// `connected` and `start`; partner: `start`).
    pub fn handle_open(&mut self, now: Duration) {
        if !matches!(self.stage, Stage::Dialing) {
            return;
        }
        self.counters.connect = Some(now);
        let opening = self.wire.opening(&self.plan.custom_parameters);
        self.outbox.extend(opening);
        self.counters.turn_audio = Duration::ZERO;
        self.started_at = now;
        self.next_frame = Some(now + FRAME);
        self.stage = Stage::AwaitBot {
            turn: BotTurn::Greeting,
            heard: TurnHeard::Nothing,
        };
        self.owed_from = Some(now);
    }

    /// The connection could not be made. An HTTP 401 means our credentials
    /// were refused (a failure); any other HTTP refusal is a rejection.
    pub fn handle_connect_error(&mut self, now: Duration, err: &LoadError) {
        if !matches!(self.stage, Stage::Dialing) {
            return;
        }
        let outcome = match err {
            LoadError::Refused {
                status: status @ 401,
                body,
                ..
            } => Outcome::Unauthorized {
                status: *status,
                reason: body.clone(),
            },
            LoadError::Refused { status, body, .. } => Outcome::Rejected {
                how: format!("http_{status}"),
                reason: body.clone(),
                prompt_heard: false,
                time_to_rejection_ms: millis(now),
            },
            other => Outcome::Failed {
                reason: other.to_string(),
            },
        };
        self.finish(now, outcome, format!("not connected: {err}"));
    }

    /// A text frame from the server.
    pub fn handle_text(&mut self, now: Duration, text: &str) {
        self.advance(now);
        if !self.is_live() {
            return;
        }
        let heard = self.wire.text(text);
        self.on_heard(now, heard);
    }

    /// A binary frame: partner audio (Twilio only speaks text, so there it
    /// is ignored and counted as malformed).
    pub fn handle_binary(&mut self, now: Duration, bytes: &[u8]) {
        self.advance(now);
        if !self.is_live() {
            return;
        }
        let heard = self.wire.binary(bytes);
        self.on_heard(now, heard);
    }

    /// The server closed the socket (or it ended without a close frame).
    pub fn handle_closed(&mut self, now: Duration, code: Option<u16>, reason: &str) {
        if self.is_live() {
            self.counters.close_code = code;
        }
        let code = code.map_or_else(|| "none".to_string(), |c| c.to_string());
        let after = match &self.said.error {
            Some(e) => format!(" after error {} ({:?})", e.code, e.message),
            None => String::new(),
        };
        self.server_gone(
            now,
            format!("server closed the socket (code {code} {reason:?}){after}"),
        );
    }

    /// The socket failed after the handshake.
    pub fn handle_socket_error(&mut self, now: Duration, err: &LoadError) {
        self.server_gone(now, err.to_string());
    }

    /// Time has passed; fire whatever is due.
    pub fn handle_timeout(&mut self, now: Duration) {
        self.advance(now);
    }

    // ---- outputs -------------------------------------------------------

    /// The next frame to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.outbox.pop_front()
    }

    /// When to call [`Caller::handle_timeout`] next (`None`: only inputs matter).
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.next_timer().map(|(t, _)| t)
    }

    /// The record of this call. A call still running at this point (its
    /// driver gave up) is recorded as failed at `now`.
    pub fn into_record(mut self, now: Duration) -> CallRecord {
        if self.finish.is_none() {
            let phase = self.phase_label();
            self.finish(
                now,
                Outcome::Failed {
                    reason: format!("abandoned by the driver while {phase}"),
                },
                "abandoned".into(),
            );
        }
        let (outcome, end_reason, at) = match self.finish.take() {
            Some(f) => (f.outcome, f.end_reason, f.at),
            None => (
                Outcome::Failed {
                    reason: "unfinished".into(),
                },
                String::new(),
                now,
            ),
        };
        let c = &self.counters;
        let ms = |d: &Duration| millis(*d);
        CallRecord {
            index: self.plan.index,
            call_sid: self.plan.ids.call,
            stream_sid: self.plan.ids.stream,
            outcome,
            connect_ms: c.connect.map(millis),
            time_to_first_audio_ms: c.first_audio.map(millis),
            reply_latency_ms: c.reply_latency.iter().copied().map(millis).collect(),
            max_owed_silence_ms: millis(c.max_owed),
            utterances_planned: self.plan.turns.len(),
            utterances_sent: c.utterances_sent,
            replies_heard: c.replies_heard,
            bot_audio_ms: millis(self.playout.played(at)),
            marks_echoed: c.marks_echoed,
            unknown_events: c.unknown_events,
            malformed_events: c.malformed_events,
            media_frames_sent: c.frames_sent,
            media_frames_skipped: c.frames_skipped,
            max_send_lag_ms: millis(c.max_lag),
            end_reason,
            duration_ms: millis(at),
            greeting_audio_ms: c.greeting_audio.as_ref().map(ms),
            reply_audio_ms: c.reply_audio.iter().map(ms).collect(),
            close_code: c.close_code,
            session_id: self.said.session_id,
            transfer: self.said.transfer,
            end_message_reason: self.said.end,
            server_error: self.said.error,
            time_to_greeting_ms: c.greeting.map(millis),
            apologies_heard: c.prompts.apology as usize,
            apology_latency_ms: c.apology_latency.iter().map(ms).collect(),
            prompts_heard: c.prompts,
            barge_in: self.interaction.barge_record(),
            cough: self.interaction.cough_record(),
        }
    }

    // ---- timers --------------------------------------------------------

    fn is_live(&self) -> bool {
        !matches!(self.stage, Stage::Dialing | Stage::Done)
    }

    fn next_timer(&self) -> Option<(Duration, Timer)> {
        if !self.is_live() {
            return None;
        }
        [
            (self.playout.next_mark_due(), Timer::Mark),
            (self.silence_deadline(), Timer::Silence),
            (Some(self.plan.call_timeout), Timer::Deadline),
            (self.next_frame, Timer::Frame),
        ]
        .into_iter()
        .filter_map(|(t, timer)| t.map(|t| (t, timer)))
        .min()
    }

    /// Fires every timer due at or before `now`, each at its own instant, so
    /// a late wake-up still echoes marks and measures silence exactly.
    fn advance(&mut self, now: Duration) {
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

    // ---- server events -------------------------------------------------

    fn on_heard(&mut self, now: Duration, heard: Result<Heard, LoadError>) {
        match heard {
            Ok(Heard::Audio(bytes)) => self.on_media(now, &bytes),
            Ok(Heard::Mark(name)) => self.on_mark(now, name),
            Ok(Heard::Clear) => self.on_clear(now),
            Ok(Heard::Started(session_id)) => {
                if self.said.session_id.is_some() {
                    self.counters.malformed_events += 1;
                } else {
                    self.said.session_id = Some(session_id);
                }
            }
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

    fn on_media(&mut self, now: Duration, audio: &[u8]) {
        if audio.is_empty() {
            self.counters.malformed_events += 1;
            return;
        }
        self.counters
            .first_audio
            .get_or_insert(now.saturating_sub(self.started_at));
        let len = transport::playing_time(self.audio, audio.len());
        self.interaction.audio(now, len);
        // A stretch of dead air this audio ends too late is silent in the
        // phase it was owed in, but what arrived is still measured (a reply
        // at 3.4 s has its true latency).
        let too_late = (!self.playout.is_playing(now)
            && self.observe(now) > self.plan.silence_threshold)
            .then(|| self.phase_label());
        for piece in self.ear.hear(audio) {
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

    fn enter_terminal(&mut self, now: Duration, kind: TerminalKind, reason: String) {
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
        });
    }

    /// A mark left the playout buffer: echo it if the protocol does, and
    /// act on what it means (the same for every protocol).
    fn echo(&mut self, t: Duration, mark: PendingMark<MarkRole>, why: Release) {
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

    fn turn_completed(&mut self, t: Duration, turn: BotTurn) {
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
            Some(next) => {
                self.stage = Stage::Thinking {
                    next: done,
                    until: t + next.think,
                }
            }
            None => {
                let reason = format!("caller hung up after {done} answered utterances");
                self.hang_up(t, Outcome::Completed, reason);
            }
        }
    }

    fn server_gone(&mut self, now: Duration, why: String) {
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

    // ---- owed silence --------------------------------------------------

    /// Where the current dead-air stretch starts (possibly in the future,
    /// when audio is still playing); `None` when nothing is owed.
    fn stretch_start(&self) -> Option<Duration> {
        self.owed_from.map(|o| o.max(self.playout.tail_end()))
    }

    fn silence_deadline(&self) -> Option<Duration> {
        self.stretch_start()
            .map(|s| s + self.plan.silence_threshold + SILENCE_GRACE)
    }

    /// Measures the current stretch up to `t`.
    fn observe(&mut self, t: Duration) -> Duration {
        let len = self
            .stretch_start()
            .map_or(Duration::ZERO, |s| t.saturating_sub(s));
        self.counters.max_owed = self.counters.max_owed.max(len);
        len
    }

    /// The current stretch ends at `t`; a too-long one makes the call silent
    /// (returns `true`, the call is then over).
    fn end_stretch(&mut self, t: Duration) -> bool {
        if self.observe(t) > self.plan.silence_threshold {
            self.finish_silent(t);
            return true;
        }
        false
    }

    fn finish_silent(&mut self, t: Duration) {
        let phase = self.phase_label();
        self.finish_silent_in(t, phase);
    }

    fn finish_silent_in(&mut self, t: Duration, phase: String) {
        let len = self.observe(t);
        let reason = format!("{} ms of dead air while {phase}", millis(len));
        self.hang_up(t, Outcome::Silent { phase }, reason);
    }

    fn phase_label(&self) -> String {
        match &self.stage {
            Stage::Dialing => "connecting".into(),
            Stage::AwaitBot { turn, heard } => {
                let turn = match turn {
                    BotTurn::Greeting => "greeting".to_string(),
                    BotTurn::Reply(n) => format!("reply_{n}"),
                };
                if *heard == TurnHeard::Own {
                    format!("{turn}_playout")
                } else {
                    turn
                }
            }
            Stage::Thinking { next, .. } => format!("thinking_{}", next + 1),
            Stage::Speaking { utterance, .. } => format!("utterance_{}", utterance + 1),
            Stage::Terminal(term) if term.echoed => format!("{}_close", term.kind.name()),
            Stage::Terminal(term) => format!("{}_prompt", term.kind.name()),
            Stage::Done => "done".into(),
        }
    }

    // ---- endings -------------------------------------------------------

    /// The caller ends the call: `stop`, then close.
    fn hang_up(&mut self, t: Duration, outcome: Outcome, reason: String) {
        let stop = self.wire.hang_up();
        self.outbox.push_back(stop);
        self.outbox.push_back(Transmit::Close);
        self.finish(t, outcome, reason);
    }

    fn finish(&mut self, t: Duration, outcome: Outcome, end_reason: String) {
        if self.finish.is_some() {
            return;
        }
        self.observe(t);
        tracing::debug!(outcome = outcome.label(), %end_reason, "call finished");
        self.finish = Some(Finish {
            outcome,
            end_reason,
            at: t,
        });
        self.stage = Stage::Done;
        self.owed_from = None;
        self.next_frame = None;
    }
}

/// Whole milliseconds, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
