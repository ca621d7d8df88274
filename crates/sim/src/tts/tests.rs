//! The simulator over a real loopback socket: formats and audio recorded
//! per socket and per context, in-process and over HTTP.

use std::time::Duration;

use base64::Engine as _;
use serde_json::json;
use tokio::net::TcpListener;

use super::*;
use crate::test_ws::{DEADLINE, Frame, RawWs, http};

async fn start(cfg: TtsSimConfig) -> (TtsSim, std::net::SocketAddr, CancellationToken) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sim = TtsSim::new(cfg);
    let cancel = CancellationToken::new();
    tokio::spawn(sim.clone().serve(listener, cancel.clone()));
    (sim, addr, cancel)
}

/// Polls `f` every 20 ms until it holds, at most [`DEADLINE`].
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let polled = tokio::time::timeout(DEADLINE, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(polled.is_ok(), "timed out waiting for {what}");
}

/// Reads until `ctx`'s final message; returns the audio bytes received.
async fn audio_until_final(ws: &mut RawWs, ctx: &str) -> Vec<u8> {
    let mut audio = Vec::new();
    loop {
        let Some(Frame::Text(text)) = ws.recv().await else {
            panic!("socket ended before the final of {ctx}");
        };
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["contextId"], ctx, "{v}");
        if v["isFinal"] == true {
            return audio;
        }
        let chunk = base64::engine::general_purpose::STANDARD
            .decode(v["audio"].as_str().unwrap())
            .unwrap();
        audio.extend(chunk);
    }
}

