//! The invariants of SDP offer/answer on arbitrary bodies — the one copy,
//! shared by the cargo-fuzz target `fuzz/fuzz_targets/sip_sdp.rs` and by
//! the stable smoke twin (the `#[cfg(test)]` part at the bottom of this
//! file).
//!
//! This file is included twice:
//! - by an ordinary `mod` (`#[cfg(test)]`), as `sdp_fuzz_tests` in callgate's
//!   `carrier::sip::ua`;
//! - by a `path` attribute in the fuzz target, as `mod invariants`, whose
//!   crate root has `use callgate::carrier::sip::ua::sdp`.
//!
//! So the code under test is reached as `super::sdp` (the same module in
//! both builds), and the smoke twin and its mutator (the dev-dependency
//! `callgate_test_support`) are compiled only under `cfg(test)`. Entry
//! point: [`check`].
//!
//! Invariants:
//! - `parse` never panics; an error is the one the input deserves: a body
//!   over the limit is `TooLarge` (and only then), `NotUtf8` names the
//!   first bad byte, a line number is a line of the body, `TooManyMedia`
//!   / `TooManyAttributes` only when there are that many lines;
//! - a parsed description has at most 64 media sections and 256
//!   attributes per section, one section per `m=` line with its port as
//!   written, RTP formats 0-127, and an address for every used stream;
//!   its body has only lines of a type RFC 8866 defines, `v=` once, and
//!   no control character but tab, CR and LF (what our screen adds to
//!   the `sdp-types` parser, which would skip or keep those);
//! - `negotiate` (under several preferences, with and without a current
//!   codec) picks a plain-RTP audio stream with a non-zero port whose
//!   formats carry the codec's payload type, named so by its rtpmap or
//!   static number; keeps the current codec when that stream offers it,
//!   else takes the offer's first preferred one; no earlier stream was
//!   usable; the remote address is the media-level `c=` if present, else
//!   the session-level one, with the stream's port; RTCP follows
//!   rtcp-mux, `a=rtcp`, port + 1; our direction is the offered one
//!   answered; hold exactly for sendonly, inactive or a zero address; a
//!   refusal is the one the offer deserves;
//! - the `answer` is CRLF text that re-parses with our own parser to as
//!   many `m=` lines as offered, of the same kinds and protocols, the
//!   chosen one at our port carrying exactly our codec (and the DTMF
//!   type), with our direction and a=ptime:20, every other at port 0 with
//!   at most the offer's first format.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::sdp::{
    self, AnswerParams, Codec, Direction, MAX_ATTRIBUTES, MAX_BODY_BYTES, MAX_MEDIA,
    MediaDescription, Negotiated, NegotiationError, SdpError, SessionDescription,
};

/// The preferences each offer is negotiated under.
const PREFERENCES: [&[Codec]; 4] = [
    &[Codec::Pcmu, Codec::Pcma],
    &[Codec::Pcma, Codec::Pcmu],
    &[Codec::Pcma],
    &[],
];
/// The codec in use each offer is negotiated with (None: a first INVITE).
const CURRENT: [Option<Codec>; 3] = [None, Some(Codec::Pcmu), Some(Codec::Pcma)];
const LOCAL_PORT: u16 = 40_000;

/// Every invariant on one body.
pub fn check(data: &[u8]) {
    match sdp::parse(data) {
        Ok(offer) => check_offer(data, &offer),
        Err(e) => check_error(data, &e),
    }
}

/// A refusal is the one the body deserves.
pub fn check_error(data: &[u8], e: &SdpError) {
    assert!(!e.to_string().is_empty());
    let too_large = data.len() > MAX_BODY_BYTES;
    assert_eq!(matches!(e, SdpError::TooLarge { .. }), too_large, "{e}");
    if too_large {
        return;
    }
    let text = match std::str::from_utf8(data) {
        Ok(text) => text,
        Err(bad) => {
            assert_eq!(
                *e,
                SdpError::NotUtf8 {
                    at: bad.valid_up_to()
                }
            );
            return;
        }
    };
    let lines: Vec<&str> = text.split('\n').map(trim).collect();
    let count = |prefix: &str| lines.iter().filter(|l| l.starts_with(prefix)).count();
    match *e {
        SdpError::NotUtf8 { .. } => panic!("{e} on UTF-8"),
        SdpError::BadLine { line, .. }
        | SdpError::MissingConnection { line, .. }
        | SdpError::TooManyMedia { line, .. }
        | SdpError::TooManyAttributes { line, .. } => {
            assert!(
                (1..=lines.len()).contains(&line),
                "{e}: {} lines",
                lines.len()
            );
        }
        _ => {}
    }
    match e {
        SdpError::TooManyMedia { .. } => assert!(count("m=") > MAX_MEDIA),
        SdpError::TooManyAttributes { .. } => assert!(count("a=") > MAX_ATTRIBUTES),
        _ => {}
    }
}

