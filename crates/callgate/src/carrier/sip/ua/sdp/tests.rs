//! Offers as carriers, PBXs and SBCs send them: what we choose from each,
//! what we answer, holds and re-INVITEs. (Bad bodies: `parse_tests.rs`.)

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use super::*;

/// `sipp -sn uac`'s offer (PCMU only).
pub(super) const SIPP: &str = "v=0\r\n\
o=user1 53655765 2353687637 IN IP4 127.0.0.1\r\n\
s=-\r\n\
c=IN IP4 127.0.0.1\r\n\
t=0 0\r\n\
m=audio 6000 RTP/AVP 0\r\n\
a=rtpmap:0 PCMU/8000\r\n";

/// Asterisk (chan_pjsip), ulaw/alaw/gsm allowed, RFC 4733 DTMF.
pub(super) const ASTERISK: &str = include_str!("offers/asterisk.sdp");

/// FreeSWITCH with its default codec list: opus first, two
/// telephone-events, comfort noise, and an explicit RTCP address.
const FREESWITCH: &str = include_str!("offers/freeswitch.sdp");

/// Kamailio with rtpengine in front of a carrier: PCMA first, rtcp-mux
/// offered, an `a=rtcp` that mux makes moot.
const RTPENGINE: &str = "v=0\r\n\
o=- 3849393827 3849393828 IN IP4 203.0.113.5\r\n\
s=-\r\n\
c=IN IP4 203.0.113.5\r\n\
t=0 0\r\n\
m=audio 30010 RTP/AVP 8 0 101\r\n\
a=maxptime:150\r\n\
a=rtpmap:8 PCMA/8000\r\n\
a=rtpmap:0 PCMU/8000\r\n\
a=rtpmap:101 telephone-event/8000\r\n\
a=fmtp:101 0-15\r\n\
a=sendrecv\r\n\
a=rtcp:30011\r\n\
a=rtcp-mux\r\n\
a=ptime:30\r\n";

/// PCMA on a dynamic payload type, named in lower case, bare LF endings.
const DYNAMIC_PCMA: &str = "v=0\n\
o=gw 1 1 IN IP4 192.0.2.30\n\
s=call\n\
c=IN IP4 192.0.2.30\n\
t=0 0\n\
m=audio 4000 RTP/AVP 96 97\n\
a=rtpmap:96 pcma/8000\n\
a=rtpmap:97 TELEPHONE-EVENT/8000\n";

/// A softphone offering video first, then audio.
const VIDEO_AUDIO: &str = "v=0\r\n\
o=linphone 123 456 IN IP4 192.0.2.40\r\n\
s=Talk\r\n\
c=IN IP4 192.0.2.40\r\n\
t=0 0\r\n\
m=video 9078 RTP/AVP 96 97\r\n\
a=rtpmap:96 VP8/90000\r\n\
a=rtpmap:97 H264/90000\r\n\
a=fmtp:97 profile-level-id=42801F\r\n\
m=audio 7078 RTP/AVP 8 101\r\n\
a=rtpmap:101 telephone-event/8000\r\n";

/// G.729 only (a carrier trunk set to compressed codecs).
const G729_ONLY: &str = "v=0\r\n\
o=- 5 5 IN IP4 192.0.2.50\r\n\
s=-\r\n\
c=IN IP4 192.0.2.50\r\n\
t=0 0\r\n\
m=audio 5004 RTP/AVP 18 101\r\n\
a=rtpmap:18 G729/8000\r\n\
a=fmtp:18 annexb=no\r\n\
a=rtpmap:101 telephone-event/8000\r\n";

/// SDES-SRTP only.
const SAVP_ONLY: &str = "v=0\r\n\
o=- 6 6 IN IP4 192.0.2.60\r\n\
s=-\r\n\
c=IN IP4 192.0.2.60\r\n\
t=0 0\r\n\
m=audio 5006 RTP/SAVP 0 8\r\n\
a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz\r\n";

