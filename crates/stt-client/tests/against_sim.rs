//! The client against the Deepgram-compatible simulator over real loopback
//! sockets. Waits use generous deadlines; nothing asserts on speed.

use std::net::SocketAddr;
use std::time::Duration;

use callgate_sim::stt::{SttSim, SttSimConfig};
use media::g711;
use media::synth::SpeechSynth;
use stt_client::{
    CloseKind, ErrorSource, ReconnectPolicy, SttConfig, SttError, SttEvent, SttEvents, SttHandle,
    UtteranceAssembler, UtteranceBoundary,
};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;

/// Generous: the machine may be busy compiling.
const DEADLINE: Duration = Duration::from_secs(15);

struct Sim {
    sim: SttSim,
    addr: SocketAddr,
    cancel: CancellationToken,
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

async fn start_sim(cfg: SttSimConfig) -> Sim {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let sim = SttSim::new(cfg);
    let cancel = CancellationToken::new();
    tokio::spawn(sim.clone().serve(listener, cancel.clone()));
    Sim { sim, addr, cancel }
}

fn client_cfg(addr: SocketAddr) -> SttConfig {
    SttConfig {
        url: format!("ws://{addr}/v1/listen"),
        connect_timeout: DEADLINE,
        close_timeout: DEADLINE,
        ..SttConfig::default()
    }
}

/// Collects every event until the stream ends.
fn collect(mut events: SttEvents) -> JoinHandle<Vec<SttEvent>> {
    tokio::spawn(async move {
        let mut all = Vec::new();
        while let Some(e) = timeout(DEADLINE, events.recv())
            .await
            .expect("events stalled")
        {
            all.push(e);
        }
        all
    })
}

/// Sends a frame as fast as the session takes it: a frame dropped on a full
/// queue (the documented policy) is offered again after a pause, so the
/// simulator hears exactly the audio we meant whatever the machine speed.
async fn send(h: &SttHandle, frame: &[u8]) {
    loop {
        let before = h.dropped_audio_frames();
        h.send_audio(frame.to_vec()).expect("session open");
        if h.dropped_audio_frames() == before {
            tokio::task::yield_now().await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn send_all(h: &SttHandle, samples: &[i16]) {
    for frame in g711::encode_ulaw(samples).chunks(160) {
        send(h, frame).await;
    }
}

async fn wait_no_open_sessions(sim: &SttSim) {
    let polled = timeout(DEADLINE, async {
        while sim.stats().open_sessions != 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(polled.is_ok(), "sessions still open: {:?}", sim.stats());
}

fn closed_reason(events: &[SttEvent]) -> &stt_client::CloseReason {
    match events.last() {
        Some(SttEvent::Closed(r)) => r,
        other => panic!("last event is not Closed: {other:?}"),
    }
}

#[tokio::test]
async fn two_utterances_are_transcribed_in_order_and_assembled() {
    let sim = start_sim(SttSimConfig::default()).await;
    let script = sim.sim.config().script;
    let (stt, events) = stt_client::connect(&client_cfg(sim.addr), "two-utterances")
        .await
        .unwrap();
    let collector = collect(events);

    let mut synth = SpeechSynth::new(8_000, 17);
    for part in [
        synth.silence(500),
        synth.utterance(1_500),
        synth.silence(1_500),
        synth.utterance(1_000),
        synth.silence(1_500),
    ] {
        send_all(&stt, &part).await;
    }
    let summary = stt.close().await.unwrap();
    let events = collector.await.unwrap();

    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            SttEvent::SpeechStarted { .. } => Some("start"),
            SttEvent::Transcript(t) if t.is_final => Some("final"),
            SttEvent::Transcript(_) => None,
            SttEvent::UtteranceEnd { .. } => Some("end"),
            SttEvent::Metadata { .. } => Some("metadata"),
            SttEvent::Closed(_) => Some("closed"),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "start", "final", "end", "start", "final", "end", "metadata", "closed"
        ]
    );

    let transcripts: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            SttEvent::Transcript(t) => Some(t),
            _ => None,
        })
        .collect();
    let finals: Vec<&str> = transcripts
        .iter()
        .filter(|t| t.is_final)
        .map(|t| t.text.as_str())
        .collect();
    assert_eq!(finals, [script[0].as_str(), script[1].as_str()]);
    assert!(
        transcripts
            .iter()
            .filter(|t| t.is_final)
            .all(|t| t.speech_final)
    );
    let interims = transcripts.iter().filter(|t| !t.is_final).count();
    assert!(interims >= 4, "{interims} interim results");

    let mut assembler = UtteranceAssembler::new();
    let utterances: Vec<_> = events.iter().filter_map(|e| assembler.push(e)).collect();
    let texts: Vec<&str> = utterances.iter().map(|u| u.text.as_str()).collect();
    assert_eq!(texts, [script[0].as_str(), script[1].as_str()]);
    assert!(
        utterances
            .iter()
            .all(|u| u.boundary == UtteranceBoundary::SpeechFinal)
    );

    assert!(summary.close.is_normal(), "{:?}", summary.close);
    assert_eq!(summary.metadata.unwrap().duration, 6.0);
    wait_no_open_sessions(&sim.sim).await;
}

#[tokio::test]
async fn the_concurrency_cap_rejects_with_a_retryable_429() {
    let sim = start_sim(SttSimConfig {
        max_sessions: 1,
        ..SttSimConfig::default()
    })
    .await;
    let cfg = client_cfg(sim.addr);
    let (first, _events) = stt_client::connect(&cfg, "first").await.unwrap();
    let err = stt_client::connect(&cfg, "second").await.unwrap_err();
    assert!(
        matches!(err, SttError::Rejected { status: 429, .. }),
        "{err}"
    );
    assert!(err.is_retryable() && err.is_capacity());
    assert_eq!(err.source_kind(), ErrorSource::Provider);
    assert!(err.to_string().contains("TOO_MANY_REQUESTS"), "{err}");

    assert!(first.close().await.unwrap().close.is_normal());
    wait_no_open_sessions(&sim.sim).await;
    assert_eq!(sim.sim.stats().rejected_sessions, 1);
}

#[tokio::test]
async fn a_silent_session_is_closed_by_the_provider_with_net_0001() {
    let sim = start_sim(SttSimConfig {
        idle_timeout_ms: 300,
        ..SttSimConfig::default()
    })
    .await;
    let cfg = SttConfig {
        keepalive_interval: Duration::from_secs(3_600),
        ..client_cfg(sim.addr)
    };
    let (stt, events) = stt_client::connect(&cfg, "idle").await.unwrap();
    let events = collect(events).await.unwrap();
    let reason = closed_reason(&events);
    assert_eq!(reason.reason, "NET-0001");
    assert_eq!(reason.code, Some(1011));
    assert_eq!(reason.kind, CloseKind::IdleTimeout);
    // close() after the provider ended reports how it ended.
    assert_eq!(
        stt.close().await.unwrap().close.kind,
        CloseKind::IdleTimeout
    );
    wait_no_open_sessions(&sim.sim).await;
}

#[tokio::test]
async fn keepalives_hold_a_silent_session_open() {
    let sim = start_sim(SttSimConfig {
        idle_timeout_ms: 2_000,
        ..SttSimConfig::default()
    })
    .await;
    let cfg = SttConfig {
        keepalive_interval: Duration::from_millis(100),
        ..client_cfg(sim.addr)
    };
    let (stt, mut events) = stt_client::connect(&cfg, "keepalive").await.unwrap();
    // Twice the idle timeout with no audio: only keep-alives flow.
    let quiet = timeout(Duration::from_secs(4), events.recv()).await;
    assert!(quiet.is_err(), "unexpected event {quiet:?}");
    assert!(stt.close().await.unwrap().close.is_normal());
}

#[tokio::test]
async fn close_returns_the_summary_and_a_dropped_handle_still_closes() {
    let sim = start_sim(SttSimConfig::default()).await;
    let mut synth = SpeechSynth::new(8_000, 3);
    let audio = synth.silence(1_000);

    let (stt, _events) = stt_client::connect(&client_cfg(sim.addr), "closer")
        .await
        .unwrap();
    send_all(&stt, &audio).await;
    let request_id = stt.request_id().map(str::to_owned);
    let summary = stt.close().await.unwrap();
    let metadata = summary.metadata.expect("Metadata before the close");
    assert_eq!(metadata.duration, 1.0);
    assert_eq!(
        Some(metadata.request_id),
        request_id,
        "header and summary agree"
    );
    assert!(summary.close.is_normal() && summary.close.is_clean());
    wait_no_open_sessions(&sim.sim).await;

    let (stt, events) = stt_client::connect(&client_cfg(sim.addr), "dropper")
        .await
        .unwrap();
    send_all(&stt, &audio).await;
    drop(stt);
    let events = collect(events).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, SttEvent::Metadata { duration, .. } if *duration == 1.0))
    );
    assert!(closed_reason(&events).is_normal());
    wait_no_open_sessions(&sim.sim).await;
    assert_eq!(sim.sim.stats().total_sessions, 2);
}

