//! The simulator over real loopback sockets: the upgrade rules, a
//! continued context, cancel, the caps, the faults and the stats.

use std::net::SocketAddr;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use super::*;
use crate::test_ws::{DEADLINE, Frame, RawWs, http};

const PATH: &str = "/tts/websocket?cartesia_version=2025-04-16";

async fn start(cfg: CartesiaSimConfig) -> (CartesiaSim, SocketAddr, CancellationToken) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sim = CartesiaSim::new(cfg);
    let cancel = CancellationToken::new();
    tokio::spawn(sim.clone().serve(listener, cancel.clone()));
    (sim, addr, cancel)
}

/// Fast speech, no expiry: tests wait on messages, never on the clock.
fn fast() -> CartesiaSimConfig {
    CartesiaSimConfig {
        first_chunk_latency_ms: 10,
        realtime_factor: 50.0,
        context_expiry_ms: None,
        ..CartesiaSimConfig::default()
    }
}

/// Polls `f` every 20 ms until it holds, at most [`DEADLINE`].
async fn eventually(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let polled = tokio::time::timeout(DEADLINE, async {
        while !f().await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(polled.is_ok(), "timed out waiting for {what}");
}

fn request(ctx: &str, transcript: &str, cont: bool, encoding: &str, rate: u32) -> String {
    json!({
        "model_id": "sonic-3",
        "transcript": transcript,
        "voice": {"mode": "id", "id": "a0e99841-438c-4a64-b679-ae501e7d6091"},
        "output_format": {"container": "raw", "encoding": encoding, "sample_rate": rate},
        "context_id": ctx,
        "continue": cont,
    })
    .to_string()
}

fn mulaw(ctx: &str, transcript: &str, cont: bool) -> String {
    request(ctx, transcript, cont, "pcm_mulaw", 8_000)
}

async fn next_json(ws: &mut RawWs) -> Value {
    match ws.recv().await {
        Some(Frame::Text(t)) => serde_json::from_str(&t).unwrap(),
        other => panic!("expected a text frame, got {other:?}"),
    }
}

/// Reads until `ctx`'s `done` (or `error`); returns its audio and the
/// final message. Messages of other contexts are not expected.
async fn until_done(ws: &mut RawWs, ctx: &str) -> (Vec<u8>, Value) {
    let mut audio = Vec::new();
    loop {
        let v = next_json(ws).await;
        assert_eq!(v["context_id"], ctx, "{v}");
        match v["type"].as_str() {
            Some("chunk") => audio.extend(
                base64::engine::general_purpose::STANDARD
                    .decode(v["data"].as_str().unwrap())
                    .unwrap(),
            ),
            Some("done" | "error") => return (audio, v),
            _ => {}
        }
    }
}

fn ms_for(text: &str) -> usize {
    (text.chars().count() as f64 * 1000.0 / 15.0).round() as usize
}

#[tokio::test]
async fn a_continued_context_streams_audio_then_one_done_and_is_recorded() {
    let (sim, addr, cancel) = start(fast()).await;
    let (mut ws, _) = RawWs::connect(addr, PATH, &[]).await.unwrap();
    ws.send_text(&mulaw("turn-1", "Your table for two ", true))
        .await;
    ws.send_text(&mulaw("turn-1", "is booked for eight. ", true))
        .await;
    ws.send_text(&mulaw("turn-1", "", false)).await;
    let (audio, last) = until_done(&mut ws, "turn-1").await;
    assert_eq!(
        (last["type"].as_str(), last["done"].as_bool()),
        (Some("done"), Some(true))
    );
    let said = "Your table for two is booked for eight. ";
    assert_eq!(audio.len(), ms_for(said) * 8, "μ-law 8 kHz: 8 bytes a ms");
    ws.send_close().await;
    assert_eq!(ws.recv().await, Some(Frame::Close(1000, String::new())));

    eventually("the socket to close", async || {
        sim.stats().open_sessions == 0
    })
    .await;
    let stats = sim.stats();
    assert_eq!((stats.total_sessions, stats.open_contexts), (1, 0));
    assert_eq!(
        stats.output_formats,
        [("pcm_mulaw_8000".to_owned(), 1)].into()
    );
    assert_eq!(stats.audio_ms, ms_for(said) as u64);
    assert_eq!(stats.audio_bytes, stats.audio_ms * 8);
    let records = sim.sessions();
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(
        (r.session, r.request.as_str(), r.version.as_str()),
        (1, PATH, "2025-04-16")
    );
    assert_eq!(r.contexts["turn-1"].audio_ms, stats.audio_ms);
    assert_eq!(r.context_formats["turn-1"], "pcm_mulaw_8000");
    assert!(!r.open);

    let (status, body) = http(addr, "GET /stats HTTP/1.1\r\nHost: sim\r\n\r\n".into()).await;
    assert_eq!(status, 200);
    assert_eq!(serde_json::from_str::<CartesiaStats>(&body).unwrap(), stats);
    let (status, body) = http(
        addr,
        "GET /stats/sessions HTTP/1.1\r\nHost: sim\r\n\r\n".into(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Vec<CartesiaSessionRecord>>(&body).unwrap(),
        records
    );
    cancel.cancel();
}

#[tokio::test]
async fn each_context_gets_its_format_and_audio_proportional_to_its_text() {
    let (sim, addr, cancel) = start(fast()).await;
    let (mut ws, _) = RawWs::connect(addr, PATH, &[]).await.unwrap();
    let short = "Sure. ";
    let long = "Sure, I can book that table for you tonight. ";
    let cases = [
        ("a", short, "pcm_s16le", 16_000, 32),
        ("b", long, "pcm_s16le", 16_000, 32),
        ("c", short, "pcm_alaw", 8_000, 8),
        ("d", short, "pcm_f32le", 8_000, 32),
    ];
    for (ctx, text, encoding, rate, bytes_per_ms) in cases {
        ws.send_text(&request(ctx, text, false, encoding, rate))
            .await;
        let (audio, last) = until_done(&mut ws, ctx).await;
        assert_eq!(last["type"], "done");
        assert_eq!(
            audio.len(),
            ms_for(text) * bytes_per_ms,
            "{ctx}: {encoding}/{rate}"
        );
    }
    let stats = sim.stats();
    assert_eq!(
        stats.output_formats,
        [
            ("pcm_alaw_8000".to_owned(), 1),
            ("pcm_f32le_8000".to_owned(), 1),
            ("pcm_s16le_16000".to_owned(), 2)
        ]
        .into()
    );
    let r = &sim.sessions()[0];
    // Proportional to the text: the same speaking rate for both lengths.
    let (a, b) = (r.contexts["a"].audio_ms, r.contexts["b"].audio_ms);
    assert_eq!((a, b), (ms_for(short) as u64, ms_for(long) as u64));
    // A compressed container is refused on the socket, which stays open.
    let mut mp3: Value = serde_json::from_str(&mulaw("e", short, false)).unwrap();
    mp3["output_format"]["container"] = "mp3".into();
    ws.send_text(&mp3.to_string()).await;
    let (audio, err) = until_done(&mut ws, "e").await;
    assert!(audio.is_empty());
    assert_eq!(
        (err["type"].as_str(), err["status_code"].as_u64()),
        (Some("error"), Some(400))
    );
    ws.send_text(&mulaw("f", short, false)).await;
    assert_eq!(until_done(&mut ws, "f").await.1["type"], "done");
    cancel.cancel();
}

#[tokio::test]
async fn cancel_stops_a_context_and_later_requests_are_served() {
    let (sim, addr, cancel) = start(CartesiaSimConfig {
        realtime_factor: 2.0,
        ..fast()
    })
    .await;
    let (mut ws, _) = RawWs::connect(addr, PATH, &[]).await.unwrap();
    let long = "This is a long answer which the caller interrupts before it ends. ";
    ws.send_text(&mulaw("a", long, false)).await;
    let first = next_json(&mut ws).await;
    assert_eq!(
        (first["type"].as_str(), first["context_id"].as_str()),
        (Some("chunk"), Some("a"))
    );
    ws.send_text(r#"{"context_id":"a","cancel":true}"#).await;
    ws.send_text(&mulaw("b", "Okay. ", false)).await;
    // The socket is ordered: whatever of "a" was sent before the cancel
    // arrives first, then only "b".
    let mut a_chunks = 1;
    let first_b = loop {
        let v = next_json(&mut ws).await;
        if v["context_id"] == "a" {
            assert_eq!(v["type"], "chunk", "no done after a cancel: {v}");
            a_chunks += 1;
        } else {
            break v;
        }
    };
    assert_eq!(first_b["context_id"], "b");
    let (_, last) = until_done(&mut ws, "b").await;
    assert_eq!(last["type"], "done");
    let r = &sim.sessions()[0];
    assert_eq!(r.contexts["a"].chunks, a_chunks);
    assert!(
        r.contexts["a"].audio_ms < ms_for(long) as u64,
        "the rest was never sent"
    );
    assert_eq!(sim.stats().open_contexts, 0);
    cancel.cancel();
}

#[tokio::test]
async fn the_version_is_required_and_the_query_wins() {
    let (sim, addr, cancel) = start(fast()).await;
    let refused = RawWs::connect(addr, "/tts/websocket", &[])
        .await
        .err()
        .unwrap();
    assert_eq!(refused.status, 400, "{}", refused.head);
    assert!(
        refused.head.contains("application/json"),
        "{}",
        refused.head
    );
    let unknown = RawWs::connect(
        addr,
        "/tts/websocket",
        &[("Cartesia-Version", "2023-01-01")],
    )
    .await
    .err()
    .unwrap();
    assert_eq!(unknown.status, 400);
    // A good header alone is enough; a good query beats a bad header.
    RawWs::connect(
        addr,
        "/tts/websocket",
        &[("Cartesia-Version", "2024-11-13")],
    )
    .await
    .unwrap();
    let (mut ws, _) = RawWs::connect(
        addr,
        "/tts/websocket?cartesia_version=2026-03-01",
        &[("Cartesia-Version", "1999-01-01")],
    )
    .await
    .unwrap();
    // 2026-03-01 errors are structured.
    ws.send_text("{}").await;
    let err = next_json(&mut ws).await;
    assert_eq!(
        (err["type"].as_str(), err["error_code"].as_str()),
        (Some("error"), Some("invalid_request"))
    );
    assert_eq!(sim.stats().total_sessions, 2);
    cancel.cancel();
}

#[tokio::test]
async fn a_configured_key_is_required_in_any_documented_place() {
    let (_sim, addr, cancel) = start(CartesiaSimConfig {
        api_key: Some("sk_car_test".into()),
        ..fast()
    })
    .await;
    let refused = RawWs::connect(addr, PATH, &[("X-API-Key", "wrong")])
        .await
        .err()
        .unwrap();
    assert_eq!(refused.status, 401);
    assert_eq!(
        RawWs::connect(addr, PATH, &[]).await.err().unwrap().status,
        401
    );
    RawWs::connect(addr, PATH, &[("X-API-Key", "sk_car_test")])
        .await
        .unwrap();
    RawWs::connect(addr, PATH, &[("Authorization", "Bearer sk_car_test")])
        .await
        .unwrap();
    RawWs::connect(addr, &format!("{PATH}&api_key=sk_car_test"), &[])
        .await
        .unwrap();
    cancel.cancel();
}

#[tokio::test]
async fn over_the_context_cap_the_open_socket_gets_a_429_error() {
    let (sim, addr, cancel) = start(CartesiaSimConfig {
        max_concurrent_contexts: Some(1),
        max_sockets: Some(2),
        ..fast()
    })
    .await;
    let (mut one, _) = RawWs::connect(addr, PATH, &[]).await.unwrap();
    let (mut two, _) = RawWs::connect(addr, PATH, &[]).await.unwrap();
    // The socket cap is separate: a third upgrade is refused.
    let third = RawWs::connect(addr, PATH, &[]).await.err().unwrap();
    assert_eq!(third.status, 429);
    one.send_text(&mulaw("a", "Holding the only slot, ", true))
        .await;
    eventually("the context to open", async || {
        sim.stats().open_contexts == 1
    })
    .await;
    two.send_text(&mulaw("b", "Hello. ", false)).await;
    let err = next_json(&mut two).await;
    assert_eq!(err["type"], "error");
    assert_eq!(
        (err["status_code"].as_u64(), err["done"].as_bool()),
        (Some(429), Some(true))
    );
    assert_eq!(err["context_id"], "b");
    // The socket stays open; once the slot is free the retry is served.
    one.send_text(&mulaw("a", "", false)).await;
    assert_eq!(until_done(&mut one, "a").await.1["type"], "done");
    eventually("the slot to free", async || sim.stats().open_contexts == 0).await;
    two.send_text(&mulaw("b", "Hello. ", false)).await;
    assert_eq!(until_done(&mut two, "b").await.1["type"], "done");
    let stats = sim.stats();
    assert_eq!((stats.rejected_contexts, stats.rejected_sessions), (1, 1));
    cancel.cancel();
}

#[tokio::test]
async fn a_faulty_session_is_dropped_then_upgrades_fail_during_the_down_window() {
    let (sim, addr, cancel) = start(CartesiaSimConfig {
        close_after_ms: Some(50),
        faulty_sessions: Some(1),
        down_after_fault_ms: Some(3_000),
        realtime_factor: 10.0,
        ..fast()
    })
    .await;
    let (mut ws, _) = RawWs::connect(addr, PATH, &[]).await.unwrap();
    assert_eq!(ws.until_close().await.1, Some(1011));
    eventually("the fault to count", async || {
        sim.stats().faulted_sessions >= 1
    })
    .await;
    let down = RawWs::connect(addr, PATH, &[]).await.err().unwrap();
    assert_eq!(down.status, 503, "{}", down.head);
    // After the window the second session is not faulty: it outlives
    // close_after_ms (its audio takes longer than 50 ms to send).
    let mut ws = None;
    eventually("the window to close", async || {
        ws = RawWs::connect(addr, PATH, &[]).await.ok().map(|(ws, _)| ws);
        ws.is_some()
    })
    .await;
    let mut ws = ws.unwrap();
    let text = "A session after the outage speaks to the end. ";
    assert!(
        ms_for(text) as f64 / 10.0 > 5.0 * 50.0,
        "far longer than close_after_ms"
    );
    ws.send_text(&mulaw("a", text, false)).await;
    assert_eq!(until_done(&mut ws, "a").await.1["type"], "done");
    let r = sim.sessions();
    assert_eq!(r.iter().map(|r| r.session).collect::<Vec<_>>(), [1, 2]);
    cancel.cancel();
}

#[tokio::test]
async fn the_mid_stream_error_and_the_config_round_trip_over_http() {
    let (sim, addr, cancel) = start(fast()).await;
    let cfg = CartesiaSimConfig {
        error_mid_stream_after_chars: Some(20),
        ..fast()
    };
    let body = serde_json::to_string(&cfg).unwrap();
    let put = format!(
        "PUT /admin/config HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (status, _) = http(addr, put).await;
    assert_eq!(status, 200);
    let (_, got) = http(
        addr,
        "GET /admin/config HTTP/1.1\r\nHost: sim\r\n\r\n".into(),
    )
    .await;
    assert_eq!(
        serde_json::from_str::<CartesiaSimConfig>(&got).unwrap(),
        cfg
    );
    let (mut ws, _) = RawWs::connect(addr, PATH, &[]).await.unwrap();
    let text = "This reply fails part of the way through its audio. ";
    ws.send_text(&mulaw("a", text, false)).await;
    let (audio, err) = until_done(&mut ws, "a").await;
    assert!(!audio.is_empty() && audio.len() < ms_for(text) * 8);
    assert_eq!(
        (err["type"].as_str(), err["status_code"].as_u64()),
        (Some("error"), Some(500))
    );
    assert_eq!(sim.stats().errored_contexts, 1);
    cancel.cancel();
}
