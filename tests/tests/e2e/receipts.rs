//! Receipts state only what was measured: cleanup that did not complete is
//! not recorded as completed, and counter deltas are the permit's own.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use callgate_load::Outcome;
use callgate_sim::SimConfig;
use callgate_tests::{Harness, load};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tts_close_that_times_out_is_not_recorded_as_completed() {
    let mut sim = SimConfig::default();
    sim.tts.ignore_close_socket = true;
    let h = Harness::start(sim, |c| c.tts.close_timeout_ms = 300).await;

    let report = callgate_load::run(load(&h, 1, 1)).await;
    let call = &report.calls[0];
    assert_eq!(call.outcome, Outcome::Completed, "{call:#?}");

    let ledger = h.closed_ledger(&call.call_sid.to_string()).await;
    assert_eq!(ledger.end_reason.as_deref(), Some("caller_hangup"));
    assert_eq!(ledger.cleanup_status, "failed", "{:#}", ledger.stats);
    assert_eq!(
        ledger.stats["cleanup"]["forced"],
        serde_json::json!(["tts"]),
        "{:#}",
        ledger.stats
    );
    // The permit was still released exactly once.
    assert_eq!(
        ledger.stats["active_counter_delta"],
        serde_json::json!({"increment": 1, "decrement": 1})
    );
    assert!(
        ledger.stamps[4].is_some(),
        "the caller hung up: disconnect observed"
    );
    h.assert_all_closed().await;
    h.stop().await;
}

/// A TTS generating at half real time: every reply runs dry between its
/// chunks, and the receipt counts the gaps the caller heard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tts_slower_than_real_time_shows_as_outbound_underruns() {
    let mut sim = SimConfig::default();
    sim.tts.realtime_factor = 0.5;
    let h = Harness::start(sim, |_| {}).await;
    let lead = h.server.app.cfg().call.pacer_lead_ms;

    let report = callgate_load::run(load(&h, 1, 1)).await;
    let call = &report.calls[0];
    assert_eq!(call.outcome, Outcome::Completed, "{call:#?}");
    let ledger = h.closed_ledger(&call.call_sid.to_string()).await;
    let media = &ledger.stats["media"];
    let count = media["outbound_underruns"].as_u64().unwrap();
    let total = media["outbound_underrun_ms"].as_u64().unwrap();
    let longest = media["outbound_longest_underrun_ms"].as_u64().unwrap();
    assert!(count >= 1, "the replies ran dry between chunks: {media:#}");
    // Each counted gap is longer than what the far end had buffered.
    assert!(longest >= lead + 20, "{media:#}");
    assert!(
        total >= longest && total >= count * (lead + 20),
        "{media:#}"
    );
    h.assert_all_closed().await;
    h.stop().await;
}
