//! The auditor end to end: calls cut mid-setup and mid-reply leave complete
//! receipts and a ledger `GET /admin/audit` and `callgate audit` (its
//! library half, `callgate::audit_http::audit_with_config`) both find
//! clean; a drain is recorded as the instance's `draining` declaration.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::Duration;

use callgate_load::Outcome;
use callgate_sim::SimConfig;
use callgate_tests::raw::{RawCall, ServerMsg, speech};
use callgate_tests::{Harness, eventually, load};
use tokio_postgres::NoTls;

/// `GET /admin/audit` (loopback, no token configured).
async fn admin_audit(h: &Harness) -> serde_json::Value {
    callgate::ensure_tls_provider();
    let resp = reqwest::get(format!("http://{}/admin/audit", h.server.addr))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    resp.json().await.unwrap()
}

/// Both faces of the auditor report a clean ledger.
async fn assert_audit_clean(h: &Harness) {
    let report = admin_audit(h).await;
    assert_eq!(report["violations"], serde_json::json!([]), "{report:#}");
    assert!(
        report["checked_at"].as_str().unwrap().ends_with('Z'),
        "{report:#}"
    );
    let cfg = h.server.app.cfg();
    let found = callgate::audit_http::audit_with_config(&cfg).await.unwrap();
    assert!(found.is_empty(), "{found:#?}");
    assert_eq!(callgate::audit_http::render_text(&found), "0 violations\n");
}

/// A receipt a finished call must leave: closed, with a reason, the permit
/// counted once and released once, and the interaction figures.
fn assert_complete(l: &callgate_tests::Ledger, reason: &str) {
    assert_eq!(l.end_reason.as_deref(), Some(reason), "{:#}", l.stats);
    assert_eq!(l.cleanup_status, "completed", "{:#}", l.stats);
    assert_eq!(
        l.stats["active_counter_delta"],
        serde_json::json!({"increment": 1, "decrement": 1})
    );
    assert!(l.stats["interaction"].is_object(), "{:#}", l.stats);
    assert!(l.stamps[4].is_some(), "the hang-up was observed: {l:?}");
    assert!(l.stamps[5].is_some(), "cleanup completed: {l:?}");
}

/// Holds new ledger rows back (their `call_state` insert waits on a SHARE
/// lock) so that a hang-up lands while setup is still in progress.
async fn hold_setup(h: &Harness) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&h.conninfo(), NoTls).await.unwrap();
    tokio::spawn(conn);
    client
        .batch_execute("BEGIN; LOCK TABLE call_state IN SHARE MODE")
        .await
        .unwrap();
    client
}

/// Caller hangs up during setup: the setup finishes (bounded), the call
/// ends before it starts and is torn down like any other.
async fn cut_mid_setup(h: &Harness) -> String {
    let lock = hold_setup(h).await;
    let mut c = RawCall::connect(&h.ws_url()).await;
    c.start().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        h.server
            .app
            .call
            .counters
            .setting_up
            .load(std::sync::atomic::Ordering::Relaxed),
        1,
        "the call is in setup, waiting on its ledger row"
    );
    c.stop().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    lock.batch_execute("COMMIT").await.unwrap();
    c.until_closed(Duration::from_secs(15)).await;
    c.call_sid.clone()
}

