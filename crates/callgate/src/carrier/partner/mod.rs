//! The partner WebSocket protocol (`docs/partner-protocol.md`): a partner's
//! platform streams one call per socket, authenticated by its key.
//!
//! - [`wire`]: the JSON control messages and binary audio frames, with their
//!   limits and error codes;
//! - [`ingress`]: the upgrade — key check, resume refusals, a bounded wait
//!   for `start` — that hands a [`leg::PartnerLeg`] to the shared call path;
//! - [`leg`]: the call's view of the socket, which can swap sockets on a
//!   resume;
//! - [`resume`]: single-use resume tokens and the registry of calls that
//!   may be resumed;
//! - [`gap`]: what a leg holds while its socket is gone (bot audio, marks)
//!   and what it counts as lost.

pub mod gap;
pub mod ingress;
pub mod leg;
pub mod resume;
pub mod wire;
