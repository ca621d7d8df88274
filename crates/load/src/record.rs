//! What one call recorded: how it ended and what the caller heard.
//!
//! What the caller heard is told apart by its sound (see
//! [`crate::prompts`]): a reply is bot audio that is none of the server's
//! bundled prompts; an apology, hold music or a transfer prompt is counted as
//! what it is, never as a reply. How the call ended is told apart by the
//! server's terminal mark: a bot's own ending or hand-over is a conversation
//! that was served; a watchdog or failover transfer and a cut at a limit are
//! not, and have their own [`Outcome`]s.

use serde::{Deserialize, Serialize};

use crate::ids::{CallSid, StreamSid};

/// How a call ended, from the caller's point of view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// Every utterance was answered and the caller hung up (`stop` sent).
    Completed,
    /// The server said no: an HTTP refusal of the upgrade (`how` =
    /// `http_<status>`) or an overflow prompt (`how` = `overflow_mark`).
    Rejected {
        how: String,
        reason: String,
        /// The overflow prompt played to its end (its mark was echoed).
        prompt_heard: bool,
        /// From dialling to the refusal: the HTTP answer, or the first audio
        /// of the overflow prompt.
        time_to_rejection_ms: u64,
    },
    /// The bot escalated to a human (`callgate-transfer:<reason>`, a reason
    /// of the conversation such as `caller_requested_human`).
    Transferred { reason: String },
    /// The server's watchdog gave up on a stalled provider and handed the
    /// caller over (`callgate-transfer:<culprit>_stalled`; partner
    /// `transfer` reason `stalled:<culprit>`). Answered, not served.
    WatchdogTransfer { reason: String },
    /// A provider's connection failed mid-call and the server handed the
    /// caller over (`callgate-transfer:<provider>_failed`; partner reason
    /// `provider_failed:<provider>`). Answered, not served.
    FailoverTransfer { reason: String },
    /// The bot ended the call (`callgate-end:<reason>`).
    EndedByBot { reason: String },
    /// The server cut the conversation short at one of its limits: the hard
    /// maximum call duration (`callgate-end:max_duration`) or a drain
    /// deadline (`callgate-end:drain_deadline`). Not served.
    CutShort { reason: String },
    /// Socket error, unexpected close, malformed handshake or timeout.
    Failed { reason: String },
    /// The server refused our credentials: HTTP 401 on the upgrade (a
    /// partner key it does not know, or none). A failure of the run's
    /// setup, never a legitimate answer to load.
    Unauthorized { status: u16, reason: String },
    /// Dead air longer than the silence threshold while something was owed.
    Silent { phase: String },
    /// The caller hung up before its script was done, on purpose: told to
    /// ([`crate::Cue::HangUp`]) or giving up on a reply ([`crate::Leave`]).
    /// `phase` is what the call was doing. Not a defect of the server.
    LeftEarly { phase: String },
    /// The caller vanished on purpose ([`crate::Cue::Drop`]): no `stop`, no
    /// close frame. Not a defect of the server.
    Dropped,
}

impl Outcome {
    /// Whether this outcome is a defect of the server under test: a
    /// rejection, transfer or bot hang-up is a legitimate answer, these are
    /// not. (A watchdog or failover transfer and a cut at a limit are the
    /// server's designed answer to trouble, so not defects of the call; a
    /// benchmark judges how many of them a run may have.)
    pub fn is_failure(&self) -> bool {
        matches!(
            self,
            Outcome::Failed { .. } | Outcome::Silent { .. } | Outcome::Unauthorized { .. }
        )
    }

    /// Whether the conversation ran to its end: the caller finished the
    /// script, or the bot ended the call.
    pub fn is_served(&self) -> bool {
        matches!(self, Outcome::Completed | Outcome::EndedByBot { .. })
    }

    /// Whether the caller was handed to a human, by the bot or by the
    /// server (watchdog or failover).
    pub fn is_transfer(&self) -> bool {
        matches!(
            self,
            Outcome::Transferred { .. }
                | Outcome::WatchdogTransfer { .. }
                | Outcome::FailoverTransfer { .. }
        )
    }

