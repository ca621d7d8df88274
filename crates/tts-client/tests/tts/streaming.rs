//! Streaming against the simulator over real sockets: audio length and
//! format, first-chunk latency, graceful close, barge-in, keep-alive.

use crate::common;

use std::time::{Duration, Instant};

use callgate_sim::tts::TtsSimConfig;
use common::{WAIT, audio_until_final, expected_secs, next, start};
use media::vad::level_dbfs;
use tts_client::{CloseReason, ContextId, OutputFormat, TtsEvent, connect};

const TURN: &str = "Thanks for calling Luigi's. I can book a table for four tonight at seven thirty, \
                    under the name Alex Morgan. Shall I confirm that for you? ";

/// Text + flush, then a graceful close once audio flows: all the audio
/// arrives (its length matches the text) and then the final.
async fn speak_one_turn(format: OutputFormat) -> Vec<u8> {
    let sim = start(TtsSimConfig::default()).await;
    let (mut tts, mut events) = connect(&sim.client_config(format), "turn")
        .await
        .expect("connect to the sim");
    let ctx = ContextId(1);
    tts.open_context(ctx).expect("session accepts the command");
    tts.send_text(ctx, TURN)
        .expect("session accepts the command");
    tts.flush(ctx).expect("session accepts the command");
    let TtsEvent::Audio {
        context,
        bytes: first,
    } = next(&mut events).await
    else {
        panic!("audio expected")
    };
    assert_eq!(context, ctx);
    tts.close_context(ctx).expect("session accepts the command");
    let mut audio = first;
    audio.extend(audio_until_final(&mut events, ctx).await);
    assert_eq!(tts.open_contexts(), 0);
    tts.close().await.expect("clean close");
    assert_eq!(
        next(&mut events).await,
        TtsEvent::Closed(CloseReason::Requested)
    );
    assert_eq!(events.recv().await, None);
    sim.wait_idle().await;
    let secs = format.duration_of(audio.len()).as_secs_f64();
    let want = expected_secs(TURN);
    assert!(
        (secs - want).abs() <= want * 0.1,
        "{secs:.2} s of {format} audio, want {want:.2} s"
    );
    sim.shutdown().await;
    audio
}

#[tokio::test]
async fn ulaw_audio_length_matches_the_text_then_final_after_close() {
    let audio = speak_one_turn(OutputFormat::Ulaw8000).await;
    let level = level_dbfs(&media::g711::decode_ulaw(&audio));
    assert!(
        (-40.0..-5.0).contains(&level),
        "speech-like level, got {level} dBFS"
    );
}

#[tokio::test]
async fn pcm16k_audio_length_matches_the_text_then_final_after_close() {
    let audio = speak_one_turn(OutputFormat::Pcm16000).await;
    assert_eq!(audio.len() % 2, 0);
    let level = level_dbfs(&media::format::pcm16le_to_samples(&audio));
    assert!(
        (-40.0..-5.0).contains(&level),
        "speech-like level, got {level} dBFS"
    );
}

#[tokio::test]
async fn graceful_close_right_after_the_text_loses_no_audio() {
    // The simulator stops a closed context at once, so the client must hold
    // close_context back until the audio is in.
    let sim = start(TtsSimConfig::default()).await;
    let (mut tts, mut events) = connect(&sim.client_config(OutputFormat::Ulaw8000), "eager")
        .await
        .unwrap();
    let ctx = ContextId(7);
    tts.open_context(ctx).unwrap();
    tts.send_text(ctx, TURN).unwrap();
    tts.close_context(ctx).unwrap();
    assert!(
        tts.send_text(ctx, "more").is_err(),
        "a closing context takes no text"
    );
    let audio = audio_until_final(&mut events, ctx).await;
    let secs = OutputFormat::Ulaw8000
        .duration_of(audio.len())
        .as_secs_f64();
    assert!(
        (secs - expected_secs(TURN)).abs() <= expected_secs(TURN) * 0.1,
        "{secs:.2} s"
    );
    tts.close().await.unwrap();
    sim.wait_idle().await;
    sim.shutdown().await;
}

#[tokio::test]
async fn first_chunk_arrives_no_earlier_than_the_configured_latency() {
    let cfg = TtsSimConfig {
        first_chunk_latency_ms: 400,
        ..TtsSimConfig::default()
    };
    let sim = start(cfg).await;
    let (mut tts, mut events) = connect(&sim.client_config(OutputFormat::Ulaw8000), "latency")
        .await
        .unwrap();
    let ctx = ContextId(1);
    tts.open_context(ctx).unwrap();
    tts.send_text(ctx, "Hello there. ").unwrap();
    let flushed = Instant::now();
    tts.flush(ctx).unwrap();
    let TtsEvent::Audio { .. } = next(&mut events).await else {
        panic!("audio expected")
    };
    let waited = flushed.elapsed();
    assert!(
        waited >= Duration::from_millis(400),
        "first chunk after {waited:?}"
    );
    tts.close().await.unwrap();
    sim.shutdown().await;
}

