//! The 200-call lunch spike at reduced scale: one gate says no early and
//! loudly, every refused caller hears the overflow prompt, nobody hears
//! silence, and everything is released afterwards.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use std::time::{Duration, Instant};

use callgate::config::MaxCalls;
use callgate_load::{Arrival, LoadReport, Outcome};
use callgate_sim::SimConfig;
use callgate_tests::{Harness, load};

/// Simulators whose caps make the smallest ceiling 20 (STT); TTS 25,
/// dialog 30, database 8 connections × 5 calls = 40.
fn capped() -> SimConfig {
    let mut sim = SimConfig::default();
    sim.stt.max_sessions = 20;
    sim.tts.max_sockets = 25;
    sim.dialog.max_streams = 30;
    sim
}

fn ceilings(c: &mut callgate::config::Config) {
    c.stt.max_sessions = 20;
    c.tts.max_sessions = 25;
    c.dialog.max_streams = 30;
    c.database.pool_size = 8;
    c.database.calls_per_connection = 5;
}

async fn spike(h: &Harness, calls: usize, utterances: usize) -> LoadReport {
    let mut cfg = load(h, calls, utterances);
    cfg.arrival = Arrival::Rate { per_second: 100.0 };
    callgate_load::run(cfg).await
}

/// Every call was served (a reply after every utterance) or refused through
/// the overflow path with its prompt heard; none went silent or failed.
fn assert_no_silence(report: &LoadReport, utterances: usize) {
    let s = &report.summary;
    assert_eq!(
        (s.silent, s.failed),
        (0, 0),
        "{:#?}",
        report
            .calls
            .iter()
            .filter(|c| c.outcome.is_failure())
            .collect::<Vec<_>>()
    );
    for c in &report.calls {
        match &c.outcome {
            Outcome::Completed => assert_eq!(c.replies_heard, utterances, "{c:#?}"),
            Outcome::Rejected {
                how, prompt_heard, ..
            } => {
                assert_eq!(how, "overflow_mark", "{c:#?}");
                assert!(prompt_heard, "{c:#?}");
            }
            other => panic!("unexpected outcome {other:?}: {c:#?}"),
        }
        assert!(
            c.max_send_lag_ms < 500,
            "the load generator fell behind; the run is not valid: {c:#?}"
        );
    }
}

/// The operator's view: gauges, the admission-wait histogram and the
/// rejections by reason, in Prometheus text.
async fn assert_metrics(h: &Harness, rejected: usize) {
    callgate::ensure_tls_provider();
    let url = format!("http://{}/metrics", h.server.addr);
    let text = reqwest::get(url).await.unwrap().text().await.unwrap();
    for name in [
        "callgate_calls_active ",
        "callgate_admission_queued ",
        "callgate_admission_capacity 18",
        "callgate_admission_wait_seconds_bucket",
        "callgate_call_setup_seconds_bucket",
        "callgate_reply_latency_seconds_bucket",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics:\n{text}");
    }
    let by_reason: f64 = text
        .lines()
        .filter(|l| l.starts_with("callgate_admission_rejections_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(
        by_reason as usize, rejected,
        "rejections by reason add up:\n{text}"
    );
}

async fn assert_released(h: &Harness) {
    h.assert_all_closed().await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let pool = h.server.app.call.store.pool_status();
        if pool.waiting == 0 && pool.size == pool.available {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "pool connections still in use: {pool:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let snap = h.server.app.call.gate.snapshot();
    assert_eq!((snap.active, snap.queued), (0, 0), "{snap:?}");
    assert_eq!(snap.admitted_total, snap.released_total);
}

async fn recorded_rejections(h: &Harness, want: usize) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let n: i64 =
            h.db.query_one("SELECT count(*) FROM admission_rejections", &[])
                .await
                .unwrap()
                .get(0);
        if n as usize >= want || Instant::now() > deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_calls_on_a_gate_of_twenty_nobody_hears_silence() {
    let h = Harness::start(capped(), ceilings).await;
    let snap = h.server.app.call.gate.snapshot();
    assert_eq!(
        (snap.capacity, snap.decided_by.to_string().as_str()),
        (18, "stt"),
        "20 − headroom 2, decided by STT"
    );

    let report = spike(&h, 200, 2).await;
    assert_no_silence(&report, 2);
    let s = &report.summary;
    assert!(s.completed >= 18, "at least a gate's worth served: {s:?}");
    assert_eq!(s.completed + s.rejected, 200);
    for c in &report.calls {
        if let Outcome::Rejected {
            reason,
            time_to_rejection_ms,
            ..
        } = &c.outcome
        {
            assert!(
                reason == "queue_full" || reason == "queue_timeout",
                "{c:#?}"
            );
            assert!(
                *time_to_rejection_ms <= 5_000,
                "refused within the 4 s admission timeout + 1 s: {c:#?}"
            );
        }
    }
    assert_eq!(
        h.sims.stt.stats().rejected_sessions,
        0,
        "the gate said no before the provider had to"
    );
    assert_metrics(&h, s.rejected).await;
    assert_eq!(
        recorded_rejections(&h, s.rejected).await as usize,
        s.rejected,
        "every refusal has a row"
    );
    assert_released(&h).await;
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_above_a_real_ceiling_the_resource_is_named_and_nobody_hears_silence() {
    let h = Harness::start(capped(), |c| {
        ceilings(c);
        c.admission.max_concurrent_calls = MaxCalls::Pinned(100);
    })
    .await;
    let report = spike(&h, 200, 2).await;
    assert_no_silence(&report, 2);
    let mut setup_failed = 0;
    for c in &report.calls {
        if let Outcome::Rejected { reason, .. } = &c.outcome {
            let ok = [
                "queue_full",
                "queue_timeout",
                "setup_failed:stt",
                "setup_failed:tts",
                "setup_failed:dialog",
            ];
            assert!(ok.contains(&reason.as_str()), "{c:#?}");
            if reason.starts_with("setup_failed:") {
                setup_failed += 1;
                let ledger = h.closed_ledger(&c.call_sid.to_string()).await;
                assert_eq!(ledger.end_reason.as_deref(), Some(reason.as_str()));
            }
        }
    }
    assert!(
        setup_failed > 0,
        "calls beyond the real ceiling fail setup, by name"
    );
    assert!(
        h.sims.stt.stats().rejected_sessions > 0,
        "the provider's own cap was hit: the deadline path was exercised"
    );
    assert_released(&h).await;
    h.stop().await;
}
