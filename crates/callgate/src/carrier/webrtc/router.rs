//! The datagram router: every session shares one UDP socket, so each
//! datagram is routed to its session by a map — by the source address once
//! the session has seen it, else (the first STUN check from a new address)
//! by the local half of the STUN `USERNAME`, our ICE username fragment.
//! Never a scan over sessions. RFC 7983 tells the kinds apart by the
//! first byte.
//!
//! A session's routes are held by its [`RouteGuard`]: dropping it (the
//! session's task ending, however it ends) removes its fragment and every
//! address it learned, so nothing stays routed to a finished call. An
//! address is learned only from a STUN binding request naming a live
//! fragment (str0m then checks its MESSAGE-INTEGRITY), and at most
//! [`MAX_ADDRS`] per session. Fuzzed (`fuzz/fuzz_targets/webrtc_datagram.rs`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::mpsc;

/// Addresses one session may be reached from (a browser checks a pair per
/// local candidate: host, reflexive, relayed, per interface).
pub const MAX_ADDRS: usize = 8;

/// Kinds of datagram on the shared socket (RFC 7983 §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Stun,
    Dtls,
    Rtp,
    Other,
}

impl Kind {
    pub fn of(b: &[u8]) -> Kind {
        match b.first() {
            Some(0..=3) => Kind::Stun,
            Some(20..=63) => Kind::Dtls,
            Some(128..=191) => Kind::Rtp,
            _ => Kind::Other,
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Stun => "stun",
            Kind::Dtls => "dtls",
            Kind::Rtp => "rtp",
            Kind::Other => "other",
        }
    }
}

/// Whether `b` is a STUN binding request, and the local (our) half of its
/// `USERNAME` (`ours:theirs`, RFC 8445 §7.2.2). A bounded walk of the
/// attributes (RFC 8489 §5, §14); integrity is str0m's to check.
pub fn binding_request_ufrag(b: &[u8]) -> Option<&str> {
    const BINDING_REQUEST: u16 = 0x0001;
    const MAGIC_COOKIE: [u8; 4] = [0x21, 0x12, 0xA4, 0x42];
    const USERNAME: u16 = 0x0006;
    if b.len() < 20
        || u16::from_be_bytes([b[0], b[1]]) != BINDING_REQUEST
        || b[4..8] != MAGIC_COOKIE
    {
        return None;
    }
    let len = usize::from(u16::from_be_bytes([b[2], b[3]]));
    let attrs = b.get(20..20 + len)?;
    let mut at = 0;
    while at + 4 <= attrs.len() {
        let kind = u16::from_be_bytes([attrs[at], attrs[at + 1]]);
        let n = usize::from(u16::from_be_bytes([attrs[at + 2], attrs[at + 3]]));
        let value = attrs.get(at + 4..at + 4 + n)?;
        if kind == USERNAME {
            let user = std::str::from_utf8(value).ok()?;
            return user.split_once(':').map(|(ours, _theirs)| ours);
        }
        at += 4 + n.div_ceil(4) * 4;
    }
    None
}

/// One datagram for a session.
#[derive(Debug)]
pub struct Datagram {
    pub from: SocketAddr,
    pub at: Instant,
    pub bytes: Vec<u8>,
}

/// A session's inbox: bounded; a full inbox drops the datagram (UDP's own
/// policy: a session too slow to read loses packets, not the socket).
pub type Inbox = mpsc::Sender<Datagram>;
/// Bound of a session's inbox (40 ms of audio at 50 packets/s plus RTCP,
/// or one DTLS flight, with room to spare).
pub const INBOX: usize = 64;

#[derive(Default)]
struct Inner {
    by_ufrag: HashMap<String, (u64, Inbox)>,
    by_addr: HashMap<SocketAddr, (u64, Inbox)>,
    addrs: HashMap<u64, Vec<SocketAddr>>,
    next_key: u64,
}

/// Where datagrams go. Shared by the socket task and every session.
#[derive(Default)]
pub struct Routes {
    inner: Mutex<Inner>,
}

/// What routing did with a datagram.
#[derive(Debug, PartialEq, Eq)]
pub enum Routed {
    /// Known address, or a binding request that taught us one.
    To(u64),
    /// No session for it (a stale or stray packet, a scan).
    NoSession,
    /// The session has [`MAX_ADDRS`] addresses already.
    TooManyAddrs,
}

impl Routes {
    /// Registers a session by its ICE username fragment; its routes last as
    /// long as the guard. `None` if the fragment is taken (a collision of
    /// random fragments: the caller makes a new one).
    pub fn add(self: &Arc<Self>, ufrag: &str, inbox: Inbox) -> Option<RouteGuard> {
        let mut g = lock(&self.inner);
        if g.by_ufrag.contains_key(ufrag) {
            return None;
        }
        g.next_key += 1;
        let key = g.next_key;
        g.by_ufrag.insert(ufrag.to_string(), (key, inbox));
        g.addrs.insert(key, Vec::new());
        Some(RouteGuard {
            routes: Arc::clone(self),
            key,
            ufrag: ufrag.to_string(),
        })
    }

