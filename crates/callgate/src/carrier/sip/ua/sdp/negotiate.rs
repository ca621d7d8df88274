//! The answerer's choice (RFC 3264 §6): one audio stream, one codec, and
//! where to send RTP and RTCP.

use std::net::{IpAddr, SocketAddr};

use super::{Codec, Direction, MediaDescription, SessionDescription};

/// The packet time assumed when an offer gives none, and the one callgate
/// always sends (a=ptime is a wish, RFC 4566 §6).
const DEFAULT_PTIME_MS: u32 = 20;
/// At most this many offered formats are named in [`NegotiationError::NoCommonCodec`],
/// so a `Warning` header stays short.
const MAX_NAMED_FORMATS: usize = 16;

/// What callgate agreed to for the call's audio, taken from an offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// The codec both sides send.
    pub codec: Codec,
    /// Its payload type as the offer numbered it (a dynamic type for a
    /// codec named by `a=rtpmap` is kept: the answer must use the offer's).
    pub payload_type: u8,
    /// The offer's `telephone-event/8000` payload type (RFC 4733), if any.
    pub dtmf_payload_type: Option<u8>,
    /// Where to send RTP: the stream's `c=` (else the session's) and port.
    pub remote_rtp: SocketAddr,
    /// Where to send RTCP: `remote_rtp` under rtcp-mux, else `a=rtcp`
    /// (RFC 3605), else the RTP port + 1 (the RTP port itself if that is
    /// 65535, where no port follows).
    pub remote_rtcp: SocketAddr,
    /// Our direction: the offered one, answered.
    pub direction: Direction,
    /// Whether the offerer put us on hold: it offered sendonly or inactive,
    /// or the RFC 2543 way, a `c=0.0.0.0` (or `::`) address.
    pub on_hold: bool,
    /// The packet time the offerer asked to receive (`a=ptime`), 20 when
    /// it did not. callgate sends 20 ms packets whatever it asked.
    pub ptime_ms: u32,
    /// The index of the `m=` section chosen.
    pub media_index: usize,
    /// The indices of every other section, answered with port 0.
    pub rejected_media: Vec<usize>,
}

impl Negotiated {
    /// Whether to send RTP at all: our direction sends, and the offerer
    /// gave an address to send to (not a `c=0.0.0.0` hold).
    pub fn should_send(&self) -> bool {
        self.direction.we_send() && !self.remote_rtp.ip().is_unspecified()
    }

    /// Checks that our media address can reach the offer's: both IPv4 or
    /// both IPv6 (a hold address of `0.0.0.0` or `::` passes).
    ///
    /// # Errors
    ///
    /// [`NegotiationError::AddressFamilyMismatch`] when they differ.
    pub fn check_local_address(&self, local: IpAddr) -> Result<(), NegotiationError> {
        let remote = self.remote_rtp.ip();
        if remote.is_unspecified() || remote.is_ipv4() == local.is_ipv4() {
            return Ok(());
        }
        Err(NegotiationError::AddressFamilyMismatch { remote, local })
    }
}

/// Why callgate cannot answer an offer. The caller answers `488 Not
/// Acceptable Here`, with a `Warning` header of
/// [`warning_code`](NegotiationError::warning_code) and the `Display` text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NegotiationError {
    /// No `m=audio` section with a non-zero port.
    #[error("the offer has no audio stream with a non-zero port")]
    NoAudio,
    /// Plain-RTP audio offered, but none in a codec we accept.
    #[error(
        "no common codec in audio stream {media}: offered {}; we accept {}",
        list(.offered), list(.accepted)
    )]
    NoCommonCodec {
        /// The first plain-RTP audio section's index.
        media: usize,
        /// Its formats, as `<pt> <name>/<rate>` (or `<pt>` when unknown),
        /// at most 16.
        offered: Vec<String>,
        /// The codecs we would have taken.
        accepted: Vec<Codec>,
    },
    /// Audio offered only over a profile callgate does not speak: SRTP
    /// (`RTP/SAVP`, `RTP/SAVPF`, `UDP/TLS/RTP/SAVPF`), TCP, or not RTP.
    #[error("the offer's audio is over {0}; callgate speaks only plain RTP/AVP or RTP/AVPF")]
    UnsupportedProfile(String),
    /// The chosen stream has no `c=` address, nor has the session (only
    /// for a description not made by [`parse`](super::parse), which
    /// refuses that).
    #[error("audio stream {media} has no connection address")]
    NoConnectionAddress {
        /// The stream's index.
        media: usize,
    },
    /// The offer's media address is not of our address family.
    #[error("the offer's media address {remote} is not of the family of ours, {local}")]
    AddressFamilyMismatch {
        /// The offer's RTP address.
        remote: IpAddr,
        /// Ours.
        local: IpAddr,
    },
}

impl NegotiationError {
    /// The SIP `Warning` code for it (RFC 3261 §20.43): 304 media type not
    /// available, 305 incompatible media format, 302 incompatible transport
    /// protocol, 301 incompatible network address formats, 399 otherwise.
    pub fn warning_code(&self) -> u16 {
        match self {
            NegotiationError::NoAudio => 304,
            NegotiationError::NoCommonCodec { .. } => 305,
            NegotiationError::UnsupportedProfile(_) => 302,
            NegotiationError::AddressFamilyMismatch { .. } => 301,
            NegotiationError::NoConnectionAddress { .. } => 399,
        }
    }
}

fn list<T: std::fmt::Display>(items: &[T]) -> String {
    if items.is_empty() {
        return "nothing".to_owned();
    }
    let names: Vec<String> = items.iter().map(ToString::to_string).collect();
    names.join(", ")
}

