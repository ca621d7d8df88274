//! The parser on bodies that are odd but legal (accepted) and on bad ones
//! (each refused with its own typed error, naming the line).

use super::tests::{ASTERISK, SIPP, parsed, simple};
use super::*;

// ---- tolerance --------------------------------------------------------------

#[test]
fn lf_endings_and_trailing_whitespace_and_blank_lines_are_fine() {
    let messy = ASTERISK
        .replace("\r\n", " \t\n")
        .replace("t=0 0", "t=0 0\n\n");
    assert_eq!(parsed(&messy), parsed(ASTERISK));
    assert_eq!(parsed(&ASTERISK.replace("\r\n", "\n")), parsed(ASTERISK));
    let no_final_newline = ASTERISK.trim_end();
    assert_eq!(parsed(no_final_newline), parsed(ASTERISK));
}

#[test]
fn odd_but_legal_lines_are_accepted() {
    let sdp = parsed(
        &simple("a=ptime:20.0\r\na=sendrecv\r\na=sendrecv\r\nb=AS:64\r\n").replace(
            "t=0 0",
            "b=CT:128\r\nt=0 0\r\nr=7d 1h 0 25h\r\nz=2882844526 -1h\r\nk=prompt",
        ),
    );
    assert_eq!(
        (sdp.media[0].ptime, sdp.media[0].direction),
        (Some(20), Direction::SendRecv)
    );
    let multicast = parsed(&simple("").replace("c=IN IP4 192.0.2.1", "c=IN IP4 224.2.1.1/127/3"));
    assert_eq!(multicast.connection, Some("224.2.1.1".parse().unwrap()));
    let layered = parsed(&simple("").replace("audio 4000", "audio 4000/2"));
    assert_eq!(
        (layered.media[0].port, layered.media[0].port_count),
        (4000, Some(2))
    );
}

// ---- bad input --------------------------------------------------------------

fn error(body: impl AsRef<[u8]>) -> SdpError {
    parse(body.as_ref()).unwrap_err()
}

fn bad_line(body: &str) -> usize {
    match error(body) {
        SdpError::BadLine { line, .. } => line,
        other => panic!("{other:?} for\n{body}"),
    }
}

#[test]
fn a_body_without_v_first_is_missing_version() {
    assert_eq!(error(""), SdpError::MissingVersion);
    assert_eq!(error("\r\n\r\n"), SdpError::MissingVersion);
    assert_eq!(error(&ASTERISK[5..]), SdpError::MissingVersion);
    assert_eq!(bad_line(&ASTERISK.replace("v=0", "v=1")), 1);
    assert_eq!(bad_line(&format!("{ASTERISK}v=0\r\n")), 15);
}

#[test]
fn a_body_that_is_not_utf8_says_where() {
    let mut body = SIPP.as_bytes().to_vec();
    body[12] = 0xff;
    assert_eq!(error(&body), SdpError::NotUtf8 { at: 12 });
    assert_eq!(
        error(&body).to_string(),
        "SDP body is not UTF-8 (at byte 12)"
    );
}

#[test]
fn truncated_lines_are_bad_lines_with_their_number() {
    assert_eq!(bad_line(&SIPP.replace("c=IN IP4 127.0.0.1", "c=IN IP4")), 4);
    assert_eq!(
        bad_line(&SIPP.replace("c=IN IP4 127.0.0.1", "c=IN IP4 127.0.0")),
        4
    );
    assert_eq!(bad_line(&SIPP.replace("RTP/AVP 0", "")), 6);
    assert_eq!(bad_line(&SIPP.replace("RTP/AVP 0", "RTP/AVP")), 6);
    assert_eq!(bad_line(&SIPP.replace(" PCMU/8000", "")), 7);
    assert_eq!(bad_line(&SIPP.replace("PCMU/8000", "PCMU/")), 7);
    assert_eq!(
        bad_line(&SIPP.replace("o=user1 53655765 2353687637 ", "o=user1 ")),
        2
    );
    assert_eq!(bad_line(&format!("{SIPP}a")), 8);
    let e = error(SIPP.replace("c=IN IP4 127.0.0.1", "c=IN IP4"));
    assert_eq!(
        e.to_string(),
        "SDP line 4: c= needs `IN <IP4|IP6> <address>`"
    );
}

