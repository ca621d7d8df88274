//! SDP offer/answer (RFC 3264 over RFC 8866, which obsoletes RFC 4566) for G.711 audio over RTP.
//!
//! What it is: our typed offer/answer model over the `sdp-types` crate
//! (GStreamer's SDP parser and writer): [`parse`] reads the SDP bodies
//! carriers, SBCs and PBXs put in their INVITEs (the crate parses every
//! line; our screen before it and our model after it refuse what callgate
//! must not accept), [`negotiate`] is the answerer's choice of one audio
//! stream and codec — policy, all ours — and [`answer`] builds the body we
//! send back and has the crate write it. The WebRTC side does not use this:
//! str0m parses and writes its own SDP.
//!
//! What it never does: I/O, clocks or allocation proportional to anything
//! but the (size-limited) body. It does not speak SRTP, ICE, DTLS, video or
//! any codec but G.711 μ-law/A-law (plus RFC 4733 telephone-events): an
//! offer that has nothing else is refused with a [`NegotiationError`] the
//! caller turns into `488 Not Acceptable Here` (with
//! [`NegotiationError::warning_code`] in a `Warning` header). A body that is
//! not valid SDP is an [`SdpError`], for a `400 Bad Request`.
//!
//! Limits (untrusted input): a body over [`MAX_BODY_BYTES`], more than
//! [`MAX_MEDIA`] m= sections, more than [`MAX_ATTRIBUTES`] a= lines in one
//! section, or an m= field longer than [`MAX_TOKEN_BYTES`] is refused with
//! a typed error before anything is built from it.
//!
//! How to drive it, for an INVITE (and the same for every re-INVITE, with
//! the codec in use as `current` and the answer version incremented):
//!
//! ```
//! use std::net::{IpAddr, Ipv4Addr};
//! use callgate::carrier::sip::ua::sdp::{self, AnswerParams, Codec};
//!
//! let offer = sdp::parse(
//!     b"v=0\r\no=- 1 1 IN IP4 192.0.2.7\r\ns=-\r\nc=IN IP4 192.0.2.7\r\nt=0 0\r\n\
//!       m=audio 4000 RTP/AVP 8 0 101\r\na=rtpmap:101 telephone-event/8000\r\n",
//! )?;
//! let chosen = sdp::negotiate(&offer, &[Codec::Pcmu, Codec::Pcma], None)?;
//! assert_eq!(chosen.codec, Codec::Pcma); // the offer's order wins
//! assert_eq!(chosen.remote_rtp.to_string(), "192.0.2.7:4000");
//! let body = sdp::answer(&offer, &chosen, &AnswerParams {
//!     origin_username: "callgate",
//!     session_id: 42,
//!     version: 1,
//!     local_ip: IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1)),
//!     local_rtp_port: 30_000,
//!     session_name: "callgate",
//! });
//! assert!(body.contains("m=audio 30000 RTP/AVP 8 101\r\n"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod answer;
mod error;
mod negotiate;
mod parse;
#[cfg(test)]
mod parse_tests;
mod read;
mod screen;
#[cfg(test)]
mod tests;

use std::fmt;
use std::net::IpAddr;

pub use answer::{AnswerParams, answer};
pub use error::{MAX_ATTRIBUTES, MAX_BODY_BYTES, MAX_MEDIA, MAX_TOKEN_BYTES, SdpError};
pub use negotiate::{Negotiated, NegotiationError, negotiate};
pub use parse::parse;

/// An audio codec callgate can send and receive: G.711, 8000 Hz, mono.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Codec {
    /// G.711 μ-law (static payload type 0).
    Pcmu,
    /// G.711 A-law (static payload type 8).
    Pcma,
}

impl Codec {
    /// Both codecs sample at 8000 Hz.
    pub const CLOCK_RATE: u32 = 8_000;

    /// The static RTP payload type (RFC 3551): 0 or 8. An offer may number
    /// the codec differently (a dynamic type with an `a=rtpmap`), so answer
    /// with [`Negotiated::payload_type`], not this.
    pub const fn payload_type(self) -> u8 {
        match self {
            Codec::Pcmu => 0,
            Codec::Pcma => 8,
        }
    }

