//! The parser: untrusted bytes to a [`SessionDescription`].
//!
//! Line-oriented (`<letter>=<value>`, CRLF or bare LF, trailing spaces and
//! tabs ignored, blank lines skipped). Strict where a mistake would send
//! media to the wrong place (addresses, ports, payload types, the
//! attributes interpreted) and lenient where it cannot matter (unknown
//! attributes, `t=`, `b=`, the order of session-level lines). Every size is
//! bounded before anything is built from it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{Attribute, Direction, MediaDescription, Origin, RtpMap, SessionDescription};

/// The largest body accepted: real offers are under 2 KiB, even with
/// dozens of codecs.
pub const MAX_BODY_BYTES: usize = 16 * 1024;
/// The most `m=` sections accepted in one description.
pub const MAX_MEDIA: usize = 64;
/// The most `a=` lines accepted in one section (session level or media).
pub const MAX_ATTRIBUTES: usize = 256;
/// The longest media type, protocol or format accepted on an `m=` line
/// (the longest registered ones are under 20 bytes). It also bounds what an
/// answer echoes back for a rejected stream.
pub const MAX_TOKEN_BYTES: usize = 32;

/// Why a body is not a session description callgate can read. The caller
/// answers `400 Bad Request`; the `Display` text names the line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SdpError {
    /// The body is over [`MAX_BODY_BYTES`].
    #[error("SDP body of {len} bytes is over the {max}-byte limit")]
    TooLarge {
        /// The body's length.
        len: usize,
        /// [`MAX_BODY_BYTES`].
        max: usize,
    },
    /// The body is not UTF-8 (callgate supports no `a=charset`).
    #[error("SDP body is not UTF-8 (at byte {at})")]
    NotUtf8 {
        /// The offset of the first byte that is not.
        at: usize,
    },
    /// The first non-blank line is not `v=`.
    #[error("SDP body does not start with a v= line")]
    MissingVersion,
    /// A line that is malformed or out of place.
    #[error("SDP line {line}: {why}")]
    BadLine {
        /// 1-based, counting blank lines.
        line: usize,
        /// What is wrong with it.
        why: &'static str,
    },
    /// There is no `o=` line before the first `m=` line.
    #[error("SDP has no o= line")]
    MissingOrigin,
    /// A media section with a non-zero port has no `c=` line, and neither
    /// has the session (RFC 4566 §5.7).
    #[error("SDP media section {media} (line {line}) has no c= line, nor has the session")]
    MissingConnection {
        /// The section's 0-based index.
        media: usize,
        /// Its `m=` line.
        line: usize,
    },
    /// More than [`MAX_MEDIA`] `m=` sections.
    #[error("SDP line {line}: more than {max} media sections")]
    TooManyMedia {
        /// The first `m=` line over the limit.
        line: usize,
        /// [`MAX_MEDIA`].
        max: usize,
    },
    /// More than [`MAX_ATTRIBUTES`] `a=` lines in one section.
    #[error("SDP line {line}: more than {max} attributes in one section")]
    TooManyAttributes {
        /// The first `a=` line over the limit.
        line: usize,
        /// [`MAX_ATTRIBUTES`].
        max: usize,
    },
}

/// What is wrong with one line, before its number is attached.
type Why = &'static str;

/// Parses an SDP body (RFC 4566).
///
/// # Errors
///
/// An [`SdpError`] saying what is wrong and on which line: a body over the
/// limits, not UTF-8, without `v=0` first or without `o=`, a malformed
/// line, or a used media section without a connection address.
pub fn parse(body: &[u8]) -> Result<SessionDescription, SdpError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(SdpError::TooLarge {
            len: body.len(),
            max: MAX_BODY_BYTES,
        });
    }
    let text = std::str::from_utf8(body).map_err(|e| SdpError::NotUtf8 {
        at: e.valid_up_to(),
    })?;
    let mut lines = text
        .split('\n')
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_end_matches([' ', '\t', '\r'])))
        .filter(|(_, l)| !l.is_empty());
    let (n, first) = lines.next().ok_or(SdpError::MissingVersion)?;
    let version = first.strip_prefix("v=").ok_or(SdpError::MissingVersion)?;
    if version != "0" {
        return Err(bad(n, "the SDP version is not 0"));
    }
    let mut builder = Builder::default();
    for (n, line) in lines {
        builder.line(n, line)?;
    }
    builder.finish()
}