#[test]
fn a_huge_body_is_too_large() {
    let body = format!("{SIPP}{}", "a=x\r\n".repeat(4_000));
    let e = error(&body);
    assert_eq!(
        e,
        SdpError::TooLarge {
            len: body.len(),
            max: MAX_BODY_BYTES
        }
    );
    assert!(e.to_string().contains("16384"), "{e}");
}

#[test]
fn bad_ports_are_bad_lines() {
    for port in ["65536", "-1", "+5", "99999999999999999999", "4000/0", "x"] {
        let body = SIPP.replace("audio 6000", &format!("audio {port}"));
        assert_eq!(bad_line(&body), 6, "{port}");
    }
    assert_eq!(bad_line(&simple("a=rtcp:65536\r\n")), 7);
}

#[test]
fn formats_on_rtp_must_be_payload_types() {
    for formats in ["PCMU", "0 x", "128", "8.0"] {
        let body = SIPP.replace("RTP/AVP 0", &format!("RTP/AVP {formats}"));
        assert_eq!(bad_line(&body), 6, "{formats}");
    }
    assert_eq!(
        error(SIPP.replace("RTP/AVP 0", "RTP/AVP PCMU")).to_string(),
        "SDP line 6: an RTP format is not a payload type 0-127"
    );
}

#[test]
fn a_thousand_media_sections_are_too_many() {
    let body = format!("{SIPP}{}", "m=x 0 y z\n".repeat(1_000));
    assert_eq!(
        error(&body),
        SdpError::TooManyMedia {
            line: 8 + MAX_MEDIA - 1,
            max: MAX_MEDIA
        }
    );
    // With full-length lines, a thousand of them are over the size limit first.
    let long = format!("{SIPP}{}", "m=audio 0 RTP/AVP 0\r\n".repeat(1_000));
    assert!(matches!(error(long), SdpError::TooLarge { .. }));
    let most = format!("{SIPP}{}", "m=x 0 y z\n".repeat(MAX_MEDIA - 1));
    assert_eq!(parsed(&most).media.len(), MAX_MEDIA);
}

#[test]
fn more_than_256_attributes_in_a_section_are_too_many() {
    let body = format!("{SIPP}{}", "a=x\n".repeat(MAX_ATTRIBUTES));
    assert_eq!(
        error(&body),
        SdpError::TooManyAttributes {
            line: 8 + MAX_ATTRIBUTES - 1,
            max: 256
        }
    );
    let session = SIPP.replace("t=0 0", &"a=x\n".repeat(MAX_ATTRIBUTES + 1));
    assert!(matches!(
        error(session),
        SdpError::TooManyAttributes { line: 261, .. }
    ));
    let most = format!("{SIPP}{}", "a=x\n".repeat(MAX_ATTRIBUTES - 1));
    assert_eq!(parsed(&most).media[0].attributes.len(), MAX_ATTRIBUTES);
}

#[test]
fn missing_origin_and_connection_are_named() {
    assert_eq!(
        error(SIPP.replace("o=user1 53655765 2353687637 IN IP4 127.0.0.1\r\n", "")),
        SdpError::MissingOrigin
    );
    let no_c = SIPP.replace("c=IN IP4 127.0.0.1\r\n", "");
    assert_eq!(
        error(&no_c),
        SdpError::MissingConnection { media: 0, line: 5 }
    );
    assert!(
        error(&no_c)
            .to_string()
            .contains("media section 0 (line 5)")
    );
    let disabled = no_c.replace("audio 6000", "audio 0");
    assert_eq!(
        parsed(&disabled).media[0].port,
        0,
        "a disabled stream needs no address"
    );
}

