//! Reconciliation receipts on a real Postgres: written, read back per
//! instance, refused without a divergence; and the two reads that name the
//! sessions a ledger/runtime divergence affects.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use crate::common;

use std::time::{Duration, SystemTime};

use state_store::*;

fn receipt(instance: &str, calls: Vec<CallId>) -> NewReconciliation {
    let now = SystemTime::now();
    NewReconciliation {
        instance: instance.into(),
        direction: "false_capacity_or_lost_ownership".into(),
        source_of_truth: "ledger".into(),
        sessions: 2,
        ledger_open: Some(5),
        runtime_active: Some(3),
        routing_reported: None,
        affected_calls: calls,
        correction: "none: reported".into(),
        suspected_cause: "rows left by a crash".into(),
        diverged_since: now - Duration::from_secs(12),
        recorded_at: now,
    }
}

/// Postgres keeps microseconds.
fn close_to(a: SystemTime, b: SystemTime) -> bool {
    let d = a.duration_since(b).unwrap_or_else(|e| e.duration());
    d < Duration::from_millis(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receipts_round_trip_per_instance() {
    let env = common::env().await;
    let store = &env.store;
    assert!(
        store
            .reconciliation_receipts("test-a")
            .await
            .unwrap()
            .is_empty()
    );

    let calls = vec![CallId::new_random(), CallId::new_random()];
    let want = receipt("test-a", calls.clone());
    let id = store.record_reconciliation(&want).await.unwrap();
    let other = store
        .record_reconciliation(&receipt("test-b", vec![]))
        .await
        .unwrap();
    assert_ne!(id, other);

    let got = store.reconciliation_receipts("test-a").await.unwrap();
    assert_eq!(got.len(), 1, "only this instance's receipts: {got:?}");
    assert_eq!(got[0].id, id);
    let r = &got[0].receipt;
    assert_eq!(
        (r.direction.as_str(), r.source_of_truth.as_str(), r.sessions),
        ("false_capacity_or_lost_ownership", "ledger", 2)
    );
    assert_eq!(
        (r.ledger_open, r.runtime_active, r.routing_reported),
        (Some(5), Some(3), None)
    );
    assert_eq!(r.affected_calls, calls);
    assert_eq!(r.correction, "none: reported");
    assert!(close_to(r.diverged_since, want.diverged_since));
    assert!(close_to(r.recorded_at, want.recorded_at));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receipt_without_a_divergence_is_refused() {
    let env = common::env().await;
    let mut r = receipt("test-a", vec![]);
    r.sessions = 0;
    let err = env.store.record_reconciliation(&r).await.unwrap_err();
    assert!(matches!(err, StoreError::UnexpectedResult { .. }), "{err}");
    assert!(
        env.store
            .reconciliation_receipts("test-a")
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_rows_and_live_calls_are_compared_in_sql() {
    let env = common::env().await;
    let store = &env.store;
    let (a, _) = common::open(store).await;
    let (b, _) = common::open(store).await;
    let (closed, epoch) = common::open(store).await;
    store
        .apply(&Write::Close {
            call: closed,
            epoch,
            end_reason: "caller_hangup".into(),
            cleanup_status: CleanupStatus::Completed,
            cleanup_completed_at: SystemTime::now(),
            stats: serde_json::json!({}),
        })
        .await
        .unwrap();
    assert_eq!(store.open_ledger_sessions("test-a").await.unwrap(), 2);
    let unknown = CallId::new_random();

    // Live: a (has a row), closed (its row is closed), unknown (no row).
    let live = [a, closed, unknown];
    assert_eq!(
        store.open_rows_not_in("test-a", &live).await.unwrap(),
        vec![b]
    );
    let mut without = vec![closed, unknown];
    without.sort();
    assert_eq!(
        store.calls_without_open_row("test-a", &live).await.unwrap(),
        without
    );
    // Another instance's name owns none of these rows.
    assert!(
        store
            .open_rows_not_in("test-b", &live)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.calls_without_open_row("test-b", &[a]).await.unwrap(),
        vec![a]
    );
    // Nothing live: every open row is unaccounted for.
    let mut open = vec![a, b];
    open.sort();
    assert_eq!(store.open_rows_not_in("test-a", &[]).await.unwrap(), open);
}
