//! A cluster frozen with SIGSTOP (postmaster and every backend) hangs
//! instead of refusing: open connections and new ones alike. A setup that
//! gives up on `open_call` while its statement sits in a frozen backend
//! must not leave a receipt behind once the backend runs again.
#![allow(clippy::unwrap_used)] // tests may unwrap: a failure is the assertion

use crate::common;

use std::time::{Duration, SystemTime};

/// How long a statement is given while Postgres is frozen: it cannot answer.
const GIVE_UP: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_cluster_answers_nothing_until_the_guard_goes() {
    let env = common::env().await;
    let (call, _) = common::open(&env.store).await; // a pooled connection exists
    let frozen = env.pg.freeze().unwrap();
    assert!(frozen.pids().len() > 1, "backends too: {:?}", frozen.pids());
    let pooled = tokio::time::timeout(GIVE_UP, env.store.ledger(call)).await;
    assert!(pooled.is_err(), "an open connection answered: {pooled:?}");
    let fresh = tokio::time::timeout(
        GIVE_UP,
        tokio_postgres::connect(&env.pg.conninfo(), tokio_postgres::NoTls),
    )
    .await;
    assert!(fresh.is_err(), "a new connection was accepted");
    drop(frozen); // no `thaw`: the guard continues every process
    let row = tokio::time::timeout(common::PATIENCE, env.store.ledger(call))
        .await
        .expect("Postgres answers again once the guard is dropped")
        .unwrap();
    assert!(row.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_call_given_up_during_a_freeze_leaves_no_receipt() {
    let env = common::env().await;
    common::open(&env.store).await; // the next checkout reuses this connection
    let call = common::new_call(SystemTime::now());
    let id = call.call_id;

    let frozen = env.pg.freeze().unwrap();
    let given_up = tokio::time::timeout(GIVE_UP, env.store.open_call(call)).await;
    assert!(given_up.is_err(), "open_call returned while frozen");
    frozen.thaw().unwrap();

    // The abandoned statement runs once its backend continues; wait until
    // that backend has gone (its connection was discarded), so whatever it
    // was going to commit has been committed.
    let observer = common::raw(&env.pg).await;
    let pooled = env.store.pool_status().size as i64;
    common::eventually("the abandoned connection's backend ended", || async {
        store_backends(&observer).await == pooled
    })
    .await;
    assert_eq!(
        env.store.ledger(id).await.unwrap(),
        None,
        "a receipt nobody will close"
    );
    assert_eq!(env.store.open_ledger_sessions("test-a").await.unwrap(), 1);
    // The call can still be opened afterwards (a retry is not refused).
    let again = common::new_call(SystemTime::now());
    env.store.open_call(again).await.unwrap();
}

/// Client backends the store opened (its `application_name`).
async fn store_backends(client: &tokio_postgres::Client) -> i64 {
    let sql = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'callgate:test-a'";
    client.query_one(sql, &[]).await.unwrap().get(0)
}
