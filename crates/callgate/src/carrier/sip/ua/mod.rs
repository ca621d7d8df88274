//! `carrier::sip::ua` — callgate's SIP user agent server, sans-IO.
//!
//! What it is: the SIP side of a voice-bot endpoint that *receives* calls —
//! strict framing of untrusted messages ([`wire`]), INVITE and non-INVITE
//! server transactions with their RFC 3261 retransmission timers ([`txn`]),
//! the UAS dialog and the requests callgate sends in it (BYE, REFER:
//! [`dialog`]), SDP offer/answer for G.711 and `telephone-event`
//! ([`sdp`]), and SIP INFO `application/dtmf-relay`. Every message is
//! parsed once, by rsipstack's copy of rsip (pinned exactly), and every
//! header is read from that parse ([`wire::headers`]); [`wire::frame`]
//! refuses what rsip is lenient about.
//!
//! What it never does: open a socket, spawn a task, resolve a name, or read
//! the clock. It never places calls (no UAC INVITE), registers, or
//! authenticates: carriers are authenticated upstream or by address.
//!
//! How to drive it: feed every datagram (or every message a
//! [`wire::StreamFramer`] cut from a TCP stream) to
//! [`Endpoint::receive`] with its source and `now`; call
//! [`Endpoint::poll`] at [`Endpoint::next_deadline`]; after either, drain
//! [`Endpoint::pop`]: `Output::Send` goes to the network, `Output::Event`
//! to the application, which answers with the commands
//! ([`Endpoint::accept`], [`Endpoint::reject`], [`Endpoint::bye`],
//! [`Endpoint::refer`], …).
//!
//! ```
//! use std::time::Instant;
//! use callgate::carrier::sip::ua::{Config, Endpoint, Event, Output, Peer, Transport};
//!
//! let local = "127.0.0.1:5060".parse().unwrap();
//! let mut ep = Endpoint::new(Config::new(local), 7);
//! let peer = Peer { addr: "127.0.0.1:5070".parse().unwrap(), transport: Transport::Udp, conn: 0 };
//! let invite = "INVITE sip:bot@127.0.0.1 SIP/2.0\r\n\
//!     Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK1\r\n\
//!     From: <sip:alice@127.0.0.1>;tag=a\r\nTo: <sip:bot@127.0.0.1>\r\n\
//!     Call-ID: doc-1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n";
//! ep.receive(invite.as_bytes(), peer, Instant::now());
//! // `100 Trying` goes out at once; the call waits for the application.
//! assert!(matches!(ep.pop(), Some(Output::Send { .. })));
//! let Some(Output::Event(Event::Invite { call, .. })) = ep.pop() else { panic!() };
//! ep.reject(call, 503, &[("Retry-After", "5".into())], Instant::now()).unwrap();
//! ```

pub mod commands;
pub mod dialog;
pub mod endpoint;
pub mod sdp;
pub mod txn;
pub mod wire;

#[cfg(test)]
mod endpoint_fuzz_tests;
#[cfg(test)]
mod sdp_fuzz_tests;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;

pub use commands::CommandError;
pub use endpoint::Endpoint;
pub use txn::Timers;
pub use wire::WireError;

/// A call the endpoint holds (one INVITE dialog).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallKey(pub u64);

/// A request waiting for the application's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TxnKey(pub u64);

/// How a message travelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    Udp,
    Tcp,
}

/// Where a message came from or goes: an address, and for TCP the
/// connection (the shell's id; answers go back over it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Peer {
    pub addr: SocketAddr,
    pub transport: Transport,
    pub conn: u64,
}

/// The endpoint's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Our address, for `Contact` and the `Via` of our requests.
    pub local: SocketAddr,
    /// Messages over this size are refused (`513`) or dropped.
    pub max_message_bytes: usize,
    pub timers: Timers,
    /// `Server` / `User-Agent` header value.
    pub user_agent: String,
}

impl Config {
    /// Defaults: 16 KiB messages, RFC 3261 timers.
    pub fn new(local: SocketAddr) -> Config {
        Config {
            local,
            max_message_bytes: 16 * 1024,
            timers: Timers::default(),
            user_agent: format!("callgate/{}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// What the endpoint produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Bytes for the network.
    Send {
        to: Peer,
        bytes: Vec<u8>,
    },
    Event(Event),
}

/// A new call, as the INVITE told it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invite {
    pub call_id: String,
    pub from: String,
    pub to: String,
    pub request_uri: String,
    pub content_type: Option<String>,
    pub offer: Vec<u8>,
    pub source: Peer,
    /// Every header of the INVITE in order (name, value): the value as
    /// received, the name as rsip writes it for a header it knows (compact
    /// and odd-case names written out) and as received otherwise. The
    /// application picks the ones it was configured to keep (callgate
    /// records `[receipt].sip_headers` as receipt labels).
    pub headers: Vec<(String, String)>,
}

impl Invite {
    fn from_framed(f: &wire::Framed, source: Peer) -> Invite {
        let request_uri = match &f.start {
            wire::StartLine::Request { uri, .. } => uri.clone(),
            wire::StartLine::Response { .. } => String::new(),
        };
        Invite {
            call_id: f.call_id().to_string(),
            from: f.from_value().to_string(),
            to: f.to_value().to_string(),
            request_uri,
            content_type: f.content_type().map(String::from),
            offer: f.body.clone(),
            source,
            headers: f.header_list(),
        }
    }
}

/// What the application hears about.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A new INVITE (`100 Trying` already sent): answer with
    /// [`Endpoint::accept`] or [`Endpoint::reject`].
    Invite { call: CallKey, invite: Invite },
    /// CANCEL before the answer: `200` to the CANCEL and `487` sent.
    Cancelled { call: CallKey },
    /// The ACK of our `200` arrived.
    Confirmed { call: CallKey },
    /// Our `200` was never ACKed (64·T1): the call should be hung up.
    AckTimeout { call: CallKey },
    /// A re-INVITE: answer with [`Endpoint::answer_reinvite`].
    Reinvite {
        call: CallKey,
        txn: TxnKey,
        offer: Vec<u8>,
    },
    /// The peer hung up (`200` sent).
    Bye { call: CallKey },
    /// A digit by SIP INFO (`200` sent).
    Dtmf { call: CallKey, digit: char },
    /// An out-of-dialog OPTIONS: answer with [`Endpoint::answer_options`].
    Options { txn: TxnKey },
    /// The final answer to our BYE (`None`: timed out).
    ByeDone { call: CallKey, code: Option<u16> },
    /// The final answer to our REFER (`None`: timed out).
    ReferAnswered { call: CallKey, code: Option<u16> },
    /// A NOTIFY about our REFER: the transferee's status line, and
    /// whether the subscription ended.
    ReferNotify {
        call: CallKey,
        status: Option<u16>,
        terminated: bool,
    },
    /// A message that could not be accepted; `answered` if it got a `400`
    /// or `513`, otherwise it was dropped.
    Malformed {
        from: Peer,
        error: WireError,
        answered: bool,
    },
    /// A response that matches nothing of ours (dropped).
    Stray,
}

/// The digit of an `application/dtmf-relay` body (`Signal=5`), RFC-less
/// but universal (Cisco's format).
pub fn dtmf_relay(body: &[u8]) -> Option<char> {
    let text = std::str::from_utf8(body).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        if !k.trim().eq_ignore_ascii_case("signal") {
            return None;
        }
        let c = v.trim().chars().next()?.to_ascii_uppercase();
        matches!(c, '0'..='9' | '*' | '#' | 'A'..='D').then_some(c)
    })
}
