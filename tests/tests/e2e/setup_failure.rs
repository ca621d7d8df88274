//! A provider refusing a call's session must not leave the call hanging: it
//! ends through the overflow path, and the reason is recorded.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use callgate_load::Outcome;
use callgate_sim::SimConfig;
use callgate_tests::{Harness, load};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stt_429_sends_the_call_to_the_overflow_path_with_the_reason_recorded() {
    let mut sim = SimConfig::default();
    sim.stt.fail_upgrade_status = Some(429);
    let h = Harness::start(sim, |_| {}).await;

    let report = callgate_load::run(load(&h, 1, 3)).await;
    let call = &report.calls[0];
    match &call.outcome {
        Outcome::Rejected {
            reason,
            prompt_heard,
            ..
        } => {
            assert_eq!(reason, "setup_failed:stt");
            assert!(prompt_heard, "the overflow prompt must be heard: {call:#?}");
        }
        other => panic!("expected the overflow path, got {other:?}: {call:#?}"),
    }
    assert!(call.max_owed_silence_ms < 3_000, "{call:#?}");

    let ledger = h.closed_ledger(&call.call_sid.to_string()).await;
    assert_eq!(ledger.end_reason.as_deref(), Some("setup_failed:stt"));
    assert_eq!(ledger.cleanup_status, "completed");
    // Measured, not assumed: the caller did not hang up (the stream was
    // closed for the transfer), so no disconnect was observed; cleanup
    // completed after the prompt and the permit's release.
    assert_eq!(ledger.stamps[4], None, "no disconnect observed: {ledger:?}");
    let admitted = ledger.stamps[0].unwrap();
    let cleaned = ledger.stamps[5].unwrap();
    let prompt = std::time::Duration::from_secs(3);
    assert!(
        cleaned.duration_since(admitted).unwrap() >= prompt,
        "cleanup is stamped after the overflow prompt played: {ledger:?}"
    );
    assert_eq!(
        ledger.stats["active_counter_delta"],
        serde_json::json!({"increment": 1, "decrement": 1})
    );
    assert!(
        h.event_kinds(ledger.call_id)
            .await
            .contains(&"setup_failed".to_string())
    );
    assert_eq!(
        h.sims.stt.stats().rejected_sessions,
        0,
        "the sim refused by fault, not by cap"
    );

    // TTS and dialog opened in parallel and must have been released.
    h.assert_all_closed().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dialog_service_at_its_cap_is_named_as_the_reason() {
    let mut sim = SimConfig::default();
    sim.dialog.max_streams = 0;
    let h = Harness::start(sim, |_| {}).await;
    let report = callgate_load::run(load(&h, 1, 1)).await;
    let call = &report.calls[0];
    assert!(
        matches!(&call.outcome, Outcome::Rejected { reason, prompt_heard: true, .. } if reason == "setup_failed:dialog"),
        "{call:#?}"
    );
    let ledger = h.closed_ledger(&call.call_sid.to_string()).await;
    assert_eq!(ledger.end_reason.as_deref(), Some("setup_failed:dialog"));
    h.assert_all_closed().await;
    h.stop().await;
}