/// SRTP offered first with a plain RTP alternative (best-effort SRTP).
const SAVP_THEN_AVP: &str = "v=0\r\n\
o=- 7 7 IN IP4 192.0.2.70\r\n\
s=-\r\n\
c=IN IP4 192.0.2.70\r\n\
t=0 0\r\n\
m=audio 5008 RTP/SAVP 0\r\n\
a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz\r\n\
m=audio 5010 RTP/AVP 0\r\n";

/// An offer whose stream has `extra` added to the m= section.
pub(super) fn simple(extra: &str) -> String {
    format!(
        "v=0\r\no=- 1 1 IN IP4 192.0.2.1\r\ns=-\r\nc=IN IP4 192.0.2.1\r\nt=0 0\r\n\
         m=audio 4000 RTP/AVP 0 8\r\n{extra}"
    )
}

pub(super) fn parsed(body: &str) -> SessionDescription {
    parse(body.as_bytes()).unwrap_or_else(|e| panic!("{e}\n{body}"))
}

fn chosen(body: &str) -> Negotiated {
    negotiate(&parsed(body), &[Codec::Pcmu, Codec::Pcma], None).unwrap()
}

fn refused(body: &str) -> NegotiationError {
    negotiate(&parsed(body), &[Codec::Pcmu, Codec::Pcma], None).unwrap_err()
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1));

fn params(local_ip: IpAddr) -> AnswerParams<'static> {
    AnswerParams {
        origin_username: "callgate",
        session_id: 42,
        version: 7,
        local_ip,
        local_rtp_port: 30_000,
        session_name: "callgate",
    }
}

fn answered(body: &str) -> String {
    let offer = parsed(body);
    let n = negotiate(&offer, &[Codec::Pcmu, Codec::Pcma], None).unwrap();
    answer(&offer, &n, &params(LOCAL))
}

// ---- real-world offers ----------------------------------------------------

#[test]
fn sipp_offer_gets_pcmu_without_dtmf() {
    let n = chosen(SIPP);
    assert_eq!(
        (n.codec, n.payload_type, n.dtmf_payload_type),
        (Codec::Pcmu, 0, None)
    );
    assert_eq!(n.remote_rtp, addr("127.0.0.1:6000"));
    assert_eq!(n.remote_rtcp, addr("127.0.0.1:6001"));
    assert_eq!(
        (n.direction, n.on_hold, n.ptime_ms),
        (Direction::SendRecv, false, 20)
    );
    assert_eq!((n.media_index, n.rejected_media.as_slice()), (0, &[][..]));
    assert!(n.should_send());
}

#[test]
fn asterisk_offer_is_parsed_field_by_field() {
    let sdp = parsed(ASTERISK);
    assert_eq!(sdp.origin.username, "-");
    assert_eq!(sdp.origin.session_id, "1707301563");
    assert_eq!(sdp.origin.address, "192.0.2.10");
    assert_eq!(sdp.session_name, "Asterisk");
    assert_eq!(
        sdp.connection,
        Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10)))
    );
    let m = &sdp.media[0];
    assert_eq!(
        (m.kind.as_str(), m.port, m.proto.as_str()),
        ("audio", 10_000, "RTP/AVP")
    );
    assert_eq!(m.formats, [0, 8, 3, 101]);
    assert_eq!(m.rtpmap.len(), 4);
    assert_eq!(
        m.rtpmap_for(3),
        Some(&RtpMap {
            pt: 3,
            name: "GSM".into(),
            clock_rate: 8_000,
            channels: None
        })
    );
    assert_eq!(m.fmtp, [(101, "0-16".to_string())]);
    assert_eq!(
        (m.ptime, m.direction, m.connection),
        (Some(20), Direction::SendRecv, None)
    );
    assert_eq!(
        m.attributes.len(),
        8,
        "unknown ones (maxptime) are kept too"
    );
}

