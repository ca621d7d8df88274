//! SIP legs: the drill places them through a [`SipDialer`] its caller
//! provides (the test suite's is sipp through Kamailio), because a SIP
//! caller is a separate program with its own media clock, not a cued
//! WebSocket caller. A SIP leg takes a speaker's seat: it speaks when
//! answered, then holds the line (RTP keeps flowing) until the staircase
//! would end, and hangs up with a BYE. Its SLOs come from its ledger
//! receipt (the SIP Call-ID is the carrier id the drill looks it up by),
//! including the RTP jitter and loss the server measured.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How one SIP call ended, as its caller saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SipEnded {
    /// Answered (200) and hung up with a BYE that was answered.
    pub completed: bool,
    /// The caller's own account (sipp's counters), for the run file.
    pub detail: String,
}

/// A future a dialer returns.
pub type SipCall = Pin<Box<dyn Future<Output = SipEnded> + Send>>;

/// Places SIP calls through the deployment's SIP proxy.
pub trait SipDialer: Send + Sync {
    /// One call with SIP Call-ID `call_id` that speaks, holds the line for
    /// `hold` after answering, then hangs up; resolves once it has ended.
    fn call(&self, call_id: String, hold: Duration) -> SipCall;
}
