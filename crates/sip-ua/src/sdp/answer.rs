//! The answer body (RFC 3264 §6): one `m=` line per offered one, in order.

use std::borrow::Cow;
use std::fmt::{self, Write as _};
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
/// 5761 §4); every other one with port 0 and the offer's first format.
///
/// [`negotiate`]: super::negotiate
pub fn answer(offer: &SessionDescription, n: &Negotiated, p: &AnswerParams<'_>) -> String {
    let mut out = String::with_capacity(256 + 48 * offer.media.len());
    let addr = Address(p.local_ip);
    let user = username(p.origin_username);
    line(&mut out, format_args!("v=0"));
    line(
        &mut out,
        format_args!("o={user} {} {} {addr}", p.session_id, p.version),
    );
    line(&mut out, format_args!("s={}", session_name(p.session_name)));
    line(&mut out, format_args!("c={addr}"));
    line(&mut out, format_args!("t=0 0"));
    for (i, m) in offer.media.iter().enumerate() {
        if i == n.media_index {
            chosen(&mut out, m, n, p.local_rtp_port);
        } else {
            rejected(&mut out, m);
        }
    }
    out
}

/// The accepted stream.
fn chosen(out: &mut String, m: &MediaDescription, n: &Negotiated, port: u16) {
    let pt = n.payload_type;
    let dtmf = n.dtmf_payload_type.filter(|&d| d != pt);
    let dtmf_format = dtmf.map(|d| format!(" {d}")).unwrap_or_default();
    line(
        out,
        format_args!("m={} {port} {} {pt}{dtmf_format}", m.kind, m.proto),
    );
    line(
        out,
        format_args!("a=rtpmap:{pt} {}/{}", n.codec.name(), Codec::CLOCK_RATE),
    );
    if let Some(d) = dtmf {
        line(out, format_args!("a=rtpmap:{d} telephone-event/8000"));
        line(out, format_args!("a=fmtp:{d} {DTMF_EVENTS}"));
    }
    line(out, format_args!("a=ptime:{PTIME_MS}"));
    line(out, format_args!("a={}", n.direction));
    if m.rtcp_mux {
        line(out, format_args!("a=rtcp-mux"));
    }
}

/// A rejected stream: port 0, the offer's first format (RFC 3264 §6).
fn rejected(out: &mut String, m: &MediaDescription) {
    let first = match (m.formats.first(), m.non_rtp_formats.first()) {
        (Some(pt), _) => format!(" {pt}"),
        (None, Some(f)) => format!(" {f}"),
        (None, None) => String::new(),
    };
    line(out, format_args!("m={} 0 {}{first}", m.kind, m.proto));
}

fn line(out: &mut String, args: fmt::Arguments<'_>) {
    // Writing to a String cannot fail.
    let _ = out.write_fmt(args);
    out.push_str("\r\n");
}

/// `IN IP4 <address>` or `IN IP6 <address>`.
struct Address(IpAddr);

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IpAddr::V4(ip) => write!(f, "IN IP4 {ip}"),
            IpAddr::V6(ip) => write!(f, "IN IP6 {ip}"),
        }
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