#[test]
fn misplaced_and_malformed_lines_are_refused() {
    let cases = [
        (format!("{SIPP}t=0 0\r\n"), 8), // session line in media
        (format!("{SIPP}o=- 1 1 IN IP4 1.2.3.4\r\n"), 8), // o= after m=
        (
            SIPP.replace("s=-\r\n", "s=-\r\no=- 1 1 IN IP4 1.2.3.4\r\n"),
            4,
        ), // a second o=
        (format!("{SIPP}c=IN IP4 1.2.3.4\r\nc=IN IP4 1.2.3.5\r\n"), 9), // a second c=
        (format!("{SIPP}x=1\r\n"), 8),   // unknown type
        (format!("{SIPP} a=sendrecv\r\n"), 8), // leading space
        (format!("{SIPP}a=sendonly\r\na=recvonly\r\n"), 9), // two directions
        (format!("{SIPP}a=\r\n"), 8),    // empty attribute
        (format!("{SIPP}a=ptime:0\r\n"), 8),
        (format!("{SIPP}a=ptime:x\r\n"), 8),
        (format!("{SIPP}a=fmtp:x 0-15\r\n"), 8),
        (format!("{SIPP}a=rtpmap:200 PCMU/8000\r\n"), 8),
        (format!("{SIPP}a=rtpmap:0 PCMU/0\r\n"), 8),
        (format!("{SIPP}a=rtpmap:0 PCMU/8000/1/1\r\n"), 8),
        (format!("{SIPP}a=rtcp:5000 IN IP4\r\n"), 8),
        (format!("{SIPP}a=x\u{0}y\r\n"), 8), // NUL
        (format!("{SIPP}a=x\ry\r\n"), 8),    // bare CR
        (
            SIPP.replace("IN IP4 127.0.0.1\r\nt", "IN IP6 127.0.0.1\r\nt"),
            4,
        ),
        (SIPP.replace("IN IP4 127.0.0.1\r\nt", "IN IP4 ::1\r\nt"), 4),
        (
            SIPP.replace("IN IP4 127.0.0.1\r\nt", "IN IP4 host.example\r\nt"),
            4,
        ),
        (
            SIPP.replace("IN IP4 127.0.0.1\r\nt", "IN IP4 127.0.0.1/127\r\nt"),
            4,
        ),
        (
            SIPP.replace("IN IP4 127.0.0.1\r\nt", "ATM NSAP 47.0091\r\nt"),
            4,
        ),
        (SIPP.replace("m=audio", &format!("m={}", "a".repeat(33))), 6),
    ];
    for (body, line) in &cases {
        assert_eq!(bad_line(body), *line, "{body}");
    }
}

#[test]
fn the_screen_refuses_what_the_crate_would_skip_or_take() {
    // Each of these the sdp-types parser accepts (or skips); callgate must
    // not: see the checks named in screen.rs and read.rs.
    let cases = [
        (format!("{SIPP}A=x\r\n"), 8),       // upper-case type letter
        (format!("{SIPP}x=1\r\n"), 8),       // unknown type letter
        (format!("{SIPP}a=x\u{b}y\r\n"), 8), // vertical tab
        (format!("{SIPP}a=x\u{7f}\r\n"), 8), // DEL
        (format!("{SIPP}v=0\r\n"), 8),       // a second v=
        (format!("{SIPP}s=again\r\n"), 8),   // session line in media
        (SIPP.replace("audio 6000", "audio +6000"), 6), // signed port
        (SIPP.replace("audio 6000", "audio 6000/+2"), 6),
        (format!("{SIPP}a=rtpmap:+0 PCMU/8000\r\n"), 8),
        (format!("{SIPP}a=rtpmap:0 PCMU/+8000\r\n"), 8),
        (format!("{SIPP}a=rtpmap:0 /8000\r\n"), 8), // empty encoding name
        (format!("{SIPP}a=rtcp:+5000\r\n"), 8),
        (format!("{SIPP}a=:x\r\n"), 8), // empty attribute name
        (
            format!("{SIPP}c=IN IP4 10.0.0.1\r\nc=IN IP4 10.0.0.2\r\n"),
            9,
        ),
    ];
    for (body, line) in &cases {
        assert_eq!(bad_line(body), *line, "{body}");
    }
    let e = error(format!("{SIPP}a=rtpmap:+0 PCMU/8000\r\n"));
    assert_eq!(
        e.to_string(),
        "SDP line 8: an a=rtpmap payload type is not a number 0-127"
    );
}

