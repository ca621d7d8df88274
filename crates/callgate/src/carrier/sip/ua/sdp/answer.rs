//! The answer body (RFC 3264 §6): one `m=` line per offered one, in order,
//! built as an `sdp-types` session and written by the crate. What it says
//! is ours; only the text is the crate's.

use std::borrow::Cow;
use std::net::IpAddr;

use super::{Codec, MediaDescription, Negotiated, SessionDescription};

/// The RFC 4733 events we receive: DTMF digits 0-9, `*`, `#`, A-D, flash.
const DTMF_EVENTS: &str = "0-16";
/// The packet time we send, and ask for.
const PTIME_MS: u32 = 20;

/// What the answer says about us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerParams<'a> {
    /// The `o=` username (spaces and control characters become `-`; empty
    /// becomes `-`).
    pub origin_username: &'a str,
    /// The `o=` session id: the same for every answer of one call.
    pub session_id: u64,
    /// The `o=` version: the caller increments it on every answer that
    /// differs from the previous one (RFC 3264 §8), and only then.
    pub version: u64,
    /// Our media address, for `o=` and `c=` (see
    /// [`Negotiated::check_local_address`]).
    pub local_ip: IpAddr,
    /// Our RTP port (RTCP on the next one, or on the same one when the
    /// offer allows rtcp-mux).
    pub local_rtp_port: u16,
    /// The `s=` text (control characters become spaces; empty becomes `-`).
    pub session_name: &'a str,
}

/// The complete answer to `offer`, as `n` (from [`negotiate`] on that
/// offer) decided, with CRLF line endings.
///
/// `v=`, `o=`, `s=`, `c=`, `t=0 0`, then for each offered `m=` line, in
/// order: the chosen one as `m=audio <port> <proto> <pt> [<dtmf pt>]` (the
/// offer's `RTP/AVP` or `RTP/AVPF`: RFC 3264 §6 keeps the transport) with
/// `a=rtpmap` for each format, `a=fmtp:<dtmf pt> 0-16`, `a=ptime:20`, our
/// direction, and `a=rtcp-mux` only if the offer has it — we can always
/// mux, because the RTP socket tells RTCP from RTP by payload type (RFC
/// 5761 §4); every other one with port 0 and the offer's first format (for
/// a disabled stream offered without one, none: `m=<media> 0 <proto> `,
/// the crate writing its space before the empty format list).
///
/// [`negotiate`]: super::negotiate
pub fn answer(offer: &SessionDescription, n: &Negotiated, p: &AnswerParams<'_>) -> String {
    let ip = p.local_ip;
    let mut origin = sdp_types::Origin::with_ip_addr(p.session_id, p.version, ip);
    origin.set_username(username(p.origin_username));
    let mut session = sdp_types::Session::new(origin, session_name(p.session_name));
    session.connection = Some(sdp_types::Connection::from_ip_addr(ip));
    session.times = vec![sdp_types::Time::new(0, 0)];
    session.medias = (offer.media.iter().enumerate())
        .map(|(i, m)| {
            if i == n.media_index {
                chosen(m, n, p.local_rtp_port)
            } else {
                rejected(m)
            }
        })
        .collect();
    let mut out = Vec::with_capacity(256 + 48 * offer.media.len());
    // Writing to a Vec cannot fail.
    let _ = session.write(&mut out);
    // Every field written is a &str, so the text is UTF-8.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The accepted stream.
fn chosen(m: &MediaDescription, n: &Negotiated, port: u16) -> sdp_types::Media {
    let pt = n.payload_type;
    let dtmf = n.dtmf_payload_type.filter(|&d| d != pt);
    let formats = match dtmf {
        Some(d) => format!("{pt} {d}"),
        None => pt.to_string(),
    };
    let mut media = stream(m, port, formats);
    let codec = sdp_types::RtpMap::new(pt, n.codec.name(), Codec::CLOCK_RATE);
    media.add_attribute(codec);
    if let Some(d) = dtmf {
        media.add_attribute(sdp_types::RtpMap::new(d, "telephone-event", 8_000));
        media.add_attribute_with_value("fmtp", format_args!("{d} {DTMF_EVENTS}"));
    }
    media.add_attribute_with_value("ptime", PTIME_MS);
    media.add_attribute_from_str(n.direction);
    if m.rtcp_mux {
        media.add_attribute_from_str("rtcp-mux");
    }
    media
}

/// A rejected stream: port 0, the offer's first format (RFC 3264 §6).
fn rejected(m: &MediaDescription) -> sdp_types::Media {
    let first = match (m.formats.first(), m.non_rtp_formats.first()) {
        (Some(pt), _) => pt.to_string(),
        (None, Some(f)) => f.clone(),
        (None, None) => String::new(),
    };
    stream(m, 0, first)
}

/// An `m=` section with the offer's media type and protocol as written
/// (RFC 3264 §6 keeps them), no attributes yet.
fn stream(m: &MediaDescription, port: u16, formats: String) -> sdp_types::Media {
    sdp_types::Media {
        media: m.kind.clone(),
        port,
        num_ports: None,
        proto: m.proto.clone(),
        fmt: formats,
        media_title: None,
        connections: Vec::new(),
        bandwidths: Vec::new(),
        key: None,
        attributes: Vec::new(),
    }
}

/// One `o=` token: no spaces or control characters, never empty.
fn username(name: &str) -> Cow<'_, str> {
    let bad = |c: char| c.is_whitespace() || c.is_control();
    match name {
        "" => Cow::Borrowed("-"),
        _ if name.contains(bad) => Cow::Owned(name.replace(bad, "-")),
        _ => Cow::Borrowed(name),
    }
}

/// The `s=` text: one line, never empty.
fn session_name(name: &str) -> Cow<'_, str> {
    let clean: Cow<'_, str> = if name.contains(char::is_control) {
        Cow::Owned(name.replace(char::is_control, " "))
    } else {
        Cow::Borrowed(name)
    };
    if clean.trim().is_empty() {
        Cow::Borrowed("-")
    } else {
        clean
    }
}
