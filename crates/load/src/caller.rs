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
//! to the script does not change. WebRTC carries audio only: its turn ends
//! and its ending are derived from the audio and the session's status
//! (`stream`), and it is heard through the lossy ear.
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
use crate::playout::Playout;
use crate::prompts::Ear;
use crate::record::{CallRecord, Outcome, PromptsHeard, ServerError, TransferMessage};
use crate::transport::{CallProtocol, Wire};

use ending::Terminal;
pub use interaction::CoughPlan;
use interaction::Interaction;

mod clock;
mod ending;
mod events;
mod interaction;
mod silence;
mod stream;

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
    /// After the last reply, hold the line (silence, nothing owed) until
    /// [`Cue::HangUp`] instead of hanging up at once.
    pub hold: bool,
    /// Hang up while a reply is still owed: this long after the given
    /// utterance (1-based) was spoken (a caller who gives up on a slow tool).
    pub leave: Option<Leave>,
}

/// Hanging up while a reply is owed ([`CallPlan::leave`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Leave {
    /// The utterance (1-based) whose reply the caller stops waiting for.
    pub after_utterance: usize,
    /// How long after that utterance ended.
    pub delay: Duration,
}

/// What a driver can tell a caller from outside its script (a drill's
/// orchestrator): the caller's own clock does not know when a staircase
/// step activates its silent callers or ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cue {
    /// Start the next cued utterance now (after its think pause). One that
    /// comes before the caller is ready for it (the greeting still
    /// playing) is kept and acted on once that utterance is due; ignored by
    /// a caller whose script has no cued utterance.
    Speak,
    /// Hang up (`stop`, then close), whatever the call is doing.
    HangUp,
    /// Vanish: close the TCP connection with no `stop` and no close frame.
    Drop,
    /// Vanish as [`Cue::Drop`] does, then, after `after`, dial again with
    /// the call's resume token (partner calls: `Callgate-Resume`) and carry
    /// on where the call was. A caller holding no token (a Twilio leg, or
    /// resume disabled) cannot come back: it only drops.
    Reconnect { after: Duration },
}

/// One caller turn: a pause after the bot finished, then speech.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnPlan {
    pub think: Duration,
    pub speech_ms: u32,
    /// Wait for [`Cue::Speak`] before the think pause (a silent caller
    /// activated from outside); the caller holds the line until then.
    pub cued: bool,
}

/// A frame for the driver to put on the socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transmit {
    /// A JSON text frame.
    Text(String),
    /// A binary frame (partner protocol audio).
    Binary(Vec<u8>),
    /// One 20 ms frame of the caller's audio with its place on the
    /// caller's media clock, `timestamp_ms` after the first frame (a frame
    /// the caller skipped leaves a gap): WebRTC, whose RTP timestamps
    /// follow it.
    Media { frame: Vec<u8>, timestamp_ms: u64 },
    /// Close the socket (after sending everything before it).
    Close,
    /// Drop the connection without a closing handshake ([`Cue::Drop`]).
    Drop,
    /// Drop the connection, wait `after`, and resume the call on a new one
    /// with `token` ([`Cue::Reconnect`]); then tell the caller
    /// [`Caller::handle_resume_failed`] if that is refused.
    Reconnect { token: String, after: Duration },
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
    /// Holding the line silently until [`Cue::Speak`] starts utterance
    /// `next` (0-based). Nothing is owed.
    Cued {
        next: usize,
    },
    /// The script is done; holding the line until [`Cue::HangUp`].
    Holding,
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
    Leave,
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
    /// A [`Cue::Speak`] that came before the caller was ready for its next
    /// cued utterance (the greeting still playing): kept, one at most, and
    /// acted on as soon as that utterance is due.
    speak_early: bool,
    /// The latest resume token the server gave (partner `started`).
    resume_token: Option<String>,
    /// A resume was asked for and its `started` has not come yet.
    resuming: bool,
    /// Resumes the server confirmed (a `started` for the same session).
    resumes: u32,
}

