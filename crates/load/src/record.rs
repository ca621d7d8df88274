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
    /// Dead air longer than the silence threshold while something was owed.
    Silent { phase: String },
}

impl Outcome {
    /// Whether this outcome is a defect of the server under test: a
    /// rejection, transfer or bot hang-up is a legitimate answer, these are not.
    pub fn is_failure(&self) -> bool {
        matches!(self, Outcome::Failed { .. } | Outcome::Silent { .. })
    }

    /// A short lower-case name, as used in tables and progress lines.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Rejected { .. } => "rejected",
            Outcome::Transferred { .. } => "transferred",
            Outcome::EndedByBot { .. } => "ended_by_bot",
            Outcome::Failed { .. } => "failed",
            Outcome::Silent { .. } => "silent",
        }
    }
}

/// Everything measured on one call. Times are milliseconds.
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
    }
}