fn bad(line: usize, why: Why) -> SdpError {
    SdpError::BadLine { line, why }
}

/// The description read so far.
#[derive(Default)]
struct Builder {
    origin: Option<Origin>,
    session_name: Option<String>,
    connection: Option<IpAddr>,
    direction: Option<Direction>,
    attributes: Vec<Attribute>,
    sections: Vec<Section>,
}

/// A media section read so far: its direction is resolved at the end,
/// against the session's.
struct Section {
    media: MediaDescription,
    direction: Option<Direction>,
    line: usize,
}

impl Builder {
    fn line(&mut self, n: usize, line: &str) -> Result<(), SdpError> {
        let (kind, value) = split_line(line).map_err(|why| bad(n, why))?;
        let result = match kind {
            'm' => return self.media_line(n, value),
            'a' => return self.attribute(n, value),
            'c' => self.connection_line(value),
            // Title, bandwidth, key: nothing callgate uses.
            'i' | 'b' | 'k' => Ok(()),
            'v' => Err("a second v= line"),
            'o' | 's' | 'u' | 'e' | 'p' | 't' | 'r' | 'z' => self.session_line(kind, value),
            _ => Err("an unknown line type (RFC 4566 §5 says to refuse the description)"),
        };
        result.map_err(|why| bad(n, why))
    }

    fn session_line(&mut self, kind: char, value: &str) -> Result<(), Why> {
        if !self.sections.is_empty() {
            return Err("a session-level line after the first m= line");
        }
        match kind {
            'o' => set_once(&mut self.origin, origin(value)?, "a second o= line"),
            's' => set_once(&mut self.session_name, value.to_owned(), "a second s= line"),
            // URI, e-mail, phone, timing, repeat, zones: nothing to use.
            _ => Ok(()),
        }
    }

    fn media_line(&mut self, n: usize, value: &str) -> Result<(), SdpError> {
        if self.sections.len() >= MAX_MEDIA {
            return Err(SdpError::TooManyMedia {
                line: n,
                max: MAX_MEDIA,
            });
        }
        let media = media(value).map_err(|why| bad(n, why))?;
        self.sections.push(Section {
            media,
            direction: None,
            line: n,
        });
        Ok(())
    }

    fn connection_line(&mut self, value: &str) -> Result<(), Why> {
        let ip = connection(value)?;
        let slot = match self.sections.last_mut() {
            Some(s) => &mut s.media.connection,
            None => &mut self.connection,
        };
        set_once(slot, ip, "a second c= line in one section")
    }

    fn attribute(&mut self, n: usize, value: &str) -> Result<(), SdpError> {
        let count = self
            .sections
            .last()
            .map_or(self.attributes.len(), |s| s.media.attributes.len());
        if count >= MAX_ATTRIBUTES {
            return Err(SdpError::TooManyAttributes {
                line: n,
                max: MAX_ATTRIBUTES,
            });
        }
        let attr = split_attribute(value).map_err(|why| bad(n, why))?;
        let result = match self.sections.last_mut() {
            Some(s) => s.attribute(attr),
            None => self.session_attribute(attr),
        };
        result.map_err(|why| bad(n, why))
    }

    /// A session-level attribute: only a direction is interpreted there.
    fn session_attribute(&mut self, attr: Attribute) -> Result<(), Why> {
        set_direction(&mut self.direction, &attr.name)?;
        self.attributes.push(attr);
        Ok(())
    }

    fn finish(self) -> Result<SessionDescription, SdpError> {
        let Builder {
            origin,
            session_name,
            connection,
            direction,
            attributes,
            sections,
        } = self;
        let origin = origin.ok_or(SdpError::MissingOrigin)?;
        let mut media = Vec::with_capacity(sections.len());
        for (i, s) in sections.into_iter().enumerate() {
            if s.media.port != 0 && s.media.connection.is_none() && connection.is_none() {
                return Err(SdpError::MissingConnection {
                    media: i,
                    line: s.line,
                });
            }
            let mut m = s.media;
            m.direction = s.direction.or(direction).unwrap_or_default();
            media.push(m);
        }
        Ok(SessionDescription {
            origin,
            session_name: session_name.unwrap_or_default(),
            connection,
            direction,
            attributes,
            media,
        })
    }
}

