//! The per-call watchdog: a provider that stalls mid-call gets the caller an
//! apology and then a transfer, never silence, and the stall is recorded.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use callgate_load::Outcome;
use callgate_sim::SimConfig;
use callgate_tests::{Harness, load};

async fn stalled_call(sim: SimConfig, culprit: &str) {
    let h = Harness::start(sim, |_| {}).await;
    let report = callgate_load::run(load(&h, 1, 2)).await;
    let call = &report.calls[0];
    assert_eq!(
        call.outcome,
        Outcome::WatchdogTransfer {
            reason: format!("{culprit}_stalled")
        },
        "{call:#?}"
    );
    assert!(
        call.max_owed_silence_ms < 3_000,
        "the apology must fill the gap: {call:#?}"
    );
    // What the caller heard is told apart by its audio: the apology (not
    // counted as a reply) and the transfer prompt.
    assert!(call.apologies_heard >= 1, "{call:#?}");
    assert_eq!(
        call.replies_heard, 0,
        "an apology is not a reply: {call:#?}"
    );
    assert_eq!(call.prompts_heard.transfer, 1, "{call:#?}");

    let ledger = h.closed_ledger(&call.call_sid.to_string()).await;
    assert_eq!(
        ledger.end_reason.as_deref(),
        Some(format!("stalled:{culprit}").as_str())
    );
    assert_eq!(
        ledger.stats["stalls"], 2,
        "an apology, then the transfer: {:#}",
        ledger.stats
    );
    let kinds = h.event_kinds(ledger.call_id).await;
    assert_eq!(
        kinds.iter().filter(|k| *k == "stall").count(),
        2,
        "{kinds:?}"
    );
    h.assert_all_closed().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dialog_service_that_stops_answering_is_covered_then_transferred() {
    let mut sim = SimConfig::default();
    sim.dialog.stall_replies = true;
    stalled_call(sim, "dialog").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tts_provider_that_sends_no_audio_is_covered_then_transferred() {
    let mut sim = SimConfig::default();
    sim.tts.stall_audio = true;
    stalled_call(sim, "tts").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_stt_provider_that_stops_transcribing_is_covered_then_transferred() {
    let mut sim = SimConfig::default();
    sim.stt.stall_results = true;
    stalled_call(sim, "stt").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hard_maximum_duration_ends_a_call_with_a_goodbye() {
    let h = Harness::start(SimConfig::default(), |c| c.call.max_duration_s = 4).await;
    let report = callgate_load::run(load(&h, 1, 3)).await;
    let call = &report.calls[0];
    assert_eq!(
        call.outcome,
        Outcome::CutShort {
            reason: "max_duration".into()
        },
        "{call:#?}"
    );
    let ledger = h.closed_ledger(&call.call_sid.to_string()).await;
    assert_eq!(ledger.end_reason.as_deref(), Some("max_duration"));
    h.assert_all_closed().await;
    h.stop().await;
}
