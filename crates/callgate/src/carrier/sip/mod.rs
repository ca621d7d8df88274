//! SIP trunks: INVITEs over UDP or TCP with G.711 over RTP.
//!
//! - [`ingress`]: the task that owns the SIP sockets and the sans-IO
//!   endpoint, answers OPTIONS from the gate, and starts a call task per
//!   INVITE (`call`); `tcp` cuts messages from TCP streams;
//! - [`ua`]: the sans-IO SIP user agent server — framing, transactions,
//!   dialogs, SDP offer/answer — which knows no socket, task or clock;
//! - [`leg`]: the call's view of the dialog and its RTP session (ports,
//!   media clock, jitter buffer, DTMF, BYE/REFER at the end).

mod call;
pub mod ingress;
pub mod leg;
mod tcp;
pub mod ua;
