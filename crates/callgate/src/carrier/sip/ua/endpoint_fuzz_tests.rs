//! The invariants of the SIP entry point on arbitrary messages — the one
//! copy, shared by the cargo-fuzz target `fuzz/fuzz_targets/sip_endpoint.rs`
//! and by the stable smoke twin (the `#[cfg(test)]` part at the bottom).
//!
//! This file is included twice: by an ordinary `mod` (`#[cfg(test)]`), as
//! `carrier::sip::ua::endpoint_fuzz_tests` in callgate, and by a `path`
//! attribute in the fuzz target, as `mod invariants`, whose crate root has
//! `use callgate::carrier::sip::ua::*`. The code under test is reached as `super::…` in both
//! builds; the smoke twin's mutator is the dev-dependency
//! `callgate_test_support`. Entry point: [`check`].
//!
//! The input is split at `\0\0` into up to four messages, all fed to one
//! endpoint from one peer (so a fuzzed ACK, CANCEL or BYE can meet the
//! INVITE before it). Invariants:
//! - nothing panics, in `receive`, in `poll` or in the commands;
//! - [`wire::frame`] accepts ⇒ the body is exactly `Content-Length` bytes
//!   (or the rest), the five transaction headers are there, once each
//!   (Via may repeat);
//! - every datagram the endpoint sends in answer is a bodiless response;
//!   to a framed request, one our own framer accepts, with the request's
//!   `Call-ID` and `CSeq` number;
//! - at most two datagrams answer one message (`200` + `487` for a CANCEL);
//! - a new call is reported only for a framed INVITE without a `To` tag,
//!   and `Malformed` exactly when the framer or rsipstack refused;
//! - after every call is answered, hung up and released, and the timers
//!   have run out, the endpoint holds no call and no deadline.

use std::time::{Duration, Instant};

use super::{CallKey, Config, Endpoint, Event, Output, Peer, Transport, wire};

/// Every invariant on one input (see the module documentation).
pub fn check(data: &[u8]) {
    let peer = Peer {
        addr: "127.0.0.1:5070".parse().unwrap_or_else(|_| unreachable!()),
        transport: Transport::Udp,
        conn: 0,
    };
    let local = "127.0.0.1:5060".parse().unwrap_or_else(|_| unreachable!());
    let mut ep = Endpoint::new(Config::new(local), 9);
    let t0 = Instant::now();
    let mut calls: Vec<CallKey> = Vec::new();
    for msg in split(data) {
        check_frame(msg);
        ep.receive(msg, peer, t0);
        let outs = drain(&mut ep);
        check_outputs(msg, &outs, &mut calls);
    }
    for &call in &calls {
        let _ = ep.accept(call, b"v=0\r\n", t0);
        let _ = ep.bye(call, None, t0);
        ep.release(call, t0);
    }
    let mut now = t0;
    for _ in 0..200 {
        let Some(at) = ep.next_deadline() else { break };
        assert!(at >= t0, "a deadline in the past of the start");
        now = at.max(now);
        ep.poll(now);
        drain(&mut ep);
    }
    ep.poll(now + Duration::from_secs(64));
    drain(&mut ep);
    assert_eq!(ep.calls(), 0, "calls left behind");
    assert_eq!(ep.next_deadline(), None, "timers left behind");
}

fn split(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while out.len() < 3 {
        let Some(i) = rest.windows(2).position(|w| w == b"\0\0") else {
            break;
        };
        out.push(&rest[..i]);
        rest = &rest[i + 2..];
    }
    out.push(rest);
    out
}

fn drain(ep: &mut Endpoint) -> Vec<Output> {
    std::iter::from_fn(|| ep.pop()).collect()
}

fn check_frame(msg: &[u8]) {
    let Ok(f) = wire::frame(msg, 16 * 1024) else {
        return;
    };
    let headers = f.header_list();
    let header = |name: &str| headers.iter().find(|(n, _)| n == name).map(|(_, v)| v);
    if let Some(cl) = header("Content-Length") {
        assert_eq!(
            f.body.len(),
            cl.trim().parse::<usize>().unwrap_or(usize::MAX)
        );
    }
    assert!(f.raw.ends_with(&f.body));
    for h in ["From", "To", "Call-ID", "CSeq"] {
        assert_eq!(headers.iter().filter(|(n, _)| n == h).count(), 1, "{h}");
    }
    assert!(header("Via").is_some());
}

