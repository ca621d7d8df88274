//! Deepgram's bad days (issue 7, STT half): each fault the STT simulator
//! can inject, and the call surviving it without leaving the caller in
//! silence — a reply to every utterance, or an apology and a transfer with
//! the cause recorded.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use callgate_load::Outcome;
use callgate_sim::SimConfig;
use callgate_sim::script::DEFAULT_CALLER_SCRIPT;
use callgate_tests::{Harness, load};

/// A call of three utterances under `sim` is answered every time and its
/// caller turns equal the script.
async fn every_utterance_answered(sim: SimConfig) {
    let h = Harness::start(sim, |_| {}).await;
    let report = callgate_load::run(load(&h, 1, 3)).await;
    let call = &report.calls[0];
    assert_eq!(call.outcome, Outcome::Completed, "{call:#?}");
    assert_eq!(call.utterances_sent, 3);
    assert_eq!(
        call.replies_heard, 3,
        "a reply to each utterance: {call:#?}"
    );
    assert!(
        call.max_owed_silence_ms < 3_000,
        "no long silence owed to the caller: {call:#?}"
    );
    let ledger = h.closed_ledger(&call.call_sid.to_string()).await;
    assert_eq!(ledger.end_reason.as_deref(), Some("caller_hangup"));
    let turns = h.transcript(ledger.call_id).await;
    let caller: Vec<&str> = turns
        .iter()
        .filter(|t| t.0 == "caller")
        .map(|t| t.1.as_str())
        .collect();
    assert_eq!(caller, DEFAULT_CALLER_SCRIPT[..3].to_vec(), "{turns:#?}");
    h.assert_all_closed().await;
    h.stop().await;
}

/// A call under `sim` ends with the apology-and-transfer for `culprit`,
/// recorded as `ledger_reason`.
async fn transferred(sim: SimConfig, reason: &str, ledger_reason: &str) {
    let h = Harness::start(sim, |_| {}).await;
    let report = callgate_load::run(load(&h, 1, 3)).await;
    let call = &report.calls[0];
    let expected = if reason.ends_with("_stalled") {
        Outcome::WatchdogTransfer {
            reason: reason.into(),
        }
    } else {
        Outcome::FailoverTransfer {
            reason: reason.into(),
        }
    };
    assert_eq!(call.outcome, expected, "{call:#?}");
    assert!(
        call.max_owed_silence_ms < 3_000,
        "the prompt must fill the gap: {call:#?}"
    );
    let ledger = h.closed_ledger(&call.call_sid.to_string()).await;
    assert_eq!(ledger.end_reason.as_deref(), Some(ledger_reason));
    h.assert_all_closed().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finals_that_come_back_empty_still_get_every_utterance_answered() {
    let mut sim = SimConfig::default();
    sim.stt.empty_finals = 1.0;
    every_utterance_answered(sim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_speech_final_is_covered_by_utterance_end() {
    let mut sim = SimConfig::default();
    sim.stt.no_speech_final = true;
    every_utterance_answered(sim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_then_close_mid_stream_is_ridden_out_by_a_reconnect() {
    let mut sim = SimConfig::default();
    sim.stt.error_then_close_ms = Some(4_000);
    sim.stt.faulty_sessions = Some(1);
    every_utterance_answered(sim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_then_close_with_the_provider_staying_down_apologizes_and_transfers() {
    let mut sim = SimConfig::default();
    sim.stt.error_then_close_ms = Some(4_000);
    sim.stt.down_after_fault_ms = Some(600_000);
    transferred(sim, "stt_failed", "provider_failed:stt").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_shorter_than_the_watchdog_is_survived() {
    let mut sim = SimConfig::default();
    sim.stt.stall_results_ms = Some(1_000);
    sim.stt.stall_results_from_ms = 2_000;
    every_utterance_answered(sim).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_longer_than_the_watchdog_apologizes_then_transfers() {
    let mut sim = SimConfig::default();
    sim.stt.stall_results_ms = Some(60_000);
    transferred(sim, "stt_stalled", "stalled:stt").await;
}