impl Section {
    /// Interprets a media-level attribute callgate uses, and keeps it.
    fn attribute(&mut self, attr: Attribute) -> Result<(), Why> {
        let m = &mut self.media;
        let value = attr.value.as_deref();
        match attr.name.to_ascii_lowercase().as_str() {
            "rtpmap" if m.is_rtp() => m.rtpmap.push(rtpmap(value)?),
            "fmtp" if m.is_rtp() => m.fmtp.push(fmtp(value)?),
            "ptime" => m.ptime = Some(ptime(value)?),
            "rtcp" => m.rtcp = Some(rtcp(value)?),
            "rtcp-mux" => m.rtcp_mux = true,
            name => set_direction(&mut self.direction, name)?,
        }
        m.attributes.push(attr);
        Ok(())
    }
}

/// Stores a field that may appear once per section.
fn set_once<T>(slot: &mut Option<T>, value: T, twice: Why) -> Result<(), Why> {
    if slot.is_some() {
        return Err(twice);
    }
    *slot = Some(value);
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

/// `<letter>=<value>`, with no control characters but tabs.
fn split_line(line: &str) -> Result<(char, &str), Why> {
    let bytes = line.as_bytes();
    if bytes.len() < 2 || !bytes[0].is_ascii_lowercase() || bytes[1] != b'=' {
        return Err("not a `<letter>=<value>` line");
    }
    if bytes.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err("a control character inside the line");
    }
    Ok((char::from(bytes[0]), &line[2..]))
}

/// `o=<username> <sess-id> <sess-version> <nettype> <addrtype> <address>`.
fn origin(value: &str) -> Result<Origin, Why> {
    const WHY: Why = "o= needs `<username> <sess-id> <sess-version> IN <IP4|IP6> <address>`";
    let mut t = value.split_ascii_whitespace();
    let mut next = || t.next().map(str::to_owned).ok_or(WHY);
    let (username, session_id, version) = (next()?, next()?, next()?);
    let (_net, _type, address) = (next()?, next()?, next()?);
    if t.next().is_some() {
        return Err(WHY);
    }
    Ok(Origin {
        username,
        session_id,
        version,
        address,
    })
}

/// `c=IN <IP4|IP6> <address>[/<ttl>][/<count>]`.
fn connection(value: &str) -> Result<IpAddr, Why> {
    let mut t = value.split_ascii_whitespace();
    match (t.next(), t.next(), t.next(), t.next()) {
        (Some(net), Some(kind), Some(addr), None) => address(net, kind, addr),
        _ => Err("c= needs `IN <IP4|IP6> <address>`"),
    }
}

/// An IP address with its network and address types; a multicast address
/// may carry a `/<ttl>` and a `/<count>` suffix, which are dropped.
fn address(net: &str, kind: &str, addr: &str) -> Result<IpAddr, Why> {
    if !net.eq_ignore_ascii_case("IN") {
        return Err("the network type is not IN");
    }
    let (host, suffix) = addr
        .split_once('/')
        .map_or((addr, None), |(h, s)| (h, Some(s)));
    let ip = if kind.eq_ignore_ascii_case("IP4") {
        host.parse::<Ipv4Addr>()
            .map(IpAddr::V4)
            .map_err(|_| "not an IPv4 address (host names are not supported)")?
    } else if kind.eq_ignore_ascii_case("IP6") {
        host.parse::<Ipv6Addr>()
            .map(IpAddr::V6)
            .map_err(|_| "not an IPv6 address (host names are not supported)")?
    } else {
        return Err("the address type is neither IP4 nor IP6");
    };
    match suffix {
        Some(_) if !ip.is_multicast() => Err("a `/` suffix after a unicast address"),
        Some(s) if !s.split('/').all(is_digits) => Err("a malformed multicast `/` suffix"),
        _ => Ok(ip),
    }
}

/// `m=<media> <port>[/<count>] <proto> <fmt> ...`.
fn media(value: &str) -> Result<MediaDescription, Why> {
    let mut t = value.split_ascii_whitespace();
    let kind = token(t.next(), "an m= line without a media type")?;
    let (port, port_count) = ports(t.next().ok_or("an m= line without a port")?)?;
    let proto = token(t.next(), "an m= line without a protocol")?;
    let mut m = MediaDescription {
        kind,
        port,
        port_count,
        proto,
        ..MediaDescription::default()
    };
    let rtp = m.is_rtp();
    for format in t {
        if rtp {
            let pt = payload_type(format).ok_or("an RTP format is not a payload type 0-127")?;
            m.formats.push(pt);
        } else {
            m.non_rtp_formats.push(token(Some(format), "")?);
        }
    }
    // A disabled stream is tolerated without formats (some answerers
    // write it so); a used one needs at least one.
    if port != 0 && m.formats.is_empty() && m.non_rtp_formats.is_empty() {
        return Err("an m= line without formats");
    }
    Ok(m)
}

