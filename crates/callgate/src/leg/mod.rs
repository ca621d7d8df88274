//! The carrier-leg seam: what every ingress (Twilio media stream, partner
//! WebSocket, and later SIP/RTP and WebRTC) looks like to the rest of the
//! server.
//!
//! A leg owns its wire protocol and handshake, declares its audio format,
//! and turns its traffic into [`LegEvent`]s; it accepts the same commands
//! (play a frame, place a marker, clear queued audio, and finish the call
//! by transfer or hang-up). The admission wait, hold audio, the overflow
//! path and the call actor are generic over [`Leg`] and never see a wire
//! type.
//!
//! Why a trait and not a channel pair: reading the socket directly from the
//! call's own task (cancel-safe [`Leg::next_event`] in a `select!`, or in
//! batches with [`Leg::ready_events`] while a call is queued or refused) is
//! what keeps 2,000 queued callers from costing a wake-up per 20 ms frame;
//! a reader task per leg would double every wake-up. Why a trait and not an
//! enum: each ingress stays in its own module and a new one touches no
//! `match` elsewhere; calls are generic, so dispatch is static.

pub mod format;
pub mod outbound;

use std::future::Future;
use std::time::Duration;

use admission::RejectReason;

use crate::end::{End, EndReason};

pub use format::LegFormat;

/// Which ingress delivered a call (the ledger's `ingress` column).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ingress {
    Twilio,
    Partner,
    Sip,
    Webrtc,
}

impl Ingress {
    pub const fn as_str(self) -> &'static str {
        match self {
            Ingress::Twilio => "twilio",
            Ingress::Partner => "partner",
            Ingress::Sip => "sip",
            Ingress::Webrtc => "webrtc",
        }
    }
}

/// A protocol violation by the peer: a low-cardinality kind for metrics and
/// the ledger, and a human-readable detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub kind: &'static str,
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.detail, self.kind)
    }
}

/// What a leg tells the call.
#[derive(Debug, Clone, PartialEq)]
pub enum LegEvent {
    /// One frame of caller audio in the leg's negotiated [`LegFormat`]
    /// (empty while the leg is not decoding audio, see [`Leg::want_audio`]).
    Audio(Vec<u8>),
    /// A DTMF digit (`0-9`, `*`, `#`, `A-D`).
    Dtmf(char),
    /// Playout has reached a marker placed with [`Leg::mark`]. Legs whose
    /// peer echoes nothing report this from their own playout clock.
    Played(String),
    /// The peer ended the call (Twilio `stop`, partner `stop`, SIP `BYE`).
    Hangup,
    /// The transport ended without a hang-up (socket closed or failed).
    Gone(String),
    /// The peer broke the protocol; the leg must be finished.
    Violation(Violation),
    /// A connection-oriented media transport lost its peer (WebRTC: ICE
    /// never connected, DTLS never finished, consent expired), with a
    /// detail for the ledger.
    TransportLost(TransportLoss, String),
    /// No media and no media reports from the peer for this long (SIP:
    /// `sip.rtp_timeout_ms` without RTP or RTCP): it vanished without a
    /// hang-up.
    MediaTimeout(Duration),
    /// The transport dropped and the leg waits, bounded, for the peer to
    /// resume the call on a new connection (partner legs: the resume
    /// window). Outbound commands are queued meanwhile; no caller audio
    /// comes. Followed by [`LegEvent::Attached`] or by `Gone`.
    Detached,
    /// A new connection took over the call (after [`LegEvent::Detached`],
    /// or superseding a connection still open): caller audio comes again.
    Attached,
}

impl LegEvent {
    /// Whether nothing more will come from this leg.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            LegEvent::Hangup
                | LegEvent::Gone(_)
                | LegEvent::Violation(_)
                | LegEvent::MediaTimeout(_)
                | LegEvent::TransportLost(..)
        )
    }
}

