//! The Cartesia wire against the Cartesia simulator (`callgate_sim::
//! cartesia`) over real sockets: a whole turn's audio, barge-in, a socket
//! closed mid-reply (1011) resumed on a new one, an outage longer than
//! the reconnect budget, and a voice or model the account does not have.
//! The simulator requires an API key here, so every test also checks the
//! client's `Authorization: Bearer` on the current API version.

use crate::common;

use callgate_sim::cartesia::{CartesiaSim, CartesiaSimConfig, LIBRARY_VOICES};
use common::{WAIT, audio_until_final, expected_secs, next};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tts_client::{CloseReason, ContextId, OutputFormat, TtsConfig, TtsEvent, connect};

const TURN: &str = "Thanks for calling Luigi's. I can book a table for four tonight at seven thirty, \
                    under the name Alex Morgan. Shall I confirm that for you? ";
const C: ContextId = ContextId(1);

struct Sim {
    sim: CartesiaSim,
    cfg: TtsConfig,
    cancel: CancellationToken,
}

const KEY: &str = "sk_car_tts_client_test";

async fn start(sim_cfg: CartesiaSimConfig) -> Sim {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("bound address");
    let sim = CartesiaSim::new(CartesiaSimConfig {
        api_key: Some(KEY.into()),
        ..sim_cfg
    });
    let cancel = CancellationToken::new();
    tokio::spawn(sim.clone().serve(listener, cancel.clone()));
    let mut cfg = TtsConfig::cartesia(format!("ws://{addr}"), LIBRARY_VOICES[1]);
    cfg.api_key = Some(KEY.into());
    cfg.reconnect.initial_ms = 20;
    Sim { sim, cfg, cancel }
}

/// Asserts `audio` plays for the whole of `text`, give or take a word.
fn assert_whole(audio: &[u8], text: &str) {
    let secs = OutputFormat::Ulaw8000
        .duration_of(audio.len())
        .as_secs_f64();
    let want = expected_secs(text);
    assert!(
        (secs - want).abs() <= want * 0.1,
        "{secs:.2} s of audio, want {want:.2} s"
    );
}

#[tokio::test]
async fn a_turn_streams_all_its_audio_then_done_and_a_cancel_finalises_at_once() {
    let sim = start(CartesiaSimConfig::default()).await;
    let (mut tts, mut events) = connect(&sim.cfg, "turn").await.expect("connect");
    tts.open_context(C).unwrap();
    tts.send_text(C, TURN).unwrap();
    tts.close_context(C).unwrap();
    let audio = audio_until_final(&mut events, C).await;
    assert_whole(&audio, TURN);

    let barge = ContextId(2);
    tts.open_context(barge).unwrap();
    tts.send_text(barge, TURN).unwrap();
    tts.flush(barge).unwrap();
    let TtsEvent::Audio { context, .. } = next(&mut events).await else {
        panic!("audio expected")
    };
    assert_eq!(context, barge);
    tts.cancel_context(barge).unwrap();
    assert_eq!(
        next(&mut events).await,
        TtsEvent::ContextFinal { context: barge },
        "the cancel is final at once, no audio after it"
    );
    assert_eq!(tts.open_contexts(), 0);
    tts.close().await.expect("clean close");
    assert_eq!(
        next(&mut events).await,
        TtsEvent::Closed(CloseReason::Requested)
    );
    sim.cancel.cancel();
}

