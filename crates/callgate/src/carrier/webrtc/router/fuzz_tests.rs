//! The invariants of the WebRTC datagram router on arbitrary datagrams —
//! the one copy, shared by the cargo-fuzz target
//! `fuzz/fuzz_targets/webrtc_datagram.rs` and by the stable smoke twin (the
//! `#[cfg(test)]` part at the bottom).
//!
//! This file is included twice:
//! - by an ordinary `mod` (`#[cfg(test)]`), as
//!   `carrier::webrtc::router::fuzz_tests`, whose parent is the router;
//! - by a `path` attribute in the fuzz target, as `mod invariants`, whose
//!   crate root has `use callgate::carrier::webrtc::router::*`.
//!
//! So the router is reached through `super::`, tokio (for an inbox; making
//! a channel needs no runtime) by its crate name, and the mutator (the
//! dev-dependency `callgate_test_support`) only under `cfg(test)`. Entry
//! point: [`check`].
//!
//! The input is read whole as one datagram, then as records — one address
//! byte ([`addr`]: 32 addresses, so they repeat), a big-endian `u16`
//! length, that many bytes (or the rest) — routed in order through a
//! [`Routes`] holding one session, [`UFRAG`]. Invariants:
//! - `Kind::of` never panics and follows RFC 7983 §7 by the first byte
//!   (0..=3 STUN, 20..=63 DTLS, 128..=191 RTP, else other);
//! - `binding_request_ufrag` never panics, and a `Some(u)` comes from at
//!   least 20 bytes of type 0x0001 with the magic cookie 0x2112A442, and
//!   `u:` lies inside the attributes the header's length declares;
//! - a datagram reaches the session only from an address already learned
//!   or as a binding request naming [`UFRAG`] (which teaches its address,
//!   up to `MAX_ADDRS`); an inbox comes exactly with `To`; one key;
//! - `sizes()` is (1, addresses learned), and (0, 0) once the guard is
//!   dropped, after which nothing is routed.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use super::{Kind, MAX_ADDRS, Routed, Routes, binding_request_ufrag};

/// The one session's ICE username fragment.
pub const UFRAG: &str = "fuzzufrag";

/// Every invariant on one input (see the module documentation).
pub fn check(data: &[u8]) {
    check_datagram(data);
    let routes = Arc::new(Routes::default());
    let (tx, _rx) = tokio::sync::mpsc::channel(1);
    let guard = routes.add(UFRAG, tx).expect("an empty table takes it");
    assert!(routes.add(UFRAG, tokio::sync::mpsc::channel(1).0).is_none());
    let mut learned: Vec<SocketAddr> = Vec::new();
    let mut key = None;
    for (from, bytes) in records(data) {
        check_datagram(bytes);
        let ours = binding_request_ufrag(bytes) == Some(UFRAG);
        let known = learned.contains(&from);
        let (routed, inbox) = routes.route(from, bytes);
        assert_eq!(matches!(routed, Routed::To(_)), inbox.is_some());
        match routed {
            Routed::To(k) => {
                assert_eq!(*key.get_or_insert(k), k, "one session, one key");
                if !known {
                    assert!(ours && learned.len() < MAX_ADDRS, "routed {from} unasked");
                    learned.push(from);
                }
            }
            Routed::NoSession => assert!(!known && !ours, "{from} dropped"),
            Routed::TooManyAddrs => assert!(!known && ours && learned.len() == MAX_ADDRS),
        }
        assert_eq!(routes.sizes(), (1, learned.len()));
    }
    drop(guard);
    assert_eq!(routes.sizes(), (0, 0), "routes outlived their guard");
    for (from, bytes) in records(data) {
        assert_eq!(routes.route(from, bytes).0, Routed::NoSession);
    }
}

/// `Kind::of` and `binding_request_ufrag` on one datagram.
pub fn check_datagram(b: &[u8]) {
    let kind = Kind::of(b);
    let want = match b.first() {
        Some(0..=3) => Kind::Stun,
        Some(20..=63) => Kind::Dtls,
        Some(128..=191) => Kind::Rtp,
        _ => Kind::Other,
    };
    assert_eq!(kind, want, "{:?}", b.first());
    assert_eq!(kind.as_str(), format!("{kind:?}").to_ascii_lowercase());
    let Some(u) = binding_request_ufrag(b) else {
        return;
    };
    assert!(
        b.len() >= 20 && b[..2] == [0x00, 0x01],
        "{u:?} from a non-request"
    );
    assert_eq!(
        b[4..8],
        [0x21, 0x12, 0xA4, 0x42],
        "{u:?} without the cookie"
    );
    let declared = usize::from(u16::from_be_bytes([b[2], b[3]]));
    let attrs = b.get(20..20 + declared).expect("the attributes it read");
    let named = [u.as_bytes(), b":"].concat();
    assert!(
        !u.contains(':') && contains(attrs, &named),
        "{u:?} is not in {b:?}"
    );
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The input as (source address, datagram) records.
pub fn records(mut data: &[u8]) -> impl Iterator<Item = (SocketAddr, &[u8])> {
    std::iter::from_fn(move || {
        let (&[a, hi, lo], rest) = data.split_first_chunk::<3>()?;
        let n = usize::from(u16::from_be_bytes([hi, lo])).min(rest.len());
        let (bytes, tail) = rest.split_at(n);
        data = tail;
        Some((addr(a), bytes))
    })
}

/// A source address from one byte: bit 4 the family, bits 0-3 the port.
pub fn addr(a: u8) -> SocketAddr {
    let port = 50_000 + u16::from(a & 0x0f);
    if a & 0x10 == 0 {
        SocketAddr::from((Ipv4Addr::new(192, 0, 2, 7), port))
    } else {
        SocketAddr::from((Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 7), port))
    }
}