#[test]
fn the_crates_grammar_refusals_name_their_line() {
    let cases = [
        (
            SIPP.replace("t=0 0", "t=0"),
            5,
            "t= needs `<start time> <stop time>`",
        ),
        (
            SIPP.replace("t=0 0", "b=AS"),
            5,
            "b= needs `<type>:<bandwidth>`",
        ),
        (
            SIPP.replace("t=0 0", "r=7d 1h 0"),
            5,
            "an r= line without a t= line before it",
        ),
        (SIPP.replace("s=-", "s=-\r\ns=again"), 4, "a second s= line"),
        (
            SIPP.replace("audio 6000 ", "audio 6000  "),
            6,
            "an m= line without a protocol",
        ), // a double space: the crate splits at single spaces
        (
            SIPP.replace(" 2353687637 ", " 18446744073709551616 "), // 2^64
            2,
            "o= needs",
        ),
    ];
    for (body, line, why) in &cases {
        let e = error(body);
        assert_eq!(bad_line(body), *line, "{body}");
        assert!(e.to_string().contains(why), "{e} for\n{body}");
    }
    let biggest = SIPP.replace(" 2353687637 ", " 18446744073709551615 ");
    assert_eq!(parsed(&biggest).origin.version, "18446744073709551615");
}

#[test]
fn a_disabled_stream_without_formats_and_a_final_bare_cr_are_tolerated() {
    let body = format!("{SIPP}m=video 0 RTP/AVP\r\nm=image 0 udptl\r");
    let sdp = parsed(&body);
    assert_eq!(sdp.media.len(), 3);
    for m in &sdp.media[1..] {
        assert_eq!(m.port, 0);
        assert!(
            m.formats.is_empty() && m.non_rtp_formats.is_empty(),
            "{m:?}"
        );
    }
    assert_eq!(sdp.media[2].proto, "udptl");
    assert_eq!(
        bad_line(&format!("{SIPP}m=video 4000 RTP/AVP\r\n")),
        8,
        "a used stream needs a format"
    );
    // The answer says port 0 for both and re-parses to the same shape.
    let n = negotiate(&sdp, &[Codec::Pcmu], None).unwrap();
    let p = AnswerParams {
        origin_username: "callgate",
        session_id: 1,
        version: 1,
        local_ip: "192.0.2.1".parse().unwrap(),
        local_rtp_port: 4000,
        session_name: "callgate",
    };
    let back = parsed(&answer(&sdp, &n, &p));
    let shape: Vec<(u16, &str, usize)> = (back.media.iter())
        .map(|m| (m.port, m.proto.as_str(), m.formats.len()))
        .collect();
    assert_eq!(
        shape,
        [(4000, "RTP/AVP", 1), (0, "RTP/AVP", 0), (0, "udptl", 0)]
    );
}

#[test]
fn rtp_attributes_are_not_interpreted_on_other_protocols() {
    let t38 = format!("{SIPP}m=image 4002 udptl t38\r\na=rtpmap:x y\r\na=fmtp:t38 z\r\n");
    let m = &parsed(&t38).media[1];
    assert!(m.rtpmap.is_empty() && m.fmtp.is_empty() && m.formats.is_empty());
    assert_eq!(m.attributes.len(), 2);
}

#[test]
fn codec_and_direction_helpers() {
    assert_eq!(Codec::from_name("pCmA"), Some(Codec::Pcma));
    assert_eq!(Codec::from_name("G729"), None);
    assert_eq!(
        (Codec::Pcmu.payload_type(), Codec::Pcma.payload_type()),
        (0, 8)
    );
    assert_eq!(Codec::Pcmu.to_string(), "PCMU");
    for (offered, ours) in [
        (Direction::SendRecv, Direction::SendRecv),
        (Direction::SendOnly, Direction::RecvOnly),
        (Direction::RecvOnly, Direction::SendOnly),
        (Direction::Inactive, Direction::Inactive),
    ] {
        assert_eq!(offered.answer(), ours);
        assert_eq!(
            Direction::from_attribute(&offered.to_string().to_uppercase()),
            Some(offered)
        );
    }
}
