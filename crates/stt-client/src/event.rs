//! What a session reports: transcripts, VAD events, the summary, and how
//! it ended.

/// One `Results` message (interim or final).
#[derive(Debug, Clone, PartialEq)]
pub struct Transcript {
    /// The best alternative's transcript (may be empty for silence).
    pub text: String,
    /// Final for its span; interim results (`false`) are superseded later.
    pub is_final: bool,
    /// The provider's endpointer saw the speaker stop.
    pub speech_final: bool,
    /// Produced by a `Finalize` request.
    pub from_finalize: bool,
    /// Seconds of audio since the stream began.
    pub start: f64,
    /// Seconds.
    pub duration: f64,
    pub confidence: f64,
}

/// The summary a provider sends after `CloseStream`.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamMetadata {
    pub request_id: String,
    /// Seconds of audio the provider received.
    pub duration: f64,
}

/// An event of one session, in provider order.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub enum SttEvent {
    Transcript(Transcript),
    /// Speech began at this audio time (needs `vad_events`).
    SpeechStarted {
        at: f64,
    },
    /// A word gap of `utterance_end_ms` followed the word ending here.
    UtteranceEnd {
        last_word_end: f64,
    },
    /// The end-of-stream summary.
    Metadata {
        request_id: String,
        duration: f64,
    },
    /// An `Error` or unknown message; the stream goes on.
    ProviderError {
        message: String,
    },
    /// The socket dropped mid-call (or the last attempt failed); attempt
    /// number `attempt` starts after a backoff. Audio is kept meanwhile.
    /// `capacity`: the last attempt was refused for capacity (HTTP 429),
    /// not because the provider is down.
    Reconnecting {
        attempt: u32,
        capacity: bool,
        error: String,
    },
    /// A new socket carries the session. The audio since the last
    /// utterance boundary (`replayed_seconds`) was sent again, so results
    /// for it follow — a consumer assembling utterances drops what it held
    /// pending (see [`crate::UtteranceAssembler`]). Timestamps continue on
    /// the session's audio clock.
    Reconnected {
        down_for: std::time::Duration,
        replayed_seconds: f64,
    },
    /// Terminal: the session has ended; nothing follows.
    Closed(CloseReason),
}

/// How a session ended, classified on the close *reason text* first
/// (providers disagree on codes for the same reason).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseKind {
    /// 1000 after `CloseStream`.
    Normal,
    /// `NET-0001`: the provider got no audio or `KeepAlive` in time.
    IdleTimeout,
    /// `NET-0000`: the provider failed to produce results in time.
    ProviderTimeout,
    /// `DATA-*`: the provider could not decode what we sent.
    BadData,
    /// The socket failed or ended without a close frame.
    Transport,
    /// Our close did not complete within `close_timeout`.
    CloseTimeout,
    /// Any other close frame (1001 going away, 1011 without a known reason…).
    Other,
}

/// The terminal state of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseReason {
    /// The close frame's code; `None` when there was no close frame.
    pub code: Option<u16>,
    /// The close frame's reason text, or what went wrong locally.
    pub reason: String,
    pub kind: CloseKind,
}

impl CloseReason {
    /// Classifies a close frame from the provider.
    pub fn from_frame(code: u16, reason: &str) -> Self {
        let kind = if reason.starts_with("NET-0001") {
            CloseKind::IdleTimeout
        } else if reason.starts_with("NET-0000") {
            CloseKind::ProviderTimeout
        } else if reason.starts_with("DATA-") {
            CloseKind::BadData
        } else if code == 1000 {
            CloseKind::Normal
        } else {
            CloseKind::Other
        };
        CloseReason {
            code: Some(code),
            reason: reason.to_owned(),
            kind,
        }
    }

    /// The session ended without a close frame.
    pub fn transport(detail: impl Into<String>) -> Self {
        CloseReason {
            code: None,
            reason: detail.into(),
            kind: CloseKind::Transport,
        }
    }

    pub(crate) fn close_timeout() -> Self {
        CloseReason {
            code: None,
            reason: "provider did not close in time".to_owned(),
            kind: CloseKind::CloseTimeout,
        }
    }

    /// A close frame was exchanged.
    pub fn is_clean(&self) -> bool {
        self.code.is_some()
    }

    /// The orderly end of a stream we asked to close.
    pub fn is_normal(&self) -> bool {
        self.kind == CloseKind::Normal
    }

    /// Whether a new session for the same call may work (everything but a
    /// normal end and audio the provider cannot decode).
    pub fn is_retryable(&self) -> bool {
        !matches!(self.kind, CloseKind::Normal | CloseKind::BadData)
    }

    /// Whether the client reconnects after this close mid-call: a
    /// retryable close that the client did not cause itself. An idle
    /// timeout (`NET-0001`) means no audio was sent — the consumer stopped
    /// feeding the session — so a new socket would idle out the same way.
    pub fn is_drop(&self) -> bool {
        self.is_retryable() && self.kind != CloseKind::IdleTimeout
    }
}

/// What [`crate::SttHandle::close`] returns.
#[derive(Debug, Clone, PartialEq)]
pub struct CloseSummary {
    /// The provider's summary, if it sent one before closing.
    pub metadata: Option<StreamMetadata>,
    pub close: CloseReason,
    /// Audio frames dropped because the session could not keep up.
    pub dropped_audio_frames: u64,
    /// Events dropped because the consumer did not keep up.
    pub dropped_events: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closes_are_keyed_on_the_reason_text() {
        assert_eq!(
            CloseReason::from_frame(1011, "NET-0001").kind,
            CloseKind::IdleTimeout
        );
        assert_eq!(
            CloseReason::from_frame(1011, "NET-0000").kind,
            CloseKind::ProviderTimeout
        );
        // Older and newer docs disagree on the code; the reason decides.
        assert_eq!(
            CloseReason::from_frame(1002, "DATA-0000").kind,
            CloseKind::BadData
        );
        assert_eq!(
            CloseReason::from_frame(1008, "DATA-0000").kind,
            CloseKind::BadData
        );
        let normal = CloseReason::from_frame(1000, "");
        assert!(normal.is_normal() && normal.is_clean() && !normal.is_retryable());
        assert_eq!(CloseReason::from_frame(1001, "").kind, CloseKind::Other);
        let t = CloseReason::transport("reset");
        assert!(!t.is_clean() && t.is_retryable());
    }
}