#[tokio::test]
async fn finalize_flushes_the_audio_sent_before_it() {
    let sim = start_sim(SttSimConfig::default()).await;
    let script = sim.sim.config().script;
    let (stt, mut events) = stt_client::connect(&client_cfg(sim.addr), "finalize")
        .await
        .unwrap();
    let mut synth = SpeechSynth::new(8_000, 5);
    send_all(&stt, &synth.utterance(900)).await;
    stt.finalize().unwrap();
    let mut assembler = UtteranceAssembler::new();
    let utterance = timeout(DEADLINE, async {
        loop {
            let event = events.recv().await.expect("stream ended early");
            if let Some(u) = assembler.push(&event) {
                return u;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(utterance.text, script[0]);
    assert_eq!(utterance.boundary, UtteranceBoundary::Finalize);
    assert!(stt.close().await.unwrap().close.is_normal());
}

#[tokio::test]
async fn refused_upgrades_are_classified() {
    let sim = start_sim(SttSimConfig {
        api_key: Some("letmein".into()),
        ..SttSimConfig::default()
    })
    .await;
    let keyed = SttConfig {
        api_key: Some("letmein".into()),
        ..client_cfg(sim.addr)
    };

    let err = stt_client::connect(&client_cfg(sim.addr), "no-key")
        .await
        .unwrap_err();
    assert!(
        matches!(err, SttError::Rejected { status: 401, .. }),
        "{err}"
    );
    assert!(!err.is_retryable());
    assert_eq!(err.source_kind(), ErrorSource::Caller);

    let bad = SttConfig {
        sample_rate: 11_025,
        ..keyed.clone()
    };
    let err = stt_client::connect(&bad, "bad-rate").await.unwrap_err();
    assert!(
        matches!(err, SttError::Rejected { status: 400, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("sample_rate"), "{err}");
    assert_eq!(err.source_kind(), ErrorSource::Caller);

    let (stt, _events) = stt_client::connect(&keyed, "keyed").await.unwrap();
    assert!(stt.close().await.unwrap().close.is_normal());

    sim.sim.set_config(SttSimConfig {
        fail_upgrade_status: Some(503),
        ..sim.sim.config()
    });
    let err = stt_client::connect(&keyed, "fault").await.unwrap_err();
    assert!(
        matches!(err, SttError::Rejected { status: 503, .. }),
        "{err}"
    );
    assert!(err.is_retryable() && !err.is_capacity());
    wait_no_open_sessions(&sim.sim).await;
}

#[tokio::test]
async fn an_injected_provider_close_arrives_as_net_0000() {
    let sim = start_sim(SttSimConfig {
        close_after_ms: Some(300),
        ..SttSimConfig::default()
    })
    .await;
    let cfg = SttConfig {
        reconnect: ReconnectPolicy::never(),
        ..client_cfg(sim.addr)
    };
    let (stt, events) = stt_client::connect(&cfg, "fault").await.unwrap();
    let events = collect(events).await.unwrap();
    let reason = closed_reason(&events);
    assert_eq!(
        (reason.code, reason.reason.as_str()),
        (Some(1011), "NET-0000")
    );
    assert_eq!(reason.kind, CloseKind::ProviderTimeout);
    assert!(reason.is_retryable());
    assert_eq!(
        stt.close().await.unwrap().close.kind,
        CloseKind::ProviderTimeout
    );
    wait_no_open_sessions(&sim.sim).await;
    assert_eq!(sim.sim.stats().faulted_sessions, 1);
}

#[tokio::test]
async fn a_server_that_never_upgrades_times_out() {
    // Accepts TCP (the backlog) but never answers the upgrade.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let cfg = SttConfig {
        connect_timeout: Duration::from_millis(300),
        ..client_cfg(silent.local_addr().unwrap())
    };
    let err = stt_client::connect(&cfg, "hang").await.unwrap_err();
    assert!(matches!(err, SttError::ConnectTimeout { .. }), "{err}");
    assert!(err.is_retryable());
    drop(silent);
}

/// The caller's two utterances of the reconnect tests. Audio goes faster
/// than real time, so the drop (after 1.2 s of audio) is awaited before the
/// rest is sent: otherwise it could land during the final close.
async fn two_utterances(stt: &SttHandle) {
    let mut synth = SpeechSynth::new(8_000, 17);
    send_all(stt, &synth.silence(500)).await;
    send_all(stt, &synth.utterance(1_500)).await;
    let reconnected = timeout(DEADLINE, async {
        while stt.reconnects().reconnected == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(reconnected.is_ok(), "no reconnect: {:?}", stt.reconnects());
    for part in [
        synth.silence(1_500),
        synth.utterance(1_000),
        synth.silence(1_500),
    ] {
        send_all(stt, &part).await;
    }
}

#[tokio::test]
async fn a_drop_mid_utterance_reconnects_and_the_utterance_is_transcribed_whole() {
    // 1.2 s of audio is inside the first utterance (0.5–2.0 s).
    let sim = start_sim(SttSimConfig {
        drop_at_audio_ms: Some(1_200),
        faulty_sessions: Some(1),
        ..SttSimConfig::default()
    })
    .await;
    let script = sim.sim.config().script;
    let (stt, events) = stt_client::connect(&client_cfg(sim.addr), "drop")
        .await
        .unwrap();
    let collector = collect(events);
    two_utterances(&stt).await;
    let tally = stt.reconnects();
    let summary = stt.close().await.unwrap();
    let events = collector.await.unwrap();

    assert!(
        events.iter().any(|e| matches!(
            e,
            SttEvent::Reconnecting {
                attempt: 1,
                capacity: false,
                ..
            }
        )),
        "{events:#?}"
    );
    let resumed: Vec<f64> = events
        .iter()
        .filter_map(|e| match e {
            SttEvent::Reconnected {
                replayed_seconds, ..
            } => Some(*replayed_seconds),
            _ => None,
        })
        .collect();
    assert_eq!(resumed.len(), 1, "{events:#?}");
    assert!(
        resumed[0] >= 1.2,
        "the utterance's audio is sent again: {resumed:?}"
    );
    let mut assembler = UtteranceAssembler::new();
    let texts: Vec<String> = events
        .iter()
        .filter_map(|e| assembler.push(e))
        .map(|u| u.text)
        .collect();
    assert_eq!(texts, [script[0].as_str(), script[1].as_str()]);
    assert_eq!(
        (tally.drops, tally.attempts, tally.reconnected),
        (1, 1, 1),
        "{tally:?}"
    );
    assert!(summary.close.is_normal(), "{:?}", summary.close);
    wait_no_open_sessions(&sim.sim).await;
    assert_eq!(sim.sim.stats().total_sessions, 2);
}

#[tokio::test]
async fn a_provider_down_past_the_budget_closes_the_session_with_the_attempts_counted() {
    let sim = start_sim(SttSimConfig {
        drop_at_audio_ms: Some(300),
        down_after_fault_ms: Some(60_000),
        ..SttSimConfig::default()
    })
    .await;
    let cfg = SttConfig {
        reconnect: ReconnectPolicy {
            initial_ms: 50,
            max_ms: 100,
            budget_ms: 600,
            max_attempts: 20,
            ..ReconnectPolicy::default()
        },
        ..client_cfg(sim.addr)
    };
    let (stt, events) = stt_client::connect(&cfg, "down").await.unwrap();
    let collector = collect(events);
    let mut synth = SpeechSynth::new(8_000, 3);
    let audio = synth.silence(400);
    send_all(&stt, &audio).await;
    // Keep talking while it is down: audio is taken, never refused.
    let more = synth.utterance(500);
    for frame in g711::encode_ulaw(&more).chunks(160) {
        if stt.send_audio(frame.to_vec()).is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let events = collector.await.unwrap();
    let reason = closed_reason(&events);
    assert!(reason.reason.contains("reconnect gave up"), "{reason:?}");
    let tally = stt.reconnects();
    assert_eq!(tally.drops, 1);
    assert!(tally.attempts >= 1 && tally.reconnected == 0, "{tally:?}");
    assert_eq!(tally.down_refusals, tally.attempts, "{tally:?}");
    assert_eq!(tally.capacity_refusals, 0);
}