    /// A short lower-case name, as used in tables and progress lines.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Rejected { .. } => "rejected",
            Outcome::Transferred { .. } => "transferred",
            Outcome::WatchdogTransfer { .. } => "watchdog_transfer",
            Outcome::FailoverTransfer { .. } => "failover_transfer",
            Outcome::EndedByBot { .. } => "ended_by_bot",
            Outcome::CutShort { .. } => "cut_short",
            Outcome::Failed { .. } => "failed",
            Outcome::Unauthorized { .. } => "unauthorized",
            Outcome::Silent { .. } => "silent",
            Outcome::LeftEarly { .. } => "left_early",
            Outcome::Dropped => "dropped",
        }
    }
}

/// One of the server's bundled prompts, recognised by its audio
/// ([`crate::prompts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prompt {
    /// "We're experiencing high call volume. Transferring you now."
    Overflow,
    /// "Please hold. All our lines are busy."
    Hold,
    /// The looped tones after [`Prompt::Hold`].
    HoldMusic,
    /// "Sorry, I'm having trouble on my end. One moment, please." (the
    /// watchdog's stall prompt)
    Apology,
    /// "Let me transfer you to our team."
    Transfer,
    /// "Sorry, we have to end the call now. Goodbye."
    Goodbye,
}

impl Prompt {
    pub const ALL: [Prompt; 6] = [
        Prompt::Overflow,
        Prompt::Hold,
        Prompt::HoldMusic,
        Prompt::Apology,
        Prompt::Transfer,
        Prompt::Goodbye,
    ];

    /// A short lower-case name, as in the JSON report.
    pub fn label(self) -> &'static str {
        match self {
            Prompt::Overflow => "overflow",
            Prompt::Hold => "hold",
            Prompt::HoldMusic => "hold_music",
            Prompt::Apology => "apology",
            Prompt::Transfer => "transfer",
            Prompt::Goodbye => "goodbye",
        }
    }
}

/// How many times each bundled prompt began playing on a call (a run of its
/// frames arrived, whether or not it then played to its end), plus audio
/// that is no bundled prompt heard while nothing was owed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PromptsHeard {
    pub overflow: u32,
    pub hold: u32,
    pub hold_music: u32,
    pub apology: u32,
    pub transfer: u32,
    pub goodbye: u32,
    /// Runs of bot audio that is none of the bundled prompts, heard while
    /// no greeting or reply was owed (after a turn's closing mark, while the
    /// caller thinks or speaks, or after a terminal mark): a prompt this
    /// load tool does not know, or audio the server should not have sent.
    pub unknown: u32,
}

impl PromptsHeard {
    /// How many times `prompt` began.
    pub fn count(&self, prompt: Prompt) -> u32 {
        match prompt {
            Prompt::Overflow => self.overflow,
            Prompt::Hold => self.hold,
            Prompt::HoldMusic => self.hold_music,
            Prompt::Apology => self.apology,
            Prompt::Transfer => self.transfer,
            Prompt::Goodbye => self.goodbye,
        }
    }

    /// Counts one more start of `prompt`.
    pub fn add(&mut self, prompt: Prompt) {
        let n = self.count_mut(prompt);
        *n = n.saturating_add(1);
    }

    /// Adds another call's counts (for a run's totals).
    pub fn merge(&mut self, other: &PromptsHeard) {
        for p in Prompt::ALL {
            let n = self.count_mut(p);
            *n = n.saturating_add(other.count(p));
        }
        self.unknown = self.unknown.saturating_add(other.unknown);
    }

    fn count_mut(&mut self, prompt: Prompt) -> &mut u32 {
        match prompt {
            Prompt::Overflow => &mut self.overflow,
            Prompt::Hold => &mut self.hold,
            Prompt::HoldMusic => &mut self.hold_music,
            Prompt::Apology => &mut self.apology,
            Prompt::Transfer => &mut self.transfer,
            Prompt::Goodbye => &mut self.goodbye,
        }
    }
}