/// Chooses the stream and codec to answer `offer` with.
///
/// The stream is the first `m=audio` with a non-zero port over `RTP/AVP`
/// or `RTP/AVPF` that carries a codec we can use; every other section is
/// rejected. The codec is `current` if that stream still offers it (a
/// re-INVITE does not switch codecs mid-call for nothing), else the first
/// in the offer's order that is in `prefer` (RFC 3264 §6.1 lets the
/// answerer pick; following the offerer's preference avoids transcoding
/// on its side).
///
/// # Errors
///
/// [`NegotiationError::NoAudio`], [`UnsupportedProfile`](NegotiationError::UnsupportedProfile)
/// (the first audio stream's profile), [`NoCommonCodec`](NegotiationError::NoCommonCodec)
/// (naming the first plain-RTP audio stream's formats) or
/// [`NoConnectionAddress`](NegotiationError::NoConnectionAddress).
pub fn negotiate(
    offer: &SessionDescription,
    prefer: &[Codec],
    current: Option<Codec>,
) -> Result<Negotiated, NegotiationError> {
    let (index, codec, payload_type) = choose(offer, prefer, current)?;
    let media = &offer.media[index];
    let ip = media
        .connection
        .or(offer.connection)
        .ok_or(NegotiationError::NoConnectionAddress { media: index })?;
    let remote_rtp = SocketAddr::new(ip, media.port);
    Ok(Negotiated {
        codec,
        payload_type,
        dtmf_payload_type: dtmf(media),
        remote_rtp,
        remote_rtcp: rtcp_address(media, remote_rtp),
        direction: media.direction.answer(),
        on_hold: matches!(media.direction, Direction::SendOnly | Direction::Inactive)
            || ip.is_unspecified(),
        ptime_ms: media.ptime.unwrap_or(DEFAULT_PTIME_MS),
        media_index: index,
        rejected_media: (0..offer.media.len()).filter(|&i| i != index).collect(),
    })
}

/// The stream, codec and payload type, or why there is none.
fn choose(
    offer: &SessionDescription,
    prefer: &[Codec],
    current: Option<Codec>,
) -> Result<(usize, Codec, u8), NegotiationError> {
    let audio: Vec<(usize, &MediaDescription)> = (offer.media.iter().enumerate())
        .filter(|(_, m)| m.kind.eq_ignore_ascii_case("audio") && m.port != 0)
        .collect();
    let (_, first) = audio.first().ok_or(NegotiationError::NoAudio)?;
    let plain: Vec<(usize, &MediaDescription)> = (audio.iter().copied())
        .filter(|(_, m)| is_plain_rtp(&m.proto))
        .collect();
    let Some(&(first_plain, first_plain_media)) = plain.first() else {
        return Err(NegotiationError::UnsupportedProfile(first.proto.clone()));
    };
    for &(i, m) in &plain {
        if let Some((codec, pt)) = pick_codec(m, prefer, current) {
            return Ok((i, codec, pt));
        }
    }
    Err(NegotiationError::NoCommonCodec {
        media: first_plain,
        offered: describe_formats(first_plain_media),
        accepted: prefer.to_vec(),
    })
}

/// RTP/AVP (RFC 3551) or its feedback extension RTP/AVPF (RFC 4585), over UDP.
fn is_plain_rtp(proto: &str) -> bool {
    proto.eq_ignore_ascii_case("RTP/AVP") || proto.eq_ignore_ascii_case("RTP/AVPF")
}

/// `current` if offered, else the first offered codec in `prefer`.
fn pick_codec(
    m: &MediaDescription,
    prefer: &[Codec],
    current: Option<Codec>,
) -> Option<(Codec, u8)> {
    let offered = || (m.formats.iter()).filter_map(|&pt| m.codec(pt).map(|c| (c, pt)));
    current
        .and_then(|cur| offered().find(|&(c, _)| c == cur))
        .or_else(|| offered().find(|(c, _)| prefer.contains(c)))
}

/// The first offered `telephone-event/8000` payload type.
fn dtmf(m: &MediaDescription) -> Option<u8> {
    let is_dtmf = |pt: u8| {
        m.rtpmap_for(pt)
            .is_some_and(|r| r.is("telephone-event", 8_000))
    };
    m.formats.iter().copied().find(|&pt| is_dtmf(pt))
}

fn rtcp_address(m: &MediaDescription, rtp: SocketAddr) -> SocketAddr {
    if m.rtcp_mux {
        return rtp;
    }
    match m.rtcp {
        Some((port, ip)) => SocketAddr::new(ip.unwrap_or(rtp.ip()), port),
        None => SocketAddr::new(rtp.ip(), m.port.checked_add(1).unwrap_or(m.port)),
    }
}

/// `<pt> <name>/<rate>` for each format (the static name when there is no
/// rtpmap), for an error message.
fn describe_formats(m: &MediaDescription) -> Vec<String> {
    let describe = |pt: u8| match m.rtpmap_for(pt) {
        Some(r) => format!("{pt} {}/{}", r.name, r.clock_rate),
        None => match static_name(pt) {
            Some(name) => format!("{pt} {name}"),
            None => pt.to_string(),
        },
    };
    m.formats
        .iter()
        .take(MAX_NAMED_FORMATS)
        .map(|&pt| describe(pt))
        .collect()
}

/// The static audio payload types of RFC 3551 §6 still seen in offers.
fn static_name(pt: u8) -> Option<&'static str> {
    Some(match pt {
        0 => "PCMU/8000",
        3 => "GSM/8000",
        4 => "G723/8000",
        8 => "PCMA/8000",
        9 => "G722/8000",
        13 => "CN/8000",
        18 => "G729/8000",
        _ => return None,
    })
}