/// Waits for the greeting's end, speaks, and hangs up once the reply is
/// playing.
async fn cut_mid_reply(h: &Harness) -> String {
    let mut c = RawCall::connect(&h.ws_url()).await;
    c.start().await;
    let mut greeted = false;
    for _ in 0..50 {
        let got = c.stream_for(&[], Duration::from_millis(200)).await;
        if got.contains(&ServerMsg::Mark("turn-0".into())) {
            greeted = true;
            break;
        }
    }
    assert!(greeted, "the greeting played to its end");
    c.stream_for(&speech(1_400, 3), Duration::from_millis(1_400))
        .await;
    let mut replying = false;
    for _ in 0..50 {
        let got = c.stream_for(&[], Duration::from_millis(100)).await;
        assert!(
            !got.contains(&ServerMsg::Mark("turn-1".into())),
            "reply ended early: {got:?}"
        );
        if got.iter().any(|m| matches!(m, ServerMsg::Media(_))) {
            replying = true;
            break;
        }
    }
    assert!(replying, "the reply started playing");
    c.stream_for(&[], Duration::from_millis(300)).await;
    c.stop().await;
    c.until_closed(Duration::from_secs(15)).await;
    c.call_sid.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_cut_mid_setup_and_mid_reply_leave_complete_receipts_and_a_clean_audit() {
    let h = Harness::start(SimConfig::default(), |_| {}).await;
    assert_audit_clean(&h).await;

    let setup_sid = cut_mid_setup(&h).await;
    let reply_sid = cut_mid_reply(&h).await;

    let setup = h.closed_ledger(&setup_sid).await;
    assert_complete(&setup, "caller_hangup_during_setup");
    let reply = h.closed_ledger(&reply_sid).await;
    assert_complete(&reply, "caller_hangup");
    let turns = h.transcript(reply.call_id).await;
    let last = turns.last().unwrap();
    assert_eq!(
        (last.0.as_str(), last.2),
        ("bot", true),
        "the reply was cut while playing: {turns:#?}"
    );
    assert!(
        reply.stats["turns"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "{:#}",
        reply.stats
    );

    h.assert_all_closed().await;
    assert_audit_clean(&h).await;
    h.stop().await;
}

/// A provider refusing the session during setup: the overflow path, a
/// `setup_failed` event (a terminal one) and a closed receipt — clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setup_failure_leaves_a_clean_audit() {
    let mut sim = SimConfig::default();
    sim.stt.fail_upgrade_status = Some(429);
    let h = Harness::start(sim, |_| {}).await;
    let report = callgate_load::run(load(&h, 1, 1)).await;
    let call = &report.calls[0];
    assert!(
        matches!(call.outcome, Outcome::Rejected { .. }),
        "{call:#?}"
    );
    let ledger = h.closed_ledger(&call.call_sid.to_string()).await;
    assert_eq!(ledger.end_reason.as_deref(), Some("setup_failed:stt"));
    assert_eq!(h.event_kinds(ledger.call_id).await, ["setup_failed"]);
    h.assert_all_closed().await;
    assert_audit_clean(&h).await;
    h.stop().await;
}

/// This instance's declarations in order: (kind, detail).
async fn declared(h: &Harness) -> Vec<(String, serde_json::Value)> {
    h.db.query(
        "SELECT kind, detail FROM instance_events WHERE instance = $1 ORDER BY at, id",
        &[&h.instance],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_is_recorded_as_the_instance_declaring_itself_draining() {
    let h = Harness::start(SimConfig::default(), |_| {}).await;
    let before = declared(&h).await;
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0].0, "started");
    assert_eq!(before[0].1["pid"], std::process::id());

    let resp = reqwest::Client::new()
        .post(format!("http://{}/admin/drain", h.server.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 202);
    let after = eventually(
        Duration::from_secs(5),
        "the draining declaration",
        async || declared(&h).await,
        |d| d.len() == 2,
    )
    .await;
    assert_eq!(after[1].0, "draining", "{after:?}");
    assert_eq!(after[1].1["in_progress"], 0);

    // Asking again changes nothing: the drain began once.
    let again = reqwest::Client::new()
        .post(format!("http://{}/admin/drain", h.server.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status().as_u16(), 202);
    // A call arriving now is refused, not admitted: the audit stays clean.
    let report = callgate_load::run(load(&h, 1, 1)).await;
    assert!(
        matches!(&report.calls[0].outcome, Outcome::Rejected { reason, .. } if reason == "draining"),
        "{:#?}",
        report.calls[0]
    );
    assert_eq!(declared(&h).await.len(), 2);
    assert_audit_clean(&h).await;
    h.stop().await;
}
