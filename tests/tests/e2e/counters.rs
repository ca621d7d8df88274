//! The three session counters end to end: ledger (Postgres), runtime (the
//! gate) and routing (the HAProxy agent's last answer) converge after calls
//! end and `/admin/status` shows them with their ages; a divergence kept
//! up past `[ledger].divergence_window_s` writes exactly one
//! reconciliation receipt and shows in the divergence metrics.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::net::SocketAddr;
use std::time::Duration;

use callgate::config::Config;
use callgate_sim::SimConfig;
use callgate_tests::raw::{RawCall, ServerMsg};
use callgate_tests::{Harness, eventually};
use serde_json::Value;
use tokio::io::AsyncReadExt;

/// Gauges are process-wide (one recorder per process, shared by every
/// server in it): under `cargo test`, whose tests share a process, these
/// tests take turns. nextest runs each in its own process anyway.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const PATIENCE: Duration = Duration::from_secs(20);

fn fast_reconciler(cfg: &mut Config, window_s: u64) {
    cfg.ledger.reconcile_interval_ms = 100;
    cfg.ledger.divergence_window_s = window_s;
    // The calls here sit silent while the test looks at counters.
    cfg.call.media_stall_ms = 60_000;
}

async fn status(h: &Harness) -> Value {
    let url = format!("http://{}/admin/status", h.server.addr);
    let resp = reqwest::get(url).await.expect("GET /admin/status");
    assert_eq!(resp.status(), 200);
    resp.json().await.expect("status JSON")
}

/// `(value, known)` of one counter in a status body.
fn counter(s: &Value, name: &str) -> (Option<u64>, bool) {
    let c = &s["counters"][name];
    (c["value"].as_u64(), c["known"].as_bool().unwrap_or(false))
}

fn divergence<'a>(s: &'a Value, direction: &str) -> &'a Value {
    s["divergences"]
        .as_array()
        .and_then(|ds| ds.iter().find(|d| d["direction"] == direction))
        .unwrap_or(&Value::Null)
}

/// One agent check, as HAProxy makes it: connect, read the line.
async fn agent_check(addr: SocketAddr) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut line = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut line))
        .await
        .expect("agent answered in time")
        .unwrap();
    line
}

/// The value of one metric line (`name{labels} value`).
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

/// The reconciliation receipts, once there is one.
async fn first_receipts(h: &Harness) -> Vec<state_store::ReconciliationRow> {
    let store = &h.server.app.call.store;
    eventually(
        PATIENCE,
        "a reconciliation receipt",
        async || store.reconciliation_receipts(&h.instance).await.unwrap(),
        |r| !r.is_empty(),
    )
    .await
}

async fn receipt_count(h: &Harness) -> usize {
    let store = &h.server.app.call.store;
    store
        .reconciliation_receipts(&h.instance)
        .await
        .unwrap()
        .len()
}

/// Waits until `/admin/status` shows no divergence in `direction`.
async fn healed(h: &Harness, direction: &str) {
    eventually(
        PATIENCE,
        "the divergence healed",
        async || status(h).await,
        |s| divergence(s, direction)["sessions"] == 0,
    )
    .await;
}

async fn live_call(h: &Harness) -> (RawCall, uuid::Uuid) {
    let mut c = RawCall::connect(&h.ws_url()).await;
    c.start().await;
    let greeting = c.stream_for(&[], Duration::from_secs(2)).await;
    assert!(greeting.iter().any(|m| matches!(m, ServerMsg::Media(_))));
    let row = eventually(
        PATIENCE,
        "the ledger row",
        async || h.ledger(&c.call_sid).await,
        Option::is_some,
    )
    .await;
    (c, row.unwrap().call_id)
}

