//! How calls end: the bot books and hangs up, the caller asks for a person,
//! a provider fails mid-call. None of them ends in silence, and each leaves
//! its reason in the ledger.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use callgate_load::Outcome;
use callgate_sim::SimConfig;
use callgate_tests::{Harness, load};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_booking_runs_both_tools_and_the_bot_ends_the_call() {
    let h = Harness::start(SimConfig::default(), |_| {}).await;
    let report = callgate_load::run(load(&h, 1, 4)).await;
    let call = &report.calls[0];
    assert_eq!(
        call.outcome,
        Outcome::EndedByBot {
            reason: "booking_confirmed".into()
        },
        "{call:#?}"
    );
    assert_eq!(call.replies_heard, 4, "{call:#?}");

    let ledger = h.closed_ledger(&call.call_sid.to_string()).await;
    assert_eq!(
        ledger.end_reason.as_deref(),
        Some("bot_ended:booking_confirmed")
    );
    assert_eq!(
        ledger.stats["delegation"]["started"], 2,
        "{:#}",
        ledger.stats
    );
    assert_eq!(
        ledger.stats["delegation"]["completed"], 2,
        "{:#}",
        ledger.stats
    );
    let tools = h.sims.dialog.tool_stats();
    assert_eq!((tools.completed, tools.cancelled), (2, 0));
    let slots =
        h.db.query(
            "SELECT name, value FROM call_slots WHERE call_id = $1 ORDER BY name",
            &[&ledger.call_id],
        )
        .await
        .unwrap();
    let slots: Vec<(String, String)> = slots.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        slots,
        vec![
            ("name".into(), "Alex Morgan".into()),
            ("party_size".into(), "4".into()),
            ("time".into(), "19:30".into())
        ]
    );
    // Its four tool events, read back a page at a time.
    crate::sessions::assert_events_page(&h, ledger.call_id, None).await;
    h.assert_all_closed().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asking_for_a_person_transfers_the_call() {
    let mut sim = SimConfig::default();
    sim.stt.script = vec!["Can I talk to a person please?".into()];
    let h = Harness::start(sim, |_| {}).await;
    let report = callgate_load::run(load(&h, 1, 2)).await;
    let call = &report.calls[0];
    assert_eq!(
        call.outcome,
        Outcome::Transferred {
            reason: "caller_requested_human".into()
        },
        "{call:#?}"
    );

    let ledger = h.closed_ledger(&call.call_sid.to_string()).await;
    assert_eq!(
        ledger.end_reason.as_deref(),
        Some("transferred:caller_requested_human")
    );
    let state =
        h.db.query_one(
            "SELECT escalated, escalation_reason FROM call_state WHERE call_id = $1",
            &[&ledger.call_id],
        )
        .await
        .unwrap();
    assert!(state.get::<_, bool>(0));
    assert_eq!(
        state.get::<_, Option<String>>(1).as_deref(),
        Some("caller_requested_human")
    );
    h.assert_all_closed().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_stt_stream_that_dies_mid_call_and_stays_down_ends_in_a_spoken_transfer() {
    let mut sim = SimConfig::default();
    sim.stt.close_after_ms = Some(4_000);
    // Down for longer than the reconnect budget.
    sim.stt.down_after_fault_ms = Some(600_000);
    let h = Harness::start(sim, |_| {}).await;
    let report = callgate_load::run(load(&h, 1, 3)).await;
    let call = &report.calls[0];
    assert_eq!(
        call.outcome,
        Outcome::FailoverTransfer {
            reason: "stt_failed".into()
        },
        "{call:#?}"
    );
    assert!(call.max_owed_silence_ms < 3_000, "{call:#?}");

    let ledger = h.closed_ledger(&call.call_sid.to_string()).await;
    assert_eq!(ledger.end_reason.as_deref(), Some("provider_failed:stt"));
    assert!(
        h.event_kinds(ledger.call_id)
            .await
            .contains(&"stt_closed".to_string())
    );
    h.assert_all_closed().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pressing_zero_reaches_the_dialog_service_and_transfers_the_call() {
    use callgate_tests::raw::{RawCall, ServerMsg};
    let h = Harness::start(SimConfig::default(), |_| {}).await;
    let mut c = RawCall::connect(&h.ws_url()).await;
    c.start().await;
    let t = std::time::Duration::from_secs(15);
    while !matches!(c.recv(t).await, Some(ServerMsg::Media(_))) {}
    let dtmf = serde_json::json!({"event": "dtmf", "streamSid": c.stream_sid,
        "dtmf": {"track": "inbound_track", "digit": "0"}});
    c.send_text(dtmf.to_string()).await;
    // The simulated bot escalates on 0: the transfer prompt, then the
    // stream closes so Twilio runs the TwiML's next verb.
    let close = c.until_closed(t).await;
    assert_eq!(close.map(|c| c.0), Some(1000));
    let ledger = h.closed_ledger(&c.call_sid).await;
    assert_eq!(
        ledger.end_reason.as_deref(),
        Some("transferred:caller_requested_human")
    );
    let digits = h.event_details(ledger.call_id, "dtmf").await;
    assert_eq!(digits, [serde_json::json!({"digit": "0"})]);
    assert_eq!(ledger.stats["interaction"]["dtmf_digits"], 1);
    h.assert_all_closed().await;
    h.stop().await;
}