fn trim(line: &str) -> &str {
    line.trim_end_matches([' ', '\t', '\r'])
}

/// A parsed offer keeps its promises, and so do negotiation and answer.
pub fn check_offer(data: &[u8], offer: &SessionDescription) {
    check_parsed(data, offer);
    let mut answered: Vec<Negotiated> = Vec::new();
    for prefer in PREFERENCES {
        for current in CURRENT {
            match sdp::negotiate(offer, prefer, current) {
                Ok(n) => {
                    check_negotiated(offer, prefer, current, &n);
                    if !answered.contains(&n) {
                        check_answer(offer, &n);
                        answered.push(n);
                    }
                }
                Err(e) => check_refusal(offer, prefer, current, &e),
            }
        }
    }
}

/// The bounds, and one section per `m=` line with its port as written.
fn check_parsed(data: &[u8], offer: &SessionDescription) {
    assert!(data.len() <= MAX_BODY_BYTES);
    assert!(offer.media.len() <= MAX_MEDIA);
    assert!(offer.attributes.len() <= MAX_ATTRIBUTES);
    let text = std::str::from_utf8(data).expect("it parsed");
    let lines = || text.split('\n').map(trim).filter(|l| !l.is_empty());
    for line in lines() {
        let typed = match line.as_bytes() {
            [kind, b'=', ..] => b"vosiuepcbtrzkam".contains(kind),
            _ => false,
        };
        assert!(typed, "{line:?}");
        let control = |c: char| c.is_ascii_control() && c != '\t';
        assert!(!line.contains(control), "{line:?}");
    }
    assert_eq!(lines().filter(|l| l.starts_with("v=")).count(), 1);
    let ports: Vec<&str> = (text.split('\n').map(trim))
        .filter_map(|l| l.strip_prefix("m="))
        .map(|m| m.split_ascii_whitespace().nth(1).unwrap_or_default())
        .collect();
    assert_eq!(ports.len(), offer.media.len());
    for (m, written) in offer.media.iter().zip(ports) {
        assert!(
            m.attributes.len() <= MAX_ATTRIBUTES,
            "{}",
            m.attributes.len()
        );
        let port = written.split('/').next().unwrap_or_default();
        assert_eq!(port.parse::<u16>().ok(), Some(m.port), "{written}");
        assert!(port.bytes().all(|b| b.is_ascii_digit()), "{written}");
        if m.is_rtp() {
            assert!(m.non_rtp_formats.is_empty() && m.formats.iter().all(|&pt| pt <= 127));
        } else {
            assert!(m.formats.is_empty() && m.rtpmap.is_empty() && m.fmtp.is_empty());
        }
        assert!(m.port == 0 || m.connection.or(offer.connection).is_some());
    }
}

/// Whether a stream is one negotiate may choose (whatever its codecs).
fn usable(m: &MediaDescription) -> bool {
    m.kind.eq_ignore_ascii_case("audio")
        && m.port != 0
        && (m.proto.eq_ignore_ascii_case("RTP/AVP") || m.proto.eq_ignore_ascii_case("RTP/AVPF"))
}

/// The codec a payload type carries, read independently of the crate.
fn codec_of(m: &MediaDescription, pt: u8) -> Option<Codec> {
    let Some(map) = m.rtpmap.iter().find(|r| r.pt == pt) else {
        return [(0, Codec::Pcmu), (8, Codec::Pcma)]
            .into_iter()
            .find(|&(p, _)| p == pt)
            .map(|(_, c)| c);
    };
    let mono = map.clock_rate == 8_000 && matches!(map.channels, None | Some(1));
    let name = map.name.to_ascii_uppercase();
    match name.as_str() {
        "PCMU" if mono => Some(Codec::Pcmu),
        "PCMA" if mono => Some(Codec::Pcma),
        _ => None,
    }
}