    /// The encoding name as `a=rtpmap` spells it: `PCMU` or `PCMA`.
    pub const fn name(self) -> &'static str {
        match self {
            Codec::Pcmu => "PCMU",
            Codec::Pcma => "PCMA",
        }
    }

    /// The codec an `a=rtpmap` encoding name means (case-insensitive, as
    /// RFC 4855 §3 says MIME subtypes are).
    pub fn from_name(name: &str) -> Option<Codec> {
        [Codec::Pcmu, Codec::Pcma]
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(name))
    }

    /// The codec a static payload type means when no `a=rtpmap` names it.
    pub const fn from_static_payload_type(pt: u8) -> Option<Codec> {
        match pt {
            0 => Some(Codec::Pcmu),
            8 => Some(Codec::Pcma),
            _ => None,
        }
    }

    /// The codec an `a=rtpmap` line means: PCMU or PCMA at 8000 Hz, mono.
    pub fn from_rtpmap(map: &RtpMap) -> Option<Codec> {
        Codec::from_name(&map.name).filter(|_| map.is_mono(Codec::CLOCK_RATE))
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A stream's direction (RFC 3264 §5.1), as seen by the side that wrote
/// it: in an offer, the offerer's; in [`Negotiated::direction`], ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Direction {
    /// Both ways: the default when no attribute says otherwise.
    #[default]
    SendRecv,
    /// This side only sends (an offerer playing music on hold).
    SendOnly,
    /// This side only receives.
    RecvOnly,
    /// Neither way (a hold without music).
    Inactive,
}

impl Direction {
    /// The direction an answerer takes to this offered one (RFC 3264 §6.1):
    /// sendonly and recvonly swap, the others stay.
    pub const fn answer(self) -> Direction {
        match self {
            Direction::SendOnly => Direction::RecvOnly,
            Direction::RecvOnly => Direction::SendOnly,
            other => other,
        }
    }

    /// Whether the side this direction belongs to sends media (for
    /// [`Negotiated::direction`]: whether we do).
    pub const fn we_send(self) -> bool {
        matches!(self, Direction::SendRecv | Direction::SendOnly)
    }

    /// Whether the side this direction belongs to receives media.
    pub const fn we_receive(self) -> bool {
        matches!(self, Direction::SendRecv | Direction::RecvOnly)
    }

    /// The attribute name: `sendrecv`, `sendonly`, `recvonly`, `inactive`.
    pub const fn attribute(self) -> &'static str {
        match self {
            Direction::SendRecv => "sendrecv",
            Direction::SendOnly => "sendonly",
            Direction::RecvOnly => "recvonly",
            Direction::Inactive => "inactive",
        }
    }

    /// The direction an attribute name means (case-insensitive).
    pub fn from_attribute(name: &str) -> Option<Direction> {
        [
            Direction::SendRecv,
            Direction::SendOnly,
            Direction::RecvOnly,
            Direction::Inactive,
        ]
        .into_iter()
        .find(|d| d.attribute().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.attribute())
    }
}

/// A parsed session description: what [`parse`] makes of an offer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionDescription {
    /// The `o=` line, which identifies the session and its version.
    pub origin: Origin,
    /// The `s=` text (empty when absent or blank).
    pub session_name: String,
    /// The session-level `c=` address, used by every media section that
    /// has none of its own.
    pub connection: Option<IpAddr>,
    /// The session-level direction attribute, as sent (each media section
    /// has its resolved one in [`MediaDescription::direction`]).
    pub direction: Option<Direction>,
    /// Every session-level `a=` line, in order, at most [`MAX_ATTRIBUTES`].
    pub attributes: Vec<Attribute>,
    /// The `m=` sections in order, at most [`MAX_MEDIA`]; an answer has
    /// exactly as many, in the same order (RFC 3264 §6).
    pub media: Vec<MediaDescription>,
}

/// The `o=` line: `<username> <sess-id> <sess-version> IN <type> <address>`.
///
/// The numbers are kept as digit strings: the session id as sent, the
/// version as the number it is (at most 2^64 - 1, which RFC 3264 §5 asks
/// of it; leading zeros dropped). The only thing done with them is
/// comparing one offer's with the next one's (RFC 3264 §8: an unchanged
/// version means an unchanged description).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Origin {
    /// The offerer's login, or `-`.
    pub username: String,
    /// Identifies the session for the offerer.
    pub session_id: String,
    /// Changes whenever the offerer changes its description.
    pub version: String,
    /// The originating host, an address or a name (not used to send to).
    pub address: String,
}