/// How a media transport with its own connectivity checks lost its peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportLoss {
    /// ICE never connected within its bound (`ice_failed`).
    #[serde(rename = "ice_failed")]
    Ice,
    /// ICE connected but DTLS did not finish within its bound (`dtls_failed`).
    #[serde(rename = "dtls_failed")]
    Dtls,
    /// The peer stopped answering for its consent (RFC 7675) or its ICE
    /// pair went away: a closed tab, a lost network (`consent_lost`).
    #[serde(rename = "consent_lost")]
    Consent,
    /// The peer kept its consent but sent no audio for
    /// `call.media_stall_ms` (`carrier_media_stalled`).
    #[serde(rename = "carrier_media_stalled")]
    MediaStalled,
}

impl TransportLoss {
    pub const fn as_str(self) -> &'static str {
        match self {
            TransportLoss::Ice => "ice_failed",
            TransportLoss::Dtls => "dtls_failed",
            TransportLoss::Consent => "consent_lost",
            TransportLoss::MediaStalled => "carrier_media_stalled",
        }
    }

    /// The call's end reason.
    pub const fn end(self) -> EndReason {
        match self {
            TransportLoss::Ice => EndReason::IceFailed,
            TransportLoss::Dtls => EndReason::DtlsFailed,
            TransportLoss::Consent => EndReason::ConsentLost,
            TransportLoss::MediaStalled => EndReason::MediaStalled,
        }
    }
}

/// Why a leg is being finished, as the peer is told (partner `transfer` /
/// `end` reasons, SIP `Reason` headers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// The call ended (reason and its ledger detail).
    Ended(EndReason, Option<String>),
    /// Admission refused the call.
    Refused(RejectReason),
}

impl Cause {
    /// The reason string on the wire: the dialog's own reason for a
    /// dialog-requested transfer (`caller_requested_human`), otherwise the
    /// ledger form (`stalled:tts`, `bot_ended:booking_confirmed`,
    /// `partner_quota`).
    pub fn wire(&self) -> String {
        match self {
            Cause::Ended(EndReason::Transferred, Some(d)) => d.clone(),
            Cause::Ended(r, d) => r.ledger(d.as_deref()),
            Cause::Refused(r) => r.as_str().to_string(),
        }
    }
}

/// How a leg is to be finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// Hand the caller to a human (Twilio: close 1000 so the TwiML's next
    /// verb runs; partner: a `transfer` message then close; SIP: REFER).
    Transfer {
        target: Option<String>,
        cause: Cause,
    },
    /// End the call (partner: an `end` message then close).
    Hangup(Cause),
    /// The peer already hung up or is gone: just release the transport.
    Release,
    /// The peer broke the protocol: tell it why (where the protocol can),
    /// then close.
    Refuse(Violation),
}

impl Finish {
    /// How a call that ended with `end` finishes its leg.
    pub fn for_end(end: &End, target: Option<String>) -> Finish {
        match end.reason {
            EndReason::ProtocolViolation(kind) => Finish::Refuse(Violation {
                kind,
                detail: end.detail.clone().unwrap_or_default(),
            }),
            _ if end.peer_left => Finish::Release,
            r if r.is_transfer() => Finish::Transfer {
                target,
                cause: Cause::Ended(r, end.detail.clone()),
            },
            r => Finish::Hangup(Cause::Ended(r, end.detail.clone())),
        }
    }
}

/// What finishing achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Finished {
    /// The close had to be forced (writer timed out or was aborted).
    pub forced: bool,
}

/// Counters a leg keeps, for the receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct LegStats {
    pub frames_in: u64,
    pub frames_out: u64,
    /// Outbound frames or control messages dropped because the peer had
    /// stopped reading (bounded outbound queue full).
    pub frames_dropped: u64,
    /// Inbound messages the leg ignored (unknown event types).
    pub ignored_events: u64,
}

