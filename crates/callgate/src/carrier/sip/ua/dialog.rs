//! The UAS side of one INVITE dialog (RFC 3261 §12.1.1) and the requests
//! callgate sends inside it (BYE, REFER).
//!
//! callgate does no DNS: a route or remote target whose host is not an IP
//! literal is reached at the address the INVITE came from (which is where
//! a carrier's proxy or SBC is anyway).

use std::fmt::Write as _;
use std::net::SocketAddr;

use rsipstack::sip as rsip;

use crate::carrier::sip::ua::wire::{self, Framed};
use crate::carrier::sip::ua::{Peer, Transport};

/// What callgate knows of one dialog it accepted.
#[derive(Debug, Clone)]
pub struct Dialog {
    pub call_id: String,
    pub local_tag: String,
    pub remote_tag: String,
    /// The INVITE's `To` (our URI, without a tag: a `To` tag makes an
    /// INVITE a re-INVITE) and `From` (theirs, with its tag), as sent.
    local: String,
    remote: String,
    /// The peer's `Contact` URI, as sent.
    remote_target: String,
    /// `Record-Route` of the INVITE, in order, as sent (the UAS route set).
    routes: Vec<String>,
    /// Whether the first route is a strict router's (no `lr` parameter).
    strict: bool,
    local_cseq: u32,
    /// The highest CSeq seen from the peer.
    pub remote_cseq: u32,
    /// Where the INVITE came from.
    pub source: Peer,
}

impl Dialog {
    /// The dialog an INVITE makes once we answer it with `local_tag`.
    pub fn from_invite(invite: &Framed, local_tag: &str, source: Peer) -> Dialog {
        let routes: Vec<String> = invite.route_set().into_iter().map(String::from).collect();
        let remote_target = invite
            .contact_uri()
            .unwrap_or_else(|| wire::uri_of(invite.from_value()));
        Dialog {
            call_id: invite.call_id().to_string(),
            local_tag: local_tag.to_string(),
            remote_tag: invite.from_tag().unwrap_or_default(),
            local: invite.to_value().to_string(),
            remote: invite.from_value().to_string(),
            remote_target: remote_target.to_string(),
            strict: routes.first().is_some_and(|r| !loose(r)),
            routes,
            local_cseq: 0,
            remote_cseq: invite.cseq().map_or(0, |c| c.0),
            source,
        }
    }

    /// Whether an in-dialog request belongs to this dialog (Call-ID and
    /// both tags, §12.2.2).
    pub fn matches(&self, req: &Framed) -> bool {
        req.call_id() == self.call_id
            && req.to_tag().as_deref() == Some(self.local_tag.as_str())
            && req.from_tag().unwrap_or_default() == self.remote_tag
    }

    /// Where requests of ours go: the first route if loose-routing, else
    /// the remote target; the INVITE's source when that is not an IP
    /// literal, and always over the INVITE's transport.
    pub fn next_hop(&self) -> Peer {
        let uri = match self.routes.first() {
            Some(r) if !self.strict => wire::uri_of(r),
            _ => &self.remote_target,
        };
        let addr = host_port(uri).unwrap_or(self.source.addr);
        match self.source.transport {
            // A stream goes back over the connection the INVITE came on.
            Transport::Tcp => self.source,
            Transport::Udp => Peer {
                addr,
                ..self.source
            },
        }
    }

    /// The text of a request of ours in this dialog (CSeq advanced).
    pub fn request(
        &mut self,
        method: &str,
        via: &str,
        contact: &str,
        extra: &[(&str, String)],
        body: Option<(&str, &[u8])>,
    ) -> Vec<u8> {
        self.local_cseq += 1;
        let ruri = match self.routes.first() {
            Some(r) if self.strict => wire::uri_of(r).to_string(),
            _ => self.remote_target.clone(),
        };
        let mut s = format!("{method} {ruri} SIP/2.0\r\nVia: {via}\r\nMax-Forwards: 70\r\n");
        let strict = self.strict;
        let routes = if strict {
            &self.routes[1..]
        } else {
            &self.routes[..]
        };
        for r in routes {
            let _ = write!(s, "Route: {r}\r\n");
        }
        if strict {
            let _ = write!(s, "Route: <{}>\r\n", self.remote_target);
        }
        let _ = write!(
            s,
            "From: {};tag={}\r\nTo: {}\r\n",
            self.local, self.local_tag, self.remote
        );
        let _ = write!(
            s,
            "Call-ID: {}\r\nCSeq: {} {method}\r\n",
            self.call_id, self.local_cseq
        );
        let _ = write!(s, "Contact: <{contact}>\r\n");
        wire::finish(s, extra, body)
    }
}

/// Whether a route is a loose router's (`lr` among its URI's parameters),
/// by rsip's typed `Record-Route`.
fn loose(route: &str) -> bool {
    rsip::typed::RecordRoute::parse(route).is_ok_and(|r| r.has_lr())
}