/// What negotiate should take from one stream: current if offered, else
/// the first preferred codec in the offer's order.
fn expected(m: &MediaDescription, prefer: &[Codec], current: Option<Codec>) -> Option<(Codec, u8)> {
    let offered: Vec<(Codec, u8)> = (m.formats.iter())
        .filter_map(|&pt| codec_of(m, pt).map(|c| (c, pt)))
        .collect();
    let current = current.and_then(|cur| offered.iter().find(|(c, _)| *c == cur));
    current
        .or_else(|| offered.iter().find(|(c, _)| prefer.contains(c)))
        .copied()
}

fn check_negotiated(
    offer: &SessionDescription,
    prefer: &[Codec],
    current: Option<Codec>,
    n: &Negotiated,
) {
    let i = n.media_index;
    let m = &offer.media[i];
    assert!(usable(m), "{m:?}");
    assert!(m.formats.contains(&n.payload_type));
    assert_eq!(
        expected(m, prefer, current),
        Some((n.codec, n.payload_type))
    );
    for earlier in &offer.media[..i] {
        assert!(!usable(earlier) || expected(earlier, prefer, current).is_none());
    }
    let is_dtmf = |pt: u8| {
        let map = m.rtpmap.iter().find(|r| r.pt == pt);
        map.is_some_and(|r| r.is("telephone-event", 8_000))
    };
    assert_eq!(
        n.dtmf_payload_type,
        m.formats.iter().copied().find(|&pt| is_dtmf(pt))
    );
    let ip = m
        .connection
        .or(offer.connection)
        .expect("parse promised one");
    assert_eq!(n.remote_rtp, SocketAddr::new(ip, m.port));
    let rtcp = match m.rtcp {
        _ if m.rtcp_mux => n.remote_rtp,
        Some((port, addr)) => SocketAddr::new(addr.unwrap_or(ip), port),
        None => SocketAddr::new(ip, m.port.saturating_add(1)),
    };
    assert_eq!(n.remote_rtcp, rtcp);
    assert_eq!(n.direction, m.direction.answer());
    let hold = matches!(m.direction, Direction::SendOnly | Direction::Inactive);
    assert_eq!(n.on_hold, hold || ip.is_unspecified());
    assert_eq!(n.ptime_ms, m.ptime.unwrap_or(20));
    let others: Vec<usize> = (0..offer.media.len()).filter(|&j| j != i).collect();
    assert_eq!(n.rejected_media, others);
}

/// A refusal is the one the offer deserves.
fn check_refusal(
    offer: &SessionDescription,
    prefer: &[Codec],
    current: Option<Codec>,
    e: &NegotiationError,
) {
    assert!(!e.to_string().is_empty());
    let audio: Vec<&MediaDescription> = (offer.media.iter())
        .filter(|m| m.kind.eq_ignore_ascii_case("audio") && m.port != 0)
        .collect();
    match e {
        NegotiationError::NoAudio => assert!(audio.is_empty()),
        NegotiationError::UnsupportedProfile(proto) => {
            assert_eq!(Some(proto), audio.first().map(|m| &m.proto));
            assert!(!audio.iter().any(|m| usable(m)));
        }
        NegotiationError::NoCommonCodec { offered, .. } => {
            assert!(audio.iter().any(|m| usable(m)) && offered.len() <= 16);
            assert!(
                audio
                    .iter()
                    .all(|m| !usable(m) || expected(m, prefer, current).is_none())
            );
        }
        other => panic!("{other} from a parsed offer"),
    }
}

/// The answer re-parses to what was negotiated.
fn check_answer(offer: &SessionDescription, n: &Negotiated) {
    let local_ip = match n.remote_rtp.ip() {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
    };
    let params = AnswerParams {
        origin_username: "callgate",
        session_id: 1,
        version: 2,
        local_ip,
        local_rtp_port: LOCAL_PORT,
        session_name: "callgate",
    };
    let text = sdp::answer(offer, n, &params);
    assert!(text.ends_with("\r\n") && text.matches('\n').count() == text.matches("\r\n").count());
    let back = sdp::parse(text.as_bytes()).unwrap_or_else(|e| panic!("{e} in our answer:\n{text}"));
    assert_eq!(
        (back.origin.version.as_str(), back.connection),
        ("2", Some(local_ip))
    );
    assert_eq!(back.media.len(), offer.media.len(), "{text}");
    for (i, (ours, theirs)) in back.media.iter().zip(&offer.media).enumerate() {
        assert_eq!((&ours.kind, &ours.proto), (&theirs.kind, &theirs.proto));
        if i == n.media_index {
            check_chosen(ours, theirs, n);
        } else {
            assert_eq!(ours.port, 0, "{text}");
            assert_eq!(ours.formats.first(), theirs.formats.first());
            assert_eq!(ours.non_rtp_formats.first(), theirs.non_rtp_formats.first());
            assert!(ours.formats.len() + ours.non_rtp_formats.len() <= 1);
        }
    }
}

