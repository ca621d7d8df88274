//! A WebRTC client whose ICE completes but whose DTLS never does (a str0m
//! client whose DTLS datagrams are dropped on the way, STUN passed): the
//! call ends `dtls_failed` at `webrtc.dtls_timeout_ms` through the core's
//! one terminal transition, and nothing is left routed; a client that never
//! starts ICE ends `ice_failed` at `webrtc.ice_timeout_ms`. Both timeouts
//! are set above `call.media_stall_ms` (5 s), which must not pre-empt
//! them, and the session's status names the same ending as the receipt.

#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::{Duration, Instant};

use callgate::carrier::webrtc::router::Kind;
use callgate_sim::SimConfig;
use callgate_tests::Harness;
use str0m::change::SdpAnswer;
use str0m::media::{Direction, MediaKind};
use str0m::net::{Protocol, Receive};
use str0m::{Candidate, Input, Output, Rtc, RtcConfig};
use tokio::net::UdpSocket;

/// An offer from a str0m client on `sock`, and what accepting the answer needs.
async fn offer(sock: &UdpSocket) -> (Rtc, str0m::change::SdpOffer, str0m::change::SdpPendingOffer) {
    let mut rtc = RtcConfig::new()
        .clear_codecs()
        .enable_opus(true, false)
        .build(Instant::now());
    rtc.add_local_candidate(Candidate::host(sock.local_addr().unwrap(), "udp").unwrap());
    let mut change = rtc.sdp_api();
    change.add_media(MediaKind::Audio, Direction::SendRecv, None, None, None);
    let (offer, pending) = change.apply().unwrap();
    (rtc, offer, pending)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ice_without_dtls_ends_dtls_failed_within_its_bound() {
    let h = Harness::start(SimConfig::default(), |c| {
        c.webrtc.enabled = true;
        c.webrtc.listen = "127.0.0.1:0".parse().unwrap();
        c.webrtc.open = true;
        c.webrtc.dtls_timeout_ms = 6_000;
    })
    .await;
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let (mut rtc, offer, pending) = offer(&sock).await;
    let (session, answer) = post_offer(&h, &offer).await;
    let answer = SdpAnswer::from_sdp_string(&answer).unwrap();
    rtc.sdp_api().accept_answer(pending, answer).unwrap();

    let started = Instant::now();
    let (mut stun_sent, mut dtls_dropped) = (0, 0);
    let mut buf = vec![0u8; 2_048];
    while started.elapsed() < Duration::from_secs(14) {
        let wait = match rtc.poll_output().unwrap() {
            Output::Transmit(t) => {
                if Kind::of(&t.contents) == Kind::Stun {
                    sock.send_to(&t.contents, t.destination).await.unwrap();
                    stun_sent += 1;
                } else {
                    dtls_dropped += 1;
                }
                continue;
            }
            Output::Event(_) => continue,
            Output::Timeout(t) => t.saturating_duration_since(Instant::now()),
        };
        let wait = wait.clamp(Duration::from_millis(1), Duration::from_millis(50));
        let input = match tokio::time::timeout(wait, sock.recv_from(&mut buf)).await {
            Ok(Ok((n, from))) => {
                let contents = buf[..n].try_into().unwrap();
                let recv = Receive {
                    proto: Protocol::Udp,
                    source: from,
                    destination: sock.local_addr().unwrap(),
                    contents,
                };
                rtc.handle_input(Input::Receive(Instant::now(), recv))
            }
            _ => rtc.handle_input(Input::Timeout(Instant::now())),
        };
        let _ = input;
        if h.ledger(&session)
            .await
            .is_some_and(|l| l.cleanup_status != "pending")
        {
            break;
        }
    }
    let took = started.elapsed();
    let l = h.closed_ledger(&session).await;
    assert_eq!(
        l.end_reason.as_deref(),
        Some("dtls_failed"),
        "{:#}",
        l.stats
    );
    assert!(took >= Duration::from_millis(5_500), "ended after {took:?}");
    assert_eq!(status_end_reason(&h, &session).await, "dtls_failed");
    assert!(
        stun_sent > 0 && dtls_dropped > 0,
        "ICE ran ({stun_sent} checks), DTLS was dropped ({dtls_dropped})"
    );
    let t = &l.stats["media"]["transport"];
    assert!(t["ice_ms"].is_u64(), "ICE completed: {t:#}");
    assert!(t.get("dtls_ms").is_none(), "DTLS never did: {t:#}");
    assert_eq!(t["lost"], "dtls_failed", "{t:#}");
    let metrics = h.metrics_text().await;
    assert!(
        metrics.contains("callgate_webrtc_transport_lost_total{why=\"dtls_failed\"} 1"),
        "{metrics}"
    );
    h.assert_webrtc_clear().await;
}

/// POSTs `offer`; the `201`'s session id and answer.
async fn post_offer(h: &Harness, offer: &str0m::change::SdpOffer) -> (String, String) {
    callgate::ensure_tls_provider();
    let r = reqwest::Client::new()
        .post(format!("http://{}/v1/webrtc", h.server.addr))
        .header("content-type", "application/sdp")
        .body(offer.to_sdp_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let session = r.headers()["location"]
        .to_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    (session, r.text().await.unwrap())
}

/// The session's status `end_reason` (it lingers after the end).
async fn status_end_reason(h: &Harness, session: &str) -> String {
    let r = reqwest::Client::new()
        .get(format!(
            "http://{}/v1/webrtc/sessions/{session}",
            h.server.addr
        ))
        .send()
        .await
        .unwrap();
    let v: serde_json::Value = r.json().await.unwrap();
    v["end_reason"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_ice_ends_ice_failed_at_its_timeout_not_at_the_media_stall() {
    let h = Harness::start(SimConfig::default(), |c| {
        c.webrtc.enabled = true;
        c.webrtc.listen = "127.0.0.1:0".parse().unwrap();
        c.webrtc.open = true;
        c.webrtc.ice_timeout_ms = 6_000;
    })
    .await;
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let (_rtc, offer, _pending) = offer(&sock).await;
    let posted = Instant::now();
    let (session, _) = post_offer(&h, &offer).await;
    let l = h.closed_ledger(&session).await;
    let took = posted.elapsed();
    assert_eq!(l.end_reason.as_deref(), Some("ice_failed"), "{:#}", l.stats);
    assert!(took >= Duration::from_millis(5_500), "ended after {took:?}");
    assert_eq!(status_end_reason(&h, &session).await, "ice_failed");
    h.assert_webrtc_clear().await;
}