/// `host:port` of a SIP URI whose host is an IP literal (5060 if no port).
/// Read here, not by rsip: its URI parser ends the host part at the first
/// `;`, which may be inside the user part (RFC 4475 §3.1.1.9).
pub fn host_port(uri: &str) -> Option<SocketAddr> {
    let rest = uri.split_once(':').map(|(_, r)| r)?;
    let rest = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let hostport = rest.split([';', '?', '>']).next()?;
    if let Ok(a) = hostport.parse::<SocketAddr>() {
        return Some(a);
    }
    let ip = hostport.trim_start_matches('[').trim_end_matches(']');
    ip.parse().ok().map(|ip| SocketAddr::new(ip, 5060))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invite(extra: &str) -> Framed {
        let text = format!(
            "INVITE sip:bot@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.9:5062;branch=z9hG4bKa\r\n\
             From: <sip:alice@x>;tag=abc\r\nTo: <sip:bot@127.0.0.1>\r\nCall-ID: c1\r\nCSeq: 7 INVITE\r\n\
             Contact: <sip:alice@10.0.0.9:5062;transport=udp>\r\n{extra}Content-Length: 0\r\n\r\n"
        );
        wire::frame(text.as_bytes(), 4096).unwrap()
    }

    fn peer() -> Peer {
        Peer {
            addr: "10.0.0.1:5060".parse().unwrap(),
            transport: Transport::Udp,
            conn: 0,
        }
    }

    #[test]
    fn bye_goes_to_the_contact_with_swapped_from_and_to() {
        let mut d = Dialog::from_invite(&invite(""), "cg", peer());
        assert_eq!(d.next_hop().addr, "10.0.0.9:5062".parse().unwrap());
        let bye = String::from_utf8(d.request(
            "BYE",
            "SIP/2.0/UDP me;branch=z9hG4bKb",
            "sip:me",
            &[],
            None,
        ))
        .unwrap();
        assert!(bye.starts_with("BYE sip:alice@10.0.0.9:5062;transport=udp SIP/2.0\r\n"));
        assert!(bye.contains("From: <sip:bot@127.0.0.1>;tag=cg\r\n"));
        assert!(bye.contains("To: <sip:alice@x>;tag=abc\r\n"));
        assert!(bye.contains("CSeq: 1 BYE\r\n"));
        let framed = wire::frame(bye.as_bytes(), 4096).unwrap();
        assert_eq!(framed.cseq(), Some((1, "BYE".into())));
        assert_eq!(framed.from_tag().as_deref(), Some("cg"));
    }

    #[test]
    fn record_route_is_followed_loose_first() {
        let inv = invite("Record-Route: <sip:10.0.0.1:5070;lr>, <sip:10.0.0.2;lr>\r\n");
        let mut d = Dialog::from_invite(&inv, "cg", peer());
        assert_eq!(d.next_hop().addr, "10.0.0.1:5070".parse().unwrap());
        let bye = String::from_utf8(d.request("BYE", "v", "sip:me", &[], None)).unwrap();
        assert!(bye.contains("Route: <sip:10.0.0.1:5070;lr>\r\nRoute: <sip:10.0.0.2;lr>\r\n"));
    }

    #[test]
    fn matching_needs_call_id_and_both_tags() {
        let d = Dialog::from_invite(&invite(""), "cg", peer());
        let text = "BYE sip:bot@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.9;branch=z9hG4bKc\r\n\
             From: <sip:alice@x>;tag=abc\r\nTo: <sip:bot@127.0.0.1>;tag=cg\r\nCall-ID: c1\r\nCSeq: 8 BYE\r\n\r\n";
        assert!(d.matches(&wire::frame(text.as_bytes(), 4096).unwrap()));
        let other = text.replace("tag=cg", "tag=zz");
        assert!(!d.matches(&wire::frame(other.as_bytes(), 4096).unwrap()));
    }

    #[test]
    fn host_port_reads_ip_literals_only() {
        assert_eq!(
            host_port("sip:a@127.0.0.1:5080;lr"),
            Some("127.0.0.1:5080".parse().unwrap())
        );
        assert_eq!(
            host_port("sip:[::1]:5080"),
            Some("[::1]:5080".parse().unwrap())
        );
        assert_eq!(
            host_port("sip:10.1.1.1"),
            Some("10.1.1.1:5060".parse().unwrap())
        );
        assert_eq!(host_port("sip:carrier.example.com"), None);
        // A `;` in the user part (RFC 4475 §3.1.1.9) ends rsip's host part.
        let semi = "sip:user;par=u%40example.net@192.0.2.7:5070";
        let typed = rsip::Uri::try_from(semi).unwrap();
        assert_ne!(typed.host_with_port.to_string(), "192.0.2.7:5070");
        assert_eq!(host_port(semi), Some("192.0.2.7:5070".parse().unwrap()));
    }
}