#[test]
fn asterisk_offer_gets_pcmu_and_its_dtmf_type() {
    let n = chosen(ASTERISK);
    assert_eq!(
        (n.codec, n.payload_type, n.dtmf_payload_type),
        (Codec::Pcmu, 0, Some(101))
    );
    assert_eq!(n.remote_rtp, addr("192.0.2.10:10000"));
}

#[test]
fn freeswitch_offer_skips_opus_and_g722_and_the_wideband_dtmf() {
    let n = chosen(FREESWITCH);
    assert_eq!(
        (n.codec, n.payload_type, n.dtmf_payload_type),
        (Codec::Pcmu, 0, Some(101))
    );
    assert_eq!(n.remote_rtp, addr("198.51.100.20:24680"));
    assert_eq!(
        n.remote_rtcp,
        addr("198.51.100.21:24690"),
        "a=rtcp with its address"
    );
    let opus = parsed(FREESWITCH).media[0].rtpmap[0].clone();
    assert_eq!(
        (opus.name.as_str(), opus.clock_rate, opus.channels),
        ("opus", 48_000, Some(2))
    );
}

#[test]
fn the_offers_order_wins_over_ours() {
    let offer = parsed(RTPENGINE);
    let n = negotiate(&offer, &[Codec::Pcmu, Codec::Pcma], None).unwrap();
    assert_eq!((n.codec, n.payload_type), (Codec::Pcma, 8));
    let n = negotiate(&offer, &[Codec::Pcmu], None).unwrap();
    assert_eq!(
        (n.codec, n.payload_type),
        (Codec::Pcmu, 0),
        "unless we refuse its first"
    );
}

#[test]
fn rtpengine_offer_muxes_rtcp_and_asks_for_30_ms() {
    let n = chosen(RTPENGINE);
    assert_eq!(n.remote_rtp, addr("203.0.113.5:30010"));
    assert_eq!(n.remote_rtcp, n.remote_rtp, "rtcp-mux wins over a=rtcp");
    assert_eq!((n.dtmf_payload_type, n.ptime_ms), (Some(101), 30));
    let body = answered(RTPENGINE);
    assert!(body.contains("a=rtcp-mux\r\n"), "{body}");
    assert!(
        body.contains("a=ptime:20\r\n"),
        "we send 20 ms regardless: {body}"
    );
}

#[test]
fn a_dynamic_payload_type_named_pcma_is_used_as_numbered() {
    let n = chosen(DYNAMIC_PCMA);
    assert_eq!(
        (n.codec, n.payload_type, n.dtmf_payload_type),
        (Codec::Pcma, 96, Some(97))
    );
    let body = answered(DYNAMIC_PCMA);
    assert!(
        body.contains("m=audio 30000 RTP/AVP 96 97\r\na=rtpmap:96 PCMA/8000\r\n"),
        "{body}"
    );
}

#[test]
fn an_rtpmap_overrides_a_static_type_and_stereo_is_not_ours() {
    let n = chosen(&simple("a=rtpmap:0 G726-32/8000\r\n"));
    assert_eq!((n.codec, n.payload_type), (Codec::Pcma, 8));
    let offer = parsed(&simple(
        "a=rtpmap:0 PCMU/8000/2\r\na=rtpmap:8 PCMA/16000\r\n",
    ));
    let e = negotiate(&offer, &[Codec::Pcmu, Codec::Pcma], None).unwrap_err();
    assert!(matches!(e, NegotiationError::NoCommonCodec { .. }), "{e}");
}

#[test]
fn video_is_rejected_and_audio_after_it_chosen() {
    let n = chosen(VIDEO_AUDIO);
    assert_eq!((n.media_index, n.rejected_media.as_slice()), (1, &[0][..]));
    assert_eq!(
        (n.codec, n.payload_type, n.dtmf_payload_type),
        (Codec::Pcma, 8, Some(101))
    );
    assert_eq!(n.remote_rtp, addr("192.0.2.40:7078"));
}

