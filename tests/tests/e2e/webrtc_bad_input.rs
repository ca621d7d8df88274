//! Bad input on the WebRTC ingress: each malformed or unacceptable offer
//! (a `sendonly` or `inactive` audio section and a second audio section
//! among them) gets its own 4xx with a JSON kind, an unauthenticated one a 401, a
//! `PATCH` a 405, an unknown session a 404; STUN for no session and DTLS
//! garbage on the shared socket are dropped and counted — and the server
//! still answers a good offer afterwards. Nothing panics, nothing is left.

#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use callgate::config::Config;
use callgate_sim::SimConfig;
use callgate_tests::Harness;

/// A Chromium-shaped audio offer (trimmed): ICE credentials, fingerprint,
/// Opus on payload type 111.
const OFFER: &str = "v=0\r\no=- 46117 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n\
a=group:BUNDLE 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111 0\r\nc=IN IP4 0.0.0.0\r\n\
a=ice-ufrag:Fq3X\r\na=ice-pwd:s4J3ZhRk0b1zCkQkGmA7lq2k\r\n\
a=fingerprint:sha-256 6B:8B:F0:65:5F:78:E2:51:3B:AC:6F:F3:3F:46:1B:35:DC:B8:5F:64:1A:24:C2:43:F0:A1:58:D0:A1:2C:19:08\r\n\
a=setup:actpass\r\na=mid:0\r\na=sendrecv\r\na=rtcp-mux\r\n\
a=rtpmap:111 opus/48000/2\r\na=fmtp:111 minptime=10;useinbandfec=1\r\na=rtpmap:0 PCMU/8000\r\n";

fn webrtc(open: bool) -> impl FnOnce(&mut Config) {
    move |cfg: &mut Config| {
        cfg.webrtc.enabled = true;
        cfg.webrtc.listen = "127.0.0.1:0".parse().unwrap();
        cfg.webrtc.open = open;
        cfg.webrtc.ice_timeout_ms = 1_000;
    }
}