/// A partner `transfer` message: where the server handed the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferMessage {
    pub target: Option<String>,
    pub reason: String,
}

/// A partner `error` message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerError {
    pub code: String,
    pub message: String,
}

/// Everything measured on one call. Times are milliseconds.
///
/// Fields after `duration_ms` were added later (the partner protocol, then
/// prompt recognition); they default when reading older reports, and [`CallRecord::default`] lets a
/// test build a record without naming every field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRecord {
    /// Position of the call in the run (0-based, in dialling order).
    pub index: usize,
    pub call_sid: CallSid,
    pub stream_sid: StreamSid,
    pub outcome: Outcome,
    /// From dialling to the accepted WebSocket upgrade (WebRTC: to DTLS
    /// connected, when media can flow).
    pub connect_ms: Option<u64>,
    /// From `start` sent to the first bot audio frame received.
    pub time_to_first_audio_ms: Option<u64>,
    /// Per answered utterance: end of the caller's speech → first reply
    /// audio. A bundled prompt (an apology, say) is not a reply: the latency
    /// runs to the real reply's first frame.
    pub reply_latency_ms: Vec<u64>,
    /// Longest dead air while a greeting, reply, prompt or close was owed.
    pub max_owed_silence_ms: u64,
    /// Utterances this call's plan had (its drawn length; see
    /// `LoadConfig::utterances_max`).
    #[serde(default)]
    pub utterances_planned: usize,
    pub utterances_sent: usize,
    /// Utterances whose real reply began to arrive: bot audio that is none
    /// of the server's bundled prompts (an apology before it does not count).
    pub replies_heard: usize,
    /// Bot audio actually played to the caller (cleared audio excluded).
    pub bot_audio_ms: u64,
    pub marks_echoed: u64,
    /// Server events Twilio does not know (ignored).
    pub unknown_events: u64,
    /// Server messages Twilio could not act on: bad JSON, binary frames,
    /// wrong or missing `streamSid`, undecodable payloads.
    pub malformed_events: u64,
    pub media_frames_sent: u64,
    /// Frames not sent because this load generator fell too far behind.
    pub media_frames_skipped: u64,
    /// Worst lateness of this generator's 20 ms media clock: if it is large,
    /// the load machine, not the server, was the bottleneck.
    pub max_send_lag_ms: u64,
    /// A human-readable account of how the call ended.
    pub end_reason: String,
    /// From dialling to the end of the call.
    pub duration_ms: u64,
    /// Bot audio received for the greeting (from the call's start to the
    /// greeting's closing turn mark), in the call's audio format: what the
    /// server produced, including audio `clear` later dropped.
    #[serde(default)]
    pub greeting_audio_ms: Option<u64>,
    /// Bot audio received for each answered utterance (from the end of the
    /// caller's speech to the reply's closing turn mark), in order; one
    /// entry per reply whose turn completed.
    #[serde(default)]
    pub reply_audio_ms: Vec<u64>,
    /// The WebSocket close code the server sent, if it closed first.
    #[serde(default)]
    pub close_code: Option<u16>,
    /// Partner protocol: the `session_id` of the server's `started`;
    /// WebRTC: the `call_id` of the session's status.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Partner protocol: the server's `transfer` message, if any.
    #[serde(default)]
    pub transfer: Option<TransferMessage>,
    /// Partner protocol: the `reason` of the server's `end` message, if any;
    /// WebRTC: the session status's `end_reason` once it ended (`end_reason`
    /// is the caller's own account of how the call ended).
    #[serde(default)]
    pub end_message_reason: Option<String>,
    /// Partner protocol: the first `error` message the server sent.
    #[serde(default)]
    pub server_error: Option<ServerError>,
    /// From `start` sent to the greeting's first audio (bot audio that is
    /// no bundled prompt: hold audio before it does not count).
    #[serde(default)]
    pub time_to_greeting_ms: Option<u64>,
    /// Apologies (the server's stall prompt) that began on this call; the
    /// same count as `prompts_heard.apology`.
    #[serde(default)]
    pub apologies_heard: usize,
    /// Per apology that began while a reply was owed (and none of it had
    /// arrived): end of the caller's speech → the apology's first frame.
    #[serde(default)]
    pub apology_latency_ms: Vec<u64>,
    /// Each bundled prompt heard, by kind, and unknown audio.
    #[serde(default)]
    pub prompts_heard: PromptsHeard,
    /// The barge-in scenario (`LoadConfig::barge_in_at_ms`): the caller
    /// spoke over the greeting. Absent when the scenario did not run (not
    /// configured, no greeting audio, or the greeting ended first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub barge_in: Option<BargeInRecord>,
    /// The cough scenario (`LoadConfig::cough_at_ms`): a short voiced burst
    /// into a bot turn. Absent when the scenario did not run (not
    /// configured, or the turn never began or ended first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cough: Option<CoughRecord>,
    /// Partner resumes the server confirmed ([`crate::Cue::Reconnect`]: a
    /// `started` for the same session on the new connection).
    #[serde(default)]
    pub resumes: u32,
}

