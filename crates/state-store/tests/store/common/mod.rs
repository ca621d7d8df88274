//! Shared fixtures: a throwaway cluster per test, a migrated store, a raw
//! client for lock games, and deadline-bounded polling.
#![allow(dead_code)] // each test binary uses a different subset
#![allow(clippy::unwrap_used)] // fixtures: a failed setup should panic the test

use std::future::Future;
use std::time::{Duration, SystemTime};

use state_store::*;

/// Generous: real sockets on a shared 2-core machine.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// Field order matters: the store's pool drops before the cluster stops.
pub struct Env {
    pub store: Store,
    pub pg: LocalPostgres,
}

pub fn start_pg() -> LocalPostgres {
    LocalPostgres::start(LocalOptions {
        max_connections: 50,
        ..LocalOptions::default()
    })
    .unwrap()
}

pub async fn env_with(tweak: impl FnOnce(&mut StoreConfig)) -> Env {
    let pg = start_pg();
    let mut cfg = pg.store_config("test-a");
    tweak(&mut cfg);
    let store = Store::connect(cfg).await.unwrap();
    store.migrate().await.unwrap();
    Env { store, pg }
}

pub async fn env() -> Env {
    env_with(|_| {}).await
}

pub fn new_call(admitted_at: SystemTime) -> NewCall {
    NewCall {
        call_id: CallId::new_random(),
        ingress: "twilio".into(),
        carrier_call_id: Some("CA123".into()),
        partner_id: None,
        admitted_at,
        admission_wait: Duration::from_millis(12),
        stats: serde_json::json!({}),
    }
}

pub async fn open(store: &Store) -> (CallId, OwnerEpoch) {
    let call = new_call(SystemTime::now());
    let id = call.call_id;
    let epoch = store.open_call(call).await.unwrap();
    (id, epoch)
}

pub fn turn(call: CallId, epoch: OwnerEpoch, seq: u32) -> Write {
    let at = SystemTime::now();
    Write::Turn {
        call,
        epoch,
        seq,
        speaker: if seq.is_multiple_of(2) {
            Speaker::Caller
        } else {
            Speaker::Bot
        },
        text: format!("turn {seq}"),
        started_at: at,
        ended_at: at,
        interrupted: false,
        latency: None,
    }
}

/// A plain connection outside the store's pool.
pub async fn raw(pg: &LocalPostgres) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&pg.conninfo(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

/// Opens a transaction on `client` holding an ACCESS EXCLUSIVE lock on
/// `table` until `COMMIT`/`ROLLBACK` is sent.
pub async fn lock_table(client: &tokio_postgres::Client, table: &str) {
    client
        .batch_execute(&format!(
            "BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"
        ))
        .await
        .unwrap();
}

/// Backends currently waiting on a heavyweight lock.
pub async fn lock_waiters(client: &tokio_postgres::Client) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// Polls `cond` until it holds; panics after `PATIENCE`.
pub async fn eventually<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !cond().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
