//! Mid-call reconnects (issue 7, item 3): a provider connection that drops
//! once is reopened inside its client and the call goes on — every
//! utterance answered, no long silence, the receipt counting the reconnect
//! — and one that stays down past the budget ends through the apology and
//! transfer with the cause recorded.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use callgate_load::Outcome;
use callgate_sim::SimConfig;
use callgate_tests::{Harness, load};

/// Runs one call of three utterances under `sim`; asserts every utterance
/// was answered and that `provider`'s receipt counts one drop, reconnected.
async fn survives_one_drop(sim: SimConfig, provider: &str) {
    let h = Harness::start(sim, |_| {}).await;
    let report = callgate_load::run(load(&h, 1, 3)).await;
    let call = &report.calls[0];
    assert_eq!(call.outcome, Outcome::Completed, "{call:#?}");
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
    let tally = &ledger.stats["reconnects"][provider];
    assert_eq!(tally["drops"], 1, "{:#}", ledger.stats);
    assert_eq!(tally["reconnected"], 1, "{:#}", ledger.stats);
    assert!(
        tally["attempts"].as_u64().unwrap() >= 1,
        "{:#}",
        ledger.stats
    );
    for other in ["stt", "tts", "dialog"]
        .into_iter()
        .filter(|p| *p != provider)
    {
        assert_eq!(ledger.stats["reconnects"][other]["drops"], 0, "{other}");
    }
    let kinds = h.event_kinds(ledger.call_id).await;
    assert!(
        kinds.iter().any(|k| k == "provider_reconnecting")
            && kinds.iter().any(|k| k == "provider_reconnected"),
        "{kinds:?}"
    );
    let turns = h.transcript(ledger.call_id).await;
    let caller = turns.iter().filter(|t| t.0 == "caller").count();
    let bot = turns.iter().filter(|t| t.0 == "bot").count();
    assert_eq!(caller, 3, "every utterance transcribed: {turns:#?}");
    assert!(bot >= 4, "greeting and three replies: {turns:#?}");
    h.assert_all_closed().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stt_dropped_mid_utterance_reconnects_and_the_utterance_is_answered() {
    let mut sim = SimConfig::default();
    sim.stt.drop_mid_utterance_ms = Some(400);
    sim.stt.faulty_sessions = Some(1);
    survives_one_drop(sim, "stt").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tts_dropped_mid_call_reconnects_and_every_reply_is_heard() {
    let mut sim = SimConfig::default();
    sim.tts.close_after_ms = Some(1_500);
    sim.tts.faulty_sessions = Some(1);
    survives_one_drop(sim, "tts").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dialog_stream_dropped_mid_call_resumes_the_conversation() {
    let mut sim = SimConfig::default();
    sim.dialog.close_after_ms = Some(3_000);
    sim.dialog.faulty_sessions = Some(1);
    survives_one_drop(sim, "dialog").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dialog_service_down_past_the_budget_apologizes_and_transfers() {
    let mut sim = SimConfig::default();
    sim.dialog.close_after_ms = Some(3_000);
    sim.dialog.down_after_fault_ms = Some(600_000);
    let h = Harness::start(sim, |c| {
        c.dialog.reconnect.budget_ms = 1_500;
    })
    .await;
    let report = callgate_load::run(load(&h, 1, 3)).await;
    let call = &report.calls[0];
    assert_eq!(
        call.outcome,
        Outcome::FailoverTransfer {
            reason: "dialog_failed".into()
        },
        "{call:#?}"
    );
    assert!(
        call.max_owed_silence_ms < 3_000,
        "the prompt fills the gap: {call:#?}"
    );
    let ledger = h.closed_ledger(&call.call_sid.to_string()).await;
    assert_eq!(ledger.end_reason.as_deref(), Some("provider_failed:dialog"));
    let tally = &ledger.stats["reconnects"]["dialog"];
    assert_eq!(tally["drops"], 1, "{:#}", ledger.stats);
    assert_eq!(tally["reconnected"], 0, "{:#}", ledger.stats);
    assert!(
        tally["down_refusals"].as_u64().unwrap() >= 1,
        "{:#}",
        ledger.stats
    );
    h.assert_all_closed().await;
    h.stop().await;
}
