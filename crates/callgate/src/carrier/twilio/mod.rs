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
//! - [`leg`]: the call's view of the stream;
//! - [`webhook`]: the voice webhook, which asks the gate before any stream
//!   exists and answers TwiML (`<Connect><Stream>`, or the overflow prompt
//!   and `<Dial>`), and [`reservations`], the admitted slots held for their
//!   streams.

pub mod ingress;
pub mod leg;
pub mod reservations;
pub mod signature;
pub mod webhook;
pub mod wire;