#[tokio::test]
async fn pcm_16000_audio_is_recorded_per_socket_and_context() {
    let (sim, addr, cancel) = start(TtsSimConfig {
        first_chunk_latency_ms: 10,
        realtime_factor: 50.0,
        finish_flushed_on_close: true,
        ..TtsSimConfig::default()
    })
    .await;
    let path = "/v1/text-to-speech/voice-1/multi-stream-input\
                ?model_id=eleven_flash_v2_5&output_format=pcm_16000";
    let (mut ws, _) = RawWs::connect(addr, path, &[]).await.unwrap();
    let texts = ["Your table for two is booked. ", "See you at eight. "];
    for (i, text) in texts.iter().enumerate() {
        let ctx = format!("ctx-{}", i + 1);
        ws.send_text(&json!({ "text": " ", "context_id": ctx }).to_string())
            .await;
        ws.send_text(&json!({ "text": text, "context_id": ctx, "flush": true }).to_string())
            .await;
        // Closed after a flush: the flushed text is still spoken.
        ws.send_text(&json!({ "context_id": ctx, "close_context": true }).to_string())
            .await;
        let audio = audio_until_final(&mut ws, &ctx).await;
        let ms = (text.chars().count() as f64 * 1000.0 / 15.0).round() as usize;
        assert_eq!(audio.len(), ms * 16 * 2, "{ctx}: 16 kHz, 2 bytes a sample");
    }
    ws.send_text(r#"{"close_socket":true}"#).await;
    assert_eq!(ws.until_close().await.1, Some(1000));

    // A second socket with the default format.
    let (mut ws, _) = RawWs::connect(addr, "/v1/text-to-speech/v2/multi-stream-input", &[])
        .await
        .unwrap();
    ws.send_text(r#"{"close_socket":true}"#).await;
    assert_eq!(ws.until_close().await.1, Some(1000));

    eventually("both sockets to close", || {
        sim.sessions().iter().all(|r| !r.open) && sim.stats().open_sessions == 0
    })
    .await;
    let ms = |text: &str| (text.chars().count() as f64 * 1000.0 / 15.0).round() as u64;
    let stats = sim.stats();
    assert_eq!(
        stats.output_formats,
        [("pcm_16000".to_owned(), 1), ("ulaw_8000".to_owned(), 1)].into()
    );
    assert_eq!(stats.audio_ms, ms(texts[0]) + ms(texts[1]));
    assert_eq!(stats.audio_bytes, stats.audio_ms * 32);
    assert_eq!((stats.total_sessions, stats.open_contexts), (2, 0));

    let records = sim.sessions();
    assert_eq!(records.len(), 2);
    let r = &records[0];
    assert_eq!(r.session, 1);
    assert_eq!(r.request, path);
    assert_eq!(r.voice_id, "voice-1");
    assert_eq!(r.output_format, "pcm_16000");
    assert_eq!(r.audio_ms, stats.audio_ms);
    assert_eq!(r.audio_bytes, stats.audio_bytes);
    assert_eq!(r.contexts.len(), 2);
    for (i, text) in texts.iter().enumerate() {
        let c = r.contexts[&format!("ctx-{}", i + 1)];
        assert_eq!(c.audio_ms, ms(text));
        assert_eq!(c.audio_bytes, ms(text) * 32);
        assert!(c.chunks >= 1);
    }
    let r = &records[1];
    assert_eq!((r.session, r.output_format.as_str()), (2, "ulaw_8000"));
    assert_eq!((r.audio_ms, r.contexts.len()), (0, 0));

    // The same over HTTP.
    let (status, body) = http(addr, "GET /stats HTTP/1.1\r\nHost: sim\r\n\r\n".into()).await;
    assert_eq!(status, 200);
    let served: TtsStats = serde_json::from_str(&body).unwrap();
    assert_eq!(served, stats);
    let (status, body) = http(
        addr,
        "GET /stats/sessions HTTP/1.1\r\nHost: sim\r\n\r\n".into(),
    )
    .await;
    assert_eq!(status, 200);
    let served: Vec<TtsSessionRecord> = serde_json::from_str(&body).unwrap();
    assert_eq!(served, records);
    cancel.cancel();
}

#[tokio::test]
async fn a_refused_upgrade_counts_no_format_and_leaves_no_record() {
    let (sim, addr, cancel) = start(TtsSimConfig::default()).await;
    let refused = RawWs::connect(
        addr,
        "/v1/text-to-speech/v/multi-stream-input?output_format=mp3_44100_128",
        &[],
    )
    .await
    .err()
    .expect("mp3 is refused");
    assert_eq!(refused.status, 400, "{}", refused.head);
    let stats = sim.stats();
    assert!(stats.output_formats.is_empty());
    assert_eq!(stats.total_sessions, 0);
    assert!(sim.sessions().is_empty());
    cancel.cancel();
}

const SOCKET: &str = "/v1/text-to-speech/v1/multi-stream-input?output_format=ulaw_8000";

/// The close code and reason the server ends `ws` with.
async fn close_of(ws: &mut RawWs) -> (u16, String) {
    while let Some(frame) = ws.recv().await {
        if let Frame::Close(code, reason) = frame {
            ws.send_close().await;
            return (code, reason);
        }
    }
    panic!("the connection ended without a close frame");
}

#[tokio::test]
async fn a_faulted_socket_starts_an_outage_and_later_sockets_are_spared() {
    let (sim, addr, cancel) = start(TtsSimConfig {
        close_after_ms: Some(100),
        faulty_sessions: Some(1),
        down_after_fault_ms: Some(1_500),
        ..TtsSimConfig::default()
    })
    .await;
    let (mut ws, _) = RawWs::connect(addr, SOCKET, &[]).await.unwrap();
    let (code, reason) = close_of(&mut ws).await;
    assert_eq!(code, 1011);
    assert!(!reason.is_empty(), "a routine close names its reason");

    // Down from before the close frame went out: 503 at once.
    let refused = RawWs::connect(addr, SOCKET, &[]).await.err().unwrap();
    assert_eq!(refused.status, 503, "{}", refused.head);
    let mut refusals = 1;
    let mut ws = tokio::time::timeout(DEADLINE, async {
        loop {
            match RawWs::connect(addr, SOCKET, &[]).await {
                Ok((ws, _)) => return ws,
                Err(r) => {
                    assert_eq!(r.status, 503, "{}", r.head);
                    refusals += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    })
    .await
    .expect("the simulator came back up");
    assert_eq!(sim.stats().refused_while_down, refusals);

    // Socket 2 is beyond `faulty_sessions`: it outlives `close_after_ms`.
    tokio::time::sleep(Duration::from_millis(300)).await;
    ws.send_text(&json!({"close_socket": true}).to_string())
        .await;
    assert_eq!(close_of(&mut ws).await.0, 1000);
    let stats = sim.stats();
    assert_eq!((stats.total_sessions, stats.faulted_sessions), (2, 1));
    cancel.cancel();
}