#[tokio::test]
async fn a_socket_closed_mid_reply_is_resumed_and_the_reply_completes() {
    let sim = start(CartesiaSimConfig {
        close_after_ms: Some(500),
        faulty_sessions: Some(1),
        ..CartesiaSimConfig::default()
    })
    .await;
    let (mut tts, mut events) = connect(&sim.cfg, "resumed").await.expect("connect");
    tts.open_context(C).unwrap();
    tts.send_text(C, TURN).unwrap();
    tts.close_context(C).unwrap();
    let mut audio = Vec::new();
    let mut notices = Vec::new();
    loop {
        match next(&mut events).await {
            TtsEvent::Audio { bytes, .. } => audio.extend(bytes),
            TtsEvent::ContextFinal { .. } => break,
            TtsEvent::Closed(reason) => panic!("closed: {reason}"),
            other => notices.push(other),
        }
    }
    assert!(
        matches!(
            notices[0],
            TtsEvent::Reconnecting {
                attempt: 1,
                capacity: false,
                ..
            }
        ),
        "{notices:?}"
    );
    assert!(
        notices.iter().any(|e| matches!(
            e,
            TtsEvent::Reconnected {
                resumed_contexts: 1,
                ..
            }
        )),
        "{notices:?}"
    );
    assert_whole(&audio, TURN);
    let tally = tts.reconnects();
    assert_eq!((tally.drops, tally.reconnected), (1, 1), "{tally:?}");
    tts.close().await.expect("clean close");
    assert_eq!(sim.sim.sessions().len(), 2);
    sim.cancel.cancel();
}

#[tokio::test]
async fn an_outage_longer_than_the_budget_ends_with_reconnect_failed() {
    let mut sim = start(CartesiaSimConfig {
        close_after_ms: Some(200),
        faulty_sessions: Some(1),
        down_after_fault_ms: Some(60_000),
        ..CartesiaSimConfig::default()
    })
    .await;
    sim.cfg.reconnect.budget_ms = 600;
    let (mut tts, mut events) = connect(&sim.cfg, "outage").await.expect("connect");
    tts.open_context(C).unwrap();
    tts.send_text(C, TURN).unwrap();
    let reason = tokio::time::timeout(WAIT, async {
        loop {
            if let TtsEvent::Closed(reason) = next(&mut events).await {
                return reason;
            }
        }
    })
    .await
    .expect("closed in time");
    assert!(
        matches!(&reason, CloseReason::ReconnectFailed { capacity: false, last, .. } if last.contains("503")),
        "{reason}"
    );
    let tally = tts.reconnects();
    assert!(
        tally.down_refusals >= 1 && tally.reconnected == 0,
        "{tally:?}"
    );
    sim.cancel.cancel();
}

/// A context refused by the provider ends at once with its error: the
/// error names the context, so nothing waits for a timeout.
async fn refused_context(sim: &Sim, cfg: &TtsConfig) -> String {
    let (mut tts, mut events) = connect(cfg, "refused").await.expect("connect");
    tts.open_context(C).expect("open");
    tts.send_text(C, "Hello there. ").expect("text");
    let mut message = None;
    loop {
        match next(&mut events).await {
            TtsEvent::ProviderError { message: m } => message = Some(m),
            TtsEvent::ContextFinal { context } if context == C => break,
            TtsEvent::Audio { .. } => panic!("a refused context spoke"),
            TtsEvent::Closed(reason) => panic!("closed: {reason}"),
            _ => {}
        }
    }
    tts.close().await.expect("clean close");
    assert_eq!(sim.sim.stats().audio_bytes, 0);
    message.expect("the provider's error")
}

#[tokio::test]
async fn an_unknown_voice_or_model_ends_its_context_with_the_providers_error() {
    let sim = start(CartesiaSimConfig::default()).await;
    let mut cfg = sim.cfg.clone();
    cfg.voice_id = "21m00Tcm4TlvDq8ikWAM".into();
    let voice = refused_context(&sim, &cfg).await;
    assert!(
        voice.starts_with("voice_not_found: Voice not found:") && voice.contains("request_id"),
        "{voice}"
    );
    let mut cfg = sim.cfg.clone();
    cfg.model_id = "eleven_flash_v2_5".into();
    let model = refused_context(&sim, &cfg).await;
    assert!(
        model.starts_with("model_not_found: Invalid model:"),
        "{model}"
    );
    sim.cancel.cancel();
}
