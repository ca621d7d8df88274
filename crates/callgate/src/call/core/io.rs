//! The core's inputs, commands, records and reports: what the shell feeds
//! it, what it asks the shell to do, and what it counted for the shell's
//! metrics.

use std::time::{Duration, Instant};

use dialog_grpc::{DialogEvent, ToolCallId, TurnId};
use state_store::{Speaker, Stage};
use stt_client::SttEvent;
use tts_client::{ContextId, TtsEvent};

use super::BargeInConfig;
use super::ToolOutcome;
use crate::call::watchdog::{Action, WatchdogConfig};
use crate::end::{Culprit, Provider};
use crate::leg::{LegEvent, LegFormat};

/// What the core needs to know, fixed for the call.
#[derive(Debug, Clone, Copy)]
pub struct CoreConfig {
    pub format: LegFormat,
    /// How far ahead of real time outbound audio is released.
    pub lead: Duration,
    /// After the final marker was sent, how long the leg has to report it.
    pub final_mark_grace: Duration,
    pub max_duration: Duration,
    pub watchdog: WatchdogConfig,
    /// Silence that ends caller speech for the local VAD.
    pub vad_min_silence_ms: u32,
    pub barge_in: BargeInConfig,
}

/// Something that happened to the call.
#[derive(Debug)]
pub enum Input {
    Leg(LegEvent),
    Stt(SttEvent),
    Dialog(DialogEvent),
    Tts(TtsEvent),
    Tool(ToolOutcome),
    /// A drain with policy `transfer` started: hand over at the next turn
    /// boundary.
    DrainTransfer,
    /// The drain was cancelled (`POST /admin/undrain`).
    DrainCancelled,
    /// The drain deadline passed.
    DrainDeadline,
    /// Another instance closed this call's record (`owner_lost`) while this
    /// one was paused or cut off: it is no longer the call's owner.
    OwnershipLost,
    /// Only time passed (a deadline the core asked for).
    Tick,
}

impl Input {
    /// Whether this input ends the call by itself (a second one after the
    /// end is counted as a late cause).
    pub fn is_terminal(&self) -> bool {
        match self {
            Input::Leg(ev) => ev.is_terminal(),
            Input::DrainDeadline | Input::OwnershipLost => true,
            _ => false,
        }
    }
}

/// Something the shell must do. Every command is a non-blocking send.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// One 20 ms frame of audio to the leg.
    Play(Vec<u8>),
    Mark(String),
    Clear,
    SttAudio(Vec<u8>),
    SttFinalize,
    TtsOpen(ContextId),
    TtsText(ContextId, String),
    TtsFlush(ContextId),
    TtsClose(ContextId),
    TtsCancel(ContextId),
    DialogTurn(TurnId, String),
    DialogInterrupt(TurnId, String),
    DialogDtmf(char),
    DialogToolResult {
        id: ToolCallId,
        result_json: String,
        is_error: bool,
    },
    ToolStart {
        id: ToolCallId,
        turn: TurnId,
        name: String,
        arguments_json: String,
        privileged: bool,
    },
    ToolCancel(ToolCallId),
    Record(Rec),
}

/// A write for the call's ledger (performed through the write-behind queue).
#[derive(Debug, Clone, PartialEq)]
pub enum Rec {
    Stage(Stage, Instant),
    Turn {
        speaker: Speaker,
        text: String,
        span: (Instant, Instant),
        interrupted: bool,
        /// A bot turn's reply latency split, when its timing was complete.
        latency: Option<super::TurnLatency>,
    },
    Event {
        kind: String,
        detail: serde_json::Value,
        at: Instant,
    },
    Slot {
        name: String,
        value: String,
        at: Instant,
    },
    Escalation {
        reason: String,
        at: Instant,
    },
}

/// Interaction counters for the receipt.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Interaction {
    pub user_turns: u64,
    pub bot_turns: u64,
    /// Barge-ins committed: the bot's turn was cut and the dialog told.
    pub interruptions: u64,
    /// Times the bot's output was paused on the caller's voice.
    pub barge_in_pauses: u64,
    /// Pauses taken back (no words came): false barge-ins.
    pub false_barge_ins: u64,
    /// Longest speech onset → `clear` performed, µs (when one was sent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub barge_in_stop_max_us: Option<u64>,
    pub stale_dialog_events: u64,
    pub stale_tts_audio_chunks: u64,
    pub max_reply_latency_ms: u64,
    /// DTMF digits the leg delivered (each is also a `dtmf` timeline event
    /// naming the digit).
    pub dtmf_digits: u64,
}

/// Something the core counted or measured. The shell turns each into its
/// metric (`call/meter.rs`); the core itself never touches a metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Report {
    /// A frame of caller audio arrived.
    MediaIn,
    /// The leg broke its carrier's protocol (the violation's kind).
    ProtocolError(&'static str),
    /// The watchdog acted on a stall blamed on `culprit`.
    Stall { culprit: Culprit, action: Action },
    /// A barge-in was committed: the bot's turn was cut.
    BargeIn,
    /// The bot's output was paused on the caller's voice.
    BargeInPause,
    /// A pause was taken back: no words came.
    FalseBargeIn,
    /// Speech onset → the leg's `clear` performed.
    BargeInStop(Duration),
    /// An event of a superseded turn or TTS context was dropped.
    Stale(Stale),
    /// A provider client began a reconnect attempt; `capacity`: the last
    /// attempt was refused for capacity (else the link was down).
    Reconnecting { provider: Provider, capacity: bool },
    /// A provider client's connection is back.
    Reconnected(Provider),
    /// Media ready → the first frame of bot audio.
    FirstAudio(Duration),
    /// A caller turn's end → the first frame of its reply.
    ReplyLatency(Duration),
    /// callgate's own share of a turn's latency, µs (`timing.rs`).
    TurnOwn { us: u64 },
}

/// What kind of stale event was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stale {
    /// A dialog event of a turn that is no longer expected.
    Dialog,
    /// TTS audio of a context that is no longer current.
    TtsAudio,
}
