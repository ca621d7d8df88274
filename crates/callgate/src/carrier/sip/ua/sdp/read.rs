//! From the `sdp-types` model to ours: the fields callgate interprets,
//! checked where a mistake would send media to the wrong place.
//!
//! The crate has split every line into its fields; this reads them. It
//! keeps the crate's parsers for `a=rtpmap` and `a=rtcp` and for
//! connection addresses, and adds what callgate needs on top: addresses
//! that are IP literals of the family their line names (a `/` suffix only
//! on multicast), RTP formats that are payload types 0-127, an rtpmap
//! clock rate above 0 and a channel count that is a positive number, `m=`
//! fields of at most [`MAX_TOKEN_BYTES`], one `c=` per section, one
//! direction per section, and a connection address for every used
//! stream. `a=fmtp` (kept as written) and `a=ptime` (which the crate does
//! not type) are read here.

use std::net::IpAddr;

use sdp_types::{AddrType, ConnectionAddress, ConnectionAddressError, NetType};

use super::error::{MAX_TOKEN_BYTES, SdpError, Why, bad};
use super::screen::{Screened, SectionLines, is_digits, number};
use super::{Attribute, Direction, MediaDescription, Origin, RtpMap, SessionDescription};

/// Our description of what the crate parsed from `screened`.
///
/// # Errors
///
/// [`SdpError::MissingOrigin`], [`SdpError::MissingConnection`], or a
/// [`SdpError::BadLine`] naming the line whose value we refuse.
pub(super) fn describe(
    session: sdp_types::Session,
    screened: &Screened<'_>,
) -> Result<SessionDescription, SdpError> {
    if !screened.has_origin {
        return Err(SdpError::MissingOrigin);
    }
    let lines = |i: usize| screened.section(i);
    let level = lines(0);
    let connection = match &session.connection {
        Some(c) => Some(connection(c).map_err(|why| bad(level.connection(0), why))?),
        None => None,
    };
    let (direction, attributes) = session_attributes(session.attributes, level)?;
    let mut media = Vec::with_capacity(session.medias.len());
    for (i, m) in session.medias.into_iter().enumerate() {
        let Section {
            media: mut m,
            direction_set,
        } = section(m, lines(i + 1)).map_err(|(line, why)| bad(line, why))?;
        if m.port != 0 && m.connection.is_none() && connection.is_none() {
            let line = lines(i + 1).start();
            return Err(SdpError::MissingConnection { media: i, line });
        }
        m.direction = direction_set.or(direction).unwrap_or_default();
        media.push(m);
    }
    Ok(SessionDescription {
        origin: origin(session.origin),
        session_name: session.session_name,
        connection,
        direction,
        attributes,
        media,
    })
}

/// The session-level attributes, and the direction among them.
fn session_attributes(
    raw: Vec<sdp_types::Attribute>,
    lines: SectionLines<'_>,
) -> Result<(Option<Direction>, Vec<Attribute>), SdpError> {
    let mut direction = None;
    let mut attributes = Vec::with_capacity(raw.len());
    for (j, raw) in raw.into_iter().enumerate() {
        let at = |why| bad(lines.attribute(j), why);
        let attr = attribute(raw).map_err(at)?;
        set_direction(&mut direction, &attr.name).map_err(at)?;
        attributes.push(attr);
    }
    Ok((direction, attributes))
}

/// The `o=` line, its numbers as digit strings, `-` for no username.
fn origin(o: sdp_types::Origin) -> Origin {
    Origin {
        username: o.username.unwrap_or_else(|| "-".to_owned()),
        session_id: o.sess_id,
        version: o.sess_version.to_string(),
        address: o.unicast_address,
    }
}

/// A media section read, its own direction attribute (if any) kept apart
/// until the session's is known.
struct Section {
    media: MediaDescription,
    direction_set: Option<Direction>,
}

/// One `m=` section; an error names its line.
fn section(m: sdp_types::Media, lines: SectionLines<'_>) -> Result<Section, (usize, Why)> {
    let at = |why| (lines.start(), why);
    let mut media = MediaDescription {
        kind: token(m.media, "an m= line without a media type").map_err(at)?,
        port: m.port,
        port_count: m.num_ports,
        proto: token(m.proto, "an m= line without a protocol").map_err(at)?,
        ..MediaDescription::default()
    };
    if !lines.formatless() {
        formats(&mut media, &m.fmt).map_err(at)?;
    }
    if m.connections.len() > 1 {
        return Err((lines.connection(1), "a second c= line in one section"));
    }
    if let Some(c) = m.connections.first() {
        media.connection = Some(connection(c).map_err(|why| (lines.connection(0), why))?);
    }
    let mut direction_set = None;
    for (j, raw) in m.attributes.into_iter().enumerate() {
        media_attribute(&mut media, &mut direction_set, raw)
            .map_err(|why| (lines.attribute(j), why))?;
    }
    Ok(Section {
        media,
        direction_set,
    })
}