/// One carrier leg. See the module documentation.
pub trait Leg: Send + 'static {
    /// The negotiated audio format of both directions.
    fn format(&self) -> LegFormat;

    /// The next event. Cancel-safe. After a terminal event, pending forever.
    fn next_event(&mut self) -> impl Future<Output = LegEvent> + Send;

    /// Every event already received, without waiting; audio is left out.
    /// Used by the hold and overflow paths, which wake per prompt chunk.
    fn ready_events(&mut self) -> Vec<LegEvent>;

    /// Starts delivering caller audio (until then payloads are checked and
    /// dropped: a queued or refused call does not pay for decoding).
    fn want_audio(&mut self);

    /// Queues one frame (or prompt chunk) of audio in the leg's format.
    /// Never waits: a full outbound queue drops it (counted).
    fn play(&mut self, audio: &[u8]);

    /// Queues a marker after the audio queued so far.
    fn mark(&mut self, name: &str);

    /// Drops audio queued at the peer (barge-in, end of hold audio).
    fn clear(&mut self);

    /// Counters so far.
    fn stats(&self) -> LegStats;

    /// Gives the leg its media path. Called once admission has said yes
    /// (setup starts right after), and before a refusal plays the overflow
    /// prompt. A SIP leg answers here — its RTP port is taken and its
    /// `200 OK` sent only now, so a refused call never holds a port; legs
    /// whose media exists from the start return at once. An error is the
    /// leg's terminal event (the caller left, or no port was free).
    fn open_media(&mut self) -> impl Future<Output = Result<(), LegEvent>> + Send {
        std::future::ready(Ok(()))
    }

    /// The call waits in the admission queue (called once, when it is not
    /// admitted at once). A leg whose signalling can say so does: a SIP leg
    /// sends `180 Ringing`, so the caller hears ringback and a carrier
    /// waiting for an 18x does not fail over. Legs with media hear hold
    /// audio instead and do nothing here.
    fn queued(&mut self) {}

    /// The call is refused (or failed setup) and goes to the overflow
    /// path with `reason`; called before [`Leg::open_media`] there. A leg
    /// whose signalling shows a state says so (WebRTC: the session status
    /// is `refusing` while the prompt plays, never `admitted`).
    fn refusing(&mut self, _reason: &str) {}

    /// Whether a refused caller hears the overflow prompt on this leg
    /// before it is finished. A SIP leg under `sip.overflow = "reject"` or
    /// `"redirect"` answers `503`/`302` at once instead: it has no media to
    /// play a prompt on, and a proxy fails over faster on a quick answer.
    fn prompt_before_refusal(&self) -> bool {
        true
    }

    /// Whether the leg ends the call itself when its peer's media stops,
    /// on clocks of its own (WebRTC: ICE and DTLS before media flows, then
    /// consent, and `call.media_stall_ms` only while the peer keeps
    /// consent). The call's own media-stall clock is then off, so it
    /// cannot pre-empt the transport's endings.
    fn bounds_its_own_media(&self) -> bool {
        false
    }

    /// Whether audio played now reaches the caller (a SIP call that is not
    /// answered yet has no media: queued callers get no hold audio).
    fn has_media(&self) -> bool {
        true
    }

    /// What the transport measured, for the receipt's `media.transport`
    /// (SIP: RTP packets, loss and jitter as our RTCP reports carry them,
    /// the peer's own reports). `None` for transports that measure nothing
    /// beyond [`LegStats`].
    fn transport_report(&self) -> Option<serde_json::Value> {
        None
    }

    /// The receipt's `resume` object: attempts, gaps and what they cost
    /// (partner legs that issued a resume token). `None` for legs that
    /// cannot be resumed.
    fn resume_report(&self) -> Option<serde_json::Value> {
        None
    }

    /// Finishes the leg, bounded in time by `bound`.
    fn finish(self, how: Finish, bound: Duration) -> impl Future<Output = Finished> + Send;
}