fn check_chosen(ours: &MediaDescription, theirs: &MediaDescription, n: &Negotiated) {
    let mut formats = vec![n.payload_type];
    formats.extend(n.dtmf_payload_type.filter(|&d| d != n.payload_type));
    assert_eq!((ours.port, &ours.formats), (LOCAL_PORT, &formats));
    assert_eq!(codec_of(ours, n.payload_type), Some(n.codec));
    if let Some(&d) = formats.get(1) {
        let map = ours.rtpmap.iter().find(|r| r.pt == d);
        assert!(map.is_some_and(|r| r.is("telephone-event", 8_000)));
    }
    assert_eq!((ours.direction, ours.ptime), (n.direction, Some(20)));
    assert_eq!(ours.rtcp_mux, theirs.rtcp_mux);
}

// ---- the stable smoke twin ----------------------------------------------

#[cfg(test)]
mod smoke {
    //! Mutated and generated offers through [`check`]: every parse,
    //! negotiation and answer keeps its promises.

    use super::*;
    use callgate_test_support::{Mutator, Rng};

    /// The fuzz target's seeds.
    const SEEDS: [&[u8]; 8] = [
        include_bytes!("../../../../../../fuzz/seeds/sip_sdp/sipp"),
        include_bytes!("../../../../../../fuzz/seeds/sip_sdp/asterisk"),
        include_bytes!("../../../../../../fuzz/seeds/sip_sdp/freeswitch"),
        include_bytes!("../../../../../../fuzz/seeds/sip_sdp/rtpengine"),
        include_bytes!("../../../../../../fuzz/seeds/sip_sdp/dynamic_pcma"),
        include_bytes!("../../../../../../fuzz/seeds/sip_sdp/video_audio_fax"),
        include_bytes!("../../../../../../fuzz/seeds/sip_sdp/ipv6_savp_avpf"),
        include_bytes!("../../../../../../fuzz/seeds/sip_sdp/g729_rfc2543_hold"),
    ];
    const TOKENS: &[&str] = &[
        "\r\n",
        "\n",
        "\r",
        "\t",
        "v=0\r\n",
        "o=- 1 1 IN IP4 192.0.2.9\r\n",
        "m=audio ",
        "m=audio 4000 RTP/AVP 8 0\r\n",
        "m=video 0 RTP/AVP 96\r\n",
        "m=image 5000 udptl t38\r\n",
        "c=IN IP4 ",
        "c=IN IP4 0.0.0.0\r\n",
        "c=IN IP6 ::1\r\n",
        "c=IN IP4 224.2.1.1/127\r\n",
        "a=rtpmap:",
        "a=rtpmap:96 PCMA/8000\r\n",
        "a=rtpmap:0 PCMU/8000/2\r\n",
        "a=rtpmap:101 telephone-event/8000\r\n",
        "a=fmtp:101 0-16\r\n",
        "a=sendonly\r\n",
        "a=recvonly\r\n",
        "a=inactive\r\n",
        "a=sendrecv\r\n",
        "a=rtcp-mux\r\n",
        "a=rtcp:",
        "a=rtcp:65535 IN IP4 10.0.0.1\r\n",
        "a=ptime:",
        " IN IP4 10.0.0.1",
        "RTP/AVP",
        "RTP/AVPF",
        "RTP/SAVP",
        "udptl",
        " 0",
        " 8",
        " 96",
        " 101",
        " 127",
        " 128",
        "0",
        "65535",
        "65536",
        "/8000",
        "/2",
        "PCMU",
        "pcma",
        "telephone-event",
        "G729",
        "0.0.0.0",
        "::",
    ];

    #[test]
    fn mutated_seeds_keep_the_invariants() {
        let mut m = Mutator::new(0x5d9_0ffe, &SEEDS, TOKENS);
        m.run_bytes(3_000, check);
    }