/// What speaking over the greeting did, measured by the caller on its own
/// clock (milliseconds).
///
/// Definitions: the *onset* is the moment the caller's first voiced frame
/// was due to be sent (the caller's 20 ms media clock; if the generator ran
/// late the frame left later, which can only lengthen the figures below,
/// never flatter the server). Bot audio is counted as it is *received on
/// the socket*, by the playing time of the bytes (a Twilio media frame is
/// 160 μ-law bytes = 20 ms; a partner L16 frame 640 bytes = 20 ms), not as
/// it plays: the server paces audio at most `call.pacer_lead_ms` (60 ms)
/// ahead of real time, and what already sat in the phone's buffer at the
/// onset was sent before the server could have heard anything, so it is
/// not counted. Only a `clear` received between the onset and the end of
/// the caller's utterance answers the barge-in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BargeInRecord {
    /// From the greeting's first audio frame received to the onset: the
    /// planned `barge_in_at_ms`, rounded up to the caller's 20 ms frames.
    pub into_turn_ms: u64,
    /// From dialling to the onset.
    pub onset_ms: u64,
    /// Onset → the `clear` received; `None`: no clear came before the
    /// caller's utterance ended (the barge-in was not answered).
    pub onset_to_clear_ms: Option<u64>,
    /// Bot audio received after the onset and up to the clear (to the end
    /// of the caller's utterance when no clear came): what the server sent
    /// over the caller before it stopped.
    pub bot_audio_after_onset_ms: u64,
    /// Bot audio received after the clear and before the caller's
    /// utterance ended: audio of the interrupted turn sent after it was
    /// stopped. Must be 0. `None` when no clear came.
    pub audio_after_clear_ms: Option<u64>,
}

/// What a short voiced burst (a cough) into a bot turn did, measured by the
/// caller on its own clock (milliseconds). Onset and received audio are
/// defined as for [`BargeInRecord`]. After the cough the caller only
/// listens: a turn mark that the `clear` released does not end the turn
/// for it (the bot is expected to resume); only a turn mark that plays
/// does, and if the bot never resumes the call goes silent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoughRecord {
    /// The bot turn coughed into: 0 the greeting, `n` the reply to
    /// utterance `n`.
    pub turn: usize,
    /// Length of the burst.
    pub cough_ms: u32,
    /// From the turn's first audio frame received to the onset.
    pub into_turn_ms: u64,
    /// From dialling to the onset.
    pub onset_ms: u64,
    /// Onset → the first `clear` received before the turn ended; `None`:
    /// the server never paused.
    pub onset_to_clear_ms: Option<u64>,
    /// Bot audio received after the onset and up to the clear (to the end
    /// of the turn when no clear came).
    pub bot_audio_after_onset_ms: u64,
    /// The clear → the first bot audio received after it; `None`: no clear,
    /// or nothing came after it.
    pub gap_ms: Option<u64>,
    /// The turn resumed: a clear came, bot audio followed it, and the
    /// turn's `turn-` mark then played (echoed when playout reached it).
    pub resumed: bool,
}

