//! The migration runner: idempotent, checksummed, safe to race.

mod common;

use state_store::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_run_is_a_no_op() {
    let pg = common::start_pg();
    let store = Store::connect(pg.store_config("m")).await.unwrap();
    let first = store.migrate().await.unwrap();
    assert_eq!(first, vec!["0001_init".to_owned()]);
    let second = store.migrate().await.unwrap();
    assert!(second.is_empty(), "second run applied {second:?}");
    // The schema is really there.
    assert_eq!(store.open_ledger_sessions("m").await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_migration_is_refused() {
    let env = common::env().await;
    let raw = common::raw(&env.pg).await;
    raw.execute(
        "UPDATE schema_migrations SET checksum = 'deadbeef' WHERE version = 1",
        &[],
    )
    .await
    .unwrap();
    let err = env.store.migrate().await.unwrap_err();
    match &err {
        StoreError::MigrationChanged {
            version,
            name,
            recorded,
            embedded,
        } => {
            assert_eq!(*version, 1);
            assert_eq!(name, "0001_init");
            assert_eq!(recorded, "deadbeef");
            assert_eq!(embedded.len(), 64);
        }
        other => panic!("expected MigrationChanged, got {other:?}"),
    }
    assert!(!err.is_retryable());
    assert_eq!(err.source_kind(), ErrorSource::Internal);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_instances_apply_each_migration_once() {
    let pg = common::start_pg();
    let a = Store::connect(pg.store_config("a")).await.unwrap();
    let b = Store::connect(pg.store_config("b")).await.unwrap();
    let (ra, rb) = tokio::join!(a.migrate(), b.migrate());
    let mut applied = ra.unwrap();
    applied.extend(rb.unwrap());
    assert_eq!(applied, vec!["0001_init".to_owned()]);
    let raw = common::raw(&pg).await;
    let n: i64 = raw
        .query_one("SELECT count(*) FROM schema_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}