    #[test]
    fn generated_offers_keep_the_invariants_and_mostly_negotiate() {
        let mut rng = Rng::new(0x5d9);
        let mut negotiated = 0;
        for i in 0..1_500 {
            let offer = random_offer(&mut rng);
            let _report = Report(i, &offer);
            let parsed = sdp::parse(offer.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
            check_offer(offer.as_bytes(), &parsed);
            negotiated +=
                usize::from(sdp::negotiate(&parsed, &[Codec::Pcmu, Codec::Pcma], None).is_ok());
        }
        assert!(negotiated > 500, "only {negotiated} of 1500 negotiated");
    }

    #[test]
    fn the_seeds_parse_and_negotiate() {
        let ok = SEEDS
            .iter()
            .map(|s| {
                sdp::parse(s).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(s)))
            })
            .filter(|o| sdp::negotiate(o, &[Codec::Pcmu, Codec::Pcma], None).is_ok())
            .count();
        assert_eq!(
            ok,
            SEEDS.len(),
            "so their mutants start from the valid path"
        );
    }

    #[test]
    fn edge_bodies_keep_the_invariants() {
        check(&[]);
        check(&[0xff]);
        check(b"v=0");
        check(&vec![b'\n'; MAX_BODY_BYTES + 1]);
        check(
            format!(
                "v=0\no=- 1 1 IN IP4 1.2.3.4\nc=IN IP4 1.2.3.4\n{}",
                "m=a 1 b c\n".repeat(70)
            )
            .as_bytes(),
        );
        check(
            format!(
                "v=0\no=- 1 1 IN IP4 1.2.3.4\nc=IN IP4 1.2.3.4\nm=audio 1 RTP/AVP 0\n{}",
                "a=x\n".repeat(300)
            )
            .as_bytes(),
        );
    }

    /// A plausible offer built from parts: a few sections of random kinds,
    /// protocols, formats, maps, directions and addresses.
    fn random_offer(rng: &mut Rng) -> String {
        let ip = *rng.pick(&["IN IP4 192.0.2.7", "IN IP6 2001:db8::7", "IN IP4 0.0.0.0"]);
        let mut s = format!("v=0\r\no=- 1 1 {ip}\r\ns=-\r\n");
        if !rng.one_in(4) {
            s += &format!("c={ip}\r\n");
        }
        s += "t=0 0\r\n";
        if rng.one_in(4) {
            s += &format!(
                "a={}\r\n",
                rng.pick(&["sendonly", "inactive", "recvonly", "sendrecv"])
            );
        }
        for _ in 0..1 + rng.below(4) {
            random_section(rng, &mut s);
        }
        s
    }

    fn random_section(rng: &mut Rng, s: &mut String) {
        let kind = *rng.pick(&["audio", "audio", "audio", "video", "AUDIO"]);
        let port = *rng.pick(&[0u16, 4000, 4001, 65535, 30_000]);
        let proto = *rng.pick(&["RTP/AVP", "RTP/AVP", "RTP/AVPF", "RTP/SAVP", "rtp/avp"]);
        let pool = [0u8, 8, 18, 3, 96, 97, 101, 13, 127];
        let formats: Vec<u8> = (0..1 + rng.below(4)).map(|_| *rng.pick(&pool)).collect();
        let list: Vec<String> = formats.iter().map(u8::to_string).collect();
        *s += &format!("m={kind} {port} {proto} {}\r\n", list.join(" "));
        *s += &format!("c=IN IP4 192.0.2.{}\r\n", rng.below(256));
        for &pt in &formats {
            if pt >= 96 || rng.one_in(3) {
                let name = *rng.pick(&["PCMA", "pcmu", "telephone-event", "opus", "G729"]);
                let rate = *rng.pick(&["8000", "8000", "16000", "8000/2", "8000/1"]);
                *s += &format!("a=rtpmap:{pt} {name}/{rate}\r\n");
            }
        }
        if rng.one_in(3) {
            *s += &format!(
                "a={}\r\n",
                rng.pick(&["sendonly", "inactive", "recvonly", "sendrecv"])
            );
        }
        let extras = [
            "a=rtcp-mux",
            "a=rtcp:5000",
            "a=ptime:30",
            "a=rtcp:7 IN IP4 10.1.1.1",
            "a=x",
        ];
        for _ in 0..rng.below(3) {
            *s += *rng.pick(&extras);
            *s += "\r\n";
        }
    }

    /// Prints the failing offer when a check panics.
    struct Report<'a>(usize, &'a str);

    impl Drop for Report<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                eprintln!("generated offer {} failed:\n{}", self.0, self.1);
            }
        }
    }
}
