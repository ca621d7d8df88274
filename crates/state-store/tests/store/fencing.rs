//! A stale owner's writes are refused by Postgres and counted, not retried.

use crate::common;

use std::time::SystemTime;

use serde_json::json;
use state_store::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_epoch_writes_are_fenced() {
    let env = common::env().await;
    let (call, old) = common::open(&env.store).await;
    // Another instance takes the call over (reconnect / hand-off).
    let other = Store::connect(env.pg.store_config("test-b")).await.unwrap();
    let new = other.take_over(call).await.unwrap();
    assert!(new > old);

    let direct = env.store.apply(&common::turn(call, old, 0)).await.unwrap();
    assert_eq!(direct, WriteOutcome::Fenced { current: new });

    let (writes, writers) = WriteBehind::start(&env.store, WriteBehindConfig::default());
    writes.submit(common::turn(call, old, 1)).unwrap();
    writes.submit(common::turn(call, new, 2)).unwrap();
    writes
        .submit(Write::Close {
            call,
            epoch: old,
            end_reason: "stale".into(),
            cleanup_status: CleanupStatus::Failed,
            cleanup_completed_at: SystemTime::now(),
            stats: json!({}),
        })
        .unwrap();
    let report = writers.drain(common::PATIENCE).await;
    assert!(report.completed);
    assert_eq!(report.stats.fenced, 2);
    assert_eq!(report.stats.applied, 1);
    assert_eq!(report.stats.lost, 0, "fenced writes are not losses");

    let seqs: Vec<u32> = env
        .store
        .turns(call)
        .await
        .unwrap()
        .iter()
        .map(|t| t.seq)
        .collect();
    assert_eq!(seqs, vec![2]);
    let ledger = env.store.ledger(call).await.unwrap().unwrap();
    assert_eq!(ledger.owner_instance, "test-b");
    assert_eq!(ledger.owner_epoch, new);
    assert_eq!(
        ledger.cleanup_status,
        CleanupStatus::Pending,
        "stale close refused"
    );
    assert_eq!(env.store.open_ledger_sessions("test-a").await.unwrap(), 0);
    assert_eq!(env.store.open_ledger_sessions("test-b").await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_for_unknown_calls_are_refused() {
    let env = common::env().await;
    let ghost = CallId::new_random();
    let outcome = env
        .store
        .apply(&common::turn(ghost, OwnerEpoch::FIRST, 0))
        .await
        .unwrap();
    assert_eq!(outcome, WriteOutcome::UnknownCall);
    let err = env.store.take_over(ghost).await.unwrap_err();
    assert!(matches!(err, StoreError::UnknownCall { call } if call == ghost));
}