/// The `m=` formats: payload types for RTP, bounded tokens otherwise.
fn formats(m: &mut MediaDescription, fmt: &str) -> Result<(), Why> {
    let rtp = m.is_rtp();
    for format in fmt.split_ascii_whitespace() {
        if rtp {
            let pt = payload_type(format).ok_or("an RTP format is not a payload type 0-127")?;
            m.formats.push(pt);
        } else {
            m.non_rtp_formats.push(token(format.to_owned(), "")?);
        }
    }
    if m.port != 0 && m.formats.is_empty() && m.non_rtp_formats.is_empty() {
        return Err("an m= line without formats");
    }
    Ok(())
}

/// An `m=` field, never empty, bounded by [`MAX_TOKEN_BYTES`], without a
/// tab (the crate splits the line at spaces only, so a tab would stay
/// inside a field and be echoed in our answer).
fn token(t: String, missing: Why) -> Result<String, Why> {
    match t.len() {
        0 => Err(missing),
        len if len > MAX_TOKEN_BYTES => Err("an m= field longer than 32 bytes"),
        _ if t.contains('\t') => Err("a tab inside an m= field"),
        _ => Ok(t),
    }
}

/// A `c=` line's address.
fn connection(c: &sdp_types::Connection) -> Result<IpAddr, Why> {
    ip_address(&c.nettype, &c.addrtype, c.try_address())
}

/// An IP literal of the family its line names; a `/<ttl>` or `/<count>`
/// suffix (which is dropped) only after a multicast address.
fn ip_address(
    net: &NetType,
    kind: &AddrType,
    parsed: Result<ConnectionAddress, ConnectionAddressError>,
) -> Result<IpAddr, Why> {
    if *net != NetType::In {
        return Err("the network type is not IN");
    }
    let not_family = match kind {
        AddrType::Ip4 => "not an IPv4 address (host names are not supported)",
        AddrType::Ip6 => "not an IPv6 address (host names are not supported)",
        AddrType::Other(_) => return Err("the address type is neither IP4 nor IP6"),
    };
    let address = parsed.map_err(|e| match e {
        ConnectionAddressError::InvalidAddress(_) => not_family,
        _ => "a malformed multicast `/` suffix",
    })?;
    if address.ip.is_ipv4() != (*kind == AddrType::Ip4) {
        return Err(not_family);
    }
    if (address.ttl.is_some() || address.count.is_some()) && !address.ip.is_multicast() {
        return Err("a `/` suffix after a unicast address");
    }
    Ok(address.ip)
}

/// `<name>[:<value>]`, as the crate split it; the name never empty and
/// without spaces.
fn attribute(raw: sdp_types::Attribute) -> Result<Attribute, Why> {
    if raw.attribute.is_empty() || raw.attribute.contains([' ', '\t']) {
        return Err("an attribute name that is empty or has spaces");
    }
    Ok(Attribute {
        name: raw.attribute,
        value: raw.value,
    })
}

/// Interprets a media-level attribute callgate uses, and keeps it.
fn media_attribute(
    m: &mut MediaDescription,
    direction: &mut Option<Direction>,
    raw: sdp_types::Attribute,
) -> Result<(), Why> {
    let attr = attribute(raw)?;
    let value = attr.value.as_deref();
    let is = |name: &str| attr.name.eq_ignore_ascii_case(name);
    if is("rtpmap") && m.is_rtp() {
        m.rtpmap.push(rtpmap(value)?);
    } else if is("fmtp") && m.is_rtp() {
        m.fmtp.push(fmtp(value)?);
    } else if is("ptime") {
        m.ptime = Some(ptime(value)?);
    } else if is("rtcp") {
        m.rtcp = Some(rtcp(value)?);
    } else if is("rtcp-mux") {
        m.rtcp_mux = true;
    } else {
        set_direction(direction, &attr.name)?;
    }
    m.attributes.push(attr);
    Ok(())
}