async fn post(
    h: &Harness,
    content_type: &str,
    body: impl Into<reqwest::Body>,
) -> (u16, serde_json::Value) {
    callgate::ensure_tls_provider();
    let r = reqwest::Client::new()
        .post(format!("http://{}/v1/webrtc", h.server.addr))
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_offer_gets_its_own_refusal_and_a_good_one_still_works() {
    let h = Harness::start(SimConfig::default(), webrtc(true)).await;
    let second_audio = &OFFER[OFFER.find("m=audio").unwrap()..];
    let cases: [(&str, String, u16, &str); 8] = [
        ("application/sdp", "hello".into(), 400, "bad_line"),
        (
            "application/sdp",
            OFFER.replace("a=rtpmap:111 opus/48000/2\r\n", ""),
            422,
            "no_opus",
        ),
        (
            "application/sdp",
            OFFER.replace("m=audio", "m=video"),
            422,
            "no_audio",
        ),
        (
            "application/sdp",
            OFFER.replace("a=fingerprint:", "a=x-fingerprint:"),
            400,
            "no_fingerprint",
        ),
        (
            "application/sdp",
            OFFER.replace("a=sendrecv", "a=sendonly"),
            422,
            "not_sendrecv",
        ),
        (
            "application/sdp",
            OFFER.replace("a=sendrecv", "a=inactive"),
            422,
            "not_sendrecv",
        ),
        (
            "application/sdp",
            format!("{OFFER}{}", second_audio.replace("a=mid:0", "a=mid:1")),
            422,
            "several_audio",
        ),
        ("application/json", OFFER.into(), 415, "content_type"),
    ];
    for (ct, body, status, kind) in cases {
        let (got, json) = post(&h, ct, body).await;
        assert_eq!(
            (got, json["error"].as_str()),
            (status, Some(kind)),
            "{json}"
        );
    }
    let (got, _) = post(&h, "application/sdp", vec![b'v'; 64 * 1024]).await;
    assert_eq!(got, 413, "an oversized body");
    // str0m itself refuses what passes the screen but is not SDP it takes.
    let broken = OFFER
        .replace("a=setup:actpass", "a=setup:nonsense")
        .replace("a=mid:0\r\n", "");
    let (got, json) = post(&h, "application/sdp", broken).await;
    assert!(got == 400 || got == 201, "{got} {json}");

    let client = reqwest::Client::new();
    let base = format!("http://{}/v1/webrtc/sessions", h.server.addr);
    let r = client
        .patch(format!("{base}/AAAAAAAAAAAAAAAAAAAAAA"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
    assert_eq!(r.headers()["allow"], "GET, DELETE, OPTIONS");
    for bad in ["AAAAAAAAAAAAAAAAAAAAAA", "..%2F..%2Fetc"] {
        let r = client.delete(format!("{base}/{bad}")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 404, "{bad}");
        let r = client.get(format!("{base}/{bad}")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 404, "{bad}");
    }
    let r = client
        .request(
            reqwest::Method::OPTIONS,
            format!("http://{}/v1/webrtc", h.server.addr),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    assert_eq!(r.headers()["accept-post"], "application/sdp");
    assert_eq!(r.headers()["access-control-allow-origin"], "*");

    // Datagrams for no session: a STUN binding request naming nobody, DTLS
    // garbage, RTP from an unknown address. Dropped, counted by kind.
    let w = h.server.carriers.webrtc.as_ref().unwrap();
    let sock = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut stun = vec![0x00, 0x01, 0x00, 0x0c, 0x21, 0x12, 0xa4, 0x42];
    stun.extend_from_slice(&[9; 12]);
    stun.extend_from_slice(&[0x00, 0x06, 0x00, 0x08]);
    stun.extend_from_slice(b"nobo:dyx");
    for d in [
        stun,
        vec![0x16, 0xfe, 0xfd, 0xff, 0xff],
        vec![0x80, 0x6f, 0, 1],
        vec![255; 40],
    ] {
        sock.send_to(&d, w.local).await.unwrap();
    }
    let metrics = callgate_tests::eventually(
        Duration::from_secs(5),
        "the stray datagrams counted",
        async || h.metrics_text().await,
        |m| {
            ["stun", "dtls", "rtp", "other"].iter().all(|k| {
                m.contains(&format!(
                    "callgate_webrtc_datagrams_dropped_total{{kind=\"{k}\",why=\"no_session\"}}"
                ))
            })
        },
    )
    .await;
    assert!(
        metrics.contains("callgate_webrtc_offers_total{outcome=\"no_opus\"} 1"),
        "{metrics}"
    );

    // Still serving: a good offer is answered (no browser follows it, so the
    // session ends `ice_failed` within its 1 s bound, leaving nothing).
    let (got, answer) = post(&h, "application/sdp", OFFER).await;
    assert_eq!(got, 201);
    answer_is_as_documented(answer.as_str().unwrap(), w.advertised);
    let ledger = callgate_tests::eventually(
        Duration::from_secs(15),
        "the unconnected session ended ice_failed",
        async || {
            let row = h
                .db
                .query_opt("SELECT end_reason FROM call_ledger WHERE ingress = 'webrtc' AND cleanup_status <> 'pending'", &[])
                .await
                .unwrap();
            row.map(|r| r.get::<_, Option<String>>(0))
        },
        Option::is_some,
    )
    .await;
    assert_eq!(ledger.flatten().as_deref(), Some("ice_failed"));
    h.assert_webrtc_clear().await;
}

/// POSTs the good [`OFFER`], with `key` as the bearer (if any).
async fn post_offer(h: &Harness, key: Option<&str>) -> reqwest::Response {
    callgate::ensure_tls_provider();
    let mut req = reqwest::Client::new()
        .post(format!("http://{}/v1/webrtc", h.server.addr))
        .header("content-type", "application/sdp")
        .body(OFFER);
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    req.send().await.unwrap()
}

/// `GET url` with `key` as the bearer (if any): the status and the JSON.
async fn get_json(url: &str, key: Option<&str>) -> (u16, serde_json::Value) {
    callgate::ensure_tls_provider();
    let mut req = reqwest::Client::new().get(url);
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_does_not_serve_conversations_says_so() {
    let h = Harness::start(SimConfig::default(), |c| {
        webrtc(true)(c);
        c.webrtc.conversation = false;
    })
    .await;
    let r = post_offer(&h, None).await;
    assert_eq!(r.status().as_u16(), 201);
    let location = r.headers()["location"].to_str().unwrap().to_string();
    let url = format!("http://{}{location}/conversation", h.server.addr);
    let (got, body) = get_json(&url, None).await;
    assert_eq!(
        (got, body["error"].as_str()),
        (403, Some("conversation_off")),
        "{body}"
    );
    let unknown = format!(
        "http://{}/v1/webrtc/sessions/AAAAAAAAAAAAAAAAAAAAAA/conversation",
        h.server.addr
    );
    assert_eq!(get_json(&unknown, None).await.0, 404);
}

/// Every line of `docs/webrtc.md`'s example answer is in the real one, with
/// the example's address and port (`203.0.113.10:3478`) read as the
/// advertised ones; a candidate line is compared from its component on
/// (its foundation and priority are the stack's). Nothing the example
/// leaves out may contradict it: no trickle option.
fn answer_is_as_documented(answer: &str, advertised: std::net::SocketAddr) {
    let doc = include_str!("../../../docs/webrtc.md");
    let block = doc
        .split("HTTP/1.1 201 Created")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the doc's 201 example");
    let sdp = block.split("\n\n").nth(1).expect("the example's SDP");
    let lines: Vec<&str> = answer.split("\r\n").collect();
    let mut checked = 0;
    for want in sdp
        .lines()
        .filter(|l| !l.trim().is_empty() && l.trim() != "…")
    {
        let want = want
            .replace("203.0.113.10", &advertised.ip().to_string())
            .replace("3478", &advertised.port().to_string());
        let found = match want.strip_prefix("a=candidate:") {
            Some(c) => {
                let tail = |l: &str| l.split(' ').skip(1).map(str::to_string).collect::<Vec<_>>();
                let want_tail: Vec<String> = c.split(' ').skip(1).map(str::to_string).collect();
                lines.iter().any(|l| {
                    l.strip_prefix("a=candidate:").is_some_and(|got| {
                        let g = tail(got);
                        g.first() == want_tail.first()
                            && g.get(1).map(|s| s.to_ascii_lowercase()) == want_tail.get(1).cloned()
                            && g.get(3..).is_some_and(|g| g.starts_with(&want_tail[3..]))
                    })
                })
            }
            None => lines.contains(&want.as_str()),
        };
        assert!(
            found,
            "the answer lacks the documented line {want:?}:\n{answer}"
        );
        checked += 1;
    }
    assert!(checked >= 8, "the example shows {checked} lines");
    assert!(!answer.contains("trickle"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_webrtc_open_an_offer_needs_a_partner_key() {
    let h = Harness::start(SimConfig::default(), |c| {
        webrtc(false)(c);
        callgate_tests::add_partner(c, "acme", "acme-key", None);
        callgate_tests::add_partner(c, "other", "other-key", None);
    })
    .await;
    let (got, json) = post(&h, "application/sdp", OFFER).await;
    assert_eq!(
        (got, json["error"].as_str()),
        (401, Some("unauthorized")),
        "{json}"
    );
    let r = post_offer(&h, Some("acme-key")).await;
    assert_eq!(r.status().as_u16(), 201);
    let location = r.headers()["location"].to_str().unwrap().to_string();
    assert!(location.starts_with("/v1/webrtc/sessions/"));
    assert!(r.headers().contains_key("etag"));
    // The conversation is the creating partner's alone.
    let conversation = format!("http://{}{location}/conversation", h.server.addr);
    for (key, status) in [
        (None, 401),
        (Some("other-key"), 401),
        (Some("acme-key"), 200),
    ] {
        let (got, body) = get_json(&conversation, key).await;
        assert_eq!(got, status, "{key:?}: {body}");
    }
    let (_, body) = get_json(&conversation, Some("acme-key")).await;
    assert!(
        body["turns"].is_array() && body["call_id"].is_string(),
        "{body}"
    );
    assert_eq!(body["complete"], false, "the call goes on: {body}");
    let (got, body) = get_json(&format!("{conversation}?after=x"), Some("acme-key")).await;
    assert_eq!(
        (got, body["error"].as_str()),
        (400, Some("bad_query")),
        "{body}"
    );
    let (ingress, partner) = callgate_tests::eventually(
        Duration::from_secs(10),
        "the ledger row",
        async || {
            h.db.query_opt("SELECT ingress, partner_id FROM call_ledger", &[])
                .await
                .unwrap()
                .map(|r| (r.get::<_, String>(0), r.get::<_, Option<String>>(1)))
        },
        Option::is_some,
    )
    .await
    .unwrap();
    assert_eq!(
        (ingress.as_str(), partner.as_deref()),
        ("webrtc", Some("acme"))
    );
}
