//! The carriers: one home per carrier, holding everything that knows its
//! wire — its message types and codec, its handshake and authentication,
//! and its [`Leg`](crate::leg::Leg).
//!
//! | home | wire | ingress (handshake) | leg |
//! |---|---|---|---|
//! | [`twilio`] | Media Streams JSON, request signatures, TwiML | `POST /v1/twilio/voice` (the webhook), `GET /v1/media-stream` | [`twilio::leg::TwilioLeg`] |
//! | [`partner`] | the partner protocol (`docs/partner-protocol.md`), resume tokens | `GET /v1/partner/stream` | [`partner::leg::PartnerLeg`] |
//! | [`sip`] | SIP over UDP/TCP, SDP, RTP | the SIP listener | [`sip::leg::SipLeg`] |
//! | [`webrtc`] | WHIP-style HTTP signalling, ICE-lite/DTLS-SRTP/Opus on one UDP socket | `POST /v1/webrtc` | [`webrtc::leg::WebrtcLeg`] |
//!
//! What no code outside a carrier's home does: name its wire types. The
//! shared path after the handshake — admission wait, hold audio, overflow,
//! the call — lives in [`crate::ingress`] and [`crate::call`] and sees only
//! the [`Leg`](crate::leg::Leg) seam. [`ws`] is the WebSocket plumbing the
//! two WebSocket carriers share (bounded outbound queue, close handshake).

pub mod partner;
pub mod sip;
pub mod twilio;
pub mod webrtc;
pub mod ws;

use std::sync::Arc;

use axum::Router;

use crate::app::CallServices;

/// What the carriers keep for the life of the server, beside the app.
#[derive(Default)]
pub struct Carriers {
    /// Partner resume tokens of the calls running here.
    pub partner_resumes: Arc<partner::leg::Registry>,
    /// Slots the Twilio voice webhook admitted, held for their streams.
    pub twilio_reservations: Arc<twilio::reservations::Reservations>,
    /// The WebRTC media socket and sessions, when `webrtc.enabled`.
    pub webrtc: Option<Arc<webrtc::WebrtcShared>>,
}

impl Carriers {
    /// What the configuration enables: the WebRTC socket is bound here.
    pub async fn start(cfg: &crate::config::Config) -> anyhow::Result<Carriers> {
        let webrtc = if cfg.webrtc.enabled {
            Some(webrtc::WebrtcShared::start(cfg.webrtc.clone()).await?)
        } else {
            None
        };
        Ok(Carriers {
            partner_resumes: Arc::default(),
            twilio_reservations: Arc::default(),
            webrtc,
        })
    }

    /// The WebSocket carriers' upgrade routes (SIP has its own listener,
    /// started by `server::start`).
    pub fn routes(&self) -> Router<Arc<CallServices>> {
        let ws = twilio::ingress::routes(Arc::clone(&self.twilio_reservations))
            .merge(partner::ingress::routes(Arc::clone(&self.partner_resumes)));
        match &self.webrtc {
            Some(w) => ws.merge(webrtc::signalling::routes(Arc::clone(w))),
            None => ws,
        }
    }
}