/// Starts a long turn, cancels it on its first audio chunk and returns
/// (audio bytes of the turn seen by the caller, time from cancel to final,
/// late chunks dropped).
async fn barge_in(cfg: TtsSimConfig) -> (usize, Duration, u64) {
    let sim = start(cfg).await;
    let (mut tts, mut events) = connect(&sim.client_config(OutputFormat::Ulaw8000), "barge")
        .await
        .expect("connect to the sim");
    let ctx = ContextId(1);
    tts.open_context(ctx).expect("session accepts the command");
    tts.send_text(ctx, &TURN.repeat(2))
        .expect("session accepts the command");
    tts.flush(ctx).expect("session accepts the command");
    let TtsEvent::Audio { bytes, .. } = next(&mut events).await else {
        panic!("audio expected")
    };
    tts.cancel_context(ctx)
        .expect("session accepts the command");
    let cancelled = Instant::now();
    match next(&mut events).await {
        TtsEvent::ContextFinal { context } => assert_eq!(context, ctx),
        TtsEvent::Audio { context, .. } => panic!("audio for {context} after the cancel"),
        other => panic!("unexpected {other:?}"),
    }
    let to_final = cancelled.elapsed();
    assert_eq!(tts.open_contexts(), 0);
    let dropped = tts.late_audio_dropped();
    tts.close().await.expect("clean close");
    sim.wait_idle().await;
    sim.shutdown().await;
    (bytes.len(), to_final, dropped)
}

#[tokio::test]
async fn cancel_mid_generation_stops_the_audio_and_finalises_promptly() {
    // 2 × 158 chars ≈ 21 s of audio, generated over ~10 s at 2x real time.
    let cfg = TtsSimConfig {
        realtime_factor: 2.0,
        ..TtsSimConfig::default()
    };
    let full = (expected_secs(&TURN.repeat(2)) * 8_000.0) as usize;
    let (heard, to_final, _) = barge_in(cfg).await;
    assert!(heard < full / 10, "heard {heard} of {full} bytes");
    assert!(
        to_final < Duration::from_secs(3),
        "final {to_final:?} after the cancel"
    );
}

#[tokio::test]
async fn cancel_hides_late_audio_when_the_provider_keeps_generating() {
    // ElevenLabs documents that a flushed context keeps flushing after
    // close_context: the audio still comes, and the client must drop it.
    let cfg = TtsSimConfig {
        realtime_factor: 8.0,
        finish_flushed_on_close: true,
        ..TtsSimConfig::default()
    };
    let (_, _, dropped) = barge_in(cfg).await;
    assert!(dropped > 0, "late chunks were dropped and counted");
}

#[tokio::test]
async fn keepalive_holds_an_idle_socket_past_the_providers_inactivity_timeout() {
    let sim = start(TtsSimConfig {
        inactivity_timeout_s: 2,
        ..TtsSimConfig::default()
    })
    .await;
    let mut cfg = sim.client_config(OutputFormat::Ulaw8000);
    cfg.keepalive_interval = Duration::from_millis(200);
    let (mut tts, mut events) = connect(&cfg, "idle").await.unwrap();
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert!(!tts.is_closed());
    let ctx = ContextId(1);
    tts.open_context(ctx).unwrap();
    tts.send_text(ctx, "Still here. ").unwrap();
    tts.close_context(ctx).unwrap();
    assert!(!audio_until_final(&mut events, ctx).await.is_empty());
    tts.close().await.unwrap();
    sim.shutdown().await;
}

#[tokio::test]
async fn provider_inactivity_close_is_reported_with_its_code_and_reason() {
    let sim = start(TtsSimConfig {
        inactivity_timeout_s: 1,
        ..TtsSimConfig::default()
    })
    .await;
    let (tts, mut events) = connect(&sim.client_config(OutputFormat::Ulaw8000), "quiet")
        .await
        .unwrap();
    let TtsEvent::ProviderError { message } = next(&mut events).await else {
        panic!("error message first")
    };
    assert!(message.contains("input_timeout_exceeded"), "{message}");
    let TtsEvent::Closed(reason) = next(&mut events).await else {
        panic!("closed expected")
    };
    assert_eq!(
        reason,
        CloseReason::ProviderClosed {
            code: 1008,
            reason: "input_timeout_exceeded".into()
        }
    );
    assert!(!reason.is_retryable());
    assert!(tts.is_closed());
    sim.wait_idle().await;
    let started = Instant::now();
    tts.close().await.unwrap();
    assert!(started.elapsed() < WAIT);
    sim.shutdown().await;
}
