//! Twilio Media Streams: the carrier WebSocket Twilio opens for a
//! `<Connect><Stream>` verb.
//!
//! - [`wire`]: the JSON frames (`connected`, `start`, `media`, `mark`,
//!   `dtmf`, `stop` in; `media`, `mark`, `clear` out), read leniently where
//!   Twilio's documentation allows and bounded where the internet could
//!   abuse it;
//! - [`signature`]: `X-Twilio-Signature` (auth token) and SharedKey checks
//!   of the upgrade request;
//! - [`ingress`]: the upgrade handler — signature, a bounded wait for
//!   `start`, the media format — that hands a [`leg::TwilioLeg`] to the
//!   shared call path;
//! - [`leg`]: the call's view of the stream.

pub mod ingress;
pub mod leg;
pub mod signature;
pub mod wire;
