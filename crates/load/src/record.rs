//! What one call recorded: how it ended and what the caller heard.

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
    /// The bot escalated to a human (`callgate-transfer:<reason>`).
    Transferred { reason: String },
    /// The bot ended the call (`callgate-end:<reason>`).
    EndedByBot { reason: String },
    /// Socket error, unexpected close, malformed handshake or timeout.
    Failed { reason: String },
    /// The server refused our credentials: HTTP 401 on the upgrade (a
    /// partner key it does not know, or none). A failure of the run's
    /// setup, never a legitimate answer to load.
    Unauthorized { status: u16, reason: String },
    /// Dead air longer than the silence threshold while something was owed.
    Silent { phase: String },
}

impl Outcome {
    /// Whether this outcome is a defect of the server under test: a
    /// rejection, transfer or bot hang-up is a legitimate answer, these are not.
    pub fn is_failure(&self) -> bool {
        matches!(
            self,
            Outcome::Failed { .. } | Outcome::Silent { .. } | Outcome::Unauthorized { .. }
        )
    }

    /// A short lower-case name, as used in tables and progress lines.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Rejected { .. } => "rejected",
            Outcome::Transferred { .. } => "transferred",
            Outcome::EndedByBot { .. } => "ended_by_bot",
            Outcome::Failed { .. } => "failed",
            Outcome::Unauthorized { .. } => "unauthorized",
            Outcome::Silent { .. } => "silent",
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
/// Fields after `duration_ms` were added with the partner protocol; they
/// default when reading older reports, and [`CallRecord::default`] lets a
/// test build a record without naming every field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRecord {
    /// Position of the call in the run (0-based, in dialling order).
    pub index: usize,
    pub call_sid: CallSid,
    pub stream_sid: StreamSid,
    pub outcome: Outcome,
    /// From dialling to the accepted WebSocket upgrade.
    pub connect_ms: Option<u64>,
    /// From `start` sent to the first bot audio frame received.
    pub time_to_first_audio_ms: Option<u64>,
    /// Per answered utterance: end of the caller's speech → first reply audio.
    pub reply_latency_ms: Vec<u64>,
    /// Longest dead air while a greeting, reply, prompt or close was owed.
    pub max_owed_silence_ms: u64,
    /// Utterances this call's plan had (its drawn length; see
    /// `LoadConfig::utterances_max`).
    #[serde(default)]
    pub utterances_planned: usize,
    pub utterances_sent: usize,
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
    /// Partner protocol: the `session_id` of the server's `started`.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Partner protocol: the server's `transfer` message, if any.
    #[serde(default)]
    pub transfer: Option<TransferMessage>,
    /// Partner protocol: the `reason` of the server's `end` message, if any
    /// (`end_reason` is the caller's own account of how the call ended).
    #[serde(default)]
    pub end_message_reason: Option<String>,
    /// Partner protocol: the first `error` message the server sent.
    #[serde(default)]
    pub server_error: Option<ServerError>,
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
        ] {
            assert!(obj.remove(field).is_some(), "{field}");
        }
        let back: CallRecord = serde_json::from_value(v).unwrap();
        assert_eq!(back, CallRecord::default());
    }
}