/// One `m=` section with the attributes callgate interprets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MediaDescription {
    /// The media type: `audio`, `video`, `image` (T.38), `application`...
    pub kind: String,
    /// The port media is sent to; 0 means a disabled stream.
    pub port: u16,
    /// The `/<number of ports>` after the port, when given (layered
    /// encodings; callgate uses one port).
    pub port_count: Option<u16>,
    /// The transport: `RTP/AVP`, `RTP/AVPF`, `RTP/SAVP`, `udptl`...
    pub proto: String,
    /// The RTP payload types in the offerer's order of preference (only for
    /// an RTP protocol, see [`MediaDescription::is_rtp`]; each 0-127).
    pub formats: Vec<u8>,
    /// For a protocol that is not RTP (`udptl t38`, `TCP/MSRP *`): its
    /// formats as sent. Empty for RTP.
    pub non_rtp_formats: Vec<String>,
    /// The `a=rtpmap` lines, in order (only read for RTP).
    pub rtpmap: Vec<RtpMap>,
    /// The `a=fmtp` lines as (payload type, parameters), in order (only
    /// read for RTP).
    pub fmtp: Vec<(u8, String)>,
    /// The direction: the media-level attribute, else the session-level
    /// one, else sendrecv.
    pub direction: Direction,
    /// `a=ptime`: the packet length in ms the offerer would like to receive.
    pub ptime: Option<u32>,
    /// `a=rtcp` (RFC 3605): the RTCP port, and address if not the RTP one.
    pub rtcp: Option<(u16, Option<IpAddr>)>,
    /// `a=rtcp-mux` (RFC 5761): RTCP may share the RTP port.
    pub rtcp_mux: bool,
    /// The media-level `c=` address (else the session-level one applies).
    pub connection: Option<IpAddr>,
    /// Every `a=` line of the section, in order, at most [`MAX_ATTRIBUTES`]
    /// (including the ones interpreted above).
    pub attributes: Vec<Attribute>,
}

impl MediaDescription {
    /// Whether the protocol is RTP-based (`RTP/AVP`, `RTP/SAVPF`,
    /// `UDP/TLS/RTP/SAVPF`...), so its formats are payload types.
    pub fn is_rtp(&self) -> bool {
        is_rtp_proto(&self.proto)
    }

    /// The first `a=rtpmap` for payload type `pt`.
    pub fn rtpmap_for(&self, pt: u8) -> Option<&RtpMap> {
        self.rtpmap.iter().find(|m| m.pt == pt)
    }

    /// The codec payload type `pt` carries here: what its `a=rtpmap` names,
    /// or else what the static type means (RFC 3551).
    pub fn codec(&self, pt: u8) -> Option<Codec> {
        match self.rtpmap_for(pt) {
            Some(map) => Codec::from_rtpmap(map),
            None => Codec::from_static_payload_type(pt),
        }
    }
}

/// Whether a transport protocol is RTP-based.
fn is_rtp_proto(proto: &str) -> bool {
    proto.split('/').any(|p| p.eq_ignore_ascii_case("RTP"))
}

/// One `a=rtpmap:<pt> <name>/<clock rate>[/<channels>]` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RtpMap {
    /// The payload type it describes, 0-127.
    pub pt: u8,
    /// The encoding name as sent (`PCMU`, `telephone-event`, `opus`...).
    pub name: String,
    /// The RTP clock rate in Hz (never 0).
    pub clock_rate: u32,
    /// The channel count, when given (never 0).
    pub channels: Option<u16>,
}

impl RtpMap {
    /// Whether this is `<name>/<clock_rate>` with one channel (or none
    /// given), the name compared case-insensitively.
    pub fn is(&self, name: &str, clock_rate: u32) -> bool {
        self.name.eq_ignore_ascii_case(name) && self.is_mono(clock_rate)
    }

    fn is_mono(&self, clock_rate: u32) -> bool {
        self.clock_rate == clock_rate && matches!(self.channels, None | Some(1))
    }
}

/// One `a=<name>[:<value>]` line, as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribute {
    /// The name, without spaces, never empty.
    pub name: String,
    /// What follows the first `:`, if there is one.
    pub value: Option<String>,
}
