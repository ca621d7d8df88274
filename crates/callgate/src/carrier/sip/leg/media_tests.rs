//! The RTP task over real loopback sockets: what a peer sends and hears.

use std::net::SocketAddr;
use std::time::Duration;

use crate::carrier::sip::ua::sdp::Codec;
use ::media::rtp::{packet, rtcp};
use tokio::net::UdpSocket;

use super::media::{self, Params, Settings};
use super::ports::RtpPorts;
use crate::leg::{LegEvent, LegFormat};

struct Rig {
    media: media::Media,
    peer: UdpSocket,
    peer_rtcp: UdpSocket,
    ours: SocketAddr,
}

async fn rig(timeout_ms: u64) -> Rig {
    let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let base = probe.local_addr().unwrap().port() & !1;
    drop(probe);
    let pool = RtpPorts::new(
        "127.0.0.1".parse().unwrap(),
        base.saturating_sub(200).max(1024),
        base + 200,
    );
    let lease = pool.lease().expect("a port pair");
    let ours: SocketAddr = format!("127.0.0.1:{}", lease.port).parse().unwrap();
    let peer = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let peer_rtcp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let params = Params {
        codec: Codec::Pcmu,
        payload_type: 0,
        dtmf_payload_type: Some(101),
        remote_rtp: peer.local_addr().unwrap(),
        remote_rtcp: peer_rtcp.local_addr().unwrap(),
        on_hold: false,
        we_send: true,
    };
    let settings = Settings {
        format: LegFormat::Mulaw8k,
        rtp_timeout: Duration::from_millis(timeout_ms),
        rtcp_interval: Duration::from_millis(200),
        jitter_max_frames: 10,
    };
    let media = media::start(lease, params, settings);
    Rig {
        media,
        peer,
        peer_rtcp,
        ours,
    }
}

fn rtp(seq: u16, pt: u8, payload: &[u8]) -> Vec<u8> {
    let h = packet::RtpHeader {
        marker: false,
        payload_type: pt,
        sequence: seq,
        timestamp: u32::from(seq) * 160,
        ssrc: 0xabc,
    };
    let mut out = Vec::new();
    packet::write(&h, payload, &mut out);
    out
}

async fn recv(sock: &UdpSocket) -> Vec<u8> {
    let mut buf = vec![0u8; 2048];
    let n = tokio::time::timeout(Duration::from_secs(2), sock.recv(&mut buf))
        .await
        .unwrap()
        .unwrap();
    buf.truncate(n);
    buf
}

#[tokio::test]
async fn rtp_flows_at_once_and_marks_follow_the_playout_clock() {
    let mut r = rig(10_000).await;
    // Before anything is played: silence, at once, marker on the first.
    let first = recv(&r.peer).await;
    let p = packet::parse(&first).unwrap();
    assert!(p.header.marker);
    assert_eq!((p.header.payload_type, p.payload.len()), (0, 160));
    assert!(p.payload.iter().all(|b| *b == 0xFF));
    r.media.out.lock().unwrap().push(&[0x10; 320], 160);
    r.media.out.lock().unwrap().mark("end");
    let mut voiced = 0;
    while voiced < 2 {
        let pkt = recv(&r.peer).await;
        let p = packet::parse(&pkt).unwrap();
        if p.payload[0] == 0x10 {
            assert_eq!(
                p.header.marker,
                voiced == 0,
                "marker on the talkspurt's first packet only"
            );
            voiced += 1;
        }
    }
    let ev = tokio::time::timeout(Duration::from_secs(1), r.media.events.recv())
        .await
        .unwrap();
    assert_eq!(ev, Some(LegEvent::Played("end".into())));
}

#[tokio::test]
async fn inbound_audio_dtmf_and_wrong_payload_types_are_told_apart() {
    let mut r = rig(10_000).await;
    r.media.ctl.send(media::Ctl::WantAudio).unwrap();
    for seq in 1..=20u16 {
        r.peer
            .send_to(&rtp(seq, 0, &[0x20; 160]), r.ours)
            .await
            .unwrap();
        r.peer
            .send_to(&rtp(1000 + seq, 8, &[0x55; 160]), r.ours)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // RFC 4733 '5': three packets of one event, the last two "end".
    for (i, end) in [(0u16, false), (1, true), (2, true)] {
        let payload = [5, if end { 0x80 } else { 0 } | 10, 0, 160];
        let mut pkt = rtp(100 + i, 101, &payload);
        pkt[4..8].copy_from_slice(&4242u32.to_be_bytes()); // one timestamp
        r.peer.send_to(&pkt, r.ours).await.unwrap();
    }
    let (mut heard, mut digits) = (0, Vec::new());
    let until = tokio::time::Instant::now() + Duration::from_secs(2);
    while let Ok(Some(ev)) = tokio::time::timeout_at(until, r.media.events.recv()).await {
        match ev {
            LegEvent::Audio(f) if f[0] == 0x20 => heard += 1,
            LegEvent::Audio(f) => assert!(
                f.iter().all(|b| *b == 0xFF || *b == 0x20),
                "PCMA never decoded as PCMU"
            ),
            LegEvent::Dtmf(d) => digits.push(d),
            _ => {}
        }
    }
    assert!(heard >= 15, "{heard} frames of the caller heard");
    assert_eq!(digits, vec!['5'], "one digit for one event");
    let rep = r.media.report.lock().unwrap().clone();
    assert_eq!(rep.wrong_payload_type, 20, "{rep:?}");
    assert_eq!(rep.dtmf_events, 1);
}

#[tokio::test]
async fn rtcp_goes_both_ways_and_silence_ends_in_a_timeout() {
    let mut r = rig(600).await;
    r.peer
        .send_to(&rtp(1, 0, &[0x20; 160]), r.ours)
        .await
        .unwrap();
    // Our report reaches the peer's RTCP address.
    let report = recv(&r.peer_rtcp).await;
    assert!(rtcp::parse_compound(&report).is_ok());
    // The peer's receiver report about our stream is read.
    let ours_ssrc = packet::parse(&recv(&r.peer).await).unwrap().header.ssrc;
    let block = rtcp::ReportBlock {
        ssrc: ours_ssrc,
        fraction_lost: 64,
        cumulative_lost: 7,
        highest_seq: 100,
        jitter: 80,
        last_sr: 0,
        delay_since_last_sr: 0,
    };
    let mut rr = Vec::new();
    rtcp::write_report(&mut rr, None, 0xabc, &[block], "peer");
    let rtcp_port = SocketAddr::new(r.ours.ip(), r.ours.port() + 1);
    r.peer_rtcp.send_to(&rr, rtcp_port).await.unwrap();
    // Then nothing: the timeout fires once.
    let until = tokio::time::Instant::now() + Duration::from_secs(3);
    let mut timeouts = 0;
    while let Ok(Some(ev)) = tokio::time::timeout_at(until, r.media.events.recv()).await {
        if matches!(ev, LegEvent::MediaTimeout(_)) {
            timeouts += 1;
        }
    }
    assert_eq!(timeouts, 1);
    let peer = r
        .media
        .report
        .lock()
        .unwrap()
        .peer
        .expect("the peer's report");
    assert_eq!((peer.cumulative_lost, peer.jitter_ms), (7, 10.0));
    assert!((peer.fraction_lost - 0.25).abs() < 1e-9);
}