impl Default for CallRecord {
    fn default() -> Self {
        CallRecord {
            index: 0,
            call_sid: CallSid::from_bytes([0; 16]),
            stream_sid: StreamSid::from_bytes([0; 16]),
            outcome: Outcome::Failed {
                reason: "not placed".into(),
            },
            connect_ms: None,
            time_to_first_audio_ms: None,
            reply_latency_ms: Vec::new(),
            max_owed_silence_ms: 0,
            utterances_planned: 0,
            utterances_sent: 0,
            replies_heard: 0,
            bot_audio_ms: 0,
            marks_echoed: 0,
            unknown_events: 0,
            malformed_events: 0,
            media_frames_sent: 0,
            media_frames_skipped: 0,
            max_send_lag_ms: 0,
            end_reason: String::new(),
            duration_ms: 0,
            greeting_audio_ms: None,
            reply_audio_ms: Vec::new(),
            close_code: None,
            session_id: None,
            transfer: None,
            end_message_reason: None,
            server_error: None,
            time_to_greeting_ms: None,
            apologies_heard: 0,
            apology_latency_ms: Vec::new(),
            prompts_heard: PromptsHeard::default(),
            barge_in: None,
            cough: None,
            resumes: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_serialize_with_a_kind_tag() {
        let o = Outcome::Rejected {
            how: "http_503".into(),
            reason: "busy".into(),
            prompt_heard: false,
            time_to_rejection_ms: 12,
        };
        let v = serde_json::to_value(&o).unwrap();
        assert_eq!(v["kind"], "rejected");
        assert_eq!(v["how"], "http_503");
        assert_eq!(serde_json::from_value::<Outcome>(v).unwrap(), o);
        assert_eq!(
            serde_json::to_value(Outcome::Completed).unwrap()["kind"],
            "completed"
        );
        assert!(
            Outcome::Silent {
                phase: "greeting".into()
            }
            .is_failure()
        );
        assert!(!o.is_failure());
        let unauthorized = Outcome::Unauthorized {
            status: 401,
            reason: "unknown partner key".into(),
        };
        assert!(unauthorized.is_failure());
        let watchdog = Outcome::WatchdogTransfer {
            reason: "tts_stalled".into(),
        };
        let v = serde_json::to_value(&watchdog).unwrap();
        assert_eq!(
            (v["kind"].as_str(), v["reason"].as_str()),
            (Some("watchdog_transfer"), Some("tts_stalled"))
        );
        assert!(watchdog.is_transfer() && !watchdog.is_served() && !watchdog.is_failure());
        let cut = Outcome::CutShort {
            reason: "drain_deadline".into(),
        };
        assert_eq!(serde_json::to_value(&cut).unwrap()["kind"], "cut_short");
        assert!(!cut.is_served() && !cut.is_transfer());
        assert!(Outcome::Completed.is_served());
        let v = serde_json::to_value(&unauthorized).unwrap();
        assert_eq!(
            (v["kind"].as_str(), v["status"].as_u64()),
            (Some("unauthorized"), Some(401))
        );
    }

    #[test]
    fn records_from_before_the_partner_fields_still_read() {
        let mut v = serde_json::to_value(CallRecord::default()).unwrap();
        let obj = v.as_object_mut().unwrap();
        for field in [
            "greeting_audio_ms",
            "reply_audio_ms",
            "close_code",
            "session_id",
            "transfer",
            "end_message_reason",
            "server_error",
            "time_to_greeting_ms",
            "apologies_heard",
            "apology_latency_ms",
            "prompts_heard",
        ] {
            assert!(obj.remove(field).is_some(), "{field}");
        }
        let back: CallRecord = serde_json::from_value(v).unwrap();
        assert_eq!(back, CallRecord::default());
    }
}
