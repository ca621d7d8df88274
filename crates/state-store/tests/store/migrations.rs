//! The migration runner: idempotent, checksummed, safe to race.

use crate::common;

use sha2::Digest as _;
use state_store::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_run_is_a_no_op() {
    let pg = common::start_pg();
    let store = Store::connect(pg.store_config("m")).await.unwrap();
    let first = store.migrate().await.unwrap();
    assert_eq!(
        first,
        [
            "0001_init",
            "0002_partner",
            "0003_reconcile",
            "0004_instance_events",
            "0005_instance_heartbeats",
            "0006_carrier_call_lookup",
            "0007_refusal_lookup",
            "0008_turn_latency",
            "0009_carrier_end"
        ]
    );
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
    applied.sort();
    assert_eq!(
        applied,
        [
            "0001_init",
            "0002_partner",
            "0003_reconcile",
            "0004_instance_events",
            "0005_instance_heartbeats",
            "0006_carrier_call_lookup",
            "0007_refusal_lookup",
            "0008_turn_latency",
            "0009_carrier_end"
        ]
    );
    let raw = common::raw(&pg).await;
    let n: i64 = raw
        .query_one("SELECT count(*) FROM schema_migrations", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 9);
}

/// A database at version 1 with calls in it (the state before this build):
/// only 0002 runs, and the old rows read back without a partner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_database_with_calls_upgrades_in_place() {
    let pg = common::start_pg();
    let raw = common::raw(&pg).await;
    let v1 = include_str!("../../../../migrations/0001_init.sql");
    raw.batch_execute(v1).await.unwrap();
    let digest = sha2::Sha256::digest(v1.as_bytes());
    let checksum: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    raw.batch_execute(
        "CREATE TABLE schema_migrations (
            version     integer     PRIMARY KEY,
            name        text        NOT NULL,
            checksum    text        NOT NULL,
            applied_at  timestamptz NOT NULL DEFAULT now()
        )",
    )
    .await
    .unwrap();
    raw.execute(
        "INSERT INTO schema_migrations (version, name, checksum) VALUES (1, '0001_init', $1)",
        &[&checksum],
    )
    .await
    .unwrap();
    let old = CallId::new_random();
    raw.execute(
        "INSERT INTO call_ledger (call_id, owner_instance, ingress, admitted_at, admission_wait_ms)          VALUES ($1, 'm', 'twilio', now(), 0)",
        &[&old.0],
    )
    .await
    .unwrap();

    let store = Store::connect(pg.store_config("m")).await.unwrap();
    assert_eq!(
        store.migrate().await.unwrap(),
        [
            "0002_partner",
            "0003_reconcile",
            "0004_instance_events",
            "0005_instance_heartbeats",
            "0006_carrier_call_lookup",
            "0007_refusal_lookup",
            "0008_turn_latency",
            "0009_carrier_end"
        ]
    );
    let row = store
        .ledger(old)
        .await
        .unwrap()
        .expect("the old call survives");
    assert_eq!(row.partner_id, None);
    assert_eq!(store.open_ledger_sessions("m").await.unwrap(), 1);
    assert!(store.migrate().await.unwrap().is_empty());
}
