//! Why a call ended, typed. Every way a call can end goes through one
//! idempotent terminal transition (see [`crate::call::core`]) whose first
//! cause is the one recorded; these types are what it records.
//!
//! [`EndReason`] is closed and carries no free text: [`EndReason::label`] is
//! the low-cardinality metric label, and the optional detail of an [`End`]
//! (the dialog service's reason, a socket error) goes to the ledger only.

use std::fmt;
use std::time::Instant;

/// A per-call connection opened at setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    Stt,
    Tts,
    Dialog,
    State,
}

impl Resource {
    pub const fn as_str(self) -> &'static str {
        match self {
            Resource::Stt => "stt",
            Resource::Tts => "tts",
            Resource::Dialog => "dialog",
            Resource::State => "state",
        }
    }
}

/// A provider a live call depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    Stt,
    Tts,
    Dialog,
}

impl Provider {
    /// The metric label and receipt key.
    pub const fn label(self) -> &'static str {
        match self {
            Provider::Stt => "stt",
            Provider::Tts => "tts",
            Provider::Dialog => "dialog",
        }
    }
}

/// Who is to blame for a stall the watchdog acted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Culprit {
    Dialog,
    Tool,
    Tts,
    Stt,
    CarrierMedia,
    /// This instance: its own lag against the media clock was beyond the
    /// bound when the stall fired (`admission.max_lag_ms`).
    Instance,
}

impl Culprit {
    pub const fn as_str(self) -> &'static str {
        match self {
            Culprit::Dialog => "dialog",
            Culprit::Tool => "tool",
            Culprit::Tts => "tts",
            Culprit::Stt => "stt",
            Culprit::CarrierMedia => "carrier_media",
            Culprit::Instance => "instance",
        }
    }
}

/// Why a call ended. Closed: adding a way to end is adding a variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndReason {
    /// The caller hung up (Twilio/partner `stop`, SIP `BYE`).
    CallerHangup,
    /// The caller hung up while the call's connections were being opened.
    CallerHangupDuringSetup,
    /// The carrier's transport ended without a hang-up.
    CarrierGone,
    /// ... while the call's connections were being opened.
    CarrierGoneDuringSetup,
    /// The carrier broke its protocol (kind from the leg).
    ProtocolViolation(&'static str),
    /// The dialog service ended the call (detail: its reason).
    BotEnded,
    /// The dialog service asked for a human (detail: its reason).
    Transferred,
    /// A connection could not be opened; the caller heard the overflow prompt.
    SetupFailed(Resource),
    /// A provider failed mid-call; the caller was transferred.
    ProviderFailed(Provider),
    /// A provider stalled twice; the caller was transferred.
    Stalled(Culprit),
    /// The carrier stopped sending media: nobody is listening.
    MediaStalled,
    /// A SIP peer sent no RTP and no RTCP for `sip.rtp_timeout_ms` and no
    /// BYE either: callgate hangs up (BYE) so nothing leaks.
    RtpTimeout,
    /// A WebRTC caller's ICE never connected within `webrtc.ice_timeout_ms`.
    IceFailed,
    /// ... its DTLS handshake did not finish within `webrtc.dtls_timeout_ms`.
    DtlsFailed,
    /// ... its browser stopped its consent checks (RFC 7675) for
    /// `webrtc.consent_timeout_ms`, or its ICE pair went away: a closed
    /// tab, a lost network.
    ConsentLost,
    /// The drain deadline passed with the call still running.
    DrainDeadline,
    /// A drain with policy `transfer` handed the call to the human path at
    /// its turn boundary.
    DrainTransfer,
    /// Another instance closed this call's record as `owner_lost` while
    /// this one was paused or cut off past its lease: the call says goodbye
    /// here and ends (its own later writes are fenced).
    OwnerFenced,
    /// The call reached `call.max_duration_s`.
    MaxDuration,
    /// The server shut down under the call (its task was cancelled).
    Shutdown,
}

