//! Socket tests of the connection-level fault scoping: `faulty_sessions`,
//! `down_after_fault_ms` and `drop_at_audio_ms`, over real loopback
//! WebSockets.

use std::time::Duration;

use media::synth::SpeechSynth;
use tokio::net::TcpListener;

use super::*;
use crate::test_ws::{DEADLINE, Frame, RawWs};

const MULAW: &str = "/v1/listen?encoding=mulaw&sample_rate=8000&endpointing=300";

async fn start(cfg: SttSimConfig) -> (SttSim, std::net::SocketAddr, CancellationToken) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sim = SttSim::new(cfg);
    let cancel = CancellationToken::new();
    tokio::spawn(sim.clone().serve(listener, cancel.clone()));
    (sim, addr, cancel)
}

/// 300 ms of silence then speech, as μ-law 20 ms frames, `ms` long in all.
fn speech_frames(ms: u32) -> Vec<Vec<u8>> {
    let mut s = SpeechSynth::new(8_000, 21);
    let mut audio = s.silence(300);
    audio.extend(s.utterance(ms.saturating_sub(300)));
    media::g711::encode_ulaw(&audio)
        .chunks(160)
        .map(<[u8]>::to_vec)
        .collect()
}

/// Every text frame until the server's close, and that close.
async fn until_close(ws: &mut RawWs) -> (Vec<serde_json::Value>, Option<(u16, String)>) {
    let mut texts = Vec::new();
    while let Some(frame) = ws.recv().await {
        match frame {
            Frame::Text(t) => texts.push(serde_json::from_str(&t).unwrap()),
            Frame::Binary(_) => {}
            Frame::Close(code, reason) => {
                ws.send_close().await;
                return (texts, Some((code, reason)));
            }
        }
    }
    (texts, None)
}

fn count(texts: &[serde_json::Value], kind: &str) -> usize {
    texts.iter().filter(|m| m["type"] == kind).count()
}

#[tokio::test]
async fn drop_at_audio_closes_1011_net_0000_without_an_error_and_spares_later_sessions() {
    let (sim, addr, cancel) = start(SttSimConfig {
        result_latency_ms: 0,
        drop_at_audio_ms: Some(1_000),
        faulty_sessions: Some(1),
        ..SttSimConfig::default()
    })
    .await;

    // Session 1: dropped 700 ms into the utterance, which never gets a final.
    let (mut ws, _) = RawWs::connect(addr, MULAW, &[]).await.unwrap();
    for frame in speech_frames(1_000) {
        ws.send_binary(&frame).await;
    }
    let (texts, close) = until_close(&mut ws).await;
    assert_eq!(close, Some((1011, "NET-0000".to_owned())));
    assert_eq!(count(&texts, "Error"), 0, "a routine close: {texts:?}");
    assert_eq!(count(&texts, "SpeechStarted"), 0, "vad_events not asked");
    assert!(
        texts.iter().all(|m| m["is_final"] != true),
        "the utterance was cut mid-way: {texts:?}"
    );

    // Session 2 is beyond the scope: the same audio and more go through.
    let (mut ws, _) = RawWs::connect(addr, MULAW, &[]).await.unwrap();
    for frame in speech_frames(2_000) {
        ws.send_binary(&frame).await;
    }
    ws.send_text(r#"{"type":"CloseStream"}"#).await;
    let (texts, close) = until_close(&mut ws).await;
    assert_eq!(close.map(|c| c.0), Some(1000));
    assert_eq!(texts.iter().filter(|m| m["is_final"] == true).count(), 1);

    let stats = sim.stats();
    assert_eq!((stats.total_sessions, stats.faulted_sessions), (2, 1));
    cancel.cancel();
}

/// Connects until an upgrade is accepted, counting the 503s on the way.
async fn connect_when_up(addr: std::net::SocketAddr) -> (RawWs, u64) {
    let mut refused = 0;
    let up = tokio::time::timeout(DEADLINE, async {
        loop {
            match RawWs::connect(addr, MULAW, &[]).await {
                Ok((ws, _)) => return ws,
                Err(r) => {
                    assert_eq!(r.status, 503, "{}", r.head);
                    refused += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    })
    .await
    .expect("the simulator came back up");
    (up, refused)
}

#[tokio::test]
async fn down_after_fault_refuses_with_503_then_accepts_an_unfaulted_session() {
    let (sim, addr, cancel) = start(SttSimConfig {
        close_after_ms: Some(100),
        faulty_sessions: Some(1),
        down_after_fault_ms: Some(1_500),
        ..SttSimConfig::default()
    })
    .await;
    let (mut ws, _) = RawWs::connect(addr, MULAW, &[]).await.unwrap();
    let (_, close) = until_close(&mut ws).await;
    assert_eq!(close, Some((1011, "NET-0000".to_owned())));

    // The outage began before the close frame went out.
    let refused = RawWs::connect(addr, MULAW, &[]).await.err().unwrap();
    assert_eq!(refused.status, 503);
    let head = refused.head.to_ascii_lowercase();
    assert!(head.contains("dg-error:"), "{head}");
    assert!(head.contains("service_unavailable"), "{head}");

    let (mut ws, more) = connect_when_up(addr).await;
    assert_eq!(sim.stats().refused_while_down, 1 + more);
    // Session 2 outlives `close_after_ms`: the fault is scoped to session 1.
    tokio::time::sleep(Duration::from_millis(300)).await;
    ws.send_text(r#"{"type":"CloseStream"}"#).await;
    let (_, close) = until_close(&mut ws).await;
    assert_eq!(close.map(|c| c.0), Some(1000));

    let stats = sim.stats();
    assert_eq!(stats.faulted_sessions, 1);
    assert_eq!(stats.total_sessions, 2, "refusals are not sessions");
    cancel.cancel();
}
