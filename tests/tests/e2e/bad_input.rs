//! Bad input from a carrier closes that one stream with a clear reason in
//! the ledger; other calls are untouched and nothing panics.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use callgate_load::Outcome;
use callgate_sim::SimConfig;
use callgate_tests::raw::{RawCall, ServerMsg};
use callgate_tests::{Harness, eventually, load};

const T: Duration = Duration::from_secs(15);

/// Starts a call and waits until its greeting audio arrives (admitted and set up).
async fn live_call(h: &Harness) -> RawCall {
    let mut c = RawCall::connect(&h.ws_url()).await;
    c.start().await;
    loop {
        match c.recv(T).await {
            Some(ServerMsg::Media(_)) => return c,
            Some(ServerMsg::Closed(why)) => panic!("closed before the greeting: {why:?}"),
            None => panic!("no greeting within {T:?}"),
            _ => {}
        }
    }
}

async fn ends_with(h: &Harness, mut c: RawCall, frame: String, reason: &str) {
    c.send_text(frame).await;
    c.until_closed(T).await;
    let ledger = h.closed_ledger(&c.call_sid).await;
    assert_eq!(ledger.end_reason.as_deref(), Some(reason));
    assert_eq!(ledger.cleanup_status, "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_bad_frame_closes_only_its_own_stream() {
    let h = Harness::start(SimConfig::default(), |c| {
        c.twilio.max_message_bytes = 16 * 1024
    })
    .await;
    let good = tokio::spawn(callgate_load::run(load(&h, 1, 2)));

    ends_with(
        &h,
        live_call(&h).await,
        "{not json".into(),
        "protocol_error:invalid_json",
    )
    .await;
    let bad_b64 = r#"{"event":"media","streamSid":"x","media":{"payload":"@@@@"}}"#.to_string();
    ends_with(
        &h,
        live_call(&h).await,
        bad_b64,
        "protocol_error:invalid_base64",
    )
    .await;
    let huge = format!(
        r#"{{"event":"media","media":{{"payload":"{}"}}}}"#,
        "A".repeat(40_000)
    );
    ends_with(
        &h,
        live_call(&h).await,
        huge,
        "protocol_error:message_too_large",
    )
    .await;
    let big_payload = format!(
        r#"{{"event":"media","media":{{"payload":"{}"}}}}"#,
        "A".repeat(4_000)
    );
    ends_with(
        &h,
        live_call(&h).await,
        big_payload,
        "protocol_error:payload_too_large",
    )
    .await;
    let unknown = r#"{"event":"hologram","x":1}"#.to_string();
    let mut c = live_call(&h).await;
    c.send_text(unknown).await;
    c.stop().await;
    c.until_closed(T).await;
    assert_eq!(
        h.closed_ledger(&c.call_sid).await.end_reason.as_deref(),
        Some("caller_hangup"),
        "unknown events are ignored"
    );

    let report = good.await.expect("load task");
    assert_eq!(
        report.calls[0].outcome,
        Outcome::Completed,
        "{:#?}",
        report.calls[0]
    );
    h.assert_all_closed().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_that_never_become_calls_are_refused_clearly() {
    let h = Harness::start(SimConfig::default(), |c| c.twilio.start_timeout_ms = 1_000).await;

    let mut c = RawCall::connect(&h.ws_url()).await;
    c.media(&[0xFF; 160]).await;
    let close = c.until_closed(T).await.expect("a close frame");
    assert_eq!(close.0, 1008);
    assert!(close.1.contains("media before start"), "{close:?}");

    let mut c = RawCall::connect(&h.ws_url()).await;
    c.start_with("audio/x-l16", 16_000).await;
    let close = c.until_closed(T).await.expect("a close frame");
    assert_eq!(close.0, 1008);
    assert!(close.1.contains("unsupported mediaFormat"), "{close:?}");
    let rejections = eventually(
        T,
        "the refused stream's admission_rejections row",
        async || h.rejections(&c.call_sid).await,
        |rows| !rows.is_empty(),
    )
    .await;
    assert_eq!(rejections, vec!["unsupported_media_format".to_string()]);

    let mut c = RawCall::connect(&h.ws_url()).await;
    let close = c.until_closed(T).await.expect("a close frame");
    assert!(close.1.contains("no start event"), "{close:?}");

    assert_eq!(
        h.server.app.call.gate.snapshot().admitted_total,
        0,
        "nothing was admitted"
    );
    h.assert_all_closed().await;
    h.stop().await;
}