impl EndReason {
    /// Low-cardinality label for `callgate_calls_ended_total{reason}`.
    pub const fn label(self) -> &'static str {
        match self {
            EndReason::CallerHangup => "caller_hangup",
            EndReason::CallerHangupDuringSetup => "caller_hangup_during_setup",
            EndReason::CarrierGone => "carrier_gone",
            EndReason::CarrierGoneDuringSetup => "carrier_gone_during_setup",
            EndReason::ProtocolViolation(_) => "protocol_error",
            EndReason::BotEnded => "bot_ended",
            EndReason::Transferred => "transferred",
            EndReason::SetupFailed(r) => match r {
                Resource::Stt => "setup_failed:stt",
                Resource::Tts => "setup_failed:tts",
                Resource::Dialog => "setup_failed:dialog",
                Resource::State => "setup_failed:state",
            },
            EndReason::ProviderFailed(p) => match p {
                Provider::Stt => "provider_failed:stt",
                Provider::Tts => "provider_failed:tts",
                Provider::Dialog => "provider_failed:dialog",
            },
            EndReason::Stalled(_) => "stalled",
            EndReason::MediaStalled => "carrier_media_stalled",
            EndReason::RtpTimeout => "rtp_timeout",
            EndReason::IceFailed => "ice_failed",
            EndReason::DtlsFailed => "dtls_failed",
            EndReason::ConsentLost => "consent_lost",
            EndReason::DrainDeadline => "drain_deadline",
            EndReason::DrainTransfer => "drain_transfer",
            EndReason::OwnerFenced => "owner_fenced",
            EndReason::MaxDuration => "max_duration",
            EndReason::Shutdown => "shutdown",
        }
    }

    /// Whether the caller was handed to a human rather than hung up on.
    pub const fn is_transfer(self) -> bool {
        matches!(
            self,
            EndReason::Transferred
                | EndReason::DrainTransfer
                | EndReason::SetupFailed(_)
                | EndReason::ProviderFailed(_)
                | EndReason::Stalled(_)
        )
    }

    /// Whether calling again may work: true for provider trouble and
    /// shutdowns, false when the conversation itself ended.
    pub const fn is_retryable(self) -> bool {
        matches!(
            self,
            EndReason::SetupFailed(_)
                | EndReason::ProviderFailed(_)
                | EndReason::Stalled(_)
                | EndReason::DrainDeadline
                | EndReason::OwnerFenced
                | EndReason::Shutdown
                | EndReason::CarrierGone
                | EndReason::CarrierGoneDuringSetup
                | EndReason::RtpTimeout
                | EndReason::IceFailed
                | EndReason::DtlsFailed
                | EndReason::ConsentLost
        )
    }

    /// The ledger's `end_reason`: the label with the typed part spelled out
    /// (`stalled:tts`, `protocol_error:invalid_json`) and, for the dialog's
    /// own endings, its reason (`transferred:caller_requested_human`).
    pub fn ledger(self, detail: Option<&str>) -> String {
        match (self, detail) {
            (EndReason::Stalled(c), _) => format!("stalled:{}", c.as_str()),
            (EndReason::ProtocolViolation(kind), _) => format!("protocol_error:{kind}"),
            (EndReason::BotEnded | EndReason::Transferred, Some(d)) => {
                format!("{}:{d}", self.label())
            }
            _ => self.label().to_string(),
        }
    }
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.ledger(None))
    }
}

/// A call's end: the first cause, its detail, and when the disconnect was
/// observed (the caller's hang-up, or the moment callgate decided to end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    pub reason: EndReason,
    pub detail: Option<String>,
    pub at: Instant,
    /// Whether the peer had already hung up or gone when the call ended
    /// (then "disconnect observed" is the peer's, not ours).
    pub peer_left: bool,
}

impl End {
    pub fn new(reason: EndReason, at: Instant) -> Self {
        End {
            reason,
            detail: None,
            at,
            peer_left: matches!(
                reason,
                EndReason::CallerHangup
                    | EndReason::CallerHangupDuringSetup
                    | EndReason::CarrierGone
                    | EndReason::CarrierGoneDuringSetup
                    | EndReason::ProtocolViolation(_)
                    | EndReason::MediaStalled
                    | EndReason::IceFailed
                    | EndReason::DtlsFailed
                    | EndReason::ConsentLost
            ),
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// The ledger's `end_reason` string.
    pub fn ledger(&self) -> String {
        self.reason.ledger(self.detail.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_strings_keep_their_established_form() {
        assert_eq!(EndReason::CallerHangup.ledger(None), "caller_hangup");
        assert_eq!(
            EndReason::Transferred.ledger(Some("caller_requested_human")),
            "transferred:caller_requested_human"
        );
        assert_eq!(EndReason::Stalled(Culprit::Tts).ledger(None), "stalled:tts");
        assert_eq!(
            EndReason::SetupFailed(Resource::Stt).ledger(Some("ignored")),
            "setup_failed:stt"
        );
        assert_eq!(
            EndReason::ProtocolViolation("invalid_json").ledger(None),
            "protocol_error:invalid_json"
        );
        assert_eq!(EndReason::Stalled(Culprit::Dialog).label(), "stalled");
    }

    #[test]
    fn peer_left_only_when_the_peer_ended_it() {
        let now = Instant::now();
        assert!(End::new(EndReason::CallerHangup, now).peer_left);
        assert!(!End::new(EndReason::SetupFailed(Resource::Tts), now).peer_left);
        assert!(!End::new(EndReason::DrainDeadline, now).peer_left);
    }
}