/// Records a direction attribute, if `name` is one. Repeating the same one
/// is tolerated; two different ones in a section are refused.
fn set_direction(slot: &mut Option<Direction>, name: &str) -> Result<(), Why> {
    let Some(new) = Direction::from_attribute(name) else {
        return Ok(());
    };
    match *slot {
        Some(old) if old != new => Err("two different direction attributes in one section"),
        _ => {
            *slot = Some(new);
            Ok(())
        }
    }
}

/// `a=rtpmap:<pt> <name>/<clock rate>[/<channels>]`, by the crate's parser.
fn rtpmap(value: Option<&str>) -> Result<RtpMap, Why> {
    const WHY: Why = "a=rtpmap needs `<payload type> <name>/<clock rate>[/<channels>]`";
    let value = value.unwrap_or_default();
    // The crate's integer parse takes a sign; these numbers are digits.
    let (pt, encoding) = value.split_once(' ').ok_or(WHY)?;
    if payload_type(pt).is_none() {
        return Err("an a=rtpmap payload type is not a number 0-127");
    }
    let clock = encoding.split('/').nth(1).unwrap_or_default();
    if !is_digits(clock) {
        return Err("an a=rtpmap clock rate is not a positive number");
    }
    let map: sdp_types::RtpMap = value.parse().map_err(|_| WHY)?;
    let trimmed = map.encoding_name.trim_start();
    if trimmed.is_empty() || trimmed.contains([' ', '\t']) {
        return Err(WHY);
    }
    let name = match trimmed.len() == map.encoding_name.len() {
        true => map.encoding_name,
        false => trimmed.to_owned(),
    };
    if map.clock_rate == 0 {
        return Err("an a=rtpmap clock rate is not a positive number");
    }
    let channels = match map.encoding_params.as_deref() {
        None => None,
        Some(c) => Some(
            number(c)
                .filter(|&c: &u16| c > 0)
                .ok_or("an a=rtpmap channel count is not a positive number")?,
        ),
    };
    Ok(RtpMap {
        pt: map.payload_type,
        name,
        clock_rate: map.clock_rate,
        channels,
    })
}

/// `a=fmtp:<pt> <parameters>` (parameters may be empty), kept as written:
/// the crate's parser would split them at `;` and lose their spacing.
fn fmtp(value: Option<&str>) -> Result<(u8, String), Why> {
    let value = value.ok_or("a=fmtp needs `<payload type> <parameters>`")?;
    let (pt, params) = value.split_once(' ').unwrap_or((value, ""));
    let pt = payload_type(pt).ok_or("an a=fmtp format is not a payload type 0-127")?;
    Ok((pt, params.trim_start().to_owned()))
}

/// `a=ptime:<ms>`; a fraction (`20.0`, seen in the wild) is dropped.
fn ptime(value: Option<&str>) -> Result<u32, Why> {
    const WHY: Why = "a=ptime is not a positive number of milliseconds";
    let value = value.ok_or(WHY)?;
    let whole = match value.split_once('.') {
        Some((whole, fraction)) if is_digits(fraction) => whole,
        Some(_) => return Err(WHY),
        None => value,
    };
    number(whole).filter(|&p: &u32| p > 0).ok_or(WHY)
}

/// `a=rtcp:<port> [IN <IP4|IP6> <address>]` (RFC 3605), by the crate's
/// parser.
fn rtcp(value: Option<&str>) -> Result<(u16, Option<IpAddr>), Why> {
    const WHY: Why = "a=rtcp needs `<port> [IN <IP4|IP6> <address>]`";
    let value = value.ok_or(WHY)?;
    let port = value.split(' ').find(|t| !t.is_empty()).unwrap_or_default();
    if number::<u16>(port).is_none() {
        return Err(WHY);
    }
    let rtcp: sdp_types::Rtcp = value.parse().map_err(|_| WHY)?;
    let address = match (&rtcp.nettype, &rtcp.addrtype, rtcp.try_address()) {
        (None, _, None) => None,
        (Some(net), Some(kind), Some(parsed)) => Some(ip_address(net, kind, parsed)?),
        _ => return Err(WHY),
    };
    Ok((rtcp.port, address))
}

/// An RTP payload type: a decimal number 0-127.
fn payload_type(t: &str) -> Option<u8> {
    number(t).filter(|&pt: &u8| pt <= 127)
}