impl Caller {
    /// A caller about to dial; its clock's zero is the moment of dialling.
    pub fn new(plan: CallPlan) -> Caller {
        let audio = plan.protocol.audio();
        Caller {
            interaction: Interaction::new(plan.barge_in_at, plan.cough),
            burst: None,
            speak_early: false,
            resume_token: None,
            resuming: false,
            resumes: 0,
            wire: Wire::new(plan.protocol, plan.ids),
            audio,
            voice: SpeechSynth::new(audio.sample_rate, plan.voice_seed),
            ear: match plan.protocol {
                CallProtocol::Webrtc { .. } => Ear::lossy(),
                _ => Ear::new(audio),
            },
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

    /// The script is done and the caller holds the line in silence
    /// ([`CallPlan::hold`]) until [`Cue::HangUp`]: a committed call.
    pub fn is_holding(&self) -> bool {
        matches!(self.stage, Stage::Holding)
    }

    /// How the call ended, once it has.
    pub fn outcome(&self) -> Option<&Outcome> {
        self.finish.as_ref().map(|f| &f.outcome)
    }

    /// The call's identities.
    pub fn ids(&self) -> CallIds {
        self.plan.ids
    }

    /// Connected and not yet over: only then do frames and timers matter.
    fn is_live(&self) -> bool {
        !matches!(self.stage, Stage::Dialing | Stage::Done)
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

    /// A cue from outside the script (see [`Cue`]).
    pub fn handle_cue(&mut self, now: Duration, cue: Cue) {
        self.advance(now);
        if !self.is_live() {
            return;
        }
        match cue {
            Cue::Speak => match self.stage {
                Stage::Cued { next } => self.speak_cued(now, next),
                // Not ready yet (the greeting or a reply still playing):
                // kept for the next cued utterance, if the script has one.
                _ if self.plan.turns.iter().any(|t| t.cued) => self.speak_early = true,
                _ => {}
            },
            Cue::HangUp => {
                let phase = self.phase_label();
                let reason = format!("caller hung up when cued while {phase}");
                let outcome = if matches!(self.stage, Stage::Holding) {
                    Outcome::Completed
                } else {
                    Outcome::LeftEarly { phase }
                };
                self.hang_up(now, outcome, reason);
            }
            Cue::Reconnect { after } if self.resume_token.is_some() => {
                let token = self.resume_token.take().unwrap_or_default();
                self.outbox.push_back(Transmit::Reconnect { token, after });
                self.resuming = true;
            }
            Cue::Drop | Cue::Reconnect { .. } => {
                let reason = format!("caller dropped the connection while {}", self.phase_label());
                self.outbox.push_back(Transmit::Drop);
                self.finish(now, Outcome::Dropped, reason);
            }
        }
    }

    /// The resume the caller asked for ([`Transmit::Reconnect`]) was refused
    /// or could not connect: the call is lost.
    pub fn handle_resume_failed(&mut self, now: Duration, err: &LoadError) {
        if !self.is_live() {
            return;
        }
        let reason = format!("resume failed: {err}");
        self.finish(
            now,
            Outcome::Failed {
                reason: reason.clone(),
            },
            reason,
        );
    }

    /// Starts cued utterance `next`: its think pause from `now`.
    fn speak_cued(&mut self, now: Duration, next: usize) {
        let think = self
            .plan
            .turns
            .get(next)
            .map_or(Duration::ZERO, |t| t.think);
        self.stage = Stage::Thinking {
            next,
            until: now + think,
        };
    }

    /// Waiting for [`Cue::Speak`] or [`Cue::HangUp`]: the script cannot go
    /// on by itself.
    pub fn awaits_cue(&self) -> bool {
        matches!(self.stage, Stage::Cued { .. } | Stage::Holding)
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
            resumes: self.resumes,
        }
    }

    // ---- endings -------------------------------------------------------

    /// The caller ends the call: `stop`, then close.
    fn hang_up(&mut self, t: Duration, outcome: Outcome, reason: String) {
        if let Some(stop) = self.wire.hang_up() {
            self.outbox.push_back(stop);
        }
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
