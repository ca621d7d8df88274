//! The TTS provider's bad days (the simulator's named faults): the call
//! survives each one without silence — every reply, or an apology and a
//! transfer with the reason recorded.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use callgate_load::Outcome;
use callgate_sim::SimConfig;
use callgate_sim::tts::{NullAlignment, TtsSimConfig};
use callgate_tests::{Harness, load};

fn sim(tts: TtsSimConfig) -> SimConfig {
    SimConfig {
        tts,
        ..SimConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_finals_and_null_alignment_still_give_every_reply() {
    let h = Harness::start(
        sim(TtsSimConfig {
            no_final_for_empty_context: true,
            null_alignment: NullAlignment::Both,
            ..TtsSimConfig::default()
        }),
        |_| {},
    )
    .await;
    let report = callgate_load::run(load(&h, 1, 3)).await;
    let call = &report.calls[0];
    assert_eq!(call.outcome, Outcome::Completed, "{call:#?}");
    assert_eq!(call.replies_heard, 3, "{call:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_error_mid_call_ends_through_the_transfer_path() {
    // The greeting fits the quota; the first reply crosses it.
    let h = Harness::start(
        sim(TtsSimConfig {
            quota_chars: Some(40),
            ..TtsSimConfig::default()
        }),
        |_| {},
    )
    .await;
    let report = callgate_load::run(load(&h, 1, 3)).await;
    let call = &report.calls[0];
    assert!(
        matches!(call.outcome, Outcome::FailoverTransfer { .. }),
        "{call:#?}"
    );
    let ledger = h.closed_ledger(&call.call_sid.to_string()).await;
    assert_eq!(ledger.end_reason.as_deref(), Some("provider_failed:tts"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_generation_gets_every_reply_or_a_recorded_transfer_never_silence() {
    // Two calls, one generation at a time, a queue shorter than a reply:
    // some generation is refused with the 429 error mid-call.
    let h = Harness::start(
        sim(TtsSimConfig {
            max_concurrent_generations: Some(1),
            generation_queue_ms: 20,
            ..TtsSimConfig::default()
        }),
        |_| {},
    )
    .await;
    let report = callgate_load::run(load(&h, 2, 3)).await;
    for call in &report.calls {
        match &call.outcome {
            Outcome::Completed => assert_eq!(call.replies_heard, 3, "{call:#?}"),
            Outcome::WatchdogTransfer { reason } | Outcome::FailoverTransfer { reason } => {
                assert!(!reason.is_empty(), "{call:#?}")
            }
            other => panic!("neither every reply nor a transfer: {other:?} {call:#?}"),
        }
        assert!(
            call.max_owed_silence_ms < 3_000,
            "no dead air while a reply is owed: {call:#?}"
        );
        let ledger = h.closed_ledger(&call.call_sid.to_string()).await;
        assert!(ledger.end_reason.is_some(), "{ledger:#?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_quiet_while_a_tool_runs_is_kept_alive_past_the_inactivity_timeout() {
    // The caller's line makes the bot check availability (a 4 s tool); its
    // reply's context gets no text meanwhile, and ElevenLabs ends a context
    // after its inactivity timeout (here 2 s) unless a keep-alive names it.
    let mut cfg = sim(TtsSimConfig {
        context_inactivity: true,
        inactivity_timeout_s: 2,
        ..TtsSimConfig::default()
    });
    cfg.stt.script =
        vec!["A table for four tonight at seven thirty, the name is Alex Morgan.".into()];
    cfg.dialog.tool_delay_ms = 4_000;
    let h = Harness::start(cfg, |c| c.tts.keepalive_ms = 500).await;
    let report = callgate_load::run(load(&h, 1, 1)).await;
    let call = &report.calls[0];
    assert_eq!(call.outcome, Outcome::Completed, "{call:#?}");
    assert_eq!(call.replies_heard, 1, "the reply after the tool: {call:#?}");
    let ledger = h.closed_ledger(&call.call_sid.to_string()).await;
    let kinds = h.event_kinds(ledger.call_id).await;
    assert!(kinds.iter().any(|k| k == "tool_call"), "{kinds:?}");
    h.assert_all_closed().await;
    h.stop().await;
}