// ---- the stable smoke twin ----------------------------------------------

#[cfg(test)]
mod smoke {
    //! Mutants of the fuzz target's seeds, and generated sessions (more
    //! addresses than `MAX_ADDRS`, other fragments, cut requests), through
    //! [`check`].

    use super::*;
    use callgate_test_support::{Mutator, Rng};

    /// The fuzz target's seeds.
    const SEEDS: [&[u8]; 4] = [
        include_bytes!("../../../../../../fuzz/seeds/webrtc_datagram/binding_request"),
        include_bytes!("../../../../../../fuzz/seeds/webrtc_datagram/dtls_client_hello"),
        include_bytes!("../../../../../../fuzz/seeds/webrtc_datagram/rtp"),
        include_bytes!("../../../../../../fuzz/seeds/webrtc_datagram/session"),
    ];
    /// Tokens are text: the binary ones are the ASCII parts of a header.
    const TOKENS: &[&str] = &[
        "\0\x01",
        "\0\x06",
        "\0\x0e",
        "\x21\x12",
        "\x16",
        "fuzzufrag:",
        ":",
    ];

    /// Usernames that name no session, or not as `ours:theirs`.
    const NOT_OURS: [&str; 4] = ["other:x", "fuzzufrag", ":fuzzufrag", "fuzzufragx:y"];

    /// A binding request with `USERNAME` `user` (no integrity: str0m's).
    fn binding_request(user: &str) -> Vec<u8> {
        let n = user.len();
        let mut attr = [&[0, 6][..], &(n as u16).to_be_bytes(), user.as_bytes()].concat();
        attr.resize(4 + n.div_ceil(4) * 4, 0);
        let len = (attr.len() as u16).to_be_bytes();
        [
            &[0, 1][..],
            &len,
            &[0x21, 0x12, 0xA4, 0x42],
            &[7; 12],
            &attr,
        ]
        .concat()
    }

    #[test]
    fn the_seeds_are_what_they_are_named() {
        let kinds: Vec<Kind> = SEEDS
            .iter()
            .map(|s| Kind::of(records(s).next().expect("a record").1))
            .collect();
        assert_eq!(kinds[..3], [Kind::Stun, Kind::Dtls, Kind::Rtp]);
        assert_eq!(
            binding_request_ufrag(records(SEEDS[0]).next().expect("one").1),
            Some(UFRAG)
        );
        assert_eq!(records(SEEDS[3]).count(), 5);
        assert_eq!(
            binding_request_ufrag(&binding_request("fuzzufrag:abcd")),
            Some(UFRAG)
        );
    }

    #[test]
    fn mutated_seeds_keep_the_invariants() {
        let mut m = Mutator::new(0xda7a_6a3e, &SEEDS, TOKENS);
        m.run_bytes(3_000, check);
        check(b"");
    }

    #[test]
    fn generated_sessions_keep_the_invariants() {
        let mut rng = Rng::new(0x7983);
        for _ in 0..300 {
            let mut input = Vec::new();
            for _ in 0..rng.below(40) {
                let d = match rng.below(7) {
                    0 | 1 => binding_request(&format!("{UFRAG}:{}", rng.below(99))),
                    2 => binding_request(rng.pick::<&str>(&NOT_OURS)),
                    3 => {
                        let mut r = binding_request("fuzzufrag:cut");
                        r.truncate(rng.below(r.len()));
                        r
                    }
                    4 => [&[0x80, 0x6f][..], &rng.bytes(30)].concat(),
                    5 => [&[0x16, 0xfe, 0xfd][..], &rng.bytes(30)].concat(),
                    _ => {
                        let n = rng.below(60);
                        rng.bytes(n)
                    }
                };
                input.push(rng.below(12) as u8);
                input.extend((d.len() as u16).to_be_bytes());
                input.extend(d);
            }
            check(&input);
        }
    }
}
