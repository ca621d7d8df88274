//! Tool work belongs to its call: when the caller hangs up while a tool is
//! running, the tool request is cancelled and nothing outlives the call.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::{Duration, Instant};

use callgate_sim::SimConfig;
use callgate_tests::Harness;
use callgate_tests::raw::{RawCall, ServerMsg, speech};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_up_during_a_tool_call_cancels_it() {
    let mut sim = SimConfig::default();
    sim.stt.script =
        vec!["A table for four tonight at seven thirty, the name is Alex Morgan.".into()];
    sim.dialog.tool_delay_ms = 20_000;
    let h = Harness::start(sim, |_| {}).await;

    let mut c = RawCall::connect(&h.ws_url()).await;
    c.start().await;
    let greeting = c.stream_for(&[], Duration::from_secs(4)).await;
    assert!(
        greeting.iter().any(|m| matches!(m, ServerMsg::Media(_))),
        "greeting heard"
    );
    c.stream_for(&speech(1_800, 3), Duration::from_secs(4))
        .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while h.sims.dialog.tool_stats().in_flight == 0 {
        assert!(
            Instant::now() < deadline,
            "the availability tool never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.stop().await;
    c.until_closed(Duration::from_secs(10)).await;

    let ledger = h.closed_ledger(&c.call_sid).await;
    assert_eq!(ledger.end_reason.as_deref(), Some("caller_hangup"));
    assert_eq!(
        ledger.stats["delegation"]["cancelled"], 1,
        "{:#}",
        ledger.stats
    );
    assert_eq!(
        ledger.stats["delegation"]["orphaned"], 1,
        "the hang-up left it running: {:#}",
        ledger.stats
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let t = h.sims.dialog.tool_stats();
        if t.in_flight == 0 && t.cancelled == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "tool request still running after hang-up: {t:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    h.assert_all_closed().await;
    h.stop().await;
}