/// An `m=` field, bounded by [`MAX_TOKEN_BYTES`].
fn token(t: Option<&str>, missing: Why) -> Result<String, Why> {
    match t {
        None => Err(missing),
        Some(t) if t.len() > MAX_TOKEN_BYTES => Err("an m= field longer than 32 bytes"),
        Some(t) => Ok(t.to_owned()),
    }
}

/// `<port>[/<number of ports>]`.
fn ports(t: &str) -> Result<(u16, Option<u16>), Why> {
    let (port, count) = t.split_once('/').map_or((t, None), |(p, c)| (p, Some(c)));
    let port = number(port).ok_or("the m= port is not a number 0-65535")?;
    let count = match count {
        None => None,
        Some(c) => Some(
            number(c)
                .filter(|&c: &u16| c > 0)
                .ok_or("the m= port count is not a number 1-65535")?,
        ),
    };
    Ok((port, count))
}

/// `<name>[:<value>]`.
fn split_attribute(value: &str) -> Result<Attribute, Why> {
    let (name, value) = value
        .split_once(':')
        .map_or((value, None), |(n, v)| (n, Some(v.to_owned())));
    if name.is_empty() || name.contains([' ', '\t']) {
        return Err("an attribute name that is empty or has spaces");
    }
    Ok(Attribute {
        name: name.to_owned(),
        value,
    })
}

/// `a=rtpmap:<pt> <name>/<clock rate>[/<channels>]`.
fn rtpmap(value: Option<&str>) -> Result<RtpMap, Why> {
    const WHY: Why = "a=rtpmap needs `<payload type> <name>/<clock rate>[/<channels>]`";
    let (pt, encoding) = value.and_then(|v| v.split_once(' ')).ok_or(WHY)?;
    let pt = payload_type(pt).ok_or("an a=rtpmap payload type is not a number 0-127")?;
    let mut parts = encoding.trim_start().split('/');
    let name = parts
        .next()
        .filter(|n| !n.is_empty() && !n.contains([' ', '\t']));
    let name = name.ok_or(WHY)?.to_owned();
    let clock_rate = parts.next().and_then(number).filter(|&r: &u32| r > 0);
    let clock_rate = clock_rate.ok_or("an a=rtpmap clock rate is not a positive number")?;
    let channels = match parts.next() {
        None => None,
        Some(c) => Some(
            number(c)
                .filter(|&c: &u16| c > 0)
                .ok_or("an a=rtpmap channel count is not a positive number")?,
        ),
    };
    if parts.next().is_some() {
        return Err(WHY);
    }
    Ok(RtpMap {
        pt,
        name,
        clock_rate,
        channels,
    })
}

/// `a=fmtp:<pt> <parameters>` (parameters may be empty).
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

/// `a=rtcp:<port> [IN <IP4|IP6> <address>]` (RFC 3605).
fn rtcp(value: Option<&str>) -> Result<(u16, Option<IpAddr>), Why> {
    const WHY: Why = "a=rtcp needs `<port> [IN <IP4|IP6> <address>]`";
    let mut t = value.ok_or(WHY)?.split_ascii_whitespace();
    let port = t.next().and_then(number).ok_or(WHY)?;
    match (t.next(), t.next(), t.next(), t.next()) {
        (None, ..) => Ok((port, None)),
        (Some(net), Some(kind), Some(addr), None) => Ok((port, Some(address(net, kind, addr)?))),
        _ => Err(WHY),
    }
}

/// An RTP payload type: a decimal number 0-127.
fn payload_type(t: &str) -> Option<u8> {
    number(t).filter(|&pt: &u8| pt <= 127)
}

/// A decimal number of plain digits (no sign, no spaces), in range for `T`.
fn number<T: std::str::FromStr>(t: &str) -> Option<T> {
    if is_digits(t) { t.parse().ok() } else { None }
}

fn is_digits(t: &str) -> bool {
    !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())
}