async fn hang_up(c: &mut RawCall) {
    c.stop().await;
    c.until_closed(Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_three_counters_converge_after_calls_end() {
    let _serial = SERIAL.lock().await;
    let h = Harness::start(SimConfig::default(), |cfg| {
        fast_reconciler(cfg, 10);
        cfg.agent.enabled = true;
        cfg.agent.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    })
    .await;
    let agent = h.server.agent_addr.expect("agent listening");

    // Nothing asked the agent yet: routing is unknown, not zero.
    let s = eventually(
        PATIENCE,
        "a first reconcile tick",
        async || status(&h).await,
        |s| s["reconcile"]["observed"] == true,
    )
    .await;
    assert_eq!(counter(&s, "routing"), (None, false), "{s:#}");
    assert!(s["counters"]["routing"]["age_s"].is_null(), "{s:#}");
    assert_eq!(counter(&s, "runtime"), (Some(0), true), "{s:#}");
    assert_eq!(s["state"], "serving");
    assert!(
        s["decided_by"].is_string() && s["capacity"].is_u64(),
        "{s:#}"
    );
    assert_eq!(s["pressure"]["weights"]["version"], 1, "{s:#}");
    let metrics = h.metrics_text().await;
    assert_eq!(
        metric(&metrics, r#"callgate_counter_known{counter="routing"}"#),
        Some(0.0),
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "callgate_routing_reported_sessions"),
        None,
        "never a fake value"
    );

    let (mut a, _) = live_call(&h).await;
    let (mut b, _) = live_call(&h).await;
    agent_check(agent).await;
    let s = eventually(
        PATIENCE,
        "two sessions on all three counters",
        async || status(&h).await,
        |s| {
            [
                counter(s, "ledger"),
                counter(s, "runtime"),
                counter(s, "routing"),
            ] == [(Some(2), true); 3]
        },
    )
    .await;
    assert_eq!(s["pressure"]["components"]["active"], 2, "{s:#}");
    assert!(s["pressure"]["score"].as_f64().unwrap() >= 2.0, "{s:#}");
    let routing_age = s["counters"]["routing"]["age_s"].as_f64().unwrap();
    assert!(routing_age < 5.0, "{s:#}");

    hang_up(&mut a).await;
    hang_up(&mut b).await;
    h.closed_ledger(&a.call_sid).await;
    h.closed_ledger(&b.call_sid).await;
    agent_check(agent).await;
    let s = eventually(
        PATIENCE,
        "the counters back at zero",
        async || status(&h).await,
        |s| {
            [
                counter(s, "ledger"),
                counter(s, "runtime"),
                counter(s, "routing"),
            ] == [(Some(0), true); 3]
        },
    )
    .await;
    for d in s["divergences"].as_array().unwrap() {
        assert_eq!(d["sessions"], 0, "{s:#}");
    }
    let metrics = h.metrics_text().await;
    for (series, want) in [
        ("callgate_ledger_open_sessions", 0.0),
        ("callgate_runtime_active_sessions", 0.0),
        ("callgate_routing_reported_sessions", 0.0),
        (r#"callgate_counter_known{counter="routing"}"#, 1.0),
    ] {
        assert_eq!(metric(&metrics, series), Some(want), "{series}\n{metrics}");
    }
    assert!(
        h.server
            .app
            .call
            .store
            .reconciliation_receipts(&h.instance)
            .await
            .unwrap()
            .is_empty()
    );
    h.assert_all_closed().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_closed_behind_callgates_back_writes_one_receipt() {
    let _serial = SERIAL.lock().await;
    let h = Harness::start(SimConfig::default(), |cfg| fast_reconciler(cfg, 2)).await;
    let (mut c, call_id) = live_call(&h).await;
    // The row closes while the call still runs: runtime 1 > ledger 0.
    let closed = h
        .db
        .execute(
            "UPDATE call_ledger SET cleanup_status = 'completed', end_reason = 'test' WHERE call_id = $1",
            &[&call_id],
        )
        .await
        .unwrap();
    assert_eq!(closed, 1);
    let receipts = first_receipts(&h).await;
    let r = &receipts[0].receipt;
    assert_eq!(r.direction, "leaked_or_delayed_cleanup");
    assert_eq!(
        (r.sessions, r.ledger_open, r.runtime_active),
        (1, Some(0), Some(1))
    );
    assert_eq!(r.routing_reported, None, "no agent: routing unknown");
    assert_eq!(r.source_of_truth, "ledger");
    assert_eq!(r.correction, "none: reported");
    let ids: Vec<uuid::Uuid> = r.affected_calls.iter().map(|c| c.0).collect();
    assert_eq!(ids, vec![call_id], "the live call with no open row");
    let lasted = r.recorded_at.duration_since(r.diverged_since).unwrap();
    assert!(lasted > Duration::from_secs(2), "{lasted:?}");

    // It goes on: still one receipt, and the metrics show it.
    c.stream_for(&[], Duration::from_millis(1_500)).await;
    assert_eq!(receipt_count(&h).await, 1);
    let metrics = h.metrics_text().await;
    let d = r#"{direction="leaked_or_delayed_cleanup"}"#;
    assert_eq!(
        metric(
            &metrics,
            &format!("callgate_counter_divergence_sessions{d}")
        ),
        Some(1.0),
        "{metrics}"
    );
    let age = metric(
        &metrics,
        &format!("callgate_counter_divergence_age_seconds{d}"),
    )
    .unwrap();
    assert!(age > 3.0, "{age} {metrics}");
    assert_eq!(
        metric(
            &metrics,
            &format!("callgate_reconciliation_receipts_total{d}")
        ),
        Some(1.0)
    );
    let s = status(&h).await;
    assert_eq!(
        divergence(&s, "leaked_or_delayed_cleanup")["sessions"],
        1,
        "{s:#}"
    );
    assert_eq!(
        s["reconcile"]["recent_receipts"].as_array().unwrap().len(),
        1,
        "{s:#}"
    );

    // The call ends: the episode is over and nothing more is written.
    hang_up(&mut c).await;
    healed(&h, "leaked_or_delayed_cleanup").await;
    assert_eq!(receipt_count(&h).await, 1);
    h.assert_all_closed().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_row_with_no_call_is_reported_as_false_capacity() {
    let _serial = SERIAL.lock().await;
    let h = Harness::start(SimConfig::default(), |cfg| fast_reconciler(cfg, 1)).await;
    let ghost = uuid::Uuid::new_v4();
    h.db.execute(
        "INSERT INTO call_ledger (call_id, owner_instance, ingress, admitted_at, admission_wait_ms) \
         VALUES ($1, $2, 'twilio', now(), 0)",
        &[&ghost, &h.instance],
    )
    .await
    .unwrap();
    let store = &h.server.app.call.store;
    let receipts = first_receipts(&h).await;
    let r = &receipts[0].receipt;
    assert_eq!(r.direction, "false_capacity_or_lost_ownership");
    assert_eq!(
        (r.sessions, r.ledger_open, r.runtime_active),
        (1, Some(1), Some(0))
    );
    let ids: Vec<uuid::Uuid> = r.affected_calls.iter().map(|c| c.0).collect();
    assert_eq!(ids, vec![ghost], "the open row with no call");
    // Not silently fixed: the row is still open.
    assert_eq!(store.open_ledger_sessions(&h.instance).await.unwrap(), 1);

    h.db.execute(
        "UPDATE call_ledger SET cleanup_status = 'failed', end_reason = 'test' WHERE call_id = $1",
        &[&ghost],
    )
    .await
    .unwrap();
    healed(&h, "false_capacity_or_lost_ownership").await;
    assert_eq!(receipt_count(&h).await, 1);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_tool_counts_as_delegating_pressure() {
    let _serial = SERIAL.lock().await;
    let mut sim = SimConfig::default();
    sim.stt.script =
        vec!["A table for four tonight at seven thirty, the name is Alex Morgan.".into()];
    sim.dialog.tool_delay_ms = 20_000;
    let h = Harness::start(sim, |cfg| fast_reconciler(cfg, 10)).await;
    let (mut c, _) = live_call(&h).await;
    let s = status(&h).await;
    assert_eq!(s["pressure"]["components"]["delegating"], 0, "{s:#}");
    c.stream_for(
        &callgate_tests::raw::speech(1_800, 3),
        Duration::from_secs(4),
    )
    .await;
    let s = eventually(
        PATIENCE,
        "the tool running",
        async || status(&h).await,
        |s| s["pressure"]["components"]["delegating"] == 1,
    )
    .await;
    assert_eq!(h.sims.dialog.tool_stats().in_flight, 1);
    let weight = s["pressure"]["weights"]["delegating"].as_f64().unwrap();
    let score = s["pressure"]["score"].as_f64().unwrap();
    assert!(score >= 1.0 + weight, "{s:#}");
    hang_up(&mut c).await;
    eventually(
        PATIENCE,
        "no call delegating",
        async || status(&h).await,
        |s| s["pressure"]["components"]["delegating"] == 0,
    )
    .await;
    h.assert_all_closed().await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_reconnecting_counts_as_recovering_pressure() {
    let _serial = SERIAL.lock().await;
    let mut sim = SimConfig::default();
    // The first TTS socket drops 3 s in; reconnects are refused for 2 s
    // after it, so the call is recovering long enough to be seen.
    sim.tts.close_after_ms = Some(3_000);
    sim.tts.faulty_sessions = Some(1);
    sim.tts.down_after_fault_ms = Some(2_000);
    let h = Harness::start(sim, |cfg| fast_reconciler(cfg, 10)).await;
    let (mut c, _) = live_call(&h).await;
    let s = status(&h).await;
    assert_eq!(s["pressure"]["components"]["recovering"], 0, "{s:#}");
    let s = eventually(
        PATIENCE,
        "the call recovering",
        async || {
            // Keep reading so the call's outbound audio never backs up.
            c.stream_for(&[], Duration::from_millis(50)).await;
            status(&h).await
        },
        |s| s["pressure"]["components"]["recovering"] == 1,
    )
    .await;
    let weight = s["pressure"]["weights"]["recovering"].as_f64().unwrap();
    let score = s["pressure"]["score"].as_f64().unwrap();
    assert!(score >= 1.0 + weight, "{s:#}");
    assert_eq!(
        h.sims.tts.stats().faulted_sessions,
        1,
        "the drop is the cause"
    );
    hang_up(&mut c).await;
    eventually(
        PATIENCE,
        "no call recovering",
        async || status(&h).await,
        |s| s["pressure"]["components"]["recovering"] == 0,
    )
    .await;
    h.assert_all_closed().await;
    h.stop().await;
}