#[test]
fn g729_only_is_no_common_codec_naming_what_was_offered() {
    let e = refused(G729_ONLY);
    let NegotiationError::NoCommonCodec {
        media,
        offered,
        accepted,
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!(*media, 0);
    assert_eq!(offered, &["18 G729/8000", "101 telephone-event/8000"]);
    assert_eq!(accepted, &[Codec::Pcmu, Codec::Pcma]);
    assert_eq!(e.warning_code(), 305);
    assert_eq!(
        e.to_string(),
        "no common codec in audio stream 0: offered 18 G729/8000, 101 telephone-event/8000; \
         we accept PCMU, PCMA"
    );
    let bare = refused(&simple("").replace("RTP/AVP 0 8", "RTP/AVP 18 4 120"));
    assert!(
        bare.to_string()
            .contains("offered 18 G729/8000, 4 G723/8000, 120;"),
        "{bare}"
    );
}

#[test]
fn nothing_preferred_is_no_common_codec_too() {
    let e = negotiate(&parsed(SIPP), &[], None).unwrap_err();
    assert!(e.to_string().ends_with("we accept nothing"), "{e}");
}

#[test]
fn srtp_only_is_an_unsupported_profile() {
    let e = refused(SAVP_ONLY);
    assert_eq!(e, NegotiationError::UnsupportedProfile("RTP/SAVP".into()));
    assert_eq!(e.warning_code(), 302);
    assert!(e.to_string().contains("RTP/SAVP"), "{e}");
    let webrtc = SAVP_ONLY.replace("RTP/SAVP", "UDP/TLS/RTP/SAVPF");
    assert_eq!(
        refused(&webrtc),
        NegotiationError::UnsupportedProfile("UDP/TLS/RTP/SAVPF".into())
    );
}

#[test]
fn srtp_with_a_plain_alternative_takes_the_plain_one() {
    let n = chosen(SAVP_THEN_AVP);
    assert_eq!((n.media_index, n.rejected_media.as_slice()), (1, &[0][..]));
    assert_eq!(n.remote_rtp, addr("192.0.2.70:5010"));
    let body = answered(SAVP_THEN_AVP);
    assert!(
        body.contains("m=audio 0 RTP/SAVP 0\r\nm=audio 30000 RTP/AVP 0\r\n"),
        "{body}"
    );
}

#[test]
fn avpf_is_plain_rtp_and_answered_as_avpf() {
    let body = answered(&simple("").replace("RTP/AVP", "RTP/AVPF"));
    assert!(body.contains("m=audio 30000 RTP/AVPF 0\r\n"), "{body}");
}

#[test]
fn no_usable_audio_is_no_audio() {
    let disabled = simple("").replace("audio 4000", "audio 0");
    assert_eq!(refused(&disabled), NegotiationError::NoAudio);
    let fax = simple("").replace("m=audio 4000 RTP/AVP 0 8", "m=image 4002 udptl t38");
    let e = refused(&fax);
    assert_eq!(
        (e.clone(), e.warning_code()),
        (NegotiationError::NoAudio, 304)
    );
    assert_eq!(parsed(&fax).media[0].non_rtp_formats, ["t38"]);
}

// ---- hold, direction, addresses -------------------------------------------

#[test]
fn sendonly_is_hold_and_we_answer_recvonly() {
    let n = chosen(&simple("a=sendonly\r\n"));
    assert_eq!((n.direction, n.on_hold), (Direction::RecvOnly, true));
    assert!(!n.direction.we_send() && n.direction.we_receive() && !n.should_send());
    assert!(answered(&simple("a=sendonly\r\n")).contains("a=recvonly\r\n"));
}

#[test]
fn inactive_is_hold_and_stays_inactive() {
    let n = chosen(&simple("a=inactive\r\n"));
    assert_eq!((n.direction, n.on_hold), (Direction::Inactive, true));
    assert!(answered(&simple("a=inactive\r\n")).contains("a=inactive\r\n"));
}

#[test]
fn recvonly_is_not_hold_and_we_answer_sendonly() {
    let n = chosen(&simple("a=recvonly\r\n"));
    assert_eq!((n.direction, n.on_hold), (Direction::SendOnly, false));
    assert!(n.should_send());
}

#[test]
fn a_zero_address_is_rfc_2543_hold() {
    let n = chosen(&simple("").replace("c=IN IP4 192.0.2.1", "c=IN IP4 0.0.0.0"));
    assert_eq!((n.direction, n.on_hold), (Direction::SendRecv, true));
    assert!(!n.should_send(), "nowhere to send to");
    assert_eq!(
        n.check_local_address("2001:db8::1".parse().unwrap()),
        Ok(())
    );
}

#[test]
fn media_level_address_and_direction_win_over_session_level() {
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.1\r\ns=-\r\nc=IN IP4 192.0.2.1\r\nt=0 0\r\n\
                 a=inactive\r\n\
                 m=audio 4000 RTP/AVP 0\r\nc=IN IP4 192.0.2.99\r\na=sendrecv\r\n\
                 m=audio 4002 RTP/AVP 0\r\n";
    let sdp = parsed(offer);
    assert_eq!(sdp.direction, Some(Direction::Inactive));
    assert_eq!(sdp.media[0].direction, Direction::SendRecv);
    assert_eq!(
        sdp.media[1].direction,
        Direction::Inactive,
        "the session's applies"
    );
    let n = chosen(offer);
    assert_eq!(
        (n.remote_rtp, n.direction, n.on_hold),
        (addr("192.0.2.99:4000"), Direction::SendRecv, false)
    );
}

#[test]
fn session_level_direction_applies_to_a_stream_without_one() {
    let offer = simple("").replace("t=0 0\r\n", "t=0 0\r\na=sendonly\r\n");
    let n = chosen(&offer);
    assert_eq!((n.direction, n.on_hold), (Direction::RecvOnly, true));
}

#[test]
fn a_media_level_address_alone_is_enough() {
    let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.1\r\ns=-\r\nt=0 0\r\n\
                 m=audio 4000 RTP/AVP 0\r\nc=IN IP4 192.0.2.5\r\n";
    assert_eq!(chosen(offer).remote_rtp, addr("192.0.2.5:4000"));
}

#[test]
fn ipv6_offers_are_answered_over_ipv6() {
    let offer = "v=0\r\no=- 1 1 IN IP6 2001:db8::7\r\ns=-\r\nc=IN IP6 2001:db8::7\r\nt=0 0\r\n\
                 m=audio 4000 RTP/AVP 8\r\na=rtcp:4005 IN IP6 2001:db8::8\r\n";
    let n = chosen(offer);
    assert_eq!(n.remote_rtp, addr("[2001:db8::7]:4000"));
    assert_eq!(n.remote_rtcp, addr("[2001:db8::8]:4005"));
    let e = n.check_local_address(LOCAL).unwrap_err();
    assert_eq!(
        (e.warning_code(), e.to_string().contains("2001:db8::7")),
        (301, true)
    );
    let local6: IpAddr = "2001:db8::1".parse().unwrap();
    assert_eq!(n.check_local_address(local6), Ok(()));
    let body = answer(&parsed(offer), &n, &params(local6));
    assert!(
        body.contains("o=callgate 42 7 IN IP6 2001:db8::1\r\n"),
        "{body}"
    );
    assert!(body.contains("c=IN IP6 2001:db8::1\r\n"), "{body}");
}

#[test]
fn rtcp_port_without_address_and_at_the_top_of_the_range() {
    let n = chosen(&simple("a=rtcp:4100\r\n"));
    assert_eq!(n.remote_rtcp, addr("192.0.2.1:4100"));
    let n = chosen(&simple("").replace("audio 4000", "audio 65535"));
    assert_eq!(
        n.remote_rtcp,
        addr("192.0.2.1:65535"),
        "no port after 65535"
    );
}

// ---- answers --------------------------------------------------------------

#[test]
fn the_answer_to_asterisk_is_exactly_this() {
    assert_eq!(
        answered(ASTERISK),
        "v=0\r\n\
         o=callgate 42 7 IN IP4 198.51.100.1\r\n\
         s=callgate\r\n\
         c=IN IP4 198.51.100.1\r\n\
         t=0 0\r\n\
         m=audio 30000 RTP/AVP 0 101\r\n\
         a=rtpmap:0 PCMU/8000\r\n\
         a=rtpmap:101 telephone-event/8000\r\n\
         a=fmtp:101 0-16\r\n\
         a=ptime:20\r\n\
         a=sendrecv\r\n"
    );
}

#[test]
fn the_answer_has_one_line_per_offered_stream_rejected_ones_at_port_0() {
    let body = answered(VIDEO_AUDIO);
    assert!(
        body.contains("m=video 0 RTP/AVP 96\r\nm=audio 30000 RTP/AVP 8 101\r\n"),
        "{body}"
    );
    let back = parsed(&body);
    assert_eq!(back.media.len(), 2);
    assert_eq!((back.media[0].port, back.media[1].port), (0, 30_000));
    assert_eq!(back.media[1].codec(8), Some(Codec::Pcma));
    assert!(!body.contains("a=rtcp-mux"), "not offered, not answered");
    let fax_too = format!("{SIPP}m=image 4002 udptl t38\r\n");
    assert!(answered(&fax_too).ends_with("m=image 0 udptl t38\r\n"));
}

#[test]
fn our_own_words_are_made_safe_for_the_answer() {
    let offer = parsed(SIPP);
    let n = negotiate(&offer, &[Codec::Pcmu], None).unwrap();
    let p = AnswerParams {
        origin_username: "call gate\r\n",
        session_name: "a\r\nb",
        ..params(LOCAL)
    };
    let body = answer(&offer, &n, &p);
    assert!(body.contains("o=call-gate-- 42 7 "), "{body}");
    assert!(body.contains("s=a  b\r\n"), "{body}");
    let blank = AnswerParams {
        origin_username: "",
        session_name: " ",
        ..params(LOCAL)
    };
    let body = answer(&offer, &n, &blank);
    assert!(
        body.contains("o=- 42 7 ") && body.contains("s=-\r\n"),
        "{body}"
    );
    assert_eq!(parsed(&body).media.len(), 1);
}

// ---- re-INVITEs -------------------------------------------------------------

#[test]
fn a_reinvite_keeps_the_codec_in_use_while_it_is_offered() {
    let offer = parsed(ASTERISK);
    let n = negotiate(&offer, &[Codec::Pcmu, Codec::Pcma], Some(Codec::Pcma)).unwrap();
    assert_eq!((n.codec, n.payload_type), (Codec::Pcma, 8));
    let only_pcmu = parsed(SIPP);
    let n = negotiate(&only_pcmu, &[Codec::Pcmu, Codec::Pcma], Some(Codec::Pcma)).unwrap();
    assert_eq!(n.codec, Codec::Pcmu, "no longer offered: choose again");
}

#[test]
fn a_reinvite_to_hold_and_back() {
    let hold = parsed(&simple("a=sendonly\r\n"));
    let n = negotiate(&hold, &[Codec::Pcmu, Codec::Pcma], Some(Codec::Pcma)).unwrap();
    assert_eq!(
        (n.codec, n.on_hold, n.direction),
        (Codec::Pcma, true, Direction::RecvOnly)
    );
    let resume = parsed(&simple("a=sendrecv\r\n"));
    let n = negotiate(&resume, &[Codec::Pcmu, Codec::Pcma], Some(n.codec)).unwrap();
    assert_eq!(
        (n.codec, n.on_hold, n.direction),
        (Codec::Pcma, false, Direction::SendRecv)
    );
}