fn check_outputs(msg: &[u8], outs: &[Output], calls: &mut Vec<CallKey>) {
    let framed = wire::frame(msg, 16 * 1024).ok();
    let sends: Vec<&Vec<u8>> = outs
        .iter()
        .filter_map(|o| match o {
            Output::Send { bytes, .. } => Some(bytes),
            Output::Event(_) => None,
        })
        .collect();
    assert!(
        sends.len() <= 2,
        "{} datagrams for one message",
        sends.len()
    );
    for bytes in &sends {
        assert!(
            bytes.starts_with(b"SIP/2.0 "),
            "a request sent in answer to a message"
        );
        assert!(
            bytes.ends_with(b"Content-Length: 0\r\n\r\n"),
            "answers carry no body"
        );
        // An answer to a framed request frames itself; one salvaged from a
        // broken request copies its (possibly broken) headers verbatim.
        if let Some(req) = &framed {
            let reply = wire::frame(bytes, usize::MAX).expect("our own messages frame");
            assert_eq!(reply.call_id(), req.call_id());
            assert_eq!(reply.cseq().map(|c| c.0), req.cseq().map(|c| c.0));
        }
    }
    for o in outs {
        match o {
            Output::Event(Event::Invite { call, .. }) => {
                let f = framed
                    .as_ref()
                    .expect("an INVITE event from a framed message");
                assert_eq!(f.method(), Some("INVITE"));
                assert!(f.to_tag().is_none());
                calls.push(*call);
            }
            Output::Event(Event::Malformed { error, .. }) => {
                let refused_by_us = wire::frame(msg, 16 * 1024).err();
                assert!(
                    refused_by_us.as_ref().is_none_or(|e| e == error),
                    "Malformed({error}) but the framer said {refused_by_us:?}"
                );
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod smoke {
    use callgate_test_support::Mutator;

    const INVITE: &str = "INVITE sip:bot@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK1\r\n\
        From: <sip:a@127.0.0.1>;tag=a1\r\nTo: <sip:bot@127.0.0.1>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\n\
        Contact: <sip:a@127.0.0.1:5070>\r\nContent-Type: application/sdp\r\nContent-Length: 4\r\n\r\nv=0\n";
    const CANCEL: &str = "CANCEL sip:bot@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK1\r\n\
        From: <sip:a@127.0.0.1>;tag=a1\r\nTo: <sip:bot@127.0.0.1>\r\nCall-ID: c1\r\nCSeq: 1 CANCEL\r\nContent-Length: 0\r\n\r\n";
    const OPTIONS: &str = "OPTIONS sip:x@127.0.0.1 SIP/2.0\r\nv: SIP/2.0/TCP h;branch=z9hG4bKo\r\nf: <sip:a@b>;tag=1\r\n\
        t: <sip:x@y>\r\ni: o1\r\nCSeq: 9 OPTIONS\r\nl: 0\r\n\r\n";
    const RESPONSE: &str = "SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKzz\r\n\
        From: <sip:a@b>;tag=1\r\nTo: <sip:x@y>;tag=2\r\nCall-ID: r1\r\nCSeq: 1 BYE\r\nContent-Length: 0\r\n\r\n";

    #[test]
    fn mutated_sip_messages_keep_the_invariants() {
        let corpus = [
            INVITE.to_string(),
            format!("{INVITE}\0\0{CANCEL}"),
            format!("{INVITE}\0\0{INVITE}\0\0{OPTIONS}"),
            OPTIONS.to_string(),
            RESPONSE.to_string(),
        ];
        let tokens = [
            "\r\n",
            "\r\n\r\n",
            ";tag=x",
            ";branch=z9hG4bK1",
            "Content-Length: 99",
            "l: 0",
            "INVITE",
            "ACK",
            "BYE",
            "CANCEL",
            "Max-Forwards: 0",
            "Require: 100rel",
            "\0\0",
            "Via: SIP/2.0/UDP a;branch=z9hG4bK2",
            " ",
            "\t",
            ":",
        ];
        let mut m = Mutator::new(0x51f, &corpus, &tokens);
        m.run_bytes(3_000, super::check);
        super::check(b"");
        super::check(b"\0\0\0\0\0\0");
    }

    /// The committed corpus — the fuzz seeds and the RFC 4475 torture
    /// messages with callgate's own additions — each through the target.
    #[test]
    fn the_corpus_keeps_the_invariants() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let mut seen = 0;
        for dir in [
            "fuzz/seeds/sip_endpoint",
            "tests/sip/torture/rfc4475",
            "tests/sip/torture/extra",
        ] {
            let Ok(entries) = std::fs::read_dir(format!("{root}/{dir}")) else {
                continue;
            };
            for e in entries.flatten() {
                let path = e.path();
                if path.extension().is_some_and(|x| x == "md") || !path.is_file() {
                    continue;
                }
                let bytes = std::fs::read(&path).unwrap_or_default();
                eprintln!("corpus: {}", path.display());
                super::check(&bytes);
                seen += 1;
            }
        }
        assert!(seen >= 50, "the corpus is missing ({seen} files)");
    }
}
