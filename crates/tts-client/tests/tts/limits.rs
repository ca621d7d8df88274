//! Limits and refusals over real sockets: the context cap on both sides,
//! the socket cap, auth and parameters, faults, and that every socket the
//! client opened is closed again.

use crate::common;

use std::time::Duration;

use callgate_sim::tts::TtsSimConfig;
use common::{WAIT, audio_until_final, next, start};
use futures_util::{SinkExt as _, StreamExt as _};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_tungstenite::tungstenite::{self, Message};
use tts_client::{
    CloseReason, ContextId, ErrorSource, OutputFormat, ReconnectPolicy, TtsError, TtsEvent, connect,
};

#[tokio::test]
async fn the_client_refuses_a_sixth_context_and_frees_a_slot_on_final() {
    let sim = start(TtsSimConfig::default()).await;
    let (mut tts, mut events) = connect(&sim.client_config(OutputFormat::Ulaw8000), "cap")
        .await
        .unwrap();
    for i in 1..=5 {
        tts.open_context(ContextId(i)).unwrap();
    }
    let err = tts.open_context(ContextId(6)).unwrap_err();
    assert!(
        matches!(
            err,
            TtsError::TooManyContexts {
                open: 5,
                max: 5,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.source_kind(), ErrorSource::Caller);
    assert!(matches!(
        tts.open_context(ContextId(1)),
        Err(TtsError::ContextExists { .. })
    ));
    assert_eq!(tts.open_contexts(), 5);
    // The inits travel asynchronously: wait (bounded) until the sim has all.
    let deadline = tokio::time::Instant::now() + WAIT;
    while stats_json(&sim.addr).await["open_contexts"] != 5 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "sim never saw 5 contexts"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tts.cancel_context(ContextId(3)).unwrap();
    assert_eq!(
        next(&mut events).await,
        TtsEvent::ContextFinal {
            context: ContextId(3)
        }
    );
    tts.open_context(ContextId(6)).unwrap();
    tts.send_text(ContextId(6), "Next turn. ").unwrap();
    tts.close_context(ContextId(6)).unwrap();
    assert!(
        !audio_until_final(&mut events, ContextId(6))
            .await
            .is_empty()
    );
    assert!(!tts.is_closed(), "the provider never saw a sixth context");
    tts.close().await.unwrap();
    sim.wait_idle().await;
    sim.shutdown().await;
}

#[tokio::test]
async fn the_sim_closes_1008_when_a_raw_client_opens_six_contexts() {
    let sim = start(TtsSimConfig::default()).await;
    let url = format!(
        "ws://{}/v1/text-to-speech/v/multi-stream-input?model_id=m",
        sim.addr
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    for i in 0..6 {
        let init = format!(r#"{{"text":" ","context_id":"turn-{i}"}}"#);
        ws.send(Message::Text(init.into())).await.unwrap();
    }
    let frames = tokio::time::timeout(WAIT, async {
        let mut frames = Vec::new();
        while let Some(Ok(frame)) = ws.next().await {
            frames.push(frame);
        }
        frames
    })
    .await
    .unwrap();
    let Message::Text(error) = &frames[0] else {
        panic!("{frames:?}")
    };
    let error: serde_json::Value = serde_json::from_str(error.as_str()).unwrap();
    assert_eq!(error["error"], "max_active_conversations");
    let Message::Close(Some(close)) = &frames[1] else {
        panic!("{frames:?}")
    };
    assert_eq!(u16::from(close.code), 1008);
    sim.wait_idle().await;
    sim.shutdown().await;
}

#[tokio::test]
async fn the_socket_cap_answers_429_and_closed_or_dropped_sessions_free_it() {
    let sim = start(TtsSimConfig {
        max_sockets: 1,
        ..TtsSimConfig::default()
    })
    .await;
    let cfg = sim.client_config(OutputFormat::Ulaw8000);
    let (first, _first_events) = connect(&cfg, "first").await.unwrap();
    let err = connect(&cfg, "second").await.unwrap_err();
    assert!(
        matches!(err, TtsError::Rejected { status: 429, .. }),
        "{err}"
    );
    assert!(err.is_retryable());
    assert_eq!(err.source_kind(), ErrorSource::Provider);
    first.close().await.unwrap();
    sim.wait_idle().await;

    // Dropping both halves without close() still closes the socket.
    let (mut dropped, events) = connect(&cfg, "dropped").await.unwrap();
    dropped.open_context(ContextId(1)).unwrap();
    dropped
        .send_text(ContextId(1), "Half a sentence that")
        .unwrap();
    drop((dropped, events));
    sim.wait_idle().await;
    let stats = sim.sim.stats();
    assert_eq!((stats.total_sessions, stats.rejected_sessions), (2, 1));
    sim.shutdown().await;
}

#[tokio::test]
async fn auth_format_and_injected_refusals_happen_before_the_upgrade() {
    let sim = start(TtsSimConfig {
        api_key: Some("sk_test".into()),
        ..TtsSimConfig::default()
    })
    .await;
    let mut cfg = sim.client_config(OutputFormat::Pcm8000);
    let err = connect(&cfg, "nokey").await.unwrap_err();
    assert!(
        matches!(err, TtsError::Rejected { status: 401, .. }),
        "{err}"
    );
    assert!(!err.is_retryable());
    cfg.api_key = Some("sk_test".into());
    let (tts, _events) = connect(&cfg, "key").await.unwrap();
    tts.close().await.unwrap();

    let url = format!(
        "ws://{}/v1/text-to-speech/v/multi-stream-input?output_format=mp3_44100_128",
        sim.addr
    );
    let mut req = tungstenite::client::IntoClientRequest::into_client_request(url).unwrap();
    req.headers_mut()
        .insert("xi-api-key", "sk_test".parse().unwrap());
    match tokio_tungstenite::connect_async(req).await {
        Err(tungstenite::Error::Http(resp)) => assert_eq!(resp.status().as_u16(), 400),
        other => panic!("expected HTTP 400, got {other:?}"),
    }

    sim.sim.set_config(TtsSimConfig {
        fail_upgrade_status: Some(503),
        ..TtsSimConfig::default()
    });
    let err = connect(&sim.client_config(OutputFormat::Ulaw8000), "fault")
        .await
        .unwrap_err();
    assert!(
        matches!(err, TtsError::Rejected { status: 503, .. }),
        "{err}"
    );
    assert!(err.is_retryable());
    assert_eq!(sim.sim.stats().open_sessions, 0);
    sim.shutdown().await;
}

#[tokio::test]
async fn without_reconnects_an_injected_close_is_reported_and_the_handle_refuses_further_work() {
    let sim = start(TtsSimConfig {
        close_after_ms: Some(300),
        ..TtsSimConfig::default()
    })
    .await;
    let mut cfg = sim.client_config(OutputFormat::Ulaw8000);
    cfg.reconnect = ReconnectPolicy::never();
    let (mut tts, mut events) = connect(&cfg, "fault").await.unwrap();
    tts.open_context(ContextId(1)).unwrap();
    let TtsEvent::Closed(reason) = next(&mut events).await else {
        panic!("closed expected")
    };
    assert!(
        matches!(reason, CloseReason::ProviderClosed { code: 1011, .. }),
        "{reason}"
    );
    assert!(reason.is_retryable());
    assert_eq!(tts.open_contexts(), 0);
    let err = tts.send_text(ContextId(1), "anyone? ").unwrap_err();
    assert!(matches!(err, TtsError::Closed { .. }), "{err}");
    assert!(err.is_retryable());
    sim.wait_idle().await;
    assert_eq!(sim.sim.stats().faulted_sessions, 1);
    sim.shutdown().await;
}

#[tokio::test]
async fn simulator_shutdown_closes_open_sockets_with_1001() {
    let sim = start(TtsSimConfig::default()).await;
    let mut cfg = sim.client_config(OutputFormat::Ulaw8000);
    cfg.reconnect = ReconnectPolicy::never();
    let (_tts, mut events) = connect(&cfg, "shutdown").await.unwrap();
    let tts_sim = sim.sim.clone();
    sim.shutdown().await;
    let TtsEvent::Closed(reason) = next(&mut events).await else {
        panic!("closed expected")
    };
    assert!(
        matches!(reason, CloseReason::ProviderClosed { code: 1001, .. }),
        "{reason}"
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    while tts_sim.stats().open_sessions != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "socket still counted open"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `GET /stats` over a plain TCP connection.
async fn stats_json(addr: &std::net::SocketAddr) -> serde_json::Value {
    let mut tcp = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect to the sim");
    let request = b"GET /stats HTTP/1.1\r\nHost: sim\r\nConnection: close\r\n\r\n";
    tcp.write_all(request).await.expect("send the request");
    let mut response = String::new();
    tokio::time::timeout(WAIT, tcp.read_to_string(&mut response))
        .await
        .expect("response in time")
        .expect("read the response");
    let body = response.split("\r\n\r\n").nth(1).expect("an HTTP body");
    let stats: serde_json::Value = serde_json::from_str(body).expect("JSON stats");
    assert!(
        stats["open_sessions"].is_u64(),
        "session snapshot is flattened in: {stats}"
    );
    stats
}

#[tokio::test]
async fn a_socket_the_simulator_closes_mid_reply_is_resumed_and_the_reply_completes() {
    let sim = start(TtsSimConfig {
        close_after_ms: Some(500),
        ..TtsSimConfig::default()
    })
    .await;
    let mut cfg = sim.client_config(OutputFormat::Ulaw8000);
    cfg.reconnect.initial_ms = 20;
    let (mut tts, mut events) = connect(&cfg, "resumed").await.unwrap();
    // The simulator reads its config per accepted socket: this one keeps
    // the 500 ms fault, the reconnect gets a healthy one.
    sim.sim.set_config(TtsSimConfig::default());
    let turn = "Thanks for calling Luigi's. I can book a table for four tonight at seven \
                thirty, under the name Alex Morgan. Shall I confirm that for you? ";
    tts.open_context(ContextId(1)).unwrap();
    tts.send_text(ContextId(1), turn).unwrap();
    tts.close_context(ContextId(1)).unwrap();
    let audio = audio_until_final(&mut events, ContextId(1)).await;
    let secs = OutputFormat::Ulaw8000
        .duration_of(audio.len())
        .as_secs_f64();
    let want = common::expected_secs(turn);
    assert!(
        (secs - want).abs() <= want * 0.1,
        "{secs:.2} s, want {want:.2} s"
    );
    let tally = tts.reconnects();
    assert_eq!((tally.drops, tally.reconnected), (1, 1), "{tally:?}");
    tts.close().await.unwrap();
    sim.wait_idle().await;
    assert_eq!(sim.sim.stats().faulted_sessions, 1);
    sim.shutdown().await;
}