    /// The inbox for a datagram from `from`, learning the address from a
    /// binding request that names a live fragment.
    pub fn route(&self, from: SocketAddr, bytes: &[u8]) -> (Routed, Option<Inbox>) {
        let mut g = lock(&self.inner);
        if let Some((key, inbox)) = g.by_addr.get(&from) {
            return (Routed::To(*key), Some(inbox.clone()));
        }
        let Some((key, inbox)) = binding_request_ufrag(bytes)
            .and_then(|u| g.by_ufrag.get(u))
            .cloned()
        else {
            return (Routed::NoSession, None);
        };
        let known = g.addrs.entry(key).or_default();
        if known.len() >= MAX_ADDRS {
            return (Routed::TooManyAddrs, None);
        }
        known.push(from);
        g.by_addr.insert(from, (key, inbox.clone()));
        (Routed::To(key), Some(inbox))
    }

    /// Sessions routed, fragments and addresses (for tests and `/metrics`).
    pub fn sizes(&self) -> (usize, usize) {
        let g = lock(&self.inner);
        (g.by_ufrag.len(), g.by_addr.len())
    }
}

/// A session's routes; dropping it removes them all.
pub struct RouteGuard {
    routes: Arc<Routes>,
    key: u64,
    ufrag: String,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        let mut g = lock(&self.routes.inner);
        g.by_ufrag.remove(&self.ufrag);
        for a in g.addrs.remove(&self.key).unwrap_or_default() {
            g.by_addr.remove(&a);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod fuzz_tests;

#[cfg(test)]
mod tests {
    use super::*;

    /// A STUN binding request with `USERNAME` `user` (no integrity: the
    /// router does not check it; str0m does).
    pub fn binding_request(user: &str) -> Vec<u8> {
        let mut attr = Vec::new();
        attr.extend_from_slice(&0x0006u16.to_be_bytes());
        attr.extend_from_slice(&(user.len() as u16).to_be_bytes());
        attr.extend_from_slice(user.as_bytes());
        while attr.len() % 4 != 0 {
            attr.push(0);
        }
        let mut m = Vec::new();
        m.extend_from_slice(&0x0001u16.to_be_bytes());
        m.extend_from_slice(&(attr.len() as u16).to_be_bytes());
        m.extend_from_slice(&0x2112_A442u32.to_be_bytes());
        m.extend_from_slice(&[7; 12]);
        m.extend_from_slice(&attr);
        m
    }

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn the_first_byte_names_the_kind() {
        assert_eq!(Kind::of(&[0, 1]), Kind::Stun);
        assert_eq!(Kind::of(&[22, 254]), Kind::Dtls);
        assert_eq!(Kind::of(&[0x80, 111]), Kind::Rtp);
        assert_eq!(Kind::of(&[191]), Kind::Rtp);
        assert_eq!(Kind::of(&[192]), Kind::Other);
        assert_eq!(Kind::of(&[255]), Kind::Other);
        assert_eq!(Kind::of(&[]), Kind::Other);
    }

    #[test]
    fn a_binding_request_teaches_the_address_and_the_guard_forgets_it() {
        let routes = Arc::new(Routes::default());
        let (tx, _rx) = mpsc::channel(1);
        let guard = routes.add("srvA", tx).unwrap();
        assert!(
            routes.add("srvA", mpsc::channel(1).0).is_none(),
            "fragments are unique"
        );
        assert_eq!(routes.route(addr(1), &[0x80, 0]).0, Routed::NoSession);
        let req = binding_request("srvA:brws");
        assert!(matches!(routes.route(addr(1), &req).0, Routed::To(_)));
        assert!(
            matches!(routes.route(addr(1), &[0x80, 0]).0, Routed::To(_)),
            "then by address"
        );
        assert_eq!(
            routes.route(addr(2), &binding_request("other:brws")).0,
            Routed::NoSession
        );
        assert_eq!(routes.sizes(), (1, 1));
        drop(guard);
        assert_eq!(routes.sizes(), (0, 0));
        assert_eq!(routes.route(addr(1), &[0x80, 0]).0, Routed::NoSession);
    }

    #[test]
    fn the_username_is_found_among_other_attributes_and_truncation_is_nothing() {
        let mut req = binding_request("ours:theirs");
        // A PRIORITY attribute before USERNAME.
        let prio = [0x00, 0x24, 0x00, 0x04, 1, 2, 3, 4];
        req.splice(20..20, prio);
        let len = (req.len() - 20) as u16;
        req[2..4].copy_from_slice(&len.to_be_bytes());
        assert_eq!(binding_request_ufrag(&req), Some("ours"));
        for cut in 0..req.len() {
            let _ = binding_request_ufrag(&req[..cut]);
        }
        assert_eq!(binding_request_ufrag(&req[..req.len() - 1]), None);
        let mut response = req.clone();
        response[0] = 0x01; // 0x0101: a binding success response
        assert_eq!(binding_request_ufrag(&response), None);
    }

    #[test]
    fn a_session_learns_at_most_max_addrs() {
        let routes = Arc::new(Routes::default());
        let _g = routes.add("srvB", mpsc::channel(1).0).unwrap();
        let req = binding_request("srvB:x");
        for p in 0..MAX_ADDRS as u16 {
            assert!(matches!(routes.route(addr(100 + p), &req).0, Routed::To(_)));
        }
        assert_eq!(routes.route(addr(999), &req).0, Routed::TooManyAddrs);
    }
}
